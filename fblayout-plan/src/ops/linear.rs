//! A linear layer's three products: `y = x·w`, `dx = dy·wᵀ` and `dw = xᵀ·dy`.
//!
//! Activations are token matrices (`[batch, seq, d]` read as `[tokens, d]`), weights
//! `[d_in, d_out]` as declared. One kernel ([`LinearOp`]) holds all three GEMMs; each node
//! builds it with the views it has, standing its output in for the operand the product does
//! not read (`dx` for `x`, `dw` for `w`). A bias the graph adds right after the forward product
//! ([`Graph::folded_biases`](crate::graph::Graph::folded_biases)) is added in its epilogue, and
//! so is the sum after a forward or an input's gradient
//! ([`Graph::folded_additions`](crate::graph::Graph::folded_additions)): a LoRA adapter's last
//! product adds the base layer's output, and an input's gradient the contributions to it
//! before its own.

use fblayout_kernels::ops::LinearOp;
use fblayout_kernels::ops::matmul::Merge;
use fblayout_kernels::ops::matmul::linear::{Output, linear_backward_cpu, linear_forward_cpu};
use fblayout_kernels::runtime::{Batch, Gpu, Scratch};
use fblayout_kernels::tensor::GpuArg;

use super::cpu::{CpuCtx, Ins, Outs};
use super::gpu::{BuildCtx, GpuKernel, RecordCtx};
use super::shape::{show, then};
use super::{Decl, Holds, Sample};

use super::{
    Args, BEFORE_LAST, Contract, Dims, LAST, Merged, OWN, OpErr, Product, REDUCE_TOKENS, Shapes,
    Slot, ViewRule, Walk,
};
use crate::exec::views::BoundOperand;
use crate::graph::{BackwardRule, BackwardStep, Dim, Op, Phase, Source};
use crate::select::KernelKind;

/// `x, w → y`: `y = x·w` over the last axis of `x`; where `transposed`, `y = scale · x·wᵀ`
/// with `w` stored `[d_out, d_in]` and read through its transposed view (a tied head reading
/// the embedding table, a checkpoint's `nn.Linear` orientation, LoRA's factors).
pub(crate) struct Linear {
    pub(crate) transposed: bool,
    /// The product's factor (1 where not `transposed`).
    pub(crate) scale: f32,
}

/// `dy, w → dx`: `dx = dy·wᵀ` (`scale · dy·w` where `transposed`).
pub(crate) struct LinearGradInput {
    pub(crate) transposed: bool,
    pub(crate) scale: f32,
}

/// `x, dy → dw`: `dw = xᵀ·dy`, written through `w`'s view (`scale · xᵀ·dy` through the
/// transposed view where `transposed`).
pub(crate) struct LinearGradWeight {
    pub(crate) transposed: bool,
    pub(crate) scale: f32,
}

/// An error unless the product's factor is a finite number.
fn finite(scale: f32) -> Result<(), String> {
    if scale.is_finite() {
        Ok(())
    } else {
        Err(format!(
            "the product's factor {scale} is not a finite number"
        ))
    }
}

/// The weight's view: as declared, or transposed.
pub(super) fn weight_view(transposed: bool) -> ViewRule {
    if transposed {
        ViewRule::Transposed
    } else {
        ViewRule::Whole
    }
}

/// The weight's extents as the product reads it, `[d_in, d_out]`.
pub(super) fn weight_dims(d: &Dims, role: &str, transposed: bool) -> Result<Vec<Dim>, String> {
    d.rank(role, 2)?;
    let w = d.of(role)?;
    Ok(if transposed {
        vec![w[1], w[0]]
    } else {
        w.to_vec()
    })
}

