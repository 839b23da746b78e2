//! Multi-head and grouped-query attention, forward and backward, through views of Q, K and V.
//!
//! Q and the output O are `[batch, seq_q, heads, head_dim]`, K and V `[batch, seq_k, kv_heads,
//! head_dim]`, each a [`View`] of any layout: separate tensors, or (in a transformer) three
//! views of one fused projection `[batch, seq, (heads + 2·kv_heads)·head_dim]` made by
//! [`qkv_views`]. With the scale `s` and the mask `M`, per batch and query head `h` (reading
//! key/value head `h / group`, `group = heads / kv_heads`):
//!
//! - forward: `S = Q·Kᵀ`, `P = softmax_M(s·S)` (saved for the backward: the masked keys are
//!   0), `O = P·V`;
//! - backward, from the gradient `dO` of the output: `dV = Pᵀ·dO`, `dP = dO·Vᵀ`,
//!   `dS = s · P ⊙ (dP − Σ_row dP ⊙ P)` (the gradient of the unscaled scores), `dQ = dS·K`,
//!   `dK = dSᵀ·Q`, where `dK` and `dV` of a key/value head sum over the `group` query heads
//!   that share it.
//!
//! The scale is the softmax's ([`Softmax::scale`]), not a product's: so every product is a
//! plain `C = A·B`, which is what the tensor-core GEMM computes.
//!
//! # Views, not copies
//! Every product reads its operands through views of the tensors as they are stored, on the
//! `f32`-summing [`MatmulOp`], or on tensor cores ([`CoopMatmulOp`]) where the device has
//! them and both factors are `f16` (mixed precision; [`AttentionOp::tune`] chooses their
//! tiles): Q read as `[batch, heads, seq, head_dim]` is a permute, `Kᵀ` and `Vᵀ` another,
//! `Pᵀ` and `dSᵀ` a transpose of the scores' two last axes. Grouped-query attention splits the
//! query heads into `(kv_heads, group)` and reads K and V broadcast along `group` (`[batch,
//! kv_heads, group, …]`); the products that write `dK` and `dV`, which a broadcast can't be
//! written through, instead merge `group` into their reduction: `dSᵀ` read as `[batch,
//! kv_heads, seq_k, group·seq_q]` times Q read as `[batch, kv_heads, group·seq_q, head_dim]`.
//! The gradients `dQ`, `dK` and `dV` are written through the views of Q, K and V (and `dO` read
//! through O's), so for a fused projection one gradient buffer of its layout receives all
//! three, each through its view, with no copy.
//!
//! The probabilities `P` are stored in the layout of the `scores` view (row-major or R-Tile:
//! the caller chooses; `[batch, heads, seq_q, seq_k]`), and so are the scratch tensors `S`, `dP`
//! and `dS` (scratch of the batch, [`Batch::scratch`]: at most [`AttentionOp::scratch`] with
//! the partial sums of split products), in its element type. The softmax is [`SoftmaxOp`] over
//! that layout, its rows the keys.
//!
//! # On the CPU
//! [`attention_forward_cpu`] and [`attention_backward_cpu`] compute the same in `f64`, one
//! (batch, head) pair per task, rounding `S`, `P`, `dP` and `dS` to the element type where the
//! GPU stores them, so that the two backends agree in `f16` too.
//!
//! ```no_run
//! use fblayout_core::layout::LayoutSpec;
//! use fblayout_kernels::ops::attention::{Attention, AttentionArgs, AttentionOp, AttentionViews, qkv_views};
//! use fblayout_kernels::ops::Mask;
//! use fblayout_kernels::runtime::{Gpu, GpuBuffer};
//! use fblayout_kernels::tensor::GpuArg;
//!
//! let gpu = Gpu::new()?;
//! // BERT-base self-attention: one fused projection [batch, seq, 3·768], 12 heads of 64.
//! let qkv = LayoutSpec::new("qkv").dyn_axis("batch").dyn_axis("seq").axis("hidden", 3 * 768).build()?;
//! let (q, k, v) = qkv_views(&qkv.view(), 12, 12)?;
//! let out = LayoutSpec::new("o").dyn_axis("batch").dyn_axis("seq").axis("heads", 12).axis("head_dim", 64).build()?;
//! let scores = LayoutSpec::new("p").dyn_axis("batch").axis("heads", 12).dyn_axis("q").dyn_axis("k").build()?;
//! let (out, scores) = (out.view(), scores.view());
//! let views = AttentionViews { q: &q, k: &k, v: &v, out: &out, scores: &scores };
//! let op = AttentionOp::new(&gpu, &views, Attention::new(12, 12, 64, Mask::Causal { offset: 0 }))?;
//!
//! let (b, s) = (8u32, 128u32);
//! let tokens = [("batch", b), ("seq", s)];
//! let rows = (b * s) as usize;
//! let qkv_buffer = GpuBuffer::zeroed::<f32>(&gpu, rows * 3 * 768)?;
//! let dqkv = GpuBuffer::scratch::<f32>(&gpu, rows * 3 * 768)?;
//! let (o, d_o) = (GpuBuffer::scratch::<f32>(&gpu, rows * 768)?, GpuBuffer::zeroed::<f32>(&gpu, rows * 768)?);
//! let p = GpuBuffer::scratch::<f32>(&gpu, (b * 12 * s * s) as usize)?;
//! let args = AttentionArgs {
//!     q: GpuArg::new(&qkv_buffer, &q, &tokens)?,
//!     k: GpuArg::new(&qkv_buffer, &k, &tokens)?,
//!     v: GpuArg::new(&qkv_buffer, &v, &tokens)?,
//!     out: GpuArg::new(&o, &out, &tokens)?,
//!     probs: GpuArg::new(&p, &scores, &[("batch", b), ("q", s), ("k", s)])?,
//! };
//! let mut batch = gpu.batch();
//! op.forward(&mut batch, &args)?;
//! // dQ, dK and dV land in one gradient buffer of the fused layout.
//! op.backward(
//!     &mut batch,
//!     &args,
//!     &GpuArg::new(&d_o, &out, &tokens)?,
//!     &GpuArg::new(&dqkv, &q, &tokens)?,
//!     &GpuArg::new(&dqkv, &k, &tokens)?,
//!     &GpuArg::new(&dqkv, &v, &tokens)?,
//! )?;
//! batch.submit()?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod cpu;
pub mod flash;

