//! Operation contracts: one per operation, in one file each, and read by everything else.
//!
//! A contract (the crate's `Contract` trait) says everything about one graph operation ([`Op`]):
//!
//! - its **operand roles**, inputs and outputs, each a [`Slot`]: the role's name, the view a
//!   kernel reads the tensor through ([`ViewRule`]), and how the kernel's threads walk it
//!   ([`Access`]: what the cost model prices);
//! - its **pass** (forward, backward, optimizer) and its **backward rule** (the operations
//!   reverse-mode differentiation emits for it);
//! - its **matrix product**, if it computes one (which roles it multiplies and its flops), its
//!   **scratch** (the buffers its kernels take while they run, as they report them for its
//!   operands), the **state** its kernel keeps for the whole step, and the cost model's
//!   **kernel kind**;
//! - its **CPU twin**, run by the CPU executor, and its **GPU kernel**, built once for the
//!   operands' views and recorded each step, with its tunable launch parameters.
//!
//! `Op::contract` maps every operation to exactly one contract, by an exhaustive match.
//! The graph's arity and backward, the executors' views and dispatch
//! ([`op_views`](crate::exec::views::op_views)), the cost model's access table, the calibration's
//! kernel kinds and the memory planner's workspace all come from it; none restates an operand
//! position. Operands are bound by role name ([`Args`]), never by index.
//!
//! Adding an operation: its kernel (in `fblayout-kernels`), a variant of [`Op`], a file here
//! with its contract, one arm in `Op::contract`, and an entry in [`registry`], which gives it
//! the generic contract tests (GPU against its CPU twin, backward against finite differences,
//! typed errors for bad shapes). The book's chapter on kernels walks RoPE through it.

mod activation;
mod adamw;
mod add;
pub(crate) mod args;
mod attention;
mod bias;
mod convert;
pub(crate) mod cpu;
mod cross_entropy;
mod embedding;
pub(crate) mod gpu;
mod head_loss;
mod index;
mod linear;
mod norm;
mod rope;
mod shape;
#[cfg(test)]
mod tests;

use std::fmt;

use fblayout_core::layout::ElemType;
use fblayout_kernels::runtime::Scratch;

pub(crate) use adamw::{AdamWGroup, build_adamw_groups, record_adamw_group};
pub use args::Args;
pub(crate) use index::{first_uploaded, index_limits, uploaded_ids};
pub use shape::Dims;

use crate::graph::{Act, BackwardRule, Dim, FusedAttention, HeadLoss, Op, Phase, Sizes, TensorId};
use crate::select::KernelKind;

/// Which axis of an operand neighbouring threads walk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Walk {
    /// The last axis (the forward reduction axis).
    Last,
    /// The axis before the last (tokens; the backward reduction axis). A rank-1 operand has
    /// none and is walked along its only axis.
    BeforeLast,
    /// The operand's own memory order.
    Own,
    /// The order of the operation's first output.
    LikeOutput,
}

/// One walk over an operand.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Access {
    /// The axis the threads walk.
    pub walk: Walk,
    /// Whether the kernel reduces along it.
    pub reduce: bool,
}

impl Access {
    /// A walk along `walk`.
    pub const fn along(walk: Walk) -> Self {
        Self {
            walk,
            reduce: false,
        }
    }

    /// A walk along `walk` that reduces along it.
    pub const fn reducing(walk: Walk) -> Self {
        Self { walk, reduce: true }
    }
}

/// A walk along the last axis.
pub(crate) const LAST: &[Access] = &[Access::along(Walk::Last)];
/// A walk in the operand's own memory order.
pub(crate) const OWN: &[Access] = &[Access::along(Walk::Own)];
/// A walk in the order of the operation's first output.
pub(crate) const LIKE_OUTPUT: &[Access] = &[Access::along(Walk::LikeOutput)];
/// A walk along tokens.
pub(crate) const BEFORE_LAST: &[Access] = &[Access::along(Walk::BeforeLast)];
/// A reduction along the last axis.
pub(crate) const REDUCE_LAST: &[Access] = &[Access::reducing(Walk::Last)];
/// A reduction along tokens.
pub(crate) const REDUCE_TOKENS: &[Access] = &[Access::reducing(Walk::BeforeLast)];

