//! Calibration: the cost model's factors measured by timing the real kernels on an adapter.
//!
//! [`measure`] times, on small `f32` tensors (with a progress bar once it passes two seconds;
//! on a software adapter it takes most of a minute, mostly the training steps of the kernel
//! factors: see the book's planner chapter):
//!
//! - **bandwidth**: a copy of a whole row-major matrix as stored (read and write), by the GPU's
//!   timestamps;
//! - **access factors**: the same copy read through the transposed view of a row-major matrix
//!   (strided) and of 4×4 and 8×8 R-Tiles (tiled), over the plain copy;
//! - **reduction factors**: a softmax (which reduces its rows) over matrices whose rows are
//!   contiguous (row-major), tiled (R-Tiles whose inner axis is the other one) and strided
//!   (column-major), over the contiguous one;
//! - **matrix-product rates**: `A·B` with `A` row-major and column-major and `B` in every
//!   candidate layout, each pair keyed by the classes of its operands along `k`.
//!
//! - **kernel factors**: training steps of a small graph under the candidate layouts, each
//!   operation's kernels timed, fitted to one multiplier per kind of operation, operand
//!   (activation or weight) and layout ([`kernels`](crate::select::kernels));
//! - **launch**: what the row-major one of those steps takes by the wall clock beyond its
//!   kernels' timestamps, per dispatch: the gaps between kernels, and the submission and the
//!   loss's read-back spread over them, as a training step pays them.
//!
//! Every class is found by the same code the planner prices layouts with, so the factors
//! line up with the classes of the graph's tensors.
//!
//! The factors are cached on disk per adapter and driver ([`cache_key`]), in the runtime's
//! checksummed envelope ([`DiskCache`]), as text. A file that does not check out — corrupt,
//! truncated, written for another adapter, driver, format [`VERSION`] or crate version, or
//! holding factors that are not positive numbers — is measured again and rewritten, never
//! trusted.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use fblayout_core::layout::{BoundView, LayoutSpec, Order, TensorLayout, View};
use fblayout_kernels::GpuBuffer;
use fblayout_kernels::ops::CopyOp;
use fblayout_kernels::ops::matmul::{MatmulOp, Scale};
use fblayout_kernels::ops::softmax::{Mask, Softmax, SoftmaxOp};
use fblayout_kernels::runtime::{Batch, CacheLoad, DiskCache, Gpu, GpuInfo};
use fblayout_kernels::tensor::GpuArg;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use crate::select::PlanError;
use crate::select::cost::{
    Class, ClassFactors, CostModel, Factors, MatmulRates, Origin, walk_classes,
};
use crate::select::kernels::{CALIBRATION, CalibrationShape, KernelFactors};

mod kernels;

pub use crate::select::text::{decode, encode};
pub use kernels::{measure_kernels, ticks};

