//! Softmax: forward against its definition, backward against finite differences, and the GPU
//! against the CPU, under every 2-D layout, rank-4 attention-score views, both element types,
//! causal masks and both reduction paths (subgroups and workgroup memory).

mod support;

use fblayout_core::layout::{ElemType, LayoutSpec, View};
use fblayout_kernels::cpu::Real;
use fblayout_kernels::ops::softmax::{softmax_backward_cpu, softmax_forward_cpu};
use fblayout_kernels::ops::{Mask, OpError, Softmax, SoftmaxOp};
use fblayout_kernels::runtime::Gpu;
use support::{
    Layout2, Layout4, Rng, Tensor, assert_close, finite_differences, gpu, gpu_elems, gpus,
    layout_pairs, tolerance, view_2d, view_4d,
};

/// Rows that no tile divides; columns that 4 divides but 8 does not.
const ROWS: u32 = 13;
const COLS: u32 = 36;

/// The masks and scales every test runs: none, square causal, causal with rows that see no
/// key (offset −3), and causal past the diagonal.
const CASES: [Softmax; 4] = [
    Softmax {
        scale: 1.0,
        mask: Mask::None,
    },
    Softmax {
        scale: 0.37,
        mask: Mask::Causal { offset: 0 },
    },
    Softmax {
        scale: 1.5,
        mask: Mask::Causal { offset: -3 },
    },
    Softmax {
        scale: 1.0,
        mask: Mask::Causal { offset: 5 },
    },
];

/// The softmax of dense row-major `x` of shape `dims`, from its definition: the query of a row
/// is its coordinate along the second-to-last axis, key `k` counts when `k ≤ q + offset`, and a
/// row without keys is zeros.
fn reference(softmax: Softmax, dims: &[usize], x: &[f64]) -> Vec<f64> {
    let n = dims[dims.len() - 1];
    let queries = dims[dims.len() - 2];
    let mut y = vec![0.0; x.len()];
    for (r, (row, out)) in x.chunks(n).zip(y.chunks_mut(n)).enumerate() {
        let q = r % queries;
        let kept: Vec<usize> = (0..n)
            .filter(|&k| match softmax.mask {
                Mask::None => true,
                Mask::Causal { offset } => (k as i64) <= q as i64 + i64::from(offset),
                Mask::Keys => panic!("key masks are tested through the attention (ops_attention)"),
            })
            .collect();
        let scaled = |k: usize| f64::from(softmax.scale) * row[k];
        let denominator: f64 = kept.iter().map(|&k| scaled(k).exp()).sum();
        for &k in &kept {
            out[k] = scaled(k).exp() / denominator;
        }
    }
    y
}

fn tensors_2d(rng: &mut Rng, xl: Layout2, yl: Layout2, elem: ElemType) -> (Tensor, Tensor) {
    let (xv, bind) = view_2d("x", xl, ROWS, COLS, elem);
    let x = Tensor::random(rng, xv, bind.clone(), -4.0, 4.0);
    let (yv, _) = view_2d("y", yl, ROWS, COLS, elem);
    let y = Tensor::new(yv, bind, vec![0.0; x.values.len()]);
    (x, y)
}

/// Scores `[2, 3, 13, 20]`: 13 queries and 20 keys, which neither 8×8 tiles divide.
const SCORES: [u32; 4] = [2, 3, 13, 20];

fn tensors_4d(rng: &mut Rng, xl: Layout4, yl: Layout4, elem: ElemType) -> (Tensor, Tensor) {
    let (xv, bind) = view_4d("x", xl, SCORES, elem);
    let x = Tensor::random(rng, xv, bind.clone(), -4.0, 4.0);
    let (yv, _) = view_4d("y", yl, SCORES, elem);
    let y = Tensor::new(yv, bind, vec![0.0; x.values.len()]);
    (x, y)
}

fn cpu_forward<T: Real>(softmax: Softmax, x: &Tensor, y: &Tensor) -> Vec<f64> {
    let xs = x.host::<T>();
    let mut ys = y.host::<T>();
    softmax_forward_cpu(softmax, &x.arg(&xs), &mut y.arg_mut(&mut ys)).unwrap();
    y.read_host(&ys)
}

fn cpu_backward<T: Real>(softmax: Softmax, y: &Tensor, dy: &Tensor, dx: &Tensor) -> Vec<f64> {
    let (ys, dys) = (y.host::<T>(), dy.host::<T>());
    let mut dxs = dx.host::<T>();
    softmax_backward_cpu(
        softmax,
        &y.arg(&ys),
        &dy.arg(&dys),
        &mut dx.arg_mut(&mut dxs),
    )
    .unwrap();
    dx.read_host(&dxs)
}

