//! A language-model head and its cross-entropy in one operation, the logits never stored whole.
//!
//! `x, w[, b], labels → loss` computes what [`Op::Linear`] (or [`Op::LinearT`]), [`Op::Bias`]
//! and [`Op::CrossEntropy`] compute one after the other: `loss = CE(x·w [+ b], labels)`, per
//! token and its mean over the tokens whose label counts. Those three store the logits, `tokens
//! × vocab`, and then their gradient over them: at a batch of 32 × 128 tokens over a vocabulary
//! of 30 522, 477 MiB in `f32`, the largest buffer of a small model's step. Here they are made
//! `chunk` tokens at a time in a scratch buffer:
//!
//! - the **forward** multiplies each chunk's rows of `x` into the scratch, reduces them to each
//!   token's loss and log-sum-exp, and at the end takes the mean and the count over all tokens
//!   ([`CrossEntropyTotal`]);
//! - the **backward** (`x, w[, b], labels → dx, dw[, db]`) makes each chunk's logits again,
//!   turns them into their gradient in a second scratch buffer (the loss's, divided by the
//!   count of all chunks), multiplies that into the chunk's rows of `dx` and adds it into `dw`
//!   (and sums it into `db`).
//!
//! The price is the forward product done twice; the scratch is two chunks of logits, however
//! many tokens there are. Each chunk's rows are slices of the operands' views, so the kernels
//! read and write the tensors where they are, in the layouts the planner chose.

use std::sync::Arc;

use fblayout_core::layout::{ElemType, LayoutSpec, View};
use fblayout_kernels::GpuBuffer;
use fblayout_kernels::cpu::{Dense, LogicalMut};
use fblayout_kernels::ops::bias::bias_backward_cpu;
use fblayout_kernels::ops::cross_entropy::{cross_entropy_backward_cpu, cross_entropy_forward_cpu};
use fblayout_kernels::ops::matmul::linear::{Output, linear_backward_cpu, linear_forward_cpu};
use fblayout_kernels::ops::{
    AddOp, BiasLaunch, BiasOp, CrossEntropyOp, CrossEntropyState, CrossEntropyTotal, LinearOp,
};
use fblayout_kernels::runtime::{Batch, Gpu, Scratch};
use fblayout_kernels::tensor::GpuArg;

use super::cpu::{CpuCtx, Ins, Outs};
use super::gpu::{BuildCtx, GpuKernel, RecordCtx};
use super::linear::{weight_dims, weight_view};
use super::shape::show;
use super::{
    Access, Along, Args, BEFORE_LAST, Contract, Decl, Dims, Holds, IndexBound, LAST, OWN, OpErr,
    Product, Sample, Shapes, Slot, ViewRule, Walk,
};
use crate::exec::views::BoundOperand;
use crate::graph::{BackwardRule, BackwardStep, HeadLoss, Op, Phase, Source};
use crate::select::KernelKind;

const OP: &str = "head loss";

/// The backward walks `x` along its last axis (the logits made again) and along tokens (`dw`).
const X_BACKWARD: &[Access] = &[
    Access::along(Walk::Last),
    Access::reducing(Walk::BeforeLast),
];

/// The forward ([`Op::HeadLoss`]) or the backward ([`Op::HeadLossGrad`]).
pub(crate) struct Head {
    pub(crate) p: HeadLoss,
    pub(crate) backward: bool,
}

/// The first token and the number of tokens of each chunk of `tokens` tokens, `chunk` at a
/// time (the last one shorter).
pub(crate) fn chunks(tokens: u32, chunk: u32) -> Vec<(u32, u32)> {
    let chunk = chunk.max(1);
    (0..tokens.div_ceil(chunk))
        .map(|k| (k * chunk, chunk.min(tokens - k * chunk)))
        .collect()
}

impl Head {
    /// `w`'s walk along `d_in`, as [`Op::Linear`] reads it.
    fn w_access(&self) -> &'static [Access] {
        if self.p.transposed { LAST } else { BEFORE_LAST }
    }

    /// The tokens, `d_in` and vocabulary of `s`.
    fn extents(&self, s: &Shapes<'_>) -> (u32, u32, u32) {
        let d_in = s.extent_u32("x", 0);
        let tokens = s.elements_u32("x") / d_in.max(1);
        let vocab = s.extent_u32("w", if self.p.transposed { 1 } else { 0 });
        (tokens, d_in, vocab)
    }

    /// The element type of the logits (and their gradient) in scratch: that of `x`.
    fn logits_elem(s: &Shapes<'_>) -> ElemType {
        s.elem("x")
    }
}

