//! Kernel factors: the analytic model corrected by timing the real kernels under each layout.
//!
//! The analytic model ([`cost`](super::cost)) prices a walk by its memory class alone, but a
//! layout's cost depends on the kernel too: on the H200 an R-Tile 8×8 norm forward runs at a
//! fraction of its row-major speed while R-Tile attention scores run faster. So the
//! calibration ([`crate::calibrate`], a layer above selection and execution) times each
//! operation's kernels in training steps of one block under the candidate layouts, and fits
//! one multiplier per [`KernelKind`], [`OperandKind`] and candidate layout. This module holds what
//! selection reads of that: the kinds, the operands, the multipliers and the shape they were
//! measured at.

use std::fmt;

use super::PlanError;
use crate::graph::precision::Precision;
use crate::graph::{Graph, Op, Role, Sizes, TensorId};
use crate::layouts::LayoutChoice;
use crate::models::{Model, ModelConfig, build};

/// The kinds of operation a multiplier is fitted for: the operations the access table prices,
/// grouped by kernel.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum KernelKind {
    /// `y = x·w`.
    Linear,
    /// `dx = dy·wᵀ`.
    LinearGradInput,
    /// `dw = xᵀ·dy`.
    LinearGradWeight,
    /// The bias gradient (a reduction over tokens).
    BiasGrad,
    /// Layer and RMS norm forwards.
    Norm,
    /// Their backwards.
    NormGrad,
    /// The attention forward (scores, probabilities, context).
    Attention,
    /// Its backward.
    AttentionGrad,
    /// The fused attention's forward (the probabilities never stored).
    FusedAttention,
    /// Its backward.
    FusedAttentionGrad,
    /// The cross-entropy forward.
    CrossEntropy,
    /// Its gradient.
    CrossEntropyGrad,
    /// The embedding lookup.
    Embedding,
    /// Its gradient.
    EmbeddingGrad,
    /// Add, a bias or addition the product before it does not do ([`Graph::epilogues`]), the
    /// activations and their gradients, SwiGLU, accumulation.
    Elementwise,
    /// The optimizer's update.
    AdamW,
}

impl KernelKind {
    /// Every kind, in order.
    pub const ALL: [KernelKind; 16] = [
        Self::Linear,
        Self::LinearGradInput,
        Self::LinearGradWeight,
        Self::BiasGrad,
        Self::Norm,
        Self::NormGrad,
        Self::Attention,
        Self::AttentionGrad,
        Self::FusedAttention,
        Self::FusedAttentionGrad,
        Self::CrossEntropy,
        Self::CrossEntropyGrad,
        Self::Embedding,
        Self::EmbeddingGrad,
        Self::Elementwise,
        Self::AdamW,
    ];

    /// The kind of `op` (its contract's); `None` for a conversion (see the module docs).
    pub fn of(op: Op) -> Option<Self> {
        op.contract().kind()
    }

    /// Its name in the cache file and in tables.
    pub fn name(self) -> &'static str {
        match self {
            Self::Linear => "linear",
            Self::LinearGradInput => "linear_grad_input",
            Self::LinearGradWeight => "linear_grad_weight",
            Self::BiasGrad => "bias_grad",
            Self::Norm => "norm",
            Self::NormGrad => "norm_grad",
            Self::Attention => "attention",
            Self::AttentionGrad => "attention_grad",
            Self::FusedAttention => "fused_attention",
            Self::FusedAttentionGrad => "fused_attention_grad",
            Self::CrossEntropy => "cross_entropy",
            Self::CrossEntropyGrad => "cross_entropy_grad",
            Self::Embedding => "embedding",
            Self::EmbeddingGrad => "embedding_grad",
            Self::Elementwise => "elementwise",
            Self::AdamW => "adamw",
        }
    }

    /// The kind named `name` ([`KernelKind::name`]).
    pub fn named(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|k| k.name() == name)
    }
}

impl fmt::Display for KernelKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Which operands of an operation a multiplier is for: the product family reads an activation
/// and a weight, whose layouts are chosen apart, so each has its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum OperandKind {
    /// What the step computes and throws away: inputs, activations, losses, their gradients.
    Activation,
    /// What persists across steps with a parameter: the parameter, its gradient, its
    /// optimizer state.
    Weight,
}

impl OperandKind {
    /// Both, in order.
    pub const ALL: [OperandKind; 2] = [Self::Activation, Self::Weight];

