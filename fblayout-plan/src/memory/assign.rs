//! Which buffer holds each tensor: tensors whose lives don't overlap share one.

use fblayout_kernels::runtime::granular;

use super::{BufferId, Live};
use crate::graph::{Graph, TensorId};

/// How tensors of one size are ordered among themselves before they are placed.
#[derive(Debug, Clone, Copy)]
enum Tie {
    /// The first written first.
    FirstWritten,
    /// The longest lived first.
    Longest,
    /// The last read last first.
    LastRead,
}

impl Tie {
    /// The orders tried: each gives a valid placement, and which packs best depends on the
    /// graph (on the shipped plans, each of the three wins one by a few MiB).
    const ALL: [Tie; 3] = [Tie::FirstWritten, Tie::Longest, Tie::LastRead];

    /// The key of a tensor alive over `l` within its size (smaller first).
    fn key(self, l: Live) -> i64 {
        match self {
            Tie::FirstWritten => l.first as i64,
            Tie::Longest => -((l.last - l.first) as i64),
            Tie::LastRead => -(l.last as i64),
        }
    }
}

/// The buffers (their sizes) and each tensor's buffer: largest tensors first, each in the
/// smallest buffer none of whose tensors' lives overlaps its own, else in a new one. A buffer is
/// as large as its first, largest tensor, so every later one fits. Tensors of one size are
/// placed in each of the [`Tie`] orders (then by id: deterministic), and the placement that
/// allocates the fewest bytes is kept (the first of equals). Without reuse, every tensor gets
/// its own buffer.
pub(super) fn assign(
    graph: &Graph,
    live: &[Option<Live>],
    bytes: &[u64],
    reuse: bool,
) -> (Vec<u64>, Vec<Option<BufferId>>) {
    let life = |t: TensorId| live[t.index()].expect("only live tensors are placed");
    let mut order: Vec<TensorId> = graph.ids().filter(|t| live[t.index()].is_some()).collect();
    if !reuse {
        return place(&order, live, bytes, false);
    }
    let mut best: Option<(Vec<u64>, Vec<Option<BufferId>>)> = None;
    for tie in Tie::ALL {
        order.sort_by_key(|&t| {
            (
                std::cmp::Reverse(bytes[t.index()]),
                tie.key(life(t)),
                t.index(),
            )
        });
        let placed = place(&order, live, bytes, true);
        let total = |p: &(Vec<u64>, _)| p.0.iter().sum::<u64>();
        if best.as_ref().is_none_or(|b| total(&placed) < total(b)) {
            best = Some(placed);
        }
    }
    best.expect("at least one order is tried")
}

/// Places the tensors of `order` in that order, each in the smallest buffer that holds no
/// tensor live with it (with `reuse`), else in a new buffer of its size.
fn place(
    order: &[TensorId],
    live: &[Option<Live>],
    bytes: &[u64],
    reuse: bool,
) -> (Vec<u64>, Vec<Option<BufferId>>) {
    let mut buffers: Vec<u64> = Vec::new();
    let mut holds: Vec<Vec<Live>> = Vec::new();
    let mut buffer_of: Vec<Option<BufferId>> = vec![None; bytes.len()];
    for &t in order {
        let l = live[t.index()].expect("only live tensors are placed");
        let need = granular(bytes[t.index()]);
        let chosen = (0..buffers.len())
            .filter(|&b| reuse && buffers[b] >= need)
            .filter(|&b| holds[b].iter().all(|h| !h.overlaps(&l)))
            .min_by_key(|&b| buffers[b]);
        let b = chosen.unwrap_or_else(|| {
            buffers.push(need);
            holds.push(Vec::new());
            buffers.len() - 1
        });
        holds[b].push(l);
        buffer_of[t.index()] = Some(BufferId(b as u32));
    }
    (buffers, buffer_of)
}
