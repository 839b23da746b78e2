//! The objective every strategy minimises: the predicted seconds of a graph's operations for
//! one layout per tensor.
//!
//! The cost of each operation splits into **terms**, each over the layouts of at most three
//! tensors (its *scope*): one per input read (over the input, and the first output when the
//! input is read in the output's order), one for a matrix product's two operands together
//! (the rate depends on both), one per output write, and the launch. An input term is the
//! cheaper of reading the tensor in its layout and converting it to another candidate first
//! and reading that (a conversion inserted only where it pays for itself): the minimum is
//! folded into the term, and the layout it reads is remembered for the plan.
//!
//! The objective of an assignment is the sum of every term at that assignment; a term is a
//! small table over its scope, so the exact optimum is a minimum of a sum of small factors
//! ([`exact`](super::exact)).
//!
//! A bias or an addition the product before it does in its epilogue ([`Graph::epilogues`]) has
//! no terms: it runs no kernel of its own (the product's write of its output stands for the
//! biased or added write).
//!
//! Each operand's term is multiplied by its kernel factor, by the operation's kind and the
//! operand's layout ([`kernels`](super::kernels)); 1 where the model has none.
//!
//! Two rules come from the kernels, which read a gradient through the view of the tensor it
//! is the gradient of: a **tie** term over every gradient and its tensor costs nothing when
//! both have one layout and a penalty of 10⁶ s otherwise, so no strategy separates them (copies
//! made by a `Convert` are exempt: they are the other layout); and the operations of
//! `access::reads_stored` read their inputs without conversion.

use fblayout_core::layout::{Conversion, ElemType, TensorLayout, classify_layouts, padded_extents};

use super::PlanError;
use super::access::{Access, Matmul, Walk, accesses, reads_stored};
use super::cost::{Class, CostModel, Factors, walk_classes};
use super::kernels::{KernelKind, OperandKind};
use crate::graph::{Dim, Graph, Op, Role, Sizes, TensorId};

/// The seconds a tie term adds when a gradient and its tensor have different layouts: more
/// than any step, so that no minimum separates them.
pub(crate) const TIE_PENALTY: f64 = 1e6;
use crate::layouts::{LayoutChoice, run_extents};

/// A tensor stored under one candidate layout.
#[derive(Debug, Clone)]
pub(crate) struct Stored {
    /// Its buffer in bytes, padding included.
    pub(crate) bytes: u64,
    /// The class of a walk along each axis.
    pub(crate) classes: Vec<Class>,
    /// The axis that is fastest in memory.
    pub(crate) inner: usize,
}

/// What every tensor of one shape and element type costs under each candidate.
#[derive(Debug, Clone)]
pub(crate) struct ShapeCosts {
    pub(crate) candidates: Vec<LayoutChoice>,
    pub(crate) stored: Vec<Stored>,
    /// The classification of the conversion `[from][to]`.
    pub(crate) conversion: Vec<Vec<Conversion>>,
    /// Its seconds `[from][to]`.
    pub(crate) conversion_cost: Vec<Vec<f64>>,
}

/// What a term prices.
#[derive(Debug, Clone)]
enum Kind {
    /// A constant: the launch.
    Launch(f64),
    /// A conversion already in the graph: `x → y`.
    Convert { x: usize, y: usize },
    /// The reads of the inputs at these positions (one, or the two operands of a product).
    Reads {
        positions: Vec<usize>,
        matmul: Option<Matmul>,
    },
    /// The write of the output at this position.
    Write { position: usize },
    /// A gradient and the tensor it is the gradient of (see the module docs).
    Tie { grad: usize, of: usize },
}

/// One term of the objective (see the module docs).
#[derive(Debug, Clone)]
pub(crate) struct Term {
    /// The operation it belongs to.
    pub(crate) node: usize,
    kind: Kind,
    /// The tensors (by index) whose layouts it depends on, distinct.
    pub(crate) scope: Vec<usize>,
    /// Its seconds at every assignment of the scope (mixed radix, last scope entry fastest).
    pub(crate) table: Vec<f64>,
}

/// The layouts an operation reads its inputs through, and what the reads and conversions cost.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Priced {
    /// Seconds of the operation itself.
    pub(crate) op: f64,
    /// `(input position, layout read)` for each input read through another layout than its
    /// own, with the conversion's seconds.
    pub(crate) conversions: Vec<(usize, LayoutChoice, f64)>,
}

