//! The CPU executor's methods a training loop needs — the forward alone, the learning rate,
//! the step count, gradients set from outside — on the tiny GPT-2 fixture.

use std::path::Path;

use fblayout_hf::ModelDir;
use fblayout_plan::exec::{AdamWConfig, CpuStep, StepInputs};
use fblayout_plan::graph::{Role, Sizes};
use fblayout_plan::memory::{MemoryOptions, plan_memory};
use fblayout_plan::select::{self, CostModel, Strategy};

const SIZES: Sizes = Sizes { batch: 2, seq: 8 };

/// A fresh step of the fixture with its checkpoint's parameters.
fn step() -> CpuStep {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let dir = ModelDir::open(root.join("tests/fixtures/hf/gpt2/model")).unwrap();
    let graph = fblayout_hf::graph::build(&dir).unwrap();
    let plan = select::plan(&graph, SIZES, &CostModel::analytic(), Strategy::Guided).unwrap();
    let memory = plan_memory(
        plan.graph(),
        plan.layouts(),
        SIZES,
        MemoryOptions::default(),
    )
    .unwrap();
    let mut cpu = CpuStep::new(
        plan.graph(),
        plan.layouts(),
        &memory,
        SIZES,
        AdamWConfig::default(),
    )
    .unwrap()
    .poison_freed(true);
    for (name, values) in fblayout_hf::graph::parameters(&dir, &graph).unwrap() {
        cpu.set(&name, &values).unwrap();
    }
    cpu
}

fn inputs(seed: u64) -> StepInputs {
    let mut i = StepInputs::random(320, SIZES, seed);
    i = i.with("positions", (0..16).map(|k| k % 8).collect());
    i
}

/// Every persistent tensor's values, by name.
fn persistent(cpu: &CpuStep) -> Vec<(String, Vec<f64>)> {
    let g = cpu.graph();
    g.ids()
        .filter(|&t| matches!(g.tensor(t).role, Role::Param | Role::State { .. }))
        .map(|t| {
            let name = g.tensor(t).name.clone();
            let v = cpu.read(&name).unwrap();
            (name, v)
        })
        .collect()
}

#[test]
fn evaluate_gives_the_steps_loss_and_changes_nothing() {
    let mut cpu = step();
    let before = persistent(&cpu);
    let loss = cpu.evaluate(&inputs(1)).unwrap();
    assert_eq!(
        persistent(&cpu),
        before,
        "evaluate changed a parameter or moment"
    );
    assert_eq!(cpu.steps(), 0);
    // The same forward, in the same order, on the same values: the same bits.
    assert_eq!(cpu.step(&inputs(1)).unwrap(), loss);
    assert_ne!(persistent(&cpu), before);
}

#[test]
fn a_step_restored_from_its_state_continues_exactly() {
    let mut a = step();
    a.set_learning_rate(2e-3);
    a.step(&inputs(1)).unwrap();
    let saved = persistent(&a);
    a.set_learning_rate(1e-3);
    let loss_a = a.step(&inputs(2)).unwrap();

    let mut b = step();
    for (name, v) in &saved {
        b.set(name, v).unwrap();
    }
    b.set_steps(1);
    b.set_learning_rate(1e-3);
    let loss_b = b.step(&inputs(2)).unwrap();
    assert_eq!(loss_a, loss_b);
    assert_eq!(persistent(&a), persistent(&b));
    assert_eq!(b.steps(), 2);
}

#[test]
fn an_update_from_set_gradients_is_the_step_and_a_zero_rate_changes_nothing() {
    let mut a = step();
    a.step(&inputs(3)).unwrap();
    let mut b = step();
    b.forward_backward(&inputs(3)).unwrap();
    let g = b.graph().clone();
    for p in g.params() {
        let grad = b.read(&g.tensor(g.grad(p).unwrap()).name).unwrap();
        b.set_grad(&g.tensor(p).name, &grad).unwrap();
    }
    b.update().unwrap();
    assert_eq!(persistent(&a), persistent(&b));

    // AdamW's update and decay are both scaled by the rate: at 0 the parameters stay.
    let mut c = step();
    let params = |c: &CpuStep| {
        persistent(c)
            .into_iter()
            .filter(|(n, _)| !n.ends_with(".m") && !n.ends_with(".v"))
            .collect::<Vec<_>>()
    };
    let before = params(&c);
    c.set_learning_rate(0.0);
    assert_eq!(c.learning_rate(), 0.0);
    c.step(&inputs(4)).unwrap();
    assert_eq!(params(&c), before);
    let e = c.set_grad("no.such", &[0.0]).unwrap_err();
    assert!(e.to_string().contains("no.such"), "{e}");
}
