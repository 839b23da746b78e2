//! LayerNorm and RMSNorm: forward against their definitions, backward against finite
//! differences, and the GPU against the CPU under every 2-D layout and element type, with the
//! subgroup reductions and their workgroup-memory fallback, taking no more scratch than the ops
//! report.

mod support;

use fblayout_core::layout::{ElemType, LayoutSpec};
use fblayout_kernels::cpu::Real;
use fblayout_kernels::ops::norm::{
    LaunchShape, SumForm, layer_norm_backward_cpu, layer_norm_forward_cpu, rms_norm_backward_cpu,
    rms_norm_forward_cpu,
};
use fblayout_kernels::ops::{
    LayerNormGrads, LayerNormOp, LayerNormTensors, NormLaunch, OpError, RmsNormGrads, RmsNormOp,
    RmsNormTensors, RowLaunch, RowSum,
};
use fblayout_kernels::runtime::{Batch, Gpu, Scratch};
use support::{
    Layout2, Rng, Tensor, assert_close, finite_differences, gpu, gpu_elems, gpu_without_subgroups,
    tolerance, view_1d, view_1d_dyn, view_2d,
};

const EPS: f64 = 1e-5;

/// The tensors of one norm case (`beta` and `mean` unused by RMSNorm).
#[derive(Debug, Clone)]
struct Case {
    x: Tensor,
    gamma: Tensor,
    beta: Tensor,
    y: Tensor,
    mean: Tensor,
    rstd: Tensor,
    dy: Tensor,
}

fn case(rng: &mut Rng, xl: Layout2, yl: Layout2, rows: u32, cols: u32, elem: ElemType) -> Case {
    let (xv, bind) = view_2d("x", xl, rows, cols, elem);
    let x = Tensor::random(rng, xv, bind.clone(), -2.0, 2.0);
    let (yv, _) = view_2d("y", yl, rows, cols, elem);
    let y = Tensor::new(yv, bind.clone(), vec![0.0; x.values.len()]);
    let dy = Tensor::random(rng, y.view.clone(), bind, -1.0, 1.0);
    let vector = |rng: &mut Rng, name, lo, hi| {
        Tensor::random(rng, view_1d(name, "cols", cols, elem), vec![], lo, hi)
    };
    let gamma = vector(rng, "gamma", 0.5, 1.5);
    let beta = vector(rng, "beta", -0.5, 0.5);
    let stat = |name| {
        let (v, b) = view_1d_dyn(name, "rows", rows, elem);
        Tensor::new(v, b, vec![0.0; rows as usize])
    };
    Case {
        x,
        gamma,
        beta,
        y,
        mean: stat("mean"),
        rstd: stat("rstd"),
        dy,
    }
}

/// Reference LayerNorm on dense row-major values: `(y, mean, rstd)`.
fn layer_norm_reference(
    x: &[f64],
    gamma: &[f64],
    beta: &[f64],
    cols: usize,
) -> (Vec<f64>, Vec<f64>, Vec<f64>) {
    let (mut y, mut mean, mut rstd) = (Vec::new(), Vec::new(), Vec::new());
    for row in x.chunks(cols) {
        let mu = row.iter().sum::<f64>() / cols as f64;
        let var = row.iter().map(|v| (v - mu).powi(2)).sum::<f64>() / cols as f64;
        let s = 1.0 / (var + EPS).sqrt();
        y.extend((0..cols).map(|c| (row[c] - mu) * s * gamma[c] + beta[c]));
        mean.push(mu);
        rstd.push(s);
    }
    (y, mean, rstd)
}

/// Reference RMSNorm on dense row-major values: `(y, rstd)`.
fn rms_norm_reference(x: &[f64], gamma: &[f64], cols: usize) -> (Vec<f64>, Vec<f64>) {
    let (mut y, mut rstd) = (Vec::new(), Vec::new());
    for row in x.chunks(cols) {
        let s = 1.0 / (row.iter().map(|v| v * v).sum::<f64>() / cols as f64 + EPS).sqrt();
        y.extend((0..cols).map(|c| row[c] * s * gamma[c]));
        rstd.push(s);
    }
    (y, rstd)
}

