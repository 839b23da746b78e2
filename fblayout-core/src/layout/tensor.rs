//! Checked tensor layouts and their index expressions.
//!
//! A [`TensorLayout`] is a [`LayoutSpec`](super::LayoutSpec) that passed its checks, with every
//! tile chosen. Its memory order is a list of leaves ([`super::leaves`]), from which the offset
//! expression ([`TensorLayout::offset_expr`]), the tile offsets, the buffer length
//! ([`TensorLayout::len_fn`]) and the CuTe form are all derived: linear combinations in Horner
//! form (`(c_0 · E_1 + c_1) · E_2 + c_2`), a division and a remainder per tiled axis, the
//! number of tiles as `(E + t - 1) / t`. The simplifier ([`crate::expr::simplify`]) folds
//! constants and turns the divisions into shifts and masks.
//!
//! For an **R-Tile** layout with tiles `t_a` over extents `E_a`, each axis is padded to
//! `P_a = ceil(E_a / t_a) * t_a`, giving a grid of `G_a = P_a / t_a` tiles. Tiles are stored
//! one after another in row-major grid order; each tile holds `T = Π t_a` elements in the
//! in-tile order, whose innermost axis is the forward reduction axis, then the backward one:
//!
//! ```text
//! offset = (Σ_a (c_a / t_a) · Π_{b>a} G_b) · T  +  Σ_a (c_a % t_a) · Π_{b inside a} t_b
//! ```
//!
//! A reduction along any declared axis therefore walks whole tiles, each `T` contiguous
//! elements (a `vec4` row of the forward axis at a time), in the forward and backward pass
//! alike. Padding is counted in the buffer size and masked by `in_bounds`; it happens only with
//! consent (`pad`), checked at build for static extents and at bind for run-time ones.
//!
//! **The in-tile order** with several reduction axes: tiled axes that no pass reduces come
//! outermost (in axis order), then the axes only the backward pass reduces (in the order the
//! backward list names them), then the forward axes (in the order the forward list names
//! them, so the *last* forward axis is innermost). An axis named in both lists counts as
//! forward.

use std::sync::Arc;

use super::elem::ElemType;
use super::leaves::{Concrete, Part};
use super::spec::{Extent, LayoutSpec, Order};
use super::view::View;
use crate::expr::{Assumptions, ExprGraph, ExprId, IndexFn, ValidIndexFn, VarId, VarKind};

/// One checked axis.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct LayoutAxis {
    /// The axis name.
    pub name: String,
    /// Its length.
    pub extent: Extent,
    /// Its tile (1 when the axis is not tiled).
    pub tile: u32,
    /// Whether the declaration consented to padding the extent up to a multiple of the tile.
    /// A run-time extent that the tile does not divide is refused at bind without it.
    pub pad: bool,
}

impl LayoutAxis {
    /// The extent `n` of this axis padded up to a multiple of its tile: the product of the
    /// extents of its leaves.
    pub fn padded(&self, n: u64) -> u64 {
        n.next_multiple_of(u64::from(self.tile))
    }
}

/// A checked layout (see the module docs).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct TensorLayout {
    name: String,
    elem: ElemType,
    axes: Vec<LayoutAxis>,
    order: Order,
    forward: Vec<String>,
    backward: Vec<String>,
    /// Axis indices in in-tile order, outermost first.
    in_tile: Vec<usize>,
}

impl TensorLayout {
    /// Builds the layout from a spec whose checks passed.
    pub(crate) fn from_checked(spec: &LayoutSpec, axes: Vec<LayoutAxis>) -> Self {
        let position = |name: &str| axes.iter().position(|a| a.name == name);
        let mut in_tile: Vec<usize> = Vec::new();
        // Tiled axes that no pass reduces go outermost, then backward-only axes, then the
        // forward axes innermost, so that a forward reduction reads contiguous vectors.
        let forward: Vec<usize> = spec.forward.iter().filter_map(|a| position(a)).collect();
        let backward: Vec<usize> = spec
            .backward
            .iter()
            .filter_map(|a| position(a))
            .filter(|i| !forward.contains(i))
            .collect();
        for (i, axis) in axes.iter().enumerate() {
            if axis.tile > 1 && !forward.contains(&i) && !backward.contains(&i) {
                in_tile.push(i);
            }
        }
        in_tile.extend(backward.iter().filter(|&&i| axes[i].tile > 1));
        in_tile.extend(forward.iter().filter(|&&i| axes[i].tile > 1));
        Self {
            name: spec.name.clone(),
            elem: spec.elem,
            axes,
            order: spec.order,
            forward: spec.forward.clone(),
            backward: spec.backward.clone(),
            in_tile,
        }
    }

