//! Outputs written over an input: one buffer for the two (see [`Contract::in_place`]).
//!
//! [`Contract::in_place`]: crate::ops

use super::Live;
use crate::graph::{Graph, TensorId};
use crate::layouts::LayoutChoice;

/// An output that takes the buffer of an input read for the last time by the operation that
/// writes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Shared {
    /// The input, dead once the operation has read it.
    pub(super) input: TensorId,
    /// The output, written over it.
    pub(super) output: TensorId,
}

/// The pairs of `graph` whose operation's contract lets its output take its input's memory,
/// where that holds here: the input is last read by that operation, the output first written
/// there, neither kept past its life, and both are stored alike (one layout, element type, axes and
/// size). `live` and `kept` are the plan's, `choices` the layouts, `bytes` the sizes.
pub(super) fn shared(
    graph: &Graph,
    choices: &[LayoutChoice],
    live: &[Option<Live>],
    kept: &[bool],
    bytes: &[u64],
) -> Vec<Shared> {
    let mut pairs = Vec::new();
    for (i, node) in graph.nodes().iter().enumerate() {
        let Some([from, to]) = node.op.contract().in_place() else {
            continue;
        };
        let (Some(input), Some(output)) = (node.input(from), node.output(to)) else {
            continue;
        };
        let (a, b) = (graph.tensor(input), graph.tensor(output));
        let ends_here = live[input.index()].is_some_and(|l| l.last == i) && !kept[input.index()];
        let starts_here =
            live[output.index()].is_some_and(|l| l.first == i) && !kept[output.index()];
        let alike = choices[input.index()] == choices[output.index()]
            && a.elem == b.elem
            && a.axes == b.axes
            && bytes[input.index()] == bytes[output.index()];
        if ends_here && starts_here && alike && !a.is_persistent() {
            pairs.push(Shared { input, output });
        }
    }
    pairs
}

/// The lives to place tensors by: each shared pair as its input, live from the input's write
/// to the output's last read, the output placed with it.
pub(super) fn placement_lives(live: &[Option<Live>], pairs: &[Shared]) -> Vec<Option<Live>> {
    let mut placed = live.to_vec();
    for p in pairs {
        let (a, b) = (live[p.input.index()], live[p.output.index()]);
        if let (Some(a), Some(b)) = (a, b) {
            placed[p.input.index()] = Some(Live {
                first: a.first,
                last: b.last,
            });
            placed[p.output.index()] = None;
        }
    }
    placed
}

/// The lives to count memory by: a shared input's bytes end before the operation that writes
/// its output over it, which counts the output's (one buffer, counted once).
pub(super) fn counted_lives(live: &[Option<Live>], pairs: &[Shared]) -> Vec<Option<Live>> {
    let mut counted = live.to_vec();
    for p in pairs {
        counted[p.input.index()] =
            live[p.input.index()]
                .filter(|l| l.last > l.first)
                .map(|l| Live {
                    first: l.first,
                    last: l.last - 1,
                });
    }
    counted
}