/// The CPU forward of `rms` (or LayerNorm) on `c` in `T`: `(y, mean, rstd)`, logical values.
fn cpu_forward<T: Real>(rms: bool, c: &Case) -> (Vec<f64>, Vec<f64>, Vec<f64>) {
    let (xs, gs, bs) = (c.x.host::<T>(), c.gamma.host::<T>(), c.beta.host::<T>());
    let (mut ys, mut ms, mut rs) = (c.y.host::<T>(), c.mean.host::<T>(), c.rstd.host::<T>());
    if rms {
        rms_norm_forward_cpu(
            &c.x.arg(&xs),
            &c.gamma.arg(&gs),
            EPS,
            &mut c.y.arg_mut(&mut ys),
            &mut c.rstd.arg_mut(&mut rs),
        )
        .unwrap();
    } else {
        layer_norm_forward_cpu(
            &c.x.arg(&xs),
            &c.gamma.arg(&gs),
            &c.beta.arg(&bs),
            EPS,
            &mut c.y.arg_mut(&mut ys),
            &mut c.mean.arg_mut(&mut ms),
            &mut c.rstd.arg_mut(&mut rs),
        )
        .unwrap();
    }
    (
        c.y.read_host(&ys),
        c.mean.read_host(&ms),
        c.rstd.read_host(&rs),
    )
}

/// The CPU backward on `c` in `T`, from the statistics `mean` and `rstd` (logical values),
/// with `dγ`, `dβ` starting at `start` and accumulated onto when `accumulate`: `(dx, dγ, dβ)`.
fn cpu_backward<T: Real>(
    rms: bool,
    c: &Case,
    stats: (&[f64], &[f64]),
    start: (&[f64], &[f64]),
    accumulate: bool,
) -> (Vec<f64>, Vec<f64>, Vec<f64>) {
    let mean = c.mean.with_values(stats.0.to_vec());
    let rstd = c.rstd.with_values(stats.1.to_vec());
    let (xs, gs, dys) = (c.x.host::<T>(), c.gamma.host::<T>(), c.dy.host::<T>());
    let (ms, rs) = (mean.host::<T>(), rstd.host::<T>());
    let dgamma = c.gamma.with_values(start.0.to_vec());
    let dbeta = c.beta.with_values(start.1.to_vec());
    let (mut dxs, mut dgs, mut dbs) = (c.x.host::<T>(), dgamma.host::<T>(), dbeta.host::<T>());
    if rms {
        rms_norm_backward_cpu(
            &c.x.arg(&xs),
            &c.gamma.arg(&gs),
            &rstd.arg(&rs),
            &c.dy.arg(&dys),
            &mut c.x.arg_mut(&mut dxs),
            &mut dgamma.arg_mut(&mut dgs),
            accumulate,
        )
        .unwrap();
    } else {
        layer_norm_backward_cpu(
            &c.x.arg(&xs),
            &c.gamma.arg(&gs),
            &mean.arg(&ms),
            &rstd.arg(&rs),
            &c.dy.arg(&dys),
            &mut c.x.arg_mut(&mut dxs),
            &mut dgamma.arg_mut(&mut dgs),
            &mut dbeta.arg_mut(&mut dbs),
            accumulate,
        )
        .unwrap();
    }
    (
        c.x.read_host(&dxs),
        dgamma.read_host(&dgs),
        dbeta.read_host(&dbs),
    )
}

/// Layout pairs (x, y): each layout once as input and once as output, and a few equal pairs.
fn layout_pairs() -> impl Iterator<Item = (Layout2, Layout2)> {
    Layout2::ALL
        .into_iter()
        .zip(Layout2::ALL.into_iter().rev())
        .chain([
            (Layout2::RowMajor, Layout2::RowMajor),
            (Layout2::RTile(4), Layout2::RTile(4)),
            (Layout2::RTile(8), Layout2::RTile(8)),
            (Layout2::ColMajor, Layout2::ColMajor),
        ])
}

#[test]
fn forward_matches_the_definition_on_the_cpu_under_every_layout() {
    let mut rng = Rng::new(1);
    for (xl, yl) in layout_pairs() {
        let c = case(&mut rng, xl, yl, 13, 36, ElemType::F32);
        let (y, mean, rstd) = cpu_forward::<f64>(false, &c);
        let (want_y, want_mean, want_rstd) =
            layer_norm_reference(&c.x.values, &c.gamma.values, &c.beta.values, 36);
        let what = format!("layer norm {xl:?} → {yl:?}");
        assert_close(&format!("{what}: y"), &y, &want_y, 1e-12);
        assert_close(&format!("{what}: mean"), &mean, &want_mean, 1e-12);
        assert_close(&format!("{what}: rstd"), &rstd, &want_rstd, 1e-12);

        let (y, _, rstd) = cpu_forward::<f64>(true, &c);
        let (want_y, want_rstd) = rms_norm_reference(&c.x.values, &c.gamma.values, 36);
        assert_close(&format!("rms {xl:?} → {yl:?}: y"), &y, &want_y, 1e-12);
        assert_close(
            &format!("rms {xl:?} → {yl:?}: rstd"),
            &rstd,
            &want_rstd,
            1e-12,
        );
    }
}

