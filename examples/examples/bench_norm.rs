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
//!
//! With `--sweep` it times launch shapes instead: the norms (forward and backward) built with
//! each pair of `--lanes-per-row` × `--rows-per-block` (their backward chunks of
//! `--chunk-rows` where given) and with the default shapes at each backward chunk of
//! `--sweep-chunks`, and the bias gradient at each chunk, each against the baseline (the
//! kernels as they were before launch shapes) and beside the current default, all in the same
//! run.

mod support;

use std::collections::HashMap;
use std::process::ExitCode;
use support::{by_kernel, err};

use clap::Parser;
use fblayout_core::kernel::{KernelModule, KernelSource, Operand, ParamValue};
use fblayout_core::layout::{ElemType, LayoutSpec, View};
use fblayout_kernels::ops::{
    AdamW, AdamWOp, AdamWTensors, BiasLaunch, BiasOp, LayerNormGrads, LayerNormOp,
    LayerNormTensors, NormLaunch, RmsNormGrads, RmsNormOp, RmsNormTensors, RowLaunch,
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
    /// the number the kernels choose to fill the GPU: for tuning (with `--sweep`, of the
    /// norms' launch shapes).
    #[arg(long)]
    chunk_rows: Option<u32>,
    /// Time launch shapes against the baseline instead of the table (see the module docs).
    #[arg(long)]
    sweep: bool,
    /// Also print each norm backward's dispatches apart (the row kernel, the weight
    /// gradients' second pass): the median of each over the batches, per call.
    #[arg(long)]
    by_dispatch: bool,
    /// With `--sweep`: lanes per row of the norms' kernels, comma-separated.
    #[arg(long, value_delimiter = ',', default_values_t = [8u32, 16, 32])]
    lanes_per_row: Vec<u32>,
    /// With `--sweep`: rows per block of the norms' kernels, comma-separated.
    #[arg(long, value_delimiter = ',', default_values_t = [4u32, 8, 16])]
    rows_per_block: Vec<u32>,
    /// With `--sweep`: rows per chunk of the norm backwards (default shapes otherwise) and of
    /// the bias gradient, comma-separated.
    #[arg(long, value_delimiter = ',', default_values_t = [8u32, 16, 32, 64])]
    sweep_chunks: Vec<u32>,
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
    let mut by_label: Vec<(String, Vec<f64>)> = Vec::new();
    for _ in 0..args.samples.max(1) {
        let mut batch = gpu.batch();
        for _ in 0..reps {
            record(&mut batch)?;
        }
        let timings = batch.submit_timed().map_err(err)?;
        timestamps = timings.iter().all(|t| t.gpu_timestamps);
        samples.push(timings.iter().map(|t| t.nanos).sum::<f64>() * 1e-9 / reps as f64);
        for (label, ms) in by_kernel(&timings) {
            match by_label.iter_mut().find(|(l, _)| *l == label) {
                Some((_, all)) => all.push(ms),
                None => by_label.push((label, vec![ms])),
            }
        }
    }
    if args.by_dispatch && by_label.len() > 1 {
        for (label, mut all) in by_label {
            all.sort_by(f64::total_cmp);
            let us = all[all.len() / 2] * 1e3 / reps as f64;
            println!("    {label}: {us:.1} µs");
        }
    }
    samples.sort_by(f64::total_cmp);
    Ok((samples[samples.len() / 2], timestamps))
}

struct Row {
    kernel: &'static str,
    shape: String,
    layout: String,
    /// The launch shapes (sweeps only).
    launch: String,
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

/// The views and buffers of one `[tokens, hidden]` shape in one layout.
struct Setup {
    tokens: u32,
    views: [View; 6],
    /// x, y, dy, dx, m, v, then γ, β, mean, rstd, dγ, dβ.
    buffers: Vec<GpuBuffer>,
}

/// Indices into [`Setup::views`].
const X: usize = 0;
const Y: usize = 1;
const GAMMA: usize = 2;
const BETA: usize = 3;
const MEAN: usize = 4;
const RSTD: usize = 5;

impl Setup {
    fn new(gpu: &Gpu, tokens: u32, hidden: u32, tile: Option<u32>) -> Result<Self> {
        let views = [
            matrix("x", tile, hidden)?,
            matrix("y", tile, hidden)?,
            vector("gamma", "hidden", Some(hidden))?,
            vector("beta", "hidden", Some(hidden))?,
            vector("mean", "tokens", None)?,
            vector("rstd", "tokens", None)?,
        ];
        let of = [X, Y, Y, X, X, X, GAMMA, BETA, MEAN, RSTD, GAMMA, BETA];
        let buffers = of
            .iter()
            .map(|&v| tensor(gpu, &views[v], tokens))
            .collect::<Result<Vec<_>>>()?;
        Ok(Self {
            tokens,
            views,
            buffers,
        })
    }

