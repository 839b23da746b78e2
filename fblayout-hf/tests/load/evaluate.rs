//! The forward-only step against transformers: the tiny BERT, GPT-2 and Llama fixtures'
//! checkpoints built into fblayout's graph, planned keeping `logits` to the end of the step
//! (`MemoryOptions::keep`), evaluated on the CPU executor (f64) and the GPU executor (f32,
//! lavapipe here) on the fixture's padded batch; the logits read back afterwards are compared
//! with the `logits` `python/make_fixtures.py` recorded (`full.safetensors`: transformers'
//! forward of the initial weights, f32), and the returned loss with its `loss`. Evaluating
//! changes no parameter and no moment of the optimizer.
//!
//! Which logits compare: BERT's graph applies the head to every row, transformers to the
//! `[CLS]` row alone (`[batch, labels]`), so the rows at position 0 are compared. The decoders'
//! logits are compared at the real (unpadded) positions: at a padded one transformers' query
//! sees no padded key and the graph's sees the padded keys before it (a convention, see
//! `python/README.md`); causal attention over right padding never lets a real position see a
//! pad.
//!
//! Tolerances, as the largest difference over the largest |logit| compared: 2e-6 on the CPU
//! (f64 from the same f32 weights against PyTorch's f32 round-off; measured up to 5.7e-7,
//! GPT-2), 1e-5 on the GPU (f32, other summation orders; measured up to 6.1e-7 on lavapipe);
//! the loss to 1e-6 relative on the CPU and 1e-5 on the GPU (measured up to 1.2e-7).

use fblayout_hf::graph::{build, parameters};
use fblayout_hf::{ModelDir, lora};
use fblayout_kernels::Gpu;
use fblayout_plan::exec::{CpuStep, GpuStep, StepInputs};
use fblayout_plan::graph::{Graph, Role};
use fblayout_plan::layouts::LayoutChoice;
use fblayout_plan::memory::{MemoryOptions, plan_memory};

use crate::common::{hf, i64_rows, model_dir};
use crate::parity::{Fixture, fixture};

/// A forward-only step and reads, on either executor.
trait Eval {
    fn set(&mut self, name: &str, values: &[f64]);
    fn read(&self, name: &str) -> Vec<f64>;
    fn evaluate(&mut self, inputs: &StepInputs) -> f64;
}

impl Eval for CpuStep {
    fn set(&mut self, name: &str, values: &[f64]) {
        CpuStep::set(self, name, values).unwrap();
    }
    fn read(&self, name: &str) -> Vec<f64> {
        CpuStep::read(self, name).unwrap()
    }
    fn evaluate(&mut self, inputs: &StepInputs) -> f64 {
        CpuStep::evaluate(self, inputs).unwrap()
    }
}

impl Eval for GpuStep<'_> {
    fn set(&mut self, name: &str, values: &[f64]) {
        GpuStep::set(self, name, values).unwrap();
    }
    fn read(&self, name: &str) -> Vec<f64> {
        GpuStep::read(self, name).unwrap()
    }
    fn evaluate(&mut self, inputs: &StepInputs) -> f64 {
        f64::from(GpuStep::evaluate(self, inputs).unwrap())
    }
}

/// The pairs (ours, transformers') of logits that compare (see the module docs).
fn compared(arch: &str, f: &Fixture, ours: &[f64]) -> Vec<(f64, f64)> {
    let theirs = &f.tensors["logits"];
    let (batch, seq) = (f.sizes.batch as usize, f.sizes.seq as usize);
    let width = ours.len() / (batch * seq);
    assert_eq!(
        ours.len(),
        batch * seq * width,
        "{arch}: logits [batch, seq, width]"
    );
    if arch.starts_with("bert") {
        assert_eq!(
            theirs.len(),
            batch * width,
            "{arch}: transformers' [batch, labels]"
        );
        return (0..batch)
            .flat_map(|b| (0..width).map(move |k| (b, k)))
            .map(|(b, k)| (ours[b * seq * width + k], theirs[b * width + k]))
            .collect();
    }
    assert_eq!(
        theirs.len(),
        ours.len(),
        "{arch}: transformers' [batch, seq, vocab]"
    );
    let mask = i64_rows(&hf(arch).join("full.safetensors"), "attention_mask");
    let real: Vec<usize> = (0..batch * seq)
        .filter(|&i| mask[i / seq][i % seq] == 1)
        .collect();
    assert!(real.len() < batch * seq, "{arch}: the batch is padded");
    real.iter()
        .flat_map(|&i| (0..width).map(move |k| i * width + k))
        .map(|i| (ours[i], theirs[i]))
        .collect()
}