use fblayout_core::layout::{ElemType, TensorLayout, View};

use super::compiled::same_view;
#[cfg(doc)]
use super::coop::CoopMatmulOp;
use super::elementwise::{check_same_dims, check_same_shape};
use super::error::OpError;
use super::matmul::linear::through;
use super::matmul::{GemmShape, MatmulOp, Output, Product};
use super::softmax::{Mask, Softmax, SoftmaxOp};
use crate::runtime::{Batch, Gpu, GpuBuffer, Scratch};
use crate::tensor::GpuArg;

pub use cpu::{
    AttentionSaved, attention_backward_cpu, attention_forward_cpu, attention_forward_keys_cpu,
};

const OP: &str = "attention";
const FORWARD: &str = "attention forward";
const BACKWARD: &str = "attention backward";

/// What an attention computes: `heads` query heads sharing `kv_heads` key/value heads (fewer
/// for grouped-query attention; `heads` must be a multiple of `kv_heads`), the factor of the
/// scores, and the keys each query sees.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Attention {
    /// Query heads (of Q and the output).
    pub heads: u32,
    /// Key/value heads (of K and V): `heads` for multi-head attention, fewer for grouped-query
    /// attention, 1 for multi-query attention.
    pub kv_heads: u32,
    /// The factor of the scores in the softmax, `P = softmax(scale · Q·Kᵀ)` (usually
    /// `1/√head_dim`).
    pub scale: f32,
    /// The keys each query sees (along the scores' last two axes).
    pub mask: Mask,
}

impl Attention {
    /// `heads` query heads sharing `kv_heads` key/value heads of `head_dim`, scaled by
    /// `1/√head_dim`.
    pub fn new(heads: u32, kv_heads: u32, head_dim: u32, mask: Mask) -> Self {
        Self {
            heads,
            kv_heads,
            scale: 1.0 / (head_dim as f32).sqrt(),
            mask,
        }
    }

    /// The query heads per key/value head, or why the head counts don't fit.
    pub fn group(&self) -> Result<u32, OpError> {
        let (h, kv) = (self.heads, self.kv_heads);
        if h == 0 || kv == 0 || !h.is_multiple_of(kv) {
            return Err(OpError::shape(
                OP,
                format!(
                    "{h} query heads can't share {kv} key/value heads: both must be positive and \
                     the key/value heads must divide the query heads"
                ),
            ));
        }
        Ok(h / kv)
    }
}

/// The five tensors of an attention (see the module docs for their shapes): views when an op
/// is built, GPU arguments ([`AttentionArgs`]) when it runs.
#[derive(Debug, Clone, Copy)]
pub struct AttentionViews<V> {
    /// Queries `[batch, seq_q, heads, head_dim]`.
    pub q: V,
    /// Keys `[batch, seq_k, kv_heads, head_dim]`.
    pub k: V,
    /// Values `[batch, seq_k, kv_heads, head_dim]`.
    pub v: V,
    /// The output `[batch, seq_q, heads, head_dim]`.
    pub out: V,
    /// The layout of the probabilities (and scratch scores) `[batch, heads, seq_q, seq_k]`.
    pub scores: V,
}