/// The objective of a graph at a run's sizes under a cost model (see the module docs).
#[derive(Debug, Clone)]
pub struct Objective<'g> {
    pub(crate) graph: &'g Graph,
    pub(crate) sizes: Sizes,
    factors: Factors,
    /// Each tensor's shape class (an index into `shapes`).
    shape_of: Vec<usize>,
    pub(crate) shapes: Vec<ShapeCosts>,
    pub(crate) terms: Vec<Term>,
    /// The terms of each node.
    pub(crate) node_terms: Vec<Vec<usize>>,
    /// The terms each tensor is in the scope of.
    pub(crate) tensor_terms: Vec<Vec<usize>>,
    /// For each gradient tied to its tensor, that tensor (by index).
    pub(crate) tied: Vec<Option<usize>>,
    /// The tensors tied together with each tensor (itself included): one layout for all.
    group: Vec<Vec<usize>>,
}

impl<'g> Objective<'g> {
    /// The objective of `graph` at `sizes` under `model`: every candidate layout of every
    /// tensor built and bound, every conversion between candidates classified.
    pub fn new(graph: &'g Graph, sizes: Sizes, model: &CostModel) -> Result<Self, PlanError> {
        let factors = model.factors.clone();
        let mut keys: Vec<(Vec<Dim>, ElemType)> = Vec::new();
        let mut shapes = Vec::new();
        let mut shape_of = Vec::with_capacity(graph.tensors().len());
        for t in graph.ids() {
            let tensor = graph.tensor(t);
            let key = (tensor.axes.iter().map(|a| a.dim).collect(), tensor.elem);
            let index = match keys.iter().position(|k| *k == key) {
                Some(i) => i,
                None => {
                    keys.push(key);
                    shapes.push(shape_costs(graph, t, sizes, &factors)?);
                    shapes.len() - 1
                }
            };
            shape_of.push(index);
        }
        let mut objective = Self {
            graph,
            sizes,
            factors,
            shape_of,
            shapes,
            terms: Vec::new(),
            node_terms: vec![Vec::new(); graph.nodes().len()],
            tensor_terms: vec![Vec::new(); graph.tensors().len()],
            tied: vec![None; graph.tensors().len()],
            group: Vec::new(),
        };
        // A bias or addition the product before it does (Graph::epilogues) runs no kernel of its
        // own.
        let folded: Vec<bool> = {
            let mut f = vec![false; graph.nodes().len()];
            for j in graph.epilogues().into_iter().flatten() {
                f[j] = true;
            }
            f
        };
        for n in (0..graph.nodes().len()).filter(|&n| !folded[n]) {
            for (kind, scope) in objective.kinds(n) {
                let mut term = Term {
                    node: n,
                    kind,
                    scope,
                    table: Vec::new(),
                };
                term.table = objective.tabulate(&term);
                let id = objective.terms.len();
                objective.node_terms[n].push(id);
                for &t in &term.scope {
                    objective.tensor_terms[t].push(id);
                }
                objective.terms.push(term);
            }
        }
        let copies: Vec<TensorId> = graph
            .nodes()
            .iter()
            .filter(|n| matches!(n.op, Op::Convert { .. }))
            .flat_map(|n| n.outputs.iter().copied())
            .collect();
        for g in graph.ids() {
            if let Role::Grad { of } = graph.tensor(g).role {
                let (grad, of) = (g.index(), of.index());
                if copies.contains(&g) || objective.shape_of[grad] != objective.shape_of[of] {
                    continue;
                }
                let mut term = Term {
                    node: 0,
                    kind: Kind::Tie { grad, of },
                    scope: distinct(&[of, grad]),
                    table: Vec::new(),
                };
                term.table = objective.tabulate(&term);
                let id = objective.terms.len();
                for &t in &term.scope {
                    objective.tensor_terms[t].push(id);
                }
                objective.terms.push(term);
                objective.tied[grad] = Some(of);
            }
        }
        objective.group = groups(&objective.tied);
        Ok(objective)
    }