/// Why a calibration failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CalibrationError {
    /// The model or its objective could not be built, or the factors are not positive.
    #[error(transparent)]
    Plan(#[from] PlanError),
    /// A kernel of the calibration failed.
    #[error("calibration, {step}: {source}")]
    Kernel {
        /// The measurement.
        step: String,
        /// The kernel's error.
        #[source]
        source: Box<fblayout_kernels::ops::OpError>,
    },
    /// The GPU failed during calibration.
    #[error("calibration, {step}: {source}")]
    Gpu {
        /// The measurement.
        step: String,
        /// The runtime's error.
        #[source]
        source: Box<fblayout_kernels::GpuError>,
    },
    /// A measurement could not be made or gave no usable value.
    #[error("calibration, {step}: {detail}")]
    Measure {
        /// The measurement.
        step: String,
        /// What went wrong.
        detail: String,
    },
    /// A training step timed by the calibration could not be built or run.
    #[error("calibration, {step}: {source}")]
    Exec {
        /// The measurement.
        step: String,
        /// The executor's error.
        #[source]
        source: Box<crate::exec::ExecError>,
    },
    /// The calibration cache could not be written.
    #[error("writing the calibration cache `{}`: {source}", path.display())]
    Cache {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
}

/// The format of the cache file, or of the kernels it times; a change makes every older file
/// stale (8: the calibration block timed a second time with its attention fused, for the fused
/// attention's multipliers; 7: the launch measured as the calibration step's wall time beyond
/// its kernels, the
/// copies and products by timestamps alone — on an H100 format 6 priced a launch at a whole
/// submission of one gather, 62 µs;
/// 6: the cooperative GEMM's unmasked whole k-steps; 5: its vector staging and stepped offsets,
/// and mixed precision's weight copies written by AdamW).
pub const VERSION: u32 = 8;

/// Side of the square matrices copied.
const COPY_SIDE: u32 = 1024;
/// Rows and row length of the softmaxes.
const SOFTMAX: (u32, u32) = (256, 256);
/// `m = n = k` of the products.
const MATMUL: u32 = 128;
/// Timed samples per measurement (the quickest is kept).
const SAMPLES: usize = 5;
/// Runs per sample.
const REPS: usize = 4;
/// How long calibration runs before it shows a progress bar.
const QUIET: Duration = Duration::from_secs(2);

/// The cache key of an adapter and a calibration shape: the format version, this crate's
/// version, the adapter's name, backend, type, driver and driver version, and the shape.
pub fn cache_key(info: &GpuInfo, at: &CalibrationShape) -> String {
    format!(
        "fblayout-plan calibration v{VERSION} ({})|{}|{:?}|{:?}|{}|{}|{}",
        env!("CARGO_PKG_VERSION"),
        info.name,
        info.backend,
        info.device_type,
        info.driver,
        info.driver_info,
        at.name()
    )
}

/// The cache file of an adapter and a calibration shape in `dir`: named for the adapter, the
/// driver and the shape, so that a version change finds the old file and rebuilds it.
pub fn cache_path(dir: &Path, info: &GpuInfo, at: &CalibrationShape) -> PathBuf {
    let name: String = format!("{}-{}-{}", info.name, info.driver, at.name())
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .collect();
    dir.join(format!("calibration-{name}.bin"))
}

impl CostModel {
    /// The model calibrated on `gpu`: read from the cache in `cache_dir` when a valid file is
    /// there, else measured ([`measure`]) and written there. `None` measures every time. The
    /// kernels are timed at the small [`CALIBRATION`] shape.
    pub fn calibrated(gpu: &Gpu, cache_dir: Option<&Path>) -> Result<CostModel, CalibrationError> {
        Self::calibrated_at(gpu, cache_dir, CALIBRATION)
    }

    /// [`calibrated`](Self::calibrated), with the kernels timed in the block `at` describes:
    /// the shape and precision a plan is for. A GPU runs small kernels at their launch cost
    /// whatever the layout, so multipliers fitted at a small shape say little about a large
    /// one. Each shape has its own cache file.
    pub fn calibrated_at(
        gpu: &Gpu,
        cache_dir: Option<&Path>,
        at: CalibrationShape,
    ) -> Result<CostModel, CalibrationError> {
        let info = gpu.info();
        let cache =
            cache_dir.map(|dir| DiskCache::at(cache_path(dir, info, &at), cache_key(info, &at)));
        let head_dim = at.config.hidden / at.config.heads.max(1);
        load_or_measure(cache.as_ref(), &info.to_string(), || measure_at(gpu, at))
            .map(|model| model.timed_at_head_dim(head_dim))
    }
}

/// The model from `cache` when its file holds valid factors, else from `measure` (then
/// written to `cache`). The origin says which, and why a file was rebuilt.
pub fn load_or_measure(
    cache: Option<&DiskCache>,
    adapter: &str,
    measure: impl FnOnce() -> Result<Factors, CalibrationError>,
) -> Result<CostModel, CalibrationError> {
    let origin = |cache: String| Origin::Calibrated {
        adapter: adapter.to_owned(),
        cache,
    };
    let Some(cache) = cache else {
        return Ok(CostModel::with_factors(
            measure()?,
            origin("measured; no cache".into()),
        )?);
    };
    let why = match cache.load() {
        (Some(data), CacheLoad::Loaded { .. }) => match decode(&data) {
            Ok(factors) => {
                let read = origin("read from the cache".into());
                return Ok(CostModel::with_factors(factors, read)?);
            }
            Err(reason) => format!("measured; the cache was rebuilt: {reason}"),
        },
        (_, CacheLoad::Rebuilt { reason }) => format!("measured; the cache was rebuilt: {reason}"),
        _ => "measured; no cache file yet".to_owned(),
    };
    let factors = measure()?;
    let model = CostModel::with_factors(factors, origin(why))?;
    cache
        .save(encode(&model.factors).as_bytes())
        .map_err(|source| CalibrationError::Cache {
            path: cache.path().to_owned(),
            source,
        })?;
    Ok(model)
}

/// A matrix on the GPU in one layout.
struct Matrix {
    layout: TensorLayout,
    buffer: GpuBuffer,
}

impl Matrix {
    fn new(gpu: &Gpu, step: &str, spec: LayoutSpec) -> Result<Self, CalibrationError> {
        let layout = spec.build().map_err(|e| CalibrationError::Measure {
            step: step.to_owned(),
            detail: e.to_string(),
        })?;
        let len = bound(step, &layout.view())?.len() as usize;
        // Values that keep every kernel finite.
        let data: Vec<f32> = (0..len).map(|i| (i % 13) as f32 * 0.125 - 0.75).collect();
        let buffer = GpuBuffer::from_slice(gpu, &data).map_err(gpu_err(step))?;
        Ok(Self { layout, buffer })
    }

    /// The class of a walk along `axis`.
    fn class(&self, step: &str, axis: usize) -> Result<Class, CalibrationError> {
        Ok(walk_classes(&self.layout, &bound(step, &self.layout.view())?).0[axis])
    }

    fn arg<'a>(&'a self, step: &str, view: &'a View) -> Result<GpuArg<'a>, CalibrationError> {
        GpuArg::bound(&self.buffer, view, bound(step, view)?).map_err(gpu_err(step))
    }
}

fn bound(step: &str, view: &View) -> Result<BoundView, CalibrationError> {
    view.bind(&[]).map_err(|e| CalibrationError::Measure {
        step: step.to_owned(),
        detail: e.to_string(),
    })
}

fn gpu_err(step: &str) -> impl Fn(fblayout_kernels::GpuError) -> CalibrationError + '_ {
    move |source| CalibrationError::Gpu {
        step: step.to_owned(),
        source: Box::new(source),
    }
}

