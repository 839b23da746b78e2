//! Multi-head and grouped-query attention over a fused projection, forward and backward.
//!
//! `qkv → out, probs`: the queries, keys and values are three views of the fused projection
//! `[batch, seq, (heads + 2 kv_heads) · head_dim]`, each `[batch, seq, heads, head_dim]`; the
//! context `out` `[batch, seq, heads · head_dim]` is written as heads, and the probabilities
//! `[batch, heads, seq, seq]` are saved for the backward, `qkv, probs, dout → dqkv`, which
//! writes the three gradients through the same views of `dqkv`. Scores are scaled by
//! `1/√head_dim` and masked causally where asked. Separate projections may also take a padding
//! mask `mask` `[batch, seq]` of `u32` (Hugging Face's `attention_mask`: 1 a token, 0 padding),
//! an optional fourth input: a padding key gets probability 0 from every query (Hugging Face
//! adds the dtype's minimum to its scores; with one real key per row the two agree). Only the
//! forward reads it: the backward differentiates through the saved probabilities, which are 0
//! at the masked keys, so those get no gradient. The executors check every value is 0 or 1
//! ([`Along::Fixed`]). The kernels take the scores (and in the backward the gradients of the
//! probabilities and of the scores) as scratch, laid out like the probabilities, with the
//! partial sums of any product that splits its reduction.

use fblayout_kernels::ops::attention::{
    AttentionSaved, attention_backward_cpu, attention_forward_cpu, attention_forward_keys_cpu,
};
use fblayout_kernels::ops::{
    Attention as Shape, AttentionArgs, AttentionExtents, AttentionOp, AttentionViews, Mask,
};
use fblayout_kernels::runtime::{Batch, Gpu, Scratch};
use fblayout_kernels::tensor::GpuArg;

use super::cpu::{CpuCtx, Ins, Outs};
use super::gpu::{BuildCtx, GpuKernel, RecordCtx};
use super::{
    Along, Args, BEFORE_LAST, Contract, Decl, Dims, Holds, IndexBound, LAST, OWN, OpErr, Product,
    REDUCE_TOKENS, Sample, Shapes, Slot, ViewRule, Walk,
};
use crate::exec::views::BoundOperand;
use crate::graph::{BackwardRule, BackwardStep, Dim, Op, Phase, Source};
use crate::select::KernelKind;

/// `qkv → out, probs`, or its backward `qkv, probs, dout → dqkv`; where `separate`, over
/// three projections: `q, k, v → out, probs` and `q, k, v, probs, dout → dq, dk, dv`.
pub(crate) struct Attention {
    pub(crate) heads: u32,
    pub(crate) kv_heads: u32,
    pub(crate) causal: bool,
    pub(crate) backward: bool,
    pub(crate) separate: bool,
    /// Whether the forward takes a padding mask `mask` (separate projections only).
    pub(crate) padded: bool,
}

