//! The training-graph IR: building, and the backward derived by reverse-mode differentiation.

use fblayout_core::layout::ElemType;
use fblayout_plan::graph::{
    Act, Dim, Graph, GraphError, Op, Phase, Role, TensorId, derive_backward,
};
use fblayout_plan::models::{Model, ModelConfig, build};

const SMALL: ModelConfig = ModelConfig::new(50, 32, 4)
    .with_max_positions(16)
    .with_ffn(64)
    .with_layers(2);

/// A `[batch, seq, 8]` activation of `f32` named `name`.
fn activation(g: &mut Graph, name: &str) -> TensorId {
    let axes = [
        ("batch", Dim::Batch),
        ("seq", Dim::Seq),
        ("hidden", Dim::Fixed(8)),
    ];
    g.add_tensor(name, &axes, ElemType::F32, Role::Activation)
        .unwrap()
}

/// A tiny graph: `x = embed(ids)`, `y = x·w + x·w` against labels, so `x` and `w` each feed
/// two products.
fn two_paths() -> (Graph, [TensorId; 4]) {
    let mut g = Graph::new();
    let bs = [("batch", Dim::Batch), ("seq", Dim::Seq)];
    let ids = g
        .add_tensor("ids", &bs, ElemType::U32, Role::Input)
        .unwrap();
    let labels = g
        .add_tensor("labels", &bs, ElemType::U32, Role::Input)
        .unwrap();
    let table = g
        .add_tensor(
            "table",
            &[("vocab", Dim::Fixed(10)), ("hidden", Dim::Fixed(8))],
            ElemType::F32,
            Role::Param,
        )
        .unwrap();
    let w = g
        .add_tensor(
            "w",
            &[("d_in", Dim::Fixed(8)), ("d_out", Dim::Fixed(8))],
            ElemType::F32,
            Role::Param,
        )
        .unwrap();
    let x = activation(&mut g, "x");
    let h = activation(&mut g, "h");
    let h2 = activation(&mut g, "h2");
    let y = activation(&mut g, "y");
    let loss = g
        .add_tensor("loss", &bs, ElemType::F32, Role::Loss)
        .unwrap();
    g.push(Op::Embedding, &[ids, table], &[x]).unwrap();
    g.push(Op::Linear, &[x, w], &[h]).unwrap();
    g.push(Op::Linear, &[x, w], &[h2]).unwrap();
    g.push(Op::Add, &[h, h2], &[y]).unwrap();
    g.push(
        Op::CrossEntropy {
            ignore_index: u32::MAX,
        },
        &[y, labels],
        &[loss],
    )
    .unwrap();
    (g, [x, w, table, y])
}

#[test]
fn a_tensor_read_twice_gets_the_sum_of_both_gradients() {
    let (mut g, [x, w, table, y]) = two_paths();
    derive_backward(&mut g).unwrap();
    // The sum passes the loss's gradient to both products unchanged: one tensor is the
    // gradient of y, h and h2.
    let dy = g.grad(y).unwrap();
    assert_eq!(g.grad(g.find("h").unwrap()), Some(dy));
    assert_eq!(g.grad(g.find("h2").unwrap()), Some(dy));
    // x and w each feed two products: two contributions, summed once each.
    for t in [x, w] {
        let grad = g.grad(t).unwrap();
        let sums = g
            .nodes()
            .iter()
            .filter(|n| n.op == Op::Accumulate && n.outputs == [grad])
            .count();
        assert_eq!(sums, 1, "{}", g.tensor(t).name);
        assert_eq!(g.tensor(grad).role, Role::Grad { of: t });
    }
    // The table's gradient is the scatter-add of x's gradient; the ids get none.
    let scatter = g
        .nodes()
        .iter()
        .find(|n| n.op == Op::EmbeddingGrad)
        .unwrap();
    assert_eq!(scatter.inputs[1], g.grad(x).unwrap());
    assert_eq!(scatter.outputs, [g.grad(table).unwrap()]);
    assert_eq!(g.grad(g.find("ids").unwrap()), None);
    // The backward reads x and w again, so the forward keeps them.
    assert!(g.saved().contains(&x) && g.saved().contains(&w));
}

#[test]
fn every_read_comes_after_its_write_and_every_param_has_a_gradient() {
    for model in [Model::Encoder, Model::Decoder] {
        let g = build(model, SMALL).unwrap();
        let mut written: Vec<bool> = g.tensors().iter().map(|t| t.is_persistent()).collect();
        let mut passes = Vec::new();
        for node in g.nodes() {
            for &t in &node.inputs {
                assert!(
                    written[t.index()],
                    "{model:?}: {} reads {} before it is written",
                    node.op,
                    g.tensor(t).name
                );
            }
            // AdamW updates parameters and moments in place: its outputs are its inputs.
            let in_place = node.op.phase() == Phase::Optimizer;
            for &t in node.outputs.iter().filter(|_| !in_place) {
                assert!(!written[t.index()], "{} written twice", g.tensor(t).name);
                written[t.index()] = true;
            }
            passes.push(node.op.phase());
        }
        assert!(
            passes.windows(2).all(|w| w[0] <= w[1]),
            "the forward comes before the backward"
        );
        for p in g.params() {
            let d = g
                .grad(p)
                .unwrap_or_else(|| panic!("{model:?}: no gradient for {}", g.tensor(p).name));
            assert_eq!(g.tensor(d).axes, g.tensor(p).axes);
        }
        // Each block's attention probabilities and LayerNorm statistics are saved.
        for l in 0..SMALL.layers {
            for name in [format!("l{l}.attn.probs"), format!("l{l}.ln1.rstd")] {
                assert!(
                    g.saved().contains(&g.find(&name).unwrap()),
                    "{model:?}: {name}"
                );
            }
        }
    }
}

