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

use std::fmt::Write as _;

use fblayout_core::kernel::{KernelSource, Operand, ParamValue, Scalar};
use fblayout_core::layout::{ElemType, LayoutSpec, View};

use super::compiled::Compiled;
use super::error::OpError;
use crate::cpu::{Logical, LogicalMut, Real};
use crate::runtime::{Batch, Gpu, GpuBuffer};
use crate::tensor::GpuArg;

/// About how many workgroups a chunked reduction aims to run: enough to fill a large GPU (an
/// H200 has 132 multiprocessors) several times over.
pub(crate) const FILL_WORKGROUPS: u64 = 1024;

/// Invocations per workgroup of the column reductions.
const LANES: u32 = 256;

/// The run-time extent every layout axis is bound to when [`memory_order`] samples a view.
const SAMPLE_EXTENT: u32 = 64;

/// The longest run [`memory_order`] looks for.
const MAX_RUN: u64 = 1024;

/// The longest block [`memory_order`] looks for.
const MAX_BLOCK: u64 = 64;

/// How a 2-D view is laid out near its origin, along a *fast* axis.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct MemoryOrder {
    /// The largest power of two `n` such that coordinates `0..n` along the fast axis are `n`
    /// consecutive elements.
    pub(crate) run: u32,
    /// The largest power of two `h` such that `h` such runs, at coordinates `0..h` of the other
    /// axis, follow one another in memory.
    pub(crate) block: u32,
}

/// The memory order of `view` (2-D) along axis `fast`, sampled with every run-time extent
/// bound to [`SAMPLE_EXTENT`]. A view that does not bind there counts as scattered.
pub(crate) fn memory_order(view: &View, fast: usize) -> MemoryOrder {
    let scattered = MemoryOrder { run: 1, block: 1 };
    let names: Vec<String> = view
        .layout()
        .dynamic_axes()
        .map(|a| a.name.clone())
        .collect();
    let extents: Vec<(&str, u32)> = names.iter().map(|n| (n.as_str(), SAMPLE_EXTENT)).collect();
    let Ok(bound) = view.bind(&extents) else {
        return scattered;
    };
    if bound.shape().len() != 2 {
        return scattered;
    }
    let other = 1 - fast;
    let at = |f: u64, o: u64| {
        let mut c = [0, 0];
        c[fast] = f;
        c[other] = o;
        bound.offset(&c)
    };
    let Some(base) = at(0, 0) else {
        return scattered;
    };
    let mut run = 1;
    while run * 2 <= bound.shape()[fast].min(MAX_RUN)
        && (run..2 * run).all(|j| at(j, 0) == Some(base + j))
    {
        run *= 2;
    }
    let mut block = 1;
    while block * 2 <= bound.shape()[other].min(MAX_BLOCK)
        && (block..2 * block).all(|k| (0..run).all(|j| at(j, k) == Some(base + k * run + j)))
    {
        block *= 2;
    }
    MemoryOrder {
        run: run as u32,
        block: block as u32,
    }
}

/// How a workgroup's lanes cover a block of a 2-D view (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Walk {
    /// The view axis lanes step along first (contiguous in memory).
    pub(crate) fast: usize,
    /// Elements per lane along it: 4 when every operand has wide accesses along it, else 1.
    pub(crate) width: u32,
    /// Lanes along the fast axis before the other axis.
    pub(crate) inner: u32,
    /// Lanes along the other axis.
    pub(crate) across: u32,
    /// Lanes along the fast axis after the other axis.
    pub(crate) outer: u32,
}

impl Walk {
    /// The walk of a workgroup of `lanes` lanes with `along` of them on each line of the fast
    /// axis, over a view in `order`. `along` and `lanes` are powers of two, `along <= lanes`.
    pub(crate) fn new(fast: usize, width: u32, order: MemoryOrder, along: u32, lanes: u32) -> Self {
        let inner = (order.run / width).clamp(1, along);
        Self {
            fast,
            width,
            inner,
            across: lanes / along,
            outer: along / inner,
        }
    }

    /// Invocations per workgroup.
    pub(crate) fn lanes(&self) -> u32 {
        self.inner * self.across * self.outer
    }

    /// Lanes along the fast axis.
    pub(crate) fn along(&self) -> u32 {
        self.inner * self.outer
    }

    /// Elements along the fast axis that one sweep of the lanes covers.
    pub(crate) fn span(&self) -> u32 {
        self.along() * self.width
    }

