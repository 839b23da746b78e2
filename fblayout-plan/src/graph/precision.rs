//! Mixed precision: which tensors of a training step are `f16`.
//!
//! [`mixed`] rewrites a graph (forward, backward and optimizer) so that:
//!
//! - activations and their gradients are `f16`: half the bytes of every memory-bound kernel
//!   and of the stored activations, and the operands tensor cores multiply;
//! - parameters, their gradients and the optimizer's moments stay `f32` (the master weights:
//!   AdamW's small updates would round away in `f16`);
//! - every weight a linear layer reads gets an `f16` copy, read by both products that read the
//!   weight (the forward and the input gradient; each contract names the weight it reads, its
//!   `copied_weight`), so that both factors of each product are
//!   `f16`; the weight gradient is still written `f32`. Where the graph has the weight's AdamW
//!   step, the copy is kept across steps ([`Role::ParamCopy`]) and the step writes it with the
//!   updated weight (its fourth output, [`Op::AdamW`]`{ copy: true }`): no conversion runs in
//!   the step, and the executors make it once where the weight is set. A frozen weight
//!   ([`Role::Frozen`], LoRA's base model) never changes in a step, so its copy is kept too,
//!   made where the weight is set and by nothing in the step; so is a constant's (a fixed
//!   matrix a product reads), made where the executors store the constant. Otherwise (a trained weight
//!   without an optimizer pass) an [`Op::Convert`] makes it at the start of the forward;
//! - the statistics a normalisation saves (mean, reciprocal deviation), a fused attention's
//!   log-sum-exp and the per-row losses stay `f32`, as sums that `f16` would round (each
//!   contract lists its own).
//!
//! The kernels read and write each operand in its own element type and compute in `f32`, so
//! the rewritten graph runs on the same kernels. Gradients in `f16` need the loss scaled up so
//! that small ones don't flush to zero; the executor does that (dynamic loss scaling) and
//! skips a step whose scaled gradients overflowed.

use fblayout_core::layout::ElemType;

use super::op::Op;
use super::tensor::{Role, TensorId};
use super::{Graph, GraphError, Node};

/// The element types of a training step's tensors.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Precision {
    /// Everything as built (`f32`).
    #[default]
    F32,
    /// `f16` activations and gradients, `f32` master weights (see the module docs).
    Mixed,
}

impl Precision {
    /// `graph` in this precision: itself, or [`mixed`]'s rewrite.
    pub fn apply(self, graph: &Graph) -> Result<Graph, GraphError> {
        match self {
            Self::F32 => Ok(graph.clone()),
            Self::Mixed => mixed(graph),
        }
    }
}

/// The mixed-precision rewrite of `graph` (see the module docs). The graph must hold its
/// backward; its tensors must not be `f16` already.
pub fn mixed(graph: &Graph) -> Result<Graph, GraphError> {
    if !graph.has_backward() {
        return Err(GraphError::Backward(
            "mixed precision rewrites a training step: derive the backward first".into(),
        ));
    }
    if let Some(t) = graph.tensors.iter().find(|t| t.elem == ElemType::F16) {
        return Err(GraphError::Shape {
            op: "mixed precision",
            detail: format!("`{}` is f16 already", t.name),
        });
    }
    let mut g = graph.clone();
    let kept = kept_f32(&g);
    for (i, t) in g.tensors.iter_mut().enumerate() {
        if t.elem == ElemType::F32 && halved(graph, t.role) && !kept.contains(&TensorId(i as u32)) {
            t.elem = ElemType::F16;
        }
    }
    for w in linear_weights(&g) {
        copy_to_f16(&mut g, w)?;
    }
    Ok(g)
}

/// Whether a tensor of `role` becomes `f16`: activations and the gradients of activations.
/// A weight's gradient stays `f32` also where the weight is frozen: a kernel that writes the
/// gradients of a normalisation's scale and shift writes them (unused) all the same, in `f32`.
fn halved(graph: &Graph, role: Role) -> bool {
    match role {
        Role::Activation => true,
        Role::Grad { of } => !matches!(
            graph.tensor(of).role,
            Role::Param | Role::Frozen | Role::State { .. }
        ),
        Role::Input
        | Role::Param
        | Role::Frozen
        | Role::Constant
        | Role::ParamCopy { .. }
        | Role::Loss
        | Role::State { .. } => false,
    }
}

/// The activations that stay `f32`: the outputs each operation's contract keeps `f32` (a
/// norm's statistics besides its output, an attention's log-sum-exp).
fn kept_f32(graph: &Graph) -> Vec<TensorId> {
    graph
        .nodes
        .iter()
        .flat_map(|n| {
            let kept = n.op.contract().f32_outputs();
            let roles = n.op.output_roles();
            n.outputs
                .iter()
                .zip(roles)
                .filter(|(_, r)| kept.contains(r))
                .map(|(&t, _)| t)
                .collect::<Vec<_>>()
        })
        .collect()
}

/// The input position at which `n`'s product reads a weight that mixed precision gives an
/// `f16` copy (its contract's `copied_weight` role).
fn copied_weight(n: &Node) -> Option<usize> {
    let role = n.op.contract().copied_weight()?;
    n.op.input_roles().iter().position(|r| *r == role)
}

