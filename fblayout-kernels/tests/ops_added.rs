//! Added products, `C = alpha · A·B + D`, on every kernel that runs a GEMM: the `f32`-summing
//! GEMM (any device), unsplit and split-k, and the tensor cores (where the adapter has them;
//! elsewhere those tests print that they are skipped, and fail when
//! `FBLAYOUT_REQUIRE_COOP=1`), against the definition in `f64`, with C poisoned with NaN and
//! D in its own layout; and a linear layer's input gradient that adds the contributions to it
//! before its own.

mod support;

use fblayout_core::layout::{ElemType, View};
use fblayout_kernels::ops::Activation;
use fblayout_kernels::ops::OpError;
use fblayout_kernels::ops::coop::{CoopConfig, CoopMatmulOp};
use fblayout_kernels::ops::matmul::{
    GemmShape, LinearOp, MatmulOp, Merge, NarrowMatmulOp, Output, Scale,
};
use support::{
    Layout2, Rng, Tensor, assert_close, coop_gpu, gpu, matmul_reference, stored, tolerance, view_2d,
};

/// A random `[rows, cols]` tensor stored as `layout`, `rows` a run-time extent.
fn matrix(
    rng: &mut Rng,
    name: &str,
    layout: Layout2,
    rows: u32,
    cols: u32,
    elem: ElemType,
) -> Tensor {
    let (view, bind) = view_2d(name, layout, rows, cols, elem);
    stored(&Tensor::random(rng, view, bind, -1.0, 1.0))
}

/// A random `[rows, cols]` tensor of static extents read through the transpose of a row-major
/// `[cols, rows]` one where `transposed`.
fn fixed(
    rng: &mut Rng,
    name: &str,
    rows: u32,
    cols: u32,
    transposed: bool,
    elem: ElemType,
) -> Tensor {
    use fblayout_core::layout::LayoutSpec;
    let spec = LayoutSpec::new(name).elem(elem);
    let view = if transposed {
        let layout = spec.axis("cols", cols).axis("rows", rows).build().unwrap();
        layout.view().transpose("cols", "rows").unwrap()
    } else {
        spec.axis("rows", rows)
            .axis("cols", cols)
            .build()
            .unwrap()
            .view()
    };
    stored(&Tensor::random(rng, view, Vec::new(), -1.0, 1.0))
}

/// `alpha · A·B + D` by the definition.
fn definition(a: &Tensor, b: &Tensor, d: &Tensor, alpha: f32) -> Vec<f64> {
    matmul_reference(a, b, Some(d), Scale { alpha, beta: 1.0 })
}

/// The tolerance of a product of `k` terms into `c`, plus D's rounding.
fn tol(a: &Tensor, c: &Tensor, d: &Tensor) -> f64 {
    let k = a.dims()[a.dims().len() - 1];
    tolerance(c.elem(), k) + 2.0 * tolerance(a.elem(), 1) + tolerance(d.elem(), 1)
}

