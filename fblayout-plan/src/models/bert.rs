//! BERT encoders, as Hugging Face's `BertModel` and `BertForSequenceClassification` compute
//! them (all-MiniLM-L6-v2 among them).
//!
//! Token, position and token-type ids are embedded with learned tables and summed, then
//! normalised (`bert.embeddings.LayerNorm`); every block is post-norm:
//!
//! - `q`, `k`, `v` = `x·W + b` (three projections with biases), attention over them with the
//!   padding keys of `mask` hidden ([`Op::AttentionSeparate`] with `padded`);
//!   `x = LN(x + ctx·W_o + b)`;
//! - `x = LN(x + GELU(x·W_i + b)·W_o + b)` (`hidden_act = "gelu"` is the exact, erf form);
//!
//! with LayerNorm's ε from the config. The last block's output is the last hidden state,
//! `hidden` (what a sentence embedding pools). The classification head is the pooler
//! `tanh(h·W_p + b)` of the `[CLS]` row and the classifier `·W_c + b`, then the cross-entropy
//! against the label, averaged over the batch. The pooler and classifier are applied to every
//! row and the labels of every row but the first are ignored (`labels` holds the class at
//! position 0 and [`IGNORED`] elsewhere, as [`class_labels`] writes it), so the loss and
//! every gradient are exactly those of the `[CLS]` rows; the other rows' head outputs are
//! computed and unused.
//!
//! Parameters carry the Hugging Face names of `BertForSequenceClassification`
//! (`bert.encoder.layer.0.attention.self.query.weight`, …, `classifier.weight`); a
//! `BertModel` checkpoint, saved without the `bert.` prefix, maps onto them by its name map.
//! Linear weights are `[d_in, d_out]` in the graph, `nn.Linear`'s transpose.

use super::blocks::{Blocks, at_least_one, heads_divide, positive_eps, train};
use crate::graph::{Act, Graph, GraphError, Op, TensorId};

/// The label of a row that counts for nothing (every row but the `[CLS]` one).
pub const IGNORED: u32 = u32::MAX;

/// BERT's sizes and settings.
///
/// ```
/// use fblayout_plan::models::bert::{BertConfig, build};
///
/// let g = build(&BertConfig::new(100, 32, 4, 3).with_layers(2))?;
/// assert!(g.find("bert.encoder.layer.1.attention.self.query.weight").is_some());
/// assert!(g.find("classifier.weight").is_some());
/// # Ok::<(), fblayout_plan::graph::GraphError>(())
/// ```
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct BertConfig {
    /// Vocabulary size.
    pub vocab: u32,
    /// The position table's size.
    pub max_positions: u32,
    /// The token-type (segment) table's size.
    pub type_vocab: u32,
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
    /// The classifier's outputs.
    pub labels: u32,
}

impl BertConfig {
    /// BERT of `vocab` tokens, `hidden` wide with `heads` heads, classifying into `labels`
    /// classes; the rest as `transformers`' defaults: 512 positions, 2 token types, a
    /// feed-forward of `4 · hidden`, one block, ε 10⁻¹², exact GELU.
    pub fn new(vocab: u32, hidden: u32, heads: u32, labels: u32) -> Self {
        Self {
            vocab,
            max_positions: 512,
            type_vocab: 2,
            hidden,
            heads,
            ffn: 4 * hidden,
            layers: 1,
            eps: 1e-12,
            activation: Act::Gelu,
            labels,
        }
    }

    /// With a position table of `max_positions`.
    pub fn with_max_positions(mut self, max_positions: u32) -> Self {
        self.max_positions = max_positions;
        self
    }

    /// With a token-type table of `type_vocab`.
    pub fn with_type_vocab(mut self, type_vocab: u32) -> Self {
        self.type_vocab = type_vocab;
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
            "bert",
            &[
                ("vocab", self.vocab),
                ("max_positions", self.max_positions),
                ("type_vocab", self.type_vocab),
                ("hidden", self.hidden),
                ("heads", self.heads),
                ("ffn", self.ffn),
                ("layers", self.layers),
                ("labels", self.labels),
            ],
        )?;
        heads_divide("bert", self.hidden, self.heads)?;
        positive_eps("bert", self.eps)
    }
}

/// The name of the last hidden state `[batch, seq, hidden]` in the graph of a config with
/// `layers` blocks: the last block's output.
pub fn last_hidden(layers: u32) -> String {
    format!("l{}.out", layers.saturating_sub(1))
}

