//! Layout selection: the strategies against each other and against brute force, the
//! rewritten graphs, the explanation and the snapshots of the shipped graphs' plans.

use fblayout_core::layout::{Conversion, ElemType};
use fblayout_plan::graph::{Act, Dim, Graph, Op, Role, Sizes, TensorId, derive_backward};
use fblayout_plan::layouts::LayoutChoice;
use fblayout_plan::models::{Model, ModelConfig, build};
use fblayout_plan::select::{CostModel, Objective, Plan, PlanError, Strategy, plan};

const SHIPPED: Sizes = Sizes {
    batch: 32,
    seq: 128,
};
const SMALL_SIZES: Sizes = Sizes { batch: 3, seq: 12 };

const TINY: ModelConfig = ModelConfig::new(50, 32, 4)
    .with_max_positions(16)
    .with_ffn(64)
    .with_layers(2);

/// A small deterministic generator (64-bit LCG).
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: usize) -> usize {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        ((self.0 >> 33) % n as u64) as usize
    }
}

fn act(g: &mut Graph, name: &str, width: u32, role: Role) -> TensorId {
    g.add_tensor(
        name,
        &[
            ("batch", Dim::Batch),
            ("seq", Dim::Seq),
            ("hidden", Dim::Fixed(width)),
        ],
        ElemType::F32,
        role,
    )
    .unwrap()
}

fn param(g: &mut Graph, name: &str, axes: &[(&str, u32)]) -> TensorId {
    let axes: Vec<(&str, Dim)> = axes.iter().map(|&(n, e)| (n, Dim::Fixed(e))).collect();
    g.add_tensor(name, &axes, ElemType::F32, Role::Param)
        .unwrap()
}

/// A random forward graph over one input: linear layers, biases, activations and sums.
fn random_graph(rng: &mut Rng) -> Graph {
    let mut g = Graph::new();
    let widths = [8u32, 12, 16];
    let x = act(&mut g, "x", 8, Role::Input);
    let mut live = vec![(x, 8u32)];
    let ops = 2 + rng.below(3);
    for i in 0..ops {
        let (a, w) = live[rng.below(live.len())];
        let y = match rng.below(4) {
            0 => {
                let out = widths[rng.below(widths.len())];
                let wt = param(&mut g, &format!("w{i}"), &[("d_in", w), ("d_out", out)]);
                let y = act(&mut g, &format!("lin{i}"), out, Role::Activation);
                g.push(Op::Linear, &[a, wt], &[y]).unwrap();
                (y, out)
            }
            1 => {
                let b = param(&mut g, &format!("b{i}"), &[("hidden", w)]);
                let y = act(&mut g, &format!("bias{i}"), w, Role::Activation);
                g.push(Op::Bias, &[a, b], &[y]).unwrap();
                (y, w)
            }
            2 => {
                let y = act(&mut g, &format!("gelu{i}"), w, Role::Activation);
                g.push(Op::Activation(Act::Gelu), &[a], &[y]).unwrap();
                (y, w)
            }
            _ => {
                let same: Vec<TensorId> = live.iter().filter(|l| l.1 == w).map(|l| l.0).collect();
                let b = same[rng.below(same.len())];
                let y = act(&mut g, &format!("sum{i}"), w, Role::Activation);
                g.push(Op::Add, &[a, b], &[y]).unwrap();
                (y, w)
            }
        };
        live.push(y);
    }
    g
}

