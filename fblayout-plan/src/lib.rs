//! The training graph of a transformer, and the choice of every tensor's layout and buffer
//! over it.
//!
//! - [`graph`]: the training-graph IR — tensors with symbolic batch and sequence extents,
//!   the kernels' operations, and the backward derived by reverse-mode differentiation.
//! - [`models`]: the shipped graphs, a BERT-style encoder and a GPT-style decoder.
//! - [`lora`]: LoRA's low-rank adapters on a model's linear layers, the base frozen.
//! - [`layouts`]: the layouts a graph tensor can take (row-major, column-major, R-Tiles).
//! - [`ops`]: every operation's contract — operand roles, views, access pattern, scratch,
//!   backward rule, CPU twin and GPU kernel — which everything else reads.
//! - [`memory`]: the memory plan — every tensor's live range and buffer, the peak by
//!   category, and recomputation of cheap activations.
//! - [`exec`]: executing a training step (forward, backward, AdamW) of a graph under its
//!   layouts and memory plan, with the views each kernel reads its operands through.
//! - [`calibrate`]: the cost model's factors measured on an adapter, by timing kernels and
//!   training steps: a layer above selection and execution.
//! - [`select`]: the choice of every tensor's layout — cost model, calibration, strategies,
//!   and the plan with its explanation.
//!
//! ```
//! use fblayout_plan::graph::{Op, Phase};
//! use fblayout_plan::models::{Model, ModelConfig, build};
//!
//! let config = ModelConfig::new(100, 32, 4).with_max_positions(16).with_ffn(64).with_layers(2);
//! let g = build(Model::Encoder, config)?;
//! let backward = g.nodes().iter().filter(|n| n.op.phase() == Phase::Backward).count();
//! assert!(backward > 0);
//! // Every parameter has a gradient, and the backward reads each block's attention probabilities.
//! assert!(g.params().iter().all(|&p| g.grad(p).is_some()));
//! let probs = g.find("l0.attn.probs").unwrap();
//! assert!(g.saved().contains(&probs));
//! # Ok::<(), fblayout_plan::graph::GraphError>(())
//! ```

pub mod calibrate;
pub mod exec;
pub mod graph;
pub mod layouts;
pub mod lora;
pub mod memory;
pub mod models;
pub mod ops;
pub mod select;

/// What the crate's own tests need beyond its API (the names a GPU step times its work
/// under): no stable interface, and no part of the public surface.
#[doc(hidden)]
pub mod __private {
    pub use crate::exec::gpu::{OVERFLOW_SECTION, section};
}
