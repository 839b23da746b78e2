//! One transformer encoder layer (BERT's: post-LayerNorm, GELU feed-forward), forward and
//! backward, on the GPU and on the CPU backend, under a layout plan.
//!
//! The main job runs it on random data: under the planned layouts and under one row-major
//! layout on the GPU, timing every step, and under the planned layouts on the CPU, which is
//! what the GPU's output and every gradient are checked against.

mod cpu;
mod data;
mod gpu;
pub(crate) mod plan;
mod slots;

use std::collections::BTreeMap;
use std::time::Instant;

use fblayout_kernels::runtime::{Gpu, Timing};

pub(crate) use cpu::CpuLayer;
pub(crate) use data::{Data, RESULTS, relative_error};
pub(crate) use gpu::GpuLayer;
pub(crate) use plan::{Config, Plan, Strategy};

/// The time of each step of one run, in the order the steps first ran.
#[derive(Debug, Clone, Default)]
pub(crate) struct StepTimes {
    pub(crate) steps: Vec<(String, f64)>,
    /// Whether the times are GPU timestamps (else the wall clock around each dispatch).
    pub(crate) gpu_timestamps: bool,
}

impl StepTimes {
    /// Sums the dispatches of each section.
    fn of(timings: &[Timing]) -> Self {
        let mut steps: Vec<(String, f64)> = Vec::new();
        for t in timings {
            let name = t.section.clone().unwrap_or_else(|| t.label.clone());
            match steps.iter_mut().find(|(n, _)| *n == name) {
                Some((_, ms)) => *ms += t.nanos / 1e6,
                None => steps.push((name, t.nanos / 1e6)),
            }
        }
        Self {
            steps,
            gpu_timestamps: timings.iter().all(|t| t.gpu_timestamps),
        }
    }

    /// The total, in milliseconds.
    pub(crate) fn total(&self) -> f64 {
        self.steps.iter().map(|(_, ms)| ms).sum()
    }

    /// The time of step `name`.
    pub(crate) fn get(&self, name: &str) -> Option<f64> {
        self.steps
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, ms)| *ms)
    }
}

/// A GPU run of the layer: its step times (median of `runs` timed runs after warming up) and
/// its results.
pub(crate) struct GpuRun {
    pub(crate) times: StepTimes,
    /// The CPU time to record the batch of one run (median), in milliseconds.
    pub(crate) record_ms: f64,
    pub(crate) results: BTreeMap<&'static str, Vec<f64>>,
}

/// How long [`run_gpu`] runs the layer before timing it on a hardware adapter.
pub(crate) const WARM_UP: std::time::Duration = std::time::Duration::from_millis(800);

fn e(err: impl std::fmt::Display) -> String {
    err.to_string()
}

/// Builds the layer for `plan` on `gpu`, runs it `runs` times and keeps the median time of each
/// step and the results of the last run. With `warm_up` it first runs the layer for at least
/// [`WARM_UP`] (a discrete GPU idles at a fraction of its clock and takes that long to reach
/// it); else it records one batch it never submits. Pipelines are compiled when the batch is recorded, so no time of a pipeline's
/// compilation is counted either way.
pub(crate) fn run_gpu(
    gpu: &Gpu,
    plan: &Plan,
    data: &Data,
    runs: usize,
    warm_up: bool,
) -> Result<GpuRun, String> {
    let layer = GpuLayer::new(gpu, plan)?;
    let buffers = GpuLayer::buffers(gpu, plan, data)?;
    if warm_up {
        let start = std::time::Instant::now();
        while start.elapsed() < WARM_UP {
            layer.run_timed(gpu, &buffers)?;
        }
    } else {
        // Record once without running: pipelines compile on first use, and kernels built per
        // shape are built here, so the timed run's recording time is the steady one.
        let mut batch = gpu.batch();
        layer.record(&mut batch, &buffers)?;
    }
    let mut all: Vec<StepTimes> = Vec::with_capacity(runs);
    let mut recording = Vec::with_capacity(runs);
    for _ in 0..runs.max(1) {
        let (timings, seconds) = layer.run_timed(gpu, &buffers)?;
        all.push(StepTimes::of(&timings));
        recording.push(seconds * 1e3);
    }
    recording.sort_by(f64::total_cmp);
    let record_ms = recording[recording.len() / 2];
    let mut times = all[0].clone();
    for (name, ms) in &mut times.steps {
        let mut samples: Vec<f64> = all.iter().filter_map(|t| t.get(name)).collect();
        samples.sort_by(f64::total_cmp);
        *ms = samples[samples.len() / 2];
    }
    let mut results = BTreeMap::new();
    for &name in RESULTS {
        results.insert(name, layer.read(&buffers, name)?);
    }
    gpu.wait().map_err(e)?;
    Ok(GpuRun {
        times,
        record_ms,
        results,
    })
}

/// Runs the layer for `plan` on the CPU backend; returns its results and the time taken.
pub(crate) fn run_cpu(
    plan: &Plan,
    data: &Data,
) -> Result<(BTreeMap<&'static str, Vec<f64>>, f64), String> {
    let start = Instant::now();
    let mut layer = CpuLayer::new(plan, data)?;
    layer.run()?;
    let results = RESULTS.iter().map(|&n| (n, layer.read(n))).collect();
    Ok((results, start.elapsed().as_secs_f64()))
}