/// Small graphs of the models' own operations: a linear layer with its bias and GELU; an
/// attention with its output projection; a LayerNorm into a linear layer; an embedding with a
/// cross-entropy, forward and backward.
fn small_real_graphs() -> Vec<(&'static str, Graph)> {
    let mut out = Vec::new();
    let mut g = Graph::new();
    let x = act(&mut g, "x", 16, Role::Input);
    let w = param(&mut g, "w", &[("d_in", 16), ("d_out", 32)]);
    let b = param(&mut g, "b", &[("hidden", 32)]);
    let lin = act(&mut g, "lin", 32, Role::Activation);
    let y = act(&mut g, "y", 32, Role::Activation);
    let z = act(&mut g, "z", 32, Role::Activation);
    g.push(Op::Linear, &[x, w], &[lin]).unwrap();
    g.push(Op::Bias, &[lin, b], &[y]).unwrap();
    g.push(Op::Activation(Act::Gelu), &[y], &[z]).unwrap();
    out.push(("linear, bias, gelu", g));

    let mut g = Graph::new();
    let qkv = act(&mut g, "qkv", 48, Role::Input);
    let ctx = act(&mut g, "ctx", 16, Role::Activation);
    let probs = g
        .add_tensor(
            "probs",
            &[
                ("batch", Dim::Batch),
                ("heads", Dim::Fixed(2)),
                ("seq_q", Dim::Seq),
                ("seq_k", Dim::Seq),
            ],
            ElemType::F32,
            Role::Activation,
        )
        .unwrap();
    let wo = param(&mut g, "wo", &[("d_in", 16), ("d_out", 16)]);
    let o = act(&mut g, "o", 16, Role::Activation);
    g.push(
        Op::Attention {
            heads: 2,
            kv_heads: 2,
            causal: true,
        },
        &[qkv],
        &[ctx, probs],
    )
    .unwrap();
    g.push(Op::Linear, &[ctx, wo], &[o]).unwrap();
    out.push(("attention, projection", g));

    let mut g = Graph::new();
    let x = act(&mut g, "x", 16, Role::Input);
    let gamma = param(&mut g, "gamma", &[("hidden", 16)]);
    let beta = param(&mut g, "beta", &[("hidden", 16)]);
    let ln = act(&mut g, "ln", 16, Role::Activation);
    let stat = |g: &mut Graph, n: &str| {
        g.add_tensor(
            n,
            &[("batch", Dim::Batch), ("seq", Dim::Seq)],
            ElemType::F32,
            Role::Activation,
        )
        .unwrap()
    };
    let mean = stat(&mut g, "mean");
    let rstd = stat(&mut g, "rstd");
    let w = param(&mut g, "w", &[("d_in", 16), ("d_out", 8)]);
    let y = act(&mut g, "y", 8, Role::Activation);
    g.push(
        Op::LayerNorm {
            eps: 1e-5,
            residual: false,
        },
        &[x, gamma, beta],
        &[ln, mean, rstd],
    )
    .unwrap();
    g.push(Op::Linear, &[ln, w], &[y]).unwrap();
    out.push(("layer norm, linear", g));

    let mut g = Graph::new();
    let bs = [("batch", Dim::Batch), ("seq", Dim::Seq)];
    let ids = g
        .add_tensor("ids", &bs, ElemType::U32, Role::Input)
        .unwrap();
    let labels = g
        .add_tensor("labels", &bs, ElemType::U32, Role::Input)
        .unwrap();
    let table = param(&mut g, "table", &[("vocab", 16), ("hidden", 16)]);
    let logits = act(&mut g, "logits", 16, Role::Activation);
    let loss = g
        .add_tensor("loss", &bs, ElemType::F32, Role::Loss)
        .unwrap();
    g.push(Op::Embedding, &[ids, table], &[logits]).unwrap();
    g.push(
        Op::CrossEntropy {
            ignore_index: u32::MAX,
        },
        &[logits, labels],
        &[loss],
    )
    .unwrap();
    derive_backward(&mut g).unwrap();
    out.push(("embedding, cross-entropy, backward", g));
    out
}

/// The least objective over every assignment of candidates, by enumeration.
fn brute_force(objective: &Objective<'_>) -> f64 {
    let g = objective.graph();
    let cands: Vec<Vec<LayoutChoice>> = g.ids().map(|t| objective.candidates(t).to_vec()).collect();
    let mut pick = vec![0usize; cands.len()];
    let mut best = f64::INFINITY;
    loop {
        let layouts: Vec<LayoutChoice> = pick.iter().zip(&cands).map(|(&i, c)| c[i]).collect();
        best = best.min(objective.cost(&layouts).unwrap());
        let mut i = 0;
        while i < pick.len() {
            pick[i] += 1;
            if pick[i] < cands[i].len() {
                break;
            }
            pick[i] = 0;
            i += 1;
        }
        if i == pick.len() {
            return best;
        }
    }
}

