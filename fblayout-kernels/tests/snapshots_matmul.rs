//! Snapshots of the GEMM kernels' WGSL (validated by naga when built): a row-major product in
//! the large tiling (vec4 loads along k for A and along n for B and C), and R-Tile operands in
//! a 64 × 64 tiling with 4 × 4 outputs per invocation (A read through a transpose, so its vec4
//! loads run along m; C stored along n), and a biased product `C = A·B + bias` into a
//! transposed R-Tile C (stored four rows at a time along m, the bias read four at a time).

mod support;

use fblayout_core::layout::ElemType;
use fblayout_kernels::ops::matmul::{MatmulOp, TileConfig};
use support::{Layout2, gpu, view_2d};

fn source(layouts: [Layout2; 3], config: TileConfig) -> String {
    let gpu = gpu();
    let [la, lb, lc] = layouts;
    let (a, _) = view_2d("a", la, 64, 96, ElemType::F32);
    let (b, _) = view_2d("b", lb, 96, 32, ElemType::F32);
    let (c, _) = view_2d("c", lc, 64, 32, ElemType::F32);
    let op = MatmulOp::new(gpu, &a, &b, &c).unwrap();
    op.source(gpu, config).unwrap()
}

#[test]
fn row_major_gemm() {
    insta::assert_snapshot!(
        "matmul_row_major_128x128_k8",
        source([Layout2::RowMajor; 3], TileConfig::LARGE)
    );
}

#[test]
fn rtile_gemm_through_a_transpose() {
    insta::assert_snapshot!(
        "matmul_rtile_transposed_a_64x64_k8",
        source(
            [Layout2::RTileT(4), Layout2::RTile(4), Layout2::RTile(8)],
            TileConfig::new(64, 64, 8, 4, 4)
        )
    );
}

#[test]
fn biased_gemm_into_a_transposed_rtile() {
    let gpu = gpu();
    let (a, _) = view_2d("a", Layout2::RowMajor, 64, 96, ElemType::F32);
    let (b, _) = view_2d("b", Layout2::RTile(4), 96, 32, ElemType::F32);
    let (c, _) = view_2d("c", Layout2::RTileT(4), 64, 32, ElemType::F32);
    let bias = support::view_1d("bias", "cols", 32, ElemType::F32);
    let op = MatmulOp::new_biased(gpu, &a, &b, &bias, &c).unwrap();
    insta::assert_snapshot!(
        "matmul_biased_rtile_c_32x32_k8",
        op.source(gpu, TileConfig::new(32, 32, 8, 4, 4)).unwrap()
    );
}
