//! Executing a training step of a [`Graph`]: forward, backward and AdamW.
//!
//! An executor takes the graph, the layout of every tensor ([`LayoutChoice`]), and a
//! [`MemoryPlan`](crate::memory::MemoryPlan) that places every tensor in a buffer; tensors whose
//! lives don't overlap share one. Every tensor is stored in its own layout, kernels read it
//! through the views of [`views`], and a [`Op::Convert`](crate::graph::Op::Convert) node copies a
//! tensor into another layout.
//!
//! - [`CpuStep`] runs on the CPU backend of `fblayout-kernels`, in `f64`: the reference, and the
//!   executor the memory planner's tests run with every freed buffer poisoned.
//! - [`GpuStep`] builds every kernel once for its views, takes its buffers from the memory plan
//!   (through the device's buffer pool), and records a whole step into one batch: one
//!   submission, one named section per operation for timing. A graph in mixed precision
//!   ([`precision::mixed`](crate::graph::precision::mixed)) runs with dynamic loss scaling
//!   ([`scaling`]), its linear layers on tensor cores where the device has them.
//!
//! Parameters start from [`CpuStep::init_params`] (or values given by name), their copies
//! ([`Role::ParamCopy`], mixed precision's `f16` weights) with them; the optimizer's moments
//! start at zero and persist across steps, as do the parameters and their copies (which each
//! AdamW step writes with the updated parameters). After a step the parameters (and their
//! copies), the optimizer state, the loss, every parameter's gradient and the tensors the memory
//! plan keeps ([`MemoryOptions::keep`](crate::memory::MemoryOptions::keep)) can be read back;
//! any other tensor's buffer may have been reused.
//!
//! `evaluate` ([`CpuStep::evaluate`], [`GpuStep::evaluate`]) runs the forward alone — no
//! gradient, no update — and returns the loss; after it the tensors the memory plan keeps (a
//! model's logits, its last hidden state) can be read back.

mod cpu;
pub(crate) mod gpu;
mod init;
pub mod scaling;
pub mod views;

use fblayout_core::layout::{BoundView, LayoutError, LayoutErrors};
use fblayout_kernels::GpuError;
use fblayout_kernels::ops::OpError;

pub use cpu::CpuStep;
pub use fblayout_kernels::runtime::Timing;
pub(crate) use gpu::section;
pub use gpu::{GpuStep, HostTime};
pub use init::initial_values;
pub(crate) use init::named_rng;
pub use scaling::{LossScaleState, LossScaling};

use crate::graph::{Graph, Role, Sizes, Tensor, TensorId};
use crate::layouts::{LayoutChoice, StorageError};
use crate::memory::MemoryError;
use crate::ops::{IndexBound, first_uploaded, index_limits};

/// AdamW's hyper-parameters (the kernels' own type): the executor supplies them, with the step
/// number, at run time.
pub type AdamWConfig = fblayout_kernels::ops::AdamW;

/// The inputs of one step, each `[batch, seq]` row-major: token ids, position ids, labels, and
/// any other integer input of the graph by name ([`with`](Self::with)).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StepInputs {
    /// Token ids, below the vocabulary size.
    pub ids: Vec<u32>,
    /// Position ids, below the position table's size.
    pub positions: Vec<u32>,
    /// The token each position should predict (`u32::MAX` counts for nothing).
    pub labels: Vec<u32>,
    /// The graph's other inputs, by name.
    others: Vec<(String, Vec<u32>)>,
}

impl StepInputs {
    /// These token ids, position ids and labels (each `[batch, seq]` row-major).
    pub fn new(ids: Vec<u32>, positions: Vec<u32>, labels: Vec<u32>) -> Self {
        Self {
            ids,
            positions,
            labels,
            others: Vec::new(),
        }
    }

    /// Random ids and labels below `vocab` (from `seed`), positions `0..seq` in every sequence.
    pub fn random(vocab: u32, sizes: Sizes, seed: u64) -> Self {
        let mut rng = init::Rng::new(seed);
        let n = (sizes.batch * sizes.seq) as usize;
        let mut draw = || (0..n).map(|_| rng.below(vocab)).collect::<Vec<_>>();
        let ids = draw();
        let labels = draw();
        let positions = (0..n).map(|i| i as u32 % sizes.seq.max(1)).collect();
        Self {
            ids,
            positions,
            labels,
            others: Vec::new(),
        }
    }

    /// These inputs with the values of input `name` set to `values` (replacing any it had).
    pub fn with(mut self, name: &str, values: Vec<u32>) -> Self {
        match name {
            "ids" => self.ids = values,
            "positions" => self.positions = values,
            "labels" => self.labels = values,
            _ => match self.others.iter_mut().find(|(n, _)| n == name) {
                Some((_, v)) => *v = values,
                None => self.others.push((name.to_owned(), values)),
            },
        }
        self
    }

