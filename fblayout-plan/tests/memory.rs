//! The memory planner: buffers are shared only by tensors whose lives don't overlap, a step
//! with every freed buffer poisoned computes exactly what a step without reuse does, and
//! recomputation lowers the peak without changing the results.

mod exec_support;

use exec_support::{
    ADAMW, SIZES, SMALL, family_layouts, gpu, graph, random_layouts, row_major, run_cpu,
    with_converts,
};
use fblayout_kernels::runtime::granular;
use fblayout_plan::exec::{GpuStep, StepInputs};
use fblayout_plan::graph::precision::Precision;
use fblayout_plan::graph::{Dim, Graph, Op, Role, Sizes};
use fblayout_plan::layouts::LayoutChoice;
use fblayout_plan::layouts::{MIN_PITCHED, ROW_ALIGN};
use fblayout_plan::memory::{
    Category, MemoryOptions, MemoryPlan, Recompute, plan_memory, recompute,
};
use fblayout_plan::models::{Model, ModelConfig, build};

const MODELS: [Model; 2] = [Model::Encoder, Model::Decoder];

/// Every tensor's life, from the definition: from the first operation that touches it to the
/// last; inputs, parameters and moments the whole step; the loss and the parameters'
/// gradients to its end. An operation a product does in its epilogue touches its operands
/// where the product runs, and the product's own output, which the product writes no more
/// (it writes the folded operation's output), has no life.
fn lives(g: &Graph) -> Vec<Option<(usize, usize)>> {
    let end = g.nodes().len() - 1;
    let results: Vec<_> = g.params().iter().map(|&p| g.grad(p).unwrap()).collect();
    let mut runs_at: Vec<usize> = (0..g.nodes().len()).collect();
    let mut never_written = Vec::new();
    for (i, fold) in g.epilogues().into_iter().enumerate() {
        if let Some(j) = fold {
            runs_at[j] = i;
            never_written.push(g.nodes()[i].outputs[0]);
        }
    }
    g.ids()
        .map(|t| {
            if never_written.contains(&t) {
                return None;
            }
            let role = g.tensor(t).role;
            if matches!(role, Role::Input | Role::Param | Role::State { .. }) {
                return Some((0, end));
            }
            let touching: Vec<usize> = (0..g.nodes().len())
                .filter(|&i| {
                    let n = &g.nodes()[i];
                    n.inputs.contains(&t) || n.outputs.contains(&t)
                })
                .map(|i| runs_at[i])
                .collect();
            let (&first, &last) = (touching.iter().min()?, touching.iter().max()?);
            let kept = role == Role::Loss || results.contains(&t);
            Some((first, if kept { end } else { last }))
        })
        .collect()
}

/// Whether tensors `a` and `b` (indices) may share a buffer though both are live at one
/// operation: there the cross-entropy's gradient is written over the logits, which it reads
/// for the last time (each element depends on its own logit only).
fn written_over(g: &Graph, lives: &[Option<(usize, usize)>], a: usize, b: usize) -> bool {
    g.nodes().iter().enumerate().any(|(i, n)| {
        let (logits, dlogits) = (n.inputs[0].index(), n.outputs[0].index());
        matches!(n.op, Op::CrossEntropyGrad { .. })
            && ((a, b) == (logits, dlogits) || (b, a) == (logits, dlogits))
            && lives[logits].is_some_and(|(_, l)| l == i)
            && lives[dlogits].is_some_and(|(f, _)| f == i)
    })
}

