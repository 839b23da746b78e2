//! A conversion: `x → y`, the same values stored in another layout. The planner inserts it
//! where a consumer pays more for reading the producer's layout than the copy costs; it runs in
//! the pass of the consumer and is priced by the conversion classification, not by a kernel
//! kind.

use fblayout_kernels::ops::CopyOp;
use fblayout_kernels::ops::copy::copy_cpu;
use fblayout_kernels::runtime::Batch;
use fblayout_kernels::tensor::GpuArg;

use super::cpu::{CpuCtx, Ins, Outs};
use super::gpu::{BuildCtx, GpuKernel, RecordCtx};
use super::{Args, Contract, Dims, LIKE_OUTPUT, OWN, OpErr, Slot, ViewRule};
use crate::exec::views::BoundOperand;
use crate::graph::Phase;
use crate::select::KernelKind;

/// `x → y` in the pass `pass`.
pub(crate) struct Convert {
    pub(crate) phase: Phase,
}

impl Contract for Convert {
    fn name(&self) -> &'static str {
        "convert"
    }

    fn phase(&self) -> Phase {
        self.phase
    }

    fn inputs(&self) -> Vec<Slot> {
        vec![Slot::new("x", ViewRule::Whole, LIKE_OUTPUT)]
    }

    fn outputs(&self) -> Vec<Slot> {
        vec![Slot::new("y", ViewRule::Whole, OWN)]
    }

    fn check_shapes(&self, d: &Dims) -> Result<(), String> {
        d.same("x", "y")
    }

    fn kind(&self) -> Option<KernelKind> {
        None
    }

    fn cpu(
        &self,
        ins: &Ins<'_>,
        outs: &mut Outs<'_>,
        _: &CpuCtx<'_>,
    ) -> Result<Option<f64>, OpErr> {
        let [y] = outs.outs(["y"])?;
        copy_cpu(ins.f("x")?, y)?;
        Ok(None)
    }

    fn gpu(
        &self,
        args: &Args<&BoundOperand>,
        ctx: &mut BuildCtx<'_>,
    ) -> Result<Box<dyn GpuKernel>, OpErr> {
        let (x, y) = (&args.read("x")?.view, &args.write("y")?.view);
        Ok(Box::new(Copy(CopyOp::new(ctx.gpu, x, y)?)))
    }
}

struct Copy(CopyOp);

impl GpuKernel for Copy {
    fn record(
        &self,
        batch: &mut Batch<'_>,
        args: &Args<GpuArg<'_>>,
        _: &RecordCtx<'_>,
    ) -> Result<(), OpErr> {
        self.0.forward(batch, args.read("x")?, args.write("y")?)
    }
}
