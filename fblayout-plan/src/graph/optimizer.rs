//! The optimizer pass: one AdamW step per parameter, after the backward.
//!
//! [`add_adamw`] gives every parameter `p` two moments, `p.m` and `p.v` ([`Role::State`],
//! shaped like `p`, zero before the first step and kept across steps), and appends
//! `adamw(p, dp, p.m, p.v) -> p, p.m, p.v`: the parameter and its moments are updated in place,
//! so the node's outputs are its first, third and fourth inputs. The hyper-parameters and the
//! step number are the executor's, supplied at run time.

use super::op::{Op, Phase};
use super::tensor::{Dim, Role, TensorId};
use super::{Graph, GraphError};

/// Appends the optimizer pass to `graph` (see the module docs); returns the AdamW nodes'
/// parameters, in order.
///
/// Fails when the graph has no backward yet, already has an optimizer pass, or a parameter has
/// no gradient (the loss does not depend on it: a step would only decay it).
pub fn add_adamw(graph: &mut Graph) -> Result<Vec<TensorId>, GraphError> {
    if !graph.has_backward() {
        return Err(GraphError::Backward(
            "the optimizer pass needs the backward: derive it first".into(),
        ));
    }
    if graph
        .nodes()
        .iter()
        .any(|n| n.op.phase() == Phase::Optimizer)
    {
        return Err(GraphError::Backward(
            "the graph already has an optimizer pass".into(),
        ));
    }
    let params = graph.params();
    for &p in &params {
        let Some(grad) = graph.grad(p) else {
            return Err(GraphError::Backward(format!(
                "parameter `{}` has no gradient: the loss does not depend on it",
                graph.tensor(p).name
            )));
        };
        let t = graph.tensor(p).clone();
        let axes: Vec<(&str, Dim)> = t.axes.iter().map(|a| (a.name.as_str(), a.dim)).collect();
        let m = graph.add_tensor(
            format!("{}.m", t.name),
            &axes,
            t.elem,
            Role::State { of: p },
        )?;
        let v = graph.add_tensor(
            format!("{}.v", t.name),
            &axes,
            t.elem,
            Role::State { of: p },
        )?;
        graph.push(Op::AdamW { copy: false }, &[p, grad, m, v], &[p, m, v])?;
    }
    Ok(params)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::models::{Model, ModelConfig, build};

    #[test]
    fn every_parameter_gets_one_in_place_step_and_a_second_pass_is_refused() {
        let config = ModelConfig::new(20, 8, 2)
            .with_max_positions(8)
            .with_ffn(16)
            .with_layers(1);
        let mut g = build(Model::Decoder, config).unwrap();
        let steps: Vec<_> = g
            .nodes()
            .iter()
            .filter(|n| n.op == Op::AdamW { copy: false })
            .collect();
        assert_eq!(steps.len(), g.params().len());
        for n in &steps {
            let [p, grad, m, v] = n.inputs[..] else {
                panic!("adamw has four inputs")
            };
            assert_eq!(n.outputs, [p, m, v]);
            assert_eq!(g.grad(p), Some(grad));
            for s in [m, v] {
                assert_eq!(g.tensor(s).role, Role::State { of: p });
                assert_eq!(g.tensor(s).axes, g.tensor(p).axes);
            }
        }
        assert!(
            add_adamw(&mut g)
                .unwrap_err()
                .to_string()
                .contains("already")
        );
        let mut empty = Graph::new();
        assert!(
            add_adamw(&mut empty)
                .unwrap_err()
                .to_string()
                .contains("backward")
        );
    }
}
