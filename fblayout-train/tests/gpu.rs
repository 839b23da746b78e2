//! The training loop on the GPU (lavapipe where there is no other): in `f32` it follows the
//! CPU executor (the `f64` reference) step by step; in mixed precision it learns, skips and
//! counts the steps whose scaled gradients overflowed, and a resumed run repeats an
//! uninterrupted one exactly, loss scale included; gradients accumulated over micro-batches and
//! clipped follow the CPU executor too; settings that don't fit are refused with their cause. The tiny GPT-2 and BERT fixtures are transformers' (made by
//! `python/make_fixtures.py`).

mod support;

use std::path::Path;

use fblayout_kernels::Gpu;
use fblayout_plan::exec::LossScaling;
use fblayout_plan::graph::precision::Precision;
use fblayout_train::checkpoint;
use fblayout_train::{Event, Task, TrainError, Trainer, TrainerBuilder};
use support::{bert, data, evals, gpt2, losses};

/// The GPU, or a failure that says how to get one (never a skip).
fn gpu() -> Gpu {
    Gpu::new().unwrap_or_else(|err| {
        panic!(
            "could not open a GPU; install Mesa's Vulkan drivers (lavapipe) or set \
             FBLAYOUT_ADAPTER/FBLAYOUT_BACKEND.\n{err}"
        )
    })
}

fn lm(out: &Path) -> TrainerBuilder<'static> {
    Trainer::builder(gpt2(), data("alice.txt"), Task::Lm)
        .seq(16)
        .batch(2)
        .lr(3e-3)
        .eval_fraction(0.2)
        .eval_every(3)
        .save_every(0)
        .seed(5)
        .out(out)
}

/// The rabbits classification with a fresh head of two classes.
fn rabbits(out: &Path) -> TrainerBuilder<'static> {
    support::rabbits(&bert(), out).labels(2)
}

/// The largest relative difference between `a` and `b`, element by element.
fn worst(a: &[f64], b: &[f64]) -> f64 {
    assert_eq!(a.len(), b.len());
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs() / x.abs().max(y.abs()))
        .fold(0.0, f64::max)
}

/// In `f32` the GPU computes what the CPU executor computes in `f64`, to `f32`'s rounding:
/// the losses of six steps (each after the updates before it) and the held-out losses agree
/// within 1e-5 relative. AdamW divides by the root of the second moment, which amplifies the
/// rounding of small gradients, so the tolerance is above `f32`'s 6e-8.
#[test]
fn gpu_training_in_f32_follows_the_cpu_executor() {
    let gpu = gpu();
    let (cpu_dir, gpu_dir) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let cpu = lm(cpu_dir.path()).steps(6).build().unwrap().run(|_| {});
    let cpu = cpu.unwrap();
    let mut trainer = lm(gpu_dir.path()).steps(6).gpu(&gpu).build().unwrap();
    assert!(trainer.device().contains("f32"), "{}", trainer.device());
    let on_gpu = trainer.run(|_| {}).unwrap();
    assert_eq!(on_gpu.skipped, 0);
    let (a, b) = (losses(&cpu.records), losses(&on_gpu.records));
    assert!(worst(&a, &b) < 1e-5, "CPU {a:?}\nGPU {b:?}");
    let (a, b) = (evals(&cpu.records), evals(&on_gpu.records));
    assert_eq!(a.len(), 2);
    assert!(worst(&a, &b) < 1e-5, "CPU {a:?}\nGPU {b:?}");

    // A classifier: the same losses, and the accuracy from the logits read back.
    let (cpu_dir, gpu_dir) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let cpu = rabbits(cpu_dir.path())
        .steps(4)
        .build()
        .unwrap()
        .run(|_| {});
    let cpu = cpu.unwrap();
    let on_gpu = rabbits(gpu_dir.path()).steps(4).gpu(&gpu).build();
    let on_gpu = on_gpu.unwrap().run(|_| {}).unwrap();
    let (a, b) = (losses(&cpu.records), losses(&on_gpu.records));
    assert!(worst(&a, &b) < 1e-5, "CPU {a:?}\nGPU {b:?}");
    let (a, b) = (cpu.final_eval.unwrap(), on_gpu.final_eval.unwrap());
    assert!(worst(&[a.loss], &[b.loss]) < 1e-5, "{a:?}\n{b:?}");
    assert_eq!(a.accuracy, b.accuracy);
}

