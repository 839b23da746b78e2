//! The GPU executor against the CPU executor: one whole step (forward, backward, AdamW) of a
//! small encoder and a small decoder, under row-major and random layouts and with conversions,
//! on whatever adapter wgpu finds (lavapipe here); every buffer poisoned before the step.

mod exec_support;

use exec_support::{
    ADAMW, Results, SIZES, SMALL, WIDE, assert_close, family_layouts, forward_converts, gpu, graph,
    random_layouts, relative_error, row_major, run_cpu,
};
use fblayout_kernels::Gpu;
use fblayout_kernels::ops::{AdamWOp, NonFiniteOp};
use fblayout_plan::__private::OVERFLOW_SECTION;
use fblayout_plan::exec::{CpuStep, ExecError, GpuStep, LossScaling, StepInputs};
use fblayout_plan::graph::{Graph, Op};
use fblayout_plan::layouts::LayoutChoice;
use fblayout_plan::memory::{MemoryOptions, plan_memory};
use fblayout_plan::models::{Model, build};
use fblayout_plan::select::{CostModel, Strategy, plan};

/// What [`run_cpu`] returns, from the GPU: the same parameters and inputs, one full step.
fn run_gpu(gpu: &Gpu, g: &Graph, layouts: &[LayoutChoice]) -> Results {
    let plan = plan_memory(g, layouts, SIZES, MemoryOptions::default()).unwrap();
    let mut step = GpuStep::new(gpu, g, layouts, &plan, SIZES, ADAMW).unwrap();
    step.upload_params(7).unwrap();
    step.poison().unwrap();
    let inputs = StepInputs::random(SMALL.vocab, SIZES, 11);
    let (loss, timings) = step.step_timed(&inputs).unwrap();
    // One section per operation.
    for node in g.nodes().iter().take(3) {
        let name = node.op.name();
        assert!(
            timings
                .iter()
                .any(|t| t.section.as_deref().is_some_and(|s| s.starts_with(name))),
            "no section for `{name}`"
        );
    }
    let mut values = Vec::new();
    for p in g.params() {
        let grad = &g.tensor(g.grad(p).unwrap()).name;
        values.push((grad.clone(), step.read(grad).unwrap()));
        let name = &g.tensor(p).name;
        values.push((name.clone(), step.read(name).unwrap()));
    }
    Results {
        loss: f64::from(loss),
        values,
    }
}

/// A GPU step and a CPU step of `g` under `layouts`, from the same parameters (seed 7).
fn both_steps<'g>(gpu: &'g Gpu, g: &Graph, layouts: &[LayoutChoice]) -> (GpuStep<'g>, CpuStep) {
    let memory = plan_memory(g, layouts, SIZES, MemoryOptions::default()).unwrap();
    let mut on_gpu = GpuStep::new(gpu, g, layouts, &memory, SIZES, ADAMW).unwrap();
    let mut on_cpu = CpuStep::new(g, layouts, &memory, SIZES, ADAMW).unwrap();
    on_gpu.upload_params(7).unwrap();
    on_cpu.init_params(7).unwrap();
    (on_gpu, on_cpu)
}

/// f32 on the GPU against f64 on the CPU, over a few hundred terms per result.
const TOLERANCE: f64 = 2e-4;

#[test]
fn every_strategys_plan_runs_on_the_gpu_and_matches_the_cpu() {
    // The plans keep a gradient in its tensor's layout and insert conversions only where the
    // kernels can read them, so each runs as planned; per-op inserts the most conversions.
    let gpu = gpu();
    for model in [Model::Encoder, Model::Decoder] {
        let g = graph(model);
        let want = run_cpu(&g, &row_major(&g), true, true);
        for strategy in Strategy::ALL {
            let p = plan(&g, SIZES, &CostModel::analytic(), strategy).unwrap();
            let got = run_gpu(&gpu, p.graph(), p.layouts());
            let what = format!(
                "{model:?} {strategy:?} ({} conversions)",
                p.conversions().len()
            );
            assert_close(&got, &want, TOLERANCE, &what);
            if strategy == Strategy::PerOp {
                assert!(!p.conversions().is_empty(), "{what}: nothing converted");
            }
        }
    }
}

