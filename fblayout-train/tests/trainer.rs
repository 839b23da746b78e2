//! The training loop on the tiny GPT-2 fixture (made by transformers, `python/make_fixtures.py`)
//! with a few lines of text, on the CPU executor.

mod support;

use std::path::{Path, PathBuf};

use fblayout_train::{Event, Task, TrainError, Trainer, TrainerBuilder};
use support::{evals, gpt2, losses};

fn text() -> PathBuf {
    support::data("alice.txt")
}

fn builder(out: &Path) -> TrainerBuilder<'static> {
    Trainer::builder(gpt2(), text(), Task::Lm)
        .seq(16)
        .batch(2)
        .lr(3e-3)
        .eval_fraction(0.2)
        .eval_every(4)
        .save_every(4)
        .seed(5)
        .out(out)
}

#[test]
fn training_lowers_the_held_out_loss_and_writes_the_checkpoint_and_log() {
    let dir = tempfile::tempdir().unwrap();
    let mut events = Vec::new();
    let summary = builder(dir.path())
        .steps(12)
        .warmup(2)
        .build()
        .unwrap()
        .run(|e| events.push(e))
        .unwrap();
    let evals = evals(&summary.records);
    // Evaluations after steps 4, 8 and 12.
    assert_eq!(evals.len(), 3, "{:?}", summary.records);
    assert!(evals[2] < evals[0], "held-out loss {evals:?} did not fall");
    let l = losses(&summary.records);
    assert_eq!(l.len(), 12);
    // The first loss of a pretrained-from-random tiny model is near ln(vocab) = ln 320 ≈ 5.77;
    // training on the same few lines brings the mean of the last four well below it.
    let last: f64 = l[8..].iter().sum::<f64>() / 4.0;
    assert!(last < l[0] - 0.5, "training losses {l:?}");
    assert!(summary.checkpoint.exists() && summary.log.exists());
    assert_eq!(summary.final_eval.unwrap().step, 12);
    assert!(!summary.plan_summary.is_empty() && summary.peak_bytes > 0);
    assert!(matches!(events[0], Event::Started { done: 0, total: 12 }));
    assert_eq!(
        events
            .iter()
            .filter(|e| matches!(e, Event::Saved { .. }))
            .count(),
        3
    );
}

#[test]
fn a_resumed_run_repeats_the_uninterrupted_losses_exactly() {
    let whole = tempfile::tempdir().unwrap();
    let full = builder(whole.path())
        .steps(8)
        .accumulate(2)
        .clip(0.5)
        .build()
        .unwrap()
        .run(|_| {})
        .unwrap();
    let split = tempfile::tempdir().unwrap();
    let first = builder(split.path())
        .steps(8)
        .accumulate(2)
        .clip(0.5)
        .stop_after(3)
        .build()
        .unwrap()
        .run(|_| {})
        .unwrap();
    assert_eq!(first.steps, 3);
    let mut resumed = builder(split.path())
        .steps(8)
        .accumulate(2)
        .clip(0.5)
        .resume(true)
        .build()
        .unwrap();
    assert_eq!(resumed.done(), 3);
    let rest = resumed.run(|_| {}).unwrap();
    // Bit for bit: the CPU executor is deterministic, and the checkpoint holds every value in f64.
    assert_eq!(losses(&rest.records), losses(&full.records));
    assert_eq!(rest.records, full.records);
}

#[test]
fn a_checkpoint_of_other_settings_or_a_bad_setting_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    builder(dir.path())
        .steps(2)
        .build()
        .unwrap()
        .run(|_| {})
        .unwrap();
    let e = builder(dir.path())
        .steps(4)
        .seed(6)
        .resume(true)
        .build()
        .unwrap_err();
    assert!(e.to_string().contains("--seed"), "{e}");
    std::fs::write(dir.path().join("checkpoint.safetensors"), b"cut").unwrap();
    let e = builder(dir.path())
        .steps(4)
        .resume(true)
        .build()
        .unwrap_err();
    assert!(matches!(e, TrainError::Checkpoint(_)), "{e}");
    let e = builder(dir.path()).steps(2).warmup(3).build().unwrap_err();
    assert!(matches!(e, TrainError::Setting(_)), "{e}");
    let e = Trainer::builder(gpt2(), text(), Task::Classify)
        .build()
        .unwrap_err();
    assert!(e.to_string().contains("classification head"), "{e}");
    let empty = dir.path().join("empty.txt");
    std::fs::write(&empty, "\n\n").unwrap();
    let e = builder(dir.path()).data(&empty).build().unwrap_err();
    assert!(
        e.to_string().contains("empty.txt") && e.to_string().contains("empty"),
        "{e}"
    );
}
