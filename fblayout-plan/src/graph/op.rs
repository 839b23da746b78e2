//! The operations of a training graph: the kernels' forward and backward halves.
//!
//! Every operation is one kernel (or one fused kernel pair) of `fblayout-kernels`, with fixed
//! operand positions, listed on each variant as `inputs → outputs`. A forward operation's
//! backward is written by [`derive_backward`](super::derive_backward) from the rules of
//! [`Op::backward`]: which backward operations it needs, and what they read (the forward
//! tensors they read are the ones the forward must save).

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
}

/// Which part of a training step an operation belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Pass {
    /// Computes the loss.
    Forward,
    /// Computes gradients.
    Backward,
    /// Updates parameters.
    Optimizer,
}

/// An operation (see the module docs for the operand order of each).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Op {
    /// `ids, table → out`: `out[b, s, :] = table[ids[b, s], :]`.
    Embedding,
    /// `x, w → y`: `y = x·w` over the last axis of `x` (tokens × d_in by d_in × d_out).
    Linear,
    /// `x, b → y`: `y = x + b` with `b` along the last axis.
    Bias,
    /// `a, b → y`: `y = a + b`.
    Add,
    /// `x, γ, β → y, mean, rstd`: LayerNorm over the last axis.
    LayerNorm {
        /// ε.
        eps: f32,
    },
    /// `x, γ → y, rstd`: RMSNorm over the last axis.
    RmsNorm {
        /// ε.
        eps: f32,
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
    /// `logits, labels → loss`: per-row cross-entropy; labels equal to `ignore_index` count
    /// for nothing.
    CrossEntropy {
        /// The label that is skipped.
        ignore_index: u32,
    },

    /// `ids, dout → dtable`: the embedding's scatter-add.
    EmbeddingGrad,
    /// `dy, w → dx`: `dx = dy·wᵀ`.
    LinearGradInput,
    /// `x, dy → dw`: `dw = xᵀ·dy`.
    LinearGradWeight,
    /// `dy → db`: the sum of `dy` over every axis but the last.
    BiasGrad,
    /// `x, γ, mean, rstd, dy → dx, dγ, dβ`.
    LayerNormGrad {
        /// ε of the forward.
        eps: f32,
    },
    /// `x, γ, rstd, dy → dx, dγ`.
    RmsNormGrad {
        /// ε of the forward.
        eps: f32,
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
    /// `logits, labels → dlogits`: the gradient of the mean loss over the counted rows.
    CrossEntropyGrad {
        /// The label that is skipped.
        ignore_index: u32,
    },
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
        /// The pass of the operation that reads `y`.
        pass: Pass,
    },
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
        match self {
            Self::Embedding => "embedding",
            Self::Linear => "linear",
            Self::Bias => "bias",
            Self::Add => "add",
            Self::LayerNorm { .. } => "layer_norm",
            Self::RmsNorm { .. } => "rms_norm",
            Self::Activation(Act::Gelu) => "gelu",
            Self::Activation(Act::GeluTanh) => "gelu_tanh",
            Self::Activation(Act::Silu) => "silu",
            Self::Swiglu => "swiglu",
            Self::Attention { .. } => "attention",
            Self::CrossEntropy { .. } => "cross_entropy",
            Self::EmbeddingGrad => "embedding_grad",
            Self::LinearGradInput => "linear_grad_input",
            Self::LinearGradWeight => "linear_grad_weight",
            Self::BiasGrad => "bias_grad",
            Self::LayerNormGrad { .. } => "layer_norm_grad",
            Self::RmsNormGrad { .. } => "rms_norm_grad",
            Self::ActivationGrad(_) => "activation_grad",
            Self::SwigluGrad => "swiglu_grad",
            Self::AttentionGrad { .. } => "attention_grad",
            Self::CrossEntropyGrad { .. } => "cross_entropy_grad",
            Self::Accumulate => "accumulate",
            Self::AdamW { .. } => "adamw",
            Self::Convert { .. } => "convert",
        }
    }

    /// The number of inputs and of outputs.
    pub fn arity(&self) -> (usize, usize) {
        match self {
            Self::Embedding | Self::Linear | Self::Bias | Self::Add | Self::Swiglu => (2, 1),
            Self::LayerNorm { .. } => (3, 3),
            Self::RmsNorm { .. } => (2, 2),
            Self::Activation(_) => (1, 1),
            Self::Attention { .. } => (1, 2),
            Self::CrossEntropy { .. } => (2, 1),
            Self::EmbeddingGrad
            | Self::LinearGradInput
            | Self::LinearGradWeight
            | Self::ActivationGrad(_)
            | Self::Accumulate
            | Self::CrossEntropyGrad { .. } => (2, 1),
            Self::BiasGrad | Self::Convert { .. } => (1, 1),
            Self::LayerNormGrad { .. } => (5, 3),
            Self::RmsNormGrad { .. } => (4, 2),
            Self::SwigluGrad => (3, 2),
            Self::AttentionGrad { .. } => (3, 1),
            Self::AdamW { copy } => (4, 3 + usize::from(*copy)),
        }
    }

    /// The pass the operation belongs to.
    pub fn pass(&self) -> Pass {
        match self {
            Self::Embedding
            | Self::Linear
            | Self::Bias
            | Self::Add
            | Self::LayerNorm { .. }
            | Self::RmsNorm { .. }
            | Self::Activation(_)
            | Self::Swiglu
            | Self::Attention { .. }
            | Self::CrossEntropy { .. } => Pass::Forward,
            Self::AdamW { .. } => Pass::Optimizer,
            Self::Convert { pass } => *pass,
            _ => Pass::Backward,
        }
    }

    /// How the backward of a forward operation is written; `None` for operations that are not
    /// forward ones. Inputs that are never differentiated (token ids, labels) get no gradient.
    pub fn backward(&self) -> Option<BackwardRule> {
        use Source::{Input, Output, OutputGrad};
        let step = |op, inputs: Vec<Source>, grads_of: Vec<usize>| BackwardStep {
            op,
            inputs,
            grads_of,
        };
        let rule = |steps, passes_through| BackwardRule {
            steps,
            passes_through,
        };
        Some(match *self {
            Self::Embedding => rule(
                vec![step(
                    Self::EmbeddingGrad,
                    vec![Input(0), OutputGrad(0)],
                    vec![1],
                )],
                vec![],
            ),
            Self::Linear => rule(
                vec![
                    step(
                        Self::LinearGradInput,
                        vec![OutputGrad(0), Input(1)],
                        vec![0],
                    ),
                    step(
                        Self::LinearGradWeight,
                        vec![Input(0), OutputGrad(0)],
                        vec![1],
                    ),
                ],
                vec![],
            ),
            Self::Bias => rule(
                vec![step(Self::BiasGrad, vec![OutputGrad(0)], vec![1])],
                vec![0],
            ),
            Self::Add => rule(vec![], vec![0, 1]),
            Self::LayerNorm { eps } => rule(
                vec![step(
                    Self::LayerNormGrad { eps },
                    vec![Input(0), Input(1), Output(1), Output(2), OutputGrad(0)],
                    vec![0, 1, 2],
                )],
                vec![],
            ),
            Self::RmsNorm { eps } => rule(
                vec![step(
                    Self::RmsNormGrad { eps },
                    vec![Input(0), Input(1), Output(1), OutputGrad(0)],
                    vec![0, 1],
                )],
                vec![],
            ),
            Self::Activation(act) => rule(
                vec![step(
                    Self::ActivationGrad(act),
                    vec![Input(0), OutputGrad(0)],
                    vec![0],
                )],
                vec![],
            ),
            Self::Swiglu => rule(
                vec![step(
                    Self::SwigluGrad,
                    vec![Input(0), Input(1), OutputGrad(0)],
                    vec![0, 1],
                )],
                vec![],
            ),
            Self::Attention {
                heads,
                kv_heads,
                causal,
            } => rule(
                vec![step(
                    Self::AttentionGrad {
                        heads,
                        kv_heads,
                        causal,
                    },
                    vec![Input(0), Output(1), OutputGrad(0)],
                    vec![0],
                )],
                vec![],
            ),
            Self::CrossEntropy { ignore_index } => rule(
                vec![step(
                    Self::CrossEntropyGrad { ignore_index },
                    vec![Input(0), Input(1)],
                    vec![0],
                )],
                vec![],
            ),
            _ => return None,
        })
    }
}

impl fmt::Display for Op {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}
