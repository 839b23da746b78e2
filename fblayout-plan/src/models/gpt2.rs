//! GPT-2, as Hugging Face's `GPT2LMHeadModel` computes it.
//!
//! Token and position ids are embedded with learned tables (`wte`, `wpe`) and summed; every
//! block is pre-norm:
//!
//! - `h = LN(x)`; the fused projection `qkv = h·W_attn + b` (queries, keys and values side by
//!   side, as `c_attn` stores them) read by causal attention through views
//!   ([`Op::Attention`]); `x = x + ctx·W_proj + b`;
//! - `h = LN(x)`; `x = x + GELU_tanh(h·W_fc + b)·W_proj + b`;
//!
//! then a final LayerNorm and the head, tied to the token table: `logits = h·wteᵀ`, the table
//! read through its transposed view ([`Op::LinearT`]), never copied; its gradient gathers the
//! head's and the embedding's contributions.
//!
//! Parameters carry the Hugging Face names (`transformer.h.0.attn.c_attn.weight`, …).
//! GPT-2's `Conv1D` stores its weights `[in, out]`, which is the graph's orientation: a
//! checkpoint's values are read as they are.

use super::blocks::{Blocks, at_least_one, heads_divide, positive_eps, train};
use crate::graph::{Act, Graph, GraphError, Op};

/// GPT-2's sizes and settings.
///
/// ```
/// use fblayout_plan::models::gpt2::{Gpt2Config, build};
///
/// let g = build(&Gpt2Config::new(100, 32, 4).with_layers(2))?;
/// // The head reads the token table: one parameter for both.
/// assert!(g.find("lm_head.weight").is_none());
/// assert!(g.find("transformer.wte.weight").is_some());
/// # Ok::<(), fblayout_plan::graph::GraphError>(())
/// ```
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct Gpt2Config {
    /// Vocabulary size.
    pub vocab: u32,
    /// The position table's size.
    pub max_positions: u32,
    /// Hidden size.
    pub hidden: u32,
    /// Attention heads.
    pub heads: u32,
    /// The feed-forward's inner size.
    pub ffn: u32,
    /// Blocks.
    pub layers: u32,
    /// LayerNorm's ε.
    pub eps: f32,
    /// The feed-forward's activation.
    pub activation: Act,
    /// Where set, the (tied) head and its cross-entropy are one operation that makes the
    /// logits this many tokens at a time ([`Op::HeadLoss`]).
    pub head_chunk: Option<u32>,
}

impl Gpt2Config {
    /// GPT-2 of `vocab` tokens, `hidden` wide with `heads` heads; the rest as GPT-2's
    /// defaults: 1024 positions, a feed-forward of `4 · hidden`, one block, ε 10⁻⁵, GELU's tanh
    /// form.
    pub fn new(vocab: u32, hidden: u32, heads: u32) -> Self {
        Self {
            vocab,
            max_positions: 1024,
            hidden,
            heads,
            ffn: 4 * hidden,
            layers: 1,
            eps: 1e-5,
            activation: Act::GeluTanh,
            head_chunk: None,
        }
    }

    /// With the head and its loss fused, the logits made `chunk` tokens at a time.
    pub fn with_head_chunk(mut self, chunk: u32) -> Self {
        self.head_chunk = Some(chunk);
        self
    }

    /// With a position table of `max_positions`.
    pub fn with_max_positions(mut self, max_positions: u32) -> Self {
        self.max_positions = max_positions;
        self
    }

    /// With a feed-forward of `ffn`.
    pub fn with_ffn(mut self, ffn: u32) -> Self {
        self.ffn = ffn;
        self
    }

    /// With `layers` blocks.
    pub fn with_layers(mut self, layers: u32) -> Self {
        self.layers = layers;
        self
    }

    /// With LayerNorm's ε `eps`.
    pub fn with_eps(mut self, eps: f32) -> Self {
        self.eps = eps;
        self
    }

    /// With the feed-forward's activation `activation`.
    pub fn with_activation(mut self, activation: Act) -> Self {
        self.activation = activation;
        self
    }

