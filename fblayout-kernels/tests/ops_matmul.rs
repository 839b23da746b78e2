//! Matrix products: the CPU twin and the GPU kernels against a naive `f64` triple loop, under
//! every layout of A, B and C, at shapes that no tile divides, batched through permuted,
//! split, merged and broadcast views, with alpha and beta, in f32 and f16; the linear layer's
//! backward against finite differences; and typed errors for bad input.

mod support;

use fblayout_core::layout::{ElemType, LayoutSpec, View};
use fblayout_kernels::ops::OpError;
use fblayout_kernels::ops::matmul::linear::{linear_backward_cpu, linear_forward_cpu};
use fblayout_kernels::ops::matmul::{
    LinearOp, MatmulOp, Output, Scale, TileConfig, Tiling, matmul_cpu,
};
use fblayout_kernels::runtime::GpuBuffer;
use fblayout_kernels::tensor::GpuArg;
use support::{
    Layout2, Rng, Tensor, assert_close, gpu, gpu_elems, matmul_reference as reference, tolerance,
    view_2d,
};

/// Rows and columns of C, and the reduction: odd, so no tile or vector divides them.
const M: u32 = 13;
const N: u32 = 20;
const K: u32 = 37;

/// The CPU twin in `T`: C starts as `c`'s values (or NaN when `c` is poisoned).
fn cpu<T: fblayout_kernels::cpu::Real>(
    a: &Tensor,
    b: &Tensor,
    c: &Tensor,
    scale: Scale,
) -> Vec<f64> {
    let (ha, hb) = (a.host::<T>(), b.host::<T>());
    let mut hc = c.host::<T>();
    matmul_cpu(&a.arg(&ha), &b.arg(&hb), &mut c.arg_mut(&mut hc), scale).unwrap();
    c.read_host(&hc)
}

/// The GPU kernel with `plan` (or the op's own choice); C starts as `c`'s values, or NaN
/// everywhere when `poison`.
fn gpu_run(
    op: &MatmulOp,
    plan: Option<Tiling>,
    a: &Tensor,
    b: &Tensor,
    c: &Tensor,
    poison: bool,
    scale: Scale,
) -> Vec<f64> {
    let gpu = gpu();
    let (ba, bb) = (a.upload(gpu), b.upload(gpu));
    let bc = if poison {
        c.poisoned(gpu)
    } else {
        c.upload(gpu)
    };
    let mut batch = gpu.batch();
    let (ga, gb, gc) = (a.gpu_arg(&ba), b.gpu_arg(&bb), c.gpu_arg(&bc));
    match plan {
        Some(plan) => op.record_plan(&mut batch, plan, &ga, &gb, &gc, scale),
        None => op.record(&mut batch, &ga, &gb, &gc, scale),
    }
    .unwrap();
    batch.submit().unwrap();
    c.download(&bc)
}

/// Random A `[m, k]`, B `[k, n]` and a C `[m, n]` holding random old values, in the given
/// layouts.
fn matrices(
    rng: &mut Rng,
    layouts: [Layout2; 3],
    (m, n, k): (u32, u32, u32),
    elem: ElemType,
) -> (Tensor, Tensor, Tensor) {
    let [la, lb, lc] = layouts;
    let (va, bind_a) = view_2d("a", la, m, k, elem);
    let (vb, bind_b) = view_2d("b", lb, k, n, elem);
    let (vc, bind_c) = view_2d("c", lc, m, n, elem);
    (
        Tensor::random(rng, va, bind_a, -1.0, 1.0),
        Tensor::random(rng, vb, bind_b, -1.0, 1.0),
        Tensor::random(rng, vc, bind_c, -1.0, 1.0),
    )
}

fn every_combination() -> impl Iterator<Item = [Layout2; 3]> {
    Layout2::ALL.into_iter().flat_map(|a| {
        Layout2::ALL
            .into_iter()
            .flat_map(move |b| Layout2::ALL.into_iter().map(move |c| [a, b, c]))
    })
}

#[test]
fn cpu_matches_the_definition_under_every_layout_combination() {
    let mut rng = Rng::new(1);
    for layouts in every_combination() {
        let (a, b, c) = matrices(&mut rng, layouts, (M, N, K), ElemType::F32);
        let want = reference(&a, &b, None, Scale::OVERWRITE);
        let got = cpu::<f64>(&a, &b, &c, Scale::OVERWRITE);
        assert_close(&format!("{layouts:?}"), &got, &want, 1e-12);
    }
}

#[test]
fn gpu_matches_the_definition_under_every_layout_combination() {
    let gpu = gpu();
    let mut rng = Rng::new(2);
    for layouts in every_combination() {
        let (a, b, c) = matrices(&mut rng, layouts, (M, N, K), ElemType::F32);
        let op = MatmulOp::new(gpu, &a.view, &b.view, &c.view).unwrap();
        let want = reference(&a, &b, None, Scale::OVERWRITE);
        // The least tiling keeps the shaders quick to compile on lavapipe; 13 × 20 is still
        // two partial tiles, and 37 ten k-steps.
        let plan = Tiling {
            config: TileConfig::TINY,
            split_k: 1,
        };
        let got = gpu_run(&op, Some(plan), &a, &b, &c, true, Scale::OVERWRITE);
        assert_close(
            &format!("{layouts:?}"),
            &got,
            &want,
            tolerance(ElemType::F32, K as usize),
        );
    }
}

/// A view of `base`'s tensor holding what `base` holds (through `view`'s own index map): for
/// views whose elements repeat (broadcasts), whose values can't be drawn one by one.
fn through(base: &Tensor, view: View) -> Tensor {
    let stored = base.host::<f64>();
    let pairs: Vec<(&str, u32)> = base.bind.iter().map(|(a, n)| (a.as_str(), *n)).collect();
    let bound = view.bind(&pairs).unwrap();
    let mut values = Vec::with_capacity(bound.logical_len() as usize);
    bound.for_each(|_, _, off| values.push(stored[off as usize]));
    Tensor::new(view, base.bind.clone(), values)
}

/// The tilings of the op's candidates and the tiny one, each direct and split three ways.
fn plans(op: &MatmulOp) -> Vec<Tiling> {
    op.candidates()
        .iter()
        .map(|c| c.0)
        .chain([TileConfig::TINY])
        .flat_map(|config| [1, 3].map(|split_k| Tiling { config, split_k }))
        .collect()
}

