//! The cooperative-matrix GEMM against the f32 CPU matmul, on random f16 data, under every
//! transposition, on shapes fragments don't divide, with NaN-poisoned outputs; unsplit and
//! with the reduction split (split-k), whose parts are whole k-steps and need not divide `k`.
//!
//! These need a device with `EXPERIMENTAL_COOPERATIVE_MATRIX` (the H200; not lavapipe).
//! Elsewhere each test prints that it is skipped and why, and fails when
//! `FBLAYOUT_REQUIRE_COOP=1`. Without any adapter they fail, like every GPU test.

mod support;

use fblayout_core::layout::{ElemType, LayoutSpec, View};
use fblayout_kernels::__private::kernel_source;
use fblayout_kernels::ops::OpError;
use fblayout_kernels::ops::coop::{CoopConfig, CoopMatmulOp, Lanes, compile_ahead};
use fblayout_kernels::ops::matmul::{Extents, Scale, matmul_cpu};
use fblayout_kernels::runtime::{CacheLoad, CoopScalar, Gpu, GpuOptions};
use support::{Layout2, Rng, Tensor, assert_close, coop_gpu, gpu, static_2d, tolerance, view_2d};

/// `t` with its values rounded to f16 (what the GPU reads), so the oracle sees the same
/// inputs.
fn rounded(t: Tensor) -> Tensor {
    let values = t
        .values
        .iter()
        .map(|&v| half::f16::from_f64(v).to_f64())
        .collect();
    t.with_values(values)
}

fn random(rng: &mut Rng, (view, bind): (View, Vec<(String, u32)>)) -> Tensor {
    rounded(Tensor::random(rng, view, bind, -1.0, 1.0))
}

/// The f32 CPU matmul of `a · b` into `c`'s view (the oracle).
fn oracle(a: &Tensor, b: &Tensor, c: &Tensor) -> Vec<f64> {
    let (ha, hb) = (a.host::<f32>(), b.host::<f32>());
    let mut hc = c.host::<f32>();
    matmul_cpu(
        &a.arg(&ha),
        &b.arg(&hb),
        &mut c.arg_mut(&mut hc),
        Scale::OVERWRITE,
    )
    .unwrap();
    c.read_host(&hc)
}

/// The GPU result with `config` (the op's choice when `None`), C poisoned with NaN first.
fn run(
    gpu: &Gpu,
    op: &CoopMatmulOp,
    config: Option<CoopConfig>,
    a: &Tensor,
    b: &Tensor,
    c: &Tensor,
) -> Vec<f64> {
    let (ba, bb, bc) = (a.upload(gpu), b.upload(gpu), c.poisoned(gpu));
    let (ga, gb, gc) = (a.gpu_arg(&ba), b.gpu_arg(&bb), c.gpu_arg(&bc));
    let mut batch = gpu.batch();
    match config {
        Some(config) => op.record_config(&mut batch, config, &ga, &gb, &gc),
        None => op.record(&mut batch, &ga, &gb, &gc),
    }
    .unwrap();
    batch.submit().unwrap();
    c.download(&bc)
}

/// Checks `C = A·B` for every config in `configs`.
fn check(gpu: &Gpu, what: &str, a: &Tensor, b: &Tensor, c: &Tensor, configs: &[CoopConfig]) {
    let op =
        CoopMatmulOp::new(gpu, &a.view, &b.view, &c.view).unwrap_or_else(|e| panic!("{what}: {e}"));
    let want = oracle(a, b, c);
    let k = a.dims()[a.dims().len() - 1];
    let tol = tolerance(c.elem(), k).max(tolerance(ElemType::F16, k));
    for &config in configs {
        let got = run(gpu, &op, Some(config), a, b, c);
        assert_close(&format!("{what}, {config}"), &got, &want, tol);
    }
}

/// A `[rows, cols]` f16 view of static extents, row-major or through a transpose.
fn fixed(name: &str, rows: u32, cols: u32, transposed: bool) -> (View, Vec<(String, u32)>) {
    let spec = LayoutSpec::new(name).elem(ElemType::F16);
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
    (view, Vec::new())
}

/// Random A `[m, k]` and B `[k, n]` (f16, each read through a transpose where `ta`, `tb`) and
/// a row-major C `[m, n]` of `c_elem`.
fn product(
    rng: &mut Rng,
    (m, n, k): (u32, u32, u32),
    (ta, tb): (bool, bool),
    c_elem: ElemType,
) -> (Tensor, Tensor, Tensor) {
    let a = random(rng, fixed("a", m, k, ta));
    let b = random(rng, fixed("b", k, n, tb));
    let (vc, bc) = view_2d("c", Layout2::RowMajor, m, n, c_elem);
    (a, b, Tensor::random(rng, vc, bc, -1.0, 1.0))
}

