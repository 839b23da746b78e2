//! `fblayout step`: one training step (forward, backward, AdamW) of the shipped encoder
//! ([`models::build`]), planned and run by `fblayout-plan`.
//!
//! It plans every tensor's layout twice — unified row-major and the planner's choice
//! ([`Strategy::Guided`], analytic cost model) — and each plan's buffers ([`plan_memory`]),
//! then prints the plans' summary. On a GPU it builds the step under both plans
//! ([`GpuStep`]), runs one step of each from the same parameters and batch, and checks the loss
//! and every parameter's gradient against the CPU executor in `f64` ([`CpuStep`]); then it
//! times a few steps of each, alternating, and prints the ratio. With `--device cpu` (or no
//! adapter) the CPU executor runs the step under both plans instead.
//!
//! The size follows the adapter: the benchmarks' MiniLM-sized encoder at batch 32 × sequence
//! 128 on a GPU, a small one on a software adapter (lavapipe, llvmpipe: wgpu's
//! `DeviceType::Cpu`) or on the CPU; flags override each size. Where the CPU's `f64` step would
//! take long at the run's batch, the GPU is checked at a smaller batch × sequence of the same
//! model (the output says so).

use std::time::{Duration, Instant};

use fblayout_kernels::runtime::{Gpu, GpuError};
use fblayout_plan::exec::{AdamWConfig, CpuStep, ExecError, GpuStep, StepInputs};
use fblayout_plan::graph::{Graph, GraphError, Sizes};
use fblayout_plan::memory::{MemoryError, MemoryOptions, MemoryPlan, plan_memory};
use fblayout_plan::models::{self, Model, ModelConfig};
use fblayout_plan::select::{self, CostModel, Plan, PlanError, Strategy};

use crate::progress::Progress;
use crate::sizes;
use crate::summary::{seconds, summary_line};

/// Where the step runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum Device {
    /// The GPU when wgpu finds one, else the CPU executor alone.
    Auto,
    /// The GPU; a missing adapter is an error.
    Gpu,
    /// The CPU executor alone.
    Cpu,
}

/// `fblayout step`'s options. Each size overrides the one chosen for the adapter.
#[derive(clap::Args, Debug)]
pub(crate) struct StepArgs {
    /// Where to run the step.
    #[arg(long, value_enum, default_value_t = Device::Auto)]
    device: Device,
    /// Blocks [default: 6 on a GPU, 2 on a software adapter or the CPU].
    #[arg(long, value_name = "N")]
    layers: Option<u32>,
    /// Hidden size, a multiple of --heads [default: 384 on a GPU, 64 on a software adapter or
    /// the CPU].
    #[arg(long, value_name = "N")]
    hidden: Option<u32>,
    /// Attention heads [default: 12 on a GPU, 4 on a software adapter or the CPU].
    #[arg(long, value_name = "N")]
    heads: Option<u32>,
    /// Feed-forward size [default: 1536 on a GPU, 256 on a software adapter or the CPU].
    #[arg(long, value_name = "N")]
    ffn: Option<u32>,
    /// Vocabulary size [default: 30522 on a GPU, 1000 on a software adapter or the CPU].
    #[arg(long, value_name = "N")]
    vocab: Option<u32>,
    /// Sequences per batch [default: 32 on a GPU, 4 on a software adapter or the CPU].
    #[arg(long, value_name = "N")]
    batch: Option<u32>,
    /// Tokens per sequence [default: 128 on a GPU, 32 on a software adapter or the CPU].
    #[arg(long, value_name = "N")]
    seq: Option<u32>,
    /// Timed steps per layout strategy on the GPU, after the checked one; the median is
    /// printed [default: 10 on a GPU, after warming it up; 5 on a software adapter].
    #[arg(long, value_name = "N")]
    steps: Option<usize>,
}

/// The full size, on a GPU: the benchmarks' MiniLM-sized encoder (6 blocks, hidden 384, 12
/// heads, feed-forward 1536, BERT's vocabulary) at batch 32 × sequence 128.
const FULL: (ModelConfig, Sizes) = (
    ModelConfig::MINI,
    Sizes {
        batch: 32,
        seq: 128,
    },
);

