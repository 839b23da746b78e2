//! The operations of a training graph: the kernels' forward and backward halves.
//!
//! Every operation is one kernel (or one fused kernel pair) of `fblayout-kernels`, listed on
//! each variant as `inputs → outputs`; everything else about it — its operand roles, views,
//! access pattern, scratch, backward rule and kernels — is its contract, in one file of
//! [`ops`](crate::ops). A forward operation's backward is written by
//! [`derive_backward`](super::derive_backward) from the rules of [`Op::backward`]: which
//! backward operations it needs, and what they read (the forward tensors they read are the
//! ones the forward must save).

use std::fmt;

/// An elementwise activation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Act {
    /// GELU with the exact normal CDF.
    Gelu,
    /// GELU's tanh form.
    GeluTanh,
    /// SiLU.
    Silu,
    /// The hyperbolic tangent (BERT's pooler).
    Tanh,
}

/// Which part of a training step an operation belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Phase {
    /// Computes the loss.
    Forward,
    /// Computes gradients.
    Backward,
    /// Updates parameters.
    Optimizer,
}

impl Phase {
    /// The backward pass where `backward`, else the forward: the phase of an operation that
    /// comes as a forward and a backward twin.
    pub(crate) const fn forward_or_backward(backward: bool) -> Self {
        if backward {
            Self::Backward
        } else {
            Self::Forward
        }
    }
}