impl Contract for Linear {
    fn name(&self) -> &'static str {
        if self.transposed {
            "linear_t"
        } else {
            "linear"
        }
    }

    fn phase(&self) -> Phase {
        Phase::Forward
    }

    fn inputs(&self) -> Vec<Slot> {
        vec![
            Slot::new("x", ViewRule::Tokens, LAST),
            // Along d_in: the axis before the last as declared, the last when transposed.
            Slot::new(
                "w",
                weight_view(self.transposed),
                if self.transposed { LAST } else { BEFORE_LAST },
            ),
        ]
    }

    fn outputs(&self) -> Vec<Slot> {
        vec![Slot::new("y", ViewRule::Tokens, OWN)]
    }

    fn check_shapes(&self, d: &Dims) -> Result<(), String> {
        finite(self.scale)?;
        let w = weight_dims(d, "w", self.transposed)?;
        let want = [d.last("x")?, d.last("y")?];
        if w != want {
            return Err(format!(
                "`w` reads as {} but `x` and `y` need {}",
                show(&w),
                show(&want)
            ));
        }
        d.is("y", &then(d.leading("x")?, w[1]))
    }

    fn backward(&self) -> Option<BackwardRule> {
        let step = |op, inputs, grads_of| BackwardStep {
            op,
            inputs,
            grads_of,
            shared: None,
        };
        Some(BackwardRule {
            steps: vec![
                step(
                    if self.transposed {
                        Op::LinearTGradInput { scale: self.scale }
                    } else {
                        Op::LinearGradInput
                    },
                    vec![Source::OutputGrad(0), Source::Input(1)],
                    vec![0],
                ),
                step(
                    if self.transposed {
                        Op::LinearTGradWeight { scale: self.scale }
                    } else {
                        Op::LinearGradWeight
                    },
                    vec![Source::Input(0), Source::OutputGrad(0)],
                    vec![1],
                ),
            ],
            passes_through: vec![],
        })
    }

    fn sample(&self) -> Option<Sample> {
        Some(Sample {
            inputs: vec![
                Decl::tokens(&[("d_in", 6)], Holds::Floats),
                if self.transposed {
                    Decl::fixed(&[("d_out", 5), ("d_in", 6)], Holds::Floats)
                } else {
                    Decl::fixed(&[("d_in", 6), ("d_out", 5)], Holds::Floats)
                },
            ],
            outputs: vec![Decl::tokens(&[("d_out", 5)], Holds::Written)],
        })
    }

    fn kind(&self) -> Option<KernelKind> {
        Some(KernelKind::Linear)
    }

    fn linear_weight(&self) -> Option<&'static str> {
        // A transposed weight is a tied embedding table.
        (!self.transposed).then_some("w")
    }

    fn copied_weight(&self) -> Option<&'static str> {
        // Transposed too (LoRA's `A` and `B`, a tied head's table): the product's factors are
        // both `f16` only with the copy.
        Some("w")
    }

    fn product(&self, s: &Shapes<'_>) -> Option<Product> {
        let (walk, d_out) = if self.transposed {
            (Walk::Last, s.extent("w", 1))
        } else {
            (Walk::BeforeLast, s.extent("w", 0))
        };
        Some(Product {
            a: ("x", Walk::Last),
            b: ("w", walk),
            flops: 2.0 * s.elements("x") * d_out,
        })
    }

    fn scratch(&self, s: &Shapes<'_>) -> Result<Scratch, OpErr> {
        scratch(s, ["x", "w", "y"], 0)
    }

    fn cpu(
        &self,
        ins: &Ins<'_>,
        outs: &mut Outs<'_>,
        _: &CpuCtx<'_>,
    ) -> Result<Option<f64>, OpErr> {
        let [y] = outs.outs(["y"])?;
        linear_forward_cpu(ins.f("x")?, ins.f("w")?, y, Output::scaled(self.scale))?;
        Ok(None)
    }

    fn gpu(
        &self,
        args: &Args<&BoundOperand>,
        ctx: &mut BuildCtx<'_>,
    ) -> Result<Box<dyn GpuKernel>, OpErr> {
        let (x, w) = (&args.read("x")?.view, &args.read("w")?.view);
        let fold = Fold::of(ctx)?;
        let op = match (fold, &ctx.epilogue) {
            // The bias node after it: `x, b → y`, whose `y` this product writes.
            (Fold::Bias, Some(bias)) => {
                let (b, y) = (&bias.read("b")?.view, &bias.write("y")?.view);
                LinearOp::new_biased(ctx.gpu, x, w, b, y)?
            }
            // The addition after it, with this product's output as a summand: the product
            // writes `y = factor · x·w + a`.
            (Fold::Merged(m), Some(after)) if m.merge == Merge::Add => {
                let (a, y) = (&after.read(m.d)?.view, &after.write(m.out)?.view);
                LinearOp::new_added(ctx.gpu, x, w, a, y)?
            }
            (Fold::Merged(_), _) => return Err(Fold::unsupported("a forward product")),
            _ => LinearOp::new(ctx.gpu, x, w, &args.write("y")?.view)?,
        };
        Ok(Box::new(Products {
            op,
            which: Which::Forward,
            fold,
            out: Output::scaled(self.scale),
        }))
    }
}

