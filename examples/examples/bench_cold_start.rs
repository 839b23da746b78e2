//! Cold start: process start to the first finished kernel, with an empty and with a warm
//! pipeline cache on disk.
//!
//! The program runs itself as a child process `--runs` times against one fresh cache
//! directory. Each child opens the GPU, builds every kernel of a transformer layer's
//! elementwise and activation work for several layouts (each build validates its WGSL with
//! naga; the first dispatch of each compiles its pipeline, or finds it in the driver's cache),
//! runs one of each, waits, and exits; the parent times each child from spawn to exit. The first
//! child finds the cache empty and writes it when it drops its device; the others load it.
//!
//! ```text
//! cargo run --release -p fblayout-examples --example bench_cold_start -- --runs 5
//! ```

use std::process::{Command, ExitCode};
use std::time::Instant;

use clap::Parser;
use fblayout_core::layout::{LayoutSpec, View};
use fblayout_kernels::ops::{Activation, ActivationOp};
use fblayout_kernels::runtime::{CacheLoad, Gpu, GpuBuffer, GpuOptions};
use fblayout_kernels::tensor::GpuArg;

/// Time process start to first finished kernel, cold and warm.
#[derive(Parser, Debug)]
#[command(about)]
struct Args {
    /// Child processes to run (the first with an empty cache).
    #[arg(long, default_value_t = 5)]
    runs: usize,
    /// Run as a child with this cache directory (used by the program itself).
    #[arg(long, hide = true)]
    child: Option<std::path::PathBuf>,
}

fn main() -> ExitCode {
    let args = Args::parse();
    let result = match &args.child {
        Some(dir) => child(dir),
        None => parent(&args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("bench_cold_start: {e}");
            ExitCode::FAILURE
        }
    }
}

fn parent(args: &Args) -> Result<(), String> {
    let dir = std::env::temp_dir().join(format!("fblayout-cold-start-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let mut rows = Vec::new();
    for run in 0..args.runs {
        let start = Instant::now();
        let out = Command::new(&exe)
            .arg("--child")
            .arg(&dir)
            .output()
            .map_err(|e| e.to_string())?;
        let wall = start.elapsed().as_secs_f64();
        if !out.status.success() {
            return Err(format!(
                "child {run} failed: {}",
                String::from_utf8_lossy(&out.stderr)
            ));
        }
        let report = String::from_utf8_lossy(&out.stdout).trim().to_owned();
        rows.push((run, wall, report));
    }
    let _ = std::fs::remove_dir_all(&dir);
    println!("| run | process start → exit | in-process: open → first kernel done | cache |");
    println!("|---:|---:|---:|---|");
    for (run, wall, report) in &rows {
        let (inner, cache) = report.split_once(' ').unwrap_or((report, ""));
        println!("| {run} | {:.3} s | {inner} s | {cache} |", wall);
    }
    let warm: Vec<f64> = rows.iter().skip(1).map(|r| r.1).collect();
    if !warm.is_empty() {
        let mut sorted = warm.clone();
        sorted.sort_by(f64::total_cmp);
        let median = sorted[sorted.len() / 2];
        println!(
            "\ncold {:.3} s; warm median {:.3} s ({:.2}× faster)",
            rows[0].1,
            median,
            rows[0].1 / median
        );
    }
    Ok(())
}

fn child(dir: &std::path::Path) -> Result<(), String> {
    let start = Instant::now();
    let e = |x: &dyn std::fmt::Display| x.to_string();
    let gpu = Gpu::with_options(GpuOptions {
        cache_dir: Some(dir.to_path_buf()),
        ..GpuOptions::from_env().map_err(|x| e(&x))?
    })
    .map_err(|x| e(&x))?;
    let views = layouts().map_err(|x| e(&x))?;
    let rows = 256u32;
    let bind = [("tokens", rows)];
    let mut ops = Vec::new();
    for x in &views {
        for y in &views {
            for act in [Activation::Gelu, Activation::Silu] {
                ops.push((ActivationOp::new(&gpu, act, x, y).map_err(|x| e(&x))?, x, y));
            }
        }
    }
    let mut batch = gpu.batch();
    let mut buffers = Vec::new();
    for (_, x, y) in &ops {
        let xb = GpuBuffer::zeroed::<f32>(&gpu, x.bind(&bind).map_err(|x| e(&x))?.len() as usize)
            .map_err(|x| e(&x))?;
        let yb = GpuBuffer::scratch::<f32>(&gpu, y.bind(&bind).map_err(|x| e(&x))?.len() as usize)
            .map_err(|x| e(&x))?;
        buffers.push((xb, yb));
    }
    for ((op, x, y), (xb, yb)) in ops.iter().zip(&buffers) {
        let xa = GpuArg::new(xb, x, &bind).map_err(|x| e(&x))?;
        let ya = GpuArg::new(yb, y, &bind).map_err(|x| e(&x))?;
        op.forward(&mut batch, &xa, &ya).map_err(|x| e(&x))?;
    }
    batch.submit().map_err(|x| e(&x))?;
    gpu.wait().map_err(|x| e(&x))?;
    let elapsed = start.elapsed().as_secs_f64();
    let cache = match gpu.pipeline_cache_load() {
        CacheLoad::Loaded { bytes } => format!(
            "loaded {bytes} bytes ({} pipelines)",
            gpu.cached_pipelines()
        ),
        other => format!("{other:?} ({} pipelines compiled)", gpu.cached_pipelines()),
    };
    println!("{elapsed:.3} {cache}");
    Ok(())
}

/// Row-major, R-Tile and a transposed R-Tile view of activations `[tokens, 768]`.
fn layouts() -> Result<Vec<View>, Box<dyn std::error::Error>> {
    let row = LayoutSpec::new("x")
        .dyn_axis("tokens")
        .axis("hidden", 768)
        .build()?;
    let tiled = LayoutSpec::new("x")
        .dyn_axis("tokens")
        .tile(4, true)
        .axis("hidden", 768)
        .tile(4, false)
        .rtile()
        .reduce_forward(["hidden"])
        .reduce_backward(["tokens"])
        .build()?;
    Ok(vec![row.view(), tiled.view()])
}
