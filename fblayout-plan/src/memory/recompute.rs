//! Recomputing cheap activations in the backward instead of keeping them.

use std::collections::HashSet;

use crate::graph::{Dim, Graph, GraphError, Node, Op, Phase, TensorId};
use crate::layouts::LayoutChoice;

/// Whether `op` is cheap enough to run twice: elementwise operations and normalisations (one
/// pass over their input).
fn cheap(op: Op) -> bool {
    matches!(
        op,
        Op::Bias
            | Op::Add
            | Op::Activation(_)
            | Op::Swiglu
            | Op::LayerNorm { .. }
            | Op::RmsNorm { .. }
    )
}

/// `graph` with cheap activations recomputed, and the layouts of its tensors (`layouts`, one
/// per tensor of `graph`, then one per tensor added).
///
/// A forward operation is recomputed when it is cheap (an elementwise operation or a
/// normalisation: bias, add, activation, SwiGLU, LayerNorm, RMSNorm), the backward reads its first
/// output, and everything it reads is kept for the backward anyway (read there, or persistent)
/// and is not itself recomputed: then the output need not live from the forward to the
/// backward, and recomputing it keeps nothing else alive. The rewrite duplicates the operation
/// just before the first backward operation that reads the output, writing fresh tensors
/// (`<name>.re`, in the original's layout), and the backward reads those. The duplicate is
/// still a forward operation ([`Op::phase`]), in the backward's part of the order.
pub fn recompute(
    graph: &Graph,
    layouts: &[LayoutChoice],
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
    let mut chosen: Vec<usize> = Vec::new();
    let mut recomputed: HashSet<TensorId> = HashSet::new();
    for (i, node) in graph.nodes().iter().enumerate() {
        if node.op.phase() != Phase::Forward || !cheap(node.op) {
            continue;
        }
        let y = node.outputs[0];
        if backward_reads.contains(&y)
            && node
                .inputs
                .iter()
                .all(|&t| kept(t) && !recomputed.contains(&t))
        {
            chosen.push(i);
            recomputed.insert(y);
        }
    }
    let mut g = graph.clone();
    let mut layouts = layouts.to_vec();
    // Each chosen node's duplicate: its outputs, fresh.
    let mut copies: Vec<(usize, Vec<TensorId>)> = Vec::with_capacity(chosen.len());
    for &i in &chosen {
        let mut outs = Vec::new();
        for &o in &graph.nodes()[i].outputs {
            let t = graph.tensor(o).clone();
            let axes: Vec<(&str, Dim)> = t.axes.iter().map(|a| (a.name.as_str(), a.dim)).collect();
            outs.push(g.add_tensor(format!("{}.re", t.name), &axes, t.elem, t.role)?);
            layouts.push(layouts[o.index()]);
        }
        copies.push((i, outs));
    }
    let mut nodes: Vec<Node> = Vec::with_capacity(graph.nodes().len() + copies.len());
    let mut emitted = vec![false; copies.len()];
    for node in graph.nodes() {
        let mut node = node.clone();
        if node.op.phase() != Phase::Forward {
            for (k, (i, outs)) in copies.iter().enumerate() {
                let original = &graph.nodes()[*i];
                let y = original.outputs[0];
                if !node.inputs.contains(&y) {
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
                    if *input == y {
                        *input = outs[0];
                    }
                }
            }
        }
        nodes.push(node);
    }
    *g.nodes_mut() = nodes;
    Ok((g, layouts))
}
