//! Products with a narrow side (LoRA's rank-`r` factors) against a naive `f64` triple loop:
//! C with few columns or few rows (the reduction split between workgroups or not), and short
//! reductions, under every layout of the wide operand, at extents no tile divides, batched
//! through permuted views, with alpha and beta, in f32 and f16, within the scratch they report;
//! and short reductions that add a matrix of any layout as they write.

mod support;

use fblayout_core::layout::{ElemType, LayoutSpec, View};
use fblayout_kernels::ops::OpError;
use fblayout_kernels::ops::matmul::{GemmShape, NarrowMatmulOp, Scale};
use support::{
    Layout2, Rng, Tensor, assert_close, gpu, matmul_reference, stored, tolerance, view_2d,
};

/// `layout`, with its tiles shrunk to fit a static extent of `extent` (a tile must fit its
/// axis): 4 × 4 where 8 × 8 don't fit, and column-major where neither does.
fn fitting(layout: Layout2, extent: u32) -> Layout2 {
    match layout {
        Layout2::RTile(t) | Layout2::RTileT(t) if t > extent && extent < 4 => Layout2::ColMajor,
        Layout2::RTile(t) if t > extent => Layout2::RTile(4),
        Layout2::RTileT(t) if t > extent => Layout2::RTileT(4),
        other => other,
    }
}

/// A random `[rows, cols]` tensor stored as `layout` (its tiles [fitting] the static extent):
/// `cols` a static extent and `rows` a run-time one when `static_cols`, else the other way
/// round (the transpose of such a tensor).
fn matrix(
    rng: &mut Rng,
    name: &str,
    layout: Layout2,
    (rows, cols): (u32, u32),
    static_cols: bool,
    elem: ElemType,
) -> Tensor {
    let layout = fitting(layout, if static_cols { cols } else { rows });
    if static_cols {
        let (view, bind) = view_2d(name, layout, rows, cols, elem);
        return Tensor::random(rng, view, bind, -1.0, 1.0);
    }
    let (view, bind) = view_2d(name, layout, cols, rows, elem);
    let view = view.transpose("rows", "cols").unwrap();
    Tensor::random(rng, view, bind, -1.0, 1.0)
}

/// Runs `C = alpha · A·B + beta · C` on the GPU (C poisoned with NaN when `beta` is 0, so an
/// output never written, or a C read when it must not be, fails), checks it against the
/// definition and that the op took no more scratch than [`NarrowMatmulOp::scratch`] reports.
fn check(what: &str, a: &Tensor, b: &Tensor, c: &Tensor, scale: Scale) {
    let gpu = gpu();
    let op = NarrowMatmulOp::new(gpu, &a.view, &b.view, &c.view)
        .unwrap_or_else(|e| panic!("{what}: {e}"));
    let (ba, bb) = (a.upload(gpu), b.upload(gpu));
    let bc = if scale.beta == 0.0 {
        c.poisoned(gpu)
    } else {
        c.upload(gpu)
    };
    let mut batch = gpu.batch();
    op.record(
        &mut batch,
        &a.gpu_arg(&ba),
        &b.gpu_arg(&bb),
        &c.gpu_arg(&bc),
        scale,
    )
    .unwrap_or_else(|e| panic!("{what}: {e}"));
    let taken = batch.release_scratch();
    batch.submit().unwrap();
    let (da, db) = (a.dims(), b.dims());
    let r = da.len();
    let shape = GemmShape {
        batch: da[..r - 2].iter().product::<usize>() as u32,
        m: da[r - 2] as u32,
        n: db[r - 1] as u32,
        k: da[r - 1] as u32,
    };
    let most = NarrowMatmulOp::scratch(shape).unwrap();
    assert!(most.covers(&taken), "{what}: took {taken}, reported {most}");
    let want = matmul_reference(&stored(a), &stored(b), Some(&stored(c)), scale);
    let tol = tolerance(c.elem(), shape.k as usize) + 2.0 * tolerance(a.elem(), 1);
    assert_close(what, &c.download(&bc), &want, tol);
}

/// Whether the op's kernel is the one `marker` (a line of its header comment) names.
fn runs(a: &Tensor, b: &Tensor, c: &Tensor, marker: &str) -> bool {
    let op = NarrowMatmulOp::new(gpu(), &a.view, &b.view, &c.view).unwrap();
    op.source(gpu()).unwrap().contains(marker)
}

