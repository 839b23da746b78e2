//! LayerNorm and RMSNorm over the last axis, forward and backward.
//!
//! - `layer_norm`: `x, gamma, beta → y, mean, rstd`; its gradient `x, gamma, mean, rstd, dy →
//!   dx, dgamma, dbeta`.
//! - `rms_norm`: `x, gamma → y, rstd`; its gradient `x, gamma, rstd, dy → dx, dgamma`.
//!
//! The forward reduces `x` along its rows; the backward reduces `x` and `dy` along the rows
//! (for `dx`) and along tokens (for the γ and β gradients): the R-Tile case. The backward's
//! kernel is built with the forward's roles, `dy` standing in for `y` and `dbeta` for `beta`,
//! which it does not read.
//!
//! **A fused residual connection** (`residual`): the forward reads `x, res` and normalises their
//! sum, writing it as `sum` (output 0) as it reads it, so that no addition writes it and the
//! norm does not read it back; its backward reads the saved `sum` as its `x`. Where the sum has
//! readers besides the norm (a pre-norm block's residual stream), its gradient from them is the
//! backward's `dsum` (`carry`), added to `dx` by the same kernel instead of by an accumulation;
//! `dx` is then the gradient of both summands. Models fuse every norm whose input is the
//! residual addition just before it ([`Graph::push_norm`](crate::graph::Graph::push_norm)).

use fblayout_core::layout::View;
use fblayout_kernels::ops::add::add_cpu;
use fblayout_kernels::ops::norm::{
    layer_norm_backward_cpu, layer_norm_forward_cpu, rms_norm_backward_cpu, rms_norm_forward_cpu,
};
use fblayout_kernels::ops::{
    LayerNormGrads, LayerNormOp, LayerNormTensors, NormLaunch, Residual, RmsNormGrads, RmsNormOp,
    RmsNormTensors,
};
use fblayout_kernels::runtime::{Batch, Scratch};
use fblayout_kernels::tensor::GpuArg;

use super::cpu::{CpuCtx, Ins, Out, Outs};
use super::gpu::{BuildCtx, GpuKernel, RecordCtx};
use super::{
    Access, Args, Contract, Decl, Dims, Holds, LAST, OpErr, REDUCE_LAST, Sample, Shapes, Slot,
    ViewRule, Walk,
};
use crate::exec::views::BoundOperand;
use crate::graph::{BackwardRule, BackwardStep, Op, Phase, SharedGrad, Source};
use crate::select::KernelKind;

/// `x` and `dy` in a norm's backward: reduced along the row (`dx`) and along tokens (the γ and
/// β gradients).
const BOTH: &[Access] = &[
    Access::reducing(Walk::Last),
    Access::reducing(Walk::BeforeLast),
];

/// `x, gamma, beta → y, mean, rstd`; `x, res, gamma, beta → sum, y, mean, rstd` where
/// `residual`.
pub(crate) struct LayerNorm {
    pub(crate) eps: f32,
    pub(crate) residual: bool,
}

/// `x, gamma, mean, rstd, dy → dx, dgamma, dbeta`, and `dsum` read where `carry`.
pub(crate) struct LayerNormGrad {
    pub(crate) eps: f32,
    pub(crate) carry: bool,
}

/// `x, gamma → y, rstd`; `x, res, gamma → sum, y, rstd` where `residual`.
pub(crate) struct RmsNorm {
    pub(crate) eps: f32,
    pub(crate) residual: bool,
}

/// `x, gamma, rstd, dy → dx, dgamma`, and `dsum` read where `carry`.
pub(crate) struct RmsNormGrad {
    pub(crate) eps: f32,
    pub(crate) carry: bool,
}