#[test]
fn every_tiling_and_split_handles_products_larger_than_a_tile() {
    let gpu = gpu();
    let mut rng = Rng::new(3);
    // 130 rows: one full 128-row tile and a partial one; 129: an odd reduction.
    let shape = (130, 70, 129);
    let all_plans = [
        [Layout2::RowMajor; 3],
        [Layout2::RTileT(4), Layout2::RTileT(8), Layout2::RTileT(4)],
    ];
    let large_only = [
        [Layout2::ColMajor, Layout2::RowMajorT, Layout2::ColMajor],
        [Layout2::RTile(8), Layout2::RTile(4), Layout2::RTile(8)],
    ];
    for (layouts, every) in all_plans
        .iter()
        .map(|l| (l, true))
        .chain(large_only.iter().map(|l| (l, false)))
    {
        let (a, b, c) = matrices(&mut rng, *layouts, shape, ElemType::F32);
        let op = MatmulOp::new(gpu, &a.view, &b.view, &c.view).unwrap();
        let want = reference(&a, &b, None, Scale::OVERWRITE);
        let tried = if every {
            plans(&op)
        } else {
            vec![
                Tiling {
                    config: TileConfig::LARGE,
                    split_k: 1,
                },
                Tiling {
                    config: TileConfig::LARGE,
                    split_k: 2,
                },
            ]
        };
        for plan in tried {
            let got = gpu_run(&op, Some(plan), &a, &b, &c, true, Scale::OVERWRITE);
            assert_close(
                &format!("{layouts:?} {plan}"),
                &got,
                &want,
                tolerance(ElemType::F32, shape.2 as usize),
            );
        }
        // And the op's own choice.
        let got = gpu_run(&op, None, &a, &b, &c, true, Scale::OVERWRITE);
        assert_close(
            &format!("{layouts:?} chosen"),
            &got,
            &want,
            tolerance(ElemType::F32, shape.2 as usize),
        );
    }
}

#[test]
fn alpha_and_beta_scale_accumulate_and_never_read_c_when_beta_is_zero() {
    let gpu = gpu();
    let mut rng = Rng::new(4);
    let layouts = [Layout2::RTile(4), Layout2::RowMajor, Layout2::RTileT(8)];
    let (a, b, c) = matrices(&mut rng, layouts, (M, N, K), ElemType::F32);
    let op = MatmulOp::new(gpu, &a.view, &b.view, &c.view).unwrap();
    let tol = tolerance(ElemType::F32, K as usize);
    let direct = Tiling {
        config: TileConfig::TINY,
        split_k: 1,
    };
    let split = Tiling {
        config: TileConfig::TINY,
        split_k: 3,
    };
    for plan in [direct, split] {
        // beta = 0: C holds NaN, and must not be read.
        let scale = Scale {
            alpha: 0.5,
            beta: 0.0,
        };
        let want = reference(&a, &b, None, scale);
        let got = gpu_run(&op, Some(plan), &a, &b, &c, true, scale);
        assert_close(&format!("{plan}: beta 0 over NaN"), &got, &want, tol);
        // beta = 1 accumulates; other factors blend.
        for scale in [
            Scale::ACCUMULATE,
            Scale {
                alpha: -1.5,
                beta: 0.25,
            },
        ] {
            let want = reference(&a, &b, Some(&c), scale);
            let got = gpu_run(&op, Some(plan), &a, &b, &c, false, scale);
            assert_close(&format!("{plan}: {scale:?}"), &got, &want, tol);
        }
    }
    // The CPU twin likewise.
    let nan = c.with_values(vec![f64::NAN; c.values.len()]);
    let scale = Scale {
        alpha: 2.0,
        beta: 0.0,
    };
    assert_close(
        "cpu: beta 0 over NaN",
        &cpu::<f64>(&a, &b, &nan, scale),
        &reference(&a, &b, None, scale),
        1e-12,
    );
    assert_close(
        "cpu: accumulate",
        &cpu::<f64>(&a, &b, &c, Scale::ACCUMULATE),
        &reference(&a, &b, Some(&c), Scale::ACCUMULATE),
        1e-12,
    );
}

#[test]
fn f16_storage_sums_in_f32() {
    let gpu = gpu();
    assert!(
        gpu_elems().contains(&ElemType::F16),
        "lavapipe has SHADER_F16; the f16 path must be tested"
    );
    let mut rng = Rng::new(5);
    for layouts in [
        [Layout2::RowMajor; 3],
        [Layout2::RTile(4), Layout2::RTileT(8), Layout2::ColMajor],
        [Layout2::RowMajorT, Layout2::RTile(8), Layout2::RTileT(4)],
    ] {
        let (a, b, c) = matrices(&mut rng, layouts, (M, N, 36), ElemType::F16);
        let op = MatmulOp::new(gpu, &a.view, &b.view, &c.view).unwrap();
        // The reference sums what f16 holds.
        let stored = |t: &Tensor| t.with_values(t.read_host(&t.host::<half::f16>()));
        let want = reference(&stored(&a), &stored(&b), None, Scale::OVERWRITE);
        for plan in [
            None,
            Some(Tiling {
                config: TileConfig::TINY,
                split_k: 3,
            }),
        ] {
            let got = gpu_run(&op, plan, &a, &b, &c, true, Scale::OVERWRITE);
            assert_close(
                &format!("f16 {layouts:?} {plan:?}"),
                &got,
                &want,
                tolerance(ElemType::F16, 36),
            );
        }
        let got = cpu::<half::f16>(&a, &b, &c, Scale::OVERWRITE);
        assert_close(
            &format!("cpu f16 {layouts:?}"),
            &got,
            &want,
            tolerance(ElemType::F16, 36),
        );
    }
    // f16 operands into an f32 output.
    let (a, b, _) = matrices(&mut rng, [Layout2::RTile(4); 3], (M, N, 36), ElemType::F16);
    let (vc, bind) = view_2d("c", Layout2::RowMajor, M, N, ElemType::F32);
    let c = Tensor::new(vc, bind, vec![0.0; (M * N) as usize]);
    let op = MatmulOp::new(gpu, &a.view, &b.view, &c.view).unwrap();
    let stored = |t: &Tensor| t.with_values(t.read_host(&t.host::<half::f16>()));
    let want = reference(&stored(&a), &stored(&b), None, Scale::OVERWRITE);
    let got = gpu_run(&op, None, &a, &b, &c, true, Scale::OVERWRITE);
    assert_close("f16 · f16 → f32", &got, &want, tolerance(ElemType::F32, 36));
}

