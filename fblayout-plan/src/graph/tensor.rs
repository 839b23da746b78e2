//! The tensors of a training graph: their axes, element type and role.

use std::fmt;

use fblayout_core::layout::ElemType;

/// An extent: known when the graph is built, or the batch size or sequence length of a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Dim {
    /// Sequences per batch, known at run time.
    Batch,
    /// Tokens per sequence, known at run time.
    Seq,
    /// A fixed extent.
    Fixed(u32),
}

impl Dim {
    /// The extent for a run of `sizes`.
    pub fn value(self, sizes: Sizes) -> u32 {
        match self {
            Self::Batch => sizes.batch,
            Self::Seq => sizes.seq,
            Self::Fixed(n) => n,
        }
    }
}

impl fmt::Display for Dim {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Batch => f.write_str("batch"),
            Self::Seq => f.write_str("seq"),
            Self::Fixed(n) => write!(f, "{n}"),
        }
    }
}

/// The run-time extents of a graph.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Sizes {
    /// Sequences per batch.
    pub batch: u32,
    /// Tokens per sequence.
    pub seq: u32,
}

/// A named axis of a tensor.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Axis {
    /// Its name (`batch`, `seq`, `hidden`, `vocab`, ...).
    pub name: String,
    /// Its extent.
    pub dim: Dim,
}

/// A tensor's handle in its [`Graph`](super::Graph).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TensorId(pub(crate) u32);

impl TensorId {
    /// The tensor's position in the graph's table.
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

/// What a tensor is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Role {
    /// Read from outside and never differentiated: token ids, positions, labels.
    Input,
    /// A trained parameter.
    Param,
    /// A parameter kept fixed (LoRA's base weights): set from outside and read like a
    /// parameter, but never differentiated — the backward writes no gradient of it, though its
    /// readers still pass gradients to their other inputs — and never stepped, so it has no
    /// optimizer state.
    Frozen,
    /// Written by the forward.
    Activation,
    /// The per-row losses of the forward.
    Loss,
    /// The gradient (or one contribution to the gradient) of a tensor of the forward.
    Grad {
        /// The tensor it is the gradient of.
        of: TensorId,
    },
    /// Optimizer state kept across steps (AdamW's moments), read and written in place.
    State {
        /// The parameter it belongs to.
        of: TensorId,
    },
    /// A value set from outside once and kept across steps, never trained nor differentiated:
    /// a constant table (RoPE's cosines and sines).
    Constant,
    /// A copy of a parameter (or of a constant) in another element type, kept across steps:
    /// written by the parameter's AdamW step with the updated values (and by the executor
    /// wherever the parameter or constant is set), read in its place (mixed precision's `f16`
    /// weights).
    ParamCopy {
        /// The parameter it is a copy of.
        of: TensorId,
    },
}

/// One tensor of a graph.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tensor {
    /// A name unique in the graph (`l0.ffn_up`, `d_l0.ffn_up`, ...).
    pub name: String,
    /// Its axes, outermost first.
    pub axes: Vec<Axis>,
    /// Its element type.
    pub elem: ElemType,
    /// What it is for.
    pub role: Role,
}

impl Tensor {
    /// Its fixed extents, outermost first, with a run-sized axis (batch, sequence) as 0: the
    /// shape of a weight, a constant or an optimizer state, whose axes are all fixed, as a
    /// checkpoint stores it.
    pub fn fixed_extents(&self) -> Vec<usize> {
        self.axes
            .iter()
            .map(|a| match a.dim {
                Dim::Fixed(n) => n as usize,
                Dim::Batch | Dim::Seq => 0,
            })
            .collect()
    }

    /// The number of elements for a run of `sizes`.
    pub fn elements(&self, sizes: Sizes) -> u64 {
        self.axes
            .iter()
            .map(|a| u64::from(a.dim.value(sizes)))
            .product()
    }

    /// The bytes of its elements (without the padding a layout may add) for `sizes`.
    pub fn bytes(&self, sizes: Sizes) -> u64 {
        self.elements(sizes) * u64::from(self.elem.size_bytes())
    }

    /// The run-time extents of its axes for a run of `sizes`, as `(axis, extent)` pairs: what
    /// its layout (and every view of it) is bound with.
    pub fn run_extents(&self, sizes: Sizes) -> Vec<(&str, u32)> {
        self.axes
            .iter()
            .filter(|a| !matches!(a.dim, Dim::Fixed(_)))
            .map(|a| (a.name.as_str(), a.dim.value(sizes)))
            .collect()
    }

    /// Whether it lives for the whole step (and across steps): inputs, parameters (frozen
    /// ones too), their copies, constants and optimizer state.
    pub fn is_persistent(&self) -> bool {
        matches!(
            self.role,
            Role::Input
                | Role::Param
                | Role::Frozen
                | Role::Constant
                | Role::ParamCopy { .. }
                | Role::State { .. }
        )
    }

    /// Whether it is a gradient.
    pub fn is_grad(&self) -> bool {
        matches!(self.role, Role::Grad { .. })
    }
}
