//! Snapshots of the softmax kernels' WGSL (naga validated every one when it was built), for a
//! row-major and an R-Tile configuration, with and without the causal mask. In CI (`CI=true`)
//! a changed snapshot fails the run instead of being written.

mod support;

use fblayout_core::layout::ElemType;
use fblayout_kernels::ops::{Mask, Softmax, SoftmaxOp};
use support::{Layout2, Layout4, gpu, view_2d, view_4d};

fn snapshot(name: &str, op: &SoftmaxOp) {
    for module in op.modules() {
        let kernel = module.name().replace(' ', "_");
        insta::assert_snapshot!(format!("{name}__{kernel}"), module.source());
    }
}

#[test]
fn row_major_logits() {
    let (x, _) = view_2d("x", Layout2::RowMajor, 13, 36, ElemType::F32);
    let (y, _) = view_2d("y", Layout2::RowMajor, 13, 36, ElemType::F32);
    snapshot(
        "row_major",
        &SoftmaxOp::new(gpu(), &x, &y, Softmax::default()).unwrap(),
    );
}

#[test]
fn rtile_attention_scores_with_causal_mask() {
    let dims = [2, 12, 128, 128];
    let (x, _) = view_4d("scores", Layout4::RTile(8), dims, ElemType::F32);
    let (y, _) = view_4d("probs", Layout4::RTile(8), dims, ElemType::F32);
    let softmax = Softmax::new(0.125, Mask::Causal { offset: 0 });
    snapshot(
        "rtile_causal",
        &SoftmaxOp::new(gpu(), &x, &y, softmax).unwrap(),
    );
}

#[test]
fn long_rows_stream() {
    let (x, _) = view_2d("x", Layout2::RTile(4), 4, 30522, ElemType::F32);
    snapshot(
        "rtile_streamed",
        &SoftmaxOp::new(gpu(), &x, &x, Softmax::default()).unwrap(),
    );
}
