//! Layout descriptions, as a kernel author writes them.
//!
//! A [`LayoutSpec`] is plain data: the tensor's name and element type, its axes in logical
//! order (each with a static or run-time [`Extent`], an optional tile and consent to padding),
//! the storage [`Order`] and the axes it is reduced over in the forward and the backward pass.
//! [`LayoutSpec::build`] checks all of it, reports every problem at once, and returns the
//! [`TensorLayout`] that everything else works from. The macros fill a `LayoutSpec` from the
//! attributes on a struct; Rust code can fill one directly or with the builder methods.

use std::collections::HashSet;
use std::fmt;

use super::elem::ElemType;
use super::error::{LayoutError, LayoutErrors, MAX_ELEMENTS, Pass, Site};
use super::tensor::{LayoutAxis, TensorLayout};
use crate::ident::ident_problem;

/// The length of an axis.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Extent {
    /// Known when the layout is declared.
    Static(u32),
    /// Known only at run time (for example a sequence length), supplied when binding.
    Dynamic,
}

impl From<u32> for Extent {
    fn from(n: u32) -> Self {
        Self::Static(n)
    }
}

impl fmt::Display for Extent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Static(n) => write!(f, "{n}"),
            Self::Dynamic => f.write_str("dyn"),
        }
    }
}

/// How elements are ordered in memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Order {
    /// The last axis is contiguous.
    RowMajor,
    /// The first axis is contiguous.
    ColMajor,
    /// R-Tile: tiles chosen from the reduction axes are stored contiguously, tile after tile in
    /// row-major order; inside a tile the forward reduction axis is innermost.
    RTile,
}

impl Order {
    /// The name used in attributes and messages.
    pub fn name(self) -> &'static str {
        match self {
            Self::RowMajor => "row_major",
            Self::ColMajor => "col_major",
            Self::RTile => "rtile",
        }
    }
}

/// One axis of a [`LayoutSpec`].
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct AxisSpec {
    /// The axis name (a Rust and WGSL identifier).
    pub name: String,
    /// Its length.
    pub extent: Extent,
    /// Its tile, for R-Tile layouts; `None` lets R-Tile choose.
    pub tile: Option<u32>,
    /// Consent to pad a static extent that the tile does not divide.
    pub pad: bool,
}

/// A layout description (see the module docs).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct LayoutSpec {
    /// The tensor's name (a Rust and WGSL identifier; emitted functions start with it).
    pub name: String,
    /// The element type.
    pub elem: ElemType,
    /// The axes, in logical order.
    pub axes: Vec<AxisSpec>,
    /// How elements are ordered in memory.
    pub order: Order,
    /// Axes the forward pass reduces over.
    pub forward: Vec<String>,
    /// Axes the backward pass reduces over.
    pub backward: Vec<String>,
    /// Tiles given to [`tile`](Self::tile) before any axis existed: refused by `build`.
    orphan_tiles: u32,
}

/// The tile R-Tile gives a reduction axis when none is declared: one `vec4` of `f32` (for a
/// static extent, the largest of 4, 2 and 1 that divides it).
pub const DEFAULT_REDUCTION_TILE: u32 = 4;

impl LayoutSpec {
    /// A row-major `f32` tensor named `name` with no axes yet.
    pub fn new(name: impl Into<String>) -> Self {
        Self::from_parts(
            name,
            ElemType::F32,
            Vec::new(),
            Order::RowMajor,
            Vec::new(),
            Vec::new(),
        )
    }

    /// A description from all of its parts at once (what the derive writes).
    pub fn from_parts(
        name: impl Into<String>,
        elem: ElemType,
        axes: Vec<AxisSpec>,
        order: Order,
        forward: Vec<String>,
        backward: Vec<String>,
    ) -> Self {
        Self {
            name: name.into(),
            elem,
            axes,
            order,
            forward,
            backward,
            orphan_tiles: 0,
        }
    }

    /// Sets the element type.
    pub fn elem(mut self, elem: ElemType) -> Self {
        self.elem = elem;
        self
    }

    /// Appends an axis.
    pub fn axis(mut self, name: impl Into<String>, extent: impl Into<Extent>) -> Self {
        self.axes.push(AxisSpec {
            name: name.into(),
            extent: extent.into(),
            tile: None,
            pad: false,
        });
        self
    }

    /// Appends an axis of run-time extent.
    pub fn dyn_axis(self, name: impl Into<String>) -> Self {
        self.axis(name, Extent::Dynamic)
    }

