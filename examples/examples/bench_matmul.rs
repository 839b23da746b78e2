//! Benchmark: matrix products through views.
//!
//! Times a square GEMM and a linear layer's three GEMMs (`y = x·w`, `dx = dy·wᵀ`, `dw = xᵀ·dy`)
//! at transformer shapes: `tokens × d_model → d_ff` and back (`--wide` adds the 768 ↔ 3072
//! layer), in f32 and f16, and reports TFLOP/s. Each layer is run three ways in the same
//! process:
//!
//! - **planned**: x, w and y in R-Tile; the backward reads `wᵀ` and `xᵀ` as views;
//! - **(a) row-major**: the same kernels with every tensor row-major; the backward reads the
//!   row-major matrices transposed (as views);
//! - **(b) row-major + transposes**: before each transposed product, [`Gather`] writes the
//!   transpose densely, and the product reads the copy.
//!
//! Times are GPU timestamps of each dispatch where the device has them (else the wall clock
//! around each), the median over `--samples` batches of `--reps` products each, after a
//! warm-up. The gathers of (b) are timed by the wall clock around `--reps` back-to-back runs
//! (they are submitted one by one, outside a batch). Every product's output is checked on
//! `--check` sampled elements against a sum in `f64`, so a fast wrong kernel fails the run.
//!
//! `--configs` also times every tiling the device can build, with several splits of the
//! reduction, at each shape, and marks the one the op chooses by itself.
//!
//! Run: `cargo run --release -p fblayout-examples --example bench_matmul [-- --help]`

mod support;

use std::process::ExitCode;
use std::time::Instant;
use support::{Res, Rng, err};

use clap::Parser;
use fblayout_core::layout::{BoundView, ElemType, LayoutSpec, Order, View};
use fblayout_kernels::ops::matmul::{GemmShape, MatmulOp, Scale, TileConfig, Tiling};
use fblayout_kernels::tensor::GpuArg;
use fblayout_kernels::{Gather, Gpu, GpuBuffer};

/// Times matrix products (GEMM, and a linear layer's forward and backward) on the first GPU
/// adapter.
#[derive(Parser)]
struct Args {
    /// Extent of the square GEMM (m = n = k); 0 skips it.
    #[arg(long, default_value_t = 192)]
    size: u32,
    /// Tokens of the linear layers (batch × sequence; 4096 = 32 × 128 on a big GPU).
    #[arg(long, default_value_t = 128)]
    tokens: u32,
    /// Model width of the first linear layer.
    #[arg(long, default_value_t = 384)]
    d_model: u32,
    /// Feed-forward width of the first linear layer.
    #[arg(long, default_value_t = 1536)]
    d_ff: u32,
    /// Also time the 768 ↔ 3072 layer.
    #[arg(long)]
    wide: bool,
    /// Element types to time: f32, f16 or both (f16 only where the device has it).
    #[arg(long, default_value = "f32,f16")]
    elems: String,
    /// Timed samples per measurement (the median is reported).
    #[arg(long, default_value_t = 3)]
    samples: usize,
    /// Products per sample, recorded in one batch.
    #[arg(long, default_value_t = 2)]
    reps: usize,
    /// Least GPU time of one timed batch, in milliseconds (more products are recorded when
    /// `--reps` are quicker).
    #[arg(long, default_value_t = 20.0)]
    batch_ms: f64,
    /// Least milliseconds of sustained work before each measurement (a GPU that clocks down
    /// when idle needs 500 or more: an H200 does).
    #[arg(long, default_value_t = 100.0)]
    warmup_ms: f64,
    /// Sampled outputs checked against f64 per product.
    #[arg(long, default_value_t = 48)]
    check: usize,
    /// Also time every tiling and split at the square GEMM and the first layer's three GEMMs
    /// (f32, planned layouts).
    #[arg(long)]
    configs: bool,
    /// Tilings `--configs` tries besides the op's own candidates, each
    /// `TILE_MxTILE_NxK_STEP:THREAD_MxTHREAD_N` (e.g. `128x128x8:8x8`), comma-separated.
    #[arg(long, default_value = "")]
    tilings: String,
    /// Splits of the reduction `--configs` tries, comma-separated.
    #[arg(long, default_value = "1,2,3,4,6,8")]
    splits: String,
    /// Compute units (multiprocessors) of the device, for the op's own choice of tiling
    /// (default: the library's, an H200's 132).
    #[arg(long)]
    compute_units: Option<u32>,
    /// Tile of the planned R-Tile layouts (4 or 8).
    #[arg(long, default_value_t = 4)]
    tile: u32,
    /// Also time the CPU twin at `MxKxN` (e.g. `1024x768x2304`), f32, row-major.
    #[arg(long)]
    cpu: Option<String>,
}

