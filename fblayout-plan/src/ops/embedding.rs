//! The embedding lookup and its scatter-add gradient.
//!
//! `ids, table → out`: `out[b, s, :] = table[ids[b, s], :]`; its gradient `ids, dout →
//! dtable` adds each token's row of `dout` into its id's row. Both read the ids as the step
//! uploads them (checked below the table's rows there), so no conversion runs before them.

use fblayout_kernels::ops::EmbeddingOp;
use fblayout_kernels::ops::embedding::{embedding_backward_cpu, embedding_forward_cpu};
use fblayout_kernels::runtime::Batch;
use fblayout_kernels::tensor::GpuArg;

use super::cpu::{CpuCtx, Ins, Outs};
use super::gpu::{BuildCtx, GpuKernel, RecordCtx};
use super::shape::then;
use super::{Decl, Holds, Sample};

use super::{Along, Args, Contract, Dims, IndexBound, LAST, OpErr, Slot, ViewRule};
use crate::exec::views::BoundOperand;
use crate::graph::{BackwardRule, BackwardStep, Op, Phase, Source};
use crate::select::KernelKind;

/// `ids, table → out`.
pub(crate) struct Embedding;

/// `ids, dout → dtable`.
pub(crate) struct EmbeddingGrad;

impl Contract for Embedding {
    fn name(&self) -> &'static str {
        "embedding"
    }

    fn phase(&self) -> Phase {
        Phase::Forward
    }

    fn inputs(&self) -> Vec<Slot> {
        vec![
            Slot::new("ids", ViewRule::Tokens, LAST),
            Slot::new("table", ViewRule::Whole, LAST),
        ]
    }

    fn outputs(&self) -> Vec<Slot> {
        vec![Slot::new("out", ViewRule::Tokens, LAST)]
    }

    fn check_shapes(&self, d: &Dims) -> Result<(), String> {
        d.rank("table", 2)?;
        d.is("out", &then(d.of("ids")?, d.last("table")?))
    }

    fn backward(&self) -> Option<BackwardRule> {
        Some(BackwardRule {
            steps: vec![BackwardStep {
                op: Op::EmbeddingGrad,
                inputs: vec![Source::Input(0), Source::OutputGrad(0)],
                grads_of: vec![1],
                shared: None,
            }],
            passes_through: vec![],
        })
    }

    fn sample(&self) -> Option<Sample> {
        Some(Sample {
            inputs: vec![
                Decl::tokens(&[], Holds::Ids { below: 9 }),
                Decl::fixed(&[("rows", 9), ("hidden", 6)], Holds::Floats),
            ],
            outputs: vec![Decl::tokens(&[("hidden", 6)], Holds::Written)],
        })
    }

    fn kind(&self) -> Option<KernelKind> {
        Some(KernelKind::Embedding)
    }

    fn reads_stored(&self) -> bool {
        true
    }

    fn index_bounds(&self) -> Vec<IndexBound> {
        vec![ids_into("table")]
    }

    fn cpu(
        &self,
        ins: &Ins<'_>,
        outs: &mut Outs<'_>,
        _: &CpuCtx<'_>,
    ) -> Result<Option<f64>, OpErr> {
        let [out] = outs.outs(["out"])?;
        embedding_forward_cpu(&ins.dense_ints("ids")?, ins.f("table")?, out)?;
        Ok(None)
    }

    fn gpu(
        &self,
        args: &Args<&BoundOperand>,
        ctx: &mut BuildCtx<'_>,
    ) -> Result<Box<dyn GpuKernel>, OpErr> {
        let op = EmbeddingOp::new(ctx.gpu, &args.read("table")?.view, &args.write("out")?.view)?;
        Ok(Box::new(Lookup {
            op,
            backward: false,
        }))
    }
}

impl Contract for EmbeddingGrad {
    fn name(&self) -> &'static str {
        "embedding_grad"
    }

    fn phase(&self) -> Phase {
        Phase::Backward
    }

    fn inputs(&self) -> Vec<Slot> {
        vec![
            Slot::new("ids", ViewRule::Tokens, LAST),
            Slot::new("dout", ViewRule::Tokens, LAST),
        ]
    }

    fn outputs(&self) -> Vec<Slot> {
        vec![Slot::new("dtable", ViewRule::Whole, LAST)]
    }

    fn check_shapes(&self, d: &Dims) -> Result<(), String> {
        d.rank("dtable", 2)?;
        d.is("dout", &then(d.of("ids")?, d.last("dtable")?))
    }

    fn kind(&self) -> Option<KernelKind> {
        Some(KernelKind::EmbeddingGrad)
    }

    fn reads_stored(&self) -> bool {
        true
    }

    fn index_bounds(&self) -> Vec<IndexBound> {
        vec![ids_into("dtable")]
    }

    fn cpu(
        &self,
        ins: &Ins<'_>,
        outs: &mut Outs<'_>,
        _: &CpuCtx<'_>,
    ) -> Result<Option<f64>, OpErr> {
        let [dtable] = outs.outs(["dtable"])?;
        embedding_backward_cpu(&ins.dense_ints("ids")?, ins.f("dout")?, dtable, false)?;
        Ok(None)
    }

    fn gpu(
        &self,
        args: &Args<&BoundOperand>,
        ctx: &mut BuildCtx<'_>,
    ) -> Result<Box<dyn GpuKernel>, OpErr> {
        let op = EmbeddingOp::new(
            ctx.gpu,
            &args.write("dtable")?.view,
            &args.read("dout")?.view,
        )?;
        Ok(Box::new(Lookup { op, backward: true }))
    }
}

/// The ids index the rows of `table`, and the GPU reads them uploaded.
fn ids_into(table: &'static str) -> IndexBound {
    IndexBound {
        ids: "ids",
        into: table,
        along: Along::First,
        except: None,
        uploaded: true,
    }
}

/// The lookup or its gradient, reading the ids the step uploaded: refilled in the same buffers
/// every step, so that what it records once stays right (the gradient overwrites `dtable`).
struct Lookup {
    op: EmbeddingOp,
    backward: bool,
}

impl GpuKernel for Lookup {
    fn record(
        &self,
        batch: &mut Batch<'_>,
        args: &Args<GpuArg<'_>>,
        ctx: &RecordCtx<'_>,
    ) -> Result<(), OpErr> {
        let ids = ctx.ids("embedding", args.read_bound("ids")?.tensor)?;
        if self.backward {
            self.op
                .backward(batch, ids, args.read("dout")?, args.write("dtable")?, false)
        } else {
            self.op
                .forward(batch, &ids.ids()?, args.read("table")?, args.write("out")?)
        }
    }
}
