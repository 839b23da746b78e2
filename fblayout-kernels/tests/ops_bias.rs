//! Bias add and its gradient: the forward against its definition, the backward against finite
//! differences, and the GPU against the CPU under every 2-D layout and element type, taking no
//! more scratch than the op reports.

mod support;

use fblayout_core::layout::ElemType;
use fblayout_kernels::cpu::Real;
use fblayout_kernels::ops::bias::{bias_backward_cpu, bias_forward_cpu};
use fblayout_kernels::ops::{BiasLaunch, BiasOp, OpError};
use support::{
    Layout2, Rng, Tensor, assert_close, finite_differences, gpu, gpu_elems, tolerance, view_1d,
    view_2d,
};

fn tensors(
    rng: &mut Rng,
    xl: Layout2,
    yl: Layout2,
    rows: u32,
    cols: u32,
    elem: ElemType,
) -> (Tensor, Tensor, Tensor, Tensor) {
    let (xv, bind) = view_2d("x", xl, rows, cols, elem);
    let x = Tensor::random(rng, xv, bind.clone(), -2.0, 2.0);
    let (yv, _) = view_2d("y", yl, rows, cols, elem);
    let y = Tensor::new(yv, bind.clone(), vec![0.0; x.values.len()]);
    let dy = Tensor::random(rng, y.view.clone(), bind, -1.0, 1.0);
    let b = Tensor::random(rng, view_1d("b", "cols", cols, elem), vec![], -1.0, 1.0);
    (x, b, y, dy)
}

fn cpu_forward<T: Real>(x: &Tensor, b: &Tensor, y: &Tensor) -> Vec<f64> {
    let (xs, bs) = (x.host::<T>(), b.host::<T>());
    let mut ys = y.host::<T>();
    bias_forward_cpu(&x.arg(&xs), &b.arg(&bs), &mut y.arg_mut(&mut ys)).unwrap();
    y.read_host(&ys)
}

/// `db` from `dy`, starting from `start` and added to when `accumulate`.
fn cpu_backward<T: Real>(dy: &Tensor, b: &Tensor, start: &[f64], accumulate: bool) -> Vec<f64> {
    let dys = dy.host::<T>();
    let db = b.with_values(start.to_vec());
    let mut dbs = db.host::<T>();
    bias_backward_cpu(&dy.arg(&dys), &mut db.arg_mut(&mut dbs), accumulate).unwrap();
    db.read_host(&dbs)
}

fn layout_pairs() -> impl Iterator<Item = (Layout2, Layout2)> {
    Layout2::ALL
        .into_iter()
        .zip(Layout2::ALL.into_iter().rev())
        .chain(Layout2::ALL.into_iter().map(|l| (l, l)))
}

#[test]
fn forward_matches_the_definition_and_backward_finite_differences() {
    let mut rng = Rng::new(1);
    for (xl, yl) in layout_pairs() {
        let (x, b, y, dy) = tensors(&mut rng, xl, yl, 13, 36, ElemType::F32);
        let got = cpu_forward::<f64>(&x, &b, &y);
        let want: Vec<f64> = (0..got.len())
            .map(|i| x.values[i] + b.values[i % 36])
            .collect();
        assert_close(&format!("{xl:?} → {yl:?}: y"), &got, &want, 1e-15);
        // d/db of Σ dy · y.
        let loss = |bv: &[f64]| -> f64 {
            let y = cpu_forward::<f64>(&x, &b.with_values(bv.to_vec()), &y);
            y.iter().zip(&dy.values).map(|(a, d)| a * d).sum()
        };
        let want_db = finite_differences(&b.values, 1e-5, loss);
        let db = cpu_backward::<f64>(&dy, &b, &vec![0.0; 36], false);
        assert_close(&format!("{xl:?} → {yl:?}: db"), &db, &want_db, 1e-8);
        let start: Vec<f64> = (0..36).map(|c| f64::from(c) / 7.0).collect();
        let twice = cpu_backward::<f64>(&dy, &b, &start, true);
        let want: Vec<f64> = db.iter().zip(&start).map(|(a, s)| a + s).collect();
        assert_close("db accumulated", &twice, &want, 1e-14);
    }
}

