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

use fblayout_core::layout::View;
use fblayout_kernels::ops::norm::{
    layer_norm_backward_cpu, layer_norm_forward_cpu, rms_norm_backward_cpu, rms_norm_forward_cpu,
};
use fblayout_kernels::ops::{
    LayerNormGrads, LayerNormOp, LayerNormTensors, NormLaunch, RmsNormGrads, RmsNormOp,
    RmsNormTensors,
};
use fblayout_kernels::runtime::{Batch, Scratch};
use fblayout_kernels::tensor::GpuArg;

use super::cpu::{CpuCtx, Ins, Outs};
use super::gpu::{BuildCtx, GpuKernel, RecordCtx};
use super::{
    Access, Args, Contract, Decl, Dims, Holds, LAST, OpErr, REDUCE_LAST, Sample, Shapes, Slot,
    ViewRule, Walk,
};
use crate::exec::views::BoundOperand;
use crate::graph::{BackwardRule, BackwardStep, Op, Phase, Source};
use crate::select::KernelKind;

/// `x` and `dy` in a norm's backward: reduced along the row (`dx`) and along tokens (the γ and
/// β gradients).
const BOTH: &[Access] = &[
    Access::reducing(Walk::Last),
    Access::reducing(Walk::BeforeLast),
];

/// `x, gamma, beta → y, mean, rstd`.
pub(crate) struct LayerNorm {
    pub(crate) eps: f32,
}

/// `x, gamma, mean, rstd, dy → dx, dgamma, dbeta`.
pub(crate) struct LayerNormGrad {
    pub(crate) eps: f32,
}

/// `x, gamma → y, rstd`.
pub(crate) struct RmsNorm {
    pub(crate) eps: f32,
}

/// `x, gamma, rstd, dy → dx, dgamma`.
pub(crate) struct RmsNormGrad {
    pub(crate) eps: f32,
}

fn tok(name: &'static str, access: &'static [Access]) -> Slot {
    Slot::new(name, ViewRule::Tokens, access)
}

fn whole(name: &'static str) -> Slot {
    Slot::new(name, ViewRule::Whole, LAST)
}

fn backward(op: Op, inputs: Vec<Source>, grads_of: Vec<usize>) -> Option<BackwardRule> {
    Some(BackwardRule {
        steps: vec![BackwardStep {
            op,
            inputs,
            grads_of,
        }],
        passes_through: vec![],
    })
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
    fn name(&self) -> &'static str {
        "layer_norm"
    }

    fn phase(&self) -> Phase {
        Phase::Forward
    }

    fn inputs(&self) -> Vec<Slot> {
        vec![tok("x", REDUCE_LAST), whole("gamma"), whole("beta")]
    }

    fn outputs(&self) -> Vec<Slot> {
        vec![tok("y", LAST), tok("mean", LAST), tok("rstd", LAST)]
    }

    fn backward(&self) -> Option<BackwardRule> {
        use Source::{Input, Output, OutputGrad};
        backward(
            Op::LayerNormGrad { eps: self.eps },
            vec![Input(0), Input(1), Output(1), Output(2), OutputGrad(0)],
            vec![0, 1, 2],
        )
    }

    fn check_shapes(&self, d: &Dims) -> Result<(), String> {
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
        Some(Sample {
            inputs: vec![
                Decl::tokens(&[("width", 6)], Holds::Floats),
                Decl::fixed(&[("width", 6)], Holds::Floats),
                Decl::fixed(&[("width", 6)], Holds::Floats),
            ],
            outputs: vec![
                Decl::tokens(&[("width", 6)], Holds::Written),
                Decl::tokens(&[], Holds::Written),
                Decl::tokens(&[], Holds::Written),
            ],
        })
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
        let [y, mean, rstd] = outs.outs(["y", "mean", "rstd"])?;
        let (x, g, b) = (ins.f("x")?, ins.f("gamma")?, ins.f("beta")?);
        layer_norm_forward_cpu(x, g, b, f64::from(self.eps), y, mean, rstd)?;
        Ok(None)
    }

    fn gpu(
        &self,
        args: &Args<&BoundOperand>,
        ctx: &mut BuildCtx<'_>,
    ) -> Result<Box<dyn GpuKernel>, OpErr> {
        let t = layer_norm_tensors(args, true)?;
        let op = LayerNormOp::new(ctx.gpu, &views(&t), self.eps)?;
        Ok(Box::new(LayerNormKernel { op, forward: true }))
    }
}

impl Contract for LayerNormGrad {
    fn name(&self) -> &'static str {
        "layer_norm_grad"
    }

    fn phase(&self) -> Phase {
        Phase::Backward
    }

    fn inputs(&self) -> Vec<Slot> {
        vec![
            tok("x", BOTH),
            whole("gamma"),
            tok("mean", LAST),
            tok("rstd", LAST),
            tok("dy", BOTH),
        ]
    }

    fn outputs(&self) -> Vec<Slot> {
        vec![tok("dx", LAST), whole("dgamma"), whole("dbeta")]
    }

    fn check_shapes(&self, d: &Dims) -> Result<(), String> {
        for r in ["dy", "dx"] {
            d.same("x", r)?;
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
        Ok(None)
    }

    fn gpu(
        &self,
        args: &Args<&BoundOperand>,
        ctx: &mut BuildCtx<'_>,
    ) -> Result<Box<dyn GpuKernel>, OpErr> {
        let t = layer_norm_tensors(args, false)?;
        let op = LayerNormOp::new(ctx.gpu, &views(&t), self.eps)?;
        Ok(Box::new(LayerNormKernel { op, forward: false }))
    }
}