/// The arguments of a forward or backward: each buffer read through the view the op was built
/// for (`probs` through `scores`).
#[derive(Debug, Clone)]
pub struct AttentionArgs<'a> {
    /// Queries.
    pub q: GpuArg<'a>,
    /// Keys.
    pub k: GpuArg<'a>,
    /// Values.
    pub v: GpuArg<'a>,
    /// The output: written by the forward.
    pub out: GpuArg<'a>,
    /// The probabilities: written by the forward, read by the backward.
    pub probs: GpuArg<'a>,
}

/// The views of Q, K and V in one fused projection `fused` `[batch, seq, hidden]`, `hidden` a
/// static extent of `(heads + 2·kv_heads)·head_dim`: Q the first `heads` slots of `head_dim`,
/// then K's `kv_heads`, then V's, each read as `[batch, seq, heads, head_dim]` (axes `heads` and
/// `head_dim` after `fused`'s first two). Views named `<fused>_q`, `<fused>_k`, `<fused>_v`.
pub fn qkv_views(fused: &View, heads: u32, kv_heads: u32) -> Result<(View, View, View), OpError> {
    let attention = Attention {
        heads,
        kv_heads,
        scale: 1.0,
        mask: Mask::None,
    };
    attention.group()?;
    let [_, _, hidden] = fused.axes() else {
        return Err(OpError::shape(
            OP,
            format!(
                "the fused projection `{}` has rank {}, not 3 ([batch, seq, hidden])",
                fused.name(),
                fused.axes().len()
            ),
        ));
    };
    let slots = heads + 2 * kv_heads;
    let width = hidden.extent.as_static();
    let head_dim = match width {
        Some(n) if n > 0 && n.is_multiple_of(u64::from(slots)) => (n / u64::from(slots)) as u32,
        _ => {
            return Err(OpError::shape(
                OP,
                format!(
                    "axis `{}` of the fused projection `{}` ({}) is not a static multiple of \
                     {heads} + 2·{kv_heads} heads",
                    hidden.name,
                    fused.name(),
                    hidden.extent
                ),
            ));
        }
    };
    let heads_axis = fresh(fused, "heads");
    let split = fused.split(
        &hidden.name,
        &[
            (&heads_axis, Some(slots)),
            (&fresh(fused, "head_dim"), Some(head_dim)),
        ],
    )?;
    let part = |role: &str, start: u32, len: u32| -> Result<View, OpError> {
        let view = split.slice(&heads_axis, start, len)?;
        Ok(view.named(format!("{}_{role}", fused.name()))?)
    };
    Ok((
        part("q", 0, heads)?,
        part("k", heads, kv_heads)?,
        part("v", heads + kv_heads, kv_heads)?,
    ))
}

/// `base`, or `base` with a number after it, that names no axis of `view` and no run-time
/// extent parameter of its tensor: a name a new axis of `view` can take.
fn fresh(view: &View, base: &str) -> String {
    let taken = |name: &str| {
        view.axes().iter().any(|a| a.name == name)
            || view
                .layout()
                .dynamic_axes()
                .any(|a| TensorLayout::extent_param(&a.name) == name)
    };
    let mut name = base.to_owned();
    let mut n = 1;
    while taken(&name) {
        name = format!("{base}{n}");
        n += 1;
    }
    name
}

/// The names of a view's four axes, in order.
fn names(view: &View) -> [&str; 4] {
    let a = view.axes();
    [&a[0].name, &a[1].name, &a[2].name, &a[3].name]
}

/// A query-side tensor (Q, O) `[b, s, h, d]` as the products read it.
#[derive(Debug, Clone)]
struct QuerySide {
    /// `[b, h, s, d]`, or `[b, kv, group, s, d]` with the heads split.
    heads: View,
    /// `[b, kv, group·s, d]`: the group merged into the rows (`heads` when there are no groups).
    merged: View,
}

impl QuerySide {
    fn new(view: &View, kv_heads: u32, group: u32) -> Result<Self, OpError> {
        let [b, s, h, d] = names(view);
        if group == 1 {
            let heads = view.permute(&[b, h, s, d])?;
            return Ok(Self {
                merged: heads.clone(),
                heads,
            });
        }
        let (kv, g) = (fresh(view, "kv_heads"), fresh(view, "group"));
        let heads = view
            .split(h, &[(&kv, Some(kv_heads)), (&g, Some(group))])?
            .permute(&[b, &kv, &g, s, d])?;
        let merged = heads.merge(&[&g, s], &fresh(&heads, "group_seq"))?;
        Ok(Self { heads, merged })
    }
}

/// A key-side tensor (K, V) `[b, s, kv, d]` as the products read it.
#[derive(Debug, Clone)]
struct KeySide {
    /// `[b, kv, s, d]`: what its gradient is written through.
    heads: View,
    /// `[b, kv, group, s, d]`: broadcast to the query heads of each group (`heads` when there
    /// are no groups).
    shared: View,
    /// `[b, kv, group, d, s]`: transposed and broadcast.
    shared_t: View,
}

