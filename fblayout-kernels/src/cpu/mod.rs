//! The CPU backend's vocabulary: where elements are, and the numbers kernels compute with.
//!
//! Every kernel has a CPU implementation next to its WGSL one. It is the oracle of the GPU
//! tests and the fallback where no GPU is wanted, runs on all cores with rayon, and finds
//! elements the same way the GPU does: through the tensor's layout.
//!
//! - [`Addressing`] maps a logical index (one `usize` per view axis) to the element's place in
//!   the buffer. A tensor declared with `#[derive(Tensor)]` addresses through its generated
//!   `const fn` offsets ([`Typed`]); a layout chosen at run time through a table computed once
//!   from its index function ([`OffsetTable`]).
//! - [`Real`] is an element type the CPU kernels read and write: `f32`, `f64` (for gradient
//!   checks by finite differences) and `f16`. Kernels compute in `f64` whatever the storage, so
//!   the CPU result is the reference a GPU result is compared with.

mod addressing;
mod dense;
mod logical;
mod real;

pub use addressing::{Addressing, OffsetTable, Typed};
pub use dense::Dense;
pub use logical::{Logical, LogicalMut};
pub use real::Real;
