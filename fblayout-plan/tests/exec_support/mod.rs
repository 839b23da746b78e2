//! What the executor and memory tests share: the GPU, small models, random layouts, random
//! conversions, and the results of a step to compare.

#![allow(dead_code)] // each test file uses part of it

use fblayout_kernels::Gpu;
use fblayout_plan::exec::{AdamWConfig, CpuStep, StepInputs};
use fblayout_plan::graph::{Graph, NodeId, Phase, Role, Sizes};
use fblayout_plan::layouts::LayoutChoice;
use fblayout_plan::memory::{MemoryOptions, plan_memory};
use fblayout_plan::models::{Model, ModelConfig, build};

/// The GPU, or a failure that says how to get one (never a skip).
pub(crate) fn gpu() -> Gpu {
    Gpu::new().unwrap_or_else(|err| {
        panic!(
            "could not open a GPU; install Mesa's Vulkan drivers (lavapipe) or set \
             FBLAYOUT_ADAPTER/FBLAYOUT_BACKEND.\n{err}"
        )
    })
}

/// A small model: heads of 4, a vocabulary the head's tiles don't divide and long enough that
/// row-major pads its rows (67 in a pitch of 72) and R-Tiles pad it to whole tiles.
pub(crate) const SMALL: ModelConfig = ModelConfig::new(67, 8, 2)
    .with_max_positions(8)
    .with_ffn(16)
    .with_layers(2);

/// A small model whose every side is past 16 (heads of 32 in one head, a feed-forward of 48), so
/// that none of its products has a narrow side: where the device has tensor cores, they run
/// there. (Every product of [`SMALL`] has a side of at most 16, so the narrow kernels run it.)
pub(crate) const WIDE: ModelConfig = ModelConfig::new(67, 32, 1)
    .with_max_positions(8)
    .with_ffn(48)
    .with_layers(2);

/// Sizes that R-Tiles of 4 and 8 don't divide.
pub(crate) const SIZES: Sizes = Sizes { batch: 2, seq: 5 };

pub(crate) fn graph(model: Model) -> Graph {
    build(model, SMALL).unwrap()
}

/// AdamW for the tests: a learning rate that moves the parameters visibly, and an ε large
/// enough that the step is continuous at gradients that vanish (a key bias's gradient is 0 in
/// exact arithmetic, so its f32 and f64 round-off differ in relative terms without bound).
pub(crate) const ADAMW: AdamWConfig = AdamWConfig {
    lr: 1e-2,
    beta1: 0.9,
    beta2: 0.999,
    eps: 1e-3,
    weight_decay: 0.01,
};

/// A small deterministic generator (xorshift64*).
pub(crate) struct Rng(pub u64);

impl Rng {
    pub(crate) fn below(&mut self, n: usize) -> usize {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        (x.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 33) as usize % n
    }
}

pub(crate) fn row_major(g: &Graph) -> Vec<LayoutChoice> {
    vec![LayoutChoice::RowMajor; g.tensors().len()]
}

/// A random candidate layout for every tensor.
pub(crate) fn random_layouts(g: &Graph, seed: u64) -> Vec<LayoutChoice> {
    let mut rng = Rng(seed | 1);
    g.tensors()
        .iter()
        .map(|t| {
            let c = LayoutChoice::candidates(t.axes.len());
            c[rng.below(c.len())]
        })
        .collect()
}

/// Random layouts where every gradient is stored like the tensor it is the gradient of.
pub(crate) fn family_layouts(g: &Graph, seed: u64) -> Vec<LayoutChoice> {
    let mut layouts = random_layouts(g, seed);
    for t in g.ids() {
        if let Role::Grad { of } = g.tensor(t).role {
            layouts[t.index()] = layouts[of.index()];
        }
    }
    layouts
}

/// `g` with `count` conversions of float tensors into random layouts, each before a random
/// operation that reads the tensor; the layouts of the copies are appended to `layouts`.
pub(crate) fn with_converts(
    g: Graph,
    layouts: Vec<LayoutChoice>,
    count: usize,
    seed: u64,
) -> (Graph, Vec<LayoutChoice>) {
    converts_where(g, layouts, count, seed, |_| true)
}