/// Evaluates `f`'s batch on `step` (its parameters set) and checks the loss, the logits and
/// that no parameter or moment changed, within `(loss, logits)`.
fn check(
    (arch, on): (&str, &str),
    graph: &Graph,
    step: &mut dyn Eval,
    f: &Fixture,
    tol: (f64, f64),
) {
    let what = format!("{arch} on the {on}");
    let persistent: Vec<String> = graph
        .tensors()
        .iter()
        .filter(|t| matches!(t.role, Role::Param | Role::State { .. }))
        .map(|t| t.name.clone())
        .collect();
    let before: Vec<Vec<f64>> = persistent.iter().map(|n| step.read(n)).collect();
    let loss = step.evaluate(&f.inputs);
    assert!(
        (loss - f.loss).abs() <= tol.0 * f.loss.abs(),
        "{what}: loss {loss}, transformers {}",
        f.loss
    );
    let pairs = compared(arch, f, &step.read("logits"));
    let scale = pairs.iter().fold(0.0f64, |m, (_, b)| m.max(b.abs()));
    let worst = pairs
        .iter()
        .map(|(a, b)| (a - b).abs())
        .fold(0.0f64, f64::max);
    assert!(
        worst <= tol.1 * scale,
        "{what}: the logits differ from transformers' by up to {worst:e} (largest |logit| \
         {scale:e}, tolerance {:e})",
        tol.1
    );
    for (name, was) in persistent.iter().zip(&before) {
        assert_eq!(&step.read(name), was, "{what}: evaluate changed `{name}`");
    }
}

/// The fixture model of `arch`, evaluated on the CPU and the GPU against transformers.
fn logits_match(arch: &str) {
    let model = ModelDir::open(model_dir(arch)).unwrap();
    let graph = build(&model).unwrap();
    let values = parameters(&model, &graph).unwrap();
    let f = fixture(arch, "full.safetensors");
    evaluates_to(arch, &graph, &values, &f);
}

/// `graph` with the weights `values`, evaluated on the CPU and the GPU against `f`.
fn evaluates_to(arch: &str, graph: &Graph, values: &[(String, Vec<f64>)], f: &Fixture) {
    let (graph, f) = (graph, f);
    let layouts = vec![LayoutChoice::RowMajor; graph.tensors().len()];
    let options = MemoryOptions::default().keeping(["logits"]);
    let memory = plan_memory(graph, &layouts, f.sizes, options).unwrap();

    let mut cpu = CpuStep::new(graph, &layouts, &memory, f.sizes, f.adamw)
        .unwrap()
        .poison_freed(true);
    for (name, v) in values {
        Eval::set(&mut cpu, name, v);
    }
    check((arch, "CPU"), graph, &mut cpu, f, (1e-6, 2e-6));

    let gpu = Gpu::new().unwrap_or_else(|err| {
        panic!(
            "could not open a GPU; install Mesa's Vulkan drivers (lavapipe) or set \
             FBLAYOUT_ADAPTER/FBLAYOUT_BACKEND.\n{err}"
        )
    });
    let mut on_gpu = GpuStep::new(&gpu, graph, &layouts, &memory, f.sizes, f.adamw).unwrap();
    for (name, v) in values {
        Eval::set(&mut on_gpu, name, v);
    }
    check((arch, "GPU"), graph, &mut on_gpu, f, (1e-5, 1e-5));
}

#[test]
fn a_trained_seq_cls_adapter_evaluates_to_peft_s_logits_on_the_cpu_and_the_gpu() {
    // peft's SEQ_CLS adapter after three steps (python/make_seq_cls_fixture.py): LoRA on
    // `query` and `value`, and the classifier trained in full (modules_to_save), which no
    // longer equals the base model's: the logits depend on reading it from the adapter.
    let model = ModelDir::open(model_dir("bert")).unwrap();
    let adapter = hf("bert").join("seq_cls/adapter");
    let config = lora::read_config(&adapter).unwrap();
    let (graph, adapters) = lora::build(&model, &config).unwrap();
    let values = lora::weights(&model, &adapter, &graph, &adapters).unwrap();
    let base = parameters(&model, &graph).unwrap();
    let classifier = |v: &[(String, Vec<f64>)]| {
        v.iter()
            .find(|(n, _)| n == "classifier.weight")
            .unwrap()
            .1
            .clone()
    };
    assert_ne!(classifier(&values), classifier(&base));
    assert_eq!(values.len(), graph.weights().len());
    let f = fixture("bert", "seq_cls/logits.safetensors");
    evaluates_to("bert with its SEQ_CLS adapter", &graph, &values, &f);
}

#[test]
fn the_bert_fixture_evaluates_to_transformers_logits_on_the_cpu_and_the_gpu() {
    logits_match("bert");
}

#[test]
fn the_gpt2_fixture_evaluates_to_transformers_logits_on_the_cpu_and_the_gpu() {
    logits_match("gpt2");
}

#[test]
fn the_llama_fixture_evaluates_to_transformers_logits_on_the_cpu_and_the_gpu() {
    logits_match("llama");
}
