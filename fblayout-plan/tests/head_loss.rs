//! The fused language-model head ([`Op::HeadLoss`]) against the head it replaces: a linear
//! layer writing the logits and a cross-entropy reading them.
//!
//! Both graphs of each shipped model (encoder with a biased head, decoder without) have the
//! same parameters under the same names, so one seed gives both the same weights, and the
//! unfused graph's step is the oracle: on the CPU (`f64`) the fused step's loss, every
//! gradient and every updated parameter agree to round-off; on the GPU (lavapipe in CI) the
//! fused step, in `f32` under row-major and random layouts, agrees with the unfused CPU step
//! within `f32` tolerances, and in mixed precision within `f16`'s. The tokens (3 × 5) are not a
//! multiple of the chunk (4), some labels are ignored, and the memory plan of the fused step
//! at the benchmarks' shape no longer holds the logits. GPT-2's head (tied to the embedding
//! table, read transposed) and Llama's fuse the same way.

mod exec_support;

use exec_support::{ADAMW, family_layouts, gpu, relative_error, row_major};
use fblayout_plan::exec::{CpuStep, GpuStep, StepInputs, initial_values};
use fblayout_plan::graph::optimizer::add_adamw;
use fblayout_plan::graph::precision::Precision;
use fblayout_plan::graph::{Graph, Op, Sizes, derive_backward};
use fblayout_plan::layouts::LayoutChoice;
use fblayout_plan::lora::{LoraConfig, apply};
use fblayout_plan::memory::{MemoryOptions, plan_memory};
use fblayout_plan::models::gpt2::{self, Gpt2Config};
use fblayout_plan::models::llama::{self, LlamaConfig};
use fblayout_plan::models::{Model, ModelConfig, build};

const SIZES: Sizes = Sizes { batch: 3, seq: 5 };
const CONFIG: ModelConfig = ModelConfig::new(37, 16, 2)
    .with_max_positions(8)
    .with_ffn(32)
    .with_layers(2);
const CHUNK: u32 = 4;

/// Inputs with every third label ignored.
fn inputs(seed: u64) -> StepInputs {
    let n = (SIZES.batch * SIZES.seq) as usize;
    let labels = StepInputs::random(CONFIG.vocab, SIZES, seed + 1).labels;
    let labels = labels
        .iter()
        .enumerate()
        .map(|(i, &l)| if i % 3 == 2 { u32::MAX } else { l })
        .collect::<Vec<_>>();
    assert_eq!(labels.len(), n);
    StepInputs::random(CONFIG.vocab, SIZES, seed).with("labels", labels)
}

fn graphs(model: Model) -> (Graph, Graph) {
    let unfused = build(model, CONFIG).unwrap();
    let fused = build(model, CONFIG.with_head_chunk(CHUNK)).unwrap();
    assert!(
        fused
            .nodes()
            .iter()
            .any(|n| matches!(n.op, Op::HeadLoss(_)))
    );
    assert!(fused.find("head.lin").is_none() && fused.find("head").is_none());
    (unfused, fused)
}

/// The unfused graph's initial parameters, by name (each parameter's stream follows its
/// tensor's id, which differ between the two graphs).
fn params(unfused: &Graph) -> Vec<(String, Vec<f64>)> {
    unfused
        .weights()
        .into_iter()
        .map(|p| {
            (
                unfused.tensor(p).name.clone(),
                initial_values(unfused, p, 7),
            )
        })
        .collect()
}

fn cpu(g: &Graph, layouts: &[LayoutChoice], unfused: &Graph) -> CpuStep {
    let memory = plan_memory(g, layouts, SIZES, MemoryOptions::default()).unwrap();
    let mut step = CpuStep::new(g, layouts, &memory, SIZES, ADAMW).unwrap();
    for (name, values) in params(unfused) {
        step.set(&name, &values).unwrap();
    }
    step
}

/// Every parameter's gradient after a forward and backward, then every parameter after the
/// update, by name.
fn results(g: &Graph, read: impl Fn(&str) -> Vec<f64>) -> Vec<(String, Vec<f64>)> {
    g.params()
        .into_iter()
        .flat_map(|p| {
            let grad = g.tensor(g.grad(p).unwrap()).name.clone();
            [grad, g.tensor(p).name.clone()]
        })
        .map(|name| {
            let values = read(&name);
            (name, values)
        })
        .collect()
}

/// The unfused graph's step on the CPU: its loss and results.
fn oracle(unfused: &Graph) -> (f64, Vec<(String, Vec<f64>)>) {
    let mut step = cpu(unfused, &row_major(unfused), unfused);
    let loss = step.step(&inputs(3)).unwrap();
    (loss, results(unfused, |n| step.read(n).unwrap()))
}

