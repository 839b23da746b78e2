//! The shipped graphs: a BERT-style encoder and a GPT-style decoder, forward, backward and
//! AdamW.
//!
//! Both read token ids and position ids `[batch, seq]` (`u32`), embed them with learned tables,
//! run `layers` blocks and end in a language-model head and a cross-entropy against labels
//! `[batch, seq]`:
//!
//! - **encoder** (BERT): post-LayerNorm blocks — `x = LN(x + attention(x))`, `x = LN(x +
//!   FFN(x))` — with bidirectional attention and a GELU feed-forward;
//! - **decoder** (GPT-2): pre-LayerNorm blocks — `x = x + attention(LN(x))`, `x = x +
//!   FFN(LN(x))` — with causal attention, and a final LayerNorm before the head.
//!
//! Activations are `[batch, seq, width]`, weights `[d_in, d_out]`.
//!
//! [`llama`] builds the Llama family's decoder (RMSNorm, RoPE, grouped-query attention over
//! separate projections, SwiGLU) from its configuration, with Hugging Face's parameter names;
//! [`gpt2`] GPT-2's, and [`bert`] BERT's encoder with token types, attention masked by padding
//! and a sequence-classification head.

pub mod bert;
mod blocks;
pub mod gpt2;
pub mod llama;

use fblayout_core::layout::ElemType;

use crate::graph::optimizer::add_adamw;
use crate::graph::{Act, Dim, Graph, GraphError, HeadLoss, Op, Role, TensorId, derive_backward};

/// The sizes of a model.
///
/// Made with [`new`](Self::new) (or from [`MINI`](Self::MINI)) and the `with_*` setters, so
/// that a field added later takes its default instead of breaking every literal:
///
/// ```
/// use fblayout_plan::models::ModelConfig;
///
/// let tiny = ModelConfig::new(100, 32, 4).with_layers(2).with_ffn(64);
/// assert_eq!((tiny.hidden, tiny.ffn, tiny.layers, tiny.max_positions), (32, 64, 2, 512));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct ModelConfig {
    /// Vocabulary size.
    pub vocab: u32,
    /// Position-table size (the longest sequence).
    pub max_positions: u32,
    /// Hidden size.
    pub hidden: u32,
    /// Attention heads.
    pub heads: u32,
    /// Feed-forward size.
    pub ffn: u32,
    /// Blocks.
    pub layers: u32,
    /// Where set, the language-model head and its cross-entropy are one operation that makes
    /// the logits this many tokens at a time and never stores them whole ([`Op::HeadLoss`]);
    /// unset, the head writes the logits and a cross-entropy reads them.
    pub head_chunk: Option<u32>,
    /// Whether each residual addition is fused into the norm after it (the default): one
    /// kernel adds, writes the sum and normalises it, and its backward adds the sum's gradient
    /// from elsewhere ([`Op::LayerNorm`]'s `residual`).
    pub fused_norms: bool,
}

impl ModelConfig {
    /// A small BERT (MiniLM-sized: hidden 384, 12 heads, FFN 1536, 6 layers).
    pub const MINI: ModelConfig = ModelConfig {
        vocab: 30522,
        max_positions: 512,
        hidden: 384,
        heads: 12,
        ffn: 1536,
        layers: 6,
        head_chunk: None,
        fused_norms: true,
    };

    /// A model of `vocab` tokens, `hidden` wide with `heads` attention heads; the rest
    /// defaults: a feed-forward of `4 · hidden`, one block, 512 positions.
    pub const fn new(vocab: u32, hidden: u32, heads: u32) -> Self {
        Self {
            vocab,
            max_positions: 512,
            hidden,
            heads,
            ffn: 4 * hidden,
            layers: 1,
            head_chunk: None,
            fused_norms: true,
        }
    }

    /// This config with the residual additions fused into the norms after them, or not (see
    /// [`ModelConfig::fused_norms`]).
    pub const fn with_fused_norms(mut self, fused: bool) -> Self {
        self.fused_norms = fused;
        self
    }

    /// This config with the head and its loss fused, the logits made `chunk` tokens at a time
    /// (see [`ModelConfig::head_chunk`]).
    pub const fn with_head_chunk(mut self, chunk: u32) -> Self {
        self.head_chunk = Some(chunk);
        self
    }

    /// This config with `vocab` tokens.
    pub const fn with_vocab(mut self, vocab: u32) -> Self {
        self.vocab = vocab;
        self
    }

    /// This config with a position table of `max_positions`.
    pub const fn with_max_positions(mut self, max_positions: u32) -> Self {
        self.max_positions = max_positions;
        self
    }

    /// This config `hidden` wide.
    pub const fn with_hidden(mut self, hidden: u32) -> Self {
        self.hidden = hidden;
        self
    }