    /// The tensor's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The element type.
    pub fn elem(&self) -> ElemType {
        self.elem
    }

    /// The axes, in logical order.
    pub fn axes(&self) -> &[LayoutAxis] {
        &self.axes
    }

    /// The number of axes.
    pub fn rank(&self) -> usize {
        self.axes.len()
    }

    /// The position of the axis called `name`.
    pub fn axis_index(&self, name: &str) -> Option<usize> {
        self.axes.iter().position(|a| a.name == name)
    }

    /// The memory order.
    pub fn order(&self) -> Order {
        self.order
    }

    /// The axes reduced over in the forward pass.
    pub fn forward(&self) -> &[String] {
        &self.forward
    }

    /// The axes reduced over in the backward pass.
    pub fn backward(&self) -> &[String] {
        &self.backward
    }

    /// The tiled axes in in-tile order, outermost first (empty unless R-Tile).
    pub fn in_tile_order(&self) -> Vec<&str> {
        self.in_tile
            .iter()
            .map(|&i| self.axes[i].name.as_str())
            .collect()
    }

    /// The tiled axes (by position) in in-tile order, outermost first.
    pub(crate) fn in_tile_axes(&self) -> &[usize] {
        &self.in_tile
    }

    /// The number of elements in one tile.
    pub fn tile_elems(&self) -> u64 {
        self.axes.iter().map(|a| u64::from(a.tile)).product()
    }

    /// Whether every extent is static.
    pub fn is_static(&self) -> bool {
        self.axes
            .iter()
            .all(|a| matches!(a.extent, Extent::Static(_)))
    }

    /// The axes of run-time extent, in logical order.
    pub fn dynamic_axes(&self) -> impl Iterator<Item = &LayoutAxis> {
        self.axes.iter().filter(|a| a.extent == Extent::Dynamic)
    }

    /// The parameter name that carries the run-time extent of `axis`.
    pub fn extent_param(axis: &str) -> String {
        format!("{axis}_len")
    }

    /// The WGSL struct `type_name` that carries this layout's run-time extents: one `u32`
    /// field [`extent_param`](Self::extent_param) per run-time axis, in axis order (the order
    /// the index functions take them in). Empty when every extent is static: WGSL has no empty
    /// structs.
    pub fn extents_struct(&self, type_name: &str) -> String {
        let fields: Vec<String> = self
            .dynamic_axes()
            .map(|a| format!("    {}: u32,\n", Self::extent_param(&a.name)))
            .collect();
        if fields.is_empty() {
            return String::new();
        }
        format!("struct {type_name} {{\n{}}}\n", fields.concat())
    }

    /// The logical extent of every axis, with `dynamic` standing for each run-time one.
    pub(crate) fn extents_with(&self, mut dynamic: impl FnMut(&LayoutAxis) -> u64) -> Vec<u64> {
        self.axes
            .iter()
            .map(|a| match a.extent {
                Extent::Static(n) => u64::from(n),
                Extent::Dynamic => dynamic(a),
            })
            .collect()
    }

    /// The buffer length in elements, padding included, for these logical extents (one per
    /// axis); `None` when it overflows `u64`.
    pub fn len_for(&self, extents: &[u64]) -> Option<u64> {
        self.buffer_len(&mut Concrete { extents })
    }

    /// The buffer size in elements, padding included, when every extent is static.
    pub fn static_len(&self) -> Option<u64> {
        if !self.is_static() {
            return None;
        }
        self.len_for(&self.extents_with(|_| 1))
    }

