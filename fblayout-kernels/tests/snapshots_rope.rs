//! Snapshots of RoPE's forward WGSL (naga validated every one when it was built): Llama's
//! heads of 128 row-major, four pairs per invocation; and the query part of a fused projection
//! with grouped-query heads, tables column-major, one pair per invocation. In CI (`CI=true`) a
//! changed snapshot fails the run instead of being written.

mod support;

use fblayout_core::layout::{ElemType, LayoutSpec, Order, View};
use fblayout_kernels::ops::{RopeOp, RopeViews, qkv_views};
use support::{gpu, heads_view, qkv_view, static_2d};

fn snapshot(name: &str, x: &View, y: &View, tables: Order, wide: bool) {
    let positions = LayoutSpec::new("positions")
        .elem(ElemType::U32)
        .dyn_axis("batch")
        .dyn_axis("seq")
        .build()
        .unwrap()
        .view();
    let half = x.axes()[3].extent.as_static().unwrap() as u32 / 2;
    let cos = static_2d("cos", 4096, half, ElemType::F32, tables);
    let sin = static_2d("sin", 4096, half, ElemType::F32, tables);
    let views = RopeViews {
        x,
        y,
        positions: &positions,
        cos: &cos,
        sin: &sin,
    };
    let op = RopeOp::new(gpu(), &views).unwrap();
    assert_eq!(op.is_vectorized(), wide);
    insta::assert_snapshot!(format!("{name}__rope_forward"), op.shaders()[0]);
}

#[test]
fn row_major() {
    let (x, y) = (
        heads_view("x", 32, 128, ElemType::F32),
        heads_view("y", 32, 128, ElemType::F32),
    );
    snapshot("row_major", &x, &y, Order::RowMajor, true);
}

#[test]
fn fused_query() {
    let qkv = qkv_view((8 + 2 * 2) * 64, ElemType::F32);
    let (q, _, _) = qkv_views(&qkv, 8, 2).unwrap();
    let y = heads_view("q_rot", 8, 64, ElemType::F32);
    snapshot("fused_query", &q, &y, Order::ColMajor, false);
}