/// Mixed precision with a first loss scale of 2²⁴: the scaled gradients overflow `f16`
/// (largest 65504) until the scale has halved enough, each such step skipped and counted;
/// the rest train. Every step is either an AdamW update or a skip, the scale the checkpoint
/// keeps is below the first, and the held-out loss falls. The first step's loss, before any
/// update, is the `f32` one to within `f16`'s activations (1e-2 relative).
#[test]
fn mixed_precision_skips_and_counts_overflowing_steps_and_learns() {
    let gpu = gpu();
    let initial = 16_777_216.0;
    let dir = tempfile::tempdir().unwrap();
    let mut trainer = lm(dir.path())
        .steps(12)
        .eval_every(0)
        .gpu(&gpu)
        .precision(Precision::Mixed)
        .loss_scaling(LossScaling {
            initial,
            ..LossScaling::default()
        })
        .build()
        .unwrap();
    assert!(trainer.device().contains("mixed"), "{}", trainer.device());
    let before = trainer.evaluate().unwrap().unwrap().loss;
    let mut skipped_events = 0;
    let summary = trainer
        .run(|e| {
            if let Event::Step { skipped: true, .. } = e {
                skipped_events += 1;
            }
        })
        .unwrap();
    assert!(summary.skipped >= 1, "no step skipped at a scale of 2^24");
    assert!(summary.skipped < 12, "every step skipped");
    assert_eq!(summary.skipped, skipped_events);
    let state = checkpoint::load(&summary.checkpoint).unwrap().state;
    assert_eq!(state.skipped, summary.skipped);
    assert_eq!(state.adam_steps + state.skipped, 12, "{state:?}");
    let scale = state
        .loss_scale
        .expect("mixed precision keeps its loss scale");
    assert!(scale.scale < initial, "{scale:?}");
    let after = summary.final_eval.unwrap().loss;
    assert!(
        after < before,
        "held-out loss {before} before, {after} after"
    );

    let f32_dir = tempfile::tempdir().unwrap();
    let f32_run = lm(f32_dir.path()).steps(1).gpu(&gpu).build();
    let f32_first = losses(&f32_run.unwrap().run(|_| {}).unwrap().records)[0];
    let mixed_first = losses(&summary.records)[0];
    assert!(
        worst(&[f32_first], &[mixed_first]) < 1e-2,
        "first loss: f32 {f32_first}, mixed {mixed_first}"
    );
}

/// A mixed-precision run stopped after step 4 and resumed repeats the losses of an
/// uninterrupted run bit for bit (the GPU's kernels are deterministic, and the checkpoint holds
/// the master weights, the moments, the step counts and the loss scale), skips included.
#[test]
fn a_resumed_gpu_run_repeats_the_uninterrupted_losses_exactly() {
    let gpu = gpu();
    let run = |out: &Path| {
        lm(out)
            .steps(9)
            .gpu(&gpu)
            .precision(Precision::Mixed)
            .loss_scaling(LossScaling {
                initial: 4_194_304.0,
                interval: 2,
                ..LossScaling::default()
            })
    };
    let whole = tempfile::tempdir().unwrap();
    let full = run(whole.path()).build().unwrap().run(|_| {}).unwrap();
    let split = tempfile::tempdir().unwrap();
    let first = run(split.path()).stop_after(4).build();
    let first = first.unwrap().run(|_| {}).unwrap();
    assert_eq!(first.steps, 4);
    let mut resumed = run(split.path()).resume(true).build().unwrap();
    assert_eq!(resumed.done(), 4);
    let rest = resumed.run(|_| {}).unwrap();
    assert_eq!(rest.records, full.records);
    assert_eq!(rest.skipped, full.skipped);
    let (a, b) = (
        checkpoint::load(&full.checkpoint).unwrap(),
        checkpoint::load(&rest.checkpoint).unwrap(),
    );
    assert_eq!(a, b);
}