#[test]
fn gpu_matches_cpu_under_every_layout_element_type_and_chunking() {
    let gpu = gpu();
    let mut rng = Rng::new(2);
    for elem in gpu_elems() {
        for (xl, yl) in layout_pairs() {
            // Rows no tile divides; 38 columns end in a half-outside four-wide run (R-Tile
            // padding); small chunks make many partial rows.
            let shapes = [
                (13, 36, None),
                (203, 300, None),
                (203, 300, Some(4)),
                (611, 38, Some(64)),
            ];
            for (rows, cols, chunk) in shapes {
                {
                    let what = format!("{elem} {rows}×{cols} {xl:?} → {yl:?}, chunk {chunk:?}");
                    let (x, b, y, dy) = tensors(&mut rng, xl, yl, rows, cols, elem);
                    let mut op = BiasOp::new(gpu, &x.view, &b.view, &y.view).unwrap();
                    if let Some(rows) = chunk {
                        op = op.with_chunk_rows(rows);
                    }
                    let (xb, bb, yb, dyb, dbb) = (
                        x.upload(gpu),
                        b.upload(gpu),
                        y.poisoned(gpu),
                        dy.upload(gpu),
                        b.poisoned(gpu),
                    );
                    let launch = BiasLaunch {
                        chunk_rows: chunk,
                        ..BiasLaunch::default()
                    };
                    let most = BiasOp::backward_scratch(&launch, rows, cols).unwrap();
                    let mut batch = gpu.batch();
                    op.forward(
                        &mut batch,
                        &x.gpu_arg(&xb),
                        &b.gpu_arg(&bb),
                        &y.gpu_arg(&yb),
                    )
                    .unwrap();
                    assert!(batch.release_scratch().is_empty(), "{what}");
                    for accumulate in [false, true] {
                        op.backward(&mut batch, &dy.gpu_arg(&dyb), &b.gpu_arg(&dbb), accumulate)
                            .unwrap();
                        let taken = batch.release_scratch();
                        assert!(most.covers(&taken), "{what}: took {taken}, reported {most}");
                    }
                    batch.submit().unwrap();
                    let zeros = vec![0.0; cols as usize];
                    let (want_y, want_db) = match elem {
                        ElemType::F16 => {
                            let once = cpu_backward::<half::f16>(&dy, &b, &zeros, false);
                            (
                                cpu_forward::<half::f16>(&x, &b, &y),
                                cpu_backward::<half::f16>(&dy, &b, &once, true),
                            )
                        }
                        _ => {
                            let once = cpu_backward::<f32>(&dy, &b, &zeros, false);
                            (
                                cpu_forward::<f32>(&x, &b, &y),
                                cpu_backward::<f32>(&dy, &b, &once, true),
                            )
                        }
                    };
                    assert_close(
                        &format!("{what}: y"),
                        &y.download(&yb),
                        &want_y,
                        tolerance(elem, 1),
                    );
                    assert_close(
                        &format!("{what}: db"),
                        &b.download(&dbb),
                        &want_db,
                        tolerance(elem, 2 * rows as usize),
                    );
                }
            }
        }
    }
}

#[test]
fn one_dispatch_where_one_chunk_holds_every_row_and_two_otherwise() {
    let mut rng = Rng::new(5);
    for (name, gpu) in support::gpus() {
        for layout in [Layout2::RowMajor, Layout2::RTile(4), Layout2::ColMajor] {
            // Odd columns, and rows that divide no chunk.
            for (rows, cols) in [(13, 37), (37, 384), (101, 770)] {
                let launches = [
                    // The default chunk has at least 32 rows (more for some walks).
                    (BiasLaunch::default(), (rows == 13).then_some(true)),
                    (BiasLaunch::BASELINE, Some(false)),
                    (
                        BiasLaunch {
                            chunk_rows: Some(5),
                            single_pass: true,
                        },
                        // Rounded up to whole sweeps: 16 rows at most where lanes walk the
                        // columns.
                        (rows > 16 && layout != Layout2::ColMajor).then_some(false),
                    ),
                    (
                        BiasLaunch {
                            chunk_rows: Some(128),
                            single_pass: true,
                        },
                        Some(rows <= 128),
                    ),
                ];
                for (launch, single) in launches {
                    let what = format!("{name}: {rows}×{cols} {layout:?} {launch:?}");
                    let (_, b, _, dy) =
                        tensors(&mut rng, layout, layout, rows, cols, ElemType::F32);
                    let op = BiasOp::new(gpu, &dy.view, &b.view, &dy.view)
                        .unwrap()
                        .with_launch(launch);
                    if let Some(single) = single {
                        let want = if single { 1 } else { 2 };
                        assert_eq!(op.backward_dispatches(rows), want, "{what}");
                    }
                    let (dyb, dbb) = (dy.upload(gpu), b.poisoned(gpu));
                    let most = BiasOp::backward_scratch(&launch, rows, cols).unwrap();
                    let mut batch = gpu.batch();
                    for accumulate in [false, true] {
                        op.backward(&mut batch, &dy.gpu_arg(&dyb), &b.gpu_arg(&dbb), accumulate)
                            .unwrap();
                        let taken = batch.release_scratch();
                        assert!(most.covers(&taken), "{what}: took {taken}, reported {most}");
                    }
                    batch.submit().unwrap();
                    let zeros = vec![0.0; cols as usize];
                    let once = cpu_backward::<f32>(&dy, &b, &zeros, false);
                    let want = cpu_backward::<f32>(&dy, &b, &once, true);
                    let tol = tolerance(ElemType::F32, 2 * rows as usize);
                    assert_close(&what, &b.download(&dbb), &want, tol);
                }
            }
        }
    }
}

