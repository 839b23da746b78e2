//! Benchmark: multi-head attention forward and backward, through views against explicit
//! transposes.
//!
//! Times the attention of one transformer layer at BERT shapes (12 heads of 64; sequence 128
//! and 512, batches from the flags) and reports GFLOP/s of its products (forward: `Q·Kᵀ` and
//! `P·V`, `4·b·h·s²·d` flops; backward: four products, twice that). Each shape runs three
//! ways in the same process:
//!
//! - **views, row-major**: [`AttentionOp`] with Q, K and V views of one fused row-major
//!   projection `[batch, seq, 3·hidden]` ([`qkv_views`]), the output `[batch, seq, heads,
//!   head_dim]` and the probabilities `[batch, heads, seq, seq]` row-major: every permute and
//!   transpose is a view, dQ, dK and dV land in one fused gradient buffer;
//! - **views, R-Tile**: the same op with the projection, the output and the scores in R-Tile
//!   (4×4 tiles; the scores' forward axis is the key);
//! - **(b) row-major + explicit transposes**: what a framework without views runs: Q, K and V
//!   permuted `[b, s, h, d] → [b, h, s, d]` into dense copies, `Kᵀ` written densely, the
//!   products on dense row-major operands, the output permuted back; in the backward dO
//!   permuted, `Pᵀ`, `Vᵀ` and `dSᵀ` written densely, and dQ, dK and dV permuted back into the
//!   fused gradient. The copies are a tiled transpose kernel (16×16 tiles through workgroup
//!   memory, written with the kernel surface), recorded in the same batch as the products.
//!   The softmax is the op's kernel (with the scale, as in the op), the products the
//!   `f32`-summing GEMM (the op's are too, but for `--elem f16` on a device with tensor
//!   cores, where the op's run on them).
//!
//! The time of a pass is the wall clock around `Batch::submit` and `Gpu::wait` of `--reps`
//! passes in one batch, divided by `--reps`, the median over `--samples` batches after a
//! warm-up. The samples are interleaved (each one times every way in turn), so a slow spell
//! of a shared machine hits all ways alike. The table also gives the CPU time of recording a
//! forward and a backward into a batch. After timing, the outputs and gradients of both view
//! layouts are compared with those of (b), so a fast wrong path fails the run.
//!
//! Defaults run in seconds on lavapipe. On a large GPU (BERT-base training shapes):
//!
//! `bench_attention --batch-128 32 --batch-512 8 --samples 9 --reps 10`
//!
//! Run: `cargo run --release -p fblayout-examples --example bench_attention [-- --help]`

mod support;

use std::process::ExitCode;
use std::time::Instant;
use support::{Res, Rng, err, median};

use clap::Parser;
use fblayout_core::kernel::{KernelModule, KernelSource, Operand, ParamValue};
use fblayout_core::layout::{BoundView, ElemType, LayoutSpec, View};
use fblayout_kernels::ops::matmul::{MatmulOp, Scale};
use fblayout_kernels::ops::{
    Attention, AttentionArgs, AttentionOp, AttentionViews, Mask, Softmax, SoftmaxOp, qkv_views,
};
use fblayout_kernels::runtime::{Batch, Gpu, GpuBuffer};
use fblayout_kernels::tensor::GpuArg;

/// Times attention forward and backward (views against explicit transposes) on the first GPU
/// adapter.
#[derive(Parser)]
struct Args {
    /// Batch at sequence 128 (BERT-base training on an H200: 32); 0 skips the shape.
    #[arg(long, default_value_t = 2)]
    batch_128: u32,
    /// Batch at sequence 512 (on an H200: 8); 0 skips the shape.
    #[arg(long, default_value_t = 1)]
    batch_512: u32,
    /// Query heads.
    #[arg(long, default_value_t = 12)]
    heads: u32,
    /// Key/value heads (grouped-query attention when fewer than --heads; default: --heads).
    #[arg(long)]
    kv_heads: Option<u32>,
    /// Elements per head.
    #[arg(long, default_value_t = 64)]
    head_dim: u32,
    /// Mask the scores causally (a decoder) instead of not at all (an encoder).
    #[arg(long)]
    causal: bool,
    /// Element type of every tensor: f32 or f16 (f16 only where the device has SHADER_F16).
    #[arg(long, default_value = "f32")]
    elem: String,
    /// Timed samples per measurement (the median is reported).
    #[arg(long, default_value_t = 3)]
    samples: usize,
    /// Passes per sample, recorded in one batch.
    #[arg(long, default_value_t = 2)]
    reps: usize,
    /// Also print which operands of each product are read and written four elements at a
    /// time.
    #[arg(long)]
    vectors: bool,
    /// Also print the time of every dispatch of one forward and backward of each way (GPU
    /// timestamps where the device has them).
    #[arg(long)]
    breakdown: bool,
}