    /// Buffer `i` as an argument through view `v`.
    fn arg(&self, i: usize, v: usize) -> Result<GpuArg<'_>> {
        arg(&self.buffers[i], &self.views[v], self.tokens)
    }

    /// The arguments: x, y, dy, dx, γ, β, mean, rstd, dγ, dβ.
    fn args(&self) -> Result<[GpuArg<'_>; 10]> {
        Ok([
            self.arg(0, X)?,
            self.arg(1, Y)?,
            self.arg(2, Y)?,
            self.arg(3, X)?,
            self.arg(6, GAMMA)?,
            self.arg(7, BETA)?,
            self.arg(8, MEAN)?,
            self.arg(9, RSTD)?,
            self.arg(10, GAMMA)?,
            self.arg(11, BETA)?,
        ])
    }

    fn layer_norm(&self, gpu: &Gpu, launch: NormLaunch) -> Result<LayerNormOp> {
        let v = &self.views;
        let views = LayerNormTensors {
            x: &v[X],
            gamma: &v[GAMMA],
            beta: &v[BETA],
            y: &v[Y],
            mean: &v[MEAN],
            rstd: &v[RSTD],
        };
        LayerNormOp::with_launch(gpu, &views, 1e-5, launch).map_err(err)
    }

    fn rms_norm(&self, gpu: &Gpu, launch: NormLaunch) -> Result<RmsNormOp> {
        let v = &self.views;
        let views = RmsNormTensors {
            x: &v[X],
            gamma: &v[GAMMA],
            y: &v[Y],
            rstd: &v[RSTD],
        };
        RmsNormOp::with_launch(gpu, &views, 1e-5, launch).map_err(err)
    }

    fn bias(&self, gpu: &Gpu, launch: BiasLaunch) -> Result<BiasOp> {
        let v = &self.views;
        Ok(BiasOp::new(gpu, &v[X], &v[BETA], &v[Y])
            .map_err(err)?
            .with_launch(launch))
    }
}

