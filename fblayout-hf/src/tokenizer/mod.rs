//! Turning text into token ids with a model's `tokenizer.json`.
//!
//! A `tokenizer.json` is the `tokenizers` library's complete description of a tokenizer —
//! normalizer, pre-tokenizer, model (BERT's WordPiece, GPT-2's and Llama's byte-level BPE,
//! ...), post-processor (`[CLS] A [SEP] B [SEP]`, a prepended `<s>`) — and [`Tokenizer`]
//! loads it with that library, so ids are the ones transformers' fast tokenizers give.
//!
//! How a batch is shaped is fblayout's choice, not the file's: any `padding` or `truncation`
//! section in the file is replaced by [`EncodeOptions`] (the file's padding id is kept as the
//! default `pad_id`). Rows are truncated to `max_length` tokens, special tokens included
//! (longest-first for a pair of texts, as transformers), and padded on the right to the
//! longest row or to a fixed length; [`EncodedBatch`] holds them as plain `Vec<u32>` rows with
//! the attention mask (1 for tokens, 0 for padding) and the token type ids (BERT's segments:
//! 0 for the first text, 1 for the second, 0 for padding).
//!
//! ```
//! # let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
//! use fblayout_hf::tokenizer::{EncodeOptions, Padding, TextInput, Tokenizer};
//!
//! let mut tokenizer = Tokenizer::from_file(root.join("tests/fixtures/hf/bert/model/tokenizer.json"))?;
//! tokenizer.set_options(EncodeOptions { max_length: Some(10), padding: Padding::Longest, pad_id: Some(0) })?;
//! let batch = tokenizer.encode_batch([TextInput::Pair("Alice was tired", "of sitting"), "Oh dear!".into()])?;
//! assert_eq!(batch.seq_len(), 8);
//! assert_eq!(batch.attention_mask[1], [1, 1, 1, 1, 1, 0, 0, 0]); // [CLS] oh dear ! [SEP]
//! assert_eq!(batch.token_type_ids[0], [0, 0, 0, 0, 0, 1, 1, 1]); // [CLS] alice was tired [SEP] | of sitting [SEP]
//! # Ok::<(), fblayout_hf::tokenizer::TokenizerError>(())
//! ```

mod error;

use std::path::{Path, PathBuf};

use tokenizers::PostProcessor;
use tokenizers::tokenizer::{
    EncodeInput, TruncationDirection, TruncationParams, TruncationStrategy,
};

pub use error::TokenizerError;

/// One row of a batch: a text, or a pair of texts (BERT's two segments).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TextInput<'a> {
    /// One text.
    Single(&'a str),
    /// Two texts, encoded as one row with the post-processor's separators.
    Pair(&'a str, &'a str),
}

impl<'a> From<&'a str> for TextInput<'a> {
    fn from(text: &'a str) -> Self {
        Self::Single(text)
    }
}

impl<'a> From<&'a String> for TextInput<'a> {
    fn from(text: &'a String) -> Self {
        Self::Single(text)
    }
}

impl<'a> From<(&'a str, &'a str)> for TextInput<'a> {
    fn from((a, b): (&'a str, &'a str)) -> Self {
        Self::Pair(a, b)
    }
}

/// How rows are padded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Padding {
    /// To the longest row of the batch.
    Longest,
    /// To this many tokens (a row longer than it is an error).
    Fixed(usize),
}

/// How [`Tokenizer::encode_batch`] shapes a batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EncodeOptions {
    /// Truncate each row to this many tokens, special tokens included (`None`: don't).
    pub max_length: Option<usize>,
    /// How rows are padded.
    pub padding: Padding,
    /// The id padding positions get (`None`: unknown, an error when a row needs padding).
    pub pad_id: Option<u32>,
}