/// A matrix on the GPU: its view, bound, buffer, and its elements as stored (physical order).
struct Matrix {
    view: View,
    bound: BoundView,
    buffer: GpuBuffer,
    stored: Vec<f64>,
}

/// How the matrices of one measurement are stored.
#[derive(Clone, Copy)]
struct Storage {
    order: Order,
    /// The tile, for R-Tile.
    tile: u32,
    elem: ElemType,
}

impl Matrix {
    /// A `rows × cols` matrix stored as `storage`, random when `random` (else NaN).
    fn new(
        gpu: &Gpu,
        rng: &mut Rng,
        name: &str,
        (rows, cols): (u32, u32),
        storage: Storage,
        random: bool,
    ) -> Res<Self> {
        let Storage { order, tile, elem } = storage;
        let spec = if order == Order::RTile {
            LayoutSpec::new(name)
                .axis("rows", rows)
                .tile(tile, true)
                .axis("cols", cols)
                .tile(tile, true)
                .rtile()
                .reduce_forward(["cols"])
                .reduce_backward(["rows"])
        } else {
            LayoutSpec::new(name)
                .axis("rows", rows)
                .axis("cols", cols)
                .order(order)
        }
        .elem(elem);
        let view = spec.build().map_err(err)?.view();
        let bound = view.bind(&[]).map_err(err)?;
        let len = bound.len() as usize;
        let logical: Vec<f64> = (0..bound.logical_len())
            .map(|_| if random { rng.uniform() } else { f64::NAN })
            .collect();
        let physical = bound.pack(&logical).map_err(err)?;
        let (buffer, stored) = match elem {
            ElemType::F16 => {
                let h: Vec<half::f16> = physical.iter().map(|&v| half::f16::from_f64(v)).collect();
                let stored = h.iter().map(|v| v.to_f64()).collect();
                (GpuBuffer::from_slice(gpu, &h).map_err(err)?, stored)
            }
            _ => {
                let f: Vec<f32> = physical.iter().map(|&v| v as f32).collect();
                let stored = f.iter().map(|&v| f64::from(v)).collect();
                (GpuBuffer::from_slice(gpu, &f).map_err(err)?, stored)
            }
        };
        debug_assert_eq!(len, physical.len());
        Ok(Self {
            view,
            bound,
            buffer,
            stored,
        })
    }

    /// The matrix read through `view` (one of its own views).
    fn arg<'a>(&'a self, view: &'a View) -> Res<GpuArg<'a>> {
        let bound = view.bind(&[]).map_err(err)?;
        GpuArg::bound(&self.buffer, view, bound).map_err(err)
    }

    /// Its transposed view.
    fn transposed(&self) -> Res<View> {
        self.view.transpose("rows", "cols").map_err(err)
    }

    /// Its elements as seen through `view`, dense row-major.
    fn logical(&self, view: &View) -> Res<Vec<f64>> {
        view.bind(&[])
            .map_err(err)?
            .unpack(&self.stored)
            .map_err(err)
    }

    /// Its elements as the GPU left them, dense row-major over its own view.
    fn download(&self, elem: ElemType) -> Res<Vec<f64>> {
        let physical: Vec<f64> = match elem {
            ElemType::F16 => self
                .buffer
                .read_back::<half::f16>()
                .map_err(err)?
                .iter()
                .map(|v| v.to_f64())
                .collect(),
            _ => self
                .buffer
                .read_back::<f32>()
                .map_err(err)?
                .iter()
                .map(|&v| f64::from(v))
                .collect(),
        };
        self.bound
            .unpack(&physical[..self.bound.len() as usize])
            .map_err(err)
    }
}