#[test]
fn the_decoder_is_causal_and_the_encoder_is_not() {
    let causal = |model| {
        build(model, SMALL)
            .unwrap()
            .nodes()
            .iter()
            .filter_map(|n| match n.op {
                Op::Attention { causal, .. } => Some(causal),
                _ => None,
            })
            .collect::<Vec<_>>()
    };
    assert_eq!(causal(Model::Decoder), [true, true]);
    assert_eq!(causal(Model::Encoder), [false, false]);
}

#[test]
fn bad_graphs_are_typed_errors() {
    let (mut g, [x, w, ..]) = two_paths();
    let err = g.push(Op::Linear, &[x], &[w]).unwrap_err();
    assert!(matches!(err, GraphError::Arity { .. }), "{err}");
    let ghost = g
        .add_tensor(
            "ghost",
            &[("n", Dim::Fixed(3))],
            ElemType::F32,
            Role::Activation,
        )
        .unwrap();
    let out = g
        .add_tensor(
            "out",
            &[("n", Dim::Fixed(3))],
            ElemType::F32,
            Role::Activation,
        )
        .unwrap();
    let err = g
        .push(Op::Activation(Act::Gelu), &[ghost], &[out])
        .unwrap_err();
    assert!(err.to_string().contains("reads `ghost`"), "{err}");
    let err = g
        .add_tensor("x", &[], ElemType::F32, Role::Activation)
        .unwrap_err();
    assert_eq!(err, GraphError::DuplicateName("x".into()));
    // A product's factor that is not a number is refused by its shape rule, by name.
    let scaled = activation(&mut g, "scaled");
    for scale in [f32::NAN, f32::INFINITY] {
        let err = g
            .push(Op::LinearT { scale }, &[x, w], &[scaled])
            .unwrap_err();
        assert!(
            matches!(&err, GraphError::Shape { op: "linear_t", detail }
                if detail.contains("factor") && detail.contains("not a finite number")),
            "{err}"
        );
    }
    derive_backward(&mut g).unwrap();
    assert!(g.nodes().iter().any(|n| n.op.phase() == Phase::Backward));
    assert!(
        derive_backward(&mut g).is_err(),
        "a second backward is refused"
    );
    let mut no_loss = Graph::new();
    assert!(
        derive_backward(&mut no_loss)
            .unwrap_err()
            .to_string()
            .contains("no loss")
    );
    let bad = SMALL.with_heads(5);
    assert!(
        build(Model::Encoder, bad)
            .unwrap_err()
            .to_string()
            .contains("multiple of heads")
    );
}

#[test]
fn the_shipped_graphs_are_snapshotted() {
    for (name, model) in [("encoder", Model::Encoder), ("decoder", Model::Decoder)] {
        let g = build(model, SMALL.with_layers(1)).unwrap();
        insta::assert_snapshot!(format!("{name}_graph"), g.to_string());
    }
}

/// A bias folds into the product before it exactly when the product's output is an activation
/// only that bias reads, as its input: in the shipped models every bias of a linear layer
/// (whose output nothing else reads), and in a graph where the product's output is also read
/// by another operation, none.
#[test]
fn a_bias_folds_into_the_product_whose_output_only_it_reads() {
    for model in [Model::Encoder, Model::Decoder] {
        let g = build(model, SMALL).unwrap();
        let folds = g.folded_biases();
        assert_eq!(folds.len(), g.nodes().len());
        let biases = g.nodes().iter().filter(|n| n.op == Op::Bias).count();
        assert!(biases > 0, "{model:?}");
        let mut folded = 0;
        for (i, fold) in folds.iter().enumerate() {
            let Some(j) = *fold else { continue };
            folded += 1;
            let (product, bias) = (&g.nodes()[i], &g.nodes()[j]);
            assert_eq!(product.op, Op::Linear);
            assert_eq!(bias.op, Op::Bias);
            let lin = product.outputs[0];
            assert_eq!(bias.inputs[0], lin);
            let readers = g.nodes().iter().filter(|n| n.inputs.contains(&lin)).count();
            assert_eq!(readers, 1, "{model:?}: `{}`", g.tensor(lin).name);
        }
        // Every bias of the shipped models follows a linear layer whose output only it reads.
        assert_eq!(folded, biases, "{model:?}");
    }
    // `h` is read by the bias and by the sum: no fold.
    let (mut g, _) = two_paths();
    let b = g
        .add_tensor(
            "b",
            &[("hidden", Dim::Fixed(8))],
            ElemType::F32,
            Role::Param,
        )
        .unwrap();
    let hb = activation(&mut g, "hb");
    let h = g.nodes()[1].outputs[0];
    g.push(Op::Bias, &[h, b], &[hb]).unwrap();
    assert!(g.nodes()[1].op == Op::Linear && g.nodes()[3].inputs.contains(&h));
    assert!(g.folded_biases().iter().all(Option::is_none));
}

