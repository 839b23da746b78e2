//! The norms' row kernels: one shader generator for LayerNorm and RMSNorm, forward and
//! backward.
//!
//! A workgroup handles a block of rows at once, with the lanes of each row laid out by a
//! [`Walk`] over `x`, so that lanes running together read neighbouring memory, and the launch
//! shape ([`launch`](super::launch)) saying how many lanes share a row and how many rows a block
//! has. Each lane keeps its `K` values of a row in registers: the statistics are computed from
//! them (mean, then the squared deviations from it) and the output is written from them, so
//! `x` is read once. The row sums add over a row's lanes (`fbl_group_sum`: subgroup shuffles, or
//! workgroup memory once for the whole block), or, in the baseline form, use `fbl_wg_sum` once
//! per row, each lane adding its value to its own row's.
//!
//! The backward is fused: a workgroup walks a chunk of blocks of rows, writes `dx` for each and
//! accumulates `Σ dy·x̂` (and `Σ dy`) per column in registers, then writes one partial row per
//! chunk; [`PartialsSum`] adds the partial rows into `dγ` (and `dβ`). `x` and `dy` are read once.
//! LayerNorm's two row sums (`Σ g` and `Σ g·x̂`) are added together, as one `vec2`.

use std::fmt::Write as _;

use fblayout_core::kernel::{KernelModule, KernelSource, Operand, ParamValue, Scalar};
use fblayout_core::layout::{ElemType, View};

use super::super::compiled::Compiled;
use super::super::elementwise::check_same_dims;
use super::super::error::OpError;
use super::super::reduce_rows::{
    Partials, PartialsSum, Walk, check_2d, check_view, chunk_rows, components_sum, expect_dims,
    getter, memory_order, putter, static_extent,
};
use super::launch::{LaunchShape, MAX_LANES, NormLaunch, Pass, Shape, SumForm};
use crate::runtime::Batch;
use crate::runtime::Gpu;
use crate::runtime::Scratch;
use crate::tensor::GpuArg;
use crate::wgsl::reduce::{entry_params, group_reduce, subgroup_call_args, workgroup_reduce};

/// Which norm.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// `(x − μ)/√(σ² + ε) · γ + β`.
    Layer,
    /// `x/√(mean(x²) + ε) · γ`.
    Rms,
}

impl Kind {
    /// Its weight gradients: `dγ`, and `dβ` for LayerNorm.
    fn grads(self) -> usize {
        match self {
            Self::Layer => 2,
            Self::Rms => 1,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Self::Layer => "layer_norm",
            Self::Rms => "rms_norm",
        }
    }

    fn ops(self) -> (&'static str, &'static str, &'static str) {
        match self {
            Self::Layer => (
                "layer norm forward",
                "layer norm backward",
                "layer norm weight gradients",
            ),
            Self::Rms => (
                "rms norm forward",
                "rms norm backward",
                "rms norm weight gradients",
            ),
        }
    }
}

/// The views a norm's kernels are built for (`beta` and `mean` for LayerNorm only; `res`,
/// `sum` and `dsum` where a residual connection is fused).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Views<'a> {
    pub(crate) x: &'a View,
    pub(crate) gamma: &'a View,
    pub(crate) beta: Option<&'a View>,
    pub(crate) y: &'a View,
    pub(crate) mean: Option<&'a View>,
    pub(crate) rstd: &'a View,
    /// The forward's second summand `res` and the sum `sum = x + res` it writes (and
    /// normalises).
    pub(crate) residual: Option<(&'a View, &'a View)>,
    /// The backward's `dsum`, added to `dx`.
    pub(crate) carry: Option<&'a View>,
}

impl Views<'_> {
    /// The `[rows, cols]` operands, by role, as the forward reads and writes them and as the
    /// backward reads its `dsum`.
    fn matrices(&self) -> Vec<(&'static str, &View)> {
        let mut all = vec![("x", self.x), ("y", self.y)];
        if let Some((res, sum)) = self.residual {
            all.extend([("res", res), ("sum", sum)]);
        }
        if let Some(dsum) = self.carry {
            all.push(("dsum", dsum));
        }
        all
    }
}

