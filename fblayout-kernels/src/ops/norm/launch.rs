//! Launch shapes of the norms' row kernels.
//!
//! A row kernel puts `lanes_per_row` lanes on each row (each lane holding every
//! `lanes_per_row`-th run of four columns in registers) and takes `rows_per_block` rows at once
//! per workgroup, so a workgroup has `lanes_per_row · rows_per_block` lanes. The rows of a
//! block are stacked: sub-blocks of the layout's own block of rows (the rows of an R-Tile tile
//! row, which lanes running together read as whole tiles; one row of a row-major tensor), one
//! after the other in lane order. The backward walks a *chunk* of `chunk_rows` rows per
//! workgroup, a block at a time, and writes one partial row of `dγ` (and `dβ`) per chunk.
//!
//! How a row's lanes add their values ([`RowSum`]):
//! - [`RowSum::Lanes`]: over the row's lanes only, both sums of the LayerNorm backward (`Σ g`
//!   and `Σ g·x̂`) in one pass: by subgroup shuffles where the device has subgroups and a row's
//!   lanes lie inside its smallest subgroup ([`SumForm::Shuffle`], no barrier), else through
//!   workgroup memory with two barriers per block of rows ([`SumForm::Shared`]).
//! - [`RowSum::Workgroup`]: one whole-workgroup `fbl_wg_sum` per row and per sum, as the kernels
//!   did before launch shapes; with the other fields unset it builds those kernels exactly
//!   ([`NormLaunch::BASELINE`]), the baseline the benchmark compares against.
//!
//! [`RowSum::Auto`], the default, picks one of the two from the layout, the row length and the
//! device, as measured on the H200. Unset fields are chosen from the row length and the device
//! (see [`Shape::resolve`]).

use super::super::error::OpError;
use super::super::reduce_rows::{MemoryOrder, Walk};
use crate::wgsl::reduce::LaneGroup;

/// How the rows of one pass are spread over lanes and workgroups (see the module docs).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct RowLaunch {
    /// Lanes sharing one row: a power of two, at most 256.
    pub lanes_per_row: Option<u32>,
    /// Rows a workgroup takes at once: a power of two, with `lanes_per_row` at most 256 lanes.
    pub rows_per_block: Option<u32>,
    /// How a row's lanes add their values.
    pub row_sum: RowSum,
}

/// How the lanes of a row add their values (see the module docs).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum RowSum {
    /// [`Lanes`](Self::Lanes) where it was measured faster than the whole-workgroup sums, else
    /// [`Workgroup`](Self::Workgroup) with the shapes before launch shapes: `Lanes` for rows
    /// stored one after the other (row-major, not R-Tile) that one subgroup covers at most four
    /// values a lane, on a device with subgroups, or whenever lanes or rows are set.
    ///
    /// On the H200 (`bench_norm --sweep`, 4096 and 16384 rows) `Lanes` was 1.15–1.38× faster
    /// at 384 row-major columns, but 0.6–0.95× at 768 columns (six values a lane, where the
    /// baseline puts 64 lanes on a row) and 0.5–0.9× on R-Tiles (whose stacked tile rows fall
    /// back to workgroup memory).
    #[default]
    Auto,
    /// Over the row's lanes only: subgroup shuffles where they fit, else workgroup memory.
    Lanes,
    /// Over the whole workgroup, one sum per row; unset shapes are chosen as before launch
    /// shapes.
    Workgroup,
}

/// The launch shapes of a norm's kernels (see the module docs).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct NormLaunch {
    /// The forward's rows.
    pub forward: RowLaunch,
    /// The backward's rows.
    pub backward: RowLaunch,
    /// Rows per workgroup of the backward (rounded up to whole blocks); unset, chosen when
    /// a call is recorded so that about a thousand workgroups run (at least 16 rows each).
    pub chunk_rows: Option<u32>,
}

impl NormLaunch {
    /// The kernels as they were before launch shapes: whole-workgroup row sums, one row per
    /// workgroup of a row-major tensor (a tile row of an R-Tile) in the forward and at least
    /// four in the backward.
    pub const BASELINE: NormLaunch = NormLaunch {
        forward: RowLaunch {
            lanes_per_row: None,
            rows_per_block: None,
            row_sum: RowSum::Workgroup,
        },
        backward: RowLaunch {
            lanes_per_row: None,
            rows_per_block: None,
            row_sum: RowSum::Workgroup,
        },
        chunk_rows: None,
    };
}

