//! Checked tensor layouts and their index expressions.
//!
//! A [`TensorLayout`] is a [`LayoutSpec`](super::LayoutSpec) that passed its checks, with every
//! tile chosen. It lowers a logical coordinate to a physical offset as an expression
//! ([`TensorLayout::offset_expr`]), written plainly: linear combinations in Horner form
//! (`(c_0 · E_1 + c_1) · E_2 + c_2`), a division and a remainder per axis of an R-Tile, the
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
//! alike. Padding is counted in the buffer size and masked by `in_bounds`.

use std::sync::Arc;

use super::elem::ElemType;
use super::spec::{Extent, LayoutSpec, Order};
use super::view::View;
use crate::expr::{Assumptions, BinOp, ExprGraph, ExprId, IndexFn, ValidIndexFn, VarId, VarKind};

/// One checked axis.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Axis {
    /// The axis name.
    pub name: String,
    /// Its length.
    pub extent: Extent,
    /// Its tile (1 when the axis is not tiled).
    pub tile: u32,
}

impl Axis {
    /// The extent padded up to a multiple of the tile, for a static extent `n`.
    pub fn padded_static(&self, n: u32) -> u64 {
        u64::from(n).div_ceil(u64::from(self.tile)) * u64::from(self.tile)
    }
}

/// A checked layout (see the module docs).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct TensorLayout {
    name: String,
    elem: ElemType,
    axes: Vec<Axis>,
    order: Order,
    forward: Vec<String>,
    backward: Vec<String>,
    /// Axis indices in in-tile order, outermost first.
    in_tile: Vec<usize>,
}