/// `[batch, seq, heads, head_dim]` with run-time batch and seq, row-major or R-Tile (tiles over
/// seq and head_dim).
fn attention_layout(name: &str, heads: u32, head_dim: u32, rtile: bool) -> View {
    let spec = LayoutSpec::new(name).dyn_axis("batch").dyn_axis("seq");
    let spec = if rtile {
        spec.tile(4, true)
            .axis("heads", heads)
            .axis("head_dim", head_dim)
            .tile(4, true)
            .rtile()
            .reduce_forward(["head_dim"])
            .reduce_backward(["seq"])
    } else {
        spec.axis("heads", heads).axis("head_dim", head_dim)
    };
    spec.build().unwrap().view()
}

/// Checks `C = A·B` through the views of `a`, `b` and `c`, on the GPU (the op's own plan and
/// `plans`) and on the CPU, against the definition.
fn check_product(what: &str, a: &Tensor, b: &Tensor, c: &Tensor, plans: &[Tiling]) {
    let op = MatmulOp::new(gpu(), &a.view, &b.view, &c.view).unwrap();
    let want = reference(a, b, None, Scale::OVERWRITE);
    let k = a.dims()[a.dims().len() - 1];
    for plan in [None].into_iter().chain(plans.iter().copied().map(Some)) {
        let got = gpu_run(&op, plan, a, b, c, true, Scale::OVERWRITE);
        let tol = tolerance(ElemType::F32, k);
        assert_close(&format!("{what} {plan:?}"), &got, &want, tol);
    }
    let got = cpu::<f64>(a, b, c, Scale::OVERWRITE);
    assert_close(&format!("cpu {what}"), &got, &want, 1e-12);
}

/// A random `[batch, seq, heads, head_dim]` tensor, row-major or R-Tile.
fn attention_tensor(
    rng: &mut Rng,
    name: &str,
    heads: u32,
    rtile: bool,
    bind: &[(String, u32)],
) -> Tensor {
    Tensor::random(
        rng,
        attention_layout(name, heads, 8, rtile),
        bind.to_vec(),
        -1.0,
        1.0,
    )
}

/// `t` read with its axes in `order`.
fn permuted(t: &Tensor, order: &[&str]) -> Tensor {
    through(t, t.view.permute(order).unwrap())
}

/// A `[batch, <static axes>, seq, key]` tensor of zeros (scores), with `key` = 9.
fn scores(axes: &[(&str, u32)], bind: &[(String, u32)]) -> Tensor {
    let mut spec = LayoutSpec::new("s").dyn_axis("batch");
    for &(name, n) in axes {
        spec = spec.axis(name, n);
    }
    let view = spec.dyn_axis("seq").axis("key", 9).build().unwrap().view();
    let n: u32 = axes.iter().map(|a| a.1).product();
    Tensor::new(view, bind.to_vec(), vec![0.0; (2 * n * 9 * 9) as usize])
}

const BHSD: [&str; 4] = ["batch", "heads", "seq", "head_dim"];

#[test]
fn attention_products_read_permuted_transposed_split_and_broadcast_views() {
    let mut rng = Rng::new(6);
    let bind: Vec<(String, u32)> = vec![("batch".into(), 2), ("seq".into(), 9)];
    let split = [Tiling {
        config: TileConfig::TINY,
        split_k: 2,
    }];
    for rtile in [false, true] {
        // Scores S = Q·Kᵀ per (batch, head): [b, h, s, d] · [b, h, d, s].
        let q = attention_tensor(&mut rng, "q", 4, rtile, &bind);
        let k = attention_tensor(&mut rng, "k", 4, rtile, &bind);
        let s = scores(&[("heads", 4)], &bind);
        let k_t = permuted(&k, &["batch", "heads", "head_dim", "seq"]);
        check_product(
            &format!("Q·Kᵀ rtile={rtile}"),
            &permuted(&q, &BHSD),
            &k_t,
            &s,
            &[],
        );
        // O = P·V written through O's permuted view: [b, h, s, s] · [b, h, s, d] → [b, h, s, d].
        let p = Tensor::random(&mut rng, s.view.clone(), bind.clone(), 0.0, 1.0);
        let v = attention_tensor(&mut rng, "v", 4, rtile, &bind);
        let o = attention_tensor(&mut rng, "o", 4, rtile, &bind);
        check_product(
            &format!("P·V rtile={rtile}"),
            &p,
            &permuted(&v, &BHSD),
            &permuted(&o, &BHSD),
            &split,
        );
    }

    // Grouped-query attention: 4 query heads in 2 groups share 2 key heads. Q's heads split
    // into (kv head, group); K is broadcast along the group.
    let q = attention_tensor(&mut rng, "q", 4, true, &bind);
    let k = attention_tensor(&mut rng, "k", 2, false, &bind);
    let q_g = q
        .view
        .split("heads", &[("kv", Some(2)), ("group", None)])
        .unwrap()
        .permute(&["batch", "kv", "group", "seq", "head_dim"])
        .unwrap();
    let k_g = k
        .view
        .permute(&["batch", "heads", "head_dim", "seq"])
        .unwrap()
        .broadcast("group", 2, 2)
        .unwrap();
    let s = scores(&[("kv", 2), ("group", 2)], &bind);
    check_product(
        "GQA scores",
        &through(&q, q_g),
        &through(&k, k_g),
        &s,
        &split,
    );

    // Tokens as a merged view: x [batch, seq, hidden] read as [batch·seq, hidden].
    let hidden = |name: &str, n: u32| {
        LayoutSpec::new(name)
            .dyn_axis("batch")
            .dyn_axis("seq")
            .axis("hidden", n)
            .build()
            .unwrap()
            .view()
    };
    let tokens = |t: &Tensor| through(t, t.view.merge(&["batch", "seq"], "tokens").unwrap());
    let x = Tensor::random(&mut rng, hidden("x", 12), bind.clone(), -1.0, 1.0);
    let y = Tensor::random(&mut rng, hidden("y", 20), bind.clone(), -1.0, 1.0);
    let (wv, wbind) = view_2d("w", Layout2::RTile(4), 12, 20, ElemType::F32);
    let w = Tensor::random(&mut rng, wv, wbind, -1.0, 1.0);
    check_product("merged tokens", &tokens(&x), &w, &tokens(&y), &split);
}

