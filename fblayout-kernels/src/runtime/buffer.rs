//! Typed GPU buffers.
//!
//! A [`GpuBuffer`] is a wgpu buffer that kernels bind as a storage or uniform buffer. It is made
//! from a slice of `bytemuck::Pod` values ([`GpuBuffer::from_slice`]), zeroed
//! ([`GpuBuffer::zeroed`]) or from one uniform value ([`GpuBuffer::uniform`]), and read back to
//! the CPU with [`GpuBuffer::read_back`]. Sizes are checked against the device's limits
//! ([`GpuError::BufferTooLarge`]). The buffer remembers its logical length in bytes; the wgpu
//! buffer underneath is padded to a multiple of 4 bytes (and at least 4 bytes, since wgpu cannot
//! bind an empty buffer).

use std::sync::{Arc, mpsc};

use super::error::GpuError;
use super::gpu::{Gpu, scoped};
use super::pool::{Lease, granular};

/// What a [`GpuBuffer`] is bound as.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BufferKind {
    /// `var<storage, read>` or `var<storage, read_write>`.
    Storage,
    /// `var<uniform>`.
    Uniform,
}

/// A buffer on the GPU, bindable to a kernel and readable back.
///
/// Cloning a `GpuBuffer` clones the handle: both clones refer to the same GPU memory. The memory
/// comes from the device's pool (see [`Gpu::pool_stats`]) and goes back to it when the last
/// handle is dropped.
#[derive(Clone)]
pub struct GpuBuffer {
    lease: Arc<Lease>,
    len_bytes: u64,
    kind: BufferKind,
    device: wgpu::Device,
    queue: wgpu::Queue,
}

impl std::fmt::Debug for GpuBuffer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GpuBuffer")
            .field("len_bytes", &self.len_bytes)
            .field("kind", &self.kind)
            .finish_non_exhaustive()
    }
}

/// Rounds `bytes` up to wgpu's copy alignment, and to at least one aligned unit.
fn padded(bytes: u64) -> u64 {
    bytes.div_ceil(wgpu::COPY_BUFFER_ALIGNMENT).max(1) * wgpu::COPY_BUFFER_ALIGNMENT
}

fn describe<T>(kind: BufferKind, len: usize) -> String {
    let kind = match kind {
        BufferKind::Storage => "storage buffer",
        BufferKind::Uniform => "uniform buffer",
    };
    format!("a {kind} of {len} × {}", std::any::type_name::<T>())
}

impl GpuBuffer {
    /// A storage buffer holding a copy of `data`.
    pub fn from_slice<T: bytemuck::Pod>(gpu: &Gpu, data: &[T]) -> Result<Self, GpuError> {
        Self::create(gpu, BufferKind::Storage, bytemuck::cast_slice(data), || {
            describe::<T>(BufferKind::Storage, data.len())
        })
    }

    /// A storage buffer of `len` zeroed elements of type `T`.
    pub fn zeroed<T: bytemuck::Pod>(gpu: &Gpu, len: usize) -> Result<Self, GpuError> {
        let buffer = Self::scratch::<T>(gpu, len)?;
        if buffer.len_bytes > 0 {
            scoped(
                gpu.device(),
                || describe::<T>(BufferKind::Storage, len),
                || {
                    let mut encoder =
                        gpu.device()
                            .create_command_encoder(&wgpu::CommandEncoderDescriptor {
                                label: Some("fblayout zero"),
                            });
                    encoder.clear_buffer(buffer.buffer(), 0, None);
                    gpu.queue().submit([encoder.finish()]);
                },
            )?;
        }
        Ok(buffer)
    }

    /// A storage buffer of `len` elements of type `T` whose contents are unspecified (a reused
    /// buffer keeps what it held): for outputs a kernel writes in full.
    pub fn scratch<T: bytemuck::Pod>(gpu: &Gpu, len: usize) -> Result<Self, GpuError> {
        let what = || describe::<T>(BufferKind::Storage, len);
        let bytes = checked_bytes::<T>(len).ok_or_else(|| GpuError::BufferTooLarge {
            what: what(),
            bytes: u64::MAX,
            limit: storage_limit(gpu),
        })?;
        Self::allocate(gpu, BufferKind::Storage, bytes, &what)
    }