/// The forward's inputs: `x` (and `res`), then the weights `params`.
fn forward_inputs(residual: bool, params: &[&'static str]) -> Vec<Slot> {
    let mut slots = vec![tok("x", REDUCE_LAST)];
    if residual {
        slots.push(tok("res", REDUCE_LAST));
    }
    slots.extend(params.iter().map(|p| whole(p)));
    slots
}

/// The forward's outputs: (`sum`, then) `y` and the statistics `stats`.
fn forward_outputs(residual: bool, stats: &[&'static str]) -> Vec<Slot> {
    let mut slots = Vec::new();
    if residual {
        slots.push(tok("sum", LAST));
    }
    slots.push(tok("y", LAST));
    slots.extend(stats.iter().map(|r| tok(r, LAST)));
    slots
}

/// The backward's inputs: the saved input, `gamma`, the statistics `stats`, `dy` (and `dsum`).
fn backward_inputs(carry: bool, stats: &[&'static str]) -> Vec<Slot> {
    let mut slots = vec![tok("x", BOTH), whole("gamma")];
    slots.extend(stats.iter().map(|r| tok(r, LAST)));
    slots.push(tok("dy", BOTH));
    if carry {
        slots.push(tok("dsum", LAST));
    }
    slots
}

/// The backward rule of a norm forward whose outputs carry a gradient where `grads` says, with
/// `params` weights and `stats` statistics: its backward `grad` (given whether it carries the
/// sum's gradient) reads the saved input (the sum, where `residual`), `gamma`, the statistics
/// and `dy` (and `dsum`), and writes `dx` (the gradient of `x`, and of `res`) and the weights'.
fn norm_backward(
    residual: bool,
    grads: &[bool],
    params: usize,
    stats: usize,
    grad: impl Fn(bool) -> Op,
) -> Option<BackwardRule> {
    use Source::{Input, Output, OutputGrad};
    let first = usize::from(residual);
    let y = first;
    let has = |k: usize| grads.get(k).copied().unwrap_or(true);
    if residual && !has(y) {
        // Only the sum reaches the loss, not the norm: its gradient is both summands'.
        return Some(BackwardRule {
            steps: vec![],
            passes_through: vec![0, 1],
        });
    }
    let carry = residual && has(0);
    let gamma = 1 + first;
    let mut inputs = vec![if residual { Output(0) } else { Input(0) }, Input(gamma)];
    inputs.extend((1..=stats).map(|k| Output(y + k)));
    inputs.push(OutputGrad(y));
    if carry {
        inputs.push(OutputGrad(0));
    }
    Some(BackwardRule {
        steps: vec![BackwardStep {
            op: grad(carry),
            inputs,
            grads_of: std::iter::once(0).chain(gamma..gamma + params).collect(),
            shared: residual.then(|| SharedGrad {
                output: 0,
                of: 0,
                inputs: vec![0, 1],
            }),
        }],
        passes_through: vec![],
    })
}

/// The shape rule of a forward's fused operands: `res` and `sum` like `x`.
fn check_residual(residual: bool, d: &Dims) -> Result<(), String> {
    if residual {
        d.same("x", "res")?;
        d.same("x", "sum")?;
    }
    Ok(())
}

/// A forward sample: (`x, res,`) weights of 6, then (`sum,`) `y` and `stats` statistics.
fn norm_sample(residual: bool, params: usize, stats: usize) -> Sample {
    let row = || Decl::tokens(&[("width", 6)], Holds::Floats);
    let written = |holds| Decl::tokens(&[("width", 6)], holds);
    let mut inputs = vec![row()];
    let mut outputs = vec![];
    if residual {
        inputs.push(row());
        outputs.push(written(Holds::Summed));
    }
    inputs.extend((0..params).map(|_| Decl::fixed(&[("width", 6)], Holds::Floats)));
    outputs.push(written(Holds::Written));
    outputs.extend((0..stats).map(|_| Decl::tokens(&[], Holds::Written)));
    Sample { inputs, outputs }
}

/// The CPU forward's row with a fused residual: `x + res`, written to `sum` and read from it.
fn cpu_sum<'a>(
    ins: &Ins<'_>,
    sum: &'a mut Out<'_>,
) -> Result<&'a dyn fblayout_kernels::cpu::Logical<f64>, OpErr> {
    add_cpu(ins.f("x")?, ins.f("res")?, sum)?;
    Ok(&*sum)
}

/// Adds `dsum` to `dx` on the CPU, where the backward carries it.
fn cpu_carry(carry: bool, ins: &Ins<'_>, dx: &mut Out<'_>) -> Result<(), OpErr> {
    if !carry {
        return Ok(());
    }
    let dsum = ins.f("dsum")?;
    let dims = dx.dims().to_vec();
    let mut index = vec![0; dims.len()];
    let mut dense = Vec::with_capacity(dims.iter().product());
    for i in 0..dims.iter().product::<usize>() {
        let mut rest = i;
        for (a, &n) in dims.iter().enumerate().rev() {
            index[a] = rest % n;
            rest /= n;
        }
        dense.push(dx.get(&index) + dsum.get(&index));
    }
    fblayout_kernels::cpu::LogicalMut::scatter(dx, &dense);
    Ok(())
}

fn tok(name: &'static str, access: &'static [Access]) -> Slot {
    Slot::new(name, ViewRule::Tokens, access)
}

fn whole(name: &'static str) -> Slot {
    Slot::new(name, ViewRule::Whole, LAST)
}

/// A LayerNorm node's tensors by role: the forward's own, or the backward's with `dbeta` for
/// `beta` and `dy` for `y`.
fn layer_norm_tensors<T>(args: &Args<T>, forward: bool) -> Result<LayerNormTensors<&T>, OpErr> {
    let (beta, y) = if forward {
        (args.read("beta")?, args.write("y")?)
    } else {
        (args.write("dbeta")?, args.read("dy")?)
    };
    let stat = |role| {
        if forward {
            args.write(role)
        } else {
            args.read(role)
        }
    };
    Ok(LayerNormTensors {
        x: args.read("x")?,
        gamma: args.read("gamma")?,
        beta,
        y,
        mean: stat("mean")?,
        rstd: stat("rstd")?,
    })
}

/// An RMSNorm node's tensors by role (the backward's with `dy` for `y`).
fn rms_norm_tensors<T>(args: &Args<T>, forward: bool) -> Result<RmsNormTensors<&T>, OpErr> {
    Ok(RmsNormTensors {
        x: args.read("x")?,
        gamma: args.read("gamma")?,
        y: if forward {
            args.write("y")?
        } else {
            args.read("dy")?
        },
        rstd: if forward {
            args.write("rstd")?
        } else {
            args.read("rstd")?
        },
    })
}

/// The views of a LayerNorm node's operands.
fn views<'a>(t: &LayerNormTensors<&&'a BoundOperand>) -> LayerNormTensors<&'a View> {
    LayerNormTensors {
        x: &t.x.view,
        gamma: &t.gamma.view,
        beta: &t.beta.view,
        y: &t.y.view,
        mean: &t.mean.view,
        rstd: &t.rstd.view,
    }
}