/// The times of a norm's and the bias's kernels: `(kernel, seconds, bytes)` each.
type Timed = Vec<(&'static str, (f64, bool), u64)>;

/// Times the forward and backward of LayerNorm and RMSNorm built with `launch`, and the bias
/// gradient with `bias` (where given); returns the times and the norms' built shapes.
fn time_norms(
    gpu: &Gpu,
    args: &Args,
    setup: &Setup,
    launch: NormLaunch,
    bias: Option<BiasLaunch>,
    hidden: u32,
) -> Result<(Timed, String)> {
    let n = u64::from(setup.tokens) * u64::from(hidden) * 4;
    let (h4, t4) = (u64::from(hidden) * 4, u64::from(setup.tokens) * 4);
    let [x, y, dy, dx, gamma, beta, mean, rstd, dgamma, dbeta] = setup.args()?;
    let mut out = Timed::new();
    let ln = setup.layer_norm(gpu, launch)?;
    let [f, b] = ln.launch_shapes();
    let shapes = format!("{f}; {b}");
    let t = LayerNormTensors {
        x: &x,
        gamma: &gamma,
        beta: &beta,
        y: &y,
        mean: &mean,
        rstd: &rstd,
    };
    let g = LayerNormGrads {
        dy: &dy,
        dx: &dx,
        dgamma: &dgamma,
        dbeta: &dbeta,
    };
    let s = time(gpu, args, |b| ln.forward(b, &t).map_err(err))?;
    out.push(("LayerNorm forward", s, 2 * n + 2 * h4 + 2 * t4));
    if args.by_dispatch {
        println!("{} × {hidden}, {shapes}, LayerNorm backward:", setup.tokens);
    }
    let s = time(gpu, args, |b| ln.backward(b, &t, &g, false).map_err(err))?;
    out.push(("LayerNorm backward", s, 3 * n + 3 * h4 + 2 * t4));
    let rms = setup.rms_norm(gpu, launch)?;
    let t = RmsNormTensors {
        x: &x,
        gamma: &gamma,
        y: &y,
        rstd: &rstd,
    };
    let g = RmsNormGrads {
        dy: &dy,
        dx: &dx,
        dgamma: &dgamma,
    };
    let s = time(gpu, args, |b| rms.forward(b, &t).map_err(err))?;
    out.push(("RMSNorm forward", s, 2 * n + h4 + t4));
    if args.by_dispatch {
        println!("{} × {hidden}, {shapes}, RMSNorm backward:", setup.tokens);
    }
    let s = time(gpu, args, |b| rms.backward(b, &t, &g, false).map_err(err))?;
    out.push(("RMSNorm backward", s, 3 * n + 2 * h4 + t4));
    if let Some(launch) = bias {
        let op = setup.bias(gpu, launch)?;
        let s = time(gpu, args, |b| {
            op.backward(b, &dy, &dbeta, false).map_err(err)
        })?;
        out.push(("bias gradient", s, n + h4));
    }
    Ok((out, shapes))
}

fn run(args: &Args) -> Result<()> {
    if args.hidden.iter().any(|h| *h == 0 || h % 8 != 0) || args.tokens.contains(&0) {
        return Err("--hidden must be positive multiples of 8 and --tokens positive".into());
    }
    let gpu = Gpu::new().map_err(err)?;
    println!("adapter: {} ({})", gpu.info(), gpu.features());
    let mut rows: Vec<Row> = Vec::new();
    let mut stamps = true;
    for &tokens in &args.tokens {
        for &hidden in &args.hidden {
            let shape = format!("{tokens} × {hidden}");
            for tile in layouts(args) {
                let setup = Setup::new(&gpu, tokens, hidden, tile)?;
                let mut add = |kernel, seconds: (f64, bool), bytes, launch: &str| {
                    stamps &= seconds.1;
                    rows.push(Row {
                        kernel,
                        shape: shape.clone(),
                        layout: layout_name(tile),
                        launch: launch.to_owned(),
                        seconds: seconds.0,
                        bytes,
                        copy_seconds: 0.0,
                    });
                };
                if args.sweep {
                    for (name, launch, bias) in sweep_launches(args) {
                        match time_norms(&gpu, args, &setup, launch, bias, hidden) {
                            Ok((timed, shapes)) => {
                                for (kernel, s, bytes) in timed {
                                    let built = if kernel == "bias gradient" {
                                        name.clone()
                                    } else {
                                        format!("{name} ({shapes})")
                                    };
                                    add(kernel, s, bytes, &built);
                                }
                            }
                            Err(e) => {
                                println!("{shape}, {}, {name}: skipped: {e}", layout_name(tile))
                            }
                        }
                    }
                    continue;
                }
                let launch = NormLaunch {
                    chunk_rows: args.chunk_rows,
                    ..NormLaunch::default()
                };
                let bias = BiasLaunch {
                    chunk_rows: args.chunk_rows,
                    ..BiasLaunch::default()
                };
                let (timed, _) = time_norms(&gpu, args, &setup, launch, None, hidden)?;
                let mut timed = timed.into_iter();
                for (kernel, s, bytes) in timed.by_ref().take(4) {
                    add(kernel, s, bytes, "");
                }
                let [x, y, dy, _, _, beta, _, _, _, dbeta] = setup.args()?;
                let n = u64::from(tokens) * u64::from(hidden) * 4;
                let h4 = u64::from(hidden) * 4;
                let op = setup.bias(&gpu, bias)?;
                let s = time(&gpu, args, |b| op.forward(b, &x, &beta, &y).map_err(err))?;
                add("bias forward", s, 2 * n + h4, "");
                let s = time(&gpu, args, |b| {
                    op.backward(b, &dy, &dbeta, false).map_err(err)
                })?;
                add("bias gradient", s, n + h4, "");
                let s = time_adamw(&gpu, args, &setup)?;
                add("AdamW step", s, 7 * n, "");
            }
        }
    }
    stamps &= roofline(&gpu, args, &mut rows)?;
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
    if args.sweep {
        print_sweep(&rows);
    } else {
        print_table(&rows);
    }
    Ok(())
}

/// The launches a sweep times, named: the baseline, the default, each lanes × rows pair, the
/// default at each chunk; the bias gradient's beside them.
fn sweep_launches(args: &Args) -> Vec<(String, NormLaunch, Option<BiasLaunch>)> {
    let mut all = vec![
        (
            "baseline".to_owned(),
            NormLaunch::BASELINE,
            Some(BiasLaunch::BASELINE),
        ),
        (
            "default".to_owned(),
            NormLaunch::default(),
            Some(BiasLaunch::default()),
        ),
    ];
    for &lanes in &args.lanes_per_row {
        for &rows in &args.rows_per_block {
            let row = RowLaunch {
                lanes_per_row: Some(lanes),
                rows_per_block: Some(rows),
                ..RowLaunch::default()
            };
            let launch = NormLaunch {
                forward: row,
                backward: row,
                chunk_rows: args.chunk_rows,
            };
            all.push((format!("{lanes} lanes × {rows} rows"), launch, None));
        }
    }
    for &chunk in &args.sweep_chunks {
        let launch = NormLaunch {
            chunk_rows: Some(chunk),
            ..NormLaunch::default()
        };
        let bias = BiasLaunch {
            chunk_rows: Some(chunk),
            ..BiasLaunch::default()
        };
        all.push((format!("default, chunk {chunk}"), launch, Some(bias)));
    }
    all
}

fn time_adamw(gpu: &Gpu, args: &Args, setup: &Setup) -> Result<(f64, bool)> {
    let x_v = &setup.views[X];
    let adam = AdamWOp::new(
        gpu,
        &AdamWTensors {
            param: x_v,
            grad: x_v,
            m: x_v,
            v: x_v,
        },
    )
    .map_err(err)?;
    let (pa, gra) = (setup.arg(3, X)?, setup.arg(0, X)?);
    let (m_a, v_a) = (setup.arg(4, X)?, setup.arg(5, X)?);
    let t = AdamWTensors {
        param: &pa,
        grad: &gra,
        m: &m_a,
        v: &v_a,
    };
    let hyper = AdamW::default();
    time(gpu, args, |b| adam.step(b, &t, &hyper, 1, 1.0).map_err(err))
}

/// Times a vec4 copy of every byte count met, once each, into the rows; returns whether GPU
/// timestamps timed them.
fn roofline(gpu: &Gpu, args: &Args, rows: &mut [Row]) -> Result<bool> {
    let copy = Copy::new()?;
    let mut copy_times: HashMap<u64, f64> = HashMap::new();
    let mut stamps = true;
    for row in rows {
        let words = ((row.bytes / 8).next_multiple_of(4)) as u32;
        let seconds = match copy_times.get(&row.bytes) {
            Some(&s) => s,
            None => {
                let src = GpuBuffer::zeroed::<f32>(gpu, words as usize).map_err(err)?;
                let dst = GpuBuffer::zeroed::<f32>(gpu, words as usize).map_err(err)?;
                let (s, t) = time(gpu, args, |b| copy.record(b, &src, &dst, words))?;
                stamps &= t;
                copy_times.insert(row.bytes, s);
                s
            }
        };
        row.copy_seconds = seconds;
    }
    Ok(stamps)
}

/// The bandwidth of a row and its share of a copy's.
fn shares(row: &Row) -> (f64, f64) {
    let gbps = row.bytes as f64 / row.seconds / 1e9;
    let copy_gbps = row.bytes as f64 / row.copy_seconds / 1e9;
    (gbps, 100.0 * gbps / copy_gbps)
}

fn print_table(rows: &[Row]) {
    println!(
        "| kernel | tokens × hidden | layout | time | GB/s | of vec4 copy | time vs row-major |"
    );
    println!("|---|---|---|---:|---:|---:|---:|");
    for row in rows {
        let base = rows
            .iter()
            .find(|r| r.kernel == row.kernel && r.shape == row.shape && r.layout == "row-major")
            .map_or(row.seconds, |r| r.seconds);
        let (gbps, share) = shares(row);
        println!(
            "| {} | {} | {} | {:.1} µs | {gbps:.1} | {share:.0}% | {:.2}× |",
            row.kernel,
            row.shape,
            row.layout,
            row.seconds * 1e6,
            base / row.seconds
        );
    }
    println!(
        "\nGB/s counts each tensor read or written once. \"of vec4 copy\": against a copy of the same \
         bytes in the same run. \"time vs row-major\": the row-major time over this one (above 1: faster)."
    );
}

fn print_sweep(rows: &[Row]) {
    println!(
        "| kernel | tokens × hidden | layout | launch (forward; backward as built) | time | of vec4 copy | vs baseline |"
    );
    println!("|---|---|---|---|---:|---:|---:|");
    for row in rows {
        let base = rows
            .iter()
            .find(|r| {
                r.kernel == row.kernel
                    && r.shape == row.shape
                    && r.layout == row.layout
                    && r.launch.starts_with("baseline")
            })
            .map_or(row.seconds, |r| r.seconds);
        let (_, share) = shares(row);
        println!(
            "| {} | {} | {} | {} | {:.1} µs | {share:.0}% | {:.2}× |",
            row.kernel,
            row.shape,
            row.layout,
            row.launch,
            row.seconds * 1e6,
            base / row.seconds
        );
    }
    println!(
        "\n\"vs baseline\": the baseline's time (the kernels before launch shapes) over this one \
         (above 1: faster). \"default\" is what the ops build unless told otherwise."
    );
}

fn main() -> ExitCode {
    support::exit("bench_norm", run(&Args::parse()))
}
