//! Kernel factors: the analytic model corrected by timing the real kernels under each layout.
//!
//! The analytic model ([`cost`](super::cost)) prices a walk by its memory class alone, but a
//! layout's cost depends on the kernel too: on the H200 an R-Tile 8×8 norm forward runs at a
//! fraction of its row-major speed while R-Tile attention scores run faster. So the calibration
//! also runs one training step of a small graph ([`CALIBRATION`]) with every tensor in one
//! candidate layout, for each candidate, and times each operation's kernels (its section of
//! [`GpuStep::step_timed`], median of a few steps after a warm-up).
//!
//! For each [`KernelKind`] and candidate `L`, the **multiplier** `m(kind, L)` is the measured
//! seconds of that kind's operations with every tensor in `L`, less the part of the prediction
//! it does not scale (the launch and the operands that have one candidate only: biases, γ),
//! over the rest of the analytic prediction at the same layouts. The objective multiplies the
//! analytic term of each operand stored as `L` by `m(kind, L)` (a matrix product's term by the
//! geometric mean of its two operands' multipliers), so that at the calibration's shape the
//! predicted times of every kind, and their ratios between layouts, are the measured ones.
//!
//! A kind or layout with no multiplier (the analytic model has none) is 1: the analytic term
//! as it is. A conversion (`Convert`) is priced by the conversion classification and the
//! gather factors, not here.

use std::fmt;

use fblayout_kernels::runtime::Gpu;

use super::PlanError;
use super::cost::{CostModel, Factors, Origin};
use super::objective::Objective;
use crate::exec::{AdamWConfig, GpuStep, StepInputs, section};
use crate::graph::{Graph, Op, Sizes};
use crate::layouts::LayoutChoice;
use crate::memory::{MemoryOptions, plan_memory};
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
    /// Adding a bias.
    Bias,
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
    /// The cross-entropy forward.
    CrossEntropy,
    /// Its gradient.
    CrossEntropyGrad,
    /// The embedding lookup.
    Embedding,
    /// Its gradient.
    EmbeddingGrad,
    /// Add, the activations and their gradients, SwiGLU, accumulation.
    Elementwise,
    /// The optimizer's update.
    AdamW,
}

impl KernelKind {
    /// Every kind, in order.
    pub const ALL: [KernelKind; 15] = [
        Self::Linear,
        Self::LinearGradInput,
        Self::LinearGradWeight,
        Self::Bias,
        Self::BiasGrad,
        Self::Norm,
        Self::NormGrad,
        Self::Attention,
        Self::AttentionGrad,
        Self::CrossEntropy,
        Self::CrossEntropyGrad,
        Self::Embedding,
        Self::EmbeddingGrad,
        Self::Elementwise,
        Self::AdamW,
    ];

    /// The kind of `op`; `None` for a conversion (see the module docs).
    pub fn of(op: Op) -> Option<Self> {
        Some(match op {
            Op::Linear => Self::Linear,
            Op::LinearGradInput => Self::LinearGradInput,
            Op::LinearGradWeight => Self::LinearGradWeight,
            Op::Bias => Self::Bias,
            Op::BiasGrad => Self::BiasGrad,
            Op::LayerNorm { .. } | Op::RmsNorm { .. } => Self::Norm,
            Op::LayerNormGrad { .. } | Op::RmsNormGrad { .. } => Self::NormGrad,
            Op::Attention { .. } => Self::Attention,
            Op::AttentionGrad { .. } => Self::AttentionGrad,
            Op::CrossEntropy { .. } => Self::CrossEntropy,
            Op::CrossEntropyGrad { .. } => Self::CrossEntropyGrad,
            Op::Embedding => Self::Embedding,
            Op::EmbeddingGrad => Self::EmbeddingGrad,
            Op::AdamW => Self::AdamW,
            Op::Convert { .. } => return None,
            Op::Add
            | Op::Activation(_)
            | Op::ActivationGrad(_)
            | Op::Swiglu
            | Op::SwigluGrad
            | Op::Accumulate => Self::Elementwise,
        })
    }

