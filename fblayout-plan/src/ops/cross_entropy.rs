//! Cross-entropy of logits against integer labels, and its gradient.
//!
//! `logits, labels → loss`: the per-row losses, rows whose label is `ignore_index` counting
//! for nothing, and their mean over the counted rows (the step's loss). Its gradient
//! `logits, labels → dlogits` is that of the mean, times the loss scale where the loss is
//! scaled. The forward's kernel keeps each row's log-sum-exp and the mean in a state that the
//! backward over the same labels (or a copy of them in another layout) reads.

use std::sync::Arc;

use fblayout_core::layout::View;
use fblayout_kernels::GpuBuffer;
use fblayout_kernels::ops::cross_entropy::{cross_entropy_backward_cpu, cross_entropy_forward_cpu};
use fblayout_kernels::ops::{CrossEntropyOp, CrossEntropyState};
use fblayout_kernels::runtime::Batch;
use fblayout_kernels::tensor::GpuArg;

use super::cpu::{CpuCtx, Ins, Outs};
use super::gpu::{BuildCtx, GpuKernel, RecordCtx};
use super::{
    Along, Args, Contract, Decl, Dims, Holds, IndexBound, LAST, OpErr, REDUCE_LAST, Sample, Shapes,
    Slot, ViewRule,
};
use crate::exec::views::BoundOperand;
use crate::graph::{BackwardRule, BackwardStep, Op, Phase, Source};
use crate::select::KernelKind;

/// `logits, labels → loss`, or its gradient `logits, labels → dlogits`.
pub(crate) struct CrossEntropy {
    pub(crate) ignore_index: u32,
    pub(crate) backward: bool,
}

/// What the forward shares with the backward: the state and the loss's view.
struct Saved {
    state: CrossEntropyState,
    loss: View,
}

