//! The forward-only step (`evaluate`) on the CPU and the GPU, and the tensors a memory plan
//! keeps readable to the end of the step (`MemoryOptions::keep`): the logits read after an
//! evaluation give the evaluation's loss by the cross-entropy's formula, every buffer freed
//! within the step poisoned; the GPU's logits are the CPU's; nothing persistent changes; a name
//! that is no tensor, a tensor not kept, or one no kernel writes, is a clear error.

mod exec_support;

use exec_support::{ADAMW, SIZES, SMALL, gpu, graph, row_major};
use fblayout_plan::exec::{CpuStep, ExecError, GpuStep, StepInputs};
use fblayout_plan::graph::{Graph, Role};
use fblayout_plan::memory::{MemoryError, MemoryOptions, MemoryPlan, plan_memory};
use fblayout_plan::models::Model;

/// The name of the model's logits (`[batch, seq, vocab]`): the encoder's head has a bias, the
/// decoder's none.
fn logits(model: Model) -> &'static str {
    match model {
        Model::Encoder => "head",
        Model::Decoder => "head.lin",
    }
}

fn keeping(g: &Graph, names: &[&str]) -> MemoryPlan {
    let options = MemoryOptions::default().keeping(names.iter().copied());
    plan_memory(g, &row_major(g), SIZES, options).unwrap()
}

/// The mean over positions of `logsumexp(row) − row[label]`: the cross-entropy by its formula
/// (every label of [`StepInputs::random`] counts).
fn cross_entropy(logits: &[f64], labels: &[u32], vocab: usize) -> f64 {
    let rows = logits.chunks_exact(vocab);
    assert_eq!(rows.len(), labels.len());
    let sum: f64 = rows
        .zip(labels)
        .map(|(row, &label)| {
            let max = row.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            let lse = max + row.iter().map(|x| (x - max).exp()).sum::<f64>().ln();
            lse - row[label as usize]
        })
        .sum();
    sum / labels.len() as f64
}

/// Every parameter and every moment of the optimizer, by name.
fn persistent(g: &Graph, read: impl Fn(&str) -> Vec<f64>) -> Vec<(String, Vec<f64>)> {
    let all: Vec<(String, Vec<f64>)> = g
        .tensors()
        .iter()
        .filter(|t| matches!(t.role, Role::Param | Role::State { .. }))
        .map(|t| (t.name.clone(), read(&t.name)))
        .collect();
    assert!(
        all.len() == 3 * g.params().len(),
        "every parameter and its moments"
    );
    all
}

#[test]
fn a_kept_tensor_lives_to_the_end_of_the_step_and_the_peak_counts_it() {
    for model in [Model::Encoder, Model::Decoder] {
        let g = graph(model);
        let name = logits(model);
        let t = g.find(name).unwrap();
        let plain = plan_memory(&g, &row_major(&g), SIZES, MemoryOptions::default()).unwrap();
        let kept = keeping(&g, &[name]);
        assert!(!plain.kept(t), "{model:?}: `{name}` is freed without keep");
        assert!(kept.kept(t));
        let last = g.nodes().len() - 1;
        assert!(plain.live(t).unwrap().last < last);
        assert_eq!(kept.live(t).unwrap().last, last);
        assert_eq!(plain.live(t).unwrap().first, kept.live(t).unwrap().first);
        // Live longer, so at least as many bytes live at every operation, and not in a buffer
        // freed before the end.
        assert!(kept.peak_live_bytes() >= plain.peak_live_bytes());
        let b = kept.buffer_of(t).unwrap();
        assert!((0..g.nodes().len()).all(|i| !kept.freed_after(i).contains(&b)));
    }
}

#[test]
fn keeping_a_name_that_is_no_tensor_is_an_error_naming_it() {
    let g = graph(Model::Encoder);
    let options = MemoryOptions::default().keeping(["head", "no_such_tensor"]);
    let err = plan_memory(&g, &row_major(&g), SIZES, options).unwrap_err();
    assert!(matches!(&err, MemoryError::Keep { name, .. } if name == "no_such_tensor"));
    let text = err.to_string();
    assert!(text.contains("`no_such_tensor`"), "{text}");
    assert!(text.contains("no tensor of that name"), "{text}");
}

#[test]
fn keeping_a_product_output_no_kernel_writes_is_an_error_naming_what_to_keep() {
    // The encoder's head adds its bias as it writes: its product's own output is never
    // written, so it has no buffer to keep.
    let g = graph(Model::Encoder);
    let t = g.find("head.lin").unwrap();
    assert!(g.unwritten().iter().any(|&(_, u)| u == t));
    let plain = plan_memory(&g, &row_major(&g), SIZES, MemoryOptions::default()).unwrap();
    assert_eq!(plain.buffer_of(t), None);
    assert_eq!(plain.live(t), None);
    let options = MemoryOptions::default().keeping(["head.lin"]);
    let err = plan_memory(&g, &row_major(&g), SIZES, options).unwrap_err();
    assert!(matches!(&err, MemoryError::Keep { name, .. } if name == "head.lin"));
    let text = err.to_string();
    assert!(text.contains("keep that output"), "{text}");
}

