//! The buffer pool: GPU memory is allocated once and reused.
//!
//! Every [`GpuBuffer`](super::GpuBuffer) takes its wgpu buffer from the [`Gpu`](super::Gpu)'s
//! pool and gives it back when its last handle is dropped. The pool keeps freed buffers by
//! (size, usage) and hands them out again, so a training step that asks for the same buffers
//! every time allocates only on its first run; [`PoolStats`] counts allocations and reuses,
//! which is how tests check it.
//!
//! Sizes are rounded up to [`GRANULE`] bytes, so any buffer can be bound as an array of
//! `vec4<f32>`s and sizes that differ by a few bytes share a free list.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError, Weak};

/// Buffer sizes are multiples of this many bytes (one `vec4<f32>`).
pub const GRANULE: u64 = 16;

/// The pool's counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PoolStats {
    /// wgpu buffers created.
    pub allocations: u64,
    /// Requests served from freed buffers.
    pub reuses: u64,
    /// Bytes in buffers created so far (live and free).
    pub bytes_allocated: u64,
    /// Bytes in freed buffers waiting to be reused.
    pub bytes_free: u64,
}

type Key = (u64, u32);

#[derive(Default)]
struct Inner {
    free: HashMap<Key, Vec<wgpu::Buffer>>,
    stats: PoolStats,
}

/// The free lists of one device.
#[derive(Clone, Default)]
pub(crate) struct BufferPool {
    inner: Arc<Mutex<Inner>>,
}

/// A wgpu buffer on loan from a pool; it goes back when dropped.
pub(crate) struct Lease {
    buffer: wgpu::Buffer,
    key: Key,
    pool: Weak<Mutex<Inner>>,
}

impl Lease {
    pub(crate) fn buffer(&self) -> &wgpu::Buffer {
        &self.buffer
    }

    /// The buffer's size in bytes (a multiple of [`GRANULE`]).
    pub(crate) fn size(&self) -> u64 {
        self.key.0
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        if let Some(pool) = self.pool.upgrade() {
            let mut inner = pool.lock().unwrap_or_else(PoisonError::into_inner);
            inner.stats.bytes_free += self.key.0;
            inner
                .free
                .entry(self.key)
                .or_default()
                .push(self.buffer.clone());
        }
    }
}

/// The bytes the pool allocates for a buffer of `bytes` bytes: `bytes` rounded up to whole
/// [`GRANULE`]s, and at least one.
pub fn granular(bytes: u64) -> u64 {
    bytes.div_ceil(GRANULE).max(1) * GRANULE
}

impl BufferPool {
    /// A buffer of at least `bytes` bytes with `usage`: a freed one if there is one, else a new
    /// one made by `create(size)`. Its contents are whatever was there before.
    pub(crate) fn take(
        &self,
        bytes: u64,
        usage: wgpu::BufferUsages,
        create: impl FnOnce(u64) -> Result<wgpu::Buffer, super::GpuError>,
    ) -> Result<Arc<Lease>, super::GpuError> {
        let key = (granular(bytes), usage.bits());
        let reused = {
            let mut inner = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
            let found = inner.free.get_mut(&key).and_then(Vec::pop);
            if found.is_some() {
                inner.stats.reuses += 1;
                inner.stats.bytes_free -= key.0;
            }
            found
        };
        let buffer = match reused {
            Some(buffer) => buffer,
            None => {
                let buffer = create(key.0)?;
                let mut inner = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
                inner.stats.allocations += 1;
                inner.stats.bytes_allocated += key.0;
                buffer
            }
        };
        Ok(Arc::new(Lease {
            buffer,
            key,
            pool: Arc::downgrade(&self.inner),
        }))
    }

    pub(crate) fn stats(&self) -> PoolStats {
        self.inner
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .stats
    }

    /// Frees the buffers waiting for reuse (their memory goes back to the device).
    pub(crate) fn trim(&self) {
        let mut inner = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        let freed: u64 = inner.free.iter().map(|(k, v)| k.0 * v.len() as u64).sum();
        for buffer in inner.free.drain().flat_map(|(_, v)| v) {
            buffer.destroy();
        }
        inner.stats.bytes_free = 0;
        inner.stats.bytes_allocated -= freed;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_round_up_to_granules() {
        assert_eq!(granular(0), 16);
        assert_eq!(granular(1), 16);
        assert_eq!(granular(16), 16);
        assert_eq!(granular(17), 32);
    }
}
