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
//!
//! The fused attention ([`Op::FusedAttention`], `fused` here) has the same projections, context
//! and masks, and saves the log-sum-exp of each query's scaled scores `lse` `[batch, heads, seq]`
//! (`f32`) in place of the probabilities: `qkv | q, k, v[, mask] → out, lse`, and its backward
//! `qkv | q, k, v[, mask], out, lse, dout → dqkv | dq, dk, dv` recomputes the probabilities
//! from it ([`FlashAttentionOp`]), so it reads the context and, where padded, the mask. Its
//! kernels take no scratch.

use fblayout_kernels::ops::attention::flash::{
    FlashAttentionOp, FlashGrads, FlashSaved, flash_backward_cpu, flash_forward_cpu,
};
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
use crate::graph::{BackwardRule, BackwardStep, Dim, FusedAttention, Op, Phase, Source};
use crate::select::KernelKind;

/// `qkv → out, probs`, or its backward `qkv, probs, dout → dqkv`; where `separate`, over
/// three projections: `q, k, v → out, probs` and `q, k, v, probs, dout → dq, dk, dv`; where
/// `fused`, the fused attention's (see the module docs).
pub(crate) struct Attention {
    pub(crate) heads: u32,
    pub(crate) kv_heads: u32,
    pub(crate) causal: bool,
    pub(crate) backward: bool,
    pub(crate) separate: bool,
    /// Whether the forward takes a padding mask `mask` (separate projections only).
    pub(crate) padded: bool,
    /// Whether the probabilities are never stored ([`Op::FusedAttention`]).
    pub(crate) fused: bool,
}

impl Attention {
    /// The contract of a fused attention's forward, or its backward where `backward`.
    pub(crate) fn fused(f: FusedAttention, backward: bool) -> Self {
        Self {
            heads: f.heads,
            kv_heads: f.kv_heads,
            causal: f.causal,
            backward,
            separate: f.separate,
            padded: f.padded,
            fused: true,
        }
    }

    /// The parameters of the fused attention this contract is (or would be).
    fn fused_params(&self) -> FusedAttention {
        FusedAttention {
            heads: self.heads,
            kv_heads: self.kv_heads,
            causal: self.causal,
            separate: self.separate,
            padded: self.padded,
        }
    }