    /// Sets the tile of the last axis added, and whether it may be padded. Called before any
    /// axis, it has nothing to apply to, and [`build`](Self::build) reports it.
    pub fn tile(mut self, tile: u32, pad: bool) -> Self {
        match self.axes.last_mut() {
            Some(axis) => {
                axis.tile = Some(tile);
                axis.pad = pad;
            }
            None => self.orphan_tiles += 1,
        }
        self
    }

    /// Sets the memory order.
    pub fn order(mut self, order: Order) -> Self {
        self.order = order;
        self
    }

    /// Uses R-Tile.
    pub fn rtile(self) -> Self {
        self.order(Order::RTile)
    }

    /// Sets the forward reduction axes.
    pub fn reduce_forward<S: Into<String>>(mut self, axes: impl IntoIterator<Item = S>) -> Self {
        self.forward = axes.into_iter().map(Into::into).collect();
        self
    }

    /// Sets the backward reduction axes.
    pub fn reduce_backward<S: Into<String>>(mut self, axes: impl IntoIterator<Item = S>) -> Self {
        self.backward = axes.into_iter().map(Into::into).collect();
        self
    }

    /// Checks the description and builds the layout, or reports every problem found.
    pub fn build(&self) -> Result<TensorLayout, LayoutErrors> {
        let mut errors = Vec::new();
        self.check_names(&mut errors);
        self.check_reductions(&mut errors);
        let axes = self.resolve_axes(&mut errors);
        let layout = TensorLayout::from_checked(self, axes);
        // The size is checked whatever else is wrong, so that every problem is reported.
        check_size(&self.name, &layout, &mut errors);
        if let Some(why) = self.elem.wgsl_problem() {
            errors.push(LayoutError::UnsupportedElem {
                tensor: self.name.clone(),
                elem: self.elem,
                why,
            });
        }
        if let Some(errors) = LayoutErrors::from_vec(errors) {
            return Err(errors);
        }
        Ok(layout)
    }

    /// Names must be identifiers; axes unique; extent parameters must not clash with axes.
    fn check_names(&self, errors: &mut Vec<LayoutError>) {
        let tensor = &self.name;
        if let Some(why) = ident_problem(tensor) {
            errors.push(LayoutError::BadName {
                what: "tensor",
                name: tensor.clone(),
                why,
                site: Site::Tensor,
            });
        }
        if self.axes.is_empty() {
            errors.push(LayoutError::NoAxes {
                tensor: tensor.clone(),
            });
        }
        if self.orphan_tiles > 0 {
            errors.push(LayoutError::TileBeforeAxis {
                tensor: tensor.clone(),
            });
        }
        let mut seen = HashSet::new();
        for axis in &self.axes {
            if let Some(why) = ident_problem(&axis.name) {
                let site = Site::Axis(axis.name.clone());
                errors.push(LayoutError::BadName {
                    what: "axis",
                    name: axis.name.clone(),
                    why,
                    site,
                });
            }
            if !seen.insert(axis.name.as_str()) {
                errors.push(LayoutError::DuplicateAxis {
                    tensor: tensor.clone(),
                    axis: axis.name.clone(),
                });
            }
        }
        for axis in &self.axes {
            let name = TensorLayout::extent_param(&axis.name);
            if axis.extent == Extent::Dynamic && seen.contains(name.as_str()) {
                errors.push(LayoutError::NameClash {
                    tensor: tensor.clone(),
                    axis: axis.name.clone(),
                    name,
                });
            }
        }
    }

    fn check_reductions(&self, errors: &mut Vec<LayoutError>) {
        let known: Vec<&str> = self.axes.iter().map(|a| a.name.as_str()).collect();
        for (pass, list) in [
            (Pass::Forward, &self.forward),
            (Pass::Backward, &self.backward),
        ] {
            let mut seen = HashSet::new();
            for axis in list {
                if !known.contains(&axis.as_str()) {
                    errors.push(LayoutError::UnknownReductionAxis {
                        tensor: self.name.clone(),
                        pass,
                        axis: axis.clone(),
                        known: known.join(", "),
                    });
                } else if !seen.insert(axis) {
                    errors.push(LayoutError::DuplicateReductionAxis {
                        tensor: self.name.clone(),
                        pass,
                        axis: axis.clone(),
                    });
                }
            }
        }
    }

    fn is_reduced(&self, axis: &str) -> bool {
        self.forward.iter().chain(&self.backward).any(|a| a == axis)
    }

