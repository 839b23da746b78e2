//! Plain text for language modelling: every non-blank line a document, tokenized, joined into
//! one stream with the end-of-text token between documents, and packed into examples of `seq`
//! tokens, each position labelled with the token after it.

use std::path::Path;

use fblayout_hf::tokenizer::{EncodeOptions, Padding, Tokenizer};

use super::{DataError, Example, IGNORED, read_lines};

/// A non-blank line of a text file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TextLine {
    /// Its number in the file, from 1.
    pub line: usize,
    /// Its text.
    pub text: String,
}

/// The non-blank lines of `file`; an error if it has none, or a line is not UTF-8.
pub fn read_text(file: &Path) -> Result<Vec<TextLine>, DataError> {
    let lines: Vec<TextLine> = read_lines(file)?
        .into_iter()
        .filter(|(_, text)| !text.trim().is_empty())
        .map(|(line, text)| TextLine { line, text })
        .collect();
    if lines.is_empty() {
        return Err(DataError::Empty {
            file: file.to_owned(),
            detail: "no line has any text".into(),
        });
    }
    Ok(lines)
}

/// The token stream of `lines` (from `file`) under `tokenizer`, untruncated: each line's ids,
/// `separator` after each line where given (`pad` only fills rows while encoding).
pub fn tokenize(
    file: &Path,
    lines: &[TextLine],
    tokenizer: &Tokenizer,
    separator: Option<u32>,
    pad: u32,
) -> Result<Vec<u32>, DataError> {
    let mut tokenizer = tokenizer.clone();
    let failed = |source| DataError::Tokenizer {
        file: file.to_owned(),
        source,
    };
    tokenizer
        .set_options(EncodeOptions {
            max_length: None,
            padding: Padding::Longest,
            pad_id: Some(pad),
        })
        .map_err(failed)?;
    let mut stream = Vec::new();
    for chunk in lines.chunks(256) {
        let batch = tokenizer
            .encode_batch(chunk.iter().map(|l| l.text.as_str()))
            .map_err(failed)?;
        for (ids, &len) in batch.input_ids.iter().zip(&batch.lengths) {
            stream.extend_from_slice(&ids[..len]);
            stream.extend(separator);
        }
    }
    Ok(stream)
}

/// Packs a token stream into examples of `seq` tokens: example `k` reads tokens
/// `k·seq .. (k+1)·seq` and labels each with the token after it in the stream; the last
/// example is filled with `pad` ids labelled [`IGNORED`]. A stream of `n` tokens gives
/// `⌈(n − 1) / seq⌉` examples (none where `n < 2`: nothing to predict).
pub fn pack(stream: &[u32], seq: usize, pad: u32) -> Vec<Example> {
    let seq = seq.max(1);
    let predicted = stream.len().saturating_sub(1);
    (0..predicted.div_ceil(seq))
        .map(|k| {
            let start = k * seq;
            let ids = (start..start + seq)
                .map(|i| if i < predicted { stream[i] } else { pad })
                .collect();
            let labels = (start..start + seq)
                .map(|i| {
                    if i < predicted {
                        stream[i + 1]
                    } else {
                        IGNORED
                    }
                })
                .collect();
            Example { ids, labels }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const X: u32 = IGNORED;

    #[test]
    fn packing_labels_each_token_with_the_next_and_pads_the_last_example() {
        // Stream 10 11 12 13 14 15 16 at seq 3: tokens 0..6 are read (6 predict a successor),
        // in two examples, and the third would read token 6 alone, which predicts nothing.
        let got = pack(&[10, 11, 12, 13, 14, 15, 16], 3, 0);
        assert_eq!(
            got,
            [
                Example {
                    ids: vec![10, 11, 12],
                    labels: vec![11, 12, 13]
                },
                Example {
                    ids: vec![13, 14, 15],
                    labels: vec![14, 15, 16]
                },
            ]
        );
        // Eight tokens: a third example reads token 6 and pads with 9.
        let got = pack(&[10, 11, 12, 13, 14, 15, 16, 17], 3, 9);
        assert_eq!(
            got[2],
            Example {
                ids: vec![16, 9, 9],
                labels: vec![17, X, X]
            }
        );
        assert!(pack(&[5], 3, 0).is_empty());
    }

    #[test]
    fn blank_lines_are_skipped_and_a_file_of_blanks_is_empty() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("t.txt");
        std::fs::write(&file, "a b\n\n  \nc\n").unwrap();
        let lines = read_text(&file).unwrap();
        assert_eq!(
            lines,
            [
                TextLine {
                    line: 1,
                    text: "a b".into()
                },
                TextLine {
                    line: 4,
                    text: "c".into()
                }
            ]
        );
        std::fs::write(&file, "\n \n").unwrap();
        let e = read_text(&file).unwrap_err();
        assert!(matches!(e, DataError::Empty { .. }), "{e}");
        assert!(e.to_string().contains("t.txt"), "{e}");
    }
}
