//! Sums: `a, b → y`, `y = a + b` — a residual connection in the forward, two contributions to
//! one gradient in the backward ([`Op::Accumulate`](crate::graph::Op::Accumulate)).
//!
//! A sum whose `b` a linear product made (a LoRA adapter's last; a gradient's contribution) is
//! done by that product as it writes
//! ([`Graph::folded_additions`](crate::graph::Graph::folded_additions)): its node then records
//! nothing of its own.
//!
//! The backward's sums read and write activations' gradients as token matrices, the views the
//! linear products that fold them use, and weights' gradients as declared.

use fblayout_kernels::ops::AddOp;
use fblayout_kernels::ops::add::add_cpu;
use fblayout_kernels::runtime::Batch;
use fblayout_kernels::tensor::GpuArg;

use super::cpu::{CpuCtx, Ins, Outs};
use super::gpu::{BuildCtx, GpuKernel, Nothing, RecordCtx};
use super::{
    Args, Contract, Decl, Dims, Holds, LIKE_OUTPUT, Merged, OWN, OpErr, Sample, Slot, ViewRule,
};
use crate::exec::views::BoundOperand;
use crate::graph::{BackwardRule, Phase};
use crate::select::KernelKind;

/// `a, b → y`; the backward's [`Op::Accumulate`](crate::graph::Op::Accumulate) where
/// `accumulate`.
pub(crate) struct Add {
    pub(crate) accumulate: bool,
}

impl Add {
    /// Token matrices in the forward (residuals); in the backward, token matrices where the
    /// gradient has tokens, else the tensors as declared: two contributions to a gradient of
    /// any shape (a weight read by two operations, a tied embedding table).
    fn view(&self) -> ViewRule {
        if self.accumulate {
            ViewRule::TokensWhereAny
        } else {
            ViewRule::Tokens
        }
    }
}

impl Contract for Add {
    fn name(&self) -> &'static str {
        if self.accumulate { "accumulate" } else { "add" }
    }

    fn phase(&self) -> Phase {
        Phase::forward_or_backward(self.accumulate)
    }

    fn inputs(&self) -> Vec<Slot> {
        vec![
            Slot::new("a", self.view(), LIKE_OUTPUT),
            Slot::new("b", self.view(), LIKE_OUTPUT),
        ]
    }

    fn outputs(&self) -> Vec<Slot> {
        vec![Slot::new("y", self.view(), OWN)]
    }

    fn check_shapes(&self, d: &Dims) -> Result<(), String> {
        d.same("a", "y")?;
        d.same("b", "y")
    }

    fn backward(&self) -> Option<BackwardRule> {
        // The output's gradient is both inputs'.
        (!self.accumulate).then(|| BackwardRule {
            steps: vec![],
            passes_through: vec![0, 1],
        })
    }

    fn sample(&self) -> Option<Sample> {
        (!self.accumulate).then(|| Sample {
            inputs: vec![
                Decl::tokens(&[("width", 5)], Holds::Floats),
                Decl::tokens(&[("width", 5)], Holds::Floats),
            ],
            outputs: vec![Decl::tokens(&[("width", 5)], Holds::Written)],
        })
    }

    fn kind(&self) -> Option<KernelKind> {
        Some(KernelKind::Elementwise)
    }

    fn merged(&self) -> Option<Merged> {
        Some(Merged {
            reads: "b",
            d: "a",
            out: "y",
            merge: fblayout_kernels::ops::matmul::Merge::Add,
        })
    }

    fn cpu(
        &self,
        ins: &Ins<'_>,
        outs: &mut Outs<'_>,
        _: &CpuCtx<'_>,
    ) -> Result<Option<f64>, OpErr> {
        let [y] = outs.outs(["y"])?;
        add_cpu(ins.f("a")?, ins.f("b")?, y)?;
        Ok(None)
    }

    fn gpu(
        &self,
        args: &Args<&BoundOperand>,
        ctx: &mut BuildCtx<'_>,
    ) -> Result<Box<dyn GpuKernel>, OpErr> {
        if ctx.folded {
            // The product before it writes `y`.
            return Ok(Box::new(Nothing));
        }
        let (a, b, y) = (args.read("a")?, args.read("b")?, args.write("y")?);
        Ok(Box::new(Sum(AddOp::new(
            ctx.gpu, &a.view, &b.view, &y.view,
        )?)))
    }
}

struct Sum(AddOp);

impl GpuKernel for Sum {
    fn record(
        &self,
        batch: &mut Batch<'_>,
        args: &Args<GpuArg<'_>>,
        _: &RecordCtx<'_>,
    ) -> Result<(), OpErr> {
        self.0
            .forward(batch, args.read("a")?, args.read("b")?, args.write("y")?)
    }
}
