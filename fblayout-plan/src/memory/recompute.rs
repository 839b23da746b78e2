//! Recomputing activations in the backward instead of keeping them.

use std::collections::HashSet;
use std::fmt;
use std::str::FromStr;

use crate::graph::{Dim, Graph, GraphError, Node, Op, Phase, TensorId};
use crate::layouts::LayoutChoice;

/// Which forward operations [`recompute`] runs again in the backward.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Recompute {
    /// None: the backward reads what the forward kept.
    #[default]
    Nothing,
    /// The cheap ones: elementwise operations and normalisations (one pass over their input):
    /// bias, add, activation, SwiGLU, LayerNorm, RMSNorm.
    Cheap,
    /// Those and attention, whose probabilities (`batch × heads × seq²`) are then never kept
    /// from the forward: the attention's forward runs twice.
    Attention,
}

impl Recompute {
    /// Whether `op` is run again under this choice.
    fn covers(self, op: Op) -> bool {
        let cheap = matches!(
            op,
            Op::Bias
                | Op::Add
                | Op::Activation(_)
                | Op::Swiglu
                | Op::LayerNorm { .. }
                | Op::RmsNorm { .. }
        );
        let attention = matches!(op, Op::Attention { .. } | Op::AttentionSeparate { .. });
        match self {
            Self::Nothing => false,
            Self::Cheap => cheap,
            Self::Attention => cheap || attention,
        }
    }
}

impl fmt::Display for Recompute {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Nothing => "nothing",
            Self::Cheap => "cheap",
            Self::Attention => "attention",
        })
    }
}

impl FromStr for Recompute {
    type Err = String;

    /// `nothing`, `cheap` or `attention`, as [`Display`](fmt::Display) writes them.
    fn from_str(s: &str) -> Result<Self, String> {
        [Self::Nothing, Self::Cheap, Self::Attention]
            .into_iter()
            .find(|r| r.to_string() == s)
            .ok_or_else(|| format!("`{s}`: recompute `nothing`, `cheap` or `attention`"))
    }
}

/// `graph` with the activations `what` names recomputed, and the layouts of its tensors
/// (`layouts`, one per tensor of `graph`, then one per tensor added).
///
/// A forward operation is recomputed when `what` covers it, the backward reads one of its
/// outputs, and everything it reads is kept for the backward anyway (read there, or persistent)
/// and is not itself recomputed: then its outputs need not live from the forward to the
/// backward, and recomputing them keeps nothing else alive. The rewrite duplicates the
/// operation just before the first backward operation that reads one of its outputs, writing
/// fresh tensors (`<name>.re`, in the original's layouts), and the backward reads those. The
/// duplicate is still a forward operation ([`Op::phase`]), in the backward's part of the order.
pub fn recompute(
    graph: &Graph,
    layouts: &[LayoutChoice],
    what: Recompute,
) -> Result<(Graph, Vec<LayoutChoice>), GraphError> {
    if layouts.len() != graph.tensors().len() {
        return Err(GraphError::Shape {
            op: "recompute",
            detail: format!(
                "{} layouts for {} tensors",
                layouts.len(),
                graph.tensors().len()
            ),
        });
    }
    let backward_reads: HashSet<TensorId> = graph
        .nodes()
        .iter()
        .filter(|n| n.op.phase() != Phase::Forward)
        .flat_map(|n| n.inputs.iter().copied())
        .collect();
    let kept = |t: TensorId| backward_reads.contains(&t) || graph.tensor(t).is_persistent();
    // The operations run again, as they will run: the node itself, or for a fused residual norm
    // whose summands are not kept, the norm alone over its kept sum.
    let mut chosen: Vec<Node> = Vec::new();
    let mut recomputed: HashSet<TensorId> = HashSet::new();
    for node in graph.nodes() {
        if node.op.phase() != Phase::Forward || !what.covers(node.op) {
            continue;
        }
        let again = [Some(node.clone()), norm_alone(node)]
            .into_iter()
            .flatten()
            .find(|n| {
                n.outputs.iter().any(|y| backward_reads.contains(y))
                    && n.inputs
                        .iter()
                        .all(|&t| kept(t) && !recomputed.contains(&t))
            });
        if let Some(n) = again {
            recomputed.extend(n.outputs.iter().copied());
            chosen.push(n);
        }
    }
    let mut g = graph.clone();
    let mut layouts = layouts.to_vec();
    // Each chosen node's duplicate: its outputs, fresh.
    let mut copies: Vec<(&Node, Vec<TensorId>)> = Vec::with_capacity(chosen.len());
    for original in &chosen {
        let mut outs = Vec::new();
        for &o in &original.outputs {
            let t = graph.tensor(o).clone();
            let axes: Vec<(&str, Dim)> = t.axes.iter().map(|a| (a.name.as_str(), a.dim)).collect();
            outs.push(g.add_tensor(format!("{}.re", t.name), &axes, t.elem, t.role)?);
            layouts.push(layouts[o.index()]);
        }
        copies.push((original, outs));
    }
    let mut nodes: Vec<Node> = Vec::with_capacity(graph.nodes().len() + copies.len());
    let mut emitted = vec![false; copies.len()];
    for node in graph.nodes() {
        let mut node = node.clone();
        if node.op.phase() != Phase::Forward {
            for (k, (original, outs)) in copies.iter().enumerate() {
                if !original.outputs.iter().any(|y| node.inputs.contains(y)) {
                    continue;
                }
                if !emitted[k] {
                    nodes.push(Node {
                        op: original.op,
                        inputs: original.inputs.clone(),
                        outputs: outs.clone(),
                    });
                    emitted[k] = true;
                }
                for input in &mut node.inputs {
                    if let Some(j) = original.outputs.iter().position(|y| y == input) {
                        *input = outs[j];
                    }
                }
            }
        }
        nodes.push(node);
    }
    *g.nodes_mut() = nodes;
    Ok((g, layouts))
}

/// For a norm with a fused residual (`x, res, weights → sum, y, stats`), the norm alone that
/// makes `y` and the statistics again from the sum it wrote (`sum, weights → y, stats`):
/// what is recomputed where the summands are not kept for the backward but the sum is.
fn norm_alone(node: &Node) -> Option<Node> {
    let op = match node.op {
        Op::LayerNorm {
            eps,
            residual: true,
        } => Op::LayerNorm {
            eps,
            residual: false,
        },
        Op::RmsNorm {
            eps,
            residual: true,
        } => Op::RmsNorm {
            eps,
            residual: false,
        },
        _ => return None,
    };
    let (ins, outs) = (node.op.input_roles(), node.op.output_roles());
    let sum = node.output("sum")?;
    let weights = node.inputs.iter().zip(&ins);
    Some(Node {
        op,
        inputs: std::iter::once(sum)
            .chain(
                weights
                    .filter(|(_, r)| !matches!(**r, "x" | "res"))
                    .map(|(&t, _)| t),
            )
            .collect(),
        outputs: node
            .outputs
            .iter()
            .zip(&outs)
            .filter(|(_, r)| **r != "sum")
            .map(|(&t, _)| t)
            .collect(),
    })
}