/// Three micro-batches a step, their gradients' sum clipped to a global norm of 0.5 (below
/// what the fixture's gradients reach, so every step is clipped): on the GPU the losses follow
/// the CPU executor's within 1e-5 relative, as unsplit steps do. In mixed precision the same
/// run skips the steps whose scaled gradients overflowed in any micro-batch, and learns.
#[test]
fn accumulated_and_clipped_gradients_on_the_gpu_follow_the_cpu_executor() {
    let gpu = gpu();
    let run = |out: &Path| lm(out).steps(5).accumulate(3).clip(0.5);
    let (cpu_dir, gpu_dir) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let cpu = run(cpu_dir.path()).build().unwrap().run(|_| {}).unwrap();
    let on_gpu = run(gpu_dir.path()).gpu(&gpu).build();
    let on_gpu = on_gpu.unwrap().run(|_| {}).unwrap();
    let (a, b) = (losses(&cpu.records), losses(&on_gpu.records));
    assert_eq!(a.len(), 5);
    assert!(worst(&a, &b) < 1e-5, "CPU {a:?}\nGPU {b:?}");
    let (a, b) = (evals(&cpu.records), evals(&on_gpu.records));
    assert!(worst(&a, &b) < 1e-5, "CPU {a:?}\nGPU {b:?}");
    // The clipping is at work: without it the second step's loss is another.
    let unclipped_dir = tempfile::tempdir().unwrap();
    let unclipped = lm(unclipped_dir.path())
        .steps(5)
        .stop_after(2)
        .accumulate(3)
        .build();
    let unclipped = losses(&unclipped.unwrap().run(|_| {}).unwrap().records);
    assert!(
        (unclipped[1] - losses(&cpu.records)[1]).abs() > 1e-6,
        "clipped {:?}, unclipped {unclipped:?}",
        losses(&cpu.records)
    );

    let mixed_dir = tempfile::tempdir().unwrap();
    let mut mixed = run(mixed_dir.path())
        .steps(10)
        .eval_every(0)
        .gpu(&gpu)
        .precision(Precision::Mixed)
        .loss_scaling(LossScaling {
            initial: 16_777_216.0,
            ..LossScaling::default()
        })
        .build()
        .unwrap();
    let before = mixed.evaluate().unwrap().unwrap().loss;
    let summary = mixed.run(|_| {}).unwrap();
    assert!(
        summary.skipped >= 1 && summary.skipped < 10,
        "{}",
        summary.skipped
    );
    let state = checkpoint::load(&summary.checkpoint).unwrap().state;
    assert_eq!(state.adam_steps + state.skipped, 10, "{state:?}");
    let after = summary.final_eval.unwrap().loss;
    assert!(
        after < before,
        "held-out loss {before} before, {after} after"
    );
}

#[test]
fn settings_that_do_not_fit_the_executor_are_refused_with_their_cause() {
    let gpu = gpu();
    let dir = tempfile::tempdir().unwrap();
    let setting = |e: TrainError, flag: &str| {
        assert!(
            matches!(e, TrainError::Setting(_)) && e.to_string().contains(flag),
            "{e}"
        );
    };
    let e = lm(dir.path()).precision(Precision::Mixed).build();
    setting(e.unwrap_err(), "--device gpu");
    let e = lm(dir.path())
        .gpu(&gpu)
        .precision(Precision::Mixed)
        .loss_scaling(LossScaling {
            initial: 0.0,
            ..LossScaling::default()
        })
        .build();
    setting(e.unwrap_err(), "loss scale");
    // Saved on the CPU, resumed in mixed precision: the loss scale has nothing to go on.
    lm(dir.path())
        .steps(2)
        .stop_after(1)
        .build()
        .unwrap()
        .run(|_| {})
        .unwrap();
    let e = lm(dir.path())
        .steps(2)
        .gpu(&gpu)
        .precision(Precision::Mixed)
        .resume(true)
        .build();
    setting(e.unwrap_err(), "--precision");
}