/// One product to time: A and B (matrices and the views they are read through) into C, and
/// what A and B hold through those views (for the checks).
struct Product<'a> {
    a: (&'a Matrix, &'a View),
    b: (&'a Matrix, &'a View),
    c: &'a Matrix,
    held: Option<(Vec<f64>, Vec<f64>)>,
}

impl<'a> Product<'a> {
    fn new(a: (&'a Matrix, &'a View), b: (&'a Matrix, &'a View), c: &'a Matrix) -> Res<Self> {
        let held = Some((a.0.logical(a.1)?, b.0.logical(b.1)?));
        Ok(Self { a, b, c, held })
    }

    fn shape(&self) -> GemmShape {
        let s = |v: &View, d: usize| v.axes()[d].extent.as_static().unwrap_or(0) as u32;
        GemmShape {
            batch: 1,
            m: s(self.a.1, 0),
            k: s(self.a.1, 1),
            n: s(self.b.1, 1),
        }
    }

    fn op(&self, gpu: &Gpu, units: Option<u32>) -> Res<MatmulOp> {
        let op = MatmulOp::new(gpu, self.a.1, self.b.1, &self.c.view).map_err(err)?;
        Ok(match units {
            Some(u) => op.compute_units(u),
            None => op,
        })
    }

    /// Checks `samples` outputs of C against sums in f64 over what A and B hold.
    fn check(&self, elem: ElemType, samples: usize, rng: &mut Rng) -> Res<()> {
        let GemmShape { m, n, k, .. } = self.shape();
        let (m, n, k) = (m as usize, n as usize, k as usize);
        let (a, b) = self.held.as_ref().ok_or("no operands to check against")?;
        let c = self.c.download(elem)?;
        let unit = match elem {
            ElemType::F16 => 1.0 / 1024.0,
            _ => f64::from(f32::EPSILON),
        };
        for _ in 0..samples {
            let i = ((rng.uniform() + 1.0) / 2.0 * m as f64) as usize % m;
            let j = ((rng.uniform() + 1.0) / 2.0 * n as f64) as usize % n;
            let (mut sum, mut size) = (0.0, 0.0);
            for kk in 0..k {
                sum += a[i * k + kk] * b[kk * n + j];
                size += (a[i * k + kk] * b[kk * n + j]).abs();
            }
            let got = c[i * n + j];
            // f32 sums of k terms, then rounding to the stored type.
            let tol = 4.0 * unit * sum.abs() + 1e-5 * size + 1e-30;
            // Written so that a NaN fails too.
            let within = (got - sum).abs() <= tol;
            if !within {
                return Err(format!(
                    "wrong result: C[{i}, {j}] = {got}, expected {sum} (tolerance {tol:.2e})"
                ));
            }
        }
        Ok(())
    }
}

/// The median of `f()` over `samples` calls.
fn median(samples: usize, mut f: impl FnMut() -> Res<f64>) -> Res<f64> {
    let mut times = Vec::with_capacity(samples);
    for _ in 0..samples.max(1) {
        times.push(f()?);
    }
    times.sort_by(f64::total_cmp);
    Ok(times[times.len() / 2])
}

