//! What the code `#[derive(Tensor)]` generates calls, and nothing else should.
//!
//! The facade re-exports this module as `fblayout::__private` (hidden, as serde does with its
//! own): these functions skip checks that the derive made while it expanded.

use super::declare::{TensorDescriptor, ViewSpec};
use super::index::{Ix, Len};
use crate::layout::{LayoutAxis, LayoutSpec};

/// The index `index` along `A`, where the generated code knows `A` from the field it fills.
pub const fn ix<A>(index: usize) -> Ix<A> {
    Ix::raw(index)
}

/// The extent `len` of `A`, where the generated code knows `A` from the field it fills.
pub const fn len<A>(len: usize) -> Len<A> {
    Len::raw(len)
}

/// The descriptor of a declaration the derive checked: see `TensorDescriptor::from_validated`
/// (crate-private).
pub fn descriptor(
    spec: &LayoutSpec,
    axes: Vec<LayoutAxis>,
    views: &[ViewSpec<&str>],
    wgsl: &'static str,
) -> TensorDescriptor {
    TensorDescriptor::from_validated(spec, axes, views, wgsl)
}