/// An operation (see the module docs for the operand order of each).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Op {
    /// `ids, table → out`: `out[b, s, :] = table[ids[b, s], :]`.
    Embedding,
    /// `x, w → y`: `y = x·w` over the last axis of `x` (tokens × d_in by d_in × d_out).
    Linear,
    /// `x, w → y`: `y = scale · x·wᵀ` with `w` stored `[d_out, d_in]` and read through its
    /// transposed view, never copied (a head tied to the embedding table; a checkpoint's
    /// orientation; LoRA's factors, `B`'s product scaled by `alpha / rank`). The factor is the
    /// product's own (its `alpha`): no pass of its own, and its backward's two products scale
    /// by it too.
    LinearT {
        /// The product's factor: 1 but for LoRA's `B`.
        scale: f32,
    },
    /// `x, b → y`: `y = x + b` with `b` along the last axis.
    Bias,
    /// `a, b → y`: `y = a + b`.
    Add,
    /// `x, γ, β → y, mean, rstd`: LayerNorm over the last axis; where `residual`,
    /// `x, res, γ, β → sum, y, mean, rstd`: LayerNorm of `sum = x + res`, a residual
    /// connection's addition done by the same kernel, which writes the sum as it reads it.
    LayerNorm {
        /// ε.
        eps: f32,
        /// Whether the residual connection before it is fused.
        residual: bool,
    },
    /// `x, γ → y, rstd`: RMSNorm over the last axis; where `residual`,
    /// `x, res, γ → sum, y, rstd`, as [`Op::LayerNorm`].
    RmsNorm {
        /// ε.
        eps: f32,
        /// Whether the residual connection before it is fused.
        residual: bool,
    },
    /// `x → y`: an elementwise activation.
    Activation(Act),
    /// `gate, up → y`: `y = silu(gate) · up`.
    Swiglu,
    /// `qkv → out, probs`: attention over the fused projection `[batch, seq, (heads + 2 kv_heads) · d]`,
    /// writing `[batch, seq, heads · d]` and saving the probabilities `[batch, heads, seq, seq]`.
    Attention {
        /// Query heads.
        heads: u32,
        /// Key/value heads.
        kv_heads: u32,
        /// Whether a query sees only the keys up to its own position.
        causal: bool,
    },
    /// `q, k, v → out, probs`: attention over separate projections, the queries
    /// `[batch, seq, heads · d]` and the keys and values `[batch, seq, kv_heads · d]`, writing
    /// `[batch, seq, heads · d]` and saving the probabilities `[batch, heads, seq, seq]`; where
    /// `padded`, `q, k, v, mask → out, probs`, the keys masked by padding.
    AttentionSeparate {
        /// Query heads.
        heads: u32,
        /// Key/value heads.
        kv_heads: u32,
        /// Whether a query sees only the keys up to its own position.
        causal: bool,
        /// Whether a fourth input `mask` `[batch, seq]` of `u32` (Hugging Face's
        /// `attention_mask`: 1 a token, 0 padding) hides the padding keys from every query.
        /// Not with `causal`.
        padded: bool,
    },
    /// `q, k, v, probs, dout → dq, dk, dv`.
    AttentionSeparateGrad {
        /// Query heads.
        heads: u32,
        /// Key/value heads.
        kv_heads: u32,
        /// Whether the forward was causal.
        causal: bool,
    },
    /// Attention that never stores its probabilities ([`FusedAttention`]): `qkv → out, lse`
    /// over a fused projection, or `q, k, v[, mask] → out, lse` over separate ones, saving the
    /// log-sum-exp of each query's scaled scores `lse` `[batch, heads, seq]` (`f32`) in place of
    /// the probabilities. [`Graph::with_fused_attention`](super::Graph::with_fused_attention)
    /// makes it from an [`Op::Attention`] or [`Op::AttentionSeparate`] of a training graph.
    FusedAttention(FusedAttention),
    /// `x, positions, cos, sin → y`: rotary position embedding of every head of `x`
    /// `[batch, seq, heads · head_dim]` by its token's position, from the constant tables `cos`
    /// and `sin` `[max_positions, head_dim / 2]`.
    Rope {
        /// Heads.
        heads: u32,
    },
    /// `logits, labels → loss`: per-row cross-entropy; labels equal to `ignore_index` count
    /// for nothing.
    CrossEntropy {
        /// The label that is skipped.
        ignore_index: u32,
    },
    /// `x, w[, b], labels → loss`: a language-model head and its cross-entropy in one,
    /// `loss = CE(x·w [+ b], labels)`, the logits made and reduced `chunk` tokens at a time and
    /// never stored whole (see `fblayout_plan::ops`' `head_loss`; models build it with
    /// [`ModelConfig::with_head_chunk`](crate::models::ModelConfig::with_head_chunk)).
    HeadLoss(HeadLoss),

    /// `ids, dout → dtable`: the embedding's scatter-add.
    EmbeddingGrad,
    /// `dy, w → dx`: `dx = dy·wᵀ`.
    LinearGradInput,
    /// `x, dy → dw`: `dw = xᵀ·dy`.
    LinearGradWeight,
    /// `dy, w → dx`: `dx = scale · dy·w` for a [`Op::LinearT`].
    LinearTGradInput {
        /// The forward's factor.
        scale: f32,
    },
    /// `x, dy → dw`: `dwᵀ = scale · xᵀ·dy`, written through `w`'s transposed view, for a
    /// [`Op::LinearT`].
    LinearTGradWeight {
        /// The forward's factor.
        scale: f32,
    },
    /// `dy → db`: the sum of `dy` over every axis but the last.
    BiasGrad,
    /// `x, γ, mean, rstd, dy → dx, dγ, dβ`; where `carry`, `x, γ, mean, rstd, dy, dsum →
    /// dx, dγ, dβ` with `dsum` (the gradient a fused residual's sum has from its other readers)
    /// added to `dx`, which no accumulation then needs to.
    LayerNormGrad {
        /// ε of the forward.
        eps: f32,
        /// Whether `dsum` is read and added.
        carry: bool,
    },
    /// `x, γ, rstd, dy → dx, dγ`; where `carry`, `x, γ, rstd, dy, dsum → dx, dγ`, as
    /// [`Op::LayerNormGrad`].
    RmsNormGrad {
        /// ε of the forward.
        eps: f32,
        /// Whether `dsum` is read and added.
        carry: bool,
    },
    /// `x, dy → dx`.
    ActivationGrad(Act),
    /// `gate, up, dy → dgate, dup`.
    SwigluGrad,
    /// `qkv, probs, dout → dqkv`.
    AttentionGrad {
        /// Query heads.
        heads: u32,
        /// Key/value heads.
        kv_heads: u32,
        /// Whether the forward was causal.
        causal: bool,
    },
    /// The backward of a [`Op::FusedAttention`]: `qkv, out, lse, dout → dqkv`, or `q, k, v[,
    /// mask], out, lse, dout → dq, dk, dv`, the probabilities recomputed from `lse`.
    FusedAttentionGrad(FusedAttention),
    /// `dy, positions, cos, sin → dx`: the rotation by the opposite angles.
    RopeGrad {
        /// Heads.
        heads: u32,
    },
    /// `logits, labels → dlogits`: the gradient of the mean loss over the counted rows.
    CrossEntropyGrad {
        /// The label that is skipped.
        ignore_index: u32,
    },
    /// `x, w[, b], labels → dx, dw[, db]` (`→ dx` alone where [`HeadLoss::frozen`]): the
    /// gradients of a [`Op::HeadLoss`], its logits made again `chunk` tokens at a time.
    HeadLossGrad(HeadLoss),
    /// `a, b → y`: two contributions to one gradient, summed.
    Accumulate,

    /// `param, grad, m, v → param, m, v` (in place): one AdamW step; with `copy`, a fourth
    /// output: the parameter's [copy](super::Role::ParamCopy), written with the updated values
    /// in its own element type.
    AdamW {
        /// Whether the step also writes the parameter's copy.
        copy: bool,
    },

    /// `x → y`: the same values stored in another layout. The planner inserts it where a
    /// tensor's consumer pays more for reading the producer's layout than the copy costs; it
    /// runs in the pass of the consumer.
    Convert {
        /// The phase of the operation that reads `y`.
        phase: Phase,
    },
}