/// Seconds per step of `record` (which records one step into a batch), from the dispatches'
/// timestamps: the median over samples of one batch each, after a warm-up that keeps the GPU
/// busy until its times stop falling (a GPU left idle runs at a low clock for a while). A batch
/// holds `--reps` steps, or more, to last at least `--batch-ms`.
fn time_steps(
    gpu: &Gpu,
    args: &Args,
    record: &dyn Fn(&mut fblayout_kernels::runtime::Batch<'_>) -> Res<()>,
) -> Res<f64> {
    let run = |steps: usize| -> Res<f64> {
        let mut batch = gpu.batch();
        for _ in 0..steps {
            record(&mut batch)?;
        }
        let timings = batch.submit_timed().map_err(err)?;
        Ok(timings.iter().map(|t| t.nanos).sum::<f64>() * 1e-9 / steps as f64)
    };
    // The first run compiles the pipelines; then batches run until `--warmup-ms` have passed
    // and two batches in a row were no quicker than the quickest so far (a GPU's clock ramps
    // up over the warm-up, so the times fall until it has).
    run(1)?;
    let reps_for = |per_step: f64| {
        ((args.batch_ms * 1e-3 / per_step.max(1e-7)).ceil() as usize).clamp(args.reps.max(1), 400)
    };
    let mut reps = reps_for(run(1)?);
    let start = Instant::now();
    let (mut best, mut since_best) = (f64::INFINITY, 0);
    loop {
        let t = run(reps)?;
        if t < 0.97 * best {
            (best, since_best) = (t, 0);
        } else {
            since_best += 1;
        }
        reps = reps_for(best);
        let ms = start.elapsed().as_secs_f64() * 1e3;
        if (since_best >= 2 && ms >= args.warmup_ms) || ms >= 20.0 * args.warmup_ms.max(100.0) {
            break;
        }
    }
    median(args.samples, || run(reps))
}

/// Seconds per gather of `view` of `m` into a fresh dense buffer, by the wall clock.
fn time_gather(gpu: &Gpu, args: &Args, m: &Matrix, view: &View, dst: &GpuBuffer) -> Res<f64> {
    let bound = view.bind(&[]).map_err(err)?;
    let gather = Gather::new(view, &bound).map_err(err)?;
    // Back-to-back submissions, enough to keep the GPU busy.
    let reps = args.reps.max(50);
    for _ in 0..reps {
        gather.run(gpu, &m.buffer, dst).map_err(err)?;
    }
    gpu.wait().map_err(err)?;
    median(args.samples, || {
        let start = Instant::now();
        for _ in 0..reps {
            gather.run(gpu, &m.buffer, dst).map_err(err)?;
        }
        gpu.wait().map_err(err)?;
        Ok(start.elapsed().as_secs_f64() / reps as f64)
    })
}

fn tflops(shape: GemmShape, seconds: f64) -> Rate {
    Rate(shape.flops() / seconds / 1e12)
}

/// TFLOP/s, printed with two decimals, or four below 1 (a software device).
#[derive(Clone, Copy)]
struct Rate(f64);

impl std::fmt::Display for Rate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.0 >= 1.0 {
            write!(f, "{:.2}", self.0)
        } else {
            write!(f, "{:.4}", self.0)
        }
    }
}

/// Times one product with the op's own plan; checks it; returns seconds.
fn time_product(
    gpu: &Gpu,
    args: &Args,
    p: &Product<'_>,
    elem: ElemType,
    rng: &mut Rng,
) -> Res<(f64, Tiling)> {
    let op = p.op(gpu, args.compute_units)?;
    let (ga, gb, gc) = (p.a.0.arg(p.a.1)?, p.b.0.arg(p.b.1)?, p.c.arg(&p.c.view)?);
    let t = time_steps(gpu, args, &|batch| {
        op.record(batch, &ga, &gb, &gc, Scale::OVERWRITE)
            .map_err(err)
    })?;
    p.check(elem, args.check, rng)?;
    Ok((t, op.plan(p.shape())))
}

/// The tilings of `--tilings`.
fn parse_tilings(list: &str) -> Res<Vec<TileConfig>> {
    let bad = |t: &str| format!("--tilings: `{t}` is not TILE_MxTILE_NxK_STEP:THREAD_MxTHREAD_N");
    let mut out = Vec::new();
    for t in list.split(',').map(str::trim).filter(|t| !t.is_empty()) {
        let (tile, thread) = t.split_once(':').ok_or_else(|| bad(t))?;
        let nums = |s: &str| -> Res<Vec<u32>> {
            s.split('x')
                .map(|n| n.parse::<u32>().map_err(|_| bad(t)))
                .collect()
        };
        match (nums(tile)?.as_slice(), nums(thread)?.as_slice()) {
            (&[m, n, k], &[tm, tn]) => out.push(TileConfig::new(m, n, k, tm, tn)),
            _ => return Err(bad(t)),
        }
    }
    Ok(out)
}

