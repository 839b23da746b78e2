//! Snapshots of the narrow products' WGSL (validated by naga when built), at LoRA's shapes of
//! rank 8 in `f16`: `u = x·Aᵀ` (a thin product of 8 columns, the tokens' rows read four
//! elements of `k` at a time), `dA = duᵀ·x` (8 rows, `x` read four rows at a time along its
//! contiguous axis), and `δ = u·Bᵀ` (a short reduction of 8, C stored four columns at a time),
//! also as `y' = s · u·Bᵀ + y`, the adapter's sum with its base layer's output written by it.

mod support;

use fblayout_core::layout::{ElemType, LayoutSpec, View};
use fblayout_kernels::ops::matmul::NarrowMatmulOp;
use support::gpu;

/// `[rows, cols]` row-major `f16`, `rows` a run-time extent when `dyn_rows`.
fn matrix(name: &str, rows: (&str, u32), cols: (&str, u32), dyn_rows: bool) -> View {
    let spec = LayoutSpec::new(name).elem(ElemType::F16);
    let spec = if dyn_rows {
        spec.dyn_axis(rows.0)
    } else {
        spec.axis(rows.0, rows.1)
    };
    spec.axis(cols.0, cols.1).build().unwrap().view()
}

fn source(a: &View, b: &View, c: &View) -> String {
    let op = NarrowMatmulOp::new(gpu(), a, b, c).unwrap();
    op.source(gpu()).unwrap()
}

#[test]
fn few_columns_lora_down_projection() {
    let x = matrix("x", ("tokens", 0), ("d", 576), true);
    let a_t = matrix("lora_a", ("r", 8), ("d", 576), false)
        .transpose("r", "d")
        .unwrap();
    let u = matrix("u", ("tokens", 0), ("r", 8), true);
    insta::assert_snapshot!("narrow_columns_x_at", source(&x, &a_t, &u));
}

#[test]
fn few_rows_lora_weight_gradient() {
    let du_t = matrix("du", ("tokens", 0), ("r", 8), true)
        .transpose("tokens", "r")
        .unwrap();
    let x = matrix("x", ("tokens", 0), ("d", 576), true);
    let da = matrix("d_lora_a", ("r", 8), ("d", 576), false);
    insta::assert_snapshot!("narrow_rows_du_t_x", source(&du_t, &x, &da));
}

#[test]
fn short_reduction_lora_up_projection() {
    let u = matrix("u", ("tokens", 0), ("r", 8), true);
    let b_t = matrix("lora_b", ("d", 576), ("r", 8), false)
        .transpose("d", "r")
        .unwrap();
    let delta = matrix("delta", ("tokens", 0), ("d", 576), true);
    insta::assert_snapshot!("narrow_short_u_bt", source(&u, &b_t, &delta));
}

#[test]
fn short_reduction_lora_up_projection_added_to_the_base_output() {
    let u = matrix("u", ("tokens", 0), ("r", 8), true);
    let b_t = matrix("lora_b", ("d", 576), ("r", 8), false)
        .transpose("d", "r")
        .unwrap();
    let y = matrix("y", ("tokens", 0), ("d", 576), true);
    let adapted = matrix("adapted", ("tokens", 0), ("d", 576), true);
    let op = NarrowMatmulOp::new_added(gpu(), &u, &b_t, &y, &adapted).unwrap();
    insta::assert_snapshot!("narrow_short_u_bt_added", op.source(gpu()).unwrap());
}
