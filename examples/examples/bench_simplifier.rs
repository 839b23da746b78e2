//! Benchmark: what the simplifier does to each canonical layout's index expressions.
//!
//! For every canonical view it reports the integer operations of the offset and of the bounds
//! mask as the layout writes them ("before") and after simplification
//! ("after"; shared subexpressions counted once), and
//! the median time per coordinate of evaluating each form on the CPU over every coordinate of
//! the bound view (the baseline being the unsimplified form, measured in the same run).
//!
//! Run: `cargo run --release -p fblayout-examples --example bench_simplifier [-- --reps N]`

use std::hint::black_box;
use std::process::ExitCode;
use std::time::Instant;

use clap::Parser;
use fblayout_core::expr::{CpuIndexFn, ValidIndexFn};
use fblayout_core::layout::BoundView;
use fblayout_tests::catalog::canonical_views;

/// Reports the simplifier's effect on the canonical layouts.
#[derive(Parser)]
struct Args {
    /// Timed repetitions per form (the median is reported).
    #[arg(long, default_value_t = 31)]
    reps: usize,
}

/// Nanoseconds per coordinate, the median of `reps` passes over every coordinate of `bound`.
fn time_per_coord(f: &ValidIndexFn, bound: &BoundView, reps: usize) -> f64 {
    let cpu = CpuIndexFn::new(f);
    let coords: Vec<Vec<u64>> = {
        let mut all = Vec::new();
        bound.for_each(|_, c, _| {
            let mut args = c.to_vec();
            args.extend_from_slice(bound.extent_args());
            all.push(args);
        });
        all
    };
    let mut regs = Vec::new();
    let mut samples: Vec<f64> = (0..reps.max(1))
        .map(|_| {
            let start = Instant::now();
            let mut acc = 0u64;
            for args in &coords {
                acc = acc.wrapping_add(cpu.eval_with(black_box(args), &mut regs).unwrap_or(0));
            }
            black_box(acc);
            start.elapsed().as_nanos() as f64 / coords.len().max(1) as f64
        })
        .collect();
    samples.sort_by(f64::total_cmp);
    samples[samples.len() / 2]
}

fn main() -> ExitCode {
    let args = Args::parse();
    let views = match canonical_views() {
        Ok(v) => v,
        Err(err) => {
            eprintln!("bench_simplifier: the canonical layouts did not build: {err}");
            return ExitCode::FAILURE;
        }
    };
    println!(
        "| view | what | offset ops before | offset ops after | mask ops before | mask ops after | all ops ratio | ns/coord before (median) | ns/coord after (median) | speed-up |"
    );
    println!("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|");
    let (mut total_before, mut total_after) = (0, 0);
    for canonical in &views {
        let bound = match canonical.view.bind(&canonical.bind) {
            Ok(b) => b,
            Err(err) => {
                eprintln!("bench_simplifier: {err}");
                return ExitCode::FAILURE;
            }
        };
        let naive = canonical.view.index_fn();
        let simple = naive.simplified();
        let (before, after) = (naive.op_count(), simple.op_count());
        let offset_ops = |f: &ValidIndexFn| f.graph.op_count(&[f.offset]);
        let mask_ops = |f: &ValidIndexFn| f.graph.op_count(&[f.in_bounds]);
        total_before += before;
        total_after += after;
        let t_before = time_per_coord(&naive, &bound, args.reps);
        let t_after = time_per_coord(&simple, &bound, args.reps);
        println!(
            "| `{}` | {} | {} | {} | {} | {} | {:.2}× | {t_before:.1} | {t_after:.1} | {:.2}× |",
            canonical.view.name(),
            canonical.description,
            offset_ops(&naive),
            offset_ops(&simple),
            mask_ops(&naive),
            mask_ops(&simple),
            before as f64 / after.max(1) as f64,
            t_before / t_after,
        );
    }
    println!(
        "\nAll canonical views: {total_before} operations before, {total_after} after ({:.2}× fewer).",
        total_before as f64 / total_after.max(1) as f64
    );
    ExitCode::SUCCESS
}
