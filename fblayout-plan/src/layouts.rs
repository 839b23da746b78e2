//! The layouts a graph tensor can take.
//!
//! Every tensor of a [`Graph`](crate::graph::Graph) can be stored row-major, column-major, or
//! as an R-Tile with square `t × t` tiles over its last two axes. An R-Tile's forward
//! reduction axis is the tensor's last axis (LayerNorm, softmax and the `k` of a matmul reduce
//! it) and its backward reduction axis the one before (bias and weight gradients reduce over
//! tokens; the softmax backward over queries). Batch and sequence extents are run-time axes;
//! a run-time axis that a tile doesn't divide is padded (with consent), a fixed one gets the
//! largest tile of the requested size or smaller that divides it.

use std::fmt;

use fblayout_core::layout::{ElemType, LayoutErrors, LayoutSpec, Order, TensorLayout};

use crate::graph::{Dim, Sizes, Tensor};

/// How a tensor is stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum LayoutChoice {
    /// Last axis fastest.
    RowMajor,
    /// First axis fastest.
    ColMajor,
    /// Tiles of `t × t` over the last two axes (see the module docs).
    RTile(u32),
}

impl LayoutChoice {
    /// The candidates the planner weighs for a tensor of `rank` axes: row-major always,
    /// column-major and R-Tiles of 4 and 8 for matrices and larger.
    pub fn candidates(rank: usize) -> Vec<LayoutChoice> {
        if rank < 2 {
            return vec![Self::RowMajor];
        }
        vec![
            Self::RowMajor,
            Self::ColMajor,
            Self::RTile(4),
            Self::RTile(8),
        ]
    }

    /// The candidates for `tensor`: [`candidates`](Self::candidates) of its rank, but only
    /// row-major for integer tensors (token ids, positions, labels). They are indices, read
    /// once per row in order; a copy into another layout would buy no reduction and costs a
    /// dispatch, and the CPU executor holds them as given.
    pub fn candidates_for(tensor: &Tensor) -> Vec<LayoutChoice> {
        match tensor.elem {
            ElemType::F32 | ElemType::F16 => Self::candidates(tensor.axes.len()),
            _ => vec![Self::RowMajor],
        }
    }

    /// A short name for generated tensor names and tables: `rm`, `cm`, `rt4`, ...
    pub fn short(self) -> String {
        match self {
            Self::RowMajor => "rm".into(),
            Self::ColMajor => "cm".into(),
            Self::RTile(t) => format!("rt{t}"),
        }
    }

    /// The layout of `tensor` (named `name`) stored this way.
    pub fn layout(self, name: &str, tensor: &Tensor) -> Result<TensorLayout, LayoutErrors> {
        let rank = tensor.axes.len();
        let mut spec = LayoutSpec::new(name).elem(tensor.elem);
        for (i, axis) in tensor.axes.iter().enumerate() {
            spec = match axis.dim {
                Dim::Fixed(n) => spec.axis(axis.name.clone(), n),
                Dim::Batch | Dim::Seq => spec.dyn_axis(axis.name.clone()),
            };
            if let Self::RTile(t) = self {
                if rank >= 2 && i + 2 >= rank {
                    spec = match axis.dim {
                        Dim::Fixed(n) => spec.tile(largest_tile(n, t), false),
                        Dim::Batch | Dim::Seq => spec.tile(t, true),
                    };
                }
            }
        }
        spec = match self {
            Self::RowMajor => spec,
            Self::ColMajor => spec.order(Order::ColMajor),
            Self::RTile(_) if rank < 2 => spec,
            Self::RTile(_) => {
                let last = &tensor.axes[rank - 1].name;
                let before = &tensor.axes[rank - 2].name;
                spec.rtile()
                    .reduce_forward([last.clone()])
                    .reduce_backward([before.clone()])
            }
        };
        spec.build()
    }
}

/// The run-time extents of `tensor` for a run of `sizes`, as [`TensorLayout::bind`] takes
/// them: one `(axis, extent)` pair per batch or sequence axis.
pub fn run_extents(tensor: &Tensor, sizes: Sizes) -> Vec<(&str, u32)> {
    tensor
        .axes
        .iter()
        .filter(|a| !matches!(a.dim, Dim::Fixed(_)))
        .map(|a| (a.name.as_str(), a.dim.value(sizes)))
        .collect()
}

/// The largest of `want`, `want/2`, ..., 1 that divides `n`.
fn largest_tile(n: u32, want: u32) -> u32 {
    let mut t = want.max(1);
    while t > 1 && !n.is_multiple_of(t) {
        t /= 2;
    }
    t
}

impl fmt::Display for LayoutChoice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::RowMajor => f.write_str("row-major"),
            Self::ColMajor => f.write_str("column-major"),
            Self::RTile(t) => write!(f, "R-Tile {t}×{t}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::graph::{Axis, Role};
    use fblayout_core::layout::ElemType;

    fn activation() -> Tensor {
        Tensor {
            name: "x".into(),
            axes: vec![
                Axis {
                    name: "batch".into(),
                    dim: Dim::Batch,
                },
                Axis {
                    name: "seq".into(),
                    dim: Dim::Seq,
                },
                Axis {
                    name: "hidden".into(),
                    dim: Dim::Fixed(36),
                },
            ],
            elem: ElemType::F32,
            role: Role::Activation,
        }
    }

    #[test]
    fn every_candidate_builds_and_binds_at_any_batch_and_sequence() {
        let x = activation();
        for choice in LayoutChoice::candidates(3) {
            let layout = choice.layout("x", &x).unwrap();
            for (batch, seq) in [(1, 1), (3, 13), (8, 128)] {
                let bound = layout.bind(&[("batch", batch), ("seq", seq)]).unwrap();
                assert!(bound.len() >= u64::from(batch * seq * 36), "{choice}");
            }
        }
        let tiled = LayoutChoice::RTile(8).layout("x", &x).unwrap();
        // 8 doesn't divide 36: the hidden tile falls back to 4; seq is padded to whole tiles.
        assert_eq!(tiled.axes()[2].tile, 4);
        assert_eq!(tiled.axes()[1].tile, 8);
        assert_eq!(tiled.forward(), ["hidden"]);
        assert_eq!(tiled.backward(), ["seq"]);
        assert_eq!(LayoutChoice::candidates(1), [LayoutChoice::RowMajor]);
    }

    #[test]
    fn integer_tensors_stay_row_major_and_floats_of_either_width_have_every_candidate() {
        let mut labels = activation();
        labels.elem = ElemType::U32;
        labels.role = Role::Input;
        assert_eq!(
            LayoutChoice::candidates_for(&labels),
            [LayoutChoice::RowMajor]
        );
        let mut half = activation();
        half.elem = ElemType::F16;
        for t in [activation(), half] {
            assert_eq!(
                LayoutChoice::candidates_for(&t),
                LayoutChoice::candidates(3)
            );
        }
    }
}