    /// A uniform buffer holding `value`. WGSL's uniform layout rules apply: the struct's size
    /// must be a multiple of its alignment (16 bytes for vectors), which wgpu checks at dispatch.
    pub fn uniform<T: bytemuck::Pod>(gpu: &Gpu, value: &T) -> Result<Self, GpuError> {
        Self::create(gpu, BufferKind::Uniform, bytemuck::bytes_of(value), || {
            describe::<T>(BufferKind::Uniform, 1)
        })
    }

    /// A uniform buffer holding `bytes`: parameter blocks, each bound by its own range, so
    /// the buffer may be as large as any buffer; each range must fit the device's
    /// `max_uniform_buffer_binding_size`, which the caller checks
    /// ([`check_uniform_range`](Self::check_uniform_range)).
    pub(crate) fn uniform_ranges(gpu: &Gpu, bytes: &[u8]) -> Result<Self, GpuError> {
        let what = || format!("the parameter blocks of a batch ({} bytes)", bytes.len());
        let limit = gpu.limits().max_buffer_size;
        if granular(bytes.len() as u64) > limit {
            return Err(GpuError::BufferTooLarge {
                what: what(),
                bytes: bytes.len() as u64,
                limit,
            });
        }
        let buffer = Self::allocate_unchecked(gpu, BufferKind::Uniform, bytes.len() as u64, &what)?;
        buffer.fill(gpu, bytes, what)?;
        Ok(buffer)
    }

    /// Checks that a uniform block of `bytes` can be bound on `gpu` (what binds it is `what`).
    pub(crate) fn check_uniform_range(
        gpu: &Gpu,
        bytes: u64,
        what: impl FnOnce() -> String,
    ) -> Result<(), GpuError> {
        Self::check_size(gpu, BufferKind::Uniform, bytes, what)
    }

    fn create(
        gpu: &Gpu,
        kind: BufferKind,
        bytes: &[u8],
        what: impl Fn() -> String,
    ) -> Result<Self, GpuError> {
        let buffer = Self::allocate(gpu, kind, bytes.len() as u64, &what)?;
        buffer.fill(gpu, bytes, what)?;
        Ok(buffer)
    }

    /// Writes `bytes` at the start of a buffer just made for them.
    fn fill(&self, gpu: &Gpu, bytes: &[u8], what: impl Fn() -> String) -> Result<(), GpuError> {
        if !bytes.is_empty() {
            scoped(gpu.device(), what, || {
                write_padded(gpu.queue(), self.buffer(), bytes);
            })?;
        }
        Ok(())
    }

    /// A buffer of `len_bytes` logical bytes from the pool, contents unspecified.
    fn allocate(
        gpu: &Gpu,
        kind: BufferKind,
        len_bytes: u64,
        what: &impl Fn() -> String,
    ) -> Result<Self, GpuError> {
        Self::check_size(gpu, kind, len_bytes, what)?;
        Self::allocate_unchecked(gpu, kind, len_bytes, what)
    }

    /// [`allocate`](Self::allocate) without the check of the size against the binding limits.
    fn allocate_unchecked(
        gpu: &Gpu,
        kind: BufferKind,
        len_bytes: u64,
        what: &impl Fn() -> String,
    ) -> Result<Self, GpuError> {
        let usage = usage(kind);
        let lease = gpu.pool().take(len_bytes, usage, |size| {
            scoped(gpu.device(), what, || {
                gpu.device().create_buffer(&wgpu::BufferDescriptor {
                    label: Some("fblayout buffer"),
                    size,
                    usage,
                    mapped_at_creation: false,
                })
            })
        })?;
        Ok(Self {
            lease,
            len_bytes,
            kind,
            device: gpu.device().clone(),
            queue: gpu.queue().clone(),
        })
    }

    fn check_size(
        gpu: &Gpu,
        kind: BufferKind,
        bytes: u64,
        what: impl FnOnce() -> String,
    ) -> Result<(), GpuError> {
        let limit = match kind {
            BufferKind::Storage => storage_limit(gpu),
            BufferKind::Uniform => gpu
                .limits()
                .max_uniform_buffer_binding_size
                .min(gpu.limits().max_buffer_size),
        };
        if granular(bytes) > limit {
            return Err(GpuError::BufferTooLarge {
                what: what(),
                bytes,
                limit,
            });
        }
        Ok(())
    }

