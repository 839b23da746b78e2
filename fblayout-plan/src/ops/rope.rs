//! Rotary position embedding (RoPE), forward and backward, as Hugging Face's Llama computes it.
//!
//! `x, positions, cos, sin → y`: every head of `x` `[batch, seq, heads · head_dim]` (read as
//! `[batch, seq, heads, head_dim]`) rotated pair by pair `(i, i + head_dim/2)` by the angles of
//! its token's position, from the tables `cos` and `sin` `[max_positions, head_dim/2]` (graph
//! constants, built by [`rope_tables`](fblayout_kernels::ops::rope_tables)). Its gradient
//! `dy, positions, cos, sin → dx` is the rotation by the opposite angles; it writes `dx`
//! through `x`'s view, so it reads its inputs as stored. Positions index the tables' rows: the
//! executors check them before a step runs.

use fblayout_kernels::ops::rope::{rope_backward_cpu, rope_forward_cpu};
use fblayout_kernels::ops::{RopeAngles, RopeOp, RopeViews};
use fblayout_kernels::runtime::Batch;
use fblayout_kernels::tensor::GpuArg;

use super::cpu::{CpuCtx, Ins, Outs};
use super::gpu::{BuildCtx, GpuKernel, RecordCtx};
use super::{
    Along, Args, Contract, Decl, Dims, Holds, IndexBound, LAST, LIKE_OUTPUT, OWN, OpErr, Sample,
    Slot, ViewRule,
};
use crate::exec::views::BoundOperand;
use crate::graph::{BackwardRule, BackwardStep, Dim, Op, Phase, Source};
use crate::select::KernelKind;

/// `x, positions, cos, sin → y`, or its gradient `dy, positions, cos, sin → dx`.
pub(crate) struct Rope {
    pub(crate) heads: u32,
    pub(crate) backward: bool,
}

impl Rope {
    /// The rotated tensor's role and the result's.
    fn roles(&self) -> [&'static str; 2] {
        if self.backward {
            ["dy", "dx"]
        } else {
            ["x", "y"]
        }
    }
}