/// Fewest rows per chunk of the backward.
const MIN_CHUNK_ROWS: u32 = 16;

/// The chunks of the backward over `rows` rows taken `across` at a time (a block), `chunk`
/// overriding the rows per chunk: how many, and the blocks of each.
fn backward_chunks(rows: u32, across: u32, chunk: Option<u32>) -> (u32, u32) {
    let per_chunk = chunk_rows(rows, 1, across, MIN_CHUNK_ROWS, chunk) / across;
    (rows.div_ceil(across).div_ceil(per_chunk), per_chunk)
}

/// The most scratch the backward of a norm of `kind` over `rows` rows of `cols` columns takes,
/// `chunk` overriding the rows per chunk, whatever its launch shape: one buffer of partial rows
/// per weight gradient, of as many chunks as [`backward_chunks`] makes for any block of rows (a
/// power of two up to [`MAX_LANES`] rows).
pub(crate) fn backward_scratch(
    kind: Kind,
    rows: u32,
    cols: u32,
    chunk: Option<u32>,
) -> Result<Scratch, OpError> {
    let (_, bwd, _) = kind.ops();
    let chunks = (0..=MAX_LANES.ilog2())
        .map(|p| backward_chunks(rows, 1 << p, chunk).0)
        .max()
        .unwrap_or(1);
    let partial = Partials::new(bwd, Some(cols))?.scratch_of(chunks)?;
    Ok((0..kind.grads()).fold(Scratch::none(), |s, _| s.and(partial.clone())))
}

/// The built kernels of one norm.
#[derive(Debug, Clone)]
pub(crate) struct NormKernels {
    kind: Kind,
    forward: Compiled,
    backward: Compiled,
    sum: PartialsSum,
    partials: Partials,
    /// The shapes of the forward and of the backward.
    shapes: [Shape; 2],
    /// Rows per chunk of the backward, where set.
    chunk: Option<u32>,
    cols: u32,
    eps: f32,
    /// The views of the weight gradients: `γ`'s (and `β`'s).
    grad_views: Vec<(&'static str, View)>,
    /// The fused roles each pass takes beyond the norm's own: the forward's (`res`, `sum`),
    /// the backward's (`dsum`).
    fused: [&'static [&'static str]; 2],
}

