//! Snapshots of the fused attention's WGSL (naga validated every one when it was built): the
//! four kernels of a causal, grouped-query attention over one fused `f16` projection with heads
//! of 32 (4-wide loads and stores), and the forward of a padding-masked attention over separate
//! `f32` tensors with heads of 6 (scalar loads, the last vector partial). In CI (`CI=true`) a
//! changed snapshot fails the run instead of being written.

mod support;

use fblayout_core::layout::ElemType;
use fblayout_kernels::ops::attention::flash::FlashAttentionOp;
use fblayout_kernels::ops::{Attention, AttentionViews, Mask, qkv_views};
use support::{gpu, heads_view, keep_view, lse_view, qkv_view};

#[test]
fn fused_projection_causal_grouped() {
    let qkv = qkv_view((4 + 2 * 2) * 32, ElemType::F16);
    let (q, k, v) = qkv_views(&qkv, 4, 2).unwrap();
    let (out, lse) = (heads_view("o", 4, 32, ElemType::F16), lse_view(4));
    let views = AttentionViews {
        q: &q,
        k: &k,
        v: &v,
        out: &out,
        scores: &lse,
    };
    let attention = Attention::new(4, 2, 32, Mask::Causal { offset: 0 });
    let op = FlashAttentionOp::new(gpu(), &views, None, attention).unwrap();
    let names = ["forward", "grad_q", "grad_k", "grad_v"];
    for (name, shader) in names.iter().zip(op.shaders()) {
        insta::assert_snapshot!(format!("fused_projection_causal_grouped__{name}"), shader);
    }
}

#[test]
fn separate_padded_scalar() {
    let (q, k, v) = (
        heads_view("q", 2, 6, ElemType::F32),
        heads_view("k", 2, 6, ElemType::F32),
        heads_view("v", 2, 6, ElemType::F32),
    );
    let (out, lse) = (heads_view("o", 2, 6, ElemType::F32), lse_view(2));
    let keep = keep_view();
    let views = AttentionViews {
        q: &q,
        k: &k,
        v: &v,
        out: &out,
        scores: &lse,
    };
    let attention = Attention::new(2, 2, 6, Mask::Keys);
    let op = FlashAttentionOp::new(gpu(), &views, Some(&keep), attention).unwrap();
    insta::assert_snapshot!("separate_padded_scalar__forward", op.shaders()[0]);
}