#[test]
fn backward_matches_finite_differences_in_f64() {
    let mut rng = Rng::new(2);
    let h = 1e-5;
    let (rows, cols) = (5, 12);
    for (xl, yl) in [
        (Layout2::RowMajor, Layout2::RTile(4)),
        (Layout2::RTile(8), Layout2::ColMajor),
        (Layout2::RTileT(4), Layout2::RowMajorT),
    ] {
        for rms in [false, true] {
            let what = format!("{} {xl:?} → {yl:?}", if rms { "rms" } else { "layer" });
            let c = case(&mut rng, xl, yl, rows, cols, ElemType::F32);
            // The loss Σ dy · y, as a function of x, γ and β.
            let loss = |x: &[f64], gamma: &[f64], beta: &[f64]| -> f64 {
                let c = Case {
                    x: c.x.with_values(x.to_vec()),
                    gamma: c.gamma.with_values(gamma.to_vec()),
                    beta: c.beta.with_values(beta.to_vec()),
                    ..c.clone()
                };
                let (y, _, _) = cpu_forward::<f64>(rms, &c);
                y.iter().zip(&c.dy.values).map(|(a, b)| a * b).sum()
            };
            let (x, g, b) = (&c.x.values, &c.gamma.values, &c.beta.values);
            let want_dx = finite_differences(x, h, |x| loss(x, g, b));
            let want_dg = finite_differences(g, h, |g| loss(x, g, b));
            let want_db = finite_differences(b, h, |b| loss(x, g, b));
            let (_, mean, rstd) = cpu_forward::<f64>(rms, &c);
            let zeros = vec![0.0; cols as usize];
            let (dx, dg, db) =
                cpu_backward::<f64>(rms, &c, (&mean, &rstd), (&zeros, &zeros), false);
            assert_close(&format!("{what}: dx"), &dx, &want_dx, 1e-7);
            assert_close(&format!("{what}: dγ"), &dg, &want_dg, 1e-7);
            if !rms {
                assert_close(&format!("{what}: dβ"), &db, &want_db, 1e-7);
            }
            // Accumulating adds onto what the gradients held.
            let start: Vec<f64> = (0..cols).map(|c| f64::from(c) - 3.5).collect();
            let (_, dg2, db2) =
                cpu_backward::<f64>(rms, &c, (&mean, &rstd), (&start, &start), true);
            let plus =
                |a: &[f64]| -> Vec<f64> { a.iter().zip(&start).map(|(a, s)| a + s).collect() };
            assert_close(&format!("{what}: dγ accumulated"), &dg2, &plus(&dg), 1e-12);
            if !rms {
                assert_close(&format!("{what}: dβ accumulated"), &db2, &plus(&db), 1e-12);
            }
        }
    }
}

/// What a GPU run of a case gave: the forward's outputs, the gradients after two backwards
/// (the second accumulating onto the first), and the shapes the kernels were built with.
struct GpuRun {
    y: Vec<f64>,
    mean: Vec<f64>,
    rstd: Vec<f64>,
    dx: Vec<f64>,
    dgamma: Vec<f64>,
    dbeta: Vec<f64>,
    shapes: [LaunchShape; 2],
}

/// The launch of the default shapes with `chunk` rows per chunk of the backward.
fn chunked(chunk: Option<u32>) -> NormLaunch {
    NormLaunch {
        chunk_rows: chunk,
        ..NormLaunch::default()
    }
}