impl Contract for LayerNorm {
    fn f32_outputs(&self) -> &'static [&'static str] {
        &["mean", "rstd"]
    }

    fn name(&self) -> &'static str {
        if self.residual {
            "add_layer_norm"
        } else {
            "layer_norm"
        }
    }

    fn phase(&self) -> Phase {
        Phase::Forward
    }

    fn inputs(&self) -> Vec<Slot> {
        forward_inputs(self.residual, &["gamma", "beta"])
    }

    fn outputs(&self) -> Vec<Slot> {
        forward_outputs(self.residual, &["mean", "rstd"])
    }

    fn backward(&self) -> Option<BackwardRule> {
        self.backward_for(&[])
    }

    fn backward_for(&self, grads: &[bool]) -> Option<BackwardRule> {
        let eps = self.eps;
        norm_backward(self.residual, grads, 2, 2, |carry| Op::LayerNormGrad {
            eps,
            carry,
        })
    }

    fn check_shapes(&self, d: &Dims) -> Result<(), String> {
        check_residual(self.residual, d)?;
        d.same("x", "y")?;
        for r in ["gamma", "beta"] {
            d.is(r, &[d.last("x")?])?;
        }
        for r in ["mean", "rstd"] {
            d.is(r, d.leading("x")?)?;
        }
        Ok(())
    }

    fn sample(&self) -> Option<Sample> {
        Some(norm_sample(self.residual, 2, 2))
    }

    fn kind(&self) -> Option<KernelKind> {
        Some(KernelKind::Norm)
    }

    fn cpu(
        &self,
        ins: &Ins<'_>,
        outs: &mut Outs<'_>,
        _: &CpuCtx<'_>,
    ) -> Result<Option<f64>, OpErr> {
        let (g, b) = (ins.f("gamma")?, ins.f("beta")?);
        let eps = f64::from(self.eps);
        if self.residual {
            let [sum, y, mean, rstd] = outs.outs(["sum", "y", "mean", "rstd"])?;
            let x = cpu_sum(ins, sum)?;
            layer_norm_forward_cpu(x, g, b, eps, y, mean, rstd)?;
        } else {
            let [y, mean, rstd] = outs.outs(["y", "mean", "rstd"])?;
            layer_norm_forward_cpu(ins.f("x")?, g, b, eps, y, mean, rstd)?;
        }
        Ok(None)
    }

    fn gpu(
        &self,
        args: &Args<&BoundOperand>,
        ctx: &mut BuildCtx<'_>,
    ) -> Result<Box<dyn GpuKernel>, OpErr> {
        let fused = Fused::of(args, self.residual, false)?;
        layer_norm_kernel(args, ctx, self.eps, true, fused)
    }
}

