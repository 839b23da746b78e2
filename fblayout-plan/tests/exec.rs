//! The CPU executor: a whole step of the shipped graphs under any layouts and conversions, and
//! its gradients against finite differences.

mod exec_support;

use exec_support::{
    SIZES, SMALL, assert_close, graph, random_layouts, row_major, run_cpu, with_converts,
};
use fblayout_plan::exec::{AdamWConfig, CpuStep, ExecError, StepInputs};
use fblayout_plan::graph::Sizes;
use fblayout_plan::layouts::LayoutChoice;
use fblayout_plan::memory::{MemoryOptions, plan_memory};
use fblayout_plan::models::{Model, ModelConfig, build};

const MODELS: [Model; 2] = [Model::Encoder, Model::Decoder];

#[test]
fn loss_and_gradients_agree_under_random_layouts_and_conversions() {
    for model in MODELS {
        let g = graph(model);
        let reference = run_cpu(&g, &row_major(&g), false, false);
        // A cross-entropy over 23 classes from a random model is near ln 23.
        assert!(
            (reference.loss - f64::from(SMALL.vocab).ln()).abs() < 1.5,
            "{model:?}: loss {}",
            reference.loss
        );
        for seed in 1..=3 {
            let layouts = random_layouts(&g, seed);
            let got = run_cpu(&g, &layouts, false, false);
            assert_close(
                &got,
                &reference,
                1e-10,
                &format!("{model:?} layouts {seed}"),
            );
            let (gc, lc) = with_converts(g.clone(), layouts, 12, seed * 31);
            assert_eq!(
                gc.nodes().len(),
                g.nodes().len() + 12,
                "twelve conversions inserted"
            );
            let got = run_cpu(&gc, &lc, false, false);
            assert_close(
                &got,
                &reference,
                1e-10,
                &format!("{model:?} converts {seed}"),
            );
        }
    }
}

#[test]
fn a_full_step_updates_every_parameter_the_same_way_under_any_layout() {
    for model in MODELS {
        let g = graph(model);
        let before = run_cpu(&g, &row_major(&g), false, false);
        let reference = run_cpu(&g, &row_major(&g), false, true);
        assert_eq!(
            reference.loss, before.loss,
            "the loss is the one before the update"
        );
        let got = run_cpu(&g, &random_layouts(&g, 5), false, true);
        assert_close(&got, &reference, 1e-10, &format!("{model:?} step"));
    }
}

#[test]
fn gradients_match_central_finite_differences() {
    let tiny = ModelConfig::new(7, 4, 2)
        .with_max_positions(4)
        .with_ffn(8)
        .with_layers(1);
    let sizes = Sizes { batch: 2, seq: 3 };
    for model in MODELS {
        let g = build(model, tiny).unwrap();
        let layouts = random_layouts(&g, 3);
        let plan = plan_memory(&g, &layouts, sizes, MemoryOptions::default()).unwrap();
        let mut step = CpuStep::new(&g, &layouts, &plan, sizes, AdamWConfig::default()).unwrap();
        step.init_params(5).unwrap();
        let inputs = StepInputs::random(tiny.vocab, sizes, 9);
        step.forward_backward(&inputs).unwrap();
        let h = 1e-5;
        let mut checked = 0;
        for p in g.params() {
            let name = g.tensor(p).name.clone();
            let grad = step.read(&g.tensor(g.grad(p).unwrap()).name).unwrap();
            let values = step.read(&name).unwrap();
            // A few elements of each parameter, spread over it.
            let stride = (values.len() / 3).max(1);
            for k in (0..values.len()).step_by(stride) {
                let mut at = |x: f64| {
                    let mut v = values.clone();
                    v[k] = x;
                    step.set(&name, &v).unwrap();
                    step.forward_backward(&inputs).unwrap()
                };
                let numeric = (at(values[k] + h) - at(values[k] - h)) / (2.0 * h);
                at(values[k]);
                let err = (numeric - grad[k]).abs();
                assert!(
                    err <= 1e-6 + 1e-5 * numeric.abs(),
                    "{model:?}: d loss / d {name}[{k}] = {} by the backward, {numeric} numerically",
                    grad[k]
                );
                checked += 1;
            }
        }
        assert!(checked > 3 * g.params().len() / 2);
    }
}

#[test]
fn bad_inputs_are_typed_errors() {
    let g = graph(Model::Encoder);
    let layouts = row_major(&g);
    let plan = plan_memory(&g, &layouts, SIZES, MemoryOptions::default()).unwrap();
    let err = CpuStep::new(&g, &layouts[1..], &plan, SIZES, AdamWConfig::default()).unwrap_err();
    assert!(matches!(err, ExecError::LayoutCount { .. }), "{err}");
    let other = Sizes { batch: 3, seq: 5 };
    let err = CpuStep::new(&g, &layouts, &plan, other, AdamWConfig::default()).unwrap_err();
    assert!(err.to_string().contains("batch 2 × seq 5"), "{err}");
    let mut step = CpuStep::new(&g, &layouts, &plan, SIZES, AdamWConfig::default()).unwrap();
    step.init_params(1).unwrap();
    let mut inputs = StepInputs::random(SMALL.vocab, SIZES, 1);
    inputs.labels.pop();
    let err = step.step(&inputs).unwrap_err();
    assert!(err.to_string().contains("labels"), "{err}");
    let mut inputs = StepInputs::random(SMALL.vocab, SIZES, 1);
    inputs.ids[0] = SMALL.vocab;
    // Checked against the table before anything runs, as on the GPU.
    let err = step.step(&inputs).unwrap_err();
    assert!(matches!(err, ExecError::Value { .. }), "{err}");
    assert!(err.to_string().contains("must be below 67"), "{err}");
    assert!(matches!(step.read("nothing"), Err(ExecError::Unknown(_))));
    // An activation's buffer is reused: it can't be read back after the step.
    let err = step.read("l0.ffn.gelu").unwrap_err();
    assert!(matches!(err, ExecError::NotKept(_)), "{err}");
    assert!(err.to_string().contains("MemoryOptions::keep"), "{err}");
    assert!(matches!(
        step.set("tok_embedding", &[1.0]),
        Err(ExecError::Value { .. })
    ));
    let tiled = vec![LayoutChoice::RTile(4); g.tensors().len()];
    assert!(CpuStep::new(&g, &tiled, &plan, SIZES, AdamWConfig::default()).is_ok());
}