/// AdamW reads its operands as stored: no plan converts a gradient before its step, which the
/// GPU records with its group and the overflow checks where the first AdamW node stands (a
/// per-op plan under column-major weights once did, and the checks read copies not yet
/// written). A graph converting one by hand is refused, naming the conversion.
#[test]
fn no_plan_converts_an_optimizer_input_and_a_graph_that_does_is_refused() {
    let gpu = gpu();
    for model in [Model::Encoder, Model::Decoder] {
        let g = graph(model);
        for strategy in Strategy::ALL {
            let p = plan(&g, SIZES, &CostModel::analytic(), strategy).unwrap();
            let g = p.graph();
            for c in p.conversions() {
                let consumer = &g.nodes()[c.consumer.index()];
                assert!(
                    !matches!(consumer.op, Op::AdamW { .. }),
                    "{model:?} {strategy:?}: {c:?}"
                );
            }
        }
    }
    let mut g = graph(Model::Encoder);
    let (at, grad) = g
        .nodes()
        .iter()
        .enumerate()
        .filter(|(_, n)| matches!(n.op, Op::AdamW { .. }))
        .map(|(i, n)| (i, n.inputs[1]))
        .nth(3)
        .unwrap();
    g.insert_convert(exec_support::node_id(&g, at), grad, "late_copy")
        .unwrap();
    let layouts = row_major(&g);
    let memory = plan_memory(&g, &layouts, SIZES, MemoryOptions::default()).unwrap();
    let err = GpuStep::new(&gpu, &g, &layouts, &memory, SIZES, ADAMW).unwrap_err();
    let text = err.to_string();
    assert!(
        matches!(err, ExecError::Op { .. })
            && text.contains("late_copy")
            && text.contains("after the first AdamW"),
        "{text}"
    );
}

#[test]
fn a_gpu_step_matches_the_cpu_under_any_layouts() {
    let gpu = gpu();
    for model in [Model::Encoder, Model::Decoder] {
        let g = graph(model);
        let cases = [
            ("row-major", g.clone(), row_major(&g)),
            ("random", g.clone(), family_layouts(&g, 3)),
        ];
        let (gc, lc) = forward_converts(g.clone(), family_layouts(&g, 4), 8, 9);
        for (what, g, layouts) in cases.into_iter().chain([("converts", gc, lc)]) {
            let want = run_cpu(&g, &layouts, true, true);
            let got = run_gpu(&gpu, &g, &layouts);
            assert_close(&got, &want, TOLERANCE, &format!("{model:?} {what}"));
        }
    }
}

#[test]
fn a_second_step_moves_on_and_mismatched_gradient_layouts_are_refused() {
    let gpu = gpu();
    let g = graph(Model::Decoder);
    let layouts = row_major(&g);
    let plan = plan_memory(&g, &layouts, SIZES, MemoryOptions::default()).unwrap();
    let mut step = GpuStep::new(&gpu, &g, &layouts, &plan, SIZES, ADAMW).unwrap();
    step.upload_params(7).unwrap();
    let inputs = StepInputs::random(SMALL.vocab, SIZES, 11);
    let first = step.step(&inputs).unwrap();
    let allocated = gpu.pool_stats().allocations;
    let second = step.step(&inputs).unwrap();
    assert_eq!(step.steps(), 2);
    assert_eq!(
        gpu.pool_stats().allocations,
        allocated,
        "a step after the first allocates no GPU memory"
    );
    assert!(
        second < first,
        "AdamW lowers the loss on the same batch: {first} → {second}"
    );
    // Gradients stored unlike their tensors: a kernel that reads one through the other's view
    // refuses them.
    let mismatched: Vec<LayoutChoice> = random_layouts(&g, 1);
    let plan = plan_memory(&g, &mismatched, SIZES, MemoryOptions::default()).unwrap();
    let mut step = GpuStep::new(&gpu, &g, &mismatched, &plan, SIZES, ADAMW).unwrap();
    step.upload_params(7).unwrap();
    let err = step.step(&inputs).unwrap_err();
    assert!(matches!(err, ExecError::Op { .. }), "{err}");
    assert!(err.to_string().contains("view"), "{err}");
}

#[test]
fn steps_submitted_again_track_the_cpu_over_new_batches() {
    // The first step records everything; later ones submit that recording again with only
    // AdamW's step number written anew (the embeddings read the token ids refilled into the
    // same buffers). Three steps on three different batches must follow the CPU's three steps.
    let gpu = gpu();
    for model in [Model::Encoder, Model::Decoder] {
        let g = graph(model);
        let (mut on_gpu, mut on_cpu) = both_steps(&gpu, &g, &family_layouts(&g, 5));
        for seed in [11, 12, 13] {
            let inputs = StepInputs::random(SMALL.vocab, SIZES, seed);
            let got = f64::from(on_gpu.step(&inputs).unwrap());
            let want = on_cpu.step(&inputs).unwrap();
            assert!(
                (got - want).abs() <= TOLERANCE * want.abs(),
                "{model:?} step on batch {seed}: loss {got} vs {want}"
            );
        }
        for p in g.params() {
            let name = &g.tensor(p).name;
            let e = exec_support::relative_error(
                &on_gpu.read(name).unwrap(),
                &on_cpu.read(name).unwrap(),
            );
            assert!(e <= TOLERANCE, "{model:?}: `{name}` after 3 steps: {e:e}");
        }
    }
}

