//! Attention: the forward against its definition, the backward against finite differences, and
//! the GPU against the CPU, for multi-head and grouped-query attention, causal and not, with Q,
//! K and V as separate tensors and as views of one fused projection (row-major and R-Tile),
//! scores row-major and R-Tile, in f32 and f16; a padding mask over the keys (`Mask::Keys`)
//! likewise; the scratch every run takes against what the op reports, also where products
//! split; `qkv_views` against the fused layout's offsets; and typed errors for bad input.

mod support;

use fblayout_core::layout::{BoundView, ElemType, LayoutSpec, View};
use fblayout_kernels::cpu::Real;
use fblayout_kernels::ops::OpError;
use fblayout_kernels::ops::attention::{
    Attention, AttentionArgs, AttentionExtents, AttentionOp, AttentionSaved, AttentionViews,
    attention_backward_cpu, attention_forward_cpu, attention_forward_keys_cpu, qkv_views,
};
use fblayout_kernels::ops::softmax::Mask;
use fblayout_kernels::runtime::{Gpu, GpuBuffer, Scratch};
use fblayout_kernels::tensor::{GpuArg, HostArg};
use support::{
    Rng, Tensor, assert_close, coop_gpu, finite_differences, gpu, gpu_elems, gpus, keep_view,
    tolerance,
};

/// Batch, sequence (no tile of 4 or 8 divides 13) and head size.
const BATCH: u32 = 2;
const SEQ: u32 = 13;
const HEAD_DIM: u32 = 8;
/// A head width past the narrow kernels' 16, whose products run on tensor cores.
const WIDE_HEAD_DIM: u32 = 24;

/// Query heads and key/value heads: multi-head, grouped-query (groups of 2) and multi-query.
const HEADS: [(u32, u32); 3] = [(4, 4), (4, 2), (4, 1)];
const MASKS: [Mask; 2] = [Mask::None, Mask::Causal { offset: 0 }];

/// How Q, K and V are stored.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Storage {
    /// Three tensors `[batch, seq, heads, head_dim]`, row-major or R-Tile (`rtile`).
    Separate { rtile: bool },
    /// Three views of one `[batch, seq, (heads + 2·kv_heads)·head_dim]` projection.
    Fused { rtile: bool },
}

const STORAGES: [Storage; 4] = [
    Storage::Separate { rtile: false },
    Storage::Separate { rtile: true },
    Storage::Fused { rtile: false },
    Storage::Fused { rtile: true },
];

/// One configuration.
#[derive(Debug, Clone, Copy)]
struct Case {
    heads: (u32, u32),
    mask: Mask,
    storage: Storage,
    scores_rtile: bool,
    elem: ElemType,
    /// [`HEAD_DIM`], a narrow side of every product (the narrow kernels take them), or wider.
    head_dim: u32,
}