    /// The buffer length in elements, padding included, as an index function `<name>_len`
    /// over the run-time extents `<axis>_len` (in axis order): its `offset` root is the
    /// length, the product of the extents of the layout's leaves; its `in_bounds` root is
    /// `true`.
    ///
    /// Emitters turn it into code, so that the derive, the WGSL and the CPU path compute the
    /// length from one expression.
    pub fn len_fn(&self) -> ValidIndexFn {
        let mut g = ExprGraph::unshared();
        let params = self.declare_extents(&mut g);
        let offset = self.buffer_len(&mut g);
        let in_bounds = g.boolean(true);
        Self::layout_fn(format!("{}_len", self.name), g, params, offset, in_bounds)
    }

    /// Shares the layout, for views.
    pub fn into_arc(self) -> Arc<Self> {
        Arc::new(self)
    }

    /// The identity view, named after the tensor.
    pub fn view(&self) -> View {
        View::identity(Arc::new(self.clone()))
    }

    /// The offset and bounds mask of the tensor itself, as written before simplification.
    pub fn index_fn(&self) -> ValidIndexFn {
        self.view().index_fn()
    }

    /// Declares the run-time extent parameters in `g`, in logical axis order.
    pub(crate) fn declare_extents(&self, g: &mut ExprGraph) -> Vec<VarId> {
        self.dynamic_axes()
            .map(|a| g.declare(Self::extent_param(&a.name), VarKind::Extent))
            .collect()
    }

    /// The physical offset of the logical coordinate `coords` (one expression per axis).
    pub fn offset_expr(&self, g: &mut ExprGraph, coords: &[ExprId]) -> ExprId {
        self.fold_leaves(g, |g, leaf| self.leaf_coord(g, leaf, coords[leaf.axis]))
    }

    /// The offset of the first element of the tile at grid coordinate `tiles`, and whether that
    /// tile exists, as an index function `<name>_tile` over `<axis>_tile` parameters.
    ///
    /// A kernel loads a whole R-Tile from there: [`tile_elems`](Self::tile_elems) contiguous
    /// elements, in in-tile order.
    pub fn tile_index_fn(&self) -> ValidIndexFn {
        let mut g = ExprGraph::unshared();
        let mut params: Vec<VarId> = self
            .axes
            .iter()
            .map(|a| g.declare(format!("{}_tile", a.name), VarKind::Coord))
            .collect();
        let tiles: Vec<ExprId> = params.iter().map(|&p| g.var(p)).collect();
        params.extend(self.declare_extents(&mut g));
        // The tile's first element: its grid coordinates, every in-tile coordinate 0.
        let offset = self.fold_leaves(&mut g, |g, leaf| match leaf.part {
            Part::InTile => g.constant(0),
            Part::Grid | Part::Whole => tiles[leaf.axis],
        });
        let mut checks = Vec::new();
        for leaf in self.leaves() {
            if leaf.part != Part::InTile {
                let n = self.leaf_extent(&mut g, leaf);
                checks.push(g.lt(tiles[leaf.axis], n));
            }
        }
        let in_bounds = Self::conjunction(&mut g, checks);
        Self::layout_fn(format!("{}_tile", self.name), g, params, offset, in_bounds)
    }

    /// A function the layout derives from itself (no assumptions on its parameters). Its
    /// names were checked when the layout was built, so it is always valid.
    fn layout_fn(
        name: String,
        graph: ExprGraph,
        params: Vec<VarId>,
        offset: ExprId,
        in_bounds: ExprId,
    ) -> ValidIndexFn {
        let f = IndexFn {
            name,
            graph,
            params,
            offset,
            in_bounds,
            assume: Assumptions::default(),
        };
        f.validate()
            .expect("the functions of a checked layout are well formed")
    }

    /// `a && b && ...` (true when empty).
    pub(crate) fn conjunction(g: &mut ExprGraph, checks: Vec<ExprId>) -> ExprId {
        let mut it = checks.into_iter();
        let first = it.next().unwrap_or_else(|| g.boolean(true));
        it.fold(first, |acc, c| g.and(acc, c))
    }
}
