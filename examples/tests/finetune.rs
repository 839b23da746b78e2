//! `fblayout finetune` as a user runs it, on the tiny GPT-2 fixture (made by transformers,
//! `python/make_fixtures.py`) and a few lines of text: a short run writes its checkpoint, log,
//! curves and export; a run killed with SIGKILL, or stopped with SIGINT (Ctrl-C), mid-run and
//! resumed gives, step for step, the losses of an uninterrupted run; on the GPU in mixed
//! precision the run names its adapter and counts its skipped steps; `--help` documents every
//! flag.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use fblayout_train::log::{self, Record};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// `fblayout finetune` on the fixture on the CPU executor, writing to `out`, for `steps` steps,
/// checkpointed every step.
fn finetune(out: &Path, steps: u32) -> Command {
    finetune_saving(out, steps, 1)
}

/// [`finetune`], checkpointed every `save_every` steps (0: at the end only).
fn finetune_saving(out: &Path, steps: u32, save_every: u32) -> Command {
    finetune_on("cpu", out, steps, save_every)
}

/// `fblayout finetune` on the fixture with `--device device`, writing to `out`, for `steps`
/// steps, checkpointed every `save_every` steps.
fn finetune_on(device: &str, out: &Path, steps: u32, save_every: u32) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_fblayout"));
    c.arg("finetune")
        .arg("--model")
        .arg(root().join("tests/fixtures/hf/gpt2/model"))
        .arg("--data")
        .arg(root().join("fblayout-train/tests/data/alice.txt"))
        .args([
            "--task", "lm", "--seq", "16", "--batch", "2", "--lr", "3e-3",
        ])
        .args(["--warmup", "2", "--schedule", "cosine", "--eval-every", "5"])
        .arg("--save-every")
        .arg(save_every.to_string())
        .args(["--eval-fraction", "0.2", "--seed", "11", "--device", device])
        .arg("--steps")
        .arg(steps.to_string())
        .arg("--out")
        .arg(out);
    c
}

fn step_losses(records: &[Record]) -> Vec<f64> {
    records
        .iter()
        .filter_map(Record::training_loss)
        .map(|(_, l)| l)
        .collect()
}

#[test]
fn a_short_run_lowers_the_loss_and_writes_checkpoint_log_and_curves() {
    let out = tempfile::tempdir().unwrap();
    let run = finetune(out.path(), 8).output().unwrap();
    let stdout = String::from_utf8_lossy(&run.stdout);
    assert!(
        run.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&run.stderr)
    );
    for file in [
        "checkpoint.safetensors",
        "log.jsonl",
        "curves.svg",
        "export/model/model.safetensors",
        "export/model/config.json",
        "export/model/tokenizer.json",
    ] {
        assert!(out.path().join(file).exists(), "{file} missing");
    }
    let records = log::read(&out.path().join("log.jsonl")).unwrap();
    let losses = step_losses(&records);
    assert_eq!(losses.len(), 8);
    // Eight steps (a warmup of two, then a cosine decay) on a few lines: the mean loss of
    // the last four steps is below that of the first four.
    let head = losses[..4].iter().sum::<f64>() / 4.0;
    let tail = losses[4..].iter().sum::<f64>() / 4.0;
    assert!(tail < head, "{losses:?}");
    assert!(stdout.contains("final evaluation (step 8)"), "{stdout}");
    assert!(stdout.contains("peak memory"), "{stdout}");
    let svg = std::fs::read_to_string(out.path().join("curves.svg")).unwrap();
    roxmltree::Document::parse(&svg).unwrap();
}

