//! The WGSL of the norm, bias and AdamW kernels, for a row-major and an R-Tile configuration.
//!
//! Every shader was validated by naga when its kernel was built. They are built on the device
//! with subgroups turned off, so that the snapshots are the same on every adapter; the subgroup
//! forms differ only in the reduction helpers (`fbl_wg_sum` with `subgroupAdd`) and the builtins
//! passed to them.

mod support;

use fblayout_core::layout::ElemType;
use fblayout_kernels::ops::adamw::STEP_SCALARS;
use fblayout_kernels::ops::{
    AdamWMember, AdamWOp, AdamWTensors, BiasOp, LayerNormOp, LayerNormTensors, NonFiniteOp,
    NormLaunch, Residual, RmsNormOp, RmsNormTensors, RowLaunch, RowSum, SumSquaresOp,
};
use support::{Layout2, gpu_without_subgroups, view_1d, view_1d_dyn, view_2d};

const COLS: u32 = 64;

fn configurations() -> [(&'static str, Layout2); 2] {
    [
        ("row_major", Layout2::RowMajor),
        ("rtile4", Layout2::RTile(4)),
    ]
}

/// Snapshots the norms' shaders for `launch` as `{norm}_{pass}_{configuration}{suffix}`.
fn snapshot_norms(launch: NormLaunch, suffix: &str) {
    let gpu = gpu_without_subgroups();
    for (name, layout) in configurations() {
        let (x, _) = view_2d("x", layout, 8, COLS, ElemType::F32);
        let (y, _) = view_2d("y", layout, 8, COLS, ElemType::F32);
        let gamma = view_1d("gamma", "cols", COLS, ElemType::F32);
        let beta = view_1d("beta", "cols", COLS, ElemType::F32);
        let (mean, _) = view_1d_dyn("mean", "rows", 8, ElemType::F32);
        let (rstd, _) = view_1d_dyn("rstd", "rows", 8, ElemType::F32);
        let ln = LayerNormOp::with_launch(
            gpu,
            &LayerNormTensors {
                x: &x,
                gamma: &gamma,
                beta: &beta,
                y: &y,
                mean: &mean,
                rstd: &rstd,
            },
            1e-5,
            launch,
        )
        .unwrap();
        let rms = RmsNormOp::with_launch(
            gpu,
            &RmsNormTensors {
                x: &x,
                gamma: &gamma,
                y: &y,
                rstd: &rstd,
            },
            1e-5,
            launch,
        )
        .unwrap();
        for (norm, shaders) in [("layer_norm", ln.shaders()), ("rms_norm", rms.shaders())] {
            for (pass, shader) in ["forward", "backward", "weight_grads"].iter().zip(shaders) {
                insta::assert_snapshot!(format!("{norm}_{pass}_{name}{suffix}"), shader.source());
            }
        }
    }
}

#[test]
fn norm_shaders() {
    // Rows summed over their own lanes (here through workgroup memory, subgroups being off),
    // several rows per workgroup: what the default builds for row-major rows that one
    // subgroup covers, on a device with subgroups.
    let lanes = RowLaunch {
        row_sum: RowSum::Lanes,
        ..RowLaunch::default()
    };
    snapshot_norms(
        NormLaunch {
            forward: lanes,
            backward: lanes,
            chunk_rows: None,
        },
        "",
    );
}

#[test]
fn baseline_norm_shaders() {
    // The kernels before launch shapes, which the benchmark compares against.
    snapshot_norms(NormLaunch::BASELINE, "_baseline");
}

#[test]
fn stacked_norm_shaders() {
    // Four lanes per row and 16 rows per block: a row-major workgroup of 16 rows, an R-Tile
    // one of four stacked tile rows.
    let rows = RowLaunch {
        lanes_per_row: Some(4),
        rows_per_block: Some(16),
        ..RowLaunch::default()
    };
    snapshot_norms(
        NormLaunch {
            forward: rows,
            backward: rows,
            chunk_rows: None,
        },
        "_4x16",
    );
}

#[test]
fn fused_residual_norm_shaders() {
    // A residual connection fused into LayerNorm: the forward reads `x` and `res` (an R-Tile)
    // and writes their sum, stored in f16 and so rounded before it is normalised; the backward,
    // built over the sum, adds `dsum` to `dx`.
    let gpu = gpu_without_subgroups();
    let half = ElemType::F16;
    let (x, _) = view_2d("x", Layout2::RowMajor, 8, COLS, half);
    let (res, _) = view_2d("res", Layout2::RTile(4), 8, COLS, half);
    let (sum, _) = view_2d("sum", Layout2::RowMajor, 8, COLS, half);
    let (y, _) = view_2d("y", Layout2::RowMajor, 8, COLS, half);
    let (dsum, _) = view_2d("dsum", Layout2::RowMajor, 8, COLS, half);
    let gamma = view_1d("gamma", "cols", COLS, ElemType::F32);
    let beta = view_1d("beta", "cols", COLS, ElemType::F32);
    let (mean, _) = view_1d_dyn("mean", "rows", 8, ElemType::F32);
    let (rstd, _) = view_1d_dyn("rstd", "rows", 8, ElemType::F32);
    let views = |x| LayerNormTensors {
        x,
        gamma: &gamma,
        beta: &beta,
        y: &y,
        mean: &mean,
        rstd: &rstd,
    };
    let forward = Residual {
        sum: Some((&res, &sum)),
        carry: None,
    };
    let backward = Residual {
        sum: None,
        carry: Some(&dsum),
    };
    let launch = NormLaunch::default();
    let fwd = LayerNormOp::fused(gpu, &views(&x), &forward, 1e-5, launch).unwrap();
    let bwd = LayerNormOp::fused(gpu, &views(&sum), &backward, 1e-5, launch).unwrap();
    insta::assert_snapshot!("add_layer_norm_forward", fwd.shaders()[0].source());
    insta::assert_snapshot!("layer_norm_backward_add", bwd.shaders()[1].source());
}

#[test]
fn bias_shaders() {
    let gpu = gpu_without_subgroups();
    for (name, layout) in configurations() {
        let (x, _) = view_2d("x", layout, 8, COLS, ElemType::F32);
        let (y, _) = view_2d("y", layout, 8, COLS, ElemType::F32);
        let b = view_1d("b", "cols", COLS, ElemType::F32);
        let op = BiasOp::new(gpu, &x, &b, &y).unwrap();
        let shaders = op.shaders(gpu, 8).unwrap();
        for (pass, shader) in ["forward", "column_sum", "partials_sum", "single_pass"]
            .iter()
            .zip(&shaders)
        {
            insta::assert_snapshot!(format!("bias_{pass}_{name}"), shader);
        }
    }
}

#[test]
fn adamw_and_sum_of_squares_shaders() {
    let gpu = gpu_without_subgroups();
    for (name, layout) in configurations() {
        let (p, _) = view_2d("param", layout, 8, COLS, ElemType::F32);
        let op = AdamWOp::new(
            gpu,
            &AdamWTensors {
                param: &p,
                grad: &p,
                m: &p,
                v: &p,
            },
        )
        .unwrap();
        insta::assert_snapshot!(format!("adamw_{name}"), op.shader());
        let out = view_1d("norm", "one", 1, ElemType::F32);
        let ss = SumSquaresOp::new(gpu, &p, &out).unwrap();
        for (pass, shader) in ["chunks", "total"].iter().zip(ss.shaders()) {
            insta::assert_snapshot!(format!("sum_squares_{pass}_{name}"), shader.source());
        }
    }
}

#[test]
fn loss_scaling_shaders() {
    // What a mixed-precision step runs per parameter: the overflow check of its gradient
    // (f16 here) and the AdamW step that reads its values on the device, gated on the flag.
    let gpu = gpu_without_subgroups();
    for (name, layout) in configurations() {
        let (p, _) = view_2d("param", layout, 8, COLS, ElemType::F32);
        let (g, _) = view_2d("grad", layout, 8, COLS, ElemType::F16);
        let flag = view_1d("flag", "one", 1, ElemType::U32);
        let scalars = view_1d("scalars", "values", STEP_SCALARS, ElemType::F32);
        let check = NonFiniteOp::new(gpu, &g, &flag).unwrap();
        insta::assert_snapshot!(format!("non_finite_{name}"), check.shader());
        let step = AdamWOp::on_device(
            gpu,
            &AdamWTensors {
                param: &p,
                grad: &p,
                m: &p,
                v: &p,
            },
            &scalars,
            Some(&flag),
        )
        .unwrap();
        insta::assert_snapshot!(format!("adamw_on_device_gated_{name}"), step.shader());
    }
}

#[test]
fn overflow_check_group_shader() {
    // One check of three gradients in one dispatch: an f16 R-Tile matrix, an f32 column-major
    // one and a bias (each validated by naga when built, before it is snapshotted).
    let gpu = gpu_without_subgroups();
    let (a, _) = view_2d("grad_w1", Layout2::RTile(4), 8, COLS, ElemType::F16);
    let (b, _) = view_2d("grad_w2", Layout2::ColMajor, 8, COLS, ElemType::F32);
    let bias = view_1d("grad_bias", "cols", 30, ElemType::F32);
    let flag = view_1d("flag", "one", 1, ElemType::U32);
    let check = NonFiniteOp::many(gpu, &[&a, &b, &bias], &flag).unwrap();
    insta::assert_snapshot!("non_finite_group_of_three", check.shader());
}

#[test]
fn adamw_group_shader() {
    // Three parameters in one dispatch: an R-Tile matrix writing an f16 row-major copy, a
    // column-major matrix and a bias, gated, with the step's values on the device (each
    // validated by naga when built, before it is snapshotted).
    let gpu = gpu_without_subgroups();
    let (a, _) = view_2d("w1", Layout2::RTile(4), 8, 64, ElemType::F32);
    let (copy, _) = view_2d("w1_f16", Layout2::RowMajor, 8, 64, ElemType::F16);
    let (b, _) = view_2d("w2", Layout2::ColMajor, 8, 64, ElemType::F32);
    let bias = view_1d("bias", "cols", 30, ElemType::F32);
    let all = |v| AdamWTensors {
        param: v,
        grad: v,
        m: v,
        v,
    };
    let scalars = view_1d("scalars", "values", STEP_SCALARS, ElemType::F32);
    let gate = view_1d("gate", "one", 1, ElemType::U32);
    let op = AdamWOp::many(
        gpu,
        &[
            AdamWMember {
                tensors: all(&a),
                copy: Some(&copy),
            },
            all(&b).into(),
            all(&bias).into(),
        ],
        Some(&scalars),
        Some(&gate),
    )
    .unwrap();
    insta::assert_snapshot!("adamw_group_of_three", op.shader());
}
