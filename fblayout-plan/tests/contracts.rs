//! The generic contract tests: every registered operation is checked through its contract,
//! with nothing written for it here.
//!
//! For each forward operation, its [`sample`](Op::sample) is built into a graph — the
//! operation, a cross-entropy over its first output (unless that is the loss itself), its
//! backward by the contracts' rules, and AdamW — and run:
//!
//! - on the CPU (`f64`), every parameter's gradient against central finite differences of
//!   the loss;
//! - on the GPU (lavapipe in CI), the loss, every gradient and every updated parameter against
//!   the CPU, under row-major layouts and under random layouts;
//! - with an extra axis on any one input, which its shape rule refuses with a typed error.
//!
//! Every registered operation is reached by some sample's graph or a shipped model's, so a new
//! operation gets these tests by being registered.

mod exec_support;

use std::collections::HashSet;

use exec_support::{family_layouts, relative_error, row_major};
use fblayout_core::layout::ElemType;
use fblayout_kernels::Gpu;
use fblayout_plan::exec::{AdamWConfig, CpuStep, GpuStep, StepInputs};
use fblayout_plan::graph::optimizer::add_adamw;
use fblayout_plan::graph::{Dim, Graph, GraphError, Op, Role, Sizes, TensorId, derive_backward};
use fblayout_plan::layouts::LayoutChoice;
use fblayout_plan::memory::{MemoryOptions, plan_memory};
use fblayout_plan::models::{Model, ModelConfig, build};
use fblayout_plan::ops::{Holds, Sample, registry};

/// Sizes that tiles of 4 and 8 don't divide.
const SIZES: Sizes = Sizes { batch: 2, seq: 5 };

/// AdamW with a visible step and an ε that keeps it continuous near zero gradients.
const ADAMW: AdamWConfig = AdamWConfig {
    lr: 1e-2,
    beta1: 0.9,
    beta2: 0.999,
    eps: 1e-3,
    weight_decay: 0.01,
};

/// The rows of the tables token inputs are looked up from.
const TABLE_ROWS: u32 = 13;

/// The GPU, or a failure that says how to get one (never a skip).
fn gpu() -> Gpu {
    Gpu::new().unwrap_or_else(|err| {
        panic!(
            "could not open a GPU; install Mesa's Vulkan drivers (lavapipe) or set \
             FBLAYOUT_ADAPTER/FBLAYOUT_BACKEND.\n{err}"
        )
    })
}

/// A sample's graph: its tensors named `in0`, `in1`, … and `out0`, …, the ids named after
/// their role; returns it with the bound of every integer input.
struct Built {
    graph: Graph,
    ids: Vec<(String, u32)>,
}