impl Contract for LinearGradInput {
    fn name(&self) -> &'static str {
        if self.transposed {
            "linear_t_grad_input"
        } else {
            "linear_grad_input"
        }
    }

    fn phase(&self) -> Phase {
        Phase::Backward
    }

    fn inputs(&self) -> Vec<Slot> {
        vec![
            Slot::new("dy", ViewRule::Tokens, LAST),
            // Along d_out: the last axis as declared, the one before when transposed.
            Slot::new(
                "w",
                weight_view(self.transposed),
                if self.transposed { BEFORE_LAST } else { LAST },
            ),
        ]
    }

    fn outputs(&self) -> Vec<Slot> {
        vec![Slot::new("dx", ViewRule::Tokens, OWN)]
    }

    fn check_shapes(&self, d: &Dims) -> Result<(), String> {
        finite(self.scale)?;
        let w = weight_dims(d, "w", self.transposed)?;
        let want = [d.last("dx")?, d.last("dy")?];
        if w != want {
            return Err(format!(
                "`w` reads as {} but `dx` and `dy` need {}",
                show(&w),
                show(&want)
            ));
        }
        d.is("dx", &then(d.leading("dy")?, w[0]))
    }

    fn kind(&self) -> Option<KernelKind> {
        Some(KernelKind::LinearGradInput)
    }

    fn linear_weight(&self) -> Option<&'static str> {
        (!self.transposed).then_some("w")
    }

    fn copied_weight(&self) -> Option<&'static str> {
        Some("w")
    }

    fn product(&self, s: &Shapes<'_>) -> Option<Product> {
        let (walk, d_in) = if self.transposed {
            (Walk::BeforeLast, s.extent("w", 0))
        } else {
            (Walk::Last, s.extent("w", 1))
        };
        Some(Product {
            a: ("dy", Walk::Last),
            b: ("w", walk),
            flops: 2.0 * s.elements("dy") * d_in,
        })
    }

    fn scratch(&self, s: &Shapes<'_>) -> Result<Scratch, OpErr> {
        // Built with dx's view for x.
        scratch(s, ["dx", "w", "dy"], 1)
    }

    fn cpu(
        &self,
        ins: &Ins<'_>,
        outs: &mut Outs<'_>,
        _: &CpuCtx<'_>,
    ) -> Result<Option<f64>, OpErr> {
        let [dx] = outs.outs(["dx"])?;
        let dy = ins.f("dy")?;
        // The kernel reads `x` only for the weight's gradient, which is not asked for here.
        let out = Output::scaled(self.scale);
        linear_backward_cpu(dy, ins.f("w")?, dy, Some((dx, out)), None)?;
        Ok(None)
    }

    fn gpu(
        &self,
        args: &Args<&BoundOperand>,
        ctx: &mut BuildCtx<'_>,
    ) -> Result<Box<dyn GpuKernel>, OpErr> {
        // Built with dx's view for x, which the product of dx does not read.
        let (w, dy) = (&args.read("w")?.view, &args.read("dy")?.view);
        let fold = Fold::of(ctx)?;
        let op = match (fold, &ctx.epilogue) {
            // The sum or the activation's backward after it, reading this product's output:
            // the product writes `out = factor · dy·wᵀ ⊕ d`.
            (Fold::Merged(m), Some(after)) => {
                let (d, out) = (&after.read(m.d)?.view, &after.write(m.out)?.view);
                LinearOp::new_grad_added(ctx.gpu, out, w, d, dy, m.merge)?
            }
            (Fold::Bias, _) => return Err(Fold::unsupported("an input gradient")),
            _ => LinearOp::new(ctx.gpu, &args.write("dx")?.view, w, dy)?,
        };
        Ok(Box::new(Products {
            op,
            which: Which::GradInput,
            fold,
            out: Output::scaled(self.scale),
        }))
    }
}

