//! A deep model's step: its parameter blocks together pass the device's uniform binding limit
//! (64 KiB on lavapipe and on the H200), which a batch must not need, since each block is
//! bound by its own range. A 30-block Llama decoder's GPU step runs, and its loss agrees with
//! the CPU executor's `f64` step.

mod exec_support;

use fblayout_plan::exec::{AdamWConfig, CpuStep, GpuStep, StepInputs};
use fblayout_plan::graph::Sizes;
use fblayout_plan::layouts::LayoutChoice;
use fblayout_plan::memory::{MemoryOptions, plan_memory};
use fblayout_plan::models::llama::{self, LlamaConfig};

#[test]
fn a_step_whose_parameter_blocks_pass_the_uniform_limit_runs() {
    let gpu = exec_support::gpu();
    let config = LlamaConfig::new(23, 16, 4)
        .with_kv_heads(2)
        .with_ffn(24)
        .with_layers(30)
        .with_max_positions(8);
    let g = llama::build(&config).unwrap();
    let sizes = Sizes { batch: 2, seq: 3 };
    let layouts = vec![LayoutChoice::RowMajor; g.tensors().len()];
    let memory = plan_memory(&g, &layouts, sizes, MemoryOptions::default()).unwrap();
    let inputs = StepInputs::random(config.vocab, sizes, 5);
    let mut cpu = CpuStep::new(&g, &layouts, &memory, sizes, AdamWConfig::default()).unwrap();
    cpu.init_params(3).unwrap();
    let want = cpu.step(&inputs).unwrap();
    let mut step =
        GpuStep::new(&gpu, &g, &layouts, &memory, sizes, AdamWConfig::default()).unwrap();
    step.upload_params(3).unwrap();
    let got = f64::from(step.step(&inputs).unwrap());
    // f32 against f64 through 30 blocks.
    assert!(
        (got - want).abs() <= 1e-4 * want.abs(),
        "GPU loss {got} against the f64 CPU loss {want}"
    );
}
