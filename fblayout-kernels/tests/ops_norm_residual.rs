//! A residual connection fused into LayerNorm and RMSNorm ([`Residual`]): the forward
//! normalises `x + res` and writes the sum; the backward, reading the sum as its `x`, adds the
//! sum's gradient from elsewhere (`dsum`) to `dx`. Checked against the definitions in `f64`
//! (the forward) and against finite differences of `Σ dy·y + Σ dsum·sum` (the backward), with
//! every operand in its own layout, partial tiles and `f16` storage.

mod support;

use fblayout_core::layout::ElemType;
use fblayout_kernels::GpuBuffer;
use fblayout_kernels::ops::{
    LayerNormGrads, LayerNormOp, LayerNormTensors, NormLaunch, OpError, Residual, RmsNormGrads,
    RmsNormOp, RmsNormTensors,
};
use fblayout_kernels::runtime::Gpu;
use support::{
    Layout2, Rng, Tensor, assert_close, finite_differences, gpu, gpu_elems, tolerance, view_1d,
    view_1d_dyn, view_2d,
};

const EPS: f64 = 1e-5;

/// The layouts of `x`, `res`, `sum`, `y` and `dsum` (`dy` is read through `y`'s, `dx` written
/// through `sum`'s).
type Layouts = [Layout2; 5];

/// Layout sets: all row-major, all 4×4 R-Tiles, and mixed ones with every operand in another
/// layout than its neighbours.
const LAYOUTS: [Layouts; 4] = [
    [Layout2::RowMajor; 5],
    [Layout2::RTile(4); 5],
    [
        Layout2::RTile(8),
        Layout2::ColMajor,
        Layout2::RowMajor,
        Layout2::RowMajorT,
        Layout2::RTile(4),
    ],
    [
        Layout2::ColMajor,
        Layout2::RowMajor,
        Layout2::RTile(4),
        Layout2::RTile(8),
        Layout2::RTileT(4),
    ],
];

/// One case: the tensors of both passes.
struct Case {
    x: Tensor,
    res: Tensor,
    sum: Tensor,
    y: Tensor,
    dy: Tensor,
    dsum: Tensor,
    gamma: Tensor,
    beta: Tensor,
    mean: Tensor,
    rstd: Tensor,
}

fn case(rng: &mut Rng, l: Layouts, rows: u32, cols: u32, elem: ElemType) -> Case {
    let matrix = |rng: &mut Rng, name: &str, layout, lo, hi| {
        let (v, bind) = view_2d(name, layout, rows, cols, elem);
        Tensor::random(rng, v, bind, lo, hi)
    };
    let vector = |rng: &mut Rng, name, lo, hi| {
        Tensor::random(rng, view_1d(name, "cols", cols, elem), vec![], lo, hi)
    };
    let stat = |name| {
        let (v, b) = view_1d_dyn(name, "rows", rows, elem);
        Tensor::new(v, b, vec![0.0; rows as usize])
    };
    let y = matrix(rng, "y", l[3], -1.0, 1.0);
    Case {
        x: matrix(rng, "x", l[0], -2.0, 2.0),
        res: matrix(rng, "res", l[1], -2.0, 2.0),
        sum: {
            let (v, bind) = view_2d("sum", l[2], rows, cols, elem);
            Tensor::new(v, bind, vec![0.0; (rows * cols) as usize])
        },
        dy: Tensor::random(rng, y.view.clone(), y.bind.clone(), -1.0, 1.0),
        y,
        dsum: matrix(rng, "dsum", l[4], -1.0, 1.0),
        gamma: vector(rng, "gamma", 0.5, 1.5),
        beta: vector(rng, "beta", -0.5, 0.5),
        mean: stat("mean"),
        rstd: stat("rstd"),
    }
}

/// The norm of each row of `s` (dense, row-major) by its definition: LayerNorm
/// `(s − μ)/√(σ² + ε)·γ + β`, or RMSNorm `s/√(mean(s²) + ε)·γ`.
fn norm(rms: bool, s: &[f64], gamma: &[f64], beta: &[f64]) -> Vec<f64> {
    let cols = gamma.len();
    let mut y = Vec::with_capacity(s.len());
    for row in s.chunks(cols) {
        let n = cols as f64;
        let (mu, second) = if rms {
            (0.0, row.iter().map(|v| v * v).sum::<f64>() / n)
        } else {
            let mu = row.iter().sum::<f64>() / n;
            (mu, row.iter().map(|v| (v - mu).powi(2)).sum::<f64>() / n)
        };
        let scale = 1.0 / (second + EPS).sqrt();
        y.extend((0..cols).map(|c| {
            let shift = if rms { 0.0 } else { beta[c] };
            (row[c] - mu) * scale * gamma[c] + shift
        }));
    }
    y
}