/// The plan's layouts of the tensors of the graph it planned.
fn planned_layouts(p: &Plan, g: &Graph) -> Vec<LayoutChoice> {
    g.ids().map(|t| p.layout(t)).collect()
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-9 * a.abs().max(b.abs()) + 1e-15
}

#[test]
fn the_exact_solver_agrees_with_brute_force() {
    let model = CostModel::analytic();
    let mut graphs: Vec<(String, Graph)> = small_real_graphs()
        .into_iter()
        .map(|(n, g)| (n.to_owned(), g))
        .collect();
    let mut rng = Rng(7);
    while graphs.len() < 16 {
        let g = random_graph(&mut rng);
        let vars = g.tensors().iter().filter(|t| t.axes.len() >= 2).count();
        if (3..=7).contains(&vars) {
            graphs.push((format!("random graph {}", graphs.len()), g));
        }
    }
    for (name, g) in &graphs {
        let objective = Objective::new(g, SMALL_SIZES, &model).unwrap();
        let best = brute_force(&objective);
        let optimal = plan(g, SMALL_SIZES, &model, Strategy::Optimal).unwrap();
        let at = objective.cost(&planned_layouts(&optimal, g)).unwrap();
        assert!(
            close(at, best),
            "{name}: exact {at} against brute force {best}\n{g}"
        );
        assert!(
            close(optimal.cost(), best),
            "{name}: the plan's cost {} is its objective {best}",
            optimal.cost()
        );
        let guided = plan(g, SMALL_SIZES, &model, Strategy::Guided).unwrap();
        assert!(close(guided.optimum().unwrap(), best), "{name}");
        assert!(
            guided.cost() >= best * (1.0 - 1e-9),
            "{name}: nothing beats the optimum"
        );
    }
}

#[test]
fn guided_is_never_worse_than_row_major_nor_optimal_than_guided() {
    let model = CostModel::analytic();
    let mut cases: Vec<(String, Graph, Sizes)> = Vec::new();
    for m in [Model::Encoder, Model::Decoder] {
        cases.push((
            format!("{m:?} MINI"),
            build(m, ModelConfig::MINI).unwrap(),
            SHIPPED,
        ));
        cases.push((format!("{m:?} tiny"), build(m, TINY).unwrap(), SMALL_SIZES));
        // A sequence no tile divides: R-Tiles pad it.
        cases.push((
            format!("{m:?} tiny, seq 10"),
            build(m, TINY).unwrap(),
            Sizes { batch: 2, seq: 10 },
        ));
    }
    let mut rng = Rng(11);
    for i in 0..12 {
        cases.push((format!("random {i}"), random_graph(&mut rng), SMALL_SIZES));
    }
    for (name, g, sizes) in &cases {
        let cost = |s| plan(g, *sizes, &model, s).unwrap().cost();
        let (rm, per_op, guided, optimal) = (
            cost(Strategy::RowMajor),
            cost(Strategy::PerOp),
            cost(Strategy::Guided),
            cost(Strategy::Optimal),
        );
        let slack = 1e-9 * rm;
        assert!(
            guided <= rm + slack,
            "{name}: guided {guided} > row-major {rm}"
        );
        assert!(
            optimal <= guided + slack,
            "{name}: optimal {optimal} > guided {guided}"
        );
        assert!(
            optimal <= per_op + slack,
            "{name}: optimal {optimal} > per-op {per_op}"
        );
    }
}

