//! Reductions over the rows of a 2-D view (column reductions), and how a workgroup's lanes walk
//! a 2-D view in memory order.
//!
//! A *column reduction* sums a `[rows, cols]` tensor over its rows: the bias gradient
//! `db = Σ_rows dy`, the norm weight gradients. `cols` is often small (768) and `rows` large
//! (tokens), so one workgroup per column would leave a big GPU idle. Instead the rows are cut
//! into *chunks*: pass 1 reduces each chunk of each block of columns in one workgroup and writes
//! one partial row per chunk to a scratch tensor of [`Partials`] `[chunks, cols]`; pass 2
//! ([`PartialsSum`]) adds the partial rows of each column in a fixed order and writes (or, with
//! `accumulate`, adds to) the result. Both passes combine values in an order that depends only on
//! the shapes, so results are the same from run to run. The chunk size is picked when a dispatch
//! is recorded, so that about [`FILL_WORKGROUPS`] workgroups run ([`chunk_rows`]).
//!
//! **Walks.** Lanes that run together should read neighbouring memory. Which coordinates
//! neighbour each other in memory depends on the layout: in a row-major tensor the columns of a
//! row; in an R-Tile the `t` columns of a tile row, then the next row *of the same tile*, and
//! only then the next tile. A [`Walk`] lays a workgroup's lanes over a block of the view in that
//! order: `inner` lanes along the *fast* axis (the one contiguous in memory, four elements per
//! lane when wide), then `across` lanes along the other axis, then `outer` more lanes along the
//! fast axis. [`memory_order`] finds the run and block lengths by evaluating the view's offset
//! function at a sample binding; the walk is only a choice of which lane handles which
//! coordinate, so any answer is correct and only speed depends on it. The kernels themselves
//! address operands by coordinates alone, through the accessors of [`getter`] and [`putter`].
//!
//! [`ColumnSum`] is pass 1 for a plain sum (the bias gradient). Kernels that reduce their rows
//! anyway (the norm backward) write their own partial rows and share pass 2.

mod column_sum;
mod partials;
mod walk;
mod wgsl;

pub(crate) use column_sum::ColumnSum;
pub(crate) use partials::{Partials, PartialsSum};
pub(crate) use walk::{MemoryOrder, Walk, memory_order};
pub(crate) use wgsl::{components_sum, getter, putter, value_type};

use fblayout_core::layout::View;

use super::error::OpError;
use crate::cpu::{Logical, LogicalMut, Real};
use crate::tensor::GpuArg;

/// About how many workgroups a chunked reduction aims to run: enough to fill a large GPU (an
/// H200 has 132 multiprocessors) several times over.
pub(crate) const FILL_WORKGROUPS: u64 = 1024;

/// Invocations per workgroup of the column reductions.
const LANES: u32 = 256;

/// The rows per chunk of a reduction over `rows` rows: at least `min_rows`, a multiple of
/// `align`, and about [`FILL_WORKGROUPS`] workgroups in all when `columns` workgroups share each
/// chunk; `requested` (rounded up to `align`) overrides.
pub(crate) fn chunk_rows(
    rows: u32,
    columns: u32,
    align: u32,
    min_rows: u32,
    requested: Option<u32>,
) -> u32 {
    let fill = (u64::from(rows) * u64::from(columns.max(1))).div_ceil(FILL_WORKGROUPS) as u32;
    let rows_per_chunk = requested.unwrap_or(fill.max(min_rows)).max(1);
    rows_per_chunk.next_multiple_of(align.max(1))
}
/// Checks that operand `role` has shape `want`.
pub(crate) fn expect_dims(
    op: &'static str,
    role: &str,
    got: &[usize],
    want: &[usize],
) -> Result<(), OpError> {
    if got != want {
        return Err(OpError::shape(
            op,
            format!("`{role}` has shape {got:?}, expected {want:?}"),
        ));
    }
    Ok(())
}

/// The `(rows, cols)` of a 2-D operand `role` of shape `dims`.
pub(crate) fn matrix_dims(
    op: &'static str,
    role: &str,
    dims: &[usize],
) -> Result<(usize, usize), OpError> {
    match *dims {
        [rows, cols] => Ok((rows, cols)),
        _ => Err(OpError::shape(
            op,
            format!("`{role}` has shape {dims:?}; the kernel takes [rows, cols]"),
        )),
    }
}

/// Row `r` of a `[rows, cols]` CPU operand, in `f64`.
pub(crate) fn row_cpu<T: Real>(a: &dyn Logical<T>, r: usize, cols: usize) -> Vec<f64> {
    (0..cols).map(|c| a.get(&[r, c]).to_f64()).collect()
}

/// The CPU twin of a column reduction: writes into `out` (a `[cols]` vector) the sums of
/// `rows` column by column, in row order, added to `out`'s values with `accumulate`.
pub(crate) fn column_sums_cpu<'a, T: Real>(
    out: &mut dyn LogicalMut<T>,
    rows: impl Iterator<Item = &'a Vec<f64>>,
    accumulate: bool,
) {
    let cols = out.dims()[0];
    let mut sums: Vec<f64> = if accumulate {
        (0..cols).map(|c| out.get(&[c]).to_f64()).collect()
    } else {
        vec![0.0; cols]
    };
    let mut partial = vec![0.0; cols];
    for r in rows {
        for (p, v) in partial.iter_mut().zip(r) {
            *p += v;
        }
    }
    for (s, p) in sums.iter_mut().zip(&partial) {
        *s += p;
    }
    let values: Vec<T> = sums.into_iter().map(T::from_f64).collect();
    out.scatter(&values);
}

/// Checks that argument `role` is read through `view`, before a kernel's own check would (for
/// arguments that reach a kernel only later, or re-read through another view).
pub(crate) fn check_view(
    op: &'static str,
    role: &'static str,
    arg: &GpuArg<'_>,
    view: &View,
) -> Result<(), OpError> {
    if arg.view() != view {
        return Err(OpError::WrongView {
            op,
            role,
            given: format!(
                "view `{}` of `{}`",
                arg.view().name(),
                arg.view().layout().name()
            ),
            built: format!("view `{}` of `{}`", view.name(), view.layout().name()),
        });
    }
    Ok(())
}

/// Checks that a view is 2-D.
pub(crate) fn check_2d(op: &'static str, role: &'static str, view: &View) -> Result<(), OpError> {
    if view.axes().len() != 2 {
        return Err(OpError::Unsupported {
            op,
            role,
            view: view.name().to_owned(),
            why: format!(
                "it has {} axes; the kernel takes [rows, cols] (merge the leading axes into one)",
                view.axes().len()
            ),
        });
    }
    Ok(())
}

/// The static extent of axis `axis` of `view`, or an error naming `role`.
pub(crate) fn static_extent(
    op: &'static str,
    role: &'static str,
    view: &View,
    axis: usize,
) -> Result<u32, OpError> {
    view.axes()[axis]
        .extent
        .as_static()
        .map(|n| n as u32)
        .ok_or_else(|| OpError::Unsupported {
            op,
            role,
            view: view.name().to_owned(),
            why: format!(
                "axis `{}` has a run-time extent; the kernel needs it static",
                view.axes()[axis].name
            ),
        })
}
