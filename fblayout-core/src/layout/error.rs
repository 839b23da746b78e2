//! Errors in layout and view descriptions.
//!
//! Every invalid description gets a [`LayoutError`] whose message names the tensor, view, axis
//! or extent at fault and, where it helps, says what would be accepted. Checks run to the end
//! and report every problem at once ([`LayoutErrors`]), so the macros can point at each bad
//! token in one compile. [`LayoutError::site`] says which part of the description is at fault.

use std::fmt;

use super::elem::ElemType;

/// The largest number of elements a layout may address: WGSL indexes with `u32`.
pub const MAX_ELEMENTS: u64 = u32::MAX as u64;

/// Which reduction list an axis was named in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Pass {
    /// Reductions of the forward pass.
    Forward,
    /// Reductions of the backward pass.
    Backward,
}

impl fmt::Display for Pass {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Forward => "forward",
            Self::Backward => "backward",
        })
    }
}

/// The part of a description an error points at (the macros map it to the user's tokens).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Site {
    /// The tensor as a whole.
    Tensor,
    /// The element type.
    Elem,
    /// An axis declaration (its name or extent).
    Axis(String),
    /// The tile of an axis.
    Tile(String),
    /// An axis named in a reduction list.
    Reduction(Pass, String),
    /// A reduction list as a whole.
    Pass(Pass),
    /// The consent to pad an axis.
    Pad(String),
    /// A view, or an axis named inside it.
    View {
        /// The view's name.
        view: String,
        /// The axis named in the view, if the error is about one.
        axis: Option<String>,
    },
}

