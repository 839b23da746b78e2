//! Benchmark: the GEMM on cooperative matrices (tensor cores) against the f32 GEMM.
//!
//! At each shape — square `--sizes` (4096³ and 8192³ by default) and a MiniLM linear layer's
//! three GEMMs at `--tokens × --d-model → --d-ff` (`y = x·w` and `[T×d_ff]·[d_ff×d_model]`,
//! and the backward `dx = dy·wᵀ`, `dw = xᵀ·dy`, the transposes read as views) — it times, in
//! the same run:
//!
//! - **coop**: [`CoopMatmulOp`], f16 operands, f32 output, with the configuration its
//!   autotune chose (printed; `--acc f16` also times an f16-accumulator variant);
//! - **f32**: [`MatmulOp`], the register-blocked f32 GEMM, with f32 copies of the same values.
//!
//! Then the three GEMMs of the linear layer's forward and backward are timed together, one
//! batch per step, in milliseconds per step, on either path. Last come attention's six
//! products per head (`--attn-batch × --heads` products of `--seq × --head-dim` heads): the
//! scores `S = Q·Kᵀ` and weighted values `O = P·V` forward, and `dP = dO·Vᵀ`, `dV = Pᵀ·dO`,
//! `dQ = dS·K`, `dK = dSᵀ·Q` backward, each operand read through a permuted view of a
//! `[batch, seq, heads, head_dim]` tensor (or of `[batch, heads, seq, key]` for P and dS), on
//! both paths.
//!
//! Each figure is the median over `--samples` batches of `--reps` products each (fewer, at
//! least 3, for products larger than 4096³: as many as take the time of `--reps` at 4096³),
//! by the wall
//! clock around the submission and the wait, after at least `--warmup-ms` of sustained work
//! (an idle H200 runs at a low clock). Every product's output is checked on `--check`
//! sampled elements against a sum in f64, so a fast wrong kernel fails the run. On a device
//! without cooperative matrices it says so and exits with status 1.
//!
//! Run: `cargo run --release -p fblayout-examples --example bench_coop [-- --help]`

mod support;

use std::process::ExitCode;
use std::time::Instant;
use support::{Res, Rng, err};

use clap::Parser;
use fblayout_core::layout::{ElemType, LayoutSpec, View};
use fblayout_kernels::ops::coop::{CoopConfig, CoopMatmulOp};
use fblayout_kernels::ops::matmul::{GemmShape, MatmulOp, Scale};
use fblayout_kernels::runtime::{Batch, CoopScalar};
use fblayout_kernels::tensor::GpuArg;
use fblayout_kernels::{Gpu, GpuBuffer};

/// Times the cooperative-matrix GEMM against the f32 GEMM on the first GPU adapter.
#[derive(Parser)]
struct Args {
    /// Extents of the square GEMMs (m = n = k), comma-separated; empty for none.
    #[arg(long, default_value = "4096,8192")]
    sizes: String,
    /// Tokens of the linear layer (batch × sequence); 0 for none of its products.
    #[arg(long, default_value_t = 4096)]
    tokens: u32,
    /// Model width of the linear layer.
    #[arg(long, default_value_t = 384)]
    d_model: u32,
    /// Feed-forward width of the linear layer.
    #[arg(long, default_value_t = 1536)]
    d_ff: u32,
    /// Timed samples per measurement (the median is reported).
    #[arg(long, default_value_t = 5)]
    samples: usize,
    /// Products per sample, recorded in one batch.
    #[arg(long, default_value_t = 20)]
    reps: usize,
    /// Least milliseconds of sustained work before each measurement.
    #[arg(long, default_value_t = 600.0)]
    warmup_ms: f64,
    /// Sampled outputs checked against f64 per product.
    #[arg(long, default_value_t = 200)]
    check: usize,
    /// Accumulators to time on the cooperative path: f32, f16 or both (each where the
    /// adapter offers it).
    #[arg(long, default_value = "f32")]
    acc: String,
    /// Also time every candidate configuration at each shape (the autotune's table): every
    /// unsplit one, and the split-k ones the shape gets (`…/split4`: the reduction in 4 parts).
    #[arg(long)]
    configs: bool,
    /// Skip the f32 path.
    #[arg(long)]
    no_f32: bool,
    /// Attention's batch (sequences) for its six products; 0 for none.
    #[arg(long, default_value_t = 32)]
    attn_batch: u32,
    /// Attention's heads.
    #[arg(long, default_value_t = 12)]
    heads: u32,
    /// Attention's sequence length.
    #[arg(long, default_value_t = 128)]
    seq: u32,
    /// Attention's head width.
    #[arg(long, default_value_t = 64)]
    head_dim: u32,
}

