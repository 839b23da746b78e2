//! The kernels of on-device fine-tuning, forward and backward, each on the GPU and the CPU.
//!
//! Every kernel is built for the views of its operands: a [`View`](fblayout_core::layout::View)
//! of any layout (row-major, column-major, R-Tile; transposed, split, merged, broadcast). Its
//! WGSL is assembled by the core's kernel surface ([`fblayout_core::kernel`]) and validated by
//! naga when the kernel is built; its body names coordinates only. Each GPU kernel records into
//! a [`Batch`](crate::runtime::Batch) and has a CPU twin (`*_cpu`) that computes the same
//! function in `f64` through the operands' addressing, which is what the GPU is tested against.
//!
//! The backward of a kernel reads the gradients through the views of the tensors they are the
//! gradients of, so one layout definition serves both passes.
//!
//! - [`activation`]: GELU (erf and tanh), SiLU and SwiGLU.
//! - [`norm`]: LayerNorm and RMSNorm.
//! - [`bias`]: bias add and its gradient.
//! - [`adamw`]: the AdamW step over a group of parameters in one dispatch, and the sum of
//!   squares of a gradient (for clipping).
//! - [`finite`]: whether a tensor holds an infinite or NaN element (loss scaling's check).
//! - [`add`]: sums (residual connections; gradients that meet).
//! - [`copy`]: copies between layouts (the conversions of a layout plan).
//! - [`matmul`]: batched GEMM through views of any layout, and a linear layer's three GEMMs.
//! - [`coop`]: the GEMM on cooperative matrices (tensor cores), f16 operands and f32 sums.
//! - [`softmax`]: softmax along the last axis, with a scale and an optional causal mask.
//! - [`cross_entropy`]: cross-entropy of logits against integer labels, with ignored rows.
//! - [`embedding`]: embedding lookup and its deterministic scatter-add gradient.
//! - [`attention`]: multi-head and grouped-query attention through views of Q, K and V.
//! - [`rope`]: rotary position embedding (Llama's), forward and backward, and its tables.

pub mod activation;
pub mod adamw;
pub mod add;
pub mod attention;
pub mod bias;
mod compiled;
pub mod coop;
pub mod copy;
pub mod cross_entropy;
pub(crate) mod elementwise;
pub mod embedding;
mod error;
pub mod finite;
mod group;
pub mod matmul;
pub mod norm;
pub(crate) mod reduce_rows;
pub mod rope;
pub mod softmax;

pub use activation::{Activation, ActivationOp, SwigluOp};
pub use adamw::{AdamW, AdamWMember, AdamWOp, AdamWTensors, StepValues, SumSquaresOp};
pub use add::AddOp;
pub use attention::{
    Attention, AttentionArgs, AttentionExtents, AttentionOp, AttentionViews, qkv_views,
};
pub use bias::{BiasLaunch, BiasOp};
pub use coop::{CoopConfig, CoopMatmulOp};
pub use copy::CopyOp;
pub use cross_entropy::{CrossEntropyMean, CrossEntropyOp, CrossEntropyState, CrossEntropyTotal};
pub use embedding::{EmbeddingOp, TokenIds};
pub use error::OpError;
pub use finite::NonFiniteOp;
pub use matmul::{LinearOp, MatmulOp};
pub use norm::{
    LayerNormGrads, LayerNormOp, LayerNormTensors, NormLaunch, NormOp, Residual, RmsNormGrads,
    RmsNormOp, RmsNormTensors, RowLaunch, RowSum,
};
pub use rope::{RopeAngles, RopeOp, RopeScaling, RopeViews, rope_tables};
pub use softmax::{Mask, Softmax, SoftmaxOp};
