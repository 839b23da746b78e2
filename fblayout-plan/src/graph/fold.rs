//! Operations one kernel does for another: a bias added in the epilogue of the product before
//! it.
//!
//! A linear layer's forward writes `lin = x·w` and a bias node then writes `y = lin + b`, a
//! whole read and write of the activation for one addition per element. Where `lin` is an
//! activation that only that bias reads (as its input), the product adds `b` itself and writes
//! `y` (the GPU executor's biased GEMM); `lin` is then never written. The memory planner and
//! the executor read the same folds from [`Graph::folded_biases`], so that `y`'s buffer is
//! live from the product on.

use super::{Graph, Op, Role};

impl Graph {
    /// For each operation, the bias operation its product adds in its epilogue (see the module
    /// docs): `Some(j)` for a [`Op::Linear`] whose output is an activation that only operation
    /// `j`, an [`Op::Bias`] reading it as its input, reads.
    pub fn folded_biases(&self) -> Vec<Option<usize>> {
        let nodes = self.nodes();
        nodes
            .iter()
            .map(|n| {
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
                    (Some((j, m)), None) if m.op == Op::Bias && m.inputs[0] == t => Some(j),
                    _ => None,
                }
            })
            .collect()
    }
}