impl KeySide {
    fn new(view: &View, group: u32) -> Result<Self, OpError> {
        let [b, s, h, d] = names(view);
        let heads = view.permute(&[b, h, s, d])?;
        let transposed = view.permute(&[b, h, d, s])?;
        if group == 1 {
            return Ok(Self {
                shared: heads.clone(),
                shared_t: transposed,
                heads,
            });
        }
        let g = fresh(view, "group");
        Ok(Self {
            shared: heads.broadcast(&g, group, 2)?,
            shared_t: transposed.broadcast(&g, group, 2)?,
            heads,
        })
    }
}

/// The scores `[b, h, s_q, s_k]` (S, P, dP, dS) as the products read and write them.
#[derive(Debug, Clone)]
struct ScoreSide {
    /// `[b, kv, group, s_q, s_k]` with the heads split (the scores themselves when there are no
    /// groups).
    grouped: View,
    /// `[b, kv, s_k, group·s_q]`: transposed, the group merged into the columns.
    merged_t: View,
}

impl ScoreSide {
    fn new(view: &View, kv_heads: u32, group: u32) -> Result<Self, OpError> {
        let [b, h, q, k] = names(view);
        if group == 1 {
            return Ok(Self {
                grouped: view.clone(),
                merged_t: view.transpose(q, k)?,
            });
        }
        let (kv, g) = (fresh(view, "kv_heads"), fresh(view, "group"));
        let grouped = view.split(h, &[(&kv, Some(kv_heads)), (&g, Some(group))])?;
        let merged_t = grouped
            .permute(&[b, &kv, k, &g, q])?
            .merge(&[&g, q], &fresh(&grouped, "group_q"))?;
        Ok(Self { grouped, merged_t })
    }
}

/// The role of each of the five views, in [`AttentionViews`] order, and of each argument.
const VIEW_ROLES: [&str; 5] = ["q", "k", "v", "out", "scores"];
const ARG_ROLES: [&str; 5] = ["q", "k", "v", "out", "probs"];

/// Where an extent appears among the five tensors: (operand, axis) pairs.
type Places = &'static [(usize, usize)];

/// Checks the extents of the five tensors against each other and the head counts (`None`: an
/// extent not known yet, which any value fits); returns `[batch, seq_q, seq_k, head_dim]` as far
/// as known. The shapes are Q, O `[b, s_q, heads, d]`, K, V `[b, s_k, kv_heads, d]`, scores
/// `[b, heads, s_q, s_k]`.
fn check_extents(
    op: &'static str,
    attention: &Attention,
    roles: [&str; 5],
    dims: [&[Option<u64>]; 5],
) -> Result<[Option<u64>; 4], OpError> {
    for (role, d) in roles.iter().zip(&dims) {
        if d.len() != 4 {
            return Err(OpError::shape(
                op,
                format!("`{role}` has rank {}, not 4", d.len()),
            ));
        }
    }
    let [q, k, v, out, s] = dims;
    let heads = Some(u64::from(attention.heads));
    let kv_heads = Some(u64::from(attention.kv_heads));
    // Each extent of the attention, its value when declared, and where it appears.
    let extents: [(&str, Option<u64>, Places); 6] = [
        ("batch", None, &[(0, 0), (1, 0), (2, 0), (3, 0), (4, 0)]),
        ("seq_q", None, &[(0, 1), (3, 1), (4, 2)]),
        ("seq_k", None, &[(1, 1), (2, 1), (4, 3)]),
        ("head_dim", None, &[(0, 3), (1, 3), (2, 3), (3, 3)]),
        ("heads", heads, &[(0, 2), (3, 2), (4, 1)]),
        ("kv_heads", kv_heads, &[(1, 2), (2, 2)]),
    ];
    let all = [q, k, v, out, s];
    let mut known = [None; 4];
    for (i, &(what, declared, places)) in extents.iter().enumerate() {
        let mut first: Option<(String, u64)> = declared.map(|n| ("the attention".into(), n));
        for &(operand, axis) in places {
            let Some(n) = all[operand][axis] else {
                continue;
            };
            match &first {
                Some((at, m)) if *m != n => {
                    return Err(OpError::shape(
                        op,
                        format!(
                            "{what} is {m} in {at} but {n} in `{}` (axis {axis})",
                            roles[operand]
                        ),
                    ));
                }
                Some(_) => {}
                None => first = Some((format!("`{}` (axis {axis})", roles[operand]), n)),
            }
        }
        if i < known.len() {
            known[i] = first.map(|(_, n)| n);
        }
    }
    Ok(known)
}

