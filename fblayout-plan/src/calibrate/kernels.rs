//! Kernel factors measured: the real kernels timed under each layout, and the multipliers fitted.
//!
//! The analytic model ([`cost`](crate::select::cost)) prices a walk by its memory class alone, but a
//! layout's cost depends on the kernel too: on the H200 an R-Tile 8×8 norm forward runs at a
//! fraction of its row-major speed while R-Tile attention scores run faster. So the calibration
//! also runs training steps of one block ([`CALIBRATION`], small, by default; the shape being
//! planned with [`CostModel::calibrated_at`](super::CostModel::calibrated_at)) under the candidate layouts and
//! times each operation's kernels (its section of [`GpuStep::step_timed`], the quickest of a
//! few steps after a warm-up, the layouts' steps taken in turn so that other work on the
//! machine disturbs them alike), with the tensor-core tiles tuned as the model's own step
//! will run them ([`GpuStep::tune`]; the tuning is kept, so the step finds it done).
//!
//! The multipliers are fitted per [`KernelKind`], [`OperandKind`] (activations apart from
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
//! with neither is 1: the byte and flop term as it is. A conversion
//! (`Convert`) is priced by the conversion classification and the gather factors, not here.

use std::time::{Duration, Instant};

use fblayout_kernels::runtime::Gpu;

use super::CalibrationError;
use crate::exec::{AdamWConfig, GpuStep, StepInputs, section};
use crate::graph::{Graph, Sizes};
use crate::layouts::LayoutChoice;
use crate::memory::{MemoryOptions, plan_memory};
use crate::select::{
    CalibrationShape, CostModel, Factors, KernelFactors, KernelKind, Objective, OperandKind, Origin,
};

/// Timed rounds (one step of each layout each), after one step that compiles and warms up.
const ROUNDS: usize = 3;

/// How long the built steps run, untimed, before the timed rounds: a discrete GPU raises its
/// clocks only after a few hundred milliseconds of work, and building the steps leaves it idle,
/// so rounds timed straight away price every kernel at idle clocks (on the H200, a calibration
/// on a GPU fresh from idle predicted steps twice as long as they ran).
const WARM_UP: Duration = Duration::from_millis(500);

/// What the timed steps of one set of layouts took.
struct Timed {
    /// Seconds of each node's kernels, by the GPU's timestamps.
    nodes: Vec<f64>,
    /// Seconds of the whole step by the wall clock, as a training step is timed: writing the
    /// inputs, submitting the recording, reading the loss back.
    wall: f64,
    /// Dispatches of the step.
    dispatches: usize,
}

