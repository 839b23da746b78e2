//! Shape rules: what each contract checks of its operands' extents when an operation is added
//! to a graph ([`Graph::push`](crate::graph::Graph::push)). Extents compare symbolically: a run's
//! batch and sequence are equal to themselves only.

use crate::graph::{Dim, Graph, TensorId};

/// The extents of a node's operands, by role.
pub struct Dims {
    roles: Vec<(&'static str, Vec<Dim>)>,
}

impl Dims {
    /// The extents of tensors `ids` of `graph`, named by `roles`.
    pub(crate) fn new(graph: &Graph, roles: &[&'static str], ids: &[TensorId]) -> Self {
        Self {
            roles: roles
                .iter()
                .zip(ids)
                .map(|(&r, &t)| (r, graph.tensor(t).axes.iter().map(|a| a.dim).collect()))
                .collect(),
        }
    }

    /// The extents of role `role`.
    pub fn of(&self, role: &str) -> Result<&[Dim], String> {
        self.roles
            .iter()
            .find(|(n, _)| *n == role)
            .map(|(_, d)| d.as_slice())
            .ok_or_else(|| format!("it has no operand `{role}`"))
    }

    /// The extent of the last axis of `role`.
    pub fn last(&self, role: &str) -> Result<Dim, String> {
        self.of(role)?
            .last()
            .copied()
            .ok_or_else(|| format!("`{role}` has no axes"))
    }

    /// The extents of `role` but its last.
    pub fn leading(&self, role: &str) -> Result<&[Dim], String> {
        let d = self.of(role)?;
        Ok(&d[..d.len().saturating_sub(1)])
    }

    /// Checks that `role` has `rank` axes.
    pub fn rank(&self, role: &str, rank: usize) -> Result<(), String> {
        let d = self.of(role)?;
        if d.len() == rank {
            return Ok(());
        }
        Err(format!(
            "`{role}` has {} axes ({}), not {rank}",
            d.len(),
            show(d)
        ))
    }

    /// Checks that `role` has its leading batch and sequence axes (a token tensor).
    pub fn tokens(&self, role: &str) -> Result<(), String> {
        let d = self.of(role)?;
        if d.len() >= 2 && d[0] == Dim::Batch && d[1] == Dim::Seq {
            return Ok(());
        }
        Err(format!(
            "`{role}` ({}) does not start with the batch and sequence axes",
            show(d)
        ))
    }

    /// Checks that roles `a` and `b` have the same extents.
    pub fn same(&self, a: &str, b: &str) -> Result<(), String> {
        let (x, y) = (self.of(a)?, self.of(b)?);
        if x == y {
            return Ok(());
        }
        Err(format!(
            "`{a}` ({}) and `{b}` ({}) differ",
            show(x),
            show(y)
        ))
    }

    /// Checks that `role` has extents `want`.
    pub fn is(&self, role: &str, want: &[Dim]) -> Result<(), String> {
        let d = self.of(role)?;
        if d == want {
            return Ok(());
        }
        Err(format!("`{role}` is {}, not {}", show(d), show(want)))
    }
}

/// Extents as `[batch, seq, 64]`.
pub(crate) fn show(d: &[Dim]) -> String {
    let parts: Vec<String> = d.iter().map(ToString::to_string).collect();
    format!("[{}]", parts.join(", "))
}

/// `lead` followed by `last`.
pub(crate) fn then(lead: &[Dim], last: Dim) -> Vec<Dim> {
    let mut v = lead.to_vec();
    v.push(last);
    v
}
