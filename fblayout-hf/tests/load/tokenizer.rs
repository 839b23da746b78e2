//! The tiny fixtures' tokenizers give the ids their parity fixtures were made with; options
//! and their errors.

use fblayout_hf::tokenizer::{EncodeOptions, Padding, TextInput, Tokenizer, TokenizerError};

use crate::common::{fixture_json, hf, i64_rows, model_dir};

fn tokenizer(arch: &str) -> Tokenizer {
    Tokenizer::from_file(model_dir(arch).join("tokenizer.json")).unwrap()
}

fn options(max_length: Option<usize>, padding: Padding, pad_id: Option<u32>) -> EncodeOptions {
    EncodeOptions {
        max_length,
        padding,
        pad_id,
    }
}

#[test]
fn fixture_batches_encode_to_the_committed_ids() {
    // fixture.json: "truncation to 10 / 12 tokens, padding to the longest row"; pad ids from
    // each model's config (bert [PAD] 0, gpt2 <|endoftext|> 0, llama <pad> 2).
    for (arch, max_length, pad_id) in [("bert", 10, 0), ("gpt2", 12, 0), ("llama", 12, 2)] {
        let json = fixture_json(&hf(arch));
        let texts = json["batch"]["text"].as_array().unwrap();
        let inputs: Vec<TextInput<'_>> = texts
            .iter()
            .map(|t| match t.as_array() {
                Some(pair) => TextInput::Pair(pair[0].as_str().unwrap(), pair[1].as_str().unwrap()),
                None => TextInput::Single(t.as_str().unwrap()),
            })
            .collect();
        let mut tok = tokenizer(arch);
        tok.set_options(options(Some(max_length), Padding::Longest, Some(pad_id)))
            .unwrap();
        let batch = tok.encode_batch(inputs).unwrap();
        let full = hf(arch).join("full.safetensors");
        assert_eq!(batch.input_ids, i64_rows(&full, "input_ids"), "{arch}");
        assert_eq!(
            batch.attention_mask,
            i64_rows(&full, "attention_mask"),
            "{arch}"
        );
        let lengths: Vec<usize> = serde_json::from_value(json["batch"]["lengths"].clone()).unwrap();
        assert_eq!(batch.lengths, lengths, "{arch}");
        if arch == "bert" {
            assert_eq!(batch.token_type_ids, i64_rows(&full, "token_type_ids"));
        } else {
            assert!(batch.token_type_ids.iter().flatten().all(|&t| t == 0));
        }
        // The tokens, as fixture.json lists them.
        let tokens: Vec<Vec<String>> =
            serde_json::from_value(json["batch"]["tokens"].clone()).unwrap();
        for (row, ids) in tokens.iter().zip(&batch.input_ids) {
            let ours: Vec<String> = ids.iter().map(|&id| tok.id_to_token(id).unwrap()).collect();
            assert_eq!(&ours, row, "{arch}");
        }
    }
}

#[test]
fn ids_are_stable() {
    // Pinned, beyond the fixture batches: a word split into pieces, accents (BERT's normalizer
    // strips them, byte-level BPE splits their UTF-8 bytes), an unknown token (digits aren't
    // in the BERT vocabulary), padding with id 0.
    let expected: [(&str, [&[u32]; 2]); 3] = [
        (
            "bert",
            [
                &[2, 105, 67, 59, 69, 92, 10, 22, 60, 57, 51, 3],
                &[2, 19, 64, 51, 17, 47, 52, 51, 5, 1, 3, 0],
            ],
        ),
        (
            "gpt2",
            [
                &[36, 79, 87, 78, 267, 221, 313, 316, 13, 40, 79, 284, 0, 0],
                &[
                    128, 103, 84, 128, 103, 280, 65, 70, 128, 103, 1, 221, 20, 18,
                ],
            ],
        ),
        (
            "llama",
            [
                &[0, 38, 81, 89, 80, 269, 223, 315, 318, 15, 42, 81, 286, 0, 0],
                &[
                    0, 130, 105, 86, 130, 105, 282, 67, 72, 130, 105, 3, 223, 22, 20,
                ],
            ],
        ),
    ];
    for (arch, rows) in expected {
        let mut tok = tokenizer(arch);
        tok.set_options(options(None, Padding::Longest, Some(0)))
            .unwrap();
        let batch = tok
            .encode_batch(["Down the Rabbit-Hole", "\u{e9}t\u{e9} caf\u{e9}! 42"])
            .unwrap();
        assert_eq!(batch.input_ids, rows.map(<[u32]>::to_vec), "{arch}");
        assert_eq!(tok.vocab_size(), if arch == "bert" { 160 } else { 320 });
    }
    let bert = tokenizer("bert");
    let pieces: Vec<String> = [105, 67, 59].map(|id| bert.id_to_token(id).unwrap()).into();
    assert_eq!(pieces, ["do", "##w", "##n"]);
    assert_eq!(bert.token_to_id("[UNK]"), Some(1));
}