/// The view a kernel reads an operand's tensor through.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ViewRule {
    /// The tensor as declared.
    Whole,
    /// Its leading batch and sequence axes merged into `tokens`.
    Tokens,
    /// [`Tokens`](Self::Tokens) where its two leading axes are the batch and the sequence (an
    /// activation or its gradient), else as declared (a weight's gradient): what a product that
    /// does the operation's work reads and writes (see
    /// [`Graph::epilogues`](crate::graph::Graph::epilogues)).
    TokensWhereAny,
    /// A matrix with its two axes swapped (a weight stored `[d_out, d_in]`).
    Transposed,
    /// `[batch, seq, heads · head_dim]` as `[batch, seq, heads, head_dim]`.
    Heads {
        /// Heads.
        heads: u32,
    },
    /// The fused projection `[batch, seq, (heads + 2 kv_heads) · head_dim]` as three operands,
    /// the queries, keys and values, each `[batch, seq, heads, head_dim]`, named `names`.
    Qkv {
        /// Query heads.
        heads: u32,
        /// Key and value heads.
        kv_heads: u32,
        /// The three operands' role names.
        names: [&'static str; 3],
    },
}

/// One operand role of a contract.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Slot {
    /// The role's name, by which kernels bind it.
    pub name: &'static str,
    /// The view the kernel reads or writes it through.
    pub view: ViewRule,
    /// How the kernel's threads walk it (an operand may be walked more than once).
    pub access: &'static [Access],
}

impl Slot {
    /// A role read through `view`, walked as `access`.
    pub const fn new(name: &'static str, view: ViewRule, access: &'static [Access]) -> Self {
        Self { name, view, access }
    }

    /// The names of the operands the role becomes (three for a fused projection).
    pub fn operand_names(&self) -> Vec<&'static str> {
        match self.view {
            ViewRule::Qkv { names, .. } => names.to_vec(),
            _ => vec![self.name],
        }
    }
}