/// `[batch, seq, heads, head_dim]` with run-time batch and seq: row-major, or R-Tile with 4×4
/// tiles over seq and head_dim (head_dim the forward axis, seq padded).
fn separate_view(name: &str, heads: u32, head_dim: u32, rtile: bool, elem: ElemType) -> View {
    let spec = LayoutSpec::new(name)
        .elem(elem)
        .dyn_axis("batch")
        .dyn_axis("seq");
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

/// The fused projection `[batch, seq, hidden]`, row-major or R-Tile (4×4 tiles, hidden forward).
fn fused_view(hidden: u32, rtile: bool, elem: ElemType) -> View {
    let spec = LayoutSpec::new("qkv")
        .elem(elem)
        .dyn_axis("batch")
        .dyn_axis("seq");
    let spec = if rtile {
        spec.tile(4, true)
            .axis("hidden", hidden)
            .tile(4, true)
            .rtile()
            .reduce_forward(["hidden"])
            .reduce_backward(["seq"])
    } else {
        spec.axis("hidden", hidden)
    };
    spec.build().unwrap().view()
}

/// Scores `[batch, heads, q, k]`, all but heads run-time: row-major, or R-Tile with 4×4 tiles
/// over q and k (k forward, both padded).
fn scores_view(heads: u32, rtile: bool, elem: ElemType) -> View {
    let spec = LayoutSpec::new("p")
        .elem(elem)
        .dyn_axis("batch")
        .axis("heads", heads)
        .dyn_axis("q");
    let spec = if rtile {
        spec.tile(4, true)
            .dyn_axis("k")
            .tile(4, true)
            .rtile()
            .reduce_forward(["k"])
            .reduce_backward(["q"])
    } else {
        spec.dyn_axis("k")
    };
    spec.build().unwrap().view()
}

fn tokens(seq: u32) -> Vec<(String, u32)> {
    vec![("batch".into(), BATCH), ("seq".into(), seq)]
}

/// The tensors of one attention, with random Q, K, V and dO.
struct Problem {
    attention: Attention,
    q: Tensor,
    k: Tensor,
    v: Tensor,
    /// The projection Q, K and V are views of, when fused.
    fused: Option<Tensor>,
    out: Tensor,
    probs: Tensor,
    dout: Tensor,
    /// The padding mask `[batch, seq_k]` of a `Mask::Keys` attention.
    keep: Option<Keep>,
}

/// A padding mask `[batch, seq_k]` of `u32`, row-major: 1 keeps a key, 0 masks it.
#[derive(Debug, Clone)]
struct Keep {
    view: View,
    bound: BoundView,
    values: Vec<u32>,
}

impl Keep {
    /// Random 0s and 1s, key 0 of every batch kept (so every row sees a key), and the last
    /// three keys of batch 1 padding.
    fn random(rng: &mut Rng, seq_k: u32) -> Self {
        let view = keep_view();
        let bound = view.bind(&[("batch", BATCH), ("k", seq_k)]).unwrap();
        let values = (0..BATCH * seq_k)
            .map(|i| {
                let (b, j) = (i / seq_k, i % seq_k);
                match (b, j) {
                    (_, 0) => 1,
                    (1, j) if j + 3 >= seq_k => 0,
                    _ => rng.below(2) as u32,
                }
            })
            .collect();
        Self {
            view,
            bound,
            values,
        }
    }

    fn keeps(&self, b: usize, j: usize) -> bool {
        let seq_k = self.bound.shape()[1] as usize;
        self.values[b * seq_k + j] != 0
    }
}

impl Problem {
    /// `case` at `seq_q` queries and `seq_k` keys (different only for separate tensors).
    fn new(rng: &mut Rng, case: Case, (seq_q, seq_k): (u32, u32)) -> Self {
        let (heads, kv_heads) = case.heads;
        let elem = case.elem;
        let attention = Attention::new(heads, kv_heads, case.head_dim, case.mask);
        let random =
            |rng: &mut Rng, view: View, seq| Tensor::random(rng, view, tokens(seq), -1.0, 1.0);
        let (q, k, v, fused, rtile) = match case.storage {
            Storage::Separate { rtile } => (
                random(
                    rng,
                    separate_view("q", heads, case.head_dim, rtile, elem),
                    seq_q,
                ),
                random(
                    rng,
                    separate_view("k", kv_heads, case.head_dim, rtile, elem),
                    seq_k,
                ),
                random(
                    rng,
                    separate_view("v", kv_heads, case.head_dim, rtile, elem),
                    seq_k,
                ),
                None,
                rtile,
            ),
            Storage::Fused { rtile } => {
                assert_eq!(seq_q, seq_k, "a fused projection has one sequence");
                let hidden = (heads + 2 * kv_heads) * case.head_dim;
                let fused = random(rng, fused_view(hidden, rtile, elem), seq_q);
                let (qv, kv, vv) = qkv_views(&fused.view, heads, kv_heads).unwrap();
                (
                    fused.through(qv),
                    fused.through(kv),
                    fused.through(vv),
                    Some(fused),
                    rtile,
                )
            }
        };
        let out_view = separate_view("o", heads, case.head_dim, rtile, elem);
        let out = Tensor::random(rng, out_view, tokens(seq_q), -1.0, 1.0);
        let dout = out.with_values(rng.values(out.values.len(), -1.0, 1.0));
        let bind = vec![
            ("batch".into(), BATCH),
            ("q".into(), seq_q),
            ("k".into(), seq_k),
        ];
        let probs = Tensor::random(
            rng,
            scores_view(heads, case.scores_rtile, elem),
            bind,
            0.0,
            1.0,
        );
        let keep = (case.mask == Mask::Keys).then(|| Keep::random(rng, seq_k));
        Self {
            attention,
            q,
            k,
            v,
            fused,
            out,
            probs,
            dout,
            keep,
        }
    }

    fn views(&self) -> AttentionViews<&View> {
        AttentionViews {
            q: &self.q.view,
            k: &self.k.view,
            v: &self.v.view,
            out: &self.out.view,
            scores: &self.probs.view,
        }
    }

    /// The same problem with Q, K and V holding other values (for finite differences).
    fn with_qkv(&self, q: &[f64], k: &[f64], v: &[f64]) -> Self {
        Self {
            q: self.q.with_values(q.to_vec()),
            k: self.k.with_values(k.to_vec()),
            v: self.v.with_values(v.to_vec()),
            fused: None,
            out: self.out.clone(),
            probs: self.probs.clone(),
            dout: self.dout.clone(),
            keep: self.keep.clone(),
            ..*self
        }
    }
}

/// The forward from its definition, on dense row-major values: per batch and query head `h`
/// (reading key/value head `h / group`), `P = softmax(scale · Q·Kᵀ)` over the keys the mask
/// keeps and `O = P·V`. Returns (O, P).
fn reference(p: &Problem) -> (Vec<f64>, Vec<f64>) {
    let (heads, kv_heads) = (p.attention.heads as usize, p.attention.kv_heads as usize);
    let group = heads / kv_heads;
    let [b_n, sq, _, d_n] = p.q.dims()[..] else {
        unreachable!()
    };
    let sk = p.k.dims()[1];
    let scale = f64::from(p.attention.scale);
    let q =
        |b: usize, i: usize, h: usize, d: usize| p.q.values[((b * sq + i) * heads + h) * d_n + d];
    let kv_at = |t: &Tensor, b: usize, j: usize, h: usize, d: usize| {
        t.values[((b * sk + j) * kv_heads + h) * d_n + d]
    };
    let keeps = |b: usize, i: usize, j: usize| match p.attention.mask {
        Mask::None => true,
        Mask::Causal { offset } => j as i64 <= i as i64 + i64::from(offset),
        Mask::Keys => p.keep.as_ref().expect("a key mask's values").keeps(b, j),
    };
    let mut out = vec![0.0; b_n * sq * heads * d_n];
    let mut probs = vec![0.0; b_n * heads * sq * sk];
    for b in 0..b_n {
        for h in 0..heads {
            let kvh = h / group;
            for i in 0..sq {
                let scores: Vec<f64> = (0..sk)
                    .map(|j| {
                        scale
                            * (0..d_n)
                                .map(|d| q(b, i, h, d) * kv_at(&p.k, b, j, kvh, d))
                                .sum::<f64>()
                    })
                    .collect();
                let max = (0..sk)
                    .filter(|&j| keeps(b, i, j))
                    .map(|j| scores[j])
                    .fold(f64::NEG_INFINITY, f64::max);
                let total: f64 = (0..sk)
                    .filter(|&j| keeps(b, i, j))
                    .map(|j| (scores[j] - max).exp())
                    .sum();
                for j in (0..sk).filter(|&j| keeps(b, i, j)) {
                    let pj = (scores[j] - max).exp() / total;
                    probs[((b * heads + h) * sq + i) * sk + j] = pj;
                    for d in 0..d_n {
                        out[((b * sq + i) * heads + h) * d_n + d] += pj * kv_at(&p.v, b, j, kvh, d);
                    }
                }
            }
        }
    }
    (out, probs)
}

/// The CPU forward in `T`: (O, P).
fn cpu_forward<T: Real>(p: &Problem) -> (Vec<f64>, Vec<f64>) {
    let (hq, hk, hv) = (p.q.host::<T>(), p.k.host::<T>(), p.v.host::<T>());
    let (mut ho, mut hp) = (p.out.host::<T>(), p.probs.host::<T>());
    let (q, k, v) = (&p.q.arg(&hq), &p.k.arg(&hk), &p.v.arg(&hv));
    let (out, probs) = (&mut p.out.arg_mut(&mut ho), &mut p.probs.arg_mut(&mut hp));
    match &p.keep {
        Some(keep) => {
            let mask = HostArg::bound(&keep.values[..], &keep.bound).unwrap();
            attention_forward_keys_cpu(p.attention, q, k, v, &mask, out, probs)
        }
        None => attention_forward_cpu(p.attention, q, k, v, out, probs),
    }
    .unwrap();
    (p.out.read_host(&ho), p.probs.read_host(&hp))
}

/// The CPU backward in `T` from the probabilities `probs`: (dQ, dK, dV).
fn cpu_backward<T: Real>(p: &Problem, probs: &Tensor) -> [Vec<f64>; 3] {
    let (hq, hk, hv) = (p.q.host::<T>(), p.k.host::<T>(), p.v.host::<T>());
    let (hp, hdo) = (probs.host::<T>(), p.dout.host::<T>());
    let (mut dq, mut dk, mut dv) = (p.q.host::<T>(), p.k.host::<T>(), p.v.host::<T>());
    let (q, k, v, pr) = (p.q.arg(&hq), p.k.arg(&hk), p.v.arg(&hv), probs.arg(&hp));
    let saved = AttentionSaved {
        q: &q,
        k: &k,
        v: &v,
        probs: &pr,
    };
    attention_backward_cpu(
        p.attention,
        &saved,
        &p.dout.arg(&hdo),
        &mut p.q.arg_mut(&mut dq),
        &mut p.k.arg_mut(&mut dk),
        &mut p.v.arg_mut(&mut dv),
    )
    .unwrap();
    [p.q.read_host(&dq), p.k.read_host(&dk), p.v.read_host(&dv)]
}

/// What the GPU computed: O, P, dQ, dK, dV.
struct GpuResults {
    out: Vec<f64>,
    probs: Vec<f64>,
    grads: [Vec<f64>; 3],
}

/// Records the forward and the backward in one batch on `gpu`, every output poisoned; for a
/// fused projection, dQ, dK and dV go to one gradient buffer of its layout.
/// Runs the forward and backward on the GPU (after the autotune of the products' tensor-core
/// tiles when `tune`).
/// Runs the forward and the backward, and checks that each takes no more scratch than the op
/// reports ([`AttentionOp::scratch`]).
fn gpu_run(gpu: &Gpu, p: &Problem, tune: bool) -> GpuResults {
    gpu_run_taking(gpu, p, tune).0
}

/// [`gpu_run`], with the scratch the forward and the backward took.
fn gpu_run_taking(gpu: &Gpu, p: &Problem, tune: bool) -> (GpuResults, [Scratch; 2]) {
    let op = match &p.keep {
        Some(keep) => AttentionOp::with_keep(gpu, &p.views(), &keep.view, p.attention),
        None => AttentionOp::new(gpu, &p.views(), p.attention),
    }
    .unwrap();
    let keep = p.keep.as_ref().map(|keep| {
        let buffer = GpuBuffer::from_slice(gpu, &keep.values).unwrap();
        (buffer, keep)
    });
    let (inputs, grads): (Vec<GpuBuffer>, Vec<GpuBuffer>) = match &p.fused {
        Some(fused) => (vec![fused.upload(gpu)], vec![fused.poisoned(gpu)]),
        None => (
            vec![p.q.upload(gpu), p.k.upload(gpu), p.v.upload(gpu)],
            vec![p.q.poisoned(gpu), p.k.poisoned(gpu), p.v.poisoned(gpu)],
        ),
    };
    let buffer = |all: &[GpuBuffer], i: usize| all[i.min(all.len() - 1)].clone();
    let (bo, bp, bdo) = (
        p.out.poisoned(gpu),
        p.probs.poisoned(gpu),
        p.dout.upload(gpu),
    );
    let tensors = [&p.q, &p.k, &p.v];
    let input_buffers: Vec<GpuBuffer> = (0..3).map(|i| buffer(&inputs, i)).collect();
    let grad_buffers: Vec<GpuBuffer> = (0..3).map(|i| buffer(&grads, i)).collect();
    let args = AttentionArgs {
        q: p.q.gpu_arg(&input_buffers[0]),
        k: p.k.gpu_arg(&input_buffers[1]),
        v: p.v.gpu_arg(&input_buffers[2]),
        out: p.out.gpu_arg(&bo),
        probs: p.probs.gpu_arg(&bp),
    };
    if tune {
        op.tune(gpu, &args).unwrap();
    }
    let dims = p.probs.dims();
    let extents = AttentionExtents {
        batch: BATCH,
        seq_q: dims[2] as u32,
        seq_k: dims[3] as u32,
        head_dim: HEAD_DIM,
    };
    let elems = AttentionViews {
        q: p.q.elem(),
        k: p.k.elem(),
        v: p.v.elem(),
        out: p.out.elem(),
        scores: p.probs.elem(),
    };
    let probs_len = args.probs.bound_view().len();
    let [most_forward, most_backward] =
        AttentionOp::scratch(&p.attention, extents, probs_len, elems).unwrap();
    let mut batch = gpu.batch();
    match &keep {
        Some((buffer, keep)) => {
            let mask = GpuArg::bound(buffer, &keep.view, keep.bound.clone()).unwrap();
            op.forward_keys(&mut batch, &args, &mask)
        }
        None => op.forward(&mut batch, &args),
    }
    .unwrap();
    let forward = batch.release_scratch();
    op.backward(
        &mut batch,
        &args,
        &p.dout.gpu_arg(&bdo),
        &p.q.gpu_arg(&grad_buffers[0]),
        &p.k.gpu_arg(&grad_buffers[1]),
        &p.v.gpu_arg(&grad_buffers[2]),
    )
    .unwrap();
    let backward = batch.release_scratch();
    batch.submit().unwrap();
    assert!(
        most_forward.covers(&forward),
        "the forward took {forward}, reported {most_forward}"
    );
    assert!(
        most_backward.covers(&backward),
        "the backward took {backward}, reported {most_backward}"
    );
    let results = GpuResults {
        out: p.out.download(&bo),
        probs: p.probs.download(&bp),
        grads: [0, 1, 2].map(|i| tensors[i].download(&grad_buffers[i])),
    };
    (results, [forward, backward])
}

/// Probabilities are about 1/seq_k: compared at that scale, the tolerance is relative.
fn per_key(p: &Problem, probs: &[f64]) -> Vec<f64> {
    let n = p.probs.dims()[3] as f64;
    probs.iter().map(|v| v * n).collect()
}

fn every_case(elems: &[ElemType]) -> Vec<Case> {
    let mut cases = Vec::new();
    for &elem in elems {
        for heads in HEADS {
            for mask in MASKS {
                for (i, storage) in STORAGES.into_iter().enumerate() {
                    for scores_rtile in [false, true] {
                        // f16: every head count, mask and storage, the scores alternating.
                        if elem == ElemType::F16 && scores_rtile != (i % 2 == 1) {
                            continue;
                        }
                        cases.push(Case {
                            heads,
                            mask,
                            storage,
                            scores_rtile,
                            elem,
                            head_dim: HEAD_DIM,
                        });
                    }
                }
            }
        }
    }
    cases
}

#[test]
fn cpu_and_gpu_forward_match_the_definition() {
    let mut rng = Rng::new(1);
    for case in every_case(&[ElemType::F32]) {
        let p = Problem::new(&mut rng, case, (SEQ, SEQ));
        let (want_out, want_probs) = reference(&p);
        let (out, probs) = cpu_forward::<f64>(&p);
        assert_close(&format!("cpu out {case:?}"), &out, &want_out, 1e-12);
        assert_close(&format!("cpu probs {case:?}"), &probs, &want_probs, 1e-12);
        let got = gpu_run(gpu(), &p, false);
        let tol = tolerance(ElemType::F32, SEQ as usize);
        assert_close(&format!("gpu out {case:?}"), &got.out, &want_out, tol);
        assert_close(
            &format!("gpu probs {case:?}"),
            &per_key(&p, &got.probs),
            &per_key(&p, &want_probs),
            tol,
        );
    }
}

#[test]
fn a_causal_row_sums_to_one_over_its_keys_and_is_zero_past_them() {
    let mut rng = Rng::new(2);
    let case = Case {
        heads: (4, 2),
        mask: Mask::Causal { offset: 0 },
        storage: Storage::Fused { rtile: true },
        scores_rtile: true,
        elem: ElemType::F32,
        head_dim: HEAD_DIM,
    };
    let p = Problem::new(&mut rng, case, (SEQ, SEQ));
    let (_, probs) = cpu_forward::<f64>(&p);
    for (r, row) in probs.chunks(SEQ as usize).enumerate() {
        let q = r % SEQ as usize;
        assert!((row.iter().sum::<f64>() - 1.0).abs() < 1e-12, "row {r}");
        assert!(
            row[q + 1..].iter().all(|&v| v == 0.0),
            "row {r} sees the future"
        );
    }
}

#[test]
fn backward_matches_finite_differences_in_f64() {
    let mut rng = Rng::new(3);
    let h = 1e-6;
    let small = (6, 6);
    for heads in HEADS {
        for mask in MASKS {
            for storage in [
                Storage::Separate { rtile: false },
                Storage::Fused { rtile: true },
            ] {
                let case = Case {
                    heads,
                    mask,
                    storage,
                    scores_rtile: storage != Storage::Separate { rtile: false },
                    elem: ElemType::F32,
                    head_dim: HEAD_DIM,
                };
                let p = Problem::new(&mut rng, case, small);
                let (_, probs) = cpu_forward::<f64>(&p);
                let [dq, dk, dv] = cpu_backward::<f64>(&p, &p.probs.with_values(probs));
                // loss = Σ dO ⊙ O
                let loss = |q: &[f64], k: &[f64], v: &[f64]| -> f64 {
                    let (out, _) = cpu_forward::<f64>(&p.with_qkv(q, k, v));
                    out.iter().zip(&p.dout.values).map(|(a, b)| a * b).sum()
                };
                let (q, k, v) = (&p.q.values, &p.k.values, &p.v.values);
                let fd_q = finite_differences(q, h, |x| loss(x, k, v));
                let fd_k = finite_differences(k, h, |x| loss(q, x, v));
                let fd_v = finite_differences(v, h, |x| loss(q, k, x));
                assert_close(&format!("dq {case:?}"), &dq, &fd_q, 1e-7);
                assert_close(&format!("dk {case:?}"), &dk, &fd_k, 1e-7);
                assert_close(&format!("dv {case:?}"), &dv, &fd_v, 1e-7);
            }
        }
    }
}

/// `got` and `want` divided by the largest magnitude in `want`, so that a tolerance is relative
/// to the size of the result rather than to 1 (gradients here are about 0.01).
fn at_scale_one(got: &[f64], want: &[f64]) -> (Vec<f64>, Vec<f64>) {
    let max = want.iter().fold(0.0f64, |m, v| m.max(v.abs()));
    assert!(max > 0.0, "a result of zeros tests nothing");
    let scaled = |v: &[f64]| v.iter().map(|x| x / max).collect();
    (scaled(got), scaled(want))
}

/// Compares the GPU's forward and backward with the CPU twin in the storage type; the CPU
/// backward differentiates the GPU's probabilities, so both start from the same ones.
fn check_gpu(gpu: &Gpu, what: &str, p: &Problem) {
    check_gpu_tuned(gpu, what, p, false);
}

/// [`check_gpu`], the products' tiles tuned first when `tune`.
fn check_gpu_tuned(gpu: &Gpu, what: &str, p: &Problem, tune: bool) {
    let elem = p.q.elem();
    let got = gpu_run(gpu, p, tune);
    let gpu_probs = p.probs.with_values(got.probs.clone());
    let ((out, probs), grads) = match elem {
        ElemType::F16 => (
            cpu_forward::<half::f16>(p),
            cpu_backward::<half::f16>(p, &gpu_probs),
        ),
        _ => (cpu_forward::<f32>(p), cpu_backward::<f32>(p, &gpu_probs)),
    };
    let (sq, sk) = (p.q.dims()[1], p.k.dims()[1]);
    let group = (p.attention.heads / p.attention.kv_heads) as usize;
    let tol = tolerance(elem, sk);
    let (got_out, out) = at_scale_one(&got.out, &out);
    assert_close(&format!("{what}: out"), &got_out, &out, tol);
    assert_close(
        &format!("{what}: probs"),
        &per_key(p, &got.probs),
        &per_key(p, &probs),
        tol,
    );
    for (name, (g, w)) in ["dq", "dk", "dv"].iter().zip(got.grads.iter().zip(&grads)) {
        let terms = if *name == "dq" { sk } else { group * sq };
        let (g, w) = at_scale_one(g, w);
        assert_close(&format!("{what}: {name}"), &g, &w, tolerance(elem, terms));
    }
}

#[test]
fn gpu_matches_cpu_for_every_head_grouping_mask_storage_and_element_type() {
    let mut rng = Rng::new(4);
    assert!(
        gpu_elems().contains(&ElemType::F16),
        "lavapipe has SHADER_F16; the f16 path must be tested"
    );
    for case in every_case(&gpu_elems()) {
        let p = Problem::new(&mut rng, case, (SEQ, SEQ));
        check_gpu(gpu(), &format!("{case:?}"), &p);
    }
}

/// In f16, on a device with cooperative matrices, all six products run on tensor cores (the
/// scale is the softmax's, so each is a plain product), before and after their tiles are
/// tuned, and still match the CPU twin, at heads of [`WIDE_HEAD_DIM`] (at [`HEAD_DIM`] every
/// product has a narrow side, which the narrow kernels take). Skipped elsewhere (it says so),
/// and a failure there with `FBLAYOUT_REQUIRE_COOP=1`.
#[test]
fn f16_products_run_on_tensor_cores_where_the_device_has_them() {
    let Some(gpu) = coop_gpu("attention on tensor cores") else {
        return;
    };
    let mut rng = Rng::new(6);
    for (heads, mask, storage, scores_rtile) in [
        ((4, 4), Mask::None, Storage::Fused { rtile: false }, false),
        (
            (4, 2),
            Mask::Causal { offset: 0 },
            Storage::Fused { rtile: true },
            true,
        ),
        ((4, 1), Mask::None, Storage::Separate { rtile: false }, true),
    ] {
        let case = Case {
            heads,
            mask,
            storage,
            scores_rtile,
            elem: ElemType::F16,
            head_dim: WIDE_HEAD_DIM,
        };
        let p = Problem::new(&mut rng, case, (SEQ, SEQ));
        let op = AttentionOp::new(gpu, &p.views(), p.attention).unwrap();
        assert_eq!(op.tensor_cores(), [true; 6], "{case:?}");
        for tune in [false, true] {
            check_gpu_tuned(gpu, &format!("{case:?}, tuned {tune}"), &p, tune);
        }
    }
}

#[test]
fn cross_attention_with_other_key_lengths_and_both_reduction_paths() {
    let mut rng = Rng::new(5);
    for (path, gpu) in gpus() {
        for (heads, mask) in [
            ((4, 2), Mask::None),
            // The queries are the last 9 of 13 keys.
            ((4, 1), Mask::Causal { offset: 4 }),
            ((2, 2), Mask::Causal { offset: -2 }),
        ] {
            let case = Case {
                heads,
                mask,
                storage: Storage::Separate { rtile: true },
                scores_rtile: true,
                elem: ElemType::F32,
                head_dim: HEAD_DIM,
            };
            let p = Problem::new(&mut rng, case, (9, SEQ));
            let (want_out, want_probs) = reference(&p);
            let (out, probs) = cpu_forward::<f64>(&p);
            assert_close(&format!("{path} {case:?}: cpu out"), &out, &want_out, 1e-12);
            assert_close(
                &format!("{path} {case:?}: cpu probs"),
                &probs,
                &want_probs,
                1e-12,
            );
            check_gpu(gpu, &format!("{path} {case:?}"), &p);
        }
    }
}

/// A padding mask (`Mask::Keys`): keys masked per batch, at random and at the end, 13 keys
/// (no tile of 4 or 8 divides them), 9 queries too for separate Q: the CPU and GPU forwards
/// against the definition (f64 reference, 1e-12 on the CPU; the f32 tolerance over 13 terms on
/// the GPU), the masked probabilities exactly 0, the CPU backward against finite differences
/// (h = 1e-6, 1e-7), and the GPU's forward and backward against the CPU twin in f32 and f16.
#[test]
fn a_padding_mask_hides_its_keys_forward_and_backward() {
    let mut rng = Rng::new(7);
    let cases = [
        ((4, 4), Storage::Fused { rtile: true }, true, SEQ),
        ((4, 2), Storage::Separate { rtile: false }, false, SEQ),
        ((4, 1), Storage::Separate { rtile: true }, true, 9),
    ];
    for (heads, storage, scores_rtile, seq_q) in cases {
        for elem in gpu_elems() {
            let case = Case {
                heads,
                mask: Mask::Keys,
                storage,
                scores_rtile,
                elem,
                head_dim: HEAD_DIM,
            };
            let p = Problem::new(&mut rng, case, (seq_q, SEQ));
            if elem == ElemType::F32 {
                let (want_out, want_probs) = reference(&p);
                let (out, probs) = cpu_forward::<f64>(&p);
                assert_close(&format!("cpu out {case:?}"), &out, &want_out, 1e-12);
                assert_close(&format!("cpu probs {case:?}"), &probs, &want_probs, 1e-12);
                let keep = p.keep.as_ref().unwrap();
                let sk = SEQ as usize;
                for (r, row) in probs.chunks(sk).enumerate() {
                    let b = r / (seq_q as usize * heads.0 as usize);
                    for (j, &pj) in row.iter().enumerate() {
                        assert!(keep.keeps(b, j) || pj == 0.0, "row {r} sees masked key {j}");
                    }
                }
                let got = gpu_run(gpu(), &p, false);
                let tol = tolerance(ElemType::F32, SEQ as usize);
                assert_close(&format!("gpu out {case:?}"), &got.out, &want_out, tol);
                assert_close(
                    &format!("gpu probs {case:?}"),
                    &per_key(&p, &got.probs),
                    &per_key(&p, &want_probs),
                    tol,
                );
            }
            check_gpu(gpu(), &format!("{case:?}"), &p);
        }
    }
    let h = 1e-6;
    for storage in [
        Storage::Separate { rtile: false },
        Storage::Fused { rtile: true },
    ] {
        let case = Case {
            heads: (4, 2),
            mask: Mask::Keys,
            storage,
            scores_rtile: true,
            elem: ElemType::F32,
            head_dim: HEAD_DIM,
        };
        let p = Problem::new(&mut rng, case, (6, 6));
        let (_, probs) = cpu_forward::<f64>(&p);
        let [dq, dk, dv] = cpu_backward::<f64>(&p, &p.probs.with_values(probs));
        let loss = |q: &[f64], k: &[f64], v: &[f64]| -> f64 {
            let (out, _) = cpu_forward::<f64>(&p.with_qkv(q, k, v));
            out.iter().zip(&p.dout.values).map(|(a, b)| a * b).sum()
        };
        let (q, k, v) = (&p.q.values, &p.k.values, &p.v.values);
        let fd_q = finite_differences(q, h, |x| loss(x, k, v));
        let fd_k = finite_differences(k, h, |x| loss(q, x, v));
        let fd_v = finite_differences(v, h, |x| loss(q, k, x));
        assert_close(&format!("dq {case:?}"), &dq, &fd_q, 1e-7);
        assert_close(&format!("dk {case:?}"), &dk, &fd_k, 1e-7);
        assert_close(&format!("dv {case:?}"), &dv, &fd_v, 1e-7);
    }
}

#[test]
fn long_sequences_split_their_products_within_the_reported_scratch() {
    // 2 × 1024 keys, heads of 8 in groups of 2: dV = Pᵀ·dO and dK = dSᵀ·Q reduce over 2048
    // queries into few outputs, so the f32 products split their reductions, into partial sums
    // of scratch.
    let mut rng = Rng::new(9);
    let case = Case {
        heads: (2, 1),
        mask: Mask::Causal { offset: 0 },
        storage: Storage::Separate { rtile: false },
        scores_rtile: false,
        elem: ElemType::F32,
        head_dim: HEAD_DIM,
    };
    let p = Problem::new(&mut rng, case, (1024, 1024));
    let (_, [_, backward]) = gpu_run_taking(gpu(), &p, false);
    // The gradients of the probabilities and of the scores, and partial sums besides.
    assert!(backward.buffers().len() > 2, "{backward}");
    check_gpu(gpu(), &format!("{case:?}"), &p);
}

#[test]
fn qkv_views_read_the_slots_of_the_fused_projection() {
    for (heads, kv_heads) in [(4, 4), (4, 2), (6, 1)] {
        for rtile in [false, true] {
            let hidden = (heads + 2 * kv_heads) * HEAD_DIM;
            let fused = fused_view(hidden, rtile, ElemType::F32);
            let (q, k, v) = qkv_views(&fused, heads, kv_heads).unwrap();
            let bind = [("batch", BATCH), ("seq", SEQ)];
            let whole = fused.bind(&bind).unwrap();
            for (view, first, n) in [
                (&q, 0, heads),
                (&k, heads, kv_heads),
                (&v, heads + kv_heads, kv_heads),
            ] {
                let names: Vec<&str> = view.axes().iter().map(|a| a.name.as_str()).collect();
                assert_eq!(names, ["batch", "seq", "heads", "head_dim"]);
                let bound = view.bind(&bind).unwrap();
                assert_eq!(bound.shape(), [BATCH, SEQ, n, HEAD_DIM].map(u64::from));
                bound.for_each(|_, c, off| {
                    let slot = (u64::from(first) + c[2]) * u64::from(HEAD_DIM) + c[3];
                    assert_eq!(Some(off), whole.offset(&[c[0], c[1], slot]), "{c:?}");
                });
            }
            assert_eq!(q.name(), "qkv_q");
        }
    }
    let fused = fused_view(9 * HEAD_DIM + 4, false, ElemType::F32);
    // 76 is no multiple of 4 + 2·2 heads.
    let err = qkv_views(&fused, 4, 2).unwrap_err();
    assert!(matches!(err, OpError::Shape { .. }), "{err}");
    let err = qkv_views(&fused, 4, 3).unwrap_err();
    assert!(matches!(err, OpError::Shape { .. }), "{err}");
    let err = qkv_views(&separate_view("x", 4, HEAD_DIM, false, ElemType::F32), 1, 1).unwrap_err();
    assert!(matches!(err, OpError::Shape { .. }), "{err}");
}

#[test]
fn bad_input_is_a_typed_error_and_records_nothing() {
    let gpu = gpu();
    let mut rng = Rng::new(6);
    let case = Case {
        heads: (4, 2),
        mask: Mask::None,
        storage: Storage::Separate { rtile: false },
        scores_rtile: false,
        elem: ElemType::F32,
        head_dim: HEAD_DIM,
    };
    let p = Problem::new(&mut rng, case, (SEQ, SEQ));
    let views = p.views();
    let shape_err = |views: &AttentionViews<&View>, attention: Attention| {
        let err = AttentionOp::new(gpu, views, attention).unwrap_err();
        assert!(matches!(err, OpError::Shape { .. }), "{err}");
    };
    // Head counts that don't divide, or don't match the views.
    for (heads, kv_heads) in [(4, 3), (4, 0), (0, 2), (4, 4), (2, 2), (8, 2)] {
        shape_err(
            &views,
            Attention {
                heads,
                kv_heads,
                ..p.attention
            },
        );
    }
    // A head_dim of 6 in K against 8 in Q.
    let six = |name: &str| {
        LayoutSpec::new(name)
            .dyn_axis("batch")
            .dyn_axis("seq")
            .axis("heads", 2)
            .axis("head_dim", 6)
            .build()
            .unwrap()
            .view()
    };
    let (k6, v6) = (six("k"), six("v"));
    shape_err(
        &AttentionViews {
            k: &k6,
            v: &v6,
            ..views
        },
        p.attention,
    );
    // A static batch of 3 in V against a static one of 2 in the scores.
    let fixed = |name: &str, b: u32, h: u32| {
        LayoutSpec::new(name)
            .axis("batch", b)
            .dyn_axis("seq")
            .axis("heads", h)
            .axis("head_dim", HEAD_DIM)
            .build()
            .unwrap()
            .view()
    };
    let s2 = LayoutSpec::new("p")
        .axis("batch", 2)
        .axis("heads", 4)
        .dyn_axis("q")
        .dyn_axis("k")
        .build()
        .unwrap()
        .view();
    let (v3, k3) = (fixed("v", 3, 2), fixed("k", 3, 2));
    shape_err(
        &AttentionViews {
            v: &v3,
            k: &k3,
            scores: &s2,
            ..views
        },
        p.attention,
    );
    // V unlike K; scores of rank 3; heads of run-time extent.
    shape_err(
        &AttentionViews {
            v: &p.q.view,
            ..views
        },
        p.attention,
    );
    let s3 = LayoutSpec::new("p")
        .dyn_axis("b")
        .axis("q", SEQ)
        .axis("k", SEQ)
        .build()
        .unwrap()
        .view();
    shape_err(
        &AttentionViews {
            scores: &s3,
            ..views
        },
        p.attention,
    );
    let dyn_heads = LayoutSpec::new("q")
        .dyn_axis("batch")
        .dyn_axis("seq")
        .dyn_axis("heads")
        .axis("head_dim", HEAD_DIM)
        .build()
        .unwrap()
        .view();
    shape_err(
        &AttentionViews {
            q: &dyn_heads,
            out: &dyn_heads,
            ..views
        },
        p.attention,
    );
    // Integer elements.
    let qi = separate_view("q", 4, HEAD_DIM, false, ElemType::U32);
    let err = AttentionOp::new(gpu, &AttentionViews { q: &qi, ..views }, p.attention).unwrap_err();
    assert!(matches!(err, OpError::Unsupported { .. }), "{err}");

    // At run time: a batch or a sequence that differs, and arguments through other views.
    let op = AttentionOp::new(gpu, &views, p.attention).unwrap();
    let (bq, bk, bv) = (p.q.upload(gpu), p.k.upload(gpu), p.v.upload(gpu));
    let (bo, bp, bdo) = (
        p.out.poisoned(gpu),
        p.probs.poisoned(gpu),
        p.dout.upload(gpu),
    );
    let args = AttentionArgs {
        q: p.q.gpu_arg(&bq),
        k: p.k.gpu_arg(&bk),
        v: p.v.gpu_arg(&bv),
        out: p.out.gpu_arg(&bo),
        probs: p.probs.gpu_arg(&bp),
    };
    let mut batch = gpu.batch();
    let rebound = |t: &Tensor, bind: Vec<(String, u32)>| {
        Tensor::random(&mut Rng::new(7), t.view.clone(), bind, -1.0, 1.0)
    };
    let k3 = rebound(&p.k, vec![("batch".into(), 3), ("seq".into(), SEQ)]);
    let bk3 = k3.upload(gpu);
    let err = op
        .forward(
            &mut batch,
            &AttentionArgs {
                k: k3.gpu_arg(&bk3),
                ..args.clone()
            },
        )
        .unwrap_err();
    assert!(matches!(err, OpError::Shape { .. }), "{err}");
    let v12 = rebound(&p.v, tokens(SEQ - 1));
    let bv12 = v12.upload(gpu);
    let err = op
        .forward(
            &mut batch,
            &AttentionArgs {
                v: v12.gpu_arg(&bv12),
                ..args.clone()
            },
        )
        .unwrap_err();
    assert!(matches!(err, OpError::Shape { .. }), "{err}");
    // K passed through V's view.
    let swapped = AttentionArgs {
        k: p.v.gpu_arg(&bk),
        ..args.clone()
    };
    let err = op.forward(&mut batch, &swapped).unwrap_err();
    assert!(matches!(err, OpError::WrongView { role: "k", .. }), "{err}");
    // Probabilities through another layout than the op's scores.
    let other = Tensor::random(
        &mut rng,
        scores_view(4, true, ElemType::F32),
        p.probs.bind.clone(),
        0.0,
        1.0,
    );
    let bother = other.upload(gpu);
    let err = op
        .forward(
            &mut batch,
            &AttentionArgs {
                probs: other.gpu_arg(&bother),
                ..args.clone()
            },
        )
        .unwrap_err();
    assert!(
        matches!(err, OpError::WrongView { role: "probs", .. }),
        "{err}"
    );
    // The backward: dK through Q's view, dV of another sequence length.
    let (gdo, gdq, gdk, gdv) = (
        p.dout.gpu_arg(&bdo),
        p.q.gpu_arg(&bq),
        p.k.gpu_arg(&bk),
        p.v.gpu_arg(&bv),
    );
    let err = op
        .backward(&mut batch, &args, &gdo, &gdq, &p.q.gpu_arg(&bq), &gdv)
        .unwrap_err();
    assert!(
        matches!(err, OpError::WrongView { role: "dk", .. }),
        "{err}"
    );
    let err = op
        .backward(&mut batch, &args, &gdo, &gdq, &gdk, &v12.gpu_arg(&bv12))
        .unwrap_err();
    assert!(matches!(err, OpError::Shape { .. }), "{err}");
    assert!(batch.is_empty(), "nothing was recorded for refused calls");

    // The CPU twins check shapes too.
    let (hq, hk3, hv) = (p.q.host::<f64>(), k3.host::<f64>(), p.v.host::<f64>());
    let (mut ho, mut hp) = (p.out.host::<f64>(), p.probs.host::<f64>());
    let err = attention_forward_cpu(
        p.attention,
        &p.q.arg(&hq),
        &k3.arg(&hk3),
        &p.v.arg(&hv),
        &mut p.out.arg_mut(&mut ho),
        &mut p.probs.arg_mut(&mut hp),
    )
    .unwrap_err();
    assert!(matches!(err, OpError::Shape { .. }), "{err}");
    let err = attention_forward_cpu(
        Attention {
            kv_heads: 3,
            ..p.attention
        },
        &p.q.arg(&hq),
        &p.k.arg(&p.k.host::<f64>()),
        &p.v.arg(&hv),
        &mut p.out.arg_mut(&mut ho),
        &mut p.probs.arg_mut(&mut hp),
    )
    .unwrap_err();
    assert!(matches!(err, OpError::Shape { .. }), "{err}");
    let hk = p.k.host::<f64>();
    let (q, k, v, pr) = (p.q.arg(&hq), p.k.arg(&hk), p.v.arg(&hv), p.probs.arg(&hp));
    let saved = AttentionSaved {
        q: &q,
        k: &k,
        v: &v,
        probs: &pr,
    };
    let (mut dq, mut dk, mut dv12) = (p.q.host::<f64>(), p.k.host::<f64>(), v12.host::<f64>());
    let err = attention_backward_cpu(
        p.attention,
        &saved,
        &p.dout.arg(&p.dout.host::<f64>()),
        &mut p.q.arg_mut(&mut dq),
        &mut p.k.arg_mut(&mut dk),
        &mut v12.arg_mut(&mut dv12),
    )
    .unwrap_err();
    assert!(matches!(err, OpError::Shape { .. }), "{err}");
}