    /// Chooses each axis's tile and checks it against the extent.
    fn resolve_axes(&self, errors: &mut Vec<LayoutError>) -> Vec<LayoutAxis> {
        let tensor = &self.name;
        let any_tile = self.axes.iter().any(|a| a.tile.is_some());
        if self.order == Order::RTile
            && !any_tile
            && self.forward.is_empty()
            && self.backward.is_empty()
        {
            errors.push(LayoutError::RTileWithoutReduction {
                tensor: tensor.clone(),
            });
        }
        if self.order != Order::RTile {
            let named = [
                (Pass::Forward, &self.forward),
                (Pass::Backward, &self.backward),
            ];
            if let Some((pass, _)) = named.into_iter().find(|(_, list)| !list.is_empty()) {
                errors.push(LayoutError::ReductionWithoutRTile {
                    tensor: tensor.clone(),
                    pass,
                    order: self.order.name(),
                });
            }
        }
        let mut axes = Vec::with_capacity(self.axes.len());
        for spec in &self.axes {
            let name = spec.name.clone();
            if let Extent::Static(0) = spec.extent {
                errors.push(LayoutError::ZeroExtent {
                    tensor: tensor.clone(),
                    axis: name.clone(),
                });
            }
            if spec.tile.is_some() && self.order != Order::RTile {
                errors.push(LayoutError::TileWithoutRTile {
                    tensor: tensor.clone(),
                    axis: name.clone(),
                    order: self.order.name(),
                });
            }
            let tile = match (self.order, spec.tile) {
                (Order::RTile, Some(t)) => t,
                (Order::RTile, None) if self.is_reduced(&spec.name) => match spec.extent {
                    // A default tile divides a static extent: it never pads.
                    Extent::Static(n) => default_tile(n),
                    Extent::Dynamic => DEFAULT_REDUCTION_TILE,
                },
                _ => 1,
            };
            if spec.pad && spec.tile.is_none() {
                errors.push(LayoutError::PadWithoutTile {
                    tensor: tensor.clone(),
                    axis: name.clone(),
                });
            }
            if tile == 0 {
                errors.push(LayoutError::ZeroTile {
                    tensor: tensor.clone(),
                    axis: name.clone(),
                });
            }
            if let (Extent::Static(n), Some(t)) = (spec.extent, spec.tile) {
                if t > n && n > 0 {
                    errors.push(LayoutError::TileTooLarge {
                        tensor: tensor.clone(),
                        axis: name.clone(),
                        tile: t,
                        extent: n,
                    });
                } else if t > 0 && !n.is_multiple_of(t) && !spec.pad {
                    let padded = u64::from(n).div_ceil(u64::from(t)) * u64::from(t);
                    errors.push(LayoutError::TileNeedsPad {
                        tensor: tensor.clone(),
                        axis: name.clone(),
                        tile: t,
                        extent: n,
                        padded,
                    });
                }
            }
            axes.push(LayoutAxis {
                name,
                extent: spec.extent,
                tile: tile.max(1),
                pad: spec.pad,
            });
        }
        axes
    }
}

/// The tile R-Tile gives a reduction axis of static extent `n` with no declared tile: the
/// largest of 4, 2 and 1 that divides `n`, so that a default never pads.
fn default_tile(n: u32) -> u32 {
    if n.is_multiple_of(DEFAULT_REDUCTION_TILE) {
        DEFAULT_REDUCTION_TILE
    } else if n.is_multiple_of(2) {
        2
    } else {
        1
    }
}

/// Static parts of the buffer must fit the u32 index space (run-time extents count as 1 here;
/// the whole buffer is checked again when the layout is bound).
///
/// A zero extent counts as 1 too: it is reported on its own ([`LayoutError::ZeroExtent`]), and
/// counted as 0 it would make the product 0 and hide an overflow of the other axes, which is
/// a second problem to report with the first.
fn check_size(tensor: &str, layout: &TensorLayout, errors: &mut Vec<LayoutError>) {
    let extents: Vec<u64> = layout
        .extents_with(|_| 1)
        .into_iter()
        .map(|n| n.max(1))
        .collect();
    if let Some((axis, elements)) = layout.exceeds(&extents, MAX_ELEMENTS) {
        errors.push(LayoutError::Overflow {
            tensor: tensor.to_owned(),
            axis: layout.axes()[axis].name.clone(),
            elements,
        });
    }
}
