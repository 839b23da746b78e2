//! Snapshots of the cross-entropy kernels' WGSL (naga validated every one when it was built):
//! the rows, the mean and the backward (apart from the logits and written over them), for
//! row-major logits (no wide accesses: 30522 is not a
//! multiple of 4) and R-Tile logits (padded to whole tiles, so wide). In CI (`CI=true`) a
//! changed snapshot fails the run instead of being written.

mod support;

use fblayout_core::layout::ElemType;
use fblayout_kernels::ops::CrossEntropyOp;
use support::{Layout2, gpu, view_1d_dyn, view_2d};

fn snapshot(name: &str, layout: Layout2) {
    let (logits, _) = view_2d("logits", layout, 4096, 30522, ElemType::F32);
    let labels = view_1d_dyn("labels", "rows", 4096, ElemType::U32).0;
    let loss = view_1d_dyn("loss", "rows", 4096, ElemType::F32).0;
    let op = CrossEntropyOp::new(gpu(), &logits, &labels, &loss, u32::MAX).unwrap();
    for module in op.modules() {
        let kernel = module.name().replace([' ', '-'], "_");
        insta::assert_snapshot!(format!("{name}__{kernel}"), module.source());
    }
}

#[test]
fn row_major_logits() {
    snapshot("row_major", Layout2::RowMajor);
}

#[test]
fn rtile_logits() {
    snapshot("rtile", Layout2::RTile(8));
}