    /// This config with `heads` attention heads.
    pub const fn with_heads(mut self, heads: u32) -> Self {
        self.heads = heads;
        self
    }

    /// This config with a feed-forward of `ffn`.
    pub const fn with_ffn(mut self, ffn: u32) -> Self {
        self.ffn = ffn;
        self
    }

    /// This config with `layers` blocks.
    pub const fn with_layers(mut self, layers: u32) -> Self {
        self.layers = layers;
        self
    }

    fn check(&self) -> Result<(), GraphError> {
        blocks::heads_divide("model", self.hidden, self.heads)?;
        blocks::at_least_one(
            "model",
            &[
                ("vocab", self.vocab),
                ("max_positions", self.max_positions),
                ("ffn", self.ffn),
                ("layers", self.layers),
            ],
        )
    }
}

/// Which model.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Model {
    /// BERT-style, post-LayerNorm, bidirectional.
    Encoder,
    /// GPT-style, pre-LayerNorm, causal.
    Decoder,
}

/// LayerNorm's ε in both models.
pub const EPS: f32 = 1e-5;

/// The training graph of `model` of `config`: forward, loss, backward and the optimizer pass.
pub fn build(model: Model, config: ModelConfig) -> Result<Graph, GraphError> {
    config.check()?;
    let mut b = Builder {
        g: Graph::new(),
        c: config,
    };
    let ids = b.input("ids")?;
    let positions = b.input("positions")?;
    let labels = b.input("labels")?;
    let tokens = b.param(
        "tok_embedding",
        &[("vocab", config.vocab), ("hidden", config.hidden)],
    )?;
    let pos_table = b.param(
        "pos_embedding",
        &[
            ("position", config.max_positions),
            ("hidden", config.hidden),
        ],
    )?;
    let t = b.embedding("tok", ids, tokens)?;
    let p = b.embedding("pos", positions, pos_table)?;
    let mut x = b.add("embed", t, p)?;
    if model == Model::Encoder {
        x = b.layer_norm("embed_ln", x)?;
    }
    for l in 0..config.layers {
        let n = |s: &str| format!("l{l}.{s}");
        x = match model {
            Model::Encoder => {
                let a = b.attention(&n("attn"), x, false)?;
                let h = b.add(&n("res1"), x, a)?;
                let h = b.layer_norm(&n("ln1"), h)?;
                let f = b.feed_forward(&n("ffn"), h)?;
                let h2 = b.add(&n("res2"), h, f)?;
                b.layer_norm(&n("ln2"), h2)?
            }
            Model::Decoder => {
                let h = b.layer_norm(&n("ln1"), x)?;
                let a = b.attention(&n("attn"), h, true)?;
                let x1 = b.add(&n("res1"), x, a)?;
                let h2 = b.layer_norm(&n("ln2"), x1)?;
                let f = b.feed_forward(&n("ffn"), h2)?;
                b.add(&n("res2"), x1, f)?
            }
        };
    }
    if model == Model::Decoder {
        x = b.layer_norm("final_ln", x)?;
    }
    let biased = model == Model::Encoder;
    match config.head_chunk {
        None => {
            let logits = b.linear("head", x, config.vocab, biased)?;
            let loss = b.loss()?;
            let ce = Op::CrossEntropy {
                ignore_index: u32::MAX,
            };
            b.g.push(ce, &[logits, labels], &[loss])?;
        }
        Some(chunk) => {
            let mut inputs = vec![
                x,
                b.param(
                    "head.w",
                    &[("d_in", config.hidden), ("d_out", config.vocab)],
                )?,
            ];
            if biased {
                inputs.push(b.param("head.b", &[("hidden", config.vocab)])?);
            }
            inputs.push(labels);
            let loss = b.loss()?;
            let head = HeadLoss {
                ignore_index: u32::MAX,
                transposed: false,
                biased,
                chunk,
                frozen: false,
            };
            b.g.push(Op::HeadLoss(head), &inputs, &[loss])?;
        }
    }
    let mut g = b.g;
    derive_backward(&mut g)?;
    add_adamw(&mut g)?;
    Ok(g)
}

/// Adds tensors and operations with the models' naming and shapes.
struct Builder {
    g: Graph,
    c: ModelConfig,
}

impl Builder {
    fn input(&mut self, name: &str) -> Result<TensorId, GraphError> {
        self.g.add_tensor(
            name,
            &[("batch", Dim::Batch), ("seq", Dim::Seq)],
            ElemType::U32,
            Role::Input,
        )
    }

    /// The per-token loss `[batch, seq]`.
    fn loss(&mut self) -> Result<TensorId, GraphError> {
        blocks::loss_tensor(&mut self.g)
    }

