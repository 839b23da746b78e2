//! Benchmark: LayerNorm and RMSNorm (forward and backward), bias (forward and gradient) and the
//! AdamW step on `[tokens, hidden]` tensors, for R-Tile and unified row-major layouts.
//!
//! Each row times one kernel (the sum of its dispatches: a norm backward is the fused row
//! kernel plus the second pass of the weight gradients) as the median over `--samples` batches
//! of `--reps` calls, from GPU timestamps where the adapter has them (else from the wall clock
//! around one submission per dispatch). It reports the bandwidth of the bytes the kernel must
//! move (each tensor read or written once; the partial rows of the column reductions are
//! overhead and not counted), its ratio to a vec4 copy of the same number of bytes measured in
//! the same run (the roofline), and its time against the same kernel with every operand
//! row-major. The bias gradient and the norm backwards are the backward column reductions.
//!
//! Run: `cargo run --release -p fblayout-examples --example bench_norm [-- --tokens 4096,16384
//! --hidden 384,768 --samples 9 --reps 20]`

mod support;

use std::collections::HashMap;
use std::process::ExitCode;
use support::err;

use clap::Parser;
use fblayout_core::kernel::{KernelModule, KernelSource, Operand, ParamValue};
use fblayout_core::layout::{ElemType, LayoutSpec, View};
use fblayout_kernels::ops::{
    AdamW, AdamWOp, AdamWTensors, BiasOp, LayerNormGrads, LayerNormOp, LayerNormTensors,
    RmsNormGrads, RmsNormOp, RmsNormTensors,
};
use fblayout_kernels::runtime::{Batch, Gpu, GpuBuffer};
use fblayout_kernels::tensor::GpuArg;

/// Times the norm, bias and AdamW kernels on the first GPU adapter.
#[derive(Parser)]
struct Args {
    /// Token counts (rows), comma-separated.
    #[arg(long, value_delimiter = ',', default_values_t = [1024u32])]
    tokens: Vec<u32>,
    /// Hidden sizes (columns), comma-separated; multiples of 8.
    #[arg(long, value_delimiter = ',', default_values_t = [384u32, 768])]
    hidden: Vec<u32>,
    /// Timed batches per kernel (the median is reported).
    #[arg(long, default_value_t = 5)]
    samples: usize,
    /// Calls of the kernel per batch.
    #[arg(long, default_value_t = 3)]
    reps: usize,
    /// Layouts besides unified row-major: R-Tile tile sizes, comma-separated.
    #[arg(long, value_delimiter = ',', default_values_t = [4u32, 8])]
    tiles: Vec<u32>,
    /// Rows per workgroup of the column reductions (norm backwards, bias gradient), instead of
    /// the number the kernels choose to fill the GPU: for tuning.
    #[arg(long)]
    chunk_rows: Option<u32>,
}

type Result<T> = std::result::Result<T, String>;

/// A `[tokens, hidden]` f32 layout: row-major, or an R-Tile with `t × t` tiles whose forward
/// axis is `hidden` and backward axis `tokens`.
fn matrix(name: &str, tile: Option<u32>, hidden: u32) -> Result<View> {
    let spec = LayoutSpec::new(name).dyn_axis("tokens");
    let spec = match tile {
        Some(t) => spec
            .tile(t, true)
            .axis("hidden", hidden)
            .tile(t, true)
            .rtile()
            .reduce_forward(["hidden"])
            .reduce_backward(["tokens"]),
        None => spec.axis("hidden", hidden),
    };
    Ok(spec.elem(ElemType::F32).build().map_err(err)?.view())
}

fn vector(name: &str, axis: &str, n: Option<u32>) -> Result<View> {
    let spec = LayoutSpec::new(name);
    let spec = match n {
        Some(n) => spec.axis(axis, n),
        None => spec.dyn_axis(axis),
    };
    Ok(spec.elem(ElemType::F32).build().map_err(err)?.view())
}

/// A buffer for `view` bound to `tokens`, filled with a small pattern (never zeros).
fn tensor(gpu: &Gpu, view: &View, tokens: u32) -> Result<GpuBuffer> {
    let pairs = bind_pairs(view, tokens);
    let len = view.bind(&pairs).map_err(err)?.len() as usize;
    let data: Vec<f32> = (0..len).map(|i| 0.25 + (i % 97) as f32 / 97.0).collect();
    GpuBuffer::from_slice(gpu, &data).map_err(err)
}