    /// The values of the graph input named `name`.
    pub fn get(&self, name: &str) -> Option<&[u32]> {
        match name {
            "ids" => Some(&self.ids),
            "positions" => Some(&self.positions),
            "labels" => Some(&self.labels),
            _ => self
                .others
                .iter()
                .find(|(n, _)| n == name)
                .map(|(_, v)| v.as_slice()),
        }
    }
}

/// Why a step could not be built or run.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ExecError {
    /// The layouts don't match the graph's tensors one to one.
    #[error("the graph has {tensors} tensors, but {layouts} layouts were given")]
    LayoutCount {
        /// Tensors in the graph.
        tensors: usize,
        /// Layouts given.
        layouts: usize,
    },
    /// A tensor's layout could not be built.
    #[error("tensor `{tensor}` can't be stored {choice}: {source}")]
    Layout {
        /// The tensor.
        tensor: String,
        /// Its layout.
        choice: LayoutChoice,
        /// Why.
        source: LayoutErrors,
    },
    /// A tensor can't be bound to the run's sizes.
    #[error("tensor `{tensor}` at the run's sizes: {source}")]
    Bind {
        /// The tensor.
        tensor: String,
        /// Why.
        source: Box<LayoutError>,
    },
    /// A kernel can't read a tensor through the view its operation needs.
    #[error("tensor `{tensor}` can't be read as {view}: {detail}")]
    View {
        /// The tensor.
        tensor: String,
        /// The view wanted.
        view: String,
        /// Why not.
        detail: String,
    },
    /// A kernel refused its operands.
    #[error("operation {node} (`{op}`): {source}")]
    Op {
        /// The node's position.
        node: usize,
        /// The operation.
        op: &'static str,
        /// The kernel's error.
        source: Box<OpError>,
    },
    /// The memory plan was made for another graph or other sizes.
    #[error("the memory plan does not fit: {0}")]
    Plan(String),
    /// Loss scaling was asked of a step without `f16` gradients, or set out of its range.
    #[error("loss scaling: {0}")]
    LossScaling(String),
    /// A value given for a tensor doesn't fit it.
    #[error("tensor `{tensor}`: {detail}")]
    Value {
        /// The tensor.
        tensor: String,
        /// Why.
        detail: String,
    },
    /// The GPU failed.
    #[error("{what}: {source}")]
    Gpu {
        /// What was being done.
        what: String,
        /// The runtime's error.
        source: Box<GpuError>,
    },
    /// A step's loss or a parameter's gradient was infinite or NaN (where gradients are `f32`,
    /// so no loss scaling explains it): the step changed no parameter.
    #[error("step {step}: the {what} is not finite (infinite or NaN); no parameter was updated")]
    NonFinite {
        /// The step (from 1) that failed.
        step: u32,
        /// `loss` or the first gradient found so.
        what: String,
    },
    /// The step would take device memory its memory plan does not count: an operation's
    /// kernels took more scratch than its contract reports, or the recording's parameter
    /// blocks outgrew their allowance (a bug of a contract or of the allowance).
    #[error("the memory plan does not count everything the step allocates: {0}")]
    Uncounted(String),
    /// No tensor of that name, or one whose values a step does not keep.
    #[error("no tensor `{0}` can be read or written here")]
    Unknown(String),
    /// A tensor of the graph whose buffer the memory plan gives to later tensors within the
    /// step, so its values are gone by its end.
    #[error(
        "tensor `{0}` is not kept to the end of the step (its buffer may hold another tensor by \
         then): plan the memory keeping it (`MemoryOptions::keep`)"
    )]
    NotKept(String),
}

impl From<StorageError> for ExecError {
    fn from(e: StorageError) -> Self {
        match e {
            StorageError::LayoutCount { tensors, layouts } => {
                Self::LayoutCount { tensors, layouts }
            }
            StorageError::Layout {
                tensor,
                choice,
                source,
            } => Self::Layout {
                tensor,
                choice,
                source,
            },
        }
    }
}

impl From<MemoryError> for ExecError {
    fn from(e: MemoryError) -> Self {
        match e {
            MemoryError::Storage(e) => e.into(),
            MemoryError::Bind { tensor, source } => Self::Bind { tensor, source },
            MemoryError::Scratch { node, op, source } => Self::Op { node, op, source },
            e @ MemoryError::Keep { .. } => Self::Plan(e.to_string()),
        }
    }
}

impl ExecError {
    /// Tensor `tensor` failed to bind.
    pub(crate) fn bind(tensor: &str, source: LayoutError) -> Self {
        Self::Bind {
            tensor: tensor.to_owned(),
            source: Box::new(source),
        }
    }