/// The matrix product of an operation: the roles it multiplies, along which axis each is read
/// for the shared (`k`) dimension, and its floating-point operations.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Product {
    /// The left operand's input role and the walk of its `k` axis.
    pub a: (&'static str, Walk),
    /// The right operand's.
    pub b: (&'static str, Walk),
    /// Floating-point operations (multiply and add counted apart).
    pub flops: f64,
}

/// The operands of one node at a run's sizes, by role: what a contract's product and scratch
/// are computed from.
pub struct Shapes<'a> {
    inputs: Vec<(&'static str, Vec<u32>)>,
    outputs: Vec<(&'static str, Vec<u32>)>,
    bytes: &'a dyn Fn(TensorId) -> u64,
    ids: Vec<(&'static str, TensorId)>,
    elems: Vec<(&'static str, ElemType)>,
}

impl Shapes<'_> {
    /// The extents of role `role` (input or output).
    pub fn dims(&self, role: &str) -> &[u32] {
        self.inputs
            .iter()
            .chain(&self.outputs)
            .find(|(n, _)| *n == role)
            .map_or(&[], |(_, d)| d.as_slice())
    }

    /// The elements of role `role`.
    pub fn elements(&self, role: &str) -> f64 {
        self.dims(role).iter().map(|&d| f64::from(d)).product()
    }

    /// The extent of role `role`'s axis `from_end` places before the last (0: the last); 1
    /// where it has none.
    pub fn extent(&self, role: &str, from_end: usize) -> f64 {
        let dims = self.dims(role);
        dims.len()
            .checked_sub(from_end + 1)
            .map_or(1.0, |i| f64::from(dims[i]))
    }

    /// The bytes of role `role`'s tensor in its layout at the run's sizes (padding included),
    /// as the memory planner counts them.
    pub fn bytes(&self, role: &str) -> u64 {
        self.ids
            .iter()
            .find(|(n, _)| *n == role)
            .map_or(0, |&(_, t)| (self.bytes)(t))
    }

    /// The element type of role `role`'s tensor (`f32` for a role the node lacks).
    pub fn elem(&self, role: &str) -> ElemType {
        self.elems
            .iter()
            .find(|(n, _)| *n == role)
            .map_or(ElemType::F32, |&(_, e)| e)
    }

    /// The elements of role `role`'s tensor in its layout at the run's sizes (padding
    /// included): its [`bytes`](Self::bytes) over its element's.
    pub fn stored(&self, role: &str) -> u64 {
        self.bytes(role) / u64::from(self.elem(role).size_bytes())
    }

    /// The extent of role `role`'s axis `from_end` places before the last (0: the last), as
    /// an integer; 1 where it has none.
    pub fn extent_u32(&self, role: &str, from_end: usize) -> u32 {
        let dims = self.dims(role);
        dims.len().checked_sub(from_end + 1).map_or(1, |i| dims[i])
    }

    /// The elements of role `role`, as an integer (saturated at `u32::MAX`).
    pub fn elements_u32(&self, role: &str) -> u32 {
        self.dims(role)
            .iter()
            .fold(1u32, |n, &d| n.saturating_mul(d))
    }
}

/// Everything about one operation (see the module docs).
pub(crate) trait Contract {
    /// The operation's name in plans and errors.
    fn name(&self) -> &'static str;

    /// The pass it belongs to.
    fn phase(&self) -> Phase;

    /// Its input roles, in the graph node's order.
    fn inputs(&self) -> Vec<Slot>;

    /// Its output roles, in the graph node's order.
    fn outputs(&self) -> Vec<Slot>;

    /// Its shape rule: whether operands of these extents fit (an error says what does not).
    fn check_shapes(&self, d: &Dims) -> Result<(), String>;

    /// How its backward is written (forward operations only).
    fn backward(&self) -> Option<BackwardRule> {
        None
    }

    /// How its backward is written where only the outputs flagged in `grads` (one flag per
    /// output, in order) carry a gradient: [`backward`](Self::backward), unless the operation
    /// reads an output's gradient only where it has one (a fused residual's sum).
    fn backward_for(&self, _grads: &[bool]) -> Option<BackwardRule> {
        self.backward()
    }

    /// For a backward operation: a cheaper one that writes only the gradients `wanted` (one
    /// flag per output, in order; the unwanted ones are of frozen weights), its outputs the
    /// wanted ones in order, where it has one. Without one, every gradient is made and the
    /// unwanted ones are dropped.
    fn pruned(&self, _wanted: &[bool]) -> Option<Op> {
        None
    }

    /// A small instance (forward operations only: the others run in the graphs the generic
    /// tests build around a forward's sample).
    fn sample(&self) -> Option<Sample> {
        None
    }

    /// The cost model's kind of kernel (`None`: priced apart, as a conversion is).
    fn kind(&self) -> Option<KernelKind>;

    /// Its matrix product, if it computes one.
    fn product(&self, _shapes: &Shapes<'_>) -> Option<Product> {
        None
    }

    /// The buffers its kernels take while they run (from the step's workspace), as the kernels
    /// report them for these operands: what the memory planner's workspace lends it.
    fn scratch(&self, _shapes: &Shapes<'_>) -> Result<Scratch, OpErr> {
        Ok(Scratch::none())
    }

    /// The bytes its GPU kernel keeps from the device's pool from when it is built to the end
    /// of the step (a cross-entropy's per-row state, which its backward reads), as the kernel
    /// reports them.
    fn state_bytes(&self, _shapes: &Shapes<'_>) -> u64 {
        0
    }

    /// The role it reads as a linear layer's weight matrix, `[d_in, d_out]`: what a
    /// checkpoint's `nn.Linear` holds as `[out, in]`. An embedding table a tied head reads
    /// transposed is not one.
    fn linear_weight(&self) -> Option<&'static str> {
        None
    }

    /// The role its product reads as a weight that mixed precision gives an `f16` copy (see
    /// [`precision`](crate::graph::precision)), so that both factors of the product are `f16`:
    /// its linear weight by default (the linear layers' products name theirs also where they
    /// read it transposed: LoRA's `A` and `B`, a tied head's table).
    fn copied_weight(&self) -> Option<&'static str> {
        self.linear_weight()
    }

    /// The most dispatches its kernels record in a step (the memory plan counts a parameter
    /// block for each, and at least four an operation).
    fn dispatches(&self, _shapes: &Shapes<'_>) -> u64 {
        0
    }

    /// Whether it reads every input as stored, with no conversion before it: a backward that
    /// writes each gradient through the view of the tensor it reads it for, a kernel that
    /// reads ids as the step uploads them, or an optimizer step (in place, and recorded with
    /// its group).
    fn reads_stored(&self) -> bool {
        false
    }

    /// The output roles that stay `f32` in a mixed-precision step: sums that `f16` would round
    /// (a norm's saved statistics, an attention's log-sum-exp).
    fn f32_outputs(&self) -> &'static [&'static str] {
        &[]
    }

    /// The integer roles whose values index into another role.
    fn index_bounds(&self) -> Vec<IndexBound> {
        Vec::new()
    }

    /// The input role whose memory the output role may take, where that input is read here
    /// for the last time and both are stored alike: `[input, output]`. The kernel then reads
    /// each element of the input where it writes the output's, and the memory plan gives
    /// both one buffer ([`plan_memory`](crate::memory::plan_memory)).
    fn in_place(&self) -> Option<[&'static str; 2]> {
        None
    }

    /// How a linear product before it does its work as it writes, where one can
    /// ([`Graph::epilogues`](crate::graph::Graph::epilogues)): a sum, an activation's backward.
    fn merged(&self) -> Option<Merged> {
        None
    }

    /// Its CPU twin: runs it on `args`; returns the loss where it computes one.
    fn cpu(
        &self,
        ins: &cpu::Ins<'_>,
        outs: &mut cpu::Outs<'_>,
        ctx: &cpu::CpuCtx<'_>,
    ) -> Result<Option<f64>, OpErr>;

    /// Builds its GPU kernel for the views of `args`.
    fn gpu(
        &self,
        args: &Args<&crate::exec::views::BoundOperand>,
        ctx: &mut gpu::BuildCtx<'_>,
    ) -> Result<Box<dyn gpu::GpuKernel>, OpErr>;
}

