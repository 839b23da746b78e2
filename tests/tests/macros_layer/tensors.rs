//! The tensors of one transformer layer, declared with `#[derive(Tensor)]`.
//!
//! Shapes are small so that tests can visit every coordinate: hidden 32 split into 4 heads of
//! 8, and run-time batch and sequence extents. Shared by `macros_layer.rs` (CPU) and
//! `macros_gpu.rs` (WGSL on the GPU).

use fblayout::{Axis, Ix, Tensor};

/// Sequences in a batch.
#[derive(Clone, Copy, Debug, Axis)]
pub struct Batch;
/// Query positions in a sequence.
#[derive(Clone, Copy, Debug, Axis)]
pub struct Seq;
/// Key positions in a sequence (a separate type: scores index queries *and* keys).
#[derive(Clone, Copy, Debug, Axis)]
pub struct KeySeq;
/// Model features.
#[derive(Clone, Copy, Debug, Axis)]
pub struct Hidden;
/// Input features of a projection.
#[derive(Clone, Copy, Debug, Axis)]
pub struct In;
/// Output features of a projection.
#[derive(Clone, Copy, Debug, Axis)]
pub struct Out;
/// Attention heads.
#[derive(Clone, Copy, Debug, Axis)]
pub struct Heads;
/// Features within a head.
#[derive(Clone, Copy, Debug, Axis)]
pub struct HeadDim;
/// Batch and sequence merged.
#[derive(Clone, Copy, Debug, Axis)]
pub struct Token;

/// Activations [batch, seq, hidden]: LayerNorm reduces `hidden` in the forward pass; bias and
/// weight gradients reduce `batch` and `seq` in the backward pass.
#[derive(Clone, Copy, Debug, PartialEq, Tensor)]
#[tensor(layout = rtile, elem = f32, reduce(forward = [hidden], backward = [batch, seq]))]
#[tensor(view(
    XT = permute(hidden, seq, batch),
    XH = split(hidden => heads: Heads = 4, head_dim: HeadDim = _),
    Tokens = merge(batch, seq => token: Token),
))]
pub struct X {
    /// The sequence in the batch.
    #[axis(dyn, tile = 4, pad)]
    pub batch: Ix<Batch>,
    /// The position in the sequence.
    #[axis(dyn, tile = 4, pad)]
    pub seq: Ix<Seq>,
    /// The feature.
    #[axis(32, tile = 4)]
    pub hidden: Ix<Hidden>,
}

/// Weights [input, output]: the forward pass reduces `input` (x·W), the backward pass
/// reduces `output` (dY·Wᵀ). `output` is padded from 36 to 40.
#[derive(Clone, Copy, Debug, PartialEq, Tensor)]
#[tensor(layout = rtile, reduce(forward = [input], backward = [output]))]
#[tensor(view(WT = transpose(input, output)))]
pub struct W {
    /// The input feature.
    #[axis(32, tile = 4)]
    pub input: Ix<In>,
    /// The output feature.
    #[axis(36, tile = 8, pad)]
    pub output: Ix<Out>,
}

/// Attention projections [batch, seq, heads, head_dim], read per head ([batch, heads, seq,
/// head_dim]) and, for keys, transposed ([batch, heads, head_dim, seq]).
#[derive(Clone, Copy, Debug, PartialEq, Tensor)]
#[tensor(layout = rtile, reduce(forward = [head_dim], backward = [seq]))]
#[tensor(view(
    QH = permute(batch, heads, seq, head_dim),
    KT = permute(batch, heads, head_dim, seq),
))]
pub struct Attn {
    /// The sequence in the batch.
    #[axis(dyn)]
    pub batch: Ix<Batch>,
    /// The position in the sequence.
    #[axis(dyn, tile = 2, pad)]
    pub seq: Ix<Seq>,
    /// The head.
    #[axis(4)]
    pub heads: Ix<Heads>,
    /// The feature within the head.
    #[axis(8, tile = 4)]
    pub head_dim: Ix<HeadDim>,
}

/// Attention scores [batch, heads, query, key]: softmax reduces `key` in both passes; the
/// first two keys are a window view.
#[derive(Clone, Copy, Debug, PartialEq, Tensor)]
#[tensor(layout = rtile, reduce(forward = [key], backward = [key]))]
#[tensor(view(First = slice(key, 0..2), ByQuery = transpose(heads, query)))]
pub struct Scores {
    /// The sequence in the batch.
    #[axis(dyn)]
    pub batch: Ix<Batch>,
    /// The head.
    #[axis(4)]
    pub heads: Ix<Heads>,
    /// The query position.
    #[axis(dyn)]
    pub query: Ix<Seq>,
    /// The key position.
    #[axis(dyn, tile = 4, pad)]
    pub key: Ix<KeySeq>,
}

/// Run-time extents to test: small, with and without partial tiles.
pub const BATCHES: [usize; 3] = [1, 2, 3];
/// Sequence lengths to test.
pub const SEQS: [usize; 4] = [1, 2, 5, 8];

/// Every (batch, seq) pair to test.
pub fn sizes() -> impl Iterator<Item = (usize, usize)> {
    BATCHES
        .into_iter()
        .flat_map(|b| SEQS.into_iter().map(move |s| (b, s)))
}

/// Every index of the box `shape[d] + margin` (the shape, its padding and beyond), row-major
/// with the last axis fastest, as the GPU probe enumerates them.
pub fn grid(shape: &[usize], margin: usize) -> Vec<Vec<usize>> {
    let dims: Vec<usize> = shape.iter().map(|&n| n + margin).collect();
    let total: usize = dims.iter().product();
    (0..total)
        .map(|mut linear| {
            let mut index = vec![0; dims.len()];
            for d in (0..dims.len()).rev() {
                index[d] = linear % dims[d];
                linear /= dims[d];
            }
            index
        })
        .collect()
}