    /// The kernel of operation `node`, `op`, failed.
    pub(crate) fn op(node: usize, op: &'static str, source: OpError) -> Self {
        Self::Op {
            node,
            op,
            source: Box::new(source),
        }
    }

    /// The GPU failed at `what`.
    pub(crate) fn gpu(what: &str, source: GpuError) -> Self {
        Self::Gpu {
            what: what.to_owned(),
            source: Box::new(source),
        }
    }
}

/// Refuses to set tensor `t` of `graph` where it is a parameter's copy: the executors write it
/// with the parameter (and its AdamW step with the updated parameter), so it never holds other
/// values.
pub(crate) fn check_settable(graph: &Graph, t: TensorId) -> Result<(), ExecError> {
    match graph.tensor(t).role {
        Role::ParamCopy { of } => Err(ExecError::Value {
            tensor: graph.tensor(t).name.clone(),
            detail: format!(
                "it is the copy of `{}`, written with it: set the parameter",
                graph.tensor(of).name
            ),
        }),
        _ => Ok(()),
    }
}

/// The gradient of `param`, a trained parameter of `graph`: what an executor's `set_grad`
/// sets. An error naming it where `graph` has no such parameter, or it is frozen.
pub(crate) fn param_grad(graph: &Graph, param: &str) -> Result<TensorId, ExecError> {
    let p = graph
        .find(param)
        .ok_or_else(|| ExecError::Unknown(param.to_owned()))?;
    graph
        .grad(p)
        .filter(|_| graph.tensor(p).role == Role::Param)
        .ok_or_else(|| ExecError::Unknown(format!("{param} (its gradient)")))
}

/// Checks that `given` logical values fit tensor `name`, bound as `bound`.
pub(crate) fn check_values(name: &str, given: usize, bound: &BoundView) -> Result<(), ExecError> {
    if given as u64 == bound.logical_len() {
        return Ok(());
    }
    Err(ExecError::Value {
        tensor: name.to_owned(),
        detail: format!("{given} values given for {} elements", bound.logical_len()),
    })
}

/// The values `inputs` give input tensor `tensor`, bound as `bound`, checked against it.
pub(crate) fn input_values<'a>(
    tensor: &Tensor,
    inputs: &'a StepInputs,
    bound: &BoundView,
) -> Result<&'a [u32], ExecError> {
    let values = inputs.get(&tensor.name).ok_or_else(|| ExecError::Value {
        tensor: tensor.name.clone(),
        detail: "the step's inputs have no values for it".into(),
    })?;
    check_values(&tensor.name, values.len(), bound)?;
    Ok(values)
}

/// The index bounds that read each input of a graph ([`index_limits`]): found once, when an
/// executor is built, and checked against every step's inputs (walking the graph's contracts
/// for each input, each step, took most of the GPU step's host time).
#[derive(Debug, Clone)]
pub(crate) struct InputBounds {
    /// By tensor: each bound's node, the bound, and the extent its values must stay below.
    limits: Vec<Vec<(usize, IndexBound, u32)>>,
}

impl InputBounds {
    /// The bounds of every input of `graph`, bound as `whole`.
    pub(crate) fn new(graph: &Graph, whole: &[BoundView]) -> Self {
        let limits = graph
            .ids()
            .map(|t| {
                if graph.tensor(t).role == Role::Input {
                    index_limits(graph, whole, t)
                } else {
                    Vec::new()
                }
            })
            .collect();
        Self { limits }
    }

    /// Checks the values of input `t` against every index bound that reads it: an id past its
    /// table or a label past the vocabulary is an error naming the tensor, the position and
    /// the limit, before anything runs.
    pub(crate) fn check(
        &self,
        graph: &Graph,
        t: TensorId,
        values: &[u32],
    ) -> Result<(), ExecError> {
        for &(node, bound, limit) in &self.limits[t.index()] {
            let bad = values
                .iter()
                .enumerate()
                .find(|&(_, &v)| v >= limit && Some(v) != bound.except);
            if let Some((position, &value)) = bad {
                let op = graph.nodes()[node].op;
                let allowed = bound
                    .except
                    .map_or_else(String::new, |e| format!(" (or {e}, which is ignored)"));
                return Err(ExecError::Value {
                    tensor: graph.tensor(t).name.clone(),
                    detail: format!(
                        "value {value} at position {position} is out of range: operation {node} \
                         (`{op}`) reads it as `{}` into `{}`, so it must be below {limit}{allowed}",
                        bound.ids, bound.into
                    ),
                });
            }
        }
        Ok(())
    }

    /// Where a GPU kernel reads input `t` uploaded with its index ([`first_uploaded`]).
    pub(crate) fn uploaded(&self, t: TensorId) -> Option<(usize, u32)> {
        first_uploaded(&self.limits[t.index()])
    }
}