impl Contract for LayerNormGrad {
    fn name(&self) -> &'static str {
        if self.carry {
            "layer_norm_grad_add"
        } else {
            "layer_norm_grad"
        }
    }

    fn phase(&self) -> Phase {
        Phase::Backward
    }

    fn inputs(&self) -> Vec<Slot> {
        backward_inputs(self.carry, &["mean", "rstd"])
    }

    fn outputs(&self) -> Vec<Slot> {
        vec![tok("dx", LAST), whole("dgamma"), whole("dbeta")]
    }

    fn check_shapes(&self, d: &Dims) -> Result<(), String> {
        for r in ["dy", "dx"] {
            d.same("x", r)?;
        }
        if self.carry {
            d.same("x", "dsum")?;
        }
        for r in ["gamma", "dgamma", "dbeta"] {
            d.is(r, &[d.last("x")?])?;
        }
        for r in ["mean", "rstd"] {
            d.is(r, d.leading("x")?)?;
        }
        Ok(())
    }

    fn kind(&self) -> Option<KernelKind> {
        Some(KernelKind::NormGrad)
    }

    fn scratch(&self, s: &Shapes<'_>) -> Result<Scratch, OpErr> {
        let (rows, cols) = norm_rows(s);
        LayerNormOp::backward_scratch(&NormLaunch::default(), rows, cols)
    }

    fn reads_stored(&self) -> bool {
        true
    }

    fn cpu(
        &self,
        ins: &Ins<'_>,
        outs: &mut Outs<'_>,
        _: &CpuCtx<'_>,
    ) -> Result<Option<f64>, OpErr> {
        let [dx, dg, db] = outs.outs(["dx", "dgamma", "dbeta"])?;
        let (x, g) = (ins.f("x")?, ins.f("gamma")?);
        let (mean, rstd, dy) = (ins.f("mean")?, ins.f("rstd")?, ins.f("dy")?);
        layer_norm_backward_cpu(x, g, mean, rstd, dy, dx, dg, db, false)?;
        cpu_carry(self.carry, ins, dx)?;
        Ok(None)
    }

    fn gpu(
        &self,
        args: &Args<&BoundOperand>,
        ctx: &mut BuildCtx<'_>,
    ) -> Result<Box<dyn GpuKernel>, OpErr> {
        let fused = Fused::of(args, false, self.carry)?;
        layer_norm_kernel(args, ctx, self.eps, false, fused)
    }
}

/// The fused operands of a norm node, each a `T`: the forward's `res` and `sum`, the
/// backward's `dsum`, where the node has them.
struct Fused<T> {
    residual: Option<(T, T)>,
    carry: Option<T>,
}

impl<'a> Fused<&'a BoundOperand> {
    fn of(args: &Args<&'a BoundOperand>, residual: bool, carry: bool) -> Result<Self, OpErr> {
        Ok(Self {
            residual: if residual {
                Some((*args.read("res")?, *args.write("sum")?))
            } else {
                None
            },
            carry: if carry {
                Some(*args.read("dsum")?)
            } else {
                None
            },
        })
    }

    /// Their views, for the kernels.
    fn views(&self) -> Residual<&'a View> {
        Residual {
            sum: self.residual.map(|(r, s)| (&r.view, &s.view)),
            carry: self.carry.map(|d| &d.view),
        }
    }

    /// Whether there are a residual and a carry, for recording.
    fn roles(&self) -> (bool, bool) {
        (self.residual.is_some(), self.carry.is_some())
    }
}