/// `--configs`: every tiling and split at the shape of `p`.
fn sweep(gpu: &Gpu, args: &Args, name: &str, p: &Product<'_>, rng: &mut Rng) -> Res<()> {
    let op = p.op(gpu, args.compute_units)?;
    let shape = p.shape();
    let chosen = op.plan(shape);
    let (ga, gb, gc) = (p.a.0.arg(p.a.1)?, p.b.0.arg(p.b.1)?, p.c.arg(&p.c.view)?);
    let mut rows = Vec::new();
    let mut configs: Vec<TileConfig> = op.candidates().iter().map(|c| c.0).collect();
    configs.extend(parse_tilings(&args.tilings)?);
    let splits: Vec<u32> = args
        .splits
        .split(',')
        .map(|s| s.trim().parse().map_err(|e| format!("--splits: {e}")))
        .collect::<Res<_>>()?;
    for config in configs {
        if let Err(why) = config.check(gpu.limits()) {
            println!("tiling {config}: {why}; skipped");
            continue;
        }
        for &split_k in &splits {
            let tiles = shape.m.div_ceil(config.tile_m) * shape.n.div_ceil(config.tile_n);
            if split_k > 1 && (shape.k / split_k < 2 * config.k_step || tiles * split_k > 2048) {
                continue;
            }
            let plan = Tiling { config, split_k };
            let t = time_steps(gpu, args, &|batch| {
                op.record_plan(batch, plan, &ga, &gb, &gc, Scale::OVERWRITE)
                    .map_err(err)
            })?;
            p.check(ElemType::F32, args.check.min(16), rng)?;
            rows.push((t, plan));
        }
    }
    rows.sort_by(|x, y| x.0.total_cmp(&y.0));
    println!(
        "\n#### tilings at {name} [{}×{}]·[{}×{}] (f32, planned layouts)\n",
        shape.m, shape.k, shape.k, shape.n
    );
    println!("| plan | ms | TFLOP/s | |\n|---|---:|---:|---|");
    for (t, plan) in &rows {
        let mark = if *plan == chosen { "chosen" } else { "" };
        println!(
            "| {plan} | {:.3} | {} | {mark} |",
            t * 1e3,
            tflops(shape, *t)
        );
    }
    if let Some((t, _)) = rows.iter().find(|(_, plan)| *plan == chosen) {
        let best = rows[0].0;
        println!(
            "\nchosen: {chosen} at {} TFLOP/s, {:.0}% of the best ({})",
            tflops(shape, *t),
            100.0 * best / t,
            rows[0].1
        );
    }
    Ok(())
}

/// A linear layer's tensors: inputs x, w and dy random, outputs y, dx and dw NaN.
struct Layer {
    x: Matrix,
    w: Matrix,
    y: Matrix,
    dy: Matrix,
    dx: Matrix,
    dw: Matrix,
}

impl Layer {
    fn new(
        gpu: &Gpu,
        rng: &mut Rng,
        storage: Storage,
        (t, d_in, d_out): (u32, u32, u32),
    ) -> Res<Self> {
        let mut mk = |name: &str, dims, random| Matrix::new(gpu, rng, name, dims, storage, random);
        Ok(Self {
            x: mk("x", (t, d_in), true)?,
            w: mk("w", (d_in, d_out), true)?,
            y: mk("y", (t, d_out), false)?,
            dy: mk("dy", (t, d_out), true)?,
            dx: mk("dx", (t, d_in), false)?,
            dw: mk("dw", (d_in, d_out), false)?,
        })
    }
}

