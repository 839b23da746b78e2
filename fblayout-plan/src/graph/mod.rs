//! The training graph: the tensors and operations of a training step.
//!
//! A [`Graph`] is built forward — tensors with named axes whose extents may be the run's batch
//! size and sequence length ([`Dim`]), and operations ([`Op`]) in execution order — then
//! [`derive_backward`] appends its backward by reverse-mode differentiation over the kernels'
//! forward/backward pairs: each forward operation, from the last to the first, emits the
//! backward operations its rule lists ([`Op::backward`]), reading the gradients of its outputs
//! and the forward tensors it saves; where a tensor receives gradients along several paths, an
//! [`Op::Accumulate`] sums them. [`Graph::saved`] lists the forward tensors the backward reads
//! again: the activations whose layout the planner chooses first. [`optimizer::add_adamw`]
//! then appends one in-place [`Op::AdamW`] per parameter, with its moments
//! ([`Role::State`]). [`precision::mixed`] makes activations and gradients `f16` around `f32`
//! master weights, whose `f16` copies ([`Role::ParamCopy`]) the AdamW steps write.
//! [`Graph::epilogues`] says which biases and additions a product does itself.

mod autodiff;
mod fold;
mod fused;
mod op;
pub mod optimizer;
pub mod precision;
mod tensor;

use std::collections::HashSet;
use std::fmt;
use std::sync::Arc;

use fblayout_core::layout::ElemType;

pub use autodiff::derive_backward;
pub use op::{
    Act, BackwardRule, BackwardStep, FusedAttention, HeadLoss, Op, Phase, SharedGrad, Source,
};
pub use tensor::{Axis, Dim, Role, Sizes, Tensor, TensorId};

/// An operation's handle in its [`Graph`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct NodeId(pub(crate) u32);

impl NodeId {
    /// The operation's position in execution order.
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

/// One operation with its operands.
#[derive(Debug, Clone, PartialEq)]
pub struct Node {
    /// What it computes.
    pub op: Op,
    /// Its inputs, in the operation's order.
    pub inputs: Vec<TensorId>,
    /// Its outputs, in the operation's order.
    pub outputs: Vec<TensorId>,
}

impl Node {
    /// Its input of role `role` (one of its operation's input roles).
    pub(crate) fn input(&self, role: &str) -> Option<TensorId> {
        let k = self.op.input_roles().iter().position(|r| *r == role)?;
        self.inputs.get(k).copied()
    }

    /// Its output of role `role` (one of its operation's output roles).
    pub(crate) fn output(&self, role: &str) -> Option<TensorId> {
        let k = self.op.output_roles().iter().position(|r| *r == role)?;
        self.outputs.get(k).copied()
    }
}

/// Why a graph could not be built.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum GraphError {
    /// Two tensors of one name.
    #[error("the graph already has a tensor named `{0}`")]
    DuplicateName(String),
    /// An operation was given the wrong number of operands.
    #[error("`{op}` takes {expected} {what}, {given} were given")]
    Arity {
        /// The operation.
        op: &'static str,
        /// `inputs` or `outputs`.
        what: &'static str,
        /// What it takes.
        expected: usize,
        /// What it was given.
        given: usize,
    },
    /// The operands' shapes don't fit the operation.
    #[error("`{op}`: {detail}")]
    Shape {
        /// The operation.
        op: &'static str,
        /// What does not fit.
        detail: String,
    },
    /// An operation reads a tensor that nothing has written yet.
    #[error(
        "`{op}` reads `{tensor}`, which no earlier operation writes and which is no input or parameter"
    )]
    ReadBeforeWrite {
        /// The operation.
        op: &'static str,
        /// The tensor.
        tensor: String,
    },
    /// The backward was asked for twice, or of a graph with no loss.
    #[error("{0}")]
    Backward(String),
}

/// The tensors and operations of a training step (see the module docs).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Graph {
    tensors: Vec<Tensor>,
    nodes: Vec<Node>,
    /// The gradient of each tensor, once the backward is derived (by tensor index).
    grads: Vec<Option<TensorId>>,
    /// The values of every constant ([`Role::Constant`]), logical and row-major.
    constants: Vec<(TensorId, Arc<[f64]>)>,
}

