//! `fblayout plan` end to end, at a small size and with the analytic cost model (no GPU): the
//! plan's explanation and memory, one tensor's explanation, the SVG, the errors, and the book
//! chapter's excerpts and picture, which must be what the command prints and draws today.

use std::path::{Path, PathBuf};
use std::process::Command;

/// A one-block encoder small enough to plan in a moment.
const SMALL: [&str; 16] = [
    "--layers",
    "1",
    "--hidden",
    "32",
    "--heads",
    "4",
    "--ffn",
    "64",
    "--vocab",
    "64",
    "--max-positions",
    "16",
    "--batch",
    "2",
    "--seq",
    "16",
];

/// Runs `fblayout plan <args>`: whether it succeeded, its stdout, and its stdout and stderr.
fn plan(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_fblayout"))
        .arg("plan")
        .args(args)
        .output()
        .expect("the fblayout binary runs");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let all = stdout.clone() + &String::from_utf8_lossy(&out.stderr);
    (out.status.success(), stdout, all)
}

fn small(extra: &[&str]) -> (bool, String, String) {
    let args: Vec<&str> = SMALL.iter().chain(extra).copied().collect();
    plan(&args)
}

/// A fresh directory for one test's files.
fn scratch(test: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("plan_command-{test}"));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("a scratch directory");
    dir
}

#[test]
fn the_plan_shows_every_strategy_the_layouts_and_the_peak() {
    let (ok, out, all) = small(&[]);
    assert!(ok, "{all}");
    // The four strategies, the guided one marked as shown.
    for strategy in ["row-major", "per-op", "optimal"] {
        assert!(
            out.lines()
                .any(|l| l.trim_start().starts_with(strategy) && l.contains("conversions")),
            "no summary line for {strategy}:\n{out}"
        );
    }
    assert!(
        out.lines()
            .any(|l| l.trim_start().starts_with("guided") && l.contains('*')),
        "{out}"
    );
    // The explanation: every tensor with its layout; the layouts named.
    assert!(out.contains(
        "guided plan, batch 2 × sequence 16 (analytic cost model, the H100's f32 tables at heads \
         of 32, not checked on this adapter)"
    ));
    // The analytic model's predictions say they were not checked on the adapter.
    assert!(
        out.lines()
            .any(|l| l.trim_start().starts_with("not checked on this adapter")),
        "{out}"
    );
    assert!(out.contains("tensors by layout:"), "{out}");
    assert!(out.contains("l0.attn.probs [batch=batch, heads=4, seq_q=seq, seq_k=seq]"));
    assert!(out.contains("R-Tile") && out.contains("row-major"), "{out}");
    // The memory plan: the peak and its breakdown.
    assert!(out.contains("memory at batch 2 × seq 16:"), "{out}");
    assert!(out.contains("live peak"), "{out}");
    for category in ["parameters", "optimizer state", "activations", "gradients"] {
        assert!(
            out.contains(category),
            "the breakdown lacks {category}:\n{out}"
        );
    }
}

#[test]
fn the_per_op_plan_lists_its_conversions() {
    let (ok, out, all) = small(&["--strategy", "per-op"]);
    assert!(ok, "{all}");
    assert!(out.contains("per-op plan,"), "{out}");
    assert!(out.contains("\nconversions:\n"), "{out}");
    assert!(out.contains(" → "), "{out}");
}

#[test]
fn recomputing_prints_a_second_memory_plan() {
    let (ok, out, all) = small(&["--recompute"]);
    assert!(ok, "{all}");
    assert!(out.contains("with cheap activations recomputed"), "{out}");
    assert_eq!(
        out.matches("memory at batch 2 × seq 16:").count(),
        2,
        "{out}"
    );
    let (ok, out, all) = small(&["--recompute", "attention"]);
    assert!(ok, "{all}");
    assert!(
        out.contains("with cheap activations and attention recomputed"),
        "{out}"
    );
    let (ok, _, all) = small(&["--recompute", "everything"]);
    assert!(!ok);
    assert!(all.contains("`cheap` or `attention`"), "{all}");
}

/// The bytes of the first memory plan `out` prints.
fn planned_bytes(out: &str) -> u64 {
    let line = out
        .lines()
        .find(|l| l.starts_with("memory at batch"))
        .expect("a memory plan");
    let (_, rest) = line.split_once(": ").expect("the plan's bytes");
    rest.split_whitespace().next().unwrap().parse().unwrap()
}