/// The form of the row sums a kernel was built with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SumForm {
    /// `fbl_wg_sum` over the workgroup, once per row ([`RowSum::Workgroup`]).
    Workgroup,
    /// Subgroup shuffles among a row's lanes.
    Shuffle,
    /// Workgroup memory, each lane adding its row's values.
    Shared,
}

/// The shape a row kernel was built with: what its [`RowLaunch`] resolved to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct LaunchShape {
    /// Lanes sharing one row.
    pub lanes_per_row: u32,
    /// Rows a workgroup takes at once.
    pub rows_per_block: u32,
    /// How a row's lanes add their values.
    pub sum: SumForm,
}

impl std::fmt::Display for LaunchShape {
    /// `32 lanes × 8 rows, shuffle`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let sum = match self.sum {
            SumForm::Workgroup => "workgroup sums",
            SumForm::Shuffle => "shuffle",
            SumForm::Shared => "shared memory",
        };
        write!(
            f,
            "{} lanes × {} rows, {sum}",
            self.lanes_per_row, self.rows_per_block
        )
    }
}

/// Runs shorter than this many elements make a workgroup take several rows at once.
const SHORT_RUN: u32 = 32;
/// Most rows of a layout's block taken as one sub-block.
const MAX_ACROSS: u32 = 8;
/// Most lanes per workgroup (WebGPU's guaranteed limit), and the fewest of the baseline.
pub(crate) const MAX_LANES: u32 = 256;
const MIN_LANES: u32 = 32;
/// Values of a row each lane aims to hold.
const PER_LANE: u32 = 4;
/// Fewest rows the baseline backward takes at once.
const BACKWARD_ROWS: u32 = 4;
/// Most lanes on a row by default: one subgroup of most GPUs, so that a row's sums stay in it.
const ROW_LANES: u32 = 32;
/// Lanes of a workgroup by default: the forward's, the backward's (the backward keeps more
/// rows in flight per partial row it writes).
const FORWARD_LANES: u32 = 128;
const BACKWARD_LANES: u32 = 256;
/// Most rows of a block by default (short rows): the backward's lanes of one column position
/// add their rows' sums one after the other at the end of a chunk.
const MAX_ROWS: u32 = 16;

/// Which pass a shape is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Pass {
    Forward,
    Backward,
}

/// The resolved shape of a row kernel: the walk of one sub-block, how many sub-blocks a
/// workgroup stacks, the values per lane, the row length, and the form of the row sums.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Shape {
    pub(crate) walk: Walk,
    pub(crate) stack: u32,
    pub(crate) per_lane: u32,
    pub(crate) cols: u32,
    pub(crate) sum: SumForm,
}

