//! Frozen parameters: the backward writes no gradient of them and passes gradients through
//! them only where a trained parameter lies upstream; AdamW keeps no state for them; the memory
//! plan counts neither.

use fblayout_core::layout::ElemType;
use fblayout_plan::graph::optimizer::add_adamw;
use fblayout_plan::graph::{Dim, Graph, Op, Role, Sizes, TensorId, derive_backward};
use fblayout_plan::layouts::LayoutChoice;
use fblayout_plan::memory::{Category, MemoryOptions, MemoryPlan, plan_memory};

const VOCAB: u32 = 5;
const HIDDEN: u32 = 4;
const INNER: u32 = 6;
const SIZES: Sizes = Sizes { batch: 2, seq: 3 };

/// `logits = embed(ids; table)·w1·w2`, its cross-entropy, with the parameters named in
/// `frozen` frozen, then the backward and AdamW.
fn graph(frozen: &[&str]) -> Graph {
    let mut g = Graph::new();
    let bs = [("batch", Dim::Batch), ("seq", Dim::Seq)];
    let act = |g: &mut Graph, name: &str, w: u32| {
        let axes = [
            ("batch", Dim::Batch),
            ("seq", Dim::Seq),
            ("hidden", Dim::Fixed(w)),
        ];
        g.add_tensor(name, &axes, ElemType::F32, Role::Activation)
            .unwrap()
    };
    let param = |g: &mut Graph, name: &str, a: u32, b: u32| {
        let axes = [("d_in", Dim::Fixed(a)), ("d_out", Dim::Fixed(b))];
        g.add_tensor(name, &axes, ElemType::F32, Role::Param)
            .unwrap()
    };
    let ids = g
        .add_tensor("ids", &bs, ElemType::U32, Role::Input)
        .unwrap();
    let labels = g
        .add_tensor("labels", &bs, ElemType::U32, Role::Input)
        .unwrap();
    let table = param(&mut g, "table", VOCAB, HIDDEN);
    let w1 = param(&mut g, "w1", HIDDEN, INNER);
    let w2 = param(&mut g, "w2", INNER, VOCAB);
    let x = act(&mut g, "x", HIDDEN);
    let h = act(&mut g, "h", INNER);
    let logits = act(&mut g, "logits", VOCAB);
    let loss = g
        .add_tensor("loss", &bs, ElemType::F32, Role::Loss)
        .unwrap();
    g.push(Op::Embedding, &[ids, table], &[x]).unwrap();
    g.push(Op::Linear, &[x, w1], &[h]).unwrap();
    g.push(Op::Linear, &[h, w2], &[logits]).unwrap();
    let ce = Op::CrossEntropy {
        ignore_index: u32::MAX,
    };
    g.push(ce, &[logits, labels], &[loss]).unwrap();
    for name in frozen {
        let p = g.find(name).unwrap();
        g.freeze(p).unwrap();
    }
    derive_backward(&mut g).unwrap();
    add_adamw(&mut g).unwrap();
    g
}

fn id(g: &Graph, name: &str) -> TensorId {
    g.find(name).unwrap()
}

fn ops(g: &Graph) -> Vec<Op> {
    g.nodes().iter().map(|n| n.op).collect()
}

fn plan(g: &Graph) -> MemoryPlan {
    let layouts = vec![LayoutChoice::RowMajor; g.tensors().len()];
    plan_memory(g, &layouts, SIZES, MemoryOptions::default()).unwrap()
}

/// The bytes of an f32 `[a, b]` weight.
fn bytes(a: u32, b: u32) -> u64 {
    u64::from(a * b) * 4
}

