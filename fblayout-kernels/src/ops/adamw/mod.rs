//! AdamW: one optimiser step over a parameter tensor of any layout, and the sum of squares of a
//! gradient (for clipping by the global norm).
//!
//! With the gradient scaled by `s` (`g' = s · g`: `s < 1` clips, `1/loss_scale` undoes loss
//! scaling) and the step number `t` (from 1):
//!
//! ```text
//! m ← β1 · m + (1 − β1) · g'
//! v ← β2 · v + (1 − β2) · g'²
//! p ← p − lr · (m̂ / (√v̂ + ε) + wd · p),   m̂ = m / (1 − β1^t),  v̂ = v / (1 − β2^t)
//! ```
//!
//! (PyTorch's `AdamW`: the weight decay is decoupled and uses `p` before the step.) The step is
//! an elementwise kernel (the crate's elementwise generator) over `param`, `grad`, `m` and
//! `v`, each through its own view; `param`, `m` and `v` are updated in place, each read and
//! written through one read-write operand. The bias corrections are computed on the host, in
//! `f64`, from `t`.
//!
//! A [gated](AdamWOp::gated) step reads one more value on the device, a flag, and keeps the
//! parameters and moments as they are where it is set: with the flag set by
//! [`NonFiniteOp`](super::NonFiniteOp) over every gradient, a mixed-precision step whose scaled
//! gradients overflowed is skipped without the host reading anything first (dynamic loss
//! scaling).
//!
//! [`SumSquaresOp`] computes `Σ g²` over every element of a tensor in two passes: each workgroup
//! sums a chunk with `fbl_wg_sum` into a partial, one workgroup adds the partials in a fixed
//! order and writes (or adds, to sum over several tensors) the total. The clipping scale
//! `min(1, max_norm / √total)` is the caller's.

use std::fmt::Write as _;

use fblayout_core::kernel::{KernelModule, KernelSource, Operand, ParamValue, Scalar};
use fblayout_core::layout::{ElemType, View, unravel};
use rayon::prelude::*;

use super::compiled::Compiled;
use super::elementwise::{Elementwise, Spec, map_cpu};
use super::error::OpError;
use super::reduce_rows::{FILL_WORKGROUPS, Partials, components_sum, getter};
use crate::cpu::{Logical, LogicalMut, Real};
use crate::entry_point::LinearEntry;
use crate::runtime::{Batch, Gpu};
use crate::tensor::GpuArg;
use crate::wgsl::reduce::{entry_params, subgroup_call_args, workgroup_reduce};

/// AdamW's hyper-parameters.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AdamW {
    /// The learning rate.
    pub lr: f32,
    /// The decay of the first moment.
    pub beta1: f32,
    /// The decay of the second moment.
    pub beta2: f32,
    /// Added to `√v̂`.
    pub eps: f32,
    /// The decoupled weight decay.
    pub weight_decay: f32,
}

impl Default for AdamW {
    /// PyTorch's defaults.
    fn default() -> Self {
        Self {
            lr: 1e-3,
            beta1: 0.9,
            beta2: 0.999,
            eps: 1e-8,
            weight_decay: 0.01,
        }
    }
}

impl AdamW {
    /// The bias corrections `1 − β1^t` and `√(1 − β2^t)` of step `t`.
    fn corrections(&self, step: u32) -> (f64, f64) {
        let t = i32::try_from(step).unwrap_or(i32::MAX);
        let b1 = 1.0 - f64::from(self.beta1).powi(t);
        let b2 = 1.0 - f64::from(self.beta2).powi(t);
        (b1, b2.sqrt())
    }

    fn check(&self, step: u32) -> Result<(), OpError> {
        if step == 0 {
            return Err(OpError::shape(
                STEP,
                "steps are counted from 1 (the bias corrections divide by 1 − β^t)",
            ));
        }
        Ok(())
    }
}