/// The parameters (trained or frozen) and constants a linear layer's products read as their
/// weight.
fn linear_weights(graph: &Graph) -> Vec<TensorId> {
    let mut weights: Vec<TensorId> = Vec::new();
    for n in &graph.nodes {
        if let Some(k) = copied_weight(n) {
            let w = n.inputs[k];
            let weight = matches!(
                graph.tensor(w).role,
                Role::Param | Role::Frozen | Role::Constant
            );
            if weight && !weights.contains(&w) {
                weights.push(w);
            }
        }
    }
    weights
}

/// Gives weight `w` an `f16` copy `<w>.f16`, read by every product that read `w`: written by
/// `w`'s AdamW step where the graph has one (a [`Role::ParamCopy`]), kept as it was made where
/// `w` is frozen or a constant (also a [`Role::ParamCopy`]), else converted before its first
/// reader.
fn copy_to_f16(g: &mut Graph, w: TensorId) -> Result<(), GraphError> {
    let reads = |n: &Node| copied_weight(n).is_some_and(|k| n.inputs[k] == w);
    let Some(first) = g.nodes.iter().position(reads) else {
        return Ok(());
    };
    let name = format!("{}.f16", g.tensor(w).name);
    let step = g
        .nodes
        .iter()
        .position(|n| n.op == Op::AdamW { copy: false } && n.inputs[0] == w);
    let kept = |g: &mut Graph, name: String| {
        let t = g.tensor(w).clone();
        let axes: Vec<(&str, super::Dim)> =
            t.axes.iter().map(|a| (a.name.as_str(), a.dim)).collect();
        g.add_tensor(name, &axes, ElemType::F16, Role::ParamCopy { of: w })
    };
    let (copy, from) = match step {
        Some(step) => {
            let copy = kept(g, name)?;
            let node = &mut g.nodes[step];
            node.op = Op::AdamW { copy: true };
            node.outputs.push(copy);
            (copy, first)
        }
        None if matches!(g.tensor(w).role, Role::Frozen | Role::Constant) => {
            (kept(g, name)?, first)
        }
        None => {
            // The first reader is the forward product, so the copy is made in the forward.
            let copy = g.insert_convert(super::NodeId(first as u32), w, name)?;
            g.tensors[copy.index()].elem = ElemType::F16;
            (copy, first + 1)
        }
    };
    for n in &mut g.nodes[from..] {
        if let Some(k) = copied_weight(n).filter(|&k| n.inputs[k] == w) {
            n.inputs[k] = copy;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::graph::{Dim, Phase};
    use crate::models::{Model, ModelConfig, build};

    fn small(model: Model) -> Graph {
        build(
            model,
            ModelConfig::new(20, 8, 2)
                .with_max_positions(8)
                .with_ffn(16)
                .with_layers(2),
        )
        .unwrap()
    }

    #[test]
    fn activations_and_their_gradients_are_halved_and_the_master_weights_kept() {
        for model in [Model::Encoder, Model::Decoder] {
            let f32 = small(model);
            let g = mixed(&f32).unwrap();
            for t in g.tensors() {
                let want = match t.role {
                    Role::Input => ElemType::U32,
                    Role::ParamCopy { .. } => ElemType::F16,
                    Role::Param | Role::Loss | Role::State { .. } => ElemType::F32,
                    Role::Grad { of } if g.tensor(of).role == Role::Param => ElemType::F32,
                    // Norm statistics stay f32; everything else the forward or backward
                    // computes is f16.
                    _ if t.name.ends_with(".mean") || t.name.ends_with(".rstd") => ElemType::F32,
                    _ => ElemType::F16,
                };
                assert_eq!(t.elem, want, "{model:?}: `{}` ({:?})", t.name, t.role);
            }
            // Every product multiplies two f16 factors; each weight is copied once, by its
            // AdamW step, and nothing is converted.
            for n in g.nodes() {
                if matches!(
                    n.op,
                    Op::Linear | Op::LinearGradInput | Op::LinearGradWeight
                ) {
                    for &t in &n.inputs {
                        assert_eq!(g.tensor(t).elem, ElemType::F16, "{model:?} {}", n.op);
                    }
                }
            }
            let weights: Vec<TensorId> = f32
                .nodes()
                .iter()
                .filter(|n| n.op == Op::Linear)
                .map(|n| n.inputs[1])
                .collect();
            for &w in &weights {
                let [copy] = g.copies_of(w)[..] else {
                    panic!("{model:?}: `{}` has one copy", g.tensor(w).name)
                };
                let step = g
                    .nodes()
                    .iter()
                    .find(|n| matches!(n.op, Op::AdamW { .. }) && n.inputs[0] == w)
                    .unwrap();
                assert_eq!(step.op, Op::AdamW { copy: true });
                assert_eq!(step.outputs[3], copy);
                assert!(g.tensor(copy).is_persistent());
                // The forward product and the input gradient read the copy.
                let readers: Vec<Op> = g
                    .nodes()
                    .iter()
                    .filter(|n| n.inputs.contains(&copy))
                    .map(|n| n.op)
                    .collect();
                assert_eq!(readers, [Op::Linear, Op::LinearGradInput], "{model:?}");
            }
            let copied = g
                .nodes()
                .iter()
                .filter(|n| n.op == Op::AdamW { copy: true })
                .count();
            assert_eq!(copied, weights.len());
            assert!(!g.nodes().iter().any(|n| matches!(n.op, Op::Convert { .. })));
            assert_eq!(g.nodes().len(), f32.nodes().len());
        }
    }

    /// An embedding, a head `w` and a cross-entropy, no backward yet (and no optimizer pass):
    /// the graph and `w`.
    fn embedding_head() -> (Graph, TensorId) {
        let mut g = Graph::new();
        let tokens = [("batch", Dim::Batch), ("seq", Dim::Seq)];
        let ids = g
            .add_tensor("ids", &tokens, ElemType::U32, Role::Input)
            .unwrap();
        let labels = g
            .add_tensor("labels", &tokens, ElemType::U32, Role::Input)
            .unwrap();
        let table = [("vocab", Dim::Fixed(20)), ("hidden", Dim::Fixed(8))];
        let table = g
            .add_tensor("table", &table, ElemType::F32, Role::Param)
            .unwrap();
        let wide = [
            ("batch", Dim::Batch),
            ("seq", Dim::Seq),
            ("hidden", Dim::Fixed(8)),
        ];
        let h = g
            .add_tensor("h", &wide, ElemType::F32, Role::Activation)
            .unwrap();
        g.push(Op::Embedding, &[ids, table], &[h]).unwrap();
        let head = [("hidden", Dim::Fixed(8)), ("vocab", Dim::Fixed(20))];
        let w = g
            .add_tensor("w", &head, ElemType::F32, Role::Param)
            .unwrap();
        let logits = [
            ("batch", Dim::Batch),
            ("seq", Dim::Seq),
            ("vocab", Dim::Fixed(20)),
        ];
        let logits = g
            .add_tensor("logits", &logits, ElemType::F32, Role::Activation)
            .unwrap();
        g.push(Op::Linear, &[h, w], &[logits]).unwrap();
        let loss = g
            .add_tensor("loss", &tokens, ElemType::F32, Role::Loss)
            .unwrap();
        let ce = Op::CrossEntropy {
            ignore_index: u32::MAX,
        };
        g.push(ce, &[logits, labels], &[loss]).unwrap();
        (g, w)
    }

    #[test]
    fn without_an_optimizer_pass_each_weight_is_converted_in_the_forward() {
        // Nothing would keep a persistent copy up to date: the forward makes it.
        let (mut g, w) = embedding_head();
        crate::graph::derive_backward(&mut g).unwrap();
        let m = mixed(&g).unwrap();
        assert!(m.copies_of(w).is_empty());
        let convert = m
            .nodes()
            .iter()
            .find(|n| matches!(n.op, Op::Convert { .. }))
            .unwrap();
        assert_eq!(convert.op.phase(), Phase::Forward);
        assert_eq!(convert.inputs, [w]);
        let copy = convert.outputs[0];
        assert_eq!(m.tensor(copy).elem, ElemType::F16);
        assert_eq!(m.tensor(copy).role, Role::Activation);
        assert_eq!(m.nodes().len(), g.nodes().len() + 1);
    }

    #[test]
    fn a_frozen_weights_copy_is_kept_and_nothing_in_the_step_converts_it() {
        // LoRA's base weights: they never change in a step, so their copy is made where they
        // are set, not converted at every step's start.
        let (mut g, w) = embedding_head();
        g.freeze(w).unwrap();
        crate::graph::derive_backward(&mut g).unwrap();
        let m = mixed(&g).unwrap();
        let [copy] = m.copies_of(w)[..] else {
            panic!("{:?}", m.copies_of(w));
        };
        assert_eq!(m.tensor(copy).elem, ElemType::F16);
        assert!(m.tensor(copy).is_persistent());
        assert!(!m.nodes().iter().any(|n| matches!(n.op, Op::Convert { .. })));
        assert!(!m.nodes().iter().any(|n| n.outputs.contains(&copy)));
        // Both products that read `w` read the copy.
        let readers: Vec<Op> = m
            .nodes()
            .iter()
            .filter(|n| n.inputs.contains(&copy))
            .map(|n| n.op)
            .collect();
        assert_eq!(readers, [Op::Linear, Op::LinearGradInput]);
        assert!(!m.nodes().iter().any(|n| n.inputs.contains(&w)));
        assert_eq!(m.nodes().len(), g.nodes().len());
    }

    #[test]
    fn a_graph_without_backward_or_already_halved_is_refused() {
        let mut g = Graph::new();
        let x = g.add_tensor("x", &[], ElemType::F32, Role::Param).unwrap();
        let _ = x;
        assert!(matches!(mixed(&g), Err(GraphError::Backward(_))));
        let once = mixed(&small(Model::Encoder)).unwrap();
        assert!(matches!(mixed(&once), Err(GraphError::Shape { .. })));
        assert_eq!(Precision::F32.apply(&once).unwrap(), once);
    }
}
