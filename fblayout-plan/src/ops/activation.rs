//! Pointwise activations (GELU, its tanh form, SiLU) and SwiGLU, forward and backward.
//!
//! - `gelu`/`gelu_tanh`/`silu`: `x → y`; the gradient `x, dy → dx`.
//! - `swiglu`: `gate, up → y` with `y = silu(gate) · up`; the gradient `gate, up, dy → dgate,
//!   dup`.
//!
//! Every operand is visited at the same coordinates, in the first output's order. A backward
//! kernel reads `dy` through `y`'s view and writes `dx` through `x`'s, so it reads its inputs
//! as stored.

use fblayout_kernels::ops::activation::{
    activation_backward_cpu, activation_forward_cpu, swiglu_backward_cpu, swiglu_forward_cpu,
};
use fblayout_kernels::ops::{ActivationOp, SwigluOp};
use fblayout_kernels::runtime::Batch;
use fblayout_kernels::tensor::GpuArg;

use super::cpu::{CpuCtx, Ins, Outs};
use super::gpu::{BuildCtx, GpuKernel, RecordCtx};
use super::{Args, Contract, Decl, Dims, Holds, LIKE_OUTPUT, OWN, OpErr, Sample, Slot, ViewRule};

/// Every role of `roles` has the extents of the first.
fn all_same(d: &Dims, roles: &[&str]) -> Result<(), String> {
    roles.iter().try_for_each(|r| d.same(roles[0], r))
}
use crate::exec::views::BoundOperand;
use crate::graph::{Act, BackwardRule, BackwardStep, Op, Phase, Source};
use crate::select::KernelKind;

/// `x → y`.
pub(crate) struct Activation {
    pub(crate) act: Act,
}

/// `x, dy → dx`.
pub(crate) struct ActivationGrad {
    pub(crate) act: Act,
}

/// `gate, up → y`.
pub(crate) struct Swiglu;

/// `gate, up, dy → dgate, dup`.
pub(crate) struct SwigluGrad;

fn read(name: &'static str) -> Slot {
    Slot::new(name, ViewRule::Tokens, LIKE_OUTPUT)
}

/// The first output, walked in its own order; the others in its order.
fn written(names: &[&'static str]) -> Vec<Slot> {
    names
        .iter()
        .enumerate()
        .map(|(i, &n)| Slot::new(n, ViewRule::Tokens, if i == 0 { OWN } else { LIKE_OUTPUT }))
        .collect()
}

/// The kernels' activation of the graph's `act`.
pub(crate) fn kernel_activation(act: Act) -> fblayout_kernels::ops::Activation {
    use fblayout_kernels::ops::Activation as K;
    match act {
        Act::Gelu => K::Gelu,
        Act::GeluTanh => K::GeluTanh,
        Act::Silu => K::Silu,
        Act::Tanh => K::Tanh,
    }
}

impl Contract for Activation {
    fn name(&self) -> &'static str {
        match self.act {
            Act::Gelu => "gelu",
            Act::GeluTanh => "gelu_tanh",
            Act::Silu => "silu",
            Act::Tanh => "tanh",
        }
    }

    fn phase(&self) -> Phase {
        Phase::Forward
    }

    fn inputs(&self) -> Vec<Slot> {
        vec![read("x")]
    }

    fn outputs(&self) -> Vec<Slot> {
        written(&["y"])
    }

    fn backward(&self) -> Option<BackwardRule> {
        Some(BackwardRule {
            steps: vec![BackwardStep {
                op: Op::ActivationGrad(self.act),
                inputs: vec![Source::Input(0), Source::OutputGrad(0)],
                grads_of: vec![0],
                shared: None,
            }],
            passes_through: vec![],
        })
    }

    fn check_shapes(&self, d: &Dims) -> Result<(), String> {
        all_same(d, &["x", "y"])
    }

    fn sample(&self) -> Option<Sample> {
        Some(Sample {
            inputs: vec![Decl::tokens(&[("width", 7)], Holds::Floats)],
            outputs: vec![Decl::tokens(&[("width", 7)], Holds::Written)],
        })
    }

    fn kind(&self) -> Option<KernelKind> {
        Some(KernelKind::Elementwise)
    }

    fn cpu(
        &self,
        ins: &Ins<'_>,
        outs: &mut Outs<'_>,
        _: &CpuCtx<'_>,
    ) -> Result<Option<f64>, OpErr> {
        let [y] = outs.outs(["y"])?;
        activation_forward_cpu(kernel_activation(self.act), ins.f("x")?, y)?;
        Ok(None)
    }

    fn gpu(
        &self,
        args: &Args<&BoundOperand>,
        ctx: &mut BuildCtx<'_>,
    ) -> Result<Box<dyn GpuKernel>, OpErr> {
        let (x, y) = (&args.read("x")?.view, &args.write("y")?.view);
        let op = ActivationOp::new(ctx.gpu, kernel_activation(self.act), x, y)?;
        Ok(Box::new(Pointwise { op, forward: true }))
    }
}