#[test]
fn cpu_evaluate_returns_the_logits_loss_and_changes_nothing_persistent() {
    for model in [Model::Encoder, Model::Decoder] {
        let g = graph(model);
        let name = logits(model);
        let memory = keeping(&g, &[name]);
        let mut cpu = CpuStep::new(&g, &row_major(&g), &memory, SIZES, ADAMW)
            .unwrap()
            .poison_freed(true);
        cpu.init_params(7).unwrap();
        // A step first, so that the moments are not zero.
        cpu.step(&StepInputs::random(SMALL.vocab, SIZES, 3))
            .unwrap();
        let before = persistent(&g, |n| cpu.read(n).unwrap());
        let inputs = StepInputs::random(SMALL.vocab, SIZES, 11);
        let loss = cpu.evaluate(&inputs).unwrap();
        let got = cpu.read(name).unwrap();
        assert_eq!(got.len(), (SIZES.batch * SIZES.seq * SMALL.vocab) as usize);
        // Every freed buffer is NaN: finite logits were not overwritten or freed.
        assert!(got.iter().all(|x| x.is_finite()), "{model:?}: {name}");
        let want = cross_entropy(&got, &inputs.labels, SMALL.vocab as usize);
        assert!(
            (loss - want).abs() <= 1e-12 * want.abs(),
            "{model:?}: loss {loss}, by the formula from the logits {want}"
        );
        let after = persistent(&g, |n| cpu.read(n).unwrap());
        assert_eq!(
            before, after,
            "{model:?}: evaluate changed a persistent tensor"
        );
        assert_eq!(cpu.steps(), 1);
        // The step after it is the step without it.
        let mut fresh = CpuStep::new(&g, &row_major(&g), &memory, SIZES, ADAMW).unwrap();
        fresh.init_params(7).unwrap();
        fresh
            .step(&StepInputs::random(SMALL.vocab, SIZES, 3))
            .unwrap();
        let next = StepInputs::random(SMALL.vocab, SIZES, 5);
        assert_eq!(cpu.step(&next).unwrap(), fresh.step(&next).unwrap());
    }
}

#[test]
fn reading_a_tensor_not_kept_or_not_there_is_a_clear_error() {
    let g = graph(Model::Encoder);
    let memory = keeping(&g, &["head"]);
    let mut cpu = CpuStep::new(&g, &row_major(&g), &memory, SIZES, ADAMW).unwrap();
    cpu.init_params(7).unwrap();
    cpu.evaluate(&StepInputs::random(SMALL.vocab, SIZES, 11))
        .unwrap();
    let err = cpu.read("l0.ffn.gelu").unwrap_err();
    assert!(
        matches!(&err, ExecError::NotKept(n) if n == "l0.ffn.gelu"),
        "{err}"
    );
    let err = cpu.read("no_such_tensor").unwrap_err();
    assert!(
        matches!(&err, ExecError::Unknown(n) if n == "no_such_tensor"),
        "{err}"
    );
}

#[test]
fn gpu_evaluate_gives_the_cpu_logits_and_changes_nothing_persistent() {
    let gpu = gpu();
    for model in [Model::Encoder, Model::Decoder] {
        let g = graph(model);
        let name = logits(model);
        let layouts = row_major(&g);
        let memory = keeping(&g, &[name]);
        let mut on_gpu = GpuStep::new(&gpu, &g, &layouts, &memory, SIZES, ADAMW).unwrap();
        let mut on_cpu = CpuStep::new(&g, &layouts, &memory, SIZES, ADAMW).unwrap();
        on_gpu.upload_params(7).unwrap();
        on_cpu.init_params(7).unwrap();
        let first = StepInputs::random(SMALL.vocab, SIZES, 3);
        on_gpu.step(&first).unwrap();
        on_cpu.step(&first).unwrap();
        on_gpu.poison().unwrap();
        let before = persistent(&g, |n| on_gpu.read(n).unwrap());
        let inputs = StepInputs::random(SMALL.vocab, SIZES, 11);
        let loss = on_gpu.evaluate(&inputs).unwrap();
        let want_loss = on_cpu.evaluate(&inputs).unwrap();
        assert!(
            (f64::from(loss) - want_loss).abs() <= 1e-5 * want_loss.abs(),
            "{model:?}: loss {loss} on the GPU, {want_loss} on the CPU"
        );
        let got = on_gpu.read(name).unwrap();
        let want = on_cpu.read(name).unwrap();
        let scale = want.iter().fold(0.0f64, |m, x| m.max(x.abs()));
        for (i, (a, b)) in got.iter().zip(&want).enumerate() {
            assert!(
                (a - b).abs() <= 1e-5 * scale,
                "{model:?}: {name}[{i}] = {a} on the GPU, {b} on the CPU"
            );
        }
        let after = persistent(&g, |n| on_gpu.read(n).unwrap());
        assert_eq!(
            before, after,
            "{model:?}: evaluate changed a persistent tensor"
        );
        assert_eq!(on_gpu.steps(), 1);
        // The recording still runs whole steps after it.
        let next = StepInputs::random(SMALL.vocab, SIZES, 5);
        let (a, b) = (on_gpu.step(&next).unwrap(), on_cpu.step(&next).unwrap());
        assert!(
            (f64::from(a) - b).abs() <= 1e-5 * b.abs(),
            "{model:?}: the step after evaluate: {a} on the GPU, {b} on the CPU"
        );
        let err = on_gpu.read("l0.ffn.gelu").unwrap_err();
        assert!(matches!(err, ExecError::NotKept(_)), "{err}");
    }
}
