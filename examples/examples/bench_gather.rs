//! Benchmark: reading tensors through views on the GPU.
//!
//! Each row materialises a view with the gather kernel (`dst[i] = src[offset(coords(i))]`) and
//! reports the median time per gather, the bandwidth (bytes read + written) and the ratio to a
//! plain copy of the same number of elements, measured in the same run. Each view runs
//! through its simplified index function and through the naive one, so the table also shows
//! what the simplifier is worth inside a memory-bound kernel, and what a transposed view costs
//! for row-major against R-Tile storage.
//!
//! Run: `cargo run --release -p fblayout-examples --example bench_gather [-- --rows 8192 --cols 8192]`

mod support;

use std::process::ExitCode;
use std::time::Instant;

use clap::Parser;
use fblayout_core::expr::ValidIndexFn;
use fblayout_core::layout::{BoundView, LayoutSpec, Order, View};
use fblayout_kernels::{Gather, Gpu, GpuBuffer};
use fblayout_tests::catalog;

/// Times gathers through views on the first GPU adapter.
#[derive(Parser)]
struct Args {
    /// Rows of the matrices (a multiple of 8).
    #[arg(long, default_value_t = 2048)]
    rows: u32,
    /// Columns of the matrices (a multiple of 8).
    #[arg(long, default_value_t = 2048)]
    cols: u32,
    /// Timed samples per variant (the median is reported).
    #[arg(long, default_value_t = 9)]
    samples: usize,
    /// Gathers per sample.
    #[arg(long, default_value_t = 10)]
    reps: usize,
}

struct Variant {
    name: String,
    f: ValidIndexFn,
    bound: BoundView,
}

fn matrix(
    name: &str,
    order: Order,
    tile: Option<u32>,
    rows: u32,
    cols: u32,
) -> Result<View, String> {
    catalog::matrix(name, order, tile, rows, cols)
        .build()
        .map(|l| l.view())
        .map_err(|e| e.to_string())
}

fn variants(rows: u32, cols: u32) -> Result<Vec<Variant>, String> {
    let v = |e: fblayout_core::layout::LayoutError| e.to_string();
    let copy = LayoutSpec::new("copy")
        .axis("i", rows * cols)
        .build()
        .map_err(|e| e.to_string())?
        .view();
    let rm = matrix("rm", Order::RowMajor, None, rows, cols)?;
    let rm_t = rm
        .clone()
        .named("rm_t")
        .map_err(v)?
        .transpose("rows", "cols")
        .map_err(v)?;
    let rt4 = matrix("rt4", Order::RTile, Some(4), rows, cols)?;
    let rt4_t = rt4
        .clone()
        .named("rt4_t")
        .map_err(v)?
        .transpose("rows", "cols")
        .map_err(v)?;
    let rt8_t = matrix("rt8", Order::RTile, Some(8), rows, cols)?
        .named("rt8_t")
        .map_err(v)?
        .transpose("rows", "cols")
        .map_err(v)?;
    // Attention keys [batch, seq, heads, head_dim] read as Kᵀ [batch, heads, head_dim, seq].
    let (heads, head_dim) = (16, 64);
    let seq = (rows * cols / (heads * head_dim * 4)).max(1);
    let k = LayoutSpec::new("k")
        .dyn_axis("batch")
        .dyn_axis("seq")
        .axis("heads", heads)
        .axis("head_dim", head_dim)
        .build()
        .map_err(|e| e.to_string())?;
    let k_t = k
        .view()
        .named("k_t")
        .map_err(v)?
        .permute(&["batch", "heads", "head_dim", "seq"])
        .map_err(v)?;
    let mut out = Vec::new();
    for (view, bind) in [
        (copy, vec![]),
        (rm, vec![]),
        (rm_t, vec![]),
        (rt4, vec![]),
        (rt4_t, vec![]),
        (rt8_t, vec![]),
        (k_t, vec![("batch", 4), ("seq", seq)]),
    ] {
        let bound = view.bind(&bind).map_err(v)?;
        let naive = view.index_fn();
        out.push(Variant {
            name: format!("{} (simplified)", view.name()),
            f: naive.simplified(),
            bound: bound.clone(),
        });
        if view.name() != "copy" {
            out.push(Variant {
                name: format!("{} (naive)", view.name()),
                f: naive,
                bound,
            });
        }
    }
    Ok(out)
}

fn median_seconds(
    gpu: &Gpu,
    gather: &Gather,
    src: &GpuBuffer,
    dst: &GpuBuffer,
    args: &Args,
) -> Result<f64, String> {
    let e = |err: fblayout_kernels::GpuError| err.to_string();
    for _ in 0..3 {
        gather.run(gpu, src, dst).map_err(e)?;
    }
    gpu.wait().map_err(e)?;
    let mut samples = Vec::with_capacity(args.samples);
    for _ in 0..args.samples.max(1) {
        let start = Instant::now();
        for _ in 0..args.reps.max(1) {
            gather.run(gpu, src, dst).map_err(e)?;
        }
        gpu.wait().map_err(e)?;
        samples.push(start.elapsed().as_secs_f64() / args.reps.max(1) as f64);
    }
    samples.sort_by(f64::total_cmp);
    Ok(samples[samples.len() / 2])
}

fn run(args: &Args) -> Result<(), String> {
    if !args.rows.is_multiple_of(8)
        || !args.cols.is_multiple_of(8)
        || args.rows == 0
        || args.cols == 0
    {
        return Err("--rows and --cols must be positive multiples of 8".into());
    }
    let gpu = Gpu::new().map_err(|e| e.to_string())?;
    println!(
        "adapter: {}\nmatrices: {} × {} f32 ({} MiB)\n",
        gpu.info(),
        args.rows,
        args.cols,
        (u64::from(args.rows) * u64::from(args.cols) * 4) >> 20
    );
    println!("| view | median per gather | GB/s (read + write) | time / copy |");
    println!("|---|---:|---:|---:|");
    let mut baseline = None;
    for variant in variants(args.rows, args.cols)? {
        let gather =
            Gather::with_index_fn(&variant.f, &variant.bound).map_err(|e| e.to_string())?;
        let src = GpuBuffer::zeroed::<u32>(&gpu, variant.bound.len() as usize)
            .map_err(|e| e.to_string())?;
        let dst = GpuBuffer::zeroed::<u32>(&gpu, gather.elements() as usize)
            .map_err(|e| e.to_string())?;
        let t = median_seconds(&gpu, &gather, &src, &dst, args)?;
        let base = *baseline.get_or_insert(t);
        let gbps = (gather.elements() * 8) as f64 / t / 1e9;
        println!(
            "| `{}` | {:.3} ms | {gbps:.1} | {:.2}× |",
            variant.name,
            t * 1e3,
            t / base
        );
    }
    println!("\nThe first row (a 1-D identity view) is the plain-copy baseline.");
    Ok(())
}

fn main() -> ExitCode {
    support::exit("bench_gather", run(&Args::parse()))
}