impl NormKernels {
    pub(crate) fn new(
        gpu: &Gpu,
        kind: Kind,
        v: &Views<'_>,
        eps: f32,
        launch: NormLaunch,
    ) -> Result<Self, OpError> {
        let (fwd, bwd, grads) = kind.ops();
        if launch.chunk_rows == Some(0) {
            return Err(OpError::shape(
                bwd,
                "0 rows per chunk: at least one is needed",
            ));
        }
        check_2d(fwd, "x", v.x)?;
        let cols = static_extent(fwd, "x", v.x, 1)?;
        let matrices = v.matrices();
        for &(role, view) in &matrices[1..] {
            check_2d(fwd, role, view)?;
            let other = static_extent(fwd, role, view, 1)?;
            if other != cols {
                return Err(OpError::shape(
                    fwd,
                    format!("`x` has {cols} columns, `{role}` {other}"),
                ));
            }
            if let (Some(a), Some(b)) = (
                v.x.axes()[0].extent.as_static(),
                view.axes()[0].extent.as_static(),
            ) {
                if a != b {
                    return Err(OpError::shape(
                        fwd,
                        format!("`x` has {a} rows, `{role}` {b}"),
                    ));
                }
            }
        }
        let vectors = [("gamma", Some(v.gamma)), ("beta", v.beta)];
        for (role, view) in vectors {
            if let Some(view) = view {
                if view.axes().len() != 1 || view.axes()[0].extent.as_static() != Some(cols.into())
                {
                    return Err(OpError::shape(
                        fwd,
                        format!(
                            "`{role}` ({}) must be a vector of the {cols} columns",
                            view.name()
                        ),
                    ));
                }
            }
        }
        for (role, view) in [("rstd", Some(v.rstd)), ("mean", v.mean)] {
            if let Some(view) = view {
                let rows_match = match (view.axes().first(), v.x.axes()[0].extent.as_static()) {
                    (Some(a), Some(rows)) => a.extent.as_static().is_none_or(|n| n == rows),
                    (Some(_), None) => true,
                    (None, _) => false,
                };
                if view.axes().len() != 1 || !rows_match {
                    return Err(OpError::shape(
                        fwd,
                        format!("`{role}` ({}) must be a vector of the rows", view.name()),
                    ));
                }
            }
        }
        // Wide along the rows when every 2-D operand allows it.
        let wide = matrices.iter().all(|(_, view)| {
            Operand::read("x", view).is_ok_and(|o| o.vectorized(1).vector_axis() == Some(1))
        });
        let width = if wide { 4 } else { 1 };
        let order = memory_order(v.x, 1);
        let features = gpu.features();
        let subgroup = features.subgroups.then_some(features.subgroup_sizes.0);
        let shape =
            |op, launch, pass| Shape::resolve(op, launch, pass, cols, width, order, subgroup);
        let forward_shape = shape(fwd, launch.forward, Pass::Forward)?;
        let backward_shape = shape(bwd, launch.backward, Pass::Backward)?;
        let subgroups = features.subgroups;
        let forward = Compiled::new(fwd, gpu, forward_source(kind, v, forward_shape, subgroups)?)?;
        let partials = Partials::new(bwd, Some(cols))?;
        let backward = Compiled::new(
            bwd,
            gpu,
            backward_source(kind, v, backward_shape, subgroups, &partials)?,
        )?;
        let mut outputs = vec![("dgamma", v.gamma)];
        if let Some(beta) = v.beta {
            outputs.push(("dbeta", beta));
        }
        let sum = PartialsSum::new(gpu, grads, &partials, &outputs)?;
        let grad_views = outputs.iter().map(|(r, v)| (*r, (*v).clone())).collect();
        Ok(Self {
            kind,
            forward,
            backward,
            sum,
            partials,
            shapes: [forward_shape, backward_shape],
            chunk: launch.chunk_rows,
            cols,
            eps,
            grad_views,
            fused: [
                if v.residual.is_some() {
                    &["res", "sum"]
                } else {
                    &[]
                },
                if v.carry.is_some() { &["dsum"] } else { &[] },
            ],
        })
    }

    /// The walk of the forward.
    pub(crate) fn walk(&self) -> Walk {
        self.shapes[0].walk
    }

    /// The forward's and the backward's launch shapes.
    pub(crate) fn launch_shapes(&self) -> [LaunchShape; 2] {
        self.shapes.map(|s| s.launch())
    }

    /// Sets the rows per chunk of the backward.
    pub(crate) fn set_chunk(&mut self, rows: Option<u32>) {
        self.chunk = rows;
    }

    /// The shaders: forward, backward, weight gradients.
    pub(crate) fn modules(&self) -> [&KernelModule; 3] {
        [
            self.forward.module(),
            self.backward.module(),
            self.sum.module(),
        ]
    }

    /// Records the forward; `args` by role.
    pub(crate) fn forward(
        &self,
        batch: &mut Batch<'_>,
        args: &[(&'static str, &GpuArg<'_>)],
    ) -> Result<(), OpError> {
        let (fwd, _, _) = self.kind.ops();
        let rows = self.check(fwd, args, &["x", "y"], self.fused[0])?;
        self.forward.record_linear(
            batch,
            &entry(self.kind, true),
            args,
            &[("eps", ParamValue::F32(self.eps))],
            rows.div_ceil(self.shapes[0].rows()),
        )
    }