/// A static row-major `rows × cols` matrix on the GPU and its values (f16-representable).
struct Matrix {
    rows: u32,
    cols: u32,
    values: Vec<f64>,
    f16: GpuBuffer,
    f32: GpuBuffer,
    view16: View,
    view32: View,
}

fn layout(name: &str, rows: u32, cols: u32, elem: ElemType) -> Res<View> {
    Ok(LayoutSpec::new(name)
        .elem(elem)
        .axis("rows", rows)
        .axis("cols", cols)
        .build()
        .map_err(err)?
        .view())
}

impl Matrix {
    fn random(gpu: &Gpu, rng: &mut Rng, name: &str, rows: u32, cols: u32) -> Res<Self> {
        let n = rows as usize * cols as usize;
        let h: Vec<half::f16> = (0..n).map(|_| half::f16::from_f64(rng.uniform())).collect();
        let values: Vec<f64> = h.iter().map(|v| v.to_f64()).collect();
        let f: Vec<f32> = values.iter().map(|&v| v as f32).collect();
        Ok(Self {
            rows,
            cols,
            f16: GpuBuffer::from_slice(gpu, &h).map_err(err)?,
            f32: GpuBuffer::from_slice(gpu, &f).map_err(err)?,
            values,
            view16: layout(name, rows, cols, ElemType::F16)?,
            view32: layout(name, rows, cols, ElemType::F32)?,
        })
    }

    /// The view of its f16 or f32 copy, transposed when `t`.
    fn view(&self, elem: ElemType, t: bool) -> Res<View> {
        let v = if elem == ElemType::F16 {
            &self.view16
        } else {
            &self.view32
        };
        if t {
            v.transpose("rows", "cols").map_err(err)
        } else {
            Ok(v.clone())
        }
    }

    /// Element `(i, j)` of the matrix, or of its transpose when `t`.
    fn at(&self, t: bool, i: usize, j: usize) -> f64 {
        let cols = self.cols as usize;
        if t {
            self.values[j * cols + i]
        } else {
            self.values[i * cols + j]
        }
    }
}

/// An output `rows × cols` f32 matrix.
struct Output {
    buffer: GpuBuffer,
    view: View,
    cols: u32,
}

impl Output {
    /// A row-major `[batch, heads, rows, cols]` output (`cols` is the last of `dims`).
    fn new4(gpu: &Gpu, dims: [u32; 4]) -> Res<Self> {
        let mut spec = LayoutSpec::new("c");
        for (axis, extent) in ["batch", "heads", "rows", "cols"].into_iter().zip(dims) {
            spec = spec.axis(axis, extent);
        }
        let len: usize = dims.iter().map(|&e| e as usize).product();
        Ok(Self {
            buffer: GpuBuffer::scratch::<f32>(gpu, len).map_err(err)?,
            view: spec.build().map_err(err)?.view(),
            cols: dims[3],
        })
    }

    fn new(gpu: &Gpu, name: &str, rows: u32, cols: u32) -> Res<Self> {
        Ok(Self {
            buffer: GpuBuffer::scratch::<f32>(gpu, rows as usize * cols as usize).map_err(err)?,
            view: layout(name, rows, cols, ElemType::F32)?,
            cols,
        })
    }
}

