//! What the Trainer's tests share: the fixtures' and data files' paths, the classification
//! run on the rabbits data, and the losses of a run's log.

#![allow(dead_code)] // each test file uses part of it

use std::path::{Path, PathBuf};

use fblayout_train::log::Record;
use fblayout_train::{Task, Trainer, TrainerBuilder};

/// The workspace's root.
pub(crate) fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The tiny GPT-2 fixture (made by transformers, `python/make_fixtures.py`).
pub(crate) fn gpt2() -> PathBuf {
    root().join("tests/fixtures/hf/gpt2/model")
}

/// The tiny BERT classifier fixture.
pub(crate) fn bert() -> PathBuf {
    root().join("tests/fixtures/hf/bert/model")
}

/// A data file of the tests (`alice.txt`: a few lines of text; `rabbits.jsonl`: 32 labelled
/// sentences about rabbits and daisies).
pub(crate) fn data(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data")
        .join(name)
}

/// Classification of the rabbits data with the model in `model`, writing to `out`: a quarter
/// held out, evaluated at the end only.
pub(crate) fn rabbits(model: &Path, out: &Path) -> TrainerBuilder<'static> {
    Trainer::builder(model, data("rabbits.jsonl"), Task::Classify)
        .seq(12)
        .batch(4)
        .lr(1e-3)
        .eval_fraction(0.25)
        .eval_every(0)
        .save_every(0)
        .seed(1)
        .out(out)
}

/// The training steps' losses logged in `records`, in order.
pub(crate) fn losses(records: &[Record]) -> Vec<f64> {
    records
        .iter()
        .filter_map(Record::training_loss)
        .map(|(_, l)| l)
        .collect()
}

/// The evaluations' held-out losses logged in `records`, in order.
pub(crate) fn evals(records: &[Record]) -> Vec<f64> {
    records
        .iter()
        .filter_map(Record::eval_loss)
        .map(|(_, l)| l)
        .collect()
}