impl TensorLayout {
    /// Builds the layout from a spec whose checks passed.
    pub(crate) fn from_checked(spec: &LayoutSpec, axes: Vec<Axis>) -> Self {
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
    pub fn axes(&self) -> &[Axis] {
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
    pub fn dynamic_axes(&self) -> impl Iterator<Item = &Axis> {
        self.axes.iter().filter(|a| a.extent == Extent::Dynamic)
    }

    /// The parameter name that carries the run-time extent of `axis`.
    pub fn extent_param(axis: &str) -> String {
        format!("{axis}_len")
    }

    /// The buffer size in elements, padding included, when every extent is static.
    pub fn static_len(&self) -> Option<u64> {
        self.axes
            .iter()
            .map(|a| match a.extent {
                Extent::Static(n) => Some(a.padded_static(n)),
                Extent::Dynamic => None,
            })
            .product()
    }

    /// The buffer length in elements, padding included, as an index function `<name>_len`
    /// over the run-time extents `<axis>_len` (in axis order): its `offset` root is the
    /// length, `(E + t - 1) / t * t` per axis, multiplied out; its `in_bounds` root is `true`.
    ///
    /// Emitters turn it into code, so that the derive, the WGSL and the CPU path compute the
    /// length from one expression.
    pub fn len_fn(&self) -> ValidIndexFn {
        let mut g = ExprGraph::unshared();
        let params = self.declare_extents(&mut g);
        let mut factors = Vec::with_capacity(self.rank());
        for i in 0..self.rank() {
            let grid = self.grid_expr(&mut g, i);
            let t = g.constant(u64::from(self.axes[i].tile));
            factors.push(g.mul(grid, t));
        }
        let offset = Self::product(&mut g, factors);
        let in_bounds = g.boolean(true);
        let f = IndexFn {
            name: format!("{}_len", self.name),
            graph: g,
            params,
            offset,
            in_bounds,
            assume: Assumptions::default(),
        };
        f.validate()
            .expect("the length function of a checked layout is well formed")
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

    /// The logical extent of axis `i`: a constant, or its run-time parameter.
    pub(crate) fn extent_expr(&self, g: &mut ExprGraph, i: usize) -> ExprId {
        match self.axes[i].extent {
            Extent::Static(n) => g.constant(u64::from(n)),
            Extent::Dynamic => {
                let v = g.declare(Self::extent_param(&self.axes[i].name), VarKind::Extent);
                g.var(v)
            }
        }
    }

    /// The number of tiles along axis `i`: `(E + t - 1) / t`.
    fn grid_expr(&self, g: &mut ExprGraph, i: usize) -> ExprId {
        let e = self.extent_expr(g, i);
        let t = u64::from(self.axes[i].tile);
        let tm1 = g.constant(t - 1);
        let sum = g.add(e, tm1);
        let tc = g.constant(t);
        g.div(sum, tc)
    }

    fn product(g: &mut ExprGraph, factors: Vec<ExprId>) -> ExprId {
        let mut it = factors.into_iter();
        let first = it.next().unwrap_or_else(|| g.constant(1));
        it.fold(first, |acc, f| g.mul(acc, f))
    }

    /// `Σ_a x_a · Π_{b in inner(a)} e_b`, written in Horner form
    /// (`((x_0 · e_1 + x_1) · e_2 + x_2) ...`): one multiplication and one addition per axis,
    /// and no products of extents, which matters when extents are only known at run time.
    fn linear(
        g: &mut ExprGraph,
        terms: &[usize],
        coord: &mut dyn FnMut(&mut ExprGraph, usize) -> ExprId,
        extent: &mut dyn FnMut(&mut ExprGraph, usize) -> ExprId,
    ) -> ExprId {
        let Some((&first, rest)) = terms.split_first() else {
            return g.constant(0);
        };
        let mut acc = coord(g, first);
        for &a in rest {
            let e = extent(g, a);
            let scaled = g.mul(acc, e);
            let x = coord(g, a);
            acc = g.add(scaled, x);
        }
        acc
    }

    /// The physical offset of the logical coordinate `coords` (one expression per axis).
    pub fn offset_expr(&self, g: &mut ExprGraph, coords: &[ExprId]) -> ExprId {
        let all: Vec<usize> = (0..self.rank()).collect();
        match self.order {
            Order::RowMajor => Self::linear(g, &all, &mut |_, a| coords[a], &mut |g, b| {
                self.extent_expr(g, b)
            }),
            Order::ColMajor => {
                let reversed: Vec<usize> = all.iter().rev().copied().collect();
                Self::linear(g, &reversed, &mut |_, a| coords[a], &mut |g, b| {
                    self.extent_expr(g, b)
                })
            }
            Order::RTile => {
                let tile = |a: usize| u64::from(self.axes[a].tile);
                let grid = Self::linear(
                    g,
                    &all,
                    &mut |g, a| {
                        let t = g.constant(tile(a));
                        g.bin(BinOp::Div, coords[a], t)
                    },
                    &mut |g, b| self.grid_expr(g, b),
                );
                let tile_elems: Vec<ExprId> = all.iter().map(|&a| g.constant(tile(a))).collect();
                let tile_size = Self::product(g, tile_elems);
                let base = g.mul(grid, tile_size);
                let inner = Self::linear(
                    g,
                    &self.in_tile,
                    &mut |g, a| {
                        let t = g.constant(tile(a));
                        g.bin(BinOp::Rem, coords[a], t)
                    },
                    &mut |g, b| g.constant(tile(b)),
                );
                g.add(base, inner)
            }
        }
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
        let all: Vec<usize> = (0..self.rank()).collect();
        let grid = Self::linear(&mut g, &all, &mut |_, a| tiles[a], &mut |g, b| {
            self.grid_expr(g, b)
        });
        let size = g.constant(self.tile_elems());
        let offset = g.mul(grid, size);
        let mut checks = Vec::new();
        for (a, &t) in tiles.iter().enumerate() {
            let n = self.grid_expr(&mut g, a);
            checks.push(g.lt(t, n));
        }
        let in_bounds = Self::conjunction(&mut g, checks);
        let f = IndexFn {
            name: format!("{}_tile", self.name),
            graph: g,
            params,
            offset,
            in_bounds,
            assume: Assumptions::default(),
        };
        f.validate()
            .expect("tile index functions of a checked layout are well formed")
    }

    /// `a && b && ...` (true when empty).
    pub(crate) fn conjunction(g: &mut ExprGraph, checks: Vec<ExprId>) -> ExprId {
        let mut it = checks.into_iter();
        let first = it.next().unwrap_or_else(|| g.boolean(true));
        it.fold(first, |acc, c| g.and(acc, c))
    }
}