impl Contract for LinearGradWeight {
    fn name(&self) -> &'static str {
        if self.transposed {
            "linear_t_grad_weight"
        } else {
            "linear_grad_weight"
        }
    }

    fn phase(&self) -> Phase {
        Phase::Backward
    }

    fn inputs(&self) -> Vec<Slot> {
        vec![
            Slot::new("x", ViewRule::Tokens, REDUCE_TOKENS),
            Slot::new("dy", ViewRule::Tokens, REDUCE_TOKENS),
        ]
    }

    fn outputs(&self) -> Vec<Slot> {
        vec![Slot::new("dw", weight_view(self.transposed), OWN)]
    }

    fn check_shapes(&self, d: &Dims) -> Result<(), String> {
        finite(self.scale)?;
        if d.leading("x")? != d.leading("dy")? {
            return Err(format!(
                "`x` ({}) and `dy` ({}) hold different tokens",
                super::shape::show(d.of("x")?),
                super::shape::show(d.of("dy")?)
            ));
        }
        let dw = weight_dims(d, "dw", self.transposed)?;
        let want = [d.last("x")?, d.last("dy")?];
        if dw != want {
            return Err(format!(
                "`dw` writes {} but `x` and `dy` make {}",
                show(&dw),
                show(&want)
            ));
        }
        Ok(())
    }

    fn kind(&self) -> Option<KernelKind> {
        Some(KernelKind::LinearGradWeight)
    }

    fn product(&self, s: &Shapes<'_>) -> Option<Product> {
        Some(Product {
            a: ("x", Walk::BeforeLast),
            b: ("dy", Walk::BeforeLast),
            flops: 2.0 * s.elements("x") * s.extent("dy", 0),
        })
    }

    fn scratch(&self, s: &Shapes<'_>) -> Result<Scratch, OpErr> {
        // Built with dw's view for w.
        scratch(s, ["x", "dw", "dy"], 2)
    }

    fn cpu(
        &self,
        ins: &Ins<'_>,
        outs: &mut Outs<'_>,
        _: &CpuCtx<'_>,
    ) -> Result<Option<f64>, OpErr> {
        let [dw] = outs.outs(["dw"])?;
        let (x, dy) = (ins.f("x")?, ins.f("dy")?);
        // `w` is read only for the input's gradient, which is not asked for here.
        let out = Output::scaled(self.scale);
        linear_backward_cpu(x, dy, dy, None, Some((dw, out)))?;
        Ok(None)
    }

    fn gpu(
        &self,
        args: &Args<&BoundOperand>,
        ctx: &mut BuildCtx<'_>,
    ) -> Result<Box<dyn GpuKernel>, OpErr> {
        // Built with dw's view for w, which the product of dw does not read.
        let (x, dw, dy) = (
            &args.read("x")?.view,
            &args.write("dw")?.view,
            &args.read("dy")?.view,
        );
        Ok(Box::new(Products {
            op: LinearOp::new(ctx.gpu, x, dw, dy)?,
            which: Which::GradWeight,
            fold: Fold::None,
            out: Output::scaled(self.scale),
        }))
    }
}

/// The scratch of product `which` (0: forward, 1: `dx`, 2: `dw`) of the linear layer whose
/// `x`, `w` and `y` are the node's roles `roles` (see [`LinearOp::scratch`]).
fn scratch(s: &Shapes<'_>, roles: [&str; 3], which: usize) -> Result<Scratch, OpErr> {
    let [x, _, y] = roles;
    let (d_in, d_out) = (s.extent_u32(x, 0), s.extent_u32(y, 0));
    let tokens = s.elements_u32(x) / d_in.max(1);
    let mut products = LinearOp::scratch(tokens, d_in, d_out, roles.map(|r| s.elem(r)))?;
    Ok(std::mem::take(&mut products[which]))
}

/// Which of the three products a node runs.
#[derive(Clone, Copy)]
enum Which {
    /// `y = x·w`.
    Forward,
    /// `dx = dy·wᵀ`.
    GradInput,
    /// `dw = xᵀ·dy`.
    GradWeight,
}

/// The node after a product whose work the product does
/// ([`Graph::epilogues`](crate::graph::Graph::epilogues)).
#[derive(Clone, Copy, PartialEq)]
enum Fold {
    None,
    /// The bias `x, b → y` after a forward: `y = x·w + b`.
    Bias,
    /// What the node's contract says a product does of it ([`Merged`]): `out = factor ·
    /// product ⊕ d`, written through the node's view of `out`.
    Merged(Merged),
}