/// The encoded rows of a batch, all `seq_len()` long.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct EncodedBatch {
    /// Token ids, `pad_id` at padding.
    pub input_ids: Vec<Vec<u32>>,
    /// 1 at tokens, 0 at padding.
    pub attention_mask: Vec<Vec<u32>>,
    /// The segment of each token (0, or 1 in a pair's second text); 0 at padding.
    pub token_type_ids: Vec<Vec<u32>>,
    /// Each row's length before padding.
    pub lengths: Vec<usize>,
}

impl EncodedBatch {
    /// The number of rows.
    pub fn rows(&self) -> usize {
        self.input_ids.len()
    }

    /// The length of every row.
    pub fn seq_len(&self) -> usize {
        self.input_ids.first().map_or(0, Vec::len)
    }
}

/// A loaded `tokenizer.json` with the options batches are encoded with.
#[derive(Clone)]
pub struct Tokenizer {
    inner: tokenizers::Tokenizer,
    file: PathBuf,
    options: EncodeOptions,
}

impl std::fmt::Debug for Tokenizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tokenizer")
            .field("file", &self.file)
            .field("vocab_size", &self.vocab_size())
            .field("options", &self.options)
            .finish()
    }
}

impl Tokenizer {
    /// Loads the `tokenizer.json` at `path`. Its options: no truncation, padding to the
    /// longest row, and the file's padding id if its `padding` section gives one.
    pub fn from_file(path: impl AsRef<Path>) -> Result<Self, TokenizerError> {
        let file = path.as_ref().to_path_buf();
        let bytes = std::fs::read(&file).map_err(|source| TokenizerError::Io {
            file: file.clone(),
            source,
        })?;
        let mut inner =
            tokenizers::Tokenizer::from_bytes(&bytes).map_err(|source| TokenizerError::Parse {
                file: file.clone(),
                source,
            })?;
        let pad_id = inner.get_padding().map(|p| p.pad_id);
        inner.with_padding(None);
        inner
            .with_truncation(None)
            .map_err(|source| TokenizerError::Parse {
                file: file.clone(),
                source,
            })?;
        Ok(Self {
            inner,
            file,
            options: EncodeOptions {
                max_length: None,
                padding: Padding::Longest,
                pad_id,
            },
        })
    }

    /// The file it was loaded from.
    pub fn path(&self) -> &Path {
        &self.file
    }

    /// The options batches are encoded with.
    pub fn options(&self) -> &EncodeOptions {
        &self.options
    }

    /// Sets the options batches are encoded with, after checking them: a `pad_id` in the
    /// vocabulary, a `max_length` with room beside the special tokens, fixed padding at
    /// least as long as `max_length`.
    pub fn set_options(&mut self, options: EncodeOptions) -> Result<(), TokenizerError> {
        if let Some(pad_id) = options.pad_id {
            let vocab_size = self.vocab_size();
            if pad_id as usize >= vocab_size {
                return Err(TokenizerError::PadIdOutOfRange {
                    file: self.file.clone(),
                    pad_id,
                    vocab_size,
                });
            }
        }
        if let (Padding::Fixed(fixed), Some(max_length)) = (options.padding, options.max_length) {
            if fixed < max_length {
                return Err(TokenizerError::PaddingBelowMaxLength {
                    file: self.file.clone(),
                    fixed,
                    max_length,
                });
            }
        }
        let truncation = match options.max_length {
            Some(max_length) => {
                self.check_room(max_length, false)?;
                Some(TruncationParams {
                    direction: TruncationDirection::Right,
                    max_length,
                    strategy: TruncationStrategy::LongestFirst,
                    stride: 0,
                })
            }
            None => None,
        };
        self.inner
            .with_truncation(truncation)
            .map_err(|source| TokenizerError::Parse {
                file: self.file.clone(),
                source,
            })?;
        self.options = options;
        Ok(())
    }

    /// The number of ids, added tokens included.
    pub fn vocab_size(&self) -> usize {
        self.inner.get_vocab_size(true)
    }

