//! The main job end to end, at a small size: the encoder's training step planned under
//! row-major and the planner's choice, run on the GPU (lavapipe in CI) and checked against
//! the CPU executor, and timed; the CPU executor alone; the errors of sizes that don't fit and
//! of a missing adapter. Fails, never skips, when no GPU adapter is found (`--device gpu`).

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

#[test]
fn a_small_step_runs_on_the_gpu_agrees_with_the_cpu_and_is_timed() {
    let args: Vec<&str> = ["--device", "gpu", "--steps", "1"]
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
    let args: Vec<&str> = ["--device", "cpu"].iter().chain(&SMALL).copied().collect();
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
        let args: Vec<&str> = ["--device", "cpu"].iter().chain(args).copied().collect();
        let (ok, text) = run(&args);
        assert!(!ok, "{args:?} succeeded:\n{text}");
        assert!(text.contains(message), "{args:?}:\n{text}");
    }
    // Not a number: clap's error, naming the flag.
    let (ok, text) = run(&["--seq", "many"]);
    assert!(!ok);
    assert!(text.contains("--seq"), "{text}");
}

#[test]
fn a_missing_adapter_is_an_error_with_device_gpu_and_not_without() {
    let none = [("FBLAYOUT_ADAPTER", "no-such-adapter")];
    let (ok, text) = run_with(&["--device", "gpu"], &none);
    assert!(!ok, "{text}");
    assert!(text.contains("fblayout: error: --device gpu: "), "{text}");
    assert!(text.contains("no-such-adapter"), "{text}");
    let args: Vec<&str> = SMALL.to_vec();
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
            first.starts_with("Runs one training step of the shipped encoder"),
            "{help}:\n{text}"
        );
    }
    let (_, text) = run(&["--help"]);
    for flag in [
        "--device", "--layers", "--hidden", "--heads", "--ffn", "--vocab", "--batch", "--seq",
        "--steps",
    ] {
        assert!(text.contains(flag), "--help lacks {flag}:\n{text}");
    }
}