    /// What the forward saves for the backward: the probabilities, or the log-sum-exp.
    fn saved(&self) -> &'static str {
        if self.fused { "lse" } else { "probs" }
    }

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
        match (self.fused, self.separate, self.backward) {
            (false, false, false) => "attention",
            (false, false, true) => "attention_grad",
            (false, true, false) => "attention_separate",
            (false, true, true) => "attention_separate_grad",
            (true, false, false) => "fused_attention",
            (true, false, true) => "fused_attention_grad",
            (true, true, false) => "fused_attention_separate",
            (true, true, true) => "fused_attention_separate_grad",
        }
    }

    fn phase(&self) -> Phase {
        Phase::forward_or_backward(self.backward)
    }

    fn inputs(&self) -> Vec<Slot> {
        let mut inputs = self.projections("qkv", ["q", "k", "v"], BEFORE_LAST);
        if self.padded && (self.fused || !self.backward) {
            inputs.push(Slot::new("mask", ViewRule::Whole, OWN));
        }
        if self.backward {
            if self.fused {
                inputs.push(self.heads("out"));
                inputs.push(Slot::new("lse", ViewRule::Whole, OWN));
            } else {
                inputs.push(Slot::new("probs", ViewRule::Whole, REDUCE_TOKENS));
            }
            inputs.push(self.heads("dout"));
        }
        inputs
    }

    fn outputs(&self) -> Vec<Slot> {
        if self.backward {
            self.projections("dqkv", ["dq", "dk", "dv"], LAST)
        } else {
            let saved = if self.fused { OWN } else { LAST };
            vec![
                self.heads("out"),
                Slot::new(self.saved(), ViewRule::Whole, saved),
            ]
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
        if self.padded && (self.causal || !self.separate || (self.backward && !self.fused)) {
            return Err(
                "a padding mask is taken by attention over separate projections (by the \
                 materialised attention's forward only), and not with a causal mask"
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
        if self.fused {
            if self.backward {
                d.same("dout", "out")?;
            }
            return d.is("lse", &[Dim::Batch, Dim::Fixed(self.heads), Dim::Seq]);
        }
        d.is(
            "probs",
            &[Dim::Batch, Dim::Fixed(self.heads), Dim::Seq, Dim::Seq],
        )
    }

    fn backward(&self) -> Option<BackwardRule> {
        let (heads, kv_heads, causal) = (self.heads, self.kv_heads, self.causal);
        let (op, inputs, grads_of) = if self.fused {
            use Source::{Input, Output, OutputGrad};
            // The projections (and the mask), the context, the log-sum-exp, its gradient.
            let projections = if self.separate { 3 } else { 1 };
            let mut inputs: Vec<Source> = (0..projections + usize::from(self.padded))
                .map(Input)
                .collect();
            inputs.extend([Output(0), Output(1), OutputGrad(0)]);
            (
                Op::FusedAttentionGrad(self.fused_params()),
                inputs,
                (0..projections).collect(),
            )
        } else if self.separate {
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
                    axes: if self.fused {
                        vec![
                            ("batch", Dim::Batch),
                            ("heads", Dim::Fixed(self.heads)),
                            ("query", Dim::Seq),
                        ]
                    } else {
                        vec![
                            ("batch", Dim::Batch),
                            ("heads", Dim::Fixed(self.heads)),
                            ("query", Dim::Seq),
                            ("key", Dim::Seq),
                        ]
                    },
                    holds: Holds::Written,
                },
            ],
        })
    }

    fn kind(&self) -> Option<KernelKind> {
        Some(match (self.fused, self.backward) {
            (false, false) => KernelKind::Attention,
            (false, true) => KernelKind::AttentionGrad,
            (true, false) => KernelKind::FusedAttention,
            (true, true) => KernelKind::FusedAttentionGrad,
        })
    }

    fn product(&self, s: &Shapes<'_>) -> Option<Product> {
        // The queries and the values: views of one fused projection, or their own tensors.
        let (q, v) = if self.separate {
            ("q", "v")
        } else {
            ("qkv", "qkv")
        };
        if self.fused {
            // Pairs of a query and a key: `lse`'s elements times the keys.
            let ctx = if self.backward { "dout" } else { "out" };
            let pairs = s.elements("lse") * s.extent(ctx, 1);
            // The forward's QKᵀ and P·V; the backward's eight products of a head per pair:
            // the scores in each of its three kernels, dP in two, dQ, dK and dV.
            let products = if self.backward { 8.0 } else { 2.0 };
            return Some(Product {
                a: (q, Walk::Last),
                b: (v, Walk::Last),
                flops: 2.0 * products * pairs * self.head_dim(s),
            });
        }
        let probs = s.elements("probs");
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
        if self.fused {
            return Ok(Scratch::default());
        }
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

    fn f32_outputs(&self) -> &'static [&'static str] {
        if self.fused && !self.backward {
            &["lse"]
        } else {
            &[]
        }
    }

    fn index_bounds(&self) -> Vec<IndexBound> {
        if !self.padded || (self.backward && !self.fused) {
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
        if self.fused {
            let keep = if self.padded {
                Some(ins.int("mask")?)
            } else {
                None
            };
            if self.backward {
                let [dq, dk, dv] = outs.outs(["dq", "dk", "dv"])?;
                let saved = FlashSaved {
                    q,
                    k,
                    v,
                    out: ins.f("out")?,
                    lse: ins.f("lse")?,
                };
                flash_backward_cpu::<f64>(a, &saved, keep, ins.f("dout")?, [dq, dk, dv])?;
            } else {
                let [out, lse] = outs.outs(["out", "lse"])?;
                flash_forward_cpu::<f64>(a, [q, k, v], keep, out, lse)?;
            }
            return Ok(None);
        }
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
        let [q, k, v, out, scores] = operands(args, self.backward, self.fused)?.map(|o| &o.view);
        let views = AttentionViews {
            q,
            k,
            v,
            out,
            scores,
        };
        let head_dim = args.read("q")?.bound.shape().last().copied().unwrap_or(1) as u32;
        let shape = self.shape(head_dim);
        let keep = if self.padded {
            Some(&args.read("mask")?.view)
        } else {
            None
        };
        let op = if self.fused {
            Kind::Fused(Box::new(FlashAttentionOp::new(
                ctx.gpu, &views, keep, shape,
            )?))
        } else if let Some(keep) = keep {
            Kind::Materialised(Box::new(AttentionOp::with_keep(
                ctx.gpu, &views, keep, shape,
            )?))
        } else {
            Kind::Materialised(Box::new(AttentionOp::new(ctx.gpu, &views, shape)?))
        };
        Ok(Box::new(Kernel {
            op,
            backward: self.backward,
            padded: self.padded,
        }))
    }
}

