//! One AdamW step of a parameter, in place: `param, grad, m, v → param, m, v`, and with `copy`
//! a fourth output, the parameter's copy in its own element type (mixed precision's `f16`
//! weights), written with the updated values.
//!
//! On the GPU, consecutive AdamW nodes run as groups ([`build_adamw_groups`]): as many
//! parameters per dispatch as the device's storage bindings allow, each group recorded by its
//! first node, reading the step's values (its number, the gradients' unscaling) from the
//! device and gated on the gradients' overflow check where the loss is scaled.

use fblayout_core::layout::View;
use fblayout_kernels::ops::adamw::{StepValues, adamw_step_cpu};
use fblayout_kernels::ops::copy::copy_cpu;
use fblayout_kernels::ops::{AdamWMember, AdamWOp, AdamWTensors};
use fblayout_kernels::runtime::{Batch, Gpu};
use fblayout_kernels::tensor::GpuArg;

use super::cpu::{CpuCtx, Ins, Outs};
use super::gpu::{BuildCtx, GpuKernel, RecordCtx};
use super::{Args, Contract, Dims, LIKE_OUTPUT, OWN, OpErr, Slot, ViewRule};
use crate::exec::views::BoundOperand;
use crate::exec::{AdamWConfig, ExecError};
use crate::graph::{Graph, Phase};
use crate::select::KernelKind;

/// `param, grad, m, v → param, m, v (, copy)`.
pub(crate) struct AdamW {
    pub(crate) copy: bool,
}

impl Contract for AdamW {
    fn name(&self) -> &'static str {
        "adamw"
    }

    fn phase(&self) -> Phase {
        Phase::Optimizer
    }

    fn inputs(&self) -> Vec<Slot> {
        ["param", "grad", "m", "v"]
            .map(|n| Slot::new(n, ViewRule::Whole, LIKE_OUTPUT))
            .to_vec()
    }

    fn outputs(&self) -> Vec<Slot> {
        let mut out = vec![Slot::new("param", ViewRule::Whole, OWN)];
        for n in ["m", "v"] {
            out.push(Slot::new(n, ViewRule::Whole, LIKE_OUTPUT));
        }
        if self.copy {
            out.push(Slot::new("copy", ViewRule::Whole, LIKE_OUTPUT));
        }
        out
    }

    fn check_shapes(&self, d: &Dims) -> Result<(), String> {
        // Inputs and outputs share the names of the tensors updated in place: each is checked
        // against the parameter, the copy too.
        for r in ["grad", "m", "v"] {
            d.same("param", r)?;
        }
        if self.copy {
            d.same("param", "copy")?;
        }
        Ok(())
    }

    fn kind(&self) -> Option<KernelKind> {
        Some(KernelKind::AdamW)
    }

    /// Every operand as stored. The GPU records a group of AdamW steps, and the overflow
    /// checks of their gradients, where the group's first node stands, so a conversion before
    /// a later member would be read before it is written; and the parameter and its moments
    /// are updated in place, which a copy can't be.
    fn reads_stored(&self) -> bool {
        true
    }

    fn cpu(
        &self,
        ins: &Ins<'_>,
        outs: &mut Outs<'_>,
        ctx: &CpuCtx<'_>,
    ) -> Result<Option<f64>, OpErr> {
        let grad = ins.f("grad")?;
        let [param, m, v] = outs.outs(["param", "m", "v"])?;
        adamw_step_cpu(param, grad, m, v, ctx.adamw, ctx.step, 1.0)?;
        if self.copy {
            // The copy holds the updated parameters.
            let [param, copy] = outs.outs(["param", "copy"])?;
            copy_cpu(&*param, copy)?;
        }
        Ok(None)
    }

    fn gpu(
        &self,
        _args: &Args<&BoundOperand>,
        _ctx: &mut BuildCtx<'_>,
    ) -> Result<Box<dyn GpuKernel>, OpErr> {
        Ok(Box::new(Grouped))
    }
}