/// What the GPU wrote.
struct Run {
    sum: Vec<f64>,
    y: Vec<f64>,
    dx: Vec<f64>,
    dgamma: Vec<f64>,
    dbeta: Vec<f64>,
}

/// Runs the fused forward, then the fused backward over the sum it wrote, under `launch`.
fn run(gpu: &Gpu, rms: bool, c: &Case, launch: NormLaunch) -> Run {
    let up = |t: &Tensor| t.upload(gpu);
    let poisoned = |t: &Tensor| t.poisoned(gpu);
    let (xb, rb, gb, bb, dyb, dsb) = (
        up(&c.x),
        up(&c.res),
        up(&c.gamma),
        up(&c.beta),
        up(&c.dy),
        up(&c.dsum),
    );
    let (sb, yb, mb, sdb, dxb, dgb, dbb) = (
        poisoned(&c.sum),
        poisoned(&c.y),
        poisoned(&c.mean),
        poisoned(&c.rstd),
        poisoned(&c.sum),
        poisoned(&c.gamma),
        poisoned(&c.beta),
    );
    let (x, res, sum, y) = (
        c.x.gpu_arg(&xb),
        c.res.gpu_arg(&rb),
        c.sum.gpu_arg(&sb),
        c.y.gpu_arg(&yb),
    );
    let (gamma, beta, mean, rstd) = (
        c.gamma.gpu_arg(&gb),
        c.beta.gpu_arg(&bb),
        c.mean.gpu_arg(&mb),
        c.rstd.gpu_arg(&sdb),
    );
    let (dy, dsum, dx, dgamma, dbeta) = (
        c.dy.gpu_arg(&dyb),
        c.dsum.gpu_arg(&dsb),
        c.sum.gpu_arg(&dxb),
        c.gamma.gpu_arg(&dgb),
        c.beta.gpu_arg(&dbb),
    );
    let forward = Residual {
        sum: Some((&c.res.view, &c.sum.view)),
        carry: None,
    };
    let backward = Residual {
        sum: None,
        carry: Some(&c.dsum.view),
    };
    let mut batch = gpu.batch();
    if rms {
        // The forward's kernels read `x`; the backward's read the sum as theirs.
        let views = |x| RmsNormTensors {
            x,
            gamma: &c.gamma.view,
            y: &c.y.view,
            rstd: &c.rstd.view,
        };
        let fwd = RmsNormOp::fused(gpu, &views(&c.x.view), &forward, EPS as f32, launch).unwrap();
        let bwd =
            RmsNormOp::fused(gpu, &views(&c.sum.view), &backward, EPS as f32, launch).unwrap();
        let t = |x| RmsNormTensors {
            x,
            gamma: &gamma,
            y: &y,
            rstd: &rstd,
        };
        fwd.forward_fused(&mut batch, &t(&x), Some([&res, &sum]))
            .unwrap();
        let g = RmsNormGrads {
            dy: &dy,
            dx: &dx,
            dgamma: &dgamma,
        };
        bwd.backward_fused(&mut batch, &t(&sum), &g, Some(&dsum), false)
            .unwrap();
    } else {
        let views = |x| LayerNormTensors {
            x,
            gamma: &c.gamma.view,
            beta: &c.beta.view,
            y: &c.y.view,
            mean: &c.mean.view,
            rstd: &c.rstd.view,
        };
        let fwd = LayerNormOp::fused(gpu, &views(&c.x.view), &forward, EPS as f32, launch).unwrap();
        let bwd =
            LayerNormOp::fused(gpu, &views(&c.sum.view), &backward, EPS as f32, launch).unwrap();
        let t = |x| LayerNormTensors {
            x,
            gamma: &gamma,
            beta: &beta,
            y: &y,
            mean: &mean,
            rstd: &rstd,
        };
        fwd.forward_fused(&mut batch, &t(&x), Some([&res, &sum]))
            .unwrap();
        let g = LayerNormGrads {
            dy: &dy,
            dx: &dx,
            dgamma: &dgamma,
            dbeta: &dbeta,
        };
        bwd.backward_fused(&mut batch, &t(&sum), &g, Some(&dsum), false)
            .unwrap();
    }
    batch.submit().unwrap();
    Run {
        sum: c.sum.download(&sb),
        y: c.y.download(&yb),
        dx: c.sum.download(&dxb),
        dgamma: c.gamma.download(&dgb),
        dbeta: c.beta.download(&dbb),
    }
}

/// The values a tensor holds once stored in its element type.
fn stored(t: &Tensor) -> Vec<f64> {
    match t.elem() {
        ElemType::F16 => t.read_host(&t.host::<half::f16>()),
        _ => t.read_host(&t.host::<f32>()),
    }
}

