//! The main job end to end: the shipped pretrained model fine-tuned on the embedded task, its
//! held-out loss visibly lower after than before. And `fblayout step`, at a small size: the
//! encoder's training step planned under row-major and the planner's choice, run on the GPU
//! (lavapipe in CI) and checked against the CPU executor, and timed; the CPU executor alone; the
//! errors of sizes that don't fit and of a missing adapter. Fails, never skips, when no GPU
//! adapter is found (`--device gpu`).

use std::process::Command;

/// A one-block encoder small enough to run in seconds on lavapipe in a debug build.
const SMALL: [&str; 14] = [
    "--layers", "1", "--hidden", "32", "--heads", "4", "--ffn", "64", "--vocab", "64", "--batch",
    "2", "--seq", "8",
];

/// Runs `fblayout <args>` with `env` set: whether it succeeded, and its stdout and stderr.
fn run_with(args: &[&str], env: &[(&str, &str)]) -> (bool, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_fblayout"))
        .args(args)
        .envs(env.iter().copied())
        .output()
        .expect("the fblayout binary runs");
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(!text.contains("panicked"), "{text}");
    (out.status.success(), text)
}

fn run(args: &[&str]) -> (bool, String) {
    run_with(args, &[])
}

/// How much lower the held-out loss must be after the default run's fine-tuning than before,
/// in nats per token: a change anyone sees in the printed numbers.
const VISIBLE: f64 = 0.1;

#[test]
fn a_small_step_runs_on_the_gpu_agrees_with_the_cpu_and_is_timed() {
    let args: Vec<&str> = ["step", "--device", "gpu", "--steps", "1"]
        .iter()
        .chain(&SMALL)
        .copied()
        .collect();
    let (ok, text) = run(&args);
    assert!(ok, "{text}");
    // The size, and why: small on lavapipe, full on a hardware adapter, the flags over it.
    assert!(
        text.contains("size: small, because") || text.contains("size: full"),
        "{text}"
    );
    assert!(
        text.contains("--layers, --hidden, --heads, --ffn, --vocab, --batch, --seq as given"),
        "{text}"
    );
    assert!(
        text.contains("encoder of 1 block, hidden 32 (4 heads), feed-forward 64, vocabulary 64; batch 2 × sequence 8"),
        "{text}"
    );
    // Both plans' summary lines, the chosen plan's summary and its memory plan.
    for strategy in ["row-major", "guided"] {
        assert!(
            text.lines()
                .any(|l| l.trim_start().starts_with(strategy) && l.contains("conversions")),
            "no summary line for {strategy}:\n{text}"
        );
    }
    assert!(text.contains("guided plan, batch 2 × sequence 8"), "{text}");
    assert!(text.contains("tensors by layout:"), "{text}");
    assert!(text.contains("memory at batch 2 × seq 8:"), "{text}");
    // The check, at the run's size, and the timing.
    assert!(!text.contains("the check runs at"), "{text}");
    assert!(
        text.contains("GPU and CPU agree on the loss and every parameter's gradient"),
        "{text}"
    );
    assert!(text.contains("row-major / guided: "), "{text}");
}

#[test]
fn the_cpu_executor_runs_alone_with_device_cpu() {
    let args: Vec<&str> = ["step", "--device", "cpu"]
        .iter()
        .chain(&SMALL)
        .copied()
        .collect();
    let (ok, text) = run(&args);
    assert!(ok, "{text}");
    assert!(text.contains("the CPU executor runs alone"), "{text}");
    assert!(
        text.contains("both plans give the same loss and gradients"),
        "{text}"
    );
    assert!(!text.contains("adapter:"), "{text}");
}

#[test]
fn sizes_that_do_not_fit_are_errors_with_their_cause() {
    for (args, message) in [
        (
            &["--hidden", "100", "--heads", "12"][..],
            "--hidden 100 is not a multiple of --heads 12",
        ),
        (&["--batch", "0"], "--batch must be at least 1"),
        (&["--layers", "0"], "--layers must be at least 1"),
        (&["--vocab", "0"], "--vocab must be at least 1"),
    ] {
        let args: Vec<&str> = ["step", "--device", "cpu"]
            .iter()
            .chain(args)
            .copied()
            .collect();
        let (ok, text) = run(&args);
        assert!(!ok, "{args:?} succeeded:\n{text}");
        assert!(text.contains(message), "{args:?}:\n{text}");
    }
    // Not a number: clap's error, naming the flag.
    let (ok, text) = run(&["step", "--seq", "many"]);
    assert!(!ok);
    assert!(text.contains("--seq"), "{text}");
}

