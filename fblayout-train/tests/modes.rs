//! LoRA, the export at the end of a run, and sequence classification, on the tiny GPT-2 and
//! BERT fixtures (made by transformers, `python/make_fixtures.py`): each checked against what
//! fblayout-hf's loader reads back from the model directory or from the export.

mod support;

use std::path::Path;

use fblayout_hf::ModelDir;
use fblayout_plan::lora::{LoraConfig, PEFT_PREFIX};
use fblayout_plan::memory::Recompute;
use fblayout_train::log::Record;
use fblayout_train::{
    EXPORT_ADAPTER, EXPORT_MODEL, Fusing, Task, TrainError, Trainer, TrainerBuilder, checkpoint,
};
use support::{bert, data, evals, gpt2, losses, rabbits};

fn lm(model: &Path, out: &Path) -> TrainerBuilder<'static> {
    Trainer::builder(model, data("alice.txt"), Task::Lm)
        .seq(16)
        .batch(2)
        .eval_fraction(0.2)
        .eval_every(0)
        .save_every(0)
        .seed(5)
        .out(out)
}

/// The mean of the last quarter of `l` is below that of its first quarter.
fn falls(l: &[f64]) -> bool {
    let q = l.len() / 4;
    let mean = |s: &[f64]| s.iter().sum::<f64>() / s.len() as f64;
    mean(&l[l.len() - q..]) < mean(&l[..q])
}

/// Every weight of the model in `dir` as fblayout-hf's loader reads it, by name.
fn loaded(dir: &Path) -> Vec<(String, Vec<f64>)> {
    let model = ModelDir::open(dir).unwrap();
    let graph = fblayout_hf::graph::build(&model).unwrap();
    fblayout_hf::graph::parameters(&model, &graph).unwrap()
}

/// The held-out loss of the model in `export`, loaded afresh, on the data and split of `b`.
fn reloaded_eval(b: TrainerBuilder<'_>) -> f64 {
    b.build().unwrap().evaluate().unwrap().unwrap().loss
}

/// `a` and `b` agree to `tol` relative.
fn close(a: f64, b: f64, tol: f64) -> bool {
    (a - b).abs() <= tol * a.abs().max(b.abs())
}

#[test]
fn lora_trains_the_adapters_alone_and_resumes_exactly() {
    let dir = tempfile::tempdir().unwrap();
    let config = || LoraConfig::new(4, 16.0, Vec::<String>::new());
    let run = |out: &Path| lm(&gpt2(), out).lora(config()).lr(1e-2).steps(12);
    let mut trainer = run(dir.path()).build().unwrap();
    let summary = trainer.run(|_| {}).unwrap();
    let l = losses(&summary.records);
    assert_eq!(l.len(), 12);
    assert!(falls(&l), "LoRA's losses {l:?} did not fall");

    // The base weights are bit for bit the checkpoint's, as the loader reads them.
    let after = trainer.weights().unwrap();
    let base = loaded(&gpt2());
    for (name, values) in &base {
        let (_, now) = after.iter().find(|(n, _)| n == name).unwrap();
        assert_eq!(now, values, "`{name}` changed");
    }
    // GPT-2's default target is `c_attn`, one per block: A and B of each trained.
    let adapters: Vec<_> = after
        .iter()
        .filter(|(n, _)| n.starts_with(PEFT_PREFIX))
        .collect();
    assert_eq!(adapters.len() + base.len(), after.len());
    assert_eq!(adapters.len(), 2 * 2, "{:?}", adapters.iter().map(|a| &a.0));
    for (name, v) in &adapters {
        if name.contains("lora_B") {
            assert!(v.iter().any(|&x| x != 0.0), "`{name}` is still zero");
        }
    }

    // The checkpoint holds the adapters and their moments, nothing of the base.
    let saved = checkpoint::load(&summary.checkpoint).unwrap();
    assert_eq!(saved.tensors.len(), 3 * adapters.len());
    for (name, _, _) in &saved.tensors {
        assert!(name.starts_with(PEFT_PREFIX), "`{name}` in the checkpoint");
    }

    // Stopped after step 5 and resumed: the uninterrupted losses, bit for bit.
    let split = tempfile::tempdir().unwrap();
    run(split.path())
        .stop_after(5)
        .build()
        .unwrap()
        .run(|_| {})
        .unwrap();
    let rest = run(split.path())
        .resume(true)
        .build()
        .unwrap()
        .run(|_| {})
        .unwrap();
    assert_eq!(rest.records, summary.records);
}