    /// The operand class of tensor `t` of `graph`.
    pub fn of(graph: &Graph, t: TensorId) -> Self {
        let is_param = |t: TensorId| graph.tensor(t).role == Role::Param;
        match graph.tensor(t).role {
            Role::Param | Role::Frozen | Role::ParamCopy { .. } | Role::State { .. } => {
                Self::Weight
            }
            Role::Grad { of } if is_param(of) => Self::Weight,
            _ => Self::Activation,
        }
    }

    /// Its name in the cache file.
    pub fn name(self) -> &'static str {
        match self {
            Self::Activation => "activation",
            Self::Weight => "weight",
        }
    }

    /// The operand class named `name` ([`OperandKind::name`]).
    pub fn named(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|o| o.name() == name)
    }

    fn other(self) -> Self {
        match self {
            Self::Activation => Self::Weight,
            Self::Weight => Self::Activation,
        }
    }
}

impl fmt::Display for OperandKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The multipliers of the analytic terms by kind of operation, operand and candidate layout
/// (see the module docs).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct KernelFactors {
    /// `(kind, operand, layout of the operand, multiplier)`.
    pub multipliers: Vec<(KernelKind, OperandKind, LayoutChoice, f64)>,
}

impl KernelFactors {
    /// The multiplier of an `operand` stored as `layout` in an operation of `kind`: the one
    /// listed; else the other operand's under that layout (a kind the calibration graph has
    /// only one of, such as AdamW's weights); else 1.
    pub fn of(&self, kind: KernelKind, operand: OperandKind, layout: LayoutChoice) -> f64 {
        let find = |o: OperandKind| {
            self.multipliers
                .iter()
                .find(|m| (m.0, m.1, m.2) == (kind, o, layout))
                .map(|m| m.3)
        };
        find(operand)
            .or_else(|| find(operand.other()))
            .unwrap_or(1.0)
    }

    /// Checks that every multiplier is a positive finite number.
    pub(crate) fn check(&self) -> Result<(), String> {
        match self
            .multipliers
            .iter()
            .find(|m| !(m.3.is_finite() && m.3 > 0.0))
        {
            Some((k, o, l, v)) => Err(format!(
                "the multiplier of {k}'s {o} under {l} is {v}, not a positive number"
            )),
            None => Ok(()),
        }
    }
}

/// What the kernels are timed in: one encoder block of a model of `config`'s widths (its
/// `layers` are not used) at `sizes`, with its tensors' element types as `precision` makes
/// them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CalibrationShape {
    /// The model's widths.
    pub config: ModelConfig,
    /// The run-time extents.
    pub sizes: Sizes,
    /// The element types.
    pub precision: Precision,
}

impl CalibrationShape {
    /// One block of `config` at `sizes`, in `precision`.
    pub fn new(config: ModelConfig, sizes: Sizes, precision: Precision) -> Self {
        Self {
            config: config.with_layers(1),
            sizes,
            precision,
        }
    }

    /// A name for its cache file and key.
    pub fn name(&self) -> String {
        let (c, s) = (self.config, self.sizes);
        format!(
            "h{}-a{}-f{}-v{}-p{}-b{}x{}-{:?}",
            c.hidden, c.heads, c.ffn, c.vocab, c.max_positions, s.batch, s.seq, self.precision
        )
        .to_lowercase()
    }

    /// The graph whose kernels are timed: the encoder's blocks twice, the second time with
    /// their attentions fused, so that both attentions' kernels are measured in the same
    /// steps.
    pub fn graph(&self) -> Result<Graph, PlanError> {
        let layers = self.config.layers;
        let graph = build(Model::Encoder, self.config.with_layers(2 * layers))?;
        let attentions = graph.attentions();
        let fused = attentions.get(layers as usize..).unwrap_or_default();
        let graph = graph.with_fused_attention(fused)?;
        Ok(self.precision.apply(&graph)?)
    }
}

/// The default calibration: one encoder block at a small representative shape (128 tokens ×
/// 128 hidden, FFN 512, 2 × 4 heads × 64² probabilities) in f32, small enough that a software
/// adapter runs its steps under every layout in seconds.
pub const CALIBRATION: CalibrationShape = CalibrationShape {
    config: ModelConfig::new(256, 128, 4)
        .with_max_positions(64)
        .with_ffn(512)
        .with_layers(1),
    sizes: Sizes { batch: 2, seq: 64 },
    precision: Precision::F32,
};