    fn param(&mut self, name: &str, axes: &[(&str, u32)]) -> Result<TensorId, GraphError> {
        let axes: Vec<(&str, Dim)> = axes.iter().map(|&(n, e)| (n, Dim::Fixed(e))).collect();
        self.g.add_tensor(name, &axes, ElemType::F32, Role::Param)
    }

    /// An activation `[batch, seq, width]`.
    fn act(&mut self, name: &str, width: u32) -> Result<TensorId, GraphError> {
        self.g.add_tensor(
            name,
            &[
                ("batch", Dim::Batch),
                ("seq", Dim::Seq),
                ("hidden", Dim::Fixed(width)),
            ],
            ElemType::F32,
            Role::Activation,
        )
    }

    fn width(&self, t: TensorId) -> u32 {
        match self.g.tensor(t).axes.last().map(|a| a.dim) {
            Some(Dim::Fixed(n)) => n,
            _ => 0,
        }
    }

    fn embedding(
        &mut self,
        name: &str,
        ids: TensorId,
        table: TensorId,
    ) -> Result<TensorId, GraphError> {
        let out = self.act(name, self.c.hidden)?;
        self.g.push(Op::Embedding, &[ids, table], &[out])?;
        Ok(out)
    }

    fn add(&mut self, name: &str, a: TensorId, b: TensorId) -> Result<TensorId, GraphError> {
        let y = self.act(name, self.width(a))?;
        self.g.push(Op::Add, &[a, b], &[y])?;
        Ok(y)
    }

    fn layer_norm(&mut self, name: &str, x: TensorId) -> Result<TensorId, GraphError> {
        let w = self.width(x);
        let gamma = self.param(&format!("{name}.gamma"), &[("hidden", w)])?;
        let beta = self.param(&format!("{name}.beta"), &[("hidden", w)])?;
        let y = self.act(name, w)?;
        let stat = |g: &mut Graph, s: &str| {
            g.add_tensor(
                format!("{name}.{s}"),
                &[("batch", Dim::Batch), ("seq", Dim::Seq)],
                ElemType::F32,
                Role::Activation,
            )
        };
        let mean = stat(&mut self.g, "mean")?;
        let rstd = stat(&mut self.g, "rstd")?;
        let op = Op::LayerNorm {
            eps: EPS,
            residual: false,
        };
        let fuse = self.c.fused_norms;
        self.g
            .push_norm(op, x, &[gamma, beta], &[y, mean, rstd], fuse)?;
        Ok(y)
    }

    /// `x·w (+ b)` with `w [width(x), out]`.
    fn linear(
        &mut self,
        name: &str,
        x: TensorId,
        out: u32,
        bias: bool,
    ) -> Result<TensorId, GraphError> {
        let w = self.param(
            &format!("{name}.w"),
            &[("d_in", self.width(x)), ("d_out", out)],
        )?;
        let lin = self.act(&format!("{name}.lin"), out)?;
        self.g.push(Op::Linear, &[x, w], &[lin])?;
        if !bias {
            return Ok(lin);
        }
        let b = self.param(&format!("{name}.b"), &[("hidden", out)])?;
        let y = self.act(name, out)?;
        self.g.push(Op::Bias, &[lin, b], &[y])?;
        Ok(y)
    }

    /// Self-attention with its projections: fused QKV, attention, output projection.
    fn attention(&mut self, name: &str, x: TensorId, causal: bool) -> Result<TensorId, GraphError> {
        let c = self.c;
        let qkv = self.linear(&format!("{name}.qkv"), x, 3 * c.hidden, true)?;
        let ctx = self.act(&format!("{name}.ctx"), c.hidden)?;
        let probs = self.g.add_tensor(
            format!("{name}.probs"),
            &[
                ("batch", Dim::Batch),
                ("heads", Dim::Fixed(c.heads)),
                ("seq_q", Dim::Seq),
                ("seq_k", Dim::Seq),
            ],
            ElemType::F32,
            Role::Activation,
        )?;
        self.g.push(
            Op::Attention {
                heads: c.heads,
                kv_heads: c.heads,
                causal,
            },
            &[qkv],
            &[ctx, probs],
        )?;
        self.linear(&format!("{name}.out"), ctx, c.hidden, true)
    }

    /// `GELU(x·w1 + b1)·w2 + b2`.
    fn feed_forward(&mut self, name: &str, x: TensorId) -> Result<TensorId, GraphError> {
        let c = self.c;
        let up = self.linear(&format!("{name}.up"), x, c.ffn, true)?;
        let g = self.act(&format!("{name}.gelu"), c.ffn)?;
        self.g.push(Op::Activation(Act::Gelu), &[up], &[g])?;
        self.linear(&format!("{name}.down"), g, c.hidden, true)
    }
}