/// Checks that each `(role, view, axis)`'s heads axis is a static extent.
fn static_heads(op: &'static str, heads: [(&str, &View, usize); 3]) -> Result<(), OpError> {
    for (role, view, axis) in heads {
        if view.axes()[axis].extent.as_static().is_none() {
            return Err(OpError::shape(
                op,
                format!(
                    "the heads axis `{}` of `{role}` has a run-time extent; heads are static",
                    view.axes()[axis].name
                ),
            ));
        }
    }
    Ok(())
}

/// The static extents of a view's axes (`None` for run-time ones).
fn static_dims(view: &View) -> Vec<Option<u64>> {
    view.axes().iter().map(|a| a.extent.as_static()).collect()
}

/// The extents of a bound argument.
fn arg_dims(arg: &GpuArg<'_>) -> Vec<Option<u64>> {
    arg.bound_view().shape().iter().map(|&n| Some(n)).collect()
}

/// An attention's products and softmax, built for the views of its tensors (see the module
/// docs).
#[derive(Debug, Clone)]
pub struct AttentionOp {
    attention: Attention,
    q: View,
    k: View,
    v: View,
    out: View,
    scores: View,
    /// Q and O (and their gradients) as the products read them.
    q_side: QuerySide,
    o_side: QuerySide,
    /// K and V (and their gradients).
    k_side: KeySide,
    v_side: KeySide,
    /// S, P, dP and dS.
    s_side: ScoreSide,
    /// `S = Q·Kᵀ`.
    scores_op: Product,
    /// `P = softmax(scale·S)`.
    softmax: SoftmaxOp,
    /// `O = P·V`.
    values_op: Product,
    /// `dV = Pᵀ·dO`.
    grad_v: Product,
    /// `dP = dO·Vᵀ`.
    grad_p: Product,
    /// `dQ = dS·K`.
    grad_q: Product,
    /// `dK = dSᵀ·Q`.
    grad_k: Product,
}

impl AttentionOp {
    /// The kernels of `attention` over `views`: six products and a softmax, each built (and
    /// its shader validated) here.
    ///
    /// Checks the head counts, that every view has rank 4 with the shapes of the module docs,
    /// that the head axes are static extents equal to the head counts and that the other
    /// static extents agree; the products check the element types (`f32`, or `f16` where the
    /// device has it).
    ///
    /// An attention masked by padding ([`Mask::Keys`]) is built by
    /// [`with_keep`](Self::with_keep) instead.
    pub fn new(
        gpu: &Gpu,
        views: &AttentionViews<&View>,
        attention: Attention,
    ) -> Result<Self, OpError> {
        Self::build(gpu, views, None, attention)
    }

    /// The kernels of an attention masked by padding ([`Mask::Keys`]): key `k` of batch `b`
    /// is seen by every query when `keep[b, k] ≠ 0`, `keep` read through its view `[batch,
    /// seq_k]` of `u32` (Hugging Face's `attention_mask`). Only the forward reads it: a
    /// masked key's probability is 0, so the backward gives it no gradient through the saved
    /// probabilities. Checks as [`new`](Self::new) does.
    pub fn with_keep(
        gpu: &Gpu,
        views: &AttentionViews<&View>,
        keep: &View,
        attention: Attention,
    ) -> Result<Self, OpError> {
        Self::build(gpu, views, Some(keep), attention)
    }

    fn build(
        gpu: &Gpu,
        views: &AttentionViews<&View>,
        keep: Option<&View>,
        attention: Attention,
    ) -> Result<Self, OpError> {
        let group = attention.group()?;
        let AttentionViews {
            q,
            k,
            v,
            out,
            scores,
        } = *views;
        check_same_shape(OP, ("q", q), &[("out", out)])?;
        check_same_shape(OP, ("k", k), &[("v", v)])?;
        let all = [q, k, v, out, scores];
        let dims = all.map(static_dims);
        check_extents(
            OP,
            &attention,
            VIEW_ROLES,
            dims.each_ref().map(Vec::as_slice),
        )?;
        static_heads(OP, [("q", q, 2), ("k", k, 2), ("scores", scores, 1)])?;
        let kv = attention.kv_heads;
        let q_side = QuerySide::new(q, kv, group)?;
        let o_side = QuerySide::new(out, kv, group)?;
        let k_side = KeySide::new(k, group)?;
        let v_side = KeySide::new(v, group)?;
        let s_side = ScoreSide::new(scores, kv, group)?;
        let s = &s_side;
        Ok(Self {
            scores_op: Product::new(gpu, &q_side.heads, &k_side.shared_t, &s.grouped)?,
            softmax: match keep {
                Some(keep) => SoftmaxOp::with_keep(
                    gpu,
                    scores,
                    scores,
                    keep,
                    Softmax::new(attention.scale, attention.mask),
                )?,
                None => SoftmaxOp::new(
                    gpu,
                    scores,
                    scores,
                    Softmax::new(attention.scale, attention.mask),
                )?,
            },
            values_op: Product::new(gpu, &s.grouped, &v_side.shared, &o_side.heads)?,
            grad_v: Product::new(gpu, &s.merged_t, &o_side.merged, &v_side.heads)?,
            grad_p: Product::new(gpu, &o_side.heads, &v_side.shared_t, &s.grouped)?,
            grad_q: Product::new(gpu, &s.grouped, &k_side.shared, &q_side.heads)?,
            grad_k: Product::new(gpu, &s.merged_t, &q_side.merged, &k_side.heads)?,
            attention,
            q: q.clone(),
            k: k.clone(),
            v: v.clone(),
            out: out.clone(),
            scores: scores.clone(),
            q_side,
            o_side,
            k_side,
            v_side,
            s_side,
        })
    }