#[test]
fn every_transposition_matches_the_f32_cpu_matmul_on_shapes_fragments_dont_divide() {
    let Some(gpu) = coop_gpu("every_transposition") else {
        return;
    };
    let mut rng = Rng::new(81);
    // 150 × 90 × 100: no fragment, block or k-step divides any extent.
    for (ta, tb) in [(false, false), (true, false), (false, true), (true, true)] {
        for c_elem in [ElemType::F32, ElemType::F16] {
            let (a, b, c) = product(&mut rng, (148, 92, 100), (ta, tb), c_elem);
            let what = format!("A transposed {ta}, B transposed {tb}, C {c_elem}");
            check(
                gpu,
                &what,
                &a,
                &b,
                &c,
                &[CoopConfig::DEFAULT, CoopConfig::SMALL],
            );
        }
    }
}

/// Split-k under every transposition, into f32 and f16 C, on shapes no fragment or block
/// divides and a k (1001, odd) that no split divides: the parts are whole k-steps, the last
/// one shorter (SMALL split 8: seven parts of 128 and one of 105; DEFAULT split 4: three of
/// 256 and one of 233; split 3 of 64×64 k-step 32: 352, 352 and 297).
#[test]
fn split_k_matches_under_every_transposition_with_an_odd_k() {
    let Some(gpu) = coop_gpu("split_k_every_transposition") else {
        return;
    };
    let mut rng = Rng::new(89);
    let configs = [
        CoopConfig::SMALL.with_split(8),
        CoopConfig::DEFAULT.with_split(4),
        CoopConfig::SPLIT_BASES[3].with_split(3),
        CoopConfig::SPLIT_BASES[2].with_split(2),
    ];
    for (ta, tb) in [(false, false), (true, false), (false, true), (true, true)] {
        for c_elem in [ElemType::F32, ElemType::F16] {
            let (a, b, c) = product(&mut rng, (148, 92, 1001), (ta, tb), c_elem);
            let what = format!("split-k, A transposed {ta}, B transposed {tb}, C {c_elem}");
            check(gpu, &what, &a, &b, &c, &configs);
        }
    }
}

/// A split into more parts than `k` has k-steps runs one part per k-step (k = 40 is three k-steps of
/// 16: split 8 runs 3 parts), and a k of one k-step runs unsplit; both still match.
#[test]
fn split_k_beyond_the_k_steps_runs_fewer_parts() {
    let Some(gpu) = coop_gpu("split_k_beyond") else {
        return;
    };
    let mut rng = Rng::new(90);
    for k in [40, 16, 7] {
        let (a, b, c) = product(&mut rng, (70, 52, k), (false, true), ElemType::F32);
        check(
            gpu,
            &format!("k = {k}"),
            &a,
            &b,
            &c,
            &[CoopConfig::SMALL.with_split(8)],
        );
    }
}

/// The weight gradient's shape, scaled down (few blocks, a long k): the problem gets split-k
/// candidates, every one matches, the op's choice before an autotune is split and matches,
/// and a split product is the same bits every time it runs (the parts are added in order).
#[test]
fn split_k_candidates_of_a_thin_product_match_and_are_deterministic() {
    let Some(gpu) = coop_gpu("split_k_candidates") else {
        return;
    };
    let mut rng = Rng::new(91);
    // dW = Xᵀ·dY: X [tokens, 96] read through its transpose, dY [tokens, 80].
    let (m, n, k) = (96, 80, 1100);
    let (a, b, c) = product(&mut rng, (m, n, k), (true, false), ElemType::F32);
    let op = CoopMatmulOp::new(gpu, &a.view, &b.view, &c.view).unwrap();
    let e = Extents {
        batch: Vec::new(),
        m: m as usize,
        n: n as usize,
        k: k as usize,
    };
    let configs = op.candidates_for(&e);
    assert!(configs.iter().any(|c| c.split_k > 1), "{configs:?}");
    assert!(configs.len() < op.candidates().len(), "{configs:?}");
    assert!(op.config_for(&e).split_k > 1, "{}", op.config_for(&e));
    check(gpu, "dW-like, every candidate", &a, &b, &c, &configs);
    let want = oracle(&a, &b, &c);
    let first = run(gpu, &op, None, &a, &b, &c);
    assert_close(
        "the op's choice",
        &first,
        &want,
        tolerance(ElemType::F16, k as usize),
    );
    for config in configs.iter().filter(|c| c.split_k > 1) {
        let once = run(gpu, &op, Some(*config), &a, &b, &c);
        let again = run(gpu, &op, Some(*config), &a, &b, &c);
        let bits = |v: &[f64]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(&once), bits(&again), "{config}: not deterministic");
    }
    // The split-k candidates are measured like any others.
    let (ba, bb, bcc) = (a.upload(gpu), b.upload(gpu), c.poisoned(gpu));
    let (ga, gb, gc) = (a.gpu_arg(&ba), b.gpu_arg(&bb), c.gpu_arg(&bcc));
    let (best, times) = op.measure(gpu, &ga, &gb, &gc, 2).unwrap();
    assert_eq!(times.len(), configs.len());
    assert!(configs.contains(&best));
    // Split-k's partial sums are f32: with the f16 accumulator it is a typed error.
    let f16_split = CoopConfig::SMALL.with_acc(CoopScalar::F16).with_split(2);
    let mut batch = gpu.batch();
    let err = op
        .record_config(&mut batch, f16_split, &ga, &gb, &gc)
        .unwrap_err();
    assert!(
        matches!(&err, OpError::Shape { detail, .. } if detail.contains("f32 accumulator")),
        "{err}"
    );
}

