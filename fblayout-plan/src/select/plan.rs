//! The plan: the graph rewritten with its conversions, and every tensor's layout and cost.

use fblayout_core::layout::Conversion;

use super::cost::{CostModel, Origin};
use super::objective::Objective;
use super::{PlanError, Strategy};
use crate::graph::{Dim, Graph, NodeId, Op, Role, Sizes, TensorId};
use crate::layouts::LayoutChoice;

/// A conversion the plan inserted.
#[derive(Debug, Clone, PartialEq)]
pub struct Inserted {
    /// The `Convert` operation in the plan's graph.
    pub node: NodeId,
    /// The operation that reads the converted copy.
    pub consumer: NodeId,
    /// The tensor converted.
    pub source: TensorId,
    /// Its converted copy.
    pub copy: TensorId,
    /// The layout it is stored in.
    pub from: LayoutChoice,
    /// The layout the consumer reads.
    pub to: LayoutChoice,
    /// Its class, by `fblayout_core`'s classification.
    pub class: Conversion,
    /// Its predicted seconds.
    pub cost: f64,
}

/// What a tensor's choice costs: for each candidate, the seconds of every operation touching
/// it (the other tensors as planned, conversions where they pay).
#[derive(Debug, Clone, PartialEq)]
pub struct Candidates {
    /// The tensor.
    pub tensor: TensorId,
    /// `(candidate, seconds)`, in candidate order.
    pub costs: Vec<(LayoutChoice, f64)>,
}

/// A layout plan (see the [module docs](super)).
#[derive(Debug, Clone)]
pub struct Plan {
    pub(crate) strategy: Strategy,
    pub(crate) sizes: Sizes,
    pub(crate) origin: Origin,
    pub(crate) graph: Graph,
    pub(crate) layouts: Vec<LayoutChoice>,
    pub(crate) node_costs: Vec<f64>,
    pub(crate) cost: f64,
    pub(crate) optimum: Option<f64>,
    pub(crate) inserted: Vec<Inserted>,
    pub(crate) candidates: Vec<Candidates>,
    /// The tensors of the graph planned (the copies come after them).
    pub(crate) planned: usize,
}

impl Plan {
    /// The graph with the plan's `Convert` operations.
    pub fn graph(&self) -> &Graph {
        &self.graph
    }

    /// Every tensor's layout, by id of [`Plan::graph`].
    pub fn layouts(&self) -> &[LayoutChoice] {
        &self.layouts
    }

    /// The layout of `t`.
    pub fn layout(&self, t: TensorId) -> LayoutChoice {
        self.layouts[t.index()]
    }

    /// The predicted seconds of one step: every operation's, conversions included.
    pub fn cost(&self) -> f64 {
        self.cost
    }

    /// The predicted seconds of each operation of [`Plan::graph`].
    pub fn node_costs(&self) -> &[f64] {
        &self.node_costs
    }

    /// The conversions inserted.
    pub fn conversions(&self) -> &[Inserted] {
        &self.inserted
    }

    /// What each candidate of `t` would cost (`None` for the plan's converted copies).
    pub fn candidates(&self, t: TensorId) -> Option<&Candidates> {
        self.candidates.get(t.index())
    }

    /// The strategy that made it.
    pub fn strategy(&self) -> Strategy {
        self.strategy
    }

    /// The run's sizes it was planned for.
    pub fn sizes(&self) -> Sizes {
        self.sizes
    }

    /// Where the cost model's factors came from.
    pub fn origin(&self) -> &Origin {
        &self.origin
    }

    /// The exact optimum's predicted seconds, where it was solved (guided and optimal plans).
    pub fn optimum(&self) -> Option<f64> {
        self.optimum
    }

    /// How far the plan is above the exact optimum, as a fraction (`0.02` = 2 % slower),
    /// where it was solved.
    pub fn gap(&self) -> Option<f64> {
        // Sums in another order differ in their last bits: no plan is below the optimum.
        self.optimum.map(|o| {
            if o > 0.0 {
                (self.cost / o - 1.0).max(0.0)
            } else {
                0.0
            }
        })
    }

