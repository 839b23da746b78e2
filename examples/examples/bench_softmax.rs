//! Benchmark: softmax, cross-entropy and embedding kernels, forward and backward, on the GPU.
//!
//! Every row times one kernel (the median over `--samples` samples of `--reps` dispatches in one
//! batch, after a warm-up; wall clock around `Batch::submit` and `Gpu::wait`) and reports the
//! bandwidth of the bytes the kernel must move (each input read once, each output written
//! once), measured against two baselines in the same run:
//!
//! - **of copy**: a `vec4` copy kernel (written with the kernel surface) moving the same number
//!   of bytes (half read, half written): the roofline of a memory-bound kernel;
//! - **vs row-major**: the time of the same kernel with every operand in one unified row-major
//!   layout divided by this row's time (above 1: the planned layout is faster).
//!
//! The planned layouts are R-Tiles whose forward axis is the one the kernel reduces: attention
//! scores `[batch, heads, q, k]` (`k` forward, `q` backward, as the layer plans them), logits
//! `[tokens, vocab]` (`vocab` padded to whole tiles, so rows are `vec4`-aligned even for
//! vocab 30522), the embedding table and its output `[rows, hidden]`. None of these backward
//! passes reduces another axis than its forward, so no transpose baseline applies.
//!
//! Defaults run in seconds on lavapipe. On a large GPU (the H200 figures in BENCHMARKS.md):
//!
//! `bench_softmax --batch-128 32 --batch-512 8 --ce-rows 4096 --tokens 4096 --samples 9 --reps 20`
//!
//! Run: `cargo run --release -p fblayout-examples --example bench_softmax [-- --help]`

mod support;

use std::process::ExitCode;
use std::time::Instant;
use support::{Res, err};

use clap::Parser;
use fblayout_core::kernel::{KernelModule, KernelSource, Operand};
use fblayout_core::layout::{BoundView, ElemType, LayoutSpec, View};
use fblayout_kernels::ops::{CrossEntropyOp, EmbeddingOp, Mask, Softmax, SoftmaxOp, TokenIds};
use fblayout_kernels::runtime::{Batch, Gpu, GpuBuffer};
use fblayout_kernels::tensor::GpuArg;

/// Times softmax, cross-entropy and embedding kernels against a vec4 copy and against unified
/// row-major operands.
#[derive(Parser)]
struct Args {
    /// Batch of the attention scores [batch, heads, 128, 128] (H200: 32).
    #[arg(long, default_value_t = 2)]
    batch_128: u32,
    /// Batch of the attention scores [batch, heads, 512, 512] (H200: 8).
    #[arg(long, default_value_t = 1)]
    batch_512: u32,
    /// Attention heads.
    #[arg(long, default_value_t = 12)]
    heads: u32,
    /// Rows (tokens) of the cross-entropy logits (H200: 4096).
    #[arg(long, default_value_t = 256)]
    ce_rows: u32,
    /// Vocabulary: the logits' row length and the embedding table's rows.
    #[arg(long, default_value_t = 30522)]
    vocab: u32,
    /// Tokens looked up in the embedding table (H200: 4096).
    #[arg(long, default_value_t = 512)]
    tokens: u32,
    /// Hidden sizes of the embedding table.
    #[arg(long, value_delimiter = ',', default_values_t = [384, 768])]
    hidden: Vec<u32>,
    /// Element type of every tensor: f32 or f16.
    #[arg(long, default_value = "f32")]
    elem: String,
    /// Timed samples per row (the median is reported).
    #[arg(long, default_value_t = 5)]
    samples: usize,
    /// Dispatches per sample, in one batch.
    #[arg(long, default_value_t = 5)]
    reps: usize,
}