    /// What the op computes.
    pub fn attention(&self) -> Attention {
        self.attention
    }

    /// The six products: `S = Q·Kᵀ`, `O = P·V`, `dV = Pᵀ·dO`, `dP = dO·Vᵀ`, `dQ = dS·K`,
    /// `dK = dSᵀ·Q`.
    fn products(&self) -> [&Product; 6] {
        [
            &self.scores_op,
            &self.values_op,
            &self.grad_v,
            &self.grad_p,
            &self.grad_q,
            &self.grad_k,
        ]
    }

    /// The six `f32`-summing GEMMs, in the order of the products: `S = Q·Kᵀ`, `O = P·V`,
    /// `dV = Pᵀ·dO`, `dP = dO·Vᵀ`, `dQ = dS·K`, `dK = dSᵀ·Q` (to read their plans and
    /// kernels).
    pub fn gemms(&self) -> [&MatmulOp; 6] {
        self.products().map(Product::f32)
    }

    /// Whether each product (in the order of [`gemms`](Self::gemms)) runs on tensor cores.
    pub fn tensor_cores(&self) -> [bool; 6] {
        self.products().map(Product::tensor_cores)
    }

    /// The softmax over the scores (its forward and backward).
    pub fn softmax(&self) -> &SoftmaxOp {
        &self.softmax
    }

    /// Checks that each argument is read through its view and that the extents fit.
    fn check(&self, op: &'static str, args: &AttentionArgs<'_>) -> Result<(), OpError> {
        let views = [&self.q, &self.k, &self.v, &self.out, &self.scores];
        let given = [&args.q, &args.k, &args.v, &args.out, &args.probs];
        for ((role, built), arg) in ARG_ROLES.iter().zip(views).zip(given) {
            same_view(op, role, arg.view(), built)?;
        }
        let dims = given.map(arg_dims);
        check_extents(
            op,
            &self.attention,
            ARG_ROLES,
            dims.each_ref().map(Vec::as_slice),
        )?;
        Ok(())
    }

    /// The bytes of a scratch tensor in the layout of the scores bound like `probs`.
    fn scores_bytes(&self, probs: &GpuArg<'_>) -> u64 {
        scores_bytes(probs.bound_view().len(), self.scores.layout().elem())
    }

    /// `buffer` as a scratch tensor in the layout of the scores, bound like `probs`.
    fn scores<'a>(&'a self, buffer: GpuBuffer, probs: &GpuArg<'_>) -> ScratchScores<'a> {
        ScratchScores {
            buffer,
            view: &self.scores,
            bound: probs.bound_view().clone(),
        }
    }