#[test]
fn a_fused_head_plans_less_memory_and_reads_an_f16_copy_in_mixed_precision() {
    // SMALL with a vocabulary of 2048 and a batch of 16, where the logits outweigh the
    // parameters and the fused head's scratch.
    let mut args: Vec<&str> = SMALL.to_vec();
    for (flag, value) in [("--vocab", "2048"), ("--batch", "16")] {
        let at = args.iter().position(|a| *a == flag).unwrap();
        args[at + 1] = value;
    }
    let run = |extra: &[&str]| {
        let all_args: Vec<&str> = args.iter().chain(extra).copied().collect();
        let (ok, out, all) = plan(&all_args);
        assert!(ok, "{all}");
        out
    };
    let unfused = planned_bytes(&run(&[]));
    let fused = planned_bytes(&run(&["--head-chunk", "64"]));
    // 256 tokens × 2048 logits are 2 MiB in f32, their gradient written over them: the fused
    // head saves more than half of that (its scratch holds two chunks of 64 tokens and the
    // chunks' products' scratch).
    assert!(fused + 1_048_576 < unfused, "{fused} against {unfused}");
    // In mixed precision the fused head multiplies the weight's f16 copy, as a linear layer
    // does.
    let out = run(&["--head-chunk", "64", "--precision", "mixed"]);
    assert!(out.contains("head.w.f16"), "{out}");
    let (ok, _, all) = small(&["--head-chunk", "0"]);
    assert!(!ok && all.contains("--head-chunk"), "{all}");
}

#[test]
fn fused_attention_plans_less_memory_and_auto_says_what_it_chose() {
    let materialised = planned_bytes(&small(&[]).1);
    let (ok, out, all) = small(&["--attention", "fused"]);
    assert!(ok, "{all}");
    // SMALL's probabilities: 2 × 4 heads × 16 × 16 f32 per layer, no longer held.
    assert!(planned_bytes(&out) < materialised, "{out}");
    assert!(out.contains("l0.attn.lse"), "{out}");
    let (ok, out, all) = small(&["--attention", "auto"]);
    assert!(ok, "{all}");
    let line = out
        .lines()
        .find(|l| l.starts_with("attention: "))
        .unwrap_or_else(|| panic!("no decision line:\n{out}"));
    assert!(
        line.contains("of 1 attentions fused") && line.contains("peak"),
        "{line}"
    );
    // SMALL's heads of 8 were timed nowhere: the default tables, their attention not trusted.
    assert!(line.contains("(Unmeasured)"), "{line}");
    // Heads of 64 plan with the tables timed there, whose choice is trusted.
    let (ok, out, all) = plan(&[
        "--layers",
        "1",
        "--hidden",
        "128",
        "--heads",
        "2",
        "--ffn",
        "256",
        "--vocab",
        "64",
        "--max-positions",
        "64",
        "--batch",
        "2",
        "--seq",
        "64",
        "--precision",
        "mixed",
        "--attention",
        "auto",
    ]);
    assert!(ok, "{all}");
    assert!(
        out.contains(
            "cost model: analytic (reference device: H100, mixed-precision tables at \
             heads of 64)"
        ),
        "{out}"
    );
    let line = out
        .lines()
        .find(|l| l.starts_with("attention: "))
        .unwrap_or_else(|| panic!("no decision line:\n{out}"));
    assert!(!line.contains("Unmeasured"), "{line}");
}

/// `(layout, predicted µs, whether chosen)` of each candidate line of a `--tensor` output.
fn candidate_lines(out: &str) -> Vec<(String, f64, bool)> {
    let start = out
        .find("under each candidate")
        .expect("the candidates' table");
    out[start..]
        .lines()
        .skip(1)
        .filter(|l| l.starts_with("  "))
        .map(|l| {
            let layout = l[..16].trim().to_owned();
            let rest: Vec<&str> = l[16..].split_whitespace().collect();
            let value: f64 = rest[0].parse().expect("a number");
            let micros = match rest[1] {
                "ms" => value * 1e3,
                "µs" => value,
                unit => panic!("unit {unit} in `{l}`"),
            };
            (layout, micros, l.ends_with("chosen"))
        })
        .collect()
}