/// The three GEMMs of one linear layer, each of the three ways.
fn linear_layer(
    gpu: &Gpu,
    args: &Args,
    elem: ElemType,
    (d_in, d_out): (u32, u32),
    first: bool,
    rng: &mut Rng,
) -> Res<()> {
    let t = args.tokens;
    let shape = |m, k, n| GemmShape { batch: 1, m, n, k };
    let shapes = [
        ("y = x·w", shape(t, d_in, d_out)),
        ("dx = dy·wᵀ", shape(t, d_out, d_in)),
        ("dw = xᵀ·dy", shape(d_in, t, d_out)),
    ];
    println!(
        "\n### linear layer {d_in} → {d_out}, {t} tokens, {elem}\n\n| layouts | GEMM | plan | ms | TFLOP/s |\n|---|---|---|---:|---:|"
    );
    let storage = |order| Storage {
        order,
        tile: args.tile,
        elem,
    };
    let mut totals = Vec::new();
    for (label, order) in [
        ("planned (R-Tile)", Order::RTile),
        ("(a) row-major", Order::RowMajor),
    ] {
        let Layer {
            x,
            w,
            y,
            dy,
            dx,
            dw,
        } = Layer::new(gpu, rng, storage(order), (t, d_in, d_out))?;
        let (w_t, x_t) = (w.transposed()?, x.transposed()?);
        let products = [
            Product::new((&x, &x.view), (&w, &w.view), &y)?,
            Product::new((&dy, &dy.view), (&w, &w_t), &dx)?,
            Product::new((&x, &x_t), (&dy, &dy.view), &dw)?,
        ];
        let mut total = 0.0;
        for ((name, shape), p) in shapes.iter().zip(&products) {
            let (secs, plan) = time_product(gpu, args, p, elem, rng)?;
            total += secs;
            println!(
                "| {label} | {name} | {plan} | {:.3} | {} |",
                secs * 1e3,
                tflops(*shape, secs)
            );
            if args.configs && elem == ElemType::F32 && order == Order::RTile && first {
                sweep(gpu, args, name, p, rng)?;
            }
        }
        totals.push((label, total));
    }
    // (b): row-major, with the transposes written densely before the products that read them.
    if elem.size_bytes() == 4 {
        let Layer {
            x,
            w,
            y,
            dy,
            dx,
            dw,
        } = Layer::new(gpu, rng, storage(Order::RowMajor), (t, d_in, d_out))?;
        let mk = |rng: &mut Rng, name: &str, dims| {
            Matrix::new(gpu, rng, name, dims, storage(Order::RowMajor), false)
        };
        // The dense transposes, as row-major matrices of their own.
        let w_dense = mk(rng, "w_t", (d_out, d_in))?;
        let x_dense = mk(rng, "x_t", (d_in, t))?;
        let (w_t, x_t) = (w.transposed()?, x.transposed()?);
        let gather_w = time_gather(gpu, args, &w, &w_t, &w_dense.buffer)?;
        let gather_x = time_gather(gpu, args, &x, &x_t, &x_dense.buffer)?;
        // The products read the copies; the checks read what the copies hold.
        let w_copy = Matrix {
            stored: w.logical(&w_t)?,
            ..w_dense
        };
        let x_copy = Matrix {
            stored: x.logical(&x_t)?,
            ..x_dense
        };
        let products = [
            Product::new((&x, &x.view), (&w, &w.view), &y)?,
            Product::new((&dy, &dy.view), (&w_copy, &w_copy.view), &dx)?,
            Product::new((&x_copy, &x_copy.view), (&dy, &dy.view), &dw)?,
        ];
        let label = "(b) row-major + transposes";
        let mut total = gather_w + gather_x;
        for (((name, shape), p), gather) in
            shapes.iter().zip(&products).zip([0.0, gather_w, gather_x])
        {
            let (secs, plan) = time_product(gpu, args, p, elem, rng)?;
            total += secs;
            let note = if gather > 0.0 {
                format!(" + {:.3} transpose", gather * 1e3)
            } else {
                String::new()
            };
            println!(
                "| {label} | {name} | {plan} | {:.3}{note} | {} |",
                secs * 1e3,
                tflops(*shape, secs + gather)
            );
        }
        totals.push((label, total));
    }
    let planned = totals[0].1;
    println!(
        "\n| layouts | forward + backward (3 GEMMs) | TFLOP/s | time / planned |\n|---|---:|---:|---:|"
    );
    let flops: f64 = shapes.iter().map(|(_, s)| s.flops()).sum();
    for (label, total) in &totals {
        println!(
            "| {label} | {:.3} ms | {} | {:.2}× |",
            total * 1e3,
            Rate(flops / total / 1e12),
            total / planned
        );
    }
    Ok(())
}

/// The square GEMM, row-major and R-Tile.
fn square(gpu: &Gpu, args: &Args, elem: ElemType, rng: &mut Rng) -> Res<()> {
    let s = args.size;
    println!(
        "\n### square GEMM {s}³, {elem}\n\n| layouts | plan | ms | TFLOP/s |\n|---|---|---:|---:|"
    );
    for (label, order) in [("row-major", Order::RowMajor), ("R-Tile", Order::RTile)] {
        let mk = |rng: &mut Rng, name: &str, random| {
            Matrix::new(
                gpu,
                rng,
                name,
                (s, s),
                Storage {
                    order,
                    tile: args.tile,
                    elem,
                },
                random,
            )
        };
        let (a, b, c) = (
            mk(rng, "a", true)?,
            mk(rng, "b", true)?,
            mk(rng, "c", false)?,
        );
        let p = Product::new((&a, &a.view), (&b, &b.view), &c)?;
        let (secs, plan) = time_product(gpu, args, &p, elem, rng)?;
        println!(
            "| {label} | {plan} | {:.3} | {} |",
            secs * 1e3,
            tflops(p.shape(), secs)
        );
        if args.configs && elem == ElemType::F32 && order == Order::RowMajor {
            sweep(gpu, args, &format!("{s}³"), &p, rng)?;
        }
    }
    Ok(())
}