    /// The id of a token (`"[PAD]"`, `"<s>"`), if in the vocabulary.
    pub fn token_to_id(&self, token: &str) -> Option<u32> {
        self.inner.token_to_id(token)
    }

    /// The token of an id, if in the vocabulary.
    pub fn id_to_token(&self, id: u32) -> Option<String> {
        self.inner.id_to_token(id)
    }

    /// Encodes `inputs` into padded rows under the [options](Self::options).
    pub fn encode_batch<'a, T: Into<TextInput<'a>>>(
        &self,
        inputs: impl IntoIterator<Item = T>,
    ) -> Result<EncodedBatch, TokenizerError> {
        let inputs: Vec<TextInput<'a>> = inputs.into_iter().map(Into::into).collect();
        if let Some(max_length) = self.options.max_length {
            if inputs.iter().any(|i| matches!(i, TextInput::Pair(..))) {
                self.check_room(max_length, true)?;
            }
        }
        let encode_inputs: Vec<EncodeInput<'a>> = inputs.iter().map(|&i| to_input(i)).collect();
        let encodings = match self.inner.encode_batch(encode_inputs, true) {
            Ok(encodings) => encodings,
            Err(source) => return Err(self.failing_row(&inputs, source)),
        };
        let lengths: Vec<usize> = encodings.iter().map(|e| e.get_ids().len()).collect();
        let longest = lengths.iter().copied().max().unwrap_or(0);
        let seq_len = match self.options.padding {
            Padding::Longest => longest,
            Padding::Fixed(fixed) => {
                if let Some(row) = lengths.iter().position(|&len| len > fixed) {
                    return Err(TokenizerError::RowTooLong {
                        file: self.file.clone(),
                        row,
                        len: lengths[row],
                        fixed,
                    });
                }
                fixed
            }
        };
        let pad_id = match self.options.pad_id {
            Some(id) => id,
            None if lengths.iter().all(|&len| len == seq_len) => 0,
            None => {
                return Err(TokenizerError::NoPadId {
                    file: self.file.clone(),
                });
            }
        };
        let mut batch = EncodedBatch::default();
        for encoding in &encodings {
            let pad = |row: &[u32], value: u32| {
                let mut row = row.to_vec();
                row.resize(seq_len, value);
                row
            };
            batch.input_ids.push(pad(encoding.get_ids(), pad_id));
            batch
                .attention_mask
                .push(pad(encoding.get_attention_mask(), 0));
            batch.token_type_ids.push(pad(encoding.get_type_ids(), 0));
        }
        batch.lengths = lengths;
        Ok(batch)
    }

    /// Errs unless `max_length` leaves room beside the special tokens of a text or a pair.
    fn check_room(&self, max_length: usize, pair: bool) -> Result<(), TokenizerError> {
        let special = self
            .inner
            .get_post_processor()
            .map_or(0, |p| p.added_tokens(pair));
        if max_length <= special {
            return Err(TokenizerError::MaxLengthTooShort {
                file: self.file.clone(),
                max_length,
                special,
                pair,
            });
        }
        Ok(())
    }

    /// The error of the first row that fails to encode alone (the batch call doesn't say
    /// which row failed).
    fn failing_row(
        &self,
        inputs: &[TextInput<'_>],
        batch_error: tokenizers::Error,
    ) -> TokenizerError {
        for (row, &input) in inputs.iter().enumerate() {
            if let Err(source) = self.inner.encode(to_input(input), true) {
                return TokenizerError::Encode {
                    file: self.file.clone(),
                    row,
                    source,
                };
            }
        }
        TokenizerError::Encode {
            file: self.file.clone(),
            row: 0,
            source: batch_error,
        }
    }
}

fn to_input(input: TextInput<'_>) -> EncodeInput<'_> {
    match input {
        TextInput::Single(text) => text.into(),
        TextInput::Pair(a, b) => (a, b).into(),
    }
}