#[test]
fn every_layout_of_each_operand_matches() {
    let Some(gpu) = coop_gpu("every_layout") else {
        return;
    };
    let mut rng = Rng::new(82);
    let (m, n, k) = (70, 52, 45);
    for layout in Layout2::ALL {
        let a = random(&mut rng, view_2d("a", layout, m, k, ElemType::F16));
        let b = random(
            &mut rng,
            view_2d("b", Layout2::RowMajor, k, n, ElemType::F16),
        );
        let (vc, bc) = view_2d("c", layout, m, n, ElemType::F32);
        let c = Tensor::random(&mut rng, vc, bc, -1.0, 1.0);
        check(
            gpu,
            &format!("A {layout:?}"),
            &a,
            &b,
            &c,
            &[CoopConfig::SMALL, CoopConfig::SMALL.with_split(3)],
        );
        let a = random(
            &mut rng,
            view_2d("a", Layout2::RowMajor, m, k, ElemType::F16),
        );
        let b = random(&mut rng, view_2d("b", layout, k, n, ElemType::F16));
        check(
            gpu,
            &format!("B {layout:?}"),
            &a,
            &b,
            &c,
            &[CoopConfig::SMALL, CoopConfig::SMALL.with_split(3)],
        );
    }
}

#[test]
fn every_candidate_configuration_matches() {
    let Some(gpu) = coop_gpu("every_candidate") else {
        return;
    };
    let mut rng = Rng::new(83);
    // n a multiple of 16 but of no block: C row-major takes interior blocks' fragments
    // straight, and the edge blocks go through the scratch, in one dispatch.
    let (m, n, k) = (272, 208, 152);
    for (ta, tb) in [(false, false), (true, true)] {
        let a = random(&mut rng, fixed("a", m, k, ta));
        let b = random(&mut rng, fixed("b", k, n, tb));
        let (vc, bc) = view_2d("c", Layout2::RowMajor, m, n, ElemType::F32);
        let c = Tensor::random(&mut rng, vc, bc, -1.0, 1.0);
        let op = CoopMatmulOp::new(gpu, &a.view, &b.view, &c.view).unwrap();
        let configs = op.candidates().to_vec();
        assert!(!configs.is_empty());
        check(gpu, &format!("transposed {ta}/{tb}"), &a, &b, &c, &configs);
    }
}

/// Interior blocks store their fragments straight into a row-major or column-major C of the
/// accumulator's type (edge blocks through the scratch): f32 C with f32 sums, and f16 C with
/// f16 sums (tolerance: one f16 rounding per k-step of the running sum).
#[test]
fn fragments_stored_straight_into_c_match() {
    use fblayout_core::layout::Order as Memory;
    let Some(gpu) = coop_gpu("fragments_stored_straight") else {
        return;
    };
    let mut rng = Rng::new(87);
    // 208 × 176: multiples of 16, of no block but 16; k = 88 leaves a partial k-step.
    let (m, n, k) = (208, 176, 88);
    let f32_configs = [CoopConfig::DEFAULT, CoopConfig::SMALL];
    for (ta, tb) in [(false, false), (true, true)] {
        let a = random(&mut rng, fixed("a", m, k, ta));
        let b = random(&mut rng, fixed("b", k, n, tb));
        for order in [Memory::RowMajor, Memory::ColMajor] {
            let vc = static_2d("c", m, n, ElemType::F32, order);
            let c = Tensor::random(&mut rng, vc, Vec::new(), -1.0, 1.0);
            let what = format!("C {order:?} f32, transposed {ta}/{tb}");
            check(gpu, &what, &a, &b, &c, &f32_configs);
        }
    }
    let offered = gpu.features().cooperative_matrices.to_vec();
    let f16_acc = offered.iter().any(|f| {
        (f.m, f.n, f.k) == (16, 16, 16) && f.ab == CoopScalar::F16 && f.acc == CoopScalar::F16
    });
    if !f16_acc {
        eprintln!("fragments_stored_straight: the adapter has no f16 accumulator; f16 C not run");
        return;
    }
    // A short k (two k-steps) keeps f16 accumulation within a bound: each of the k additions
    // rounds the running sum by at most 2⁻¹¹ of its size, of the order of 1 + |C|.
    let k = 32;
    let a = random(&mut rng, fixed("a", m, k, false));
    let b = random(&mut rng, fixed("b", k, n, false));
    let vc = static_2d("c", m, n, ElemType::F16, Memory::RowMajor);
    let c = Tensor::random(&mut rng, vc, Vec::new(), -1.0, 1.0);
    let op = CoopMatmulOp::new(gpu, &a.view, &b.view, &c.view).unwrap();
    let want = oracle(&a, &b, &c);
    let tol = f64::from(k) / 2048.0;
    for config in [CoopConfig::DEFAULT, CoopConfig::SMALL] {
        let config = config.with_acc(CoopScalar::F16);
        let got = run(gpu, &op, Some(config), &a, &b, &c);
        assert_close(&format!("C f16, {config}"), &got, &want, tol);
    }
}