pub(crate) type OpErr = fblayout_kernels::ops::OpError;

/// An operation a linear product before it does as it writes its output: `out = product ⊕ d`
/// as `merge` says ([`Contract::merged`]).
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Merged {
    /// The role that reads the product's output.
    pub(crate) reads: &'static str,
    /// The role the product reads as it writes (it must be ready when the product runs).
    pub(crate) d: &'static str,
    /// The output the product writes instead of its own.
    pub(crate) out: &'static str,
    /// How `d` joins the product.
    pub(crate) merge: fblayout_kernels::ops::matmul::Merge,
}

impl Op {
    /// The operation's contract (see the [module docs](crate::ops)).
    pub(crate) fn contract(&self) -> Box<dyn Contract> {
        match *self {
            Self::Embedding => Box::new(embedding::Embedding),
            Self::EmbeddingGrad => Box::new(embedding::EmbeddingGrad),
            Self::Linear => Box::new(linear::Linear {
                transposed: false,
                scale: 1.0,
            }),
            Self::LinearGradInput => Box::new(linear::LinearGradInput {
                transposed: false,
                scale: 1.0,
            }),
            Self::LinearGradWeight => Box::new(linear::LinearGradWeight {
                transposed: false,
                scale: 1.0,
            }),
            Self::LinearT { scale } => Box::new(linear::Linear {
                transposed: true,
                scale,
            }),
            Self::LinearTGradInput { scale } => Box::new(linear::LinearGradInput {
                transposed: true,
                scale,
            }),
            Self::LinearTGradWeight { scale } => Box::new(linear::LinearGradWeight {
                transposed: true,
                scale,
            }),
            Self::Bias => Box::new(bias::Bias),
            Self::BiasGrad => Box::new(bias::BiasGrad),
            Self::Add => Box::new(add::Add { accumulate: false }),
            Self::Accumulate => Box::new(add::Add { accumulate: true }),
            Self::LayerNorm { eps, residual } => Box::new(norm::LayerNorm { eps, residual }),
            Self::LayerNormGrad { eps, carry } => Box::new(norm::LayerNormGrad { eps, carry }),
            Self::RmsNorm { eps, residual } => Box::new(norm::RmsNorm { eps, residual }),
            Self::RmsNormGrad { eps, carry } => Box::new(norm::RmsNormGrad { eps, carry }),
            Self::Activation(act) => Box::new(activation::Activation { act }),
            Self::ActivationGrad(act) => Box::new(activation::ActivationGrad { act }),
            Self::Swiglu => Box::new(activation::Swiglu),
            Self::SwigluGrad => Box::new(activation::SwigluGrad),
            Self::Attention {
                heads,
                kv_heads,
                causal,
            } => Box::new(attention::Attention {
                heads,
                kv_heads,
                causal,
                backward: false,
                separate: false,
                padded: false,
                fused: false,
            }),
            Self::AttentionGrad {
                heads,
                kv_heads,
                causal,
            } => Box::new(attention::Attention {
                heads,
                kv_heads,
                causal,
                backward: true,
                separate: false,
                padded: false,
                fused: false,
            }),
            Self::AttentionSeparate {
                heads,
                kv_heads,
                causal,
                padded,
            } => Box::new(attention::Attention {
                heads,
                kv_heads,
                causal,
                backward: false,
                separate: true,
                padded,
                fused: false,
            }),
            Self::AttentionSeparateGrad {
                heads,
                kv_heads,
                causal,
            } => Box::new(attention::Attention {
                heads,
                kv_heads,
                causal,
                backward: true,
                separate: true,
                padded: false,
                fused: false,
            }),
            Self::FusedAttention(f) => Box::new(attention::Attention::fused(f, false)),
            Self::FusedAttentionGrad(f) => Box::new(attention::Attention::fused(f, true)),
            Self::Rope { heads } => Box::new(rope::Rope {
                heads,
                backward: false,
            }),
            Self::RopeGrad { heads } => Box::new(rope::Rope {
                heads,
                backward: true,
            }),
            Self::CrossEntropy { ignore_index } => Box::new(cross_entropy::CrossEntropy {
                ignore_index,
                backward: false,
            }),
            Self::CrossEntropyGrad { ignore_index } => Box::new(cross_entropy::CrossEntropy {
                ignore_index,
                backward: true,
            }),
            Self::HeadLoss(p) => Box::new(head_loss::Head { p, backward: false }),
            Self::HeadLossGrad(p) => Box::new(head_loss::Head { p, backward: true }),
            Self::AdamW { copy } => Box::new(adamw::AdamW { copy }),
            Self::Convert { phase } => Box::new(convert::Convert { phase }),
        }
    }