fn declare(
    g: &mut Graph,
    name: &str,
    axes: &[(&'static str, Dim)],
    holds: &Holds,
) -> Result<TensorId, GraphError> {
    match holds {
        Holds::Floats => g.add_tensor(name, axes, ElemType::F32, Role::Param),
        Holds::Ids { .. } => g.add_tensor(name, axes, ElemType::U32, Role::Input),
        Holds::Written | Holds::Summed => g.add_tensor(name, axes, ElemType::F32, Role::Activation),
        Holds::Loss => g.add_tensor(name, axes, ElemType::F32, Role::Loss),
        Holds::Constant(values) => {
            let fixed: Vec<(&str, u32)> = axes
                .iter()
                .map(|&(n, d)| match d {
                    Dim::Fixed(v) => (n, v),
                    other => panic!("a constant's axes are fixed, not {other}"),
                })
                .collect();
            g.add_constant(name, &fixed, values.clone())
        }
    }
}

/// The operation `op` over `sample` pushed onto a new graph (before any loss).
fn forward(op: Op, sample: &Sample) -> Result<(Built, Vec<TensorId>), GraphError> {
    let mut g = Graph::new();
    let mut ids = Vec::new();
    let roles = op.input_roles();
    let mut inputs = Vec::new();
    for (k, decl) in sample.inputs.iter().enumerate() {
        let name = match decl.holds {
            Holds::Ids { below } => {
                ids.push((roles[k].to_owned(), below));
                roles[k].to_owned()
            }
            _ => format!("in{k}"),
        };
        let tokens = decl.axes.len() == 3 && decl.axes[0].1 == Dim::Batch;
        if decl.holds == Holds::Floats && tokens {
            // A token tensor is an activation: looked up from a trained table by random ids,
            // so that its gradient reaches a parameter.
            let Dim::Fixed(width) = decl.axes[2].1 else {
                panic!("{op:?}: a token input's width is fixed");
            };
            let table = g.add_tensor(
                format!("{name}.table"),
                &[
                    ("rows", Dim::Fixed(TABLE_ROWS)),
                    ("width", Dim::Fixed(width)),
                ],
                ElemType::F32,
                Role::Param,
            )?;
            let lookup = format!("{name}.ids");
            let tok = [("batch", Dim::Batch), ("seq", Dim::Seq)];
            let at = g.add_tensor(&lookup, &tok, ElemType::U32, Role::Input)?;
            let x = g.add_tensor(&name, &decl.axes, ElemType::F32, Role::Activation)?;
            g.push(Op::Embedding, &[at, table], &[x])?;
            ids.push((lookup, TABLE_ROWS));
            inputs.push(x);
            continue;
        }
        inputs.push(declare(&mut g, &name, &decl.axes, &decl.holds)?);
    }
    let mut outputs = Vec::new();
    for (k, decl) in sample.outputs.iter().enumerate() {
        outputs.push(declare(
            &mut g,
            &format!("out{k}"),
            &decl.axes,
            &decl.holds,
        )?);
    }
    g.push(op, &inputs, &outputs)?;
    Ok((Built { graph: g, ids }, outputs))
}

/// The whole training step of `op`'s sample (see the module docs).
fn training_graph(op: Op) -> Built {
    let sample = op.sample().expect("a forward operation has a sample");
    let (
        Built {
            graph: mut g,
            mut ids,
        },
        outputs,
    ) = forward(op, &sample).unwrap();
    if sample.outputs[0].holds != Holds::Loss {
        // The loss reads the first output that is not summed, plus those that are.
        let summed = |k: &usize| sample.outputs[*k].holds == Holds::Summed;
        let first = (0..outputs.len()).find(|k| !summed(k)).unwrap();
        let mut read = outputs[first];
        for k in (0..outputs.len()).filter(summed) {
            let name = format!("summed{k}");
            let total = g.tensor(read).clone();
            let axes: Vec<(&str, Dim)> = total
                .axes
                .iter()
                .map(|a| (a.name.as_str(), a.dim))
                .collect();
            let t = g
                .add_tensor(&name, &axes, ElemType::F32, Role::Activation)
                .unwrap();
            g.push(Op::Add, &[read, outputs[k]], &[t]).unwrap();
            read = t;
        }
        let y = g.tensor(read).clone();
        let classes = match y.axes.last().map(|a| a.dim) {
            Some(Dim::Fixed(n)) => n,
            other => panic!("{op:?}: a loss over a last axis of {other:?}"),
        };
        let axes = [("batch", Dim::Batch), ("seq", Dim::Seq)];
        let labels = g
            .add_tensor("ce_labels", &axes, ElemType::U32, Role::Input)
            .unwrap();
        let loss = g
            .add_tensor("ce_loss", &axes, ElemType::F32, Role::Loss)
            .unwrap();
        let ce = Op::CrossEntropy {
            ignore_index: u32::MAX,
        };
        g.push(ce, &[read, labels], &[loss]).unwrap();
        ids.push(("ce_labels".into(), classes));
    }
    derive_backward(&mut g).unwrap();
    add_adamw(&mut g).unwrap();
    Built { graph: g, ids }
}

/// Random inputs below their bounds, from `seed`.
fn inputs(ids: &[(String, u32)], seed: u64) -> StepInputs {
    let n = (SIZES.batch * SIZES.seq) as usize;
    let mut rng = exec_support::Rng(seed | 1);
    let mut out = StepInputs::random(1, SIZES, seed);
    for (name, below) in ids {
        let values = (0..n).map(|_| rng.below(*below as usize) as u32).collect();
        out = out.with(name, values);
    }
    out
}

/// The loss, every parameter's gradient and (after `full`) every parameter.
fn results(read: impl Fn(&str) -> Vec<f64>, g: &Graph) -> Vec<(String, Vec<f64>)> {
    let mut out = Vec::new();
    for p in g.params() {
        let name = g.tensor(p).name.clone();
        if let Some(grad) = g.grad(p) {
            let gname = g.tensor(grad).name.clone();
            out.push((gname.clone(), read(&gname)));
        }
        out.push((name.clone(), read(&name)));
    }
    out
}

fn cpu_step(g: &Graph, layouts: &[LayoutChoice]) -> CpuStep {
    let memory = plan_memory(g, layouts, SIZES, MemoryOptions::default()).unwrap();
    let mut step = CpuStep::new(g, layouts, &memory, SIZES, ADAMW)
        .unwrap()
        .poison_freed(true);
    step.init_params(7).unwrap();
    step
}

#[test]
fn every_registered_operation_is_reached_by_a_sample_or_a_shipped_model() {
    let mut reached: HashSet<String> = HashSet::new();
    let mut graphs: Vec<Graph> = registry()
        .into_iter()
        .filter(|op| op.sample().is_some())
        .map(|op| training_graph(op).graph)
        .collect();
    let config = ModelConfig::new(11, 8, 2)
        .with_max_positions(8)
        .with_ffn(16)
        .with_layers(1);
    for model in [Model::Encoder, Model::Decoder] {
        graphs.push(build(model, config).unwrap());
    }
    for g in &graphs {
        for n in g.nodes() {
            reached.insert(format!("{:?}", n.op));
        }
    }
    let mut g = graphs[0].clone();
    let first = g.node_ids().next().unwrap();
    let x = g.nodes()[0].inputs[0];
    g.insert_convert(first, x, "converted").unwrap();
    reached.insert(format!("{:?}", g.nodes()[0].op));
    let encoder = &graphs[graphs.len() - 2];
    let precision = fblayout_plan::graph::precision::mixed(encoder).unwrap();
    for n in precision.nodes() {
        reached.insert(format!("{:?}", n.op));
    }
    for op in registry() {
        // Parameters of an operation (ε, heads) differ between the registry and the graphs:
        // compare the variant.
        let variant = format!("{op:?}");
        let variant = variant.split([' ', '(']).next().unwrap().to_owned();
        assert!(
            reached
                .iter()
                .any(|r| r.split([' ', '(']).next() == Some(&variant)),
            "no sample or shipped graph runs {op:?}: give it a sample or a forward whose rule emits it"
        );
    }
}

#[test]
fn every_sampled_gradient_matches_central_finite_differences() {
    for op in registry().into_iter().filter(|op| op.sample().is_some()) {
        let Built { graph: g, ids } = training_graph(op);
        let mut step = cpu_step(&g, &row_major(&g));
        let inputs = inputs(&ids, 3);
        step.forward_backward(&inputs).unwrap();
        let h = 1e-5;
        for p in g.params() {
            let name = g.tensor(p).name.clone();
            let grad = step.read(&g.tensor(g.grad(p).unwrap()).name).unwrap();
            let values = step.read(&name).unwrap();
            let stride = (values.len() / 4).max(1);
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
                    "{op:?}: d loss / d {name}[{k}] = {} by the backward, {numeric} numerically",
                    grad[k]
                );
            }
        }
    }
}