/// Runs the GPU forward and two backwards (the second accumulating onto the first) of `c` on
/// `gpu` with the launch shapes `launch`.
fn run_gpu(gpu: &Gpu, rms: bool, c: &Case, launch: NormLaunch) -> GpuRun {
    let bufs = |t: &Tensor, poison: bool| {
        if poison {
            t.poisoned(gpu)
        } else {
            t.upload(gpu)
        }
    };
    let (xb, gb, bb, dyb) = (
        bufs(&c.x, false),
        bufs(&c.gamma, false),
        bufs(&c.beta, false),
        bufs(&c.dy, false),
    );
    let (yb, mb, rb, dxb, dgb, dbb) = (
        bufs(&c.y, true),
        bufs(&c.mean, true),
        bufs(&c.rstd, true),
        bufs(&c.x, true),
        bufs(&c.gamma, true),
        bufs(&c.beta, true),
    );
    let (x, gamma, beta, y, mean, rstd) = (
        c.x.gpu_arg(&xb),
        c.gamma.gpu_arg(&gb),
        c.beta.gpu_arg(&bb),
        c.y.gpu_arg(&yb),
        c.mean.gpu_arg(&mb),
        c.rstd.gpu_arg(&rb),
    );
    let (dy, dx, dgamma, dbeta) = (
        c.dy.gpu_arg(&dyb),
        c.x.gpu_arg(&dxb),
        c.gamma.gpu_arg(&dgb),
        c.beta.gpu_arg(&dbb),
    );
    let (rows, cols) = (c.x.dims()[0] as u32, c.x.dims()[1] as u32);
    let mut batch = gpu.batch();
    // Each backward takes no more scratch than the op reports.
    let check = |batch: &mut Batch<'_>, most: &Scratch| {
        let taken = batch.release_scratch();
        assert!(
            most.covers(&taken),
            "{rows}×{cols} {launch:?}: took {taken}, reported {most}"
        );
    };
    let shapes;
    if rms {
        let views = RmsNormTensors {
            x: &c.x.view,
            gamma: &c.gamma.view,
            y: &c.y.view,
            rstd: &c.rstd.view,
        };
        let op = RmsNormOp::with_launch(gpu, &views, EPS as f32, launch).unwrap();
        shapes = op.launch_shapes();
        let t = RmsNormTensors {
            x: &x,
            gamma: &gamma,
            y: &y,
            rstd: &rstd,
        };
        let g = RmsNormGrads {
            dy: &dy,
            dx: &dx,
            dgamma: &dgamma,
        };
        let most = RmsNormOp::backward_scratch(&launch, rows, cols).unwrap();
        op.forward(&mut batch, &t).unwrap();
        check(&mut batch, &Scratch::none());
        op.backward(&mut batch, &t, &g, false).unwrap();
        check(&mut batch, &most);
        op.backward(&mut batch, &t, &g, true).unwrap();
        check(&mut batch, &most);
    } else {
        let views = LayerNormTensors {
            x: &c.x.view,
            gamma: &c.gamma.view,
            beta: &c.beta.view,
            y: &c.y.view,
            mean: &c.mean.view,
            rstd: &c.rstd.view,
        };
        let op = LayerNormOp::with_launch(gpu, &views, EPS as f32, launch).unwrap();
        shapes = op.launch_shapes();
        let t = LayerNormTensors {
            x: &x,
            gamma: &gamma,
            beta: &beta,
            y: &y,
            mean: &mean,
            rstd: &rstd,
        };
        let g = LayerNormGrads {
            dy: &dy,
            dx: &dx,
            dgamma: &dgamma,
            dbeta: &dbeta,
        };
        let most = LayerNormOp::backward_scratch(&launch, rows, cols).unwrap();
        op.forward(&mut batch, &t).unwrap();
        check(&mut batch, &Scratch::none());
        op.backward(&mut batch, &t, &g, false).unwrap();
        check(&mut batch, &most);
        op.backward(&mut batch, &t, &g, true).unwrap();
        check(&mut batch, &most);
    }
    batch.submit().unwrap();
    GpuRun {
        y: c.y.download(&yb),
        mean: c.mean.download(&mb),
        rstd: c.rstd.download(&rb),
        dx: c.x.download(&dxb),
        dgamma: c.gamma.download(&dgb),
        dbeta: c.beta.download(&dbb),
        shapes,
    }
}

/// Runs `c` on `gpu` with the launch shapes `launch` ([`run_gpu`]) and compares the results
/// with the CPU in the case's element type; returns the shapes the kernels were built with.
fn check_gpu_against_cpu(
    gpu: &Gpu,
    rms: bool,
    c: &Case,
    launch: NormLaunch,
    what: &str,
) -> [LaunchShape; 2] {
    let elem = c.x.elem();
    let got = run_gpu(gpu, rms, c, launch);
    let (want_y, want_mean, want_rstd) = match elem {
        ElemType::F16 => cpu_forward::<half::f16>(rms, c),
        _ => cpu_forward::<f32>(rms, c),
    };
    let (rows, cols) = (c.mean.values.len(), c.gamma.values.len());
    let row_tol = tolerance(elem, cols);
    assert_close(&format!("{what}: y"), &got.y, &want_y, row_tol);
    let got_rstd = got.rstd;
    assert_close(&format!("{what}: rstd"), &got_rstd, &want_rstd, row_tol);
    let got_mean = if rms {
        want_mean.clone()
    } else {
        assert_close(&format!("{what}: mean"), &got.mean, &want_mean, row_tol);
        got.mean
    };
    // The backward from the statistics the GPU saved, twice: once, then accumulated.
    let zeros = vec![0.0; cols];
    let backward = |start: (&[f64], &[f64]), accumulate| match elem {
        ElemType::F16 => {
            cpu_backward::<half::f16>(rms, c, (&got_mean, &got_rstd), start, accumulate)
        }
        _ => cpu_backward::<f32>(rms, c, (&got_mean, &got_rstd), start, accumulate),
    };
    let (want_dx, once_dg, once_db) = backward((&zeros, &zeros), false);
    let (_, want_dg, want_db) = backward((&once_dg, &once_db), true);
    assert_close(&format!("{what}: dx"), &got.dx, &want_dx, row_tol);
    let col_tol = tolerance(elem, 2 * rows);
    assert_close(&format!("{what}: dγ"), &got.dgamma, &want_dg, col_tol);
    if !rms {
        assert_close(&format!("{what}: dβ"), &got.dbeta, &want_db, col_tol);
    }
    got.shapes
}