/// The linear layer's tensors: x `[tokens, d_in]`, w `[d_in, d_out]`, y `[tokens, d_out]`.
fn linear_tensors(
    rng: &mut Rng,
    [lx, lw, ly]: [Layout2; 3],
    (tokens, d_in, d_out): (u32, u32, u32),
) -> (Tensor, Tensor, Tensor) {
    let (xv, xb) = view_2d("x", lx, tokens, d_in, ElemType::F32);
    let (wv, wb) = view_2d("w", lw, d_in, d_out, ElemType::F32);
    let (yv, yb) = view_2d("y", ly, tokens, d_out, ElemType::F32);
    (
        Tensor::random(rng, xv, xb, -1.0, 1.0),
        Tensor::random(rng, wv, wb, -1.0, 1.0),
        Tensor::random(rng, yv, yb, -1.0, 1.0),
    )
}

/// The CPU forward in `T`, into `y`'s layout.
fn cpu_forward<T: fblayout_kernels::cpu::Real>(x: &Tensor, w: &Tensor, y: &Tensor) -> Vec<f64> {
    let (hx, hw) = (x.host::<T>(), w.host::<T>());
    let mut hy = y.host::<T>();
    linear_forward_cpu(
        &x.arg(&hx),
        &w.arg(&hw),
        &mut y.arg_mut(&mut hy),
        Output::Overwrite,
    )
    .unwrap();
    y.read_host(&hy)
}

/// The CPU backward in `T`: `dx` overwritten (its buffer starts as `dx`'s values), `dw` written
/// as `out` says over `dw`'s values; returns both.
fn cpu_backward<T: fblayout_kernels::cpu::Real>(
    x: &Tensor,
    w: &Tensor,
    dy: &Tensor,
    dx: &Tensor,
    (dw, out): (&Tensor, Output),
) -> (Vec<f64>, Vec<f64>) {
    let (hx, hw, hdy) = (x.host::<T>(), w.host::<T>(), dy.host::<T>());
    let (mut hdx, mut hdw) = (dx.host::<T>(), dw.host::<T>());
    linear_backward_cpu(
        &x.arg(&hx),
        &w.arg(&hw),
        &dy.arg(&hdy),
        Some((&mut dx.arg_mut(&mut hdx), Output::Overwrite)),
        Some((&mut dw.arg_mut(&mut hdw), out)),
    )
    .unwrap();
    (dx.read_host(&hdx), dw.read_host(&hdw))
}

#[test]
fn linear_backward_matches_finite_differences_in_f64() {
    let mut rng = Rng::new(7);
    let h = 1e-6;
    for layouts in [
        [Layout2::RowMajor; 3],
        [Layout2::RTile(4), Layout2::RowMajorT, Layout2::ColMajor],
        [Layout2::RTileT(8), Layout2::RTile(8), Layout2::RTileT(4)],
    ] {
        let (x, w, y) = linear_tensors(&mut rng, layouts, (9, 8, 10));
        let dy = y.with_values(rng.values(y.values.len(), -1.0, 1.0));
        let forward = |x: &Tensor, w: &Tensor| cpu_forward::<f64>(x, w, &y);
        // loss = Σ dy ⊙ y
        let loss = |y: &[f64]| -> f64 { y.iter().zip(&dy.values).map(|(a, b)| a * b).sum() };
        let (dx, dw) = cpu_backward::<f64>(&x, &w, &dy, &x, (&w, Output::Overwrite));
        let fd_x = support::finite_differences(&x.values, h, |v| {
            loss(&forward(&x.with_values(v.to_vec()), &w))
        });
        let fd_w = support::finite_differences(&w.values, h, |v| {
            loss(&forward(&x, &w.with_values(v.to_vec())))
        });
        assert_close(&format!("dx {layouts:?}"), &dx, &fd_x, 1e-7);
        assert_close(&format!("dw {layouts:?}"), &dw, &fd_w, 1e-7);
    }
}

#[test]
fn linear_layer_on_the_gpu_matches_the_cpu_and_accumulates() {
    let gpu = gpu();
    let mut rng = Rng::new(8);
    for layouts in [
        [Layout2::RowMajor; 3],
        [Layout2::RTile(4), Layout2::RTile(8), Layout2::RTile(4)],
        [Layout2::ColMajor, Layout2::RowMajorT, Layout2::RTileT(8)],
        [Layout2::RTileT(4), Layout2::RTileT(8), Layout2::RowMajor],
    ] {
        let what = format!("{layouts:?}");
        let (x, w, y) = linear_tensors(&mut rng, layouts, (M, K, N));
        let dy = y.with_values(rng.values(y.values.len(), -1.0, 1.0));
        // dw accumulates onto what it held; dx and y are overwritten (poisoned first).
        let dw_old = w.with_values(rng.values(w.values.len(), -1.0, 1.0));
        let op = LinearOp::new(gpu, &x.view, &w.view, &y.view).unwrap();
        let (bx, bw, by, bdy) = (
            x.upload(gpu),
            w.upload(gpu),
            y.poisoned(gpu),
            dy.upload(gpu),
        );
        let (bdx, bdw) = (x.poisoned(gpu), dw_old.upload(gpu));
        let mut batch = gpu.batch();
        let (gx, gw, gy, gdy) = (
            x.gpu_arg(&bx),
            w.gpu_arg(&bw),
            y.gpu_arg(&by),
            dy.gpu_arg(&bdy),
        );
        let (gdx, gdw) = (x.gpu_arg(&bdx), w.gpu_arg(&bdw));
        op.forward(&mut batch, &gx, &gw, &gy, Output::Overwrite)
            .unwrap();
        op.backward(
            &mut batch,
            &gx,
            &gw,
            &gdy,
            Some((&gdx, Output::Overwrite)),
            Some((&gdw, Output::Accumulate)),
        )
        .unwrap();
        batch.submit().unwrap();

        let (want_dx, want_dw) =
            cpu_backward::<f32>(&x, &w, &dy, &x, (&dw_old, Output::Accumulate));
        let tol = tolerance(ElemType::F32, M as usize);
        let want_y = cpu_forward::<f32>(&x, &w, &y);
        assert_close(&format!("{what}: y"), &y.download(&by), &want_y, tol);
        assert_close(&format!("{what}: dx"), &x.download(&bdx), &want_dx, tol);
        assert_close(&format!("{what}: dw"), &w.download(&bdw), &want_dw, tol);

        // The CPU's dw is xᵀ·dy plus the old dw, by the definition.
        let xt = through(&x, x.view.transpose("rows", "cols").unwrap());
        let want = reference(&xt, &dy, Some(&dw_old), Scale::ACCUMULATE);
        assert_close(&format!("{what}: cpu dw"), &want_dw, &want, tol);
    }
}