/// The tensors of an AdamW step, each a `T`: views to build the kernel, GPU arguments to run it.
#[derive(Debug, Clone, Copy)]
pub struct AdamWTensors<T> {
    /// The parameters, updated in place.
    pub param: T,
    /// Their gradient.
    pub grad: T,
    /// The first moment, updated in place.
    pub m: T,
    /// The second moment, updated in place.
    pub v: T,
}

const STEP: &str = "adamw step";

/// WGSL of the step, for both widths (see the elementwise kernels' helpers); the gradient's
/// scale and the bias corrections come from `fbl_adam_gs`, `fbl_adam_b1` and `fbl_adam_b2`.
macro_rules! step_helpers {
    () => {
        "
fn fbl_adam_m{S}(m: {T}, g: {T}) -> {T} {
    return params.beta1 * m + (1.0 - params.beta1) * (g * fbl_adam_gs{S}());
}
fn fbl_adam_v{S}(v: {T}, g: {T}) -> {T} {
    let gs = g * fbl_adam_gs{S}();
    return params.beta2 * v + (1.0 - params.beta2) * gs * gs;
}
fn fbl_adam_p{S}(p: {T}, m: {T}, v: {T}, g: {T}) -> {T} {
    let m_hat = fbl_adam_m{S}(m, g) / fbl_adam_b1{S}();
    let v_root = sqrt(fbl_adam_v{S}(v, g)) / fbl_adam_b2{S}();
    return p - params.lr * (m_hat / (v_root + params.eps) + params.weight_decay * p);
}
"
    };
}

/// The per-step values from the parameter block.
macro_rules! host_values {
    () => {
        "
fn fbl_adam_gs{S}() -> f32 { return params.grad_scale; }
fn fbl_adam_b1{S}() -> f32 { return params.bias1; }
fn fbl_adam_b2{S}() -> f32 { return params.bias2_sqrt; }
"
    };
}

/// The per-step values from the `scalars` operand, as [`AdamW::step_scalars`] lays them out.
macro_rules! device_values {
    () => {
        "
fn fbl_adam_gs{S}() -> f32 { return scalars_load(2u); }
fn fbl_adam_b1{S}() -> f32 { return scalars_load(0u); }
fn fbl_adam_b2{S}() -> f32 { return scalars_load(1u); }
"
    };
}

/// Whether the gate (a flag) is set.
macro_rules! gate {
    () => {
        "
fn fbl_adam_skip{S}() -> bool {
    return gate_load(0u) != 0u;
}
"
    };
}

/// The helpers of each kernel: by (gated, values on the device).
const HELPERS: [[&str; 2]; 2] = [
    [
        concat!(step_helpers!(), host_values!()),
        concat!(step_helpers!(), device_values!()),
    ],
    [
        concat!(step_helpers!(), host_values!(), gate!()),
        concat!(step_helpers!(), device_values!(), gate!()),
    ],
];

/// How many values [`AdamW::step_scalars`] gives.
pub const STEP_SCALARS: u32 = 4;

impl AdamW {
    /// What a step whose values are on the device ([`AdamWOp::on_device`]) reads from its
    /// `scalars` operand for step `step` (from 1) with the gradient scaled by `grad_scale`:
    /// `[1 − β1^t, √(1 − β2^t), grad_scale, 0]`.
    pub fn step_scalars(&self, step: u32, grad_scale: f32) -> Result<[f32; 4], OpError> {
        self.check(step)?;
        let (bias1, bias2_sqrt) = self.corrections(step);
        Ok([bias1 as f32, bias2_sqrt as f32, grad_scale, 0.0])
    }
}

/// The AdamW step's kernel, built for the views of its tensors.
#[derive(Debug, Clone)]
pub struct AdamWOp {
    kernel: Elementwise,
    gated: bool,
    on_device: bool,
}

