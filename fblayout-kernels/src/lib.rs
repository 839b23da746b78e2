//! wgpu runtime and compute kernels written against fblayout layouts.
//!
//! - [`runtime`]: the [`Gpu`] handle (adapter choice, device, pipeline cache), typed
//!   [`GpuBuffer`]s and a compute dispatch that only takes naga-validated
//!   [`WgslModule`](fblayout_core::shader::WgslModule)s.
//! - [`probe`]: evaluates a layout's WGSL `<name>_offset`/`<name>_in_bounds` functions on the GPU
//!   for every coordinate of a shape, so tests can compare them with the CPU path.
//! - [`gather`]: materialises a view as a dense row-major tensor.
//!
//! Both generate their compute entry points with one private module, `shader`: the storage
//! buffers, the opening of an entry point over a linear index, and the row-major decode of
//! that index into a coordinate.
//!
//! The GPU is chosen with `FBLAYOUT_ADAPTER` (a substring of the adapter name) and
//! `FBLAYOUT_BACKEND` (`vulkan`, `metal`, `dx12`, `gl`, `all`). Without a GPU, Mesa's lavapipe
//! (`apt-get install mesa-vulkan-drivers`) runs everything on the CPU.

pub mod cpu;
mod entry_point;
pub mod gather;
pub mod ops;
pub mod probe;
pub mod runtime;
pub mod tensor;
mod wgsl;

pub use gather::Gather;
pub use probe::{ProbeRequest, probe_offsets};
pub use runtime::{AdapterChoice, Binding, Gpu, GpuBuffer, GpuError};
