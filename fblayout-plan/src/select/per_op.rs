//! The per-operation choice: every operation picks the layouts best for itself alone.
//!
//! Each operation, in execution order, takes the layouts of its operands that minimise its
//! own cost, every input read directly through the layout it picked (no conversion inside
//! the operation). A tensor is stored as the first operation touching it wants — its
//! producer, or the first reader of an input, parameter or optimizer state — and an operation
//! that writes a tensor in place keeps the layout it is stored in. The kernels' two rules hold
//! here too (see [`objective`](super::objective)): a gradient is stored like its tensor, and
//! the operations of `reads_stored` read their inputs as stored. Every consumer that wants a
//! tensor in another layout gets a `Convert` before it (none where the two layouts are the
//! same function). This is the baseline the issue's ablation calls "per-op best layout with
//! explicit conversions".

use fblayout_core::layout::Conversion;

use super::access::reads_stored;
use super::objective::Objective;

/// The assignment (candidate index per tensor) and, for each node, the layout each input is
/// read through.
pub(crate) fn choose(objective: &Objective<'_>) -> (Vec<u8>, Vec<Vec<u8>>) {
    let graph = objective.graph;
    let n = graph.tensors().len();
    let mut stored: Vec<Option<u8>> = vec![None; n];
    let mut reads: Vec<Vec<u8>> = Vec::with_capacity(graph.nodes().len());
    let mut scratch = vec![0u8; n];
    for (i, node) in graph.nodes().iter().enumerate() {
        let mut vars: Vec<usize> = Vec::new();
        for t in node.inputs.iter().chain(&node.outputs) {
            let t = t.index();
            let is_input = node.inputs.iter().any(|i| i.index() == t);
            let is_output = node.outputs.iter().any(|o| o.index() == t);
            // A tensor written in place keeps its stored layout, an input of an operation
            // that reads as stored is read so, and a new gradient takes its tensor's layout.
            let fixed = match stored[t] {
                Some(s) if is_output || (is_input && reads_stored(node.op)) => Some(s),
                Some(_) => None,
                None => objective.tied[t].and_then(|of| stored[of]),
            };
            if let Some(s) = fixed {
                scratch[t] = s;
            } else if objective.arity(t) > 1 && !vars.contains(&t) {
                vars.push(t);
            } else if objective.arity(t) == 1 {
                scratch[t] = 0;
            }
        }
        let radix: Vec<usize> = vars.iter().map(|&v| objective.arity(v)).collect();
        let size: usize = radix.iter().product();
        let mut best = (f64::INFINITY, 0usize);
        for e in 0..size {
            let mut rest = e;
            for (k, &v) in vars.iter().enumerate().rev() {
                scratch[v] = (rest % radix[k]) as u8;
                rest /= radix[k];
            }
            let direct: Vec<u8> = node.inputs.iter().map(|t| scratch[t.index()]).collect();
            let cost = objective.price_node(i, &scratch, Some(&direct)).op;
            if cost < best.0 {
                best = (cost, e);
            }
        }
        let mut rest = best.1;
        for (k, &v) in vars.iter().enumerate().rev() {
            scratch[v] = (rest % radix[k]) as u8;
            rest /= radix[k];
        }
        for t in node.inputs.iter().chain(&node.outputs) {
            let t = t.index();
            stored[t].get_or_insert(scratch[t]);
        }
        reads.push(node.inputs.iter().map(|t| scratch[t.index()]).collect());
    }
    let assignment: Vec<u8> = stored.into_iter().map(|s| s.unwrap_or(0)).collect();
    // A wanted layout that is the same function as the stored one is read directly.
    for (node, wanted) in graph.nodes().iter().zip(reads.iter_mut()) {
        for (t, w) in node.inputs.iter().zip(wanted.iter_mut()) {
            let t = t.index();
            let from = usize::from(assignment[t]);
            if objective.shape(t).conversion[from][usize::from(*w)] == Conversion::Free {
                *w = assignment[t];
            }
        }
    }
    (assignment, reads)
}

/// Every input read through its own layout: no conversions.
pub(crate) fn own_reads(objective: &Objective<'_>, assignment: &[u8]) -> Vec<Vec<u8>> {
    objective
        .graph
        .nodes()
        .iter()
        .map(|node| node.inputs.iter().map(|t| assignment[t.index()]).collect())
        .collect()
}