/// Checks that `view` (operand `role`) holds `n` values of `elem`, shape `[n]`.
fn check_vector(role: &str, view: &View, n: u32, elem: ElemType) -> Result<(), OpError> {
    let axes = view.axes();
    if axes.len() != 1
        || axes[0].extent.as_static() != Some(u64::from(n))
        || view.layout().elem() != elem
    {
        return Err(OpError::shape(
            STEP,
            format!("the {role} `{}` must be {elem} of shape [{n}]", view.name()),
        ));
    }
    Ok(())
}

impl AdamWOp {
    /// The kernel for tensors read through `views` (all of one shape, any layouts).
    pub fn new(gpu: &Gpu, views: &AdamWTensors<&View>) -> Result<Self, OpError> {
        Self::build(gpu, views, None, None)
    }

    /// The kernel of a step that does nothing — parameters and moments keep their values —
    /// where the flag `gate` (`u32`, shape `[1]`) is not 0: set by
    /// [`NonFiniteOp`](super::NonFiniteOp) where a gradient of a mixed-precision step holds an
    /// infinity or a NaN (its scaled `f16` values overflowed), so that such a step is skipped on
    /// the device without the host reading anything first. Run it with
    /// [`step_gated`](Self::step_gated).
    pub fn gated(gpu: &Gpu, views: &AdamWTensors<&View>, gate: &View) -> Result<Self, OpError> {
        check_vector("gate", gate, 1, ElemType::U32)?;
        Self::build(gpu, views, Some(gate), None)
    }

    /// The kernel of a step that reads its per-step values — the bias corrections of its
    /// number and the gradient's scale — from `scalars` (f32, shape [[`STEP_SCALARS`]], written
    /// with [`AdamW::step_scalars`]) on the device, gated by `gate` where given (see
    /// [`gated`](Self::gated)). Work recorded once then runs any step: only the scalars are
    /// written. Run it with [`step_on_device`](Self::step_on_device).
    pub fn on_device(
        gpu: &Gpu,
        views: &AdamWTensors<&View>,
        scalars: &View,
        gate: Option<&View>,
    ) -> Result<Self, OpError> {
        check_vector("scalars", scalars, STEP_SCALARS, ElemType::F32)?;
        if let Some(gate) = gate {
            check_vector("gate", gate, 1, ElemType::U32)?;
        }
        Self::build(gpu, views, gate, Some(scalars))
    }

    fn build(
        gpu: &Gpu,
        views: &AdamWTensors<&View>,
        gate: Option<&View>,
        scalars: Option<&View>,
    ) -> Result<Self, OpError> {
        let AdamWTensors { param, grad, m, v } = *views;
        let kept = |expr: &str, old: &str| match gate {
            Some(_) => format!("select({expr}, {old}, fbl_adam_skip{{S}}())"),
            None => expr.to_owned(),
        };
        let mut names = vec!["lr", "beta1", "beta2", "eps", "weight_decay"];
        if scalars.is_none() {
            names.extend(["grad_scale", "bias1", "bias2_sqrt"]);
        }
        let kernel = Elementwise::new(
            gpu,
            Spec {
                op: STEP,
                inputs: vec![("grad", grad), ("param", param), ("m", m), ("v", v)],
                outputs: vec![
                    ("m", m, kept("fbl_adam_m{S}(m, grad)", "m")),
                    ("v", v, kept("fbl_adam_v{S}(v, grad)", "v")),
                    (
                        "param",
                        param,
                        kept("fbl_adam_p{S}(param, m, v, grad)", "param"),
                    ),
                ],
                scalars: names.into_iter().map(|n| (n, Scalar::F32)).collect(),
                helpers: HELPERS[usize::from(gate.is_some())][usize::from(scalars.is_some())],
                unwalked: gate
                    .map(|g| ("gate", g))
                    .into_iter()
                    .chain(scalars.map(|s| ("scalars", s)))
                    .collect(),
            },
        )?;
        Ok(Self {
            kernel,
            gated: gate.is_some(),
            on_device: scalars.is_some(),
        })
    }

