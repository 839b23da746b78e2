//! The WGSL of the elementwise kernels (GELU, SiLU, SwiGLU, sums), for a row-major and an
//! R-Tile configuration, wide (four elements per invocation) where the layouts allow it.
//!
//! Every shader was validated by naga when its kernel was built; the snapshots show a reviewer
//! what changed.

mod support;

use fblayout_core::layout::ElemType;
use fblayout_kernels::ops::{Activation, ActivationOp, AddOp, SwigluOp};
use support::{Layout2, gpu_without_subgroups, view_2d};

fn configurations() -> [(&'static str, Layout2); 3] {
    [
        ("row_major", Layout2::RowMajor),
        ("rtile4", Layout2::RTile(4)),
        ("col_major", Layout2::ColMajor),
    ]
}

#[test]
fn elementwise_shaders() {
    let gpu = gpu_without_subgroups();
    for (name, layout) in configurations() {
        let (x, _) = view_2d("x", layout, 8, 64, ElemType::F32);
        let (y, _) = view_2d("y", layout, 8, 64, ElemType::F32);
        let gelu = ActivationOp::new(gpu, Activation::Gelu, &x, &y).unwrap();
        let [forward, backward] = gelu.shaders();
        insta::assert_snapshot!(format!("gelu_forward_{name}"), forward);
        insta::assert_snapshot!(format!("gelu_backward_{name}"), backward);
        let swiglu = SwigluOp::new(gpu, &x, &y, &y).unwrap();
        insta::assert_snapshot!(format!("swiglu_backward_{name}"), swiglu.shaders()[1]);
        let add = AddOp::accumulate(gpu, &x, &y).unwrap();
        insta::assert_snapshot!(format!("add_into_{name}"), add.shader());
    }
}