    /// A scratch tensor of `batch` in the layout of the scores, bound like `probs`.
    fn scratch_scores<'a>(
        &'a self,
        batch: &mut Batch<'_>,
        probs: &GpuArg<'_>,
    ) -> Result<ScratchScores<'a>, OpError> {
        let buffer = batch.scratch::<u8>(self.scores_bytes(probs) as usize)?;
        Ok(self.scores(buffer, probs))
    }

    /// The most scratch the [`forward`](Self::forward) and the [`backward`](Self::backward) of
    /// `attention` take on any device for `extents`, the probabilities' buffer holding
    /// `probs_len` elements in its layout and the five tensors being of the element types
    /// `elems`: the scores (in the backward, the gradients of the probabilities and of the
    /// scores), laid out like the probabilities, and the partial sums of each product that
    /// may split its reduction (see [`MatmulOp::scratch`]).
    pub fn scratch(
        attention: &Attention,
        extents: AttentionExtents,
        probs_len: u64,
        elems: AttentionViews<ElemType>,
    ) -> Result<[Scratch; 2], OpError> {
        let group = attention.group()?;
        let AttentionExtents {
            batch,
            seq_q,
            seq_k,
            head_dim: d,
        } = extents;
        let product = |heads: u32, m, n, k, factors| {
            let shape = GemmShape {
                batch: batch.saturating_mul(heads),
                m,
                n,
                k,
            };
            Product::scratch(shape, factors)
        };
        let (h, kv) = (attention.heads, attention.kv_heads);
        let (p, grouped) = (elems.scores, group.saturating_mul(seq_q));
        let scores = Scratch::buffer(scores_bytes(probs_len, p));
        // The products in the order of `gemms`: S = Q·Kᵀ, O = P·V, dV = Pᵀ·dO, dP = dO·Vᵀ,
        // dQ = dS·K, dK = dSᵀ·Q; dV and dK merge the group into their reduction.
        let forward = scores
            .clone()
            .and(product(h, seq_q, seq_k, d, [elems.q, elems.k])?)
            .and(product(h, seq_q, d, seq_k, [p, elems.v])?);
        let backward = scores
            .clone()
            .and(scores)
            .and(product(kv, seq_k, d, grouped, [p, elems.out])?)
            .and(product(h, seq_q, seq_k, d, [elems.out, elems.v])?)
            .and(product(h, seq_q, d, seq_k, [p, elems.k])?)
            .and(product(kv, seq_k, d, grouped, [p, elems.q])?);
        Ok([forward, backward])
    }

    /// Records the forward: `S = Q·Kᵀ`, `probs = softmax(scale·S)`, `out = probs·V`. Every
    /// argument is checked before anything is recorded.
    pub fn forward(&self, batch: &mut Batch<'_>, args: &AttentionArgs<'_>) -> Result<(), OpError> {
        self.record_forward(batch, args, None)
    }

    /// Records the forward of an attention built by [`with_keep`](Self::with_keep), its keys
    /// masked by `keep` `[batch, seq_k]`.
    pub fn forward_keys(
        &self,
        batch: &mut Batch<'_>,
        args: &AttentionArgs<'_>,
        keep: &GpuArg<'_>,
    ) -> Result<(), OpError> {
        self.record_forward(batch, args, Some(keep))
    }

    fn record_forward(
        &self,
        batch: &mut Batch<'_>,
        args: &AttentionArgs<'_>,
        keep: Option<&GpuArg<'_>>,
    ) -> Result<(), OpError> {
        self.check(FORWARD, args)?;
        let gpu = batch.gpu();
        let s_buffer = self.scratch_scores(batch, &args.probs)?;
        let s = s_buffer.arg()?;
        let (q, k_t) = (
            through(&args.q, &self.q_side.heads)?,
            through(&args.k, &self.k_side.shared_t)?,
        );
        let (s_g, p_g) = (
            through(&s, &self.s_side.grouped)?,
            through(&args.probs, &self.s_side.grouped)?,
        );
        let (v, o) = (
            through(&args.v, &self.v_side.shared)?,
            through(&args.out, &self.o_side.heads)?,
        );
        self.scores_op.f32().extents(gpu, &q, &k_t, &s_g)?;
        self.values_op.f32().extents(gpu, &p_g, &v, &o)?;
        self.scores_op
            .record(batch, &q, &k_t, &s_g, Output::Overwrite)?;
        match keep {
            Some(keep) => self.softmax.forward_keys(batch, &s, keep, &args.probs)?,
            None => self.softmax.forward(batch, &s, &args.probs)?,
        }
        self.values_op
            .record(batch, &p_g, &v, &o, Output::Overwrite)
    }

    /// Records the backward from `dout` (read through the output's view): `dq`, `dk` and `dv`
    /// (written through the views of Q, K and V, overwritten) from the forward's `probs` and
    /// inputs. Every argument is checked before anything is recorded.
    pub fn backward(
        &self,
        batch: &mut Batch<'_>,
        args: &AttentionArgs<'_>,
        dout: &GpuArg<'_>,
        dq: &GpuArg<'_>,
        dk: &GpuArg<'_>,
        dv: &GpuArg<'_>,
    ) -> Result<(), OpError> {
        self.check(BACKWARD, args)?;
        for (role, arg, view) in [
            ("dout", dout, &self.out),
            ("dq", dq, &self.q),
            ("dk", dk, &self.k),
            ("dv", dv, &self.v),
        ] {
            same_view(BACKWARD, role, arg.view(), view)?;
        }
        check_same_dims(
            BACKWARD,
            &["dout", "out"],
            [dout.dims(), args.out.dims()].into_iter(),
        )?;
        check_same_dims(
            BACKWARD,
            &["dq", "q"],
            [dq.dims(), args.q.dims()].into_iter(),
        )?;
        check_same_dims(
            BACKWARD,
            &["dk", "dv", "k"],
            [dk.dims(), dv.dims(), args.k.dims()].into_iter(),
        )?;
        let gpu = batch.gpu();
        let dp_buffer = self.scratch_scores(batch, &args.probs)?;
        let ds_buffer = self.scratch_scores(batch, &args.probs)?;
        let (dp, ds) = (dp_buffer.arg()?, ds_buffer.arg()?);
        let (s, q, k, o, v) = (
            &self.s_side,
            &self.q_side,
            &self.k_side,
            &self.o_side,
            &self.v_side,
        );
        // dV = Pᵀ·dO
        let dv_args = (
            through(&args.probs, &s.merged_t)?,
            through(dout, &o.merged)?,
            through(dv, &v.heads)?,
        );
        // dP = dO·Vᵀ
        let dp_args = (
            through(dout, &o.heads)?,
            through(&args.v, &v.shared_t)?,
            through(&dp, &s.grouped)?,
        );
        // dQ = dS·K
        let dq_args = (
            through(&ds, &s.grouped)?,
            through(&args.k, &k.shared)?,
            through(dq, &q.heads)?,
        );
        // dK = dSᵀ·Q
        let dk_args = (
            through(&ds, &s.merged_t)?,
            through(&args.q, &q.merged)?,
            through(dk, &k.heads)?,
        );
        let products = [
            (&self.grad_v, &dv_args),
            (&self.grad_p, &dp_args),
            (&self.grad_q, &dq_args),
            (&self.grad_k, &dk_args),
        ];
        for (op, (a, b, c)) in &products {
            op.f32().extents(gpu, a, b, c)?;
        }
        let [dv_product, dp_product, dq_product, dk_product] = products;
        for (op, (a, b, c)) in [dv_product, dp_product] {
            op.record(batch, a, b, c, Output::Overwrite)?;
        }
        self.softmax.backward(batch, &args.probs, &dp, &ds)?;
        for (op, (a, b, c)) in [dq_product, dk_product] {
            op.record(batch, a, b, c, Output::Overwrite)?;
        }
        Ok(())
    }

    /// Chooses the tensor-core tiles of the six products for the extents of `args`, timing a
    /// short list once per adapter and problem (kept with the autotune's results, as for a
    /// linear layer's). The products read `args`' buffers and pooled scratch scores, and
    /// write scratch buffers only: nothing of the arguments is overwritten (`out`'s buffer
    /// stands in for the output's gradient, which has its view). Does nothing where no
    /// product runs on tensor cores.
    pub fn tune(&self, gpu: &Gpu, args: &AttentionArgs<'_>) -> Result<(), OpError> {
        self.check(OP, args)?;
        if !self.tensor_cores().contains(&true) {
            return Ok(());
        }
        let buffer = GpuBuffer::scratch::<u8>(gpu, self.scores_bytes(&args.probs) as usize)?;
        let scores = self.scores(buffer, &args.probs);
        let s = scores.arg()?;
        let (q, k, o) = (&self.q_side, &self.k_side, &self.o_side);
        let (v, sc) = (&self.v_side, &self.s_side);
        let dout = &args.out;
        let calls = [
            (
                &self.scores_op,
                [
                    (&args.q, &q.heads),
                    (&args.k, &k.shared_t),
                    (&s, &sc.grouped),
                ],
            ),
            (
                &self.values_op,
                [
                    (&s, &sc.grouped),
                    (&args.v, &v.shared),
                    (&args.out, &o.heads),
                ],
            ),
            (
                &self.grad_v,
                [(&s, &sc.merged_t), (dout, &o.merged), (&args.v, &v.heads)],
            ),
            (
                &self.grad_p,
                [(dout, &o.heads), (&args.v, &v.shared_t), (&s, &sc.grouped)],
            ),
            (
                &self.grad_q,
                [(&s, &sc.grouped), (&args.k, &k.shared), (&args.q, &q.heads)],
            ),
            (
                &self.grad_k,
                [
                    (&s, &sc.merged_t),
                    (&args.q, &q.merged),
                    (&args.k, &k.heads),
                ],
            ),
        ];
        for (product, [a, b, c]) in calls {
            let [a, b, c] = [a, b, c].map(|(arg, view)| through(arg, view));
            product.tune(gpu, &a?, &b?, &c?)?;
        }
        Ok(())
    }
}

/// The bytes of a scratch tensor of `len` elements of `elem`: one of the scores' layout.
fn scores_bytes(len: u64, elem: ElemType) -> u64 {
    len * u64::from(elem.size_bytes())
}

/// The extents of an attention call: what its scratch depends on besides its layouts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AttentionExtents {
    /// Sequences in the batch.
    pub batch: u32,
    /// Queries of each.
    pub seq_q: u32,
    /// Keys of each.
    pub seq_k: u32,
    /// Elements of a head.
    pub head_dim: u32,
}

/// A scratch tensor of scores: a scratch buffer read through the scores' view.
struct ScratchScores<'a> {
    buffer: GpuBuffer,
    view: &'a View,
    bound: fblayout_core::layout::BoundView,
}

impl ScratchScores<'_> {
    fn arg(&self) -> Result<GpuArg<'_>, OpError> {
        Ok(GpuArg::bound(&self.buffer, self.view, self.bound.clone())?)
    }
}