    /// The WGSL type a lane holds: `vec4<f32>` or `f32`.
    pub(crate) fn value_type(&self) -> &'static str {
        value_type(self.width)
    }

    /// WGSL statements that decode `lid` into `wk_inner`, `wk_across`, `wk_outer` and
    /// `wk_fast` (the lane's first coordinate along the fast axis inside one sweep).
    pub(crate) fn decode(&self, lid: &str) -> String {
        let Self {
            width,
            inner,
            across,
            ..
        } = *self;
        format!(
            "    let wk_inner = {lid} % {inner}u;\n\
             \x20   let wk_across = ({lid} / {inner}u) % {across}u;\n\
             \x20   let wk_outer = {lid} / {}u;\n\
             \x20   let wk_fast = (wk_outer * {inner}u + wk_inner) * {width}u;\n",
            inner * across
        )
    }

    /// The lane of the same `inner` and `outer` as the current one, at `across` position `q`
    /// (a WGSL expression in `lid` and `q`).
    pub(crate) fn lane_at_across(&self, q: &str) -> String {
        format!(
            "(wk_inner + {}u * ({q} + {}u * wk_outer))",
            self.inner, self.across
        )
    }
}

/// The WGSL type of `width` values: `vec4<f32>` or `f32`.
pub(crate) fn value_type(width: u32) -> &'static str {
    if width == 4 { "vec4<f32>" } else { "f32" }
}

/// The pieces of a WGSL accessor of `operand` moving `width` elements along `axis`: its
/// parameter list, the coordinates with `k` added along `axis`, the plain coordinates, the
/// extent along `axis`, and whether the operand has wide accesses there.
fn accessor_parts(
    operand: &Operand,
    axis: usize,
    width: u32,
) -> (String, String, String, String, bool) {
    let role = operand.role();
    let params: Vec<String> = (0..operand.view().axes().len())
        .map(|d| format!("at{d}"))
        .collect();
    let signature = params
        .iter()
        .map(|p| format!("{p}: u32"))
        .collect::<Vec<_>>()
        .join(", ");
    let mut shifted = params.clone();
    shifted[axis] = format!("at{axis} + k");
    let wide = width == 4 && operand.vector_axis() == Some(axis);
    (
        signature,
        shifted.join(", "),
        params.join(", "),
        format!("{role}_dim{axis}()"),
        wide,
    )
}

/// A WGSL reader of `width` elements along `axis` of `operand`: `<role>_get<width>(coords)`,
/// components past the axis's extent read as 0. It uses the operand's `load4` where it has one
/// along `axis` and the whole run lies inside, single elements otherwise. The other coordinates
/// must be inside the view.
pub(crate) fn getter(operand: &Operand, axis: usize, width: u32) -> String {
    let role = operand.role();
    let (signature, shifted, coords, dim, wide) = accessor_parts(operand, axis, width);
    if width == 1 {
        return format!(
            "fn {role}_get1({signature}) -> f32 {{\n    if (at{axis} < {dim}) {{\n        \
             return {role}_load({coords});\n    }}\n    return 0.0;\n}}\n"
        );
    }
    let mut s = format!("fn {role}_get4({signature}) -> vec4<f32> {{\n");
    if wide {
        let _ = writeln!(
            s,
            "    if (at{axis} + 3u < {dim}) {{\n        return {role}_load4({coords});\n    }}"
        );
    }
    let _ = writeln!(
        s,
        "    var v = vec4<f32>(0.0);\n    for (var k = 0u; k < 4u; k = k + 1u) {{\n        \
         if (at{axis} + k < {dim}) {{\n            v[k] = {role}_load({shifted});\n        }}\n    \
         }}\n    return v;\n}}"
    );
    s
}