fn bind_pairs(view: &View, tokens: u32) -> Vec<(&'static str, u32)> {
    if view.layout().dynamic_axes().next().is_some() {
        vec![("tokens", tokens)]
    } else {
        vec![]
    }
}

fn arg<'a>(buffer: &'a GpuBuffer, view: &'a View, tokens: u32) -> Result<GpuArg<'a>> {
    GpuArg::new(buffer, view, &bind_pairs(view, tokens)).map_err(err)
}

/// The vec4 copy of `words` f32s, written with the kernel surface.
struct Copy {
    module: KernelModule,
}

impl Copy {
    fn new() -> Result<Self> {
        let view = vector("copy", "n", None)?;
        let module = KernelSource::new("copy")
            .operand(Operand::read("src", &view).map_err(err)?.vectorized(0))
            .operand(Operand::write("dst", &view).map_err(err)?.vectorized(0))
            .body(
                "@compute @workgroup_size(256)
                 fn copy(@builtin(workgroup_id) wg: vec3<u32>,
                         @builtin(num_workgroups) nwg: vec3<u32>,
                         @builtin(local_invocation_index) lid: u32) {
                     let i = ((wg.x + wg.y * nwg.x) * 256u + lid) * 4u;
                     if (i < src_dim0()) {
                         dst_store4(i, src_load4(i));
                     }
                 }",
            )
            .build()
            .map_err(err)?;
        Ok(Self { module })
    }

    fn record(
        &self,
        batch: &mut Batch<'_>,
        src: &GpuBuffer,
        dst: &GpuBuffer,
        words: u32,
    ) -> Result<()> {
        batch
            .dispatch_linear(
                &self.module,
                "copy",
                &[("src", src), ("dst", dst)],
                &[
                    ("src.n_len", ParamValue::U32(words)),
                    ("dst.n_len", ParamValue::U32(words)),
                ],
                (words / 4).div_ceil(256),
            )
            .map_err(err)?;
        Ok(())
    }
}

