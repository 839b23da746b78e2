//! What the benchmark programs share: their error type, exit codes, a deterministic generator,
//! medians, the training benchmarks' attention and precision choices, a timed step's GPU time
//! by kind of operation and by operation, and the loop that loads the next batch during each
//! step. Each program uses part of it.
#![allow(dead_code)] // each benchmark program compiles this module and uses only part of it

use std::process::ExitCode;

/// A benchmark's result: errors are messages for the user.
pub(crate) type Res<T> = Result<T, String>;

/// An error as its message.
pub(crate) fn err(e: impl std::fmt::Display) -> String {
    e.to_string()
}

/// The exit code of a benchmark `name` that ended with `result`, printing the error.
pub(crate) fn exit(name: &str, result: Res<()>) -> ExitCode {
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("{name}: error: {message}");
            ExitCode::FAILURE
        }
    }
}

/// A small deterministic generator (xorshift64*), so that runs are repeatable.
pub(crate) struct Rng(pub(crate) u64);

impl Rng {
    /// Uniform in [−1, 1).
    pub(crate) fn uniform(&mut self) -> f64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        let bits = x.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 11;
        2.0 * (bits as f64 / (1u64 << 53) as f64) - 1.0
    }
}

/// The median of `v` (the upper one of an even count).
pub(crate) fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// How a training benchmark's attentions keep what their backward reads (`--attention`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum Attention {
    /// The probabilities, stored whole (products on tensor cores where the device has them).
    Materialised,
    /// One log-sum-exp per query; the backward computes the probabilities again.
    Fused,
    /// Each layer as the planner chooses, by predicted time (and the memory budget where one
    /// is given).
    Auto,
}

/// The training benchmarks' `--attention` option (flattened into their arguments).
#[derive(clap::Args, Debug)]
pub(crate) struct AttentionArg {
    /// The attentions to measure (comma-separated: materialised, fused, auto), each a row of
    /// every precision (and strategy, or tuning), in one run.
    #[arg(
        long,
        value_enum,
        value_delimiter = ',',
        default_value = "materialised"
    )]
    pub(crate) attention: Vec<Attention>,
}

/// The element types a training benchmark's steps run in (`--precision`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum Precisions {
    /// Everything f32.
    F32,
    /// f16 activations and gradients, f32 master weights, dynamic loss scaling, tensor cores
    /// where the adapter has them.
    Mixed,
    /// Both, in the same run.
    Both,
}

impl Precisions {
    /// The precisions to run, in the order of the tables.
    pub(crate) fn list(self) -> &'static [fblayout_plan::graph::precision::Precision] {
        use fblayout_plan::graph::precision::Precision;
        match self {
            Self::F32 => &[Precision::F32],
            Self::Mixed => &[Precision::Mixed],
            Self::Both => &[Precision::F32, Precision::Mixed],
        }
    }
}

/// Prints the adapter a training benchmark runs on: name, backend, type and driver.
pub(crate) fn print_adapter(gpu: &fblayout_kernels::runtime::Gpu) {
    let info = gpu.info();
    println!(
        "adapter: {} ({:?}, {:?}, driver {} {})",
        info.name, info.backend, info.device_type, info.driver, info.driver_info
    );
}

/// What compiling pipelines cost between two readings of
/// [`Gpu::compile_stats`](fblayout_kernels::runtime::Gpu::compile_stats): "N pipelines
/// compiled, waited X s (Y s of compilation on the host's threads)".
pub(crate) fn compiled_since(
    gpu: &fblayout_kernels::runtime::Gpu,
    before: fblayout_kernels::runtime::CompileStats,
) -> String {
    let now = gpu.compile_stats();
    format!(
        "{} pipelines compiled, waited {:.1} s ({:.1} s of compilation on the host's threads)",
        now.pipelines - before.pipelines,
        (now.waited - before.waited).as_secs_f64(),
        (now.compiling - before.compiling).as_secs_f64()
    )
}