    /// The graph.
    pub fn graph(&self) -> &'g Graph {
        self.graph
    }

    /// The candidate layouts of `t`.
    pub fn candidates(&self, t: TensorId) -> &[LayoutChoice] {
        &self.shape(t.index()).candidates
    }

    /// The objective (predicted seconds) of `layouts`, one per tensor of the graph; fails
    /// when one is not a candidate of its tensor or the count is wrong.
    pub fn cost(&self, layouts: &[LayoutChoice]) -> Result<f64, PlanError> {
        let assignment = self.assignment(layouts)?;
        Ok(self.total(&assignment))
    }

    /// `layouts` as candidate indices.
    pub(crate) fn assignment(&self, layouts: &[LayoutChoice]) -> Result<Vec<u8>, PlanError> {
        if layouts.len() != self.graph.tensors().len() {
            return Err(PlanError::Assignment {
                detail: format!(
                    "{} layouts for {} tensors",
                    layouts.len(),
                    self.graph.tensors().len()
                ),
            });
        }
        layouts
            .iter()
            .enumerate()
            .map(|(t, l)| {
                let c = &self.shape(t).candidates;
                c.iter()
                    .position(|x| x == l)
                    .map(|i| i as u8)
                    .ok_or_else(|| PlanError::Assignment {
                        detail: format!(
                            "`{}` can't be {l}: its candidates are {}",
                            self.graph.tensors()[t].name,
                            c.iter()
                                .map(|c| c.to_string())
                                .collect::<Vec<_>>()
                                .join(", ")
                        ),
                    })
            })
            .collect()
    }

    /// The candidate layout `index` of tensor `t`.
    pub(crate) fn choice(&self, t: usize, index: u8) -> LayoutChoice {
        self.shape(t).candidates[usize::from(index)]
    }

    /// The number of candidates of tensor `t`.
    pub(crate) fn arity(&self, t: usize) -> usize {
        self.shape(t).candidates.len()
    }

    pub(crate) fn shape(&self, t: usize) -> &ShapeCosts {
        &self.shapes[self.shape_of[t]]
    }

    /// The sum of every term at `assignment` (candidate indices by tensor).
    pub(crate) fn total(&self, assignment: &[u8]) -> f64 {
        self.terms.iter().map(|t| self.at(t, assignment)).sum()
    }

    /// A term's table entry at `assignment`.
    pub(crate) fn at(&self, term: &Term, assignment: &[u8]) -> f64 {
        term.table[self.entry(&term.scope, |t| assignment[t])]
    }

    /// The table entry of `scope` at the assignment `of`.
    pub(crate) fn entry(&self, scope: &[usize], of: impl Fn(usize) -> u8) -> usize {
        scope
            .iter()
            .fold(0, |acc, &t| acc * self.arity(t) + usize::from(of(t)))
    }

    /// The tensors tied to `t` (a gradient and its tensor; `t` itself included): a move of
    /// one is a move of all.
    pub(crate) fn group(&self, t: usize) -> &[usize] {
        &self.group[t]
    }

    /// The terms touching any tensor of `t`'s group, each once.
    pub(crate) fn group_terms(&self, t: usize) -> Vec<usize> {
        let mut ids: Vec<usize> = self
            .group(t)
            .iter()
            .flat_map(|&m| self.tensor_terms[m].iter().copied())
            .collect();
        ids.sort_unstable();
        ids.dedup();
        ids
    }

    /// The seconds of the terms touching tensor `t`'s group when the group takes candidate `c`
    /// and every other tensor keeps `assignment`.
    pub(crate) fn touching(&self, t: usize, c: u8, assignment: &[u8]) -> f64 {
        let group = self.group(t);
        self.group_terms(t)
            .iter()
            .map(|&id| {
                let term = &self.terms[id];
                let at = |x: usize| if group.contains(&x) { c } else { assignment[x] };
                term.table[self.entry(&term.scope, at)]
            })
            .sum()
    }

    /// What node `n` costs at `assignment`: with `reads` given (input position → candidate
    /// index), each input is read through that layout (converted where it differs); without,
    /// through whichever is cheaper, as the objective has it.
    pub(crate) fn price_node(&self, n: usize, assignment: &[u8], reads: Option<&[u8]>) -> Priced {
        let mut priced = Priced::default();
        for &id in &self.node_terms[n] {
            let (total, conversion, chosen) = self.value(&self.terms[id], assignment, reads);
            priced.op += total - conversion;
            let node = &self.graph.nodes()[n];
            for (pos, r) in chosen {
                let t = node.inputs[pos].index();
                if r != assignment[t] {
                    let cost =
                        self.shape(t).conversion_cost[usize::from(assignment[t])][usize::from(r)];
                    priced.conversions.push((pos, self.choice(t, r), cost));
                }
            }
        }
        priced.conversions.sort_by_key(|c| c.0);
        priced
    }

    /// The terms of node `n` with their scopes.
    fn kinds(&self, n: usize) -> Vec<(Kind, Vec<usize>)> {
        let node = &self.graph.nodes()[n];
        let ix = |t: TensorId| t.index();
        if matches!(node.op, Op::Convert { .. }) {
            let (x, y) = (ix(node.inputs[0]), ix(node.outputs[0]));
            return vec![
                (Kind::Launch(self.factors.dispatch), vec![]),
                (Kind::Convert { x, y }, distinct(&[x, y])),
            ];
        }
        let table = accesses(self.graph, node, self.sizes);
        let out0 = node.outputs.first().map(|&o| ix(o));
        let likes = |list: &[Access]| list.iter().any(|a| a.walk == Walk::LikeOutput);
        let mut kinds = vec![(Kind::Launch(self.factors.dispatch), vec![])];
        let in_product = |pos: usize| table.matmul.is_some_and(|m| m.a.0 == pos || m.b.0 == pos);
        if let Some(m) = table.matmul {
            let positions = distinct(&[m.a.0, m.b.0]);
            let mut scope: Vec<usize> = positions.iter().map(|&p| ix(node.inputs[p])).collect();
            if positions.iter().any(|&p| likes(&table.inputs[p])) {
                scope.extend(out0);
            }
            kinds.push((
                Kind::Reads {
                    positions,
                    matmul: Some(m),
                },
                distinct(&scope),
            ));
        }
        for (pos, list) in table.inputs.iter().enumerate() {
            if in_product(pos) {
                continue;
            }
            let mut scope = vec![ix(node.inputs[pos])];
            if likes(list) {
                scope.extend(out0);
            }
            kinds.push((
                Kind::Reads {
                    positions: vec![pos],
                    matmul: None,
                },
                distinct(&scope),
            ));
        }
        for (pos, access) in table.outputs.iter().enumerate() {
            let mut scope = vec![ix(node.outputs[pos])];
            if access.walk == Walk::LikeOutput {
                scope.extend(out0);
            }
            kinds.push((Kind::Write { position: pos }, distinct(&scope)));
        }
        kinds
    }

    /// Every entry of a term's table.
    fn tabulate(&self, term: &Term) -> Vec<f64> {
        let radix: Vec<usize> = term.scope.iter().map(|&t| self.arity(t)).collect();
        let size: usize = radix.iter().product();
        let mut assignment = vec![0u8; self.graph.tensors().len()];
        (0..size)
            .map(|mut e| {
                for (i, &t) in term.scope.iter().enumerate().rev() {
                    assignment[t] = (e % radix[i]) as u8;
                    e /= radix[i];
                }
                self.value(term, &assignment, None).0
            })
            .collect()
    }

    /// A term's seconds at `assignment`, of which the conversions' seconds, and the layout
    /// each input it covers is read through (see [`Objective::price_node`] for `reads`).
    fn value(
        &self,
        term: &Term,
        assignment: &[u8],
        reads: Option<&[u8]>,
    ) -> (f64, f64, Vec<(usize, u8)>) {
        let node = &self.graph.nodes()[term.node];
        let f = &self.factors;
        match &term.kind {
            Kind::Launch(s) => (*s, 0.0, vec![]),
            Kind::Tie { grad, of } => {
                let apart = assignment[*grad] != assignment[*of];
                (if apart { TIE_PENALTY } else { 0.0 }, 0.0, vec![])
            }
            Kind::Convert { x, y } => {
                let same = self.shape_of[*x] == self.shape_of[*y];
                let (from, to) = (usize::from(assignment[*x]), usize::from(assignment[*y]));
                let cost = if same {
                    self.shape(*x).conversion_cost[from][to]
                } else {
                    0.0
                };
                (cost, 0.0, vec![])
            }
            Kind::Write { position } => {
                let t = node.outputs[*position].index();
                let access = accesses(self.graph, node, self.sizes).outputs[*position];
                let stored = &self.shape(t).stored[usize::from(assignment[t])];
                let class = self.class(t, assignment[t], access.walk, node, assignment);
                let scale = self.scale(node, t, assignment[t]);
                (
                    f.walk(stored.bytes, class, access.reduce) * scale,
                    0.0,
                    vec![],
                )
            }
            Kind::Reads { positions, matmul } => {
                let table = accesses(self.graph, node, self.sizes);
                // The layouts each covered input may be read through.
                let options: Vec<Vec<u8>> = positions
                    .iter()
                    .map(|&p| {
                        let t = node.inputs[p].index();
                        let own = assignment[t];
                        match reads {
                            Some(r) => vec![r[p]],
                            None if node.outputs.contains(&node.inputs[p])
                                || reads_stored(node.op) =>
                            {
                                vec![own]
                            }
                            // Its own layout first, so that a tie reads it directly.
                            None => std::iter::once(own)
                                .chain((0..self.arity(t) as u8).filter(|&c| c != own))
                                .collect(),
                        }
                    })
                    .collect();
                let mut best = (f64::INFINITY, 0.0, Vec::new());
                let mut pick = vec![0usize; positions.len()];
                loop {
                    let chosen: Vec<(usize, u8)> = positions
                        .iter()
                        .zip(&pick)
                        .zip(&options)
                        .map(|((&p, &i), o)| (p, o[i]))
                        .collect();
                    let (mut total, mut conversion) = (0.0, 0.0);
                    for &(p, r) in &chosen {
                        let t = node.inputs[p].index();
                        let shape = self.shape(t);
                        let c = shape.conversion_cost[usize::from(assignment[t])][usize::from(r)];
                        conversion += c;
                        total += c;
                        let scale = self.scale(node, t, r);
                        for access in &table.inputs[p] {
                            let class = self.class(t, r, access.walk, node, assignment);
                            total +=
                                f.walk(shape.stored[usize::from(r)].bytes, class, access.reduce)
                                    * scale;
                        }
                    }
                    if let Some(m) = matmul {
                        let read = |p: usize| chosen.iter().find(|c| c.0 == p).map_or(0, |c| c.1);
                        let class_of = |(p, walk): (usize, Walk)| {
                            self.class(node.inputs[p].index(), read(p), walk, node, assignment)
                        };
                        let scale_of = |(p, _): (usize, Walk)| {
                            self.scale(node, node.inputs[p].index(), read(p))
                        };
                        // Half the product's time to each operand: the multipliers add up.
                        total += m.flops / f.matmul.rate(class_of(m.a), class_of(m.b))
                            * (scale_of(m.a) + scale_of(m.b))
                            / 2.0;
                    }
                    if total < best.0 {
                        best = (total, conversion, chosen);
                    }
                    // The next combination of options.
                    let mut i = 0;
                    while i < pick.len() {
                        pick[i] += 1;
                        if pick[i] < options[i].len() {
                            break;
                        }
                        pick[i] = 0;
                        i += 1;
                    }
                    if i == pick.len() {
                        break;
                    }
                }
                best
            }
        }
    }

    /// The kernel multiplier ([`kernels`](super::kernels)) of tensor `t`, stored as candidate
    /// `c`, in `node`'s operation: 1 for a tensor with one candidate (its cost is the same
    /// under every assignment) and for a conversion.
    fn scale(&self, node: &crate::graph::Node, t: usize, c: u8) -> f64 {
        if self.arity(t) < 2 {
            return 1.0;
        }
        let operand = OperandKind::of(self.graph, TensorId(t as u32));
        KernelKind::of(node.op).map_or(1.0, |k| {
            self.factors.kernels.of(k, operand, self.choice(t, c))
        })
    }

    /// The class of walking tensor `t`, stored as candidate `c`, along `walk` in `node`,
    /// with the node's first output laid out as `assignment` says.
    fn class(
        &self,
        t: usize,
        c: u8,
        walk: Walk,
        node: &crate::graph::Node,
        assignment: &[u8],
    ) -> Class {
        let stored = &self.shape(t).stored[usize::from(c)];
        let rank = stored.classes.len();
        let axis = |from_end: usize| stored.classes[rank.saturating_sub(from_end + 1)];
        match walk {
            Walk::Own => Class::Contiguous,
            Walk::Last => axis(0),
            Walk::BeforeLast => axis(1),
            Walk::LikeOutput => {
                let Some(&o) = node.outputs.first() else {
                    return axis(0);
                };
                let o = o.index();
                let out = self.shape(o);
                let oc = assignment[o];
                if o == t {
                    return Class::Contiguous;
                }
                if self.shape_of[o] == self.shape_of[t] {
                    if oc == c {
                        return Class::Contiguous;
                    }
                    stored.classes[out.stored[usize::from(oc)].inner]
                } else if out.stored[usize::from(oc)].classes.len() == rank {
                    stored.classes[out.stored[usize::from(oc)].inner]
                } else {
                    // A broadcast operand (a bias, γ): walked along its last axis.
                    axis(0)
                }
            }
        }
    }
}