/// The median over `samples` batches of the time of one call of `record` (the sum of the
/// dispatches it records), in seconds.
fn time(
    gpu: &Gpu,
    args: &Args,
    mut record: impl FnMut(&mut Batch<'_>) -> Result<()>,
) -> Result<(f64, bool)> {
    let reps = args.reps.max(1);
    let mut warm = gpu.batch();
    record(&mut warm)?;
    warm.submit().map_err(err)?;
    gpu.wait().map_err(err)?;
    let mut samples = Vec::new();
    let mut timestamps = false;
    for _ in 0..args.samples.max(1) {
        let mut batch = gpu.batch();
        for _ in 0..reps {
            record(&mut batch)?;
        }
        let timings = batch.submit_timed().map_err(err)?;
        timestamps = timings.iter().all(|t| t.gpu_timestamps);
        samples.push(timings.iter().map(|t| t.nanos).sum::<f64>() * 1e-9 / reps as f64);
    }
    samples.sort_by(f64::total_cmp);
    Ok((samples[samples.len() / 2], timestamps))
}

struct Row {
    kernel: &'static str,
    shape: String,
    layout: String,
    seconds: f64,
    bytes: u64,
    copy_seconds: f64,
}

/// The layouts of one shape: `None` is unified row-major.
fn layouts(args: &Args) -> Vec<Option<u32>> {
    std::iter::once(None)
        .chain(args.tiles.iter().map(|&t| Some(t)))
        .collect()
}

fn layout_name(tile: Option<u32>) -> String {
    match tile {
        Some(t) => format!("R-Tile {t}×{t}"),
        None => "row-major".to_owned(),
    }
}

fn run(args: &Args) -> Result<()> {
    if args.hidden.iter().any(|h| *h == 0 || h % 8 != 0) || args.tokens.contains(&0) {
        return Err("--hidden must be positive multiples of 8 and --tokens positive".into());
    }
    let gpu = Gpu::new().map_err(err)?;
    println!("adapter: {} ({})", gpu.info(), gpu.features());
    let copy = Copy::new()?;
    let mut copy_times: HashMap<u64, f64> = HashMap::new();
    let mut rows: Vec<Row> = Vec::new();
    let mut stamps = true;
    for &tokens in &args.tokens {
        for &hidden in &args.hidden {
            let shape = format!("{tokens} × {hidden}");
            let n = u64::from(tokens) * u64::from(hidden) * 4;
            let (h4, t4) = (u64::from(hidden) * 4, u64::from(tokens) * 4);
            let gamma_v = vector("gamma", "hidden", Some(hidden))?;
            let beta_v = vector("beta", "hidden", Some(hidden))?;
            let mean_v = vector("mean", "tokens", None)?;
            let rstd_v = vector("rstd", "tokens", None)?;
            let (gamma, beta) = (
                tensor(&gpu, &gamma_v, tokens)?,
                tensor(&gpu, &beta_v, tokens)?,
            );
            let (mean, rstd) = (
                tensor(&gpu, &mean_v, tokens)?,
                tensor(&gpu, &rstd_v, tokens)?,
            );
            let (dgamma, dbeta) = (
                tensor(&gpu, &gamma_v, tokens)?,
                tensor(&gpu, &beta_v, tokens)?,
            );
            for tile in layouts(args) {
                let x_v = matrix("x", tile, hidden)?;
                let y_v = matrix("y", tile, hidden)?;
                let [x, y, dy, dx, m, v] =
                    [&x_v, &y_v, &y_v, &x_v, &x_v, &x_v].map(|view| tensor(&gpu, view, tokens));
                let (x, y, dy, dx, m, v) = (x?, y?, dy?, dx?, m?, v?);
                let layout = layout_name(tile);
                let mut add = |kernel, seconds: (f64, bool), bytes| {
                    stamps &= seconds.1;
                    rows.push(Row {
                        kernel,
                        shape: shape.clone(),
                        layout: layout.clone(),
                        seconds: seconds.0,
                        bytes,
                        copy_seconds: 0.0,
                    });
                };
                let xa = arg(&x, &x_v, tokens)?;
                let ya = arg(&y, &y_v, tokens)?;
                let dya = arg(&dy, &y_v, tokens)?;
                let dxa = arg(&dx, &x_v, tokens)?;
                let ga = arg(&gamma, &gamma_v, tokens)?;
                let ba = arg(&beta, &beta_v, tokens)?;
                let ma = arg(&mean, &mean_v, tokens)?;
                let ra = arg(&rstd, &rstd_v, tokens)?;
                let dga = arg(&dgamma, &gamma_v, tokens)?;
                let dba = arg(&dbeta, &beta_v, tokens)?;

                let ln = LayerNormOp::new(
                    &gpu,
                    &LayerNormTensors {
                        x: &x_v,
                        gamma: &gamma_v,
                        beta: &beta_v,
                        y: &y_v,
                        mean: &mean_v,
                        rstd: &rstd_v,
                    },
                    1e-5,
                )
                .map_err(err)?;
                let ln = match args.chunk_rows {
                    Some(rows) => ln.with_chunk_rows(rows),
                    None => ln,
                };
                let t = LayerNormTensors {
                    x: &xa,
                    gamma: &ga,
                    beta: &ba,
                    y: &ya,
                    mean: &ma,
                    rstd: &ra,
                };
                let g = LayerNormGrads {
                    dy: &dya,
                    dx: &dxa,
                    dgamma: &dga,
                    dbeta: &dba,
                };
                let s = time(&gpu, args, |b| ln.forward(b, &t).map_err(err))?;
                add("LayerNorm forward", s, 2 * n + 2 * h4 + 2 * t4);
                let s = time(&gpu, args, |b| ln.backward(b, &t, &g, false).map_err(err))?;
                add("LayerNorm backward", s, 3 * n + 3 * h4 + 2 * t4);

                let rms = RmsNormOp::new(
                    &gpu,
                    &RmsNormTensors {
                        x: &x_v,
                        gamma: &gamma_v,
                        y: &y_v,
                        rstd: &rstd_v,
                    },
                    1e-5,
                )
                .map_err(err)?;
                let rms = match args.chunk_rows {
                    Some(rows) => rms.with_chunk_rows(rows),
                    None => rms,
                };
                let t = RmsNormTensors {
                    x: &xa,
                    gamma: &ga,
                    y: &ya,
                    rstd: &ra,
                };
                let g = RmsNormGrads {
                    dy: &dya,
                    dx: &dxa,
                    dgamma: &dga,
                };
                let s = time(&gpu, args, |b| rms.forward(b, &t).map_err(err))?;
                add("RMSNorm forward", s, 2 * n + h4 + t4);
                let s = time(&gpu, args, |b| rms.backward(b, &t, &g, false).map_err(err))?;
                add("RMSNorm backward", s, 3 * n + 2 * h4 + t4);

                let bias = BiasOp::new(&gpu, &x_v, &beta_v, &y_v).map_err(err)?;
                let bias = match args.chunk_rows {
                    Some(rows) => bias.with_chunk_rows(rows),
                    None => bias,
                };
                let s = time(&gpu, args, |b| bias.forward(b, &xa, &ba, &ya).map_err(err))?;
                add("bias forward", s, 2 * n + h4);
                let s = time(&gpu, args, |b| {
                    bias.backward(b, &dya, &dba, false).map_err(err)
                })?;
                add("bias gradient", s, n + h4);

                let adam = AdamWOp::new(
                    &gpu,
                    &AdamWTensors {
                        param: &x_v,
                        grad: &x_v,
                        m: &x_v,
                        v: &x_v,
                    },
                )
                .map_err(err)?;
                let (pa, gra) = (arg(&dx, &x_v, tokens)?, arg(&x, &x_v, tokens)?);
                let (m_a, v_a) = (arg(&m, &x_v, tokens)?, arg(&v, &x_v, tokens)?);
                let t = AdamWTensors {
                    param: &pa,
                    grad: &gra,
                    m: &m_a,
                    v: &v_a,
                };
                let hyper = AdamW::default();
                let s = time(&gpu, args, |b| {
                    adam.step(b, &t, &hyper, 1, 1.0).map_err(err)
                })?;
                add("AdamW step", s, 7 * n);
            }
        }
    }
    // The roofline of every byte count met, measured once each.
    for row in &mut rows {
        let words = ((row.bytes / 8).next_multiple_of(4)) as u32;
        let seconds = match copy_times.get(&row.bytes) {
            Some(&s) => s,
            None => {
                let src = GpuBuffer::zeroed::<f32>(&gpu, words as usize).map_err(err)?;
                let dst = GpuBuffer::zeroed::<f32>(&gpu, words as usize).map_err(err)?;
                let (s, t) = time(&gpu, args, |b| copy.record(b, &src, &dst, words))?;
                stamps &= t;
                copy_times.insert(row.bytes, s);
                s
            }
        };
        row.copy_seconds = seconds;
    }
    if let Some(rows) = args.chunk_rows {
        println!("column reductions: {rows} rows per workgroup");
    }
    println!(
        "times: median of {} batches of {} calls, from {}\n",
        args.samples,
        args.reps,
        if stamps {
            "GPU timestamps"
        } else {
            "the wall clock"
        }
    );
    println!(
        "| kernel | tokens × hidden | layout | time | GB/s | of vec4 copy | time vs row-major |"
    );
    println!("|---|---|---|---:|---:|---:|---:|");
    for row in &rows {
        let base = rows
            .iter()
            .find(|r| r.kernel == row.kernel && r.shape == row.shape && r.layout == "row-major")
            .map_or(row.seconds, |r| r.seconds);
        let gbps = row.bytes as f64 / row.seconds / 1e9;
        let copy_gbps = row.bytes as f64 / row.copy_seconds / 1e9;
        println!(
            "| {} | {} | {} | {:.1} µs | {gbps:.1} | {:.0}% | {:.2}× |",
            row.kernel,
            row.shape,
            row.layout,
            row.seconds * 1e6,
            100.0 * gbps / copy_gbps,
            base / row.seconds
        );
    }
    println!(
        "\nGB/s counts each tensor read or written once. \"of vec4 copy\": against a copy of the same \
         bytes in the same run. \"time vs row-major\": the row-major time over this one (above 1: faster)."
    );
    Ok(())
}

fn main() -> ExitCode {
    support::exit("bench_norm", run(&Args::parse()))
}