fn check_no_overlap(g: &Graph, plan: &MemoryPlan, what: &str) {
    let lives = lives(g);
    let mut by_buffer: Vec<Vec<usize>> = vec![Vec::new(); plan.buffers().len()];
    for t in g.ids() {
        match (plan.buffer_of(t), lives[t.index()]) {
            (Some(b), Some(_)) => {
                assert!(
                    plan.buffers()[b.index()] >= plan.bytes(t),
                    "{what}: `{}` doesn't fit its buffer",
                    g.tensor(t).name
                );
                by_buffer[b.index()].push(t.index());
            }
            (None, None) => {}
            (b, l) => panic!(
                "{what}: `{}` has buffer {b:?} but life {l:?}",
                g.tensor(t).name
            ),
        }
    }
    let mut shared = 0;
    for tensors in &by_buffer {
        for (k, &a) in tensors.iter().enumerate() {
            for &b in &tensors[k + 1..] {
                let ((f1, l1), (f2, l2)) = (lives[a].unwrap(), lives[b].unwrap());
                assert!(
                    l1 < f2 || l2 < f1 || written_over(g, &lives, a, b),
                    "{what}: `{}` ({f1}..={l1}) and `{}` ({f2}..={l2}) share a buffer",
                    g.tensors()[a].name,
                    g.tensors()[b].name
                );
                shared += 1;
            }
        }
    }
    assert!(shared > 0, "{what}: no buffer is reused");
}

#[test]
fn no_two_live_tensors_share_a_buffer() {
    let mini = Sizes {
        batch: 32,
        seq: 128,
    };
    for model in MODELS {
        let g = graph(model);
        for (k, layouts) in [row_major(&g), random_layouts(&g, 4)]
            .into_iter()
            .enumerate()
        {
            let plan = plan_memory(&g, &layouts, SIZES, MemoryOptions::default()).unwrap();
            check_no_overlap(&g, &plan, &format!("{model:?} layouts {k}"));
            let (gc, lc) = with_converts(g.clone(), layouts, 10, 3);
            let plan = plan_memory(&gc, &lc, SIZES, MemoryOptions::default()).unwrap();
            check_no_overlap(&gc, &plan, &format!("{model:?} converts {k}"));
        }
        let big = build(model, ModelConfig::MINI).unwrap();
        let layouts = random_layouts(&big, 9);
        let plan = plan_memory(&big, &layouts, mini, MemoryOptions::default()).unwrap();
        check_no_overlap(&big, &plan, &format!("{model:?} MINI"));
        // Row-major tensors take exactly their elements, rows of a long fixed last axis that 4
        // does not divide padded to a multiple of ROW_ALIGN (the layouts' docs); every tensor
        // takes at least its elements.
        let dense = plan_memory(&big, &row_major(&big), mini, MemoryOptions::default()).unwrap();
        for t in big.ids() {
            let tensor = big.tensor(t);
            let pitched = match tensor.axes.last().map(|a| a.dim) {
                Some(Dim::Fixed(n)) if n >= MIN_PITCHED && n % 4 != 0 => {
                    tensor.bytes(mini) / u64::from(n) * u64::from(n.next_multiple_of(ROW_ALIGN))
                }
                _ => tensor.bytes(mini),
            };
            assert_eq!(dense.bytes(t), pitched, "{}", tensor.name);
            assert!(plan.bytes(t) >= tensor.bytes(mini), "{}", tensor.name);
        }
    }
}