#[test]
fn batched_attention_scores_read_permuted_views() {
    let Some(gpu) = coop_gpu("batched") else {
        return;
    };
    let mut rng = Rng::new(84);
    let qk = LayoutSpec::new("q")
        .elem(ElemType::F16)
        .dyn_axis("batch")
        .axis("seq", 40)
        .axis("heads", 3)
        .axis("head_dim", 32)
        .build()
        .unwrap();
    let bind = vec![("batch".to_owned(), 2)];
    let q = qk
        .view()
        .permute(&["batch", "heads", "seq", "head_dim"])
        .unwrap();
    let k_t = qk
        .view()
        .permute(&["batch", "heads", "head_dim", "seq"])
        .unwrap();
    let qt = random(&mut rng, (q, bind.clone()));
    let kt = random(&mut rng, (qk.view(), bind.clone())).through(k_t);
    let s = LayoutSpec::new("s")
        .dyn_axis("batch")
        .axis("heads", 3)
        .axis("seq", 40)
        .axis("key", 40)
        .build()
        .unwrap();
    let st = Tensor::random(&mut rng, s.view(), bind, -1.0, 1.0);
    check(
        gpu,
        "Q·Kᵀ per head",
        &qt,
        &kt,
        &st,
        &[
            CoopConfig::DEFAULT,
            CoopConfig::SMALL,
            CoopConfig::SMALL.with_split(2),
        ],
    );
}

/// Attention's weighted values `O = P·V` and the gradient `dV = Pᵀ·dO` (the shapes of `dQ =
/// dS·K` and `dK = dSᵀ·Q`), batched over sequences and heads: V and dO read per head through
/// permuted views of `[batch, seq, heads, head_dim]`, P as stored and through its transpose.
#[test]
fn batched_attention_values_and_gradients_read_permuted_views() {
    let Some(gpu) = coop_gpu("batched_values") else {
        return;
    };
    let mut rng = Rng::new(88);
    let (seq, heads, head_dim) = (40, 3, 32);
    let bind = vec![("batch".to_owned(), 2)];
    let per_seq = |name: &str, elem: ElemType| {
        LayoutSpec::new(name)
            .elem(elem)
            .dyn_axis("batch")
            .axis("seq", seq)
            .axis("heads", heads)
            .axis("head_dim", head_dim)
            .build()
            .unwrap()
    };
    let per_head = |name: &str, rows: &str, elem: ElemType| {
        LayoutSpec::new(name)
            .elem(elem)
            .dyn_axis("batch")
            .axis("heads", heads)
            .axis(rows, seq)
            .axis("cols", head_dim)
            .build()
            .unwrap()
    };
    let rows = ["batch", "heads", "seq", "head_dim"];
    let p = LayoutSpec::new("p")
        .elem(ElemType::F16)
        .dyn_axis("batch")
        .axis("heads", heads)
        .axis("seq", seq)
        .axis("key", seq)
        .build()
        .unwrap();
    let pt = random(&mut rng, (p.view(), bind.clone()));
    let p_t = p.view().permute(&["batch", "heads", "key", "seq"]).unwrap();
    let pt_t = random(&mut rng, (p.view(), bind.clone())).through(p_t);
    let v = per_seq("v", ElemType::F16);
    let vt = random(&mut rng, (v.view(), bind.clone())).through(v.view().permute(&rows).unwrap());
    let dout = per_seq("dout", ElemType::F16);
    let dot =
        random(&mut rng, (dout.view(), bind.clone())).through(dout.view().permute(&rows).unwrap());
    let o = per_head("o", "seq", ElemType::F32);
    let ot = Tensor::random(&mut rng, o.view(), bind.clone(), -1.0, 1.0);
    let dv = per_head("dv", "key", ElemType::F32);
    let dvt = Tensor::random(&mut rng, dv.view(), bind, -1.0, 1.0);
    // Split-k over the 40 keys (three k-steps of 16): three parts per head.
    // And the blocks 32 wide made for outputs of a head's 32 columns.
    let configs = [
        CoopConfig::DEFAULT,
        CoopConfig::SMALL,
        CoopConfig::SMALL.with_split(4),
        CoopConfig::DEFAULT.with_split(2),
        "64x32/2x2/k32/s1/f32".parse().unwrap(),
        "128x32/4x2/k16/s2/f32".parse().unwrap(),
    ];
    check(gpu, "O = P·V per head", &pt, &vt, &ot, &configs);
    check(gpu, "dV = Pᵀ·dO per head", &pt_t, &dot, &dvt, &configs);
}

