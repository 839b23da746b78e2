//! `fblayout`: lays out the tensors of a transformer layer and checks them end to end.
//!
//! With no arguments it takes an embedded default (a BERT-base layer: hidden 768, 12 heads,
//! feed-forward 3072, batch 8 × sequence 128), builds every tensor's layout and the views its
//! kernels read (R-Tile activations and weights, attention's permuted and key-transposed
//! views, the transposed activations of `dW = Xᵀ·dY`), prints what each costs, validates all
//! emitted WGSL with naga, and checks that the GPU computes the same offsets as the CPU for
//! every element.

mod layer;

use std::process::ExitCode;
use std::time::Instant;

use clap::{Parser, ValueEnum};
use fblayout_core::emit::wgsl::emit_views;
use fblayout_core::expr::CpuIndexFn;
use fblayout_kernels::probe::{ProbeRequest, probe_offsets};
use fblayout_kernels::runtime::{Gpu, GpuError};

use layer::{LayerConfig, PlannedView};

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
#[command(version, about)]
struct Args {
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
    /// Where to check the index code.
    #[arg(long, value_enum, default_value_t = Device::Auto)]
    device: Device,
}

fn main() -> ExitCode {
    let args = Args::parse();
    match run(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("fblayout: error: {message}");
            ExitCode::FAILURE
        }
    }
}

fn run(args: &Args) -> Result<(), String> {
    let config = LayerConfig {
        batch: args.batch,
        seq: args.seq,
        hidden: args.hidden,
        heads: args.heads,
        ffn: args.ffn,
    };
    let plan = layer::plan(&config)?;
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
    check(&plan, &module, gpu.as_ref())
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
