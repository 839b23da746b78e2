//! The fused attention ([`Op::FusedAttention`]) against the materialised attention it replaces.
//!
//! A training graph with every attention fused ([`Graph::with_fused_attention`]) has the same
//! parameters under the same names, so one seed gives both graphs the same weights and the
//! materialised graph's CPU step is the oracle: on the CPU (`f64`) the fused step's loss and
//! every gradient agree to round-off, for the shipped encoder and decoder, a BERT classifier
//! whose attention is masked by padding (one sequence with padding) and a Llama decoder with
//! grouped-query attention; on the GPU (lavapipe in CI) the fused step agrees with the oracle
//! within `f32` tolerances under row-major and random layouts, and in mixed precision within
//! `f16`'s. The rewrite saves a log-sum-exp (`f32` in every precision) instead of the
//! probabilities, its backward reads the context, the memory plan at a longer sequence drops
//! the probabilities, and bad requests are typed errors.

mod exec_support;

use exec_support::{ADAMW, family_layouts, row_major};
use fblayout_core::layout::ElemType;
use fblayout_plan::exec::{CpuStep, GpuStep, StepInputs};
use fblayout_plan::graph::precision::Precision;
use fblayout_plan::graph::{Dim, Graph, GraphError, Op, Role, Sizes};
use fblayout_plan::layouts::LayoutChoice;
use fblayout_plan::memory::{MemoryOptions, plan_memory};
use fblayout_plan::models::bert::{self, BertConfig};
use fblayout_plan::models::llama::{self, LlamaConfig};
use fblayout_plan::models::{Model, ModelConfig, build};
use fblayout_plan::select::attention::{ChoiceError, Reason, choose};
use fblayout_plan::select::{CostModel, Factors, KernelKind, Origin, Strategy, plan};

const SIZES: Sizes = Sizes { batch: 2, seq: 5 };
const VOCAB: u32 = 37;

/// The four graphs and the inputs of a step of each.
fn cases() -> Vec<(&'static str, Graph, StepInputs)> {
    let n = (SIZES.batch * SIZES.seq) as usize;
    let positions: Vec<u32> = (0..n).map(|i| (i % SIZES.seq as usize) as u32).collect();
    let config = ModelConfig::new(VOCAB, 16, 2)
        .with_max_positions(8)
        .with_ffn(32)
        .with_layers(2);
    let shipped = |model| build(model, config).unwrap();
    let random = |seed| StepInputs::random(VOCAB, SIZES, seed);
    let bert = bert::build(&BertConfig::new(VOCAB, 16, 2, 3).with_ffn(32).with_layers(2)).unwrap();
    // The second sequence ends in two padding tokens; the first has none.
    let bert_inputs = random(3)
        .with("token_types", vec![0; n])
        .with("mask", (0..n).map(|i| u32::from(i < 8)).collect())
        .with("positions", positions.clone())
        .with("labels", bert::class_labels(&[2, 0], SIZES.seq as usize));
    let llama = llama::build(
        &LlamaConfig::new(VOCAB, 16, 4)
            .with_kv_heads(2)
            .with_ffn(24)
            .with_layers(2)
            .with_max_positions(8),
    )
    .unwrap();
    vec![
        ("encoder", shipped(Model::Encoder), random(1)),
        ("decoder", shipped(Model::Decoder), random(2)),
        ("BERT", bert, bert_inputs),
        ("Llama", llama, random(5).with("positions", positions)),
    ]
}

fn fused(g: &Graph) -> Graph {
    let attentions = g.attentions();
    assert!(!attentions.is_empty());
    g.with_fused_attention(&attentions).unwrap()
}

/// The loss and every parameter's gradient after one CPU step (no update), from seed 7.
fn cpu(g: &Graph, inputs: &StepInputs) -> (f64, Vec<Vec<f64>>) {
    let layouts = row_major(g);
    let plan = plan_memory(g, &layouts, SIZES, MemoryOptions::default()).unwrap();
    let mut step = CpuStep::new(g, &layouts, &plan, SIZES, ADAMW).unwrap();
    step.init_params(7).unwrap();
    let loss = step.forward_backward(inputs).unwrap();
    (loss, grads(g, |name| step.read(name).unwrap()))
}

/// `‖a − b‖` over `‖b‖`, or over `floor` where `b` is smaller: the key projection's bias has a
/// gradient of 0 in exact arithmetic (a softmax doesn't change when every score of a row moves
/// by one amount), which both graphs compute as round-off.
fn error(a: &[f64], b: &[f64], floor: f64) -> f64 {
    let norm = |v: &[f64]| v.iter().map(|x| x * x).sum::<f64>().sqrt();
    let diff: Vec<f64> = a.iter().zip(b).map(|(x, y)| x - y).collect();
    assert_eq!(a.len(), b.len());
    if a.iter().any(|v| !v.is_finite()) {
        return f64::INFINITY;
    }
    norm(&diff) / norm(b).max(floor)
}