const SCALES: [Scale; 2] = [
    Scale::OVERWRITE,
    Scale {
        alpha: 0.5,
        beta: -2.0,
    },
];

#[test]
fn few_columns_match_the_definition_under_every_layout_of_the_wide_operand() {
    let mut rng = Rng::new(31);
    let others = Layout2::ALL.into_iter().rev().cycle();
    for ((la, lb), width) in Layout2::ALL
        .into_iter()
        .zip(others)
        .zip([1, 3, 8, 16, 5, 16, 8])
    {
        // The wide operand's rows once static and once a run-time extent; k both ways.
        for (m, k, a_static_k) in [(1001, 37, true), (203, 300, false)] {
            let a = matrix(&mut rng, "a", la, (m, k), a_static_k, ElemType::F32);
            let b = matrix(&mut rng, "b", lb, (k, width), true, ElemType::F32);
            let c = matrix(&mut rng, "c", lb, (m, width), true, ElemType::F32);
            assert!(runs(&a, &b, &c, &format!("Narrow side N of {width};")));
            for scale in SCALES {
                let what = format!("[{m}, {k}] {la:?} · [{k}, {width}] {lb:?}, {scale:?}");
                check(&what, &a, &b, &c, scale);
            }
        }
    }
}

#[test]
fn few_rows_match_the_definition_under_every_layout_of_the_wide_operand() {
    let mut rng = Rng::new(32);
    let others = Layout2::ALL.into_iter().rev().cycle();
    for ((lb, la), width) in Layout2::ALL
        .into_iter()
        .zip(others)
        .zip([2, 8, 16, 1, 7, 8, 12])
    {
        for (n, k, b_static_n) in [(999, 37, true), (130, 300, false)] {
            let a = matrix(&mut rng, "a", la, (width, k), false, ElemType::F32);
            let b = matrix(&mut rng, "b", lb, (k, n), b_static_n, ElemType::F32);
            let c = matrix(&mut rng, "c", la, (width, n), false, ElemType::F32);
            assert!(runs(&a, &b, &c, &format!("Narrow side M of {width};")));
            for scale in SCALES {
                let what = format!("[{width}, {k}] {la:?} · [{k}, {n}] {lb:?}, {scale:?}");
                check(&what, &a, &b, &c, scale);
            }
        }
    }
}

#[test]
fn weight_gradients_split_their_long_reduction_between_workgroups() {
    // A weight gradient of LoRA's shape: few outputs, reduced over every token. The blocks of
    // the wide side are too few to fill the device, so the reduction is split, into scratch.
    let mut rng = Rng::new(33);
    for (la, lb) in [
        (Layout2::RowMajorT, Layout2::RowMajor),
        (Layout2::RTileT(4), Layout2::ColMajor),
        (Layout2::RowMajor, Layout2::RTile(8)),
    ] {
        let (m, k, width) = (72, 3001, 8);
        let a = matrix(&mut rng, "a", la, (m, k), false, ElemType::F32);
        let b = matrix(&mut rng, "b", lb, (k, width), true, ElemType::F32);
        let c = matrix(
            &mut rng,
            "c",
            Layout2::RowMajor,
            (m, width),
            true,
            ElemType::F32,
        );
        let shape = GemmShape {
            batch: 1,
            m,
            n: width,
            k,
        };
        assert!(!NarrowMatmulOp::scratch(shape).unwrap().is_empty());
        for scale in SCALES {
            check(&format!("dW {la:?} {lb:?} {scale:?}"), &a, &b, &c, scale);
        }
        // The transpose: few rows, the same reduction.
        let at = matrix(&mut rng, "a", lb, (width, k), false, ElemType::F32);
        let bt = matrix(&mut rng, "b", la, (k, m), true, ElemType::F32);
        let ct = matrix(
            &mut rng,
            "c",
            Layout2::ColMajor,
            (width, m),
            false,
            ElemType::F32,
        );
        check(
            &format!("dWᵀ {la:?} {lb:?}"),
            &at,
            &bt,
            &ct,
            Scale::ACCUMULATE,
        );
    }
}