impl Contract for Head {
    fn name(&self) -> &'static str {
        if self.backward {
            "head_loss_grad"
        } else {
            "head_loss"
        }
    }

    fn phase(&self) -> Phase {
        Phase::forward_or_backward(self.backward)
    }

    fn inputs(&self) -> Vec<Slot> {
        let x = if self.backward { X_BACKWARD } else { LAST };
        let mut slots = vec![
            Slot::new("x", ViewRule::Tokens, x),
            Slot::new("w", weight_view(self.p.transposed), self.w_access()),
        ];
        if self.p.biased {
            slots.push(Slot::new("b", ViewRule::Whole, LAST));
        }
        slots.push(Slot::new("labels", ViewRule::Tokens, LAST));
        slots
    }

    fn outputs(&self) -> Vec<Slot> {
        if !self.backward {
            return vec![Slot::new("loss", ViewRule::Tokens, LAST)];
        }
        let mut slots = vec![Slot::new("dx", ViewRule::Tokens, OWN)];
        if self.p.frozen {
            return slots;
        }
        slots.push(Slot::new("dw", weight_view(self.p.transposed), OWN));
        if self.p.biased {
            slots.push(Slot::new("db", ViewRule::Whole, OWN));
        }
        slots
    }

    fn check_shapes(&self, d: &Dims) -> Result<(), String> {
        if self.p.chunk == 0 {
            return Err("a chunk of 0 tokens: at least one is needed".into());
        }
        d.tokens("x")?;
        let w = weight_dims(d, "w", self.p.transposed)?;
        if w[0] != d.last("x")? {
            return Err(format!(
                "`w` reads as {} but `x` ({}) needs {} inputs",
                show(&w),
                show(d.of("x")?),
                d.last("x")?
            ));
        }
        d.is("labels", d.leading("x")?)?;
        if self.p.biased {
            d.is("b", &[w[1]])?;
        }
        if !self.backward {
            return d.is("loss", d.leading("x")?);
        }
        d.same("x", "dx")?;
        if self.p.frozen {
            return Ok(());
        }
        d.same("w", "dw")?;
        if self.p.biased {
            d.same("b", "db")?;
        }
        Ok(())
    }

    fn backward(&self) -> Option<BackwardRule> {
        if self.backward {
            return None;
        }
        let mut inputs = vec![Source::Input(0), Source::Input(1)];
        let mut grads_of = vec![0, 1];
        if self.p.biased {
            inputs.push(Source::Input(2));
            grads_of.push(2);
        }
        inputs.push(Source::Input(if self.p.biased { 3 } else { 2 }));
        Some(BackwardRule {
            steps: vec![BackwardStep {
                op: Op::HeadLossGrad(self.p),
                inputs,
                grads_of,
                shared: None,
            }],
            passes_through: vec![],
        })
    }

    fn pruned(&self, wanted: &[bool]) -> Option<Op> {
        // `dx` alone: the weight and bias are frozen. (Any other mix makes every gradient.)
        match wanted.split_first() {
            Some((true, rest)) if self.backward && !self.p.frozen && !rest.contains(&true) => {
                Some(Op::HeadLossGrad(HeadLoss {
                    frozen: true,
                    ..self.p
                }))
            }
            _ => None,
        }
    }

    fn sample(&self) -> Option<Sample> {
        if self.backward {
            return None;
        }
        let (d_in, vocab) = (6, 9);
        let w = if self.p.transposed {
            [("vocab", vocab), ("d_in", d_in)]
        } else {
            [("d_in", d_in), ("vocab", vocab)]
        };
        let mut inputs = vec![
            Decl::tokens(&[("d_in", d_in)], Holds::Floats),
            Decl::fixed(&w, Holds::Floats),
        ];
        if self.p.biased {
            inputs.push(Decl::fixed(&[("vocab", vocab)], Holds::Floats));
        }
        inputs.push(Decl::tokens(&[], Holds::Ids { below: vocab }));
        Some(Sample {
            inputs,
            outputs: vec![Decl::tokens(&[], Holds::Loss)],
        })
    }

    fn kind(&self) -> Option<KernelKind> {
        Some(if self.backward {
            KernelKind::LinearGradInput
        } else {
            KernelKind::Linear
        })
    }

    fn linear_weight(&self) -> Option<&'static str> {
        // As the linear layer's products: a transposed weight is a tied embedding table.
        (!self.p.transposed).then_some("w")
    }

    fn product(&self, s: &Shapes<'_>) -> Option<Product> {
        let (tokens, d_in, vocab) = self.extents(s);
        // The forward's product; the backward makes it again and adds `dx`'s and (unless the
        // weight is frozen) `dw`'s.
        let products = match (self.backward, self.p.frozen) {
            (false, _) => 1.0,
            (true, true) => 2.0,
            (true, false) => 3.0,
        };
        Some(Product {
            a: ("x", Walk::Last),
            b: (
                "w",
                if self.p.transposed {
                    Walk::Last
                } else {
                    Walk::BeforeLast
                },
            ),
            flops: products * 2.0 * f64::from(tokens) * f64::from(d_in) * f64::from(vocab),
        })
    }

    // ANCHOR: scratch
    fn scratch(&self, s: &Shapes<'_>) -> Result<Scratch, OpErr> {
        // Every chunk takes its scratch afresh once the one before it is done: the longest
        // (the first) takes the most.
        let (tokens, d_in, vocab) = self.extents(s);
        let rows = self.p.chunk.min(tokens).max(1);
        let elem = Self::logits_elem(s);
        let logits = Scratch::buffer(logits_bytes(rows, vocab, elem));
        let [forward, dx, dw] =
            LinearOp::scratch(rows, d_in, vocab, [s.elem("x"), s.elem("w"), elem])?;
        if !self.backward {
            return Ok(logits.and(forward));
        }
        let all = logits
            .and(Scratch::buffer(logits_bytes(rows, vocab, elem)))
            .and(forward)
            .and(dx);
        if self.p.frozen {
            return Ok(all);
        }
        let mut all = all.and(dw);
        if elem == ElemType::F16 {
            // A later chunk's `dw` made on tensor cores, before it is added (see `record`).
            all = all.and(Scratch::buffer(s.bytes("dw")));
        }
        if self.p.biased {
            all = all.and(BiasOp::backward_scratch(
                &BiasLaunch::default(),
                rows,
                vocab,
            )?);
        }
        Ok(all)
    }
    // ANCHOR_END: scratch

    fn state_bytes(&self, s: &Shapes<'_>) -> u64 {
        // The forward's: each chunk's log-sum-exps, and the mean and count over all tokens.
        if self.backward {
            return 0;
        }
        let (tokens, _, _) = self.extents(s);
        chunks(tokens, self.p.chunk)
            .iter()
            .map(|&(_, len)| CrossEntropyOp::state_bytes(len))
            .sum::<u64>()
            + CrossEntropyOp::state_bytes(tokens)
    }

    fn dispatches(&self, s: &Shapes<'_>) -> u64 {
        // Per chunk: the product (and a split-k sum), the rows' losses; then the mean. The
        // backward: the product again, the gradient, `dx`'s and `dw`'s products (each perhaps
        // split) and the bias's two passes.
        let (tokens, _, _) = self.extents(s);
        let n = chunks(tokens, self.p.chunk).len() as u64;
        match (self.backward, self.p.frozen) {
            (false, _) => 3 * n + 1,
            (true, true) => 5 * n,
            (true, false) => 9 * n,
        }
    }

    fn index_bounds(&self) -> Vec<IndexBound> {
        vec![IndexBound {
            ids: "labels",
            into: "w",
            along: if self.p.transposed {
                Along::First
            } else {
                Along::Last
            },
            except: Some(self.p.ignore_index),
            uploaded: false,
        }]
    }

    fn cpu(
        &self,
        ins: &Ins<'_>,
        outs: &mut Outs<'_>,
        _: &CpuCtx<'_>,
    ) -> Result<Option<f64>, OpErr> {
        let (x, w, labels) = (ins.f("x")?, ins.f("w")?, ins.int("labels")?);
        let (tokens, vocab) = (labels.dims()[0], w.dims()[1]);
        // The CPU keeps the logits whole: it is the reference the chunks are checked against.
        let mut logits = Dense::<f64>::zeros(vec![tokens, vocab]);
        linear_forward_cpu(x, w, &mut logits, Output::Overwrite)?;
        if self.p.biased {
            let b = ins.f("b")?;
            let biased: Vec<f64> = logits
                .values()
                .iter()
                .enumerate()
                .map(|(i, &v)| v + b.get(&[i % vocab]))
                .collect();
            logits.scatter(&biased);
        }
        if !self.backward {
            let [loss] = outs.outs(["loss"])?;
            let mean = cross_entropy_forward_cpu(self.p.ignore_index, &logits, labels, loss)?;
            return Ok(Some(mean.mean));
        }
        let mut dlogits = Dense::<f64>::zeros(vec![tokens, vocab]);
        cross_entropy_backward_cpu(self.p.ignore_index, 1.0, &logits, labels, &mut dlogits)?;
        if self.p.frozen {
            let [dx] = outs.outs(["dx"])?;
            linear_backward_cpu(x, w, &dlogits, Some((dx, Output::Overwrite)), None)?;
            return Ok(None);
        }
        if self.p.biased {
            let [db] = outs.outs(["db"])?;
            bias_backward_cpu(&dlogits, db, false)?;
        }
        let [dx, dw] = outs.outs(["dx", "dw"])?;
        linear_backward_cpu(
            x,
            w,
            &dlogits,
            Some((dx, Output::Overwrite)),
            Some((dw, Output::Overwrite)),
        )?;
        Ok(None)
    }

    fn gpu(
        &self,
        args: &Args<&BoundOperand>,
        ctx: &mut BuildCtx<'_>,
    ) -> Result<Box<dyn GpuKernel>, OpErr> {
        let x = args.read("x")?;
        let w = &args.read("w")?.view;
        let b = if self.p.biased {
            Some(&args.read("b")?.view)
        } else {
            None
        };
        let labels = args.read("labels")?;
        let labels_id = args.read_bound("labels")?.tensor;
        let key = ctx.graph.copied_from(labels_id);
        let tokens = labels.bound.shape()[0] as u32;
        let vocab = w.axes()[1]
            .extent
            .as_static()
            .ok_or_else(|| shape_error("the vocabulary is not a fixed extent".into()))?
            as u32;
        let elem = x.view.layout().elem();
        let slice = |v: &View, start: u32, len: u32| -> Result<View, OpErr> {
            let axis = v.axes()[0].name.clone();
            Ok(v.slice(&axis, start, len)?)
        };
        // The backward writes `dx` and `dw`, the forward the loss.
        let written = |role| -> Result<Option<&View>, OpErr> { Ok(Some(&args.write(role)?.view)) };
        let (dx, dw, loss) = match (self.backward, self.p.frozen) {
            (true, true) => (written("dx")?, None, None),
            (true, false) => (written("dx")?, written("dw")?, None),
            (false, _) => (None, None, written("loss")?),
        };
        // In mixed precision `dw`'s product may run on tensor cores, which overwrite: a later
        // chunk's product is made in scratch, then added into `dw` by this.
        let add = match (dw, elem) {
            (Some(dw), ElemType::F16) => Some(AddOp::accumulate(ctx.gpu, dw, dw)?),
            _ => None,
        };
        let mut built = Vec::new();
        for (start, len) in chunks(tokens, self.p.chunk) {
            let logits = LayoutSpec::new("head_logits")
                .axis("rows", len)
                .axis("vocab", vocab)
                .elem(elem)
                .build()
                .map_err(|e| shape_error(e.to_string()))?
                .view();
            let x_c = slice(&x.view, start, len)?;
            let forward = match b {
                Some(b) => LinearOp::new_biased(ctx.gpu, &x_c, w, b, &logits)?,
                None => LinearOp::new(ctx.gpu, &x_c, w, &logits)?,
            };
            let labels_c = slice(&labels.view, start, len)?;
            let loss_c = match loss {
                Some(l) => slice(l, start, len)?,
                // The backward writes no loss; the op is built with the labels' rows.
                None => LayoutSpec::new("head_loss")
                    .axis("rows", len)
                    .build()
                    .map_err(|e| shape_error(e.to_string()))?
                    .view(),
            };
            let ce =
                CrossEntropyOp::new(ctx.gpu, &logits, &labels_c, &loss_c, self.p.ignore_index)?;
            let grads = match dx {
                Some(dx) => {
                    let dx_c = slice(dx, start, len)?;
                    Some(Grads {
                        input: LinearOp::new(ctx.gpu, &dx_c, w, &logits)?,
                        weight: dw
                            .map(|dw| LinearOp::new(ctx.gpu, &x_c, dw, &logits))
                            .transpose()?,
                        bias: match (self.p.biased, self.p.frozen) {
                            (true, false) => Some(BiasOp::new(
                                ctx.gpu,
                                &logits,
                                &args.write("db")?.view,
                                &logits,
                            )?),
                            _ => None,
                        },
                        dx: dx_c,
                    })
                }
                None => None,
            };
            built.push(Chunk {
                len,
                bytes: logits_bytes(len, vocab, elem),
                x: x_c,
                labels: labels_c,
                loss: loss_c,
                logits,
                forward,
                ce,
                grads,
            });
        }
        let saved = if let Some(loss) = loss {
            let total = CrossEntropyTotal::new(ctx.gpu, &labels.view, loss, self.p.ignore_index)?;
            let saved = Arc::new(Saved {
                chunks: built
                    .iter()
                    .map(|c| c.ce.state(ctx.gpu, c.len))
                    .collect::<Result<_, _>>()?,
                all: total.state(ctx.gpu, tokens)?,
                total,
            });
            ctx.share(key, Arc::clone(&saved));
            saved
        } else {
            ctx.find::<Saved>(key).ok_or_else(|| {
                shape_error(format!(
                    "no head loss over `{}` comes before its backward",
                    ctx.graph.tensor(labels_id).name
                ))
            })?
        };
        Ok(Box::new(Kernel {
            p: self.p,
            backward: self.backward,
            chunks: built,
            add,
            saved,
        }))
    }
}