/// The writer matching [`getter`]: `<role>_put<width>(coords, v)`, components past the axis's
/// extent not stored.
pub(crate) fn putter(operand: &Operand, axis: usize, width: u32) -> String {
    let role = operand.role();
    let (signature, shifted, coords, dim, wide) = accessor_parts(operand, axis, width);
    if width == 1 {
        return format!(
            "fn {role}_put1({signature}, v: f32) {{\n    if (at{axis} < {dim}) {{\n        \
             {role}_store({coords}, v);\n    }}\n}}\n"
        );
    }
    let mut s = format!("fn {role}_put4({signature}, v: vec4<f32>) {{\n");
    if wide {
        let _ = writeln!(
            s,
            "    if (at{axis} + 3u < {dim}) {{\n        {role}_store4({coords}, v);\n        \
             return;\n    }}"
        );
    }
    let _ = writeln!(
        s,
        "    for (var k = 0u; k < 4u; k = k + 1u) {{\n        if (at{axis} + k < {dim}) \
         {{\n            {role}_store({shifted}, v[k]);\n        }}\n    }}\n}}"
    );
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

/// The WGSL sum of the components of a value of `width`.
pub(crate) fn components_sum(value: &str, width: u32) -> String {
    if width == 4 {
        format!("(({value}.x + {value}.y) + ({value}.z + {value}.w))")
    } else {
        value.to_owned()
    }
}

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

/// A scratch tensor of partial results, one per chunk: `[chunks, cols]` `f32`s, row-major (or
/// `[chunks]` for partial scalars).
#[derive(Debug, Clone)]
pub(crate) struct Partials {
    view: View,
}

/// The run-time axis of [`Partials`].
const CHUNKS: &str = "chunks";

impl Partials {
    /// Partial rows of `cols` columns, or partial scalars.
    pub(crate) fn new(op: &'static str, cols: Option<u32>) -> Result<Self, OpError> {
        let spec = LayoutSpec::new("partials").dyn_axis(CHUNKS);
        let spec = match cols {
            Some(cols) => spec.axis("cols", cols),
            None => spec,
        };
        let layout = spec
            .elem(ElemType::F32)
            .build()
            .map_err(|e| OpError::shape(op, e.to_string()))?;
        Ok(Self {
            view: layout.view(),
        })
    }

    /// The view kernels read and write them through.
    pub(crate) fn view(&self) -> &View {
        &self.view
    }

    /// A pooled scratch buffer for `chunks` partial rows.
    pub(crate) fn scratch(&self, gpu: &Gpu, chunks: u32) -> Result<GpuBuffer, OpError> {
        let len = self.view.bind(&[(CHUNKS, chunks)])?.len();
        Ok(GpuBuffer::scratch::<f32>(gpu, len as usize)?)
    }

    /// `buffer` as `chunks` partial rows.
    pub(crate) fn arg<'a>(
        &'a self,
        buffer: &'a GpuBuffer,
        chunks: u32,
    ) -> Result<GpuArg<'a>, OpError> {
        Ok(GpuArg::new(buffer, &self.view, &[(CHUNKS, chunks)])?)
    }
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

/// Pass 1 of a plain column sum: partial rows of `Σ_rows x` (see the module docs).
#[derive(Debug, Clone)]
pub(crate) struct ColumnSum {
    role: &'static str,
    compiled: Compiled,
    walk: Walk,
    cols: u32,
    partials: Partials,
}

const COLUMN_SUM: &str = "column_sum";

impl ColumnSum {
    /// The kernel summing operand `role` (a `[rows, cols]` view, `cols` static) over its rows.
    pub(crate) fn new(
        gpu: &Gpu,
        op: &'static str,
        role: &'static str,
        view: &View,
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
        let mut body = getter(&x, fast, width) + &putter(&part, 1, part_width);
        body += &column_sum_entry(role, &walk);
        let source = KernelSource::new(op)
            .operand(x)
            .operand(part)
            .scalar("chunk_rows", Scalar::U32)
            .body(body);
        Ok(Self {
            role,
            compiled: Compiled::new(op, gpu, source)?,
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
    pub(crate) fn module(&self) -> &fblayout_core::kernel::KernelModule {
        self.compiled.module()
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
        let walk = self.walk;
        let (column_groups, align) = if walk.fast == 1 {
            (self.cols.div_ceil(walk.span()), walk.across)
        } else {
            (self.cols.div_ceil(walk.across), walk.span())
        };
        let per_chunk = chunk_rows(rows, column_groups, align, 32, chunk);
        let chunks = rows.div_ceil(per_chunk);
        let buffer = self.partials.scratch(batch.gpu(), chunks)?;
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

fn column_sum_entry(x: &str, walk: &Walk) -> String {
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
             sum = sum + cs_tile[{}];\n        }}\n        part_put{w}(wg.y, c, sum);\n    }}",
            walk.lane_at_across("q")
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
             }}\n        part_put1(wg.y, c, sum);\n    }}"
        );
    }
    s.push_str("}\n");
    s
}

/// Pass 2: adds the partial rows of one or more [`Partials`] column by column, in a fixed
/// order, into `[cols]` outputs (or onto them, with `accumulate`).
#[derive(Debug, Clone)]
pub(crate) struct PartialsSum {
    op: &'static str,
    compiled: Compiled,
    cols: u32,
    width: u32,
    outputs: usize,
}

const PARTIALS_SUM: &str = "partials_sum";

/// Lanes of pass 2 along the columns, and along the partial rows. There are as many partial
/// rows as pass 1 had workgroups in a column (about a thousand on a large GPU), so a workgroup
/// spreads its lanes over the partial rows of two runs of columns (32 bytes of each partial
/// row), which keeps the loads per lane few.
const SUM_COLS: u32 = 2;
const SUM_ROWS: u32 = LANES / SUM_COLS;

/// The roles of pass 2's `k`-th partials and output.
const PART_ROLES: [&str; 2] = ["p0", "p1"];
const OUT_ROLES: [&str; 2] = ["o0", "o1"];