#[test]
fn forward_matches_the_definition_on_the_cpu() {
    let mut rng = Rng::new(1);
    for softmax in CASES {
        for (xl, yl) in layout_pairs() {
            let (x, y) = tensors_2d(&mut rng, xl, yl, ElemType::F32);
            let got = cpu_forward::<f64>(softmax, &x, &y);
            let want = reference(softmax, &x.dims(), &x.values);
            assert_close(&format!("{softmax:?} {xl:?} → {yl:?}"), &got, &want, 1e-13);
        }
        for (xl, yl) in Layout4::ALL.into_iter().zip(Layout4::ALL.into_iter().rev()) {
            let (x, y) = tensors_4d(&mut rng, xl, yl, ElemType::F32);
            let got = cpu_forward::<f64>(softmax, &x, &y);
            let want = reference(softmax, &x.dims(), &x.values);
            assert_close(&format!("{softmax:?} {xl:?} → {yl:?}"), &got, &want, 1e-13);
        }
    }
}

#[test]
fn a_row_that_sees_no_key_is_zeros_and_every_other_row_sums_to_one() {
    let mut rng = Rng::new(7);
    let (x, y) = tensors_2d(
        &mut rng,
        Layout2::RowMajor,
        Layout2::RTile(4),
        ElemType::F32,
    );
    let softmax = Softmax::new(1.0, Mask::Causal { offset: -3 });
    let got = cpu_forward::<f64>(softmax, &x, &y);
    for (q, row) in got.chunks(COLS as usize).enumerate() {
        let sum: f64 = row.iter().sum();
        let want = if q < 3 { 0.0 } else { 1.0 };
        assert!((sum - want).abs() < 1e-12, "row {q} sums to {sum}");
    }
}

#[test]
fn backward_matches_finite_differences_in_f64() {
    let mut rng = Rng::new(2);
    let h = 1e-6;
    let small = |l| view_2d("x", l, 5, 12, ElemType::F32);
    for softmax in CASES {
        for layout in [Layout2::RowMajor, Layout2::RTile(4), Layout2::RowMajorT] {
            let (xv, bind) = small(layout);
            let x = Tensor::random(&mut rng, xv, bind.clone(), -2.0, 2.0);
            let y = x.with_values(vec![0.0; x.values.len()]);
            let dy = Tensor::random(&mut rng, x.view.clone(), bind, -1.0, 1.0);
            let ys = y.with_values(cpu_forward::<f64>(softmax, &x, &y));
            let got = cpu_backward::<f64>(softmax, &ys, &dy, &x);
            // d/dx of L(x) = Σ dy ⊙ softmax(x).
            let want = finite_differences(&x.values, h, |v| {
                let out = cpu_forward::<f64>(softmax, &x.with_values(v.to_vec()), &y);
                out.iter().zip(&dy.values).map(|(a, b)| a * b).sum()
            });
            assert_close(&format!("d{softmax:?} {layout:?}"), &got, &want, 1e-8);
        }
    }
}

/// Runs forward and backward on `gpu` and compares both with the CPU twin in the storage type.
fn check_gpu(gpu: &Gpu, what: &str, softmax: Softmax, x: &Tensor, y: &Tensor, rng: &mut Rng) {
    let elem = x.elem();
    let dy = Tensor::random(rng, y.view.clone(), y.bind.clone(), -1.0, 1.0);
    let op = SoftmaxOp::new(gpu, &x.view, &y.view, softmax).unwrap();
    let (xb, yb, dyb, dxb) = (
        x.upload(gpu),
        y.poisoned(gpu),
        dy.upload(gpu),
        x.poisoned(gpu),
    );
    let mut batch = gpu.batch();
    op.forward(&mut batch, &x.gpu_arg(&xb), &y.gpu_arg(&yb))
        .unwrap();
    batch.submit().unwrap();
    let got_y = y.download(&yb);
    // The backward reads the GPU's y, so both backends differentiate the same probabilities.
    let y_gpu = y.with_values(got_y.clone());
    let y_gpu_b = y_gpu.upload(gpu);
    let mut batch = gpu.batch();
    op.backward(
        &mut batch,
        &y_gpu.gpu_arg(&y_gpu_b),
        &dy.gpu_arg(&dyb),
        &x.gpu_arg(&dxb),
    )
    .unwrap();
    batch.submit().unwrap();
    let (want_y, want_dx) = match elem {
        ElemType::F16 => (
            cpu_forward::<half::f16>(softmax, x, y),
            cpu_backward::<half::f16>(softmax, &y_gpu, &dy, x),
        ),
        _ => (
            cpu_forward::<f32>(softmax, x, y),
            cpu_backward::<f32>(softmax, &y_gpu, &dy, x),
        ),
    };
    // Probabilities are about 1/n: compared at that scale, the tolerance is relative.
    let n = *x.dims().last().unwrap();
    let scaled = |v: Vec<f64>| -> Vec<f64> { v.iter().map(|a| a * n as f64).collect() };
    let tol = tolerance(elem, n);
    let (got_dx, got_y) = (x.download(&dxb), got_y);
    assert_close(&format!("{what}: y"), &scaled(got_y), &scaled(want_y), tol);
    assert_close(
        &format!("{what}: dx"),
        &scaled(got_dx),
        &scaled(want_dx),
        tol,
    );
}

