//! Fine-tuning throughput and memory of Hugging Face architectures (issue 19, item 6): a
//! MiniLM-sized BERT classifier (all-MiniLM-L6-v2's shapes: 6 blocks, hidden 384, 12 heads,
//! FFN 1536, BERT's vocabulary, 2 classes) at batch 32 × sequence 128, and a Llama-family
//! decoder of about 160 M parameters (SmolLM-135M's shapes with an untied head: 30 blocks,
//! hidden 576, 9 query and 3 key/value heads, FFN 1536, vocabulary 49 152) at batch 8 × 512.
//! Each is trained fully and with LoRA (rank 8, α 16, on the query and value projections), in
//! f32 and in mixed precision, from random weights (timing does not depend on their values).
//!
//! Every step is a whole training step of the GPU executor: forward, backward and AdamW over
//! the trainable parameters, planned with unified row-major layouts and placed by the memory
//! planner, its attentions materialised, fused, or as the planner chooses (`--attention`, a
//! row each). The first step's loss must be finite, then `--warmup-ms` of steps run, and the
//! median of `--samples` steps (wall clock around one submission and the loss's read-back) is
//! reported as milliseconds and tokens per second, with the plan's peak memory.
//! `python/peer_models.py` runs the same workloads in PyTorch + transformers (+ peft).

mod support;

use std::process::ExitCode;
use std::time::Instant;