    /// The first `len_bytes` bytes of the buffer (at most its [`len_bytes`](Self::len_bytes)),
    /// as a handle of the same memory: a workspace's buffer lent as a smaller one. Bindings
    /// still bind the whole wgpu buffer.
    pub(crate) fn prefix(&self, len_bytes: u64) -> GpuBuffer {
        debug_assert!(len_bytes <= self.len_bytes);
        Self {
            len_bytes: len_bytes.min(self.len_bytes),
            ..self.clone()
        }
    }

    /// The wgpu buffer (possibly padded past [`GpuBuffer::len_bytes`], to a multiple of 16
    /// bytes).
    pub fn buffer(&self) -> &wgpu::Buffer {
        self.lease.buffer()
    }

    /// The size of the wgpu buffer in bytes: [`len_bytes`](Self::len_bytes) rounded up to 16.
    pub fn capacity_bytes(&self) -> u64 {
        self.lease.size()
    }

    /// Whether `self` and `other` are handles of the same GPU memory.
    pub fn same_memory(&self, other: &GpuBuffer) -> bool {
        Arc::ptr_eq(&self.lease, &other.lease)
    }

    /// The buffer's logical length in bytes.
    pub fn len_bytes(&self) -> u64 {
        self.len_bytes
    }

    /// Whether the buffer holds no bytes.
    pub fn is_empty(&self) -> bool {
        self.len_bytes == 0
    }

    /// Storage or uniform.
    pub fn kind(&self) -> BufferKind {
        self.kind
    }

    /// Overwrites the whole buffer with `data`, which must be exactly
    /// [`GpuBuffer::len_bytes`] long. The write is ordered before later dispatches.
    pub fn write<T: bytemuck::Pod>(&self, data: &[T]) -> Result<(), GpuError> {
        let bytes: &[u8] = bytemuck::cast_slice(data);
        if bytes.len() as u64 != self.len_bytes {
            return Err(GpuError::bad_input(
                "GpuBuffer::write",
                format!(
                    "the buffer holds {} bytes but {} bytes were given",
                    self.len_bytes,
                    bytes.len()
                ),
            ));
        }
        if bytes.is_empty() {
            return Ok(());
        }
        scoped(
            &self.device,
            || format!("a write of {} bytes to a buffer", bytes.len()),
            || write_padded(&self.queue, self.buffer(), bytes),
        )
    }

    /// Copies the buffer back to the CPU as elements of `T`, waiting for the GPU work queued so
    /// far. The buffer's length must be a multiple of `size_of::<T>()`.
    pub fn read_back<T: bytemuck::Pod>(&self) -> Result<Vec<T>, GpuError> {
        let mut all = Self::read_back_all::<T>(&[self])?;
        Ok(all.pop().unwrap_or_default())
    }

    /// Copies several buffers of one device back to the CPU in one submission and one wait
    /// (one round trip where [`read_back`](Self::read_back) takes one each), as elements of
    /// `T`; every buffer's length must be a multiple of `size_of::<T>()`.
    pub fn read_back_all<T: bytemuck::Pod>(
        buffers: &[&GpuBuffer],
    ) -> Result<Vec<Vec<T>>, GpuError> {
        let size = std::mem::size_of::<T>() as u64;
        let Some(first) = buffers.first() else {
            return Ok(Vec::new());
        };
        let what = || {
            format!(
                "{} buffers as {}",
                buffers.len(),
                std::any::type_name::<T>()
            )
        };
        if size == 0 {
            return Err(GpuError::bad_input(
                "GpuBuffer::read_back_all",
                "a type of no bytes",
            ));
        }
        if let Some(b) = buffers.iter().find(|b| !b.len_bytes.is_multiple_of(size)) {
            return Err(GpuError::bad_input(
                "GpuBuffer::read_back_all",
                format!(
                    "a buffer holds {} bytes, not a whole number of {} ({size} bytes)",
                    b.len_bytes,
                    std::any::type_name::<T>()
                ),
            ));
        }
        if buffers.iter().any(|b| !b.device.eq(&first.device)) {
            return Err(GpuError::bad_input(
                "GpuBuffer::read_back_all",
                "the buffers are on different devices",
            ));
        }
        // Each buffer's place in the staging buffer: copies start at multiples of 4 bytes.
        let mut starts = Vec::with_capacity(buffers.len());
        let mut end = 0;
        for b in buffers {
            starts.push(end);
            end += padded(b.len_bytes);
        }
        let staging = scoped(&first.device, what, || {
            let staging = first.device.create_buffer(&wgpu::BufferDescriptor {
                label: Some("fblayout read-back"),
                size: end,
                usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
                mapped_at_creation: false,
            });
            let mut encoder =
                first
                    .device
                    .create_command_encoder(&wgpu::CommandEncoderDescriptor {
                        label: Some("read-back"),
                    });
            for (b, &at) in buffers.iter().zip(&starts) {
                if b.len_bytes > 0 {
                    encoder.copy_buffer_to_buffer(b.buffer(), 0, &staging, at, padded(b.len_bytes));
                }
            }
            first.queue.submit([encoder.finish()]);
            staging
        })?;
        let bytes: Vec<u8> = map_read(&first.device, &staging, end as usize, what)?;
        Ok(buffers
            .iter()
            .zip(&starts)
            .map(|(b, &at)| {
                let at = at as usize;
                bytemuck::pod_collect_to_vec(&bytes[at..at + b.len_bytes as usize])
            })
            .collect())
    }
}