    /// A small instance of the operation, for forward operations (see [`Sample`]).
    pub fn sample(&self) -> Option<Sample> {
        self.contract().sample()
    }

    /// The input role it reads as a linear layer's weight matrix, `[d_in, d_out]`, where it
    /// has one: what a checkpoint's `nn.Linear` holds as `[out, in]`.
    pub fn linear_weight(&self) -> Option<&'static str> {
        self.contract().linear_weight()
    }

    /// How the backward of a forward operation is written where only the outputs flagged in
    /// `grads` carry a gradient (see [`Contract::backward_for`]).
    pub(crate) fn backward_for(&self, grads: &[bool]) -> Option<BackwardRule> {
        self.contract().backward_for(grads)
    }

    /// For a backward operation, the cheaper one that writes only the gradients `wanted` (see
    /// [`Contract::pruned`]).
    pub(crate) fn pruned(&self, wanted: &[bool]) -> Option<Op> {
        self.contract().pruned(wanted)
    }

    /// The names of its input roles, in the node's order.
    pub fn input_roles(&self) -> Vec<&'static str> {
        self.contract().inputs().iter().map(|s| s.name).collect()
    }

    /// The names of its output roles, in the node's order.
    pub fn output_roles(&self) -> Vec<&'static str> {
        self.contract().outputs().iter().map(|s| s.name).collect()
    }
}

