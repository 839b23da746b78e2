//! What can go wrong loading a `tokenizer.json` or encoding with it.

use std::path::PathBuf;

/// A tokenizer that can't be loaded, options it can't honour, or text it can't encode. Every
/// variant names the `tokenizer.json`.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TokenizerError {
    /// The file could not be read.
    #[error("{}: can't read the tokenizer: {source}", file.display())]
    Io {
        /// The file.
        file: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The file is not a tokenizer the `tokenizers` library can load (not JSON, or a model,
    /// normalizer, pre-tokenizer or post-processor it doesn't know).
    #[error("{}: not a tokenizer.json the tokenizers library can load: {source}", file.display())]
    Parse {
        /// The file.
        file: PathBuf,
        /// The library's error.
        source: tokenizers::Error,
    },
    /// The library failed to encode a row.
    #[error("{}: can't encode row {row}: {source}", file.display())]
    Encode {
        /// The file.
        file: PathBuf,
        /// The index of the row in the batch.
        row: usize,
        /// The library's error.
        source: tokenizers::Error,
    },
    /// `max_length` leaves no room for text beside the special tokens the post-processor adds.
    #[error(
        "{}: max_length {max_length} is too short: the tokenizer adds {special} special tokens to {}",
        file.display(),
        if *pair { "a pair of texts" } else { "a text" }
    )]
    MaxLengthTooShort {
        /// The file.
        file: PathBuf,
        /// The length asked for.
        max_length: usize,
        /// The special tokens added.
        special: usize,
        /// Whether for a pair of texts.
        pair: bool,
    },
    /// Fixed padding shorter than the truncation length, so rows could be longer than it.
    #[error(
        "{}: padding to {fixed} tokens but truncating at {max_length}: rows could be longer than the padding",
        file.display()
    )]
    PaddingBelowMaxLength {
        /// The file.
        file: PathBuf,
        /// The fixed length.
        fixed: usize,
        /// The truncation length.
        max_length: usize,
    },
    /// A row, after truncation, is longer than the fixed padding length.
    #[error(
        "{}: row {row} is {len} tokens, longer than the fixed padding of {fixed} (set max_length to truncate)",
        file.display()
    )]
    RowTooLong {
        /// The file.
        file: PathBuf,
        /// The row.
        row: usize,
        /// Its length.
        len: usize,
        /// The fixed padding length.
        fixed: usize,
    },
    /// Rows need padding but no padding token is known.
    #[error(
        "{}: the batch needs padding but no padding token is known: the file has no `padding` \
         section and none was given (set `EncodeOptions::pad_id`; decoders without a pad \
         token usually pad with their end-of-text id)",
        file.display()
    )]
    NoPadId {
        /// The file.
        file: PathBuf,
    },
    /// The padding id is not in the vocabulary.
    #[error(
        "{}: pad_id {pad_id} is not in the vocabulary ({vocab_size} tokens)",
        file.display()
    )]
    PadIdOutOfRange {
        /// The file.
        file: PathBuf,
        /// The id.
        pad_id: u32,
        /// The vocabulary size, added tokens included.
        vocab_size: usize,
    },
}