/// A tensor on the GPU: its view, its run-time extents and its buffer.
struct Tensor {
    view: View,
    bind: Vec<(&'static str, u32)>,
    bound: BoundView,
    buffer: GpuBuffer,
}

impl Tensor {
    /// `view` bound to `bind`, random when `rng` is given (padding 0), else unspecified (an
    /// output).
    fn new(
        gpu: &Gpu,
        view: View,
        bind: Vec<(&'static str, u32)>,
        rng: Option<&mut Rng>,
    ) -> Res<Self> {
        let bound = view.bind(&bind).map_err(err)?;
        let len = bound.len() as usize;
        let elem = view.layout().elem();
        let buffer = match rng {
            None => GpuBuffer::scratch::<u8>(gpu, len * elem.size_bytes() as usize),
            Some(rng) => {
                // Drawn per logical element, so every layout holds the same tensor.
                let logical: Vec<f64> = (0..bound.logical_len()).map(|_| rng.uniform()).collect();
                let values = bound.pack(&logical).map_err(err)?;
                match elem {
                    ElemType::F16 => {
                        let h: Vec<half::f16> =
                            values.iter().map(|&v| half::f16::from_f64(v)).collect();
                        GpuBuffer::from_slice(gpu, &h)
                    }
                    _ => {
                        let f: Vec<f32> = values.iter().map(|&v| v as f32).collect();
                        GpuBuffer::from_slice(gpu, &f)
                    }
                }
            }
        }
        .map_err(err)?;
        Ok(Self {
            view,
            bind,
            bound,
            buffer,
        })
    }

    /// The tensor read through its own view.
    fn arg(&self) -> Res<GpuArg<'_>> {
        self.arg_as(&self.view)
    }

    /// The tensor read through `view`, another view of it.
    fn arg_as<'a>(&'a self, view: &'a View) -> Res<GpuArg<'a>> {
        GpuArg::new(&self.buffer, view, &self.bind).map_err(err)
    }

    /// Its elements as the GPU left them, dense row-major over its own view.
    fn logical(&self) -> Res<Vec<f64>> {
        let n = self.bound.len() as usize;
        let physical: Vec<f64> = match self.view.layout().elem() {
            ElemType::F16 => self.buffer.read_back::<half::f16>().map_err(err)?[..n]
                .iter()
                .map(|v| v.to_f64())
                .collect(),
            _ => self.buffer.read_back::<f32>().map_err(err)?[..n]
                .iter()
                .map(|&v| f64::from(v))
                .collect(),
        };
        self.bound.unpack(&physical).map_err(err)
    }
}

/// The shape of one measurement.
#[derive(Clone, Copy)]
struct Shape {
    batch: u32,
    seq: u32,
    heads: u32,
    kv_heads: u32,
    head_dim: u32,
    elem: ElemType,
}

impl Shape {
    /// Flops of the forward's two products.
    fn forward_flops(&self) -> f64 {
        4.0 * f64::from(self.batch)
            * f64::from(self.heads)
            * f64::from(self.seq).powi(2)
            * f64::from(self.head_dim)
    }

    fn tokens(&self) -> Vec<(&'static str, u32)> {
        vec![("batch", self.batch), ("seq", self.seq)]
    }

    fn scores_bind(&self) -> Vec<(&'static str, u32)> {
        vec![("batch", self.batch), ("q", self.seq), ("k", self.seq)]
    }