/// One operation of every kind, each with its contract: what the generic contract tests
/// iterate over. A new operation is registered here.
pub fn registry() -> Vec<Op> {
    let acts = [Act::Gelu, Act::GeluTanh, Act::Silu, Act::Tanh];
    let mut ops = vec![
        Op::Embedding,
        Op::EmbeddingGrad,
        Op::Linear,
        Op::LinearGradInput,
        Op::LinearGradWeight,
        Op::LinearT { scale: 1.0 },
        Op::LinearTGradInput { scale: 1.0 },
        Op::LinearTGradWeight { scale: 1.0 },
        // LoRA's `B`: the factor in the product.
        Op::LinearT { scale: 2.5 },
        Op::LinearTGradInput { scale: 2.5 },
        Op::LinearTGradWeight { scale: 2.5 },
        Op::Bias,
        Op::BiasGrad,
        Op::Add,
        Op::Accumulate,
        Op::LayerNorm {
            eps: 1e-5,
            residual: false,
        },
        Op::LayerNorm {
            eps: 1e-5,
            residual: true,
        },
        Op::LayerNormGrad {
            eps: 1e-5,
            carry: false,
        },
        Op::LayerNormGrad {
            eps: 1e-5,
            carry: true,
        },
        Op::RmsNorm {
            eps: 1e-6,
            residual: false,
        },
        Op::RmsNorm {
            eps: 1e-6,
            residual: true,
        },
        Op::RmsNormGrad {
            eps: 1e-6,
            carry: false,
        },
        Op::RmsNormGrad {
            eps: 1e-6,
            carry: true,
        },
        Op::Swiglu,
        Op::SwigluGrad,
        Op::Attention {
            heads: 4,
            kv_heads: 2,
            causal: true,
        },
        Op::AttentionGrad {
            heads: 4,
            kv_heads: 2,
            causal: true,
        },
        Op::AttentionSeparate {
            heads: 4,
            kv_heads: 2,
            causal: true,
            padded: false,
        },
        Op::AttentionSeparateGrad {
            heads: 4,
            kv_heads: 2,
            causal: true,
        },
        Op::AttentionSeparate {
            heads: 2,
            kv_heads: 2,
            causal: false,
            padded: false,
        },
        Op::AttentionSeparate {
            heads: 4,
            kv_heads: 2,
            causal: false,
            padded: true,
        },
        Op::FusedAttention(FUSED_CAUSAL),
        Op::FusedAttentionGrad(FUSED_CAUSAL),
        Op::FusedAttention(FusedAttention {
            heads: 4,
            kv_heads: 2,
            causal: false,
            separate: true,
            padded: true,
        }),
        Op::FusedAttention(FusedAttention {
            heads: 2,
            kv_heads: 1,
            causal: true,
            separate: true,
            padded: false,
        }),
        Op::Rope { heads: 2 },
        Op::RopeGrad { heads: 2 },
        Op::CrossEntropy { ignore_index: 7 },
        Op::CrossEntropyGrad { ignore_index: 7 },
        // Chunks of 4 and 3 tokens: the samples' 10 tokens end in a shorter one.
        Op::HeadLoss(HeadLoss {
            ignore_index: 7,
            transposed: false,
            biased: true,
            chunk: 4,
            frozen: false,
        }),
        Op::HeadLoss(HeadLoss {
            ignore_index: 7,
            transposed: true,
            biased: false,
            chunk: 3,
            frozen: false,
        }),
        Op::AdamW { copy: false },
        Op::AdamW { copy: true },
        Op::Convert {
            phase: Phase::Forward,
        },
    ];
    for act in acts {
        ops.push(Op::Activation(act));
        ops.push(Op::ActivationGrad(act));
    }
    ops
}

/// A fused, causal, grouped-query attention over a fused projection (the registry's).
const FUSED_CAUSAL: FusedAttention = FusedAttention {
    heads: 4,
    kv_heads: 2,
    causal: true,
    separate: false,
    padded: false,
};