/// An AdamW node's kernel: recorded with its group ([`record_adamw_group`]).
struct Grouped;

impl GpuKernel for Grouped {
    fn record(
        &self,
        _: &mut Batch<'_>,
        _: &Args<GpuArg<'_>>,
        _: &RecordCtx<'_>,
    ) -> Result<(), OpErr> {
        Ok(())
    }

    fn grouped(&self) -> bool {
        true
    }
}

/// An AdamW node's tensors by role, the copy where it writes one.
pub(crate) fn member<T>(args: &Args<T>) -> Result<AdamWMember<&T>, OpErr> {
    Ok(AdamWMember {
        tensors: AdamWTensors {
            param: args.write("param")?,
            grad: args.read("grad")?,
            m: args.write("m")?,
            v: args.write("v")?,
        },
        copy: args.write("copy").ok(),
    })
}

/// One dispatch of AdamW steps: the kernel over its nodes' parameters, and the nodes, in order.
pub(crate) struct AdamWGroup {
    pub(crate) op: AdamWOp,
    pub(crate) nodes: Vec<usize>,
}

/// The AdamW nodes among `nodes` (each its index and operands, where it is one) as groups:
/// each run of consecutive AdamW nodes split into groups of at most `most` parameters and as
/// many as one dispatch takes ([`AdamWOp::capacity`]), each reading the step's values from
/// `scalars` and gated by `gate` where given. An error names the group's first node of
/// `graph`.
pub(crate) fn build_adamw_groups(
    gpu: &Gpu,
    graph: &Graph,
    nodes: &[Option<&Args<BoundOperand>>],
    (scalars, gate): (&View, Option<&View>),
    most: usize,
) -> Result<Vec<AdamWGroup>, ExecError> {
    let failed = |i: usize| move |e| ExecError::op(i, graph.nodes()[i].op.name(), e);
    let mut runs: Vec<Vec<usize>> = Vec::new();
    for (i, node) in nodes.iter().enumerate() {
        if node.is_none() {
            continue;
        }
        match runs.last_mut() {
            Some(run) if run.last() == Some(&(i - 1)) => run.push(i),
            _ => runs.push(vec![i]),
        }
    }
    let args = |i: usize| nodes[i].expect("only AdamW nodes are in a run");
    let mut groups = Vec::new();
    for run in runs {
        let copies = run.iter().any(|&i| args(i).write("copy").is_ok());
        let size = AdamWOp::capacity(gpu, copies).min(most).max(1);
        for chunk in run.chunks(size) {
            let members = chunk
                .iter()
                .map(|&i| {
                    let m = member(args(i))?;
                    Ok(AdamWMember {
                        tensors: AdamWTensors {
                            param: &m.tensors.param.view,
                            grad: &m.tensors.grad.view,
                            m: &m.tensors.m.view,
                            v: &m.tensors.v.view,
                        },
                        copy: m.copy.map(|c| &c.view),
                    })
                })
                .collect::<Result<Vec<_>, OpErr>>()
                .map_err(failed(chunk[0]))?;
            let op = AdamWOp::many(gpu, &members, Some(scalars), gate).map_err(failed(chunk[0]))?;
            groups.push(AdamWGroup {
                op,
                nodes: chunk.to_vec(),
            });
        }
    }
    Ok(groups)
}

/// Records the steps of `group` in one dispatch: `args` are its nodes' operands, in order.
pub(crate) fn record_adamw_group(
    batch: &mut Batch<'_>,
    group: &AdamWGroup,
    args: &[Args<GpuArg<'_>>],
    hyper: &AdamWConfig,
    scalars: &GpuArg<'_>,
    gate: Option<&GpuArg<'_>>,
) -> Result<(), OpErr> {
    let members = args.iter().map(member).collect::<Result<Vec<_>, _>>()?;
    group
        .op
        .record(batch, &members, hyper, StepValues::Device(scalars), gate)
}
