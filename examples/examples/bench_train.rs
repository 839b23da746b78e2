//! The issue-9 ablation: one full training step (forward, backward, AdamW over every parameter)
//! of a BERT-style encoder and a GPT-style decoder, under three layout strategies measured in
//! the same run:
//!
//! - **(a)** every tensor row-major;
//! - **(b)** each operation's own best layouts, joined by explicit conversions;
//! - **(c)** the planner's activation-guided choice.
//!
//! Each strategy's plan is made with the same cost model (calibrated on this adapter, cached on
//! disk, unless `--analytic`), its buffers placed by the memory planner, and its step built by
//! the GPU executor. Every strategy starts from the same parameters and inputs: the first
//! step's losses must agree (they are the same computation in other layouts) before anything is
//! timed. Then each runs `--warmup-ms` of steps, and the median of `--samples` steps is
//! reported (wall clock around one submission and the loss's read-back), with the host's part
//! of it (writing the inputs, re-recording what changes per step, submitting), the kernels' GPU
//! time summed from one timed step, the peak memory of its plan and the predicted cost. A
//! second median times a training loop that knows its next batch: steps on two batches in
//! turn, each writing the other's inputs while the GPU runs it
//! ([`GpuStep::step_then_load`]), so that only recording and submitting stay before each
//! submission.

mod support;

use std::process::ExitCode;
use std::time::Instant;

use clap::{Parser, ValueEnum};
use fblayout_kernels::runtime::{Gpu, default_cache_dir};
use fblayout_plan::exec::{AdamWConfig, GpuStep, StepInputs};
use fblayout_plan::graph::Sizes;
use fblayout_plan::graph::precision::Precision;
use fblayout_plan::memory::{MemoryOptions, Recompute, plan_memory, recompute};
use fblayout_plan::models::{Model, ModelConfig, build};
use fblayout_plan::select::attention::choose;
use fblayout_plan::select::{CalibrationShape, CostModel, Strategy, plan};
use support::{
    Attention, AttentionArg, Precisions, Res, by_kind, by_section, compiled_since, err, exit,
    median, print_adapter, then_load_ms,
};

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Which {
    Encoder,
    Decoder,
    Both,
}

/// Time one training step of a transformer under three layout strategies.
#[derive(Parser, Debug)]
#[command(about)]
struct Args {
    /// Which model.
    #[arg(long, value_enum, default_value_t = Which::Both)]
    model: Which,
    /// Blocks.
    #[arg(long, default_value_t = 6)]
    layers: u32,
    /// Hidden size.
    #[arg(long, default_value_t = 384)]
    hidden: u32,
    /// Attention heads.
    #[arg(long, default_value_t = 12)]
    heads: u32,
    /// Feed-forward size.
    #[arg(long, default_value_t = 1536)]
    ffn: u32,
    /// Vocabulary size.
    #[arg(long, default_value_t = 30522)]
    vocab: u32,
    /// Sequences per batch.
    #[arg(long, default_value_t = 32)]
    batch: u32,
    /// Tokens per sequence.
    #[arg(long, default_value_t = 128)]
    seq: u32,
    /// Timed steps per strategy (the median is reported).
    #[arg(long, default_value_t = 5)]
    samples: usize,
    /// Milliseconds of steps run before timing (a discrete GPU needs about 600 to clock up).
    #[arg(long, default_value_t = 0)]
    warmup_ms: u64,
    /// Plan with the analytic cost model instead of calibrating on this adapter.
    #[arg(long)]
    analytic: bool,
    /// The precision of the steps.
    #[arg(long, value_enum, default_value_t = Precisions::F32)]
    precision: Precisions,
    /// Only these strategies (comma-separated: row-major, per-op, guided) [default: all
    /// three].
    #[arg(long, value_delimiter = ',', value_parser = parse_strategy)]
    strategies: Vec<Strategy>,
    /// Fuse the language-model head with its cross-entropy, making the logits this many
    /// tokens at a time instead of storing them whole.
    #[arg(long, value_name = "TOKENS", value_parser = clap::value_parser!(u32).range(1..))]
    head_chunk: Option<u32>,
    /// Make activations again in the backward instead of keeping them from the forward:
    /// `cheap` (elementwise operations and normalisations), or `attention` (those and
    /// attention's probabilities).
    #[arg(long, value_name = "WHAT", num_args = 0..=1, default_missing_value = "cheap")]
    recompute: Option<Recompute>,
    /// Keep each residual addition and the norm after it apart (two kernels), as before they
    /// were fused: the baseline of the fused norms.
    #[arg(long)]
    unfused_norms: bool,
    #[command(flatten)]
    attention: AttentionArg,
    /// The peak memory `auto` attention must fit, MiB (default: no limit).
    #[arg(long, value_name = "MIB")]
    memory_budget_mib: Option<u64>,
    /// Also list the operations that took the most GPU time in one step, this many per
    /// strategy.
    #[arg(long, default_value_t = 0)]
    sections: usize,
}