/// A node's queries, keys, values, context and what the forward saves (probabilities or
/// log-sum-exp): the materialised backward's `dout` stands in for the context, which it does
/// not read.
fn operands<T>(args: &Args<T>, backward: bool, fused: bool) -> Result<[&T; 5], OpErr> {
    let (out, saved) = match (backward, fused) {
        (false, false) => (args.write("out")?, args.write("probs")?),
        (false, true) => (args.write("out")?, args.write("lse")?),
        (true, false) => (args.read("dout")?, args.read("probs")?),
        (true, true) => (args.read("out")?, args.read("lse")?),
    };
    Ok([
        args.read("q")?,
        args.read("k")?,
        args.read("v")?,
        out,
        saved,
    ])
}

/// The kernels of a materialised or a fused attention.
enum Kind {
    Materialised(Box<AttentionOp>),
    Fused(Box<FlashAttentionOp>),
}

struct Kernel {
    op: Kind,
    backward: bool,
    padded: bool,
}

impl Kernel {
    fn args<'a>(&self, args: &Args<GpuArg<'a>>) -> Result<AttentionArgs<'a>, OpErr> {
        let fused = matches!(self.op, Kind::Fused(_));
        let [q, k, v, out, probs] = operands(args, self.backward, fused)?.map(Clone::clone);
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
        let keep = if self.padded {
            Some(args.read("mask")?)
        } else {
            None
        };
        match &self.op {
            Kind::Fused(op) if self.backward => {
                let grads = FlashGrads {
                    dout: args.read("dout")?.clone(),
                    dq: args.write("dq")?.clone(),
                    dk: args.write("dk")?.clone(),
                    dv: args.write("dv")?.clone(),
                };
                Ok(op.backward(batch, &a, keep, &grads)?)
            }
            Kind::Fused(op) => Ok(op.forward(batch, &a, keep)?),
            Kind::Materialised(op) if self.backward => {
                let (dq, dk, dv) = (args.write("dq")?, args.write("dk")?, args.write("dv")?);
                Ok(op.backward(batch, &a, args.read("dout")?, dq, dk, dv)?)
            }
            Kind::Materialised(op) => match keep {
                Some(keep) => Ok(op.forward_keys(batch, &a, keep)?),
                None => Ok(op.forward(batch, &a)?),
            },
        }
    }

    fn tune(
        &self,
        gpu: &Gpu,
        args: &Args<GpuArg<'_>>,
        _: &RecordCtx<'_>,
    ) -> Result<Option<bool>, OpErr> {
        match &self.op {
            // Its blocks follow from the head size and the device's limits: nothing to time.
            Kind::Fused(_) => Ok(Some(false)),
            Kind::Materialised(op) => {
                op.tune(gpu, &self.args(args)?)?;
                Ok(Some(op.tensor_cores().contains(&true)))
            }
        }
    }
}