impl Shape {
    /// The shape of `launch` for rows of `cols` values read `width` at a time from a view in
    /// `order`, on a device whose smallest subgroup has `subgroup` lanes (`None`: no
    /// subgroups). Unset lanes per row: enough for about four values each, at most 32 and at
    /// most the smallest subgroup; unset rows: the layout's block, more to fill 128 lanes (the
    /// forward) or 256 (the backward), up to 16. [`RowSum::Workgroup`] with both unset: the
    /// shapes before launch shapes.
    pub(crate) fn resolve(
        op: &'static str,
        launch: RowLaunch,
        pass: Pass,
        cols: u32,
        width: u32,
        order: MemoryOrder,
        subgroup: Option<u32>,
    ) -> Result<Self, OpError> {
        let per_row = cols.div_ceil(width);
        let block = if order.run < SHORT_RUN {
            order.block.min(MAX_ACROSS)
        } else {
            1
        };
        let cap = subgroup.map_or(ROW_LANES, |s| s.clamp(1, ROW_LANES));
        let legacy = match launch.row_sum {
            RowSum::Workgroup => true,
            RowSum::Lanes => false,
            RowSum::Auto => {
                let set = launch.lanes_per_row.is_some() || launch.rows_per_block.is_some();
                let fits = block == 1 && subgroup.is_some() && per_row <= cap * PER_LANE;
                !(set || fits)
            }
        };
        // The baseline's rows are one walk (no stacking), as before launch shapes.
        let (along, rows, stacked) = match (launch.lanes_per_row, launch.rows_per_block) {
            (None, None) if legacy => {
                let across = match pass {
                    Pass::Forward => block,
                    Pass::Backward => block.max(BACKWARD_ROWS),
                };
                let along = per_row
                    .div_ceil(PER_LANE)
                    .next_power_of_two()
                    .max(MIN_LANES / across)
                    .min(MAX_LANES / across);
                (along, across, false)
            }
            (along, rows) => {
                let along = along
                    .unwrap_or_else(|| per_row.div_ceil(PER_LANE).next_power_of_two().min(cap));
                let lanes = match pass {
                    Pass::Forward => FORWARD_LANES,
                    Pass::Backward => BACKWARD_LANES,
                };
                let rows = rows
                    .unwrap_or_else(|| block.max((lanes / along.clamp(1, lanes)).min(MAX_ROWS)));
                (along, rows, true)
            }
        };
        let bad = |what: String| Err(OpError::shape(op, what));
        if !along.is_power_of_two() || along > MAX_LANES {
            return bad(format!(
                "{along} lanes per row: a power of two up to {MAX_LANES} is needed"
            ));
        }
        if !rows.is_power_of_two() {
            return bad(format!("{rows} rows per block: a power of two is needed"));
        }
        if along * rows > MAX_LANES {
            return bad(format!(
                "{along} lanes per row × {rows} rows per block: more than {MAX_LANES} lanes"
            ));
        }
        let across = if stacked { block.min(rows) } else { rows };
        let walk = Walk::new(1, width, order, along, along * across);
        let group = LaneGroup {
            inner: walk.inner,
            stride: walk.inner * walk.across,
            outer: walk.outer,
        };
        let sum = match (legacy, subgroup) {
            (true, _) => SumForm::Workgroup,
            (false, Some(size)) if group.fits(size) => SumForm::Shuffle,
            (false, _) => SumForm::Shared,
        };
        Ok(Self {
            walk,
            stack: rows / across,
            per_lane: per_row.div_ceil(along),
            cols,
            sum,
        })
    }

    /// Invocations per workgroup.
    pub(crate) fn lanes(&self) -> u32 {
        self.walk.lanes() * self.stack
    }

    /// Rows a workgroup takes at once.
    pub(crate) fn rows(&self) -> u32 {
        self.walk.across * self.stack
    }

    /// The lanes of one row.
    pub(crate) fn group(&self) -> LaneGroup {
        LaneGroup {
            inner: self.walk.inner,
            stride: self.walk.inner * self.walk.across,
            outer: self.walk.outer,
        }
    }

    /// What it resolved to.
    pub(crate) fn launch(&self) -> LaunchShape {
        LaunchShape {
            lanes_per_row: self.walk.along(),
            rows_per_block: self.rows(),
            sum: self.sum,
        }
    }

    /// WGSL decoding `lid` into the walk's `wk_*` lane coordinates and `wk_row`, the lane's
    /// row in the block (`wk_across` alone when nothing is stacked).
    pub(crate) fn decode(&self) -> String {
        if self.stack == 1 {
            return self.walk.decode("lid");
        }
        let sub = self.walk.lanes();
        format!(
            "    let wk_lid = lid % {sub}u;\n{}    let wk_row = (lid / {sub}u) * {}u + wk_across;\n",
            self.walk.decode("wk_lid"),
            self.walk.across
        )
    }