use clap::{Parser, ValueEnum};
use fblayout_kernels::runtime::Gpu;
use fblayout_plan::exec::{AdamWConfig, GpuStep, StepInputs};
use fblayout_plan::graph::optimizer::add_adamw;
use fblayout_plan::graph::precision::Precision;
use fblayout_plan::graph::{Graph, Sizes, derive_backward};
use fblayout_plan::layouts::LayoutChoice;
use fblayout_plan::lora::{LoraConfig, apply};
use fblayout_plan::memory::{MemoryOptions, MemoryPlan, Recompute, plan_memory, recompute};
use fblayout_plan::models::bert::{self, BertConfig};
use fblayout_plan::models::llama::{self, LlamaConfig};
use fblayout_plan::select::attention::{Fusing, plan_fusing};
use fblayout_plan::select::{CostModel, Strategy};
use support::{
    Attention, AttentionArg, Precisions, Res, Rng, by_kernel, by_kind, by_section, compiled_since,
    err, exit, median, print_adapter, then_load_ms,
};

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Which {
    Minilm,
    Llama,
    Both,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Tuning {
    /// Full fine-tuning: every weight trains.
    Full,
    /// LoRA: the base weights are frozen, only the adapters train.
    Lora,
    /// Both, in the same run.
    Both,
}

/// Fine-tuning throughput and memory of a MiniLM classifier and a Llama-family decoder.
#[derive(Parser, Debug)]
#[command(about)]
struct Args {
    /// Which model.
    #[arg(long, value_enum, default_value_t = Which::Both)]
    model: Which,
    /// The precision of the steps.
    #[arg(long, value_enum, default_value_t = Precisions::Both)]
    precision: Precisions,
    /// Full fine-tuning, LoRA or both.
    #[arg(long, value_enum, default_value_t = Tuning::Both)]
    tuning: Tuning,
    /// LoRA's rank (α is twice it).
    #[arg(long, default_value_t = 8)]
    rank: u32,
    /// Timed steps per row (the median is reported).
    #[arg(long, default_value_t = 9)]
    samples: usize,
    /// Milliseconds of steps run before timing (a discrete GPU needs about 600 to clock up).
    #[arg(long, default_value_t = 0)]
    warmup_ms: u64,
    /// Fuse the Llama model's head with its cross-entropy, making the logits this many tokens
    /// at a time instead of storing them whole.
    #[arg(long, value_name = "TOKENS", value_parser = clap::value_parser!(u32).range(1..))]
    head_chunk: Option<u32>,
    #[command(flatten)]
    attention: AttentionArg,
    /// Make activations again in the backward instead of keeping them from the forward:
    /// `cheap` (elementwise operations and normalisations), or `attention` (those and
    /// attention's probabilities).
    #[arg(long, value_name = "WHAT", num_args = 0..=1, default_missing_value = "cheap")]
    recompute: Option<Recompute>,
    /// Print each row's planned peak memory and stop: no GPU is opened and no step is run.
    #[arg(long)]
    memory_only: bool,
    /// The models' shapes shrunk to a few blocks of hidden 64 at a few tokens, for a quick
    /// check on a software adapter.
    #[arg(long)]
    small: bool,
    /// After the timed steps, one step timed dispatch by dispatch: its GPU time by kind of
    /// operation and its this many costliest operations (0: not timed).
    #[arg(long, default_value_t = 0)]
    sections: usize,
}

fn main() -> ExitCode {
    exit("bench_models", run(&Args::parse()))
}

/// One workload: a forward graph (the backward and AdamW are derived after LoRA), its batch and the LoRA targets of its architecture.
struct Workload {
    name: &'static str,
    graph: Graph,
    sizes: Sizes,
    inputs: StepInputs,
    /// A second batch, for the steps that load the next batch while the GPU runs
    /// ([`GpuStep::step_then_load`]).
    next: StepInputs,
    targets: [&'static str; 2],
}

fn minilm(small: bool) -> Res<Workload> {
    let (config, sizes) = if small {
        (
            BertConfig::new(500, 64, 4, 2).with_ffn(128).with_layers(2),
            Sizes { batch: 2, seq: 16 },
        )
    } else {
        (
            BertConfig::new(30522, 384, 12, 2)
                .with_ffn(1536)
                .with_layers(6)
                .with_eps(1e-12),
            Sizes {
                batch: 32,
                seq: 128,
            },
        )
    };
    let config = config.with_max_positions(512);
    let n = (sizes.batch * sizes.seq) as usize;
    let mut rng = Rng(0x5eed);
    let ids = (0..n)
        .map(|_| ((rng.uniform() + 1.0) * 0.5 * f64::from(config.vocab - 1)) as u32)
        .collect();
    let classes: Vec<u32> = (0..sizes.batch).map(|b| b % 2).collect();
    let inputs = StepInputs::random(1, sizes, 0)
        .with("ids", ids)
        .with("token_types", vec![0; n])
        .with("mask", vec![1; n])
        .with(
            "positions",
            (0..n).map(|i| (i % sizes.seq as usize) as u32).collect(),
        )
        .with("labels", bert::class_labels(&classes, sizes.seq as usize));
    // The same tokens in the opposite order, with the other classes.
    let reversed: Vec<u32> = inputs.ids.iter().rev().copied().collect();
    let flipped: Vec<u32> = classes.iter().map(|c| 1 - c).collect();
    let next = inputs
        .clone()
        .with("ids", reversed)
        .with("labels", bert::class_labels(&flipped, sizes.seq as usize));
    Ok(Workload {
        name: "MiniLM classification",
        graph: bert::forward(&config).map_err(err)?,
        sizes,
        inputs,
        next,
        targets: ["query", "value"],
    })
}

fn llama_workload(small: bool, head_chunk: Option<u32>) -> Res<Workload> {
    let (config, sizes) = if small {
        (
            LlamaConfig::new(500, 64, 4)
                .with_kv_heads(2)
                .with_ffn(128)
                .with_layers(2),
            Sizes { batch: 2, seq: 16 },
        )
    } else {
        (
            LlamaConfig::new(49152, 576, 9)
                .with_kv_heads(3)
                .with_ffn(1536)
                .with_layers(30)
                .with_eps(1e-5),
            Sizes { batch: 8, seq: 512 },
        )
    };
    let mut config = config.with_max_positions(sizes.seq.max(2048));
    if let Some(chunk) = head_chunk {
        config = config.with_head_chunk(chunk);
    }
    let vocab = config.vocab;
    Ok(Workload {
        name: "Llama-family LM",
        graph: llama::forward(&config).map_err(err)?,
        sizes,
        inputs: StepInputs::random(vocab, sizes, 11),
        next: StepInputs::random(vocab, sizes, 12),
        targets: ["q_proj", "v_proj"],
    })
}

/// One row of the table.
struct Row {
    what: String,
    trainable: u64,
    step_ms: f64,
    /// The host's median milliseconds before each submission (writing the inputs,
    /// recording, submitting).
    host_ms: f64,
    /// The median step on two batches in turn, each loading the other while the GPU runs it.
    then_load_ms: f64,
    tokens_per_s: f64,
    peak: u64,
    first_loss: f32,
    tuned_s: f64,
}

fn run(args: &Args) -> Res<()> {
    let gpu = if args.memory_only {
        None
    } else {
        let gpu = Gpu::new().map_err(err)?;
        print_adapter(&gpu);
        Some(gpu)
    };
    let mut workloads = Vec::new();
    if matches!(args.model, Which::Minilm | Which::Both) {
        workloads.push(minilm(args.small)?);
    }
    if matches!(args.model, Which::Llama | Which::Both) {
        workloads.push(llama_workload(args.small, args.head_chunk)?);
    }
    let precisions = args.precision.list();
    let lora: &[bool] = match args.tuning {
        Tuning::Full => &[false],
        Tuning::Lora => &[true],
        Tuning::Both => &[false, true],
    };
    let mut rows = Vec::new();
    for w in &workloads {
        for &with_lora in lora {
            let mut graph = w.graph.clone();
            if with_lora {
                let config = LoraConfig::new(
                    args.rank,
                    f64::from(2 * args.rank),
                    w.targets.iter().copied(),
                );
                apply(&mut graph, &config).map_err(err)?;
            }
            derive_backward(&mut graph).map_err(err)?;
            add_adamw(&mut graph).map_err(err)?;
            for (&precision, &attention) in precisions
                .iter()
                .flat_map(|p| args.attention.attention.iter().map(move |a| (p, a)))
            {
                let what = format!(
                    "{}, {}, {precision:?}, {attention:?} attention, batch {} × {}",
                    w.name,
                    if with_lora {
                        format!("LoRA r{}", args.rank)
                    } else {
                        "full".to_owned()
                    },
                    w.sizes.batch,
                    w.sizes.seq
                );
                let Some(gpu) = &gpu else {
                    let (_, _, memory) = planned(&graph, w, precision, attention, args.recompute)?;
                    println!("{what}: peak {:.0} MiB (plan)", mib(memory.peak_bytes()));
                    continue;
                };
                let row = measure(gpu, &graph, w, (precision, attention), what, args)?;
                println!(
                    "{}: {:.2} ms (host {:.2}; {:.2} loading the next batch during it), {:.0} tokens/s, peak {:.0} MiB, first loss {:.4}, tuned in {:.1} s",
                    row.what,
                    row.step_ms,
                    row.host_ms,
                    row.then_load_ms,
                    row.tokens_per_s,
                    mib(row.peak),
                    row.first_loss,
                    row.tuned_s
                );
                rows.push(row);
            }
        }
    }
    if rows.is_empty() {
        return Ok(());
    }
    println!(
        "\n| workload | trainable parameters | step ms (median) | host ms | step ms, next batch loaded during it | tokens/s | peak MiB (plan) | first loss | tuning s |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|");
    for r in &rows {
        println!(
            "| {} | {} | {:.2} | {:.2} | {:.2} | {:.0} | {:.0} | {:.4} | {:.1} |",
            r.what,
            r.trainable,
            r.step_ms,
            r.host_ms,
            r.then_load_ms,
            r.tokens_per_s,
            mib(r.peak),
            r.first_loss,
            r.tuned_s
        );
    }
    Ok(())
}

fn mib(bytes: u64) -> f64 {
    bytes as f64 / (1024.0 * 1024.0)
}

/// `graph` in `precision` with its attentions as `attention` asks (and the activations
/// `again` names recomputed), its layouts (unified row-major) and its memory plan.
fn planned(
    graph: &Graph,
    w: &Workload,
    precision: Precision,
    attention: Attention,
    again: Option<Recompute>,
) -> Res<(Graph, Vec<LayoutChoice>, MemoryPlan)> {
    let graph = precision.apply(graph).map_err(err)?;
    let model = CostModel::analytic_for_graph(precision, &graph);
    let fusing = match attention {
        Attention::Materialised => Fusing::Materialised,
        Attention::Fused => Fusing::Fused,
        Attention::Auto => Fusing::Auto { budget: None },
    };
    let chosen = plan_fusing(&graph, w.sizes, &model, Strategy::RowMajor, fusing).map_err(err)?;
    if attention == Attention::Auto {
        println!("planner ({precision:?}): {chosen}");
    }
    let p = chosen.plan;
    let (g, layouts) = match again {
        Some(what) => recompute(p.graph(), p.layouts(), what).map_err(err)?,
        None => (p.graph().clone(), p.layouts().to_vec()),
    };
    let memory = plan_memory(&g, &layouts, w.sizes, MemoryOptions::default()).map_err(err)?;
    Ok((g, layouts, memory))
}

fn measure(
    gpu: &Gpu,
    graph: &Graph,
    w: &Workload,
    (precision, attention): (Precision, Attention),
    what: String,
    args: &Args,
) -> Res<Row> {
    let (g, layouts, memory) = planned(graph, w, precision, attention, args.recompute)?;
    let mut step =
        GpuStep::new(gpu, &g, &layouts, &memory, w.sizes, AdamWConfig::default()).map_err(err)?;
    step.upload_params(7).map_err(err)?;
    let tuning = Instant::now();
    let compiled = gpu.compile_stats();
    step.tune().map_err(err)?;
    let tuned_s = tuning.elapsed().as_secs_f64();
    println!(
        "{what}: tuned in {tuned_s:.1} s ({})",
        compiled_since(gpu, compiled)
    );
    let first = Instant::now();
    let compiled = gpu.compile_stats();
    let first_loss = step.step(&w.inputs).map_err(err)?;
    println!(
        "{what}: first step in {:.1} s ({})",
        first.elapsed().as_secs_f64(),
        compiled_since(gpu, compiled)
    );
    if !first_loss.is_finite() {
        return Err(format!("{what}: the first step's loss is {first_loss}"));
    }
    let start = Instant::now();
    while start.elapsed().as_millis() < u128::from(args.warmup_ms) {
        step.step(&w.inputs).map_err(err)?;
    }
    let mut times = Vec::with_capacity(args.samples);
    let mut host = Vec::with_capacity(args.samples);
    for _ in 0..args.samples.max(1) {
        let t = Instant::now();
        step.step(&w.inputs).map_err(err)?;
        times.push(t.elapsed().as_secs_f64() * 1e3);
        host.push(step.host_time().total().as_secs_f64() * 1e3);
    }
    let step_ms = median(times);
    if args.sections > 0 {
        let (_, timings) = step.step_timed(&w.inputs).map_err(err)?;
        println!("\n{what}: GPU time of one step by kind of operation (ms):\n");
        println!("| kind | ms |\n|---|---:|");
        for (kind, ms) in by_kind(&timings) {
            println!("| {kind} | {ms:.3} |");
        }
        println!(
            "\n{what}: the {} costliest operations (ms):\n",
            args.sections
        );
        println!("| operation | ms |\n|---|---:|");
        for (name, ms) in by_section(&timings).iter().take(args.sections) {
            println!("| {name} | {ms:.3} |");
        }
        println!("\n{what}: the costliest kernels, every dispatch of each summed (ms):\n");
        println!("| kernel | ms |\n|---|---:|");
        for (name, ms) in by_kernel(&timings).iter().take(args.sections) {
            println!("| {name} | {ms:.3} |");
        }
        println!();
    }
    let then_load = then_load_ms(&mut step, [&w.inputs, &w.next], args.samples)?;
    let trainable = g
        .params()
        .into_iter()
        .map(|t| g.tensor(t).elements(w.sizes))
        .sum();
    Ok(Row {
        what,
        trainable,
        step_ms,
        host_ms: median(host),
        then_load_ms: then_load,
        tokens_per_s: f64::from(w.sizes.batch * w.sizes.seq) / (step_ms / 1e3),
        peak: memory.peak_bytes(),
        first_loss,
        tuned_s,
    })
}