#[test]
fn steps_that_load_the_next_batch_while_the_gpu_runs_track_the_cpu() {
    // `step_then_load` writes the next batch's inputs while the GPU runs a step. Four steps so,
    // with an evaluation of another batch between two of them (which loads its own inputs, so
    // the next step loads its batch again), the last one given a next batch that is refused:
    // the step given that batch then reports it, and nothing moves.
    let gpu = gpu();
    for model in [Model::Encoder, Model::Decoder] {
        let g = graph(model);
        let (mut on_gpu, mut on_cpu) = both_steps(&gpu, &g, &family_layouts(&g, 5));
        let batches: Vec<StepInputs> = (21..26)
            .map(|seed| StepInputs::random(SMALL.vocab, SIZES, seed))
            .collect();
        let mut bad = batches[4].clone();
        bad.ids[2] = SMALL.vocab;
        let close = |what: &str, got: f32, want: f64| {
            let got = f64::from(got);
            assert!(
                (got - want).abs() <= TOLERANCE * want.abs(),
                "{model:?} {what}: loss {got} vs {want}"
            );
        };
        for k in 0..4 {
            let next = if k == 3 { &bad } else { &batches[k + 1] };
            let got = on_gpu.step_then_load(&batches[k], next).unwrap();
            close(&format!("step {k}"), got, on_cpu.step(&batches[k]).unwrap());
            if k == 1 {
                let got = on_gpu.evaluate(&batches[4]).unwrap();
                close("evaluation", got, on_cpu.evaluate(&batches[4]).unwrap());
            }
        }
        let before = persistent_values(&g, &on_gpu);
        let err = on_gpu.step(&bad).unwrap_err().to_string();
        assert!(err.contains("`ids`") && err.contains("position 2"), "{err}");
        assert_eq!(on_gpu.steps(), 4);
        assert_eq!(
            persistent_values(&g, &on_gpu),
            before,
            "a refused step moved something"
        );
        for p in g.params() {
            let name = &g.tensor(p).name;
            let e = relative_error(&on_gpu.read(name).unwrap(), &on_cpu.read(name).unwrap());
            assert!(e <= TOLERANCE, "{model:?}: `{name}` after 4 steps: {e:e}");
        }
    }
}

/// f16 activations and gradients on the GPU against f64 on the CPU: each stored value rounds
/// to 11 bits.
const MIXED_TOLERANCE: f64 = 3e-2;

#[test]
fn a_mixed_precision_step_tracks_the_cpu() {
    let gpu = gpu();
    let models = [Model::Encoder, Model::Decoder];
    let configs = [(SMALL, "small"), (WIDE, "wide")];
    for (model, (config, size)) in models.into_iter().flat_map(|m| configs.map(|c| (m, c))) {
        let g = fblayout_plan::graph::precision::mixed(&build(model, config).unwrap()).unwrap();
        for (layouts_name, layouts) in [
            ("row-major", row_major(&g)),
            ("families", family_layouts(&g, 6)),
        ] {
            let what = format!("{size} {layouts_name}");
            let (mut on_gpu, mut on_cpu) = both_steps(&gpu, &g, &layouts);
            // Where the device has tensor cores every linear and attention operation of the
            // wide model runs a product on them (all of them under row-major layouts), with
            // tuned tiles. The small model's products all have a side of at most 16, which the
            // narrow kernels take, except the forwards that add their bias in the epilogue
            // (the narrow kernels have none): those run on tensor cores.
            let products = g
                .nodes()
                .iter()
                .filter(|n| {
                    matches!(
                        n.op,
                        Op::Linear
                            | Op::LinearGradInput
                            | Op::LinearGradWeight
                            | Op::Attention { .. }
                            | Op::AttentionGrad { .. }
                    )
                })
                .count();
            let biased = g.folded_biases().iter().flatten().count();
            let on_cores = on_gpu.tune().unwrap();
            match (gpu.features().coop_fragment.is_some(), size, layouts_name) {
                (false, ..) => assert_eq!(on_cores, 0, "{model:?} {what}"),
                (true, "small", "row-major") => assert_eq!(on_cores, biased, "{model:?} {what}"),
                (true, "small", _) => assert!(on_cores <= biased, "{model:?} {what}"),
                (true, _, "row-major") => assert_eq!(on_cores, products, "{model:?} {what}"),
                (true, ..) => assert!(on_cores <= products, "{model:?} {what}"),
            }
            assert_eq!(on_gpu.loss_scale(), Some(65536.0));
            for seed in [11, 12] {
                let inputs = StepInputs::random(SMALL.vocab, SIZES, seed);
                let got = f64::from(on_gpu.step(&inputs).unwrap());
                let want = on_cpu.step(&inputs).unwrap();
                assert!(!on_gpu.last_step_skipped(), "{model:?} {what}: skipped");
                assert!(
                    (got - want).abs() <= MIXED_TOLERANCE * want.abs(),
                    "{model:?} {what} batch {seed}: loss {got} vs {want}"
                );
            }
            assert_eq!(on_gpu.steps(), 2);
            for p in g.params() {
                for name in [&g.tensor(p).name, &g.tensor(g.grad(p).unwrap()).name] {
                    let e = exec_support::relative_error(
                        &on_gpu.read(name).unwrap(),
                        &on_cpu.read(name).unwrap(),
                    );
                    assert!(e <= MIXED_TOLERANCE, "{model:?} {what}: `{name}`: {e:e}");
                }
            }
        }
    }
}