fn shape_error(detail: String) -> OpErr {
    OpErr::Shape { op: OP, detail }
}

/// The bytes of `rows` rows of logits over `vocab` in `elem`.
fn logits_bytes(rows: u32, vocab: u32, elem: ElemType) -> u64 {
    u64::from(rows) * u64::from(vocab) * u64::from(elem.size_bytes())
}

/// What the forward leaves for the backward: each chunk's log-sum-exps, and the mean and
/// count over all tokens.
struct Saved {
    chunks: Vec<CrossEntropyState>,
    all: CrossEntropyState,
    total: CrossEntropyTotal,
}

/// The backward's products of one chunk, and its rows of `dx`.
struct Grads {
    input: LinearOp,
    /// `dw`'s (none where the weight is frozen).
    weight: Option<LinearOp>,
    bias: Option<BiasOp>,
    dx: View,
}

/// The kernels of one chunk, built for its rows' views.
struct Chunk {
    len: u32,
    bytes: u64,
    x: View,
    labels: View,
    loss: View,
    logits: View,
    forward: LinearOp,
    ce: CrossEntropyOp,
    grads: Option<Grads>,
}

struct Kernel {
    p: HeadLoss,
    backward: bool,
    chunks: Vec<Chunk>,
    /// Where `dw`'s product may run on tensor cores, which only overwrite: the sum that adds a
    /// later chunk's product, made in scratch, into `dw`.
    add: Option<AddOp>,
    saved: Arc<Saved>,
}