#[test]
fn a_plans_costs_add_up_and_match_its_objective() {
    let model = CostModel::analytic();
    let g = build(Model::Decoder, TINY).unwrap();
    let objective = Objective::new(&g, SMALL_SIZES, &model).unwrap();
    for s in Strategy::ALL {
        let p = plan(&g, SMALL_SIZES, &model, s).unwrap();
        assert_eq!(p.layouts().len(), p.graph().tensors().len(), "{s}");
        assert_eq!(p.node_costs().len(), p.graph().nodes().len(), "{s}");
        let sum: f64 = p.node_costs().iter().sum();
        assert!(close(sum, p.cost()), "{s}");
        let conversions: f64 = p.conversions().iter().map(|c| c.cost).sum();
        let on_converts: f64 = p
            .graph()
            .nodes()
            .iter()
            .zip(p.node_costs())
            .filter(|(n, _)| matches!(n.op, Op::Convert { .. }))
            .map(|(_, c)| c)
            .sum();
        assert!(close(conversions, on_converts), "{s}");
        let at = objective.cost(&planned_layouts(&p, &g)).unwrap();
        if matches!(s, Strategy::Guided | Strategy::Optimal) {
            assert!(
                close(at, p.cost()),
                "{s}: the plan costs what its objective says"
            );
        } else {
            // Forced reads can only cost more than the objective's cheaper ones.
            assert!(at <= p.cost() * (1.0 + 1e-9), "{s}");
        }
        // Every tensor's chosen candidate costs what the explanation says it does, and the
        // plan's own graph has every parameter's gradient.
        for t in g.ids() {
            let c = p.candidates(t).unwrap();
            assert!(c.costs.iter().any(|x| x.0 == p.layout(t)), "{s}");
        }
        for q in g.params() {
            assert_eq!(p.graph().grad(q), g.grad(q), "{s}");
        }
    }
    assert_eq!(
        plan(&g, SMALL_SIZES, &model, Strategy::RowMajor)
            .unwrap()
            .conversions()
            .len(),
        0
    );
    assert!(
        plan(&g, SMALL_SIZES, &model, Strategy::RowMajor)
            .unwrap()
            .layouts()
            .iter()
            .all(|&l| l == LayoutChoice::RowMajor)
    );
}

/// Every `Convert` of a plan reads the tensor as stored and writes the copy its consumer
/// reads; without the conversions the plan's graph is the graph planned.
fn check_conversions(p: &Plan, g: &Graph, name: &str) {
    let pg = p.graph();
    let mut converts = 0;
    for c in p.conversions() {
        converts += 1;
        assert!(
            matches!(pg.tensor(c.source).elem, ElemType::F32 | ElemType::F16),
            "{name}: integer tensor `{}` converted",
            pg.tensor(c.source).name
        );
        let node = &pg.nodes()[c.node.index()];
        assert!(matches!(node.op, Op::Convert { .. }), "{name}");
        assert_eq!(
            (node.inputs.as_slice(), node.outputs.as_slice()),
            ([c.source].as_slice(), [c.copy].as_slice())
        );
        let consumer = &pg.nodes()[c.consumer.index()];
        assert!(
            consumer.inputs.contains(&c.copy),
            "{name}: the consumer reads the copy"
        );
        assert_eq!(
            node.op,
            Op::Convert {
                phase: consumer.op.phase()
            },
            "{name}: in the consumer's pass"
        );
        assert_eq!(
            p.layout(c.source),
            c.from,
            "{name}: it reads the tensor as stored"
        );
        assert_eq!(p.layout(c.copy), c.to, "{name}: it writes the layout read");
        assert_ne!(c.from, c.to, "{name}");
        assert_ne!(
            c.class,
            Conversion::Free,
            "{name}: a free conversion is no conversion"
        );
        let (s, t) = (pg.tensor(c.source), pg.tensor(c.copy));
        assert_eq!(
            (&s.axes, s.elem),
            (&t.axes, t.elem),
            "{name}: a copy of the same tensor"
        );
        assert!(p.is_copy(c.copy) && !p.is_copy(c.source));
        // The copy is read by that consumer alone.
        let readers = pg
            .nodes()
            .iter()
            .filter(|n| n.inputs.contains(&c.copy))
            .count();
        assert_eq!(readers, 1, "{name}");
    }
    let is_convert = |n: &&fblayout_plan::graph::Node| matches!(n.op, Op::Convert { .. });
    let before = g.nodes().iter().filter(is_convert).count();
    let after = pg.nodes().iter().filter(is_convert).count();
    assert_eq!(
        before + converts,
        after,
        "{name}: every inserted Convert is listed"
    );
    // Reading each copy as its source gives back the graph planned.
    let source_of = |t: TensorId| {
        p.conversions()
            .iter()
            .find(|c| c.copy == t)
            .map_or(t, |c| c.source)
    };
    let inserted: Vec<usize> = p.conversions().iter().map(|c| c.node.index()).collect();
    let kept: Vec<_> = pg
        .nodes()
        .iter()
        .enumerate()
        .filter(|(i, _)| !inserted.contains(i))
        .map(|(_, n)| n)
        .collect();
    assert_eq!(kept.len(), g.nodes().len(), "{name}");
    for (a, b) in kept.iter().zip(g.nodes()) {
        assert_eq!(a.op, b.op, "{name}");
        let inputs: Vec<TensorId> = a.inputs.iter().map(|&t| source_of(t)).collect();
        assert_eq!(inputs, b.inputs, "{name}");
        assert_eq!(a.outputs, b.outputs, "{name}");
    }
}