/// What a sample tensor holds.
#[derive(Debug, Clone, PartialEq)]
pub enum Holds {
    /// Trained floats (a parameter of the sample's graph).
    Floats,
    /// Integer ids below a bound (an input of the step).
    Ids {
        /// Every id is below it.
        below: u32,
    },
    /// A constant table's values.
    Constant(Vec<f64>),
    /// An activation the operation writes.
    Written,
    /// An activation the operation writes that later operations read besides its first
    /// output (a fused residual's sum, which the rest of the block adds to): the contract tests
    /// add it to the output their loss reads, so that both carry a gradient.
    Summed,
    /// The per-row losses of a cross-entropy.
    Loss,
}

/// One tensor of a [`Sample`]: its axes and what it holds.
#[derive(Debug, Clone, PartialEq)]
pub struct Decl {
    /// Its axes, outermost first.
    pub axes: Vec<(&'static str, Dim)>,
    /// What it holds.
    pub holds: Holds,
}

impl Decl {
    /// A `[batch, seq, …last]` tensor holding `holds`.
    pub fn tokens(last: &[(&'static str, u32)], holds: Holds) -> Self {
        let mut axes = vec![("batch", Dim::Batch), ("seq", Dim::Seq)];
        axes.extend(last.iter().map(|&(n, d)| (n, Dim::Fixed(d))));
        Self { axes, holds }
    }

    /// A tensor of fixed axes holding `holds`.
    pub fn fixed(axes: &[(&'static str, u32)], holds: Holds) -> Self {
        Self {
            axes: axes.iter().map(|&(n, d)| (n, Dim::Fixed(d))).collect(),
            holds,
        }
    }
}

/// A small instance of a forward operation, every role's tensor in the contract's order: what
/// the generic contract tests build a graph around (the operation, a loss over its first
/// output, its backward and AdamW) and run on the GPU and the CPU.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    /// The inputs.
    pub inputs: Vec<Decl>,
    /// The outputs.
    pub outputs: Vec<Decl>,
}

/// Which axis of a role an index counts along.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Along {
    /// The first axis (an embedding table's rows).
    First,
    /// The last axis (a vocabulary of logits).
    Last,
    /// No axis: a fixed number of values (a padding mask's 0 and 1: `Fixed(2)`).
    Fixed(u32),
}

/// An integer input role whose values index into an axis of another role: each value must be
/// below that axis's extent (or equal `except`). The executors check every step's inputs
/// against these bounds before anything runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IndexBound {
    /// The role of the indices.
    pub ids: &'static str,
    /// The role they index into.
    pub into: &'static str,
    /// Along which of its axes.
    pub along: Along,
    /// A value that indexes nothing and is allowed (an ignored label).
    pub except: Option<u32>,
    /// Whether the GPU kernel reads the indices uploaded with their index
    /// ([`TokenIds`](fblayout_kernels::ops::TokenIds)) rather than from the tensor.
    pub uploaded: bool,
}

/// The operand shapes of `node` of `graph` at `sizes`, by role, with each tensor's bytes from
/// `bytes`.
pub(crate) fn shapes<'a>(
    graph: &crate::graph::Graph,
    node: &crate::graph::Node,
    sizes: Sizes,
    bytes: &'a dyn Fn(TensorId) -> u64,
) -> Shapes<'a> {
    let contract = node.op.contract();
    let named = |slots: Vec<Slot>, ids: &[TensorId]| -> Vec<(&'static str, TensorId)> {
        slots
            .iter()
            .map(|s| s.name)
            .zip(ids.iter().copied())
            .collect()
    };
    let inputs = named(contract.inputs(), &node.inputs);
    let outputs = named(contract.outputs(), &node.outputs);
    let dims = |list: &[(&'static str, TensorId)]| {
        list.iter()
            .map(|&(n, t)| {
                let d = graph
                    .tensor(t)
                    .axes
                    .iter()
                    .map(|a| a.dim.value(sizes))
                    .collect();
                (n, d)
            })
            .collect()
    };
    let ids: Vec<(&'static str, TensorId)> = inputs.iter().chain(&outputs).copied().collect();
    Shapes {
        inputs: dims(&inputs),
        outputs: dims(&outputs),
        bytes,
        elems: ids
            .iter()
            .map(|&(n, t)| (n, graph.tensor(t).elem))
            .collect(),
        ids,
    }
}

impl fmt::Display for Slot {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name)
    }
}