impl Kernel {
    /// Records chunk `c`'s logits into `logits`.
    fn logits(
        &self,
        c: &Chunk,
        batch: &mut Batch<'_>,
        args: &Args<GpuArg<'_>>,
        logits: &GpuArg<'_>,
    ) -> Result<(), OpErr> {
        let (x, w) = (args.read("x")?.through(&c.x)?, args.read("w")?);
        if self.p.biased {
            c.forward
                .forward_biased(batch, &x, w, args.read("b")?, logits)
        } else {
            c.forward.forward(batch, &x, w, logits, Output::Overwrite)
        }
    }
}

impl Kernel {
    /// Records chunk `k`'s product into `dw`: the first overwrites, the later ones add.
    fn weight_grad(
        &self,
        batch: &mut Batch<'_>,
        k: usize,
        weight: &LinearOp,
        x: &GpuArg<'_>,
        dw: &GpuArg<'_>,
        dlogits: &GpuArg<'_>,
    ) -> Result<(), OpErr> {
        match (&self.add, k) {
            (_, 0) => weight.backward(batch, x, dw, dlogits, None, Some((dw, Output::Overwrite))),
            // Tensor cores overwrite: the chunk's product goes to scratch, then into `dw`.
            (Some(add), _) if weight.tensor_cores()[2] => {
                let bytes = dw.bound_view().len() * u64::from(dw.elem().size_bytes());
                let part = batch.scratch::<u8>(bytes as usize)?;
                let part = dw.with_buffer(&part)?;
                weight.backward(
                    batch,
                    x,
                    &part,
                    dlogits,
                    None,
                    Some((&part, Output::Overwrite)),
                )?;
                add.add_into(batch, &part, dw)
            }
            _ => weight.backward(batch, x, dw, dlogits, None, Some((dw, Output::Accumulate))),
        }
    }
}