#[test]
fn linear_products_take_no_more_scratch_than_they_report() {
    // 2048 tokens into 8 × 16 weights: the weight gradient reduces over the tokens into few
    // outputs, so it splits its reduction, into partial sums of scratch.
    let gpu = gpu();
    let mut rng = Rng::new(12);
    let (tokens, d_in, d_out) = (2048, 8, 16);
    for layouts in [[Layout2::RowMajor; 3], [Layout2::RTile(4); 3]] {
        let what = format!("{layouts:?}");
        let (x, w, y) = linear_tensors(&mut rng, layouts, (tokens, d_in, d_out));
        let op = LinearOp::new(gpu, &x.view, &w.view, &y.view).unwrap();
        let elems = [x.elem(), w.elem(), y.elem()];
        let [most_y, most_dx, most_dw] = LinearOp::scratch(tokens, d_in, d_out, elems).unwrap();
        // `y`'s values are the gradient `dy`; the forward writes a buffer of its own.
        let (bx, bw, by, bdy) = (x.upload(gpu), w.upload(gpu), y.poisoned(gpu), y.upload(gpu));
        let (bdx, bdw) = (x.poisoned(gpu), w.poisoned(gpu));
        let (gx, gw, gy, gdy) = (
            x.gpu_arg(&bx),
            w.gpu_arg(&bw),
            y.gpu_arg(&by),
            y.gpu_arg(&bdy),
        );
        let (gdx, gdw) = (x.gpu_arg(&bdx), w.gpu_arg(&bdw));
        let mut batch = gpu.batch();
        op.forward(&mut batch, &gx, &gw, &gy, Output::Overwrite)
            .unwrap();
        let taken_y = batch.release_scratch();
        op.backward(
            &mut batch,
            &gx,
            &gw,
            &gdy,
            Some((&gdx, Output::Overwrite)),
            None,
        )
        .unwrap();
        let taken_dx = batch.release_scratch();
        op.backward(
            &mut batch,
            &gx,
            &gw,
            &gdy,
            None,
            Some((&gdw, Output::Overwrite)),
        )
        .unwrap();
        let taken_dw = batch.release_scratch();
        batch.submit().unwrap();
        for (name, most, taken) in [
            ("y", &most_y, &taken_y),
            ("dx", &most_dx, &taken_dx),
            ("dw", &most_dw, &taken_dw),
        ] {
            assert!(
                most.covers(taken),
                "{what}: {name} took {taken}, reported {most}"
            );
        }
        assert!(!taken_dw.is_empty(), "{what}: dw did not split");
        let (_, want_dw) = cpu_backward::<f32>(&x, &w, &y, &x, (&w, Output::Overwrite));
        let tol = tolerance(ElemType::F32, tokens as usize);
        assert_close(&format!("{what}: dw"), &w.download(&bdw), &want_dw, tol);
    }
}

#[test]
fn bad_input_is_a_typed_error_and_records_nothing() {
    let gpu = gpu();
    let mut rng = Rng::new(9);
    let (a, b, c) = matrices(&mut rng, [Layout2::RowMajor; 3], (M, N, K), ElemType::F32);
    // Static extents that don't fit: A reduces over 37, B over 36; B has 21 columns, C 20.
    let fixed = |rows, cols| {
        LayoutSpec::new("b")
            .axis("rows", rows)
            .axis("cols", cols)
            .build()
            .unwrap()
            .view()
    };
    for (what, bv) in [("k", &fixed(36, N)), ("n", &fixed(K, N + 1))] {
        let err = MatmulOp::new(gpu, &a.view, bv, &c.view).unwrap_err();
        assert!(matches!(err, OpError::Shape { .. }), "{what}: {err}");
    }
    // Ranks: a matrix times a batch, and more than three batch axes.
    let batched = LayoutSpec::new("t")
        .dyn_axis("b")
        .axis("r", M)
        .axis("c", K)
        .build()
        .unwrap();
    let err = MatmulOp::new(gpu, &batched.view(), &b.view, &c.view).unwrap_err();
    assert!(matches!(err, OpError::Shape { .. }), "{err}");
    let deep = LayoutSpec::new("t")
        .axis("a", 1)
        .axis("b", 1)
        .axis("c", 1)
        .axis("d", 1)
        .axis("m", 2)
        .axis("n", 2)
        .build()
        .unwrap()
        .view();
    let err = MatmulOp::new(gpu, &deep, &deep, &deep).unwrap_err();
    assert!(matches!(err, OpError::Shape { .. }), "{err}");
    // Integer elements.
    let (ai, _) = view_2d("a", Layout2::RowMajor, M, K, ElemType::U32);
    let err = MatmulOp::new(gpu, &ai, &b.view, &c.view).unwrap_err();
    assert!(
        matches!(err, OpError::Unsupported { role: "a", .. }),
        "{err}"
    );
    // C written through a broadcast.
    let c1 = LayoutSpec::new("c")
        .dyn_axis("rows")
        .axis("cols", N)
        .build()
        .unwrap();
    let cb = c1.view().broadcast("copy", 2, 0).unwrap();
    let a3 = LayoutSpec::new("a")
        .axis("copy", 2)
        .dyn_axis("rows")
        .axis("cols", K)
        .build()
        .unwrap();
    let b3 = LayoutSpec::new("b")
        .axis("copy", 2)
        .dyn_axis("rows")
        .axis("cols", N)
        .build()
        .unwrap();
    let err = MatmulOp::new(gpu, &a3.view(), &b3.view(), &cb).unwrap_err();
    assert!(
        matches!(err, OpError::Unsupported { role: "c", .. }),
        "{err}"
    );

    let op = MatmulOp::new(gpu, &a.view, &b.view, &c.view).unwrap();
    let mut batch = gpu.batch();
    let (ba, bb, bc) = (a.upload(gpu), b.upload(gpu), c.poisoned(gpu));
    let (ga, gb, gc) = (a.gpu_arg(&ba), b.gpu_arg(&bb), c.gpu_arg(&bc));
    // B bound with one row too many: the reductions differ.
    let b_long = Tensor::random(
        &mut rng,
        b.view.clone(),
        vec![("rows".into(), K + 1)],
        -1.0,
        1.0,
    );
    let bl = b_long.upload(gpu);
    let err = op
        .record(&mut batch, &ga, &b_long.gpu_arg(&bl), &gc, Scale::OVERWRITE)
        .unwrap_err();
    assert!(matches!(err, OpError::Shape { .. }), "{err}");
    // C with other rows than A.
    let c_short = Tensor::random(
        &mut rng,
        c.view.clone(),
        vec![("rows".into(), M - 1)],
        -1.0,
        1.0,
    );
    let cs = c_short.upload(gpu);
    let err = op
        .record(
            &mut batch,
            &ga,
            &gb,
            &c_short.gpu_arg(&cs),
            Scale::OVERWRITE,
        )
        .unwrap_err();
    assert!(matches!(err, OpError::Shape { .. }), "{err}");
    // Another view than the op was built for, also under split-k (two kernels).
    let (other, other_bind) = view_2d("c", Layout2::ColMajor, M, N, ElemType::F32);
    let oc = Tensor::random(&mut rng, other, other_bind, -1.0, 1.0);
    let ob = oc.upload(gpu);
    let split = Tiling {
        config: TileConfig::TINY,
        split_k: 3,
    };
    let err = op
        .record_plan(
            &mut batch,
            split,
            &ga,
            &gb,
            &oc.gpu_arg(&ob),
            Scale::OVERWRITE,
        )
        .unwrap_err();
    assert!(matches!(err, OpError::WrongView { role: "c", .. }), "{err}");
    // A buffer shorter than its layout is refused when the argument is made.
    let short = GpuBuffer::from_slice(gpu, &vec![0f32; (M * K - 1) as usize]).unwrap();
    assert!(GpuArg::bound(&short, &a.view, a.bound.clone()).is_err());
    // A batch that outgrows the grid: more products than workgroups per dimension.
    let many = |name: &str, rows: u32, cols: u32| {
        LayoutSpec::new(name)
            .dyn_axis("p")
            .axis("r", rows)
            .axis("c", cols)
            .build()
            .unwrap()
            .view()
    };
    let products = gpu.max_workgroups_per_dimension() + 1;
    let big: Vec<(String, u32)> = vec![("p".into(), products)];
    let (ta, tb, tc) = (
        Tensor::random(&mut rng, many("a", 1, 4), big.clone(), -1.0, 1.0),
        Tensor::random(&mut rng, many("b", 4, 4), big.clone(), -1.0, 1.0),
        Tensor::random(&mut rng, many("c", 1, 4), big, -1.0, 1.0),
    );
    let (ua, ub, uc) = (ta.upload(gpu), tb.upload(gpu), tc.upload(gpu));
    let many_op = MatmulOp::new(gpu, &ta.view, &tb.view, &tc.view).unwrap();
    let err = many_op
        .record(
            &mut batch,
            &ta.gpu_arg(&ua),
            &tb.gpu_arg(&ub),
            &tc.gpu_arg(&uc),
            Scale::OVERWRITE,
        )
        .unwrap_err();
    assert!(matches!(err, OpError::Shape { .. }), "{err}");
    assert!(batch.is_empty(), "nothing was recorded for refused calls");

    // The CPU twin checks shapes too.
    let (hb, hc) = (b_long.host::<f64>(), c.host::<f64>());
    let ha = a.host::<f64>();
    let mut hc = hc;
    let err = matmul_cpu(
        &a.arg(&ha),
        &b_long.arg(&hb),
        &mut c.arg_mut(&mut hc),
        Scale::OVERWRITE,
    )
    .unwrap_err();
    assert!(matches!(err, OpError::Shape { .. }), "{err}");

    // A linear layer takes matrices.
    let err = LinearOp::new(gpu, &batched.view(), &b.view, &c.view).unwrap_err();
    assert!(matches!(err, OpError::Shape { .. }), "{err}");
}