struct LayerNormKernel {
    op: LayerNormOp,
    forward: bool,
}

impl GpuKernel for LayerNormKernel {
    fn record(
        &self,
        batch: &mut Batch<'_>,
        args: &Args<GpuArg<'_>>,
        _: &RecordCtx<'_>,
    ) -> Result<(), OpErr> {
        let t = layer_norm_tensors(args, self.forward)?;
        if self.forward {
            return self.op.forward(batch, &t);
        }
        let grads = LayerNormGrads {
            dy: args.read("dy")?,
            dx: args.write("dx")?,
            dgamma: args.write("dgamma")?,
            dbeta: args.write("dbeta")?,
        };
        self.op.backward(batch, &t, &grads, false)
    }
}

impl Contract for RmsNorm {
    fn name(&self) -> &'static str {
        "rms_norm"
    }

    fn phase(&self) -> Phase {
        Phase::Forward
    }

    fn inputs(&self) -> Vec<Slot> {
        vec![tok("x", REDUCE_LAST), whole("gamma")]
    }

    fn outputs(&self) -> Vec<Slot> {
        vec![tok("y", LAST), tok("rstd", LAST)]
    }

    fn backward(&self) -> Option<BackwardRule> {
        use Source::{Input, Output, OutputGrad};
        backward(
            Op::RmsNormGrad { eps: self.eps },
            vec![Input(0), Input(1), Output(1), OutputGrad(0)],
            vec![0, 1],
        )
    }

    fn check_shapes(&self, d: &Dims) -> Result<(), String> {
        d.same("x", "y")?;
        d.is("gamma", &[d.last("x")?])?;
        d.is("rstd", d.leading("x")?)
    }

    fn sample(&self) -> Option<Sample> {
        Some(Sample {
            inputs: vec![
                Decl::tokens(&[("width", 6)], Holds::Floats),
                Decl::fixed(&[("width", 6)], Holds::Floats),
            ],
            outputs: vec![
                Decl::tokens(&[("width", 6)], Holds::Written),
                Decl::tokens(&[], Holds::Written),
            ],
        })
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
        let [y, rstd] = outs.outs(["y", "rstd"])?;
        rms_norm_forward_cpu(ins.f("x")?, ins.f("gamma")?, f64::from(self.eps), y, rstd)?;
        Ok(None)
    }

    fn gpu(
        &self,
        args: &Args<&BoundOperand>,
        ctx: &mut BuildCtx<'_>,
    ) -> Result<Box<dyn GpuKernel>, OpErr> {
        rms_norm_kernel(args, ctx, self.eps, true)
    }
}

impl Contract for RmsNormGrad {
    fn name(&self) -> &'static str {
        "rms_norm_grad"
    }

    fn phase(&self) -> Phase {
        Phase::Backward
    }

    fn inputs(&self) -> Vec<Slot> {
        vec![
            tok("x", BOTH),
            whole("gamma"),
            tok("rstd", LAST),
            tok("dy", BOTH),
        ]
    }

    fn outputs(&self) -> Vec<Slot> {
        vec![tok("dx", LAST), whole("dgamma")]
    }

    fn check_shapes(&self, d: &Dims) -> Result<(), String> {
        for r in ["dy", "dx"] {
            d.same("x", r)?;
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
        Ok(None)
    }

    fn gpu(
        &self,
        args: &Args<&BoundOperand>,
        ctx: &mut BuildCtx<'_>,
    ) -> Result<Box<dyn GpuKernel>, OpErr> {
        rms_norm_kernel(args, ctx, self.eps, false)
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
) -> Result<Box<dyn GpuKernel>, OpErr> {
    let t = rms_norm_tensors(args, forward)?;
    let views = RmsNormTensors {
        x: &t.x.view,
        gamma: &t.gamma.view,
        y: &t.y.view,
        rstd: &t.rstd.view,
    };
    let op = RmsNormOp::new(ctx.gpu, &views, eps)?;
    Ok(Box::new(RmsNormKernel { op, forward }))
}

struct RmsNormKernel {
    op: RmsNormOp,
    forward: bool,
}

impl GpuKernel for RmsNormKernel {
    fn record(
        &self,
        batch: &mut Batch<'_>,
        args: &Args<GpuArg<'_>>,
        _: &RecordCtx<'_>,
    ) -> Result<(), OpErr> {
        let t = rms_norm_tensors(args, self.forward)?;
        if self.forward {
            return self.op.forward(batch, &t);
        }
        let grads = RmsNormGrads {
            dy: args.read("dy")?,
            dx: args.write("dx")?,
            dgamma: args.write("dgamma")?,
        };
        self.op.backward(batch, &t, &grads, false)
    }
}
