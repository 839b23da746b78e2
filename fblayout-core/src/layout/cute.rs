//! Tensor layouts as CuTe layouts.
//!
//! Once its extents are known, every [`TensorLayout`] is a hierarchical layout of the algebra
//! ([`crate::algebra::Layout`]) with one mode per axis. A row- or column-major axis is a leaf
//! `E : stride`. An R-Tile axis is the pair `(t, G) : (s_in, s_grid · T)` — its in-tile
//! coordinate and its tile coordinate — which is exactly CuTe's `blocked_product` of the tile
//! layout and the grid layout. Static extents become static integers, run-time ones dynamic.
//! This is what ties the layout descriptions to the algebra's laws.

use super::error::LayoutError;
use super::spec::{Extent, Order};
use super::tensor::TensorLayout;
use crate::algebra::{Int, IntTuple, Layout};

impl TensorLayout {
    /// This layout as a CuTe layout, with the run-time extents bound (`(axis, extent)` pairs).
    pub fn to_cute(&self, extents: &[(&str, u32)]) -> Result<Layout, LayoutError> {
        self.bind_extents(extents)?;
        let value = |i: usize| -> Int {
            match self.axes()[i].extent {
                Extent::Static(n) => Int::Static(n as usize),
                Extent::Dynamic => {
                    let name = &self.axes()[i].name;
                    let n = extents
                        .iter()
                        .find(|(a, _)| a == name)
                        .map_or(1, |&(_, v)| v);
                    Int::Dynamic(n as usize)
                }
            }
        };
        let rank = self.rank();
        let leaf = |v: usize, like: Int| {
            if like.is_static() {
                Int::Static(v)
            } else {
                Int::Dynamic(v)
            }
        };
        let (shapes, strides): (Vec<IntTuple>, Vec<IntTuple>) = match self.order() {
            Order::RowMajor | Order::ColMajor => {
                let mut stride = 1usize;
                let mut modes =
                    vec![(IntTuple::Int(Int::Static(1)), IntTuple::Int(Int::Static(0))); rank];
                let order: Vec<usize> = if self.order() == Order::RowMajor {
                    (0..rank).rev().collect()
                } else {
                    (0..rank).collect()
                };
                for i in order {
                    let e = value(i);
                    modes[i] = (IntTuple::Int(e), IntTuple::Int(leaf(stride, e)));
                    stride *= e.value();
                }
                modes.into_iter().unzip()
            }
            Order::RTile => {
                let tiles: Vec<usize> = self.axes().iter().map(|a| a.tile as usize).collect();
                let tile_elems: usize = tiles.iter().product();
                let grid: Vec<Int> = (0..rank)
                    .map(|i| leaf(value(i).value().div_ceil(tiles[i]), value(i)))
                    .collect();
                let mut in_stride = vec![0usize; rank];
                let mut s = 1;
                for name in self.in_tile_order().iter().rev() {
                    let i = self.axis_index(name).unwrap_or(0);
                    in_stride[i] = s;
                    s *= tiles[i];
                }
                let mut grid_stride = vec![0usize; rank];
                let mut g = tile_elems;
                for i in (0..rank).rev() {
                    grid_stride[i] = g;
                    g *= grid[i].value();
                }
                (0..rank)
                    .map(|i| {
                        let shape = IntTuple::Tuple(vec![
                            IntTuple::Int(Int::Static(tiles[i])),
                            IntTuple::Int(grid[i]),
                        ]);
                        let stride = IntTuple::Tuple(vec![
                            IntTuple::Int(Int::Static(in_stride[i])),
                            IntTuple::Int(leaf(grid_stride[i], grid[i])),
                        ]);
                        (shape, stride)
                    })
                    .unzip()
            }
        };
        Layout::new(IntTuple::Tuple(shapes), IntTuple::Tuple(strides)).map_err(|err| {
            LayoutError::Bind {
                tensor: self.name().to_owned(),
                detail: format!("as a CuTe layout: {err}"),
            }
        })
    }
}
