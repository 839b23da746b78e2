//! What can go wrong opening a checkpoint or reading a tensor from it.

use std::path::PathBuf;

use safetensors::{Dtype, SafeTensorError};

/// A checkpoint that can't be opened, or a tensor that can't be read. Every variant names
/// the file concerned (the shard for a problem inside one, the index for one of the index).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum WeightsError {
    /// A file could not be opened or mapped.
    #[error("{}: can't read the checkpoint: {source}", file.display())]
    Io {
        /// The file.
        file: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// A safetensors file is shorter than its header says: it was cut off (an interrupted
    /// download or copy).
    #[error(
        "{}: truncated: {len} bytes where its header needs {expected}{}",
        file.display(),
        cut_list(tensors)
    )]
    Truncated {
        /// The file.
        file: PathBuf,
        /// Its length in bytes.
        len: u64,
        /// The length its header implies.
        expected: u64,
        /// The tensors whose data lies (partly) past the end, when the header was readable.
        tensors: Vec<String>,
    },
    /// A safetensors file whose header is not valid: not JSON, offsets that overlap or don't
    /// match the shapes, data longer than the header says, ...
    #[error("{}: not a valid safetensors file: {source}", file.display())]
    Corrupt {
        /// The file.
        file: PathBuf,
        /// What the safetensors parser found.
        source: SafeTensorError,
    },
    /// A `model.safetensors.index.json` that is not an index: not JSON, or without a
    /// `weight_map` from tensor names to shard files.
    #[error("{}: not a sharded-checkpoint index: {detail}", file.display())]
    Index {
        /// The index.
        file: PathBuf,
        /// What is wrong.
        detail: String,
    },
    /// A shard the index maps tensors to can't be opened.
    #[error(
        "{}: the shard {shard} (holding {count} tensors, e.g. `{example}`) can't be opened: {source}",
        index.display()
    )]
    MissingShard {
        /// The index.
        index: PathBuf,
        /// The shard's file name, as the index writes it.
        shard: String,
        /// How many tensors the index maps to it.
        count: usize,
        /// One of them.
        example: String,
        /// Why it can't be opened.
        source: std::io::Error,
    },
    /// Tensors the index maps to a shard that doesn't hold them.
    #[error(
        "{}: {} listed in {} but absent from it: {}",
        shard.display(),
        plural(tensors.len(), "tensor is", "tensors are"),
        index.display(),
        names(tensors)
    )]
    NotInShard {
        /// The index.
        index: PathBuf,
        /// The shard.
        shard: PathBuf,
        /// The tensors it lacks.
        tensors: Vec<String>,
    },
    /// The index names a shard that is not a plain file name beside it.
    #[error(
        "{}: the shard name \"{shard}\" is not a file name in the index's directory",
        index.display()
    )]
    BadShardName {
        /// The index.
        index: PathBuf,
        /// The name found.
        shard: String,
    },
    /// No tensor of that name in the checkpoint.
    #[error("{}: no tensor `{tensor}`", file.display())]
    UnknownTensor {
        /// The checkpoint (the single file, or the index).
        file: PathBuf,
        /// The name asked for.
        tensor: String,
    },
    /// The tensor's dtype can't be read as `f32`.
    #[error(
        "{}: tensor `{tensor}` is {dtype}, which can't be read as f32 (F32, F16 and BF16 can)",
        file.display()
    )]
    UnsupportedDtype {
        /// The file holding it.
        file: PathBuf,
        /// The tensor.
        tensor: String,
        /// Its dtype.
        dtype: Dtype,
    },
}

fn plural(n: usize, one: &str, many: &str) -> String {
    if n == 1 {
        format!("1 {one}")
    } else {
        format!("{n} {many}")
    }
}

/// Up to eight names, then a count.
pub(crate) fn names(list: &[String]) -> String {
    const SHOWN: usize = 8;
    let mut text = list
        .iter()
        .take(SHOWN)
        .map(|n| format!("`{n}`"))
        .collect::<Vec<_>>()
        .join(", ");
    if list.len() > SHOWN {
        text += &format!(" and {} more", list.len() - SHOWN);
    }
    text
}

fn cut_list(tensors: &[String]) -> String {
    if tensors.is_empty() {
        String::new()
    } else {
        format!("; cut short: {}", names(tensors))
    }
}