#[test]
fn a_tensor_explains_its_layout_and_the_optimum_beats_every_single_change() {
    // At the exact optimum no tensor can lower the step by taking another candidate alone: its
    // chosen candidate costs no more than any other.
    for name in ["l0.attn.probs", "l0.ln1", "l0.ffn.up.w", "embed"] {
        let (ok, out, all) = small(&["--strategy", "optimal", "--tensor", name]);
        assert!(ok, "{all}");
        let layout = out
            .lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.split(" is ").nth(1))
            .and_then(|l| l.split(" in the ").next())
            .expect("the tensor's line");
        let rows = candidate_lines(&out);
        let names: Vec<&str> = rows.iter().map(|r| r.0.as_str()).collect();
        assert_eq!(
            names,
            ["row-major", "column-major", "R-Tile 4×4", "R-Tile 8×8"],
            "{out}"
        );
        let chosen: Vec<&(String, f64, bool)> = rows.iter().filter(|r| r.2).collect();
        assert_eq!(chosen.len(), 1, "{out}");
        assert_eq!(chosen[0].0, layout, "{out}");
        for r in &rows {
            assert!(
                chosen[0].1 <= r.1,
                "{name}: {} beats the optimum's choice:\n{out}",
                r.0
            );
        }
        // The whole plan's line for the tensor says the same layout.
        let (_, full, _) = small(&["--strategy", "optimal"]);
        assert!(
            full.lines().any(
                |l| l.starts_with(&format!("  {name} [")) && l.contains(&format!("] {layout}"))
            ),
            "{name} is {layout} alone but not in the plan:\n{full}"
        );
    }
}

#[test]
fn a_gradient_is_explained_with_its_tensor() {
    let (ok, out, all) = small(&["--tensor", "l0.ln1"]);
    assert!(ok, "{all}");
    assert!(out.contains("its gradient `"), "{out}");
    assert!(out.contains("layer_norm_grad"), "{out}");
}

#[test]
fn an_unknown_tensor_is_an_error_listing_close_names() {
    let (ok, out, all) = small(&["--tensor", "prob"]);
    assert!(!ok);
    // The error alone: nothing of the plan is printed before it.
    assert!(out.is_empty(), "{out}");
    assert!(
        all.contains("no tensor `prob` in the plan; close matches: `l0.attn.probs`"),
        "{all}"
    );
    let (ok, _, all) = small(&["--tensor", "l0.ln1.gama"]);
    assert!(!ok);
    assert!(all.contains("`l0.ln1.gamma`"), "{all}");
    assert!(!all.contains("panicked"), "{all}");
}

#[test]
fn bad_input_is_an_error_with_its_cause() {
    for (args, message) in [
        (
            &["--hidden", "100"][..],
            "--hidden 100 is not a multiple of --heads 12",
        ),
        (&["--batch", "0"][..], "--batch must be at least 1"),
        (
            &["--seq", "1000"][..],
            "--seq 1000 is longer than the position table (--max-positions 512)",
        ),
        (
            &["--strategy", "best"][..],
            "no strategy `best`; the strategies are row-major, per-op, guided, optimal",
        ),
        (
            &["--attention", "fused", "--memory-budget-mib", "100"][..],
            "--memory-budget-mib is read by --attention auto",
        ),
        (
            &["--attention", "auto", "--memory-budget-mib", "1"][..],
            "over the budget of 1048576 bytes",
        ),
    ] {
        let (ok, _, all) = plan(args);
        assert!(!ok, "{args:?} succeeded");
        assert!(all.contains(message), "{args:?}:\n{all}");
        assert!(!all.contains("panicked"), "{all}");
    }
    let dir = scratch("bad_input");
    let missing = dir.join("no-such-directory").join("plan.svg");
    let (ok, out, all) = small(&["--svg", missing.to_str().unwrap()]);
    assert!(!ok);
    assert!(out.is_empty(), "{out}");
    assert!(all.contains("writing the SVG"), "{all}");
}

#[test]
fn the_svg_is_xml_with_a_chip_for_every_tensor_written_whole() {
    let dir = scratch("svg");
    let path = dir.join("plan.svg");
    let (ok, out, all) = small(&["--svg", path.to_str().unwrap()]);
    assert!(ok, "{all}");
    assert!(out.contains("the plan's SVG is in"), "{out}");
    let text = std::fs::read_to_string(&path).expect("the SVG was written");
    let doc = roxmltree::Document::parse(&text).expect("the SVG parses as XML");
    assert_eq!(doc.root_element().tag_name().name(), "svg");
    // Every tensor of the explanation appears in the picture's hover titles.
    let titles: Vec<&str> = doc
        .descendants()
        .filter(|n| n.tag_name().name() == "title")
        .filter_map(|n| n.text())
        .collect();
    for name in ["l0.attn.probs", "l0.ln1", "ids", "loss"] {
        assert!(
            titles.iter().any(|t| t.starts_with(&format!("{name} "))),
            "no chip for {name}"
        );
    }
    // Only the file itself is left: the temporary file was renamed over it.
    let files: Vec<_> = std::fs::read_dir(&dir).unwrap().collect();
    assert_eq!(files.len(), 1, "{files:?}");
}

