//! How each operation's kernel walks its operands: the one table the cost model reads.
//!
//! The kernels of `fblayout-kernels` take views of any layout, so every candidate layout is
//! accepted for every operand; what differs is the cost. That cost depends on which axis the
//! kernel's neighbouring threads walk when they touch an operand (`Walk`): along a
//! contiguous axis they share memory transactions, along a strided one they do not. A
//! reduction along the walked axis is priced with the model's reduction factors. The two
//! operands of a matrix product also set its arithmetic rate (`Matmul`).
//!
//! The table, operand by operand (walks in parentheses):
//!
//! | operation | reads | writes |
//! |---|---|---|
//! | embedding | ids, table rows (last) | out (own) |
//! | linear `y = x·w` | x (last = `d_in`), w (before last = `d_in`); product | y (own) |
//! | linear_grad_input `dx = dy·wᵀ` | dy (last), w transposed (last = `d_out`); product | dx (own) |
//! | linear_grad_weight `dw = xᵀ·dy` | x, dy (before last = tokens, reduced); product | dw (own) |
//! | bias | x (like the output), b (last) | y (own) |
//! | layer_norm, rms_norm | x (last, reduced), γ, β (last) | y, mean, rstd (last) |
//! | attention | qkv (before last = keys); product of queries (last) by keys (before last) | ctx, probs (last) |
//! | attention_grad | qkv (before last), probs (before last = queries, reduced), dout (last); product | dqkv (last) |
//! | cross_entropy (and its grad) | logits (last, reduced), labels (last) | loss / dlogits (last) |
//! | embedding_grad | ids, dout (last) | dtable (last) |
//! | bias_grad | dy (before last, reduced) | db (last) |
//! | layer_norm_grad, rms_norm_grad | x, dy (last, reduced; before last, reduced (γ/β gradients)), γ, mean, rstd (last) | dx, dγ, dβ (last) |
//! | elementwise (add, activations, swiglu, accumulate, AdamW, and any other) | every input (like the output) | first output (own), others (like the first) |
//!
//! `own` is the operand's own memory order: the kernel walks its buffer linearly, which is
//! contiguous whatever the layout. `like the output` reads the operand in the order of the
//! first output's layout: free when both share a layout, strided when they differ.

use crate::graph::{Graph, Node, Op, Sizes};

/// Whether `op` reads every input in the layout it is stored in, with no conversion before
/// it. The backward kernels of the norms, activations, attention and cross-entropy write each
/// gradient through the view of the tensor they read it for (`dx` through `x`'s), and a
/// gradient is stored like its tensor (see [`Objective`](super::objective::Objective)); a copy
/// of `x` in another layout would make `dx` another layout too. The embedding and its gradient
/// read their token ids as the step uploads them, which a conversion in the graph would not
/// be.
pub(crate) fn reads_stored(op: Op) -> bool {
    matches!(
        op,
        Op::Embedding
            | Op::EmbeddingGrad
            | Op::LayerNormGrad { .. }
            | Op::RmsNormGrad { .. }
            | Op::ActivationGrad(_)
            | Op::SwigluGrad
            | Op::AttentionGrad { .. }
            | Op::CrossEntropyGrad { .. }
    )
}

/// Which axis of an operand neighbouring threads walk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Walk {
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
pub(crate) struct Access {
    /// The axis the threads walk.
    pub(crate) walk: Walk,
    /// Whether the kernel reduces along it.
    pub(crate) reduce: bool,
}

const fn along(walk: Walk) -> Access {
    Access {
        walk,
        reduce: false,
    }
}

const fn reducing(walk: Walk) -> Access {
    Access { walk, reduce: true }
}

/// The matrix product of an operation: which inputs it multiplies, along which axis each is
/// read for the shared (`k`) dimension, and its floating-point operations.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Matmul {
    /// The left operand: input position and the walk of its `k` axis.
    pub(crate) a: (usize, Walk),
    /// The right operand.
    pub(crate) b: (usize, Walk),
    /// Floating-point operations (multiply and add counted apart).
    pub(crate) flops: f64,
}

/// How one operation touches its operands.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct OpAccess {
    /// The walks over each input, by position (an input may be walked twice).
    pub(crate) inputs: Vec<Vec<Access>>,
    /// The walk over each output, by position.
    pub(crate) outputs: Vec<Access>,
    /// The matrix product, for the operations that compute one.
    pub(crate) matmul: Option<Matmul>,
}