#[test]
fn wide_accesses_follow_each_operand_s_contiguous_axis() {
    let gpu = gpu();
    let v = |name, l, rows, cols| view_2d(name, l, rows, cols, ElemType::F32).0;
    let axes = |la, lb, lc| {
        MatmulOp::new(
            gpu,
            &v("a", la, M, 36),
            &v("b", lb, 36, N),
            &v("c", lc, M, N),
        )
        .unwrap()
        .vector_axes()
    };
    // Row-major: A along k, B and C along n.
    assert_eq!(
        axes(Layout2::RowMajor, Layout2::RowMajor, Layout2::RowMajor),
        [Some(1), Some(1), Some(1)]
    );
    // Transposed R-Tiles are contiguous along their first view axis: A along m, B along k, C
    // along m.
    assert_eq!(
        axes(Layout2::RTileT(4), Layout2::RTileT(8), Layout2::RTileT(4)),
        [Some(0), Some(0), Some(0)]
    );
    // Column-major with a run-time row count: nothing is provably aligned.
    assert_eq!(
        axes(Layout2::ColMajor, Layout2::ColMajor, Layout2::ColMajor),
        [None, None, None]
    );
    // K = 37 can't be read four at a time from a row-major A.
    let odd = MatmulOp::new(
        gpu,
        &v("a", Layout2::RowMajor, M, K),
        &v("b", Layout2::RowMajor, K, N),
        &v("c", Layout2::RowMajor, M, N),
    )
    .unwrap();
    assert_eq!(odd.vector_axes(), [None, Some(1), Some(1)]);
}

/// `Σ_k A[.., i, k] · B[.., k, j] + bias[j]` on dense row-major values, by the definition.
fn biased_reference(a: &Tensor, b: &Tensor, bias: &Tensor) -> Vec<f64> {
    let n = bias.values.len();
    let mut out = reference(a, b, None, Scale::OVERWRITE);
    for (at, v) in out.iter_mut().enumerate() {
        *v += bias.values[at % n];
    }
    out
}

/// The biases a product `[.., n]` is tested with: a static vector, one of a run-time extent,
/// and one read through a merge of a column-major `[4, n / 4]` matrix (a view whose offsets
/// are not the index: neighbours are `4` apart).
fn biases(rng: &mut Rng, n: u32, elem: ElemType) -> Vec<Tensor> {
    let plain = support::view_1d("bias", "cols", n, elem);
    let (dynamic, bind) = support::view_1d_dyn("bias", "cols", n, elem);
    let merged = support::static_2d(
        "bias",
        4,
        n / 4,
        elem,
        fblayout_core::layout::Order::ColMajor,
    )
    .merge(&["rows", "cols"], "cols")
    .unwrap();
    assert_eq!(n % 4, 0, "the merged bias needs n a multiple of 4");
    [(plain, vec![]), (dynamic, bind), (merged, vec![])]
        .into_iter()
        .map(|(view, bind)| Tensor::random(rng, view, bind, -2.0, 2.0))
        .collect()
}