#[test]
fn an_overflowing_step_changes_nothing_and_lowers_the_scale() {
    let gpu = gpu();
    let g = fblayout_plan::graph::precision::mixed(&graph(Model::Decoder)).unwrap();
    let layouts = row_major(&g);
    let memory = plan_memory(&g, &layouts, SIZES, MemoryOptions::default()).unwrap();
    let mut step = GpuStep::new(&gpu, &g, &layouts, &memory, SIZES, ADAMW).unwrap();
    step.upload_params(7).unwrap();
    let inputs = StepInputs::random(SMALL.vocab, SIZES, 11);
    // Parameters, moments and the f16 copies of the weights.
    let snapshot = |step: &GpuStep<'_>| -> Vec<Vec<f64>> {
        g.params()
            .iter()
            .flat_map(|&p| {
                let name = &g.tensor(p).name;
                let copies = g.copies_of(p).into_iter().map(|c| g.tensor(c).name.clone());
                [name.clone(), format!("{name}.m"), format!("{name}.v")]
                    .into_iter()
                    .chain(copies)
            })
            .map(|n| step.read(&n).unwrap())
            .collect()
    };
    assert!(g.params().iter().any(|&p| !g.copies_of(p).is_empty()));
    let before = snapshot(&step);
    // A scale no f16 gradient survives: the step overflows, and the device skips the update.
    let huge = LossScaling {
        initial: 1.0e30,
        ..LossScaling::default()
    };
    step.set_loss_scaling(huge).unwrap();
    let loss = step.step(&inputs).unwrap();
    assert!(
        loss.is_finite(),
        "the forward does not see the scale: {loss}"
    );
    assert!(step.last_step_skipped());
    assert_eq!(step.steps(), 0, "a skipped step is no step");
    assert_eq!(step.loss_scale(), Some(0.5e30));
    assert_eq!(snapshot(&step), before, "a skipped step moved something");
    // A scale that fits: the next step applies, with AdamW's first step number.
    step.set_loss_scaling(LossScaling::default()).unwrap();
    let again = step.step(&inputs).unwrap();
    assert!(!step.last_step_skipped());
    assert_eq!(step.steps(), 1);
    assert_eq!(
        again, loss,
        "the same batch, the same parameters: the same loss"
    );
    assert_ne!(snapshot(&step), before);
    // The loss's gradient starts from the scale of each step, though the step is recorded
    // once: from a scale that overflows, each skipped step halves it, until one fits and the
    // step applies (were the cross-entropy's backward kept as first recorded, every step
    // would overflow).
    let start = 1.0e9_f32;
    step.set_loss_scaling(LossScaling {
        initial: start,
        ..LossScaling::default()
    })
    .unwrap();
    let mut skipped = 0;
    loop {
        let loss = step.step(&inputs).unwrap();
        assert!(loss.is_finite());
        if !step.last_step_skipped() {
            break;
        }
        skipped += 1;
        assert!(skipped < 40, "{skipped} steps overflowed");
    }
    assert!(skipped >= 1, "a scale of {start} did not overflow");
    assert_eq!(step.loss_scale(), Some(start / 2f32.powi(skipped)));
    assert_eq!(step.steps(), 2);
    // Loss scaling is refused with its cause where gradients are f32 or settings are bad.
    let f32_graph = graph(Model::Decoder);
    let layouts = row_major(&f32_graph);
    let memory = plan_memory(&f32_graph, &layouts, SIZES, MemoryOptions::default()).unwrap();
    let mut plain = GpuStep::new(&gpu, &f32_graph, &layouts, &memory, SIZES, ADAMW).unwrap();
    assert_eq!(plain.loss_scale(), None);
    let err = plain.set_loss_scaling(LossScaling::default()).unwrap_err();
    assert!(err.to_string().contains("f32"), "{err}");
    let bad = LossScaling {
        backoff: 2.0,
        ..LossScaling::default()
    };
    let err = step.set_loss_scaling(bad).unwrap_err();
    assert!(err.to_string().contains("backoff"), "{err}");
}

