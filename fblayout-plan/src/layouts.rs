//! The layouts a graph tensor can take.
//!
//! Every tensor of a [`Graph`] can be stored row-major, column-major, or
//! as an R-Tile with square `t × t` tiles over its last two axes. An R-Tile's forward
//! reduction axis is the tensor's last axis (LayerNorm, softmax and the `k` of a matmul reduce
//! it) and its backward reduction axis the one before (bias and weight gradients reduce over
//! tokens; the softmax backward over queries). Batch and sequence extents are run-time axes;
//! a run-time axis that a tile doesn't divide is padded (with consent), a fixed one gets the
//! largest tile of the requested size or smaller that divides it, unless that is under 4 and
//! the axis is long (a vocabulary of 30 522 is twice an odd number): then it is padded to the
//! requested tile.
//!
//! **Aligned rows.** A row-major tensor whose last axis is fixed, at least [`MIN_PITCHED`]
//! long and not a multiple of the kernels' vector width (4) stores each row padded to the next
//! multiple of [`ROW_ALIGN`] (a pitch, as an image row or
//! `cudaMallocPitch` has): written as an R-Tile whose only tile is `1 × … × ROW_ALIGN` along
//! the last axis, which is row-major with that pitch. Every row then starts at an aligned
//! address, so the kernels read and write it four elements at a time and the tensor-core
//! GEMM loads whole fragments; with rows of 30 522 they could only move one element at a
//! time (on the H200 the language-model head's three GEMMs ran at 79–129 TFLOP/s with rows of
//! 30 522 and 126–149 with rows of 30 528). The padding is never read as data: every kernel
//! masks it, and it costs at most `ROW_ALIGN − 1` elements a row (under 11 %; shorter rows,
//! which would pay more and gain little, stay as they are).

use std::fmt;

use fblayout_core::layout::{ElemType, LayoutErrors, LayoutSpec, Order, TensorLayout};

use crate::graph::{Dim, Graph, Role, Sizes, Tensor, TensorId};

/// The multiple a row-major tensor's fixed last axis is padded to in memory where it is not a
/// multiple of the kernels' vector width, 4 (see the module docs).
pub const ROW_ALIGN: u32 = 8;

/// The kernels' vector width: rows of a multiple of it are read four elements at a time as
/// they are, unpadded.
const VECTOR: u32 = 4;

/// The shortest fixed last axis a row-major layout pads (see the module docs).
pub const MIN_PITCHED: u32 = 8 * ROW_ALIGN;

/// How a tensor is stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum LayoutChoice {
    /// Last axis fastest (rows padded to a multiple of [`ROW_ALIGN`] where the last axis is
    /// fixed, long and not a multiple of 4; see the module docs).
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
                        Dim::Fixed(n) => match largest_tile(n, t) {
                            tile if tile < VECTOR && t >= VECTOR && n >= MIN_PITCHED => {
                                spec.tile(t, true)
                            }
                            tile => spec.tile(tile, false),
                        },
                        Dim::Batch | Dim::Seq => spec.tile(t, true),
                    };
                }
            }
        }
        let pitched = self == Self::RowMajor
            && matches!(tensor.axes.last(), Some(a) if matches!(a.dim, Dim::Fixed(n) if n >= MIN_PITCHED && !n.is_multiple_of(VECTOR)));
        spec = match self {
            // Row-major with a padded pitch: the last axis in runs of ROW_ALIGN, nothing else
            // tiled.
            Self::RowMajor if pitched => {
                let last = &tensor.axes[rank - 1].name;
                spec.tile(ROW_ALIGN, true)
                    .rtile()
                    .reduce_forward([last.clone()])
            }
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

/// Why a graph's tensors can't be stored as asked.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StorageError {
    /// The layouts don't match the graph's tensors one to one.
    #[error("the graph has {tensors} tensors, but {layouts} layouts were given")]
    LayoutCount {
        /// Tensors in the graph.
        tensors: usize,
        /// Layouts given.
        layouts: usize,
    },
    /// A tensor's layout could not be built.
    #[error("tensor `{tensor}` can't be stored {choice}: {source}")]
    Layout {
        /// The tensor.
        tensor: String,
        /// Its layout.
        choice: LayoutChoice,
        /// Why.
        source: LayoutErrors,
    },
}