fn grads(g: &Graph, mut read: impl FnMut(&str) -> Vec<f64>) -> Vec<Vec<f64>> {
    g.params()
        .into_iter()
        .map(|p| read(&g.tensor(g.grad(p).unwrap()).name))
        .collect()
}

#[test]
fn the_rewrite_saves_a_log_sum_exp_and_its_backward_reads_the_context() {
    for (what, g, _) in cases() {
        let f = fused(&g);
        assert!(f.attentions().is_empty(), "{what}: every attention fused");
        assert_eq!(
            f.tensors().len(),
            g.tensors().len(),
            "{what}: the same tensors"
        );
        let forwards: Vec<_> = f
            .nodes()
            .iter()
            .filter(|n| matches!(n.op, Op::FusedAttention(_)))
            .collect();
        assert_eq!(forwards.len(), g.attentions().len(), "{what}");
        for n in forwards {
            let [ctx, lse] = n.outputs[..] else {
                panic!("{what}")
            };
            let t = f.tensor(lse);
            assert!(t.name.ends_with(".lse"), "{what}: {}", t.name);
            let dims: Vec<Dim> = t.axes.iter().map(|a| a.dim).collect();
            assert_eq!(dims[0], Dim::Batch);
            assert_eq!(dims[2], Dim::Seq);
            assert_eq!(dims.len(), 3, "{what}: [batch, heads, seq]");
            // Its backward reads the forward's inputs, the context and the log-sum-exp.
            let back = f
                .nodes()
                .iter()
                .find(|m| matches!(m.op, Op::FusedAttentionGrad(_)) && m.inputs.contains(&lse))
                .unwrap_or_else(|| panic!("{what}: no backward reads `{}`", t.name));
            assert!(back.inputs.starts_with(&n.inputs), "{what}");
            assert!(back.inputs.contains(&ctx), "{what}");
            assert!(
                f.saved().contains(&ctx) && f.saved().contains(&lse),
                "{what}"
            );
        }
        // Mixed precision halves the context and keeps the log-sum-exp f32.
        let mixed = Precision::Mixed.apply(&f).unwrap();
        for n in mixed
            .nodes()
            .iter()
            .filter(|n| matches!(n.op, Op::FusedAttention(_)))
        {
            assert_eq!(mixed.tensor(n.outputs[0]).elem, ElemType::F16, "{what}");
            assert_eq!(mixed.tensor(n.outputs[1]).elem, ElemType::F32, "{what}");
        }
    }
}

#[test]
fn fused_steps_on_the_cpu_match_the_materialised_ones() {
    for (what, g, inputs) in cases() {
        let (want_loss, want) = cpu(&g, &inputs);
        let (loss, got) = cpu(&fused(&g), &inputs);
        assert!(
            (loss - want_loss).abs() <= 1e-12 * want_loss.abs(),
            "{what}: loss {loss} vs {want_loss}"
        );
        for (p, (a, b)) in g.params().into_iter().zip(got.iter().zip(&want)) {
            let e = error(a, b, 1e-6);
            assert!(
                e <= 1e-10,
                "{what}: gradient of `{}`: {e:e}",
                g.tensor(p).name
            );
        }
    }
}

#[test]
fn fused_steps_on_the_gpu_match_the_materialised_cpu_step() {
    let gpu = exec_support::gpu();
    // Each graph once, precision and layouts alternating (every GPU step builds every kernel
    // on lavapipe, a few seconds each).
    for (k, (what, g, inputs)) in cases().into_iter().enumerate() {
        let (want_loss, want) = cpu(&g, &inputs);
        let precision = [Precision::F32, Precision::Mixed][k % 2];
        let f = precision.apply(&fused(&g)).unwrap();
        let tol = match precision {
            Precision::F32 => 2e-4,
            Precision::Mixed => 2e-2,
        };
        let (how, layouts) = match k / 2 {
            0 => ("row-major", row_major(&f)),
            _ => ("families", family_layouts(&f, 9)),
        };
        let plan = plan_memory(&f, &layouts, SIZES, MemoryOptions::default()).unwrap();
        let mut step = GpuStep::new(&gpu, &f, &layouts, &plan, SIZES, ADAMW).unwrap();
        step.upload_params(7).unwrap();
        step.poison().unwrap();
        let loss = f64::from(step.forward_backward(&inputs).unwrap());
        let case = format!("{what} {precision:?} {how}");
        assert!(
            (loss - want_loss).abs() <= tol * want_loss.abs(),
            "{case}: loss {loss} vs {want_loss}"
        );
        // Gradients of the unscaled loss (`read` divides the scale out), against the
        // materialised f64 ones.
        let got = grads(&f, |name| step.read(name).unwrap());
        for (p, (a, b)) in g.params().into_iter().zip(got.iter().zip(&want)) {
            let e = error(a, b, 1e-3);
            assert!(
                e <= tol * 10.0,
                "{case}: gradient of `{}`: {e:e}",
                g.tensor(p).name
            );
        }
    }
}