/// The small size, on a software adapter or the CPU executor: the same encoder, small enough
/// that the whole run takes seconds there.
const SMALL: (ModelConfig, Sizes) = (
    ModelConfig::new(1000, 64, 4)
        .with_max_positions(32)
        .with_ffn(256)
        .with_layers(2),
    Sizes { batch: 4, seq: 32 },
);

/// The two strategies compared: the unified layout first, then the planner's choice.
const STRATEGIES: [Strategy; 2] = [Strategy::RowMajor, Strategy::Guided];

/// The seeds of the parameters and of the batch.
const PARAM_SEED: u64 = 7;
const BATCH_SEED: u64 = 11;

/// f32 on the GPU against f64 on the CPU: the loss and each gradient (‖gpu − cpu‖ / ‖cpu‖)
/// within this. Sums run over up to a few thousand terms (the vocabulary's softmax, a weight's
/// gradient over every token), each rounding at f32's 6e-8.
const TOLERANCE: f64 = 1e-3;

/// The CPU executor's `f64` step under two plans: the same arithmetic in other orders.
const CPU_TOLERANCE: f64 = 1e-9;

/// Most floating-point operations of a step the CPU executor's `f64` check runs at; above
/// it the GPU is checked at a smaller batch × sequence: seconds at [`CPU_GFLOPS`].
const CPU_CHECK_FLOPS: f64 = 1e9;

/// About what the CPU executor's `f64` step does, in GFLOP/s (measured on one core of a
/// 2-core development machine).
const CPU_GFLOPS: f64 = 0.2;

/// How long a hardware GPU runs steps before they are timed (it idles at a low clock).
const WARM_UP: Duration = Duration::from_millis(800);

