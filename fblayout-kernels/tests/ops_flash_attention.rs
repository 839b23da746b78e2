//! Fused attention: the forward's output and log-sum-exp and the backward's three gradients
//! against the definitions in `f64` (softmax, `dV = Pᵀ·dO`, `dP = dO·Vᵀ`, `dS = P ⊙ (dP −
//! rowsum(dP ⊙ P))`, `dQ = s·dS·K`, `dK = s·dSᵀ·Q`), written here from the math; the CPU twin
//! against finite differences; the GPU for multi-head, grouped-query and multi-query attention,
//! no mask, causal (offsets 0 and 2) and padding masks (rows that see no key included), Q, K
//! and V separate (row-major and R-Tile) or views of one fused projection, heads of 8 (4-wide
//! loads) and 6 (scalar loads), sequences shorter than one block and spanning several
//! workgroups, in f32 and f16; and typed errors for bad input.

mod support;

use fblayout_core::layout::{BoundView, ElemType, LayoutSpec, View};
use fblayout_kernels::cpu::Real;
use fblayout_kernels::ops::OpError;
use fblayout_kernels::ops::attention::flash::{
    FlashAttentionOp, FlashGrads, FlashLaunch, FlashSaved, TENSOR_HEAD_DIM, flash_backward_cpu,
    flash_forward_cpu,
};
use fblayout_kernels::ops::attention::{Attention, AttentionArgs, AttentionViews, qkv_views};
use fblayout_kernels::ops::softmax::Mask;
use fblayout_kernels::runtime::{Gpu, GpuBuffer};
use fblayout_kernels::tensor::{GpuArg, HostArg};
use support::{
    REQUIRE, Rng, Tensor, assert_close, coop_gpu, finite_differences, gpu, gpu_elems, keep_view,
    lse_view, qkv_view, tolerance,
};

const BATCH: u32 = 2;

/// How Q, K and V are stored.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Storage {
    Separate { rtile: bool },
    Fused,
}

#[derive(Debug, Clone, Copy)]
struct Case {
    heads: (u32, u32),
    head_dim: u32,
    mask: Mask,
    storage: Storage,
    seq: u32,
    elem: ElemType,
}

fn tokens(seq: u32) -> Vec<(String, u32)> {
    vec![("batch".into(), BATCH), ("seq".into(), seq)]
}

