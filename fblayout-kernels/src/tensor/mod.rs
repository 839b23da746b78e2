//! Tensors on the GPU and on the CPU.
//!
//! A kernel takes its operands as *arguments*: a buffer, the view it is read through, and the
//! run-time extents that view is bound to.
//!
//! - [`GpuArg`] and [`HostArg`]/[`HostArgMut`] are the untyped forms, for layouts chosen at run
//!   time (the planner's): a [`View`](fblayout_core::layout::View) and its extents, checked
//!   against the buffer's length when the argument is made.
//! - [`GpuTensor<X>`] and [`CpuTensor<X, T>`] are the typed forms, for tensors declared with
//!   `#[derive(Tensor)]`. Their length is checked against `X::len(extents)` when they are made;
//!   [`GpuTensor::view`] and [`CpuTensor::arg`] accept only `X` itself and the views declared
//!   on `X` (`V: Coord<Tensor = X>`), and a `CpuTensor<X>` is indexed only by coordinates of
//!   `X` and of its views, so `q[k]` with a coordinate `k` of another tensor does not compile.
//!
//! The CPU forms address elements through [`Addressing`](crate::cpu::Addressing): the
//! generated `const fn` offsets for typed tensors, an offset table for run-time layouts.

mod gpu;
mod host;

pub use gpu::{GpuArg, GpuElem, GpuTensor};
pub use host::{CpuTensor, HostArg, HostArgMut};