impl Fold {
    /// The fold of the node being built (none, the bias, or what the folded node's contract
    /// says).
    fn of(ctx: &BuildCtx<'_>) -> Result<Self, OpErr> {
        match ctx.epilogue_op {
            None => Ok(Self::None),
            Some(Op::Bias) => Ok(Self::Bias),
            Some(op) => op
                .contract()
                .merged()
                .map(Self::Merged)
                .ok_or_else(|| Self::unsupported(op.name())),
        }
    }

    /// The error of a fold the product does not do.
    fn unsupported(what: &str) -> OpErr {
        OpErr::Shape {
            op: "linear",
            detail: format!("the graph folds {what} into a linear product, which does not do it"),
        }
    }
}

struct Products {
    op: LinearOp,
    which: Which,
    /// The work of the node after it the product does.
    fold: Fold,
    /// How the product writes its output: overwriting it, scaled by the layer's factor.
    out: Output,
}

impl Products {
    /// The operands the kernel was built with: `x`, `w`, `y`.
    fn operands<'b>(
        &self,
        args: &'b Args<GpuArg<'b>>,
        ctx: &'b RecordCtx<'_>,
    ) -> Result<[&'b GpuArg<'b>; 3], OpErr> {
        // The folded node's output where the product writes it instead of its own.
        let written = |own: &'static str| match (self.fold, ctx.epilogue) {
            (Fold::Bias, Some(after)) => after.write("y"),
            (Fold::Merged(m), Some(after)) => after.write(m.out),
            _ => args.write(own),
        };
        Ok(match self.which {
            Which::Forward => [args.read("x")?, args.read("w")?, written("y")?],
            Which::GradInput => [written("dx")?, args.read("w")?, args.read("dy")?],
            Which::GradWeight => [args.read("x")?, args.write("dw")?, args.read("dy")?],
        })
    }
}

impl GpuKernel for Products {
    fn record(
        &self,
        batch: &mut Batch<'_>,
        args: &Args<GpuArg<'_>>,
        ctx: &RecordCtx<'_>,
    ) -> Result<(), OpErr> {
        let ow = self.out;
        let after = || {
            ctx.epilogue.ok_or_else(|| OpErr::Shape {
                op: "linear",
                detail: "built with the next node's work in its epilogue, recorded without it"
                    .into(),
            })
        };
        match (self.which, self.fold) {
            (Which::Forward, Fold::Bias) => {
                let bias = after()?;
                let (x, w) = (args.read("x")?, args.read("w")?);
                self.op
                    .forward_biased(batch, x, w, bias.read("b")?, bias.write("y")?)
            }
            (Which::Forward, Fold::Merged(m)) => {
                let add = after()?;
                let (x, w) = (args.read("x")?, args.read("w")?);
                self.op
                    .forward_added(batch, x, w, add.read(m.d)?, add.write(m.out)?, ow)
            }
            (Which::Forward, Fold::None) => self.op.forward(
                batch,
                args.read("x")?,
                args.read("w")?,
                args.write("y")?,
                ow,
            ),
            (Which::GradInput, Fold::Merged(m)) => {
                let next = after()?;
                let (w, dy) = (args.read("w")?, args.read("dy")?);
                self.op
                    .backward_added(batch, w, dy, next.read(m.d)?, next.write(m.out)?, ow)
            }
            (Which::GradInput, _) => {
                let (dx, w, dy) = (args.write("dx")?, args.read("w")?, args.read("dy")?);
                self.op.backward(batch, dx, w, dy, Some((dx, ow)), None)
            }
            (Which::GradWeight, _) => {
                let (x, dw, dy) = (args.read("x")?, args.write("dw")?, args.read("dy")?);
                self.op.backward(batch, x, dw, dy, None, Some((dw, ow)))
            }
        }
    }

    fn tune(
        &self,
        gpu: &Gpu,
        args: &Args<GpuArg<'_>>,
        ctx: &RecordCtx<'_>,
    ) -> Result<Option<bool>, OpErr> {
        let [x, w, y] = self.operands(args, ctx)?;
        self.op.tune(gpu, x, w, y)?;
        Ok(Some(self.op.tensor_cores().contains(&true)))
    }
}