#[test]
fn the_fused_forward_writes_the_sum_and_normalises_it() {
    let gpu = gpu();
    let mut rng = Rng::new(41);
    for elem in gpu_elems() {
        for layouts in LAYOUTS {
            for rms in [false, true] {
                let what = format!("{} {elem} {layouts:?}", if rms { "rms" } else { "layer" });
                // 13 rows and 36 columns: partial 8×8 tiles, partial 4×4 row tiles.
                let c = case(&mut rng, layouts, 13, 36, elem);
                let got = run(gpu, rms, &c, NormLaunch::default());
                let (x, res) = (stored(&c.x), stored(&c.res));
                let want_sum: Vec<f64> = x.iter().zip(&res).map(|(a, b)| a + b).collect();
                let want_y = norm(rms, &want_sum, &stored(&c.gamma), &stored(&c.beta));
                let tol = tolerance(elem, 36);
                assert_close(&format!("{what}: sum"), &got.sum, &want_sum, tol);
                assert_close(&format!("{what}: y"), &got.y, &want_y, tol);
            }
        }
    }
}

#[test]
fn the_fused_backward_matches_finite_differences() {
    let gpu = gpu();
    let mut rng = Rng::new(42);
    let (rows, cols) = (7, 37);
    for layouts in LAYOUTS {
        for rms in [false, true] {
            let what = format!("{} {layouts:?}", if rms { "rms" } else { "layer" });
            let c = case(&mut rng, layouts, rows, cols, ElemType::F32);
            // The loss Σ dy·y + Σ dsum·s with s = x + res, in f64 from the definitions.
            let loss = |x: &[f64], gamma: &[f64], beta: &[f64]| -> f64 {
                let s: Vec<f64> = x.iter().zip(&c.res.values).map(|(a, b)| a + b).collect();
                let y = norm(rms, &s, gamma, beta);
                let through_y: f64 = y.iter().zip(&c.dy.values).map(|(a, b)| a * b).sum();
                let through_s: f64 = s.iter().zip(&c.dsum.values).map(|(a, b)| a * b).sum();
                through_y + through_s
            };
            let (x, g, b) = (&c.x.values, &c.gamma.values, &c.beta.values);
            let h = 1e-4;
            let got = run(gpu, rms, &c, NormLaunch::default());
            let tol = 1e-4;
            let want_dx = finite_differences(x, h, |x| loss(x, g, b));
            assert_close(&format!("{what}: dx"), &got.dx, &want_dx, tol);
            let want_dg = finite_differences(g, h, |g| loss(x, g, b));
            assert_close(&format!("{what}: dγ"), &got.dgamma, &want_dg, tol);
            if !rms {
                let want_db = finite_differences(b, h, |b| loss(x, g, b));
                assert_close(&format!("{what}: dβ"), &got.dbeta, &want_db, tol);
            }
        }
    }
}

#[test]
fn fused_tensors_that_do_not_fit_are_typed_errors() {
    let gpu = gpu();
    let mut rng = Rng::new(43);
    let c = case(&mut rng, [Layout2::RowMajor; 5], 5, 8, ElemType::F32);
    let views = LayerNormTensors {
        x: &c.x.view,
        gamma: &c.gamma.view,
        beta: &c.beta.view,
        y: &c.y.view,
        mean: &c.mean.view,
        rstd: &c.rstd.view,
    };
    let launch = NormLaunch::default();
    // A summand of other columns is refused when the kernels are built.
    let (narrow, _) = view_2d("res", Layout2::RowMajor, 5, 6, ElemType::F32);
    let residual = Residual {
        sum: Some((&narrow, &c.sum.view)),
        carry: None,
    };
    let err = LayerNormOp::fused(gpu, &views, &residual, EPS as f32, launch).unwrap_err();
    assert!(
        matches!(&err, OpError::Shape { .. }) && err.to_string().contains("`res` 6"),
        "{err}"
    );
    // Kernels built with a residual connection refuse a forward without its tensors, and kernels
    // built without one refuse a forward given them.
    let residual = Residual {
        sum: Some((&c.res.view, &c.sum.view)),
        carry: None,
    };
    let fused = LayerNormOp::fused(gpu, &views, &residual, EPS as f32, launch).unwrap();
    let plain = LayerNormOp::new(gpu, &views, EPS as f32).unwrap();
    let bufs: Vec<GpuBuffer> = [
        &c.x, &c.gamma, &c.beta, &c.y, &c.mean, &c.rstd, &c.res, &c.sum,
    ]
    .iter()
    .map(|t| t.upload(gpu))
    .collect();
    let args: Vec<_> = [
        &c.x, &c.gamma, &c.beta, &c.y, &c.mean, &c.rstd, &c.res, &c.sum,
    ]
    .iter()
    .zip(&bufs)
    .map(|(t, b)| t.gpu_arg(b))
    .collect();
    let t = LayerNormTensors {
        x: &args[0],
        gamma: &args[1],
        beta: &args[2],
        y: &args[3],
        mean: &args[4],
        rstd: &args[5],
    };
    let mut batch = gpu.batch();
    let err = fused.forward(&mut batch, &t).unwrap_err();
    assert!(err.to_string().contains("`res`"), "{err}");
    let err = plain
        .forward_fused(&mut batch, &t, Some([&args[6], &args[7]]))
        .unwrap_err();
    assert!(err.to_string().contains("without a residual"), "{err}");
    // A sum of other rows than `x` is refused when recorded.
    let (short, bind) = view_2d("sum", Layout2::RowMajor, 4, 8, ElemType::F32);
    let short = Tensor::new(short.clone(), bind, vec![0.0; 32]);
    let short_buf = short.upload(gpu);
    let short_arg = short.gpu_arg(&short_buf);
    let err = fused
        .forward_fused(&mut batch, &t, Some([&args[6], &short_arg]))
        .unwrap_err();
    assert!(matches!(&err, OpError::Shape { .. }), "{err}");
}