#[test]
fn fixed_padding() {
    let mut tok = tokenizer("bert");
    tok.set_options(options(Some(12), Padding::Fixed(16), Some(0)))
        .unwrap();
    let batch = tok
        .encode_batch([
            "Oh dear!",
            "Alice was beginning to get very tired of sitting by her sister",
        ])
        .unwrap();
    assert_eq!(batch.seq_len(), 16);
    assert_eq!(batch.lengths, [5, 12]);
    assert_eq!(
        batch.attention_mask[0],
        [[1; 5].as_slice(), &[0; 11]].concat()
    );
    assert_eq!(&batch.input_ids[0][5..], &[0; 11]);
    assert_eq!(tok.encode_batch(Vec::<&str>::new()).unwrap().rows(), 0);

    // Without truncation a row can outgrow the padding.
    tok.set_options(options(None, Padding::Fixed(4), Some(0)))
        .unwrap();
    let err = tok.encode_batch(["Oh dear!", "Oh"]).unwrap_err();
    assert!(
        matches!(
            err,
            TokenizerError::RowTooLong {
                row: 0,
                len: 5,
                fixed: 4,
                ..
            }
        ),
        "{err:?}"
    );
}

#[test]
fn bad_options_are_typed_errors() {
    let mut tok = tokenizer("bert");
    let err = tok
        .set_options(options(Some(32), Padding::Fixed(16), None))
        .unwrap_err();
    assert!(
        matches!(err, TokenizerError::PaddingBelowMaxLength { .. }),
        "{err:?}"
    );
    let err = tok
        .set_options(options(Some(2), Padding::Longest, None))
        .unwrap_err();
    assert!(
        matches!(
            err,
            TokenizerError::MaxLengthTooShort {
                special: 2,
                pair: false,
                ..
            }
        ),
        "{err:?}"
    );
    // Room for a text but not for a pair ([CLS] A [SEP] B [SEP]).
    tok.set_options(options(Some(3), Padding::Longest, Some(0)))
        .unwrap();
    let err = tok.encode_batch([("a", "b")]).unwrap_err();
    assert!(
        matches!(
            err,
            TokenizerError::MaxLengthTooShort {
                special: 3,
                pair: true,
                ..
            }
        ),
        "{err:?}"
    );
    let err = tok
        .set_options(options(None, Padding::Longest, Some(160)))
        .unwrap_err();
    assert!(
        matches!(
            err,
            TokenizerError::PadIdOutOfRange {
                pad_id: 160,
                vocab_size: 160,
                ..
            }
        ),
        "{err:?}"
    );
    assert!(err.to_string().contains("tokenizer.json"), "{err}");
    // A rejected option leaves the previous ones.
    assert_eq!(tok.options().max_length, Some(3));
}

#[test]
fn padding_needs_a_pad_id() {
    // The GPT-2 fixture's file has no padding section, and none is given.
    let tok = tokenizer("gpt2");
    assert_eq!(tok.options().pad_id, None);
    let err = tok.encode_batch(["Alice was", "Oh"]).unwrap_err();
    assert!(matches!(err, TokenizerError::NoPadId { .. }), "{err:?}");
    assert!(err.to_string().contains("EncodeOptions::pad_id"), "{err}");
    // Rows of one length need none.
    let batch = tok.encode_batch(["Alice"]).unwrap();
    assert_eq!(batch.attention_mask, [vec![1; batch.lengths[0]]]);
}

#[test]
fn unreadable_files() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tokenizer.json");
    std::fs::write(
        &path,
        r#"{"version": "1.0", "model": {"type": "NoSuchModel"}}"#,
    )
    .unwrap();
    let err = Tokenizer::from_file(&path).unwrap_err();
    assert!(matches!(err, TokenizerError::Parse { .. }), "{err:?}");
    assert!(
        err.to_string().contains(&path.display().to_string()),
        "{err}"
    );
    let err = Tokenizer::from_file(dir.path().join("none.json")).unwrap_err();
    assert!(matches!(err, TokenizerError::Io { .. }), "{err:?}");
}