/// `C = op(A) · op(B)`: A and B, each transposed or not, into C.
struct Product<'a> {
    name: String,
    a: (&'a Matrix, bool),
    b: (&'a Matrix, bool),
    c: &'a Output,
}

/// Arguments of one product on one path.
struct Args3<'a> {
    a: GpuArg<'a>,
    b: GpuArg<'a>,
    c: GpuArg<'a>,
}

fn arg<'a>(buffer: &'a GpuBuffer, view: &'a View) -> Res<GpuArg<'a>> {
    GpuArg::bound(buffer, view, view.bind(&[]).map_err(err)?).map_err(err)
}

impl Product<'_> {
    fn shape(&self) -> GemmShape {
        let (a, ta) = self.a;
        let (b, tb) = self.b;
        let (m, k) = if ta {
            (a.cols, a.rows)
        } else {
            (a.rows, a.cols)
        };
        let n = if tb { b.rows } else { b.cols };
        GemmShape { batch: 1, m, n, k }
    }

    fn views(&self, elem: ElemType) -> Res<(View, View)> {
        Ok((
            self.a.0.view(elem, self.a.1)?,
            self.b.0.view(elem, self.b.1)?,
        ))
    }

    fn args<'a>(&'a self, elem: ElemType, views: &'a (View, View)) -> Res<Args3<'a>> {
        let buf = |m: &'a Matrix| {
            if elem == ElemType::F16 {
                &m.f16
            } else {
                &m.f32
            }
        };
        Ok(Args3 {
            a: arg(buf(self.a.0), &views.0)?,
            b: arg(buf(self.b.0), &views.1)?,
            c: arg(&self.c.buffer, &self.c.view)?,
        })
    }

    /// Checks `samples` outputs of C against sums in f64; `rel` is the tolerance relative to
    /// the sum of the terms' magnitudes.
    fn check(&self, samples: usize, rel: f64, rng: &mut Rng) -> Res<()> {
        let GemmShape { m, n, k, .. } = self.shape();
        let got = self.c.buffer.read_back::<f32>().map_err(err)?;
        let pick = |rng: &mut Rng, len: u32| {
            ((rng.uniform() + 1.0) / 2.0 * f64::from(len)) as usize % len as usize
        };
        for _ in 0..samples {
            let (i, j) = (pick(rng, m), pick(rng, n));
            let (mut sum, mut size) = (0.0, 0.0);
            for kk in 0..k as usize {
                let t = self.a.0.at(self.a.1, i, kk) * self.b.0.at(self.b.1, kk, j);
                sum += t;
                size += t.abs();
            }
            let g = f64::from(got[i * self.c.cols as usize + j]);
            let tol = rel * size + 1e-6;
            // Written so that NaN fails.
            let within = (g - sum).abs() <= tol;
            if !within {
                return Err(format!(
                    "{}: wrong result: C[{i}, {j}] = {g}, expected {sum} (tolerance {tol:.2e})",
                    self.name
                ));
            }
        }
        Ok(())
    }
}

/// Products per sample for `shape`: `--reps` up to the work of a 4096³ product, fewer (at
/// least 3) for larger ones, so that 8192³ takes about as long per sample as 4096³.
fn reps_for(args: &Args, shape: GemmShape) -> usize {
    let reference = 2.0 * 4096f64.powi(3);
    let scaled = (args.reps as f64 * (reference / shape.flops()).min(1.0)).round() as usize;
    scaled.max(3).min(args.reps.max(1))
}

