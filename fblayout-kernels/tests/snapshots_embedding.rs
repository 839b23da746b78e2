//! Snapshots of the embedding kernels' WGSL (naga validated every one when it was built), for
//! a row-major and an R-Tile table and output. In CI (`CI=true`) a changed snapshot fails the
//! run instead of being written.

mod support;

use fblayout_core::layout::ElemType;
use fblayout_kernels::ops::EmbeddingOp;
use support::{Layout2, gpu, view_2d};

fn snapshot(name: &str, layout: Layout2) {
    let (table, _) = view_2d("table", layout, 30522, 768, ElemType::F32);
    let (out, _) = view_2d("out", layout, 4096, 768, ElemType::F32);
    let op = EmbeddingOp::new(gpu(), &table, &out).unwrap();
    assert!(op.is_vectorized());
    for module in op.modules() {
        let kernel = module.name().replace([' ', ','], "_");
        insta::assert_snapshot!(format!("{name}__{kernel}"), module.source());
    }
}

#[test]
fn row_major() {
    snapshot("row_major", Layout2::RowMajor);
}

#[test]
fn rtile() {
    snapshot("rtile", Layout2::RTile(4));
}