/// The layout of every tensor of `graph` stored as `choices` says (one per tensor, by id).
///
/// Layouts are named after their tensors, with every character that can't be part of a Rust
/// or WGSL identifier (the dots of `l0.attn.qkv`) replaced by `_`. A gradient stored like the
/// tensor it is the gradient of shares that tensor's layout (the same declaration, so the same
/// views): GPU kernels read a gradient through the view of its tensor and check that they are
/// one.
pub fn tensor_layouts(
    graph: &Graph,
    choices: &[LayoutChoice],
) -> Result<Vec<TensorLayout>, StorageError> {
    if choices.len() != graph.tensors().len() {
        return Err(StorageError::LayoutCount {
            tensors: graph.tensors().len(),
            layouts: choices.len(),
        });
    }
    let own = |t: TensorId| {
        let (tensor, choice) = (graph.tensor(t), choices[t.index()]);
        choice
            .layout(&identifier(&tensor.name), tensor)
            .map_err(|source| StorageError::Layout {
                tensor: tensor.name.clone(),
                choice,
                source,
            })
    };
    let mut layouts: Vec<Option<TensorLayout>> = vec![None; choices.len()];
    for t in graph.ids() {
        if !graph.tensor(t).is_grad() {
            layouts[t.index()] = Some(own(t)?);
        }
    }
    for t in graph.ids() {
        if let Role::Grad { of } = graph.tensor(t).role {
            let shared = layouts[of.index()]
                .as_ref()
                .filter(|_| choices[of.index()] == choices[t.index()])
                .cloned();
            layouts[t.index()] = Some(match shared {
                Some(layout) => layout,
                None => own(t)?,
            });
        }
    }
    Ok(layouts.into_iter().flatten().collect())
}

/// `name` with every character that is not ASCII alphanumeric replaced by `_`.
fn identifier(name: &str) -> String {
    name.chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect()
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

    fn matrix(rows: Dim, cols: u32) -> Tensor {
        let mut t = activation();
        t.axes = vec![
            Axis {
                name: "rows".into(),
                dim: rows,
            },
            Axis {
                name: "cols".into(),
                dim: Dim::Fixed(cols),
            },
        ];
        t
    }

    /// Row-major with rows of `pitch` elements, written from the definition.
    fn pitched_offset(r: u64, c: u64, pitch: u64) -> u64 {
        r * pitch + c
    }

    #[test]
    fn row_major_pads_rows_the_vector_width_does_not_divide_and_nothing_else() {
        let sizes = Sizes { batch: 3, seq: 5 };
        // (columns, the pitch a row takes in memory)
        for (cols, pitch) in [
            (30522, 30528),
            (67, 72),
            (65, 72),
            (61, 61),
            (7, 7),
            (36, 36),
            (384, 384),
            (1, 1),
        ] {
            for rows in [Dim::Fixed(384), Dim::Seq] {
                let t = matrix(rows, cols);
                let layout = LayoutChoice::RowMajor.layout("w", &t).unwrap();
                let bound = layout.bind(&run_extents(&t, sizes)).unwrap();
                let n_rows = u64::from(rows.value(sizes));
                assert_eq!(bound.len(), n_rows * pitch, "{cols} columns");
                for r in [0, 1, n_rows - 1] {
                    let last = u64::from(cols) - 1;
                    for c in [0, 1.min(last), last / 2, last] {
                        assert_eq!(
                            bound.offset(&[r, c]),
                            Some(pitched_offset(r, c, pitch)),
                            "{cols} columns, [{r}, {c}]"
                        );
                    }
                }
                // Past the last column is padding, never an element.
                assert_eq!(bound.offset(&[0, u64::from(cols)]), None);
                // A row of a pitch of whole vectors is read four elements at a time from an
                // aligned start; an unpadded row of another length is not.
                if pitch % 4 == 0 {
                    assert!(layout.view().simplified_fn().contiguous_run(1, 4), "{cols}");
                } else {
                    assert!(
                        !layout.view().simplified_fn().contiguous_run(1, 4),
                        "{cols}"
                    );
                }
            }
        }
    }

    #[test]
    fn an_rtile_pads_a_fixed_axis_no_tile_of_four_or_more_divides() {
        let t = matrix(Dim::Fixed(384), 30522);
        let layout = LayoutChoice::RTile(8).layout("w", &t).unwrap();
        // 30 522 = 2 · 15 261: the tile stays 8, the axis is padded to 30 528.
        assert_eq!(layout.axes()[1].tile, 8);
        assert_eq!(layout.bind(&[]).unwrap().len(), 384 * 30528);
        // 36 = 4 · 9 keeps a tile of 4, unpadded.
        let layout = LayoutChoice::RTile(8)
            .layout("x", &matrix(Dim::Fixed(384), 36))
            .unwrap();
        assert_eq!(layout.axes()[1].tile, 4);
        assert_eq!(layout.bind(&[]).unwrap().len(), 384 * 36);
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
