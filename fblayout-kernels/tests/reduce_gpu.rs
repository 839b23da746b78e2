//! The reductions of the norm and bias kernels on the GPU: row sums with subgroups and without
//! agree, column sums are the same bit for bit from run to run and do not depend on the chunking
//! beyond rounding, and grids longer than one dispatch dimension are covered.

mod support;

use fblayout_core::layout::ElemType;
use fblayout_kernels::ops::{BiasOp, RmsNormOp, RmsNormTensors};
use fblayout_kernels::runtime::Gpu;
use support::{
    Layout2, Rng, Tensor, assert_close, gpu, gpu_without_subgroups, tolerance, view_1d,
    view_1d_dyn, view_2d,
};

/// `db = Σ_rows dy` on the GPU, as the bytes it stored.
fn bias_grad_bits(gpu: &Gpu, dy: &Tensor, b: &Tensor, chunk: Option<u32>) -> Vec<u32> {
    let mut op = BiasOp::new(gpu, &dy.view, &b.view, &dy.view).unwrap();
    if let Some(rows) = chunk {
        op = op.with_chunk_rows(rows);
    }
    let (dyb, dbb) = (dy.upload(gpu), b.poisoned(gpu));
    let mut batch = gpu.batch();
    op.backward(&mut batch, &dy.gpu_arg(&dyb), &b.gpu_arg(&dbb), false)
        .unwrap();
    batch.submit().unwrap();
    dbb.read_back::<u32>().unwrap()
}

#[test]
fn column_sums_are_the_same_bit_for_bit_from_run_to_run() {
    let gpu = gpu();
    let mut rng = Rng::new(1);
    for layout in Layout2::ALL {
        let (view, bind) = view_2d("dy", layout, 1001, 72, ElemType::F32);
        let dy = Tensor::random(&mut rng, view, bind, -1.0, 1.0);
        let b = Tensor::new(
            view_1d("b", "cols", 72, ElemType::F32),
            vec![],
            vec![0.0; 72],
        );
        let first = bias_grad_bits(gpu, &dy, &b, None);
        for _ in 0..3 {
            assert_eq!(first, bias_grad_bits(gpu, &dy, &b, None), "{layout:?}");
        }
        // Other chunkings add in another order: equal up to rounding.
        let as_f64 = |bits: &[u32]| -> Vec<f64> {
            bits[..72]
                .iter()
                .map(|&u| f64::from(f32::from_bits(u)))
                .collect()
        };
        let want: Vec<f64> = (0..72)
            .map(|c| (0..1001).map(|r| dy.values[r * 72 + c]).sum())
            .collect();
        for chunk in [None, Some(1), Some(16), Some(2000)] {
            let got = as_f64(&bias_grad_bits(gpu, &dy, &b, chunk));
            assert_close(
                &format!("{layout:?} chunk {chunk:?}"),
                &got,
                &want,
                tolerance(ElemType::F32, 1001),
            );
        }
    }
}

/// RMSNorm's forward `rstd` of `x` on `gpu`.
fn rstd_on(gpu: &Gpu, x: &Tensor, gamma: &Tensor) -> Vec<f64> {
    let (y, bind) = view_2d(
        "y",
        Layout2::RowMajor,
        x.dims()[0] as u32,
        x.dims()[1] as u32,
        ElemType::F32,
    );
    let (rv, _) = view_1d_dyn("rstd", "rows", x.dims()[0] as u32, ElemType::F32);
    let rstd = Tensor::new(rv, bind.clone(), vec![0.0; x.dims()[0]]);
    let y = Tensor::new(y, bind, vec![0.0; x.values.len()]);
    let op = RmsNormOp::new(
        gpu,
        &RmsNormTensors {
            x: &x.view,
            gamma: &gamma.view,
            y: &y.view,
            rstd: &rstd.view,
        },
        1e-6,
    )
    .unwrap();
    let (xb, gb, yb, rb) = (
        x.upload(gpu),
        gamma.upload(gpu),
        y.poisoned(gpu),
        rstd.poisoned(gpu),
    );
    let mut batch = gpu.batch();
    op.forward(
        &mut batch,
        &RmsNormTensors {
            x: &x.gpu_arg(&xb),
            gamma: &gamma.gpu_arg(&gb),
            y: &y.gpu_arg(&yb),
            rstd: &rstd.gpu_arg(&rb),
        },
    )
    .unwrap();
    batch.submit().unwrap();
    rstd.download(&rb)
}

#[test]
fn row_sums_agree_with_and_without_subgroups_and_cover_long_grids() {
    let mut rng = Rng::new(2);
    // 70 001 rows of one row per workgroup: more workgroups than one grid dimension holds.
    for (layout, rows, cols) in [
        (Layout2::RowMajor, 70_001, 16),
        (Layout2::RTile(8), 2_001, 200),
        (Layout2::ColMajor, 301, 120),
    ] {
        let (view, bind) = view_2d("x", layout, rows, cols, ElemType::F32);
        let x = Tensor::random(&mut rng, view, bind, -2.0, 2.0);
        let gamma = Tensor::random(
            &mut rng,
            view_1d("gamma", "cols", cols, ElemType::F32),
            vec![],
            0.5,
            1.5,
        );
        let want: Vec<f64> = x
            .values
            .chunks(cols as usize)
            .map(|r| 1.0 / (r.iter().map(|v| v * v).sum::<f64>() / f64::from(cols) + 1e-6).sqrt())
            .collect();
        let tol = tolerance(ElemType::F32, cols as usize);
        let with = rstd_on(gpu(), &x, &gamma);
        let without = rstd_on(gpu_without_subgroups(), &x, &gamma);
        assert_close(&format!("{layout:?} subgroups"), &with, &want, tol);
        assert_close(&format!("{layout:?} no subgroups"), &without, &want, tol);
        assert_close(&format!("{layout:?} both"), &with, &without, tol);
    }
}