/// The parameters of a fused language-model head and cross-entropy ([`Op::HeadLoss`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct HeadLoss {
    /// The label that is skipped.
    pub ignore_index: u32,
    /// Whether `w` is stored `[vocab, d_in]` and read through its transposed view (a head
    /// tied to the embedding table), as [`Op::LinearT`] reads it.
    pub transposed: bool,
    /// Whether a bias `b [vocab]` is added to the logits.
    pub biased: bool,
    /// Tokens whose logits are made at once (at least 1).
    pub chunk: u32,
    /// Whether the backward writes `dx` alone: the weight (and bias) are frozen (LoRA's base
    /// model), so their gradients are not made. [`derive_backward`](super::derive_backward)
    /// sets it on the backward where nothing wants them; forwards are built without it.
    pub frozen: bool,
}

/// The parameters of a fused attention ([`Op::FusedAttention`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct FusedAttention {
    /// Query heads.
    pub heads: u32,
    /// Key/value heads.
    pub kv_heads: u32,
    /// Whether a query sees only the keys up to its own position.
    pub causal: bool,
    /// Whether the queries, keys and values are separate tensors (else views of one fused
    /// projection).
    pub separate: bool,
    /// Whether a padding mask `mask` `[batch, seq]` of `u32` follows the projections (separate
    /// ones only; not with `causal`); the backward reads it too.
    pub padded: bool,
}

/// How a forward operation's backward reads and writes (see [`Op::backward`]).
#[derive(Debug, Clone, PartialEq)]
pub struct BackwardRule {
    /// The backward operations, each with the sources of its inputs and which forward input
    /// each of its outputs is a gradient of.
    pub steps: Vec<BackwardStep>,
    /// For each forward input whose gradient is the output's gradient itself (a sum, a bias),
    /// its position: no operation computes it.
    pub passes_through: Vec<usize>,
}

/// One backward operation of a [`BackwardRule`].
#[derive(Debug, Clone, PartialEq)]
pub struct BackwardStep {
    /// The operation.
    pub op: Op,
    /// Where each of its inputs comes from.
    pub inputs: Vec<Source>,
    /// For each of its outputs, the position of the forward input it is the gradient of.
    pub grads_of: Vec<usize>,
    /// An output that is the gradient of a forward output and of several forward inputs at
    /// once, in place of what `grads_of` says of it.
    pub shared: Option<SharedGrad>,
}

/// A backward output that is the whole gradient of a forward output and of several of the
/// forward inputs at once: a fused residual's sum, whose gradient is both summands'.
#[derive(Debug, Clone, PartialEq)]
pub struct SharedGrad {
    /// The backward output's position.
    pub output: usize,
    /// The forward output it is the gradient of (it is made like that output).
    pub of: usize,
    /// The forward inputs (positions) it is the gradient of.
    pub inputs: Vec<usize>,
}

/// Where a backward operation's input comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// The forward operation's input at this position (the forward saves it).
    Input(usize),
    /// The forward operation's output at this position (saved).
    Output(usize),
    /// The gradient of the forward operation's output at this position.
    OutputGrad(usize),
}

impl Op {
    /// The operation's name in plans and errors.
    pub fn name(&self) -> &'static str {
        self.contract().name()
    }

    /// The number of inputs and of outputs (its contract's roles).
    pub fn arity(&self) -> (usize, usize) {
        let c = self.contract();
        (c.inputs().len(), c.outputs().len())
    }

    /// The pass the operation belongs to.
    pub fn phase(&self) -> Phase {
        self.contract().phase()
    }

    /// How the backward of a forward operation is written; `None` for operations that are not
    /// forward ones. Inputs that are never differentiated (token ids, labels) get no gradient.
    pub fn backward(&self) -> Option<BackwardRule> {
        self.contract().backward()
    }
}

impl fmt::Display for Op {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}