#[test]
fn gpu_matches_cpu_under_every_layout_and_element_type() {
    let gpu = gpu();
    let mut rng = Rng::new(3);
    for elem in gpu_elems() {
        for (xl, yl) in layout_pairs() {
            for rms in [false, true] {
                let what = format!(
                    "{} {elem} {xl:?} → {yl:?}",
                    if rms { "rms" } else { "layer" }
                );
                // 13 rows: no tile divides them; 36 columns: 4 divides them, 8 does not.
                let c = case(&mut rng, xl, yl, 13, 36, elem);
                check_gpu_against_cpu(gpu, rms, &c, chunked(None), &what);
            }
        }
    }
}

#[test]
fn gpu_matches_cpu_with_many_chunks_long_rows_and_partial_vectors() {
    let gpu = gpu();
    let mut rng = Rng::new(4);
    // 300 columns: several values per lane and lanes past the row's end; 38 columns: a last
    // four-wide run that is half outside the row (R-Tile padding).
    let shapes = [
        (45, 300, Layout2::RowMajor, Layout2::RowMajor),
        (45, 300, Layout2::RTile(8), Layout2::RTile(8)),
        (45, 300, Layout2::RTile(4), Layout2::RowMajor),
        (45, 300, Layout2::ColMajor, Layout2::RTileT(8)),
        (21, 38, Layout2::RTile(4), Layout2::RTile(4)),
        (21, 38, Layout2::RowMajor, Layout2::RTile(4)),
    ];
    for elem in gpu_elems() {
        for (rows, cols, xl, yl) in shapes {
            for chunk in [None, Some(1), Some(8)] {
                for rms in [false, true] {
                    let what = format!(
                        "{} {elem} {rows}×{cols} {xl:?} → {yl:?}, chunk {chunk:?}",
                        if rms { "rms" } else { "layer" }
                    );
                    let c = case(&mut rng, xl, yl, rows, cols, elem);
                    check_gpu_against_cpu(gpu, rms, &c, chunked(chunk), &what);
                }
            }
        }
    }
}

#[test]
fn the_workgroup_memory_fallback_matches_the_cpu() {
    let gpu = gpu_without_subgroups();
    let mut rng = Rng::new(5);
    for (xl, yl) in layout_pairs() {
        for rms in [false, true] {
            let what = format!(
                "no subgroups: {} {xl:?} → {yl:?}",
                if rms { "rms" } else { "layer" }
            );
            let c = case(&mut rng, xl, yl, 29, 300, ElemType::F32);
            check_gpu_against_cpu(gpu, rms, &c, chunked(Some(8)), &what);
        }
    }
}

#[test]
fn three_d_activations_go_through_a_merge_view() {
    let gpu = gpu();
    let mut rng = Rng::new(6);
    let (batch, seq, hidden) = (3, 5, 64);
    let act = LayoutSpec::new("act")
        .dyn_axis("batch")
        .axis("seq", seq)
        .axis("hidden", hidden)
        .build()
        .unwrap();
    let tokens = act.view().merge(&["batch", "seq"], "tokens").unwrap();
    let bind = vec![("batch".to_owned(), batch)];
    let rows = batch * seq;
    let x = Tensor::random(&mut rng, tokens.clone(), bind.clone(), -2.0, 2.0);
    let y = Tensor::new(tokens.clone(), bind.clone(), vec![0.0; x.values.len()]);
    let dy = Tensor::random(&mut rng, tokens, bind.clone(), -1.0, 1.0);
    let vector = |rng: &mut Rng, name, lo, hi| {
        Tensor::random(
            rng,
            view_1d(name, "hidden", hidden, ElemType::F32),
            vec![],
            lo,
            hi,
        )
    };
    let stats = LayoutSpec::new("stats")
        .dyn_axis("batch")
        .axis("seq", seq)
        .build()
        .unwrap()
        .view()
        .merge(&["batch", "seq"], "tokens")
        .unwrap();
    let stat = Tensor::new(stats, bind, vec![0.0; rows as usize]);
    let c = Case {
        x,
        gamma: vector(&mut rng, "gamma", 0.5, 1.5),
        beta: vector(&mut rng, "beta", -0.5, 0.5),
        y,
        mean: stat.clone(),
        rstd: stat,
        dy,
    };
    let (want_y, _, _) = layer_norm_reference(
        &c.x.values,
        &c.gamma.values,
        &c.beta.values,
        hidden as usize,
    );
    assert_close(
        "merged: cpu y",
        &cpu_forward::<f64>(false, &c).0,
        &want_y,
        1e-12,
    );
    check_gpu_against_cpu(gpu, false, &c, chunked(None), "merged layer norm");
    check_gpu_against_cpu(gpu, true, &c, chunked(None), "merged rms norm");
}

