//! Tensor layouts as CuTe layouts.
//!
//! Once its extents are known, every [`TensorLayout`] is a hierarchical layout of the algebra
//! ([`crate::algebra::Layout`]) with one mode per axis, read off its leaves
//! ([`super::leaves`]): a leaf's stride is the product of the extents of the leaves inside it.
//! An untiled axis is the leaf `E : s`; a tiled R-Tile axis is the pair `(t, G) : (s_in,
//! s_grid)` — its in-tile coordinate and its tile coordinate — which is exactly CuTe's
//! `blocked_product` of the tile layout and the grid layout. Static extents become static
//! integers, run-time ones dynamic.

use super::error::LayoutError;
use super::leaves::{Concrete, Part};
use super::spec::Extent;
use super::tensor::TensorLayout;
use crate::algebra::{Int, IntTuple, Layout};

impl TensorLayout {
    /// This layout as a CuTe layout, with the run-time extents bound (`(axis, extent)` pairs).
    pub fn to_cute(&self, extents: &[(&str, u32)]) -> Result<Layout, LayoutError> {
        let bound = self.bind_extents(extents)?;
        let overflow = || LayoutError::Bind {
            tensor: self.name().to_owned(),
            detail: "a stride of its CuTe form overflows usize".into(),
        };
        // A value is dynamic when a run-time extent went into it.
        let int = |v: u64, dynamic: bool| -> Result<Int, LayoutError> {
            let v = usize::try_from(v).map_err(|_| overflow())?;
            Ok(if dynamic {
                Int::Dynamic(v)
            } else {
                Int::Static(v)
            })
        };
        let mut a = Concrete {
            extents: &bound.extents,
        };
        // Strides: the running product of leaf extents, innermost leaf first.
        let leaves = self.leaves();
        let mut stride = (1u64, false);
        let mut in_tile: Vec<Option<(u64, u64)>> = vec![None; self.rank()];
        let mut outer =
            vec![(IntTuple::Int(Int::Static(1)), IntTuple::Int(Int::Static(0))); self.rank()];
        for &leaf in leaves.iter().rev() {
            let e = self.leaf_extent(&mut a, leaf).ok_or_else(overflow)?;
            let dynamic =
                leaf.part != Part::InTile && self.axes()[leaf.axis].extent == Extent::Dynamic;
            match leaf.part {
                Part::InTile => in_tile[leaf.axis] = Some((e, stride.0)),
                Part::Grid | Part::Whole => {
                    outer[leaf.axis] = (
                        IntTuple::Int(int(e, dynamic)?),
                        IntTuple::Int(int(stride.0, stride.1)?),
                    );
                }
            }
            stride = (
                stride.0.checked_mul(e).ok_or_else(overflow)?,
                stride.1 || dynamic,
            );
        }
        let mut shapes = Vec::with_capacity(self.rank());
        let mut strides = Vec::with_capacity(self.rank());
        for (axis, (e, s)) in outer.into_iter().enumerate() {
            match in_tile[axis] {
                None => {
                    shapes.push(e);
                    strides.push(s);
                }
                Some((t, st)) => {
                    // In-tile leaves are innermost: tile sizes are static.
                    shapes.push(IntTuple::Tuple(vec![IntTuple::Int(int(t, false)?), e]));
                    strides.push(IntTuple::Tuple(vec![IntTuple::Int(int(st, false)?), s]));
                }
            }
        }
        Layout::new(IntTuple::Tuple(shapes), IntTuple::Tuple(strides)).map_err(|err| {
            LayoutError::Bind {
                tensor: self.name().to_owned(),
                detail: format!("as a CuTe layout: {err}"),
            }
        })
    }
}