#[test]
fn gpu_matches_cpu_under_every_layout_element_type_and_reduction_path() {
    let mut rng = Rng::new(3);
    for (path, gpu) in gpus() {
        for elem in gpu_elems() {
            for softmax in CASES {
                for (xl, yl) in layout_pairs() {
                    let (x, y) = tensors_2d(&mut rng, xl, yl, elem);
                    let what = format!("{path} {elem} {softmax:?} {xl:?} → {yl:?}");
                    check_gpu(gpu, &what, softmax, &x, &y, &mut rng);
                }
            }
        }
    }
}

#[test]
fn attention_scores_of_rank_4_under_every_view() {
    let mut rng = Rng::new(4);
    for (path, gpu) in gpus() {
        for elem in gpu_elems() {
            for softmax in CASES {
                let pairs = Layout4::ALL
                    .into_iter()
                    .zip(Layout4::ALL.into_iter().rev())
                    .chain([(Layout4::RTile(8), Layout4::RTile(8))]);
                for (xl, yl) in pairs {
                    let (x, y) = tensors_4d(&mut rng, xl, yl, elem);
                    let what = format!("{path} {elem} {softmax:?} {xl:?} → {yl:?}");
                    check_gpu(gpu, &what, softmax, &x, &y, &mut rng);
                }
            }
        }
    }
}

/// A `[rows, cols]` view with both extents given at run time.
fn dynamic_view(name: &str, rtile: bool) -> View {
    let spec = if rtile {
        LayoutSpec::new(name)
            .dyn_axis("rows")
            .tile(4, true)
            .dyn_axis("cols")
            .tile(4, true)
            .rtile()
            .reduce_forward(["cols"])
            .reduce_backward(["rows"])
    } else {
        LayoutSpec::new(name).dyn_axis("rows").dyn_axis("cols")
    };
    spec.build().unwrap().view()
}

#[test]
fn short_long_and_run_time_row_lengths_take_every_walk() {
    let mut rng = Rng::new(5);
    let softmax = Softmax::new(0.5, Mask::Causal { offset: 2000 });
    for (path, gpu) in gpus() {
        // Static lengths: one chunk per invocation (37), several held in registers (3001),
        // and a row too long for registers, read twice (9002).
        for (cols, layout) in [
            (37, Layout2::RowMajor),
            (3001, Layout2::RTile(4)),
            (9002, Layout2::RowMajor),
            (9002, Layout2::RTile(8)),
            (3001, Layout2::ColMajor),
        ] {
            let (xv, bind) = view_2d("x", layout, 3, cols, ElemType::F32);
            let x = Tensor::random(&mut rng, xv, bind.clone(), -4.0, 4.0);
            let (yv, _) = view_2d("y", layout, 3, cols, ElemType::F32);
            let y = Tensor::new(yv, bind, vec![0.0; x.values.len()]);
            check_gpu(
                gpu,
                &format!("{path} {cols} {layout:?}"),
                softmax,
                &x,
                &y,
                &mut rng,
            );
        }
        // One kernel per row-length class of a run-time length, built when first recorded.
        for rtile in [false, true] {
            let (xv, yv) = (dynamic_view("x", rtile), dynamic_view("y", rtile));
            for cols in [5, 130, 2500, 8193] {
                let bind = vec![("rows".to_owned(), 3), ("cols".to_owned(), cols)];
                let x = Tensor::random(&mut rng, xv.clone(), bind.clone(), -4.0, 4.0);
                let y = Tensor::new(yv.clone(), bind, vec![0.0; x.values.len()]);
                let what = format!("{path} run-time {cols} rtile {rtile}");
                check_gpu(gpu, &what, softmax, &x, &y, &mut rng);
            }
        }
    }
}

#[test]
fn a_run_time_row_length_builds_one_kernel_per_length_class() {
    let gpu = gpu();
    let mut rng = Rng::new(6);
    let (xv, yv) = (dynamic_view("x", false), dynamic_view("y", false));
    let op = SoftmaxOp::new(gpu, &xv, &yv, Softmax::default()).unwrap();
    let built = op.modules().len();
    for cols in [100, 101, 100, 4000] {
        let bind = vec![("rows".to_owned(), 2), ("cols".to_owned(), cols)];
        let x = Tensor::random(&mut rng, xv.clone(), bind.clone(), -1.0, 1.0);
        let y = Tensor::new(yv.clone(), bind, vec![0.0; x.values.len()]);
        let (xb, yb) = (x.upload(gpu), y.poisoned(gpu));
        let mut batch = gpu.batch();
        op.forward(&mut batch, &x.gpu_arg(&xb), &y.gpu_arg(&yb))
            .unwrap();
        batch.submit().unwrap();
    }
    // 100 and 101 share a class (32 invocations, one chunk each); 4000 is another.
    assert_eq!(op.modules().len(), built + 2);
}