/// `--cpu`: the CPU twin's time at one shape.
fn cpu_twin(shape: &str) -> Res<()> {
    use fblayout_kernels::ops::matmul::matmul_cpu;
    use fblayout_kernels::tensor::{HostArg, HostArgMut};
    let dims: Vec<u32> = shape
        .split('x')
        .map(|n| {
            n.parse()
                .map_err(|_| format!("--cpu: `{shape}` is not MxKxN"))
        })
        .collect::<Res<_>>()?;
    let &[m, k, n] = dims.as_slice() else {
        return Err(format!("--cpu: `{shape}` is not MxKxN"));
    };
    let matrix = |name: &str, rows, cols| -> Res<BoundView> {
        LayoutSpec::new(name)
            .axis("rows", rows)
            .axis("cols", cols)
            .build()
            .map_err(err)?
            .view()
            .bind(&[])
            .map_err(err)
    };
    let (ba, bb, bc) = (matrix("a", m, k)?, matrix("b", k, n)?, matrix("c", m, n)?);
    let mut rng = Rng(7);
    let a: Vec<f32> = (0..ba.len()).map(|_| rng.uniform() as f32).collect();
    let b: Vec<f32> = (0..bb.len()).map(|_| rng.uniform() as f32).collect();
    let mut c = vec![0f32; bc.len() as usize];
    let start = Instant::now();
    matmul_cpu(
        &HostArg::bound(&a, &ba).map_err(err)?,
        &HostArg::bound(&b, &bb).map_err(err)?,
        &mut HostArgMut::bound(&mut c, &bc).map_err(err)?,
        Scale::OVERWRITE,
    )
    .map_err(err)?;
    let secs = start.elapsed().as_secs_f64();
    let shape = GemmShape { batch: 1, m, n, k };
    println!(
        "\nCPU twin [{m}×{k}]·[{k}×{n}] in f64 on {} cores: {secs:.2} s ({:.2} GFLOP/s)",
        cores(),
        shape.flops() / secs / 1e9
    );
    Ok(())
}

/// The cores rayon spreads the CPU twin over (unless `RAYON_NUM_THREADS` says otherwise).
fn cores() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

fn run(args: &Args) -> Res<()> {
    if let Some(shape) = &args.cpu {
        cpu_twin(shape)?;
    }
    let gpu = Gpu::new().map_err(err)?;
    println!(
        "adapter: {} ({})\ntimes: {}, median of {} samples of {} products",
        gpu.info(),
        gpu.features(),
        if gpu.features().timestamps {
            "GPU timestamps"
        } else {
            "wall clock"
        },
        args.samples,
        args.reps
    );
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    let mut elems = Vec::new();
    for e in args.elems.split(',') {
        match e.trim() {
            "f32" => elems.push(ElemType::F32),
            "f16" if gpu.features().f16 => elems.push(ElemType::F16),
            "f16" => println!("f16: the device has no SHADER_F16; skipped"),
            other => return Err(format!("--elems: unknown element type `{other}`")),
        }
    }
    let mut layers = vec![(args.d_model, args.d_ff), (args.d_ff, args.d_model)];
    if args.wide {
        layers.extend([(768, 3072), (3072, 768)]);
    }
    for &elem in &elems {
        if args.size > 0 {
            square(&gpu, args, elem, &mut rng)?;
        }
        if args.tokens > 0 {
            for (i, &dims) in layers.iter().enumerate() {
                linear_layer(&gpu, args, elem, dims, i == 0, &mut rng)?;
            }
        }
    }
    println!(
        "\nEvery product was checked on {} sampled outputs against f64.",
        args.check
    );
    Ok(())
}

fn main() -> ExitCode {
    support::exit("bench_matmul", run(&Args::parse()))
}
