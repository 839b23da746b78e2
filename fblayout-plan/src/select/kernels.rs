//! Kernel factors: the analytic model corrected by timing the real kernels under each layout.
//!
//! The analytic model ([`cost`](super::cost)) prices a walk by its memory class alone, but a
//! layout's cost depends on the kernel too: on the H200 an R-Tile 8×8 norm forward runs at a
//! fraction of its row-major speed while R-Tile attention scores run faster. So the calibration
//! also runs training steps of one block ([`CALIBRATION`], small, by default; the shape being
//! planned with [`CostModel::calibrated_at`](super::CostModel::calibrated_at)) under the candidate layouts and
//! times each operation's kernels (its section of [`GpuStep::step_timed`], the quickest of a
//! few steps after a warm-up, the layouts' steps taken in turn so that other work on the
//! machine disturbs them alike), with the tensor-core tiles tuned as the model's own step
//! will run them ([`GpuStep::tune`]; the tuning is kept, so the step finds it done).
//!
//! The multipliers are fitted per [`KernelKind`], [`Operand`] (activations apart from
//! weights, whose layouts the planner chooses apart: a product reads one of each) and
//! candidate `L`: the measured seconds of that kind's operations, less the part of the
//! prediction no multiplier scales (the launch and the operands with one candidate only:
//! biases, γ) and the part of the other operands (predicted with their own multipliers), over
//! the analytic prediction of the operands fitted. The steps timed: every tensor row-major
//! (one multiplier for both); for each other candidate `L`, the weights in `L` with the
//! activations row-major (the weights' `L`), then every tensor in `L` (the activations' `L`).
//! The objective multiplies the analytic term of each operand by its multiplier (a matrix
//! product's term by the mean of its two operands': half the product is each operand's, so
//! that a step's prediction is linear in the multipliers and the fit exact), so that at the
//! calibration's
//! shape the predicted seconds of every kind, and their ratios between layouts, are the
//! measured ones.
//!
//! An operand with no multiplier takes the other operand's of its kind and layout, and one
//! with neither (the analytic model has none) is 1: the analytic term as it is. A conversion
//! (`Convert`) is priced by the conversion classification and the gather factors, not here.

use std::fmt;
use std::time::{Duration, Instant};

use fblayout_kernels::runtime::Gpu;

use super::PlanError;
use super::cost::{CostModel, Factors, Origin};
use super::objective::Objective;
use crate::exec::{AdamWConfig, GpuStep, StepInputs, section};
use crate::graph::precision::Precision;
use crate::graph::{Graph, Op, Role, Sizes, TensorId};
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
    /// Add, a bias the product before it does not add ([`Graph::folded_biases`]), the
    /// activations and their gradients, SwiGLU, accumulation.
    Elementwise,
    /// The optimizer's update.
    AdamW,
}

