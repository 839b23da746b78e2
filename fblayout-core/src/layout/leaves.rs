//! A layout's memory order, written once.
//!
//! Every [`TensorLayout`] is *compact*: its buffer is a sequence of nested loops, each over one
//! **leaf** — a whole axis, the tile coordinate of a tiled axis (`c / t`, over the grid of
//! `⌈E / t⌉` tiles) or the in-tile coordinate (`c % t`, over `t`). A leaf's stride is the
//! product of the extents of the leaves inside it, so the offset of a coordinate is the leaves'
//! coordinates in Horner form, outermost first:
//!
//! ```text
//! offset = ((x_0 · e_1 + x_1) · e_2 + x_2) · …        (x_k, e_k: leaf k's coordinate and extent)
//! ```
//!
//! - row-major: one whole leaf per axis, first axis outermost;
//! - column-major: the same, last axis outermost;
//! - R-Tile: a grid leaf per axis (a whole leaf when its tile is 1) in axis order, then the
//!   in-tile leaves of the tiled axes in in-tile order (forward reduction innermost).
//!
//! [`TensorLayout::leaves`] is the only place these orders are written. The offset expression,
//! the tile offsets, the buffer length and the CuTe form ([`TensorLayout::to_cute`]) all fold
//! over it through [`Arith`], either symbolically (building the index IR) or on concrete,
//! checked integers, so they cannot disagree.

use super::spec::{Extent, Order};
use super::tensor::TensorLayout;
use crate::expr::{ExprGraph, ExprId, VarKind};

/// What a leaf iterates over.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Part {
    /// The whole axis: coordinate `c`, extent `E`.
    Whole,
    /// The tile coordinate: `c / t`, extent `⌈E / t⌉`.
    Grid,
    /// The coordinate inside a tile: `c % t`, extent `t`.
    InTile,
}

/// One loop of a layout's memory order (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Leaf {
    /// The axis, by position.
    pub axis: usize,
    /// Which part of its coordinate.
    pub part: Part,
}

/// Integer arithmetic that leaves fold over: the index IR, or checked concrete integers.
pub(crate) trait Arith {
    /// A value.
    type V: Copy;
    /// The constant `n`.
    fn constant(&mut self, n: u64) -> Self::V;
    /// The logical extent of axis `i` of `layout`.
    fn extent(&mut self, layout: &TensorLayout, i: usize) -> Self::V;
    /// `a + b`.
    fn add(&mut self, a: Self::V, b: Self::V) -> Self::V;
    /// `a · b`.
    fn mul(&mut self, a: Self::V, b: Self::V) -> Self::V;
    /// `a / b`, rounded down.
    fn div(&mut self, a: Self::V, b: Self::V) -> Self::V;
    /// `a % b`.
    fn rem(&mut self, a: Self::V, b: Self::V) -> Self::V;
}

/// The index IR: values are expressions, run-time extents are `<axis>_len` parameters.
impl Arith for ExprGraph {
    type V = ExprId;
    fn constant(&mut self, n: u64) -> ExprId {
        ExprGraph::constant(self, n)
    }
    fn extent(&mut self, layout: &TensorLayout, i: usize) -> ExprId {
        let axis = &layout.axes()[i];
        match axis.extent {
            Extent::Static(n) => ExprGraph::constant(self, u64::from(n)),
            Extent::Dynamic => {
                let v = self.declare(TensorLayout::extent_param(&axis.name), VarKind::Extent);
                self.var(v)
            }
        }
    }
    fn add(&mut self, a: ExprId, b: ExprId) -> ExprId {
        ExprGraph::add(self, a, b)
    }
    fn mul(&mut self, a: ExprId, b: ExprId) -> ExprId {
        ExprGraph::mul(self, a, b)
    }
    fn div(&mut self, a: ExprId, b: ExprId) -> ExprId {
        ExprGraph::div(self, a, b)
    }
    fn rem(&mut self, a: ExprId, b: ExprId) -> ExprId {
        ExprGraph::rem(self, a, b)
    }
}

/// Concrete integers with every logical extent known; `None` once a result overflows `u64`
/// (or divides by zero).
pub(crate) struct Concrete<'a> {
    /// The logical extent of each axis, in axis order.
    pub extents: &'a [u64],
}