#[test]
fn a_run_killed_mid_run_and_resumed_repeats_the_uninterrupted_losses() {
    const STEPS: u32 = 12;
    let whole = tempfile::tempdir().unwrap();
    let run = finetune(whole.path(), STEPS).output().unwrap();
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let want = log::read(&whole.path().join("log.jsonl")).unwrap();

    let killed = tempfile::tempdir().unwrap();
    let log_file = killed.path().join("log.jsonl");
    let mut child = finetune(killed.path(), STEPS)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // Kill it once a few steps are checkpointed (every step is: --save-every 1).
    let began = Instant::now();
    loop {
        let done = log::read(&log_file).map_or(0, |r| step_losses(&r).len());
        if done >= 3 && killed.path().join("checkpoint.safetensors").exists() {
            break;
        }
        assert!(
            began.elapsed() < Duration::from_secs(300),
            "no checkpoint appeared"
        );
        std::thread::sleep(Duration::from_millis(2));
    }
    child.kill().unwrap(); // SIGKILL
    let status = child.wait().unwrap();
    assert!(!status.success(), "the run ended before it was killed");
    let at_kill = step_losses(&log::read(&log_file).unwrap_or_default()).len() as u32;
    assert!(at_kill < STEPS, "the run was not interrupted");

    let resumed = finetune(killed.path(), STEPS)
        .arg("--resume")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&resumed.stdout);
    assert!(
        resumed.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&resumed.stderr)
    );
    assert!(stdout.contains("resuming after step"), "{stdout}");
    let got = log::read(&log_file).unwrap();
    // Exactly: the CPU executor is deterministic and the checkpoint holds every value in f64.
    assert_eq!(step_losses(&got), step_losses(&want));
    assert_eq!(got, want);
}

/// The steps logged in `log_file` so far.
fn logged_steps(log_file: &Path) -> usize {
    log::read(log_file).map_or(0, |r| step_losses(&r).len())
}

#[test]
fn a_run_stopped_with_sigint_checkpoints_says_how_to_resume_and_resumes_exactly() {
    const STEPS: u32 = 40;
    let whole = tempfile::tempdir().unwrap();
    let run = finetune(whole.path(), STEPS).output().unwrap();
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let want = log::read(&whole.path().join("log.jsonl")).unwrap();

    let stopped = tempfile::tempdir().unwrap();
    let log_file = stopped.path().join("log.jsonl");
    // Checkpoints only at the end: the one a resumed run finds is SIGINT's.
    let child = finetune_saving(stopped.path(), STEPS, 0)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let began = Instant::now();
    while logged_steps(&log_file) < 3 {
        assert!(
            began.elapsed() < Duration::from_secs(300),
            "no step was logged"
        );
        std::thread::sleep(Duration::from_millis(2));
    }
    let sent = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(sent.success());
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(130), "{stderr}");
    assert!(stderr.contains("--resume"), "{stderr}");
    let at_stop = logged_steps(&log_file);
    assert!((3..STEPS as usize).contains(&at_stop), "{at_stop} steps");
    assert!(stopped.path().join("checkpoint.safetensors").exists());
    assert!(!stopped.path().join("export").exists());

    let resumed = finetune_saving(stopped.path(), STEPS, 0)
        .arg("--resume")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&resumed.stdout);
    assert!(
        resumed.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&resumed.stderr)
    );
    assert!(
        stdout.contains(&format!("resuming after step {at_stop}")),
        "{stdout}"
    );
    // The checkpoint and log are of the last step done: the rest follows exactly.
    assert_eq!(log::read(&log_file).unwrap(), want);
}

/// Mixed precision from a loss scale of 2²⁴, which `f16`'s largest value (65504) can't hold:
/// the first steps are skipped, and the run says how many and on what it ran.
#[test]
fn a_mixed_precision_run_on_the_gpu_names_its_adapter_and_counts_skipped_steps() {
    let out = tempfile::tempdir().unwrap();
    let run = finetune_on("gpu", out.path(), 6, 0)
        .args(["--precision", "mixed", "--loss-scale", "16777216"])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&run.stdout);
    assert!(
        run.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&run.stderr)
    );
    assert!(stdout.contains("mixed precision"), "{stdout}");
    assert!(stdout.contains("step(s) skipped"), "{stdout}");
    let losses = step_losses(&log::read(&out.path().join("log.jsonl")).unwrap());
    assert_eq!(losses.len(), 6);
    assert!(losses.iter().all(|l| l.is_finite()), "{losses:?}");

    let refused = finetune(out.path(), 6)
        .args(["--precision", "mixed"])
        .output()
        .unwrap();
    assert!(!refused.status.success());
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(
        stderr.contains("--precision mixed runs on the GPU"),
        "{stderr}"
    );
}