/// The biased GPU product with `plan` (the op's own choice when `None`), C poisoned first.
fn gpu_biased(
    op: &MatmulOp,
    plan: Option<Tiling>,
    a: &Tensor,
    b: &Tensor,
    bias: &Tensor,
    c: &Tensor,
) -> Vec<f64> {
    let gpu = gpu();
    let (ba, bb, bbias, bc) = (
        a.upload(gpu),
        b.upload(gpu),
        bias.upload(gpu),
        c.poisoned(gpu),
    );
    let (ga, gb, gbias, gc) = (
        a.gpu_arg(&ba),
        b.gpu_arg(&bb),
        bias.gpu_arg(&bbias),
        c.gpu_arg(&bc),
    );
    let mut batch = gpu.batch();
    match plan {
        Some(plan) => op.record_plan_biased(&mut batch, plan, &ga, &gb, &gbias, &gc),
        None => op.record_biased(&mut batch, &ga, &gb, &gbias, &gc),
    }
    .unwrap();
    batch.submit().unwrap();
    c.download(&bc)
}

#[test]
fn biased_products_add_the_bias_to_every_row_under_every_store_and_split() {
    let gpu = gpu();
    let mut rng = Rng::new(10);
    let tiny = |split_k| Tiling {
        config: TileConfig::TINY,
        split_k,
    };
    // C stored along n (row-major), along m (a transposed R-Tile), and one element at a time
    // (column-major with run-time rows); A and B in other layouts, partial R-Tiles included
    // (their padding is NaN).
    for layouts in [
        [Layout2::RowMajor; 3],
        [Layout2::RTile(4), Layout2::RTileT(8), Layout2::RTileT(4)],
        [Layout2::ColMajor, Layout2::RTile(8), Layout2::ColMajor],
        [Layout2::RTileT(8), Layout2::RowMajorT, Layout2::RTile(8)],
    ] {
        let (a, b, c) = matrices(&mut rng, layouts, (M, N, K), ElemType::F32);
        for bias in biases(&mut rng, N, ElemType::F32) {
            let op = MatmulOp::new_biased(gpu, &a.view, &b.view, &bias.view, &c.view).unwrap();
            assert!(op.has_bias());
            let want = biased_reference(&a, &b, &bias);
            for plan in [None, Some(tiny(1)), Some(tiny(3))] {
                let got = gpu_biased(&op, plan, &a, &b, &bias, &c);
                assert_close(
                    &format!("{layouts:?}, bias {}, {plan:?}", bias.view.name()),
                    &got,
                    &want,
                    tolerance(ElemType::F32, K as usize),
                );
            }
        }
    }
}

#[test]
fn biased_products_larger_than_a_tile_and_in_f16() {
    let gpu = gpu();
    let mut rng = Rng::new(11);
    // 130 × 72 × 129: a full and a partial 128-row tile, a partial column tile, split-k.
    let shape = (130, 72, 129);
    let (a, b, c) = matrices(
        &mut rng,
        [Layout2::RTile(4), Layout2::RowMajor, Layout2::RowMajor],
        shape,
        ElemType::F32,
    );
    let bias = biases(&mut rng, shape.1, ElemType::F32).remove(0);
    let op = MatmulOp::new_biased(gpu, &a.view, &b.view, &bias.view, &c.view).unwrap();
    let want = biased_reference(&a, &b, &bias);
    for split_k in [1, 2] {
        let plan = Tiling {
            config: TileConfig::LARGE,
            split_k,
        };
        let got = gpu_biased(&op, Some(plan), &a, &b, &bias, &c);
        let tol = tolerance(ElemType::F32, shape.2 as usize);
        assert_close(&format!("large {plan}"), &got, &want, tol);
    }

    // f16 A, B, bias and C (sums in f32), and an f16 bias into an f32 C.
    let stored = |t: &Tensor| t.with_values(t.read_host(&t.host::<half::f16>()));
    for (layouts, c_elem) in [
        ([Layout2::RowMajor; 3], ElemType::F16),
        (
            [Layout2::RTileT(4), Layout2::RTile(8), Layout2::RTileT(8)],
            ElemType::F16,
        ),
        ([Layout2::RTile(4); 3], ElemType::F32),
    ] {
        let (a, b, _) = matrices(&mut rng, layouts, (M, N, 36), ElemType::F16);
        let (vc, bind) = view_2d("c", layouts[2], M, N, c_elem);
        let c = Tensor::new(vc, bind, vec![0.0; (M * N) as usize]);
        for bias in biases(&mut rng, N, ElemType::F16) {
            let op = MatmulOp::new_biased(gpu, &a.view, &b.view, &bias.view, &c.view).unwrap();
            let want = biased_reference(&stored(&a), &stored(&b), &stored(&bias));
            for split_k in [1, 3] {
                let plan = Tiling {
                    config: TileConfig::TINY,
                    split_k,
                };
                let got = gpu_biased(&op, Some(plan), &a, &b, &bias, &c);
                assert_close(
                    &format!(
                        "f16 {layouts:?} → {c_elem}, bias {}, {plan}",
                        bias.view.name()
                    ),
                    &got,
                    &want,
                    tolerance(c_elem, 36).max(tolerance(ElemType::F16, 36)),
                );
            }
        }
    }
}

#[test]
fn biased_linear_forward_adds_b_and_keeps_the_backward() {
    let gpu = gpu();
    let mut rng = Rng::new(12);
    for layouts in [
        [Layout2::RowMajor; 3],
        [Layout2::RTile(4), Layout2::RTile(8), Layout2::RTileT(4)],
    ] {
        let what = format!("{layouts:?}");
        let (x, w, y) = linear_tensors(&mut rng, layouts, (M, K, N));
        let b = biases(&mut rng, N, ElemType::F32).remove(0);
        let dy = y.with_values(rng.values(y.values.len(), -1.0, 1.0));
        let op = LinearOp::new_biased(gpu, &x.view, &w.view, &b.view, &y.view).unwrap();
        assert!(op.has_bias());
        assert!(
            !LinearOp::new(gpu, &x.view, &w.view, &y.view)
                .unwrap()
                .has_bias()
        );
        let (bx, bw, bb, by, bdy, bdx) = (
            x.upload(gpu),
            w.upload(gpu),
            b.upload(gpu),
            y.poisoned(gpu),
            dy.upload(gpu),
            x.poisoned(gpu),
        );
        let (gx, gw, gb, gy, gdy, gdx) = (
            x.gpu_arg(&bx),
            w.gpu_arg(&bw),
            b.gpu_arg(&bb),
            y.gpu_arg(&by),
            dy.gpu_arg(&bdy),
            x.gpu_arg(&bdx),
        );
        // Tuning a biased op works (here it has no tensor-core product to tune).
        op.tune(gpu, &gx, &gw, &gy).unwrap();
        let mut batch = gpu.batch();
        op.forward_biased(&mut batch, &gx, &gw, &gb, &gy).unwrap();
        op.backward(
            &mut batch,
            &gx,
            &gw,
            &gdy,
            Some((&gdx, Output::Overwrite)),
            None,
        )
        .unwrap();
        batch.submit().unwrap();
        let tol = tolerance(ElemType::F32, K as usize);
        assert_close(
            &format!("{what}: y"),
            &y.download(&by),
            &biased_reference(&x, &w, &b),
            tol,
        );
        // dx = dy · wᵀ, by the definition: the bias does not enter it.
        let wt = through(&w, w.view.transpose("rows", "cols").unwrap());
        let want_dx = reference(&dy, &wt, None, Scale::OVERWRITE);
        assert_close(&format!("{what}: dx"), &x.download(&bdx), &want_dx, tol);
    }
}