#[test]
fn a_frozen_weight_gets_no_gradient_and_no_state_but_passes_gradients_upstream() {
    let g = graph(&["w1"]);
    let (table, w1, w2) = (id(&g, "table"), id(&g, "w1"), id(&g, "w2"));
    assert_eq!(g.tensor(w1).role, Role::Frozen);
    assert_eq!(g.params(), [table, w2]);
    assert_eq!(g.frozen(), [w1]);
    assert_eq!(g.weights(), [table, w1, w2]);
    assert_eq!(g.grad(w1), None);
    assert!(g.grad(table).is_some() && g.grad(w2).is_some());
    // The input gradient through w1 reaches the trained table.
    assert!(g.grad(id(&g, "x")).is_some());
    let o = ops(&g);
    assert_eq!(
        o.iter().filter(|&&op| op == Op::LinearGradWeight).count(),
        1
    );
    assert_eq!(o.iter().filter(|&&op| op == Op::LinearGradInput).count(), 2);
    assert!(o.contains(&Op::EmbeddingGrad));
    // Nothing is written as w1's gradient, nor kept as its state.
    for t in g.tensors() {
        assert_ne!(t.role, Role::Grad { of: w1 }, "`{}`", t.name);
        assert_ne!(t.role, Role::State { of: w1 }, "`{}`", t.name);
    }
    let steps: Vec<TensorId> = g
        .nodes()
        .iter()
        .filter(|n| n.op == Op::AdamW { copy: false })
        .map(|n| n.inputs[0])
        .collect();
    assert_eq!(steps, [table, w2]);
}

#[test]
fn nothing_upstream_of_only_frozen_weights_is_differentiated() {
    let g = graph(&["table", "w1"]);
    // Only w2 trains: its gradient needs the loss's and h, nothing else.
    assert_eq!(g.grad(id(&g, "h")), None);
    assert_eq!(g.grad(id(&g, "x")), None);
    let backward: Vec<Op> = g
        .nodes()
        .iter()
        .filter(|n| n.op.phase() == fblayout_plan::graph::Phase::Backward)
        .map(|n| n.op)
        .collect();
    assert_eq!(
        backward,
        [
            Op::CrossEntropyGrad {
                ignore_index: u32::MAX
            },
            Op::LinearGradWeight
        ]
    );
}

#[test]
fn the_memory_plan_counts_no_gradient_and_no_state_of_a_frozen_weight() {
    let full = plan(&graph(&[]));
    let frozen = plan(&graph(&["w1"]));
    let w1 = bytes(HIDDEN, INNER);
    // AdamW's two moments of w1 go; the weight itself stays.
    assert_eq!(
        full.total_bytes(Category::OptimizerState) - frozen.total_bytes(Category::OptimizerState),
        2 * w1
    );
    assert_eq!(
        full.total_bytes(Category::Parameters),
        frozen.total_bytes(Category::Parameters)
    );
    // Its gradient goes too; the input gradient it passes on stays.
    assert_eq!(
        full.total_bytes(Category::Gradients) - frozen.total_bytes(Category::Gradients),
        w1
    );
    // The moments live through the whole step and the gradient, a result, to its end: the
    // peak — in the optimizer pass, where every result and moment is live — drops by all three.
    assert_eq!(full.peak_live_bytes() - frozen.peak_live_bytes(), 3 * w1);
    // Everything frozen but the head: only the head's moments and gradient are left.
    let head = plan(&graph(&["table", "w1"]));
    assert_eq!(
        head.total_bytes(Category::OptimizerState),
        2 * bytes(INNER, VOCAB)
    );
}

#[test]
fn only_a_parameter_is_frozen_and_only_before_the_backward() {
    let mut g = graph(&[]);
    let w1 = id(&g, "w1");
    assert!(g.freeze(w1).unwrap_err().to_string().contains("backward"));
    let mut fresh = Graph::new();
    let t = fresh
        .add_tensor("ids", &[("batch", Dim::Batch)], ElemType::U32, Role::Input)
        .unwrap();
    assert!(
        fresh
            .freeze(t)
            .unwrap_err()
            .to_string()
            .contains("no parameter")
    );
}