#[test]
fn the_memory_plan_no_longer_holds_the_probabilities() {
    // At the benchmarks' sequence length the probabilities are 128 numbers per query and head;
    // the log-sum-exp is one.
    let config = ModelConfig::new(VOCAB, 64, 4).with_ffn(128).with_layers(2);
    let sizes = Sizes { batch: 4, seq: 128 };
    for model in [Model::Encoder, Model::Decoder] {
        let g = build(model, config).unwrap();
        let f = fused(&g);
        let peak = |g: &Graph| {
            let layouts: Vec<LayoutChoice> = row_major(g);
            plan_memory(g, &layouts, sizes, MemoryOptions::default())
                .unwrap()
                .peak_bytes()
        };
        let (materialised, fused) = (peak(&g), peak(&f));
        // Two layers of [4, 4, 128, 128] f32 probabilities: 2 MiB saved at least, less the
        // log-sum-exps.
        let probs = 2 * 4 * 4 * 128 * 128 * 4;
        assert!(
            fused + probs - 2 * 4 * 4 * 128 * 4 <= materialised,
            "{model:?}: peak {fused} fused against {materialised} materialised"
        );
    }
}

#[test]
fn fusing_anything_but_a_materialised_attention_is_an_error() {
    let (_, g, _) = cases().remove(1);
    let attention = g.attentions()[0];
    // Not an attention: the first operation (an embedding).
    let first = g.node_ids().next().unwrap();
    let err = g.with_fused_attention(&[first]).unwrap_err();
    assert!(matches!(err, GraphError::Shape { .. }), "{err}");
    assert!(
        err.to_string().contains("not a materialised attention"),
        "{err}"
    );
    // The same attention twice: the second time it is fused already.
    let err = g.with_fused_attention(&[attention, attention]).unwrap_err();
    assert!(err.to_string().contains("fused_attention"), "{err}");
    // An operation past the graph's.
    let past = g.with_fused_attention(&[g.node_ids().last().unwrap()]);
    assert!(past.is_err());
}

/// The reference factors with the fused attention's kernels `slower` times as slow as
/// measured (their kernel multipliers scaled): above some factor the materialised attention is
/// predicted faster, below it the fused one.
fn fused_slower(slower: f64) -> CostModel {
    let mut f = Factors::reference(Precision::F32);
    for m in &mut f.kernels.multipliers {
        if matches!(
            m.0,
            KernelKind::FusedAttention | KernelKind::FusedAttentionGrad
        ) {
            m.3 *= slower;
        }
    }
    // Timed at the reference's heads of 32, as the graphs below have them.
    let origin = Origin::Analytic {
        precision: Precision::F32,
        head_dim: 32,
    };
    CostModel::with_factors(f, origin)
        .unwrap()
        .timed_at_head_dim(32)
}