#[test]
fn a_missing_adapter_is_an_error_with_device_gpu_and_not_without() {
    let none = [("FBLAYOUT_ADAPTER", "no-such-adapter")];
    let (ok, text) = run_with(&["step", "--device", "gpu"], &none);
    assert!(!ok, "{text}");
    assert!(text.contains("fblayout: error: --device gpu: "), "{text}");
    assert!(text.contains("no-such-adapter"), "{text}");
    let args: Vec<&str> = ["step"].iter().chain(&SMALL).copied().collect();
    let (ok, text) = run_with(&args, &none);
    assert!(ok, "{text}");
    assert!(
        text.contains("no GPU adapter, so the CPU executor runs alone"),
        "{text}"
    );
}

#[test]
fn the_help_says_what_the_default_run_does() {
    for help in ["-h", "--help"] {
        let (ok, text) = run(&[help]);
        assert!(ok, "{text}");
        let first = text.lines().next().unwrap_or_default();
        assert!(
            first.starts_with("Fine-tunes the shipped pretrained model on the embedded task"),
            "{help}:\n{text}"
        );
    }
    let (_, text) = run(&["--help"]);
    for word in [
        "--model", "--data", "--steps", "--out", "step", "finetune", "plan",
    ] {
        assert!(text.contains(word), "--help lacks {word}:\n{text}");
    }
    let (ok, text) = run(&["step", "--help"]);
    assert!(ok, "{text}");
    assert!(
        text.starts_with("Run one training step of the shipped encoder"),
        "{text}"
    );
    for flag in [
        "--device", "--layers", "--hidden", "--heads", "--ffn", "--vocab", "--batch", "--seq",
        "--steps",
    ] {
        assert!(text.contains(flag), "step --help lacks {flag}:\n{text}");
    }
}

/// The held-out loss printed on the line that starts with `prefix`.
fn held_out_loss(text: &str, prefix: &str) -> f64 {
    let line = text
        .lines()
        .find(|l| l.starts_with(prefix))
        .unwrap_or_else(|| panic!("no line starts with {prefix:?}:\n{text}"));
    let value = line
        .split("held-out loss ")
        .nth(1)
        .and_then(|rest| rest.split(',').next())
        .unwrap_or_else(|| panic!("no held-out loss in {line:?}"));
    value
        .parse()
        .unwrap_or_else(|e| panic!("{value:?} in {line:?}: {e}"))
}

/// The default run's arguments: none in an optimised build (its 40 steps take about 29 s of
/// CPU); 12 steps where the executor is unoptimised (the tests' debug build, many times
/// slower), which lower the held-out loss by 0.16.
const DEFAULT_RUN: &[&str] = if cfg!(debug_assertions) {
    &["--steps", "12"]
} else {
    &[]
};

#[test]
fn the_default_run_fine_tunes_the_shipped_model_and_its_held_out_loss_falls() {
    let (ok, text) = run(DEFAULT_RUN);
    assert!(ok, "{text}");
    assert!(
        text.contains("model: the shipped LlamaForCausalLM"),
        "{text}"
    );
    assert!(
        text.contains("task: language modelling on the Book of Proverbs"),
        "{text}"
    );
    let before = held_out_loss(&text, "before fine-tuning:");
    let after = held_out_loss(&text, "after ");
    // The pretrained model already knows the language: far below a uniform guess over the
    // 512-token vocabulary (ln 512 ≈ 6.24).
    assert!(before < 5.0, "before {before}:\n{text}");
    assert!(
        after < before - VISIBLE,
        "before {before}, after {after}:\n{text}"
    );
    assert!(text.contains("steps in"), "{text}");
}

#[test]
fn the_default_run_refuses_zero_steps_and_names_a_missing_model() {
    let (ok, text) = run(&["--steps", "0"]);
    assert!(!ok, "{text}");
    assert!(
        text.contains("fblayout: error: --steps must be at least 1"),
        "{text}"
    );
    let (ok, text) = run(&["--model", "no/such/model"]);
    assert!(!ok, "{text}");
    assert!(text.contains("fblayout: error: --model: "), "{text}");
    assert!(text.contains("no/such/model"), "{text}");
}