#[test]
fn help_documents_every_flag() {
    let out = Command::new(env!("CARGO_BIN_EXE_fblayout"))
        .args(["finetune", "--help"])
        .output()
        .unwrap();
    assert!(out.status.success());
    let help = String::from_utf8_lossy(&out.stdout);
    let flags: Vec<&str> = help
        .split_whitespace()
        .filter(|w| w.starts_with("--"))
        .collect();
    for flag in [
        "--model",
        "--data",
        "--task",
        "--eval-data",
        "--eval-fraction",
        "--steps",
        "--lr",
        "--schedule",
        "--warmup",
        "--weight-decay",
        "--batch",
        "--seq",
        "--accumulate",
        "--clip",
        "--eval-every",
        "--save-every",
        "--seed",
        "--out",
        "--resume",
        "--stop-after",
        "--lora",
        "--lora-alpha",
        "--lora-targets",
        "--merge",
        "--labels",
        "--device",
        "--precision",
        "--loss-scale",
        "--no-tune",
        "--recompute",
        "--head-chunk",
        "--attention",
        "--memory-budget-mib",
    ] {
        assert!(flags.contains(&flag), "{flag} is not in --help:\n{help}");
    }
    // Each option's line is followed by its description.
    let lines: Vec<&str> = help.lines().map(str::trim).collect();
    for (i, line) in lines.iter().enumerate() {
        if line.starts_with("--") {
            let next = lines.get(i + 1).copied().unwrap_or_default();
            assert!(
                !next.is_empty() && !next.starts_with('-'),
                "undocumented: {line}"
            );
        }
    }
}

#[test]
fn an_attention_budget_is_kept_or_refused_before_anything_runs() {
    let dir = tempfile::tempdir().unwrap();
    // A budget with every attention fused asked for, rather than chosen: refused.
    let out = finetune(dir.path(), 4)
        .args(["--attention", "fused", "--memory-budget-mib", "100"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        err.contains("--memory-budget-mib is read by --attention auto"),
        "{err}"
    );
    // A budget no plan fits (given alone, it asks the planner): refused, naming the peaks.
    let out = finetune(dir.path(), 4)
        .args(["--memory-budget-mib", "1"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(err.contains("over the budget of 1048576 bytes"), "{err}");
    assert!(!err.contains("panicked"), "{err}");
    // A run that trains: its plan's summary says what was fused and why.
    let attention_line = |args: &[&str]| {
        let out = finetune(dir.path(), 6).args(args).output().unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{stdout}{stderr}");
        let line = stdout.lines().find(|l| l.starts_with("attention: "));
        line.unwrap_or_else(|| panic!("no attention line:\n{stdout}"))
            .to_owned()
    };
    // Fused on the CPU, as set: every attention.
    let line = attention_line(&["--attention", "fused"]);
    let fused: Vec<&str> = line.split_whitespace().skip(1).take(3).collect();
    assert_eq!(fused[0], fused[2], "{line}");
    assert!(
        line.ends_with("attentions fused (as set, not chosen)"),
        "{line}"
    );
    // Chosen by the planner within a budget that every plan fits: its reason and predictions.
    let line = attention_line(&["--memory-budget-mib", "100000"]);
    assert!(
        line.contains("attentions fused (") && line.contains("predicted step"),
        "{line}"
    );
}