#[test]
fn on_the_cpu_the_fused_head_is_the_head_and_its_cross_entropy() {
    for model in [Model::Encoder, Model::Decoder] {
        let (unfused, fused) = graphs(model);
        let (want_loss, want) = oracle(&unfused);
        let mut step = cpu(&fused, &row_major(&fused), &unfused);
        let loss = step.step(&inputs(3)).unwrap();
        assert!(
            (loss - want_loss).abs() <= 1e-12 * want_loss.abs(),
            "{model:?}: loss {loss}, unfused {want_loss}"
        );
        let got = results(&fused, |n| step.read(n).unwrap());
        for ((name, a), (want_name, b)) in got.iter().zip(&want) {
            assert_eq!(name, want_name);
            let e = relative_error(a, b);
            assert!(e <= 1e-10, "{model:?}: `{name}` relative error {e:e}");
        }
    }
}

#[test]
fn on_the_gpu_the_fused_head_agrees_with_the_unfused_step_under_any_layouts() {
    let gpu = gpu();
    for model in [Model::Encoder, Model::Decoder] {
        let (unfused, fused) = graphs(model);
        let (want_loss, want) = oracle(&unfused);
        for (what, layouts) in [
            ("row-major", row_major(&fused)),
            ("random layouts", family_layouts(&fused, 13)),
        ] {
            let memory = plan_memory(&fused, &layouts, SIZES, MemoryOptions::default()).unwrap();
            let mut step = GpuStep::new(&gpu, &fused, &layouts, &memory, SIZES, ADAMW).unwrap();
            for (name, values) in params(&unfused) {
                step.set(&name, &values).unwrap();
            }
            let loss = f64::from(step.step(&inputs(3)).unwrap());
            assert!(
                (loss - want_loss).abs() <= 2e-5 * want_loss.abs(),
                "{model:?} ({what}): loss {loss} on the GPU, {want_loss} unfused on the CPU"
            );
            let got = results(&fused, |n| step.read(n).unwrap());
            for ((name, a), (_, b)) in got.iter().zip(&want) {
                let e = relative_error(a, b);
                assert!(
                    e <= 2e-4,
                    "{model:?} ({what}): `{name}` relative error {e:e}"
                );
            }
        }
    }
}

#[test]
fn in_mixed_precision_the_fused_head_agrees_with_the_f64_step() {
    let gpu = gpu();
    for model in [Model::Encoder, Model::Decoder] {
        let (unfused, fused) = graphs(model);
        let (want_loss, want) = oracle(&unfused);
        let mixed = Precision::Mixed.apply(&fused).unwrap();
        let layouts = row_major(&mixed);
        let memory = plan_memory(&mixed, &layouts, SIZES, MemoryOptions::default()).unwrap();
        let mut step = GpuStep::new(&gpu, &mixed, &layouts, &memory, SIZES, ADAMW).unwrap();
        for (name, values) in params(&unfused) {
            step.set(&name, &values).unwrap();
        }
        let loss = f64::from(step.step(&inputs(3)).unwrap());
        // f16 activations round each value to 2⁻¹¹ relative; over two blocks the loss stays
        // within 1 %.
        assert!(
            (loss - want_loss).abs() <= 1e-2 * want_loss.abs(),
            "{model:?}: mixed-precision loss {loss}, unfused f64 {want_loss}"
        );
        assert!(!step.last_step_skipped(), "{model:?}: the step overflowed");
        // The head's gradients, which its chunks make (on tensor cores where the GPU has
        // them: each later chunk's `dw` in scratch, then added): within f16's rounding of
        // the logits' gradients and of `x`.
        for name in ["d_head.w", "d_head.b"] {
            let Some((_, b)) = want.iter().find(|(n, _)| n == name) else {
                continue;
            };
            let e = relative_error(&step.read(name).unwrap(), b);
            assert!(e <= 2e-2, "{model:?}: `{name}` relative error {e:e}");
        }
    }
}

#[test]
fn the_fused_steps_memory_plan_holds_no_logits() {
    // The benchmarks' encoder: MiniLM's widths, 32 × 128 tokens, a vocabulary of 30 522.
    let sizes = Sizes {
        batch: 32,
        seq: 128,
    };
    let config = ModelConfig::MINI;
    let tokens = u64::from(sizes.batch * sizes.seq);
    for precision in [Precision::F32, Precision::Mixed] {
        let peak = |c: ModelConfig| {
            let g = precision.apply(&build(Model::Encoder, c).unwrap()).unwrap();
            plan_memory(&g, &row_major(&g), sizes, MemoryOptions::default())
                .unwrap()
                .peak_bytes()
        };
        let (unfused, fused) = (peak(config), peak(config.with_head_chunk(1024)));
        // The unfused step holds the logits, then their gradient written over them: tokens ×
        // vocab elements (4 bytes in f32, 2 in f16); the fused one two chunks of 1024 tokens,
        // and in mixed precision an f32 `dw` (hidden × vocab) a tensor-core product writes.
        let (vocab, hidden) = (u64::from(config.vocab), u64::from(config.hidden));
        let (elem, dw) = match precision {
            Precision::F32 => (4, 0),
            Precision::Mixed => (2, hidden * vocab * 4),
        };
        let logits = tokens * vocab * elem;
        let chunks = 2 * 1024 * vocab * elem;
        assert!(
            fused + logits - chunks - dw <= unfused + unfused / 100,
            "{precision:?}: fused peak {fused} bytes, unfused {unfused}: not {logits} bytes \
             of logits less (less 2 chunks and {dw} bytes of dw)"
        );
    }
}

