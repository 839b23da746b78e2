//! `fblayout`: lays out the tensors of a transformer layer, checks them end to end, and runs
//! the layer's forward and backward.
//!
//! With no arguments it takes an embedded default (a BERT-base layer: hidden 768, 12 heads,
//! feed-forward 3072, batch 8 × sequence 128), builds every tensor's layout and the views its
//! kernels read (R-Tile activations and weights, the fused projection read as queries, keys and
//! values, the attention context read as heads, R-Tile attention probabilities), prints what
//! each costs, validates all emitted WGSL with naga, and checks that the GPU computes the same
//! offsets as the CPU for every element. Then it runs the layer's forward and backward once on
//! random data: on the GPU under the planned layouts and under one row-major layout, timing
//! every step, and on the CPU backend, against which the GPU's output and every gradient are
//! checked.
//!
//! `fblayout plan` instead shows the layout plan and the memory plan of a shipped model's
//! training step (see the `plan` module).

mod encoder;
mod layer;
mod plan;

use std::process::ExitCode;
use std::time::Instant;

use clap::{Parser, ValueEnum};
use fblayout_core::emit::wgsl::emit_views;
use fblayout_core::expr::CpuIndexFn;
use fblayout_kernels::probe::{ProbeRequest, probe_offsets};
use fblayout_kernels::runtime::{Gpu, GpuError};

use layer::PlannedView;

/// Where to check the emitted index code.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Device {
    /// The GPU when one is found, else the CPU alone.
    Auto,
    /// The GPU; a missing adapter is an error.
    Gpu,
    /// The CPU alone.
    Cpu,
}

/// Lay out a transformer layer's tensors with fblayout and check them on CPU and GPU.
#[derive(Parser, Debug)]
#[command(version, about, args_conflicts_with_subcommands = true)]
struct Args {
    /// Another job than the default run.
    #[command(subcommand)]
    command: Option<Command>,
    /// Sequences per batch.
    #[arg(long, default_value_t = 8)]
    batch: u32,
    /// Tokens per sequence.
    #[arg(long, default_value_t = 128)]
    seq: u32,
    /// Hidden size (a multiple of --heads).
    #[arg(long, default_value_t = 768)]
    hidden: u32,
    /// Attention heads.
    #[arg(long, default_value_t = 12)]
    heads: u32,
    /// Feed-forward size.
    #[arg(long, default_value_t = 3072)]
    ffn: u32,
    /// Where to check the index code and run the layer.
    #[arg(long, value_enum, default_value_t = Device::Auto)]
    device: Device,
    /// Timed runs of the layer on the GPU, per layout strategy (after warming the GPU up; one run on a software adapter).
    #[arg(long, default_value_t = 3)]
    runs: usize,
    /// Skip running the layer's forward and backward.
    #[arg(long)]
    no_layer: bool,
}

/// The jobs besides the default run.
#[derive(clap::Subcommand, Debug)]
enum Command {
    /// Show the layout plan and memory plan of a shipped model's training step (encoder or
    /// decoder), every tensor's layout and why.
    Plan(plan::PlanArgs),
}

fn main() -> ExitCode {
    let args = Args::parse();
    let result = match &args.command {
        Some(Command::Plan(plan_args)) => plan::run(plan_args).map_err(|e| error_chain(&e)),
        None => run(&args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("fblayout: error: {message}");
            ExitCode::FAILURE
        }
    }
}

/// `error` and its sources, joined by `: ` where a source's text is not already in its
/// message.
fn error_chain(error: &dyn std::error::Error) -> String {
    let mut message = error.to_string();
    let mut source = error.source();
    while let Some(s) = source {
        let text = s.to_string();
        if !message.contains(&text) {
            message = format!("{message}: {text}");
        }
        source = s.source();
    }
    message
}

