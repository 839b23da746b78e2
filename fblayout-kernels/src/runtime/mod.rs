//! The wgpu runtime that fblayout's kernels run on.
//!
//! - [`Gpu`]: a device and queue on an adapter picked by [`AdapterChoice`] (from
//!   `FBLAYOUT_ADAPTER`/`FBLAYOUT_BACKEND`), with the optional [`features`] it has (each can be
//!   turned off: [`Disabled`]), a pipeline cache in memory and, where the backend has one, on
//!   disk ([`CacheLoad`] says what happened to the file).
//! - [`GpuBuffer`]: storage and uniform buffers from the device's pool (freed memory is reused:
//!   [`PoolStats`]), read back with [`GpuBuffer::read_back`].
//! - [`Batch`]: many dispatches of [`KernelModule`](fblayout_core::kernel::KernelModule)s,
//!   copies and clears, one submission; [`Batch::submit_timed`] times each dispatch.
//!   [`Batch::finish`] makes it a [`Recording`], submitted again without recording again.
//! - [`Scratch`]: the buffers a kernel takes while it runs ([`Batch::scratch`]), which each
//!   kernel reports for its operands; a [`Workspace`] lends them to every piece of work of a
//!   batch in turn.
//! - [`Gpu::dispatch`] / [`Gpu::dispatch_linear`]: run one entry point of a validated
//!   [`WgslModule`](fblayout_core::shader::WgslModule) with [`Binding`]s, submitted at once.
//! - [`GpuError`]: everything that can go wrong, including wgpu validation errors caught in
//!   error scopes.
//!
//! ```no_run
//! use fblayout_core::shader::WgslModule;
//! use fblayout_kernels::runtime::{Binding, Gpu, GpuBuffer};
//!
//! let gpu = Gpu::new()?;
//! println!("running on {}", gpu.info());
//! let module = WgslModule::validate(
//!     "double",
//!     "@group(0) @binding(0) var<storage, read_write> data: array<u32>;
//!      @compute @workgroup_size(64)
//!      fn main(@builtin(global_invocation_id) id: vec3<u32>) {
//!          if (id.x < arrayLength(&data)) { data[id.x] = data[id.x] * 2u; }
//!      }",
//! )?;
//! let data = GpuBuffer::from_slice(&gpu, &[1u32, 2, 3])?;
//! gpu.dispatch(&module, "main", &[Binding::new(0, &data)], [1, 1, 1])?;
//! assert_eq!(data.read_back::<u32>()?, vec![2, 4, 6]);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod batch;
mod buffer;
mod choice;
mod disk_cache;
mod dispatch;
mod error;
pub mod features;
// The one module allowed `unsafe` code (see its docs); the workspace denies it elsewhere.
#[allow(unsafe_code)]
mod gated;
mod gpu;
mod pool;
mod scratch;
pub(crate) mod threads;

pub use batch::{Batch, Encoded, Recording, Timing};
pub use buffer::{BufferKind, GpuBuffer};
pub use choice::{ADAPTER_ENV, AdapterChoice, BACKEND_ENV};
pub use disk_cache::{CacheLoad, DiskCache, default_cache_dir};
pub use dispatch::{Binding, CompileStats, linear_grid};
pub use error::GpuError;
pub use features::{CoopFragment, CoopFragments, CoopScalar, Disabled, GpuFeatures};
pub use gpu::{Gpu, GpuInfo, GpuOptions, MAX_WORKGROUPS_PER_DIMENSION};
pub use pool::{GRANULE, PoolStats, granular};
pub use scratch::{Scratch, Workspace};