/// Why `fblayout step` failed.
#[derive(Debug, thiserror::Error)]
pub(crate) enum TrainError {
    /// A size is out of range.
    #[error("{0}")]
    Size(String),
    /// `--device gpu` and no GPU.
    #[error("--device gpu: {0}")]
    NoGpu(#[source] GpuError),
    /// The GPU could not be opened.
    #[error("opening the GPU: {0}")]
    Gpu(#[source] GpuError),
    /// The encoder's graph could not be built.
    #[error("building the encoder's graph: {0}")]
    Graph(#[source] GraphError),
    /// A strategy's plan failed.
    #[error("the {strategy} plan: {source}")]
    Plan {
        /// The strategy.
        strategy: Strategy,
        /// What the planner said.
        #[source]
        source: PlanError,
    },
    /// A memory plan failed.
    #[error("the memory plan of the {strategy} plan: {source}")]
    Memory {
        /// The strategy.
        strategy: Strategy,
        /// What the memory planner said.
        #[source]
        source: MemoryError,
    },
    /// An executor failed.
    #[error("{what}: {source}")]
    Exec {
        /// What was being done.
        what: String,
        /// What the executor said.
        #[source]
        source: ExecError,
    },
    /// The results differ more than they may.
    #[error("{0}")]
    Disagree(String),
}

/// `source`, in the words of what was being done.
fn exec(what: impl Into<String>) -> impl FnOnce(ExecError) -> TrainError {
    let what = what.into();
    move |source| TrainError::Exec { what, source }
}

/// The sizes of the run and why.
struct Choice {
    config: ModelConfig,
    sizes: Sizes,
    why: String,
}

/// The size for `gpu` (or the CPU alone), with the flags given applied over it.
fn choose(args: &StepArgs, gpu: Option<&Gpu>) -> Choice {
    let ((mut config, mut sizes), mut why) = match gpu {
        Some(gpu) if gpu.info().is_software() => (
            SMALL,
            format!(
                "small, because {} is a software adapter (wgpu reports DeviceType::Cpu), where \
                 a step of the full size (the MiniLM-sized encoder at batch 32 × sequence 128) \
                 takes minutes",
                gpu.info().name
            ),
        ),
        Some(gpu) => (
            FULL,
            format!(
                "full (the MiniLM-sized encoder at batch 32 × sequence 128), because {} is a \
                 hardware adapter ({:?})",
                gpu.info().name,
                gpu.info().device_type
            ),
        ),
        None => (
            SMALL,
            "small, because the CPU executor runs alone, in f64".to_owned(),
        ),
    };
    let mut given = Vec::new();
    for (flag, value, field) in [
        ("--layers", args.layers, &mut config.layers),
        ("--hidden", args.hidden, &mut config.hidden),
        ("--heads", args.heads, &mut config.heads),
        ("--ffn", args.ffn, &mut config.ffn),
        ("--vocab", args.vocab, &mut config.vocab),
        ("--batch", args.batch, &mut sizes.batch),
        ("--seq", args.seq, &mut sizes.seq),
    ] {
        if let Some(v) = value {
            *field = v;
            given.push(flag);
        }
    }
    // The position table is as long as the longest sequence run.
    config.max_positions = config.max_positions.max(sizes.seq);
    if !given.is_empty() {
        why.push_str(&format!("; {} as given", given.join(", ")));
    }
    Choice { config, sizes, why }
}

/// Floating-point operations of one step, roughly: six per weight and token (the products of
/// the forward and the backward) and the attention's scores and context.
fn step_flops(c: ModelConfig, s: Sizes) -> f64 {
    let (h, tokens) = (f64::from(c.hidden), f64::from(s.batch) * f64::from(s.seq));
    let weights =
        f64::from(c.layers) * (4.0 * h * h + 2.0 * h * f64::from(c.ffn)) + h * f64::from(c.vocab);
    let attention = 12.0 * f64::from(c.layers) * tokens * f64::from(s.seq) * h;
    6.0 * tokens * weights + attention
}

/// The sizes the GPU is checked against the CPU at: the run's where the CPU's step is cheap
/// enough ([`CPU_CHECK_FLOPS`]), else one sequence, halved until it is.
fn reference_sizes(c: ModelConfig, s: Sizes) -> Sizes {
    if step_flops(c, s) <= CPU_CHECK_FLOPS {
        return s;
    }
    let mut check = Sizes {
        batch: 1,
        seq: s.seq,
    };
    while check.seq > 8 && step_flops(c, check) > CPU_CHECK_FLOPS {
        check.seq = check.seq.div_ceil(2);
    }
    check
}

/// A strategy's layout plan and memory plan.
struct Planned {
    plan: Plan,
    memory: MemoryPlan,
}

/// The plans of [`STRATEGIES`] at `sizes`.
fn plan_both(graph: &Graph, sizes: Sizes) -> Result<[Planned; 2], TrainError> {
    let model = CostModel::analytic();
    let planned = |strategy| {
        let plan = select::plan(graph, sizes, &model, strategy)
            .map_err(|source| TrainError::Plan { strategy, source })?;
        let memory = plan_memory(
            plan.graph(),
            plan.layouts(),
            sizes,
            MemoryOptions::default(),
        )
        .map_err(|source| TrainError::Memory { strategy, source })?;
        Ok(Planned { plan, memory })
    };
    Ok([planned(STRATEGIES[0])?, planned(STRATEGIES[1])?])
}

/// Runs `fblayout step`.
pub(crate) fn run(args: &StepArgs) -> Result<(), TrainError> {
    let gpu = match args.device {
        Device::Cpu => None,
        Device::Gpu => Some(Gpu::new().map_err(TrainError::NoGpu)?),
        Device::Auto => match Gpu::new() {
            Ok(gpu) => Some(gpu),
            Err(err @ (GpuError::NoAdapter { .. } | GpuError::NoMatchingAdapter { .. })) => {
                println!(
                    "fblayout: no GPU adapter, so the CPU executor runs alone (--device gpu \
                     makes this an error): {err}\n"
                );
                None
            }
            Err(err) => return Err(TrainError::Gpu(err)),
        },
    };
    let Choice { config, sizes, why } = choose(args, gpu.as_ref());
    sizes::check_sizes(config, sizes).map_err(TrainError::Size)?;
    let check = match &gpu {
        Some(_) => reference_sizes(config, sizes),
        None => sizes,
    };
    let separate_check = check != sizes;

    let mut progress = Progress::new(match &gpu {
        // Plan; (plan the check, build its steps, run them;) build, run the first steps, the
        // CPU's step, time.
        Some(_) => 1 + if separate_check { 5 } else { 0 } + 6,
        None => 1 + 2,
    });
    progress.println(format!(
        "fblayout: one training step (forward, backward, AdamW) of the shipped encoder, planned \
         under unified row-major layouts and under the planner's choice, run {}",
        match &gpu {
            Some(_) => "on the GPU and checked against the CPU executor (f64)",
            None => "on the CPU executor (f64)",
        }
    ));
    if let Some(gpu) = &gpu {
        progress.println(format!("adapter: {}", gpu.info()));
    }
    progress.println(format!("size: {why}"));

    progress.stage("planning layouts and memory");
    let graph = models::build(Model::Encoder, config).map_err(TrainError::Graph)?;
    let planned = plan_both(&graph, sizes)?;
    print_plans(&progress, &graph, config, sizes, &planned);

    let inputs = StepInputs::random(config.vocab, sizes, BATCH_SEED);
    match &gpu {
        Some(gpu) => {
            let runs = Runs {
                config,
                sizes,
                check,
                steps: args
                    .steps
                    .unwrap_or(if gpu.info().is_software() { 5 } else { 10 }),
            };
            on_gpu(gpu, &graph, runs, &planned, &inputs, &mut progress)?;
        }
        None => cpu_only(&planned, sizes, &inputs, &mut progress)?,
    }
    progress.finish();
    Ok(())
}

/// The sizes of the GPU's runs, and how many steps are timed.
#[derive(Clone, Copy)]
struct Runs {
    config: ModelConfig,
    /// The run's sizes.
    sizes: Sizes,
    /// The sizes of the check against the CPU.
    check: Sizes,
    /// Steps timed per strategy.
    steps: usize,
}

/// The GPU's part: the first step under each plan checked against the CPU executor's (which
/// runs on a thread of its own meanwhile), then the timed steps.
fn on_gpu(
    gpu: &Gpu,
    graph: &Graph,
    runs: Runs,
    planned: &[Planned; 2],
    inputs: &StepInputs,
    progress: &mut Progress,
) -> Result<(), TrainError> {
    let Runs {
        config,
        sizes,
        check,
        steps,
    } = runs;
    let separate = check != sizes;
    let check_planned = if separate {
        progress.stage(format!(
            "planning the check's layouts at batch {} × sequence {}",
            check.batch, check.seq
        ));
        let flops = step_flops(config, sizes);
        progress.println(format!(
            "\nthe check runs at batch {} × sequence {}: at batch {} × sequence {} the CPU \
             executor's f64 step ({:.1} GFLOP, at about {CPU_GFLOPS} GFLOP/s) would take about \
             {:.0} s",
            check.batch,
            check.seq,
            sizes.batch,
            sizes.seq,
            flops / 1e9,
            flops / (CPU_GFLOPS * 1e9)
        ));
        Some(plan_both(graph, check)?)
    } else {
        None
    };
    let reference = check_planned.as_ref().unwrap_or(planned);
    let check_inputs = if separate {
        StepInputs::random(config.vocab, check, BATCH_SEED)
    } else {
        inputs.clone()
    };
    std::thread::scope(|scope| {
        let cpu = scope.spawn(|| cpu_reference(reference, check, &check_inputs));
        let (first, results) = first_steps(gpu, reference, check, &check_inputs, progress)?;
        let timed = if separate {
            // Their buffers go back before the run's steps take theirs.
            drop(first);
            first_steps(gpu, planned, sizes, inputs, progress)?.0
        } else {
            first
        };
        progress.stage("the CPU executor's step (f64)");
        let want = cpu
            .join()
            .map_err(|_| TrainError::Disagree("the CPU executor's thread panicked".to_owned()))??;
        compare(reference, &results, &want, progress)?;
        time_steps(gpu, timed, inputs, steps, progress)
    })
}

/// Prints the two plans' summary lines, the planner's plan's summary and its memory plan.
fn print_plans(
    progress: &Progress,
    graph: &Graph,
    c: ModelConfig,
    s: Sizes,
    planned: &[Planned; 2],
) {
    progress.println(format!(
        "model: encoder of {} block{}, hidden {} ({} heads), feed-forward {}, vocabulary {}; \
         batch {} × sequence {}; {} tensors, {} operations\n",
        c.layers,
        if c.layers == 1 { "" } else { "s" },
        c.hidden,
        c.heads,
        c.ffn,
        c.vocab,
        s.batch,
        s.seq,
        graph.tensors().len(),
        graph.nodes().len()
    ));
    progress.println(
        "plans (analytic cost model): predicted step, conversions, peak memory (* = the \
         planner's choice)",
    );
    for (p, mark) in planned.iter().zip([" ", "*"]) {
        progress.println(summary_line(&p.plan, p.memory.peak_bytes(), mark));
    }
    let chosen = &planned[1];
    // The explanation's first paragraph is its summary; the rest, a line per tensor, is what
    // `fblayout plan` shows.
    let explanation = chosen.plan.to_string();
    let summary = explanation.split("\n\n").next().unwrap_or_default();
    progress.println(format!(
        "\n{summary}\n  (every tensor's layout and why: fblayout plan --layers {} --hidden {} \
         --heads {} --ffn {} --vocab {} --max-positions {} --batch {} --seq {})\n{}",
        c.layers,
        c.hidden,
        c.heads,
        c.ffn,
        c.vocab,
        c.max_positions,
        s.batch,
        s.seq,
        chosen.memory.to_string().trim_end()
    ));
}

/// One step's loss and every parameter's gradient, by the gradient's name.
struct Results {
    loss: f64,
    grads: Vec<(String, Vec<f64>)>,
}

/// The gradients of every parameter of `graph`, read by `read`.
fn read_grads(
    graph: &Graph,
    mut read: impl FnMut(&str) -> Result<Vec<f64>, ExecError>,
) -> Result<Vec<(String, Vec<f64>)>, ExecError> {
    graph
        .params()
        .iter()
        .filter_map(|&p| graph.grad(p))
        .map(|g| {
            let name = graph.tensor(g).name.clone();
            read(&name).map(|values| (name, values))
        })
        .collect()
}

/// Builds the GPU step of each plan and runs its first step (which also compiles and records
/// it): the steps, and each one's loss and gradients.
fn first_steps<'g>(
    gpu: &'g Gpu,
    planned: &[Planned; 2],
    sizes: Sizes,
    inputs: &StepInputs,
    progress: &mut Progress,
) -> Result<(Vec<GpuStep<'g>>, Vec<Results>), TrainError> {
    let mut steps = Vec::new();
    for p in planned {
        let s = p.plan.strategy();
        progress.stage(format!("building the GPU step, {s}"));
        let mut step = GpuStep::new(
            gpu,
            p.plan.graph(),
            p.plan.layouts(),
            &p.memory,
            sizes,
            AdamWConfig::default(),
        )
        .map_err(exec(format!("building the GPU step of the {s} plan")))?;
        step.upload_params(PARAM_SEED)
            .map_err(exec("uploading the parameters"))?;
        steps.push(step);
    }
    let mut results = Vec::new();
    for (step, p) in steps.iter_mut().zip(planned) {
        let s = p.plan.strategy();
        progress.stage(format!("the first GPU step, {s}"));
        let what = format!("the GPU step of the {s} plan");
        let loss = step.step(inputs).map_err(exec(&what))?;
        let grads = read_grads(p.plan.graph(), |n| step.read(n)).map_err(exec(&what))?;
        results.push(Results {
            loss: f64::from(loss),
            grads,
        });
    }
    Ok((steps, results))
}

/// `‖a − b‖ / ‖b‖`, infinite where a value is not finite.
fn relative_error(a: &[f64], b: &[f64]) -> f64 {
    if a.len() != b.len() || a.iter().chain(b).any(|v| !v.is_finite()) {
        return f64::INFINITY;
    }
    let diff: f64 = a.iter().zip(b).map(|(x, y)| (x - y) * (x - y)).sum();
    let norm: f64 = b.iter().map(|y| y * y).sum();
    (diff / norm.max(f64::MIN_POSITIVE)).sqrt()
}

/// The loss's relative error and the largest gradient's, with its name, of `got` against
/// `want`.
fn errors(got: &Results, want: &Results) -> (f64, f64, String) {
    let loss = relative_error(&[got.loss], &[want.loss]);
    let mut worst = (0.0f64, String::new());
    for ((name, a), (_, b)) in got.grads.iter().zip(&want.grads) {
        let e = relative_error(a, b);
        if e.is_nan() || e > worst.0 || worst.1.is_empty() {
            worst = (e, name.clone());
        }
    }
    (loss, worst.0, worst.1)
}

/// The CPU executor's forward and backward (f64) under the planner's plan, from the same
/// parameters and batch as the GPU's first steps; and how long it took.
fn cpu_reference(
    planned: &[Planned; 2],
    sizes: Sizes,
    inputs: &StepInputs,
) -> Result<(Results, f64), TrainError> {
    let chosen = &planned[1];
    let started = Instant::now();
    let mut cpu = CpuStep::new(
        chosen.plan.graph(),
        chosen.plan.layouts(),
        &chosen.memory,
        sizes,
        AdamWConfig::default(),
    )
    .map_err(exec("building the CPU step"))?;
    cpu.init_params(PARAM_SEED)
        .map_err(exec("setting the CPU's parameters"))?;
    let loss = cpu.forward_backward(inputs).map_err(exec("the CPU step"))?;
    let grads = read_grads(chosen.plan.graph(), |n| cpu.read(n)).map_err(exec("the CPU step"))?;
    Ok((Results { loss, grads }, started.elapsed().as_secs_f64()))
}

/// Checks every GPU result against the CPU's, `(want, seconds)`.
fn compare(
    planned: &[Planned; 2],
    gpu: &[Results],
    (want, seconds): &(Results, f64),
    progress: &mut Progress,
) -> Result<(), TrainError> {
    progress.println(format!(
        "\nthe GPU against the CPU executor (f64; built and run in {seconds:.1} s, beside the \
         GPU), one step from the same parameters and batch:"
    ));
    progress.println(format!("  {:<10} loss {:.6}", "CPU", want.loss));
    let mut worst = 0.0f64;
    for (got, p) in gpu.iter().zip(planned) {
        let (loss, grad, name) = errors(got, want);
        progress.println(format!(
            "  {:<10} loss {:.6} (relative error {loss:.1e}); {} gradients, largest relative \
             error {grad:.1e} (`{name}`)",
            p.plan.strategy().to_string(),
            got.loss,
            got.grads.len(),
        ));
        worst = worst.max(loss).max(grad);
        if loss.is_nan() || grad.is_nan() {
            worst = f64::NAN;
        }
    }
    if worst.is_nan() || worst > TOLERANCE {
        return Err(TrainError::Disagree(format!(
            "the GPU's loss or gradients differ from the CPU executor's (largest relative error \
             {worst:.2e} > {TOLERANCE:.0e})"
        )));
    }
    progress.println(format!(
        "GPU and CPU agree on the loss and every parameter's gradient (largest relative error \
         {worst:.1e} ≤ {TOLERANCE:.0e})"
    ));
    Ok(())
}

/// Times `steps` steps of each of the two plans' GPU steps (built and run once), alternating
/// one step of each (after warming a hardware GPU up), and prints the medians and their
/// ratio.
fn time_steps(
    gpu: &Gpu,
    mut timed: Vec<GpuStep<'_>>,
    inputs: &StepInputs,
    steps: usize,
    progress: &mut Progress,
) -> Result<(), TrainError> {
    let steps = steps.max(1);
    let warm_up = !gpu.info().is_software();
    progress.stage(format!("timing {steps} steps per strategy"));
    let what = |i: usize| format!("the GPU step of the {} plan", STRATEGIES[i]);
    if warm_up {
        let start = Instant::now();
        while start.elapsed() < WARM_UP {
            for (i, step) in timed.iter_mut().enumerate() {
                step.step(inputs).map_err(exec(what(i)))?;
            }
        }
    }
    let mut times = [Vec::new(), Vec::new()];
    for _ in 0..steps {
        for (i, step) in timed.iter_mut().enumerate() {
            let t = Instant::now();
            step.step(inputs).map_err(exec(what(i)))?;
            times[i].push(t.elapsed().as_secs_f64());
        }
    }
    let [row_major, guided] = times.map(median);
    progress.println(format!(
        "\nthe GPU's step, median of {steps} per strategy{} (wall clock from writing the batch to \
         reading the loss back; one step of each in turn):",
        if warm_up {
            " after warming the GPU up"
        } else {
            ""
        }
    ));
    for (s, t) in STRATEGIES.iter().zip([row_major, guided]) {
        progress.println(format!("  {:<10} {:>12}", s.to_string(), seconds(t)));
    }
    let ratio = row_major / guided;
    progress.println(format!(
        "row-major / guided: {ratio:.2}× ({})",
        if ratio >= 1.0 {
            "the planner's layouts are faster"
        } else {
            "row-major is faster"
        }
    ));
    if gpu.info().is_software() {
        progress.println(
            "(on a software adapter: its times say little about what a GPU makes of the layouts)",
        );
    }
    Ok(())
}

/// The median of `v` (NaN for none).
fn median(mut v: Vec<f64>) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// The CPU executor alone: one step under each plan, which must agree.
fn cpu_only(
    planned: &[Planned; 2],
    sizes: Sizes,
    inputs: &StepInputs,
    progress: &mut Progress,
) -> Result<(), TrainError> {
    let mut results = Vec::new();
    let mut times = Vec::new();
    for p in planned {
        let s = p.plan.strategy();
        progress.stage(format!("the CPU executor's step, {s}"));
        let started = Instant::now();
        let what = format!("the CPU step of the {s} plan");
        let mut step = CpuStep::new(
            p.plan.graph(),
            p.plan.layouts(),
            &p.memory,
            sizes,
            AdamWConfig::default(),
        )
        .map_err(exec(&what))?;
        step.init_params(PARAM_SEED).map_err(exec(&what))?;
        let loss = step.step(inputs).map_err(exec(&what))?;
        let grads = read_grads(p.plan.graph(), |n| step.read(n)).map_err(exec(&what))?;
        times.push(started.elapsed().as_secs_f64());
        results.push(Results { loss, grads });
    }
    progress.println("\nthe CPU executor's step (f64) under each plan:");
    for ((r, p), t) in results.iter().zip(planned).zip(&times) {
        progress.println(format!(
            "  {:<10} loss {:.6}, {} gradients, {t:.2} s",
            p.plan.strategy().to_string(),
            r.loss,
            r.grads.len()
        ));
    }
    let (loss, grad, name) = errors(&results[1], &results[0]);
    let worst = loss.max(grad);
    if worst.is_nan() || worst > CPU_TOLERANCE {
        return Err(TrainError::Disagree(format!(
            "the CPU executor's step differs between the plans (`{name}`: relative difference \
             {worst:.2e} > {CPU_TOLERANCE:.0e})"
        )));
    }
    progress.println(format!(
        "both plans give the same loss and gradients (largest relative difference {worst:.1e}); \
         the CPU's times say nothing of a GPU's"
    ));
    Ok(())
}