/// Seconds per step of `record`: the median over samples of one batch of `reps` steps each,
/// by the wall clock, after a warm-up of at least `warmup_ms`.
fn time(
    gpu: &Gpu,
    args: &Args,
    reps: usize,
    record: &dyn Fn(&mut Batch<'_>) -> Res<()>,
) -> Res<f64> {
    let run = |reps: usize| -> Res<f64> {
        let mut batch = gpu.batch();
        for _ in 0..reps {
            record(&mut batch)?;
        }
        let start = Instant::now();
        batch.submit().map_err(err)?;
        gpu.wait().map_err(err)?;
        Ok(start.elapsed().as_secs_f64() / reps as f64)
    };
    let reps = reps.max(1);
    run(1)?;
    let start = Instant::now();
    while start.elapsed().as_secs_f64() * 1e3 < args.warmup_ms {
        run(reps)?;
    }
    let mut samples: Vec<f64> = (0..args.samples.max(1))
        .map(|_| run(reps))
        .collect::<Res<_>>()?;
    samples.sort_by(f64::total_cmp);
    Ok(samples[samples.len() / 2])
}

fn tflops(shape: GemmShape, seconds: f64) -> f64 {
    shape.flops() / seconds / 1e12
}

/// The relative tolerance of an accumulator type.
fn tolerance(acc: CoopScalar) -> f64 {
    match acc {
        CoopScalar::F16 => 1e-2,
        _ => 1e-3,
    }
}

/// One row of the table: the coop figure for each accumulator, the f32 figure.
fn bench_product(
    gpu: &Gpu,
    args: &Args,
    accs: &[CoopScalar],
    p: &Product<'_>,
    rng: &mut Rng,
) -> Res<()> {
    let shape = p.shape();
    let reps = reps_for(args, shape);
    let views16 = p.views(ElemType::F16)?;
    let op = CoopMatmulOp::new(gpu, &views16.0, &views16.1, &p.c.view).map_err(err)?;
    let g = p.args(ElemType::F16, &views16)?;
    let mut cells = Vec::new();
    for &acc in accs {
        let config = if acc == op.accumulator() {
            op.tune(gpu, &g.a, &g.b, &g.c).map_err(err)?
        } else {
            // Another accumulator: the best of its configurations, measured here.
            let (best, _) = measure_all(gpu, &op, &g, acc)?;
            best
        };
        let t = time(gpu, args, reps, &|batch| {
            op.record_config(batch, config, &g.a, &g.b, &g.c)
                .map_err(err)
        })?;
        p.check(args.check, tolerance(acc), rng)?;
        cells.push(format!("{:.1} ({config})", tflops(shape, t)));
        if args.configs {
            let (_, all) = measure_all(gpu, &op, &g, acc)?;
            for (c, secs) in all {
                println!("|   {} config {c} | {:.1} |", p.name, tflops(shape, secs));
            }
        }
    }
    let f32_cell = if args.no_f32 {
        "—".to_owned()
    } else {
        let views32 = p.views(ElemType::F32)?;
        let mm = MatmulOp::new(gpu, &views32.0, &views32.1, &p.c.view).map_err(err)?;
        let g32 = p.args(ElemType::F32, &views32)?;
        let t = time(gpu, args, reps, &|batch| {
            mm.record(batch, &g32.a, &g32.b, &g32.c, Scale::OVERWRITE)
                .map_err(err)
        })?;
        p.check(args.check, 1e-4, rng)?;
        format!("{:.1} ({})", tflops(shape, t), mm.plan(shape))
    };
    println!(
        "| {} | {}×{}×{} | {} | {f32_cell} |",
        p.name,
        shape.m,
        shape.n,
        shape.k,
        cells.join(" | ")
    );
    Ok(())
}

/// Every unsplit configuration with accumulator `acc` the device builds, and the split-k
/// candidates of the problem, screened and the fastest re-timed by
/// [`CoopMatmulOp::measure_configs`]: the fastest and all times (seconds).
fn measure_all(
    gpu: &Gpu,
    op: &CoopMatmulOp,
    g: &Args3<'_>,
    acc: CoopScalar,
) -> Res<(CoopConfig, Vec<(CoopConfig, f64)>)> {
    let mut configs = CoopConfig::space(acc);
    if acc == op.accumulator() {
        let e = op.extents(gpu, &g.a, &g.b, &g.c).map_err(err)?;
        configs.extend(op.candidates_for(&e).into_iter().filter(|c| c.split_k > 1));
    }
    let (best, all) = op
        .measure_configs(gpu, &configs, &g.a, &g.b, &g.c, 4)
        .map_err(err)?;
    let all = all.into_iter().map(|(c, t)| (c, t.as_secs_f64())).collect();
    Ok((best, all))
}

/// The linear layer's three GEMMs per step, on the coop path (tuned) and the f32 path.
fn bench_layer(gpu: &Gpu, args: &Args, layer: [&Product<'_>; 3]) -> Res<()> {
    let mut coop = Vec::new();
    let mut f32s = Vec::new();
    let views16: Vec<(View, View)> = layer
        .iter()
        .map(|p| p.views(ElemType::F16))
        .collect::<Res<_>>()?;
    let views32: Vec<(View, View)> = layer
        .iter()
        .map(|p| p.views(ElemType::F32))
        .collect::<Res<_>>()?;
    for (p, (v16, v32)) in layer.iter().zip(views16.iter().zip(&views32)) {
        let op = CoopMatmulOp::new(gpu, &v16.0, &v16.1, &p.c.view).map_err(err)?;
        let g = p.args(ElemType::F16, v16)?;
        let config = op.tune(gpu, &g.a, &g.b, &g.c).map_err(err)?;
        coop.push((op, g, config));
        let mm = MatmulOp::new(gpu, &v32.0, &v32.1, &p.c.view).map_err(err)?;
        f32s.push((mm, p.args(ElemType::F32, v32)?));
    }
    let t_coop = time(gpu, args, args.reps, &|batch| {
        for (op, g, config) in &coop {
            op.record_config(batch, *config, &g.a, &g.b, &g.c)
                .map_err(err)?;
        }
        Ok(())
    })?;
    let t_f32 = time(gpu, args, args.reps, &|batch| {
        for (mm, g) in &f32s {
            mm.record(batch, &g.a, &g.b, &g.c, Scale::OVERWRITE)
                .map_err(err)?;
        }
        Ok(())
    })?;
    println!(
        "\nLinear layer forward + backward (3 GEMMs) at {}×{}→{}: coop {:.3} ms, f32 {:.3} ms ({:.2}× faster)",
        args.tokens,
        args.d_model,
        args.d_ff,
        t_coop * 1e3,
        t_f32 * 1e3,
        t_f32 / t_coop
    );
    Ok(())
}

/// One tensor of attention (f16 and f32 copies of the same values) and its dense row-major
/// extents.
struct Tensor4 {
    dims: [u32; 4],
    values: Vec<f64>,
    f16: GpuBuffer,
    f32: GpuBuffer,
    view16: View,
    view32: View,
}

impl Tensor4 {
    fn random(gpu: &Gpu, rng: &mut Rng, name: &str, axes: [(&str, u32); 4]) -> Res<Self> {
        let dims = axes.map(|(_, e)| e);
        let n: usize = dims.iter().map(|&e| e as usize).product();
        let h: Vec<half::f16> = (0..n).map(|_| half::f16::from_f64(rng.uniform())).collect();
        let values: Vec<f64> = h.iter().map(|v| v.to_f64()).collect();
        let f: Vec<f32> = values.iter().map(|&v| v as f32).collect();
        let view = |elem: ElemType| -> Res<View> {
            let mut spec = LayoutSpec::new(name).elem(elem);
            for (axis, extent) in axes {
                spec = spec.axis(axis, extent);
            }
            Ok(spec.build().map_err(err)?.view())
        };
        Ok(Self {
            dims,
            values,
            f16: GpuBuffer::from_slice(gpu, &h).map_err(err)?,
            f32: GpuBuffer::from_slice(gpu, &f).map_err(err)?,
            view16: view(ElemType::F16)?,
            view32: view(ElemType::F32)?,
        })
    }

    /// The element at coordinates `at` (in declaration order).
    fn at(&self, at: [usize; 4]) -> f64 {
        let [_, d1, d2, d3] = self.dims.map(|e| e as usize);
        self.values[((at[0] * d1 + at[1]) * d2 + at[2]) * d3 + at[3]]
    }
}

/// An operand of an attention product: a tensor read as `[batch, head, row, col]` through
/// the permutation `axes` of its declared axes (`perm[i]` = the declared axis of view axis
/// `i`).
struct Operand4<'a> {
    t: &'a Tensor4,
    axes: [&'a str; 4],
    perm: [usize; 4],
}

impl Operand4<'_> {
    fn view(&self, elem: ElemType) -> Res<View> {
        let v = if elem == ElemType::F16 {
            &self.t.view16
        } else {
            &self.t.view32
        };
        v.permute(&self.axes).map_err(err)
    }

    fn buffer(&self, elem: ElemType) -> &GpuBuffer {
        if elem == ElemType::F16 {
            &self.t.f16
        } else {
            &self.t.f32
        }
    }

    /// Element `[b, h, i, j]` of the view.
    fn at(&self, coords: [usize; 4]) -> f64 {
        let mut at = [0; 4];
        for (view_axis, &declared) in self.perm.iter().enumerate() {
            at[declared] = coords[view_axis];
        }
        self.t.at(at)
    }

    /// The view's extent along view axis `i`.
    fn dim(&self, i: usize) -> u32 {
        self.t.dims[self.perm[i]]
    }
}

/// `C [batch, head, m, n] = A · B` per head; C is row-major f32.
struct Product4<'a> {
    name: &'a str,
    a: Operand4<'a>,
    b: Operand4<'a>,
    c: Output,
    c_dims: [u32; 4],
}