#[test]
fn the_peak_is_the_buffers_workspace_and_held_bytes_and_at_least_the_live_tensors() {
    let g = graph(Model::Decoder);
    let layouts = random_layouts(&g, 2);
    let reuse = plan_memory(&g, &layouts, SIZES, MemoryOptions::default()).unwrap();
    let own = plan_memory(
        &g,
        &layouts,
        SIZES,
        MemoryOptions {
            reuse: false,
            ..MemoryOptions::default()
        },
    )
    .unwrap();
    // Each operation's scratch, as its contract counts it from its kernels. The attention's
    // holds its scratch scores, laid out like its probabilities: one such buffer, two in the
    // backward (the gradients of the probabilities and of the scores).
    let scratch = |i: usize| -> u64 { own.scratch(i).bytes() };
    for (i, n) in g.nodes().iter().enumerate() {
        let (probs, copies) = match n.op {
            Op::Attention { .. } => (n.outputs[1], 1),
            Op::AttentionGrad { .. } => (n.inputs[1], 2),
            _ => continue,
        };
        let scores = granular(own.bytes(probs));
        let found = own.scratch(i).buffers().iter().filter(|&&b| b == scores);
        assert!(found.count() >= copies, "{:?}: {}", n.op, own.scratch(i));
    }
    // One workspace lends every operation its scratch in turn, and no buffer of it is larger
    // than some operation's scratch buffer in its place.
    let workspace = own.workspace();
    for i in 0..g.nodes().len() {
        assert!(
            workspace.covers(own.scratch(i)),
            "{workspace} for {}",
            own.scratch(i)
        );
    }
    for (k, &b) in workspace.buffers().iter().enumerate() {
        assert!((0..g.nodes().len()).any(|i| own.scratch(i).buffers().get(k) == Some(&b)));
    }
    let most = (0..g.nodes().len()).map(scratch).max().unwrap();
    assert!(most > 0);
    assert!(own.workspace_bytes() >= most);
    assert_eq!(own.workspace(), reuse.workspace());
    // Every buffer as the pool allocates it: without reuse, every tensor with a life has its
    // own (all but the products' outputs no kernel writes).
    let lives = lives(&g);
    let placed: Vec<_> = g.ids().filter(|t| lives[t.index()].is_some()).collect();
    assert!(placed.len() < g.tensors().len(), "the decoder folds a bias");
    let all: u64 = placed.iter().map(|&t| granular(own.bytes(t))).sum();
    assert_eq!(
        own.peak_bytes(),
        all + own.workspace_bytes() + own.held_bytes(),
        "without reuse every tensor has its buffer"
    );
    assert!(own.held_bytes() > 0);
    assert_eq!(own.buffers().len(), placed.len());
    assert!(reuse.peak_bytes() < own.peak_bytes());
    assert!(reuse.peak_bytes() >= reuse.peak_live_bytes());
    // The live peak, from the definition; where the cross-entropy's gradient is written over
    // the logits (one buffer), the logits count until the operation before.
    let over = |t: fblayout_plan::graph::TensorId, i: usize| {
        g.nodes().iter().enumerate().any(|(k, n)| {
            k == i
                && matches!(n.op, Op::CrossEntropyGrad { .. })
                && n.inputs[0] == t
                && reuse.buffer_of(t) == reuse.buffer_of(n.outputs[0])
        })
    };
    let live_at = |i: usize| -> u64 {
        g.ids()
            .filter(|t| lives[t.index()].is_some_and(|(f, l)| f <= i && i <= l))
            .filter(|&t| !over(t, i))
            .map(|t| reuse.bytes(t))
            .sum::<u64>()
            + scratch(i)
    };
    let peak = (0..g.nodes().len()).map(live_at).max().unwrap();
    assert_eq!(reuse.peak_live_bytes(), peak);
    assert_eq!(live_at(reuse.peak_at()), peak);
    let parts: u64 = reuse.breakdown().iter().map(|(_, b)| b).sum();
    assert_eq!(parts, peak);
    // Parameters and their moments are all live at the peak.
    let part = |c| reuse.breakdown().iter().find(|(k, _)| *k == c).unwrap().1;
    assert_eq!(
        part(Category::Parameters),
        reuse.total_bytes(Category::Parameters)
    );
    // Two moments a parameter, each in its own layout (whose padding may differ from the
    // parameter's).
    let moments: u64 = g
        .ids()
        .filter(|&t| matches!(g.tensor(t).role, Role::State { .. }))
        .map(|t| reuse.bytes(t))
        .sum();
    let states = g
        .ids()
        .filter(|&t| matches!(g.tensor(t).role, Role::State { .. }))
        .count();
    assert_eq!(states, 2 * g.params().len());
    assert_eq!(part(Category::OptimizerState), moments);
}