impl GpuKernel for Kernel {
    fn record(
        &self,
        batch: &mut Batch<'_>,
        args: &Args<GpuArg<'_>>,
        ctx: &RecordCtx<'_>,
    ) -> Result<(), OpErr> {
        let labels = args.read("labels")?;
        for (k, c) in self.chunks.iter().enumerate() {
            let buffer = batch.scratch::<u8>(c.bytes as usize)?;
            let logits = GpuArg::new(&buffer, &c.logits, &[])?;
            self.logits(c, batch, args, &logits)?;
            let labels_c = labels.through(&c.labels)?;
            let state = &self.saved.chunks[k];
            match &c.grads {
                None => {
                    let loss = args.write("loss")?.through(&c.loss)?;
                    c.ce.forward_rows(batch, &logits, &labels_c, &loss, state)?;
                }
                Some(g) => {
                    let grad = batch.scratch::<u8>(c.bytes as usize)?;
                    let dlogits = GpuArg::new(&grad, &c.logits, &[])?;
                    let all = &self.saved.all;
                    c.ce.backward_counted(
                        batch,
                        &logits,
                        &labels_c,
                        state,
                        all,
                        ctx.loss_scale,
                        &dlogits,
                    )?;
                    let (x, w) = (args.read("x")?.through(&c.x)?, args.read("w")?);
                    let dx = args.write("dx")?.through(&g.dx)?;
                    g.input.backward(
                        batch,
                        &dx,
                        w,
                        &dlogits,
                        Some((&dx, Output::Overwrite)),
                        None,
                    )?;
                    if let Some(weight) = &g.weight {
                        self.weight_grad(batch, k, weight, &x, args.write("dw")?, &dlogits)?;
                    }
                    if let Some(bias) = &g.bias {
                        bias.backward(batch, &dlogits, args.write("db")?, k > 0)?;
                    }
                }
            }
            // The next chunk may take this one's scratch: the GPU runs it after this one.
            batch.release_scratch();
        }
        if !self.backward {
            let loss = args.write("loss")?;
            self.saved
                .total
                .record(batch, labels, loss, &self.saved.all)?;
        }
        Ok(())
    }