impl Contract for CrossEntropy {
    fn name(&self) -> &'static str {
        if self.backward {
            "cross_entropy_grad"
        } else {
            "cross_entropy"
        }
    }

    fn phase(&self) -> Phase {
        Phase::forward_or_backward(self.backward)
    }

    fn inputs(&self) -> Vec<Slot> {
        vec![
            Slot::new("logits", ViewRule::Tokens, REDUCE_LAST),
            Slot::new("labels", ViewRule::Tokens, LAST),
        ]
    }

    fn outputs(&self) -> Vec<Slot> {
        let name = if self.backward { "dlogits" } else { "loss" };
        vec![Slot::new(name, ViewRule::Tokens, LAST)]
    }

    fn check_shapes(&self, d: &Dims) -> Result<(), String> {
        d.is("labels", d.leading("logits")?)?;
        if self.backward {
            d.same("logits", "dlogits")
        } else {
            d.is("loss", d.leading("logits")?)
        }
    }

    fn backward(&self) -> Option<BackwardRule> {
        (!self.backward).then(|| BackwardRule {
            steps: vec![BackwardStep {
                op: Op::CrossEntropyGrad {
                    ignore_index: self.ignore_index,
                },
                inputs: vec![Source::Input(0), Source::Input(1)],
                grads_of: vec![0],
                shared: None,
            }],
            passes_through: vec![],
        })
    }

    fn sample(&self) -> Option<Sample> {
        (!self.backward).then(|| Sample {
            inputs: vec![
                Decl::tokens(&[("classes", 9)], Holds::Floats),
                Decl::tokens(&[], Holds::Ids { below: 9 }),
            ],
            outputs: vec![Decl::tokens(&[], Holds::Loss)],
        })
    }

    fn kind(&self) -> Option<KernelKind> {
        Some(if self.backward {
            KernelKind::CrossEntropyGrad
        } else {
            KernelKind::CrossEntropy
        })
    }

    fn reads_stored(&self) -> bool {
        self.backward
    }

    /// The gradient may be written over the logits: each element of `dlogits` depends on its
    /// own logit and the row's saved log-sum-exp only.
    fn in_place(&self) -> Option<[&'static str; 2]> {
        self.backward.then_some(["logits", "dlogits"])
    }

    fn state_bytes(&self, s: &Shapes<'_>) -> u64 {
        // The forward's state, one row a label, which the backward reads.
        if self.backward {
            0
        } else {
            CrossEntropyOp::state_bytes(s.elements_u32("labels"))
        }
    }

    fn index_bounds(&self) -> Vec<IndexBound> {
        vec![IndexBound {
            ids: "labels",
            into: "logits",
            along: Along::Last,
            except: Some(self.ignore_index),
            uploaded: false,
        }]
    }

    fn cpu(
        &self,
        ins: &Ins<'_>,
        outs: &mut Outs<'_>,
        _: &CpuCtx<'_>,
    ) -> Result<Option<f64>, OpErr> {
        let (logits, labels) = (ins.f("logits")?, ins.int("labels")?);
        if self.backward {
            let [dlogits] = outs.outs(["dlogits"])?;
            cross_entropy_backward_cpu(self.ignore_index, 1.0, logits, labels, dlogits)?;
            return Ok(None);
        }
        let [loss] = outs.outs(["loss"])?;
        let mean = cross_entropy_forward_cpu(self.ignore_index, logits, labels, loss)?;
        Ok(Some(mean.mean))
    }

    fn gpu(
        &self,
        args: &Args<&BoundOperand>,
        ctx: &mut BuildCtx<'_>,
    ) -> Result<Box<dyn GpuKernel>, OpErr> {
        let (logits, labels) = (args.read("logits")?, args.read("labels")?);
        let labels_id = args.read_bound("labels")?.tensor;
        let key = ctx.graph.copied_from(labels_id);
        if self.backward {
            // The forward over the same labels wrote the state this backward reads.
            let saved = ctx.find::<Saved>(key).ok_or_else(|| OpErr::Shape {
                op: "cross-entropy backward",
                detail: format!(
                    "no cross-entropy forward over `{}` comes before it",
                    ctx.graph.tensor(labels_id).name
                ),
            })?;
            let op = CrossEntropyOp::new(
                ctx.gpu,
                &logits.view,
                &labels.view,
                &saved.loss,
                self.ignore_index,
            )?;
            return Ok(Box::new(Kernel {
                op,
                saved,
                backward: true,
            }));
        }
        let loss = &args.write("loss")?.view;
        let op = CrossEntropyOp::new(ctx.gpu, &logits.view, &labels.view, loss, self.ignore_index)?;
        let state = op.state(ctx.gpu, labels.bound.shape()[0] as u32)?;
        let saved = Arc::new(Saved {
            state,
            loss: loss.clone(),
        });
        ctx.share(key, Arc::clone(&saved));
        Ok(Box::new(Kernel {
            op,
            saved,
            backward: false,
        }))
    }
}

struct Kernel {
    op: CrossEntropyOp,
    saved: Arc<Saved>,
    backward: bool,
}

impl GpuKernel for Kernel {
    fn record(
        &self,
        batch: &mut Batch<'_>,
        args: &Args<GpuArg<'_>>,
        ctx: &RecordCtx<'_>,
    ) -> Result<(), OpErr> {
        let (logits, labels) = (args.read("logits")?, args.read("labels")?);
        let state = &self.saved.state;
        if self.backward {
            // The loss's gradient starts the backward, scaled where gradients are f16.
            let dlogits = args.write("dlogits")?;
            self.op
                .backward(batch, logits, labels, state, ctx.loss_scale, dlogits)
        } else {
            self.op
                .forward(batch, logits, labels, args.write("loss")?, state)
        }
    }

    fn reads_loss_scale(&self) -> bool {
        self.backward
    }

    fn loss(&self) -> Option<&GpuBuffer> {
        (!self.backward).then(|| self.saved.state.mean_buffer())
    }
}