/// More rows than one dimension of the grid takes workgroups (65 535 on lavapipe and in
/// WebGPU's default limits): the forward of [`NormLaunch::BASELINE`] takes one row of a
/// row-major tensor per workgroup, so its grid folds into two dimensions, and the rows past
/// the first dimension must be summed, normalised and differentiated like the others. The
/// backward's chunks of rows each add their share of `dγ` and `dβ` over all of them.
#[test]
fn more_rows_than_one_grid_dimension_takes() {
    let gpu = gpu();
    let max = gpu.max_workgroups_per_dimension();
    let (rows, cols) = (65_541, 8);
    if max <= 65_535 {
        assert!(rows > max, "{rows} rows fill one dimension of {max}");
    }
    let mut rng = Rng::new(44);
    for rms in [false, true] {
        let what = if rms { "rms" } else { "layer" };
        let c = case(&mut rng, [Layout2::RowMajor; 5], rows, cols, ElemType::F32);
        let got = run(gpu, rms, &c, NormLaunch::BASELINE);
        let (x, res) = (stored(&c.x), stored(&c.res));
        let (gamma, beta) = (stored(&c.gamma), stored(&c.beta));
        let sum: Vec<f64> = x.iter().zip(&res).map(|(a, b)| a + b).collect();
        let tol = tolerance(ElemType::F32, cols as usize);
        assert_close(&format!("{what}: sum"), &got.sum, &sum, tol);
        let y = norm(rms, &sum, &gamma, &beta);
        assert_close(&format!("{what}: y"), &got.y, &y, tol);
        // Σ dy·y + Σ dsum·s, in f64 from the definitions, over the rows `range`.
        let loss = |range: std::ops::Range<usize>, x: &[f64], gamma: &[f64], beta: &[f64]| {
            let span = range.start * cols as usize..range.end * cols as usize;
            let s: Vec<f64> = x
                .iter()
                .zip(&c.res.values[span.clone()])
                .map(|(a, b)| a + b)
                .collect();
            let y = norm(rms, &s, gamma, beta);
            let through_y: f64 = y
                .iter()
                .zip(&c.dy.values[span.clone()])
                .map(|(a, b)| a * b)
                .sum();
            let through_s: f64 = s.iter().zip(&c.dsum.values[span]).map(|(a, b)| a * b).sum();
            through_y + through_s
        };
        let (g, b, h) = (&c.gamma.values, &c.beta.values, 1e-4);
        // Each row's `dx` depends on that row alone: the first, both sides of the first
        // dimension's end, and the last.
        let n = cols as usize;
        for row in [0, 65_534, 65_535, rows as usize - 1] {
            let x_row = &c.x.values[row * n..(row + 1) * n];
            let want = finite_differences(x_row, h, |x| loss(row..row + 1, x, g, b));
            let got_row = &got.dx[row * n..(row + 1) * n];
            assert_close(&format!("{what}: dx of row {row}"), got_row, &want, 1e-4);
        }
        // The weight gradients sum over every row.
        let all = 0..rows as usize;
        let want_dg = finite_differences(g, h, |g| loss(all.clone(), &c.x.values, g, b));
        assert_close(&format!("{what}: dγ"), &got.dgamma, &want_dg, 1e-4);
        if !rms {
            let want_db = finite_differences(b, h, |b| loss(all.clone(), &c.x.values, g, b));
            assert_close(&format!("{what}: dβ"), &got.dbeta, &want_db, 1e-4);
        }
    }
}