/// [`with_converts`] before operations of the forward only.
pub(crate) fn forward_converts(
    g: Graph,
    layouts: Vec<LayoutChoice>,
    count: usize,
    seed: u64,
) -> (Graph, Vec<LayoutChoice>) {
    converts_where(g, layouts, count, seed, |p| p == Phase::Forward)
}

fn converts_where(
    mut g: Graph,
    mut layouts: Vec<LayoutChoice>,
    count: usize,
    seed: u64,
    pass: impl Fn(Phase) -> bool,
) -> (Graph, Vec<LayoutChoice>) {
    let mut rng = Rng(seed | 1);
    let mut added = 0;
    while added < count {
        let at = rng.below(g.nodes().len());
        let node = &g.nodes()[at];
        if !pass(node.op.phase()) {
            continue;
        }
        let k = rng.below(node.inputs.len());
        let t = node.inputs[k];
        let tensor = g.tensor(t);
        if tensor.elem != fblayout_core::layout::ElemType::F32 {
            continue;
        }
        let name = format!("{}.cv{added}", tensor.name);
        let rank = tensor.axes.len();
        let copy = g.insert_convert(node_id(&g, at), t, name).unwrap();
        let c = LayoutChoice::candidates(rank);
        layouts.push(c[rng.below(c.len())]);
        assert_eq!(copy.index() + 1, layouts.len());
        added += 1;
    }
    (g, layouts)
}

pub(crate) fn node_id(g: &Graph, at: usize) -> NodeId {
    // Node ids are positions; find the one at `at` through the public list.
    g.node_ids().nth(at).unwrap()
}

/// The loss, every parameter's gradient and (after a full step) every parameter, by name.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Results {
    pub(crate) loss: f64,
    pub(crate) values: Vec<(String, Vec<f64>)>,
}

/// Runs one step (`full`: with AdamW) of `g` under `layouts` on the CPU, from parameters of
/// seed 7 and inputs of seed 11; with `reuse`, buffers are reused and freed ones poisoned.
pub(crate) fn run_cpu(g: &Graph, layouts: &[LayoutChoice], reuse: bool, full: bool) -> Results {
    let plan = plan_memory(
        g,
        layouts,
        SIZES,
        MemoryOptions {
            reuse,
            ..MemoryOptions::default()
        },
    )
    .unwrap();
    let mut step = CpuStep::new(g, layouts, &plan, SIZES, ADAMW)
        .unwrap()
        .poison_freed(reuse);
    step.init_params(7).unwrap();
    let inputs = StepInputs::random(SMALL.vocab, SIZES, 11);
    let loss = if full {
        step.step(&inputs).unwrap()
    } else {
        step.forward_backward(&inputs).unwrap()
    };
    let mut values = Vec::new();
    for p in g.params() {
        let name = &g.tensor(p).name;
        let grad = &g.tensor(g.grad(p).unwrap()).name;
        values.push((grad.clone(), step.read(grad).unwrap()));
        if full {
            values.push((name.clone(), step.read(name).unwrap()));
        }
    }
    Results { loss, values }
}

/// `‖a − b‖ / ‖b‖` (infinite where a value is not finite).
pub(crate) fn relative_error(a: &[f64], b: &[f64]) -> f64 {
    if a.len() != b.len() || a.iter().chain(b).any(|v| !v.is_finite()) {
        return f64::INFINITY;
    }
    let diff: f64 = a.iter().zip(b).map(|(x, y)| (x - y) * (x - y)).sum();
    let norm: f64 = b.iter().map(|y| y * y).sum();
    (diff / norm.max(f64::MIN_POSITIVE)).sqrt()
}

/// Checks `got` against `want` within `tol` (relative), naming what differs.
pub(crate) fn assert_close(got: &Results, want: &Results, tol: f64, what: &str) {
    assert!(
        want.loss.is_finite(),
        "{what}: the reference loss is {}",
        want.loss
    );
    assert!(
        (got.loss - want.loss).abs() <= tol * want.loss.abs(),
        "{what}: loss {} vs {}",
        got.loss,
        want.loss
    );
    for ((name, a), (_, b)) in got.values.iter().zip(&want.values) {
        let e = relative_error(a, b);
        assert!(e <= tol, "{what}: `{name}` relative error {e:e}");
    }
}