/// `[batch, seq, heads, head_dim]`: row-major, or R-Tile with 4×4 tiles over seq and head_dim.
fn head_view(name: &str, heads: u32, head_dim: u32, rtile: bool, elem: ElemType) -> View {
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

struct Keep {
    view: View,
    bound: BoundView,
    values: Vec<u32>,
}

struct Problem {
    attention: Attention,
    q: Tensor,
    k: Tensor,
    v: Tensor,
    fused: Option<Tensor>,
    out: Tensor,
    lse: Tensor,
    dout: Tensor,
    keep: Option<Keep>,
}

impl Problem {
    fn new(rng: &mut Rng, case: Case) -> Self {
        let (heads, kv_heads) = case.heads;
        let (d, seq, elem) = (case.head_dim, case.seq, case.elem);
        let attention = Attention::new(heads, kv_heads, d, case.mask);
        let random = |rng: &mut Rng, view: View| Tensor::random(rng, view, tokens(seq), -1.5, 1.5);
        let (q, k, v, fused, rtile) = match case.storage {
            Storage::Separate { rtile } => (
                random(rng, head_view("q", heads, d, rtile, elem)),
                random(rng, head_view("k", kv_heads, d, rtile, elem)),
                random(rng, head_view("v", kv_heads, d, rtile, elem)),
                None,
                rtile,
            ),
            Storage::Fused => {
                let hidden = (heads + 2 * kv_heads) * d;
                let view = qkv_view(hidden, elem);
                let fused = random(rng, view);
                let (qv, kv, vv) = qkv_views(&fused.view, heads, kv_heads).unwrap();
                (
                    fused.through(qv),
                    fused.through(kv),
                    fused.through(vv),
                    Some(fused),
                    false,
                )
            }
        };
        let out = random(rng, head_view("o", heads, d, rtile, elem));
        let dout = out.with_values(rng.values(out.values.len(), -1.0, 1.0));
        let lse = Tensor::random(
            rng,
            lse_view(heads),
            vec![("batch".into(), BATCH), ("q".into(), seq)],
            0.0,
            1.0,
        );
        // Padding: key 0 of sequence 0 kept, its last three keys padding; sequence 1 all padding
        // when `seq` is short (its rows see no key), else random.
        let keep = (case.mask == Mask::Keys).then(|| {
            let view = keep_view();
            let bound = view.bind(&[("batch", BATCH), ("k", seq)]).unwrap();
            let values = (0..BATCH * seq)
                .map(|e| match (e / seq, e % seq) {
                    (0, 0) => 1,
                    (0, j) if j + 3 >= seq => 0,
                    (1, _) if seq < 16 => 0,
                    _ => rng.below(2) as u32,
                })
                .collect();
            Keep {
                view,
                bound,
                values,
            }
        });
        Self {
            attention,
            q,
            k,
            v,
            fused,
            out,
            lse,
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
            scores: &self.lse.view,
        }
    }

    fn sees(&self, b: usize, i: usize, j: usize) -> bool {
        match self.attention.mask {
            Mask::None => true,
            Mask::Causal { offset } => j as i64 <= i as i64 + i64::from(offset),
            Mask::Keys => {
                let keep = self.keep.as_ref().unwrap();
                keep.values[b * keep.bound.shape()[1] as usize + j] != 0
            }
        }
    }
}

/// What the definitions give: O and lse of the forward, dQ, dK and dV of the backward, each
/// dense row-major.
struct Reference {
    out: Vec<f64>,
    lse: Vec<f64>,
    grads: [Vec<f64>; 3],
}

/// The attention from its definition in `f64`, on the problem's values.
fn reference(p: &Problem) -> Reference {
    let (heads, kv) = (p.attention.heads as usize, p.attention.kv_heads as usize);
    let group = heads / kv;
    let [bn, sq, _, d] = p.q.dims()[..] else {
        unreachable!()
    };
    let sk = p.k.dims()[1];
    let s = f64::from(p.attention.scale);
    let at = |t: &Tensor, n: usize, b: usize, i: usize, h: usize, e: usize| {
        t.values[((b * t.dims()[1] + i) * n + h) * d + e]
    };
    let mut out = vec![0.0; bn * sq * heads * d];
    let mut lse = vec![0.0; bn * heads * sq];
    let mut dq = vec![0.0; out.len()];
    let mut dk = vec![0.0; bn * sk * kv * d];
    let mut dv = vec![0.0; dk.len()];
    for b in 0..bn {
        for h in 0..heads {
            let g = h / group;
            for i in 0..sq {
                let seen: Vec<usize> = (0..sk).filter(|&j| p.sees(b, i, j)).collect();
                let score = |j: usize| {
                    s * (0..d)
                        .map(|e| at(&p.q, heads, b, i, h, e) * at(&p.k, kv, b, j, g, e))
                        .sum::<f64>()
                };
                if seen.is_empty() {
                    lse[(b * heads + h) * sq + i] = f64::from(3.0e38_f32);
                    continue;
                }
                let m = seen
                    .iter()
                    .map(|&j| score(j))
                    .fold(f64::NEG_INFINITY, f64::max);
                let total: f64 = seen.iter().map(|&j| (score(j) - m).exp()).sum();
                lse[(b * heads + h) * sq + i] = m + total.ln();
                let prob = |j: usize| (score(j) - m).exp() / total;
                // dP_ij = dO_i · V_j; Σ_j P_ij dP_ij
                let dp = |j: usize| {
                    (0..d)
                        .map(|e| at(&p.dout, heads, b, i, h, e) * at(&p.v, kv, b, j, g, e))
                        .sum::<f64>()
                };
                let mean: f64 = seen.iter().map(|&j| prob(j) * dp(j)).sum();
                for &j in &seen {
                    let pj = prob(j);
                    let ds = pj * (dp(j) - mean);
                    for e in 0..d {
                        let o = ((b * sq + i) * heads + h) * d + e;
                        let kvo = ((b * sk + j) * kv + g) * d + e;
                        out[o] += pj * at(&p.v, kv, b, j, g, e);
                        dq[o] += s * ds * at(&p.k, kv, b, j, g, e);
                        dk[kvo] += s * ds * at(&p.q, heads, b, i, h, e);
                        dv[kvo] += pj * at(&p.dout, heads, b, i, h, e);
                    }
                }
            }
        }
    }
    Reference {
        out,
        lse,
        grads: [dq, dk, dv],
    }
}

/// The CPU twin in `T`: O, lse, and the gradients from its own O and lse.
fn cpu_run<T: Real>(p: &Problem) -> Reference {
    let (hq, hk, hv) = (p.q.host::<T>(), p.k.host::<T>(), p.v.host::<T>());
    let (mut ho, mut hl) = (p.out.host::<T>(), p.lse.host::<T>());
    let keep = p
        .keep
        .as_ref()
        .map(|k| HostArg::bound(&k.values[..], &k.bound).unwrap());
    let keep = keep
        .as_ref()
        .map(|k| k as &dyn fblayout_kernels::cpu::Logical<u32>);
    let (q, k, v) = (p.q.arg(&hq), p.k.arg(&hk), p.v.arg(&hv));
    flash_forward_cpu(
        p.attention,
        [&q, &k, &v],
        keep,
        &mut p.out.arg_mut(&mut ho),
        &mut p.lse.arg_mut(&mut hl),
    )
    .unwrap();
    let hdo = p.dout.host::<T>();
    let (mut dq, mut dk, mut dv) = (p.q.host::<T>(), p.k.host::<T>(), p.v.host::<T>());
    let (o, l) = (p.out.arg(&ho), p.lse.arg(&hl));
    let saved = FlashSaved {
        q: &q,
        k: &k,
        v: &v,
        out: &o,
        lse: &l,
    };
    flash_backward_cpu(
        p.attention,
        &saved,
        keep,
        &p.dout.arg(&hdo),
        [
            &mut p.q.arg_mut(&mut dq),
            &mut p.k.arg_mut(&mut dk),
            &mut p.v.arg_mut(&mut dv),
        ],
    )
    .unwrap();
    Reference {
        out: p.out.read_host(&ho),
        lse: p.lse.read_host(&hl),
        grads: [p.q.read_host(&dq), p.k.read_host(&dk), p.v.read_host(&dv)],
    }
}

/// The GPU's forward and backward in one batch, every output poisoned first; for a fused
/// projection, dQ, dK and dV go to one gradient buffer of its layout.
fn gpu_run(gpu: &Gpu, p: &Problem) -> Reference {
    let keep = p.keep.as_ref().map(|k| &k.view);
    gpu_run_op(
        gpu,
        p,
        &FlashAttentionOp::new(gpu, &p.views(), keep, p.attention).unwrap(),
    )
}

/// [`gpu_run`] with the kernels launched as `launch` says.
fn gpu_run_launched(gpu: &Gpu, p: &Problem, launch: FlashLaunch) -> Reference {
    let keep = p.keep.as_ref().map(|k| &k.view);
    let op = FlashAttentionOp::with_launch(gpu, &p.views(), keep, p.attention, launch).unwrap();
    gpu_run_op(gpu, p, &op)
}

/// The forward and backward of `op` (built for `p`'s views) on `p`'s values.
fn gpu_run_op(gpu: &Gpu, p: &Problem, op: &FlashAttentionOp) -> Reference {
    let (inputs, grads): (Vec<GpuBuffer>, Vec<GpuBuffer>) = match &p.fused {
        Some(fused) => (vec![fused.upload(gpu); 3], vec![fused.poisoned(gpu); 3]),
        None => (
            vec![p.q.upload(gpu), p.k.upload(gpu), p.v.upload(gpu)],
            vec![p.q.poisoned(gpu), p.k.poisoned(gpu), p.v.poisoned(gpu)],
        ),
    };
    let (bo, bl, bdo) = (p.out.poisoned(gpu), p.lse.poisoned(gpu), p.dout.upload(gpu));
    let keep_buffer = p
        .keep
        .as_ref()
        .map(|k| GpuBuffer::from_slice(gpu, &k.values).unwrap());
    let keep = p
        .keep
        .as_ref()
        .zip(keep_buffer.as_ref())
        .map(|(k, buf)| GpuArg::bound(buf, &k.view, k.bound.clone()).unwrap());
    let args = AttentionArgs {
        q: p.q.gpu_arg(&inputs[0]),
        k: p.k.gpu_arg(&inputs[1]),
        v: p.v.gpu_arg(&inputs[2]),
        out: p.out.gpu_arg(&bo),
        probs: p.lse.gpu_arg(&bl),
    };
    let flash_grads = FlashGrads {
        dout: p.dout.gpu_arg(&bdo),
        dq: p.q.gpu_arg(&grads[0]),
        dk: p.k.gpu_arg(&grads[1]),
        dv: p.v.gpu_arg(&grads[2]),
    };
    let mut batch = gpu.batch();
    op.forward(&mut batch, &args, keep.as_ref()).unwrap();
    op.backward(&mut batch, &args, keep.as_ref(), &flash_grads)
        .unwrap();
    batch.submit().unwrap();
    let tensors = [&p.q, &p.k, &p.v];
    Reference {
        out: p.out.download(&bo),
        lse: p.lse.download(&bl),
        grads: [0, 1, 2].map(|i| tensors[i].download(&grads[i])),
    }
}

/// `got` and `want` over the largest magnitude of `want` (gradients are small).
fn at_scale_one(got: &[f64], want: &[f64]) -> (Vec<f64>, Vec<f64>) {
    let max = want.iter().fold(0.0f64, |m, v| m.max(v.abs()));
    assert!(max > 0.0, "a result of zeros tests nothing");
    let scaled = |v: &[f64]| v.iter().map(|x| x / max).collect();
    (scaled(got), scaled(want))
}

fn compare(what: &str, got: &Reference, want: &Reference, tol: f64) {
    let (g, w) = at_scale_one(&got.out, &want.out);
    assert_close(&format!("{what}: out"), &g, &w, tol);
    // The log-sum-exp of a row that sees no key is a sentinel, equal on both sides.
    assert_close(&format!("{what}: lse"), &got.lse, &want.lse, tol);
    for (name, (g, w)) in ["dq", "dk", "dv"]
        .iter()
        .zip(got.grads.iter().zip(&want.grads))
    {
        let (g, w) = at_scale_one(g, w);
        assert_close(&format!("{what}: {name}"), &g, &w, tol);
    }
}

const HEADS: [(u32, u32); 3] = [(4, 4), (4, 2), (4, 1)];
const MASKS: [Mask; 4] = [
    Mask::None,
    Mask::Causal { offset: 0 },
    Mask::Causal { offset: 2 },
    Mask::Keys,
];

fn cases(elems: &[ElemType]) -> Vec<Case> {
    let mut out = Vec::new();
    for &elem in elems {
        for (n, heads) in HEADS.into_iter().enumerate() {
            for (m, mask) in MASKS.into_iter().enumerate() {
                let storage = match (n + m) % 3 {
                    0 => Storage::Separate { rtile: false },
                    1 => Storage::Separate { rtile: true },
                    _ => Storage::Fused,
                };
                // Heads of 6 need scalar loads; R-Tile's 4×4 tiles want heads of 8.
                let head_dim = if (n + m) % 2 == 0 && storage != (Storage::Separate { rtile: true })
                {
                    6
                } else {
                    8
                };
                out.push(Case {
                    heads,
                    head_dim,
                    mask,
                    storage,
                    seq: 13,
                    elem,
                });
            }
        }
    }
    out
}

#[test]
fn cpu_twin_matches_the_definitions() {
    let mut rng = Rng::new(11);
    for case in cases(&[ElemType::F32]) {
        let p = Problem::new(&mut rng, case);
        let want = reference(&p);
        compare(&format!("cpu {case:?}"), &cpu_run::<f64>(&p), &want, 1e-12);
    }
}

#[test]
fn cpu_twin_backward_matches_finite_differences() {
    let mut rng = Rng::new(12);
    let h = 1e-6;
    for (heads, mask) in [
        ((4, 2), Mask::Causal { offset: 0 }),
        ((2, 1), Mask::Keys),
        ((2, 2), Mask::None),
    ] {
        let case = Case {
            heads,
            head_dim: 3,
            mask,
            storage: Storage::Separate { rtile: false },
            seq: 5,
            elem: ElemType::F32,
        };
        let p = Problem::new(&mut rng, case);
        let got = cpu_run::<f64>(&p);
        // loss = Σ dO ⊙ O, O from the CPU forward at other values of Q, K or V.
        let loss = |which: usize, x: &[f64]| -> f64 {
            let mut vals = [p.q.values.clone(), p.k.values.clone(), p.v.values.clone()];
            vals[which] = x.to_vec();
            let moved = Problem {
                q: p.q.with_values(vals[0].clone()),
                k: p.k.with_values(vals[1].clone()),
                v: p.v.with_values(vals[2].clone()),
                fused: None,
                out: p.out.clone(),
                lse: p.lse.clone(),
                dout: p.dout.clone(),
                keep: p.keep.as_ref().map(|k| Keep {
                    view: k.view.clone(),
                    bound: k.bound.clone(),
                    values: k.values.clone(),
                }),
                attention: p.attention,
            };
            let out = cpu_run::<f64>(&moved).out;
            out.iter().zip(&p.dout.values).map(|(a, b)| a * b).sum()
        };
        for (which, (name, x)) in [("dq", &p.q), ("dk", &p.k), ("dv", &p.v)]
            .into_iter()
            .enumerate()
        {
            let fd = finite_differences(&x.values, h, |x| loss(which, x));
            assert_close(&format!("{name} {case:?}"), &got.grads[which], &fd, 1e-7);
        }
    }
}

#[test]
fn gpu_matches_the_definitions_for_every_grouping_mask_storage_and_element_type() {
    let mut rng = Rng::new(13);
    assert!(
        gpu_elems().contains(&ElemType::F16),
        "lavapipe has SHADER_F16; the f16 path must be tested"
    );
    for case in cases(&gpu_elems()) {
        let p = Problem::new(&mut rng, case);
        let got = gpu_run(gpu(), &p);
        // Against the definitions on the values as stored (f16 inputs are rounded already);
        // f16 outputs round once more.
        let want = reference(&p);
        let tol = tolerance(case.elem, 4 * case.seq as usize);
        compare(&format!("gpu {case:?}"), &got, &want, tol);
    }
}

/// On a device with tensor cores, `f16` heads of 16, 32 and 64 run on the tensor-core kernels
/// (`tensor_cores`; `new` takes them from heads of `TENSOR_HEAD_DIM`): every grouping and mask, rows that see no key, each storage, sequences
/// inside one block of 64, over one block and over two workgroups of 64 queries, against the
/// definitions. P and dS are rounded to `f16` before their products (as FlashAttention does),
/// hence twice the `f16` tolerance.
#[test]
fn tensor_core_kernels_match_the_definitions() {
    const TEST: &str = "tensor_core_kernels_match_the_definitions";
    let Some(gpu) = coop_gpu(TEST) else {
        return;
    };
    let mut rng = Rng::new(21);
    let storages = [
        Storage::Separate { rtile: false },
        Storage::Fused,
        Storage::Separate { rtile: true },
    ];
    let mut ran = 0;
    for (n, (head_dim, seq)) in [(16, 13), (32, 70), (64, 130), (32, 13)]
        .into_iter()
        .enumerate()
    {
        for (m, mask) in MASKS.into_iter().enumerate() {
            let case = Case {
                heads: HEADS[(n + m) % 3],
                head_dim,
                mask,
                storage: storages[(n + 2 * m) % 3],
                seq,
                elem: ElemType::F16,
            };
            let p = Problem::new(&mut rng, case);
            let keep = p.keep.as_ref().map(|k| &k.view);
            let op = match FlashAttentionOp::tensor_cores(gpu, &p.views(), keep, p.attention) {
                Ok(op) => op,
                Err(e) => {
                    let why = format!("{TEST}: SKIPPED: {}: {e}", gpu.info());
                    if std::env::var(REQUIRE).is_ok_and(|v| v == "1") {
                        panic!("{why}, and {REQUIRE}=1 requires it");
                    }
                    eprintln!("{why}");
                    return;
                }
            };
            assert!(op.on_tensor_cores());
            // dK and dV in one kernel where they are separate buffers: every storage but the
            // fused projection's.
            assert!(op.grad_kv_shader().is_some());
            assert_eq!(
                FlashAttentionOp::new(gpu, &p.views(), keep, p.attention)
                    .unwrap()
                    .on_tensor_cores(),
                head_dim >= TENSOR_HEAD_DIM
            );
            let got = gpu_run_op(gpu, &p, &op);
            let tol = 2.0 * tolerance(ElemType::F16, 4 * seq as usize);
            compare(&format!("tensor cores {case:?}"), &got, &reference(&p), tol);
            ran += 1;
        }
    }
    assert_eq!(ran, 16);
}

#[test]
fn gpu_spans_several_workgroups_and_blocks() {
    // 70 queries: one workgroup of 128 rows, mostly idle, and three blocks of staged keys,
    // the last partial (other launches, with several workgroups, are tested below).
    let mut rng = Rng::new(14);
    for (mask, storage) in [
        (Mask::Causal { offset: 0 }, Storage::Fused),
        (Mask::Keys, Storage::Separate { rtile: true }),
        (Mask::None, Storage::Separate { rtile: false }),
    ] {
        let case = Case {
            heads: (2, 1),
            head_dim: 8,
            mask,
            storage,
            seq: 70,
            elem: ElemType::F32,
        };
        let p = Problem::new(&mut rng, case);
        let got = gpu_run(gpu(), &p);
        compare(
            &format!("gpu {case:?}"),
            &got,
            &reference(&p),
            tolerance(ElemType::F32, 280),
        );
    }
}

#[test]
fn other_launches_compute_the_same_and_bad_ones_are_refused() {
    // 70 tokens: with 32 rows a workgroup three workgroups, the last partial; with 64 two;
    // staged blocks of 8, 32 and 1.
    let mut rng = Rng::new(17);
    let case = Case {
        heads: (4, 2),
        head_dim: 8,
        mask: Mask::Causal { offset: 0 },
        storage: Storage::Fused,
        seq: 70,
        elem: ElemType::F32,
    };
    let p = Problem::new(&mut rng, case);
    let want = reference(&p);
    for (rows, staged) in [(32, 8), (64, 32), (64, 1)] {
        let launch = FlashLaunch { rows, staged };
        let got = gpu_run_launched(gpu(), &p, launch);
        compare(
            &format!("{launch:?}"),
            &got,
            &want,
            tolerance(ElemType::F32, 280),
        );
    }
    for (rows, staged) in [(48, 8), (32, 64), (64, 0), (512, 8)] {
        let launch = FlashLaunch { rows, staged };
        let err = FlashAttentionOp::with_launch(gpu(), &p.views(), None, p.attention, launch)
            .unwrap_err();
        assert!(err.to_string().contains("doesn't fit"), "{launch:?}: {err}");
    }
    // Tensor cores take f16 heads of a multiple of 16: f32 heads of 8 are refused with the
    // reason (on a device without cooperative matrices, that one).
    let err = FlashAttentionOp::tensor_cores(gpu(), &p.views(), None, p.attention).unwrap_err();
    assert!(
        matches!(err, OpError::Unsupported { .. })
            && err.to_string().contains("no tensor-core attention"),
        "{err}"
    );
}

#[test]
fn shaders_read_four_wide_where_the_layout_allows() {
    let mut rng = Rng::new(15);
    let case = |storage, head_dim| Case {
        heads: (4, 2),
        head_dim,
        mask: Mask::Causal { offset: 0 },
        storage,
        seq: 13,
        elem: ElemType::F32,
    };
    let wide = Problem::new(&mut rng, case(Storage::Fused, 8));
    let op = FlashAttentionOp::new(gpu(), &wide.views(), None, wide.attention).unwrap();
    let [forward, grad_q, grad_k, grad_v] = op.shaders();
    assert!(forward.contains("q_load4(") && forward.contains("out_store4("));
    assert!(grad_q.contains("dq_store4(") && grad_k.contains("dk_store4("));
    assert!(grad_v.contains("dv_store4(") && !grad_v.contains("Operand `v`"));
    let narrow = Problem::new(&mut rng, case(Storage::Separate { rtile: false }, 6));
    let op = FlashAttentionOp::new(gpu(), &narrow.views(), None, narrow.attention).unwrap();
    assert!(op.shaders().iter().all(|s| !s.contains("_load4(")));
}

#[test]
fn bad_input_is_a_typed_error() {
    let mut rng = Rng::new(16);
    let case = Case {
        heads: (4, 2),
        head_dim: 8,
        mask: Mask::None,
        storage: Storage::Separate { rtile: false },
        seq: 13,
        elem: ElemType::F32,
    };
    let p = Problem::new(&mut rng, case);
    // An f16 log-sum-exp.
    let lse16 = LayoutSpec::new("lse")
        .elem(ElemType::F16)
        .dyn_axis("batch")
        .axis("heads", 4)
        .dyn_axis("q")
        .build()
        .unwrap()
        .view();
    let views = AttentionViews {
        scores: &lse16,
        ..p.views()
    };
    let err = FlashAttentionOp::new(gpu(), &views, None, p.attention).unwrap_err();
    assert!(
        matches!(err, OpError::Unsupported { role: "lse", .. }),
        "{err}"
    );
    // A log-sum-exp with the wrong heads.
    let lse3 = lse_view(3);
    let views = AttentionViews {
        scores: &lse3,
        ..p.views()
    };
    let err = FlashAttentionOp::new(gpu(), &views, None, p.attention).unwrap_err();
    assert!(err.to_string().contains("heads"), "{err}");
    // A padding mask without `Mask::Keys`, and `Mask::Keys` without one.
    let keep = keep_view();
    let err = FlashAttentionOp::new(gpu(), &p.views(), Some(&keep), p.attention).unwrap_err();
    assert!(err.to_string().contains("Mask::Keys"), "{err}");
    let keys = Attention {
        mask: Mask::Keys,
        ..p.attention
    };
    let err = FlashAttentionOp::new(gpu(), &p.views(), None, keys).unwrap_err();
    assert!(err.to_string().contains("keep"), "{err}");
    // Recording: a log-sum-exp bound to another sequence length.
    let op = FlashAttentionOp::new(gpu(), &p.views(), None, p.attention).unwrap();
    let (bq, bk, bv, bo) = (
        p.q.upload(gpu()),
        p.k.upload(gpu()),
        p.v.upload(gpu()),
        p.out.poisoned(gpu()),
    );
    let short = Tensor::random(
        &mut rng,
        lse_view(4),
        vec![("batch".into(), BATCH), ("q".into(), 12)],
        0.0,
        1.0,
    );
    let bl = short.poisoned(gpu());
    let args = AttentionArgs {
        q: p.q.gpu_arg(&bq),
        k: p.k.gpu_arg(&bk),
        v: p.v.gpu_arg(&bv),
        out: p.out.gpu_arg(&bo),
        probs: short.gpu_arg(&bl),
    };
    let mut batch = gpu().batch();
    let err = op.forward(&mut batch, &args, None).unwrap_err();
    assert!(err.to_string().contains("seq_q"), "{err}");
    // A batch past the grid's third dimension (65 535 workgroups): a typed error, not a
    // dispatch the device refuses or a wrong answer.
    let b = 65_536u32;
    let one = |name: &str, heads: u32| {
        LayoutSpec::new(name)
            .dyn_axis("batch")
            .dyn_axis("seq")
            .axis("heads", heads)
            .axis("head_dim", 4)
            .build()
            .unwrap()
            .view()
    };
    let (q1, k1, o1) = (one("q", 1), one("k", 1), one("o", 1));
    let l1 = lse_view(1);
    let views = AttentionViews {
        q: &q1,
        k: &k1,
        v: &k1,
        out: &o1,
        scores: &l1,
    };
    let attention = Attention::new(1, 1, 4, Mask::None);
    let op = FlashAttentionOp::new(gpu(), &views, None, attention).unwrap();
    let tokens = [("batch", b), ("seq", 1)];
    let buf = |n: u32| GpuBuffer::zeroed::<f32>(gpu(), n as usize).unwrap();
    let (bq, bo, bl) = (buf(4 * b), buf(4 * b), buf(b));
    let args = AttentionArgs {
        q: GpuArg::new(&bq, &q1, &tokens).unwrap(),
        k: GpuArg::new(&bq, &k1, &tokens).unwrap(),
        v: GpuArg::new(&bq, &k1, &tokens).unwrap(),
        out: GpuArg::new(&bo, &o1, &tokens).unwrap(),
        probs: GpuArg::new(&bl, &l1, &[("batch", b), ("q", 1)]).unwrap(),
    };
    let mut batch = gpu().batch();
    let err = op.forward(&mut batch, &args, None).unwrap_err();
    assert!(
        err.to_string().contains("65535") || err.to_string().contains("grid"),
        "{err}"
    );
}