#[test]
fn a_full_export_reloads_with_the_trained_held_out_loss() {
    let dir = tempfile::tempdir().unwrap();
    let summary = lm(&gpt2(), dir.path())
        .lr(3e-3)
        .steps(6)
        .build()
        .unwrap()
        .run(|_| {})
        .unwrap();
    let trained = summary.final_eval.unwrap().loss;
    let export = summary.export.join(EXPORT_MODEL);
    for file in ["model.safetensors", "config.json", "tokenizer.json"] {
        assert!(export.join(file).exists(), "{file} missing");
    }
    let check = tempfile::tempdir().unwrap();
    let before = reloaded_eval(lm(&gpt2(), check.path()));
    let after = reloaded_eval(lm(&export, check.path()));
    // The export rounds the f64 weights to f32 once: the loss moves by far less than 1e-6
    // relative, and training moved it by far more.
    assert!(close(after, trained, 1e-6), "{after} vs {trained}");
    assert!(!close(before, trained, 1e-3), "{before} vs {trained}");
}

#[test]
fn a_lora_export_is_a_peft_adapter_and_a_merged_model_with_the_trained_loss() {
    let dir = tempfile::tempdir().unwrap();
    let mut trainer = lm(&gpt2(), dir.path())
        .lora(LoraConfig::new(2, 4.0, ["c_attn"]))
        .merge(true)
        .lr(1e-2)
        .steps(6)
        .build()
        .unwrap();
    let summary = trainer.run(|_| {}).unwrap();
    let trained = summary.final_eval.unwrap().loss;

    let adapter = summary.export.join(EXPORT_ADAPTER);
    let config = fblayout_hf::lora::read_config(&adapter).unwrap();
    assert_eq!(config, LoraConfig::new(2, 4.0, ["c_attn"]));
    let model = ModelDir::open(gpt2()).unwrap();
    let (graph, lora) = fblayout_hf::lora::build(&model, &config).unwrap();
    let read = fblayout_hf::lora::read_adapter(&adapter, &graph, &lora).unwrap();
    let weights = trainer.weights().unwrap();
    assert_eq!(read.len(), 4);
    for (name, values) in &read {
        let (_, now) = weights.iter().find(|(n, _)| n == name).unwrap();
        let rounded: Vec<f64> = now.iter().map(|&x| f64::from(x as f32)).collect();
        assert_eq!(values, &rounded, "`{name}`");
    }

    let check = tempfile::tempdir().unwrap();
    let merged = reloaded_eval(lm(&summary.export.join(EXPORT_MODEL), check.path()));
    let base = reloaded_eval(lm(&gpt2(), check.path()));
    assert!(close(merged, trained, 1e-6), "{merged} vs {trained}");
    assert!(!close(base, trained, 1e-3), "{base} vs {trained}");
}

#[test]
fn classification_learns_a_separable_set_and_exports_its_head() {
    let dir = tempfile::tempdir().unwrap();
    // Two classes where the fixture's config has three: a fresh head.
    let mut trainer = rabbits(&bert(), dir.path())
        .labels(2)
        .steps(36)
        .eval_every(12)
        .build()
        .unwrap();
    assert_eq!(trainer.classes(), ["LABEL_0", "LABEL_1"]);
    let before = trainer.evaluate().unwrap().unwrap().accuracy.unwrap();
    let summary = trainer.run(|_| {}).unwrap();
    // A quarter of the 32 records is held out: the accuracy counts eighths.
    let accuracies: Vec<f64> = summary
        .records
        .iter()
        .filter_map(|r| match *r {
            Record::Eval { accuracy, .. } => accuracy,
            Record::Step { .. } => None,
        })
        .collect();
    assert_eq!(accuracies.len(), 3, "{:?}", summary.records);
    for a in &accuracies {
        assert!((a * 8.0 - (a * 8.0).round()).abs() < 1e-12, "accuracy {a}");
    }
    let after = summary.final_eval.unwrap().accuracy.unwrap();
    assert_eq!(after, accuracies[2]);
    assert!(
        after > before,
        "accuracy {before} before training, {after} after"
    );
    // The texts are separable by their words: a head that learned them gets most right.
    assert!(after >= 0.75, "accuracies {accuracies:?}");
    let l = losses(&summary.records);
    assert!(falls(&l), "classification losses {l:?} did not fall");
    let evals = evals(&summary.records);
    assert_eq!(evals.len(), 3);
    assert!(evals[2] < evals[0], "held-out losses {evals:?}");
    // Below ln 2, where a head that knows nothing of the texts stays.
    assert!(evals[2] < 0.5, "held-out losses {evals:?}");

    let export = summary.export.join(EXPORT_MODEL);
    let reopened = ModelDir::open(&export).unwrap();
    match reopened.config() {
        fblayout_hf::config::ModelConfig::Bert(c) => assert_eq!(c.num_labels(), 2),
        other => panic!("{other:?}"),
    }
    let check = tempfile::tempdir().unwrap();
    let after = reloaded_eval(rabbits(&export, check.path()));
    assert!(close(after, evals[2], 1e-6), "{after} vs {evals:?}");
}