impl Attention {
    fn qkv(
        &self,
        name: &'static str,
        names: [&'static str; 3],
        access: &'static [super::Access],
    ) -> Slot {
        let view = ViewRule::Qkv {
            heads: self.heads,
            kv_heads: self.kv_heads,
            names,
        };
        Slot::new(name, view, access)
    }

    fn heads(&self, name: &'static str) -> Slot {
        Slot::new(name, ViewRule::Heads { heads: self.heads }, LAST)
    }

    /// The queries, keys and values: one fused projection `fused`, or three named `names`
    /// (the queries with every head, the keys and values with the key/value heads).
    fn projections(
        &self,
        fused: &'static str,
        names: [&'static str; 3],
        access: &'static [super::Access],
    ) -> Vec<Slot> {
        if !self.separate {
            return vec![self.qkv(fused, names, access)];
        }
        let [q, k, v] = names;
        let kv = ViewRule::Heads {
            heads: self.kv_heads,
        };
        vec![
            Slot::new(q, ViewRule::Heads { heads: self.heads }, access),
            Slot::new(k, kv, access),
            Slot::new(v, kv, access),
        ]
    }

    /// The kernels' attention for head size `head_dim`.
    fn shape(&self, head_dim: u32) -> Shape {
        let mask = if self.padded {
            Mask::Keys
        } else if self.causal {
            Mask::Causal { offset: 0 }
        } else {
            Mask::None
        };
        Shape::new(self.heads, self.kv_heads, head_dim, mask)
    }

    /// The head size: the context's width over the heads.
    fn head_dim(&self, s: &Shapes<'_>) -> f64 {
        let ctx = if self.backward { "dout" } else { "out" };
        s.extent(ctx, 0) / f64::from(self.heads.max(1))
    }
}

impl Contract for Attention {
    fn name(&self) -> &'static str {
        match (self.separate, self.backward) {
            (false, false) => "attention",
            (false, true) => "attention_grad",
            (true, false) => "attention_separate",
            (true, true) => "attention_separate_grad",
        }
    }

    fn phase(&self) -> Phase {
        Phase::forward_or_backward(self.backward)
    }

    fn inputs(&self) -> Vec<Slot> {
        let mut inputs = self.projections("qkv", ["q", "k", "v"], BEFORE_LAST);
        if self.backward {
            inputs.push(Slot::new("probs", ViewRule::Whole, REDUCE_TOKENS));
            inputs.push(self.heads("dout"));
        } else if self.padded {
            inputs.push(Slot::new("mask", ViewRule::Whole, OWN));
        }
        inputs
    }

    fn outputs(&self) -> Vec<Slot> {
        if self.backward {
            self.projections("dqkv", ["dq", "dk", "dv"], LAST)
        } else {
            vec![self.heads("out"), Slot::new("probs", ViewRule::Whole, LAST)]
        }
    }

    fn check_shapes(&self, d: &Dims) -> Result<(), String> {
        let ctx = if self.backward { "dout" } else { "out" };
        let projections: &[&str] = if self.separate {
            &["q", "k", "v"]
        } else {
            &["qkv"]
        };
        for &r in projections.iter().chain(&[ctx]) {
            d.rank(r, 3)?;
            d.tokens(r)?;
        }
        if self.padded && (self.causal || !self.separate || self.backward) {
            return Err(
                "a padding mask is taken by the forward of attention over separate projections, \
                 and not with a causal mask"
                    .into(),
            );
        }
        if self.padded {
            d.is("mask", &[Dim::Batch, Dim::Seq])?;
        }
        if self.heads == 0 || self.kv_heads == 0 || !self.heads.is_multiple_of(self.kv_heads) {
            return Err(format!(
                "{} query heads can't share {} key/value heads",
                self.heads, self.kv_heads
            ));
        }
        let width = match d.last(ctx)? {
            Dim::Fixed(w) if w % self.heads == 0 => w,
            other => {
                return Err(format!(
                    "`{ctx}`'s width {other} is no multiple of {} heads",
                    self.heads
                ));
            }
        };
        let head_dim = width / self.heads;
        let tokens = |w: u32| [Dim::Batch, Dim::Seq, Dim::Fixed(w)];
        if self.separate {
            d.is("q", &tokens(width))?;
            d.is("k", &tokens(self.kv_heads * head_dim))?;
            d.is("v", &tokens(self.kv_heads * head_dim))?;
            if self.backward {
                for (x, dx) in [("q", "dq"), ("k", "dk"), ("v", "dv")] {
                    d.same(x, dx)?;
                }
            }
        } else {
            let fused = (self.heads + 2 * self.kv_heads) * head_dim;
            d.is("qkv", &tokens(fused))?;
            if self.backward {
                d.same("qkv", "dqkv")?;
            }
        }
        d.is(
            "probs",
            &[Dim::Batch, Dim::Fixed(self.heads), Dim::Seq, Dim::Seq],
        )
    }

    fn backward(&self) -> Option<BackwardRule> {
        let (heads, kv_heads, causal) = (self.heads, self.kv_heads, self.causal);
        let (op, inputs, grads_of) = if self.separate {
            use Source::{Input, Output, OutputGrad};
            (
                Op::AttentionSeparateGrad {
                    heads,
                    kv_heads,
                    causal,
                },
                vec![Input(0), Input(1), Input(2), Output(1), OutputGrad(0)],
                vec![0, 1, 2],
            )
        } else {
            (
                Op::AttentionGrad {
                    heads,
                    kv_heads,
                    causal,
                },
                vec![Source::Input(0), Source::Output(1), Source::OutputGrad(0)],
                vec![0],
            )
        };
        (!self.backward).then(|| BackwardRule {
            steps: vec![BackwardStep {
                op,
                inputs,
                grads_of,
                shared: None,
            }],
            passes_through: vec![],
        })
    }

    fn sample(&self) -> Option<Sample> {
        if self.backward {
            return None;
        }
        let head_dim = 4;
        let width = self.heads * head_dim;
        let fused = (self.heads + 2 * self.kv_heads) * head_dim;
        let kv = self.kv_heads * head_dim;
        let inputs = if self.separate {
            let mut inputs = vec![
                Decl::tokens(&[("q", width)], Holds::Floats),
                Decl::tokens(&[("k", kv)], Holds::Floats),
                Decl::tokens(&[("v", kv)], Holds::Floats),
            ];
            if self.padded {
                inputs.push(Decl::tokens(&[], Holds::Ids { below: 2 }));
            }
            inputs
        } else {
            vec![Decl::tokens(&[("qkv", fused)], Holds::Floats)]
        };
        Some(Sample {
            inputs,
            outputs: vec![
                Decl::tokens(&[("width", width)], Holds::Written),
                Decl {
                    axes: vec![
                        ("batch", Dim::Batch),
                        ("heads", Dim::Fixed(self.heads)),
                        ("query", Dim::Seq),
                        ("key", Dim::Seq),
                    ],
                    holds: Holds::Written,
                },
            ],
        })
    }

    fn kind(&self) -> Option<KernelKind> {
        Some(if self.backward {
            KernelKind::AttentionGrad
        } else {
            KernelKind::Attention
        })
    }

    fn product(&self, s: &Shapes<'_>) -> Option<Product> {
        let probs = s.elements("probs");
        // The queries and the values: views of one fused projection, or their own tensors.
        let (q, v) = if self.separate {
            ("q", "v")
        } else {
            ("qkv", "qkv")
        };
        Some(if self.backward {
            // dV, dP, dQ and dK: four products the size of one forward product each.
            Product {
                a: ("probs", Walk::BeforeLast),
                b: (q, Walk::BeforeLast),
                flops: 8.0 * probs * self.head_dim(s),
            }
        } else {
            // QKᵀ and P·V: 2 · 2 · batch · heads · seq² · head_dim.
            Product {
                a: (q, Walk::Last),
                b: (v, Walk::BeforeLast),
                flops: 4.0 * probs * self.head_dim(s),
            }
        })
    }

    fn scratch(&self, s: &Shapes<'_>) -> Result<Scratch, OpErr> {
        // The context `[batch, seq, heads · head_dim]` (the backward's `dout`, which stands in
        // for it as the kernel is built) gives the extents.
        let ctx = if self.backward { "dout" } else { "out" };
        let seq = s.extent_u32(ctx, 1);
        let extents = AttentionExtents {
            batch: s.extent_u32(ctx, 2),
            seq_q: seq,
            seq_k: seq,
            head_dim: s.extent_u32(ctx, 0) / self.heads.max(1),
        };
        let [q, k, v] = if self.separate {
            ["q", "k", "v"]
        } else {
            ["qkv"; 3]
        };
        let elems = AttentionViews {
            q: s.elem(q),
            k: s.elem(k),
            v: s.elem(v),
            out: s.elem(ctx),
            scores: s.elem("probs"),
        };
        let shape = self.shape(extents.head_dim);
        let [forward, backward] = AttentionOp::scratch(&shape, extents, s.stored("probs"), elems)?;
        Ok(if self.backward { backward } else { forward })
    }

    fn reads_stored(&self) -> bool {
        self.backward
    }

    fn index_bounds(&self) -> Vec<IndexBound> {
        if !self.padded {
            return Vec::new();
        }
        vec![IndexBound {
            ids: "mask",
            into: "k",
            along: Along::Fixed(2),
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
        let (q, k, v) = (ins.f("q")?, ins.f("k")?, ins.f("v")?);
        let a = self.shape(q.dims().last().copied().unwrap_or(1) as u32);
        if self.backward {
            let [dq, dk, dv] = outs.outs(["dq", "dk", "dv"])?;
            let saved = AttentionSaved {
                q,
                k,
                v,
                probs: ins.f("probs")?,
            };
            attention_backward_cpu(a, &saved, ins.f("dout")?, dq, dk, dv)?;
        } else {
            let [out, probs] = outs.outs(["out", "probs"])?;
            if self.padded {
                attention_forward_keys_cpu(a, q, k, v, ins.int("mask")?, out, probs)?;
            } else {
                attention_forward_cpu(a, q, k, v, out, probs)?;
            }
        }
        Ok(None)
    }

    fn gpu(
        &self,
        args: &Args<&BoundOperand>,
        ctx: &mut BuildCtx<'_>,
    ) -> Result<Box<dyn GpuKernel>, OpErr> {
        let [q, k, v, out, scores] = operands(args, self.backward)?.map(|o| &o.view);
        let views = AttentionViews {
            q,
            k,
            v,
            out,
            scores,
        };
        let head_dim = args.read("q")?.bound.shape().last().copied().unwrap_or(1) as u32;
        let shape = self.shape(head_dim);
        let op = if self.padded {
            AttentionOp::with_keep(ctx.gpu, &views, &args.read("mask")?.view, shape)?
        } else {
            AttentionOp::new(ctx.gpu, &views, shape)?
        };
        Ok(Box::new(Kernel {
            op,
            backward: self.backward,
            padded: self.padded,
        }))
    }
}

/// A node's queries, keys, values, context and probabilities: the backward's `dout` stands
/// in for the context, which it does not read.
fn operands<T>(args: &Args<T>, backward: bool) -> Result<[&T; 5], OpErr> {
    let out = if backward {
        args.read("dout")?
    } else {
        args.write("out")?
    };
    let probs = if backward {
        args.read("probs")?
    } else {
        args.write("probs")?
    };
    Ok([
        args.read("q")?,
        args.read("k")?,
        args.read("v")?,
        out,
        probs,
    ])
}

struct Kernel {
    op: AttentionOp,
    backward: bool,
    padded: bool,
}

impl Kernel {
    fn args<'a>(&self, args: &Args<GpuArg<'a>>) -> Result<AttentionArgs<'a>, OpErr> {
        let [q, k, v, out, probs] = operands(args, self.backward)?.map(Clone::clone);
        Ok(AttentionArgs {
            q,
            k,
            v,
            out,
            probs,
        })
    }
}

impl GpuKernel for Kernel {
    fn record(
        &self,
        batch: &mut Batch<'_>,
        args: &Args<GpuArg<'_>>,
        _: &RecordCtx<'_>,
    ) -> Result<(), OpErr> {
        let a = self.args(args)?;
        if self.backward {
            let (dq, dk, dv) = (args.write("dq")?, args.write("dk")?, args.write("dv")?);
            self.op.backward(batch, &a, args.read("dout")?, dq, dk, dv)
        } else if self.padded {
            self.op.forward_keys(batch, &a, args.read("mask")?)
        } else {
            self.op.forward(batch, &a)
        }
    }

    fn tune(
        &self,
        gpu: &Gpu,
        args: &Args<GpuArg<'_>>,
        _: &RecordCtx<'_>,
    ) -> Result<Option<bool>, OpErr> {
        self.op.tune(gpu, &self.args(args)?)?;
        Ok(Some(self.op.tensor_cores().contains(&true)))
    }
}