#[test]
fn short_reductions_match_the_definition_under_every_layout() {
    let mut rng = Rng::new(34);
    let others = Layout2::ALL.into_iter().rev().cycle();
    let third = Layout2::ALL.into_iter().cycle().skip(3);
    for (((la, lb), lc), k) in Layout2::ALL
        .into_iter()
        .zip(others)
        .zip(third)
        .zip([1, 4, 5, 8, 16, 12, 3])
    {
        let (m, n) = (203, 70);
        let a = matrix(&mut rng, "a", la, (m, k), true, ElemType::F32);
        let b = matrix(&mut rng, "b", lb, (k, n), false, ElemType::F32);
        let c = matrix(&mut rng, "c", lc, (m, n), true, ElemType::F32);
        assert!(runs(&a, &b, &c, &format!("Short k of {k};")));
        for scale in SCALES {
            let what = format!("[{m}, {k}] {la:?} · [{k}, {n}] {lb:?} → {lc:?}, {scale:?}");
            check(&what, &a, &b, &c, scale);
        }
    }
}

/// Runs `C = alpha · A·B + D` on the GPU (C poisoned with NaN, so an output never written
/// fails) and checks it against the definition.
fn check_added(what: &str, a: &Tensor, b: &Tensor, d: &Tensor, c: &Tensor, alpha: f32) {
    let gpu = gpu();
    let op = NarrowMatmulOp::new_added(gpu, &a.view, &b.view, &d.view, &c.view)
        .unwrap_or_else(|e| panic!("{what}: {e}"));
    let (ba, bb, bd, bc) = (a.upload(gpu), b.upload(gpu), d.upload(gpu), c.poisoned(gpu));
    let mut batch = gpu.batch();
    let args = [&ba, &bb, &bd, &bc];
    let [ga, gb, gd, gc] = [a, b, d, c]
        .iter()
        .zip(args)
        .map(|(t, buffer)| t.gpu_arg(buffer))
        .collect::<Vec<_>>()
        .try_into()
        .unwrap();
    op.record_added(&mut batch, &ga, &gb, &gd, &gc, alpha)
        .unwrap_or_else(|e| panic!("{what}: {e}"));
    // Recorded as a plain product, the op refuses: it was built to add `d`.
    let err = op
        .record(&mut batch, &ga, &gb, &gc, Scale::OVERWRITE)
        .unwrap_err();
    assert!(err.to_string().contains("add a matrix"), "{what}: {err}");
    batch.submit().unwrap();
    let k = a.dims()[a.dims().len() - 1];
    let scale = Scale { alpha, beta: 1.0 };
    let want = matmul_reference(&stored(a), &stored(b), Some(&stored(d)), scale);
    let tol = tolerance(c.elem(), k) + 2.0 * tolerance(a.elem(), 1) + tolerance(d.elem(), 1);
    assert_close(what, &c.download(&bc), &want, tol);
}

#[test]
fn short_reductions_add_a_matrix_of_any_layout_as_they_write() {
    let mut rng = Rng::new(38);
    let others = Layout2::ALL.into_iter().rev().cycle();
    let third = Layout2::ALL.into_iter().cycle().skip(2);
    for (((lc, ld), la), (k, elem)) in Layout2::ALL.into_iter().zip(others).zip(third).zip([
        (8, ElemType::F32),
        (3, ElemType::F16),
        (16, ElemType::F32),
        (1, ElemType::F16),
        (5, ElemType::F32),
        (8, ElemType::F16),
        (12, ElemType::F32),
    ]) {
        // LoRA's δ = s · u·Bᵀ added to the base layer's output, at extents no tile divides.
        let (m, n) = (203, 70);
        let a = matrix(&mut rng, "u", la, (m, k), true, elem);
        let b = matrix(&mut rng, "b", Layout2::RowMajorT, (k, n), false, elem);
        let c = matrix(&mut rng, "adapted", lc, (m, n), true, elem);
        // D in another layout than C's, and in C's own (read four at a time along the axis C
        // is written four at a time along, where the layout has one).
        for ld in [ld, lc] {
            let d = matrix(&mut rng, "y", ld, (m, n), true, elem);
            let what = format!("[{m}, {k}] {la:?} · B + [{m}, {n}] {ld:?} → {lc:?}, {elem:?}");
            check_added(&what, &a, &b, &d, &c, 2.5);
        }
    }
}

