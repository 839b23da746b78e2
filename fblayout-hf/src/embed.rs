//! Sentence embeddings from a BERT encoder's last hidden state, as sentence-transformers
//! computes them for models such as all-MiniLM-L6-v2: the mean of each sentence's hidden
//! vectors over its real (unpadded) tokens ([`mean_pool`], its `Pooling` in mean mode), then
//! scaled to unit length ([`normalize`], its `Normalize`).
//!
//! The hidden state comes from a forward-only step of the model's graph planned to keep it
//! ([`last_hidden_state`] names it; see `fblayout_plan::memory::MemoryOptions::keep` and
//! `fblayout_plan::exec::CpuStep::evaluate`), the mask from the tokenizer
//! ([`EncodedBatch::attention_mask`](crate::tokenizer::EncodedBatch::attention_mask)).
//!
//! ```
//! use fblayout_hf::embed::{embeddings, mean_pool};
//!
//! // Two sentences of 3 positions, 2 values each; the second has one padded position.
//! let hidden = [
//!     1.0, 0.0, 3.0, 0.0, 2.0, 0.0, // sentence 0
//!     0.0, 3.0, 0.0, 5.0, 9.0, 9.0, // sentence 1 (the last position is padding)
//! ];
//! let mask = [vec![1, 1, 1], vec![1, 1, 0]];
//! assert_eq!(mean_pool(&hidden, &mask, 2)?, [vec![2.0, 0.0], vec![0.0, 4.0]]);
//! assert_eq!(embeddings(&hidden, &mask, 2)?, [vec![1.0, 0.0], vec![0.0, 1.0]]);
//! # Ok::<(), fblayout_hf::embed::EmbedError>(())
//! ```

use crate::config::ModelConfig;

/// Why embeddings could not be computed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum EmbedError {
    /// The hidden state and the mask don't describe the same batch.
    #[error("the hidden state and the attention mask don't match: {0}")]
    Shape(String),
    /// A mask value is neither 0 nor 1.
    #[error("attention mask row {row}, position {position}: {value} is neither 0 nor 1")]
    Mask {
        /// The row (sentence).
        row: usize,
        /// The position.
        position: usize,
        /// The value found.
        value: u32,
    },
    /// A row has no real token to average.
    #[error("attention mask row {0} marks no token as real: it has no mean")]
    Empty(usize),
    /// The model has no hidden state pooled here.
    #[error("{0}")]
    Unsupported(String),
}

/// The smallest norm [`normalize`] divides by, as `torch.nn.functional.normalize`'s ε.
const EPS: f64 = 1e-12;

/// The name of the last hidden state `[batch, seq, hidden]` in the graph
/// [`graph::build`](crate::graph::build) makes of `config`: the last block's output (a BERT
/// encoder's; the language models are not pooled here).
pub fn last_hidden_state(config: &ModelConfig) -> Result<String, EmbedError> {
    match config {
        ModelConfig::Bert(bert) => {
            let layers = u32::try_from(bert.num_hidden_layers)
                .map_err(|_| EmbedError::Unsupported("too many layers".into()))?;
            Ok(fblayout_plan::models::bert::last_hidden(layers))
        }
        other => Err(EmbedError::Unsupported(format!(
            "sentence embeddings are pooled from a BERT encoder's hidden state; this model is \
             {}",
            other.model_type()
        ))),
    }
}

/// The mean of every row's vectors over the positions its mask marks 1: `hidden` is
/// `[rows, seq, width]` row-major, `mask` `rows` rows of `seq` values 0 or 1.
pub fn mean_pool(
    hidden: &[f64],
    mask: &[Vec<u32>],
    width: usize,
) -> Result<Vec<Vec<f64>>, EmbedError> {
    let seq = mask.first().map_or(0, Vec::len);
    if let Some(row) = mask.iter().position(|m| m.len() != seq) {
        return Err(EmbedError::Shape(format!(
            "mask row {row} has {} positions, row 0 has {seq}",
            mask[row].len()
        )));
    }
    if width == 0 || hidden.len() != mask.len() * seq * width {
        return Err(EmbedError::Shape(format!(
            "{} hidden values are not {} rows × {seq} positions × {width} values",
            hidden.len(),
            mask.len()
        )));
    }
    mask.iter()
        .enumerate()
        .map(|(row, m)| {
            let mut sum = vec![0.0; width];
            let mut count = 0usize;
            for (position, &value) in m.iter().enumerate() {
                match value {
                    0 => continue,
                    1 => count += 1,
                    _ => {
                        return Err(EmbedError::Mask {
                            row,
                            position,
                            value,
                        });
                    }
                }
                let at = (row * seq + position) * width;
                for (s, h) in sum.iter_mut().zip(&hidden[at..at + width]) {
                    *s += h;
                }
            }
            if count == 0 {
                return Err(EmbedError::Empty(row));
            }
            Ok(sum.into_iter().map(|s| s / count as f64).collect())
        })
        .collect()
}

/// `v` over its Euclidean norm (over 10⁻¹² where the norm is smaller, as PyTorch's
/// `normalize`).
pub fn normalize(v: &[f64]) -> Vec<f64> {
    let norm = v.iter().map(|x| x * x).sum::<f64>().sqrt().max(EPS);
    v.iter().map(|x| x / norm).collect()
}

/// Every row's sentence embedding: [`mean_pool`], then [`normalize`].
pub fn embeddings(
    hidden: &[f64],
    mask: &[Vec<u32>],
    width: usize,
) -> Result<Vec<Vec<f64>>, EmbedError> {
    Ok(mean_pool(hidden, mask, width)?
        .iter()
        .map(|v| normalize(v))
        .collect())
}