#[test]
fn contiguous_layouts_read_four_wide_and_r_tiles_take_a_tile_row_at_once() {
    let gpu = gpu();
    let mut rng = Rng::new(7);
    let mut op = |xl, yl| {
        let c = case(&mut rng, xl, yl, 13, 36, ElemType::F32);
        let views = RmsNormTensors {
            x: &c.x.view,
            gamma: &c.gamma.view,
            y: &c.y.view,
            rstd: &c.rstd.view,
        };
        RmsNormOp::new(gpu, &views, 1e-5).unwrap()
    };
    let rm = op(Layout2::RowMajor, Layout2::RowMajor);
    assert!(rm.is_vectorized());
    assert_eq!(rm.rows_per_block(), 1);
    let rt4 = op(Layout2::RTile(4), Layout2::RTile(4));
    assert!(rt4.is_vectorized());
    assert_eq!(rt4.rows_per_block(), 4);
    assert_eq!(op(Layout2::RTile(8), Layout2::RowMajor).rows_per_block(), 8);
    assert!(!op(Layout2::ColMajor, Layout2::RowMajor).is_vectorized());
}

/// Rows of `lanes` lanes and blocks of `rows` rows, summed over the row's lanes.
fn lanes_by_rows(lanes: u32, rows: u32, row_sum: RowSum, chunk: Option<u32>) -> NormLaunch {
    let row = RowLaunch {
        lanes_per_row: Some(lanes),
        rows_per_block: Some(rows),
        row_sum,
    };
    NormLaunch {
        forward: row,
        backward: row,
        chunk_rows: chunk,
    }
}

/// The launch shapes the kernels are tested under: the default, the baseline, one to 64 lanes
/// per row, one to 16 rows per block, chunks that no block count divides the rows into, and
/// whole-workgroup sums over stacked blocks.
fn launches() -> Vec<NormLaunch> {
    let mut all = vec![NormLaunch::default(), NormLaunch::BASELINE];
    for (lanes, rows) in [(1, 2), (2, 4), (4, 16), (8, 8), (16, 2), (32, 8), (64, 4)] {
        all.push(lanes_by_rows(lanes, rows, RowSum::Lanes, Some(3 * rows)));
    }
    all.push(lanes_by_rows(8, 16, RowSum::Workgroup, Some(20)));
    all
}

#[test]
fn every_launch_shape_matches_the_cpu_with_and_without_subgroups() {
    let mut rng = Rng::new(9);
    // Odd columns (37, 770), the training step's 384, rows that divide neither the blocks nor
    // the chunks, row-major and R-Tile layouts.
    let shapes = [
        (37, 37, Layout2::RowMajor, Layout2::RowMajor),
        (29, 384, Layout2::RTile(4), Layout2::RowMajor),
        (19, 770, Layout2::RowMajor, Layout2::RTile(8)),
        (23, 60, Layout2::RTile(8), Layout2::RTile(8)),
    ];
    for (name, gpu) in support::gpus() {
        let mut forms = Vec::new();
        for launch in launches() {
            for (i, (rows, cols, xl, yl)) in shapes.into_iter().enumerate() {
                // A lane holding a whole long row is slow to build on a CPU device.
                let lanes = launch.backward.lanes_per_row.unwrap_or(32);
                if cols / lanes > 128 {
                    continue;
                }
                let mut elems = vec![ElemType::F32];
                if i == 1 && gpu.features().f16 {
                    elems.push(ElemType::F16);
                }
                for elem in elems {
                    for rms in [false, true] {
                        let what = format!(
                            "{name}: {} {elem} {rows}×{cols} {xl:?} → {yl:?}, {launch:?}",
                            if rms { "rms" } else { "layer" }
                        );
                        let c = case(&mut rng, xl, yl, rows, cols, elem);
                        forms.extend(check_gpu_against_cpu(gpu, rms, &c, launch, &what));
                    }
                }
            }
        }
        let has = |form| forms.iter().any(|s: &LaunchShape| s.sum == form);
        assert!(has(SumForm::Shared) && has(SumForm::Workgroup), "{name}");
        // Where the device has subgroups, rows whose lanes fit its smallest one use shuffles.
        assert_eq!(has(SumForm::Shuffle), gpu.features().subgroups, "{name}");
    }
}

