//! Benchmark: one layer's attention, forward and backward, materialised against fused, and the
//! fused kernels under several launches.
//!
//! Q, K and V are views of one row-major fused projection `[batch, seq, (heads + 2·kv_heads) ·
//! head_dim]`, or with `--separate` three tensors `[batch, seq, heads, head_dim]` (as after
//! RoPE, where the tensor-core set writes `dK` and `dV` in one kernel); the context is `[batch,
//! seq, heads, head_dim]`; `--kv-heads` groups the query heads (grouped-query attention);
//! `--elem f16` stores them in `f16` (as a mixed precision step does). The ways, timed in the
//! same process:
//!
//! - **materialised**: [`AttentionOp`], the probabilities `[batch, heads, seq, seq]` stored (in
//!   the element type), its six products on tensor cores where the device has them and the
//!   operands are `f16` (tiles tuned first, as a training step does);
//! - **fused, tensor cores**: [`FlashAttentionOp::tensor_cores`] (`f16`, heads of a multiple
//!   of 16 up to 64, on a device with cooperative matrices);
//! - **fused R×S**: [`FlashAttentionOp`]'s shader-core kernels launched with R rows a workgroup
//!   and S rows staged (`--launches`, default the op's own choice, or 128×32 where the op took
//!   tensor cores, and their neighbours).
//!
//! A pass is the forward and the backward; its time is the wall clock around submitting and
//! waiting for `--reps` passes in one batch, divided by `--reps`, the median over `--samples`
//! batches, the ways interleaved so that a slow spell hits them alike. TFLOP/s counts the
//! materialised attention's six products (`12·b·h·s²·d`) for every way, so the figures compare
//! time. After timing, each fused way's output and gradients are compared with the
//! materialised one's, so a fast wrong launch fails the run. A last table gives each way's
//! kernels alone: one pass with every dispatch timed (GPU timestamps where the device has them),
//! the median of `--samples` such passes.
//!
//! On an H100 at the encoder's shape: `bench_flash --batch 32 --seq 128 --heads 12
//! --head-dim 32 --elem f16 --samples 9 --reps 10`.
//!
//! Run: `cargo run --release -p fblayout-examples --example bench_flash [-- --help]`

mod support;

use std::process::ExitCode;
use std::time::Instant;

use clap::Parser;
use fblayout_core::layout::{ElemType, LayoutSpec, View};
use fblayout_kernels::ops::attention::flash::{FlashAttentionOp, FlashGrads, FlashLaunch};
use fblayout_kernels::ops::{
    Attention, AttentionArgs, AttentionOp, AttentionViews, Mask, qkv_views,
};
use fblayout_kernels::runtime::{Batch, Gpu, GpuBuffer};
use fblayout_kernels::tensor::GpuArg;
use support::{Res, Rng, err, exit, median, print_adapter};

/// Times one attention layer, materialised against fused, on the first GPU adapter.
#[derive(Parser)]
struct Args {
    /// Sequences.
    #[arg(long, default_value_t = 2)]
    batch: u32,
    /// Tokens per sequence.
    #[arg(long, default_value_t = 64)]
    seq: u32,
    /// Heads.
    #[arg(long, default_value_t = 4)]
    heads: u32,
    /// Key/value heads (a divisor of `--heads`) [default: `--heads`].
    #[arg(long)]
    kv_heads: Option<u32>,
    /// Q, K and V as three tensors, not views of one fused projection.
    #[arg(long)]
    separate: bool,
    /// Elements of a head.
    #[arg(long, default_value_t = 32)]
    head_dim: u32,
    /// The element type of Q, K, V, the context and the probabilities: f32 or f16.
    #[arg(long, default_value = "f32", value_parser = parse_elem)]
    elem: ElemType,
    /// A causal mask (else none).
    #[arg(long)]
    causal: bool,
    /// The fused launches to time, `ROWSxSTAGED`, comma-separated [default: the op's own and
    /// its neighbours].
    #[arg(long, value_delimiter = ',', value_parser = parse_launch)]
    launches: Vec<FlashLaunch>,
    /// Timed batches per way (the median is reported).
    #[arg(long, default_value_t = 5)]
    samples: usize,
    /// Passes per batch.
    #[arg(long, default_value_t = 3)]
    reps: usize,
}

fn parse_elem(s: &str) -> Result<ElemType, String> {
    match s {
        "f32" => Ok(ElemType::F32),
        "f16" => Ok(ElemType::F16),
        _ => Err(format!("`{s}`: the element types are f32 and f16")),
    }
}

