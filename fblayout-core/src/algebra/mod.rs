//! CuTe-style layout algebra.
//!
//! A [`Layout`] is a function from coordinates to offsets, written as a hierarchical shape and
//! a congruent stride: `(4,(2,3)):(2,(1,8))`. Shapes, strides and coordinates are
//! [`IntTuple`]s whose leaves are [`Int`]s, each static (fixed when the layout is declared) or
//! dynamic (known at run time) but always carrying its value. Every layout is also a function
//! of a single 1-D index (coordinates are read colexicographically), and the algebra is built
//! on that view, following NVIDIA CuTe:
//!
//! * [`coalesce`]: the simplest layout with the same 1-D function;
//! * [`composition`] `A ∘ B`: the layout of `i ↦ A(B(i))`, when that is a layout;
//! * [`complement`]: the layout of the offsets a layout leaves out of a range;
//! * [`logical_divide`], [`zipped_divide`], [`tiled_divide`]: `A ∘ (B, B*)`, a layout split into
//!   a tile and the layout of the tiles;
//! * [`logical_product`], [`blocked_product`], [`raked_product`]: a layout repeated according to
//!   another;
//! * [`right_inverse`], [`left_inverse`]: undoing a layout on indices.
//!
//! Operations take layouts by reference and return new ones. Where an input can make an
//! operation undefined they return [`AlgebraError`], whose message names the mode and value at
//! fault; nothing here panics on bad input. Staticness travels with the arithmetic, so a layout
//! built only from static integers stays static under every operation. Structural decisions
//! (merging modes, divisibility) are made on values, so a result computed from dynamic values
//! is the right layout for those values.

mod coalesce;
mod complement;
mod composition;
mod divide;
mod error;
mod int_tuple;
mod inverse;
mod layout;
mod product;

pub use coalesce::{coalesce, coalesce_by_mode, coalesce_with_profile};
pub use complement::complement;
pub use composition::{Tiler, composition, composition_by_mode};
pub use divide::{logical_divide, tiled_divide, zipped_divide};
pub use error::{AlgebraError, Inadmissible};
pub use int_tuple::{
    Int, IntTuple, crd2idx, exclusive_prefix_product, exclusive_suffix_product, idx2crd,
    inner_product, shape_div, shape_mod,
};
pub use inverse::{left_inverse, right_inverse};
pub use layout::Layout;
pub use product::{blocked_product, logical_product, raked_product};