/// The access table (see the module docs) for `node` of `graph` at `sizes`. `Convert` is
/// not in it: the cost of a conversion comes from the conversion classification.
pub(crate) fn accesses(graph: &Graph, node: &Node, sizes: Sizes) -> OpAccess {
    use Walk::{BeforeLast, LikeOutput, Own};
    let last = along(Walk::Last);
    let n_in = node.inputs.len();
    let n_out = node.outputs.len();
    let elements = |pos: usize| graph.tensor(node.inputs[pos]).elements(sizes) as f64;
    let extent = |pos: usize, from_end: usize| {
        let axes = &graph.tensor(node.inputs[pos]).axes;
        axes.len()
            .checked_sub(from_end + 1)
            .map_or(1.0, |i| f64::from(axes[i].dim.value(sizes)))
    };
    let uniform = |a: Access, n: usize| vec![a; n];
    let (inputs, outputs, matmul) = match node.op {
        Op::Embedding | Op::EmbeddingGrad => (vec![vec![last]; n_in], uniform(last, n_out), None),
        Op::Linear => (
            vec![vec![last], vec![along(BeforeLast)]],
            vec![along(Own)],
            Some(Matmul {
                a: (0, Walk::Last),
                b: (1, BeforeLast),
                flops: 2.0 * elements(0) * extent(1, 0),
            }),
        ),
        Op::LinearGradInput => (
            vec![vec![last], vec![last]],
            vec![along(Own)],
            Some(Matmul {
                a: (0, Walk::Last),
                b: (1, Walk::Last),
                flops: 2.0 * elements(0) * extent(1, 1),
            }),
        ),
        Op::LinearGradWeight => (
            vec![vec![reducing(BeforeLast)], vec![reducing(BeforeLast)]],
            vec![along(Own)],
            Some(Matmul {
                a: (0, BeforeLast),
                b: (1, BeforeLast),
                flops: 2.0 * elements(0) * extent(1, 0),
            }),
        ),
        Op::Bias => (
            vec![vec![along(LikeOutput)], vec![last]],
            vec![along(Own)],
            None,
        ),
        Op::LayerNorm { .. } | Op::RmsNorm { .. } => {
            let mut inputs = vec![vec![last]; n_in];
            inputs[0] = vec![reducing(Walk::Last)];
            (inputs, uniform(last, n_out), None)
        }
        Op::Attention { heads, .. } => {
            // QKᵀ and P·V: 2 · 2 · batch · heads · seq² · d_head, with d_head = width / heads.
            let probs = graph.tensor(node.outputs[1]).elements(sizes) as f64;
            let width = graph
                .tensor(node.outputs[0])
                .axes
                .last()
                .map_or(1, |a| a.dim.value(sizes));
            let d_head = f64::from(width) / f64::from(heads.max(1));
            (
                vec![vec![along(BeforeLast)]],
                uniform(last, n_out),
                Some(Matmul {
                    a: (0, Walk::Last),
                    b: (0, BeforeLast),
                    flops: 4.0 * probs * d_head,
                }),
            )
        }
        Op::AttentionGrad { heads, .. } => {
            // dV, dP, dQ and dK: four products the size of one forward product each.
            let probs = elements(1);
            let width = graph
                .tensor(node.inputs[2])
                .axes
                .last()
                .map_or(1, |a| a.dim.value(sizes));
            let d_head = f64::from(width) / f64::from(heads.max(1));
            (
                vec![
                    vec![along(BeforeLast)],
                    vec![reducing(BeforeLast)],
                    vec![last],
                ],
                uniform(last, n_out),
                Some(Matmul {
                    a: (1, BeforeLast),
                    b: (0, BeforeLast),
                    flops: 8.0 * probs * d_head,
                }),
            )
        }
        Op::CrossEntropy { .. } | Op::CrossEntropyGrad { .. } => {
            let mut inputs = vec![vec![last]; n_in];
            inputs[0] = vec![reducing(Walk::Last)];
            (inputs, uniform(last, n_out), None)
        }
        Op::BiasGrad => (vec![vec![reducing(BeforeLast)]], uniform(last, n_out), None),
        Op::LayerNormGrad { .. } | Op::RmsNormGrad { .. } => {
            // x and dy are reduced along the row (dx) and along tokens (dγ, dβ).
            let both = vec![reducing(Walk::Last), reducing(BeforeLast)];
            let mut inputs = vec![vec![last]; n_in];
            inputs[0] = both.clone();
            inputs[n_in - 1] = both;
            (inputs, uniform(last, n_out), None)
        }
        // Add, the activations, SwiGLU, Accumulate, AdamW, and operations added later: every
        // operand visited at the same coordinates, in the first output's order.
        _ => {
            let mut outputs = vec![along(LikeOutput); n_out];
            if let Some(first) = outputs.first_mut() {
                *first = along(Own);
            }
            (vec![vec![along(LikeOutput)]; n_in], outputs, None)
        }
    };
    OpAccess {
        inputs,
        outputs,
        matmul,
    }
}