/// Maps `staging` (a `MAP_READ` buffer) once the work queued so far is done and reads its
/// first `len` bytes as `T`s.
pub(crate) fn map_read<T: bytemuck::Pod>(
    device: &wgpu::Device,
    staging: &wgpu::Buffer,
    len: usize,
    what: impl Fn() -> String,
) -> Result<Vec<T>, GpuError> {
    let (sender, receiver) = mpsc::channel();
    staging.map_async(wgpu::MapMode::Read, .., move |result| {
        // The receiver only goes away if this function already returned an error.
        let _ = sender.send(result);
    });
    let map_err = |message: String| GpuError::Map {
        what: what(),
        message,
    };
    device
        .poll(wgpu::PollType::wait_indefinitely())
        .map_err(|err| map_err(err.to_string()))?;
    receiver
        .recv()
        .map_err(|_| map_err("the map callback never ran".to_string()))?
        .map_err(|err| map_err(err.to_string()))?;
    let values = {
        let view = staging
            .get_mapped_range(..)
            .map_err(|err| map_err(err.to_string()))?;
        bytemuck::pod_collect_to_vec(&view[..len])
    };
    staging.unmap();
    Ok(values)
}

fn usage(kind: BufferKind) -> wgpu::BufferUsages {
    let bind = match kind {
        BufferKind::Storage => wgpu::BufferUsages::STORAGE,
        BufferKind::Uniform => wgpu::BufferUsages::UNIFORM,
    };
    bind | wgpu::BufferUsages::COPY_SRC | wgpu::BufferUsages::COPY_DST
}

fn storage_limit(gpu: &Gpu) -> u64 {
    gpu.limits()
        .max_storage_buffer_binding_size
        .min(gpu.limits().max_buffer_size)
}

pub(crate) fn checked_bytes<T>(len: usize) -> Option<u64> {
    len.checked_mul(std::mem::size_of::<T>())
        .and_then(|b| u64::try_from(b).ok())
}

/// `queue.write_buffer` needs a multiple of 4 bytes; pads a copy when `bytes` is not.
fn write_padded(queue: &wgpu::Queue, buffer: &wgpu::Buffer, bytes: &[u8]) {
    if (bytes.len() as u64).is_multiple_of(wgpu::COPY_BUFFER_ALIGNMENT) {
        queue.write_buffer(buffer, 0, bytes);
    } else {
        let mut copy = bytes.to_vec();
        copy.resize(padded(bytes.len() as u64) as usize, 0);
        queue.write_buffer(buffer, 0, &copy);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn padding_is_aligned_and_never_empty() {
        assert_eq!(padded(0), 4);
        assert_eq!(padded(1), 4);
        assert_eq!(padded(4), 4);
        assert_eq!(padded(5), 8);
        assert_eq!(padded(4096), 4096);
    }

    #[test]
    fn byte_counts_do_not_overflow() {
        assert_eq!(checked_bytes::<u32>(10), Some(40));
        assert_eq!(checked_bytes::<u64>(usize::MAX), None);
    }
}