#[test]
fn only_a_short_reduction_adds_a_matrix_of_its_own_extents() {
    let mut rng = Rng::new(39);
    let f32 = ElemType::F32;
    // Eight columns but a reduction of 40: the thin kernel, which adds nothing.
    let a = matrix(&mut rng, "x", Layout2::RowMajor, (64, 40), true, f32);
    let b = matrix(&mut rng, "a", Layout2::RowMajor, (40, 8), true, f32);
    let c = matrix(&mut rng, "u", Layout2::RowMajor, (64, 8), true, f32);
    match NarrowMatmulOp::new_added(gpu(), &a.view, &b.view, &c.view, &c.view) {
        Err(OpError::Unsupported { why, .. }) => assert!(why.contains("at most 16"), "{why}"),
        other => panic!("expected Unsupported, got {other:?}"),
    }
    // A matrix to add whose static extent differs from C's is a shape error.
    let a = matrix(&mut rng, "u", Layout2::RowMajor, (64, 8), true, f32);
    let b = matrix(&mut rng, "b", Layout2::RowMajor, (8, 30), true, f32);
    let c = matrix(&mut rng, "y", Layout2::RowMajor, (64, 30), true, f32);
    let d = matrix(&mut rng, "d", Layout2::RowMajor, (64, 31), true, f32);
    let err = NarrowMatmulOp::new_added(gpu(), &a.view, &b.view, &d.view, &c.view).unwrap_err();
    assert!(matches!(err, OpError::Shape { .. }), "{err}");
    // At run time too: a `d` of other rows than C's is refused, recording nothing.
    let op = NarrowMatmulOp::new_added(gpu(), &a.view, &b.view, &c.view, &c.view).unwrap();
    // Read through the view `d` was built for (C's), bound to other rows.
    let rows = matrix(&mut rng, "y", Layout2::RowMajor, (63, 30), true, f32);
    let gpu = gpu();
    let (ba, bb, bc, bd) = (
        a.upload(gpu),
        b.upload(gpu),
        c.upload(gpu),
        rows.upload(gpu),
    );
    let mut batch = gpu.batch();
    let err = op
        .record_added(
            &mut batch,
            &a.gpu_arg(&ba),
            &b.gpu_arg(&bb),
            &rows.gpu_arg(&bd),
            &c.gpu_arg(&bc),
            1.0,
        )
        .unwrap_err();
    assert!(matches!(err, OpError::Shape { .. }), "{err}");
    // A plain op refuses to add.
    let plain = NarrowMatmulOp::new(gpu, &a.view, &b.view, &c.view).unwrap();
    let err = plain
        .record_added(
            &mut batch,
            &a.gpu_arg(&ba),
            &b.gpu_arg(&bb),
            &c.gpu_arg(&bc),
            &c.gpu_arg(&bc),
            1.0,
        )
        .unwrap_err();
    assert!(err.to_string().contains("built to add nothing"), "{err}");
}

#[test]
fn f16_factors_sum_in_f32() {
    let gpu = gpu();
    assert!(
        gpu.features().f16,
        "lavapipe has SHADER_F16; f16 must be tested"
    );
    let mut rng = Rng::new(35);
    let f16 = ElemType::F16;
    // LoRA's products at rank 8: u = x·Aᵀ, δ = u·Bᵀ, dA = duᵀ·x.
    let (tokens, d, r) = (517, 96, 8);
    let x = matrix(&mut rng, "x", Layout2::RowMajor, (tokens, d), true, f16);
    let a_t = matrix(&mut rng, "a", Layout2::RowMajorT, (d, r), true, f16);
    let u = matrix(&mut rng, "u", Layout2::RowMajor, (tokens, r), true, f16);
    check("u = x·Aᵀ", &x, &a_t, &u, Scale::OVERWRITE);
    let b_t = matrix(&mut rng, "b", Layout2::RowMajorT, (r, d), false, f16);
    let delta = matrix(&mut rng, "delta", Layout2::RowMajor, (tokens, d), true, f16);
    check("δ = u·Bᵀ", &u, &b_t, &delta, Scale::ACCUMULATE);
    let u_t = matrix(&mut rng, "du", Layout2::RowMajorT, (r, tokens), false, f16);
    let x2 = matrix(&mut rng, "x", Layout2::RowMajor, (tokens, d), false, f16);
    let (view, bind) = view_2d("da", Layout2::RowMajorT, d, r, ElemType::F32);
    let view = view.transpose("rows", "cols").unwrap();
    let da = Tensor::random(&mut rng, view, bind, -1.0, 1.0);
    check("dA = duᵀ·x", &u_t, &x2, &da, Scale::OVERWRITE);
}

