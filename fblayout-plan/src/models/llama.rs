//! The Llama family's decoder (Llama, Mistral, and Qwen2 without its biases), as
//! Hugging Face's `LlamaForCausalLM` computes it.
//!
//! Token ids are embedded (no learned positions), then every block is pre-norm:
//!
//! - `h = RMSNorm(x)`; `q = h·Wq`, `k = h·Wk`, `v = h·Wv` (separate projections, the keys and
//!   values with `kv_heads ≤ heads` heads: grouped-query attention); `q` and `k` rotated by
//!   their tokens' positions (RoPE, [`Op::Rope`], with the tables as graph constants);
//!   causal attention ([`Op::AttentionSeparate`]); `x = x + ctx·Wo`;
//! - `h = RMSNorm(x)`; `x = x + SwiGLU(h·Wg, h·Wu)·Wd`;
//!
//! then a final RMSNorm and the language-model head `h·W_head` (untied), and a cross-entropy
//! against labels (`u32::MAX` counts for nothing; a caller training next-token prediction
//! passes each position the next token).
//!
//! Parameters carry the Hugging Face names (`model.layers.0.self_attn.q_proj.weight`, …) so a
//! checkpoint maps onto them by name; a linear layer's weight is stored `[d_in, d_out]`, the
//! transpose of the checkpoint's `[out, in]`.

use fblayout_kernels::ops::{RopeScaling, rope_tables};

use super::blocks::{Blocks, at_least_one, train};
use crate::graph::{Graph, GraphError, Op};

/// A Llama-family decoder's sizes and settings.
///
/// ```
/// use fblayout_plan::models::llama::{LlamaConfig, build};
///
/// let config = LlamaConfig::new(128, 64, 4).with_kv_heads(2).with_layers(2);
/// let g = build(&config)?;
/// assert!(g.find("model.layers.1.self_attn.k_proj.weight").is_some());
/// assert_eq!(g.tensor(g.find("model.layers.1.self_attn.k_proj.weight").unwrap()).axes.len(), 2);
/// # Ok::<(), fblayout_plan::graph::GraphError>(())
/// ```
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct LlamaConfig {
    /// Vocabulary size.
    pub vocab: u32,
    /// Hidden size.
    pub hidden: u32,
    /// Query heads.
    pub heads: u32,
    /// Key and value heads (a divisor of `heads`).
    pub kv_heads: u32,
    /// The size of one head.
    pub head_dim: u32,
    /// The feed-forward's inner size.
    pub ffn: u32,
    /// Blocks.
    pub layers: u32,
    /// RMSNorm's ε.
    pub eps: f32,
    /// RoPE's base.
    pub rope_theta: f64,
    /// RoPE's position scaling.
    pub rope_scaling: RopeScaling,
    /// The longest sequence (the rows of RoPE's tables).
    pub max_positions: u32,
    /// Where set, the head and its cross-entropy are one operation that makes the logits this
    /// many tokens at a time ([`Op::HeadLoss`]).
    pub head_chunk: Option<u32>,
}

impl LlamaConfig {
    /// A decoder of `vocab` tokens, `hidden` wide with `heads` heads; the rest defaults as
    /// Llama's does: as many key/value heads, heads of `hidden / heads`, a feed-forward of
    /// `8/3 · hidden` rounded up to a multiple of 8, one block, ε 10⁻⁶, θ 10 000, 2048
    /// positions.
    pub fn new(vocab: u32, hidden: u32, heads: u32) -> Self {
        Self {
            vocab,
            hidden,
            heads,
            kv_heads: heads,
            head_dim: hidden.checked_div(heads).unwrap_or(0),
            ffn: (8 * hidden / 3).div_ceil(8) * 8,
            layers: 1,
            eps: 1e-6,
            rope_theta: 10_000.0,
            rope_scaling: RopeScaling::None,
            max_positions: 2048,
            head_chunk: None,
        }
    }

    /// With the head and its loss fused, the logits made `chunk` tokens at a time.
    pub fn with_head_chunk(mut self, chunk: u32) -> Self {
        self.head_chunk = Some(chunk);
        self
    }

    /// With `kv_heads` key/value heads.
    pub fn with_kv_heads(mut self, kv_heads: u32) -> Self {
        self.kv_heads = kv_heads;
        self
    }

