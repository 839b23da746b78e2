//! What the GPU step holds from when it is built to its end beside its tensors' buffers and its
//! workspace (see the [module docs](super)): the facts both the memory plan and the executor
//! read — which of its own vectors the step keeps and a bound on its dispatches' parameter
//! blocks.

use fblayout_kernels::ops::adamw::STEP_SCALARS;
use fblayout_kernels::runtime::granular;

use crate::graph::{Graph, Op};

/// The values of the flag that gates the AdamW steps.
pub(crate) const GATE_VALUES: u32 = 1;

/// Whether the step of `graph` gates AdamW steps on a check of the gradients: where it has
/// any.
pub(crate) fn gated(graph: &Graph) -> bool {
    graph
        .nodes()
        .iter()
        .any(|n| matches!(n.op, Op::AdamW { .. }))
}

/// The bytes a device vector of `n` 4-byte values takes from the pool.
fn vector_bytes(n: u32) -> u64 {
    granular(u64::from(n) * 4)
}

/// The bytes of the step's own device vectors: AdamW's step scalars, and the flag that gates
/// the AdamW steps where `graph` has any.
pub(crate) fn step_vectors_bytes(graph: &Graph) -> u64 {
    let gate = if gated(graph) {
        vector_bytes(GATE_VALUES)
    } else {
        0
    };
    vector_bytes(STEP_SCALARS) + gate
}

/// The bytes of parameter block the memory plan counts for each dispatch of a step: the
/// recording keeps every dispatch's block in one uniform buffer, each at an offset aligned as
/// the device requires (at most 256 bytes; WebGPU allows no larger alignment), so a dispatch
/// takes its block (all under 256 bytes) rounded up to that.
pub(crate) const PARAMS_PER_DISPATCH: u64 = 256;

/// The dispatches the memory plan counts at least for each operation: most record one or two,
/// an attention's backward up to nine with its products split, so four an operation bound a
/// step's blocks several times over. An operation that records more says so in its contract
/// (`dispatches`: a language-model head's chunks). The step checks its recording against the
/// sum and fails where it is exceeded.
pub(crate) const DISPATCHES_PER_NODE: u64 = 4;

/// What the GPU step holds beside its tensors' buffers and its workspace, from when it is
/// built to its end.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct Held {
    /// The state kernels keep (the contracts' `state_bytes`).
    pub(crate) state: u64,
    /// The inputs kernels read uploaded, with their index.
    pub(crate) uploads: u64,
    /// The step's own vectors.
    pub(crate) vectors: u64,
    /// The bound on the dispatches' parameter blocks.
    pub(crate) params: u64,
}

impl Held {
    /// The bytes of all of it.
    pub(crate) fn bytes(&self) -> u64 {
        self.state + self.uploads + self.vectors + self.params
    }
}
