//! wgpu runtime and compute kernels written against fblayout layouts, with a CPU backend.
//!
//! - [`runtime`]: the [`Gpu`] handle (adapter choice, optional features with fallbacks, a
//!   pipeline cache kept on disk), pooled [`GpuBuffer`]s, and [`Batch`](runtime::Batch)es that
//!   record many dispatches of naga-validated kernels for one submission.
//! - [`tensor`]: typed tensors on the GPU and the CPU ([`GpuTensor`](tensor::GpuTensor),
//!   [`CpuTensor`](tensor::CpuTensor)) and the arguments kernels take.
//! - [`ops`]: the kernels of fine-tuning, forward and backward, each with a CPU twin.
//! - [`cpu`]: the CPU backend's addressing and element types.
//! - [`probe`]: evaluates a layout's WGSL `<name>_offset`/`<name>_in_bounds` functions on the GPU
//!   for every coordinate of a shape, so tests can compare them with the CPU path.
//! - [`gather`]: materialises a view as a dense row-major tensor.
//! - [`entry_point`]: a compute entry point over a linear index, the row-major decode of that
//!   index into a coordinate, and the workgroups to dispatch: what every kernel here that walks
//!   a shape is written with, public for kernels of your own; their operands come from the
//!   core's kernel surface ([`fblayout_core::kernel`]).
//!
//! The GPU is chosen with `FBLAYOUT_ADAPTER` (a substring of the adapter name) and
//! `FBLAYOUT_BACKEND` (`vulkan`, `metal`, `dx12`, `gl`, `all`); `FBLAYOUT_DISABLE` turns
//! optional features off and `FBLAYOUT_CACHE_DIR` says where compiled pipelines are kept.
//! Without a GPU, Mesa's lavapipe (`apt-get install mesa-vulkan-drivers`) runs everything on
//! the CPU.

pub mod cpu;
pub mod entry_point;
pub mod gather;
pub mod ops;
pub mod probe;
pub mod runtime;
pub mod tensor;
mod wgsl;

pub use gather::Gather;
pub use probe::{ProbeRequest, probe_offsets};
pub use runtime::{AdapterChoice, Binding, Gpu, GpuBuffer, GpuError};

/// What the crate's own tests and snapshots need beyond its API (the cooperative GEMM's WGSL
/// without a device): no stable interface, and no part of the public surface.
#[doc(hidden)]
pub mod __private {
    pub use crate::ops::attention::flash::tensor::kernel_sources as flash_tensor_kernel_sources;
    pub use crate::ops::coop::sources::{
        added_kernel_source, added_reduce_kernel_source, biased_kernel_source,
        biased_reduce_kernel_source, kernel_source, reduce_kernel_source, staging_orders,
    };
}