    /// Whether an invocation updates four elements.
    pub fn is_vectorized(&self) -> bool {
        self.kernel.is_vectorized()
    }

    /// The shader.
    pub fn shader(&self) -> &str {
        self.kernel.source()
    }

    /// Records step `step` (from 1) with the gradient scaled by `grad_scale`.
    pub fn step(
        &self,
        batch: &mut Batch<'_>,
        t: &AdamWTensors<&GpuArg<'_>>,
        hyper: &AdamW,
        step: u32,
        grad_scale: f32,
    ) -> Result<(), OpError> {
        self.expect(false, false, "step")?;
        self.record(batch, t, hyper, Some((step, grad_scale)), None, None)
    }

    /// Records step `step` of a [gated](Self::gated) kernel, skipped on the device where
    /// `gate` is set.
    pub fn step_gated(
        &self,
        batch: &mut Batch<'_>,
        t: &AdamWTensors<&GpuArg<'_>>,
        hyper: &AdamW,
        step: u32,
        grad_scale: f32,
        gate: &GpuArg<'_>,
    ) -> Result<(), OpError> {
        self.expect(true, false, "step_gated")?;
        self.record(batch, t, hyper, Some((step, grad_scale)), Some(gate), None)
    }

    /// Records a step of an [`on_device`](Self::on_device) kernel: whichever step `scalars`
    /// holds when it runs, gated by `gate` where the kernel was built with one.
    pub fn step_on_device(
        &self,
        batch: &mut Batch<'_>,
        t: &AdamWTensors<&GpuArg<'_>>,
        hyper: &AdamW,
        scalars: &GpuArg<'_>,
        gate: Option<&GpuArg<'_>>,
    ) -> Result<(), OpError> {
        self.expect(gate.is_some(), true, "step_on_device")?;
        self.record(batch, t, hyper, None, gate, Some(scalars))
    }

    /// Checks that the kernel was built for the entry point `entry` with or without a gate.
    fn expect(&self, gated: bool, on_device: bool, entry: &str) -> Result<(), OpError> {
        if (self.gated, self.on_device) == (gated, on_device) {
            return Ok(());
        }
        let built = match (self.gated, self.on_device) {
            (false, false) => "AdamWOp::new (record it with step)",
            (true, false) => "AdamWOp::gated (record it with step_gated)",
            (true, true) => {
                "AdamWOp::on_device with a gate (record it with step_on_device and the gate)"
            }
            (false, true) => {
                "AdamWOp::on_device without a gate (record it with step_on_device and no gate)"
            }
        };
        Err(OpError::shape(
            STEP,
            format!("{entry} does not fit the kernel: it was built by {built}"),
        ))
    }

    fn record(
        &self,
        batch: &mut Batch<'_>,
        t: &AdamWTensors<&GpuArg<'_>>,
        hyper: &AdamW,
        host: Option<(u32, f32)>,
        gate: Option<&GpuArg<'_>>,
        scalars: Option<&GpuArg<'_>>,
    ) -> Result<(), OpError> {
        let f = ParamValue::F32;
        let mut values = vec![
            ("lr", f(hyper.lr)),
            ("beta1", f(hyper.beta1)),
            ("beta2", f(hyper.beta2)),
            ("eps", f(hyper.eps)),
            ("weight_decay", f(hyper.weight_decay)),
        ];
        if let Some((step, grad_scale)) = host {
            let [bias1, bias2_sqrt, grad_scale, _] = hyper.step_scalars(step, grad_scale)?;
            values.extend([
                ("grad_scale", f(grad_scale)),
                ("bias1", f(bias1)),
                ("bias2_sqrt", f(bias2_sqrt)),
            ]);
        }
        let mut args = vec![t.grad, t.param, t.m, t.v];
        args.extend(gate);
        args.extend(scalars);
        self.kernel.record(batch, STEP, &args, &values)
    }
}