/// The fused arguments of a recorded norm: `[res, sum]` where `fused.0`, `dsum` where
/// `fused.1`.
#[allow(clippy::type_complexity)]
fn fused_args<'a, 'b>(
    args: &'a Args<GpuArg<'b>>,
    fused: (bool, bool),
) -> Result<(Option<[&'a GpuArg<'b>; 2]>, Option<&'a GpuArg<'b>>), OpErr> {
    let sum = if fused.0 {
        Some([args.read("res")?, args.write("sum")?])
    } else {
        None
    };
    let carry = if fused.1 {
        Some(args.read("dsum")?)
    } else {
        None
    };
    Ok((sum, carry))
}

fn layer_norm_kernel(
    args: &Args<&BoundOperand>,
    ctx: &mut BuildCtx<'_>,
    eps: f32,
    forward: bool,
    fused: Fused<&BoundOperand>,
) -> Result<Box<dyn GpuKernel>, OpErr> {
    let t = layer_norm_tensors(args, forward)?;
    let launch = NormLaunch::default();
    let op = LayerNormOp::fused(ctx.gpu, &views(&t), &fused.views(), eps, launch)?;
    Ok(Box::new(LayerNormKernel {
        op,
        forward,
        fused: fused.roles(),
    }))
}

struct LayerNormKernel {
    op: LayerNormOp,
    forward: bool,
    /// Whether the kernels fuse a residual (forward) and a carried gradient (backward).
    fused: (bool, bool),
}

impl GpuKernel for LayerNormKernel {
    fn record(
        &self,
        batch: &mut Batch<'_>,
        args: &Args<GpuArg<'_>>,
        _: &RecordCtx<'_>,
    ) -> Result<(), OpErr> {
        let t = layer_norm_tensors(args, self.forward)?;
        let (sum, carry) = fused_args(args, self.fused)?;
        if self.forward {
            return self.op.forward_fused(batch, &t, sum);
        }
        let grads = LayerNormGrads {
            dy: args.read("dy")?,
            dx: args.write("dx")?,
            dgamma: args.write("dgamma")?,
            dbeta: args.write("dbeta")?,
        };
        self.op.backward_fused(batch, &t, &grads, carry, false)
    }
}

impl Contract for RmsNorm {
    fn f32_outputs(&self) -> &'static [&'static str] {
        &["mean", "rstd"]
    }

    fn name(&self) -> &'static str {
        if self.residual {
            "add_rms_norm"
        } else {
            "rms_norm"
        }
    }

    fn phase(&self) -> Phase {
        Phase::Forward
    }

    fn inputs(&self) -> Vec<Slot> {
        forward_inputs(self.residual, &["gamma"])
    }

    fn outputs(&self) -> Vec<Slot> {
        forward_outputs(self.residual, &["rstd"])
    }

    fn backward(&self) -> Option<BackwardRule> {
        self.backward_for(&[])
    }

    fn backward_for(&self, grads: &[bool]) -> Option<BackwardRule> {
        let eps = self.eps;
        norm_backward(self.residual, grads, 1, 1, |carry| Op::RmsNormGrad {
            eps,
            carry,
        })
    }

    fn check_shapes(&self, d: &Dims) -> Result<(), String> {
        check_residual(self.residual, d)?;
        d.same("x", "y")?;
        d.is("gamma", &[d.last("x")?])?;
        d.is("rstd", d.leading("x")?)
    }

    fn sample(&self) -> Option<Sample> {
        Some(norm_sample(self.residual, 1, 1))
    }

    fn kind(&self) -> Option<KernelKind> {
        Some(KernelKind::Norm)
    }

    fn cpu(
        &self,
        ins: &Ins<'_>,
        outs: &mut Outs<'_>,
        _: &CpuCtx<'_>,
    ) -> Result<Option<f64>, OpErr> {
        let (g, eps) = (ins.f("gamma")?, f64::from(self.eps));
        if self.residual {
            let [sum, y, rstd] = outs.outs(["sum", "y", "rstd"])?;
            let x = cpu_sum(ins, sum)?;
            rms_norm_forward_cpu(x, g, eps, y, rstd)?;
        } else {
            let [y, rstd] = outs.outs(["y", "rstd"])?;
            rms_norm_forward_cpu(ins.f("x")?, g, eps, y, rstd)?;
        }
        Ok(None)
    }

    fn gpu(
        &self,
        args: &Args<&BoundOperand>,
        ctx: &mut BuildCtx<'_>,
    ) -> Result<Box<dyn GpuKernel>, OpErr> {
        let fused = Fused::of(args, self.residual, false)?;
        rms_norm_kernel(args, ctx, self.eps, true, fused)
    }
}