impl<'a> Product4<'a> {
    fn new(gpu: &Gpu, name: &'a str, a: Operand4<'a>, b: Operand4<'a>) -> Res<Self> {
        let c_dims = [a.dim(0), a.dim(1), a.dim(2), b.dim(3)];
        Ok(Self {
            name,
            c: Output::new4(gpu, c_dims)?,
            a,
            b,
            c_dims,
        })
    }

    fn shape(&self) -> GemmShape {
        GemmShape {
            batch: self.c_dims[0] * self.c_dims[1],
            m: self.c_dims[2],
            n: self.c_dims[3],
            k: self.a.dim(3),
        }
    }

    /// Checks `samples` outputs against sums in f64 (tolerance relative to the sum of the
    /// terms' magnitudes).
    fn check(&self, samples: usize, rel: f64, rng: &mut Rng) -> Res<()> {
        let got = self.c.buffer.read_back::<f32>().map_err(err)?;
        let pick = |rng: &mut Rng, len: u32| {
            ((rng.uniform() + 1.0) / 2.0 * f64::from(len)) as usize % len as usize
        };
        let [_, hs, ms, ns] = self.c_dims.map(|e| e as usize);
        for _ in 0..samples {
            let at = [0, 1, 2, 3].map(|i| pick(rng, self.c_dims[i]));
            let [b, h, i, j] = at;
            let (mut sum, mut size) = (0.0, 0.0);
            for kk in 0..self.a.dim(3) as usize {
                let t = self.a.at([b, h, i, kk]) * self.b.at([b, h, kk, j]);
                sum += t;
                size += t.abs();
            }
            let g = f64::from(got[((b * hs + h) * ms + i) * ns + j]);
            let tol = rel * size + 1e-6;
            // Written so that NaN fails.
            let within = (g - sum).abs() <= tol;
            if !within {
                return Err(format!(
                    "{}: wrong result: C{at:?} = {g}, expected {sum} (tolerance {tol:.2e})",
                    self.name
                ));
            }
        }
        Ok(())
    }
}