/// One problem with a layout or view description.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LayoutError {
    /// A name can't be emitted into Rust and WGSL.
    #[error("{what} name `{name}` can't be used: {why}")]
    BadName {
        /// `tensor`, `axis` or `view`.
        what: &'static str,
        /// The name.
        name: String,
        /// Why not.
        why: &'static str,
        /// Where.
        site: Site,
    },
    /// A tensor without axes.
    #[error("tensor `{tensor}` declares no axes; a tensor needs at least one")]
    NoAxes {
        /// The tensor.
        tensor: String,
    },
    /// `tile` was called on a builder with no axis to apply it to.
    #[error(
        "tensor `{tensor}` sets a tile before declaring any axis; `tile` applies to the axis added just before it"
    )]
    TileBeforeAxis {
        /// The tensor.
        tensor: String,
    },
    /// Two axes share a name.
    #[error("axis `{axis}` of tensor `{tensor}` is declared twice")]
    DuplicateAxis {
        /// The tensor.
        tensor: String,
        /// The repeated axis.
        axis: String,
    },
    /// An extent of zero.
    #[error("axis `{axis}` of tensor `{tensor}` has extent 0; extents must be at least 1")]
    ZeroExtent {
        /// The tensor.
        tensor: String,
        /// The axis.
        axis: String,
    },
    /// The buffer would not fit WGSL's `u32` index space.
    #[error(
        "tensor `{tensor}` would hold {elements} elements (padding included) once axis `{axis}` is counted, more than the {MAX_ELEMENTS} a u32 index can address"
    )]
    Overflow {
        /// The tensor.
        tensor: String,
        /// The axis at which the size overflowed.
        axis: String,
        /// The size reached (saturating).
        elements: u128,
    },
    /// A tile of zero.
    #[error("axis `{axis}` of tensor `{tensor}` has tile 0; a tile must be at least 1")]
    ZeroTile {
        /// The tensor.
        tensor: String,
        /// The axis.
        axis: String,
    },
    /// A tile larger than its static axis: rejected.
    #[error(
        "tile {tile} of axis `{axis}` is larger than its extent {extent} in tensor `{tensor}`; rejected: a tile must fit its axis (use a tile of at most {extent})"
    )]
    TileTooLarge {
        /// The tensor.
        tensor: String,
        /// The axis.
        axis: String,
        /// The tile.
        tile: u32,
        /// The extent.
        extent: u32,
    },
    /// A tile that doesn't divide its static axis, with no `pad` consent.
    #[error(
        "tile {tile} does not divide extent {extent} of axis `{axis}` in tensor `{tensor}`; it would be padded to {padded}: add `pad` to the axis to accept the padding, or choose a tile that divides {extent}"
    )]
    TileNeedsPad {
        /// The tensor.
        tensor: String,
        /// The axis.
        axis: String,
        /// The tile.
        tile: u32,
        /// The extent.
        extent: u32,
        /// The padded extent.
        padded: u64,
    },
    /// A tile on a layout that isn't tiled.
    #[error(
        "axis `{axis}` of tensor `{tensor}` has a tile, but the tensor is {order}; tiles belong to `rtile` layouts"
    )]
    TileWithoutRTile {
        /// The tensor.
        tensor: String,
        /// The axis.
        axis: String,
        /// The layout order.
        order: &'static str,
    },
    /// `pad` on an axis without a tile: there is nothing to pad.
    #[error(
        "`pad` accepts the padding of a tile, but axis `{axis}` of tensor `{tensor}` has no tile; add `tile = n` or remove `pad`"
    )]
    PadWithoutTile {
        /// The tensor.
        tensor: String,
        /// The axis.
        axis: String,
    },
    /// Reduction axes on a layout that isn't R-Tile: only R-Tile lays tensors out for them.
    #[error(
        "tensor `{tensor}` names {pass} reduction axes, but it is {order}, which stores it the same whatever is reduced; use `layout = rtile` to tile the reduction axes, or remove `reduce(...)`"
    )]
    ReductionWithoutRTile {
        /// The tensor.
        tensor: String,
        /// The first pass that names axes.
        pass: Pass,
        /// The layout order.
        order: &'static str,
    },
    /// A reduction over an axis the tensor doesn't have.
    #[error(
        "{pass} reduction names axis `{axis}`, which tensor `{tensor}` doesn't declare (its axes: {known})"
    )]
    UnknownReductionAxis {
        /// The tensor.
        tensor: String,
        /// The pass.
        pass: Pass,
        /// The unknown axis.
        axis: String,
        /// The declared axes, comma-separated.
        known: String,
    },
    /// An axis named twice in one reduction list.
    #[error("{pass} reduction of tensor `{tensor}` names axis `{axis}` twice")]
    DuplicateReductionAxis {
        /// The tensor.
        tensor: String,
        /// The pass.
        pass: Pass,
        /// The axis.
        axis: String,
    },
    /// An R-Tile with nothing to tile.
    #[error(
        "tensor `{tensor}` is an rtile layout but declares no reduction axes and no tiles; name the axes it is reduced over (forward and backward), or use row_major"
    )]
    RTileWithoutReduction {
        /// The tensor.
        tensor: String,
    },
    /// An element type WGSL can't store.
    #[error("tensor `{tensor}` has element type {elem}, which WGSL can't store: {why}")]
    UnsupportedElem {
        /// The tensor.
        tensor: String,
        /// The element type.
        elem: ElemType,
        /// Why not.
        why: &'static str,
    },
    /// Two generated parameter names collide.
    #[error(
        "in tensor `{tensor}`, the run-time extent of axis `{axis}` is passed as `{name}`, which is also an axis name; rename one of them"
    )]
    NameClash {
        /// The tensor.
        tensor: String,
        /// The dynamic axis.
        axis: String,
        /// The clashing parameter name.
        name: String,
    },
    /// A view names an axis that isn't there.
    #[error(
        "view `{view}` names axis `{axis}`, which is not an axis of what it views (axes: {known})"
    )]
    UnknownViewAxis {
        /// The view.
        view: String,
        /// The unknown axis.
        axis: String,
        /// The axes available, comma-separated.
        known: String,
    },
    /// A permutation that doesn't name every axis exactly once.
    #[error("view `{view}` permutes to ({given}), which is not an order of the axes ({expected})")]
    NotAPermutation {
        /// The view.
        view: String,
        /// The order given.
        given: String,
        /// The axes available.
        expected: String,
    },
    /// A view would have two axes of one name.
    #[error("view `{view}` would have two axes named `{axis}`")]
    DuplicateViewAxis {
        /// The view.
        view: String,
        /// The repeated axis.
        axis: String,
    },
    /// A split or merge whose sizes don't multiply out.
    #[error(
        "view `{view}` reshapes {from} into {into}, but the sizes don't multiply out: {detail}"
    )]
    ReshapeMismatch {
        /// The view.
        view: String,
        /// What is reshaped (axes and extents).
        from: String,
        /// What it becomes.
        into: String,
        /// The arithmetic that fails.
        detail: String,
    },
    /// Axes to merge that aren't adjacent in the view's order.
    #[error("view `{view}` merges ({axes}), but they are not adjacent and in order; permute first")]
    MergeNotAdjacent {
        /// The view.
        view: String,
        /// The axes.
        axes: String,
    },
    /// A slice outside its axis.
    #[error("view `{view}` slices axis `{axis}` at {start}..{end}, outside its extent {extent}")]
    SliceOutOfRange {
        /// The view.
        view: String,
        /// The axis.
        axis: String,
        /// First index.
        start: u32,
        /// One past the last index.
        end: u64,
        /// The axis extent.
        extent: String,
    },
    /// A slice that keeps nothing.
    #[error("view `{view}` slices axis `{axis}` to length 0; a slice keeps at least one index")]
    EmptySlice {
        /// The view.
        view: String,
        /// The axis.
        axis: String,
    },
    /// A broadcast axis placed past the end of the view's axes.
    #[error(
        "view `{view}` broadcasts `{axis}` at position {at}, but it has only {rank} axes (positions 0..={rank})"
    )]
    BroadcastPosition {
        /// The view.
        view: String,
        /// The new axis.
        axis: String,
        /// The position asked for.
        at: usize,
        /// The view's rank before the broadcast.
        rank: usize,
    },
    /// A view axis named like the parameter that carries a run-time extent.
    #[error(
        "view `{view}` names an axis `{axis}`, but that is the parameter carrying the run-time extent of axis `{extent_of}`; choose another name"
    )]
    ViewNameClash {
        /// The view.
        view: String,
        /// The new axis.
        axis: String,
        /// The run-time axis whose extent parameter it clashes with.
        extent_of: String,
    },
    /// A view axis longer than a `u32` coordinate can run.
    #[error(
        "view `{view}` has axis `{axis}` of extent {extent}, more than the {MAX_ELEMENTS} a u32 coordinate can address"
    )]
    ViewAxisTooLong {
        /// The view.
        view: String,
        /// The axis.
        axis: String,
        /// Its extent (saturating).
        extent: u128,
    },
    /// A run-time extent that was not supplied, or was zero, or overflowed.
    #[error("binding tensor `{tensor}`: {detail}")]
    Bind {
        /// The tensor.
        tensor: String,
        /// What is wrong.
        detail: String,
    },
}