fn run(args: &Args) -> Result<(), String> {
    let config = encoder::Config {
        batch: args.batch,
        seq: args.seq,
        hidden: args.hidden,
        heads: args.heads,
        ffn: args.ffn,
    };
    let layer_plan = encoder::Plan::new(config, encoder::Strategy::Planned)?;
    let plan = layer::plan(&layer_plan)?;
    println!(
        "fblayout: transformer layer, hidden {} ({} heads), feed-forward {}, batch {} × sequence {}\n",
        config.hidden, config.heads, config.ffn, config.batch, config.seq
    );
    print_plan(&plan);

    let views: Vec<&fblayout_core::layout::View> = plan.iter().map(|p| &p.view).collect();
    let module = emit_views("layer", &views).map_err(|e| e.to_string())?;
    println!(
        "\nWGSL: {} functions for {} tensors and views, {} bytes, validated by naga",
        module.naga_module().functions.len(),
        plan.len(),
        module.source().len()
    );

    let gpu = match args.device {
        Device::Cpu => None,
        Device::Gpu => Some(Gpu::new().map_err(|e| e.to_string())?),
        Device::Auto => match Gpu::new() {
            Ok(gpu) => Some(gpu),
            Err(err @ (GpuError::NoAdapter { .. } | GpuError::NoMatchingAdapter { .. })) => {
                println!("\nno GPU adapter, so the CPU checks alone run ({err})");
                None
            }
            Err(err) => return Err(err.to_string()),
        },
    };
    check(&plan, &module, gpu.as_ref())?;
    if !args.no_layer {
        run_layer(&layer_plan, gpu.as_ref(), args.runs)?;
    }
    Ok(())
}

/// Runs the layer's forward and backward: on the GPU under both strategies (timed), and on
/// the CPU under the planned layouts, and checks the GPU against the CPU.
fn run_layer(plan: &encoder::Plan, gpu: Option<&Gpu>, runs: usize) -> Result<(), String> {
    let c = plan.config;
    println!(
        "\nthe layer's forward and backward on random data ({} tokens):",
        c.tokens()
    );
    let data = encoder::Data::random(plan, 7)?;
    let mut gpu_runs = Vec::new();
    if let Some(gpu) = gpu {
        // A software adapter runs the layer in seconds, not milliseconds, and has no clocks to
        // warm up: one run each.
        let software = gpu.info().is_software();
        let (runs, warm_up) = if software { (1, false) } else { (runs, true) };
        if software {
            println!(
                "  ({} is a software adapter: one run per strategy, for the check; its times say little about a GPU)",
                gpu.info().name
            );
        }
        for strategy in [encoder::Strategy::Planned, encoder::Strategy::RowMajor] {
            let p = encoder::Plan::new(c, strategy)?;
            // The same logical inputs under each strategy's layouts.
            let run = encoder::run_gpu(gpu, &p, &data, runs, warm_up)?;
            println!(
                "  GPU, {} layouts: {:.3} ms ({}; recording the batch took {:.2} ms of CPU)",
                strategy.name(),
                run.times.total(),
                if run.times.gpu_timestamps {
                    "GPU timestamps"
                } else {
                    "wall clock"
                },
                run.record_ms
            );
            gpu_runs.push((strategy, run));
        }
    }
    let (cpu, seconds) = encoder::run_cpu(plan, &data)?;
    println!("  CPU backend, planned layouts: {seconds:.2} s");
    if gpu_runs.is_empty() {
        println!("  (no GPU: the CPU results are not compared)");
        return Ok(());
    }
    let mut worst = 0.0f64;
    println!(
        "\n  {:<10} {:>22} {:>22}",
        "result", "GPU planned vs CPU", "GPU row-major vs CPU"
    );
    for &name in encoder::RESULTS {
        let errors: Vec<f64> = gpu_runs
            .iter()
            .map(|(_, run)| encoder::relative_error(&run.results[name], &cpu[name]))
            .collect();
        worst = errors.iter().copied().fold(worst, f64::max);
        println!("  {name:<10} {:>22.2e} {:>22.2e}", errors[0], errors[1]);
    }
    // f32 GPU arithmetic against f64 on the CPU: sums of up to 3072 terms.
    const TOLERANCE: f64 = 1e-3;
    if worst.is_nan() || worst > TOLERANCE {
        return Err(format!(
            "the GPU's results differ from the CPU backend's (largest relative error {worst:.2e} > {TOLERANCE:.0e})"
        ));
    }
    println!("  GPU and CPU agree on the output and every gradient (relative error ≤ {worst:.1e})");
    print_step_times(&gpu_runs);
    Ok(())
}

