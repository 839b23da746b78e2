//! Reverse-mode differentiation of a forward graph over the kernels' backward rules.

use super::op::{BackwardStep, Op, Phase, Source};
use super::tensor::{Role, TensorId};
use super::{Graph, GraphError};

/// Appends the backward of `graph`'s forward (see the module docs of [`graph`](super)).
///
/// The loss is the mean of the per-token losses an operation writes (a [`Role::Loss`]: a
/// cross-entropy's, or a fused head's); every trained parameter it depends on
/// gets a gradient ([`Graph::grad`]), and so does every activation it depends on that depends
/// on a trained parameter itself (the path a parameter's gradient takes). Frozen parameters
/// ([`Role::Frozen`](super::Role::Frozen)) get none, and an activation computed from frozen
/// parameters and inputs alone gets none either: no operation computes what nothing uses.
/// A backward operation that writes several gradients, some of frozen weights, is replaced by
/// the cheaper one its contract offers for the wanted ones where it has one (a fused head
/// over a frozen weight writes `dx` alone); else the unwanted gradients are made and dropped.
/// Fails when the graph has no loss or already has a backward.
pub fn derive_backward(graph: &mut Graph) -> Result<(), GraphError> {
    if graph.has_backward() {
        return Err(GraphError::Backward(
            "the graph already has a backward".into(),
        ));
    }
    let writes_loss = |n: &super::Node| {
        n.outputs
            .iter()
            .any(|&t| graph.tensor(t).role == Role::Loss)
    };
    if !graph.nodes().iter().any(writes_loss) {
        return Err(GraphError::Backward(
            "the graph has no loss: a backward needs a cross-entropy".into(),
        ));
    }
    let mut state = State {
        contributions: vec![Vec::new(); graph.tensors().len()],
        trained: trained_paths(graph),
    };
    let forward: Vec<usize> = (0..graph.nodes().len())
        .filter(|&i| graph.nodes()[i].op.phase() == Phase::Forward)
        .collect();
    for &i in forward.iter().rev() {
        let node = graph.nodes()[i].clone();
        let output_grads: Vec<Option<TensorId>> = node
            .outputs
            .iter()
            .map(|&o| state.finalize(graph, o))
            .collect::<Result<_, _>>()?;
        let has_grad: Vec<bool> = output_grads.iter().map(Option::is_some).collect();
        let rule = node
            .op
            .backward_for(&has_grad)
            .expect("every forward operation has a backward rule");
        let is_loss = node
            .outputs
            .iter()
            .any(|&t| graph.tensor(t).role == Role::Loss);
        if !is_loss && output_grads.iter().all(Option::is_none) {
            // Nothing this operation writes reaches the loss.
            continue;
        }
        for &pos in &rule.passes_through {
            let input = node.inputs[pos];
            if let (true, Some(g)) = (state.differentiable(graph, input), output_grads[0]) {
                state.contributions[input.index()].push(g);
            }
        }
        for step in &rule.steps {
            state.step(graph, &node.inputs, &node.outputs, &output_grads, step)?;
        }
    }
    for p in graph.params() {
        state.finalize(graph, p)?;
    }
    Ok(())
}

/// For each tensor, whether it is a trained parameter or is computed (through the forward)
/// from one.
fn trained_paths(graph: &Graph) -> Vec<bool> {
    let mut trained: Vec<bool> = graph
        .tensors()
        .iter()
        .map(|t| t.role == Role::Param)
        .collect();
    for node in graph.nodes() {
        if node.op.phase() == Phase::Forward && node.inputs.iter().any(|t| trained[t.index()]) {
            for t in &node.outputs {
                trained[t.index()] = true;
            }
        }
    }
    trained
}

struct State {
    /// The contributions to each tensor's gradient, in the order the backward made them.
    contributions: Vec<Vec<TensorId>>,
    /// Which tensors are trained parameters or computed from one ([`trained_paths`]).
    trained: Vec<bool>,
}

impl State {
    /// Whether the loss's gradient with respect to `t` is wanted: trained parameters, and
    /// activations computed from one.
    fn differentiable(&self, graph: &Graph, t: TensorId) -> bool {
        self.trained[t.index()] && matches!(graph.tensor(t).role, Role::Activation | Role::Param)
    }