/// A training graph of `forward`.
fn train(mut forward: Graph) -> Graph {
    derive_backward(&mut forward).unwrap();
    add_adamw(&mut forward).unwrap();
    forward
}

#[test]
fn gpt2s_tied_head_and_llamas_head_fuse_to_the_same_step_with_lora_too() {
    let gpu = gpu();
    let gpt2 = Gpt2Config::new(CONFIG.vocab, 16, 2)
        .with_max_positions(8)
        .with_ffn(32)
        .with_layers(2);
    let llama = LlamaConfig::new(CONFIG.vocab, 16, 4)
        .with_kv_heads(2)
        .with_ffn(24)
        .with_layers(2)
        .with_max_positions(8);
    // With LoRA every base weight is frozen, the head's too: the fused backward then writes
    // `dx` alone (no gradient of the head's weight is made).
    let lora = |mut g: Graph, target: &str| {
        apply(&mut g, &LoraConfig::new(2, 4.0, [target])).unwrap();
        train(g)
    };
    let cases = [
        (
            "GPT-2 (tied, transposed)",
            train(gpt2::forward(&gpt2).unwrap()),
            train(gpt2::forward(&gpt2.clone().with_head_chunk(CHUNK)).unwrap()),
        ),
        (
            "Llama",
            train(llama::forward(&llama).unwrap()),
            train(llama::forward(&llama.clone().with_head_chunk(CHUNK)).unwrap()),
        ),
        (
            "GPT-2 with LoRA",
            lora(gpt2::forward(&gpt2).unwrap(), "c_attn"),
            lora(
                gpt2::forward(&gpt2.with_head_chunk(CHUNK)).unwrap(),
                "c_attn",
            ),
        ),
        (
            "Llama with LoRA",
            lora(llama::forward(&llama).unwrap(), "q_proj"),
            lora(
                llama::forward(&llama.with_head_chunk(CHUNK)).unwrap(),
                "q_proj",
            ),
        ),
    ];
    let n = (SIZES.batch * SIZES.seq) as usize;
    let positions: Vec<u32> = (0..n).map(|i| (i % SIZES.seq as usize) as u32).collect();
    let inputs = inputs(3).with("positions", positions);
    for (what, unfused, fused) in cases {
        assert!(
            fused
                .nodes()
                .iter()
                .any(|n| matches!(n.op, Op::HeadLoss(_)))
        );
        let backward = fused
            .nodes()
            .iter()
            .find_map(|n| match n.op {
                Op::HeadLossGrad(p) => Some((p, n.outputs.len())),
                _ => None,
            })
            .unwrap();
        let frozen = what.contains("LoRA");
        assert_eq!(backward.0.frozen, frozen, "{what}");
        assert_eq!(backward.1, if frozen { 1 } else { 2 }, "{what}: outputs");
        let mut want = cpu(&unfused, &row_major(&unfused), &unfused);
        let want_loss = want.step(&inputs).unwrap();
        let want = results(&unfused, |n| want.read(n).unwrap());
        let mut on_cpu = cpu(&fused, &row_major(&fused), &unfused);
        let cpu_loss = on_cpu.step(&inputs).unwrap();
        assert!(
            (cpu_loss - want_loss).abs() <= 1e-12 * want_loss.abs(),
            "{what}: loss {cpu_loss}, unfused {want_loss}"
        );
        let layouts = row_major(&fused);
        let memory = plan_memory(&fused, &layouts, SIZES, MemoryOptions::default()).unwrap();
        let mut on_gpu = GpuStep::new(&gpu, &fused, &layouts, &memory, SIZES, ADAMW).unwrap();
        for (name, values) in params(&unfused) {
            on_gpu.set(&name, &values).unwrap();
        }
        let gpu_loss = f64::from(on_gpu.step(&inputs).unwrap());
        assert!(
            (gpu_loss - want_loss).abs() <= 2e-5 * want_loss.abs(),
            "{what}: loss {gpu_loss} on the GPU, {want_loss} unfused on the CPU"
        );
        let got_cpu = results(&fused, |n| on_cpu.read(n).unwrap());
        let got_gpu = results(&fused, |n| on_gpu.read(n).unwrap());
        for (((name, c), (_, g)), (_, w)) in got_cpu.iter().zip(&got_gpu).zip(&want) {
            let (ec, eg) = (relative_error(c, w), relative_error(g, w));
            assert!(
                ec <= 1e-10,
                "{what}: `{name}` relative error {ec:e} on the CPU"
            );
            assert!(
                eg <= 2e-4,
                "{what}: `{name}` relative error {eg:e} on the GPU"
            );
        }
    }
}