fn op_err(step: &str) -> impl Fn(fblayout_kernels::ops::OpError) -> CalibrationError + '_ {
    move |source| CalibrationError::Kernel {
        step: step.to_owned(),
        source: Box::new(source),
    }
}

/// A `rows × cols` matrix spec: row-major, column-major, or an R-Tile of `tile` whose inner
/// (forward) axis is `inner`.
fn spec(name: &str, rows: u32, cols: u32, layout: Layout) -> LayoutSpec {
    let base = LayoutSpec::new(name);
    match layout {
        Layout::Order(order) => base.axis("rows", rows).axis("cols", cols).order(order),
        Layout::RTile { tile, inner } => {
            let other = if inner == "cols" { "rows" } else { "cols" };
            base.axis("rows", rows)
                .tile(tile, true)
                .axis("cols", cols)
                .tile(tile, true)
                .rtile()
                .reduce_forward([inner])
                .reduce_backward([other])
        }
    }
}

#[derive(Clone, Copy)]
enum Layout {
    Order(Order),
    RTile { tile: u32, inner: &'static str },
}

/// The quickest of [`SAMPLES`] calls of `f`, after one call to warm up: other work on the
/// machine only ever adds time, so the quickest sample is the least disturbed.
fn quickest(mut f: impl FnMut() -> Result<f64, CalibrationError>) -> Result<f64, CalibrationError> {
    f()?;
    (0..SAMPLES).try_fold(f64::INFINITY, |best, _| Ok(best.min(f()?)))
}

/// Seconds per step that `record` records, from the batch's timings.
fn time_batch(
    gpu: &Gpu,
    step: &str,
    record: &dyn Fn(&mut Batch<'_>) -> Result<(), CalibrationError>,
) -> Result<f64, CalibrationError> {
    quickest(|| {
        let mut batch = gpu.batch();
        for _ in 0..REPS {
            record(&mut batch)?;
        }
        let timings = batch.submit_timed().map_err(gpu_err(step))?;
        Ok(timings.iter().map(|t| t.nanos).sum::<f64>() * 1e-9 / REPS as f64)
    })
}

/// Measures the factors on `gpu` (see the module docs).
pub fn measure(gpu: &Gpu) -> Result<Factors, CalibrationError> {
    measure_at(gpu, CALIBRATION)
}

/// [`measure`], with the kernels timed in the block `at` describes (see
/// [`CostModel::calibrated_at`]).
pub fn measure_at(gpu: &Gpu, at: CalibrationShape) -> Result<Factors, CalibrationError> {
    let started = Instant::now();
    let copies = 4;
    let softmaxes = 4;
    let products = 8;
    let bar = ProgressBar::with_draw_target(
        Some(copies + softmaxes + products + ticks()),
        ProgressDrawTarget::hidden(),
    );
    if let Ok(style) = ProgressStyle::with_template("calibrating {bar:30} {pos}/{len} {msg}") {
        bar.set_style(style);
    }
    let tick = |what: &str| {
        if started.elapsed() > QUIET && bar.is_hidden() {
            bar.set_draw_target(ProgressDrawTarget::stderr());
        }
        bar.set_message(what.to_owned());
        bar.inc(1);
    };

    // Launch, bandwidth and access factors: copies.
    let n = COPY_SIDE;
    let step = "copy";
    let matrix = |name: &str, layout| Matrix::new(gpu, step, spec(name, n, n, layout));
    let rm = matrix("cal_rm", Layout::Order(Order::RowMajor))?;
    let rt = |tile| Layout::RTile {
        tile,
        inner: "cols",
    };
    let (rt4, rt8) = (matrix("cal_rt4", rt(4))?, matrix("cal_rt8", rt(8))?);
    let dst = matrix("cal_dst", Layout::Order(Order::RowMajor))?;
    let measure = |what: &str, e: String| CalibrationError::Measure {
        step: what.to_owned(),
        detail: e,
    };
    // The copy from `view` of `m` into the row-major destination, by timestamps.
    let dst_view = dst.layout.view();
    let dst_arg = dst.arg(step, &dst_view)?;
    let copy_of = |m: &Matrix, view: &View| -> Result<f64, CalibrationError> {
        let op = CopyOp::new(gpu, view, &dst_view).map_err(op_err(step))?;
        let x = m.arg(step, view)?;
        time_batch(gpu, step, &|b| {
            op.forward(b, &x, &dst_arg).map_err(op_err(step))
        })
    };
    let copy = copy_of(&rm, &rm.layout.view())?;
    tick("copy");
    let bytes = 2.0 * f64::from(n * n) * 4.0;
    let bandwidth = bytes / copy;
    let transposed = |m: &Matrix| -> Result<(Class, f64), CalibrationError> {
        let view = m
            .layout
            .view()
            .transpose("rows", "cols")
            .map_err(|e| measure(step, e.to_string()))?;
        // The copy walks the destination's rows: the view's last axis, the matrix's rows.
        let class = m.class(step, 0)?;
        Ok((class, copy_of(m, &view)? / copy))
    };
    let mut measured = Vec::new();
    for m in [&rm, &rt4, &rt8] {
        measured.push(transposed(m)?);
        tick("transposed copies");
    }
    let access = class_factors(step, &measured)?;

    // Reduction factors: softmaxes along rows of each class.
    let step = "softmax";
    let (rows, cols) = SOFTMAX;
    let mut timed: Vec<(Class, f64)> = Vec::new();
    for layout in [
        Layout::Order(Order::RowMajor),
        Layout::RTile {
            tile: 4,
            inner: "rows",
        },
        Layout::RTile {
            tile: 8,
            inner: "rows",
        },
        Layout::Order(Order::ColMajor),
    ] {
        let x = Matrix::new(gpu, step, spec("cal_x", rows, cols, layout))?;
        let y = Matrix::new(gpu, step, spec("cal_y", rows, cols, layout))?;
        let (xv, yv) = (x.layout.view(), y.layout.view());
        let op =
            SoftmaxOp::new(gpu, &xv, &yv, Softmax::new(1.0, Mask::None)).map_err(op_err(step))?;
        let (xa, ya) = (x.arg(step, &xv)?, y.arg(step, &yv)?);
        let t = time_batch(gpu, step, &|b| {
            op.forward(b, &xa, &ya).map_err(op_err(step))
        })?;
        timed.push((x.class(step, 1)?, t));
        tick("softmaxes");
    }
    let base = timed
        .iter()
        .find(|(c, _)| *c == Class::Contiguous)
        .map(|x| x.1)
        .ok_or_else(|| CalibrationError::Measure {
            step: step.to_owned(),
            detail: "no softmax ran over contiguous rows".into(),
        })?;
    let ratios: Vec<(Class, f64)> = timed.iter().map(|&(class, t)| (class, t / base)).collect();
    let reduce = class_factors(step, &ratios)?;

    // Matrix-product rates.
    let step = "matmul";
    let s = MATMUL;
    let c = Matrix::new(
        gpu,
        step,
        spec("cal_c", s, s, Layout::Order(Order::RowMajor)),
    )?;
    let mut rates: Vec<(Class, Class, f64, usize)> = Vec::new();
    for a_layout in [
        Layout::Order(Order::RowMajor),
        Layout::Order(Order::ColMajor),
    ] {
        let a = Matrix::new(gpu, step, spec("cal_a", s, s, a_layout))?;
        for b_layout in [
            Layout::Order(Order::RowMajor),
            Layout::Order(Order::ColMajor),
            Layout::RTile {
                tile: 4,
                inner: "cols",
            },
            Layout::RTile {
                tile: 8,
                inner: "cols",
            },
        ] {
            let b = Matrix::new(gpu, step, spec("cal_b", s, s, b_layout))?;
            let (av, bv, cv) = (a.layout.view(), b.layout.view(), c.layout.view());
            let op = MatmulOp::new(gpu, &av, &bv, &cv).map_err(op_err(step))?;
            let (ga, gb, gc) = (a.arg(step, &av)?, b.arg(step, &bv)?, c.arg(step, &cv)?);
            let t = time_batch(gpu, step, &|batch| {
                op.record(batch, &ga, &gb, &gc, Scale::OVERWRITE)
                    .map_err(op_err(step))
            })?;
            // A is read along its columns (k), B along its rows (k).
            let key = (a.class(step, 1)?, b.class(step, 0)?);
            let rate = 2.0 * f64::from(s).powi(3) / t;
            match rates.iter_mut().find(|r| (r.0, r.1) == key) {
                Some(r) => {
                    r.2 += rate;
                    r.3 += 1;
                }
                None => rates.push((key.0, key.1, rate, 1)),
            }
            tick("products");
        }
    }
    let mut factors = Factors {
        bandwidth,
        access,
        reduce,
        matmul: MatmulRates {
            rates: rates
                .into_iter()
                .map(|(a, b, sum, k)| (a, b, sum / k as f64))
                .collect(),
        },
        // Measured with the kernels' steps, below.
        dispatch: 0.0,
        kernels: KernelFactors::default(),
    };
    (factors.kernels, factors.dispatch) = measure_kernels(gpu, &factors, at, tick)?;
    bar.finish_and_clear();
    factors
        .check()
        .map_err(|detail| CalibrationError::Measure {
            step: "the measured factors".into(),
            detail,
        })?;
    Ok(factors)
}

/// The factors of the measured `(class, ratio)` pairs; each of the three non-contiguous
/// classes must have been measured.
fn class_factors(step: &str, measured: &[(Class, f64)]) -> Result<ClassFactors, CalibrationError> {
    let of = |class: Class| {
        measured
            .iter()
            .find(|m| m.0 == class)
            .map(|m| m.1)
            .ok_or_else(|| CalibrationError::Measure {
                step: step.to_owned(),
                detail: format!("no measurement had the class {class}"),
            })
    };
    Ok(ClassFactors {
        tiled4: of(Class::Tiled4)?,
        tiled8: of(Class::Tiled8)?,
        strided: of(Class::Strided)?,
    })
}