/// `list` without repeats, in order.
/// The groups of tensors that `tied` joins (a gradient to its tensor, transitively): for each
/// tensor, every member of its group in order.
fn groups(tied: &[Option<usize>]) -> Vec<Vec<usize>> {
    let root = |mut t: usize| {
        while let Some(of) = tied[t] {
            t = of;
        }
        t
    };
    let roots: Vec<usize> = (0..tied.len()).map(root).collect();
    (0..tied.len())
        .map(|t| (0..tied.len()).filter(|&m| roots[m] == roots[t]).collect())
        .collect()
}

fn distinct(list: &[usize]) -> Vec<usize> {
    let mut out: Vec<usize> = Vec::with_capacity(list.len());
    for &x in list {
        if !out.contains(&x) {
            out.push(x);
        }
    }
    out
}

/// The costs of every tensor shaped like `t`.
fn shape_costs(
    graph: &Graph,
    t: TensorId,
    sizes: Sizes,
    factors: &Factors,
) -> Result<ShapeCosts, PlanError> {
    let tensor = graph.tensor(t);
    let candidates = LayoutChoice::candidates_for(tensor);
    let extents = run_extents(tensor, sizes);
    let layout_err = |source| PlanError::Layout {
        tensor: tensor.name.clone(),
        source: Box::new(source),
    };
    let mut layouts: Vec<TensorLayout> = Vec::new();
    let mut stored = Vec::new();
    for &c in &candidates {
        // Graph names hold dots, which layout names may not: the id names it.
        let layout =
            c.layout(&format!("t{}", t.index()), tensor)
                .map_err(|e| PlanError::Layouts {
                    tensor: tensor.name.clone(),
                    choice: c,
                    source: Box::new(e),
                })?;
        let bound = layout.bind(&extents).map_err(layout_err)?;
        let (classes, inner) = walk_classes(&layout, &bound);
        stored.push(Stored {
            bytes: bound.len() * u64::from(tensor.elem.size_bytes()),
            classes,
            inner,
        });
        layouts.push(layout);
    }
    let n = candidates.len();
    let padded = layouts
        .iter()
        .map(|l| padded_extents(&l.view(), &extents))
        .collect::<Result<Vec<_>, _>>()
        .map_err(layout_err)?;
    let mut conversion = vec![vec![Conversion::Free; n]; n];
    let mut conversion_cost = vec![vec![0.0; n]; n];
    for from in 0..n {
        for to in 0..n {
            if from == to {
                continue;
            }
            // Layouts whose padded spaces differ can't be compared element by element: a copy
            // kernel converts them. Any other failure to classify is an error, never a cost.
            let class = if padded[from] == padded[to] {
                classify_layouts(&layouts[from], &layouts[to], &extents).map_err(layout_err)?
            } else {
                Conversion::GlobalCopy {
                    bytes: stored[from].bytes + stored[to].bytes,
                }
            };
            conversion_cost[from][to] = match class {
                Conversion::Free => 0.0,
                Conversion::InTile { .. } => {
                    factors.dispatch
                        + factors.walk(
                            stored[from].bytes + stored[to].bytes,
                            Class::Contiguous,
                            false,
                        )
                }
                Conversion::GlobalCopy { bytes } => {
                    let read = stored[from].classes[stored[to].inner];
                    factors.dispatch + factors.walk(bytes, read, false)
                }
            };
            conversion[from][to] = class;
        }
    }
    Ok(ShapeCosts {
        candidates,
        stored,
        conversion,
        conversion_cost,
    })
}