impl Contract for RmsNormGrad {
    fn name(&self) -> &'static str {
        if self.carry {
            "rms_norm_grad_add"
        } else {
            "rms_norm_grad"
        }
    }

    fn phase(&self) -> Phase {
        Phase::Backward
    }

    fn inputs(&self) -> Vec<Slot> {
        backward_inputs(self.carry, &["rstd"])
    }

    fn outputs(&self) -> Vec<Slot> {
        vec![tok("dx", LAST), whole("dgamma")]
    }

    fn check_shapes(&self, d: &Dims) -> Result<(), String> {
        for r in ["dy", "dx"] {
            d.same("x", r)?;
        }
        if self.carry {
            d.same("x", "dsum")?;
        }
        for r in ["gamma", "dgamma"] {
            d.is(r, &[d.last("x")?])?;
        }
        d.is("rstd", d.leading("x")?)
    }

    fn kind(&self) -> Option<KernelKind> {
        Some(KernelKind::NormGrad)
    }

    fn scratch(&self, s: &Shapes<'_>) -> Result<Scratch, OpErr> {
        let (rows, cols) = norm_rows(s);
        RmsNormOp::backward_scratch(&NormLaunch::default(), rows, cols)
    }

    fn reads_stored(&self) -> bool {
        true
    }

    fn cpu(
        &self,
        ins: &Ins<'_>,
        outs: &mut Outs<'_>,
        _: &CpuCtx<'_>,
    ) -> Result<Option<f64>, OpErr> {
        let [dx, dg] = outs.outs(["dx", "dgamma"])?;
        let (x, g, rstd, dy) = (ins.f("x")?, ins.f("gamma")?, ins.f("rstd")?, ins.f("dy")?);
        rms_norm_backward_cpu(x, g, rstd, dy, dx, dg, false)?;
        cpu_carry(self.carry, ins, dx)?;
        Ok(None)
    }

    fn gpu(
        &self,
        args: &Args<&BoundOperand>,
        ctx: &mut BuildCtx<'_>,
    ) -> Result<Box<dyn GpuKernel>, OpErr> {
        let fused = Fused::of(args, false, self.carry)?;
        rms_norm_kernel(args, ctx, self.eps, false, fused)
    }
}

/// The rows and columns of a norm's backward over `x` (its kernels are built by `new`, with
/// the default launch).
fn norm_rows(s: &Shapes<'_>) -> (u32, u32) {
    let cols = s.extent_u32("x", 0);
    (s.elements_u32("x") / cols.max(1), cols)
}

fn rms_norm_kernel(
    args: &Args<&BoundOperand>,
    ctx: &mut BuildCtx<'_>,
    eps: f32,
    forward: bool,
    fused: Fused<&BoundOperand>,
) -> Result<Box<dyn GpuKernel>, OpErr> {
    let t = rms_norm_tensors(args, forward)?;
    let views = RmsNormTensors {
        x: &t.x.view,
        gamma: &t.gamma.view,
        y: &t.y.view,
        rstd: &t.rstd.view,
    };
    let op = RmsNormOp::fused(ctx.gpu, &views, &fused.views(), eps, NormLaunch::default())?;
    Ok(Box::new(RmsNormKernel {
        op,
        forward,
        fused: fused.roles(),
    }))
}

struct RmsNormKernel {
    op: RmsNormOp,
    forward: bool,
    /// As [`LayerNormKernel::fused`].
    fused: (bool, bool),
}

impl GpuKernel for RmsNormKernel {
    fn record(
        &self,
        batch: &mut Batch<'_>,
        args: &Args<GpuArg<'_>>,
        _: &RecordCtx<'_>,
    ) -> Result<(), OpErr> {
        let t = rms_norm_tensors(args, self.forward)?;
        let (sum, carry) = fused_args(args, self.fused)?;
        if self.forward {
            return self.op.forward_fused(batch, &t, sum);
        }
        let grads = RmsNormGrads {
            dy: args.read("dy")?,
            dx: args.write("dx")?,
            dgamma: args.write("dgamma")?,
        };
        self.op.backward_fused(batch, &t, &grads, carry, false)
    }
}