    /// The fused projection `[batch, seq, (heads + 2·kv_heads)·head_dim]`.
    fn fused(&self, rtile: bool) -> Res<View> {
        let hidden = (self.heads + 2 * self.kv_heads) * self.head_dim;
        let spec = LayoutSpec::new("qkv")
            .elem(self.elem)
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
        Ok(spec.build().map_err(err)?.view())
    }

    /// The output `[batch, seq, heads, head_dim]`.
    fn out(&self, rtile: bool) -> Res<View> {
        let spec = LayoutSpec::new("o")
            .elem(self.elem)
            .dyn_axis("batch")
            .dyn_axis("seq");
        let spec = if rtile {
            spec.tile(4, true)
                .axis("heads", self.heads)
                .axis("head_dim", self.head_dim)
                .tile(4, true)
                .rtile()
                .reduce_forward(["head_dim"])
                .reduce_backward(["seq"])
        } else {
            spec.axis("heads", self.heads)
                .axis("head_dim", self.head_dim)
        };
        Ok(spec.build().map_err(err)?.view())
    }

    /// Scores `[batch, heads, q, k]`.
    fn scores(&self, rtile: bool) -> Res<View> {
        let spec = LayoutSpec::new("p")
            .elem(self.elem)
            .dyn_axis("batch")
            .axis("heads", self.heads)
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
        Ok(spec.build().map_err(err)?.view())
    }