#[test]
fn zero_rows_per_chunk_is_a_typed_error() {
    let gpu = gpu();
    let mut rng = Rng::new(6);
    let (_, b, _, dy) = tensors(
        &mut rng,
        Layout2::RowMajor,
        Layout2::RowMajor,
        13,
        36,
        ElemType::F32,
    );
    let op = BiasOp::new(gpu, &dy.view, &b.view, &dy.view)
        .unwrap()
        .with_chunk_rows(0);
    let (dyb, dbb) = (dy.upload(gpu), b.poisoned(gpu));
    let mut batch = gpu.batch();
    let err = op
        .backward(&mut batch, &dy.gpu_arg(&dyb), &b.gpu_arg(&dbb), false)
        .unwrap_err();
    assert!(matches!(err, OpError::Shape { .. }), "{err}");
    assert!(batch.is_empty(), "nothing was recorded for a refused call");
}

#[test]
fn the_forward_is_built_once_per_row_count() {
    let gpu = gpu();
    let mut rng = Rng::new(3);
    let (x, b, y, _) = tensors(
        &mut rng,
        Layout2::RTile(4),
        Layout2::RowMajor,
        13,
        36,
        ElemType::F32,
    );
    let op = BiasOp::new(gpu, &x.view, &b.view, &y.view).unwrap();
    let first = op.shaders(gpu, 13).unwrap();
    assert_eq!(first, op.shaders(gpu, 13).unwrap());
    assert_ne!(first[0], op.shaders(gpu, 14).unwrap()[0]);
    assert_eq!(
        first[1..],
        op.shaders(gpu, 14).unwrap()[1..],
        "one backward for every row count"
    );
}

#[test]
fn bad_shapes_and_views_are_typed_errors() {
    let gpu = gpu();
    let mut rng = Rng::new(4);
    let (x, b, y, dy) = tensors(
        &mut rng,
        Layout2::RowMajor,
        Layout2::RTile(8),
        13,
        36,
        ElemType::F32,
    );
    let long = view_1d("b", "cols", 40, ElemType::F32);
    let err = BiasOp::new(gpu, &x.view, &long, &y.view).unwrap_err();
    assert!(matches!(err, OpError::Shape { .. }), "{err}");
    let err = BiasOp::new(gpu, &b.view, &b.view, &y.view).unwrap_err();
    assert!(matches!(err, OpError::Unsupported { .. }), "{err}");

    let op = BiasOp::new(gpu, &x.view, &b.view, &y.view).unwrap();
    let (xb, bb, yb, dyb) = (
        x.upload(gpu),
        b.upload(gpu),
        y.poisoned(gpu),
        dy.upload(gpu),
    );
    let mut batch = gpu.batch();
    // b through another view (x's), y through x's view, db through dy's.
    let err = op
        .forward(
            &mut batch,
            &x.gpu_arg(&xb),
            &x.gpu_arg(&xb),
            &y.gpu_arg(&yb),
        )
        .unwrap_err();
    assert!(
        matches!(err, OpError::WrongView { .. } | OpError::Shape { .. }),
        "{err}"
    );
    let err = op
        .forward(
            &mut batch,
            &x.gpu_arg(&xb),
            &b.gpu_arg(&bb),
            &x.gpu_arg(&yb),
        )
        .unwrap_err();
    assert!(matches!(err, OpError::WrongView { .. }), "{err}");
    let err = op
        .backward(&mut batch, &dy.gpu_arg(&dyb), &dy.gpu_arg(&dyb), false)
        .unwrap_err();
    assert!(matches!(err, OpError::Shape { .. }), "{err}");
    // 14 rows of x against 13 of y.
    let taller = Tensor::random(
        &mut rng,
        x.view.clone(),
        vec![("rows".into(), 14)],
        -1.0,
        1.0,
    );
    let tb = taller.upload(gpu);
    let err = op
        .forward(
            &mut batch,
            &taller.gpu_arg(&tb),
            &b.gpu_arg(&bb),
            &y.gpu_arg(&yb),
        )
        .unwrap_err();
    assert!(matches!(err, OpError::Shape { .. }), "{err}");
    assert!(batch.is_empty(), "nothing was recorded for refused calls");
    // The CPU twins too.
    let dys = dy.host::<f32>();
    let mut xs = x.host::<f32>();
    let err = bias_backward_cpu(&dy.arg(&dys), &mut x.arg_mut(&mut xs), false).unwrap_err();
    assert!(matches!(err, OpError::Shape { .. }), "{err}");
}