fn parse_launch(s: &str) -> Result<FlashLaunch, String> {
    let (rows, staged) = s
        .split_once('x')
        .ok_or_else(|| format!("`{s}` is no `ROWSxSTAGED`"))?;
    let n = |t: &str| t.parse::<u32>().map_err(|e| format!("`{t}` in `{s}`: {e}"));
    Ok(FlashLaunch {
        rows: n(rows)?,
        staged: n(staged)?,
    })
}

/// `buf` read through `view` bound to `bind`.
fn arg<'a>(buf: &'a GpuBuffer, view: &'a View, bind: &[(&str, u32)]) -> Res<GpuArg<'a>> {
    GpuArg::new(buf, view, bind).map_err(err)
}

fn main() -> ExitCode {
    exit("bench_flash", run(&Args::parse()))
}

/// One way of computing the layer.
enum Way {
    Materialised(Box<AttentionOp>),
    Fused(Box<FlashAttentionOp>),
}

/// The buffers of one layer: Q, K and V (one buffer three times for a fused projection), the
/// context and what the forward saves, the context's gradient and those of Q, K and V.
struct Buffers {
    qkv: [GpuBuffer; 3],
    out: GpuBuffer,
    saved: GpuBuffer,
    dout: GpuBuffer,
    dqkv: [GpuBuffer; 3],
}