#[test]
fn the_overflow_checks_read_many_gradients_per_dispatch() {
    // Every gradient is checked, in as few dispatches as the device's storage bindings allow:
    // the section of the checks has ⌈gradients / capacity⌉ dispatches, not one a gradient.
    let gpu = gpu();
    let capacity = NonFiniteOp::capacity(&gpu);
    for model in [Model::Encoder, Model::Decoder] {
        let g = fblayout_plan::graph::precision::mixed(&graph(model)).unwrap();
        let layouts = family_layouts(&g, 6);
        let memory = plan_memory(&g, &layouts, SIZES, MemoryOptions::default()).unwrap();
        let mut step = GpuStep::new(&gpu, &g, &layouts, &memory, SIZES, ADAMW).unwrap();
        step.upload_params(7).unwrap();
        let inputs = StepInputs::random(SMALL.vocab, SIZES, 11);
        let (_, timings) = step.step_timed(&inputs).unwrap();
        assert!(!step.last_step_skipped(), "{model:?}");
        let checks = timings
            .iter()
            .filter(|t| t.section.as_deref() == Some(OVERFLOW_SECTION))
            .count();
        let grads = g.params().len();
        assert!(grads > capacity, "{model:?}: {grads} gradients");
        assert_eq!(checks, grads.div_ceil(capacity), "{model:?}");
    }
}

#[test]
fn a_cross_entropy_over_a_copy_of_its_labels_finds_its_forward() {
    // A graph may read the labels through a copy in the forward and through the labels
    // themselves in the backward (or the other way round): the GPU backward finds the
    // forward's state through the copy, and the step computes what it computes without the
    // copy. (The planner never copies integer tensors; the CPU executor refuses to.)
    let gpu = gpu();
    let g = graph(Model::Decoder);
    let labels = g.find("labels").unwrap();
    let want = run_gpu(&gpu, &g, &row_major(&g));
    for op in ["cross_entropy", "cross_entropy_grad"] {
        let mut copied = g.clone();
        let mut layouts = row_major(&g);
        let at = copied
            .nodes()
            .iter()
            .position(|n| n.op.name() == op)
            .unwrap();
        let copy = copied
            .insert_convert(exec_support::node_id(&copied, at), labels, "labels.copy")
            .unwrap();
        assert_eq!(copied.copied_from(copy), labels);
        assert_eq!(copied.copied_from(labels), labels);
        layouts.push(LayoutChoice::RowMajor);
        let got = run_gpu(&gpu, &copied, &layouts);
        assert_close(&got, &want, TOLERANCE, &format!("labels copied for `{op}`"));
        let memory = plan_memory(&copied, &layouts, SIZES, MemoryOptions::default()).unwrap();
        let mut cpu = CpuStep::new(&copied, &layouts, &memory, SIZES, ADAMW).unwrap();
        cpu.init_params(7).unwrap();
        let err = cpu
            .step(&StepInputs::random(SMALL.vocab, SIZES, 11))
            .unwrap_err();
        assert!(err.to_string().contains("integer"), "{err}");
    }
}