/// AdamW step `step` (from 1) on the CPU, in `f64`: updates `param`, `m` and `v` in place.
pub fn adamw_step_cpu<T: Real>(
    param: &mut dyn LogicalMut<T>,
    grad: &dyn Logical<T>,
    m: &mut dyn LogicalMut<T>,
    v: &mut dyn LogicalMut<T>,
    hyper: &AdamW,
    step: u32,
    grad_scale: f64,
) -> Result<(), OpError> {
    hyper.check(step)?;
    let (bias1, bias2_sqrt) = hyper.corrections(step);
    let (b1, b2) = (f64::from(hyper.beta1), f64::from(hyper.beta2));
    let (lr, eps, wd) = (
        f64::from(hyper.lr),
        f64::from(hyper.eps),
        f64::from(hyper.weight_decay),
    );
    map_cpu(STEP, &[grad], &mut [param, m, v], |a, out| {
        let g = a[0] * grad_scale;
        let m1 = b1 * out[1] + (1.0 - b1) * g;
        let v1 = b2 * out[2] + (1.0 - b2) * g * g;
        let p = out[0];
        out[0] = p - lr * ((m1 / bias1) / (v1.sqrt() / bias2_sqrt + eps) + wd * p);
        out[1] = m1;
        out[2] = v1;
    })
}

/// `Σ g²` over every element of a tensor of any layout, on the GPU (see the module docs).
#[derive(Debug, Clone)]
pub struct SumSquaresOp {
    chunks: Compiled,
    total: Compiled,
    partials: Partials,
    width: u32,
}

const SUM_SQUARES: &str = "sum of squares";
/// The workgroup size of [`chunk_entry`].
pub(crate) const LANES: u32 = 256;
/// Fewest elements (or four-element runs) a lane of pass 1 adds.
const MIN_PER_LANE: u64 = 4;

impl SumSquaresOp {
    /// The kernels for a gradient read through `grad`, and a total written through `out` (one
    /// element: shape `[1]`).
    pub fn new(gpu: &Gpu, grad: &View, out: &View) -> Result<Self, OpError> {
        let rank = grad.axes().len();
        if out.axes().len() != 1 || out.axes()[0].extent.as_static() != Some(1) {
            return Err(OpError::shape(
                SUM_SQUARES,
                format!("`out` ({}) must have shape [1]", out.name()),
            ));
        }
        let partials = Partials::new(SUM_SQUARES, None)?;
        let subgroups = gpu.features().subgroups;
        let g = match rank.checked_sub(1) {
            Some(last) => Operand::read("g", grad)?.vectorized(last),
            None => Operand::read("g", grad)?,
        };
        let width = if g.vector_axis().is_some() { 4 } else { 1 };
        let part = Operand::write("part", partials.view())?;
        let mut body = workgroup_reduce(LANES, subgroups);
        if let Some(last) = rank.checked_sub(1) {
            body += &getter(&g, last, width);
        }
        let pass = ChunkPass {
            name: "sum_squares_chunks",
            groups: "part_dim0()",
            term: "v * v",
            finish: "part_store(group, total);",
        };
        body += &chunk_entry(&pass, rank, width, subgroups);
        let chunks = Compiled::new(
            SUM_SQUARES,
            gpu,
            KernelSource::new(SUM_SQUARES)
                .operand(g)
                .operand(part)
                .scalar("per_group", Scalar::U32)
                .body(body),
        )?;
        let mut body = workgroup_reduce(LANES, subgroups);
        let _ = write!(
            body,
            "@compute @workgroup_size({LANES})\nfn sum_squares_total(\
             @builtin(local_invocation_index) lid: u32, {}) {{\n    var acc = 0.0;\n    \
             for (var q = lid; q < part_dim0(); q = q + {LANES}u) {{\n        \
             acc = acc + part_load(q);\n    }}\n    \
             var total = fbl_wg_sum(acc, lid{});\n    if (lid == 0u) {{\n        \
             if (params.accumulate != 0u) {{\n            total = total + out_load(0u);\n        }}\n        \
             out_store(0u, total);\n    }}\n}}\n",
            entry_params(subgroups),
            subgroup_call_args(subgroups)
        );
        let total = Compiled::new(
            SUM_SQUARES,
            gpu,
            KernelSource::new(SUM_SQUARES)
                .operand(Operand::read("part", partials.view())?)
                .operand(Operand::write("out", out)?)
                .scalar("accumulate", Scalar::U32)
                .body(body),
        )?;
        Ok(Self {
            chunks,
            total,
            partials,
            width,
        })
    }

