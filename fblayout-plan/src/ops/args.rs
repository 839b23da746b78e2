//! A node's operands bound by role name.

use crate::graph::TensorId;

use super::OpErr;

/// One operand: its role, its tensor and what the executor binds to it.
#[derive(Debug, Clone)]
pub struct Bound<T> {
    /// The role's name (for a fused projection, the name of the part: `q`, `k`, `v`).
    pub role: &'static str,
    /// The tensor whose buffer it addresses.
    pub tensor: TensorId,
    /// The executor's value: a view, a GPU argument, a host tensor.
    pub value: T,
}

/// The operands a node reads and writes, by role name (see [`crate::ops`]).
#[derive(Debug, Clone)]
pub struct Args<T> {
    op: &'static str,
    reads: Vec<Bound<T>>,
    writes: Vec<Bound<T>>,
}

impl<T> Args<T> {
    /// The operands of operation `op`.
    pub fn new(op: &'static str, reads: Vec<Bound<T>>, writes: Vec<Bound<T>>) -> Self {
        Self { op, reads, writes }
    }

    /// The operation's name.
    pub fn op(&self) -> &'static str {
        self.op
    }

    /// What it reads.
    pub fn reads(&self) -> &[Bound<T>] {
        &self.reads
    }

    /// What it writes.
    pub fn writes(&self) -> &[Bound<T>] {
        &self.writes
    }

    fn missing(&self, what: &str, role: &str) -> OpErr {
        OpErr::Shape {
            op: self.op,
            detail: format!("it has no {what} operand `{role}`"),
        }
    }

    /// The operand read as `role`.
    pub fn read_bound(&self, role: &str) -> Result<&Bound<T>, OpErr> {
        self.reads
            .iter()
            .find(|b| b.role == role)
            .ok_or_else(|| self.missing("read", role))
    }

    /// The operand written as `role`.
    pub fn write_bound(&self, role: &str) -> Result<&Bound<T>, OpErr> {
        self.writes
            .iter()
            .find(|b| b.role == role)
            .ok_or_else(|| self.missing("written", role))
    }

    /// The value read as `role`.
    pub fn read(&self, role: &str) -> Result<&T, OpErr> {
        self.read_bound(role).map(|b| &b.value)
    }

    /// The value written as `role`.
    pub fn write(&self, role: &str) -> Result<&T, OpErr> {
        self.write_bound(role).map(|b| &b.value)
    }

    /// The same roles with each value mapped by `f`.
    pub fn try_map<'s, U, E>(
        &'s self,
        mut f: impl FnMut(&'s Bound<T>) -> Result<U, E>,
    ) -> Result<Args<U>, E> {
        self.try_filter_map(|b| f(b).map(Some))
    }

    /// The roles for which `f` gives a value, each with that value; the others left out.
    pub fn try_filter_map<'s, U, E>(
        &'s self,
        mut f: impl FnMut(&'s Bound<T>) -> Result<Option<U>, E>,
    ) -> Result<Args<U>, E> {
        let mut map = |list: &'s [Bound<T>]| {
            let mut mapped = Vec::with_capacity(list.len());
            for b in list {
                if let Some(value) = f(b)? {
                    mapped.push(Bound {
                        role: b.role,
                        tensor: b.tensor,
                        value,
                    });
                }
            }
            Ok::<_, E>(mapped)
        };
        Ok(Args {
            op: self.op,
            reads: map(&self.reads)?,
            writes: map(&self.writes)?,
        })
    }

    /// The values by reference.
    pub fn as_ref(&self) -> Args<&T> {
        self.try_map(|b| Ok::<_, std::convert::Infallible>(&b.value))
            .unwrap_or_else(|never| match never {})
    }
}