    /// Records the backward: `args` by role (the forward's `x`, `gamma`, statistics, and `dy`,
    /// `dx`), then the weight gradients into `grads` (`dgamma`, and `dbeta` for LayerNorm).
    pub(crate) fn backward(
        &self,
        batch: &mut Batch<'_>,
        args: &[(&'static str, &GpuArg<'_>)],
        grads: &[&GpuArg<'_>],
        accumulate: bool,
    ) -> Result<(), OpError> {
        let (_, bwd, _) = self.kind.ops();
        if self.chunk == Some(0) {
            return Err(OpError::shape(
                bwd,
                "0 rows per chunk: at least one is needed",
            ));
        }
        let rows = self.check(bwd, args, &["x", "dy", "dx"], self.fused[1])?;
        // The second pass's operands are checked before the first pass is recorded, so that a
        // refused call records nothing.
        if grads.len() != self.grad_views.len() {
            return Err(OpError::shape(
                bwd,
                format!("{} weight gradients expected", self.grad_views.len()),
            ));
        }
        for (arg, (role, view)) in grads.iter().zip(&self.grad_views) {
            check_view(bwd, role, arg, view)?;
            expect_dims(bwd, role, &arg.dims(), &[self.cols as usize])?;
        }
        let (chunks, per_chunk) = backward_chunks(rows, self.shapes[1].rows(), self.chunk);
        let buffers = (0..grads.len())
            .map(|_| self.partials.scratch(batch, chunks))
            .collect::<Result<Vec<_>, _>>()?;
        let parts = buffers
            .iter()
            .map(|b| self.partials.arg(b, chunks))
            .collect::<Result<Vec<_>, _>>()?;
        let mut all = args.to_vec();
        for (role, part) in PARTIAL_ROLES.iter().zip(&parts) {
            all.push((role, part));
        }
        self.backward.record_linear(
            batch,
            &entry(self.kind, false),
            &all,
            &[("chunk_blocks", ParamValue::U32(per_chunk))],
            chunks,
        )?;
        let parts: Vec<&GpuArg<'_>> = parts.iter().collect();
        self.sum.record(batch, &parts, grads, accumulate)
    }

    /// Checks that the 2-D arguments `matrices` and `fused` have one shape and the vectors fit
    /// it, and that the fused roles are given exactly where the kernels were built with them;
    /// returns the rows.
    fn check(
        &self,
        op: &'static str,
        args: &[(&'static str, &GpuArg<'_>)],
        matrices: &[&'static str],
        fused: &[&'static str],
    ) -> Result<u32, OpError> {
        let find = |role: &str| args.iter().find(|(r, _)| *r == role).map(|(_, a)| *a);
        for role in ["res", "sum", "dsum"] {
            let built = fused.contains(&role);
            if built != find(role).is_some() {
                let why = if built {
                    "the kernels fuse a residual connection: its tensors are needed"
                } else {
                    "the kernels were built without a residual connection"
                };
                return Err(OpError::shape(op, format!("`{role}`: {why}")));
            }
        }
        let all: Vec<&'static str> = matrices.iter().chain(fused).copied().collect();
        let dims = check_same_dims(
            op,
            &all,
            all.iter()
                .map(|r| find(r).map(|a| a.dims()).unwrap_or_default()),
        )?;
        let rows = dims[0];
        for (role, arg) in args {
            let want = match *role {
                "mean" | "rstd" => rows,
                "gamma" | "beta" => self.cols as usize,
                _ => continue,
            };
            expect_dims(op, role, &arg.dims(), &[want])?;
        }
        Ok(rows as u32)
    }
}

/// The roles of the backward's partial rows: `Σ dy·x̂`, then `Σ dy`.
const PARTIAL_ROLES: [&str; 2] = ["pg", "pb"];

fn entry(kind: Kind, forward: bool) -> String {
    format!(
        "{}_{}",
        kind.name(),
        if forward { "forward" } else { "backward" }
    )
}

/// The declarations shared by both passes: the row sum of `sum_ty` values (`f32`, or
/// `vec2<f32>` for two sums at once), the column mask.
fn common(shape: Shape, subgroups: bool, sum_ty: &str) -> String {
    let Shape { walk, cols, .. } = shape;
    let lanes = shape.lanes();
    let mut s = match shape.sum {
        SumForm::Workgroup => workgroup_row_sum(lanes, shape.rows(), subgroups),
        SumForm::Shuffle | SumForm::Shared => {
            group_reduce(lanes, shape.group(), sum_ty, shape.sum == SumForm::Shuffle)
        }
    };
    let ty = walk.value_type();
    if walk.width == 4 {
        let _ = writeln!(
            s,
            "fn nm_valid(c: u32) -> vec4<bool> {{\n    \
             return vec4<u32>(c) + vec4<u32>(0u, 1u, 2u, 3u) < vec4<u32>({cols}u);\n}}"
        );
    } else {
        let _ = writeln!(
            s,
            "fn nm_valid(c: u32) -> bool {{\n    return c < {cols}u;\n}}"
        );
    }
    let _ = writeln!(s, "fn nm_zero() -> {ty} {{\n    return {ty}(0.0);\n}}");
    s
}

/// The baseline's row sum `nm_row_sum`: one `fbl_wg_sum` over the whole workgroup of `lanes`
/// per row of the `rows`, each lane keeping its own row's.
fn workgroup_row_sum(lanes: u32, rows: u32, subgroups: bool) -> String {
    let mut s = workgroup_reduce(lanes, subgroups);
    let (extra, pass) = if subgroups {
        (", lane: u32, width: u32", ", lane, width")
    } else {
        ("", "")
    };
    if rows == 1 {
        let _ = writeln!(
            s,
            "fn nm_row_sum(v: f32, row: u32, lid: u32{extra}) -> f32 {{\n    \
             return fbl_wg_sum(v, lid{pass});\n}}"
        );
    } else {
        let _ = writeln!(
            s,
            "fn nm_row_sum(v: f32, row: u32, lid: u32{extra}) -> f32 {{\n    var mine = 0.0;\n    \
             for (var q = 0u; q < {rows}u; q = q + 1u) {{\n        \
             let total = fbl_wg_sum(select(0.0, v, row == q), lid{pass});\n        \
             if (row == q) {{\n            mine = total;\n        }}\n    }}\n    return mine;\n}}"
        );
    }
    s
}

fn signature(name: &str, shape: Shape, subgroups: bool) -> String {
    // Only the baseline's `fbl_wg_sum` takes the subgroup builtins.
    let builtins = shape.sum == SumForm::Workgroup && subgroups;
    format!(
        "@compute @workgroup_size({})\nfn {name}(@builtin(workgroup_id) wg: vec3<u32>, \
         @builtin(num_workgroups) nwg: vec3<u32>, @builtin(local_invocation_index) lid: u32, {}) {{\n",
        shape.lanes(),
        entry_params(builtins)
    )
}

/// The sum of `value` over the lanes of the current lane's row.
fn row_sum_call(value: &str, shape: Shape, subgroups: bool) -> String {
    match shape.sum {
        SumForm::Workgroup => format!(
            "nm_row_sum({value}, {}, lid{})",
            shape.row_slot(),
            subgroup_call_args(subgroups)
        ),
        SumForm::Shuffle | SumForm::Shared => format!("fbl_group_sum({value}, lid)"),
    }
}

fn forward_source(
    kind: Kind,
    v: &Views<'_>,
    shape: Shape,
    subgroups: bool,
) -> Result<KernelSource, OpError> {
    let Shape {
        walk,
        per_lane,
        cols,
        ..
    } = shape;
    let w = walk.width;
    let ty = walk.value_type();
    let span = walk.span();
    let x = Operand::read("x", v.x)?.vectorized(1);
    let y = Operand::write("y", v.y)?.vectorized(1);
    let gamma = Operand::read("gamma", v.gamma)?.vectorized(0);
    let mut body = getter(&x, 1, w) + &putter(&y, 1, w) + &getter(&gamma, 0, w);
    let mut source = KernelSource::new(kind.ops().0)
        .operand(x)
        .operand(gamma)
        .operand(y);
    // With a residual connection the row is `x + res`, written to `sum` as it is read.
    let mut read = format!("x_get{w}(r, c)");
    if let Some((res, sum)) = v.residual {
        let res = Operand::read("res", res)?.vectorized(1);
        let half_sum = sum.layout().elem() == ElemType::F16;
        let sum = Operand::write("sum", sum)?.vectorized(1);
        body += &(getter(&res, 1, w) + &putter(&sum, 1, w));
        source = source.operand(res).operand(sum);
        // The row normalised is the sum as stored, so that the backward (which reads it back)
        // and a recomputation from it see the same values.
        let stored = if half_sum {
            let half = if w == 4 { "vec4<f16>" } else { "f16" };
            format!("{ty}({half}(x_get{w}(r, c) + res_get{w}(r, c)))")
        } else {
            format!("x_get{w}(r, c) + res_get{w}(r, c)")
        };
        read = format!("{stored};\n            sum_put{w}(r, c, v)");
    }
    if let Some(beta) = v.beta {
        let beta = Operand::read("beta", beta)?.vectorized(0);
        body += &getter(&beta, 0, w);
        source = source.operand(beta);
    }
    if let Some(mean) = v.mean {
        source = source.operand(Operand::write("mean", mean)?);
    }
    source = source.operand(Operand::write("rstd", v.rstd)?);
    body += &common(shape, subgroups, "f32");
    let mut s = signature(&entry(kind, true), shape, subgroups);
    let rows = shape.rows();
    let _ = writeln!(s, "    let block = wg.x + wg.y * nwg.x;");
    let _ = writeln!(
        s,
        "    if (block * {rows}u >= x_dim0()) {{\n        return;\n    }}"
    );
    s += &shape.decode();
    let _ = writeln!(s, "    let r = block * {rows}u + {};", shape.row_slot());
    let _ = writeln!(s, "    let live = r < x_dim0();");
    let _ = writeln!(s, "    var xs: array<{ty}, {per_lane}>;");
    let _ = writeln!(s, "    var part = 0.0;");
    let square = match kind {
        Kind::Layer => "v",
        Kind::Rms => "v * v",
    };
    let _ = writeln!(
        s,
        "    for (var k = 0u; k < {per_lane}u; k = k + 1u) {{\n        \
         let c = k * {span}u + wk_fast;\n        var v = nm_zero();\n        \
         if (live) {{\n            v = {read};\n        }}\n        xs[k] = v;\n        \
         let term = {square};\n        part = part + {};\n    }}",
        components_sum("term", w)
    );
    match kind {
        Kind::Layer => {
            let _ = writeln!(
                s,
                "    let mean = {} / {cols}.0;",
                row_sum_call("part", shape, subgroups)
            );
            let _ = writeln!(
                s,
                "    var dev = 0.0;\n    for (var k = 0u; k < {per_lane}u; k = k + 1u) {{\n        \
                 let d = select(nm_zero(), xs[k] - mean, nm_valid(k * {span}u + wk_fast));\n        \
                 let term = d * d;\n        dev = dev + {};\n    }}",
                components_sum("term", w)
            );
            let _ = writeln!(
                s,
                "    let rstd = inverseSqrt({} / {cols}.0 + params.eps);",
                row_sum_call("dev", shape, subgroups)
            );
        }
        Kind::Rms => {
            let _ = writeln!(s, "    let mean = 0.0;");
            let _ = writeln!(
                s,
                "    let rstd = inverseSqrt({} / {cols}.0 + params.eps);",
                row_sum_call("part", shape, subgroups)
            );
        }
    }
    let shift = if v.beta.is_some() {
        " + beta_get{w}(c)"
    } else {
        ""
    }
    .replace("{w}", &w.to_string());
    let _ = writeln!(
        s,
        "    if (live) {{\n        for (var k = 0u; k < {per_lane}u; k = k + 1u) {{\n            \
         let c = k * {span}u + wk_fast;\n            \
         y_put{w}(r, c, (xs[k] - mean) * rstd * gamma_get{w}(c){shift});\n        }}\n        \
         if (wk_inner == 0u && wk_outer == 0u) {{"
    );
    if v.mean.is_some() {
        let _ = writeln!(s, "            mean_store(r, mean);");
    }
    let _ = writeln!(
        s,
        "            rstd_store(r, rstd);\n        }}\n    }}\n}}"
    );
    body += &s;
    Ok(source.scalar("eps", Scalar::F32).body(body))
}

fn backward_source(
    kind: Kind,
    v: &Views<'_>,
    shape: Shape,
    subgroups: bool,
    partials: &Partials,
) -> Result<KernelSource, OpError> {
    let Shape {
        walk,
        per_lane,
        cols,
        ..
    } = shape;
    let w = walk.width;
    let ty = walk.value_type();
    let span = walk.span();
    let rows = shape.rows();
    let slot = shape.row_slot();
    let x = Operand::read("x", v.x)?.vectorized(1);
    let dy = Operand::read("dy", v.y)?.vectorized(1);
    let dx = Operand::write("dx", v.x)?.vectorized(1);
    let gamma = Operand::read("gamma", v.gamma)?.vectorized(0);
    let layer = kind == Kind::Layer;
    let mut body =
        getter(&x, 1, w) + &getter(&dy, 1, w) + &putter(&dx, 1, w) + &getter(&gamma, 0, w);
    let mut source = KernelSource::new(kind.ops().1)
        .operand(x)
        .operand(dy)
        .operand(gamma);
    if let Some(mean) = v.mean {
        source = source.operand(Operand::read("mean", mean)?);
    }
    source = source.operand(Operand::read("rstd", v.rstd)?).operand(dx);
    // The sum's gradient from its other readers, added to `dx`.
    let mut carried = String::new();
    if let Some(dsum) = v.carry {
        let dsum = Operand::read("dsum", dsum)?.vectorized(1);
        body += &getter(&dsum, 1, w);
        source = source.operand(dsum);
        carried = format!(" + dsum_get{w}(r, k * {span}u + wk_fast)");
    }
    let outputs = if layer { 2 } else { 1 };
    for role in &PARTIAL_ROLES[..outputs] {
        let p = Operand::write(role, partials.view())?.vectorized(1);
        body += &putter(&p, 1, w);
        source = source.operand(p);
    }
    // LayerNorm's two row sums go together where the lanes of a row add them.
    let paired = layer && shape.sum != SumForm::Workgroup;
    body += &common(shape, subgroups, if paired { "vec2<f32>" } else { "f32" });
    if rows > 1 {
        let _ = writeln!(
            body,
            "var<workgroup> nm_cols: array<{ty}, {}>;",
            shape.lanes()
        );
    }
    let mut s = signature(&entry(kind, false), shape, subgroups);
    let _ = writeln!(s, "    let chunk = wg.x + wg.y * nwg.x;");
    let _ = writeln!(s, "    let blocks = (x_dim0() + {}u) / {rows}u;", rows - 1);
    let _ = writeln!(s, "    let b0 = chunk * params.chunk_blocks;");
    let _ = writeln!(s, "    if (b0 >= blocks) {{\n        return;\n    }}");
    let _ = writeln!(s, "    let b1 = min(b0 + params.chunk_blocks, blocks);");
    s += &shape.decode();
    let _ = writeln!(s, "    var acc_g: array<{ty}, {per_lane}>;");
    if layer {
        let _ = writeln!(s, "    var acc_b: array<{ty}, {per_lane}>;");
    }
    let _ = writeln!(s, "    var xh: array<{ty}, {per_lane}>;");
    let _ = writeln!(s, "    var gs: array<{ty}, {per_lane}>;");
    let _ = writeln!(
        s,
        "    for (var block = b0; block < b1; block = block + 1u) {{"
    );
    let _ = writeln!(s, "        let r = block * {rows}u + {slot};");
    let _ = writeln!(s, "        let live = r < x_dim0();");
    if layer {
        let _ = writeln!(s, "        var mean = 0.0;");
    }
    let _ = writeln!(s, "        var rstd = 0.0;\n        if (live) {{");
    if layer {
        let _ = writeln!(s, "            mean = mean_load(r);");
    }
    let _ = writeln!(s, "            rstd = rstd_load(r);\n        }}");
    // LayerNorm sums g and g·x̂ over the row, RMSNorm g·x only.
    let sums: &[&str] = if layer { &["p1", "p2"] } else { &["p2"] };
    for p in sums {
        let _ = writeln!(s, "        var {p} = 0.0;");
    }
    let _ = writeln!(
        s,
        "        for (var k = 0u; k < {per_lane}u; k = k + 1u) {{\n            \
         let c = k * {span}u + wk_fast;\n            var xv = nm_zero();\n            \
         var dv = nm_zero();\n            if (live) {{\n                xv = x_get{w}(r, c);\n                \
         dv = dy_get{w}(r, c);\n            }}\n            let g = dv * gamma_get{w}(c);\n            \
         gs[k] = g;"
    );
    if layer {
        let _ = writeln!(
            s,
            "            let xhat = select(nm_zero(), (xv - mean) * rstd, nm_valid(c));\n            \
             xh[k] = xhat;\n            acc_g[k] = acc_g[k] + dv * xhat;\n            \
             acc_b[k] = acc_b[k] + dv;\n            p1 = p1 + {};\n            let t2 = g * xhat;",
            components_sum("g", w)
        );
    } else {
        let _ = writeln!(
            s,
            "            xh[k] = xv;\n            acc_g[k] = acc_g[k] + dv * xv * rstd;\n            \
             let t2 = g * xv;"
        );
    }
    let _ = writeln!(
        s,
        "            p2 = p2 + {};\n        }}",
        components_sum("t2", w)
    );
    if paired {
        let _ = writeln!(
            s,
            "        let sums = {} / {cols}.0;\n        let a = sums.x;\n        let b = sums.y;",
            row_sum_call("vec2<f32>(p1, p2)", shape, subgroups)
        );
    } else {
        if layer {
            let _ = writeln!(
                s,
                "        let a = {} / {cols}.0;",
                row_sum_call("p1", shape, subgroups)
            );
        }
        let _ = writeln!(
            s,
            "        let b = {} / {cols}.0;",
            row_sum_call("p2", shape, subgroups)
        );
    }
    let dx_value = match kind {
        // dx = rstd · (g − mean(g) − x̂ · mean(g · x̂))
        Kind::Layer => "rstd * (gs[k] - a - xh[k] * b)",
        // dx = rstd · (g − x · rstd² · mean(g · x))
        Kind::Rms => "rstd * (gs[k] - xh[k] * (rstd * rstd * b))",
    };
    let _ = writeln!(
        s,
        "        if (live) {{\n            for (var k = 0u; k < {per_lane}u; k = k + 1u) {{\n                \
         dx_put{w}(r, k * {span}u + wk_fast, {dx_value}{carried});\n            }}\n        }}\n    }}"
    );
    // One partial row per chunk: the lanes of one column position add their rows' sums.
    let accs = [("acc_g", PARTIAL_ROLES[0]), ("acc_b", PARTIAL_ROLES[1])];
    for (acc, role) in &accs[..outputs] {
        let _ = writeln!(
            s,
            "    for (var k = 0u; k < {per_lane}u; k = k + 1u) {{\n        \
             let c = k * {span}u + wk_fast;"
        );
        if rows == 1 {
            let _ = writeln!(s, "        {role}_put{w}(chunk, c, {acc}[k]);\n    }}");
        } else {
            let _ = writeln!(
                s,
                "        nm_cols[lid] = {acc}[k];\n        workgroupBarrier();\n        \
                 if ({slot} == 0u) {{\n            var total = nm_cols[lid];\n            \
                 for (var q = 1u; q < {rows}u; q = q + 1u) {{\n                \
                 total = total + nm_cols[{}];\n            }}\n            \
                 {role}_put{w}(chunk, c, total);\n        }}\n        workgroupBarrier();\n    }}",
                shape.lane_of_row("q")
            );
        }
    }
    s.push_str("}\n");
    body += &s;
    Ok(source.scalar("chunk_blocks", Scalar::U32).body(body))
}