impl LayoutError {
    /// The part of the description this error points at.
    pub fn site(&self) -> Site {
        match self {
            Self::BadName { site, .. } => site.clone(),
            Self::NoAxes { .. }
            | Self::TileBeforeAxis { .. }
            | Self::RTileWithoutReduction { .. }
            | Self::Bind { .. } => Site::Tensor,
            Self::ReductionWithoutRTile { pass, .. } => Site::Pass(*pass),
            Self::UnsupportedElem { .. } => Site::Elem,
            Self::DuplicateAxis { axis, .. }
            | Self::ZeroExtent { axis, .. }
            | Self::Overflow { axis, .. }
            | Self::NameClash { axis, .. } => Site::Axis(axis.clone()),
            Self::ZeroTile { axis, .. }
            | Self::TileTooLarge { axis, .. }
            | Self::TileNeedsPad { axis, .. }
            | Self::TileWithoutRTile { axis, .. } => Site::Tile(axis.clone()),
            Self::PadWithoutTile { axis, .. } => Site::Pad(axis.clone()),
            Self::UnknownReductionAxis { pass, axis, .. }
            | Self::DuplicateReductionAxis { pass, axis, .. } => {
                Site::Reduction(*pass, axis.clone())
            }
            Self::UnknownViewAxis { view, axis, .. }
            | Self::DuplicateViewAxis { view, axis }
            | Self::SliceOutOfRange { view, axis, .. }
            | Self::EmptySlice { view, axis }
            | Self::BroadcastPosition { view, axis, .. }
            | Self::ViewNameClash { view, axis, .. }
            | Self::ViewAxisTooLong { view, axis, .. } => Site::View {
                view: view.clone(),
                axis: Some(axis.clone()),
            },
            Self::NotAPermutation { view, .. }
            | Self::ReshapeMismatch { view, .. }
            | Self::MergeNotAdjacent { view, .. } => Site::View {
                view: view.clone(),
                axis: None,
            },
        }
    }
}

/// Every problem found in one description (never empty).
pub type LayoutErrors = crate::ErrorList<LayoutError>;