/// A bias copied into another layout by a conversion the planner puts between the product and
/// the bias is not ready when the product runs, so the product does not add it: the bias
/// operation does, after the copy.
#[test]
fn a_bias_converted_after_its_product_does_not_fold() {
    let g = build(Model::Decoder, SMALL).unwrap();
    let folds = g.folded_biases();
    let (i, j) = folds
        .iter()
        .enumerate()
        .find_map(|(i, f)| f.map(|j| (i, j)))
        .expect("a folded bias");
    let bias = g.nodes()[j].inputs[1];
    let mut converted = g.clone();
    let at = converted.node_ids().nth(j).unwrap();
    converted
        .insert_convert(at, bias, "b.copy".to_string())
        .unwrap();
    // The conversion sits between the product (still at `i`) and the bias (now at `j + 1`).
    assert_eq!(converted.nodes()[i].op, Op::Linear);
    assert_eq!(converted.nodes()[j + 1].op, Op::Bias);
    assert_eq!(converted.folded_biases()[i], None);
    // Every other fold stands.
    let others = |f: &[Option<usize>]| f.iter().flatten().count();
    assert_eq!(others(&converted.folded_biases()), others(&folds) - 1);
}

/// `x = embed(ids)`, `y = x·w1 + x·w2 + x·w3` (two sums) against labels: each sum is done by
/// the product of its second summand, the second reading the sum the first product wrote; in
/// the backward, `x`'s three contributions are summed by the second and third input-gradient
/// products, each reading the sum the one before it wrote. Nothing else folds.
#[test]
fn a_chain_of_sums_is_done_by_the_products_of_its_summands() {
    let mut g = Graph::new();
    let bs = [("batch", Dim::Batch), ("seq", Dim::Seq)];
    let ids = g
        .add_tensor("ids", &bs, ElemType::U32, Role::Input)
        .unwrap();
    let labels = g
        .add_tensor("labels", &bs, ElemType::U32, Role::Input)
        .unwrap();
    let mut param = |name: &str, rows: u32| {
        g.add_tensor(
            name,
            &[("rows", Dim::Fixed(rows)), ("hidden", Dim::Fixed(8))],
            ElemType::F32,
            Role::Param,
        )
        .unwrap()
    };
    let table = param("table", 10);
    let ws = [param("w1", 8), param("w2", 8), param("w3", 8)];
    let x = activation(&mut g, "x");
    let hs = [
        activation(&mut g, "h1"),
        activation(&mut g, "h2"),
        activation(&mut g, "h3"),
    ];
    let (s, y) = (activation(&mut g, "s"), activation(&mut g, "y"));
    let loss = g
        .add_tensor("loss", &bs, ElemType::F32, Role::Loss)
        .unwrap();
    g.push(Op::Embedding, &[ids, table], &[x]).unwrap();
    for (w, h) in ws.iter().zip(&hs) {
        g.push(Op::Linear, &[x, *w], &[*h]).unwrap();
    }
    g.push(Op::Add, &[hs[0], hs[1]], &[s]).unwrap();
    g.push(Op::Add, &[s, hs[2]], &[y]).unwrap();
    g.push(
        Op::CrossEntropy {
            ignore_index: u32::MAX,
        },
        &[y, labels],
        &[loss],
    )
    .unwrap();
    derive_backward(&mut g).unwrap();
    let folds = g.folded_additions();
    let nodes = g.nodes();
    // The forward's two sums: into the second and third products.
    assert_eq!((folds[2], folds[3]), (Some(4), Some(5)));
    // x's gradient: three input-gradient products, two sums, each folded into the product of
    // its second summand, which runs after the one that wrote its first.
    let dx = g.grad(x).unwrap();
    let sums: Vec<usize> = (0..nodes.len())
        .filter(|&j| nodes[j].op == Op::Accumulate)
        .collect();
    assert_eq!(sums.len(), 2);
    let mut previous: Option<(usize, usize)> = None;
    for &j in &sums {
        let i = folds.iter().position(|&f| f == Some(j)).expect("folded");
        assert_eq!(nodes[i].op, Op::LinearGradInput);
        assert_eq!(nodes[i].outputs[0], nodes[j].inputs[1]);
        if let Some((pi, pj)) = previous {
            // It reads the running sum, written by the product before it.
            assert_eq!(nodes[j].inputs[0], nodes[pj].outputs[0]);
            assert!(pi < i);
        }
        previous = Some((i, j));
    }
    assert_eq!(nodes[sums[1]].outputs[0], dx);
    assert_eq!(folds.iter().flatten().count(), 4);
}