/// Seconds of each node of `graph`'s step on `gpu` with its tensors stored as each of
/// `layouts`, and of the whole step: every step built and run once untimed, all of them run in
/// turn for [`WARM_UP`] (not on a software adapter, which has no clocks to raise), then
/// [`ROUNDS`] rounds of one step timed by timestamps and one by the wall clock, of each in turn
/// (so that other work on the machine disturbs them alike), the quickest of each node's
/// samples and of the steps kept (other work only ever adds time).
fn node_seconds(
    gpu: &Gpu,
    graph: &Graph,
    (vocab, sizes): (u32, Sizes),
    layouts: &[(String, Vec<LayoutChoice>)],
    tick: &mut dyn FnMut(&str),
) -> Result<Vec<Timed>, CalibrationError> {
    let step_err = |what: &str| {
        let step = format!("timing the kernels with {what}");
        move |source| CalibrationError::Exec {
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
    // A software adapter has no clocks to raise: its warm-up would only add time.
    let warm_up = if gpu.info().is_software() {
        Duration::ZERO
    } else {
        WARM_UP
    };
    let warming = Instant::now();
    while warming.elapsed() < warm_up {
        for (step, (what, _)) in steps.iter_mut().zip(layouts) {
            step.step(&inputs).map_err(step_err(what))?;
        }
    }
    let mut best: Vec<Timed> = (0..layouts.len())
        .map(|_| Timed {
            nodes: vec![f64::INFINITY; sections.len()],
            wall: f64::INFINITY,
            dispatches: 0,
        })
        .collect();
    for _ in 0..ROUNDS {
        for ((step, (what, _)), best) in steps.iter_mut().zip(layouts).zip(&mut best) {
            let started = Instant::now();
            step.step(&inputs).map_err(step_err(what))?;
            best.wall = best.wall.min(started.elapsed().as_secs_f64());
            let (_, timings) = step.step_timed(&inputs).map_err(step_err(what))?;
            best.dispatches = timings.len();
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
            for (b, v) in best.nodes.iter_mut().zip(sums) {
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
/// block `at` describes ([`CALIBRATION`](crate::select::CALIBRATION) by default); `tick` is called [`ticks`] times as it
/// goes. Returns them with the launch: what the row-major step's wall-clock time has beyond its
/// kernels' timestamps, per dispatch (the gaps between kernels, the submission and the loss's
/// read-back), which the fit takes as the launch of every operation.
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
) -> Result<(KernelFactors, f64), CalibrationError> {
    let (config, sizes) = (at.config, at.sizes);
    let graph = at.graph()?;
    let mut factors = factors.clone();
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
                    let layout = match OperandKind::of(&graph, t) {
                        OperandKind::Activation => activation,
                        OperandKind::Weight => weight,
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
    let timed = node_seconds(gpu, &graph, (config.vocab, sizes), &layouts, &mut tick)?;
    // The launch: the row-major step's wall-clock time beyond its kernels, per dispatch.
    let plain = &timed[0];
    let kernels_time: f64 = plain.nodes.iter().filter(|t| t.is_finite()).sum();
    factors.dispatch = ((plain.wall - kernels_time) / plain.dispatches.max(1) as f64).max(0.0);
    let seconds: Vec<&[f64]> = timed.iter().map(|t| &t.nodes[..]).collect();
    // The analytic model with the activations' multipliers `a` and the weights' `w`.
    let scaled = |a: f64, w: f64| -> Result<Objective<'_>, CalibrationError> {
        let mut f = factors.clone();
        f.kernels = KernelFactors {
            multipliers: KernelKind::ALL
                .into_iter()
                .flat_map(|k| {
                    LayoutChoice::candidates(2).into_iter().flat_map(move |l| {
                        [
                            (k, OperandKind::Activation, l, a),
                            (k, OperandKind::Weight, l, w),
                        ]
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
            attention_head_dim: None,
        };
        Ok(Objective::new(&graph, sizes, &model)?)
    };
    let fixed = scaled(0.0, 0.0)?;
    let activations = scaled(1.0, 0.0)?;
    let weights = scaled(0.0, 1.0)?;
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
        Ok::<_, CalibrationError>(kinds)
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
            for o in OperandKind::ALL {
                kernels.multipliers.push((kind, o, row_major, m));
            }
        }
    }
    for (c, &(activation, layout)) in configs.iter().enumerate().skip(1) {
        for (kind, t) in kinds_at(c)? {
            if activation == row_major && t.weights > 0.0 {
                let known = kernels.of(kind, OperandKind::Activation, row_major) * t.activations;
                let m = fit(&t, known, t.weights);
                kernels
                    .multipliers
                    .push((kind, OperandKind::Weight, layout, m));
            } else if activation == layout && t.activations > 0.0 {
                let listed = kernels
                    .multipliers
                    .iter()
                    .any(|m| (m.0, m.1, m.2) == (kind, OperandKind::Weight, layout));
                let m = if listed {
                    let known = kernels.of(kind, OperandKind::Weight, layout) * t.weights;
                    fit(&t, known, t.activations)
                } else {
                    fit(&t, 0.0, t.activations + t.weights)
                };
                kernels
                    .multipliers
                    .push((kind, OperandKind::Activation, layout, m));
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
        return Err(CalibrationError::Measure {
            step: "kernel factors".into(),
            detail: format!("nothing measured for {}", missing.join(", ")),
        });
    }
    kernels
        .check()
        .map_err(|detail| CalibrationError::Measure {
            step: "kernel factors".into(),
            detail,
        })?;
    Ok((kernels, factors.dispatch))
}