fn print_step_times(runs: &[(encoder::Strategy, encoder::GpuRun)]) {
    let (planned, row_major) = (&runs[0].1.times, &runs[1].1.times);
    println!(
        "\n  {:<32} {:>12} {:>12} {:>14}",
        "step", "planned ms", "row-major ms", "row-major / planned"
    );
    for (name, ms) in &planned.steps {
        let other = row_major.get(name).unwrap_or(f64::NAN);
        println!(
            "  {name:<32} {ms:>12.3} {other:>12.3} {:>13.2}×",
            other / ms
        );
    }
    println!(
        "  {:<32} {:>12.3} {:>12.3} {:>13.2}×",
        "total",
        planned.total(),
        row_major.total(),
        row_major.total() / planned.total()
    );
}

fn print_plan(plan: &[PlannedView]) {
    println!(
        "{:<10} {:<38} {:<14} {:>10} {:>8} {:>5} {:>10}",
        "view", "axes", "order", "elements", "padding", "ops", "simplified"
    );
    for p in plan {
        let layout = p.view.layout();
        let axes: Vec<String> = p
            .view
            .axes()
            .iter()
            .zip(p.bound.shape())
            .map(|(a, n)| format!("{}={n}", a.name))
            .collect();
        let order = if p.view.is_identity() {
            layout.order().name().to_owned()
        } else {
            format!("view of {}", layout.name())
        };
        let padding = p.bound.len() - layout.bind(&p.bind).map(|b| b.logical_len()).unwrap_or(0);
        let naive = p.view.index_fn();
        println!(
            "{:<10} {:<38} {:<14} {:>10} {:>8} {:>5} {:>10}",
            p.view.name(),
            axes.join(","),
            order,
            p.bound.logical_len(),
            padding,
            naive.op_count(),
            naive.simplified().op_count(),
        );
        if p.view.is_identity() && !layout.forward().is_empty() {
            println!(
                "{:<10}   forward reduces [{}], backward reduces [{}], in-tile order [{}], {} elements a tile",
                "",
                layout.forward().join(", "),
                layout.backward().join(", "),
                layout.in_tile_order().join(", "),
                layout.tile_elems()
            );
        }
    }
}

fn check(
    plan: &[PlannedView],
    module: &fblayout_core::shader::WgslModule,
    gpu: Option<&Gpu>,
) -> Result<(), String> {
    if let Some(gpu) = gpu {
        println!("\nchecking on {}", gpu.info());
    }
    let mut checked = 0u64;
    let start = Instant::now();
    for p in plan {
        let naive = CpuIndexFn::new(&p.view.index_fn());
        let mut expected = Vec::with_capacity(p.bound.logical_len() as usize);
        let mut regs = Vec::new();
        let mut mismatch = None;
        p.bound.for_each(|_, c, off| {
            let mut args = c.to_vec();
            args.extend_from_slice(p.bound.extent_args());
            if mismatch.is_none() && naive.eval_with(&args, &mut regs) != Some(off) {
                mismatch = Some(c.to_vec());
            }
            expected.push(Some(off as u32));
        });
        if let Some(c) = mismatch {
            return Err(format!(
                "{}: simplified and naive offsets differ at {c:?}",
                p.view.name()
            ));
        }
        if let Some(gpu) = gpu {
            let f = p.view.index_fn().simplified();
            let shape: Vec<u32> = p.bound.shape().iter().map(|&n| n as u32).collect();
            let extents: Vec<u32> = p.bound.extent_args().iter().map(|&n| n as u32).collect();
            let request = ProbeRequest {
                module,
                offset_fn: &f.offset_fn_name(),
                in_bounds_fn: &f.in_bounds_fn_name(),
                shape: &shape,
                extent_args: &extents,
            };
            let got = probe_offsets(gpu, &request).map_err(|e| e.to_string())?;
            if let Some(i) = got.iter().zip(&expected).position(|(g, e)| g != e) {
                return Err(format!(
                    "{}: the GPU gives offset {:?} at element {i}, the CPU {:?}",
                    p.view.name(),
                    got[i],
                    expected[i]
                ));
            }
        }
        checked += p.bound.logical_len();
    }
    let place = if gpu.is_some() {
        "GPU and CPU agree"
    } else {
        "CPU paths agree"
    };
    println!(
        "{place} on all {checked} offsets ({:.2} s)",
        start.elapsed().as_secs_f64()
    );
    Ok(())
}
