//! A bias along the last axis, `y = x + b`, and its gradient, the sum of `dy` over tokens.
//!
//! A bias right after a linear layer's product is added in that product's epilogue
//! ([`Graph::folded_biases`](crate::graph::Graph::folded_biases)): its node then records
//! nothing of its own.

use fblayout_kernels::ops::bias::{bias_backward_cpu, bias_forward_cpu};
use fblayout_kernels::ops::{BiasLaunch, BiasOp};
use fblayout_kernels::runtime::{Batch, Scratch};
use fblayout_kernels::tensor::GpuArg;

use super::cpu::{CpuCtx, Ins, Outs};
use super::gpu::{BuildCtx, GpuKernel, Nothing, RecordCtx};
use super::{
    Args, Contract, Decl, Dims, Holds, LAST, LIKE_OUTPUT, OWN, OpErr, REDUCE_TOKENS, Sample,
    Shapes, Slot, ViewRule,
};
use crate::exec::views::BoundOperand;
use crate::graph::{BackwardRule, BackwardStep, Op, Phase, Source};
use crate::select::KernelKind;

/// `x, b → y`.
pub(crate) struct Bias;

/// `dy → db`.
pub(crate) struct BiasGrad;

impl Contract for Bias {
    fn name(&self) -> &'static str {
        "bias"
    }

    fn phase(&self) -> Phase {
        Phase::Forward
    }

    fn inputs(&self) -> Vec<Slot> {
        vec![
            Slot::new("x", ViewRule::Tokens, LIKE_OUTPUT),
            Slot::new("b", ViewRule::Whole, LAST),
        ]
    }

    fn outputs(&self) -> Vec<Slot> {
        vec![Slot::new("y", ViewRule::Tokens, OWN)]
    }

    fn check_shapes(&self, d: &Dims) -> Result<(), String> {
        d.same("x", "y")?;
        d.is("b", &[d.last("x")?])
    }

    fn backward(&self) -> Option<BackwardRule> {
        Some(BackwardRule {
            steps: vec![BackwardStep {
                op: Op::BiasGrad,
                inputs: vec![Source::OutputGrad(0)],
                grads_of: vec![1],
                shared: None,
            }],
            passes_through: vec![0],
        })
    }

    fn sample(&self) -> Option<Sample> {
        Some(Sample {
            inputs: vec![
                Decl::tokens(&[("width", 7)], Holds::Floats),
                Decl::fixed(&[("width", 7)], Holds::Floats),
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
        bias_forward_cpu(ins.f("x")?, ins.f("b")?, y)?;
        Ok(None)
    }

    fn gpu(
        &self,
        args: &Args<&BoundOperand>,
        ctx: &mut BuildCtx<'_>,
    ) -> Result<Box<dyn GpuKernel>, OpErr> {
        if ctx.folded {
            // The product before it adds the bias.
            return Ok(Box::new(Nothing));
        }
        let (x, b, y) = (args.read("x")?, args.read("b")?, args.write("y")?);
        Ok(Box::new(Add(BiasOp::new(
            ctx.gpu, &x.view, &b.view, &y.view,
        )?)))
    }
}

struct Add(BiasOp);

impl GpuKernel for Add {
    fn record(
        &self,
        batch: &mut Batch<'_>,
        args: &Args<GpuArg<'_>>,
        _: &RecordCtx<'_>,
    ) -> Result<(), OpErr> {
        self.0
            .forward(batch, args.read("x")?, args.read("b")?, args.write("y")?)
    }
}

impl Contract for BiasGrad {
    fn name(&self) -> &'static str {
        "bias_grad"
    }

    fn phase(&self) -> Phase {
        Phase::Backward
    }

    fn inputs(&self) -> Vec<Slot> {
        vec![Slot::new("dy", ViewRule::Tokens, REDUCE_TOKENS)]
    }

    fn outputs(&self) -> Vec<Slot> {
        vec![Slot::new("db", ViewRule::Whole, LAST)]
    }

    fn check_shapes(&self, d: &Dims) -> Result<(), String> {
        d.is("db", &[d.last("dy")?])
    }

    fn kind(&self) -> Option<KernelKind> {
        Some(KernelKind::BiasGrad)
    }

    fn scratch(&self, s: &Shapes<'_>) -> Result<Scratch, OpErr> {
        // The op of `gpu`: `BiasOp::new`, with the default launch.
        let cols = s.extent_u32("dy", 0);
        let rows = s.elements_u32("dy") / cols.max(1);
        BiasOp::backward_scratch(&BiasLaunch::default(), rows, cols)
    }

    fn cpu(
        &self,
        ins: &Ins<'_>,
        outs: &mut Outs<'_>,
        _: &CpuCtx<'_>,
    ) -> Result<Option<f64>, OpErr> {
        let [db] = outs.outs(["db"])?;
        bias_backward_cpu(ins.f("dy")?, db, false)?;
        Ok(None)
    }

    fn gpu(
        &self,
        args: &Args<&BoundOperand>,
        ctx: &mut BuildCtx<'_>,
    ) -> Result<Box<dyn GpuKernel>, OpErr> {
        let (dy, db) = (&args.read("dy")?.view, &args.write("db")?.view);
        Ok(Box::new(Sum(BiasOp::new(ctx.gpu, dy, db, dy)?)))
    }
}

struct Sum(BiasOp);

impl GpuKernel for Sum {
    fn record(
        &self,
        batch: &mut Batch<'_>,
        args: &Args<GpuArg<'_>>,
        _: &RecordCtx<'_>,
    ) -> Result<(), OpErr> {
        self.0
            .backward(batch, args.read("dy")?, args.write("db")?, false)
    }
}