#[test]
fn every_sampled_step_on_the_gpu_matches_the_cpu_under_any_layouts() {
    let gpu = gpu();
    for op in registry().into_iter().filter(|op| op.sample().is_some()) {
        let Built { graph: g, ids } = training_graph(op);
        let inputs = inputs(&ids, 5);
        for (what, layouts) in [
            ("row-major", row_major(&g)),
            ("random layouts", family_layouts(&g, 11)),
        ] {
            let mut on_cpu = cpu_step(&g, &layouts);
            let memory = plan_memory(&g, &layouts, SIZES, MemoryOptions::default()).unwrap();
            let mut on_gpu = GpuStep::new(&gpu, &g, &layouts, &memory, SIZES, ADAMW)
                .unwrap_or_else(|e| panic!("{op:?} ({what}): {e}"));
            on_gpu.upload_params(7).unwrap();
            let want_loss = on_cpu.step(&inputs).unwrap();
            let got_loss = f64::from(on_gpu.step(&inputs).unwrap());
            assert!(
                (got_loss - want_loss).abs() <= 2e-4 * want_loss.abs().max(1e-3),
                "{op:?} ({what}): loss {got_loss} on the GPU, {want_loss} on the CPU"
            );
            let want = results(|n| on_cpu.read(n).unwrap(), &g);
            let got = results(|n| on_gpu.read(n).unwrap(), &g);
            for ((name, a), (_, b)) in got.iter().zip(&want) {
                let e = relative_error(a, b);
                assert!(e <= 2e-4, "{op:?} ({what}): `{name}` relative error {e:e}");
            }
        }
    }
}

#[test]
fn an_extra_axis_on_any_input_is_refused_by_the_shape_rule() {
    for op in registry().into_iter().filter(|op| op.sample().is_some()) {
        let sample = op.sample().unwrap();
        for k in 0..sample.inputs.len() {
            let mut bad = sample.clone();
            if matches!(bad.inputs[k].holds, Holds::Constant(_)) {
                // A constant's values fit its axes; an extra axis of 2 doubles them.
                if let Holds::Constant(v) = &mut bad.inputs[k].holds {
                    let copy = v.clone();
                    v.extend(copy);
                }
            }
            bad.inputs[k].axes.push(("extra", Dim::Fixed(2)));
            match forward(op, &bad) {
                Err(GraphError::Shape { op: name, detail }) => {
                    assert_eq!(name, op.name());
                    assert!(!detail.is_empty());
                }
                Err(other) => panic!("{op:?}, input {k}: {other}"),
                Ok(_) => panic!("{op:?}: an extra axis on input {k} was accepted"),
            }
        }
    }
}