#[test]
fn contiguous_rows_move_four_elements_per_access() {
    let gpu = gpu();
    let v = |l| view_2d("x", l, ROWS, COLS, ElemType::F32).0;
    let wide = |a, b| {
        SoftmaxOp::new(gpu, &v(a), &v(b), Softmax::default())
            .unwrap()
            .is_vectorized()
    };
    assert!(wide(Layout2::RowMajor, Layout2::RowMajor));
    assert!(wide(Layout2::RTile(4), Layout2::RTile(8)));
    assert!(!wide(Layout2::ColMajor, Layout2::RowMajor));
    assert!(!wide(Layout2::RowMajor, Layout2::RTileT(4)));
}

#[test]
fn bad_shapes_views_and_element_types_are_typed_errors() {
    let gpu = gpu();
    let mut rng = Rng::new(8);
    let (x, y) = tensors_2d(
        &mut rng,
        Layout2::RowMajor,
        Layout2::RowMajor,
        ElemType::F32,
    );
    let s = Softmax::default();
    // Rank 1: no rows.
    let vector = support::view_1d("v", "cols", COLS, ElemType::F32);
    let err = SoftmaxOp::new(gpu, &vector, &vector, s).unwrap_err();
    assert!(matches!(err, OpError::Shape { .. }), "{err}");
    // Other extents along a static axis.
    let (wide, wide_bind) = view_2d("w", Layout2::RowMajor, ROWS, COLS + 4, ElemType::F32);
    let err = SoftmaxOp::new(gpu, &x.view, &wide, s).unwrap_err();
    assert!(matches!(err, OpError::Shape { .. }), "{err}");
    // Integers.
    let (ints, _) = view_2d("i", Layout2::RowMajor, ROWS, COLS, ElemType::U32);
    let err = SoftmaxOp::new(gpu, &ints, &y.view, s).unwrap_err();
    assert!(
        matches!(err, OpError::Unsupported { role: "x", .. }),
        "{err}"
    );

    let op = SoftmaxOp::new(gpu, &x.view, &y.view, s).unwrap();
    let mut batch = gpu.batch();
    // Other run-time extents: 14 rows against 13.
    let taller = Tensor::random(
        &mut rng,
        y.view.clone(),
        vec![("rows".into(), ROWS + 1)],
        -1.0,
        1.0,
    );
    let (xb, tb) = (x.upload(gpu), taller.upload(gpu));
    let err = op
        .forward(&mut batch, &x.gpu_arg(&xb), &taller.gpu_arg(&tb))
        .unwrap_err();
    assert!(matches!(err, OpError::Shape { .. }), "{err}");
    // Another view than the kernel was built for.
    let w = Tensor::random(&mut rng, wide, wide_bind, -1.0, 1.0);
    let wb = w.upload(gpu);
    let err = op
        .backward(
            &mut batch,
            &x.gpu_arg(&xb),
            &x.gpu_arg(&xb),
            &w.gpu_arg(&wb),
        )
        .unwrap_err();
    assert!(
        matches!(err, OpError::Shape { .. } | OpError::WrongView { .. }),
        "{err}"
    );
    let (cm, _) = view_2d("y", Layout2::ColMajor, ROWS, COLS, ElemType::F32);
    let cm = Tensor::random(&mut rng, cm, x.bind.clone(), -1.0, 1.0);
    let cmb = cm.upload(gpu);
    let err = op
        .forward(&mut batch, &x.gpu_arg(&xb), &cm.gpu_arg(&cmb))
        .unwrap_err();
    assert!(matches!(err, OpError::WrongView { role: "y", .. }), "{err}");
    // A buffer shorter than the layout needs.
    let short = fblayout_kernels::GpuBuffer::from_slice(gpu, &[0f32; 8]).unwrap();
    let err =
        fblayout_kernels::tensor::GpuArg::new(&short, &x.view, &[("rows", ROWS)]).unwrap_err();
    assert!(err.to_string().contains("bytes"), "{err}");
    // The CPU twin refuses mismatched shapes too.
    let xs = x.host::<f64>();
    let mut ts = taller.host::<f64>();
    let err = softmax_forward_cpu(s, &x.arg(&xs), &mut taller.arg_mut(&mut ts)).unwrap_err();
    assert!(matches!(err, OpError::Shape { .. }), "{err}");
    assert!(batch.is_empty(), "nothing was recorded for refused calls");
}