// ANCHOR: contract
impl Contract for Rope {
    fn name(&self) -> &'static str {
        if self.backward { "rope_grad" } else { "rope" }
    }

    fn phase(&self) -> Phase {
        Phase::forward_or_backward(self.backward)
    }

    fn inputs(&self) -> Vec<Slot> {
        let heads = ViewRule::Heads { heads: self.heads };
        vec![
            Slot::new(self.roles()[0], heads, LIKE_OUTPUT),
            Slot::new("positions", ViewRule::Whole, LAST),
            Slot::new("cos", ViewRule::Whole, LAST),
            Slot::new("sin", ViewRule::Whole, LAST),
        ]
    }

    fn outputs(&self) -> Vec<Slot> {
        let heads = ViewRule::Heads { heads: self.heads };
        vec![Slot::new(self.roles()[1], heads, OWN)]
    }

    fn check_shapes(&self, d: &Dims) -> Result<(), String> {
        let [input, output] = self.roles();
        d.rank(input, 3)?;
        d.tokens(input)?;
        d.same(input, output)?;
        d.is("positions", &[Dim::Batch, Dim::Seq])?;
        d.rank("cos", 2)?;
        d.same("cos", "sin")?;
        let head_dim = match d.last(input)? {
            Dim::Fixed(w) if self.heads > 0 && w % self.heads == 0 => w / self.heads,
            other => {
                return Err(format!(
                    "`{input}`'s width {other} is no multiple of {} heads",
                    self.heads
                ));
            }
        };
        if head_dim % 2 != 0 {
            return Err(format!("heads of {head_dim} can't be rotated in pairs"));
        }
        if d.last("cos")? != Dim::Fixed(head_dim / 2) {
            return Err(format!(
                "the tables are {} wide, not head_dim/2 = {}",
                d.last("cos")?,
                head_dim / 2
            ));
        }
        Ok(())
    }

    fn backward(&self) -> Option<BackwardRule> {
        (!self.backward).then(|| BackwardRule {
            steps: vec![BackwardStep {
                op: Op::RopeGrad { heads: self.heads },
                inputs: vec![
                    Source::OutputGrad(0),
                    Source::Input(1),
                    Source::Input(2),
                    Source::Input(3),
                ],
                grads_of: vec![0],
                shared: None,
            }],
            passes_through: vec![],
        })
    }

    // ANCHOR_END: contract
    fn sample(&self) -> Option<Sample> {
        if self.backward {
            return None;
        }
        let (head_dim, positions) = (4, 7);
        let (cos, sin) = fblayout_kernels::ops::rope_tables(
            10_000.0,
            head_dim,
            positions,
            fblayout_kernels::ops::RopeScaling::None,
        );
        let table = |t: Vec<f32>| {
            let values = t.into_iter().map(f64::from).collect();
            Decl::fixed(
                &[("position", positions), ("pair", head_dim / 2)],
                Holds::Constant(values),
            )
        };
        let width = self.heads * head_dim;
        Some(Sample {
            inputs: vec![
                Decl::tokens(&[("width", width)], Holds::Floats),
                Decl::tokens(&[], Holds::Ids { below: positions }),
                table(cos),
                table(sin),
            ],
            outputs: vec![Decl::tokens(&[("width", width)], Holds::Written)],
        })
    }

    fn kind(&self) -> Option<KernelKind> {
        Some(KernelKind::Elementwise)
    }

    fn reads_stored(&self) -> bool {
        self.backward
    }

    fn index_bounds(&self) -> Vec<IndexBound> {
        vec![IndexBound {
            ids: "positions",
            into: "cos",
            along: Along::First,
            except: None,
            uploaded: false,
        }]
    }

    fn cpu(
        &self,
        ins: &Ins<'_>,
        outs: &mut Outs<'_>,
        _: &CpuCtx<'_>,
    ) -> Result<Option<f64>, OpErr> {
        let [input, output] = self.roles();
        let [out] = outs.outs([output])?;
        let (x, p) = (ins.f(input)?, ins.int("positions")?);
        let (cos, sin) = (ins.f("cos")?, ins.f("sin")?);
        if self.backward {
            rope_backward_cpu(x, p, cos, sin, out)?;
        } else {
            rope_forward_cpu(x, p, cos, sin, out)?;
        }
        Ok(None)
    }

    fn gpu(
        &self,
        args: &Args<&BoundOperand>,
        ctx: &mut BuildCtx<'_>,
    ) -> Result<Box<dyn GpuKernel>, OpErr> {
        let [input, output] = self.roles();
        // The backward is built with the forward's roles: `dx` where `x` is, `dy` where `y` is.
        let (x, y) = if self.backward {
            (args.write(output)?, args.read(input)?)
        } else {
            (args.read(input)?, args.write(output)?)
        };
        let views = RopeViews {
            x: &x.view,
            y: &y.view,
            positions: &args.read("positions")?.view,
            cos: &args.read("cos")?.view,
            sin: &args.read("sin")?.view,
        };
        Ok(Box::new(Kernel {
            op: RopeOp::new(ctx.gpu, &views)?,
            roles: self.roles(),
            backward: self.backward,
        }))
    }
}

struct Kernel {
    op: RopeOp,
    roles: [&'static str; 2],
    backward: bool,
}

impl GpuKernel for Kernel {
    fn record(
        &self,
        batch: &mut Batch<'_>,
        args: &Args<GpuArg<'_>>,
        _: &RecordCtx<'_>,
    ) -> Result<(), OpErr> {
        let angles = RopeAngles {
            positions: args.read("positions")?.clone(),
            cos: args.read("cos")?.clone(),
            sin: args.read("sin")?.clone(),
        };
        let [input, output] = self.roles;
        let (i, o) = (args.read(input)?, args.write(output)?);
        if self.backward {
            self.op.backward(batch, i, &angles, o)
        } else {
            self.op.forward(batch, i, &angles, o)
        }
    }
}