impl Contract for ActivationGrad {
    fn name(&self) -> &'static str {
        "activation_grad"
    }

    fn phase(&self) -> Phase {
        Phase::Backward
    }

    fn inputs(&self) -> Vec<Slot> {
        vec![read("x"), read("dy")]
    }

    fn outputs(&self) -> Vec<Slot> {
        written(&["dx"])
    }

    fn check_shapes(&self, d: &Dims) -> Result<(), String> {
        all_same(d, &["x", "dy", "dx"])
    }

    fn kind(&self) -> Option<KernelKind> {
        Some(KernelKind::Elementwise)
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
        let [dx] = outs.outs(["dx"])?;
        activation_backward_cpu(kernel_activation(self.act), ins.f("x")?, ins.f("dy")?, dx)?;
        Ok(None)
    }

    fn gpu(
        &self,
        args: &Args<&BoundOperand>,
        ctx: &mut BuildCtx<'_>,
    ) -> Result<Box<dyn GpuKernel>, OpErr> {
        // Built with the forward's views: `dy` is read through `y`'s.
        let (x, dy) = (&args.read("x")?.view, &args.read("dy")?.view);
        let op = ActivationOp::new(ctx.gpu, kernel_activation(self.act), x, dy)?;
        Ok(Box::new(Pointwise { op, forward: false }))
    }
}

struct Pointwise {
    op: ActivationOp,
    forward: bool,
}

impl GpuKernel for Pointwise {
    fn record(
        &self,
        batch: &mut Batch<'_>,
        args: &Args<GpuArg<'_>>,
        _: &RecordCtx<'_>,
    ) -> Result<(), OpErr> {
        if self.forward {
            self.op.forward(batch, args.read("x")?, args.write("y")?)
        } else {
            self.op
                .backward(batch, args.read("x")?, args.read("dy")?, args.write("dx")?)
        }
    }
}

impl Contract for Swiglu {
    fn name(&self) -> &'static str {
        "swiglu"
    }

    fn phase(&self) -> Phase {
        Phase::Forward
    }

    fn inputs(&self) -> Vec<Slot> {
        vec![read("gate"), read("up")]
    }

    fn outputs(&self) -> Vec<Slot> {
        written(&["y"])
    }

    fn backward(&self) -> Option<BackwardRule> {
        Some(BackwardRule {
            steps: vec![BackwardStep {
                op: Op::SwigluGrad,
                inputs: vec![Source::Input(0), Source::Input(1), Source::OutputGrad(0)],
                grads_of: vec![0, 1],
                shared: None,
            }],
            passes_through: vec![],
        })
    }

    fn check_shapes(&self, d: &Dims) -> Result<(), String> {
        all_same(d, &["gate", "up", "y"])
    }

    fn sample(&self) -> Option<Sample> {
        Some(Sample {
            inputs: vec![
                Decl::tokens(&[("width", 7)], Holds::Floats),
                Decl::tokens(&[("width", 7)], Holds::Floats),
            ],
            outputs: vec![Decl::tokens(&[("width", 7)], Holds::Written)],
        })
    }

    fn kind(&self) -> Option<KernelKind> {
        Some(KernelKind::Elementwise)
    }

    fn cpu(
        &self,
        ins: &Ins<'_>,
        outs: &mut Outs<'_>,
        _: &CpuCtx<'_>,
    ) -> Result<Option<f64>, OpErr> {
        let [y] = outs.outs(["y"])?;
        swiglu_forward_cpu(ins.f("gate")?, ins.f("up")?, y)?;
        Ok(None)
    }

    fn gpu(
        &self,
        args: &Args<&BoundOperand>,
        ctx: &mut BuildCtx<'_>,
    ) -> Result<Box<dyn GpuKernel>, OpErr> {
        let (g, u, y) = (args.read("gate")?, args.read("up")?, args.write("y")?);
        let op = SwigluOp::new(ctx.gpu, &g.view, &u.view, &y.view)?;
        Ok(Box::new(Gated { op, forward: true }))
    }
}

impl Contract for SwigluGrad {
    fn name(&self) -> &'static str {
        "swiglu_grad"
    }

    fn phase(&self) -> Phase {
        Phase::Backward
    }

    fn inputs(&self) -> Vec<Slot> {
        vec![read("gate"), read("up"), read("dy")]
    }

    fn outputs(&self) -> Vec<Slot> {
        written(&["dgate", "dup"])
    }

    fn check_shapes(&self, d: &Dims) -> Result<(), String> {
        all_same(d, &["gate", "up", "dy", "dgate", "dup"])
    }

    fn kind(&self) -> Option<KernelKind> {
        Some(KernelKind::Elementwise)
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
        let [dgate, dup] = outs.outs(["dgate", "dup"])?;
        swiglu_backward_cpu(ins.f("gate")?, ins.f("up")?, ins.f("dy")?, dgate, dup)?;
        Ok(None)
    }

    fn gpu(
        &self,
        args: &Args<&BoundOperand>,
        ctx: &mut BuildCtx<'_>,
    ) -> Result<Box<dyn GpuKernel>, OpErr> {
        let (g, u, dy) = (args.read("gate")?, args.read("up")?, args.read("dy")?);
        let op = SwigluOp::new(ctx.gpu, &g.view, &u.view, &dy.view)?;
        Ok(Box::new(Gated { op, forward: false }))
    }
}

struct Gated {
    op: SwigluOp,
    forward: bool,
}

impl GpuKernel for Gated {
    fn record(
        &self,
        batch: &mut Batch<'_>,
        args: &Args<GpuArg<'_>>,
        _: &RecordCtx<'_>,
    ) -> Result<(), OpErr> {
        let (gate, up) = (args.read("gate")?, args.read("up")?);
        if self.forward {
            self.op.forward(batch, gate, up, args.write("y")?)
        } else {
            let (dy, dgate, dup) = (args.read("dy")?, args.write("dgate")?, args.write("dup")?);
            self.op.backward(batch, gate, up, dy, dgate, dup)
        }
    }
}
