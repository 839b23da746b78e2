//! Fine-tuning data: files read and checked ([`text`], [`classify`]), tokenized into fixed-length
//! examples, split into training and held-out sets, and drawn in batches in a seeded order
//! ([`batches`]).
//!
//! Every problem with a file is a [`DataError`] naming the file, and the line where one is to
//! blame.

pub mod batches;
pub mod classify;
pub mod text;

use std::path::{Path, PathBuf};

use fblayout_hf::tokenizer::TokenizerError;

pub use batches::{Batches, DataPosition};
pub use classify::{ClassifyExample, read_classify};
pub use text::{TextLine, pack, read_text};

/// Labels that count for nothing in the loss (the cross-entropy's ignored index).
pub const IGNORED: u32 = u32::MAX;

/// One example, `seq` tokens long: the ids the model reads and, at each position, the label
/// it should predict ([`IGNORED`] at padding).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Example {
    /// Token ids.
    pub ids: Vec<u32>,
    /// The label at each position.
    pub labels: Vec<u32>,
}

/// Why a data file could not be used.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DataError {
    /// The file could not be read.
    #[error("{}: can't read it: {source}", file.display())]
    Io {
        /// The file.
        file: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// A line is not valid UTF-8.
    #[error("{}:{line}: not valid UTF-8 (byte {column} of the line)", file.display())]
    InvalidUtf8 {
        /// The file.
        file: PathBuf,
        /// The line, from 1.
        line: usize,
        /// The first bad byte's position in the line, from 1.
        column: usize,
    },
    /// The file holds no example (or, after tokenizing, no token).
    #[error("{}: the dataset is empty: {detail}", file.display())]
    Empty {
        /// The file.
        file: PathBuf,
        /// What was found.
        detail: String,
    },
    /// A record lacks a column the task needs.
    #[error("{}:{line}: no `{column}` column", file.display())]
    MissingColumn {
        /// The file.
        file: PathBuf,
        /// The line, from 1.
        line: usize,
        /// The column.
        column: &'static str,
    },
    /// A label is not one of the head's classes.
    #[error("{}:{line}: label `{label}` is not one of the {classes} classes (0..{classes}{names})", file.display())]
    Label {
        /// The file.
        file: PathBuf,
        /// The line, from 1.
        line: usize,
        /// The label as written.
        label: String,
        /// The number of classes.
        classes: usize,
        /// The classes' names, where known (`, or ...`).
        names: String,
    },
    /// A record is not valid JSON or CSV.
    #[error("{}:{line}: {detail}", file.display())]
    Syntax {
        /// The file.
        file: PathBuf,
        /// The line, from 1.
        line: usize,
        /// What the parser said.
        detail: String,
    },
    /// The tokenizer failed.
    #[error("{}: tokenizing: {source}", file.display())]
    Tokenizer {
        /// The data file.
        file: PathBuf,
        /// Why.
        source: TokenizerError,
    },
    /// The held-out fraction is not in `[0, 1)`, or leaves either set empty.
    #[error("{}: {detail}", file.display())]
    Split {
        /// The data file.
        file: PathBuf,
        /// What is wrong.
        detail: String,
    },
}

/// Reads `file` as lines of UTF-8 text: each line's number (from 1) and text, its line end
/// (`\n` or `\r\n`) removed. A line that is not UTF-8 is an error naming it.
pub(crate) fn read_lines(file: &Path) -> Result<Vec<(usize, String)>, DataError> {
    let bytes = std::fs::read(file).map_err(|source| DataError::Io {
        file: file.to_owned(),
        source,
    })?;
    let mut out = Vec::new();
    for (i, raw) in bytes.split(|&b| b == b'\n').enumerate() {
        let raw = raw.strip_suffix(b"\r").unwrap_or(raw);
        match std::str::from_utf8(raw) {
            Ok(text) => out.push((i + 1, text.to_owned())),
            Err(e) => {
                return Err(DataError::InvalidUtf8 {
                    file: file.to_owned(),
                    line: i + 1,
                    column: e.valid_up_to() + 1,
                });
            }
        }
    }
    if bytes.ends_with(b"\n") {
        out.pop();
    }
    Ok(out)
}

/// Splits `examples` into a training set and a held-out set of `fraction` of them, chosen by a
/// shuffle from `seed` (the rest keep their order). Both sets must be non-empty where
/// `fraction > 0`.
pub fn split<T>(
    file: &Path,
    examples: Vec<T>,
    fraction: f64,
    seed: u64,
) -> Result<(Vec<T>, Vec<T>), DataError> {
    let bad = |detail: String| DataError::Split {
        file: file.to_owned(),
        detail,
    };
    if !(0.0..1.0).contains(&fraction) {
        return Err(bad(format!(
            "the held-out fraction {fraction} is not in [0, 1)"
        )));
    }
    let n = examples.len();
    let held = (fraction * n as f64).round() as usize;
    if fraction > 0.0 && (held == 0 || held == n) {
        return Err(bad(format!(
            "a held-out fraction of {fraction} of {n} examples leaves a set empty"
        )));
    }
    let mut order: Vec<usize> = (0..n).collect();
    batches::shuffle(&mut order, seed, u64::MAX);
    let mut is_held = vec![false; n];
    for &i in &order[..held] {
        is_held[i] = true;
    }
    let (mut train, mut eval) = (Vec::new(), Vec::new());
    for (example, held) in examples.into_iter().zip(is_held) {
        if held {
            eval.push(example);
        } else {
            train.push(example);
        }
    }
    Ok((train, eval))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_report_the_first_invalid_utf8_by_line_and_byte() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("bad.txt");
        std::fs::write(&file, b"fine\r\nab\xffc\nlast").unwrap();
        match read_lines(&file) {
            Err(DataError::InvalidUtf8 { line, column, .. }) => assert_eq!((line, column), (2, 3)),
            other => panic!("{other:?}"),
        }
        std::fs::write(&file, b"one\r\ntwo\n").unwrap();
        assert_eq!(
            read_lines(&file).unwrap(),
            [(1, "one".to_owned()), (2, "two".to_owned())]
        );
        let e = read_lines(&dir.path().join("missing.txt")).unwrap_err();
        assert!(e.to_string().contains("missing.txt"), "{e}");
    }

    #[test]
    fn a_split_holds_out_the_rounded_fraction_and_keeps_every_example_once() {
        let file = Path::new("d.txt");
        let (train, eval) = split(file, (0..10).collect(), 0.25, 7).unwrap();
        // round(0.25 · 10) = 3 (2.5 rounds away from zero).
        assert_eq!(eval.len(), 3);
        let mut all: Vec<i32> = train.iter().chain(&eval).copied().collect();
        all.sort_unstable();
        assert_eq!(all, (0..10).collect::<Vec<_>>());
        assert!(train.windows(2).all(|w| w[0] < w[1]));
        assert_eq!(split(file, (0..10).collect(), 0.25, 7).unwrap().1, eval);
        assert!(split(file, vec![1], 0.3, 7).is_err());
        assert!(split(file, vec![1, 2], 1.0, 7).is_err());
        assert_eq!(
            split(file, vec![1, 2], 0.0, 7).unwrap(),
            (vec![1, 2], vec![])
        );
    }
}
