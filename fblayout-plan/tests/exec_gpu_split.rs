//! A GPU step in two parts — `forward_backward`, then `update` — for gradients summed or
//! clipped on the host between: without anything set between, the two parts are the whole
//! step, bit for bit; gradients set between are read back as set (the other tensors sharing
//! their buffers untouched) and are what AdamW takes, as on the CPU executor; a skipped step
//! changes nothing; the parts out of order are errors. On the small decoder, under random
//! layouts (so that gradients share buffers and sit at offsets), on whatever adapter wgpu finds.

mod exec_support;

use exec_support::{ADAMW, SIZES, SMALL, family_layouts, gpu, graph, relative_error};
use fblayout_plan::exec::{CpuStep, GpuStep, StepInputs};
use fblayout_plan::graph::{Graph, Role};
use fblayout_plan::memory::{MemoryOptions, plan_memory};
use fblayout_plan::models::Model;

/// f32 on the GPU against f64 on the CPU (as `exec_gpu.rs`).
const TOLERANCE: f64 = 2e-4;

/// Every persistent tensor's values (parameters, moments, the weights' copies).
fn persistent(g: &Graph, step: &GpuStep<'_>) -> Vec<(String, Vec<f64>)> {
    g.tensors()
        .iter()
        .filter(|t| t.is_persistent() && t.role != Role::Input)
        .filter(|t| g.constant(g.find(&t.name).unwrap()).is_none())
        .map(|t| (t.name.clone(), step.read(&t.name).unwrap()))
        .collect()
}

/// Each trained parameter's name and its gradient's.
fn params(g: &Graph) -> Vec<(String, String)> {
    g.params()
        .into_iter()
        .map(|p| {
            (
                g.tensor(p).name.clone(),
                g.tensor(g.grad(p).unwrap()).name.clone(),
            )
        })
        .collect()
}

fn inputs(seed: u64) -> StepInputs {
    StepInputs::random(SMALL.vocab, SIZES, seed)
}

#[test]
fn the_two_parts_with_nothing_between_are_the_whole_step_bit_for_bit() {
    let gpu = gpu();
    let g = graph(Model::Decoder);
    let layouts = family_layouts(&g, 5);
    let memory = plan_memory(&g, &layouts, SIZES, MemoryOptions::default()).unwrap();
    let mut whole = GpuStep::new(&gpu, &g, &layouts, &memory, SIZES, ADAMW).unwrap();
    let mut split = GpuStep::new(&gpu, &g, &layouts, &memory, SIZES, ADAMW).unwrap();
    whole.upload_params(7).unwrap();
    split.upload_params(7).unwrap();
    for seed in [11, 12, 13] {
        let x = inputs(seed);
        let a = whole.step(&x).unwrap();
        let b = split.forward_backward(&x).unwrap();
        split.update().unwrap();
        assert_eq!(a.to_bits(), b.to_bits(), "loss at seed {seed}");
        assert_eq!(
            persistent(&g, &whole),
            persistent(&g, &split),
            "seed {seed}"
        );
    }
    assert_eq!(whole.steps(), 3);
    assert_eq!(split.steps(), 3);
}

