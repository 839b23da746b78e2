//! Typed coordinates: the vocabulary that `#[derive(Tensor)]` generates code against.
//!
//! A layout ([`TensorLayout`](crate::layout::TensorLayout)) knows its axes by name. Kernel code should know them by *type*,
//! so that a coordinate of the wrong tensor, or one given in the wrong axis order, does not
//! compile. This module supplies that vocabulary; the derive macros in `fblayout-macros` fill
//! it in for each declared tensor.
//!
//! - An **axis** is a zero-sized marker type implementing [`Axis`] (`struct Seq;`). Its only
//!   job is to be distinct from every other axis type.
//! - An [`Ix<A>`] is an index along axis `A`: a `usize` that remembers which axis it belongs
//!   to. `Ix<Seq>` and `Ix<Hidden>` are different types, so a sequence index cannot be passed
//!   where a hidden index is expected; making one names the axis (`Ix::of(Seq, 3)`), so its
//!   type is never inferred from where it goes. [`Ix::retag`] converts explicitly when a
//!   kernel really means it (a query position used as a key position). A [`Len<A>`] is an
//!   extent along `A`; iterating it yields typed indices.
//! - A **coordinate** is a struct whose fields are `Ix`s, one per axis, implementing [`Coord`].
//!   The struct a tensor is declared on is the coordinate of the tensor itself; each declared
//!   view (a permutation, a split, a merge...) gets its own coordinate struct, whose offsets
//!   address the *same* buffer. A kernel that reads `Xᵀ` names the view type in its signature.
//! - A **tensor** ([`Tensor`]) is the coordinate of a declared layout, with its run-time
//!   extents ([`Extents`]), its naga-validated WGSL ([`Tensor::WGSL`]) and its runtime
//!   [`TensorDescriptor`]: the layout, its views and their WGSL, which the kernel crate and the
//!   planner read. The derive builds that descriptor from what it checked while expanding;
//!   nothing is checked again at run time.
//! - The numbers a declaration holds have one name on both sides (`axis_consts`): each static
//!   extent and each axis's tile are Rust associated constants (`X::HIDDEN_EXTENT`) and WGSL
//!   constants (`X_HIDDEN_EXTENT`); the run-time extents are a WGSL struct
//!   (`x_extents`, [`extents_struct_name`]) whose Rust twin is a plain `[u32; N]`.
//!
//! Views are declared as data (`ViewSpec`, a list of the layout core's
//! [`ViewStep`](crate::layout::ViewStep)s, the one step type a [`View`](crate::layout::View)
//! is also made of) so that the derive can check them while it expands, with exactly the code
//! that later builds the descriptor at run time: [`TensorDescriptor::declare`] is the one place
//! where a declaration becomes a descriptor, and it reports every problem at once
//! ([`DeclareErrors`]).
//!
//! ```
//! use fblayout_core::layout::{LayoutSpec, ViewStep};
//! use fblayout_core::__private::ViewSpec;
//! use fblayout_core::typed::TensorDescriptor;
//!
//! let spec = LayoutSpec::new("x").dyn_axis("tokens").axis("hidden", 8).rtile().reduce_forward(["hidden"]);
//! let views = [ViewSpec { name: "xt", steps: vec![ViewStep::Transpose("tokens", "hidden")] }];
//! let x = TensorDescriptor::declare(&spec, &views)?;
//! assert_eq!(x.view("xt").map(|v| v.axes().len()), Some(2));
//! assert!(x.wgsl().contains("fn xt_offset("));
//! # Ok::<(), fblayout_core::typed::DeclareErrors>(())
//! ```

pub(crate) mod constants;
pub(crate) mod coord;
pub(crate) mod declare;
#[doc(hidden)]
pub mod derive;
mod index;
pub mod suggest;
#[cfg(test)]
mod tests;

pub(crate) use constants::extents_struct_name;
pub use coord::{Coord, Each, Extents, Tensor, each};
pub use declare::{DeclareError, DeclareErrors, TensorDescriptor};
pub use index::{Axis, Ix, IxRange, Len};
