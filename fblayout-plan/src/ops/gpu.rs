//! What a contract's GPU kernel is built with and recorded with.

use std::any::Any;
use std::sync::Arc;

use fblayout_kernels::GpuBuffer;
use fblayout_kernels::ops::TokenIds;
use fblayout_kernels::runtime::{Batch, Gpu};
use fblayout_kernels::tensor::GpuArg;

use super::{Args, OpErr};
use crate::exec::views::BoundOperand;
use crate::graph::{Graph, Op, TensorId};

/// A node's kernel, built once for its operands' views.
pub(crate) trait GpuKernel {
    /// Records the node's work into `batch`.
    fn record(
        &self,
        batch: &mut Batch<'_>,
        args: &Args<GpuArg<'_>>,
        ctx: &RecordCtx<'_>,
    ) -> Result<(), OpErr>;

    /// Tunes its launch parameters for `args`' extents (timing candidates on `gpu`, with
    /// nothing of the step's tensors overwritten); `Some(on_tensor_cores)` where it has any.
    fn tune(
        &self,
        _gpu: &Gpu,
        _args: &Args<GpuArg<'_>>,
        _ctx: &RecordCtx<'_>,
    ) -> Result<Option<bool>, OpErr> {
        Ok(None)
    }

    /// Whether what it records depends on the loss scale ([`RecordCtx::loss_scale`]): then it
    /// is recorded again in the steps after the scale moved (rarely: on an overflow, or after
    /// the scaling's interval of steps without one).
    fn reads_loss_scale(&self) -> bool {
        false
    }

    /// The buffer of the mean loss (one `f32`) it computes each step, where it computes one:
    /// the executor reads every such buffer, and the overflow flag, in one read-back.
    fn loss(&self) -> Option<&GpuBuffer> {
        None
    }

    /// Whether the executor records it with a group of its kind (AdamW), not by itself.
    fn grouped(&self) -> bool {
        false
    }
}

/// A kernel that records nothing: a bias or an addition a product before it does in its
/// epilogue.
pub(crate) struct Nothing;

impl GpuKernel for Nothing {
    fn record(
        &self,
        _: &mut Batch<'_>,
        _: &Args<GpuArg<'_>>,
        _: &RecordCtx<'_>,
    ) -> Result<(), OpErr> {
        Ok(())
    }
}

/// State that two nodes' kernels share (a cross-entropy's forward and backward), by key.
pub(crate) type Shared = Arc<dyn Any + Send + Sync>;

/// What a kernel is built with besides its operands.
pub(crate) struct BuildCtx<'a> {
    pub(crate) gpu: &'a Gpu,
    pub(crate) graph: &'a Graph,
    /// The operands of the node whose work this one's epilogue does (a bias, a sum or an
    /// activation's backward after the product).
    pub(crate) epilogue: Option<Args<&'a BoundOperand>>,
    /// That node's operation.
    pub(crate) epilogue_op: Option<Op>,
    /// Whether the node before this one does its work in its epilogue.
    pub(crate) folded: bool,
    /// State shared between kernels, by key (the tensor it belongs to).
    pub(crate) shared: &'a mut Vec<(TensorId, Shared)>,
}

impl BuildCtx<'_> {
    /// The state shared under `key`, of type `T`.
    pub(crate) fn find<T: Any + Send + Sync>(&self, key: TensorId) -> Option<Arc<T>> {
        self.shared
            .iter()
            .find(|(k, _)| *k == key)
            .and_then(|(_, s)| Arc::clone(s).downcast::<T>().ok())
    }

    /// Shares `state` under `key`.
    pub(crate) fn share<T: Any + Send + Sync>(&mut self, key: TensorId, state: Arc<T>) {
        self.shared.push((key, state));
    }
}

/// What a kernel is recorded with besides its operands.
pub(crate) struct RecordCtx<'a> {
    /// The uploaded token ids of every input an embedding reads, by tensor index.
    pub(crate) token_ids: &'a [Option<TokenIds>],
    /// The factor the loss's gradient starts with (the loss scale; 1 without scaling).
    pub(crate) loss_scale: f32,
    /// The graph.
    pub(crate) graph: &'a Graph,
    /// The operands of the node whose work this one's epilogue does, bound.
    pub(crate) epilogue: Option<&'a Args<GpuArg<'a>>>,
}

impl RecordCtx<'_> {
    /// The uploaded ids of input `t`.
    pub(crate) fn ids(&self, op: &'static str, t: TensorId) -> Result<&TokenIds, OpErr> {
        self.token_ids
            .get(t.index())
            .and_then(Option::as_ref)
            .ok_or_else(|| OpErr::Shape {
                op,
                detail: format!(
                    "`{}` is no input of the step: the GPU reads uploaded ids",
                    self.graph.tensor(t).name
                ),
            })
    }
}
