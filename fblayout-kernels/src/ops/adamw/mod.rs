//! AdamW: one optimiser step over a group of parameter tensors, each of any shape, layout and
//! element type, in one dispatch; and the sum of squares of a gradient (for clipping by the
//! global norm, [`SumSquaresOp`]).
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
//! a group of elementwise walks (the crate's elementwise generator), one per parameter — its
//! *member* — over `param`, `grad`, `m` and `v`, each through its own view; `param`, `m` and `v`
//! are updated in place, each read and written through one read-write operand. A member may
//! also write a **copy** of the updated parameters through a view of its own, typically `f16`
//! (mixed precision's weights for the next step's products): the same value, rounded to the
//! copy's element type when stored. The bias corrections are computed on the host, in `f64`,
//! from `t`.
//!
//! The members' workgroups follow one another by ranges, each member taking as many as its
//! elements need (see `ops::group`), so a step over tiny tensors (biases, a norm's γ and β)
//! and large ones is one dispatch instead of one each: at most [`AdamWOp::capacity`] members,
//! within the device's storage bindings. A single tensor's step ([`AdamWOp::new`],
//! [`gated`](AdamWOp::gated), [`on_device`](AdamWOp::on_device)) is the group of one.
//!
//! A [gated](AdamWOp::gated) step reads one more value on the device, a flag, and does nothing
//! where it is set — every invocation returns before it reads a parameter, so parameters,
//! moments and copies keep their bits: with the flag set by
//! [`NonFiniteOp`](super::NonFiniteOp) over every gradient, a mixed-precision step whose scaled
//! gradients overflowed is skipped without the host reading anything first (dynamic loss
//! scaling).

mod sum_squares;

use fblayout_core::kernel::{ParamValue, Scalar};
use fblayout_core::layout::{ElemType, View};

use super::elementwise::{ElementwiseGroup, GroupSpec, Member, map_cpu};
use super::error::OpError;
use super::group::{self, by_position};
use crate::cpu::{Logical, LogicalMut, Real};
use crate::runtime::{Batch, Gpu};
use crate::tensor::GpuArg;

pub use super::group::MAX_MEMBERS;
pub(crate) use sum_squares::{ChunkLoop, LANES, chunk_loop, chunking};
pub use sum_squares::{SumSquaresOp, sum_squares_cpu};

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

/// One parameter of a step over a group ([`AdamWOp::many`]): its tensors, and where given the
/// copy the step writes of the updated parameters (shaped like them, `f16` or `f32`, in a
/// layout of its own).
#[derive(Debug, Clone, Copy)]
pub struct AdamWMember<T> {
    /// The parameters, their gradient and moments.
    pub tensors: AdamWTensors<T>,
    /// The copy of the updated parameters, written by the step.
    pub copy: Option<T>,
}

impl<T> From<AdamWTensors<T>> for AdamWMember<T> {
    /// The member without a copy.
    fn from(tensors: AdamWTensors<T>) -> Self {
        Self {
            tensors,
            copy: None,
        }
    }
}

/// Where a recorded step finds its per-step values: the step number's bias corrections and the
/// gradient's scale.
#[derive(Debug, Clone, Copy)]
pub enum StepValues<'a, 'b> {
    /// Written into the dispatch's parameters when it is recorded.
    Host {
        /// The step number, from 1.
        step: u32,
        /// The gradient's scale.
        grad_scale: f32,
    },
    /// Read on the device from this `scalars` operand, written with
    /// [`AdamW::step_scalars`] before each submission (a kernel built by
    /// [`AdamWOp::on_device`], or [`many`](AdamWOp::many) with scalars).
    Device(&'a GpuArg<'b>),
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

/// The helpers of each kernel: by whether its values are on the device.
const HELPERS: [&str; 2] = [
    concat!(step_helpers!(), host_values!()),
    concat!(step_helpers!(), device_values!()),
];

/// Whether the gate (a flag) is set: the dispatch does nothing.
const SKIP: &str = "gate_load(0u) != 0u";

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

/// The roles of each member's operands, by position.
const GRAD: [&str; group::MAX_MEMBERS] = by_position!("grad");
const PARAM: [&str; group::MAX_MEMBERS] = by_position!("param");
const M: [&str; group::MAX_MEMBERS] = by_position!("m");
const V: [&str; group::MAX_MEMBERS] = by_position!("v");
const COPY: [&str; group::MAX_MEMBERS] = by_position!("copy");

/// Storage bindings of a member: its four tensors.
const MEMBER_BINDINGS: usize = 4;

/// The AdamW step's kernel over a group of parameters, built for the views of their tensors.
#[derive(Debug, Clone)]
pub struct AdamWOp {
    kernel: ElementwiseGroup,
    gated: bool,
    on_device: bool,
    /// Whether each member writes a copy.
    copies: Vec<bool>,
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
        Self::many(gpu, &[(*views).into()], None, None)
    }

