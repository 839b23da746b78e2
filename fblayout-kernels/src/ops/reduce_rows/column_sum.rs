//! Pass 1 of a plain column sum, and the single pass that writes the sums themselves where one
//! chunk holds every row.

use std::fmt::Write as _;

use fblayout_core::kernel::{KernelModule, KernelSource, Operand, ParamValue, Scalar};
use fblayout_core::layout::View;

use super::{
    LANES, Partials, Walk, check_2d, chunk_rows, components_sum, getter, memory_order, putter,
    static_extent,
};
use crate::ops::compiled::Compiled;
use crate::ops::error::OpError;
use crate::runtime::{Batch, Gpu, GpuBuffer};
use crate::tensor::GpuArg;

/// Pass 1 of a plain column sum: partial rows of `Σ_rows x` (see the module docs); and, where
/// built with an output, the same kernel writing `Σ_rows x` into it (or adding it onto it)
/// from one chunk of every row.
#[derive(Debug, Clone)]
pub(crate) struct ColumnSum {
    role: &'static str,
    compiled: Compiled,
    /// The single pass, and the role of its output.
    single: Option<(Compiled, &'static str)>,
    walk: Walk,
    cols: u32,
    partials: Partials,
}

/// Where the kernel stores each chunk's sums.
#[derive(Debug, Clone, Copy)]
enum Sink<'a> {
    /// Partial row `wg.y` of `part`.
    Partials,
    /// The `[cols]` output of this role, added onto with `params.accumulate`.
    Output(&'a str),
}

const COLUMN_SUM: &str = "column_sum";

/// The chunks of a column sum over `rows` rows with `column_groups` workgroups across the
/// columns and chunks of a multiple of `align` rows (`chunk` overriding the rows per chunk),
/// and the rows of each.
fn column_chunks(rows: u32, column_groups: u32, align: u32, chunk: Option<u32>) -> (u32, u32) {
    let per_chunk = chunk_rows(rows, column_groups, align, 32, chunk);
    (rows.div_ceil(per_chunk), per_chunk)
}

impl ColumnSum {
    /// The kernel summing operand `role` (a `[rows, cols]` view, `cols` static) over its rows;
    /// with `out` (a role and a `[cols]` view), also its single pass into that output.
    pub(crate) fn new(
        gpu: &Gpu,
        op: &'static str,
        role: &'static str,
        view: &View,
        out: Option<(&'static str, &View)>,
    ) -> Result<Self, OpError> {
        check_2d(op, role, view)?;
        let cols = static_extent(op, role, view, 1)?;
        let partials = Partials::new(op, Some(cols))?;
        // Lanes step along the axis that is contiguous in memory: four-wide where the operand
        // allows it, else the one with the longer run.
        let x = Operand::read(role, view)?;
        let (fast, width, x) = match (x.clone().vectorized(1), x.clone().vectorized(0)) {
            (o, _) if o.vector_axis().is_some() => (1, 4, o),
            (_, o) if o.vector_axis().is_some() => (0, 4, o),
            _ if memory_order(view, 0).run > memory_order(view, 1).run => (0, 1, x),
            _ => (1, 1, x),
        };
        let order = memory_order(view, fast);
        let walk = if fast == 1 {
            // Lanes along the columns, the rest across rows: at least one whole tile of rows.
            let along = lanes_along(cols.div_ceil(width));
            let across = order.block.min(16).max(LANES / along);
            Walk::new(1, width, order, LANES / across, LANES)
        } else {
            // Lanes along the rows, `across` columns per workgroup.
            let inner = (order.run / width).clamp(1, 64);
            let across = order.block.min(16).min(LANES / inner);
            Walk::new(0, width, order, LANES / across, LANES)
        };
        let part = Operand::write("part", partials.view())?.vectorized(1);
        let part_width = if fast == 1 { width } else { 1 };
        let reader = getter(&x, fast, width);
        let body = reader.clone()
            + &putter(&part, 1, part_width)
            + &column_sum_entry(role, &walk, Sink::Partials);
        let source = KernelSource::new(op)
            .operand(x.clone())
            .operand(part)
            .scalar("chunk_rows", Scalar::U32)
            .body(body);
        let single = match out {
            Some((out_role, out_view)) => {
                let o = Operand::write(out_role, out_view)?.vectorized(0);
                let body = reader
                    + &getter(&o, 0, part_width)
                    + &putter(&o, 0, part_width)
                    + &column_sum_entry(role, &walk, Sink::Output(out_role));
                let source = KernelSource::new(op)
                    .operand(x)
                    .operand(o)
                    .scalar("chunk_rows", Scalar::U32)
                    .scalar("accumulate", Scalar::U32)
                    .body(body);
                Some((Compiled::new(op, gpu, source)?, out_role))
            }
            None => None,
        };
        Ok(Self {
            role,
            compiled: Compiled::new(op, gpu, source)?,
            single,
            walk,
            cols,
            partials,
        })
    }

    /// The walk of the workgroups.
    pub(crate) fn walk(&self) -> Walk {
        self.walk
    }

    /// The partial rows it writes.
    pub(crate) fn partials(&self) -> &Partials {
        &self.partials
    }

    /// The shader.
    pub(crate) fn module(&self) -> &KernelModule {
        self.compiled.module()
    }

    /// The single pass's shader, where built.
    pub(crate) fn single_module(&self) -> Option<&KernelModule> {
        self.single.as_ref().map(|(c, _)| c.module())
    }

    /// The workgroups across the columns, and the multiple the rows per chunk are rounded to.
    fn grid(&self) -> (u32, u32) {
        let walk = self.walk;
        if walk.fast == 1 {
            (self.cols.div_ceil(walk.span()), walk.across)
        } else {
            (self.cols.div_ceil(walk.across), walk.span())
        }
    }

    /// The chunks pass 1 cuts `rows` rows into, `chunk` overriding the rows per chunk, and
    /// the rows of each.
    pub(crate) fn chunks(&self, rows: u32, chunk: Option<u32>) -> (u32, u32) {
        let (column_groups, align) = self.grid();
        column_chunks(rows, column_groups, align, chunk)
    }

    /// The most chunks pass 1 cuts `rows` rows into, `chunk` overriding the rows per chunk,
    /// whatever the walk: [`chunks`](Self::chunks) with one group of columns and no rounding,
    /// its fewest rows per chunk ([`chunk_rows`] grows with both).
    pub(crate) fn most_chunks(rows: u32, chunk: Option<u32>) -> u32 {
        column_chunks(rows, 1, 1, chunk).0
    }

    /// Records the single pass over `x` (every row in one chunk) into `out`, or adding onto
    /// it with `accumulate`. Refused where it was not built.
    pub(crate) fn record_single(
        &self,
        batch: &mut Batch<'_>,
        x: &GpuArg<'_>,
        out: &GpuArg<'_>,
        accumulate: bool,
    ) -> Result<(), OpError> {
        let Some((compiled, out_role)) = &self.single else {
            return Err(OpError::shape(
                COLUMN_SUM,
                "the single pass was not built for this column sum",
            ));
        };
        let (column_groups, _) = self.grid();
        let rows = x.dims()[0] as u32;
        compiled.record(
            batch,
            COLUMN_SUM,
            &[(self.role, x), (out_role, out)],
            &[
                ("chunk_rows", ParamValue::U32(rows.max(1))),
                ("accumulate", ParamValue::U32(u32::from(accumulate))),
            ],
            [column_groups, 1, 1],
        )
    }

    /// Records pass 1 over `x`; returns the scratch buffer of partial rows and their number.
    /// `chunk` overrides the rows per chunk.
    pub(crate) fn record(
        &self,
        batch: &mut Batch<'_>,
        x: &GpuArg<'_>,
        chunk: Option<u32>,
    ) -> Result<(GpuBuffer, u32), OpError> {
        let rows = x.dims()[0] as u32;
        let (column_groups, _) = self.grid();
        let (chunks, per_chunk) = self.chunks(rows, chunk);
        let buffer = self.partials.scratch(batch, chunks)?;
        let part = self.partials.arg(&buffer, chunks)?;
        self.compiled.record(
            batch,
            COLUMN_SUM,
            &[(self.role, x), ("part", &part)],
            &[("chunk_rows", ParamValue::U32(per_chunk))],
            [column_groups, chunks, 1],
        )?;
        Ok((buffer, chunks))
    }
}

/// WGSL storing `sum` (`w` values at column `c`) where `sink` says.
fn store(sink: Sink<'_>, w: u32, sum: &str) -> String {
    match sink {
        Sink::Partials => format!("part_put{w}(wg.y, c, {sum});"),
        Sink::Output(o) => format!(
            "var total = {sum};\n        if (params.accumulate != 0u) {{\n            \
             total = total + {o}_get{w}(c);\n        }}\n        {o}_put{w}(c, total);"
        ),
    }
}

fn column_sum_entry(x: &str, walk: &Walk, sink: Sink<'_>) -> String {
    let ty = walk.value_type();
    let w = walk.width;
    let Walk {
        inner,
        across,
        outer,
        ..
    } = *walk;
    let lanes = walk.lanes();
    let span = walk.span();
    let mut s = String::new();
    let tile_ty = if walk.fast == 1 { ty } else { "f32" };
    let _ = writeln!(s, "var<workgroup> cs_tile: array<{tile_ty}, {lanes}>;");
    let _ = writeln!(
        s,
        "@compute @workgroup_size({lanes})\nfn {COLUMN_SUM}(@builtin(workgroup_id) wg: vec3<u32>, \
         @builtin(local_invocation_index) lid: u32) {{"
    );
    s += &walk.decode("lid");
    let _ = writeln!(s, "    let r0 = wg.y * params.chunk_rows;");
    let _ = writeln!(s, "    let r1 = min(r0 + params.chunk_rows, {x}_dim0());");
    let _ = writeln!(s, "    var acc = {ty}(0.0);");
    if walk.fast == 1 {
        // Lanes hold `w` columns each and walk the chunk's rows `across` at a time.
        let _ = writeln!(s, "    let c = wg.x * {span}u + wk_fast;");
        let _ = writeln!(
            s,
            "    for (var r = r0 + wk_across; r < r1; r = r + {across}u) {{\n        \
             acc = acc + {x}_get{w}(r, c);\n    }}"
        );
        let _ = writeln!(s, "    cs_tile[lid] = acc;\n    workgroupBarrier();");
        let _ = writeln!(
            s,
            "    if (wk_across == 0u) {{\n        var sum = cs_tile[lid];\n        \
             for (var q = 1u; q < {across}u; q = q + 1u) {{\n            \
             sum = sum + cs_tile[{}];\n        }}\n        {}\n    }}",
            walk.lane_at_across("q"),
            store(sink, w, "sum")
        );
    } else {
        // Lanes hold `w` rows of one column each; `across` columns per workgroup.
        let _ = writeln!(s, "    let c = wg.x * {across}u + wk_across;");
        let _ = writeln!(
            s,
            "    if (c < {x}_dim1()) {{\n        \
             for (var r = r0 + wk_fast; r < r1; r = r + {span}u) {{\n            \
             acc = acc + {x}_get{w}(r, c);\n        }}\n    }}"
        );
        let _ = writeln!(
            s,
            "    cs_tile[lid] = {};\n    workgroupBarrier();",
            components_sum("acc", w)
        );
        let _ = writeln!(
            s,
            "    if (wk_inner == 0u && wk_outer == 0u) {{\n        var sum = 0.0;\n        \
             for (var o = 0u; o < {outer}u; o = o + 1u) {{\n            \
             for (var i = 0u; i < {inner}u; i = i + 1u) {{\n                \
             sum = sum + cs_tile[i + {inner}u * (wk_across + {across}u * o)];\n            }}\n        \
             }}\n        {}\n    }}",
            store(sink, 1, "sum")
        );
    }
    s.push_str("}\n");
    s
}

/// Lanes of a column-sum workgroup along a line of `n` values (or four-value runs): 16, 32 or
/// 64, whichever leaves the fewest lanes past the line's end in the last block of columns (the
/// widest among equals).
fn lanes_along(n: u32) -> u32 {
    [64, 32, 16]
        .into_iter()
        .min_by_key(|&a| n.next_multiple_of(a) - n)
        .unwrap_or(64)
}