/// A tensor on the GPU: its view, its extents, and a buffer holding it.
struct Tensor {
    view: View,
    bind: Vec<(&'static str, u32)>,
    bound: BoundView,
    buffer: GpuBuffer,
}

impl Tensor {
    fn new(gpu: &Gpu, view: View, bind: Vec<(&'static str, u32)>) -> Res<Self> {
        let bound = view.bind(&bind).map_err(err)?;
        let len = bound.len() as usize;
        // Values in [-2, 2): no overflow, no denormals, nothing a kernel could skip.
        let buffer = match view.layout().elem() {
            ElemType::F16 => {
                let bits = [0x4000u16, 0xBC00, 0x3800, 0xB400, 0x3C00, 0xC000, 0x3400];
                let data: Vec<u16> = (0..len).map(|i| bits[i % bits.len()]).collect();
                GpuBuffer::from_slice(gpu, &data)
            }
            _ => {
                let data: Vec<f32> = (0..len).map(|i| (i % 97) as f32 / 24.25 - 2.0).collect();
                GpuBuffer::from_slice(gpu, &data)
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

    fn arg(&self) -> Res<GpuArg<'_>> {
        GpuArg::new(&self.buffer, &self.view, &self.bind).map_err(err)
    }

    /// The bytes of its logical elements.
    fn bytes(&self) -> u64 {
        self.bound.logical_len() * u64::from(self.view.layout().elem().size_bytes())
    }
}

/// The median seconds per dispatch of what `record` records.
fn time(gpu: &Gpu, args: &Args, record: &dyn Fn(&mut Batch<'_>) -> Res<()>) -> Res<f64> {
    let mut warm = gpu.batch();
    for _ in 0..2 {
        record(&mut warm)?;
    }
    warm.submit().map_err(err)?;
    gpu.wait().map_err(err)?;
    let reps = args.reps.max(1);
    let mut samples = Vec::with_capacity(args.samples.max(1));
    for _ in 0..args.samples.max(1) {
        let mut batch = gpu.batch();
        for _ in 0..reps {
            record(&mut batch)?;
        }
        let start = Instant::now();
        batch.submit().map_err(err)?;
        gpu.wait().map_err(err)?;
        samples.push(start.elapsed().as_secs_f64() / reps as f64);
    }
    samples.sort_by(f64::total_cmp);
    Ok(samples[samples.len() / 2])
}

/// The vec4 copy of `bytes` bytes (half read, half written), as a kernel surface kernel.
struct Copy {
    module: KernelModule,
    src: GpuBuffer,
    dst: GpuBuffer,
    quads: u64,
}

impl Copy {
    fn new(gpu: &Gpu, bytes: u64) -> Res<Self> {
        let n = (bytes / 8).div_ceil(4) * 4;
        let n32 = u32::try_from(n).map_err(|_| format!("a copy of {bytes} bytes is too long"))?;
        let view = LayoutSpec::new("copy")
            .axis("i", n32)
            .build()
            .map_err(err)?
            .view();
        let src = Operand::read("src", &view).map_err(err)?.vectorized(0);
        let dst = Operand::write("dst", &view).map_err(err)?.vectorized(0);
        if src.vector_axis().is_none() || dst.vector_axis().is_none() {
            return Err("the copy is not vec4-wide".into());
        }
        let module = KernelSource::new("copy")
            .operand(src)
            .operand(dst)
            .body(
                "@compute @workgroup_size(256)
fn copy(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let i = ((wg.x + wg.y * nwg.x) * 256u + lid) * 4u;
    if (i < src_dim0()) {
        dst_store4(i, src_load4(i));
    }
}",
            )
            .features(gpu.wgsl_features())
            .build()
            .map_err(err)?;
        Ok(Self {
            module,
            src: GpuBuffer::zeroed::<f32>(gpu, n as usize).map_err(err)?,
            dst: GpuBuffer::zeroed::<f32>(gpu, n as usize).map_err(err)?,
            quads: n / 4,
        })
    }

    fn record(&self, batch: &mut Batch<'_>) -> Res<()> {
        let workgroups = u32::try_from(self.quads.div_ceil(256)).map_err(err)?;
        batch
            .dispatch_linear(
                &self.module,
                "copy",
                &[("src", &self.src), ("dst", &self.dst)],
                &[],
                workgroups,
            )
            .map(|_| ())
            .map_err(err)
    }
}

/// One timed kernel of a table row: its time in the planned and in the row-major layouts.
struct Row {
    kernel: String,
    shape: String,
    bytes: u64,
    planned: f64,
    row_major: f64,
    wide: (bool, bool),
}

/// Appends a row for each of `kernels`, with its bytes and its times (planned, row-major).
fn push(
    out: &mut Vec<Row>,
    kernels: &[&str],
    shape: &str,
    bytes: &[u64],
    times: &[[f64; 2]],
    wide: [bool; 2],
) {
    for (k, kernel) in kernels.iter().enumerate() {
        out.push(Row {
            kernel: (*kernel).to_owned(),
            shape: shape.to_owned(),
            bytes: bytes[k],
            planned: times[k][0],
            row_major: times[k][1],
            wide: (wide[0], wide[1]),
        });
    }
}

fn print(rows: &[Row], copy: &dyn Fn(u64) -> Res<f64>) -> Res<()> {
    println!(
        "| kernel | shape | MB moved | planned (R-Tile) | GB/s | of copy | row-major | GB/s | of copy | planned vs row-major |"
    );
    println!("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|");
    for r in rows {
        let c = copy(r.bytes)?;
        let gbps = |t: f64| r.bytes as f64 / t / 1e9;
        let of_copy = |t: f64| c / t;
        let wide = |w: bool| if w { "" } else { " (scalar)" };
        println!(
            "| {} | {} | {:.0} | {:.3} ms{} | {:.0} | {:.0}% | {:.3} ms{} | {:.0} | {:.0}% | {:.2}× |",
            r.kernel,
            r.shape,
            r.bytes as f64 / 1e6,
            r.planned * 1e3,
            wide(r.wide.0),
            gbps(r.planned),
            100.0 * of_copy(r.planned),
            r.row_major * 1e3,
            wide(r.wide.1),
            gbps(r.row_major),
            100.0 * of_copy(r.row_major),
            r.row_major / r.planned,
        );
    }
    Ok(())
}

/// Attention scores `[batch, heads, q, k]` with `seq` queries and keys, planned (R-Tile with
/// 8×8 tiles over `q × k`, `k` forward and `q` backward) or row-major.
fn scores(name: &str, heads: u32, seq: u32, elem: ElemType, rtile: bool) -> Res<View> {
    let spec = LayoutSpec::new(name)
        .dyn_axis("batch")
        .axis("heads", heads)
        .axis("q", seq);
    let spec = if rtile {
        spec.tile(8, true)
            .axis("k", seq)
            .tile(8, true)
            .rtile()
            .reduce_forward(["k"])
            .reduce_backward(["q"])
    } else {
        spec.axis("k", seq)
    };
    Ok(spec.elem(elem).build().map_err(err)?.view())
}

/// A `[rows, cols]` matrix with run-time rows, planned (R-Tile with 8×8 tiles, padded,
/// `cols` forward) or row-major.
fn matrix(name: &str, cols: u32, elem: ElemType, rtile: bool) -> Res<View> {
    let spec = if rtile {
        LayoutSpec::new(name)
            .dyn_axis("rows")
            .tile(8, true)
            .axis("cols", cols)
            .tile(8, true)
            .rtile()
            .reduce_forward(["cols"])
            .reduce_backward(["rows"])
    } else {
        LayoutSpec::new(name).dyn_axis("rows").axis("cols", cols)
    };
    Ok(spec.elem(elem).build().map_err(err)?.view())
}

fn softmax_rows(gpu: &Gpu, args: &Args, elem: ElemType, out: &mut Vec<Row>) -> Res<()> {
    let softmax = Softmax::new(0.125, Mask::Causal { offset: 0 });
    for (batch, seq) in [(args.batch_128, 128), (args.batch_512, 512)] {
        let bind = vec![("batch", batch)];
        let mut times = [[0.0; 2]; 2];
        let mut wide = [false; 2];
        let mut bytes = [0; 2];
        for (i, rtile) in [true, false].into_iter().enumerate() {
            let x = Tensor::new(
                gpu,
                scores("scores", args.heads, seq, elem, rtile)?,
                bind.clone(),
            )?;
            let y = Tensor::new(
                gpu,
                scores("probs", args.heads, seq, elem, rtile)?,
                bind.clone(),
            )?;
            let dy = Tensor::new(gpu, y.view.clone(), bind.clone())?;
            let dx = Tensor::new(gpu, x.view.clone(), bind.clone())?;
            let op = SoftmaxOp::new(gpu, &x.view, &y.view, softmax).map_err(err)?;
            wide[i] = op.is_vectorized();
            let (xa, ya, dya, dxa) = (x.arg()?, y.arg()?, dy.arg()?, dx.arg()?);
            times[0][i] = time(gpu, args, &|b| op.forward(b, &xa, &ya).map_err(err))?;
            times[1][i] = time(gpu, args, &|b| op.backward(b, &ya, &dya, &dxa).map_err(err))?;
            bytes = [x.bytes() * 2, x.bytes() * 3];
        }
        let shape = format!("[{batch}, {}, {seq}, {seq}] causal", args.heads);
        push(
            out,
            &["softmax forward", "softmax backward"],
            &shape,
            &bytes,
            &times,
            wide,
        );
    }
    Ok(())
}

fn cross_entropy_rows(gpu: &Gpu, args: &Args, elem: ElemType, out: &mut Vec<Row>) -> Res<()> {
    let rows = args.ce_rows;
    let bind = vec![("rows", rows)];
    let labels_view = LayoutSpec::new("labels")
        .dyn_axis("rows")
        .elem(ElemType::U32)
        .build()
        .map_err(err)?
        .view();
    let loss_view = LayoutSpec::new("loss")
        .dyn_axis("rows")
        .build()
        .map_err(err)?
        .view();
    let labels: Vec<u32> = (0..rows).map(|r| (r * 7919) % args.vocab).collect();
    let label_buffer = GpuBuffer::from_slice(gpu, &labels).map_err(err)?;
    let loss = GpuBuffer::zeroed::<f32>(gpu, rows as usize).map_err(err)?;
    let mut times = [[0.0; 2]; 2];
    let mut wide = [false; 2];
    let mut bytes = [0; 2];
    for (i, rtile) in [true, false].into_iter().enumerate() {
        let x = Tensor::new(
            gpu,
            matrix("logits", args.vocab, elem, rtile)?,
            bind.clone(),
        )?;
        let dx = Tensor::new(gpu, x.view.clone(), bind.clone())?;
        let op =
            CrossEntropyOp::new(gpu, &x.view, &labels_view, &loss_view, u32::MAX).map_err(err)?;
        wide[i] = op.is_vectorized();
        let state = op.state(gpu, rows).map_err(err)?;
        let t = GpuArg::new(&label_buffer, &labels_view, &bind).map_err(err)?;
        let l = GpuArg::new(&loss, &loss_view, &bind).map_err(err)?;
        let (xa, dxa) = (x.arg()?, dx.arg()?);
        times[0][i] = time(gpu, args, &|b| {
            op.forward(b, &xa, &t, &l, &state).map_err(err)
        })?;
        times[1][i] = time(gpu, args, &|b| {
            op.backward(b, &xa, &t, &state, 1.0, &dxa).map_err(err)
        })?;
        bytes = [x.bytes(), 2 * x.bytes()];
    }
    let shape = format!("[{rows}, {}]", args.vocab);
    let kernels = ["cross-entropy forward", "cross-entropy backward"];
    push(out, &kernels, &shape, &bytes, &times, wide);
    Ok(())
}

fn embedding_rows(gpu: &Gpu, args: &Args, elem: ElemType, out: &mut Vec<Row>) -> Res<()> {
    // Token ids spread over the first third of the vocabulary (a multiplicative hash).
    let ids: Vec<u32> = (0..args.tokens)
        .map(|t| ((u64::from(t) * 2_654_435_761) % u64::from(args.vocab / 3)) as u32)
        .collect();
    let start = Instant::now();
    let tokens = TokenIds::new(gpu, &ids, args.vocab).map_err(err)?;
    let index_ms = start.elapsed().as_secs_f64() * 1e3;
    for &hidden in &args.hidden {
        let mut times = [[0.0; 2]; 3];
        let mut wide = [false; 2];
        let mut bytes = [0; 3];
        for (i, rtile) in [true, false].into_iter().enumerate() {
            let table = Tensor::new(
                gpu,
                matrix("table", hidden, elem, rtile)?,
                vec![("rows", args.vocab)],
            )?;
            let o = Tensor::new(
                gpu,
                matrix("out", hidden, elem, rtile)?,
                vec![("rows", args.tokens)],
            )?;
            let dtable = Tensor::new(gpu, table.view.clone(), table.bind.clone())?;
            let op = EmbeddingOp::new(gpu, &table.view, &o.view).map_err(err)?;
            wide[i] = op.is_vectorized();
            let (ta, oa, da) = (table.arg()?, o.arg()?, dtable.arg()?);
            let ids_arg = tokens.ids().map_err(err)?;
            times[0][i] = time(gpu, args, &|b| {
                op.forward(b, &ids_arg, &ta, &oa).map_err(err)
            })?;
            times[1][i] = time(gpu, args, &|b| {
                op.backward(b, &tokens, &oa, &da, false).map_err(err)
            })?;
            times[2][i] = time(gpu, args, &|b| {
                op.backward(b, &tokens, &oa, &da, true).map_err(err)
            })?;
            // Accumulating reads and writes only the rows in use.
            let used = u64::from(tokens.used()) * u64::from(hidden) * u64::from(elem.size_bytes());
            bytes = [
                2 * o.bytes(),
                o.bytes() + table.bytes(),
                o.bytes() + 2 * used,
            ];
        }
        let shape = format!("[{}, {hidden}] ← {} ids", args.vocab, args.tokens);
        let kernels = [
            "embedding forward",
            "embedding backward",
            "embedding backward, accumulating",
        ];
        push(out, &kernels, &shape, &bytes, &times, wide);
    }
    println!(
        "embedding: {} ids use {} rows; checking them and building their index on the host took \
         {index_ms:.2} ms",
        args.tokens,
        tokens.used()
    );
    Ok(())
}

fn run(args: &Args) -> Res<()> {
    let elem = match args.elem.as_str() {
        "f32" => ElemType::F32,
        "f16" => ElemType::F16,
        other => return Err(format!("--elem {other}: f32 or f16")),
    };
    let gpu = Gpu::new().map_err(err)?;
    if elem == ElemType::F16 && !gpu.features().f16 {
        return Err(format!("{} has no f16", gpu.info()));
    }
    println!(
        "adapter: {} ({})\nelements: {elem}\n",
        gpu.info(),
        gpu.features()
    );
    let mut rows = Vec::new();
    softmax_rows(&gpu, args, elem, &mut rows)?;
    gpu.trim_pool();
    cross_entropy_rows(&gpu, args, elem, &mut rows)?;
    gpu.trim_pool();
    embedding_rows(&gpu, args, elem, &mut rows)?;
    gpu.trim_pool();
    println!();
    let copies = std::cell::RefCell::new(Vec::<(u64, f64)>::new());
    let copy = |bytes: u64| -> Res<f64> {
        if let Some(&(_, t)) = copies.borrow().iter().find(|(b, _)| *b == bytes) {
            return Ok(t);
        }
        let c = Copy::new(&gpu, bytes)?;
        let t = time(&gpu, args, &|b| c.record(b))?;
        drop(c);
        gpu.trim_pool();
        copies.borrow_mut().push((bytes, t));
        Ok(t)
    };
    print(&rows, &copy)?;
    let biggest = rows.iter().map(|r| r.bytes).max().unwrap_or(0);
    println!(
        "\nvec4 copy of {:.0} MB: {:.0} GB/s. Bytes are the minimum each kernel moves (each \
         input read once, each output written once; the embedding backward's index and the \
         labels left out). \"(scalar)\": the kernel reads the row one element at a time, its \
         layout having no aligned runs of four.",
        biggest as f64 / 1e6,
        biggest as f64 / copy(biggest)? / 1e9
    );
    Ok(())
}

fn main() -> ExitCode {
    support::exit("bench_softmax", run(&Args::parse()))
}
