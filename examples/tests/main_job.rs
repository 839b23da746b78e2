//! The main job end to end, at a small size: the plan, the WGSL, the GPU's offsets and the
//! layer's forward and backward on the GPU (lavapipe in CI) checked against the CPU backend.
//! Fails, never skips, when no GPU adapter is found (`--device gpu`).

use std::process::Command;

fn run(args: &[&str]) -> (bool, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_fblayout"))
        .args(args)
        .output()
        .expect("the fblayout binary runs");
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    (out.status.success(), text)
}

#[test]
fn a_small_layer_runs_forward_and_backward_and_the_gpu_agrees_with_the_cpu() {
    let (ok, text) = run(&[
        "--device", "gpu", "--batch", "2", "--seq", "13", "--hidden", "64", "--heads", "4",
        "--ffn", "96",
    ]);
    assert!(ok, "{text}");
    assert!(text.contains("GPU and CPU agree on all"), "{text}");
    assert!(
        text.contains("GPU and CPU agree on the output and every gradient"),
        "{text}"
    );
    for step in [
        "QKV projection",
        "attention backward",
        "LayerNorm backward",
        "total",
    ] {
        assert!(
            text.contains(step),
            "the step table lacks `{step}`:\n{text}"
        );
    }
}

#[test]
fn sizes_that_do_not_fit_are_errors_with_their_cause() {
    let (ok, text) = run(&["--device", "cpu", "--hidden", "100", "--heads", "12"]);
    assert!(!ok);
    assert!(
        text.contains("--hidden 100 is not a multiple of --heads 12"),
        "{text}"
    );
    let (ok, text) = run(&["--device", "cpu", "--batch", "0"]);
    assert!(!ok);
    assert!(text.contains("--batch must be at least 1"), "{text}");
}