    /// The shaders: pass 1, pass 2.
    pub fn shaders(&self) -> [&KernelModule; 2] {
        [self.chunks.module(), self.total.module()]
    }

    /// Records `out = Σ g²` (or `out += Σ g²`, with `accumulate`).
    pub fn record(
        &self,
        batch: &mut Batch<'_>,
        grad: &GpuArg<'_>,
        out: &GpuArg<'_>,
        accumulate: bool,
    ) -> Result<(), OpError> {
        let (per_group, groups) = chunking(SUM_SQUARES, &grad.dims(), self.width)?;
        let buffer = self.partials.scratch(batch.gpu(), groups)?;
        let part = self.partials.arg(&buffer, groups)?;
        self.chunks.record_linear(
            batch,
            "sum_squares_chunks",
            &[("g", grad), ("part", &part)],
            &[("per_group", ParamValue::U32(per_group))],
            groups,
        )?;
        self.total.record(
            batch,
            "sum_squares_total",
            &[("part", &part), ("out", out)],
            &[("accumulate", ParamValue::U32(u32::from(accumulate)))],
            [1, 1, 1],
        )
    }
}

/// What a pass over chunks of a tensor computes: per element `v` (`f32`, or `vec4<f32>` four at a
/// time) the term `term` sums, and with its workgroup's total `total` the statement `finish`;
/// `groups` is how many workgroups do work.
pub(crate) struct ChunkPass<'a> {
    /// The entry point's name.
    pub name: &'a str,
    /// The number of workgroups with a chunk.
    pub groups: &'a str,
    /// What is summed per element, over `v`.
    pub term: &'a str,
    /// What the first lane does with the workgroup's `total`.
    pub finish: &'a str,
}

/// Every element's `g_get` value, the pass's term summed over a chunk of `params.per_group`
/// units (elements, or runs of `width` along the last axis) per workgroup.
pub(crate) fn chunk_entry(
    pass: &ChunkPass<'_>,
    rank: usize,
    width: u32,
    subgroups: bool,
) -> String {
    let mut s = format!(
        "@compute @workgroup_size({LANES})\nfn {}(\
         @builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>, \
         @builtin(local_invocation_index) lid: u32, {}) {{\n",
        pass.name,
        entry_params(subgroups)
    );
    let _ = writeln!(s, "    let group = wg.x + wg.y * nwg.x;");
    let _ = writeln!(
        s,
        "    if (group >= {}) {{\n        return;\n    }}",
        pass.groups
    );
    s += &chunk_loop(
        &ChunkLoop {
            role: "g",
            chunk: "group",
            per_group: "params.per_group",
            term: pass.term,
        },
        rank,
        width,
    );
    let _ = writeln!(
        s,
        "    let total = fbl_wg_sum(acc, lid{});\n    if (lid == 0u) {{\n        \
         {}\n    }}\n}}",
        subgroup_call_args(subgroups),
        pass.finish
    );
    s
}

/// One lane's part of a chunk of a tensor: the statements of a function body (declaring `acc`,
/// the lane's sum of `term` over its units of the chunk) that read the tensor through operand
/// `role`'s `<role>_get<width>` ([`getter`]) and `<role>_dim<d>()`, and the lane through `lid`.
pub(crate) struct ChunkLoop<'a> {
    /// The operand read.
    pub role: &'a str,
    /// The chunk's number, a WGSL `u32` expression.
    pub chunk: &'a str,
    /// Units per chunk, a WGSL `u32` expression.
    pub per_group: &'a str,
    /// What is summed per element, over `v`.
    pub term: &'a str,
}