#[test]
fn per_op_plans_convert_wherever_a_consumer_wants_another_layout() {
    let model = CostModel::analytic();
    for m in [Model::Encoder, Model::Decoder] {
        let g = build(m, ModelConfig::MINI).unwrap();
        for s in Strategy::ALL {
            let p = plan(&g, SHIPPED, &model, s).unwrap();
            check_conversions(&p, &g, &format!("{m:?} {s}"));
        }
        let p = plan(&g, SHIPPED, &model, Strategy::PerOp).unwrap();
        assert!(
            !p.conversions().is_empty(),
            "{m:?}: per-op choices disagree somewhere"
        );
        // A graph with conversions plans again: its Converts are priced by their class, and
        // the optimum over it is no worse than the per-op plan that made it.
        let again = plan(p.graph(), SHIPPED, &model, Strategy::Optimal).unwrap();
        assert!(again.cost() <= p.cost() * (1.0 + 1e-9), "{m:?}");
        check_conversions(&again, p.graph(), &format!("{m:?} planned again"));
    }
    let mut rng = Rng(3);
    for i in 0..8 {
        let g = random_graph(&mut rng);
        let p = plan(&g, SMALL_SIZES, &model, Strategy::PerOp).unwrap();
        check_conversions(&p, &g, &format!("random {i}"));
    }
}

#[test]
fn the_explanation_says_why_a_tensor_has_its_layout() {
    let g = build(Model::Encoder, TINY).unwrap();
    let p = plan(&g, SHIPPED, &CostModel::analytic(), Strategy::Guided).unwrap();
    let text = p.to_string();
    let probs = g.find("l0.attn.probs").unwrap();
    let line = text
        .lines()
        .find(|l| l.trim_start().starts_with("l0.attn.probs "))
        .expect("a line for the probabilities");
    assert!(line.contains(&p.layout(probs).to_string()), "{line}");
    assert!(line.contains("(saved)"), "{line}");
    for c in &p.candidates(probs).unwrap().costs {
        assert!(
            line.contains(&format!("{} ", c.0.short()))
                || line.contains(&format!("{}* ", c.0.short())),
            "{line}"
        );
    }
    assert!(
        text.starts_with("guided plan, batch 32 × sequence 128"),
        "{text}"
    );
    assert!(text.contains("exact optimum"));
}

#[test]
fn the_svg_table_draws_every_tensor_in_its_layouts_colour() {
    let g = build(Model::Decoder, TINY).unwrap();
    let p = plan(&g, SMALL_SIZES, &CostModel::analytic(), Strategy::PerOp).unwrap();
    let svg = p.svg_table();
    let doc = roxmltree::Document::parse(&svg).expect("well-formed SVG");
    let titles: Vec<String> = doc
        .descendants()
        .filter(|n| n.has_tag_name("title"))
        .filter_map(|n| n.text().map(str::to_owned))
        .collect();
    for t in p.graph().ids() {
        let want = format!("{} — {}", p.graph().tensor(t).name, p.layout(t));
        assert!(titles.contains(&want), "no chip `{want}`");
    }
    // A legend entry per layout used, and every operation drawn.
    let texts: Vec<&str> = doc
        .descendants()
        .filter(|n| n.has_tag_name("text"))
        .filter_map(|n| n.text())
        .collect();
    let mut used = p.layouts().to_vec();
    used.sort();
    used.dedup();
    for l in used {
        assert!(
            texts.contains(&l.to_string().as_str()),
            "no legend entry for {l}"
        );
    }
    let ops = texts.iter().filter(|t| **t == "convert").count();
    assert_eq!(ops, p.conversions().len());
}