/// Attention's six products per head on both paths (see the module docs).
fn bench_attention(gpu: &Gpu, args: &Args, rng: &mut Rng) -> Res<()> {
    let (bs, hs, s, d) = (args.attn_batch, args.heads, args.seq, args.head_dim);
    let mut seq_heads = |name| {
        Tensor4::random(
            gpu,
            rng,
            name,
            [("batch", bs), ("seq", s), ("heads", hs), ("head_dim", d)],
        )
    };
    let (q, k, v, dout) = (
        seq_heads("q")?,
        seq_heads("k")?,
        seq_heads("v")?,
        seq_heads("dout")?,
    );
    let mut scores = |name| {
        Tensor4::random(
            gpu,
            rng,
            name,
            [("batch", bs), ("heads", hs), ("seq", s), ("key", s)],
        )
    };
    let (p, ds) = (scores("p")?, scores("ds")?);
    // Views of [batch, seq, heads, head_dim]: by rows (seq) or by columns (the transpose).
    let rows = |t| Operand4 {
        t,
        axes: ["batch", "heads", "seq", "head_dim"],
        perm: [0, 2, 1, 3],
    };
    let cols = |t| Operand4 {
        t,
        axes: ["batch", "heads", "head_dim", "seq"],
        perm: [0, 2, 3, 1],
    };
    let plain = |t| Operand4 {
        t,
        axes: ["batch", "heads", "seq", "key"],
        perm: [0, 1, 2, 3],
    };
    let transposed = |t| Operand4 {
        t,
        axes: ["batch", "heads", "key", "seq"],
        perm: [0, 1, 3, 2],
    };
    let product = |name, a, b| Product4::new(gpu, name, a, b);
    let products = [
        product("S = Q·Kᵀ", rows(&q), cols(&k))?,
        product("O = P·V", plain(&p), rows(&v))?,
        product("dP = dO·Vᵀ", rows(&dout), cols(&v))?,
        product("dV = Pᵀ·dO", transposed(&p), rows(&dout))?,
        product("dQ = dS·K", plain(&ds), rows(&k))?,
        product("dK = dSᵀ·Q", transposed(&ds), rows(&q))?,
    ];
    println!("\nAttention per head: {bs} × {hs} heads, seq {s}, head_dim {d} (batched products)\n");
    println!("| product | batch×m×n×k | coop f16→f32 TFLOP/s (config) | f32 TFLOP/s (plan) |");
    println!("|---|---|---|---|");
    for p in &products {
        let shape = p.shape();
        let reps = reps_for(args, shape);
        let gc = arg(&p.c.buffer, &p.c.view)?;
        let (a16, b16) = (p.a.view(ElemType::F16)?, p.b.view(ElemType::F16)?);
        let op = CoopMatmulOp::new(gpu, &a16, &b16, &p.c.view).map_err(err)?;
        let (ga, gb) = (
            arg(p.a.buffer(ElemType::F16), &a16)?,
            arg(p.b.buffer(ElemType::F16), &b16)?,
        );
        let config = op.tune(gpu, &ga, &gb, &gc).map_err(err)?;
        let t = time(gpu, args, reps, &|batch| {
            op.record_config(batch, config, &ga, &gb, &gc).map_err(err)
        })?;
        p.check(args.check, tolerance(CoopScalar::F32), rng)?;
        let coop = format!("{:.1} ({config})", tflops(shape, t));
        let f32_cell = if args.no_f32 {
            "—".to_owned()
        } else {
            let (a32, b32) = (p.a.view(ElemType::F32)?, p.b.view(ElemType::F32)?);
            let mm = MatmulOp::new(gpu, &a32, &b32, &p.c.view).map_err(err)?;
            let (ga, gb) = (
                arg(p.a.buffer(ElemType::F32), &a32)?,
                arg(p.b.buffer(ElemType::F32), &b32)?,
            );
            let t = time(gpu, args, reps, &|batch| {
                mm.record(batch, &ga, &gb, &gc, Scale::OVERWRITE)
                    .map_err(err)
            })?;
            p.check(args.check, 1e-4, rng)?;
            format!("{:.1} ({})", tflops(shape, t), mm.plan(shape))
        };
        println!(
            "| {} | {}×{}×{}×{} | {coop} | {f32_cell} |",
            p.name, shape.batch, shape.m, shape.n, shape.k
        );
    }
    Ok(())
}