/// The chapter of the book on the planner.
fn chapter() -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../book/src/planner.md");
    std::fs::read_to_string(&path).expect("the planner chapter")
}

/// Every excerpt of the chapter: the arguments of its `<!-- excerpt: fblayout plan ARGS -->`
/// marker and the lines of the `text` block after it (those that are not `…`).
fn excerpts(chapter: &str) -> Vec<(Vec<String>, Vec<String>)> {
    let marker = "<!-- excerpt: fblayout plan";
    let mut found = Vec::new();
    let mut rest = chapter;
    while let Some(at) = rest.find(marker) {
        rest = &rest[at + marker.len()..];
        let end = rest.find("-->").expect("the marker ends");
        let args = rest[..end].split_whitespace().map(str::to_owned).collect();
        let block = rest.find("```text\n").expect("a text block follows") + "```text\n".len();
        let close = rest[block..].find("```").expect("the block ends");
        let lines = rest[block..block + close]
            .lines()
            .filter(|l| l.trim() != "…")
            .map(str::to_owned)
            .collect();
        found.push((args, lines));
        rest = &rest[block + close..];
    }
    found
}

#[test]
fn the_book_shows_what_the_command_prints() {
    let chapter = chapter();
    let excerpts = excerpts(&chapter);
    assert!(excerpts.len() >= 2, "the chapter has no excerpts");
    for (args, lines) in excerpts {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let (ok, out, all) = plan(&args);
        assert!(ok, "{args:?}: {all}");
        let printed: Vec<&str> = out.lines().map(str::trim_end).collect();
        for line in lines {
            assert!(
                printed.contains(&line.trim_end()),
                "`fblayout plan {}` no longer prints\n{line}\nit prints:\n{out}",
                args.join(" ")
            );
        }
    }
}

#[test]
fn the_books_picture_is_what_the_command_draws() {
    let dir = scratch("book_svg");
    let path = dir.join("plan.svg");
    let chapter = chapter();
    // The chapter says how the picture was made; make it again.
    let line = chapter
        .lines()
        .find(|l| l.contains("--svg book/src/img/plan.svg"))
        .expect("the chapter's command for its picture");
    let args: Vec<&str> = line
        .split("cargo run --release -- plan")
        .nth(1)
        .expect("the command")
        .trim()
        .trim_end_matches('`')
        .split_whitespace()
        .map(|a| {
            if a == "book/src/img/plan.svg" {
                path.to_str().unwrap()
            } else {
                a
            }
        })
        .collect();
    let (ok, _, all) = plan(&args);
    assert!(ok, "{all}");
    let drawn = std::fs::read_to_string(&path).unwrap();
    let book = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../book/src/img/plan.svg"),
    )
    .expect("the book's picture");
    assert!(
        drawn == book,
        "book/src/img/plan.svg is not what `fblayout plan {}` draws today; run it again",
        args.join(" ")
    );
}

/// `--calibrate` on the adapter wgpu finds (lavapipe in CI; no adapter fails the test): the
/// first run measures and writes the cache, the second reads it, a corrupt file is rebuilt.
#[test]
fn calibrating_measures_once_then_reads_the_cache() {
    let dir = scratch("calibrate");
    let run = || {
        let out = Command::new(env!("CARGO_BIN_EXE_fblayout"))
            .arg("plan")
            .args(SMALL)
            .arg("--calibrate")
            .env("FBLAYOUT_CACHE_DIR", &dir)
            .output()
            .expect("the fblayout binary runs");
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(
            out.status.success(),
            "{stdout}{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let first = stdout
            .lines()
            .find(|l| l.starts_with("cost model: calibrated on"));
        first.expect("the calibrated model's line").to_owned()
    };
    assert!(run().ends_with("(measured; no cache file yet)"));
    assert!(run().ends_with("(read from the cache)"));
    let file = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| {
            p.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with("calibration-"))
        })
        .expect("the calibration cache file");
    std::fs::write(&file, b"not a cache").unwrap();
    let line = run();
    assert!(
        line.contains("(measured; the cache was rebuilt: "),
        "{line}"
    );
    assert!(run().ends_with("(read from the cache)"));
}
