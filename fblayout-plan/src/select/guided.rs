//! Activation-guided selection: the saved activations first, then outward.
//!
//! The tensors the forward writes and the backward reads again ([`Graph::saved`]) are touched
//! by the most operations — their forward writer, forward readers and backward readers — so
//! their layout matters most. The selection runs in three steps:
//!
//! 1. **Saved tensors first**, largest first: each takes the candidate with the lowest total
//!    cost over every term that touches it, where a neighbour not yet chosen counts at its
//!    own best (it will still adapt).
//! 2. **Propagation**: from each chosen tensor to its gradient, then to the tensors it shares
//!    an operation with (the tensors feeding it and read with it), breadth first. Each
//!    reached tensor is chosen the same way, and on a tie it takes the layout of the tensor
//!    it was reached from, so one choice spreads along a chain of elementwise operations.
//!    Tensors no path reaches are chosen last, in graph order.
//! 3. **Refinement**: each tensor in turn re-takes its best candidate with every other
//!    tensor fixed, until a sweep changes nothing (or after [`SWEEPS`] sweeps).
//!
//! Conversions are part of every term (see [`objective`](super::objective)): a consumer reads
//! a tensor through another layout only where the conversion pays for itself.
//!
//! [`Graph::saved`]: crate::graph::Graph::saved

use std::collections::VecDeque;

use super::objective::Objective;
use crate::graph::Role;

/// The most refinement sweeps.
pub const SWEEPS: usize = 8;

/// The guided assignment (candidate index per tensor).
pub(crate) fn choose(objective: &Objective<'_>) -> Vec<u8> {
    let graph = objective.graph;
    let n = graph.tensors().len();
    let mut chosen: Vec<Option<u8>> = (0..n)
        .map(|t| (objective.arity(t) == 1).then_some(0))
        .collect();
    let mut saved: Vec<usize> = graph.saved().iter().map(|t| t.index()).collect();
    // Largest first (their row-major bytes), then in graph order.
    saved.sort_by_key(|&t| (std::cmp::Reverse(objective.shape(t).stored[0].bytes), t));
    let mut queue = VecDeque::new();
    for &t in &saved {
        if chosen[t].is_none() {
            let c = best(objective, t, &chosen, None);
            fix(objective, &mut chosen, t, c);
        }
        queue.push_back(t);
    }
    // The gradient of each tensor, by tensor.
    let mut grads: Vec<Vec<usize>> = vec![Vec::new(); n];
    for g in graph.ids() {
        if let Role::Grad { of } = graph.tensor(g).role {
            grads[of.index()].push(g.index());
        }
    }
    while let Some(from) = queue.pop_front() {
        let hint = chosen[from].map(|c| objective.choice(from, c));
        let mut next: Vec<usize> = grads[from].clone();
        for &id in &objective.tensor_terms[from] {
            next.extend(objective.terms[id].scope.iter().copied());
        }
        for t in next {
            if chosen[t].is_some() {
                continue;
            }
            let h = hint.and_then(|l| {
                objective
                    .shape(t)
                    .candidates
                    .iter()
                    .position(|&c| c == l)
                    .map(|i| i as u8)
            });
            let c = best(objective, t, &chosen, h);
            fix(objective, &mut chosen, t, c);
            queue.push_back(t);
        }
    }
    for t in 0..n {
        if chosen[t].is_none() {
            let c = best(objective, t, &chosen, None);
            fix(objective, &mut chosen, t, c);
        }
    }
    let mut assignment: Vec<u8> = chosen.into_iter().map(|c| c.unwrap_or(0)).collect();
    for _ in 0..SWEEPS {
        let mut changed = false;
        for t in 0..n {
            let own = assignment[t];
            let here = objective.touching(t, own, &assignment);
            let (c, cost) = (0..objective.arity(t) as u8)
                .map(|c| (c, objective.touching(t, c, &assignment)))
                .fold((own, here), |b, x| if x.1 < b.1 { x } else { b });
            // Only a strict gain moves (the whole tied group), so the sweeps end.
            if c != own && cost < here * (1.0 - 1e-12) {
                for &m in objective.group(t) {
                    assignment[m] = c;
                }
                changed = true;
            }
        }
        if !changed {
            break;
        }
    }
    assignment
}

/// Chooses candidate `c` for `t` and every tensor tied to it.
fn fix(objective: &Objective<'_>, chosen: &mut [Option<u8>], t: usize, c: u8) {
    for &m in objective.group(t) {
        chosen[m] = Some(c);
    }
}

/// The best candidate of `t` over the terms touching it, the tensors not yet chosen at their
/// best within each term; on a tie `hint`, then the lowest index.
fn best(objective: &Objective<'_>, t: usize, chosen: &[Option<u8>], hint: Option<u8>) -> u8 {
    let group = objective.group(t);
    let score = |c: u8| -> f64 {
        objective
            .group_terms(t)
            .iter()
            .map(|&id| {
                let term = &objective.terms[id];
                let radix: Vec<usize> = term.scope.iter().map(|&x| objective.arity(x)).collect();
                let size: usize = radix.iter().product();
                (0..size)
                    .filter_map(|e| {
                        let mut rest = e;
                        let mut ok = true;
                        for (i, &x) in term.scope.iter().enumerate().rev() {
                            let v = (rest % radix[i]) as u8;
                            rest /= radix[i];
                            let want = if group.contains(&x) {
                                Some(c)
                            } else {
                                chosen[x]
                            };
                            ok &= want.is_none_or(|w| w == v);
                        }
                        ok.then(|| term.table[e])
                    })
                    .fold(f64::INFINITY, f64::min)
            })
            .sum()
    };
    let scores: Vec<f64> = (0..objective.arity(t) as u8).map(score).collect();
    let low = scores.iter().copied().fold(f64::INFINITY, f64::min);
    let tied = |c: u8| scores[usize::from(c)] <= low * (1.0 + 1e-12);
    match hint {
        Some(h) if tied(h) => h,
        _ => (0..scores.len() as u8).find(|&c| tied(c)).unwrap_or(0),
    }
}