    /// The kernel of a step that does nothing — parameters and moments keep their values —
    /// where the flag `gate` (`u32`, shape `[1]`) is not 0: set by
    /// [`NonFiniteOp`](super::NonFiniteOp) where a gradient of a mixed-precision step holds an
    /// infinity or a NaN (its scaled `f16` values overflowed), so that such a step is skipped on
    /// the device without the host reading anything first. Run it with
    /// [`step_gated`](Self::step_gated).
    pub fn gated(gpu: &Gpu, views: &AdamWTensors<&View>, gate: &View) -> Result<Self, OpError> {
        Self::many(gpu, &[(*views).into()], None, Some(gate))
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
        Self::many(gpu, &[(*views).into()], Some(scalars), gate)
    }

    /// How many parameters one step updates on `gpu`: each member's four tensors (five with a
    /// copy, where `copies`) are storage bindings of their own beside the gate's and the step
    /// values', within the device's `max_storage_buffers_per_shader_stage`, and at most
    /// [`MAX_MEMBERS`].
    pub fn capacity(gpu: &Gpu, copies: bool) -> usize {
        group::capacity(gpu, 2, MEMBER_BINDINGS + usize::from(copies))
    }

    /// The step over the parameters of `members` (from one to [`capacity`](Self::capacity),
    /// each of its own shape and layouts, with or without a copy) in one dispatch: reading its
    /// per-step values from `scalars` where given (see [`on_device`](Self::on_device)), else
    /// from the host when recorded; gated by `gate` where given (see [`gated`](Self::gated)).
    /// Record it with [`record`](Self::record).
    pub fn many(
        gpu: &Gpu,
        members: &[AdamWMember<&View>],
        scalars: Option<&View>,
        gate: Option<&View>,
    ) -> Result<Self, OpError> {
        if let Some(scalars) = scalars {
            check_vector("scalars", scalars, STEP_SCALARS, ElemType::F32)?;
        }
        if let Some(gate) = gate {
            check_vector("gate", gate, 1, ElemType::U32)?;
        }
        let copies: Vec<bool> = members.iter().map(|m| m.copy.is_some()).collect();
        let per_member = MEMBER_BINDINGS + usize::from(copies.contains(&true));
        let shared = usize::from(gate.is_some()) + usize::from(scalars.is_some());
        group::check_members(STEP, gpu, members.len(), shared, per_member)?;
        let walks = members
            .iter()
            .enumerate()
            .map(|(i, member)| walk(i, member))
            .collect::<Result<Vec<_>, _>>()?;
        let mut names = vec!["lr", "beta1", "beta2", "eps", "weight_decay"];
        if scalars.is_none() {
            names.extend(["grad_scale", "bias1", "bias2_sqrt"]);
        }
        let kernel = ElementwiseGroup::new(
            gpu,
            GroupSpec {
                op: STEP,
                members: walks,
                scalars: names.into_iter().map(|n| (n, Scalar::F32)).collect(),
                helpers: HELPERS[usize::from(scalars.is_some())],
                unwalked: gate
                    .map(|g| ("gate", g))
                    .into_iter()
                    .chain(scalars.map(|s| ("scalars", s)))
                    .collect(),
                skip: gate.map(|_| SKIP),
            },
        )?;
        Ok(Self {
            kernel,
            gated: gate.is_some(),
            on_device: scalars.is_some(),
            copies,
        })
    }

    /// How many parameters it updates.
    pub fn members(&self) -> usize {
        self.copies.len()
    }

    /// Whether an invocation updates four elements, in every member.
    pub fn is_vectorized(&self) -> bool {
        (0..self.members()).all(|i| self.kernel.is_vectorized(i))
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
        let values = StepValues::Host { step, grad_scale };
        self.record(batch, &[(*t).into()], hyper, values, None)
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
        let values = StepValues::Host { step, grad_scale };
        self.record(batch, &[(*t).into()], hyper, values, Some(gate))
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
        let values = StepValues::Device(scalars);
        self.record(batch, &[(*t).into()], hyper, values, gate)
    }