#[test]
fn the_adamw_steps_run_in_groups_and_any_grouping_steps_alike() {
    // Every AdamW node is one parameter of a group of as many as one dispatch takes: a step
    // records ⌈parameters / capacity⌉ AdamW dispatches, each in the section of its group's
    // first node. Smaller groups (one a parameter; three) leave every parameter and moment
    // where the default grouping does, bit for bit, and the CPU agrees.
    let gpu = gpu();
    let inputs = StepInputs::random(SMALL.vocab, SIZES, 11);
    for model in [Model::Encoder, Model::Decoder] {
        for mixed in [false, true] {
            let g = match mixed {
                false => graph(model),
                true => fblayout_plan::graph::precision::mixed(&graph(model)).unwrap(),
            };
            let what = format!("{model:?}, mixed {mixed}");
            let layouts = family_layouts(&g, 7);
            let params = g.params().len();
            let copies = g
                .nodes()
                .iter()
                .any(|n| n.op.name() == "adamw" && n.outputs.len() > 3);
            let capacity = AdamWOp::capacity(&gpu, copies);
            assert!(params > capacity, "{what}: {params} parameters");
            let (mut grouped, mut on_cpu) = both_steps(&gpu, &g, &layouts);
            assert_eq!(
                grouped.adamw_dispatches(),
                params.div_ceil(capacity),
                "{what}"
            );
            let (_, timings) = grouped.step_timed(&inputs).unwrap();
            on_cpu.step(&inputs).unwrap();
            let first_steps: Vec<String> = g
                .nodes()
                .iter()
                .enumerate()
                .filter(|(_, n)| n.op.name() == "adamw")
                .step_by(capacity)
                .map(|(i, _)| fblayout_plan::__private::section(&g, i))
                .collect();
            let sections: Vec<&str> = timings
                .iter()
                .filter_map(|t| t.section.as_deref())
                .filter(|s| s.starts_with("adamw "))
                .collect();
            assert_eq!(sections, first_steps, "{what}: one dispatch a group");
            let state = |step: &GpuStep<'_>| -> Vec<Vec<f64>> {
                g.params()
                    .iter()
                    .flat_map(|&p| {
                        let name = &g.tensor(p).name;
                        [name.clone(), format!("{name}.m"), format!("{name}.v")]
                    })
                    .map(|n| step.read(&n).unwrap())
                    .collect()
            };
            let want = state(&grouped);
            for p in g.params() {
                let name = &g.tensor(p).name;
                let e = exec_support::relative_error(
                    &grouped.read(name).unwrap(),
                    &on_cpu.read(name).unwrap(),
                );
                let tol = if mixed { MIXED_TOLERANCE } else { TOLERANCE };
                assert!(e <= tol, "{what}: `{name}`: {e:e}");
            }
            for most in [1, 3] {
                let memory = plan_memory(&g, &layouts, SIZES, MemoryOptions::default()).unwrap();
                let mut step = GpuStep::new(&gpu, &g, &layouts, &memory, SIZES, ADAMW).unwrap();
                step.upload_params(7).unwrap();
                let dispatches = step.group_adamw(most).unwrap();
                assert_eq!(
                    dispatches,
                    params.div_ceil(most),
                    "{what}: groups of {most}"
                );
                step.step(&inputs).unwrap();
                assert_eq!(state(&step), want, "{what}: groups of {most}");
            }
        }
    }
}

#[test]
fn the_f16_weights_are_the_rounded_parameters_from_the_first_step_on() {
    // In mixed precision every linear weight's f16 copy is made where the parameters are set
    // and written by the weight's AdamW step: before the first step, after each step, and after
    // a step skipped for overflow, it is the parameter rounded to f16 (on the CPU, which stores
    // everything in f64, the parameter itself). No conversion runs in the step.
    let gpu = gpu();
    for model in [Model::Encoder, Model::Decoder] {
        let g = fblayout_plan::graph::precision::mixed(&graph(model)).unwrap();
        let pairs: Vec<(String, String)> = g
            .params()
            .into_iter()
            .flat_map(|p| g.copies_of(p).into_iter().map(move |c| (p, c)))
            .map(|(p, c)| (g.tensor(p).name.clone(), g.tensor(c).name.clone()))
            .collect();
        assert!(!pairs.is_empty(), "{model:?}: no copies");
        let (mut on_gpu, mut on_cpu) = both_steps(&gpu, &g, &family_layouts(&g, 8));
        let rounded = |x: &[f64]| -> Vec<f64> {
            x.iter()
                .map(|&v| f64::from(half::f16::from_f32(v as f32)))
                .collect()
        };
        let check = |on_gpu: &GpuStep<'_>, on_cpu: &CpuStep, when: &str| {
            for (p, c) in &pairs {
                let param = on_gpu.read(p).unwrap();
                assert_eq!(
                    on_gpu.read(c).unwrap(),
                    rounded(&param),
                    "{model:?} {when}: `{c}`"
                );
                assert_eq!(
                    on_cpu.read(c).unwrap(),
                    on_cpu.read(p).unwrap(),
                    "{model:?} {when}"
                );
            }
        };
        check(&on_gpu, &on_cpu, "before the first step");
        let (_, timings) = on_gpu
            .step_timed(&StepInputs::random(SMALL.vocab, SIZES, 11))
            .unwrap();
        on_cpu
            .step(&StepInputs::random(SMALL.vocab, SIZES, 11))
            .unwrap();
        assert!(
            !timings.iter().any(|t| t
                .section
                .as_deref()
                .is_some_and(|s| s.starts_with("convert "))),
            "{model:?}: a conversion ran"
        );
        check(&on_gpu, &on_cpu, "after step 1");
        for seed in [12, 13] {
            let inputs = StepInputs::random(SMALL.vocab, SIZES, seed);
            on_gpu.step(&inputs).unwrap();
            on_cpu.step(&inputs).unwrap();
        }
        check(&on_gpu, &on_cpu, "after step 3");
        for (p, _) in &pairs {
            let e =
                exec_support::relative_error(&on_gpu.read(p).unwrap(), &on_cpu.read(p).unwrap());
            assert!(
                e <= MIXED_TOLERANCE,
                "{model:?}: `{p}` after 3 steps: {e:e}"
            );
        }
        // A skipped step leaves them where they were.
        let before: Vec<Vec<f64>> = pairs.iter().map(|(_, c)| on_gpu.read(c).unwrap()).collect();
        let huge = LossScaling {
            initial: 1.0e30,
            ..LossScaling::default()
        };
        on_gpu.set_loss_scaling(huge).unwrap();
        on_gpu
            .step(&StepInputs::random(SMALL.vocab, SIZES, 14))
            .unwrap();
        assert!(on_gpu.last_step_skipped(), "{model:?}");
        let after: Vec<Vec<f64>> = pairs.iter().map(|(_, c)| on_gpu.read(c).unwrap()).collect();
        assert_eq!(after, before, "{model:?}: a skipped step moved a copy");
        check(&on_gpu, &on_cpu, "after a skipped step");
        // Setting a parameter sets its copy; the copy alone is not set.
        let (p, c) = &pairs[0];
        let n = on_gpu.read(p).unwrap().len();
        let values: Vec<f64> = (0..n).map(|i| (i as f64 * 0.37).sin()).collect();
        on_gpu.set(p, &values).unwrap();
        on_cpu.set(p, &values).unwrap();
        check(&on_gpu, &on_cpu, "after setting a parameter");
        for err in [
            on_gpu.set(c, &values).unwrap_err(),
            on_cpu.set(c, &values).unwrap_err(),
        ] {
            assert!(err.to_string().contains("copy of"), "{err}");
        }
    }
}

