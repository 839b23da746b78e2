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
//! `y` (the GPU executor's biased GEMM); `lin` is then never written.
//!
//! **Additions after a product.** A sum `y = a + b` whose `b` a linear product made and
//! nothing else reads, with `a` ready when the product runs, is done by the product as it
//! writes: it writes `y = factor · x·w + a` instead of `b` ([`Graph::folded_additions`]). In
//! the forward this is a LoRA adapter's last product `δ = s · u·Bᵀ` and its sum `y' = y + δ`
//! with the base layer's output. In the backward it is a gradient's sum of several
//! contributions ([`Op::Accumulate`]): each input's gradient product after the first adds the
//! running sum, which the one before it wrote, so a chain of sums takes no pass of its own.
//!
//! Which operation a product can do, and through which roles, is that operation's contract's
//! word ([`Contract::merged`](crate::ops)). The kernels can also do an activation's backward
//! as they write (`Merge::ActivationGrad`); the graph does not fold it: on an H100 the shipped
//! encoder and decoder ran no faster with it (BENCHMARKS.md).
//!
//! The memory planner, the executor and the cost model read both kinds of fold from
//! [`Graph::epilogues`], so that the folded output's buffer is live from the product on and the
//! folded operation runs no kernel of its own. The product's own output is then never written
//! on the GPU ([`Graph::unwritten`]): it takes no buffer.

use super::{Graph, GraphError, NodeId, Op, Role, TensorId};

/// Whether `op` is a linear product that may do the work of the operation after it: a
/// forward, or an input's gradient, either orientation.
fn folds_into(op: &Op) -> bool {
    matches!(
        op,
        Op::Linear | Op::LinearT { .. } | Op::LinearGradInput | Op::LinearTGradInput { .. }
    )
}

/// The roles through which product `product` does the work of `after`, where it can: the role
/// of `after` that reads the product's output, then the one that must be ready when the
/// product runs. A linear layer's forward adds the bias node after it; a linear product
/// ([`folds_into`]) does what the contract of the operation after it says it can
/// ([`Contract::merged`](crate::ops)): a sum.
fn fold_roles(product: &Op, after: &Op) -> Option<[&'static str; 2]> {
    if *product == Op::Linear && *after == Op::Bias {
        return Some(["x", "b"]);
    }
    let merged = after.contract().merged().filter(|_| folds_into(product))?;
    Some([merged.reads, merged.d])
}

impl Graph {
    /// For each operation, the bias operation its product adds in its epilogue (see the module
    /// docs): `Some(j)` for a [`Op::Linear`] whose output is an activation that only operation
    /// `j`, an [`Op::Bias`] reading it as its input, reads, where the bias it adds is ready when
    /// the product runs (a parameter, or written before it: not a copy a conversion makes
    /// between the two). The biases of [`epilogues`](Self::epilogues).
    pub fn folded_biases(&self) -> Vec<Option<usize>> {
        self.epilogues_of(|op| *op == Op::Bias)
    }

    /// For each operation, the addition its product does as it writes (see the module docs):
    /// `Some(j)` for a linear product ([`Op::Linear`], [`Op::LinearT`] or either's input
    /// gradient) whose output is an activation that only operation `j`, an [`Op::Add`] or
    /// [`Op::Accumulate`] reading it as its second summand `b`, reads, where the first summand
    /// `a` is ready when the product runs (persistent, or written before it, by an operation
    /// or by the product an earlier sum was folded into). The additions of
    /// [`epilogues`](Self::epilogues).
    pub fn folded_additions(&self) -> Vec<Option<usize>> {
        self.epilogues_of(|op| matches!(op, Op::Add | Op::Accumulate))
    }

    /// For each operation, the operation whose work its epilogue does: its folded bias or
    /// addition ([`folded_biases`](Self::folded_biases),
    /// [`folded_additions`](Self::folded_additions)). What the memory planner, the executors
    /// and the cost model read.
    pub fn epilogues(&self) -> Vec<Option<usize>> {
        let nodes = self.nodes();
        // Where each tensor is written: by its operation, or by the product that folded it.
        let mut made_at: Vec<Option<usize>> = vec![None; self.tensors().len()];
        let mut folds = vec![None; nodes.len()];
        let mut folded = vec![false; nodes.len()];
        for (i, n) in nodes.iter().enumerate() {
            let ready = |b: TensorId, made_at: &[Option<usize>]| {
                self.tensor(b).is_persistent() || made_at[b.index()].is_some_and(|k| k < i)
            };
            if let Some(j) = folds_into(&n.op).then(|| self.sole_reader(i)).flatten() {
                let m = &nodes[j];
                let fits = fold_roles(&n.op, &m.op).is_some_and(|[own, other]| {
                    m.input(own) == n.outputs.first().copied()
                        && m.input(other).is_some_and(|b| ready(b, &made_at))
                });
                if fits {
                    folds[i] = Some(j);
                    folded[j] = true;
                    for &y in &m.outputs {
                        made_at[y.index()] = Some(i);
                    }
                }
            }
            if !folded[i] {
                for &t in &n.outputs {
                    made_at[t.index()].get_or_insert(i);
                }
            }
        }
        folds
    }

    /// The tensors no kernel writes, each with the product that makes it: the product's own
    /// output where the product does the work of the one operation that reads it
    /// ([`epilogues`](Self::epilogues)) and writes that operation's output instead. The memory
    /// plan gives them no buffer, and the GPU step binds them to no kernel; the CPU executor,
    /// which runs the two operations apart, keeps each in a buffer of its own.
    pub fn unwritten(&self) -> Vec<(usize, TensorId)> {
        self.epilogues()
            .into_iter()
            .enumerate()
            .filter(|(_, fold)| fold.is_some())
            .filter_map(|(i, _)| Some((i, *self.nodes()[i].outputs.first()?)))
            .collect()
    }

    /// Whether each tensor is one of [`unwritten`](Self::unwritten), by tensor index.
    pub fn is_unwritten(&self) -> Vec<bool> {
        let mut unwritten = vec![false; self.tensors().len()];
        for (_, t) in self.unwritten() {
            unwritten[t.index()] = true;
        }
        unwritten
    }

    /// The [`epilogues`](Self::epilogues) whose folded operation is one that `of` accepts.
    fn epilogues_of(&self, of: impl Fn(&Op) -> bool) -> Vec<Option<usize>> {
        let nodes = self.nodes();
        self.epilogues()
            .into_iter()
            .map(|f| f.filter(|&j| of(&nodes[j].op)))
            .collect()
    }

    /// The one operation that reads node `i`'s first output, where that output is an
    /// intermediate nothing else reads: an activation, or an activation's gradient or one
    /// contribution to any gradient (not a parameter's gradient, which the step returns).
    fn sole_reader(&self, i: usize) -> Option<usize> {
        let nodes = self.nodes();
        let t = *nodes[i].outputs.first()?;
        let intermediate = match self.tensor(t).role {
            Role::Activation => true,
            Role::Grad { of } => self.tensor(of).role != Role::Param || self.grad(of) != Some(t),
            _ => false,
        };
        if !intermediate {
            return None;
        }
        let mut readers = nodes
            .iter()
            .enumerate()
            .filter(|(_, m)| m.inputs.contains(&t));
        match (readers.next(), readers.next()) {
            (Some((j, _)), None) => Some(j),
            _ => None,
        }
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