impl Graph {
    /// An empty graph.
    pub fn new() -> Self {
        Self::default()
    }

    /// Every tensor, by id.
    pub fn tensors(&self) -> &[Tensor] {
        &self.tensors
    }

    /// The tensor `id`.
    pub fn tensor(&self, id: TensorId) -> &Tensor {
        &self.tensors[id.index()]
    }

    /// The tensor named `name`.
    pub fn find(&self, name: &str) -> Option<TensorId> {
        self.tensors
            .iter()
            .position(|t| t.name == name)
            .map(|i| TensorId(i as u32))
    }

    /// Every operation, in execution order.
    pub fn nodes(&self) -> &[Node] {
        &self.nodes
    }

    /// Every operation's id, in execution order.
    pub fn node_ids(&self) -> impl Iterator<Item = NodeId> + '_ {
        (0..self.nodes.len()).map(|i| NodeId(i as u32))
    }

    /// Every tensor id, in order.
    pub fn ids(&self) -> impl Iterator<Item = TensorId> + '_ {
        (0..self.tensors.len()).map(|i| TensorId(i as u32))
    }

    /// Adds a tensor.
    pub fn add_tensor(
        &mut self,
        name: impl Into<String>,
        axes: &[(&str, Dim)],
        elem: ElemType,
        role: Role,
    ) -> Result<TensorId, GraphError> {
        let name = name.into();
        if self.find(&name).is_some() {
            return Err(GraphError::DuplicateName(name));
        }
        self.tensors.push(Tensor {
            name,
            axes: axes
                .iter()
                .map(|(n, d)| Axis {
                    name: (*n).to_owned(),
                    dim: *d,
                })
                .collect(),
            elem,
            role,
        });
        Ok(TensorId(self.tensors.len() as u32 - 1))
    }

    /// Adds a constant ([`Role::Constant`]): a tensor whose logical values (row-major over its
    /// fixed axes) the graph carries, which the executors store once and no step changes (a
    /// rotary embedding's tables). Every axis must be fixed.
    pub fn add_constant(
        &mut self,
        name: impl Into<String>,
        axes: &[(&str, u32)],
        values: Vec<f64>,
    ) -> Result<TensorId, GraphError> {
        let name = name.into();
        let elements: u64 = axes.iter().map(|&(_, n)| u64::from(n)).product();
        if elements != values.len() as u64 {
            return Err(GraphError::Shape {
                op: "constant",
                detail: format!(
                    "`{name}` has {elements} elements, but {} values were given",
                    values.len()
                ),
            });
        }
        let axes: Vec<(&str, Dim)> = axes.iter().map(|&(a, n)| (a, Dim::Fixed(n))).collect();
        let t = self.add_tensor(name, &axes, ElemType::F32, Role::Constant)?;
        self.constants.push((t, values.into()));
        Ok(t)
    }

    /// Takes the values of every constant of `source`, whose tensors this graph has under the
    /// same ids (a graph rebuilt tensor by tensor, as the layout planner does).
    pub(crate) fn copy_constants(&mut self, source: &Graph) {
        self.constants.clone_from(&source.constants);
    }

    /// The values of constant `t` ([`add_constant`](Self::add_constant)); `None` for any other
    /// tensor.
    pub fn constant(&self, t: TensorId) -> Option<&[f64]> {
        self.constants
            .iter()
            .find(|(c, _)| *c == t)
            .map(|(_, v)| &v[..])
    }

    /// Appends `op` over `inputs` and `outputs`, after checking its arity, its contract's shape
    /// rule, and that every input is an input, a parameter, or written by an earlier operation.
    pub fn push(
        &mut self,
        op: Op,
        inputs: &[TensorId],
        outputs: &[TensorId],
    ) -> Result<NodeId, GraphError> {
        self.check_operands(op, inputs, outputs)?;
        let written = self.written();
        for &t in inputs {
            let tensor = self.tensor(t);
            // Inputs, parameters and optimizer state come from outside the step.
            if !tensor.is_persistent() && !written.contains(&t) {
                return Err(GraphError::ReadBeforeWrite {
                    op: op.name(),
                    tensor: tensor.name.clone(),
                });
            }
        }
        self.nodes.push(Node {
            op,
            inputs: inputs.to_vec(),
            outputs: outputs.to_vec(),
        });
        Ok(NodeId(self.nodes.len() as u32 - 1))
    }

    /// Checks `op`'s arity and its contract's shape rule over `inputs` and `outputs`.
    fn check_operands(
        &self,
        op: Op,
        inputs: &[TensorId],
        outputs: &[TensorId],
    ) -> Result<(), GraphError> {
        let (n_in, n_out) = op.arity();
        for (what, expected, given) in [
            ("inputs", n_in, inputs.len()),
            ("outputs", n_out, outputs.len()),
        ] {
            if expected != given {
                return Err(GraphError::Arity {
                    op: op.name(),
                    what,
                    expected,
                    given,
                });
            }
        }
        let contract = op.contract();
        let roles: Vec<&'static str> = contract
            .inputs()
            .iter()
            .chain(&contract.outputs())
            .map(|s| s.name)
            .collect();
        let operands: Vec<TensorId> = inputs.iter().chain(outputs).copied().collect();
        contract
            .check_shapes(&crate::ops::Dims::new(self, &roles, &operands))
            .map_err(|detail| GraphError::Shape {
                op: op.name(),
                detail,
            })?;
        Ok(())
    }

    /// Inserts before operation `at` a copy of `tensor` into a new tensor `name` (shaped and
    /// typed like it), an [`Op::Convert`] in the pass of that operation, which then reads the
    /// copy instead; returns the copy. The copy's layout is the caller's to choose. The copy of
    /// a gradient is a gradient of the same tensor; the copy of anything else (a parameter
    /// included: the step writes the copy, it is not trained) is an activation.
    pub fn insert_convert(
        &mut self,
        at: NodeId,
        tensor: TensorId,
        name: impl Into<String>,
    ) -> Result<TensorId, GraphError> {
        let Some(node) = self.nodes.get(at.index()) else {
            return Err(GraphError::Shape {
                op: "convert",
                detail: format!("there is no operation {}", at.index()),
            });
        };
        if !node.inputs.contains(&tensor) {
            return Err(GraphError::Shape {
                op: "convert",
                detail: format!(
                    "operation {} (`{}`) does not read `{}`",
                    at.index(),
                    node.op,
                    self.tensor(tensor).name
                ),
            });
        }
        let phase = node.op.phase();
        let t = self.tensor(tensor).clone();
        let axes: Vec<(&str, Dim)> = t.axes.iter().map(|a| (a.name.as_str(), a.dim)).collect();
        let role = match t.role {
            Role::Grad { of } => Role::Grad { of },
            _ => Role::Activation,
        };
        let copy = self.add_tensor(name, &axes, t.elem, role)?;
        for input in &mut self.nodes[at.index()].inputs {
            if *input == tensor {
                *input = copy;
            }
        }
        self.nodes.insert(
            at.index(),
            Node {
                op: Op::Convert { phase },
                inputs: vec![tensor],
                outputs: vec![copy],
            },
        );
        Ok(copy)
    }

    /// The operations, to rewrite (the memory planner's recomputation).
    pub(crate) fn nodes_mut(&mut self) -> &mut Vec<Node> {
        &mut self.nodes
    }

    /// The tensor that `t` is a copy of through [`Op::Convert`]s (following a chain of them),
    /// or `t` itself: a copy in another layout holds the same values.
    pub fn copied_from(&self, t: TensorId) -> TensorId {
        let mut t = t;
        while let Some(node) = self
            .nodes
            .iter()
            .find(|n| matches!(n.op, Op::Convert { .. }) && n.outputs.first() == Some(&t))
        {
            t = node.inputs[0];
        }
        t
    }

    /// The tensors some operation writes.
    fn written(&self) -> HashSet<TensorId> {
        self.nodes
            .iter()
            .flat_map(|n| n.outputs.iter().copied())
            .collect()
    }

    /// The forward tensors that a backward operation reads: what the forward must keep.
    pub fn saved(&self) -> Vec<TensorId> {
        let mut saved: Vec<TensorId> = Vec::new();
        for node in self
            .nodes
            .iter()
            .filter(|n| n.op.phase() == Phase::Backward)
        {
            for &t in &node.inputs {
                let role = self.tensor(t).role;
                if matches!(
                    role,
                    Role::Activation
                        | Role::Param
                        | Role::Frozen
                        | Role::ParamCopy { .. }
                        | Role::Input
                        | Role::Constant
                ) && !saved.contains(&t)
                {
                    saved.push(t);
                }
            }
        }
        saved.sort();
        saved
    }

    /// The parameters, in order.
    pub fn params(&self) -> Vec<TensorId> {
        self.ids()
            .filter(|&t| self.tensor(t).role == Role::Param)
            .collect()
    }

    /// The frozen parameters ([`Role::Frozen`]), in order.
    pub fn frozen(&self) -> Vec<TensorId> {
        self.ids()
            .filter(|&t| self.tensor(t).role == Role::Frozen)
            .collect()
    }

    /// Every tensor set from outside as a weight: the parameters, trained and frozen, in
    /// order.
    pub fn weights(&self) -> Vec<TensorId> {
        self.ids()
            .filter(|&t| matches!(self.tensor(t).role, Role::Param | Role::Frozen))
            .collect()
    }

    /// Freezes parameter `p` ([`Role::Frozen`]): the backward derived later writes no gradient
    /// of it and the optimizer gives it no state. Fails once the backward is derived, and for
    /// anything but a trained parameter.
    pub fn freeze(&mut self, p: TensorId) -> Result<(), GraphError> {
        if self.has_backward() {
            return Err(GraphError::Backward(format!(
                "`{}` can't be frozen once the backward is derived",
                self.tensor(p).name
            )));
        }
        let tensor = &mut self.tensors[p.index()];
        match tensor.role {
            Role::Param => {
                tensor.role = Role::Frozen;
                Ok(())
            }
            Role::Frozen => Ok(()),
            role => Err(GraphError::Shape {
                op: "freeze",
                detail: format!("`{}` is no parameter ({role:?})", tensor.name),
            }),
        }
    }

    /// The copies of parameter `p` in other element types ([`Role::ParamCopy`]), in order.
    pub fn copies_of(&self, p: TensorId) -> Vec<TensorId> {
        self.ids()
            .filter(|&t| self.tensor(t).role == Role::ParamCopy { of: p })
            .collect()
    }

    /// The gradient of `of`, once the backward is derived (`None` for tensors the loss does not
    /// depend on, and for inputs). Where a gradient passes through an operation unchanged (a
    /// sum, a bias), one tensor is the gradient of several.
    pub fn grad(&self, of: TensorId) -> Option<TensorId> {
        self.grads.get(of.index()).copied().flatten()
    }

    /// Records `grad` as the gradient of `of`.
    pub(crate) fn set_grad(&mut self, of: TensorId, grad: TensorId) {
        if self.grads.len() < self.tensors.len() {
            self.grads.resize(self.tensors.len(), None);
        }
        self.grads[of.index()] = Some(grad);
    }

    /// Whether the backward has been derived.
    pub fn has_backward(&self) -> bool {
        self.nodes.iter().any(|n| n.op.phase() == Phase::Backward)
    }
}

impl fmt::Display for Graph {
    /// One operation a line: `op(inputs) -> outputs`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for node in &self.nodes {
            let names = |ids: &[TensorId]| {
                ids.iter()
                    .map(|&t| self.tensor(t).name.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            };
            writeln!(
                f,
                "{:<9} {}({}) -> {}",
                format!("{:?}", node.op.phase()).to_lowercase(),
                node.op.name(),
                names(&node.inputs),
                names(&node.outputs)
            )?;
        }
        Ok(())
    }
}