/// Every parameter and moment of `step`, by name.
fn persistent_values(g: &Graph, step: &GpuStep<'_>) -> Vec<Vec<f64>> {
    g.params()
        .iter()
        .flat_map(|&p| {
            let name = g.tensor(p).name.clone();
            [format!("{name}.m"), format!("{name}.v"), name]
        })
        .map(|n| step.read(&n).unwrap())
        .collect()
}

#[test]
fn labels_and_ids_out_of_range_are_refused_before_anything_runs() {
    let gpu = gpu();
    let g = graph(Model::Decoder);
    let layouts = row_major(&g);
    let (mut on_gpu, mut on_cpu) = both_steps(&gpu, &g, &layouts);
    let before = persistent_values(&g, &on_gpu);
    let mut inputs = StepInputs::random(SMALL.vocab, SIZES, 3);
    inputs.labels[4] = SMALL.vocab;
    for err in [
        on_gpu.step(&inputs).unwrap_err(),
        on_cpu.step(&inputs).unwrap_err(),
    ] {
        let text = err.to_string();
        assert!(text.contains("`labels`"), "{text}");
        assert!(
            text.contains(&format!("value {} at position 4", SMALL.vocab)),
            "{text}"
        );
        assert!(text.contains(&format!("below {}", SMALL.vocab)), "{text}");
    }
    // The ignored label is allowed; ids past the table are not.
    inputs.labels[4] = u32::MAX;
    inputs.ids[1] = SMALL.vocab + 5;
    for err in [
        on_gpu.step(&inputs).unwrap_err(),
        on_cpu.step(&inputs).unwrap_err(),
    ] {
        let text = err.to_string();
        assert!(
            text.contains("`ids`") && text.contains("position 1"),
            "{text}"
        );
    }
    assert_eq!(on_gpu.steps(), 0);
    assert_eq!(
        persistent_values(&g, &on_gpu),
        before,
        "a refused step moved something"
    );
}