/// `[batch, rows, cols]` with a run-time batch, stored `[rows, batch, cols]` and read through a
/// permutation.
fn batched(rng: &mut Rng, name: &str, (batch, rows, cols): (u32, u32, u32)) -> Tensor {
    let layout = LayoutSpec::new(name)
        .axis("rows", rows)
        .dyn_axis("batch")
        .axis("cols", cols)
        .build()
        .unwrap();
    let view: View = layout.view().permute(&["batch", "rows", "cols"]).unwrap();
    Tensor::random(rng, view, vec![("batch".to_owned(), batch)], -1.0, 1.0)
}

#[test]
fn batched_products_read_permuted_views() {
    let mut rng = Rng::new(36);
    let batch = 3;
    for (m, n, k) in [(150, 8, 70), (6, 90, 70), (150, 90, 8)] {
        let a = batched(&mut rng, "a", (batch, m, k));
        let b = batched(&mut rng, "b", (batch, k, n));
        let c = batched(&mut rng, "c", (batch, m, n));
        for scale in SCALES {
            check(
                &format!("batched {m} × {n} × {k}, {scale:?}"),
                &a,
                &b,
                &c,
                scale,
            );
        }
    }
}

#[test]
fn more_blocks_of_rows_than_a_grid_dimension_holds_fold_into_a_second() {
    // A row-major A is read four elements of k at a time, in blocks of 8 rows a workgroup:
    // past 8 × the device's limit of workgroups per dimension, the blocks take two dimensions.
    let gpu = gpu();
    let m = 8 * gpu.max_workgroups_per_dimension() + 37;
    let mut rng = Rng::new(38);
    let a = matrix(
        &mut rng,
        "a",
        Layout2::RowMajor,
        (m, 20),
        true,
        ElemType::F32,
    );
    let b = matrix(
        &mut rng,
        "b",
        Layout2::RowMajor,
        (20, 2),
        true,
        ElemType::F32,
    );
    let c = matrix(
        &mut rng,
        "c",
        Layout2::RowMajor,
        (m, 2),
        true,
        ElemType::F32,
    );
    assert!(runs(&a, &b, &c, "wide operand `a` loaded K"));
    check(&format!("{m} rows"), &a, &b, &c, Scale::OVERWRITE);
}

#[test]
fn a_product_without_a_narrow_side_is_unsupported() {
    let mut rng = Rng::new(37);
    let a = matrix(
        &mut rng,
        "a",
        Layout2::RowMajor,
        (40, 17),
        true,
        ElemType::F32,
    );
    let b = matrix(
        &mut rng,
        "b",
        Layout2::RowMajor,
        (17, 30),
        true,
        ElemType::F32,
    );
    let c = matrix(
        &mut rng,
        "c",
        Layout2::RowMajor,
        (40, 30),
        true,
        ElemType::F32,
    );
    match NarrowMatmulOp::new(gpu(), &a.view, &b.view, &c.view) {
        Err(OpError::Unsupported { why, .. }) => {
            assert!(why.contains("static extent of at most 16"), "{why}");
        }
        other => panic!("expected Unsupported, got {other:?}"),
    }
    // A call whose shapes disagree with each other is a shape error, recording nothing.
    let b = matrix(
        &mut rng,
        "b",
        Layout2::RowMajor,
        (17, 8),
        true,
        ElemType::F32,
    );
    let c = matrix(
        &mut rng,
        "c",
        Layout2::RowMajor,
        (40, 8),
        true,
        ElemType::F32,
    );
    let op = NarrowMatmulOp::new(gpu(), &a.view, &b.view, &c.view).unwrap();
    let short = matrix(
        &mut rng,
        "c",
        Layout2::RowMajor,
        (39, 8),
        true,
        ElemType::F32,
    );
    let gpu = gpu();
    let (ba, bb, bc) = (a.upload(gpu), b.upload(gpu), short.upload(gpu));
    let mut batch = gpu.batch();
    let err = op
        .record(
            &mut batch,
            &a.gpu_arg(&ba),
            &b.gpu_arg(&bb),
            &short.gpu_arg(&bc),
            Scale::OVERWRITE,
        )
        .unwrap_err();
    assert!(matches!(err, OpError::Shape { .. }), "{err}");
    assert!(err.to_string().contains("C is"), "{err}");
}