#[test]
fn a_label_outside_the_head_or_a_task_the_model_lacks_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("bad.jsonl");
    std::fs::write(
        &file,
        "{\"text\": \"the rabbit\", \"label\": 1}\n{\"text\": \"a daisy\", \"label\": 3}\n",
    )
    .unwrap();
    // The fixture's head has three classes: 3 is none of them.
    let e = rabbits(&bert(), dir.path())
        .data(&file)
        .build()
        .unwrap_err();
    assert!(matches!(e, TrainError::Data(_)), "{e}");
    assert!(e.to_string().contains("bad.jsonl:2:"), "{e}");
    let e = rabbits(&bert(), dir.path())
        .data(&file)
        .labels(2)
        .build()
        .unwrap_err();
    assert!(e.to_string().contains("not one of the 2 classes"), "{e}");
    let e = lm(&bert(), dir.path()).build().unwrap_err();
    assert!(e.to_string().contains("--task classify"), "{e}");
    let e = lm(&gpt2(), dir.path()).labels(2).build().unwrap_err();
    assert!(e.to_string().contains("--labels"), "{e}");
    let e = lm(&gpt2(), dir.path()).merge(true).build().unwrap_err();
    assert!(e.to_string().contains("--lora"), "{e}");
    let e = lm(&gpt2(), dir.path())
        .lora(LoraConfig::new(2, 4.0, ["nope"]))
        .build()
        .unwrap_err();
    assert!(e.to_string().contains("c_attn"), "{e}");
    // LoRA would freeze a fresh head at its random start.
    let e = rabbits(&bert(), dir.path())
        .labels(2)
        .lora(LoraConfig::new(2, 4.0, Vec::<String>::new()))
        .build()
        .unwrap_err();
    assert!(e.to_string().contains("classification head"), "{e}");
}

/// A run's settings, given where it writes.
type Run = dyn Fn(&Path) -> TrainerBuilder<'static>;

#[test]
fn recomputing_activations_changes_no_loss() {
    // Making the cheap activations and attention's probabilities again in the backward (on
    // the CPU, in f64: the same operations on the same inputs) must give every loss and
    // evaluation bit for bit, for each architecture and with LoRA, while the planned peak
    // falls.
    let llama = support::root().join("tests/fixtures/hf/llama/model");
    let lora = || LoraConfig::new(2, 4.0, Vec::<String>::new());
    let runs: [(&str, Box<Run>); 4] = [
        ("GPT-2", Box::new(|out| lm(&gpt2(), out).steps(3))),
        ("Llama", Box::new(move |out| lm(&llama, out).steps(3))),
        (
            "GPT-2 with LoRA",
            Box::new(move |out| lm(&gpt2(), out).lora(lora()).steps(3)),
        ),
        (
            "BERT classifier",
            Box::new(|out| rabbits(&bert(), out).steps(3).eval_every(1)),
        ),
    ];
    for (what, run) in runs {
        let (kept, again) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let want = run(kept.path()).build().unwrap().run(|_| {}).unwrap();
        let got = run(again.path())
            .recompute(Recompute::Attention)
            .build()
            .unwrap()
            .run(|_| {})
            .unwrap();
        assert_eq!(losses(&got.records), losses(&want.records), "{what}");
        assert_eq!(evals(&got.records), evals(&want.records), "{what}");
        assert!(!losses(&want.records).is_empty(), "{what}");
        assert!(
            got.peak_bytes < want.peak_bytes,
            "{what}: peak {} bytes with recomputation, {} without",
            got.peak_bytes,
            want.peak_bytes
        );
    }
}