#[test]
fn a_non_finite_f32_step_is_an_error_and_never_reaches_the_weights() {
    let gpu = gpu();
    let g = graph(Model::Encoder);
    let layouts = row_major(&g);
    let (mut on_gpu, mut on_cpu) = both_steps(&gpu, &g, &layouts);
    let name = g.tensor(g.params()[3]).name.clone();
    let mut values = on_gpu.read(&name).unwrap();
    values[0] = f64::NAN;
    on_gpu.set(&name, &values).unwrap();
    on_cpu.set(&name, &values).unwrap();
    let before = persistent_values(&g, &on_gpu);
    let cpu_params = |step: &CpuStep| -> Vec<Vec<f64>> {
        g.params()
            .iter()
            .map(|&p| step.read(&g.tensor(p).name).unwrap())
            .collect()
    };
    let cpu_before = cpu_params(&on_cpu);
    let inputs = StepInputs::random(SMALL.vocab, SIZES, 9);
    for err in [
        on_gpu.step(&inputs).unwrap_err(),
        on_cpu.step(&inputs).unwrap_err(),
    ] {
        assert!(matches!(err, ExecError::NonFinite { step: 1, .. }), "{err}");
        assert!(err.to_string().contains("step 1"), "{err}");
    }
    assert_eq!(on_gpu.steps(), 0);
    assert_eq!(on_cpu.steps(), 0);
    let after = persistent_values(&g, &on_gpu);
    // NaN ≠ NaN: compare bit patterns.
    let bits = |v: &[Vec<f64>]| -> Vec<Vec<u64>> {
        v.iter()
            .map(|x| x.iter().map(|f| f.to_bits()).collect())
            .collect()
    };
    assert_eq!(
        bits(&after),
        bits(&before),
        "the GPU step moved a parameter"
    );
    assert_eq!(
        bits(&cpu_params(&on_cpu)),
        bits(&cpu_before),
        "the CPU step moved a parameter"
    );
}

/// The persistent tensors of `g` (parameters and AdamW's moments) read from `step`.
fn persistent_state(g: &Graph, step: &GpuStep<'_>) -> Vec<(String, Vec<f64>)> {
    g.tensors()
        .iter()
        .filter(|t| t.is_persistent() && t.role != fblayout_plan::graph::Role::Input)
        .filter(|t| g.constant(g.find(&t.name).unwrap()).is_none())
        .map(|t| (t.name.clone(), step.read(&t.name).unwrap()))
        .collect()
}

#[test]
fn a_learning_rate_schedule_and_a_restored_step_count_match_the_cpu() {
    let gpu = exec_support::gpu();
    let g = graph(Model::Decoder);
    let layouts = exec_support::row_major(&g);
    let (mut on_gpu, mut on_cpu) = both_steps(&gpu, &g, &layouts);
    let rates = [1e-2, 4e-3, 0.0];
    let inputs: Vec<StepInputs> = (0..rates.len() as u64)
        .map(|i| StepInputs::random(SMALL.vocab, SIZES, 20 + i))
        .collect();
    let mut saved = Vec::new();
    let mut last_params = Vec::new();
    for (k, (&lr, x)) in rates.iter().zip(&inputs).enumerate() {
        if k == 1 {
            saved = persistent_state(&g, &on_gpu);
        }
        on_gpu.set_learning_rate(lr);
        on_cpu.set_learning_rate(lr);
        assert_eq!(on_gpu.learning_rate(), lr);
        let before = persistent_state(&g, &on_gpu);
        let got = f64::from(on_gpu.step(x).unwrap());
        let want = on_cpu.step(x).unwrap();
        assert!(
            (got - want).abs() <= TOLERANCE * want.abs(),
            "step {k} at rate {lr}: GPU loss {got}, CPU {want}"
        );
        for p in g.params() {
            let name = &g.tensor(p).name;
            let err = relative_error(&on_gpu.read(name).unwrap(), &on_cpu.read(name).unwrap());
            assert!(err <= TOLERANCE, "step {k}: `{name}` differs by {err}");
        }
        if lr == 0.0 {
            // A zero rate changes no parameter: the recorded AdamW steps took the new rate.
            let after = persistent_state(&g, &on_gpu);
            for ((name, b), (_, a)) in before.iter().zip(&after) {
                if g.find(name)
                    .is_some_and(|t| g.tensor(t).role == fblayout_plan::graph::Role::Param)
                {
                    assert_eq!(a, b, "`{name}` moved at rate 0");
                }
            }
        }
        last_params = persistent_state(&g, &on_gpu);
    }
    // A fresh step given the state after step 1 and its count repeats steps 2 and 3.
    let memory = plan_memory(&g, &layouts, SIZES, MemoryOptions::default()).unwrap();
    let mut resumed = GpuStep::new(&gpu, &g, &layouts, &memory, SIZES, ADAMW).unwrap();
    for (name, values) in &saved {
        resumed.set(name, values).unwrap();
    }
    resumed.set_steps(1);
    for (&lr, x) in rates.iter().zip(&inputs).skip(1) {
        resumed.set_learning_rate(lr);
        resumed.step(x).unwrap();
    }
    assert_eq!(resumed.steps(), on_gpu.steps());
    for ((name, want), (_, got)) in last_params.iter().zip(&persistent_state(&g, &resumed)) {
        assert_eq!(got, want, "`{name}` after resuming");
    }
}