/// The graph's `labels` `[batch, seq]` (row-major) for one class per sequence: the class at
/// position 0 (the `[CLS]` row) and [`IGNORED`] elsewhere.
pub fn class_labels(classes: &[u32], seq: usize) -> Vec<u32> {
    classes
        .iter()
        .flat_map(|&c| {
            std::iter::once(c).chain(std::iter::repeat_n(IGNORED, seq.saturating_sub(1)))
        })
        .collect()
}

/// BERT's training graph for sequence classification (see the module docs): forward, loss,
/// backward and AdamW. Inputs `[batch, seq]` of `u32`: `ids`, `token_types`, `positions`,
/// `mask` (1 a token, 0 padding) and `labels` ([`class_labels`]).
pub fn build(config: &BertConfig) -> Result<Graph, GraphError> {
    train(forward(config)?)
}

/// BERT's forward and loss, without the backward and AdamW: what a transform of the forward
/// ([`lora`](crate::lora)) rewrites before [`build`]'s backward and AdamW finish it.
pub fn forward(config: &BertConfig) -> Result<Graph, GraphError> {
    config.check()?;
    let c = config;
    let mut b = Blocks::new();
    let ids = b.tokens("ids")?;
    let token_types = b.tokens("token_types")?;
    let positions = b.tokens("positions")?;
    let mask = b.tokens("mask")?;
    let labels = b.tokens("labels")?;
    let embed = |b: &mut Blocks, table: &str, rows: (&str, u32), ids: TensorId, name: &str| {
        let w = b.param(
            &format!("bert.embeddings.{table}.weight"),
            &[rows, ("hidden", c.hidden)],
        )?;
        let y = b.act(name, c.hidden)?;
        b.g.push(Op::Embedding, &[ids, w], &[y])?;
        Ok::<_, GraphError>(y)
    };
    let word = embed(&mut b, "word_embeddings", ("vocab", c.vocab), ids, "word")?;
    let pos = embed(
        &mut b,
        "position_embeddings",
        ("position", c.max_positions),
        positions,
        "pos",
    )?;
    let typ = embed(
        &mut b,
        "token_type_embeddings",
        ("token_type", c.type_vocab),
        token_types,
        "token_type",
    )?;
    let sum = b.add("embed_sum", word, pos)?;
    let sum = b.add("embed_all", sum, typ)?;
    let ln = |p: &str| {
        [
            format!("{p}.LayerNorm.weight"),
            format!("{p}.LayerNorm.bias"),
        ]
    };
    let [w, bias] = ln("bert.embeddings");
    let mut x = b.layer_norm([&w, &bias], "embed", sum, c.eps)?;
    for l in 0..c.layers {
        let p = |s: &str| format!("bert.encoder.layer.{l}.{s}");
        let a = |s: &str| format!("l{l}.{s}");
        let dense = |b: &mut Blocks, module: &str, name: &str, x: TensorId, out: u32| {
            let y = b.linear(
                &p(&format!("{module}.weight")),
                &a(&format!("{name}.lin")),
                x,
                out,
            )?;
            b.bias(&p(&format!("{module}.bias")), &a(name), y)
        };
        let q = dense(&mut b, "attention.self.query", "q", x, c.hidden)?;
        let k = dense(&mut b, "attention.self.key", "k", x, c.hidden)?;
        let v = dense(&mut b, "attention.self.value", "v", x, c.hidden)?;
        let attention = Op::AttentionSeparate {
            heads: c.heads,
            kv_heads: c.heads,
            causal: false,
            padded: true,
        };
        let ctx = b.attention(&a("attn"), attention, &[q, k, v, mask], c.heads, c.hidden)?;
        let o = dense(&mut b, "attention.output.dense", "attn_out", ctx, c.hidden)?;
        let r = b.add(&a("res1"), o, x)?;
        let [w, bias] = ln(&p("attention.output"));
        x = b.layer_norm([&w, &bias], &a("attn_ln"), r, c.eps)?;
        let up = dense(&mut b, "intermediate.dense", "up", x, c.ffn)?;
        let act = b.activation(c.activation, &a("act"), up)?;
        let down = dense(&mut b, "output.dense", "down", act, c.hidden)?;
        let r = b.add(&a("res2"), down, x)?;
        let [w, bias] = ln(&p("output"));
        x = b.layer_norm([&w, &bias], &last_hidden(l + 1), r, c.eps)?;
    }
    let pooled = b.linear("bert.pooler.dense.weight", "pool.lin", x, c.hidden)?;
    let pooled = b.bias("bert.pooler.dense.bias", "pool.pre", pooled)?;
    let pooled = b.activation(Act::Tanh, "pooled", pooled)?;
    let logits = b.linear("classifier.weight", "logits.lin", pooled, c.labels)?;
    let logits = b.bias("classifier.bias", "logits", logits)?;
    b.forward(logits, labels)
}