    /// The gradient of `t`: its one contribution, or the sum of several (one `Accumulate` per
    /// extra contribution), recorded on the graph.
    fn finalize(&mut self, graph: &mut Graph, t: TensorId) -> Result<Option<TensorId>, GraphError> {
        if let Some(done) = graph.grad(t) {
            return Ok(Some(done));
        }
        let parts = std::mem::take(&mut self.contributions[t.index()]);
        let Some((&first, rest)) = parts.split_first() else {
            return Ok(None);
        };
        let mut sum = first;
        for (k, &part) in rest.iter().enumerate() {
            let name = format!("d_{}.sum{}", graph.tensor(t).name, k + 1);
            let next = grad_like(graph, t, name)?;
            graph.push(Op::Accumulate, &[sum, part], &[next])?;
            sum = next;
        }
        graph.set_grad(t, sum);
        Ok(Some(sum))
    }

    /// Emits one backward operation of a forward node.
    fn step(
        &mut self,
        graph: &mut Graph,
        inputs: &[TensorId],
        outputs: &[TensorId],
        output_grads: &[Option<TensorId>],
        step: &BackwardStep,
    ) -> Result<(), GraphError> {
        // The forward inputs each output is the gradient of.
        let shared = step.shared.as_ref();
        let of: Vec<Vec<usize>> = (0..step.grads_of.len())
            .map(|k| match shared {
                Some(s) if s.output == k => s.inputs.clone(),
                _ => vec![step.grads_of[k]],
            })
            .collect();
        let wanted: Vec<bool> = of
            .iter()
            .map(|positions| {
                positions
                    .iter()
                    .any(|&p| self.differentiable(graph, inputs[p]))
            })
            .collect();
        if !wanted.iter().any(|w| *w) {
            return Ok(());
        }
        let mut reads = Vec::with_capacity(step.inputs.len());
        for source in &step.inputs {
            reads.push(match *source {
                Source::Input(i) => inputs[i],
                Source::Output(i) => outputs[i],
                Source::OutputGrad(i) => match output_grads[i] {
                    Some(g) => g,
                    // The output this step needs carries no gradient: nothing to propagate.
                    None => return Ok(()),
                },
            });
        }
        // Where some gradients are unwanted (of frozen weights), an operation that writes only
        // the wanted ones, if the backward has one.
        let pruned = if wanted.iter().all(|w| *w) {
            None
        } else {
            step.op.pruned(&wanted)
        };
        let kept: Vec<usize> = match pruned {
            Some(_) => (0..of.len()).filter(|&k| wanted[k]).collect(),
            None => (0..of.len()).collect(),
        };
        let mut writes = Vec::with_capacity(kept.len());
        for k in kept {
            let g = match shared {
                // The whole gradient of a forward output: made like it.
                Some(s) if s.output == k => {
                    let like = outputs[s.of];
                    let base = format!("d_{}", graph.tensor(like).name);
                    let name = if graph.grad(like).is_some() {
                        format!("{base}.all")
                    } else {
                        base
                    };
                    grad_like(graph, like, name)?
                }
                _ => {
                    let of = inputs[step.grads_of[k]];
                    let n = self.contributions[of.index()].len();
                    let name = if n == 0 {
                        format!("d_{}", graph.tensor(of).name)
                    } else {
                        format!("d_{}.{}", graph.tensor(of).name, n + 1)
                    };
                    grad_like(graph, of, name)?
                }
            };
            writes.push((&of[k], g));
        }
        let out: Vec<TensorId> = writes.iter().map(|&(_, g)| g).collect();
        graph.push(pruned.unwrap_or(step.op), &reads, &out)?;
        for (positions, g) in writes {
            for &p in positions {
                if self.differentiable(graph, inputs[p]) {
                    self.contributions[inputs[p].index()].push(g);
                }
            }
        }
        Ok(())
    }
}

/// A new tensor shaped like `of`, the gradient (or a contribution to it) of `of`.
fn grad_like(graph: &mut Graph, of: TensorId, name: String) -> Result<TensorId, GraphError> {
    let t = graph.tensor(of).clone();
    let axes: Vec<(&str, super::Dim)> = t.axes.iter().map(|a| (a.name.as_str(), a.dim)).collect();
    graph.add_tensor(name, &axes, t.elem, Role::Grad { of })
}