#[test]
fn the_svg_overview_has_a_strip_per_block_and_marks_every_conversion() {
    let config = TINY.with_layers(3);
    let g = build(Model::Encoder, config).unwrap();
    let p = plan(&g, SMALL_SIZES, &CostModel::analytic(), Strategy::PerOp).unwrap();
    assert!(
        !p.conversions().is_empty(),
        "the test needs a plan with conversions"
    );
    let svg = p.svg();
    let doc = roxmltree::Document::parse(&svg).expect("well-formed SVG");
    let texts: Vec<&str> = doc
        .descendants()
        .filter(|n| n.has_tag_name("text"))
        .filter_map(|n| n.text())
        .collect();
    for b in 0..3 {
        let label = format!("block {b}");
        assert!(texts.contains(&label.as_str()), "no strip `{label}`");
    }
    assert!(texts.contains(&"outside the blocks"));
    // Every tensor of the step has a cell (a chip in the block table is extra), coloured by
    // its layout; and the cells outlined in red are exactly the conversions' outputs.
    let cells: Vec<(String, String, String)> = doc
        .descendants()
        .filter(|n| n.has_tag_name("g"))
        .filter_map(|g| {
            let title = g
                .children()
                .find(|c| c.has_tag_name("title"))?
                .text()?
                .to_owned();
            let rect = g.children().find(|c| c.has_tag_name("rect"))?;
            (rect.attribute("width") == Some("8")).then(|| {
                (
                    title,
                    rect.attribute("fill").unwrap_or_default().to_owned(),
                    rect.attribute("stroke").unwrap_or_default().to_owned(),
                )
            })
        })
        .collect();
    assert_eq!(cells.len(), p.graph().tensors().len());
    let fills: std::collections::HashMap<String, String> = cells
        .iter()
        .map(|(t, f, _)| (t.clone(), f.clone()))
        .collect();
    for t in p.graph().ids() {
        let want = format!("{} — {}", p.graph().tensor(t).name, p.layout(t));
        assert!(fills.contains_key(&want), "no cell `{want}`");
    }
    let red = cells.iter().filter(|(_, _, s)| s == "#d62728").count();
    assert_eq!(red, p.conversions().len());
    // The table above the strips draws block 0 only: far fewer rows than the whole step.
    let ops = doc
        .descendants()
        .filter(|n| n.has_tag_name("rect") && n.attribute("rx") == Some("8"))
        .count();
    assert!(
        ops > 0 && ops * 3 < p.graph().nodes().len(),
        "{ops} rows drawn"
    );
}

#[test]
fn bad_assignments_are_typed_errors() {
    let g = build(Model::Encoder, TINY).unwrap();
    let objective = Objective::new(&g, SMALL_SIZES, &CostModel::analytic()).unwrap();
    let err = objective.cost(&[LayoutChoice::RowMajor]).unwrap_err();
    assert!(matches!(err, PlanError::Assignment { .. }), "{err}");
    let mut all = vec![LayoutChoice::RowMajor; g.tensors().len()];
    let gamma = g.find("embed_ln.gamma").unwrap();
    all[gamma.index()] = LayoutChoice::RTile(4);
    let err = objective.cost(&all).unwrap_err();
    assert!(err.to_string().contains("embed_ln.gamma"), "{err}");
}

#[test]
fn the_shipped_graphs_plans_are_snapshotted() {
    let model = CostModel::analytic();
    let mut summary = String::new();
    for (name, m) in [("encoder", Model::Encoder), ("decoder", Model::Decoder)] {
        let g = build(m, ModelConfig::MINI).unwrap();
        for s in Strategy::ALL {
            let p = plan(&g, SHIPPED, &model, s).unwrap();
            summary += &format!(
                "{name}: {}",
                p.to_string().lines().take(3).collect::<Vec<_>>().join("\n") + "\n"
            );
            if matches!(s, Strategy::Guided | Strategy::PerOp) {
                insta::assert_snapshot!(
                    format!("{name}_{}_plan", s.to_string().replace('-', "_")),
                    p.to_string()
                );
            }
        }
    }
    insta::assert_snapshot!("shipped_plans_summary", summary);
}