#[test]
fn poisoning_every_freed_buffer_changes_no_bit_of_the_step() {
    for model in MODELS {
        let g = graph(model);
        let layouts = [row_major(&g), random_layouts(&g, 6)];
        for (k, layouts) in layouts.into_iter().enumerate() {
            let (gc, lc) = with_converts(g.clone(), layouts.clone(), 8, 5 + k as u64);
            for (g, layouts, what) in [(&g, layouts, "layouts"), (&gc, lc, "converts")] {
                let what = format!("{model:?} {what} {k}");
                let alone = run_cpu(g, &layouts, false, true);
                let shared = run_cpu(g, &layouts, true, true);
                assert!(alone.loss.is_finite(), "{what}");
                assert_eq!(shared, alone, "{what}: reuse changed the step");
            }
        }
    }
}

/// The cross-entropy's gradient is written over the logits where both are stored alike: one
/// buffer, so the plan is smaller by at least the logits' bytes less a granule than a plan
/// that cannot share them (the logits kept, as an evaluation keeps them); and where they are
/// stored differently, each has its own.
#[test]
fn the_logits_gradient_takes_the_logits_buffer_where_they_are_stored_alike() {
    for model in MODELS {
        let g = graph(model);
        let grad = g
            .nodes()
            .iter()
            .find(|n| matches!(n.op, Op::CrossEntropyGrad { .. }))
            .unwrap();
        let (logits, dlogits) = (grad.inputs[0], grad.outputs[0]);
        let layouts = row_major(&g);
        let plan = plan_memory(&g, &layouts, SIZES, MemoryOptions::default()).unwrap();
        assert_eq!(plan.buffer_of(logits), plan.buffer_of(dlogits), "{model:?}");
        let name = g.tensor(logits).name.clone();
        let keeping = MemoryOptions::default().keeping([name.as_str()]);
        let kept = plan_memory(&g, &layouts, SIZES, keeping).unwrap();
        assert_ne!(kept.buffer_of(logits), kept.buffer_of(dlogits), "{model:?}");
        assert!(
            kept.peak_live_bytes() >= plan.peak_live_bytes() + plan.bytes(logits),
            "{model:?}: {} against {}",
            kept.peak_live_bytes(),
            plan.peak_live_bytes()
        );
        // Stored differently, they can't share: each keeps its buffer.
        let mut apart = layouts.clone();
        apart[dlogits.index()] = LayoutChoice::ColMajor;
        let plan = plan_memory(&g, &apart, SIZES, MemoryOptions::default()).unwrap();
        assert_ne!(plan.buffer_of(logits), plan.buffer_of(dlogits), "{model:?}");
    }
}

#[test]
fn recomputation_keeps_the_results_and_lowers_the_peak() {
    for (model, what) in MODELS
        .into_iter()
        .flat_map(|m| [(m, Recompute::Cheap), (m, Recompute::Attention)])
    {
        let g = graph(model);
        let layouts = random_layouts(&g, 8);
        let (rg, rl) = recompute(&g, &layouts, what).unwrap();
        let added = rg.nodes().len() - g.nodes().len();
        assert!(added >= 2, "{model:?}: {added} operations recomputed");
        // Attention is run again only when asked, once per block (2 here); the backward
        // then reads only the duplicates' probabilities.
        let attentions = |g: &fblayout_plan::graph::Graph| {
            g.nodes()
                .iter()
                .filter(|n| n.op.name() == "attention")
                .count()
        };
        let again = if what == Recompute::Attention { 2 } else { 0 };
        assert_eq!(attentions(&rg), attentions(&g) + again, "{model:?} {what}");
        let (nothing, _) = recompute(&g, &layouts, Recompute::Nothing).unwrap();
        assert_eq!(nothing.nodes(), g.nodes());
        assert_eq!(
            run_cpu(&rg, &rl, true, true),
            run_cpu(&g, &layouts, false, true)
        );
        let before = plan_memory(&g, &layouts, SIZES, MemoryOptions::default()).unwrap();
        let after = plan_memory(&rg, &rl, SIZES, MemoryOptions::default()).unwrap();
        assert!(
            after.peak_live_bytes() < before.peak_live_bytes(),
            "{model:?} {what}: {} vs {}",
            after.peak_live_bytes(),
            before.peak_live_bytes()
        );
        // The buffers and workspace shrink; what the step holds throughout grows with the
        // operations added (their parameter blocks), which at these sizes outweighs the few
        // kilobytes saved (at a real model's it does not: see the snapshots).
        let placed = |p: &MemoryPlan| p.peak_bytes() - p.held_bytes();
        assert!(placed(&after) < placed(&before), "{model:?}");
        assert!(after.held_bytes() > before.held_bytes(), "{model:?}");
        assert!(recompute(&g, &layouts[1..], Recompute::Cheap).is_err());
    }
}