#[test]
fn a_bias_of_the_wrong_shape_or_a_missing_bias_is_a_typed_error() {
    let gpu = gpu();
    let mut rng = Rng::new(13);
    let (a, b, c) = matrices(&mut rng, [Layout2::RowMajor; 3], (M, N, K), ElemType::F32);
    // A bias of another length than C's columns, a matrix, integers.
    let short = support::view_1d("bias", "cols", N - 1, ElemType::F32);
    let err = MatmulOp::new_biased(gpu, &a.view, &b.view, &short, &c.view).unwrap_err();
    assert!(matches!(err, OpError::Shape { .. }), "{err}");
    let err = LinearOp::new_biased(gpu, &a.view, &b.view, &short, &c.view).unwrap_err();
    assert!(matches!(err, OpError::Shape { .. }), "{err}");
    let matrix = support::static_2d(
        "bias",
        1,
        N,
        ElemType::F32,
        fblayout_core::layout::Order::RowMajor,
    );
    let err = MatmulOp::new_biased(gpu, &a.view, &b.view, &matrix, &c.view).unwrap_err();
    assert!(matches!(err, OpError::Shape { .. }), "{err}");
    let ints = support::view_1d("bias", "cols", N, ElemType::U32);
    let err = MatmulOp::new_biased(gpu, &a.view, &b.view, &ints, &c.view).unwrap_err();
    assert!(
        matches!(err, OpError::Unsupported { role: "bias", .. }),
        "{err}"
    );

    // A run-time bias bound to the wrong length, a bias through another view, and a bias
    // given to an op without one or withheld from an op with one: refused, nothing recorded.
    let (dynamic, _) = support::view_1d_dyn("bias", "cols", N, ElemType::F32);
    let op = MatmulOp::new_biased(gpu, &a.view, &b.view, &dynamic, &c.view).unwrap();
    let plain_op = MatmulOp::new(gpu, &a.view, &b.view, &c.view).unwrap();
    let (ba, bb, bc) = (a.upload(gpu), b.upload(gpu), c.poisoned(gpu));
    let (ga, gb, gc) = (a.gpu_arg(&ba), b.gpu_arg(&bb), c.gpu_arg(&bc));
    let long = Tensor::random(
        &mut rng,
        dynamic.clone(),
        vec![("cols".into(), N + 1)],
        -1.0,
        1.0,
    );
    let right = Tensor::random(&mut rng, dynamic, vec![("cols".into(), N)], -1.0, 1.0);
    let other = Tensor::random(
        &mut rng,
        support::view_1d("bias", "cols", N, ElemType::F32),
        vec![],
        -1.0,
        1.0,
    );
    let (bl, br, bo) = (long.upload(gpu), right.upload(gpu), other.upload(gpu));
    let (gl, gr, go) = (long.gpu_arg(&bl), right.gpu_arg(&br), other.gpu_arg(&bo));
    let split = Tiling {
        config: TileConfig::TINY,
        split_k: 3,
    };
    let mut batch = gpu.batch();
    let err = op
        .record_biased(&mut batch, &ga, &gb, &gl, &gc)
        .unwrap_err();
    assert!(matches!(err, OpError::Shape { .. }), "{err}");
    let err = op
        .record_plan_biased(&mut batch, split, &ga, &gb, &gl, &gc)
        .unwrap_err();
    assert!(matches!(err, OpError::Shape { .. }), "{err}");
    let err = op
        .record_biased(&mut batch, &ga, &gb, &go, &gc)
        .unwrap_err();
    assert!(
        matches!(err, OpError::WrongView { role: "bias", .. }),
        "{err}"
    );
    let err = op
        .record(&mut batch, &ga, &gb, &gc, Scale::OVERWRITE)
        .unwrap_err();
    assert!(
        matches!(err, OpError::Unsupported { role: "bias", .. }),
        "{err}"
    );
    let err = op
        .record_plan(&mut batch, split, &ga, &gb, &gc, Scale::OVERWRITE)
        .unwrap_err();
    assert!(
        matches!(err, OpError::Unsupported { role: "bias", .. }),
        "{err}"
    );
    let err = plain_op
        .record_biased(&mut batch, &ga, &gb, &gr, &gc)
        .unwrap_err();
    assert!(
        matches!(err, OpError::Unsupported { role: "bias", .. }),
        "{err}"
    );

    // The linear layer likewise: forward on a biased op, forward_biased on a plain one.
    let (x, w, y) = linear_tensors(&mut rng, [Layout2::RowMajor; 3], (M, K, N));
    let (bv, _) = support::view_1d_dyn("bias", "cols", N, ElemType::F32);
    let biased = LinearOp::new_biased(gpu, &x.view, &w.view, &bv, &y.view).unwrap();
    let plain = LinearOp::new(gpu, &x.view, &w.view, &y.view).unwrap();
    let (bx, bw, by) = (x.upload(gpu), w.upload(gpu), y.poisoned(gpu));
    let (gx, gw, gy) = (x.gpu_arg(&bx), w.gpu_arg(&bw), y.gpu_arg(&by));
    let err = biased
        .forward(&mut batch, &gx, &gw, &gy, Output::Overwrite)
        .unwrap_err();
    assert!(
        matches!(err, OpError::Unsupported { role: "bias", .. }),
        "{err}"
    );
    let err = plain
        .forward_biased(&mut batch, &gx, &gw, &gr, &gy)
        .unwrap_err();
    assert!(
        matches!(err, OpError::Unsupported { role: "bias", .. }),
        "{err}"
    );
    assert!(batch.is_empty(), "nothing was recorded for refused calls");
}