/// The kind of operation a section (`"<op> <first output>"`) belongs to.
pub(crate) fn kind(section: &str) -> &'static str {
    let op = section.split(' ').next().unwrap_or("");
    match op {
        "linear"
        | "linear_grad_input"
        | "linear_grad_weight"
        | "linear_t"
        | "linear_t_grad_input"
        | "linear_t_grad_weight" => "matmul",
        "attention"
        | "attention_grad"
        | "attention_separate"
        | "attention_separate_grad"
        | "fused_attention"
        | "fused_attention_grad"
        | "fused_attention_separate"
        | "fused_attention_separate_grad" => "attention",
        // The residual additions fused into the norms count with the norms.
        "layer_norm"
        | "layer_norm_grad"
        | "rms_norm"
        | "rms_norm_grad"
        | "add_layer_norm"
        | "layer_norm_grad_add"
        | "add_rms_norm"
        | "rms_norm_grad_add" => "norms",
        "bias" | "bias_grad" => "bias",
        "cross_entropy" | "cross_entropy_grad" => "cross-entropy",
        "head_loss" | "head_loss_grad" => "fused head",
        "embedding" | "embedding_grad" => "embedding",
        "adamw" => "AdamW",
        "loss_scaling" => "overflow checks",
        "convert" => "conversions",
        _ => "elementwise",
    }
}

/// GPU milliseconds by kind of operation, largest first.
pub(crate) fn by_kind(timings: &[fblayout_plan::exec::Timing]) -> Vec<(&'static str, f64)> {
    let mut sums: Vec<(&'static str, f64)> = Vec::new();
    for t in timings {
        let k = kind(t.section.as_deref().unwrap_or(""));
        match sums.iter_mut().find(|(name, _)| *name == k) {
            Some((_, ms)) => *ms += t.nanos / 1e6,
            None => sums.push((k, t.nanos / 1e6)),
        }
    }
    sums.sort_by(|a, b| b.1.total_cmp(&a.1));
    sums
}

/// GPU milliseconds by section (one operation of the graph), largest first.
pub(crate) fn by_section(timings: &[fblayout_plan::exec::Timing]) -> Vec<(String, f64)> {
    summed(timings, |t| t.section.as_deref().unwrap_or(&t.label))
}

/// GPU milliseconds by kernel entry point (`kernel:entry`, every dispatch of it summed),
/// largest first: how an operation of several kernels spends its time.
pub(crate) fn by_kernel(timings: &[fblayout_plan::exec::Timing]) -> Vec<(String, f64)> {
    summed(timings, |t| &t.label)
}

/// GPU milliseconds summed by `key`, largest first.
fn summed(
    timings: &[fblayout_plan::exec::Timing],
    key: impl Fn(&fblayout_plan::exec::Timing) -> &str,
) -> Vec<(String, f64)> {
    let mut sums: Vec<(String, f64)> = Vec::new();
    for t in timings {
        let name = key(t);
        match sums.iter_mut().find(|(n, _)| n == name) {
            Some((_, ms)) => *ms += t.nanos / 1e6,
            None => sums.push((name.to_owned(), t.nanos / 1e6)),
        }
    }
    sums.sort_by(|a, b| b.1.total_cmp(&a.1));
    sums
}

/// The median milliseconds of `samples` steps (at least 1) on the two batches `batches` in
/// turn, each step writing the other batch's inputs while the GPU runs it
/// ([`GpuStep::step_then_load`](fblayout_plan::exec::GpuStep::step_then_load)); one step
/// before them loads its own inputs and is not counted.
pub(crate) fn then_load_ms(
    step: &mut fblayout_plan::exec::GpuStep<'_>,
    batches: [&fblayout_plan::exec::StepInputs; 2],
    samples: usize,
) -> Res<f64> {
    let mut times = Vec::with_capacity(samples.max(1));
    for k in 0..=samples.max(1) {
        let t = std::time::Instant::now();
        step.step_then_load(batches[k % 2], batches[(k + 1) % 2])
            .map_err(err)?;
        if k > 0 {
            times.push(t.elapsed().as_secs_f64() * 1e3);
        }
    }
    Ok(median(times))
}