/// The statements of [`ChunkLoop`] for a tensor of rank `rank` read in runs of `width` along
/// its last axis, indented one level.
pub(crate) fn chunk_loop(l: &ChunkLoop<'_>, rank: usize, width: u32) -> String {
    let entry = LinearEntry {
        name: "",
        prefix: "ss",
    };
    let role = l.role;
    // Units: elements, with the last axis in runs of `width`.
    let mut units: Vec<String> = (0..rank).map(|d| format!("{role}_dim{d}()")).collect();
    if let Some(last) = units.last_mut() {
        *last = format!("(({last} + {}u) / {width}u)", width - 1);
    }
    let count = if units.is_empty() {
        "1u".to_owned()
    } else {
        units.join(" * ")
    };
    let mut s = String::new();
    let _ = writeln!(s, "    let count = {count};");
    let _ = writeln!(s, "    let first = {} * {};", l.chunk, l.per_group);
    let _ = writeln!(s, "    let end = min(first + {}, count);", l.per_group);
    let _ = writeln!(s, "    var acc = 0.0;");
    let _ = writeln!(
        s,
        "    for (var unit = first + lid; unit < end; unit = unit + {LANES}u) {{"
    );
    let _ = writeln!(s, "        let {} = unit;", entry.index());
    // Inside the loop: one more level of indentation.
    for line in entry.decode(&units).lines() {
        let _ = writeln!(s, "    {line}");
    }
    let value = if rank == 0 {
        format!("{role}_load()")
    } else {
        let mut coords: Vec<String> = (0..rank).map(|d| entry.coord(d)).collect();
        let last = coords.len() - 1;
        coords[last] = format!("{} * {width}u", coords[last]);
        format!("{role}_get{width}({})", coords.join(", "))
    };
    let _ = writeln!(s, "        let v = {value};");
    let _ = writeln!(s, "        let term = {};", l.term);
    let _ = writeln!(
        s,
        "        acc = acc + {};\n    }}",
        components_sum("term", width)
    );
    s
}

/// How [`chunk_entry`] splits `dims` (runs of `width` along the last axis): units per
/// workgroup and workgroups.
pub(crate) fn chunking(
    op: &'static str,
    dims: &[usize],
    width: u32,
) -> Result<(u32, u32), OpError> {
    let mut units: u64 = 1;
    for (d, &n) in dims.iter().enumerate() {
        let n = if d + 1 == dims.len() {
            (n as u64).div_ceil(u64::from(width))
        } else {
            n as u64
        };
        units *= n;
    }
    let lanes = u64::from(LANES);
    let per_group =
        (units.div_ceil(FILL_WORKGROUPS).max(MIN_PER_LANE * lanes)).next_multiple_of(lanes);
    let groups = units.div_ceil(per_group).max(1);
    Ok((
        u32::try_from(per_group).map_err(|_| OpError::shape(op, "too many elements"))?,
        u32::try_from(groups).map_err(|_| OpError::shape(op, "too many elements"))?,
    ))
}

/// `Σ g²` over every element of `grad`, on the CPU in `f64`.
pub fn sum_squares_cpu<T: Real>(grad: &dyn Logical<T>) -> f64 {
    let shape: Vec<u64> = grad.dims().iter().map(|&n| n as u64).collect();
    let n: u64 = shape.iter().product();
    (0..n)
        .into_par_iter()
        .map(|linear| {
            let mut coords = vec![0u64; shape.len()];
            unravel(linear, &shape, &mut coords);
            let index: Vec<usize> = coords.iter().map(|&c| c as usize).collect();
            let v = grad.get(&index).to_f64();
            v * v
        })
        .sum()
}