    fn tune(
        &self,
        gpu: &Gpu,
        args: &Args<GpuArg<'_>>,
        _: &RecordCtx<'_>,
    ) -> Result<Option<bool>, OpErr> {
        let mut cores = false;
        for c in &self.chunks {
            let buffer = GpuBuffer::scratch::<u8>(gpu, c.bytes as usize)?;
            let logits = GpuArg::new(&buffer, &c.logits, &[])?;
            let (x, w) = (args.read("x")?.through(&c.x)?, args.read("w")?);
            c.forward.tune(gpu, &x, w, &logits)?;
            cores |= c.forward.tensor_cores().contains(&true);
            if let Some(g) = &c.grads {
                let dx = args.write("dx")?.through(&g.dx)?;
                g.input.tune(gpu, &dx, w, &logits)?;
                cores |= g.input.tensor_cores()[1];
                if let Some(weight) = &g.weight {
                    weight.tune(gpu, &x, args.write("dw")?, &logits)?;
                    cores |= weight.tensor_cores()[2];
                }
            }
        }
        Ok(Some(cores))
    }

    fn reads_loss_scale(&self) -> bool {
        self.backward
    }

    fn loss(&self) -> Option<&GpuBuffer> {
        (!self.backward).then(|| self.saved.all.mean_buffer())
    }
}