    /// A dense row-major `[batch, heads, seq, head_dim]` (`transposed`: `[batch, heads,
    /// head_dim, seq]`) of `heads` heads.
    fn per_head(&self, name: &str, heads: u32, transposed: bool) -> Res<View> {
        let spec = LayoutSpec::new(name)
            .elem(self.elem)
            .dyn_axis("batch")
            .axis("heads", heads);
        let spec = if transposed {
            spec.axis("head_dim", self.head_dim).dyn_axis("seq")
        } else {
            spec.dyn_axis("seq").axis("head_dim", self.head_dim)
        };
        Ok(spec.build().map_err(err)?.view())
    }
}

/// A recording of one pass into a batch.
type Record<'a> = &'a dyn Fn(&mut Batch<'_>) -> Res<()>;

/// One way of running the attention, ready to record.
#[derive(Clone, Copy)]
struct Way<'a> {
    label: &'static str,
    forward: Record<'a>,
    backward: Record<'a>,
    /// Runs one forward and backward and returns the output and the fused gradient, dense.
    results: &'a dyn Fn() -> Res<(Vec<f64>, Vec<f64>)>,
}

/// What [`time_ways`] measured of a way: median seconds per pass.
struct Times {
    /// GPU: a forward, a backward.
    forward: f64,
    backward: f64,
    /// CPU: recording a forward and a backward into a batch.
    record: f64,
}

/// Seconds per pass of `reps` passes of `record` in one batch: (submit to finish, recording).
fn passes(gpu: &Gpu, record: Record<'_>, reps: usize) -> Res<(f64, f64)> {
    let mut batch = gpu.batch();
    let start = Instant::now();
    for _ in 0..reps {
        record(&mut batch)?;
    }
    let recorded = start.elapsed().as_secs_f64();
    let start = Instant::now();
    batch.submit().map_err(err)?;
    gpu.wait().map_err(err)?;
    let ran = start.elapsed().as_secs_f64();
    Ok((ran / reps as f64, recorded / reps as f64))
}

/// Times every way, interleaved: each sample runs every way's forward and backward in turn,
/// so that a slow spell of a shared machine hits all of them alike. Medians over `--samples`.
fn time_ways(gpu: &Gpu, args: &Args, ways: &[Way<'_>]) -> Res<Vec<Times>> {
    let reps = args.reps.max(1);
    // The first passes compile the pipelines and fill the buffer pool.
    for w in ways {
        passes(gpu, w.forward, 1)?;
        passes(gpu, w.backward, 1)?;
    }
    let mut samples: Vec<[Vec<f64>; 3]> = ways.iter().map(|_| Default::default()).collect();
    for _ in 0..args.samples.max(1) {
        for (w, [f, b, r]) in ways.iter().zip(&mut samples) {
            let (tf, rf) = passes(gpu, w.forward, reps)?;
            let (tb, rb) = passes(gpu, w.backward, reps)?;
            f.push(tf);
            b.push(tb);
            r.push(rf + rb);
        }
    }
    Ok(samples
        .into_iter()
        .map(|[f, b, r]| Times {
            forward: median(f),
            backward: median(b),
            record: median(r),
        })
        .collect())
}

/// Runs what `record` records once (for the checks); with `--breakdown`, prints the time of
/// each of its dispatches.
fn run_once(
    gpu: &Gpu,
    args: &Args,
    label: &str,
    record: &dyn Fn(&mut Batch<'_>) -> Res<()>,
) -> Res<()> {
    let mut batch = gpu.batch();
    record(&mut batch)?;
    if !args.breakdown {
        return batch.submit().map_err(err);
    }
    let timings = batch.submit_timed().map_err(err)?;
    let clock = match timings.first() {
        Some(t) if t.gpu_timestamps => "GPU timestamps",
        _ => "wall clock",
    };
    println!("{label}, forward then backward, per dispatch ({clock}):");
    for t in &timings {
        println!("  {:>9.3} ms  {}", t.nanos * 1e-6, t.label);
    }
    Ok(())
}

/// A copy from one view into another of the same rank-4 shape: the transpose or permute a
/// framework without views materialises. Workgroups of 16×16 move one tile of the last two
/// axes through workgroup memory, read with neighbouring invocations along the source's
/// contiguous axis (axis 2 of the shape when `along_rows`, else axis 3) and written along the
/// destination's last axis, so both sides are coalesced.
struct Relayout {
    module: KernelModule,
}

const RELAYOUT: &str = "relayout";

impl Relayout {
    fn new(gpu: &Gpu, src: &View, dst: &View, along_rows: bool) -> Res<Self> {
        // Invocation (x, y) reads element (row, column) of the tile into slot [y][x]: along
        // the rows for a source contiguous along axis 2, so the slot is [column][row], else
        // along the columns, [row][column]. It writes element (y, x), from the slot of that.
        let (read, written) = if along_rows {
            ("t_i0 + lid.x, t_j0 + lid.y", "lid.x][lid.y")
        } else {
            ("t_i0 + lid.y, t_j0 + lid.x", "lid.y][lid.x")
        };
        let body = format!(
            "var<workgroup> t_tile: array<array<f32, 17>, 16>;
fn t_inside(i: u32, j: u32) -> bool {{
    return i < dst_dim2() && j < dst_dim3();
}}
@compute @workgroup_size(16, 16)
fn {RELAYOUT}(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>) {{
    let c0 = wg.z / dst_dim1();
    let c1 = wg.z % dst_dim1();
    let t_i0 = wg.y * 16u;
    let t_j0 = wg.x * 16u;
    let r = vec2<u32>({read});
    if (t_inside(r.x, r.y)) {{
        t_tile[lid.y][lid.x] = src_load(c0, c1, r.x, r.y);
    }}
    workgroupBarrier();
    let w = vec2<u32>(t_i0 + lid.y, t_j0 + lid.x);
    if (t_inside(w.x, w.y)) {{
        dst_store(c0, c1, w.x, w.y, t_tile[{written}]);
    }}
}}"
        );
        let module = KernelSource::new(RELAYOUT)
            .operand(Operand::read("src", src).map_err(err)?)
            .operand(Operand::write("dst", dst).map_err(err)?)
            .body(body)
            .features(gpu.wgsl_features())
            .build()
            .map_err(err)?;
        Ok(Self { module })
    }

    fn record(&self, batch: &mut Batch<'_>, src: &GpuArg<'_>, dst: &GpuArg<'_>) -> Res<()> {
        let d = dst.dims();
        let grid = [
            d[3].div_ceil(16) as u32,
            d[2].div_ceil(16) as u32,
            (d[0] * d[1]) as u32,
        ];
        let mut params = src.params("src");
        params.extend(dst.params("dst"));
        let params: Vec<(&str, ParamValue)> =
            params.iter().map(|(n, v)| (n.as_str(), *v)).collect();
        batch
            .dispatch(
                &self.module,
                RELAYOUT,
                &[("src", src.buffer()), ("dst", dst.buffer())],
                &params,
                grid,
            )
            .map_err(err)
    }
}

/// The tensors every way shares the shapes of: the fused projection and its gradient, the
/// output and its gradient, the probabilities.
struct Layer {
    qkv: Tensor,
    dqkv: Tensor,
    out: Tensor,
    dout: Tensor,
    probs: Tensor,
}

impl Layer {
    /// The layer's tensors, R-Tile or row-major, with the same random inputs for every way
    /// (`seed`).
    fn new(gpu: &Gpu, shape: &Shape, rtile: bool, seed: u64) -> Res<Self> {
        let mut rng = Rng(seed);
        let fused = shape.fused(rtile)?;
        let out = shape.out(rtile)?;
        Ok(Self {
            qkv: Tensor::new(gpu, fused.clone(), shape.tokens(), Some(&mut rng))?,
            dqkv: Tensor::new(gpu, fused, shape.tokens(), None)?,
            out: Tensor::new(gpu, out.clone(), shape.tokens(), None)?,
            dout: Tensor::new(gpu, out, shape.tokens(), Some(&mut rng))?,
            probs: Tensor::new(gpu, shape.scores(rtile)?, shape.scores_bind(), None)?,
        })
    }
}

/// The attention through views ([`AttentionOp`]), with every tensor R-Tile or row-major.
fn views(
    gpu: &Gpu,
    args: &Args,
    (shape, rtile, seed): (&Shape, bool, u64),
    then: &mut dyn FnMut(Way<'_>) -> Res<()>,
) -> Res<()> {
    let layer = Layer::new(gpu, shape, rtile, seed)?;
    let (q, k, v) = qkv_views(&layer.qkv.view, shape.heads, shape.kv_heads).map_err(err)?;
    let views = AttentionViews {
        q: &q,
        k: &k,
        v: &v,
        out: &layer.out.view,
        scores: &layer.probs.view,
    };
    let mask = if args.causal {
        Mask::Causal { offset: 0 }
    } else {
        Mask::None
    };
    let attention = Attention::new(shape.heads, shape.kv_heads, shape.head_dim, mask);
    let op = AttentionOp::new(gpu, &views, attention).map_err(err)?;
    let a = AttentionArgs {
        q: layer.qkv.arg_as(&q)?,
        k: layer.qkv.arg_as(&k)?,
        v: layer.qkv.arg_as(&v)?,
        out: layer.out.arg()?,
        probs: layer.probs.arg()?,
    };
    let (dout, dq, dk, dv) = (
        layer.dout.arg()?,
        layer.dqkv.arg_as(&q)?,
        layer.dqkv.arg_as(&k)?,
        layer.dqkv.arg_as(&v)?,
    );
    if args.vectors {
        let names = ["Q·Kᵀ", "P·V", "Pᵀ·dO", "dO·Vᵀ", "dS·K", "dSᵀ·Q"];
        for (name, gemm) in names.iter().zip(op.gemms()) {
            println!(
                "  rtile={rtile} {name}: vec4 axes of A, B, C {:?}",
                gemm.vector_axes()
            );
        }
    }
    let forward = |b: &mut Batch<'_>| op.forward(b, &a).map_err(err);
    let backward = |b: &mut Batch<'_>| op.backward(b, &a, &dout, &dq, &dk, &dv).map_err(err);
    let label = if rtile {
        "views, R-Tile"
    } else {
        "views, row-major"
    };
    let results = || {
        run_once(gpu, args, label, &|b| {
            forward(b)?;
            backward(b)
        })?;
        Ok((layer.out.logical()?, layer.dqkv.logical()?))
    };
    then(Way {
        label,
        forward: &forward,
        backward: &backward,
        results: &results,
    })
}

/// (b): dense row-major copies, the transposes and permutes written out.
fn explicit(
    gpu: &Gpu,
    args: &Args,
    (shape, seed): (&Shape, u64),
    then: &mut dyn FnMut(Way<'_>) -> Res<()>,
) -> Res<()> {
    let (h, kvh) = (shape.heads, shape.kv_heads);
    if kvh != h {
        return Err("(b) runs multi-head attention only (--kv-heads = --heads)".into());
    }
    let layer = Layer::new(gpu, shape, false, seed)?;
    let (q, k, v) = qkv_views(&layer.qkv.view, h, kvh).map_err(err)?;
    let dense = |name: &str, heads: u32, transposed: bool| -> Res<Tensor> {
        Tensor::new(
            gpu,
            shape.per_head(name, heads, transposed)?,
            shape.tokens(),
            None,
        )
    };
    // Scores-shaped tensors share the probabilities' layout (the softmax reads dP through it).
    let square =
        || -> Res<Tensor> { Tensor::new(gpu, layer.probs.view.clone(), shape.scores_bind(), None) };
    // Dense per-head copies, forward.
    let (qh, kh, vh, kt, oh) = (
        dense("qh", h, false)?,
        dense("kh", kvh, false)?,
        dense("vh", kvh, false)?,
        dense("kt", kvh, true)?,
        dense("oh", h, false)?,
    );
    let (s, probs) = (square()?, &layer.probs);
    // Backward.
    let (doh, dvh, dqh, dkh, vt) = (
        dense("doh", h, false)?,
        dense("dvh", kvh, false)?,
        dense("dqh", h, false)?,
        dense("dkh", kvh, false)?,
        dense("vt", kvh, true)?,
    );
    let (pt, dp, ds, dst) = (square()?, square()?, square()?, square()?);
    // Views only of the copies' own shapes, to permute: [b, s, h, d] ↔ [b, h, s, d], and the
    // transposes of [b, h, s, d] and of the scores.
    let bhsd = ["batch", "heads", "seq", "head_dim"];
    let to_bhsd = |v: &View| v.permute(&bhsd).map_err(err);
    let to_bshd = |v: &View| {
        v.permute(&["batch", "seq", "heads", "head_dim"])
            .map_err(err)
    };
    let (q_bhsd, k_bhsd, v_bhsd, o_bhsd) = (
        to_bhsd(&q)?,
        to_bhsd(&k)?,
        to_bhsd(&v)?,
        to_bhsd(&layer.out.view)?,
    );
    let t_of = |v: &View| v.transpose("seq", "head_dim").map_err(err);
    let (kh_t, vh_t) = (t_of(&kh.view)?, t_of(&vh.view)?);
    let scores_t = |v: &View| v.transpose("q", "k").map_err(err);
    let (p_t, ds_t) = (scores_t(&probs.view)?, scores_t(&ds.view)?);
    let (oh_bshd, dqh_bshd, dkh_bshd, dvh_bshd) = (
        to_bshd(&oh.view)?,
        to_bshd(&dqh.view)?,
        to_bshd(&dkh.view)?,
        to_bshd(&dvh.view)?,
    );
    let copy = |src: &View, dst: &View, along_rows| Relayout::new(gpu, src, dst, along_rows);
    let permute_q = copy(&q_bhsd, &qh.view, false)?;
    let permute_k = copy(&k_bhsd, &kh.view, false)?;
    let permute_v = copy(&v_bhsd, &vh.view, false)?;
    let transpose_k = copy(&kh_t, &kt.view, true)?;
    let unpermute_o = copy(&oh_bshd, &layer.out.view, false)?;
    let permute_do = copy(&o_bhsd, &doh.view, false)?;
    let transpose_p = copy(&p_t, &pt.view, true)?;
    let transpose_v = copy(&vh_t, &vt.view, true)?;
    let transpose_ds = copy(&ds_t, &dst.view, true)?;
    let unpermute_dq = copy(&dqh_bshd, &q, false)?;
    let unpermute_dk = copy(&dkh_bshd, &k, false)?;
    let unpermute_dv = copy(&dvh_bshd, &v, false)?;
    let mm = |a: &Tensor, b: &Tensor, c: &Tensor| MatmulOp::new(gpu, &a.view, &b.view, &c.view);
    let mm = |a, b, c| mm(a, b, c).map_err(err);
    let scores_op = mm(&qh, &kt, &s)?;
    let values_op = mm(probs, &vh, &oh)?;
    let grad_v = mm(&pt, &doh, &dvh)?;
    let grad_p = mm(&doh, &vt, &dp)?;
    let grad_q = mm(&ds, &kh, &dqh)?;
    let grad_k = mm(&dst, &qh, &dkh)?;
    let mask = if args.causal {
        Mask::Causal { offset: 0 }
    } else {
        Mask::None
    };
    let scale = 1.0 / (shape.head_dim as f32).sqrt();
    let softmax =
        SoftmaxOp::new(gpu, &s.view, &probs.view, Softmax::new(scale, mask)).map_err(err)?;
    let one = Scale::OVERWRITE;
    let forward = |b: &mut Batch<'_>| -> Res<()> {
        permute_q.record(b, &layer.qkv.arg_as(&q_bhsd)?, &qh.arg()?)?;
        permute_k.record(b, &layer.qkv.arg_as(&k_bhsd)?, &kh.arg()?)?;
        permute_v.record(b, &layer.qkv.arg_as(&v_bhsd)?, &vh.arg()?)?;
        transpose_k.record(b, &kh.arg_as(&kh_t)?, &kt.arg()?)?;
        scores_op
            .record(b, &qh.arg()?, &kt.arg()?, &s.arg()?, one)
            .map_err(err)?;
        softmax.forward(b, &s.arg()?, &probs.arg()?).map_err(err)?;
        values_op
            .record(b, &probs.arg()?, &vh.arg()?, &oh.arg()?, one)
            .map_err(err)?;
        unpermute_o.record(b, &oh.arg_as(&oh_bshd)?, &layer.out.arg()?)
    };
    let backward = |b: &mut Batch<'_>| -> Res<()> {
        permute_do.record(b, &layer.dout.arg_as(&o_bhsd)?, &doh.arg()?)?;
        transpose_p.record(b, &probs.arg_as(&p_t)?, &pt.arg()?)?;
        grad_v
            .record(b, &pt.arg()?, &doh.arg()?, &dvh.arg()?, one)
            .map_err(err)?;
        transpose_v.record(b, &vh.arg_as(&vh_t)?, &vt.arg()?)?;
        grad_p
            .record(b, &doh.arg()?, &vt.arg()?, &dp.arg()?, one)
            .map_err(err)?;
        softmax
            .backward(b, &probs.arg()?, &dp.arg()?, &ds.arg()?)
            .map_err(err)?;
        grad_q
            .record(b, &ds.arg()?, &kh.arg()?, &dqh.arg()?, one)
            .map_err(err)?;
        transpose_ds.record(b, &ds.arg_as(&ds_t)?, &dst.arg()?)?;
        grad_k
            .record(b, &dst.arg()?, &qh.arg()?, &dkh.arg()?, one)
            .map_err(err)?;
        unpermute_dq.record(b, &dqh.arg_as(&dqh_bshd)?, &layer.dqkv.arg_as(&q)?)?;
        unpermute_dk.record(b, &dkh.arg_as(&dkh_bshd)?, &layer.dqkv.arg_as(&k)?)?;
        unpermute_dv.record(b, &dvh.arg_as(&dvh_bshd)?, &layer.dqkv.arg_as(&v)?)
    };
    let label = "(b) row-major + explicit transposes";
    let results = || {
        run_once(gpu, args, label, &|b| {
            forward(b)?;
            backward(b)
        })?;
        Ok((layer.out.logical()?, layer.dqkv.logical()?))
    };
    then(Way {
        label,
        forward: &forward,
        backward: &backward,
        results: &results,
    })
}

/// Fails unless `got` matches `want` to `tol` of `want`'s largest magnitude.
fn compare(what: &str, got: &[f64], want: &[f64], tol: f64) -> Res<()> {
    let max = want.iter().fold(0.0f64, |m, v| m.max(v.abs()));
    for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
        // Written so that a NaN fails too.
        let within = (g - w).abs() <= tol * max;
        if !within {
            return Err(format!(
                "{what}: element {i} is {g}, (b) computed {w} (tolerance {:.1e})",
                tol * max
            ));
        }
    }
    Ok(())
}

/// GFLOP/s, with two decimals below 10 (a software device).
fn gflops(flops: f64, seconds: f64) -> String {
    let rate = flops / seconds / 1e9;
    if rate >= 10.0 {
        format!("{rate:.0}")
    } else {
        format!("{rate:.2}")
    }
}

fn measure(gpu: &Gpu, args: &Args, shape: Shape) -> Res<()> {
    let Shape {
        batch,
        seq,
        heads,
        kv_heads,
        head_dim,
        elem,
    } = shape;
    println!(
        "\n### attention batch {batch} × seq {seq}, {heads} heads ({kv_heads} kv) × {head_dim}, {elem}{}\n",
        if args.causal { ", causal" } else { "" }
    );
    let seed = 0x9E37_79B9_7F4A_7C15;
    views(gpu, args, (&shape, false, seed), &mut |row_major| {
        views(gpu, args, (&shape, true, seed), &mut |rtile| {
            if kv_heads == heads {
                explicit(gpu, args, (&shape, seed), &mut |b| {
                    report(gpu, args, &shape, &[row_major, rtile, b])
                })
            } else {
                println!("(b) is measured for multi-head attention only\n");
                report(gpu, args, &shape, &[row_major, rtile])
            }
        })
    })
}

/// Times `ways`, checks the first ones against the third ((b)) where there is one, and prints
/// the table.
fn report(gpu: &Gpu, args: &Args, shape: &Shape, ways: &[Way<'_>]) -> Res<()> {
    let times = time_ways(gpu, args, ways)?;
    let results = ways
        .iter()
        .map(|w| (w.results)())
        .collect::<Res<Vec<_>>>()?;
    let baseline = (ways.len() == 3).then(|| &times[2]);
    if let Some(want) = (ways.len() == 3).then(|| &results[2]) {
        let tol = if shape.elem == ElemType::F16 {
            2e-2
        } else {
            1e-4
        };
        for (w, got) in ways.iter().zip(&results).take(2) {
            compare(&format!("{}: out", w.label), &got.0, &want.0, tol)?;
            compare(&format!("{}: dqkv", w.label), &got.1, &want.1, tol)?;
        }
    }
    let flops = shape.forward_flops();
    println!(
        "| layouts | forward ms | GFLOP/s | backward ms | GFLOP/s | forward: (b) / this | backward: (b) / this | recording (CPU) ms |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|");
    for (w, t) in ways.iter().zip(&times) {
        let ratio = |base: f64, t: f64| format!("{:.2}×", base / t);
        let (fr, br) = match baseline {
            Some(b) => (ratio(b.forward, t.forward), ratio(b.backward, t.backward)),
            None => ("—".into(), "—".into()),
        };
        println!(
            "| {} | {:.3} | {} | {:.3} | {} | {fr} | {br} | {:.3} |",
            w.label,
            t.forward * 1e3,
            gflops(flops, t.forward),
            t.backward * 1e3,
            gflops(2.0 * flops, t.backward),
            t.record * 1e3,
        );
    }
    Ok(())
}

fn run(args: &Args) -> Res<()> {
    let gpu = Gpu::new().map_err(err)?;
    let elem = match args.elem.as_str() {
        "f32" => ElemType::F32,
        "f16" if gpu.features().f16 => ElemType::F16,
        "f16" => return Err("--elem f16: the device has no SHADER_F16".into()),
        other => return Err(format!("--elem: unknown element type `{other}`")),
    };
    println!(
        "adapter: {} ({})\ntimes: wall clock, median of {} samples of {} passes in one batch",
        gpu.info(),
        gpu.features(),
        args.samples,
        args.reps
    );
    let kv_heads = args.kv_heads.unwrap_or(args.heads);
    for (batch, seq) in [(args.batch_128, 128), (args.batch_512, 512)] {
        if batch > 0 {
            let shape = Shape {
                batch,
                seq,
                heads: args.heads,
                kv_heads,
                head_dim: args.head_dim,
                elem,
            };
            measure(&gpu, args, shape)?;
        }
    }
    if kv_heads == args.heads {
        println!("\nEvery way's output and fused gradient were checked against those of (b).");
    } else {
        println!("\nGrouped-query attention has no (b), so nothing was checked against it.");
    }
    Ok(())
}

fn main() -> ExitCode {
    support::exit("bench_attention", run(&Args::parse()))
}
