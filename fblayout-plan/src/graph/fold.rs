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

#[cfg(test)]
mod tests {
    use fblayout_core::layout::ElemType;

    use crate::graph::{Dim, Graph, GraphError, Op, Role, TensorId};

    /// `a + b → s` pushed, with a norm's weights of `width` and its outputs still to push.
    fn summed(width: u32) -> (Graph, TensorId, [TensorId; 2], [TensorId; 3]) {
        let mut g = Graph::new();
        let rows = [
            ("batch", Dim::Batch),
            ("seq", Dim::Seq),
            ("hidden", Dim::Fixed(8)),
        ];
        let stat = [("batch", Dim::Batch), ("seq", Dim::Seq)];
        let mut t = |name: &str, axes: &[(&str, Dim)], role| {
            g.add_tensor(name, axes, ElemType::F32, role).unwrap()
        };
        let (a, b) = (t("a", &rows, Role::Input), t("b", &rows, Role::Input));
        let s = t("s", &rows, Role::Activation);
        let weight = [("hidden", Dim::Fixed(width))];
        let params = [
            t("gamma", &weight, Role::Param),
            t("beta", &weight, Role::Param),
        ];
        let outs = [
            t("y", &rows, Role::Activation),
            t("mean", &stat, Role::Activation),
            t("rstd", &stat, Role::Activation),
        ];
        g.push(Op::Add, &[a, b], &[s]).unwrap();
        (g, s, params, outs)
    }

    const LN: Op = Op::LayerNorm {
        eps: 1e-5,
        residual: false,
    };

    #[test]
    fn a_norm_after_the_addition_of_its_input_takes_its_place() {
        let (mut g, s, params, outs) = summed(8);
        g.push_norm(LN, s, &params, &outs, true).unwrap();
        assert_eq!(g.nodes().len(), 1);
        let n = &g.nodes()[0];
        assert!(matches!(n.op, Op::LayerNorm { residual: true, .. }));
        // It reads both summands and writes the sum first.
        assert_eq!(n.outputs[0], s);
        assert_eq!(n.inputs.len(), 4);
        // Unfused, the two stay apart.
        let (mut g, s, params, outs) = summed(8);
        g.push_norm(LN, s, &params, &outs, false).unwrap();
        assert_eq!(g.nodes().len(), 2);
        assert_eq!(g.nodes()[1].op, LN);
    }

    #[test]
    fn a_refused_fusion_leaves_the_graph_as_it_was() {
        // Weights of the wrong width: the fused norm's shape rule refuses it, and the addition
        // is back in its place.
        let (mut g, s, params, outs) = summed(5);
        let before = g.nodes().to_vec();
        let err = g.push_norm(LN, s, &params, &outs, true).unwrap_err();
        assert!(matches!(err, GraphError::Shape { .. }), "{err}");
        assert_eq!(g.nodes(), &before[..]);
        // Only a norm fuses an addition.
        let (mut g, s, params, outs) = summed(8);
        let err = g
            .push_norm(Op::Linear, s, &params, &outs, true)
            .unwrap_err();
        assert!(err.to_string().contains("only a norm"), "{err}");
        assert_eq!(g.nodes(), &before[..]);
    }
}
