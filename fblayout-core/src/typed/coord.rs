//! Typed coordinates, run-time extents and declared tensors.

use std::fmt;
use std::marker::PhantomData;

use super::declare::TensorDescriptor;
use crate::layout::{BoundView, LayoutError, View};
use crate::shader::WgslModule;

/// The run-time extents of a tensor: one `usize` per axis declared `dyn`.
///
/// The derive generates a struct with one field per run-time axis (or a unit struct when every
/// extent is static); the offset functions of the tensor and all its views take it.
pub trait Extents: Copy + fmt::Debug + Send + Sync + 'static {
    /// The run-time axes, in the tensor's axis order.
    const AXES: &'static [&'static str];

    /// Their values, in the same order.
    fn values(&self) -> Vec<usize>;
}

/// The `(axis, extent)` pairs that [`View::bind`] takes, for the extents of tensor `T`.
///
/// Fails when an extent does not fit a `u32` (WGSL indexes with `u32`).
pub fn bindings<T: Tensor>(extents: T::Extents) -> Result<Vec<(&'static str, u32)>, LayoutError> {
    <T::Extents as Extents>::AXES
        .iter()
        .zip(extents.values())
        .map(|(&axis, value)| {
            u32::try_from(value)
                .map(|v| (axis, v))
                .map_err(|_| LayoutError::Bind {
                    tensor: T::NAME.to_owned(),
                    detail: format!("run-time extent {value} of axis `{axis}` does not fit a u32"),
                })
        })
        .collect()
}

/// No run-time extents.
impl Extents for () {
    const AXES: &'static [&'static str] = &[];

    fn values(&self) -> Vec<usize> {
        Vec::new()
    }
}

/// A typed coordinate of a tensor or of one of its views.
///
/// The derive implements it for the tensor's struct and for each view struct. The generated
/// types also have inherent `const fn`s of the same names (`offset`, `in_bounds`, `shape`),
/// which work in `const` contexts; these trait methods call them, for generic code.
pub trait Coord: Copy + 'static {
    /// The tensor whose buffer this coordinate addresses.
    type Tensor: Tensor;
    /// One `usize` per axis (`[usize; RANK]`).
    type Indices: Copy + fmt::Debug + Eq + AsRef<[usize]>;
    /// One typed extent ([`Len`](super::Len)) per axis: the generated `<Coord>Shape` struct,
    /// whose fields are named after the axes.
    type Shape: Copy + fmt::Debug + Eq;

    /// The view's name (the tensor's own name for the tensor itself); the WGSL functions are
    /// `<NAME>_offset` and `<NAME>_in_bounds`.
    const NAME: &'static str;
    /// The axis names, in coordinate order.
    const AXES: &'static [&'static str];
    /// The number of axes.
    const RANK: usize = Self::AXES.len();
    /// The name of the WGSL offset function in [`Tensor::WGSL`].
    const OFFSET_FN: &'static str;
    /// The name of the WGSL bounds-mask function in [`Tensor::WGSL`].
    const IN_BOUNDS_FN: &'static str;

    /// The coordinate as plain indices, in axis order.
    fn indices(&self) -> Self::Indices;

    /// The coordinate with these indices, or `None` when there are not exactly `RANK`.
    fn from_indices(indices: &[usize]) -> Option<Self>;

    /// The offset of this coordinate in the tensor's buffer (meaningful when it is in bounds).
    fn offset(&self, extents: <Self::Tensor as Tensor>::Extents) -> usize;

    /// Whether this coordinate lies inside the view (padding does not).
    fn in_bounds(&self, extents: <Self::Tensor as Tensor>::Extents) -> bool;

    /// The extent of each axis, typed, given the run-time extents.
    fn shape(extents: <Self::Tensor as Tensor>::Extents) -> Self::Shape;

    /// The extent of each axis as plain numbers, in axis order.
    fn dims(extents: <Self::Tensor as Tensor>::Extents) -> Self::Indices;

    /// The view this coordinate indexes, from the tensor's descriptor.
    fn view() -> &'static View;

    /// Binds the run-time extents: the untyped CPU path over the same view.
    fn bind(extents: <Self::Tensor as Tensor>::Extents) -> Result<BoundView, LayoutError> {
        Self::view().bind(&bindings::<Self::Tensor>(extents)?)
    }
}

/// A declared tensor: the coordinate of its layout, with extents, WGSL and a descriptor.
pub trait Tensor: Coord<Tensor = Self> {
    /// The run-time extents.
    type Extents: Extents;

    /// The WGSL of the tensor and all its views, validated by naga when the derive expanded:
    /// the struct `<name>_extents` of the run-time extents (when there are any), the
    /// constants `<NAME>_<AXIS>_EXTENT` of each static extent and `<NAME>_<AXIS>_TILE` of each
    /// axis (see `axis_consts`), `<name>_offset`/`<name>_in_bounds` for
    /// the tensor and each view, and for R-Tile layouts the tile helpers
    /// `<name>_tile_offset`/`<name>_tile_in_bounds` and the constant `<NAME>_TILE_ELEMS`.
    const WGSL: &'static str;

    /// The number of elements in one tile (1 unless R-Tile); a tile is contiguous.
    const TILE_ELEMS: usize;

    /// The runtime descriptor: layout, views and validated WGSL (for a derived tensor, built
    /// from what the derive checked, without checking it again).
    fn descriptor() -> &'static TensorDescriptor;

    /// The buffer length in elements, padding included.
    fn len(extents: Self::Extents) -> usize;

    /// [`WGSL`](Self::WGSL) as naga's validated module, to splice into kernels (naga runs on
    /// the first call; see [`TensorDescriptor::wgsl_module`]).
    fn wgsl_module() -> &'static WgslModule {
        Self::descriptor().wgsl_module()
    }

    /// Checks run-time extents before a buffer is sized or indexed with them, as
    /// [`View::bind`] does: each extent non-zero and within `u32`, divided by its tile unless
    /// the axis was declared with `pad`, and the buffer within the u32 index space. Returns
    /// the buffer length. The `const fn` offsets assume extents that passed this check.
    fn check_extents(extents: Self::Extents) -> Result<usize, LayoutError> {
        let bindings = bindings::<Self>(extents)?;
        Self::descriptor()
            .layout
            .check_extents(&bindings)
            .map(|len| len as usize)
    }
}

/// Iterates over every coordinate of `C`'s shape, row-major (last axis fastest).
pub fn each<C: Coord>(extents: <C::Tensor as Tensor>::Extents) -> Each<C> {
    let shape: Vec<usize> = C::dims(extents).as_ref().to_vec();
    let done = shape.contains(&0);
    Each {
        current: vec![0; shape.len()],
        shape,
        done,
        coord: PhantomData,
    }
}

/// The iterator of [`each`].
#[derive(Debug, Clone)]
pub struct Each<C> {
    shape: Vec<usize>,
    current: Vec<usize>,
    done: bool,
    coord: PhantomData<fn() -> C>,
}

impl<C: Coord> Iterator for Each<C> {
    type Item = C;

    fn next(&mut self) -> Option<C> {
        if self.done {
            return None;
        }
        let item = C::from_indices(&self.current);
        self.done = true;
        for d in (0..self.shape.len()).rev() {
            self.current[d] += 1;
            if self.current[d] < self.shape[d] {
                self.done = false;
                break;
            }
            self.current[d] = 0;
        }
        item
    }
}