/// The linear layer's four products and its three GEMMs together.
fn bench_linear(gpu: &Gpu, args: &Args, accs: &[CoopScalar], rng: &mut Rng) -> Res<()> {
    let (t, d, f) = (args.tokens, args.d_model, args.d_ff);
    let x = Matrix::random(gpu, rng, "x", t, d)?;
    let w = Matrix::random(gpu, rng, "w", d, f)?;
    let dy = Matrix::random(gpu, rng, "dy", t, f)?;
    let w2 = Matrix::random(gpu, rng, "w2", f, d)?;
    let y = Output::new(gpu, "y", t, f)?;
    let y2 = Output::new(gpu, "y2", t, d)?;
    let dx = Output::new(gpu, "dx", t, d)?;
    let dw = Output::new(gpu, "dw", d, f)?;
    let fwd = Product {
        name: "y = x·w".into(),
        a: (&x, false),
        b: (&w, false),
        c: &y,
    };
    let down = Product {
        name: "[T×d_ff]·[d_ff×d]".into(),
        a: (&dy, false),
        b: (&w2, false),
        c: &y2,
    };
    let dx_p = Product {
        name: "dx = dy·wᵀ".into(),
        a: (&dy, false),
        b: (&w, true),
        c: &dx,
    };
    let dw_p = Product {
        name: "dw = xᵀ·dy".into(),
        a: (&x, true),
        b: (&dy, false),
        c: &dw,
    };
    for p in [&fwd, &down, &dx_p, &dw_p] {
        bench_product(gpu, args, accs, p, rng)?;
    }
    bench_layer(gpu, args, [&fwd, &dx_p, &dw_p])?;
    Ok(())
}