impl KernelKind {
    /// Every kind, in order.
    pub const ALL: [KernelKind; 14] = [
        Self::Linear,
        Self::LinearGradInput,
        Self::LinearGradWeight,
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
pub enum Operand {
    /// What the step computes and throws away: inputs, activations, losses, their gradients.
    Activation,
    /// What persists across steps with a parameter: the parameter, its gradient, its
    /// optimizer state.
    Weight,
}

impl Operand {
    /// Both, in order.
    pub const ALL: [Operand; 2] = [Self::Activation, Self::Weight];

    /// The operand class of tensor `t` of `graph`.
    pub fn of(graph: &Graph, t: TensorId) -> Self {
        let is_param = |t: TensorId| graph.tensor(t).role == Role::Param;
        match graph.tensor(t).role {
            Role::Param | Role::ParamCopy { .. } | Role::State { .. } => Self::Weight,
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

    /// The operand class named `name` ([`Operand::name`]).
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

impl fmt::Display for Operand {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The multipliers of the analytic terms by kind of operation, operand and candidate layout
/// (see the module docs).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct KernelFactors {
    /// `(kind, operand, layout of the operand, multiplier)`.
    pub multipliers: Vec<(KernelKind, Operand, LayoutChoice, f64)>,
}

impl KernelFactors {
    /// The multiplier of an `operand` stored as `layout` in an operation of `kind`: the one
    /// listed; else the other operand's under that layout (a kind the calibration graph has
    /// only one of, such as AdamW's weights); else 1.
    pub fn of(&self, kind: KernelKind, operand: Operand, layout: LayoutChoice) -> f64 {
        let find = |o: Operand| {
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
            config: ModelConfig {
                layers: 1,
                ..config
            },
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

    /// The graph whose kernels are timed.
    pub fn graph(&self) -> Result<Graph, PlanError> {
        let graph = build(Model::Encoder, self.config)?;
        Ok(self.precision.apply(&graph)?)
    }
}

/// The default calibration: one encoder block at a small representative shape (128 tokens ×
/// 128 hidden, FFN 512, 2 × 4 heads × 64² probabilities) in f32, small enough that a software
/// adapter runs its steps under every layout in seconds.
pub const CALIBRATION: CalibrationShape = CalibrationShape {
    config: ModelConfig {
        vocab: 256,
        max_positions: 64,
        hidden: 128,
        heads: 4,
        ffn: 512,
        layers: 1,
    },
    sizes: Sizes { batch: 2, seq: 64 },
    precision: Precision::F32,
};

/// Timed rounds (one step of each layout each), after one step that compiles and warms up.
const ROUNDS: usize = 3;

/// How long the built steps run, untimed, before the timed rounds: a discrete GPU raises its
/// clocks only after a few hundred milliseconds of work, and building the steps leaves it idle,
/// so rounds timed straight away price every kernel at idle clocks (on the H200, a calibration
/// on a GPU fresh from idle predicted steps twice as long as they ran).
const WARM_UP: Duration = Duration::from_millis(500);

/// Seconds of each node of `graph`'s step on `gpu` with its tensors stored as each of
/// `layouts`: every step built and run once untimed, all of them run in turn for [`WARM_UP`],
/// then [`ROUNDS`] rounds of one timed step
/// of each in turn (so that other work on the machine disturbs them alike), the quickest of
/// each node's samples kept (other work only ever adds time).
fn node_seconds(
    gpu: &Gpu,
    graph: &Graph,
    (vocab, sizes): (u32, Sizes),
    layouts: &[(String, Vec<LayoutChoice>)],
    tick: &mut dyn FnMut(&str),
) -> Result<Vec<Vec<f64>>, PlanError> {
    let step_err = |what: &str| {
        let step = format!("timing the kernels with {what}");
        move |source| PlanError::Exec {
            step,
            source: Box::new(source),
        }
    };
    let inputs = StepInputs::random(vocab, sizes, 11);
    let mut steps = Vec::with_capacity(layouts.len());
    for (what, layouts) in layouts {
        let memory = plan_memory(graph, layouts, sizes, MemoryOptions::default())
            .map_err(|e| step_err(what)(e.into()))?;
        let mut step = GpuStep::new(gpu, graph, layouts, &memory, sizes, AdamWConfig::default())
            .map_err(step_err(what))?;
        step.upload_params(7).map_err(step_err(what))?;
        // The tensor-core tiles the model's own step will run (tuned once per adapter and
        // problem, and kept): untuned products would price the kernels too high.
        step.tune().map_err(step_err(what))?;
        step.step(&inputs).map_err(step_err(what))?;
        steps.push(step);
        tick("kernels: building the steps");
    }
    let sections: Vec<String> = (0..graph.nodes().len())
        .map(|i| section(graph, i))
        .collect();
    let warming = Instant::now();
    while warming.elapsed() < WARM_UP {
        for (step, (what, _)) in steps.iter_mut().zip(layouts) {
            step.step(&inputs).map_err(step_err(what))?;
        }
    }
    let mut best = vec![vec![f64::INFINITY; sections.len()]; layouts.len()];
    for _ in 0..ROUNDS {
        for ((step, (what, _)), best) in steps.iter_mut().zip(layouts).zip(&mut best) {
            let (_, timings) = step.step_timed(&inputs).map_err(step_err(what))?;
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
            for (b, v) in best.iter_mut().zip(sums) {
                *b = b.min(v);
            }
        }
        tick("kernels: timing the steps");
    }
    Ok(best)
}

/// What one kind's operations took in one timed step, and what the analytic model predicts
/// for them at the same layouts, split by what the multipliers scale.
#[derive(Debug, Clone, Copy, Default)]
struct KindTimes {
    measured: f64,
    /// The launch and the operands with one candidate: no multiplier scales them.
    fixed: f64,
    activations: f64,
    weights: f64,
}

/// The number of times [`measure_kernels`] calls its `tick`: once per step built (every tensor
/// row-major, then two per other candidate), once per round of timing.
pub fn ticks() -> u64 {
    (2 * LayoutChoice::candidates(2).len() - 1 + ROUNDS) as u64
}

/// Fits the multipliers on `gpu` over the analytic `factors` (see the module docs), timing the
/// block `at` describes ([`CALIBRATION`] by default); `tick` is called [`ticks`] times as it
/// goes.
///
/// Row-major first, every tensor in it: one multiplier for both operands. Then, for each other
/// candidate `L`, the weights in `L` and the activations row-major (the weights' multiplier,
/// the activations' part predicted with the row-major one), and every tensor in `L` (the
/// activations' multiplier, the weights' part predicted with theirs).
pub fn measure_kernels(
    gpu: &Gpu,
    factors: &Factors,
    at: CalibrationShape,
    mut tick: impl FnMut(&str),
) -> Result<KernelFactors, PlanError> {
    let (config, sizes) = (at.config, at.sizes);
    let graph = at.graph()?;
    // The analytic model with the activations' multipliers `a` and the weights' `w`.
    let scaled = |a: f64, w: f64| -> Result<Objective<'_>, PlanError> {
        let mut f = factors.clone();
        f.kernels = KernelFactors {
            multipliers: KernelKind::ALL
                .into_iter()
                .flat_map(|k| {
                    LayoutChoice::candidates(2).into_iter().flat_map(move |l| {
                        [(k, Operand::Activation, l, a), (k, Operand::Weight, l, w)]
                    })
                })
                .collect(),
        };
        let model = CostModel {
            factors: f,
            origin: Origin::Calibrated {
                adapter: gpu.info().to_string(),
                cache: "fitting the kernel factors".into(),
            },
        };
        Objective::new(&graph, sizes, &model)
    };
    let fixed = scaled(0.0, 0.0)?;
    let activations = scaled(1.0, 0.0)?;
    let weights = scaled(0.0, 1.0)?;
    // Every tensor row-major; then for each other candidate, the weights in it with the
    // activations row-major, and every tensor in it.
    let row_major = LayoutChoice::RowMajor;
    let mut configs = vec![(row_major, row_major)];
    for layout in LayoutChoice::candidates(2) {
        if layout != row_major {
            configs.extend([(row_major, layout), (layout, layout)]);
        }
    }
    let layouts: Vec<(String, Vec<LayoutChoice>)> = configs
        .iter()
        .map(|&(activation, weight)| {
            let layouts = graph
                .ids()
                .map(|t| {
                    let layout = match Operand::of(&graph, t) {
                        Operand::Activation => activation,
                        Operand::Weight => weight,
                    };
                    let candidates = LayoutChoice::candidates_for(graph.tensor(t));
                    if candidates.contains(&layout) {
                        layout
                    } else {
                        candidates[0]
                    }
                })
                .collect();
            (
                format!("the activations {activation} and the weights {weight}"),
                layouts,
            )
        })
        .collect();
    let seconds = node_seconds(gpu, &graph, (config.vocab, sizes), &layouts, &mut tick)?;
    // Each kind's times and predictions under configuration `c`.
    let kinds_at = |c: usize| {
        let assignment = fixed.assignment(&layouts[c].1)?;
        let mut kinds: Vec<(KernelKind, KindTimes)> = Vec::new();
        for (n, node) in graph.nodes().iter().enumerate() {
            let Some(kind) = KernelKind::of(node.op) else {
                continue;
            };
            let reads: Vec<u8> = node.inputs.iter().map(|t| assignment[t.index()]).collect();
            let price = |o: &Objective<'_>| o.price_node(n, &assignment, Some(&reads)).op;
            let base = price(&fixed);
            let i = match kinds.iter().position(|k| k.0 == kind) {
                Some(i) => i,
                None => {
                    kinds.push((kind, KindTimes::default()));
                    kinds.len() - 1
                }
            };
            let k = &mut kinds[i].1;
            k.measured += seconds[c][n];
            k.fixed += base;
            k.activations += price(&activations) - base;
            k.weights += price(&weights) - base;
        }
        Ok::<_, PlanError>(kinds)
    };
    // The multiplier that makes `part` account for what `known` leaves of the measured time
    // (never below a twentieth of the measured time, so noise can't make it vanish).
    let fit = |t: &KindTimes, known: f64, part: f64| {
        (t.measured - t.fixed - known).max(t.measured / 20.0) / part
    };
    let mut kernels = KernelFactors::default();
    for (kind, t) in kinds_at(0)? {
        if t.activations + t.weights > 0.0 {
            let m = fit(&t, 0.0, t.activations + t.weights);
            for o in Operand::ALL {
                kernels.multipliers.push((kind, o, row_major, m));
            }
        }
    }
    for (c, &(activation, layout)) in configs.iter().enumerate().skip(1) {
        for (kind, t) in kinds_at(c)? {
            if activation == row_major && t.weights > 0.0 {
                let known = kernels.of(kind, Operand::Activation, row_major) * t.activations;
                let m = fit(&t, known, t.weights);
                kernels.multipliers.push((kind, Operand::Weight, layout, m));
            } else if activation == layout && t.activations > 0.0 {
                let listed = kernels
                    .multipliers
                    .iter()
                    .any(|m| (m.0, m.1, m.2) == (kind, Operand::Weight, layout));
                let m = if listed {
                    let known = kernels.of(kind, Operand::Weight, layout) * t.weights;
                    fit(&t, known, t.activations)
                } else {
                    fit(&t, 0.0, t.activations + t.weights)
                };
                kernels
                    .multipliers
                    .push((kind, Operand::Activation, layout, m));
            }
        }
    }
    let missing: Vec<String> = KernelKind::ALL
        .into_iter()
        .flat_map(|k| LayoutChoice::candidates(2).into_iter().map(move |l| (k, l)))
        .filter(|&(k, l)| !kernels.multipliers.iter().any(|m| (m.0, m.2) == (k, l)))
        .map(|(k, l)| format!("{k} under {l}"))
        .collect();
    if !missing.is_empty() {
        return Err(PlanError::Calibration {
            step: "kernel factors".into(),
            detail: format!("nothing measured for {}", missing.join(", ")),
        });
    }
    kernels.check().map_err(|detail| PlanError::Calibration {
        step: "kernel factors".into(),
        detail,
    })?;
    Ok(kernels)
}
