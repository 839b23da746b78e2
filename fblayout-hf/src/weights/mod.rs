//! A checkpoint's tensors: a `model.safetensors` file, or a sharded checkpoint's
//! `model.safetensors.index.json` and its shards, memory-mapped.
//!
//! [`Checkpoint::open`] maps every file and checks every header up front (a truncated or
//! malformed file, a missing shard, a tensor the index lists but its shard lacks are
//! [`WeightsError`]s naming the file and tensor), so that reading a tensor afterwards can
//! only fail by naming a tensor that isn't there or one in a dtype it can't decode. Tensors
//! are listed with their dtype and shape ([`TensorInfo`]) and read as `f32` from F32, F16 or
//! BF16 ([`Checkpoint::read_f32`]), or as raw bytes ([`Checkpoint::raw`]).
//!
//! The files are mapped, not read: opening costs nothing per byte, and memory is only used
//! for the tensors read. **Don't rewrite the files while a `Checkpoint` is open** — the
//! mapping would see the change (or fault, if the file shrank).
//!
//! Names are Hugging Face's and weights keep its orientation (`nn.Linear`: `[out, in]`;
//! GPT-2's `Conv1D`: `[in, out]`); [`crate::names`] says which names each architecture has.

mod convert;
mod error;
mod index;
// The one module allowed `unsafe` code (the file mapping; see its docs); the workspace denies
// it elsewhere.
#[allow(unsafe_code)]
mod mapped;
mod shard;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

pub use error::WeightsError;
pub use safetensors::Dtype;

use shard::Shard;

/// A tensor of a checkpoint: its name, dtype and shape.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TensorInfo {
    /// Its name in the checkpoint.
    pub name: String,
    /// Its element type.
    pub dtype: Dtype,
    /// Its shape, outermost first (row-major data).
    pub shape: Vec<usize>,
}

impl TensorInfo {
    /// The number of elements.
    pub fn numel(&self) -> usize {
        self.shape.iter().product()
    }
}

/// A tensor's undecoded data: little-endian elements of `info.dtype`, row-major.
#[derive(Debug, Clone, Copy)]
pub struct RawTensor<'a> {
    /// Name, dtype and shape.
    pub info: &'a TensorInfo,
    /// The bytes, `info.numel() · size of dtype` of them.
    pub bytes: &'a [u8],
}

/// Where a tensor is.
struct Entry {
    info: TensorInfo,
    shard: usize,
}

/// An opened checkpoint: one safetensors file, or the shards of an index.
pub struct Checkpoint {
    path: PathBuf,
    shards: Vec<Shard>,
    tensors: BTreeMap<String, Entry>,
}

impl std::fmt::Debug for Checkpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Checkpoint")
            .field("path", &self.path)
            .field("shards", &self.shards.len())
            .field("tensors", &self.tensors.len())
            .finish()
    }
}

impl Checkpoint {
    /// Opens a checkpoint: a sharded one when `path` ends in `.json` (the
    /// `model.safetensors.index.json`, whose shards are beside it), else one safetensors file.
    pub fn open(path: impl AsRef<Path>) -> Result<Self, WeightsError> {
        let path = path.as_ref();
        if path.extension().is_some_and(|e| e == "json") {
            Self::open_index(path)
        } else {
            let shard = Shard::open(path)?;
            let mut checkpoint = Self {
                path: path.to_path_buf(),
                shards: Vec::new(),
                tensors: BTreeMap::new(),
            };
            let names: Vec<String> = shard.metadata.tensors().into_keys().collect();
            checkpoint.add(shard, names);
            Ok(checkpoint)
        }
    }

    fn open_index(path: &Path) -> Result<Self, WeightsError> {
        let map = index::read(path)?;
        let dir = path.parent().unwrap_or(Path::new(""));
        let mut checkpoint = Self {
            path: path.to_path_buf(),
            shards: Vec::new(),
            tensors: BTreeMap::new(),
        };
        for (name, tensors) in map {
            let shard_path = dir.join(&name);
            let shard = match Shard::open(&shard_path) {
                Ok(shard) => shard,
                Err(WeightsError::Io { source, .. }) => {
                    return Err(WeightsError::MissingShard {
                        index: path.to_path_buf(),
                        shard: name,
                        count: tensors.len(),
                        example: tensors[0].clone(),
                        source,
                    });
                }
                Err(other) => return Err(other),
            };
            let absent: Vec<String> = tensors
                .iter()
                .filter(|t| shard.metadata.info(t).is_none())
                .cloned()
                .collect();
            if !absent.is_empty() {
                return Err(WeightsError::NotInShard {
                    index: path.to_path_buf(),
                    shard: shard_path,
                    tensors: absent,
                });
            }
            checkpoint.add(shard, tensors);
        }
        Ok(checkpoint)
    }

    /// Adds `shard` and, from it, the tensors `names` (all in its header).
    fn add(&mut self, shard: Shard, names: Vec<String>) {
        let index = self.shards.len();
        for name in names {
            if let Some(raw) = shard.metadata.info(&name) {
                let info = TensorInfo {
                    name: name.clone(),
                    dtype: raw.dtype,
                    shape: raw.shape.clone(),
                };
                self.tensors.insert(name, Entry { info, shard: index });
            }
        }
        self.shards.push(shard);
    }

    /// The path it was opened from (the safetensors file, or the index).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Its files: the safetensors file, or each shard.
    pub fn files(&self) -> impl Iterator<Item = &Path> {
        self.shards.iter().map(|s| s.path.as_path())
    }

    /// Every tensor, in name order.
    pub fn tensors(&self) -> impl Iterator<Item = &TensorInfo> {
        self.tensors.values().map(|e| &e.info)
    }

    /// How many tensors it holds.
    pub fn len(&self) -> usize {
        self.tensors.len()
    }

    /// Whether it holds no tensor.
    pub fn is_empty(&self) -> bool {
        self.tensors.is_empty()
    }

    /// The tensor called `name`, if any.
    pub fn get(&self, name: &str) -> Option<&TensorInfo> {
        self.tensors.get(name).map(|e| &e.info)
    }

    /// The file holding the tensor called `name`, if any.
    pub fn file_of(&self, name: &str) -> Option<&Path> {
        let entry = self.tensors.get(name)?;
        Some(&self.shards[entry.shard].path)
    }

    /// The tensor called `name`, undecoded.
    pub fn raw(&self, name: &str) -> Result<RawTensor<'_>, WeightsError> {
        let Some(entry) = self.tensors.get(name) else {
            return Err(WeightsError::UnknownTensor {
                file: self.path.clone(),
                tensor: name.to_string(),
            });
        };
        let shard = &self.shards[entry.shard];
        // Present: `add` only lists tensors of the shard's header.
        let bytes = shard
            .metadata
            .info(name)
            .map_or(&[][..], |raw| shard.bytes(raw));
        Ok(RawTensor {
            info: &entry.info,
            bytes,
        })
    }

    /// The tensor called `name` as `f32`, row-major, decoded from F32, F16 or BF16.
    pub fn read_f32(&self, name: &str) -> Result<Vec<f32>, WeightsError> {
        let raw = self.raw(name)?;
        convert::to_f32(raw.info.dtype, raw.bytes).ok_or_else(|| WeightsError::UnsupportedDtype {
            file: self.shards[self.tensors[name].shard].path.clone(),
            tensor: name.to_string(),
            dtype: raw.info.dtype,
        })
    }

    /// Whether [`Checkpoint::read_f32`] decodes `dtype`.
    pub fn readable_as_f32(dtype: Dtype) -> bool {
        convert::READABLE.contains(&dtype)
    }
}