#[test]
fn the_gpu_backward_matches_finite_differences() {
    let gpu = gpu();
    let mut rng = Rng::new(10);
    let (rows, cols) = (7, 37);
    for launch in [
        NormLaunch::default(),
        NormLaunch::BASELINE,
        lanes_by_rows(4, 4, RowSum::Lanes, Some(4)),
    ] {
        for layout in [Layout2::RowMajor, Layout2::RTile(4)] {
            for rms in [false, true] {
                let what = format!(
                    "{} {layout:?} {launch:?}",
                    if rms { "rms" } else { "layer" }
                );
                let c = case(&mut rng, layout, layout, rows, cols, ElemType::F32);
                // The loss Σ dy · y in f64, from the definitions on dense values.
                let loss = |x: &[f64], gamma: &[f64], beta: &[f64]| -> f64 {
                    let y = if rms {
                        rms_norm_reference(x, gamma, cols as usize).0
                    } else {
                        layer_norm_reference(x, gamma, beta, cols as usize).0
                    };
                    y.iter().zip(&c.dy.values).map(|(a, b)| a * b).sum()
                };
                let (x, g, b) = (&c.x.values, &c.gamma.values, &c.beta.values);
                let h = 1e-4;
                let want_dx = finite_differences(x, h, |x| loss(x, g, b));
                let want_dg = finite_differences(g, h, |g| loss(x, g, b));
                let want_db = finite_differences(b, h, |b| loss(x, g, b));
                let got = run_gpu(gpu, rms, &c, launch);
                // The weight gradients were computed twice, the second time added on.
                let half = |v: &[f64]| -> Vec<f64> { v.iter().map(|v| v / 2.0).collect() };
                let tol = 1e-4;
                assert_close(&format!("{what}: dx"), &got.dx, &want_dx, tol);
                assert_close(&format!("{what}: dγ"), &half(&got.dgamma), &want_dg, tol);
                if !rms {
                    assert_close(&format!("{what}: dβ"), &half(&got.dbeta), &want_db, tol);
                }
            }
        }
    }
}

#[test]
fn bad_launch_shapes_are_typed_errors() {
    let gpu = gpu();
    let mut rng = Rng::new(11);
    let c = case(
        &mut rng,
        Layout2::RowMajor,
        Layout2::RowMajor,
        13,
        36,
        ElemType::F32,
    );
    let views = RmsNormTensors {
        x: &c.x.view,
        gamma: &c.gamma.view,
        y: &c.y.view,
        rstd: &c.rstd.view,
    };
    for launch in [
        lanes_by_rows(0, 4, RowSum::Lanes, None),
        lanes_by_rows(4, 0, RowSum::Lanes, None),
        lanes_by_rows(3, 4, RowSum::Lanes, None),
        lanes_by_rows(32, 16, RowSum::Workgroup, None),
        chunked(Some(0)),
    ] {
        let err = RmsNormOp::with_launch(gpu, &views, 1e-5, launch).unwrap_err();
        assert!(matches!(err, OpError::Shape { .. }), "{launch:?}: {err}");
    }
    // Zero rows per chunk set after building: refused when the backward is recorded.
    let op = RmsNormOp::new(gpu, &views, 1e-5)
        .unwrap()
        .with_chunk_rows(0);
    let bufs = [&c.x, &c.gamma, &c.y, &c.rstd, &c.dy, &c.x, &c.gamma].map(|t| t.upload(gpu));
    let args = [&c.x, &c.gamma, &c.y, &c.rstd, &c.dy, &c.x, &c.gamma]
        .iter()
        .zip(&bufs)
        .map(|(t, b)| t.gpu_arg(b))
        .collect::<Vec<_>>();
    let t = RmsNormTensors {
        x: &args[0],
        gamma: &args[1],
        y: &args[2],
        rstd: &args[3],
    };
    let g = RmsNormGrads {
        dy: &args[4],
        dx: &args[5],
        dgamma: &args[6],
    };
    let mut batch = gpu.batch();
    let err = op.backward(&mut batch, &t, &g, false).unwrap_err();
    assert!(matches!(err, OpError::Shape { .. }), "{err}");
    assert!(batch.is_empty(), "nothing was recorded for a refused call");
}

