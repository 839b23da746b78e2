//! Operations one kernel does for another: a bias added in the epilogue of the product before
//! it, and a residual connection's addition done by the norm after it.
//!
//! **Residual additions.** A block's `s = a + b` followed by a norm of `s` reads `a` and `b`,
//! writes `s`, then reads `s` again; [`Graph::push_norm`] makes the pair one operation, the
//! norm with `residual` set, which reads `a` and `b` and writes `s` as it normalises it. Its
//! backward adds the sum's gradient from its other readers, where it has some, in the same
//! kernel (see the norms' contract).
//!
//! A linear layer's forward writes `lin = x·w` and a bias node then writes `y = lin + b`, a
//! whole read and write of the activation for one addition per element. Where `lin` is an
//! activation that only that bias reads (as its input), the product adds `b` itself and writes
//! `y` (the GPU executor's biased GEMM); `lin` is then never written. The memory planner and
//! the executor read the same folds from [`Graph::folded_biases`], so that `y`'s buffer is
//! live from the product on.

use super::{Graph, GraphError, NodeId, Op, Role, TensorId};

impl Graph {
    /// For each operation, the bias operation its product adds in its epilogue (see the module
    /// docs): `Some(j)` for a [`Op::Linear`] whose output is an activation that only operation
    /// `j`, an [`Op::Bias`] reading it as its input, reads, where the bias it adds is ready when
    /// the product runs (a parameter, or written before it: not a copy a conversion makes
    /// between the two).
    pub fn folded_biases(&self) -> Vec<Option<usize>> {
        let nodes = self.nodes();
        let ready = |b: super::TensorId, at: usize| {
            self.tensor(b).is_persistent() || nodes[..at].iter().any(|n| n.outputs.contains(&b))
        };
        // A bias node's operand of role `role`.
        let operand = |m: &super::Node, role: &str| {
            let k = m.op.input_roles().iter().position(|r| *r == role)?;
            m.inputs.get(k).copied()
        };
        nodes
            .iter()
            .enumerate()
            .map(|(i, n)| {
                if n.op != Op::Linear {
                    return None;
                }
                let t = *n.outputs.first()?;
                if self.tensor(t).role != Role::Activation {
                    return None;
                }
                let mut readers = nodes
                    .iter()
                    .enumerate()
                    .filter(|(_, m)| m.inputs.contains(&t));
                match (readers.next(), readers.next()) {
                    (Some((j, m)), None)
                        if m.op == Op::Bias
                            && operand(m, "x") == Some(t)
                            && operand(m, "b").is_some_and(|b| ready(b, i)) =>
                    {
                        Some(j)
                    }
                    _ => None,
                }
            })
            .collect()
    }
}

impl Graph {
    /// Appends the norm `op` ([`Op::LayerNorm`] or [`Op::RmsNorm`], without `residual`) of `x`
    /// with its weights `params`, writing `outputs` (`y` and the statistics). Where `fuse` and
    /// the last operation pushed is the [`Op::Add`] that wrote `x`, that operation is replaced
    /// by the norm with `residual` set: it reads the two summands and writes `x` itself (see the
    /// module docs).
    pub(crate) fn push_norm(
        &mut self,
        op: Op,
        x: TensorId,
        params: &[TensorId],
        outputs: &[TensorId],
        fuse: bool,
    ) -> Result<NodeId, GraphError> {
        let summands = match self.nodes().last() {
            Some(n) if fuse && n.op == Op::Add && n.outputs == [x] => n.inputs.clone(),
            _ => {
                let inputs: Vec<TensorId> =
                    std::iter::once(x).chain(params.iter().copied()).collect();
                return self.push(op, &inputs, outputs);
            }
        };
        let fused = match op {
            Op::LayerNorm { eps, .. } => Op::LayerNorm {
                eps,
                residual: true,
            },
            Op::RmsNorm { eps, .. } => Op::RmsNorm {
                eps,
                residual: true,
            },
            other => {
                return Err(GraphError::Shape {
                    op: other.name(),
                    detail: "only a norm fuses the residual addition before it".into(),
                });
            }
        };
        let add = self
            .nodes_mut()
            .pop()
            .expect("the last operation was just read");
        let inputs: Vec<TensorId> = summands.iter().chain(params).copied().collect();
        let written: Vec<TensorId> = std::iter::once(x).chain(outputs.iter().copied()).collect();
        self.push(fused, &inputs, &written).inspect_err(|_| {
            // A refused norm leaves the graph as it was.
            self.nodes_mut().push(add.clone());
        })
    }
}