    /// Its name in the cache file and in tables.
    pub fn name(self) -> &'static str {
        match self {
            Self::Linear => "linear",
            Self::LinearGradInput => "linear_grad_input",
            Self::LinearGradWeight => "linear_grad_weight",
            Self::Bias => "bias",
            Self::BiasGrad => "bias_grad",
            Self::Norm => "norm",
            Self::NormGrad => "norm_grad",
            Self::Attention => "attention",
            Self::AttentionGrad => "attention_grad",
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

/// The multipliers of the analytic terms by kind of operation and candidate layout (see the
/// module docs).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct KernelFactors {
    /// `(kind, layout of the operand, multiplier)`; a pair not listed is 1.
    pub multipliers: Vec<(KernelKind, LayoutChoice, f64)>,
}

impl KernelFactors {
    /// The multiplier of an operand stored as `layout` in an operation of `kind` (1 when
    /// none was measured).
    pub fn of(&self, kind: KernelKind, layout: LayoutChoice) -> f64 {
        self.multipliers
            .iter()
            .find(|m| m.0 == kind && m.1 == layout)
            .map_or(1.0, |m| m.2)
    }

    /// Checks that every multiplier is a positive finite number.
    pub(crate) fn check(&self) -> Result<(), String> {
        match self
            .multipliers
            .iter()
            .find(|m| !(m.2.is_finite() && m.2 > 0.0))
        {
            Some((k, l, v)) => Err(format!(
                "the multiplier of {k} under {l} is {v}, not a positive number"
            )),
            None => Ok(()),
        }
    }
}

/// The graph whose kernels are timed: one encoder block at a small representative shape
/// (128 tokens × 128 hidden, FFN 512, 2 × 4 heads × 64² probabilities), small enough that a
/// software adapter runs its steps under every layout in seconds.
pub const CALIBRATION: (ModelConfig, Sizes) = (
    ModelConfig {
        vocab: 256,
        max_positions: 64,
        hidden: 128,
        heads: 4,
        ffn: 512,
        layers: 1,
    },
    Sizes { batch: 2, seq: 64 },
);

/// Timed steps per layout (after one that compiles and warms up).
const STEPS: usize = 3;

/// Seconds of each node of `graph`'s step with every tensor stored as `layout` on `gpu`: the
/// median over [`STEPS`] timed steps, after one untimed.
fn node_seconds(
    gpu: &Gpu,
    graph: &Graph,
    sizes: Sizes,
    layout: LayoutChoice,
) -> Result<Vec<f64>, PlanError> {
    let step_err = |source| PlanError::Exec {
        step: format!("timing the kernels under {layout}"),
        source: Box::new(source),
    };
    let layouts: Vec<LayoutChoice> = graph
        .ids()
        .map(|t| uniform(graph.tensor(t).axes.len(), layout))
        .collect();
    let memory = plan_memory(graph, &layouts, sizes, MemoryOptions::default()).map_err(step_err)?;
    let mut step = GpuStep::new(gpu, graph, &layouts, &memory, sizes, AdamWConfig::default())
        .map_err(step_err)?;
    step.upload_params(7).map_err(step_err)?;
    let inputs = StepInputs::random(CALIBRATION.0.vocab, sizes, 11);
    step.step(&inputs).map_err(step_err)?;
    let sections: Vec<String> = (0..graph.nodes().len())
        .map(|i| section(graph, i))
        .collect();
    let mut samples = vec![Vec::with_capacity(STEPS); sections.len()];
    for _ in 0..STEPS {
        let (_, timings) = step.step_timed(&inputs).map_err(step_err)?;
        let mut sums = vec![0.0; sections.len()];
        for t in &timings {
            if let Some(i) = t
                .section
                .as_deref()
                .and_then(|s| sections.iter().position(|x| x == s))
            {
                sums[i] += t.nanos * 1e-9;
            }
        }
        for (s, v) in samples.iter_mut().zip(sums) {
            s.push(v);
        }
    }
    Ok(samples.into_iter().map(median).collect())
}

/// `layout` where a tensor of `rank` has it as a candidate, else its only candidate.
fn uniform(rank: usize, layout: LayoutChoice) -> LayoutChoice {
    let candidates = LayoutChoice::candidates(rank);
    if candidates.contains(&layout) {
        layout
    } else {
        candidates[0]
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(0.0)
}

/// Fits the multipliers on `gpu` over the analytic `factors` (see the module docs); `tick` is
/// called once per layout timed.
pub fn measure_kernels(
    gpu: &Gpu,
    factors: &Factors,
    mut tick: impl FnMut(&str),
) -> Result<KernelFactors, PlanError> {
    let (config, sizes) = CALIBRATION;
    let graph = build(Model::Encoder, config)?;
    let origin = || Origin::Calibrated {
        adapter: gpu.info().to_string(),
        cache: "fitting the kernel factors".into(),
    };
    let base = |scale: f64| -> Result<CostModel, PlanError> {
        let mut f = factors.clone();
        f.kernels = KernelFactors {
            multipliers: KernelKind::ALL
                .into_iter()
                .flat_map(|k| {
                    LayoutChoice::candidates(2)
                        .into_iter()
                        .map(move |l| (k, l, scale))
                })
                .collect(),
        };
        Ok(CostModel {
            factors: f,
            origin: origin(),
        })
    };
    // The whole prediction (multipliers 1) and the part no multiplier scales (multipliers 0).
    let (whole, fixed) = (base(1.0)?, base(0.0)?);
    let whole = Objective::new(&graph, sizes, &whole)?;
    let fixed = Objective::new(&graph, sizes, &fixed)?;
    let mut multipliers = Vec::new();
    for layout in LayoutChoice::candidates(2) {
        let seconds = node_seconds(gpu, &graph, sizes, layout)?;
        tick(&format!("kernels under {layout}"));
        let layouts: Vec<LayoutChoice> = graph
            .ids()
            .map(|t| uniform(graph.tensor(t).axes.len(), layout))
            .collect();
        let assignment = whole.assignment(&layouts)?;
        let own = |n: usize| -> Vec<u8> {
            graph.nodes()[n]
                .inputs
                .iter()
                .map(|t| assignment[t.index()])
                .collect()
        };
        let mut sums: Vec<(KernelKind, f64, f64, f64)> = Vec::new();
        for (n, node) in graph.nodes().iter().enumerate() {
            let Some(kind) = KernelKind::of(node.op) else {
                continue;
            };
            let reads = own(n);
            let all = whole.price_node(n, &assignment, Some(&reads)).op;
            let unscaled = fixed.price_node(n, &assignment, Some(&reads)).op;
            match sums.iter_mut().find(|s| s.0 == kind) {
                Some(s) => {
                    s.1 += seconds[n];
                    s.2 += unscaled;
                    s.3 += all - unscaled;
                }
                None => sums.push((kind, seconds[n], unscaled, all - unscaled)),
            }
        }
        for (kind, measured, unscaled, scaled) in sums {
            // Never below a twentieth of the measured time, so noise can't make it vanish.
            let m = (measured - unscaled).max(measured / 20.0) / scaled.max(f64::MIN_POSITIVE);
            multipliers.push((kind, layout, m));
        }
    }
    let kernels = KernelFactors { multipliers };
    let missing: Vec<&str> = KernelKind::ALL
        .into_iter()
        .filter(|k| !kernels.multipliers.iter().any(|m| m.0 == *k))
        .map(KernelKind::name)
        .collect();
    if !missing.is_empty() {
        return Err(PlanError::Calibration {
            step: "kernel factors".into(),
            detail: format!(
                "the calibration graph has no operation of the kinds {}",
                missing.join(", ")
            ),
        });
    }
    kernels.check().map_err(|detail| PlanError::Calibration {
        step: "kernel factors".into(),
        detail,
    })?;
    Ok(kernels)
}
