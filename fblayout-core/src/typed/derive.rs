//! What the code `#[derive(Tensor)]` generates calls, and nothing else should.
//!
//! The facade re-exports this module as `fblayout::__private` (hidden, as serde does with its
//! own): these functions skip checks that the derive made while it expanded.

use super::coord::{Tensor, bindings};
use super::declare::{TensorDescriptor, ViewSpec};
use super::index::{Ix, Len};
use crate::layout::{LayoutAxis, LayoutError, LayoutSpec};

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

/// The run-time extents of `T` as the `N` `u32`s of its WGSL extents struct, in axis order,
/// after [`Tensor::check_extents`]' checks (each extent within `u32`, among them).
///
/// The generated `gpu_extents` passes the number of run-time axes as `N`; another `N` is an
/// error, not a panic.
pub fn gpu_extents<T: Tensor, const N: usize>(
    extents: T::Extents,
) -> Result<[u32; N], LayoutError> {
    T::check_extents(extents)?;
    let bindings = bindings::<T>(extents)?;
    if bindings.len() != N {
        return Err(LayoutError::Bind {
            tensor: T::NAME.to_owned(),
            detail: format!(
                "{} run-time extents for a struct of {N} (a bug in the derive; please report it)",
                bindings.len()
            ),
        });
    }
    let mut words = [0; N];
    for (word, (_, value)) in words.iter_mut().zip(bindings) {
        *word = value;
    }
    Ok(words)
}