#[test]
fn the_planner_fuses_by_predicted_time_and_by_memory() {
    // Heads of 32, as the model's attention kernels were timed at.
    let config = ModelConfig::new(VOCAB, 128, 4).with_ffn(256).with_layers(3);
    let sizes = Sizes { batch: 4, seq: 64 };
    let g = build(Model::Encoder, config).unwrap();
    let all = g.attentions();
    let pick = |model: &CostModel, budget| choose(&g, sizes, model, Strategy::RowMajor, budget);
    // Fused kernels ten times as fast: the fused attention is predicted faster, and all are
    // fused.
    let slow = pick(&fused_slower(0.1), None).unwrap();
    assert_eq!((slow.reason, &slow.fused), (Reason::FusedFaster, &all));
    assert!(slow.predicted[1] <= slow.predicted[0]);
    // Ten times as slow: the materialised one is, and none is fused where nothing limits
    // memory.
    let fast_model = fused_slower(10.0);
    let fast = pick(&fast_model, None).unwrap();
    assert_eq!(fast.reason, Reason::MaterialisedFaster);
    assert!(fast.fused.is_empty() && fast.predicted[0] < fast.predicted[1]);
    let [materialised, fused] = fast.peaks;
    assert!(fused < materialised, "{fused} against {materialised}");
    // A budget just under the materialised peak: the fewest layers, first ones first.
    let budget = materialised - 1;
    let tight = pick(&fast_model, Some(budget)).unwrap();
    assert_eq!(tight.reason, Reason::Budget);
    let k = tight.fused.len();
    assert!(k >= 1 && k < all.len(), "{k} of {} fused", all.len());
    assert_eq!(tight.fused, all[..k]);
    assert!(tight.peak <= budget);
    let fewer = g.with_fused_attention(&all[..k - 1]).unwrap();
    let p = plan(&fewer, sizes, &fast_model, Strategy::RowMajor).unwrap();
    let peak = plan_memory(p.graph(), p.layouts(), sizes, MemoryOptions::default())
        .unwrap()
        .peak_bytes();
    assert!(peak > budget, "{} layers would have fit", k - 1);
    // Under the fused peak nothing fits: an error naming both peaks.
    let err = pick(&fast_model, Some(fused - 1)).unwrap_err();
    assert!(matches!(err, ChoiceError::OverBudget { .. }), "{err}");
    assert!(err.to_string().contains(&fused.to_string()), "{err}");
    assert_eq!(tight.attentions, all.len());
    // Heads of 16, where the kernels were not timed: the prediction is not trusted and nothing
    // is fused where the step fits, however fast the fused kernels are said to be.
    let small = build(Model::Encoder, config.with_hidden(64)).unwrap();
    let unmeasured = choose(&small, sizes, &fused_slower(0.1), Strategy::RowMajor, None).unwrap();
    assert_eq!(unmeasured.reason, Reason::Unmeasured);
    assert!(unmeasured.fused.is_empty());
    assert!(unmeasured.predicted[1] < unmeasured.predicted[0]);
}

/// The analytic model of a graph is the reference device's tables timed at its heads: heads
/// of 64 and 128 take the tables timed there and their prediction is trusted; heads nobody timed, and
/// a graph whose attentions differ in head size, take the default tables, whose prediction of
/// the fused attention against the materialised one is not.
#[test]
fn the_analytic_model_is_the_one_timed_at_the_graphs_heads() {
    let sizes = Sizes { batch: 2, seq: 64 };
    let config = ModelConfig::new(VOCAB, 128, 2).with_ffn(256).with_layers(2);
    for precision in [Precision::F32, Precision::Mixed] {
        for (heads, head_dim) in [(4, Some(32)), (2, Some(64)), (1, Some(128)), (8, None)] {
            let g = build(Model::Decoder, config.with_heads(heads)).unwrap();
            let model = CostModel::analytic_for_graph(precision, &g);
            let expected = head_dim.unwrap_or(32);
            assert_eq!(model.attention_head_dim(), Some(expected), "{heads} heads");
            assert_eq!(
                model.factors(),
                &Factors::reference_at(precision, expected).unwrap()
            );
            assert_eq!(
                model.origin(),
                &Origin::Analytic {
                    precision,
                    head_dim: expected
                }
            );
            let g = precision.apply(&g).unwrap();
            let chosen = choose(&g, sizes, &model, Strategy::RowMajor, None).unwrap();
            assert_eq!(
                chosen.reason == Reason::Unmeasured,
                head_dim.is_none(),
                "{heads} heads: {chosen}"
            );
        }
    }
    // Heads of 64 in one attention and of 32 in another: the default tables.
    let mut g = Graph::new();
    let rows = |width| {
        [
            ("batch", Dim::Batch),
            ("seq", Dim::Seq),
            ("width", Dim::Fixed(width)),
        ]
    };
    let probs = |heads| {
        [
            ("batch", Dim::Batch),
            ("heads", Dim::Fixed(heads)),
            ("seq_q", Dim::Seq),
            ("seq_k", Dim::Seq),
        ]
    };
    for (i, heads) in [2u32, 4].into_iter().enumerate() {
        let mut t = |name: String, axes: &[(&str, Dim)], role| {
            g.add_tensor(&name, axes, ElemType::F32, role).unwrap()
        };
        let qkv = t(format!("qkv{i}"), &rows(384), Role::Input);
        let ctx = t(format!("ctx{i}"), &rows(128), Role::Activation);
        let p = t(format!("probs{i}"), &probs(heads), Role::Activation);
        let op = Op::Attention {
            heads,
            kv_heads: heads,
            causal: true,
        };
        g.push(op, &[qkv], &[ctx, p]).unwrap();
    }
    assert_eq!(g.attention_head_dims(), [Some(64), Some(32)]);
    let model = CostModel::analytic_for_graph(Precision::Mixed, &g);
    assert_eq!(model, CostModel::analytic_for(Precision::Mixed));
}