fn run(args: &Args) -> Res<()> {
    let gpu = Gpu::new().map_err(err)?;
    let features = gpu.features();
    println!("Adapter: {}\nFeatures: {features}", gpu.info());
    let Some(fragment) = features.coop_fragment else {
        return Err(format!(
            "the adapter has no usable cooperative matrices ({features}); this benchmark needs \
             EXPERIMENTAL_COOPERATIVE_MATRIX with 16×16×16 f16 fragments"
        ));
    };
    let offered = features.cooperative_matrices.to_vec();
    let mut accs = Vec::new();
    let words: Vec<&str> = match args.acc.trim() {
        "both" => vec!["f32", "f16"],
        list => list.split(',').map(str::trim).collect(),
    };
    for word in words {
        let acc = match word {
            "f32" => CoopScalar::F32,
            "f16" => CoopScalar::F16,
            other => return Err(format!("--acc: `{other}` is not f32 or f16")),
        };
        if offered
            .iter()
            .any(|f| f.m == 16 && f.n == 16 && f.k == 16 && f.ab == CoopScalar::F16 && f.acc == acc)
        {
            accs.push(acc);
        } else {
            println!("(no 16×16×16 f16→{} fragment: skipped)", acc.wgsl());
        }
    }
    println!(
        "Fragment: {fragment}; timed: median of {} samples of {} products, after ≥ {} ms of warm-up\n",
        args.samples, args.reps, args.warmup_ms
    );
    let heads: Vec<String> = accs
        .iter()
        .map(|a| format!("coop f16→{} TFLOP/s (config)", a.wgsl()))
        .collect();
    println!(
        "| product | m×n×k | {} | f32 TFLOP/s (plan) |",
        heads.join(" | ")
    );
    println!("|---|---|{}---|", "---|".repeat(accs.len()));
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    for size in args
        .sizes
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
    {
        let n: u32 = size
            .parse()
            .map_err(|e| format!("--sizes: `{size}`: {e}"))?;
        let a = Matrix::random(&gpu, &mut rng, "a", n, n)?;
        let b = Matrix::random(&gpu, &mut rng, "b", n, n)?;
        let c = Output::new(&gpu, "c", n, n)?;
        let p = Product {
            name: format!("square {n}"),
            a: (&a, false),
            b: (&b, false),
            c: &c,
        };
        bench_product(&gpu, args, &accs, &p, &mut rng)?;
    }
    if args.tokens > 0 {
        bench_linear(&gpu, args, &accs, &mut rng)?;
    }
    if args.attn_batch > 0 {
        bench_attention(&gpu, args, &mut rng)?;
    }
    Ok(())
}

fn main() -> ExitCode {
    let args = Args::parse();
    support::exit("bench_coop", run(&args))
}