    /// With heads of `head_dim`.
    pub fn with_head_dim(mut self, head_dim: u32) -> Self {
        self.head_dim = head_dim;
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

    /// With RMSNorm's ε `eps`.
    pub fn with_eps(mut self, eps: f32) -> Self {
        self.eps = eps;
        self
    }

    /// With RoPE's base `theta` and position scaling `scaling`.
    pub fn with_rope(mut self, theta: f64, scaling: RopeScaling) -> Self {
        self.rope_theta = theta;
        self.rope_scaling = scaling;
        self
    }

    /// With tables for `max_positions` positions.
    pub fn with_max_positions(mut self, max_positions: u32) -> Self {
        self.max_positions = max_positions;
        self
    }

    fn check(&self) -> Result<(), GraphError> {
        let shape = |detail: String| GraphError::Shape {
            op: "llama",
            detail,
        };
        at_least_one(
            "llama",
            &[
                ("vocab", self.vocab),
                ("hidden", self.hidden),
                ("heads", self.heads),
                ("kv_heads", self.kv_heads),
                ("head_dim", self.head_dim),
                ("ffn", self.ffn),
                ("layers", self.layers),
                ("max_positions", self.max_positions),
            ],
        )?;
        if !self.heads.is_multiple_of(self.kv_heads) {
            return Err(shape(format!(
                "{} query heads can't share {} key/value heads",
                self.heads, self.kv_heads
            )));
        }
        if !self.head_dim.is_multiple_of(2) {
            return Err(shape(format!(
                "heads of {} can't be rotated in pairs",
                self.head_dim
            )));
        }
        let positive = |x: f64| x.is_finite() && x > 0.0;
        let factor = match self.rope_scaling {
            RopeScaling::Linear { factor } => factor,
            _ => 1.0,
        };
        if !positive(self.rope_theta) || !positive(factor) || !positive(f64::from(self.eps)) {
            return Err(shape(format!(
                "RoPE's θ {} and scaling factor {factor} and RMSNorm's ε {} must be positive",
                self.rope_theta, self.eps
            )));
        }
        Ok(())
    }
}

/// The training graph of a Llama-family decoder (see the module docs): forward, loss,
/// backward and AdamW.
pub fn build(config: &LlamaConfig) -> Result<Graph, GraphError> {
    train(forward(config)?)
}

/// The forward of a Llama-family decoder and its loss, without the backward and AdamW: what a transform of
/// the forward ([`lora`](crate::lora)) rewrites before
/// [`derive_backward`](crate::graph::derive_backward) and
/// [`add_adamw`](crate::graph::optimizer::add_adamw) finish it.
pub fn forward(config: &LlamaConfig) -> Result<Graph, GraphError> {
    config.check()?;
    let c = config;
    let mut b = Blocks::new();
    let ids = b.tokens("ids")?;
    let positions = b.tokens("positions")?;
    let labels = b.tokens("labels")?;
    let (cos, sin) = rope_tables(c.rope_theta, c.head_dim, c.max_positions, c.rope_scaling);
    let pairs = [("position", c.max_positions), ("pair", c.head_dim / 2)];
    let wide = |t: Vec<f32>| t.into_iter().map(f64::from).collect::<Vec<_>>();
    let cos = b.g.add_constant("rope.cos", &pairs, wide(cos))?;
    let sin = b.g.add_constant("rope.sin", &pairs, wide(sin))?;
    let table = b.param(
        "model.embed_tokens.weight",
        &[("vocab", c.vocab), ("hidden", c.hidden)],
    )?;
    let mut x = b.act("embed", c.hidden)?;
    b.g.push(Op::Embedding, &[ids, table], &[x])?;
    let (q_width, kv_width) = (c.heads * c.head_dim, c.kv_heads * c.head_dim);
    for l in 0..c.layers {
        let p = format!("model.layers.{l}");
        let a = |s: &str| format!("l{l}.{s}");
        let h = b.rms_norm(
            &format!("{p}.input_layernorm.weight"),
            &a("attn_norm"),
            x,
            c.eps,
        )?;
        let q = b.linear(&format!("{p}.self_attn.q_proj.weight"), &a("q"), h, q_width)?;
        let k = b.linear(
            &format!("{p}.self_attn.k_proj.weight"),
            &a("k"),
            h,
            kv_width,
        )?;
        let v = b.linear(
            &format!("{p}.self_attn.v_proj.weight"),
            &a("v"),
            h,
            kv_width,
        )?;
        let q = b.rope(&a("q_rope"), q, c.heads, [positions, cos, sin])?;
        let k = b.rope(&a("k_rope"), k, c.kv_heads, [positions, cos, sin])?;
        let attention = Op::AttentionSeparate {
            heads: c.heads,
            kv_heads: c.kv_heads,
            causal: true,
            padded: false,
        };
        let ctx = b.attention(&a("attn"), attention, &[q, k, v], c.heads, q_width)?;
        let o = b.linear(
            &format!("{p}.self_attn.o_proj.weight"),
            &a("o"),
            ctx,
            c.hidden,
        )?;
        x = b.add(&a("res1"), x, o)?;
        let h = b.rms_norm(
            &format!("{p}.post_attention_layernorm.weight"),
            &a("mlp_norm"),
            x,
            c.eps,
        )?;
        let gate = b.linear(&format!("{p}.mlp.gate_proj.weight"), &a("gate"), h, c.ffn)?;
        let up = b.linear(&format!("{p}.mlp.up_proj.weight"), &a("up"), h, c.ffn)?;
        let act = b.act(&a("swiglu"), c.ffn)?;
        b.g.push(Op::Swiglu, &[gate, up], &[act])?;
        let down = b.linear(
            &format!("{p}.mlp.down_proj.weight"),
            &a("down"),
            act,
            c.hidden,
        )?;
        x = b.add(&a("res2"), x, down)?;
    }
    let h = b.rms_norm("model.norm.weight", "final_norm", x, c.eps)?;
    match c.head_chunk {
        None => {
            let logits = b.linear("lm_head.weight", "logits", h, c.vocab)?;
            b.forward(logits, labels)
        }
        Some(chunk) => {
            let w = b.param("lm_head.weight", &[("d_in", c.hidden), ("d_out", c.vocab)])?;
            b.fused_forward([h, w, labels], false, chunk)
        }
    }
}