/// Uploads the four operands, C poisoned; runs `record` on their arguments, submits and
/// returns C.
fn run(
    what: &str,
    [a, b, d, c]: [&Tensor; 4],
    record: impl FnOnce(
        &mut fblayout_kernels::runtime::Batch<'_>,
        [&fblayout_kernels::tensor::GpuArg<'_>; 4],
    ) -> Result<(), OpError>,
) -> Vec<f64> {
    let gpu = gpu();
    let (ba, bb, bd, bc) = (a.upload(gpu), b.upload(gpu), d.upload(gpu), c.poisoned(gpu));
    let (ga, gb, gd, gc) = (
        a.gpu_arg(&ba),
        b.gpu_arg(&bb),
        d.gpu_arg(&bd),
        c.gpu_arg(&bc),
    );
    let mut batch = gpu.batch();
    record(&mut batch, [&ga, &gb, &gd, &gc]).unwrap_or_else(|e| panic!("{what}: {e}"));
    batch.submit().unwrap();
    c.download(&bc)
}

/// The `f32`-summing GEMM adds D of any layout (C in another, or in D's own), in `f32` and
/// `f16`, with a factor, at extents no tile divides; a product whose plan splits its reduction
/// adds D once, in the reduction.
#[test]
fn the_f32_gemm_adds_a_matrix_of_any_layout_as_it_writes() {
    let gpu = gpu();
    let mut rng = Rng::new(141);
    let others = Layout2::ALL.into_iter().rev();
    for ((lc, ld), (elem, alpha)) in Layout2::ALL.into_iter().zip(others).zip(
        [(ElemType::F32, 1.0), (ElemType::F16, 0.5)]
            .into_iter()
            .cycle(),
    ) {
        if elem == ElemType::F16 && !gpu.features().f16 {
            continue;
        }
        let (m, n, k) = (203, 70, 45);
        let a = matrix(&mut rng, "a", Layout2::RowMajor, m, k, elem);
        let b = fixed(&mut rng, "b", k, n, lc == Layout2::ColMajor, elem);
        let c = matrix(&mut rng, "c", lc, m, n, elem);
        for ld in [ld, lc] {
            let d = matrix(&mut rng, "d", ld, m, n, elem);
            let what = format!("C {lc:?}, D {ld:?}, {elem}, alpha {alpha}");
            let op = MatmulOp::new_added(gpu, &a.view, &b.view, &d.view, &c.view).unwrap();
            let got = run(&what, [&a, &b, &d, &c], |batch, [ga, gb, gd, gc]| {
                op.record_added(batch, ga, gb, gd, gc, alpha)
            });
            assert_close(&what, &got, &definition(&a, &b, &d, alpha), tol(&a, &c, &d));
        }
    }
    // Few outputs and a long reduction: the plan splits it, and the reduction adds D.
    let (m, n, k) = (12, 20, 3001);
    let a = matrix(&mut rng, "a", Layout2::ColMajor, m, k, ElemType::F32);
    let b = fixed(&mut rng, "b", k, n, true, ElemType::F32);
    let c = matrix(&mut rng, "c", Layout2::RowMajor, m, n, ElemType::F32);
    let d = matrix(&mut rng, "d", Layout2::RTile(4), m, n, ElemType::F32);
    let op = MatmulOp::new_added(gpu, &a.view, &b.view, &d.view, &c.view).unwrap();
    let shape = GemmShape { batch: 1, m, n, k };
    assert!(op.plan(shape).split_k > 1, "{}", op.plan(shape));
    let got = run("split", [&a, &b, &d, &c], |batch, [ga, gb, gd, gc]| {
        op.record_added(batch, ga, gb, gd, gc, 2.0)
    });
    assert_close("split", &got, &definition(&a, &b, &d, 2.0), tol(&a, &c, &d));
}

/// On tensor cores: D read four at a time (row-major `f16`, C `f16`) and element by element
/// (through a transpose, C `f32` and row-major, where a plain product would store fragments
/// straight), unsplit and split (the reduction adds D), on shapes no block divides.
#[test]
fn tensor_cores_add_a_matrix_through_every_store_and_split() {
    let Some(gpu) = coop_gpu("tensor_cores_add") else {
        return;
    };
    let mut rng = Rng::new(142);
    let configs = [
        CoopConfig::DEFAULT,
        CoopConfig::SMALL,
        CoopConfig::SMALL.with_split(8),
        CoopConfig::DEFAULT.with_split(4),
    ];
    for (c_elem, d_elem, d_transposed) in [
        (ElemType::F16, ElemType::F16, false),
        (ElemType::F32, ElemType::F32, true),
        (ElemType::F32, ElemType::F16, false),
    ] {
        for (ta, tb) in [(false, false), (true, true)] {
            let (m, n, k) = (208, 176, 301);
            let a = fixed(&mut rng, "a", m, k, ta, ElemType::F16);
            let b = fixed(&mut rng, "b", k, n, tb, ElemType::F16);
            let c = fixed(&mut rng, "c", m, n, false, c_elem);
            let d = fixed(&mut rng, "d", m, n, d_transposed, d_elem);
            let op = CoopMatmulOp::new_added(gpu, &a.view, &b.view, &d.view, &c.view).unwrap();
            assert!(op.has_addend());
            let want = definition(&a, &b, &d, 1.0);
            for config in configs.iter().copied().map(Some).chain([None]) {
                let what = format!(
                    "C {c_elem}, D {d_elem} transposed {d_transposed}, A {ta}, B {tb}, {config:?}"
                );
                let got = run(
                    &what,
                    [&a, &b, &d, &c],
                    |batch, [ga, gb, gd, gc]| match config {
                        Some(config) => op.record_config_added(batch, config, ga, gb, gd, gc),
                        None => op.record_added(batch, ga, gb, gd, gc),
                    },
                );
                assert_close(
                    &what,
                    &got,
                    &want,
                    tol(&a, &c, &d).max(tolerance(ElemType::F16, k as usize)),
                );
            }
        }
    }
}

/// A linear layer's input gradient built with D writes `dx = dy·wᵀ + d`, tuned first (on
/// tensor cores, as the same product without D), on whatever kernel the device runs it.
#[test]
fn a_linear_layers_input_gradient_adds_the_contributions_before_it() {
    let gpu = gpu();
    let mut rng = Rng::new(143);
    let elem = if gpu.features().f16 {
        ElemType::F16
    } else {
        ElemType::F32
    };
    let (tokens, d_in, d_out) = (150, 96, 200);
    let x = matrix(&mut rng, "x", Layout2::RowMajor, tokens, d_in, elem);
    let w = fixed(&mut rng, "w", d_in, d_out, false, elem);
    let y = matrix(&mut rng, "y", Layout2::RowMajor, tokens, d_out, elem);
    let d = matrix(&mut rng, "sum", Layout2::RowMajor, tokens, d_in, elem);
    let op = LinearOp::new_grad_added(gpu, &x.view, &w.view, &d.view, &y.view, Merge::Add).unwrap();
    let (bx, bw, by, bd) = (x.upload(gpu), w.upload(gpu), y.upload(gpu), d.upload(gpu));
    let (gx, gw, gy, gd) = (
        x.gpu_arg(&bx),
        w.gpu_arg(&bw),
        y.gpu_arg(&by),
        d.gpu_arg(&bd),
    );
    op.tune(gpu, &gx, &gw, &gy).unwrap();
    let bdx = x.poisoned(gpu);
    let gdx = x.gpu_arg(&bdx);
    let mut batch = gpu.batch();
    op.backward_added(&mut batch, &gw, &gy, &gd, &gdx, Output::Overwrite)
        .unwrap();
    // Recorded as a plain input gradient, the op refuses: it was built to add `d`.
    let err = op
        .backward(
            &mut batch,
            &gx,
            &gw,
            &gy,
            Some((&gdx, Output::Overwrite)),
            None,
        )
        .unwrap_err();
    assert!(err.to_string().contains("add a matrix"), "{err}");
    batch.submit().unwrap();
    let w_t = w.through(transposed(&w.view));
    let want = definition(&y, &w_t, &d, 1.0);
    let tol = tolerance(elem, d_out as usize) + tolerance(ElemType::F16, d_out as usize);
    assert_close("dx", &x.download(&bdx), &want, tol);
}

fn transposed(view: &View) -> View {
    view.transpose("rows", "cols").unwrap()
}

/// D of other extents than C's is a shape error where the op is built; a plain product
/// recorded with D, and an added one without, are typed errors that record nothing.
#[test]
fn a_mismatched_or_missing_matrix_is_a_typed_error() {
    let gpu = gpu();
    let mut rng = Rng::new(144);
    let a = matrix(&mut rng, "a", Layout2::RowMajor, 40, 24, ElemType::F32);
    let b = fixed(&mut rng, "b", 24, 32, false, ElemType::F32);
    let c = matrix(&mut rng, "c", Layout2::RowMajor, 40, 32, ElemType::F32);
    let short = fixed(&mut rng, "d", 40, 31, false, ElemType::F32);
    let err = MatmulOp::new_added(gpu, &a.view, &b.view, &short.view, &c.view).unwrap_err();
    assert!(matches!(err, OpError::Shape { .. }), "{err}");
    let d = matrix(&mut rng, "d", Layout2::ColMajor, 40, 32, ElemType::F32);
    let added = MatmulOp::new_added(gpu, &a.view, &b.view, &d.view, &c.view).unwrap();
    let plain = MatmulOp::new(gpu, &a.view, &b.view, &c.view).unwrap();
    let (ba, bb, bd, bc) = (a.upload(gpu), b.upload(gpu), d.upload(gpu), c.poisoned(gpu));
    let (ga, gb, gd, gc) = (
        a.gpu_arg(&ba),
        b.gpu_arg(&bb),
        d.gpu_arg(&bd),
        c.gpu_arg(&bc),
    );
    let mut batch = gpu.batch();
    let err = added
        .record(&mut batch, &ga, &gb, &gc, Scale::OVERWRITE)
        .unwrap_err();
    assert!(
        matches!(err, OpError::Unsupported { role: "d", .. }),
        "{err}"
    );
    let err = plain
        .record_added(&mut batch, &ga, &gb, &gd, &gc, 1.0)
        .unwrap_err();
    assert!(
        matches!(err, OpError::Unsupported { role: "d", .. }),
        "{err}"
    );
    assert!(err.to_string().contains("built to add nothing"), "{err}");
    assert!(batch.is_empty(), "nothing was recorded for refused calls");
}

/// `alpha · A·B · f'(D)` by the definition, `f'` the activation's derivative in `f64`.
fn merged_definition(a: &Tensor, b: &Tensor, d: &Tensor, alpha: f32, merge: Merge) -> Vec<f64> {
    let product = matmul_reference(a, b, None, Scale { alpha, beta: 0.0 });
    product
        .iter()
        .zip(&d.values)
        .map(|(&p, &x)| merge.apply(p, x))
        .collect()
}

/// An activation's backward done by the product of its output's gradient, `C = alpha · A·B ·
/// f'(D)`, for every activation, on the `f32` GEMM (unsplit and split), the short narrow
/// kernel and the tensor cores where the adapter has them, D in another layout than C's.
#[test]
fn every_gemm_does_an_activations_backward_as_it_writes() {
    let gpu = gpu();
    let mut rng = Rng::new(145);
    let acts = [
        Activation::Gelu,
        Activation::GeluTanh,
        Activation::Silu,
        Activation::Tanh,
    ];
    for (act, (m, n, k)) in
        acts.into_iter()
            .zip([(203, 70, 45), (12, 20, 3001), (150, 90, 7), (64, 48, 33)])
    {
        let merge = Merge::ActivationGrad(act);
        let a = matrix(&mut rng, "a", Layout2::RowMajor, m, k, ElemType::F32);
        let b = fixed(&mut rng, "b", k, n, true, ElemType::F32);
        let c = matrix(&mut rng, "c", Layout2::RowMajor, m, n, ElemType::F32);
        // The activation's inputs, spread over its curved part.
        let d = matrix(&mut rng, "d", Layout2::ColMajor, m, n, ElemType::F32);
        let d = d.with_values(d.values.iter().map(|v| 3.0 * v).collect());
        let want = merged_definition(&a, &b, &d, 0.5, merge);
        let what = format!("{act:?}, {m}×{n}×{k}");
        let op = MatmulOp::new_merged(gpu, &a.view, &b.view, &d.view, &c.view, merge).unwrap();
        if k > 1000 {
            // Few outputs and a long reduction: split, the reduction does the merge.
            let shape = GemmShape { batch: 1, m, n, k };
            assert!(op.plan(shape).split_k > 1, "{what}");
        }
        let got = run(&what, [&a, &b, &d, &c], |batch, [ga, gb, gd, gc]| {
            op.record_added(batch, ga, gb, gd, gc, 0.5)
        });
        assert_close(&what, &got, &want, tol(&a, &c, &d));
        if k <= 16 {
            let op =
                NarrowMatmulOp::new_merged(gpu, &a.view, &b.view, &d.view, &c.view, merge).unwrap();
            let got = run(&what, [&a, &b, &d, &c], |batch, [ga, gb, gd, gc]| {
                op.record_added(batch, ga, gb, gd, gc, 0.5)
            });
            assert_close(&format!("{what}, narrow"), &got, &want, tol(&a, &c, &d));
        }
    }
    let Some(gpu) = coop_gpu("tensor_cores_merge") else {
        return;
    };
    for act in acts {
        let merge = Merge::ActivationGrad(act);
        let (m, n, k) = (208, 176, 301);
        let a = fixed(&mut rng, "a", m, k, false, ElemType::F16);
        let b = fixed(&mut rng, "b", k, n, true, ElemType::F16);
        let c = fixed(&mut rng, "c", m, n, false, ElemType::F16);
        let d = fixed(&mut rng, "d", m, n, false, ElemType::F16);
        let op = CoopMatmulOp::new_merged(gpu, &a.view, &b.view, &d.view, &c.view, merge).unwrap();
        let want = merged_definition(&a, &b, &d, 1.0, merge);
        for config in [CoopConfig::DEFAULT, CoopConfig::SMALL.with_split(4)] {
            let what = format!("tensor cores, {act:?}, {config}");
            let got = run(&what, [&a, &b, &d, &c], |batch, [ga, gb, gd, gc]| {
                op.record_config_added(batch, config, ga, gb, gd, gc)
            });
            let tol = tol(&a, &c, &d).max(tolerance(ElemType::F16, k as usize));
            assert_close(&what, &got, &want, tol);
        }
    }
}