/// The strategy named `name` (as plans print it).
fn parse_strategy(name: &str) -> Result<Strategy, String> {
    STRATEGIES
        .iter()
        .map(|&(s, _)| s)
        .find(|s| s.to_string() == name)
        .ok_or_else(|| format!("no strategy `{name}`: row-major, per-op or guided"))
}

fn main() -> ExitCode {
    exit("bench_train", run(&Args::parse()))
}

/// The strategies of the ablation, in the order of the table: (a), (b), (c).
const STRATEGIES: [(Strategy, &str); 3] = [
    (Strategy::RowMajor, "(a) unified row-major"),
    (Strategy::PerOp, "(b) per-op best + conversions"),
    (Strategy::Guided, "(c) planner (guided)"),
];

/// One precision's rows.
type Measured = (Precision, Vec<Row>);

/// One strategy's measurement.
struct Row {
    label: &'static str,
    predicted_ms: f64,
    conversions: usize,
    peak: u64,
    step_ms: f64,
    /// The median step that loads the next batch's inputs while the GPU runs it.
    then_load_ms: f64,
    /// The host's median milliseconds of a step before its submission: in all, writing the
    /// inputs, recording, encoding and submitting.
    host_ms: [f64; 4],
    first_loss: f32,
    /// GPU milliseconds of one step by kind of operation (from timestamps where the adapter
    /// has them).
    by_kind: Vec<(&'static str, f64)>,
    /// GPU milliseconds of one step by operation (section), largest first.
    by_section: Vec<(String, f64)>,
}

fn run(args: &Args) -> Res<()> {
    let gpu = Gpu::new().map_err(err)?;
    print_adapter(&gpu);
    let sizes = Sizes {
        batch: args.batch,
        seq: args.seq,
    };
    let mut config = ModelConfig::new(args.vocab, args.hidden, args.heads)
        .with_max_positions(args.seq.max(1))
        .with_ffn(args.ffn)
        .with_layers(args.layers)
        .with_fused_norms(!args.unfused_norms);
    if let Some(chunk) = args.head_chunk {
        config = config.with_head_chunk(chunk);
    }
    let models: &[Model] = match args.model {
        Which::Encoder => &[Model::Encoder],
        Which::Decoder => &[Model::Decoder],
        Which::Both => &[Model::Encoder, Model::Decoder],
    };
    let precisions = args.precision.list();
    // Calibrated once per precision, at the shape being planned.
    let mut cost_models = Vec::new();
    for &precision in precisions {
        let model = if args.analytic {
            // The tables timed at the models' head size, where there are some.
            let graph = build(Model::Encoder, config).map_err(err)?;
            CostModel::analytic_for_graph(precision, &graph)
        } else {
            let at = CalibrationShape::new(config, sizes, precision);
            CostModel::calibrated_at(&gpu, default_cache_dir().as_deref(), at).map_err(err)?
        };
        println!("cost model ({precision:?}): {}", model.origin());
        cost_models.push(model);
    }
    for &m in models {
        let built = build(m, config).map_err(err)?;
        // The batch every step runs on, and a second for the steps that load the next batch.
        let inputs = [11, 12].map(|seed| StepInputs::random(config.vocab, sizes, seed));
        // Each attention's rows, by precision.
        let mut by_attention = Vec::new();
        for &attention in &args.attention.attention {
            let mut medians = Vec::new();
            for (&precision, model) in precisions.iter().zip(&cost_models) {
                let graph = precision.apply(&built).map_err(err)?;
                let fused = match attention {
                    Attention::Materialised => Vec::new(),
                    Attention::Fused => graph.attentions(),
                    Attention::Auto => {
                        let budget = args.memory_budget_mib.map(|m| m << 20);
                        let c = choose(&graph, sizes, model, Strategy::RowMajor, budget)
                            .map_err(err)?;
                        println!("planner ({precision:?}): {c}");
                        c.fused
                    }
                };
                let graph = graph.with_fused_attention(&fused).map_err(err)?;
                println!(
                    "\n### {m:?} in {precision:?}, {attention:?} attention: {} layers, hidden {}, {} heads, FFN {}, vocabulary {}, batch {} × seq {}\n",
                    config.layers,
                    config.hidden,
                    config.heads,
                    config.ffn,
                    config.vocab,
                    sizes.batch,
                    sizes.seq
                );
                let mut rows = Vec::new();
                let chosen = STRATEGIES
                    .into_iter()
                    .filter(|(s, _)| args.strategies.is_empty() || args.strategies.contains(s));
                for (strategy, label) in chosen {
                    rows.push(measure(
                        &gpu, &graph, sizes, model, strategy, label, &inputs, args,
                    )?);
                }
                check_losses(&rows, precision)?;
                print_rows(&rows);
                for r in rows.iter().filter(|_| args.sections > 0) {
                    println!(
                        "\nThe {} costliest operations of one step, {}:\n",
                        args.sections, r.label
                    );
                    println!("| operation | GPU ms |\n|---|---:|");
                    for (name, ms) in r.by_section.iter().take(args.sections) {
                        println!("| {name} | {ms:.3} |");
                    }
                }
                medians.push((precision, rows));
            }
            if let [(_, f32_rows), (_, mixed_rows)] = &medians[..] {
                println!(
                    "\n{m:?}, {attention:?} attention, mixed precision against f32 (same run):\n"
                );
                println!(
                    "| strategy | f32 ms | mixed ms | f32 / mixed | first losses f32, mixed |"
                );
                println!("|---|---:|---:|---:|---|");
                for (a, b) in f32_rows.iter().zip(mixed_rows) {
                    println!(
                        "| {} | {:.2} | {:.2} | {:.2}× | {:.5}, {:.5} |",
                        a.label,
                        a.step_ms,
                        b.step_ms,
                        a.step_ms / b.step_ms,
                        a.first_loss,
                        b.first_loss
                    );
                }
            }
            by_attention.push((attention, medians));
        }
        compare_attentions(m, &by_attention);
    }
    Ok(())
}

/// With several attentions measured: each one's steps and peaks against the first's (same
/// run), per precision and strategy, and the first losses, which must agree as the
/// precisions' do.
fn compare_attentions(m: Model, by_attention: &[(Attention, Vec<Measured>)]) {
    let [(base, base_rows), others @ ..] = by_attention else {
        return;
    };
    for (other, rows) in others {
        println!("\n{m:?}, {other:?} attention against {base:?} (same run):\n");
        println!(
            "| precision | strategy | {base:?} ms | {other:?} ms | {base:?} / {other:?} | peak MiB | attention GPU ms | first losses |"
        );
        println!("|---|---|---:|---:|---:|---|---|---|");
        for ((precision, a_rows), (_, b_rows)) in base_rows.iter().zip(rows) {
            for (a, b) in a_rows.iter().zip(b_rows) {
                let attention = |r: &Row| {
                    r.by_kind
                        .iter()
                        .find(|(k, _)| *k == "attention")
                        .map_or(0.0, |k| k.1)
                };
                println!(
                    "| {precision:?} | {} | {:.2} | {:.2} | {:.2}× | {}, {} | {:.3}, {:.3} | {:.5}, {:.5} |",
                    a.label,
                    a.step_ms,
                    b.step_ms,
                    a.step_ms / b.step_ms,
                    a.peak >> 20,
                    b.peak >> 20,
                    attention(a),
                    attention(b),
                    a.first_loss,
                    b.first_loss
                );
            }
        }
    }
}

#[allow(clippy::too_many_arguments)]
fn measure(
    gpu: &Gpu,
    graph: &fblayout_plan::graph::Graph,
    sizes: Sizes,
    model: &CostModel,
    strategy: Strategy,
    label: &'static str,
    batches: &[StepInputs; 2],
    args: &Args,
) -> Res<Row> {
    let inputs = &batches[0];
    let p = plan(graph, sizes, model, strategy).map_err(err)?;
    // With `--recompute`, the planned graph with its cheap activations made again in the
    // backward (the prediction stays the plan's, without the operations run again).
    let recomputed = match args.recompute {
        Some(what) => Some(recompute(p.graph(), p.layouts(), what).map_err(err)?),
        None => None,
    };
    let (g, layouts) = match &recomputed {
        Some((g, l)) => (g, &l[..]),
        None => (p.graph(), p.layouts()),
    };
    let memory = plan_memory(g, layouts, sizes, MemoryOptions::default()).map_err(err)?;
    let mut step =
        GpuStep::new(gpu, g, layouts, &memory, sizes, AdamWConfig::default()).map_err(err)?;
    step.upload_params(7).map_err(err)?;
    let tuning = Instant::now();
    let compiled = gpu.compile_stats();
    let on_cores = step.tune().map_err(err)?;
    if on_cores > 0 {
        println!(
            "{label}: {on_cores} linear and attention operations on tensor cores, tiles tuned in {:.1} s ({})",
            tuning.elapsed().as_secs_f64(),
            compiled_since(gpu, compiled)
        );
    }
    // The first step compiles the pipelines; its loss is the one every strategy must agree on.
    let first = Instant::now();
    let compiled = gpu.compile_stats();
    let first_loss = step.step(inputs).map_err(err)?;
    println!(
        "{label}: first step in {:.1} s ({})",
        first.elapsed().as_secs_f64(),
        compiled_since(gpu, compiled)
    );
    if !first_loss.is_finite() {
        return Err(format!("{label}: the first step's loss is {first_loss}"));
    }
    let start = Instant::now();
    while start.elapsed().as_millis() < u128::from(args.warmup_ms) {
        step.step(inputs).map_err(err)?;
    }
    let mut times = Vec::with_capacity(args.samples);
    let mut host = Vec::with_capacity(args.samples);
    for _ in 0..args.samples.max(1) {
        let t = Instant::now();
        step.step(inputs).map_err(err)?;
        times.push(t.elapsed().as_secs_f64() * 1e3);
        let h = step.host_time();
        host.push([h.total(), h.inputs, h.recording, h.submission].map(|d| d.as_secs_f64() * 1e3));
    }
    let then_load = then_load_ms(&mut step, [&batches[0], &batches[1]], args.samples)?;
    let (_, timings) = step.step_timed(inputs).map_err(err)?;
    Ok(Row {
        label,
        predicted_ms: p.cost() * 1e3,
        conversions: p.conversions().len(),
        peak: memory.peak_bytes(),
        step_ms: median(times),
        then_load_ms: then_load,
        host_ms: std::array::from_fn(|k| median(host.iter().map(|h| h[k]).collect())),
        first_loss,
        by_kind: by_kind(&timings),
        by_section: by_section(&timings),
    })
}

/// Every strategy computes the same first step in other layouts: their losses must agree (to
/// within f16's rounding in mixed precision, where other layouts round other sums).
fn check_losses(rows: &[Row], precision: Precision) -> Res<()> {
    let reference = f64::from(rows[0].first_loss);
    let within = match precision {
        Precision::F32 => 1e-4,
        Precision::Mixed => 1e-2,
    };
    for r in rows {
        let rel = (f64::from(r.first_loss) - reference).abs() / reference.abs().max(1e-30);
        if rel > within {
            return Err(format!(
                "{}: first-step loss {} differs from {}'s {} (relative {rel:e})",
                r.label, r.first_loss, rows[0].label, reference
            ));
        }
    }
    println!(
        "first-step losses agree across strategies: {} (largest relative difference within {within:e})\n",
        rows[0].first_loss
    );
    Ok(())
}

fn print_rows(rows: &[Row]) {
    // The ratios are against the first two rows measured (the strategies chosen may be fewer
    // than three).
    let a = rows[0].step_ms;
    let b = rows.get(1).map(|r| r.step_ms);
    let ratio = |base: Option<f64>, r: &Row| {
        base.map_or("—".to_owned(), |x| format!("{:.2}×", x / r.step_ms))
    };
    // Each label starts with its tag, `(a)`, `(b)` or `(c)`.
    let tag = |r: &Row| r.label.split(' ').next().unwrap_or(r.label).to_owned();
    let second = rows.get(1).map_or("—".to_owned(), tag);
    println!(
        "| strategy | step ms (median) | {0} / this | {second} / this | host ms (inputs / record / submit) | step ms, next batch loaded during it | kernels ms | peak MiB | peak vs {0} | conversions | predicted ms |",
        tag(&rows[0])
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    let mib = |b: u64| b as f64 / (1024.0 * 1024.0);
    for r in rows {
        println!(
            "| {} | {:.2} | {} | {} | {:.2} ({:.2} / {:.2} / {:.2}) | {:.2} | {:.2} | {:.0} | {:.2}× | {} | {:.2} |",
            r.label,
            r.step_ms,
            ratio(Some(a), r),
            ratio(b, r),
            r.host_ms[0],
            r.host_ms[1],
            r.host_ms[2],
            r.host_ms[3],
            r.then_load_ms,
            r.by_kind.iter().map(|(_, ms)| ms).sum::<f64>(),
            mib(r.peak),
            r.peak as f64 / rows[0].peak as f64,
            r.conversions,
            r.predicted_ms
        );
    }
    println!("\nGPU time of one step by kind of operation (ms):\n");
    let mut kinds: Vec<&'static str> = Vec::new();
    for r in rows {
        for (k, _) in &r.by_kind {
            if !kinds.contains(k) {
                kinds.push(k);
            }
        }
    }
    print!("| kind |");
    for r in rows {
        print!(" {} |", r.label);
    }
    println!();
    println!("|---|{}", "---:|".repeat(rows.len()));
    for k in kinds {
        print!("| {k} |");
        for r in rows {
            let ms = r.by_kind.iter().find(|(n, _)| *n == k).map_or(0.0, |x| x.1);
            print!(" {ms:.3} |");
        }
        println!();
    }
}