impl Arith for Concrete<'_> {
    type V = Option<u64>;
    fn constant(&mut self, n: u64) -> Option<u64> {
        Some(n)
    }
    fn extent(&mut self, _: &TensorLayout, i: usize) -> Option<u64> {
        self.extents.get(i).copied()
    }
    fn add(&mut self, a: Option<u64>, b: Option<u64>) -> Option<u64> {
        a?.checked_add(b?)
    }
    fn mul(&mut self, a: Option<u64>, b: Option<u64>) -> Option<u64> {
        a?.checked_mul(b?)
    }
    fn div(&mut self, a: Option<u64>, b: Option<u64>) -> Option<u64> {
        a?.checked_div(b?)
    }
    fn rem(&mut self, a: Option<u64>, b: Option<u64>) -> Option<u64> {
        a?.checked_rem(b?)
    }
}

impl TensorLayout {
    /// The leaves of the memory order, outermost first (see the module docs).
    pub(crate) fn leaves(&self) -> Vec<Leaf> {
        let rank = self.rank();
        let whole = |axis| Leaf {
            axis,
            part: Part::Whole,
        };
        match self.order() {
            Order::RowMajor => (0..rank).map(whole).collect(),
            Order::ColMajor => (0..rank).rev().map(whole).collect(),
            Order::RTile => {
                let grid = (0..rank).map(|axis| {
                    if self.axes()[axis].tile > 1 {
                        Leaf {
                            axis,
                            part: Part::Grid,
                        }
                    } else {
                        whole(axis)
                    }
                });
                let in_tile = self.in_tile_axes().iter().map(|&axis| Leaf {
                    axis,
                    part: Part::InTile,
                });
                grid.chain(in_tile).collect()
            }
        }
    }

    /// How far `leaf` runs.
    pub(crate) fn leaf_extent<A: Arith>(&self, a: &mut A, leaf: Leaf) -> A::V {
        let t = u64::from(self.axes()[leaf.axis].tile);
        match leaf.part {
            Part::Whole => a.extent(self, leaf.axis),
            Part::InTile => a.constant(t),
            Part::Grid => {
                // ⌈E / t⌉ = (E + t - 1) / t
                let e = a.extent(self, leaf.axis);
                let tm1 = a.constant(t - 1);
                let sum = a.add(e, tm1);
                let tc = a.constant(t);
                a.div(sum, tc)
            }
        }
    }

    /// `leaf`'s coordinate, given its axis's coordinate `c`.
    pub(crate) fn leaf_coord<A: Arith>(&self, a: &mut A, leaf: Leaf, c: A::V) -> A::V {
        let t = u64::from(self.axes()[leaf.axis].tile);
        match leaf.part {
            Part::Whole => c,
            Part::Grid => {
                let tc = a.constant(t);
                a.div(c, tc)
            }
            Part::InTile => {
                let tc = a.constant(t);
                a.rem(c, tc)
            }
        }
    }

    /// `Σ_k x_k · Π_{j>k} e_j` over the leaves in Horner form, `x_k = coord(leaf k)`: one
    /// multiplication and one addition per leaf, and no products of extents (which matters
    /// when extents are only known at run time).
    pub(crate) fn fold_leaves<A: Arith>(
        &self,
        a: &mut A,
        mut coord: impl FnMut(&mut A, Leaf) -> A::V,
    ) -> A::V {
        let leaves = self.leaves();
        let Some((&first, rest)) = leaves.split_first() else {
            return a.constant(0);
        };
        let mut acc = coord(a, first);
        for &leaf in rest {
            let e = self.leaf_extent(a, leaf);
            let scaled = a.mul(acc, e);
            let x = coord(a, leaf);
            acc = a.add(scaled, x);
        }
        acc
    }

    /// The buffer length: the product of the leaves' extents, padding included.
    pub(crate) fn buffer_len<A: Arith>(&self, a: &mut A) -> A::V {
        let mut len = a.constant(1);
        for leaf in self.leaves() {
            let e = self.leaf_extent(a, leaf);
            len = a.mul(len, e);
        }
        len
    }

    /// The first axis at which the buffer, counted leaf by leaf from the outermost, would
    /// exceed `limit` elements, with the count reached there (saturating); `None` when the
    /// whole buffer fits.
    pub(crate) fn exceeds(&self, extents: &[u64], limit: u64) -> Option<(usize, u128)> {
        let mut a = Concrete { extents };
        let mut elements: u128 = 1;
        for leaf in self.leaves() {
            let e = self.leaf_extent(&mut a, leaf).map_or(u128::MAX, u128::from);
            elements = elements.saturating_mul(e);
            if elements > u128::from(limit) {
                return Some((leaf.axis, elements));
            }
        }
        None
    }
}