    /// The lane's row in the block, after [`decode`](Self::decode).
    pub(crate) fn row_slot(&self) -> &'static str {
        if self.stack == 1 {
            "wk_across"
        } else {
            "wk_row"
        }
    }

    /// The lane holding the same columns as the current one in row `q` of the block (a WGSL
    /// expression in `q`).
    pub(crate) fn lane_of_row(&self, q: &str) -> String {
        if self.stack == 1 {
            return self.walk.lane_at_across(q);
        }
        let across = self.walk.across;
        format!(
            "({} + ({q} / {across}u) * {}u)",
            self.walk.lane_at_across(&format!("({q} % {across}u)")),
            self.walk.lanes()
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ROW_MAJOR: MemoryOrder = MemoryOrder { run: 256, block: 1 };
    const RTILE4: MemoryOrder = MemoryOrder { run: 4, block: 4 };

    fn resolve(launch: RowLaunch, pass: Pass, order: MemoryOrder, sub: Option<u32>) -> Shape {
        Shape::resolve("test", launch, pass, 384, 4, order, sub).unwrap()
    }

    #[test]
    fn the_baseline_keeps_the_shapes_before_launch_shapes() {
        let base = NormLaunch::BASELINE;
        let f = resolve(base.forward, Pass::Forward, ROW_MAJOR, Some(32));
        assert_eq!((f.walk.along(), f.rows(), f.stack), (32, 1, 1));
        let b = resolve(base.backward, Pass::Backward, ROW_MAJOR, Some(32));
        assert_eq!(
            (b.walk.along(), b.rows(), b.stack, b.lanes()),
            (32, 4, 1, 128)
        );
        assert_eq!(b.sum, SumForm::Workgroup);
        let t = resolve(base.forward, Pass::Forward, RTILE4, None);
        assert_eq!((t.walk.across, t.walk.inner, t.walk.outer), (4, 1, 32));
    }

    #[test]
    fn rows_sum_in_a_subgroup_where_they_fit() {
        let d = NormLaunch::default();
        let b = resolve(d.backward, Pass::Backward, ROW_MAJOR, Some(32));
        assert_eq!((b.walk.along(), b.rows(), b.per_lane), (32, 8, 3));
        assert_eq!(b.sum, SumForm::Shuffle);
        // Lavapipe's subgroups of 8: rows of 8 lanes when asked for; 32 asked for, shared memory.
        let lanes = RowLaunch {
            row_sum: RowSum::Lanes,
            ..RowLaunch::default()
        };
        let small = resolve(lanes, Pass::Backward, ROW_MAJOR, Some(8));
        assert_eq!((small.walk.along(), small.sum), (8, SumForm::Shuffle));
        let wide = RowLaunch {
            lanes_per_row: Some(32),
            ..RowLaunch::default()
        };
        let w = resolve(wide, Pass::Backward, ROW_MAJOR, Some(8));
        assert_eq!(w.sum, SumForm::Shared);
        assert_eq!(
            resolve(wide, Pass::Backward, ROW_MAJOR, None).sum,
            SumForm::Shared
        );
        // An R-Tile's tile rows are stacked: 8 lanes × 4 rows per sub-block, 4 sub-blocks.
        let tiled = RowLaunch {
            lanes_per_row: Some(8),
            rows_per_block: Some(16),
            ..RowLaunch::default()
        };
        let t = resolve(tiled, Pass::Backward, RTILE4, Some(32));
        assert_eq!((t.walk.across, t.stack, t.lanes()), (4, 4, 128));
        assert_eq!((t.group().mask(), t.sum), (28, SumForm::Shuffle));
        assert_eq!(
            resolve(tiled, Pass::Backward, RTILE4, Some(16)).sum,
            SumForm::Shared
        );
    }

    #[test]
    fn the_default_sums_over_lanes_only_where_they_were_measured_faster() {
        let d = NormLaunch::default().backward;
        let form = |cols: u32, order: MemoryOrder, sub: Option<u32>| {
            Shape::resolve("test", d, Pass::Backward, cols, 4, order, sub)
                .unwrap()
                .sum
        };
        // Row-major rows one subgroup covers at four values a lane: shuffles.
        assert_eq!(form(384, ROW_MAJOR, Some(32)), SumForm::Shuffle);
        assert_eq!(form(512, ROW_MAJOR, Some(32)), SumForm::Shuffle);
        // Longer rows, R-Tiles, small subgroups and no subgroups: the baseline's sums.
        assert_eq!(form(768, ROW_MAJOR, Some(32)), SumForm::Workgroup);
        assert_eq!(form(384, RTILE4, Some(32)), SumForm::Workgroup);
        assert_eq!(form(384, ROW_MAJOR, Some(8)), SumForm::Workgroup);
        assert_eq!(form(384, ROW_MAJOR, None), SumForm::Workgroup);
        // Those are the baseline's shapes exactly.
        let base = resolve(
            NormLaunch::BASELINE.backward,
            Pass::Backward,
            RTILE4,
            Some(32),
        );
        let auto = resolve(d, Pass::Backward, RTILE4, Some(32));
        assert_eq!(auto, base);
    }

    #[test]
    fn bad_launch_shapes_are_refused() {
        for (lanes, rows) in [
            (Some(0), None),
            (Some(3), None),
            (None, Some(0)),
            (Some(64), Some(8)),
        ] {
            let launch = RowLaunch {
                lanes_per_row: lanes,
                rows_per_block: rows,
                row_sum: RowSum::Lanes,
            };
            let err = Shape::resolve("test", launch, Pass::Forward, 384, 4, ROW_MAJOR, None);
            assert!(
                matches!(err, Err(OpError::Shape { .. })),
                "{lanes:?} × {rows:?}"
            );
        }
    }
}