/// Half of the parameters get their gradient halved between the parts: read back, those are
/// the halves and every other gradient is as the backward left it; the update then moves the
/// parameters as the CPU executor's update from the same gradients does.
#[test]
fn gradients_set_between_the_parts_are_what_the_update_takes() {
    let gpu = gpu();
    let g = graph(Model::Decoder);
    let layouts = family_layouts(&g, 6);
    let memory = plan_memory(&g, &layouts, SIZES, MemoryOptions::default()).unwrap();
    let mut on_gpu = GpuStep::new(&gpu, &g, &layouts, &memory, SIZES, ADAMW).unwrap();
    let mut on_cpu = CpuStep::new(&g, &layouts, &memory, SIZES, ADAMW).unwrap();
    on_gpu.upload_params(7).unwrap();
    on_cpu.init_params(7).unwrap();
    let x = inputs(21);
    let got = f64::from(on_gpu.forward_backward(&x).unwrap());
    let want = on_cpu.forward_backward(&x).unwrap();
    assert!(
        (got - want).abs() <= TOLERANCE * want.abs(),
        "{got} vs {want}"
    );
    let all = params(&g);
    let before: Vec<Vec<f64>> = all.iter().map(|(_, d)| on_gpu.read(d).unwrap()).collect();
    let halved: Vec<(String, Vec<f64>)> = all
        .iter()
        .zip(&before)
        .step_by(2)
        .map(|((p, _), grad)| (p.clone(), grad.iter().map(|v| v / 2.0).collect()))
        .collect();
    on_gpu.set_grads(&halved).unwrap();
    for (k, ((_, d), grad)) in all.iter().zip(&before).enumerate() {
        let now = on_gpu.read(d).unwrap();
        if k % 2 == 0 {
            let want: Vec<f64> = grad.iter().map(|v| v / 2.0).collect();
            assert_eq!(now, want, "`{d}` was set to its half");
        } else {
            assert_eq!(&now, grad, "`{d}` was not set and moved");
        }
    }
    for (k, (p, d)) in all.iter().enumerate() {
        let grad = on_cpu.read(d).unwrap();
        let scale = if k % 2 == 0 { 0.5 } else { 1.0 };
        let set: Vec<f64> = grad.iter().map(|v| v * scale).collect();
        on_cpu.set_grad(p, &set).unwrap();
    }
    on_gpu.update().unwrap();
    on_cpu.update().unwrap();
    for (p, _) in &all {
        let err = relative_error(&on_gpu.read(p).unwrap(), &on_cpu.read(p).unwrap());
        assert!(err <= TOLERANCE, "`{p}` differs by {err}");
    }
    assert_eq!(on_gpu.steps(), 1);
}

#[test]
fn a_skipped_step_changes_nothing_and_parts_out_of_order_are_errors() {
    let gpu = gpu();
    let f32_graph = graph(Model::Decoder);
    let g = fblayout_plan::graph::precision::mixed(&f32_graph).unwrap();
    let layouts = exec_support::row_major(&g);
    let memory = plan_memory(&g, &layouts, SIZES, MemoryOptions::default()).unwrap();
    let mut step = GpuStep::new(&gpu, &g, &layouts, &memory, SIZES, ADAMW).unwrap();
    step.upload_params(7).unwrap();
    let e = step.update().unwrap_err();
    assert!(e.to_string().contains("forward_backward"), "{e}");
    let before = persistent(&g, &step);
    let scale = step.loss_scale().unwrap();
    step.forward_backward(&inputs(31)).unwrap();
    step.skip().unwrap();
    assert!(step.last_step_skipped());
    assert_eq!(step.loss_scale(), Some(scale / 2.0));
    assert_eq!(step.steps(), 0);
    assert_eq!(persistent(&g, &step), before);
    // An update after it takes the gradients of that forward_backward.
    step.update().unwrap();
    assert!(!step.last_step_skipped());
    assert_eq!(step.steps(), 1);

    // Without loss scaling nothing is skipped: a gradient that is not finite is an error.
    let layouts = exec_support::row_major(&f32_graph);
    let memory = plan_memory(&f32_graph, &layouts, SIZES, MemoryOptions::default()).unwrap();
    let mut step = GpuStep::new(&gpu, &f32_graph, &layouts, &memory, SIZES, ADAMW).unwrap();
    step.upload_params(7).unwrap();
    step.forward_backward(&inputs(32)).unwrap();
    assert!(step.skip().is_err());
    let (p, _) = &params(&f32_graph)[0];
    let len = step.read(p).unwrap().len();
    let before = persistent(&f32_graph, &step);
    step.set_grads(&[(p.clone(), vec![f64::NAN; len])]).unwrap();
    let e = step.update().unwrap_err();
    assert!(e.to_string().contains("not finite"), "{e}");
    assert_eq!(
        persistent(&f32_graph, &step),
        before,
        "a NaN gradient reached the weights"
    );
}