#[test]
fn bad_shapes_views_and_buffers_are_typed_errors() {
    let gpu = gpu();
    let mut rng = Rng::new(8);
    let c = case(
        &mut rng,
        Layout2::RowMajor,
        Layout2::RTile(4),
        13,
        36,
        ElemType::F32,
    );
    let views = |gamma| LayerNormTensors {
        x: &c.x.view,
        gamma,
        beta: &c.beta.view,
        y: &c.y.view,
        mean: &c.mean.view,
        rstd: &c.rstd.view,
    };
    // γ of the wrong length.
    let short = view_1d("gamma", "cols", 32, ElemType::F32);
    let err = LayerNormOp::new(gpu, &views(&short), 1e-5).unwrap_err();
    assert!(matches!(err, OpError::Shape { .. }), "{err}");
    // A 3-D input, and run-time columns.
    let three = LayoutSpec::new("x3")
        .dyn_axis("a")
        .axis("b", 2)
        .axis("cols", 36)
        .build()
        .unwrap()
        .view();
    let v = LayerNormTensors {
        x: &three,
        ..views(&c.gamma.view)
    };
    let err = LayerNormOp::new(gpu, &v, 1e-5).unwrap_err();
    assert!(matches!(err, OpError::Unsupported { .. }), "{err}");
    let dyn_cols = LayoutSpec::new("xd")
        .dyn_axis("rows")
        .dyn_axis("cols")
        .build()
        .unwrap()
        .view();
    let v = LayerNormTensors {
        x: &dyn_cols,
        ..views(&c.gamma.view)
    };
    let err = LayerNormOp::new(gpu, &v, 1e-5).unwrap_err();
    assert!(matches!(err, OpError::Unsupported { .. }), "{err}");

    let op = LayerNormOp::new(gpu, &views(&c.gamma.view), 1e-5).unwrap();
    let (xb, gb, bb, yb, mb, rb) = (
        c.x.upload(gpu),
        c.gamma.upload(gpu),
        c.beta.upload(gpu),
        c.y.poisoned(gpu),
        c.mean.poisoned(gpu),
        c.rstd.poisoned(gpu),
    );
    let (x, gamma, beta, y, mean, rstd) = (
        c.x.gpu_arg(&xb),
        c.gamma.gpu_arg(&gb),
        c.beta.gpu_arg(&bb),
        c.y.gpu_arg(&yb),
        c.mean.gpu_arg(&mb),
        c.rstd.gpu_arg(&rb),
    );
    let t = LayerNormTensors {
        x: &x,
        gamma: &gamma,
        beta: &beta,
        y: &y,
        mean: &mean,
        rstd: &rstd,
    };
    let mut batch = gpu.batch();
    // 14 rows of statistics for 13 rows.
    let (tall_view, tall_bind) = view_1d_dyn("mean", "rows", 14, ElemType::F32);
    let tall = Tensor::new(tall_view, tall_bind, vec![0.0; 14]);
    let tb = tall.poisoned(gpu);
    let tall_arg = tall.gpu_arg(&tb);
    let err = op
        .forward(
            &mut batch,
            &LayerNormTensors {
                mean: &tall_arg,
                ..t
            },
        )
        .unwrap_err();
    assert!(matches!(err, OpError::Shape { .. }), "{err}");
    // y passed through x's view.
    let err = op
        .forward(&mut batch, &LayerNormTensors { y: &x, ..t })
        .unwrap_err();
    assert!(matches!(err, OpError::WrongView { .. }), "{err}");
    // dγ through β's view: refused before anything is recorded.
    let dyb = c.dy.upload(gpu);
    let dy = c.dy.gpu_arg(&dyb);
    let dxb = c.x.poisoned(gpu);
    let dx = c.x.gpu_arg(&dxb);
    let g = LayerNormGrads {
        dy: &dy,
        dx: &dx,
        dgamma: &beta,
        dbeta: &beta,
    };
    let err = op.backward(&mut batch, &t, &g, false).unwrap_err();
    assert!(matches!(err, OpError::WrongView { .. }), "{err}");
    assert!(batch.is_empty(), "nothing was recorded for refused calls");
    // A buffer too short for its layout is refused when the argument is made.
    let small = fblayout_kernels::GpuBuffer::zeroed::<f32>(gpu, 10).unwrap();
    assert!(fblayout_kernels::tensor::GpuArg::bound(&small, &c.x.view, c.x.bound.clone()).is_err());
    // The CPU twins refuse mismatched shapes too.
    let xs = c.x.host::<f32>();
    let gs = c.gamma.host::<f32>();
    let mut ys = c.y.host::<f32>();
    let mut ts = tall.host::<f32>();
    let mut rs = c.rstd.host::<f32>();
    let err = layer_norm_forward_cpu(
        &c.x.arg(&xs),
        &c.gamma.arg(&gs),
        &c.gamma.arg(&gs),
        EPS,
        &mut c.y.arg_mut(&mut ys),
        &mut tall.arg_mut(&mut ts),
        &mut c.rstd.arg_mut(&mut rs),
    )
    .unwrap_err();
    assert!(matches!(err, OpError::Shape { .. }), "{err}");
}