#[test]
fn the_autotune_is_kept_on_disk_and_a_corrupt_file_is_rebuilt() {
    let Some(_) = coop_gpu("autotune") else {
        return;
    };
    let dir = std::env::temp_dir().join(format!("fblayout-coop-autotune-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let open = || {
        let mut options = GpuOptions::from_env().unwrap();
        options.cache_dir = Some(dir.clone());
        Gpu::with_options(options).unwrap()
    };
    let mut rng = Rng::new(85);
    let a = random(&mut rng, fixed("a", 96, 64, false));
    let b = random(&mut rng, fixed("b", 64, 80, true));
    let (vc, bc) = view_2d("c", Layout2::RowMajor, 96, 80, ElemType::F32);
    let c = Tensor::random(&mut rng, vc, bc, -1.0, 1.0);
    let tuned = |gpu: &Gpu| {
        let op = CoopMatmulOp::new(gpu, &a.view, &b.view, &c.view).unwrap();
        let (ba, bb, bcc) = (a.upload(gpu), b.upload(gpu), c.poisoned(gpu));
        let (ga, gb, gc) = (a.gpu_arg(&ba), b.gpu_arg(&bb), c.gpu_arg(&bcc));
        let chosen = op.tune(gpu, &ga, &gb, &gc).unwrap();
        assert!(op.candidates().contains(&chosen));
        let e = op.extents(gpu, &ga, &gb, &gc).unwrap();
        assert_eq!(op.config_for(&e), chosen);
        // The tuned op still computes the product.
        let got = run(gpu, &op, None, &a, &b, &c);
        assert_close(
            "tuned",
            &got,
            &oracle(&a, &b, &c),
            tolerance(ElemType::F16, 64),
        );
        (op.tune_load().clone(), chosen)
    };
    let gpu = open();
    if gpu.pipeline_cache_path().is_none() {
        eprintln!("autotune: SKIPPED the disk part: the adapter has no pipeline cache");
        return;
    }
    let (first, chosen) = tuned(&gpu);
    assert_eq!(first, CacheLoad::Empty);
    // A second op on the same adapter reads the choice back.
    let (second, again) = tuned(&gpu);
    assert!(matches!(second, CacheLoad::Loaded { .. }), "{second:?}");
    assert_eq!(again, chosen);
    // Corrupt the file: the next op ignores it, measures again and rewrites it.
    let file = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| {
            p.file_name()
                .unwrap()
                .to_string_lossy()
                .starts_with("coop-autotune-")
        })
        .expect("the autotune file");
    let mut raw = std::fs::read(&file).unwrap();
    let last = raw.len() - 2;
    raw[last] ^= 0x55;
    std::fs::write(&file, &raw).unwrap();
    let (third, _) = tuned(&gpu);
    assert!(matches!(third, CacheLoad::Rebuilt { .. }), "{third:?}");
    let (fourth, _) = tuned(&gpu);
    assert!(matches!(fourth, CacheLoad::Loaded { .. }), "{fourth:?}");
    drop(gpu);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_listing_pass_compiles_every_candidate_at_once_and_the_tune_after_it_compiles_nothing() {
    let Some(_) = coop_gpu("compile ahead") else {
        return;
    };
    // A device of its own (no cache on disk, nothing compiled by other tests).
    let mut options = GpuOptions::from_env().unwrap();
    options.cache_dir = None;
    let gpu = Gpu::with_options(options).unwrap();
    let mut rng = Rng::new(86);
    let a = random(&mut rng, fixed("a", 96, 64, false));
    let b = random(&mut rng, fixed("b", 64, 80, true));
    let (vc, bc) = view_2d("c", Layout2::RowMajor, 96, 80, ElemType::F32);
    let c = Tensor::random(&mut rng, vc, bc, -1.0, 1.0);
    let op = CoopMatmulOp::new(&gpu, &a.view, &b.view, &c.view).unwrap();
    let (ba, bb, bcc) = (a.upload(&gpu), b.upload(&gpu), c.poisoned(&gpu));
    let (ga, gb, gc) = (a.gpu_arg(&ba), b.gpu_arg(&bb), c.gpu_arg(&bcc));
    let e = op.extents(&gpu, &ga, &gb, &gc).unwrap();
    let first = op.config_for(&e);
    let before = gpu.compile_stats();
    // The listing pass chooses nothing: it answers what a recording would use now.
    let listed = compile_ahead(&gpu, || op.tune(&gpu, &ga, &gb, &gc)).unwrap();
    assert_eq!(listed.unwrap(), first);
    let ahead = gpu.compile_stats();
    let compiled = ahead.pipelines - before.pipelines;
    assert!(
        compiled >= 2,
        "the candidates' pipelines are compiled ahead: {compiled}"
    );
    // The tune after it measures pipelines that are all compiled.
    let chosen = op.tune(&gpu, &ga, &gb, &gc).unwrap();
    assert!(op.candidates_for(&e).contains(&chosen));
    assert_eq!(op.config_for(&e), chosen);
    assert_eq!(gpu.compile_stats().pipelines, ahead.pipelines);
    // Outside a listing pass a new problem is measured, compiling its own pipelines.
    let tall = random(&mut rng, fixed("a", 192, 64, false));
    let (vt, bt) = view_2d("c", Layout2::RowMajor, 192, 80, ElemType::F32);
    let ct = Tensor::random(&mut rng, vt, bt, -1.0, 1.0);
    let op = CoopMatmulOp::new(&gpu, &tall.view, &b.view, &ct.view).unwrap();
    let (bta, btc) = (tall.upload(&gpu), ct.poisoned(&gpu));
    let (gta, gtc) = (tall.gpu_arg(&bta), ct.gpu_arg(&btc));
    let before = gpu.compile_stats();
    op.tune(&gpu, &gta, &gb, &gtc).unwrap();
    assert!(gpu.compile_stats().pipelines > before.pipelines);
    let got = run(&gpu, &op, None, &tall, &b, &ct);
    assert_close(
        "tuned after a listing pass",
        &got,
        &oracle(&tall, &b, &ct),
        tolerance(ElemType::F16, 64),
    );
}

#[test]
fn without_the_feature_the_op_is_refused_with_the_reason() {
    let mut options = GpuOptions::from_env().unwrap();
    options.disabled.cooperative_matrix = true;
    options.cache_dir = None;
    let gpu = Gpu::with_options(options).unwrap();
    assert!(!gpu.features().cooperative_matrix);
    assert_eq!(gpu.features().coop_fragment, None);
    let (a, _) = fixed("a", 32, 32, false);
    let (b, _) = fixed("b", 32, 32, false);
    let (c, _) = view_2d("c", Layout2::RowMajor, 32, 32, ElemType::F32);
    let err = CoopMatmulOp::new(&gpu, &a, &b, &c).unwrap_err();
    assert!(
        matches!(&err, OpError::Unsupported { why, .. } if why.contains("EXPERIMENTAL_COOPERATIVE_MATRIX")),
        "{err}"
    );
}

/// Views whose static extents can't form a product are shape errors on any device, before
/// the feature is looked at: k (A's columns against B's rows), m and n (against C), a batch
/// axis, and the rank.
#[test]
fn static_mismatches_are_shape_errors_on_any_device() {
    let gpu = gpu();
    let (c, _) = view_2d("c", Layout2::RowMajor, 32, 16, ElemType::F32);
    let (c_fixed, _) = fixed("c", 32, 16, false);
    let batched = |name: &str, batch: u32, rows: u32, cols: u32| {
        LayoutSpec::new(name)
            .elem(ElemType::F16)
            .axis("batch", batch)
            .axis("rows", rows)
            .axis("cols", cols)
            .build()
            .unwrap()
            .view()
    };
    let cases: [(&str, View, View, View); 5] = [
        // The case the H200 run found: C's rows are dynamic, k is 48 against 32.
        (
            "k",
            fixed("a", 32, 48, false).0,
            fixed("b", 32, 16, false).0,
            c.clone(),
        ),
        (
            "k, transposed",
            fixed("a", 32, 48, true).0,
            fixed("b", 32, 16, true).0,
            c.clone(),
        ),
        (
            "m",
            fixed("a", 24, 48, false).0,
            fixed("b", 48, 16, false).0,
            c_fixed.clone(),
        ),
        (
            "n",
            fixed("a", 32, 48, false).0,
            fixed("b", 48, 8, false).0,
            c.clone(),
        ),
        (
            "batch axis 0",
            batched("a", 2, 32, 48),
            batched("b", 3, 48, 16),
            batched("c", 2, 32, 16),
        ),
    ];
    for (what, a, b, c) in &cases {
        let err = CoopMatmulOp::new(gpu, a, b, c).unwrap_err();
        assert!(
            matches!(&err, OpError::Shape { detail, .. } if detail.starts_with(what.split(',').next().unwrap())),
            "{what}: {err}"
        );
        // The same check without a device.
        let err = kernel_source(a, b, c, CoopConfig::SMALL, Lanes::new(32)).unwrap_err();
        assert!(matches!(err, OpError::Shape { .. }), "{what}: {err}");
    }
    let (a2, _) = fixed("a", 32, 48, false);
    let err = CoopMatmulOp::new(gpu, &a2, &batched("b", 2, 48, 16), &c).unwrap_err();
    assert!(matches!(err, OpError::Shape { .. }), "rank: {err}");
    // Matching views pass the check: on a device without the feature the refusal is then
    // about the feature, never the shapes.
    let (b_ok, _) = fixed("b", 48, 16, false);
    kernel_source(&a2, &b_ok, &c, CoopConfig::SMALL, Lanes::new(32)).unwrap();
    if let Err(err) = CoopMatmulOp::new(gpu, &a2, &b_ok, &c) {
        assert!(matches!(err, OpError::Unsupported { .. }), "{err}");
    }
}

#[test]
fn mismatched_arguments_are_typed_errors() {
    let Some(gpu) = coop_gpu("mismatched") else {
        return;
    };
    let (a, _) = fixed("a", 32, 48, false);
    let (c, _) = view_2d("c", Layout2::RowMajor, 32, 16, ElemType::F32);
    // Arguments read through other views than the op was built for.
    let (b_ok, _) = fixed("b", 48, 16, false);
    let op = CoopMatmulOp::new(gpu, &a, &b_ok, &c).unwrap();
    let mut rng = Rng::new(86);
    let ta = random(&mut rng, (a.clone(), Vec::new()));
    let tb = random(&mut rng, fixed("b", 48, 16, true));
    let (vc, bc) = view_2d("c", Layout2::RowMajor, 32, 16, ElemType::F32);
    let tc = Tensor::random(&mut rng, vc, bc, -1.0, 1.0);
    let (ba, bb, bcc) = (ta.upload(gpu), tb.upload(gpu), tc.poisoned(gpu));
    let mut batch = gpu.batch();
    let err = op
        .record(
            &mut batch,
            &ta.gpu_arg(&ba),
            &tb.gpu_arg(&bb),
            &tc.gpu_arg(&bcc),
        )
        .unwrap_err();
    assert!(matches!(err, OpError::WrongView { .. }), "{err}");
}

/// `Σ_k A[i, k] · B[k, j] + bias[j]` in f64 on dense row-major values, by the definition.
fn biased_definition(a: &Tensor, b: &Tensor, bias: &Tensor) -> Vec<f64> {
    let (da, db) = (a.dims(), b.dims());
    let (m, k, n) = (da[0], da[1], db[1]);
    let mut out = vec![0.0; m * n];
    for i in 0..m {
        for j in 0..n {
            let sum: f64 = (0..k)
                .map(|kk| a.values[i * k + kk] * b.values[kk * n + j])
                .sum();
            out[i * n + j] = sum + bias.values[j];
        }
    }
    out
}

/// Biases of `n` elements (`n` a multiple of 4): an f32 vector, and an f16 one read through a
/// merge of a column-major `[4, n / 4]` matrix (neighbours 4 apart); values as stored.
fn biases(rng: &mut Rng, n: u32) -> Vec<Tensor> {
    let plain = support::view_1d("bias", "cols", n, ElemType::F32);
    let merged = static_2d(
        "bias",
        4,
        n / 4,
        ElemType::F16,
        fblayout_core::layout::Order::ColMajor,
    )
    .merge(&["rows", "cols"], "cols")
    .unwrap();
    vec![
        Tensor::random(rng, plain, Vec::new(), -2.0, 2.0),
        rounded(Tensor::random(rng, merged, Vec::new(), -2.0, 2.0)),
    ]
}

/// Checks `C = A·B + bias` for every config in `configs`, C poisoned with NaN first.
fn check_biased(
    gpu: &Gpu,
    what: &str,
    (a, b, bias, c): (&Tensor, &Tensor, &Tensor, &Tensor),
    configs: &[CoopConfig],
) {
    let op = CoopMatmulOp::new_biased(gpu, &a.view, &b.view, &bias.view, &c.view)
        .unwrap_or_else(|e| panic!("{what}: {e}"));
    assert!(op.has_bias());
    let want = biased_definition(a, b, bias);
    let k = a.dims()[1];
    let tol = tolerance(c.elem(), k).max(tolerance(ElemType::F16, k));
    let (ba, bb, bbias) = (a.upload(gpu), b.upload(gpu), bias.upload(gpu));
    let (ga, gb, gbias) = (a.gpu_arg(&ba), b.gpu_arg(&bb), bias.gpu_arg(&bbias));
    for config in configs.iter().copied().map(Some).chain([None]) {
        let bc = c.poisoned(gpu);
        let gc = c.gpu_arg(&bc);
        let mut batch = gpu.batch();
        match config {
            Some(config) => op.record_config_biased(&mut batch, config, &ga, &gb, &gbias, &gc),
            None => op.record_biased(&mut batch, &ga, &gb, &gbias, &gc),
        }
        .unwrap();
        batch.submit().unwrap();
        let got = c.download(&bc);
        assert_close(
            &format!("{what}, bias {}, {config:?}", bias.elem()),
            &got,
            &want,
            tol,
        );
    }
}

/// The bias under every transposition, into f32 and f16 C through the scratch, into C that
/// takes fragments straight (row- and column-major, 16-aligned, partial blocks at the edges),
/// unsplit and split (the reduction adds the bias once), on shapes no block divides.
#[test]
fn biased_products_match_the_definition_through_every_store_and_split() {
    use fblayout_core::layout::Order as Memory;
    let Some(gpu) = coop_gpu("biased_products") else {
        return;
    };
    let mut rng = Rng::new(92);
    let configs = [
        CoopConfig::DEFAULT,
        CoopConfig::SMALL,
        CoopConfig::SMALL.with_split(8),
        CoopConfig::DEFAULT.with_split(4),
    ];
    for (ta, tb) in [(false, false), (true, false), (false, true), (true, true)] {
        for c_elem in [ElemType::F32, ElemType::F16] {
            let (a, b, c) = product(&mut rng, (148, 92, 301), (ta, tb), c_elem);
            for bias in biases(&mut rng, 92) {
                let what = format!("A transposed {ta}, B transposed {tb}, C {c_elem}");
                check_biased(gpu, &what, (&a, &b, &bias, &c), &configs);
            }
        }
    }
    // 208 × 176: interior blocks store straight into C, edge blocks through the scratch.
    let (m, n, k) = (208, 176, 88);
    let a = random(&mut rng, fixed("a", m, k, false));
    let b = random(&mut rng, fixed("b", k, n, true));
    for order in [Memory::RowMajor, Memory::ColMajor] {
        let vc = static_2d("c", m, n, ElemType::F32, order);
        let c = Tensor::random(&mut rng, vc, Vec::new(), -1.0, 1.0);
        for bias in biases(&mut rng, n) {
            let what = format!("straight into C {order:?}");
            check_biased(
                gpu,
                &what,
                (&a, &b, &bias, &c),
                &[CoopConfig::DEFAULT, CoopConfig::SMALL],
            );
        }
    }
}

/// A linear layer built with a bias runs its forward on tensor cores, is tuned as the biased
/// product, and adds the bias.
#[test]
fn a_biased_linear_layer_is_tuned_and_runs_on_tensor_cores() {
    use fblayout_kernels::ops::matmul::LinearOp;
    let Some(gpu) = coop_gpu("biased_linear") else {
        return;
    };
    let mut rng = Rng::new(93);
    let (x, w, y) = product(&mut rng, (150, 96, 200), (false, false), ElemType::F16);
    let bias = biases(&mut rng, 96).remove(1);
    let op = LinearOp::new_biased(gpu, &x.view, &w.view, &bias.view, &y.view).unwrap();
    assert!(op.has_bias() && op.tensor_cores()[0]);
    let (bx, bw, bb, by) = (
        x.upload(gpu),
        w.upload(gpu),
        bias.upload(gpu),
        y.poisoned(gpu),
    );
    let (gx, gw, gb, gy) = (
        x.gpu_arg(&bx),
        w.gpu_arg(&bw),
        bias.gpu_arg(&bb),
        y.gpu_arg(&by),
    );
    op.tune(gpu, &gx, &gw, &gy).unwrap();
    let mut batch = gpu.batch();
    op.forward_biased(&mut batch, &gx, &gw, &gb, &gy).unwrap();
    batch.submit().unwrap();
    let tol = tolerance(ElemType::F16, 200);
    assert_close(
        "biased linear",
        &y.download(&by),
        &biased_definition(&x, &w, &bias),
        tol,
    );
}

/// A biased op's calls without the bias, a plain op's with one, and a bias bound to another
/// length are typed errors that record nothing.
#[test]
fn a_missing_or_unexpected_bias_is_a_typed_error() {
    let Some(gpu) = coop_gpu("biased_errors") else {
        return;
    };
    let mut rng = Rng::new(94);
    let (a, b, c) = product(&mut rng, (40, 32, 24), (false, false), ElemType::F32);
    let bias = biases(&mut rng, 32).remove(0);
    let biased = CoopMatmulOp::new_biased(gpu, &a.view, &b.view, &bias.view, &c.view).unwrap();
    let plain = CoopMatmulOp::new(gpu, &a.view, &b.view, &c.view).unwrap();
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
    let (dynamic, _) = support::view_1d_dyn("bias", "cols", 32, ElemType::F32);
    let dyn_op = CoopMatmulOp::new_biased(gpu, &a.view, &b.view, &dynamic, &c.view).unwrap();
    let long = Tensor::random(&mut rng, dynamic, vec![("cols".into(), 33)], -1.0, 1.0);
    let bl = long.upload(gpu);
    let mut batch = gpu.batch();
    let err = biased.record(&mut batch, &ga, &gb, &gc).unwrap_err();
    assert!(
        matches!(err, OpError::Unsupported { role: "bias", .. }),
        "{err}"
    );
    let err = plain
        .record_biased(&mut batch, &ga, &gb, &gbias, &gc)
        .unwrap_err();
    assert!(
        matches!(err, OpError::Unsupported { role: "bias", .. }),
        "{err}"
    );
    for config in [CoopConfig::SMALL, CoopConfig::SMALL.with_split(2)] {
        let err = dyn_op
            .record_config_biased(&mut batch, config, &ga, &gb, &long.gpu_arg(&bl), &gc)
            .unwrap_err();
        assert!(matches!(err, OpError::Shape { .. }), "{config}: {err}");
    }
    assert!(batch.is_empty(), "nothing was recorded for refused calls");
}

/// A bias of another length than C's columns, or of rank 2, is a shape error before any
/// device feature is asked for.
#[test]
fn a_bias_of_the_wrong_shape_is_a_shape_error_on_any_device() {
    let gpu = gpu();
    let (a, _) = fixed("a", 32, 24, false);
    let (b, _) = fixed("b", 24, 16, false);
    let (c, _) = view_2d("c", Layout2::RowMajor, 32, 16, ElemType::F32);
    let short = support::view_1d("bias", "cols", 15, ElemType::F32);
    let matrix = static_2d(
        "bias",
        1,
        16,
        ElemType::F32,
        fblayout_core::layout::Order::RowMajor,
    );
    for bias in [&short, &matrix] {
        let err = CoopMatmulOp::new_biased(gpu, &a, &b, bias, &c).unwrap_err();
        assert!(matches!(err, OpError::Shape { .. }), "{err}");
        let err = fblayout_kernels::__private::biased_kernel_source(
            &a,
            &b,
            bias,
            &c,
            CoopConfig::SMALL,
            Lanes::new(32),
        )
        .unwrap_err();
        assert!(matches!(err, OpError::Shape { .. }), "{err}");
    }
}