    fn check(&self) -> Result<(), GraphError> {
        at_least_one(
            "gpt2",
            &[
                ("vocab", self.vocab),
                ("max_positions", self.max_positions),
                ("hidden", self.hidden),
                ("heads", self.heads),
                ("ffn", self.ffn),
                ("layers", self.layers),
            ],
        )?;
        heads_divide("gpt2", self.hidden, self.heads)?;
        positive_eps("gpt2", self.eps)
    }
}

/// GPT-2's training graph (see the module docs): forward, loss, backward and AdamW.
pub fn build(config: &Gpt2Config) -> Result<Graph, GraphError> {
    train(forward(config)?)
}

/// The forward of GPT-2 and its loss, without the backward and AdamW: what a transform of
/// the forward ([`lora`](crate::lora)) rewrites before
/// [`derive_backward`](crate::graph::derive_backward) and
/// [`add_adamw`](crate::graph::optimizer::add_adamw) finish it.
pub fn forward(config: &Gpt2Config) -> Result<Graph, GraphError> {
    config.check()?;
    let c = config;
    let mut b = Blocks::new();
    let ids = b.tokens("ids")?;
    let positions = b.tokens("positions")?;
    let labels = b.tokens("labels")?;
    let wte = b.param(
        "transformer.wte.weight",
        &[("vocab", c.vocab), ("hidden", c.hidden)],
    )?;
    let wpe = b.param(
        "transformer.wpe.weight",
        &[("position", c.max_positions), ("hidden", c.hidden)],
    )?;
    let tok = b.act("tok", c.hidden)?;
    b.g.push(Op::Embedding, &[ids, wte], &[tok])?;
    let pos = b.act("pos", c.hidden)?;
    b.g.push(Op::Embedding, &[positions, wpe], &[pos])?;
    let mut x = b.add("embed", tok, pos)?;
    for l in 0..c.layers {
        let p = |s: &str| format!("transformer.h.{l}.{s}");
        let a = |s: &str| format!("l{l}.{s}");
        let ln = |s: &str| [p(&format!("{s}.weight")), p(&format!("{s}.bias"))];
        let [w1, b1] = ln("ln_1");
        let h = b.layer_norm([&w1, &b1], &a("ln_1"), x, c.eps)?;
        let qkv = b.linear(&p("attn.c_attn.weight"), &a("qkv.lin"), h, 3 * c.hidden)?;
        let qkv = b.bias(&p("attn.c_attn.bias"), &a("qkv"), qkv)?;
        let attention = Op::Attention {
            heads: c.heads,
            kv_heads: c.heads,
            causal: true,
        };
        let ctx = b.attention(&a("attn"), attention, &[qkv], c.heads, c.hidden)?;
        let o = b.linear(&p("attn.c_proj.weight"), &a("attn_out.lin"), ctx, c.hidden)?;
        let o = b.bias(&p("attn.c_proj.bias"), &a("attn_out"), o)?;
        x = b.add(&a("res1"), x, o)?;
        let [w2, b2] = ln("ln_2");
        let h = b.layer_norm([&w2, &b2], &a("ln_2"), x, c.eps)?;
        let up = b.linear(&p("mlp.c_fc.weight"), &a("fc.lin"), h, c.ffn)?;
        let up = b.bias(&p("mlp.c_fc.bias"), &a("fc"), up)?;
        let act = b.activation(c.activation, &a("gelu"), up)?;
        let down = b.linear(&p("mlp.c_proj.weight"), &a("mlp_out.lin"), act, c.hidden)?;
        let down = b.bias(&p("mlp.c_proj.bias"), &a("mlp_out"), down)?;
        x = b.add(&a("res2"), x, down)?;
    }
    let h = b.layer_norm(
        ["transformer.ln_f.weight", "transformer.ln_f.bias"],
        "ln_f",
        x,
        c.eps,
    )?;
    if let Some(chunk) = c.head_chunk {
        return b.fused_forward([h, wte, labels], true, chunk);
    }
    let logits = b.act("logits", c.vocab)?;
    b.g.push(Op::LinearT { scale: 1.0 }, &[h, wte], &[logits])?;
    b.forward(logits, labels)
}
