//! The crate's only `unsafe` code: mapping a checkpoint file into memory.
//!
//! Everything else in fblayout-hf is written without `unsafe` (the workspace denies it; this
//! module alone is allowed it, in `weights/mod.rs`). Checkpoints are mapped rather than read
//! so that opening a multi-gigabyte model costs nothing until a tensor is read, and reading
//! one touches only its pages.

use std::fs::File;
use std::io;

/// A file mapped read-only into memory, as one byte slice.
pub(super) struct MappedFile {
    map: memmap2::Mmap,
}

impl MappedFile {
    /// Maps all of `file`, which must be open for reading.
    pub(super) fn map(file: &File) -> io::Result<Self> {
        // SAFETY: `Mmap::map` is unsafe because the bytes behind the returned slice belong to
        // the file: if the file is written or truncated while mapped (by this process or
        // another), the slice changes under its borrowers, or reading a page past the new end
        // raises SIGBUS. The map is read-only and private to a `Checkpoint`, which hands out
        // only shared borrows of it, and this crate never writes a file it has mapped. That
        // no other process rewrites a checkpoint while it is being loaded is the contract
        // stated on `Checkpoint` (every mmap-based safetensors reader makes it); a file that
        // changes between opening and reading is a misuse this crate can't detect.
        let map = unsafe { memmap2::Mmap::map(file)? };
        Ok(Self { map })
    }

    /// The file's bytes.
    pub(super) fn bytes(&self) -> &[u8] {
        &self.map
    }
}