fn run(args: &Args) -> Res<()> {
    let gpu = Gpu::new().map_err(err)?;
    print_adapter(&gpu);
    let (b, s, h, d) = (args.batch, args.seq, args.heads, args.head_dim);
    let elem = args.elem;
    let mask = if args.causal {
        Mask::Causal { offset: 0 }
    } else {
        Mask::None
    };
    let kv = args.kv_heads.unwrap_or(h);
    let attention = Attention::new(h, kv, d, mask);
    let heads = |name: &str, n: u32| -> Res<View> {
        Ok(LayoutSpec::new(name)
            .elem(elem)
            .dyn_axis("batch")
            .dyn_axis("seq")
            .axis("heads", n)
            .axis("head_dim", d)
            .build()
            .map_err(err)?
            .view())
    };
    let (q, k, v) = if args.separate {
        (heads("q", h)?, heads("k", kv)?, heads("v", kv)?)
    } else {
        let fused_view = LayoutSpec::new("qkv")
            .elem(elem)
            .dyn_axis("batch")
            .dyn_axis("seq")
            .axis("hidden", (h + 2 * kv) * d)
            .build()
            .map_err(err)?
            .view();
        qkv_views(&fused_view, h, kv).map_err(err)?
    };
    let out = heads("o", h)?;
    let probs = LayoutSpec::new("p")
        .elem(elem)
        .dyn_axis("batch")
        .axis("heads", h)
        .dyn_axis("q")
        .dyn_axis("k")
        .build()
        .map_err(err)?
        .view();
    let lse = LayoutSpec::new("lse")
        .dyn_axis("batch")
        .axis("heads", h)
        .dyn_axis("q")
        .build()
        .map_err(err)?
        .view();
    let views = |scores| AttentionViews {
        q: &q,
        k: &k,
        v: &v,
        out: &out,
        scores,
    };
    let mut ways: Vec<(String, Way)> = vec![(
        "materialised".into(),
        Way::Materialised(Box::new(
            AttentionOp::new(&gpu, &views(&probs), attention).map_err(err)?,
        )),
    )];
    match FlashAttentionOp::tensor_cores(&gpu, &views(&lse), None, attention) {
        Ok(op) => ways.push(("fused, tensor cores".into(), Way::Fused(Box::new(op)))),
        Err(e) => println!("fused, tensor cores: skipped ({e})"),
    }
    let default = FlashAttentionOp::new(&gpu, &views(&lse), None, attention).map_err(err)?;
    // The shader-core launches: the op's own, or around 128 rows staging 32 where it took
    // tensor cores.
    let own = if default.on_tensor_cores() {
        FlashLaunch {
            rows: 128,
            staged: 32,
        }
    } else {
        default.launch()
    };
    let launches = if args.launches.is_empty() {
        let mut l = vec![own];
        for (rows, staged) in [
            (32, own.staged),
            (128, own.staged),
            (own.rows, 16),
            (own.rows, 64),
        ] {
            let other = FlashLaunch { rows, staged };
            if !l.contains(&other) {
                l.push(other);
            }
        }
        l
    } else {
        args.launches.clone()
    };
    for launch in launches {
        match FlashAttentionOp::with_launch(&gpu, &views(&lse), None, attention, launch) {
            Ok(op) => ways.push((
                format!("fused {}×{}", launch.rows, launch.staged),
                Way::Fused(Box::new(op)),
            )),
            Err(e) => println!("fused {}×{}: skipped ({e})", launch.rows, launch.staged),
        }
    }
    // The buffers, one set per way (the same inputs).
    let tokens = (b * s) as usize;
    let mut rng = Rng(7);
    let values = |n: usize, rng: &mut Rng| -> Vec<f32> {
        (0..n).map(|_| (rng.uniform() * 2.0 - 1.0) as f32).collect()
    };
    // Q, K and V's values: one projection's, or each tensor's.
    let widths = if args.separate {
        vec![h * d, kv * d, kv * d]
    } else {
        vec![(h + 2 * kv) * d]
    };
    let qkv_values: Vec<Vec<f32>> = widths
        .iter()
        .map(|&w| values(tokens * w as usize, &mut rng))
        .collect();
    let dout_values = values(tokens * (h * d) as usize, &mut rng);
    let upload = |v: &[f32]| -> Res<GpuBuffer> {
        match elem {
            ElemType::F16 => {
                let h: Vec<half::f16> = v.iter().map(|&x| half::f16::from_f32(x)).collect();
                GpuBuffer::from_slice(&gpu, &h).map_err(err)
            }
            _ => GpuBuffer::from_slice(&gpu, v).map_err(err),
        }
    };
    let bytes = |n: usize, e: ElemType| n * e.size_bytes() as usize;
    let mut buffers = Vec::new();
    for (_, way) in &ways {
        let saved = match way {
            Way::Materialised(_) => bytes(b as usize * (h * s * s) as usize, elem),
            Way::Fused(_) => bytes(b as usize * (h * s) as usize, ElemType::F32),
        };
        let inputs = qkv_values
            .iter()
            .map(|v| upload(v))
            .collect::<Res<Vec<_>>>()?;
        let grads = qkv_values
            .iter()
            .map(|v| GpuBuffer::scratch::<u8>(&gpu, bytes(v.len(), elem)).map_err(err))
            .collect::<Res<Vec<_>>>()?;
        // A fused projection's three views read (and write) one buffer.
        let three = |b: Vec<GpuBuffer>| -> [GpuBuffer; 3] {
            std::array::from_fn(|i| b[i.min(b.len() - 1)].clone())
        };
        buffers.push(Buffers {
            qkv: three(inputs),
            out: GpuBuffer::scratch::<u8>(&gpu, bytes(tokens * (h * d) as usize, elem))
                .map_err(err)?,
            saved: GpuBuffer::scratch::<u8>(&gpu, saved).map_err(err)?,
            dout: upload(&dout_values)?,
            dqkv: three(grads),
        });
    }
    let token_bind = [("batch", b), ("seq", s)];
    let pass = |batch: &mut Batch<'_>, way: &Way, bufs: &Buffers| -> Res<()> {
        let arg = |buf, view| arg(buf, view, &token_bind);
        let (saved_view, saved_bind): (&View, Vec<(&str, u32)>) = match way {
            Way::Materialised(_) => (&probs, vec![("batch", b), ("q", s), ("k", s)]),
            Way::Fused(_) => (&lse, vec![("batch", b), ("q", s)]),
        };
        let args = AttentionArgs {
            q: arg(&bufs.qkv[0], &q)?,
            k: arg(&bufs.qkv[1], &k)?,
            v: arg(&bufs.qkv[2], &v)?,
            out: arg(&bufs.out, &out)?,
            probs: GpuArg::new(&bufs.saved, saved_view, &saved_bind).map_err(err)?,
        };
        let (dout, dq, dk, dv) = (
            arg(&bufs.dout, &out)?,
            arg(&bufs.dqkv[0], &q)?,
            arg(&bufs.dqkv[1], &k)?,
            arg(&bufs.dqkv[2], &v)?,
        );
        match way {
            Way::Materialised(op) => {
                op.forward(batch, &args).map_err(err)?;
                op.backward(batch, &args, &dout, &dq, &dk, &dv).map_err(err)
            }
            Way::Fused(op) => {
                op.forward(batch, &args, None).map_err(err)?;
                let grads = FlashGrads { dout, dq, dk, dv };
                op.backward(batch, &args, None, &grads).map_err(err)
            }
        }
    };
    // Tune the materialised products' tiles (as a training step does), then one untimed
    // batch of every way.
    if let Way::Materialised(op) = &ways[0].1 {
        let bufs = &buffers[0];
        let arg = |buf, view| arg(buf, view, &token_bind);
        let args = AttentionArgs {
            q: arg(&bufs.qkv[0], &q)?,
            k: arg(&bufs.qkv[1], &k)?,
            v: arg(&bufs.qkv[2], &v)?,
            out: arg(&bufs.out, &out)?,
            probs: GpuArg::new(&bufs.saved, &probs, &[("batch", b), ("q", s), ("k", s)])
                .map_err(err)?,
        };
        op.tune(&gpu, &args).map_err(err)?;
    }
    let time = |way: &Way, bufs: &Buffers, reps: usize| -> Res<f64> {
        let mut batch = gpu.batch();
        for _ in 0..reps {
            pass(&mut batch, way, bufs)?;
        }
        let started = Instant::now();
        batch.submit().map_err(err)?;
        gpu.wait().map_err(err)?;
        Ok(started.elapsed().as_secs_f64() / reps as f64)
    };
    for ((_, way), bufs) in ways.iter().zip(&buffers) {
        time(way, bufs, 1)?;
    }
    let mut samples: Vec<Vec<f64>> = vec![Vec::new(); ways.len()];
    for _ in 0..args.samples {
        for (((_, way), bufs), t) in ways.iter().zip(&buffers).zip(&mut samples) {
            t.push(time(way, bufs, args.reps)?);
        }
    }
    // The fused ways against the materialised one: the output and the projection's gradient.
    let read = |buf: &GpuBuffer| -> Res<Vec<f64>> {
        Ok(match elem {
            ElemType::F16 => buf
                .read_back::<half::f16>()
                .map_err(err)?
                .iter()
                .map(|x| f64::from(x.to_f32()))
                .collect(),
            _ => buf
                .read_back::<f32>()
                .map_err(err)?
                .iter()
                .map(|&x| f64::from(x))
                .collect(),
        })
    };
    // The gradients of Q, K and V: the one buffer of a fused projection, or the three.
    let grads = |bufs: &Buffers| -> Res<Vec<f64>> {
        let distinct = if args.separate { 3 } else { 1 };
        let mut all = Vec::new();
        for buf in &bufs.dqkv[..distinct] {
            all.extend(read(buf)?);
        }
        Ok(all)
    };
    let (want_out, want_grad) = (read(&buffers[0].out)?, grads(&buffers[0])?);
    let tol = match elem {
        ElemType::F16 => 2e-2,
        _ => 1e-4,
    };
    for ((label, _), bufs) in ways.iter().zip(&buffers).skip(1) {
        for (what, got, want) in [
            ("output", read(&bufs.out)?, &want_out),
            ("gradient", grads(bufs)?, &want_grad),
        ] {
            let scale = want.iter().fold(0.0f64, |m, x| m.max(x.abs())).max(1e-30);
            let worst = got
                .iter()
                .zip(want)
                .map(|(g, w)| (g - w).abs() / scale)
                .fold(0.0f64, f64::max);
            if worst.is_nan() || worst > tol {
                return Err(format!(
                    "{label}: the {what} differs from the materialised one by {worst:.2e} of its \
                     largest value"
                ));
            }
        }
    }
    let flops = 12.0 * f64::from(b) * f64::from(h) * f64::from(s) * f64::from(s) * f64::from(d);
    println!(
        "\none attention layer, forward and backward: batch {b} × seq {s}, {h} heads of {d} ({kv} key/value heads, {}), {elem}, {} mask; median of {} batches of {} passes\n",
        if args.separate {
            "separate Q, K and V"
        } else {
            "one fused projection"
        },
        if args.causal { "causal" } else { "no" },
        args.samples,
        args.reps
    );
    println!("| way | ms | materialised / this | TFLOP/s (6 products) |");
    println!("|---|---:|---:|---:|");
    let base = median(samples[0].clone());
    for ((label, _), t) in ways.iter().zip(samples) {
        let ms = median(t);
        println!(
            "| {label} | {:.3} | {:.2}× | {:.1} |",
            ms * 1e3,
            base / ms,
            flops / ms / 1e12
        );
    }
    // Each way's kernels alone: one pass, every dispatch timed (a kernel's dispatches in the
    // pass summed), the median of `--samples` passes.
    println!("\n| way | kernel | µs |\n|---|---|---:|");
    for ((label, way), bufs) in ways.iter().zip(&buffers) {
        let mut kernels: Vec<(String, Vec<f64>)> = Vec::new();
        for _ in 0..args.samples {
            let mut batch = gpu.batch();
            pass(&mut batch, way, bufs)?;
            let mut sums: Vec<(String, f64)> = Vec::new();
            for t in batch.submit_timed().map_err(err)? {
                match sums.iter_mut().find(|(l, _)| *l == t.label) {
                    Some((_, us)) => *us += t.nanos / 1e3,
                    None => sums.push((t.label, t.nanos / 1e3)),
                }
            }
            for (kernel, us) in sums {
                match kernels.iter_mut().find(|(l, _)| *l == kernel) {
                    Some((_, times)) => times.push(us),
                    None => kernels.push((kernel, vec![us])),
                }
            }
        }
        for (kernel, times) in kernels {
            println!("| {label} | {kernel} | {:.1} |", median(times));
        }
    }
    Ok(())
}