impl PartialsSum {
    /// Pass 2 into `outputs` (one or two `[cols]` views), each from partial rows of `partials`.
    pub(crate) fn new(
        gpu: &Gpu,
        op: &'static str,
        partials: &Partials,
        outputs: &[(&'static str, &View)],
    ) -> Result<Self, OpError> {
        assert!((1..=PART_ROLES.len()).contains(&outputs.len()));
        let cols = partials.view().axes()[1]
            .extent
            .as_static()
            .expect("partial rows have static columns") as u32;
        for (role, view) in outputs {
            if view.axes().len() != 1 || view.axes()[0].extent.as_static() != Some(cols.into()) {
                return Err(OpError::shape(
                    op,
                    format!(
                        "`{role}` ({}) must be a vector of the {cols} columns",
                        view.name()
                    ),
                ));
            }
        }
        let first = Operand::read(PART_ROLES[0], partials.view())?.vectorized(1);
        let width = if first.vector_axis().is_some() { 4 } else { 1 };
        let mut source = KernelSource::new(op);
        let mut body = String::new();
        for (k, (_, view)) in outputs.iter().enumerate() {
            let p = Operand::read(PART_ROLES[k], partials.view())?.vectorized(1);
            let o = Operand::write(OUT_ROLES[k], view)?.vectorized(0);
            body += &(getter(&p, 1, width) + &getter(&o, 0, width) + &putter(&o, 0, width));
            source = source.operand(p).operand(o);
        }
        body += &partials_sum_entry(outputs.len(), width);
        let source = source.scalar("accumulate", Scalar::U32).body(body);
        Ok(Self {
            op,
            compiled: Compiled::new(op, gpu, source)?,
            cols,
            width,
            outputs: outputs.len(),
        })
    }

    /// The shader.
    pub(crate) fn module(&self) -> &fblayout_core::kernel::KernelModule {
        self.compiled.module()
    }

    /// Records pass 2: output `k` gets the column sums of `parts[k]` (or adds them, with
    /// `accumulate`).
    pub(crate) fn record(
        &self,
        batch: &mut Batch<'_>,
        parts: &[&GpuArg<'_>],
        outputs: &[&GpuArg<'_>],
        accumulate: bool,
    ) -> Result<(), OpError> {
        if parts.len() != self.outputs || outputs.len() != self.outputs {
            return Err(OpError::shape(
                self.op,
                format!("{} outputs expected, {} given", self.outputs, outputs.len()),
            ));
        }
        let mut args: Vec<(&'static str, &GpuArg<'_>)> = Vec::new();
        for k in 0..self.outputs {
            args.push((PART_ROLES[k], parts[k]));
            args.push((OUT_ROLES[k], outputs[k]));
        }
        let groups = self.cols.div_ceil(SUM_COLS * self.width);
        self.compiled.record(
            batch,
            PARTIALS_SUM,
            &args,
            &[("accumulate", ParamValue::U32(u32::from(accumulate)))],
            [groups, 1, 1],
        )
    }
}

fn partials_sum_entry(outputs: usize, width: u32) -> String {
    let ty = value_type(width);
    let w = width;
    let mut s = String::new();
    let _ = writeln!(s, "var<workgroup> ps_tile: array<{ty}, {LANES}>;");
    let _ = writeln!(
        s,
        "@compute @workgroup_size({LANES})\nfn {PARTIALS_SUM}(@builtin(workgroup_id) wg: vec3<u32>, \
         @builtin(local_invocation_index) lid: u32) {{"
    );
    let _ = writeln!(s, "    let ps_col = lid % {SUM_COLS}u;");
    let _ = writeln!(s, "    let ps_row = lid / {SUM_COLS}u;");
    let _ = writeln!(s, "    let c = (wg.x * {SUM_COLS}u + ps_col) * {w}u;");
    for k in 0..outputs {
        let (p, o) = (PART_ROLES[k], OUT_ROLES[k]);
        if k > 0 {
            s.push_str("    workgroupBarrier();\n");
        }
        let _ = writeln!(
            s,
            "    var sum{k} = {ty}(0.0);\n    \
             for (var q = ps_row; q < {p}_dim0(); q = q + {SUM_ROWS}u) {{\n        \
             sum{k} = sum{k} + {p}_get{w}(q, c);\n    }}\n    \
             ps_tile[lid] = sum{k};\n    workgroupBarrier();\n    \
             for (var half = {}u; half > 0u; half = half >> 1u) {{\n        \
             if (ps_row < half) {{\n            \
             ps_tile[lid] = ps_tile[lid] + ps_tile[lid + half * {SUM_COLS}u];\n        }}\n        \
             workgroupBarrier();\n    }}\n    \
             if (ps_row == 0u) {{\n        var total = ps_tile[lid];\n        \
             if (params.accumulate != 0u) {{\n            total = total + {o}_get{w}(c);\n        }}\n        \
             {o}_put{w}(c, total);\n    }}",
            SUM_ROWS / 2
        );
    }
    s.push_str("}\n");
    s
}
