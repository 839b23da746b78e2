//! The memory plan against what the GPU step allocates, for the shipped models' graphs (the
//! encoder, the decoder and a Llama-family decoder, at small widths), in `f32` and in mixed
//! precision, at sizes where no product splits and at sizes where products split their
//! reductions and row reductions cut their rows into many chunks.
//!
//! The invariant: every byte the device's buffer pool creates from before the step is built to
//! after two steps ([`PoolStats::bytes_allocated`]: every buffer it made, live or freed for
//! reuse, at the size it made it) is counted by the plan, so it is at most
//! [`MemoryPlan::peak_bytes`]; and the plan counts nothing twice, so it exceeds the allocation
//! by less than its one bound, the allowance for the dispatches' parameter blocks. (The step
//! itself checks the other half: each operation's scratch comes from the plan's workspace and
//! fits what its contract counts, else [`ExecError::Uncounted`].) Staging buffers that wgpu
//! makes for a read back or a write are transient and outside the pool.

mod exec_support;

use exec_support::{ADAMW, SIZES, SMALL, gpu, row_major};
use fblayout_kernels::runtime::PoolStats;
#[cfg(doc)]
use fblayout_plan::exec::ExecError;
use fblayout_plan::exec::{GpuStep, StepInputs};
use fblayout_plan::graph::{Graph, Sizes, precision};
use fblayout_plan::memory::{MemoryOptions, MemoryPlan, plan_memory};
use fblayout_plan::models::llama::{self, LlamaConfig};
use fblayout_plan::models::{Model, ModelConfig, build};

/// Two layers over long sequences: the weight gradients reduce over 2048 tokens into few
/// outputs, so the `f32` products split their reductions, and the bias and norm gradients sum
/// their tokens in many chunks.
const LONG: ModelConfig = ModelConfig::new(67, 8, 2)
    .with_max_positions(256)
    .with_ffn(16)
    .with_layers(2);

/// A Llama-family decoder as narrow as `config`, with grouped-query attention (two query heads
/// a key/value head), rotary positions and a SwiGLU feed-forward.
fn llama_like(config: ModelConfig) -> Graph {
    let c = LlamaConfig::new(config.vocab, config.hidden, config.heads)
        .with_kv_heads(1)
        .with_ffn(config.ffn)
        .with_layers(config.layers)
        .with_max_positions(config.max_positions);
    llama::build(&c).unwrap()
}

/// 2048 tokens.
const LONG_SIZES: Sizes = Sizes { batch: 8, seq: 256 };

/// What the pool allocated while the step was built and ran its steps: bytes and buffers.
struct Allocated {
    built: PoolStats,
    steps: Vec<PoolStats>,
}

impl Allocated {
    fn bytes(&self) -> u64 {
        self.steps.last().unwrap_or(&self.built).bytes_allocated
    }
}

/// Builds the step of `g` on a fresh device (so its pool is empty), runs two steps and says
/// what the pool allocated for it, counted from before the step was built.
fn allocate(g: &Graph, plan: &MemoryPlan, config: ModelConfig, sizes: Sizes) -> Allocated {
    let gpu = gpu();
    let layouts = row_major(g);
    let before = gpu.pool_stats();
    let since = |now: PoolStats| PoolStats {
        allocations: now.allocations - before.allocations,
        reuses: now.reuses - before.reuses,
        bytes_allocated: now.bytes_allocated - before.bytes_allocated,
        bytes_free: now.bytes_free,
    };
    let mut step = GpuStep::new(&gpu, g, &layouts, plan, sizes, ADAMW).unwrap();
    step.upload_params(7).unwrap();
    let built = since(gpu.pool_stats());
    let mut steps = Vec::new();
    for seed in [11, 12] {
        let inputs = StepInputs::random(config.vocab, sizes, seed);
        step.step(&inputs).unwrap();
        steps.push(since(gpu.pool_stats()));
    }
    Allocated { built, steps }
}

/// What `plan` counts, part by part.
fn planned(plan: &MemoryPlan) -> String {
    let buffers: u64 = plan.buffers().iter().sum();
    format!(
        "planned {} bytes: {} buffers of {buffers} bytes, a workspace of {} ({} bytes), {} \
         bytes held throughout (kernel state, uploaded ids, the step's vectors, and {} bytes \
         for parameter blocks)",
        plan.peak_bytes(),
        plan.buffers().len(),
        plan.workspace(),
        plan.workspace_bytes(),
        plan.held_bytes(),
        plan.params_bytes(),
    )
}

fn show(s: &PoolStats) -> String {
    format!("{} bytes in {} buffers", s.bytes_allocated, s.allocations)
}

#[test]
fn the_gpu_step_allocates_nothing_its_memory_plan_does_not_count() {
    for (config, sizes) in [(SMALL, SIZES), (LONG, LONG_SIZES)] {
        let models = [
            ("encoder", build(Model::Encoder, config).unwrap()),
            ("decoder", build(Model::Decoder, config).unwrap()),
            ("llama", llama_like(config)),
        ];
        for (model, f32) in models {
            let mixed = precision::mixed(&f32).unwrap();
            for (precision, g) in [("f32", f32), ("mixed", mixed)] {
                let what = format!("{model} {precision} at {sizes:?}");
                let plan =
                    plan_memory(&g, &row_major(&g), sizes, MemoryOptions::default()).unwrap();
                let got = allocate(&g, &plan, config, sizes);
                let steps: Vec<String> = got
                    .steps
                    .iter()
                    .enumerate()
                    .map(|(k, s)| format!("{} after step {}", show(s), k + 1))
                    .collect();
                let report = format!(
                    "{what}: allocated {} once built, {}; {}",
                    show(&got.built),
                    steps.join(", "),
                    planned(&plan),
                );
                eprintln!("{report}");
                assert!(got.bytes() <= plan.peak_bytes(), "{report}");
                // Nothing is counted twice: all the plan has to spare is what its bound on the
                // dispatches' parameter blocks leaves.
                assert!(
                    plan.peak_bytes() - got.bytes() < plan.params_bytes(),
                    "{report}: the plan counts more than its bound on parameter blocks leaves"
                );
                // One workspace lends every operation its scratch: less than the operations'
                // scratch together, since there are several attentions.
                let each: u64 = (0..g.nodes().len()).map(|i| plan.scratch(i).bytes()).sum();
                assert!(
                    plan.workspace_bytes() < each,
                    "{report}: {each} bytes of scratch"
                );
            }
        }
    }
}