#[test]
fn a_fused_head_trains_and_exports_what_the_unfused_head_does() {
    // The language models' heads fused with their cross-entropy, 5 tokens at a time (2 × 16
    // tokens a batch: the last chunk short). The losses of the chunks are summed in another
    // order, so the runs agree to f64's round-off rather than bit for bit; the export of the
    // fused run holds the same tensors under the same names. (At these fixtures' vocabularies
    // the logits are a few kilobytes, less than the chunks' parameter blocks: the memory the
    // fusion saves at real sizes is tested with the memory plan, in fblayout-plan.)
    let llama = support::root().join("tests/fixtures/hf/llama/model");
    let lora = || LoraConfig::new(2, 4.0, Vec::<String>::new());
    let runs: [(&str, Box<Run>); 3] = [
        (
            "GPT-2 (tied head)",
            Box::new(|out| lm(&gpt2(), out).steps(3)),
        ),
        ("Llama", Box::new(move |out| lm(&llama, out).steps(3))),
        (
            "GPT-2 with LoRA",
            Box::new(move |out| lm(&gpt2(), out).lora(lora()).steps(3)),
        ),
    ];
    for (what, run) in runs {
        let (kept, fused) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let want = run(kept.path()).build().unwrap().run(|_| {}).unwrap();
        let got = run(fused.path())
            .head_chunk(5)
            .build()
            .unwrap()
            .run(|_| {})
            .unwrap();
        let (a, b) = (losses(&got.records), losses(&want.records));
        assert_eq!(a.len(), 3, "{what}");
        for (x, y) in a
            .iter()
            .zip(&b)
            .chain(evals(&got.records).iter().zip(&evals(&want.records)))
        {
            assert!(close(*x, *y, 1e-12), "{what}: {a:?} fused, {b:?} not");
        }
        // The same tensors under the same names, values within f32's rounding of each other.
        let exported = |dir: &Path| {
            let (sub, file) = if what.contains("LoRA") {
                (EXPORT_ADAPTER, "adapter_model.safetensors")
            } else {
                (EXPORT_MODEL, "model.safetensors")
            };
            let bytes = std::fs::read(dir.join(sub).join(file)).unwrap();
            let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
            let mut all: Vec<(String, Vec<usize>, Vec<f32>)> = st
                .tensors()
                .into_iter()
                .map(|(n, v)| {
                    let values = v
                        .data()
                        .chunks_exact(4)
                        .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                        .collect();
                    (n, v.shape().to_vec(), values)
                })
                .collect();
            all.sort_by(|a, b| a.0.cmp(&b.0));
            all
        };
        let (x, y) = (exported(&got.export), exported(&want.export));
        assert_eq!(x.len(), y.len(), "{what}");
        for ((n, shape, a), (m, want_shape, b)) in x.iter().zip(&y) {
            assert_eq!((n, shape), (m, want_shape), "{what}");
            for (p, q) in a.iter().zip(b) {
                assert!(
                    close(f64::from(*p), f64::from(*q), 1e-6),
                    "{what}: `{n}` {p} vs {q}"
                );
            }
        }
    }
}

#[test]
fn a_head_chunk_needs_a_language_model_and_a_length() {
    let dir = tempfile::tempdir().unwrap();
    let e = rabbits(&bert(), dir.path())
        .head_chunk(4)
        .build()
        .unwrap_err();
    assert!(e.to_string().contains("--task lm"), "{e}");
    let e = lm(&gpt2(), dir.path()).head_chunk(0).build().unwrap_err();
    assert!(e.to_string().contains("at least 1"), "{e}");
}

#[test]
fn fused_attention_trains_as_the_materialised_one_and_a_budget_is_kept_or_refused() {
    // Every attention fused: the same losses and held-out losses to f64's round-off (the
    // probabilities are computed again, in another order), for the causal GPT-2 and Llama
    // (grouped-query) and the BERT classifier (padding mask).
    let llama = support::root().join("tests/fixtures/hf/llama/model");
    let runs: [(&str, Box<Run>); 3] = [
        ("GPT-2", Box::new(|out| lm(&gpt2(), out).steps(3))),
        ("Llama", Box::new(move |out| lm(&llama, out).steps(3))),
        (
            "BERT classifier",
            Box::new(|out| rabbits(&bert(), out).steps(3).eval_every(1)),
        ),
    ];
    for (what, run) in runs {
        let (kept, fused) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let want = run(kept.path()).build().unwrap().run(|_| {}).unwrap();
        let got = run(fused.path())
            .attention(Fusing::Fused)
            .build()
            .unwrap()
            .run(|_| {})
            .unwrap();
        let (a, b) = (losses(&got.records), losses(&want.records));
        assert_eq!(a.len(), 3, "{what}");
        for (x, y) in a
            .iter()
            .zip(&b)
            .chain(evals(&got.records).iter().zip(&evals(&want.records)))
        {
            assert!(close(*x, *y, 1e-12), "{what}: {a:?} fused, {b:?} not");
        }
    }
    // The planner's choice within a budget: a budget nothing fits is an error naming the
    // peaks, before anything runs; no budget runs.
    let dir = tempfile::tempdir().unwrap();
    let e = lm(&gpt2(), dir.path())
        .attention(Fusing::Auto { budget: Some(1) })
        .build()
        .unwrap_err();
    assert!(matches!(e, TrainError::Attention(_)), "{e}");
    assert!(e.to_string().contains("over the budget of 1 bytes"), "{e}");
    let auto = lm(&gpt2(), dir.path())
        .attention(Fusing::Auto { budget: None })
        .steps(1)
        .build()
        .unwrap()
        .run(|_| {})
        .unwrap();
    assert_eq!(losses(&auto.records).len(), 1);
}