    /// Whether `t` is a copy the plan inserted (not a tensor of the graph planned).
    pub fn is_copy(&self, t: TensorId) -> bool {
        t.index() >= self.planned
    }
}

/// The plan of `objective`'s graph at `assignment`, each node reading its inputs through
/// `reads` where given (else through the objective's cheaper choice).
pub(crate) fn assemble(
    objective: &Objective<'_>,
    model: &CostModel,
    strategy: Strategy,
    assignment: &[u8],
    reads: Option<&[Vec<u8>]>,
    optimum: Option<f64>,
) -> Result<Plan, PlanError> {
    let source = objective.graph;
    let mut graph = Graph::new();
    for t in source.tensors() {
        let axes: Vec<(&str, Dim)> = t.axes.iter().map(|a| (a.name.as_str(), a.dim)).collect();
        graph.add_tensor(t.name.clone(), &axes, t.elem, t.role)?;
    }
    // Constants (RoPE's tables) keep their values in the planned graph.
    graph.copy_constants(source);
    for t in source.ids() {
        if let Some(g) = source.grad(t) {
            graph.set_grad(t, g);
        }
    }
    let mut layouts: Vec<LayoutChoice> = source
        .ids()
        .map(|t| objective.choice(t.index(), assignment[t.index()]))
        .collect();
    let mut node_costs = Vec::new();
    let mut inserted = Vec::new();
    for (i, node) in source.nodes().iter().enumerate() {
        let priced = objective.price_node(i, assignment, reads.map(|r| r[i].as_slice()));
        let mut inputs = node.inputs.clone();
        for &(pos, to, cost) in &priced.conversions {
            let t = node.inputs[pos];
            let tensor = source.tensor(t);
            let from = layouts[t.index()];
            let role = match tensor.role {
                Role::Grad { of } => Role::Grad { of },
                _ => Role::Activation,
            };
            let axes: Vec<(&str, Dim)> = tensor
                .axes
                .iter()
                .map(|a| (a.name.as_str(), a.dim))
                .collect();
            let name = format!("{}.as_{}.n{i}", tensor.name, to.short());
            let copy = graph.add_tensor(name, &axes, tensor.elem, role)?;
            layouts.push(to);
            let phase = node.op.phase();
            let convert = graph.push(Op::Convert { phase }, &[t], &[copy])?;
            node_costs.push(cost);
            let shape = objective.shape(t.index());
            let at = |l: LayoutChoice| {
                shape
                    .candidates
                    .iter()
                    .position(|&c| c == l)
                    .expect("a candidate")
            };
            inserted.push(Inserted {
                node: convert,
                consumer: NodeId(convert.0 + 1),
                source: t,
                copy,
                from,
                to,
                class: shape.conversion[at(from)][at(to)],
                cost,
            });
            inputs[pos] = copy;
        }
        // The consumer comes right after its conversions.
        let first = inserted.len() - priced.conversions.len();
        let id = graph.push(node.op, &inputs, &node.outputs)?;
        for c in &mut inserted[first..] {
            c.consumer = id;
        }
        node_costs.push(priced.op);
    }
    let candidates = source
        .ids()
        .map(|t| {
            let i = t.index();
            Candidates {
                tensor: t,
                costs: (0..objective.arity(i) as u8)
                    .map(|c| (objective.choice(i, c), objective.touching(i, c, assignment)))
                    .collect(),
            }
        })
        .collect();
    let cost = node_costs.iter().fold(0.0, |a, c| a + c);
    Ok(Plan {
        strategy,
        sizes: objective.sizes,
        origin: model.origin.clone(),
        graph,
        layouts,
        node_costs,
        cost,
        optimum,
        inserted,
        candidates,
        planned: source.tensors().len(),
    })
}
