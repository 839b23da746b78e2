//! One safetensors file, mapped, with its header parsed and checked.
//!
//! A safetensors file is an 8-byte little-endian header length `n`, `n` bytes of JSON
//! (`{"name": {"dtype", "shape", "data_offsets": [start, end]}, "__metadata__": {...}}`), then
//! the data, each tensor's bytes at its offsets relative to the data's start. The safetensors
//! crate checks that the offsets tile the data exactly and match each shape and dtype; when it
//! finds the file too short, [`Shard::open`] reads the header again to say which tensors were
//! cut off.

use std::fs::File;
use std::path::{Path, PathBuf};

use safetensors::tensor::{Metadata, TensorInfo as RawInfo};
use safetensors::{SafeTensorError, SafeTensors};
use serde_json::Value;

use super::error::WeightsError;
use super::mapped::MappedFile;

/// A mapped safetensors file.
pub(super) struct Shard {
    pub(super) path: PathBuf,
    map: MappedFile,
    /// Where the data section starts: 8 + the header's length.
    data_start: usize,
    pub(super) metadata: Metadata,
}

impl Shard {
    /// Opens, maps and checks the file at `path`.
    pub(super) fn open(path: &Path) -> Result<Self, WeightsError> {
        let io = |source| WeightsError::Io {
            file: path.to_path_buf(),
            source,
        };
        let file = File::open(path).map_err(io)?;
        let map = MappedFile::map(&file).map_err(io)?;
        let (header_len, metadata) = SafeTensors::read_metadata(map.bytes())
            .map_err(|source| diagnose(path, map.bytes(), source))?;
        Ok(Self {
            path: path.to_path_buf(),
            map,
            data_start: 8 + header_len,
            metadata,
        })
    }

    /// The bytes of a tensor of this file's header.
    pub(super) fn bytes(&self, info: &RawInfo) -> &[u8] {
        let (start, end) = info.data_offsets;
        // In range: `read_metadata` checked that the offsets tile the data to its end.
        &self.map.bytes()[self.data_start + start..self.data_start + end]
    }
}

/// Turns the parser's error into a [`WeightsError`], telling a file cut short (and which
/// tensors lost data) from one that is malformed.
fn diagnose(path: &Path, bytes: &[u8], source: SafeTensorError) -> WeightsError {
    let file = path.to_path_buf();
    let len = bytes.len() as u64;
    let truncated = |expected: u64, tensors: Vec<String>| WeightsError::Truncated {
        file: path.to_path_buf(),
        len,
        expected,
        tensors,
    };
    match source {
        SafeTensorError::HeaderTooSmall => truncated(8, Vec::new()),
        SafeTensorError::InvalidHeaderLength | SafeTensorError::MetadataIncompleteBuffer => {
            let Some(header_len) = bytes
                .get(..8)
                .map(|b| u64::from_le_bytes(b.try_into().unwrap_or([0; 8])))
            else {
                return truncated(8, Vec::new());
            };
            let header_end = 8u64.saturating_add(header_len);
            if header_end > len {
                return truncated(header_end, Vec::new());
            }
            match data_ends(&bytes[8..header_end as usize]) {
                Some(ends) => {
                    let expected = header_end + ends.iter().map(|(_, e)| *e).max().unwrap_or(0);
                    if expected > len {
                        let cut = ends
                            .into_iter()
                            .filter(|(_, end)| header_end + end > len)
                            .map(|(name, _)| name)
                            .collect();
                        truncated(expected, cut)
                    } else {
                        WeightsError::Corrupt { file, source }
                    }
                }
                None => WeightsError::Corrupt { file, source },
            }
        }
        _ => WeightsError::Corrupt { file, source },
    }
}

/// Each tensor's name and end offset in the data section, read leniently from the header
/// JSON (sorted by offset); `None` if the header is not readable that way.
fn data_ends(header: &[u8]) -> Option<Vec<(String, u64)>> {
    let value: Value = serde_json::from_slice(header).ok()?;
    let mut ends: Vec<(String, u64)> = value
        .as_object()?
        .iter()
        .filter(|(name, _)| *name != "__metadata__")
        .filter_map(|(name, info)| {
            let end = info.get("data_offsets")?.get(1)?.as_u64()?;
            Some((name.clone(), end))
        })
        .collect();
    ends.sort_by_key(|(_, end)| *end);
    Some(ends)
}
