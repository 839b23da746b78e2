//! Where the operations of a graph read an input as indices into another tensor (their
//! contracts' [`IndexBound`]s): what the executors check every step's inputs against, and what
//! the GPU step uploads with an index, which the memory plan counts.

use fblayout_core::layout::BoundView;

use super::{Along, IndexBound};
use crate::graph::{Graph, TensorId};

/// Where an index bound of the operations of `graph` reads input `t`: for each, the node, the
/// bound, and the extent its values must stay below (from the tensors as bound, `whole`).
pub(crate) fn index_limits(
    graph: &Graph,
    whole: &[BoundView],
    t: TensorId,
) -> Vec<(usize, IndexBound, u32)> {
    let mut out = Vec::new();
    for (i, node) in graph.nodes().iter().enumerate() {
        let contract = node.op.contract();
        let roles: Vec<(&str, TensorId)> = contract
            .inputs()
            .iter()
            .map(|s| s.name)
            .zip(node.inputs.iter().copied())
            .chain(
                contract
                    .outputs()
                    .iter()
                    .map(|s| s.name)
                    .zip(node.outputs.iter().copied()),
            )
            .collect();
        let find = |role: &str| roles.iter().find(|(n, _)| *n == role).map(|&(_, t)| t);
        for bound in contract.index_bounds() {
            if find(bound.ids) != Some(t) {
                continue;
            }
            let Some(into) = find(bound.into) else {
                continue;
            };
            let shape = whole[into.index()].shape();
            let extent = match bound.along {
                Along::First => shape.first().copied(),
                Along::Last => shape.last().copied(),
                Along::Fixed(n) => Some(u64::from(n)),
            };
            out.push((i, bound, extent.unwrap_or(0) as u32));
        }
    }
    out
}

/// Where a GPU kernel reads input `t` of `graph` uploaded with its index
/// ([`TokenIds`](fblayout_kernels::ops::TokenIds)): the first node whose index bound says so,
/// and the rows of the table it indexes (from the tensors as bound, `whole`); `None` where no
/// kernel does. The GPU step uploads such an input once a step, for every kernel that reads it.
pub(crate) fn uploaded_ids(
    graph: &Graph,
    whole: &[BoundView],
    t: TensorId,
) -> Option<(usize, u32)> {
    first_uploaded(&index_limits(graph, whole, t))
}

/// Of an input's index bounds (from [`index_limits`]), the first whose kernel reads it
/// uploaded with its index: its node and the rows of the table it indexes.
pub(crate) fn first_uploaded(limits: &[(usize, IndexBound, u32)]) -> Option<(usize, u32)> {
    limits
        .iter()
        .find(|(_, bound, _)| bound.uploaded)
        .map(|&(node, _, rows)| (node, rows))
}