#[test]
fn on_the_gpu_a_recomputed_mixed_step_with_the_fused_head_is_the_same_step() {
    // The combination the memory floor of the benchmarks is planned with: mixed precision, the
    // head fused with its cross-entropy, cheap activations and attention made again in the
    // backward. The duplicates run the same kernels on the same inputs, so every bit agrees
    // with the step that keeps them.
    let gpu = gpu();
    let inputs = StepInputs::random(SMALL.vocab, SIZES, 5);
    for model in MODELS {
        let g = Precision::Mixed
            .apply(&build(model, SMALL.with_head_chunk(3)).unwrap())
            .unwrap();
        let layouts = family_layouts(&g, 21);
        let (rg, rl) = recompute(&g, &layouts, Recompute::Attention).unwrap();
        assert!(rg.nodes().len() > g.nodes().len(), "{model:?}");
        let run = |g: &Graph, layouts: &[LayoutChoice]| {
            let memory = plan_memory(g, layouts, SIZES, MemoryOptions::default()).unwrap();
            let mut step = GpuStep::new(&gpu, g, layouts, &memory, SIZES, ADAMW).unwrap();
            step.upload_params(7).unwrap();
            let losses = [step.step(&inputs).unwrap(), step.step(&inputs).unwrap()];
            assert!(!step.last_step_skipped(), "{model:?}: the step overflowed");
            let params: Vec<Vec<f64>> = g
                .params()
                .into_iter()
                .map(|p| step.read(&g.tensor(p).name).unwrap())
                .collect();
            (losses, params, memory.peak_live_bytes())
        };
        let (want_losses, want, peak) = run(&g, &layouts);
        let (losses, got, recomputed_peak) = run(&rg, &rl);
        assert!(want_losses[1].is_finite(), "{model:?}");
        assert_eq!(losses, want_losses, "{model:?}: the losses of two steps");
        assert_eq!(got, want, "{model:?}: the parameters after two steps");
        assert!(
            recomputed_peak < peak,
            "{model:?}: {recomputed_peak} vs {peak}"
        );
    }
}

#[test]
fn the_plans_of_the_shipped_graphs_are_snapshotted() {
    let sizes = Sizes {
        batch: 32,
        seq: 128,
    };
    for (name, model) in [("encoder", Model::Encoder), ("decoder", Model::Decoder)] {
        let g = build(model, ModelConfig::MINI).unwrap();
        let layouts = row_major(&g);
        let plan = plan_memory(&g, &layouts, sizes, MemoryOptions::default()).unwrap();
        let (rg, rl) = recompute(&g, &layouts, Recompute::Cheap).unwrap();
        let re = plan_memory(&rg, &rl, sizes, MemoryOptions::default()).unwrap();
        assert!(re.peak_bytes() < plan.peak_bytes());
        let report =
            format!("## row-major\n{plan}\n## row-major, recomputing cheap activations\n{re}");
        insta::assert_snapshot!(format!("{name}_memory"), report);
    }
}