    /// Records the step of every member of the group: `members` one for each the kernel was
    /// built for, in that order, each with a copy where it was built with one; the per-step
    /// `values` from the host or the device as the kernel was built
    /// ([`many`](Self::many)'s scalars), and the `gate` where it was built with one.
    pub fn record(
        &self,
        batch: &mut Batch<'_>,
        members: &[AdamWMember<&GpuArg<'_>>],
        hyper: &AdamW,
        values: StepValues<'_, '_>,
        gate: Option<&GpuArg<'_>>,
    ) -> Result<(), OpError> {
        let on_device = matches!(values, StepValues::Device(_));
        self.expect(gate.is_some(), on_device, "record")?;
        if members.len() != self.copies.len() {
            return Err(OpError::shape(
                STEP,
                format!(
                    "the step was built for {} parameters, and {} were given",
                    self.copies.len(),
                    members.len()
                ),
            ));
        }
        let mut args = Vec::with_capacity(members.len());
        for (i, (member, &copy)) in members.iter().zip(&self.copies).enumerate() {
            let t = &member.tensors;
            let mut a = vec![t.grad, t.param, t.m, t.v];
            match (member.copy, copy) {
                (Some(c), true) => a.push(c),
                (None, false) => {}
                (given, _) => {
                    return Err(OpError::shape(
                        STEP,
                        format!(
                            "parameter {i} was built {} a copy, and given {}",
                            if copy { "with" } else { "without" },
                            if given.is_some() { "one" } else { "none" }
                        ),
                    ));
                }
            }
            args.push(a);
        }
        let f = ParamValue::F32;
        let mut scalars = vec![
            ("lr", f(hyper.lr)),
            ("beta1", f(hyper.beta1)),
            ("beta2", f(hyper.beta2)),
            ("eps", f(hyper.eps)),
            ("weight_decay", f(hyper.weight_decay)),
        ];
        let mut unwalked: Vec<&GpuArg<'_>> = gate.into_iter().collect();
        match values {
            StepValues::Host { step, grad_scale } => {
                let [bias1, bias2_sqrt, grad_scale, _] = hyper.step_scalars(step, grad_scale)?;
                scalars.extend([
                    ("grad_scale", f(grad_scale)),
                    ("bias1", f(bias1)),
                    ("bias2_sqrt", f(bias2_sqrt)),
                ]);
            }
            StepValues::Device(s) => unwalked.push(s),
        }
        self.kernel.record(batch, STEP, &args, &unwalked, &scalars)
    }

    /// Checks that the kernel was built for the entry point `entry`, with or without a gate and
    /// with its values on the host or the device.
    fn expect(&self, gated: bool, on_device: bool, entry: &str) -> Result<(), OpError> {
        if (self.gated, self.on_device) == (gated, on_device) {
            return Ok(());
        }
        let built = match (self.gated, self.on_device) {
            (false, false) => {
                "AdamWOp::new or many without a gate or scalars (record it with step, or \
                 record with the host's values and no gate)"
            }
            (true, false) => {
                "AdamWOp::gated or many with a gate (record it with step_gated, or record with \
                 the host's values and the gate)"
            }
            (true, true) => {
                "AdamWOp::on_device or many with scalars and a gate (record it with \
                 step_on_device, or record, with the device's values and the gate)"
            }
            (false, true) => {
                "AdamWOp::on_device or many with scalars and no gate (record it with \
                 step_on_device, or record, with the device's values and no gate)"
            }
        };
        Err(OpError::shape(
            STEP,
            format!("{entry} does not fit the kernel: it was built by {built}"),
        ))
    }
}

/// The walk of member `i`: its tensors read and updated in place, and its copy written, with
/// the member's own roles.
fn walk<'a>(i: usize, member: &AdamWMember<&'a View>) -> Result<Member<'a>, OpError> {
    let AdamWTensors { param, grad, m, v } = member.tensors;
    let (g, p, mi, vi) = (GRAD[i], PARAM[i], M[i], V[i]);
    let updated = format!("fbl_adam_p{{S}}({p}, {mi}, {vi}, {g})");
    let mut outputs = vec![
        (mi, m, format!("fbl_adam_m{{S}}({mi}, {g})")),
        (vi, v, format!("fbl_adam_v{{S}}({vi}, {g})")),
        (p, param, updated.clone()),
    ];
    if let Some(copy) = member.copy {
        if !matches!(copy.layout().elem(), ElemType::F16 | ElemType::F32) {
            return Err(OpError::Unsupported {
                op: STEP,
                role: COPY[i],
                view: copy.name().to_owned(),
                why: format!(
                    "a copy of the parameters is f16 or f32, not {}",
                    copy.layout().elem()
                ),
            });
        }
        outputs.push((COPY[i], copy, updated));
    }
    Ok(Member {
        inputs: vec![(g, grad), (p, param), (mi, m), (vi, v)],
        outputs,
    })
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
