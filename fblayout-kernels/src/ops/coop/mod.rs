//! Matrix products on cooperative matrices (tensor cores): f16 operands, f32 sums.
//!
//! [`CoopMatmulOp`] computes `C[b.., m, n] = Σ_k A[b.., m, k] · B[b.., k, n]` like
//! [`MatmulOp`](super::MatmulOp) (views of rank 2 plus up to three batch axes, every
//! transposition a view), on the `coop_mat16x16` fragments of WGSL's
//! `wgpu_cooperative_matrix` extension: A and B are `f16`, the fragments accumulate in `f32`
//! (or `f16` where that is the only accumulator the adapter offers, or when a configuration
//! asks for it), C is `f32` or `f16`. Only devices with `EXPERIMENTAL_COOPERATIVE_MATRIX` run
//! it (see [`features`](crate::runtime::features)); elsewhere [`CoopMatmulOp::new`] is an
//! [`OpError::Unsupported`] saying so, and the f32 `MatmulOp` is the path.
//!
//! - `shader`: the generated WGSL. Blocks of A and B are staged through workgroup memory in
//!   the order each operand is contiguous in, and the fragment loads (`coopLoad` or
//!   `coopLoadT`) follow that order, so a transposed view costs nothing.
//! - [`config`]: [`CoopConfig`], the tile configurations (block, fragments per subgroup,
//!   k-step, stages, accumulator, split of the reduction) and the ones a device can build or
//!   a problem gets.
//! - Split-k (a [`CoopConfig`] with `split_k > 1`, for products of few blocks of C and a long
//!   `k`): the GEMM kernel writes each part's f32 sums into a workspace (scratch of the
//!   batch, [`Batch::scratch`]; at most [`CoopMatmulOp::scratch`] of it), and the f32 GEMM's
//!   reduction kernel adds the parts in order and writes C through C's view
//!   (see [`config`]).
//! - Bias ([`CoopMatmulOp::new_biased`]): `C = A·B + bias`, `bias[n]` in every row, the
//!   accumulators starting as the bias (so fragments still go straight into C where they
//!   can), and under split-k added once by the reduction; the operand is declared and checked
//!   where the f32 GEMM's is.
//! - D ([`CoopMatmulOp::new_added`]): `C = A·B + D`, D of C's extents added to each element
//!   as it goes from the subgroup's scratch into C (so no fragment goes straight into C), and
//!   under split-k by the reduction. It is tuned as the same product without D.
//! - `tune`: the autotune's results, saved per adapter beside the pipeline cache.
//!
//! ```no_run
//! use fblayout_core::layout::{ElemType, LayoutSpec};
//! use fblayout_kernels::ops::coop::CoopMatmulOp;
//! use fblayout_kernels::runtime::{Gpu, GpuBuffer};
//! use fblayout_kernels::tensor::GpuArg;
//!
//! let gpu = Gpu::new()?;
//! let x = LayoutSpec::new("x").elem(ElemType::F16).dyn_axis("rows").axis("k", 384).build()?;
//! let w = LayoutSpec::new("w").elem(ElemType::F16).axis("k", 384).axis("cols", 1536).build()?;
//! let y = LayoutSpec::new("y").dyn_axis("rows").axis("cols", 1536).build()?;
//! let (x, w, y) = (x.view(), w.view(), y.view());
//! let op = CoopMatmulOp::new(&gpu, &x, &w, &y)?;
//! let extents = [("rows", 4096)];
//! let xb = GpuBuffer::zeroed::<half::f16>(&gpu, 4096 * 384)?;
//! let wb = GpuBuffer::zeroed::<half::f16>(&gpu, 384 * 1536)?;
//! let yb = GpuBuffer::scratch::<f32>(&gpu, 4096 * 1536)?;
//! let (xa, wa) = (GpuArg::new(&xb, &x, &extents)?, GpuArg::new(&wb, &w, &[])?);
//! let ya = GpuArg::new(&yb, &y, &extents)?;
//! op.tune(&gpu, &xa, &wa, &ya)?; // measures the candidates once per adapter and problem
//! let mut batch = gpu.batch();
//! op.record(&mut batch, &xa, &wa, &ya)?;
//! batch.submit()?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod ahead;
pub mod config;
mod shader;
pub(crate) mod sources;
mod tune;

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use fblayout_core::kernel::{KernelSource, Operand, Scalar};
use fblayout_core::layout::{ElemType, Order as MemoryOrder, View};
use fblayout_core::shader::WgslFeatures;

pub use self::ahead::compile_ahead;
pub use self::config::{CoopConfig, ParseConfigError};
use self::shader::{Added, CoopSpec, Direct, Output, Staging, Width};
pub use self::shader::{Lanes, Order};
use self::tune::TuneTable;
use super::compiled::Compiled;
use super::error::OpError;
use super::matmul::{
    Addend, Bias, DEFAULT_COMPUTE_UNITS, Extents, ExtraArg, GemmShape, Merge, Reduction, Scale,
    SplitRun, check_grid, check_static_extents, check_writable, split_parts,
};
use crate::runtime::{Batch, CacheLoad, CoopScalar, DiskCache, Gpu, Scratch, threads};
use crate::tensor::GpuArg;

const OP: &str = "coop matmul";

/// How long [`CoopMatmulOp::measure_configs`] keeps the GPU busy before it times the
/// configurations.
pub const TUNE_WARMUP: Duration = Duration::from_millis(300);

/// The warm-up of [`CoopMatmulOp::measure_configs`] when another measurement ended less than
/// [`STILL_WARM`] before (the autotune of a step's products, one after another, whose
/// pipelines were compiled in parallel beforehand).
pub const TUNE_WARMUP_AGAIN: Duration = Duration::from_millis(30);

/// How recently a measurement must have ended for [`TUNE_WARMUP_AGAIN`] to do: a discrete GPU
/// takes some hundreds of milliseconds idle to clock down.
pub const STILL_WARM: Duration = Duration::from_millis(100);

/// About how long one configuration's screening batch takes in
/// [`CoopMatmulOp::measure_configs`] (one product where a product takes longer).
pub const SCREEN_TIME: Duration = Duration::from_millis(10);

/// How many of the screened configurations [`CoopMatmulOp::measure_configs`] times again.
pub const FINALISTS: usize = 3;

/// The WGSL features of every cooperative-matrix kernel.
pub const FEATURES: WgslFeatures = WgslFeatures {
    f16: true,
    subgroups: false,
    cooperative_matrix: true,
};

/// The WGSL features of split-k's reduction kernel (f16 for an f16 C).
pub const REDUCE_FEATURES: WgslFeatures = WgslFeatures {
    f16: true,
    subgroups: false,
    cooperative_matrix: false,
};

/// The operands of a product, built from views and checked (no device needed).
#[derive(Debug, Clone)]
struct Operands {
    a: Operand,
    b: Operand,
    c: Operand,
    /// Split-k's partial sums, written by the GEMM kernel.
    partial: Operand,
    /// Split-k's second kernel, which writes C.
    reduction: Reduction,
    batch_axes: usize,
    a_staging: Staging,
    b_staging: Staging,
    /// How interior blocks may store straight into C (when the accumulator is C's type).
    c_direct: Option<Direct>,
    /// C written four neighbours along `n` at a time, where its layout grants that (for
    /// kernels that store no fragment straight into C).
    c_wide: Option<Operand>,
    c_elem: ElemType,
}

fn unsupported(role: &'static str, view: &View, why: impl Into<String>) -> OpError {
    OpError::Unsupported {
        op: OP,
        role,
        view: view.name().to_owned(),
        why: why.into(),
    }
}

/// How operand `op` of A (`role == "a"`, outer axis `m`) or B (outer `n`) is staged: along the
/// axis the kernel surface grants four-wide reads on (the outer axis first), else one element
/// at a time in the operand's natural order (`[m][k]` for A, `[k][n]` for B).
fn staging(op: Operand, role: &str, outer: usize, k: usize) -> (Operand, Staging) {
    for (axis, order) in [(outer, Order::KRows), (k, Order::OuterRows)] {
        let v = op.clone().vectorized(axis);
        if v.vector_axis().is_some() {
            return (
                v,
                Staging {
                    order,
                    width: Width::Four,
                    stepped: false,
                },
            );
        }
    }
    let order = if role == "a" {
        Order::OuterRows
    } else {
        Order::KRows
    };
    (
        op,
        Staging {
            order,
            width: Width::One,
            stepped: false,
        },
    )
}

/// Whether fragments can be stored straight into C read through `c` (batch axes `nb`, then
/// `m`, `n`): C is its tensor as declared, row- or column-major (so its offsets are affine in
/// every coordinate), and 16 neighbours along the contiguous one of `m`, `n` are 16 consecutive
/// elements from a multiple of 16 (so every fragment's rows or columns start aligned).
fn direct_store(c: &View, nb: usize) -> Option<Direct> {
    if !c.is_identity() {
        return None;
    }
    let f = c.simplified_fn();
    match c.layout().order() {
        MemoryOrder::RowMajor if f.contiguous_run(nb + 1, 16) => Some(Direct::Rows),
        MemoryOrder::ColMajor if f.contiguous_run(nb, 16) => Some(Direct::Cols),
        _ => None,
    }
}

impl Operands {
    fn new(
        a: &View,
        b: &View,
        bias: Option<&View>,
        d: Option<(&View, Merge)>,
        c: &View,
    ) -> Result<Self, OpError> {
        // The ranks and every static extent must already fit; run-time ones are checked per
        // call.
        let nb = check_static_extents(OP, a, b, c)?;
        for (role, v) in [("a", a), ("b", b)] {
            if v.layout().elem() != ElemType::F16 {
                return Err(unsupported(
                    role,
                    v,
                    format!(
                        "cooperative-matrix operands are f16, not {} (convert it, or use the f32 MatmulOp)",
                        v.layout().elem()
                    ),
                ));
            }
        }
        if !matches!(c.layout().elem(), ElemType::F32 | ElemType::F16) {
            return Err(unsupported(
                "c",
                c,
                format!("the product is f32 or f16, not {}", c.layout().elem()),
            ));
        }
        // f16 is part of the feature set every cooperative kernel is built with.
        let bias = bias.map(|v| Bias::new(OP, v, c, true)).transpose()?;
        check_writable(c)?;
        let (a, a_staging) = staging(Operand::read("a", a)?, "a", nb, nb + 1);
        let (b, b_staging) = staging(Operand::read("b", b)?, "b", nb + 1, nb);
        let mut reduction = Reduction::new(c, nb, bias)?;
        if let Some((d, merge)) = d {
            reduction = reduction.with_addend(OP, d, true, merge)?;
        }
        Ok(Self {
            a,
            b,
            c: Operand::write("c", c)?,
            c_wide: Some(Operand::write("c", c)?.vectorized(nb + 1))
                .filter(|op| op.vector_axis().is_some()),
            partial: Operand::write("partial", reduction.partial_view())?,
            reduction,
            batch_axes: nb,
            a_staging,
            b_staging,
            c_direct: direct_store(c, nb),
            c_elem: c.layout().elem(),
        })
    }

    fn orders(&self) -> (Order, Order) {
        (self.a_staging.order, self.b_staging.order)
    }

    /// The bias of a biased product (its reduction's: one declaration for both kernels).
    fn bias(&self) -> Option<&Bias> {
        self.reduction.bias()
    }

    /// D of an added product (its reduction's, likewise).
    fn addend(&self) -> Option<&Addend> {
        self.reduction.extra().addend()
    }

    /// The GEMM kernel of `config`: into C, or with `split_k > 1` into split-k's partial
    /// sums.
    fn source(&self, config: CoopConfig, lanes: Lanes) -> KernelSource {
        let acc_elem = match config.acc {
            CoopScalar::F16 => ElemType::F16,
            _ => ElemType::F32,
        };
        let output = if config.split_k > 1 {
            Output::Partial
        } else {
            // D is added as elements leave the scratch: no fragment goes straight into C.
            let straight = acc_elem == self.c_elem && self.addend().is_none();
            Output::C(self.c_direct.filter(|_| straight))
        };
        // A vectorised C is an array of vec4s, which no fragment can be stored straight into.
        let c = match (output, &self.c_wide) {
            (Output::C(None), Some(wide)) => wide,
            _ => &self.c,
        };
        let c_width = if c.vector_axis().is_some() {
            Width::Four
        } else {
            Width::One
        };
        let nb = self.batch_axes;
        let added = match (output, self.addend()) {
            (Output::C(_), Some(d)) if c_width == Width::Four && d.wide_along(nb + 1) => {
                Added::Four(d.merge())
            }
            (Output::C(_), Some(d)) => Added::One(d.merge()),
            _ => Added::No,
        };
        let stepped = |op: &Operand, k: usize| {
            op.view()
                .index_fn()
                .simplified()
                .steps_evenly(k, u64::from(config.k_step))
        };
        let spec = CoopSpec {
            config,
            lanes,
            batch_axes: nb,
            a: Staging {
                stepped: stepped(&self.a, nb + 1),
                ..self.a_staging
            },
            b: Staging {
                stepped: stepped(&self.b, nb),
                ..self.b_staging
            },
            output,
            c_width,
            bias: self.bias().is_some(),
            added,
        };
        let source = KernelSource::new(OP)
            .operand(self.a.clone())
            .operand(self.b.clone());
        let source = match (output, self.reduction.extra().operand()) {
            (Output::Partial, _) => source
                .operand(self.partial.clone())
                .scalar("splits", Scalar::U32)
                .scalar("split_len", Scalar::U32),
            (Output::C(_), None) => source.operand(c.clone()),
            (Output::C(_), Some(extra)) => source.operand(c.clone()).operand(extra.clone()),
        };
        let source = match self.addend().and_then(|d| d.merge().helpers()) {
            Some(helpers) if output != Output::Partial => source.body(helpers),
            _ => source,
        };
        let features = WgslFeatures {
            subgroups: lanes.subgroup_barrier,
            ..FEATURES
        };
        source.body(shader::gemm(&spec)).features(features)
    }

    /// Split-k's reduction kernel.
    fn reduce_source(&self) -> KernelSource {
        self.reduction.source().features(REDUCE_FEATURES)
    }
}

/// Which kernel of the op: the GEMM of a configuration (unsplit, into C), the GEMM of a
/// split-k configuration (into the partial sums; one kernel serves every split, keyed by the
/// configuration with `split_k = 2`), or split-k's reduction.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Kernel {
    Gemm(CoopConfig),
    Reduce,
}

impl Kernel {
    /// The kernel that runs `config`'s GEMM with the reduction in `split` parts.
    fn gemm(config: CoopConfig, split: u32) -> Self {
        Kernel::Gemm(config.with_split(split.min(2)))
    }
}

/// A batched GEMM on cooperative matrices built for the views of A, B and C (see the module
/// docs).
///
/// Kernels are built per configuration on first use and kept. [`record`](Self::record) uses
/// the configuration the autotune chose for the problem ([`tune`](Self::tune)), or the first
/// of the problem's candidates ([`candidates_for`](Self::candidates_for)) before one ran.
#[derive(Debug)]
pub struct CoopMatmulOp {
    operands: Operands,
    subgroup_size: u32,
    /// Whether the device has subgroup operations, so that a subgroup waits for its own lanes
    /// around its scratch with `subgroupBarrier()` ([`Lanes`]).
    subgroup_barrier: bool,
    acc: CoopScalar,
    candidates: Vec<CoopConfig>,
    limits: wgpu::Limits,
    units: u32,
    kernels: Mutex<HashMap<Kernel, Arc<Compiled>>>,
    tuned: Mutex<TuneTable>,
    tune_file: Option<DiskCache>,
    tune_load: CacheLoad,
}

impl CoopMatmulOp {
    /// The GEMM reading A and B (f16) through `a` and `b` and writing C (f32 or f16) through
    /// `c`, on a device with cooperative matrices.
    ///
    /// Checks the views first (ranks, static extents, element types, C not a broadcast), so a
    /// mismatch is an error on any device. Then fails with [`OpError::Unsupported`] where the
    /// device lacks the feature or a 16×16×16 f16 fragment, where the adapter's subgroup size is not fixed, or for operands it does
    /// not take; builds the kernel of the first candidate, so a problem shows here. Loads the
    /// adapter's autotune results from beside the pipeline cache.
    pub fn new(gpu: &Gpu, a: &View, b: &View, c: &View) -> Result<Self, OpError> {
        Self::new_with(gpu, a, b, None, None, c)
    }

    /// The biased GEMM `C = A·B + bias` (`bias[n]` added to every row; C overwritten): like
    /// [`new`](Self::new), with `bias` a rank-1 view `[n]` of `f32` or `f16` whose extent is
    /// C's last (a shape error otherwise). Record it with
    /// [`record_biased`](Self::record_biased); the autotune ([`tune`](Self::tune) and the
    /// measurements) times it with a zero bias of its own.
    pub fn new_biased(
        gpu: &Gpu,
        a: &View,
        b: &View,
        bias: &View,
        c: &View,
    ) -> Result<Self, OpError> {
        Self::new_with(gpu, a, b, Some(bias), None, c)
    }

    /// The added GEMM `C = A·B + D` (C overwritten; D a view of C's extents, `f32` or `f16`,
    /// any layout; a shape error otherwise): like [`new`](Self::new), D added to each element
    /// as it is written. Record it with [`record_added`](Self::record_added); the autotune
    /// ([`tune`](Self::tune)) chooses its tiles as the same product's without D, and shares
    /// them with it.
    pub fn new_added(gpu: &Gpu, a: &View, b: &View, d: &View, c: &View) -> Result<Self, OpError> {
        Self::new_merged(gpu, a, b, d, c, Merge::Add)
    }

    /// Like [`new_added`](Self::new_added), D joining the sum as `merge` says.
    pub fn new_merged(
        gpu: &Gpu,
        a: &View,
        b: &View,
        d: &View,
        c: &View,
        merge: Merge,
    ) -> Result<Self, OpError> {
        Self::new_with(gpu, a, b, None, Some((d, merge)), c)
    }

    fn new_with(
        gpu: &Gpu,
        a: &View,
        b: &View,
        bias: Option<&View>,
        d: Option<(&View, Merge)>,
        c: &View,
    ) -> Result<Self, OpError> {
        // The views first: a mismatch is the same error with or without the feature.
        let operands = Operands::new(a, b, bias, d, c)?;
        let features = gpu.features();
        let Some(fragment) = features.coop_fragment else {
            let why = if features.cooperative_matrix {
                "the adapter offers no 16×16×16 fragment with f16 inputs".to_owned()
            } else {
                format!(
                    "the device has no EXPERIMENTAL_COOPERATIVE_MATRIX with SHADER_F16 ({} on {}); \
                     use the f32 MatmulOp",
                    features,
                    gpu.info()
                )
            };
            return Err(unsupported("a", a, why));
        };
        let (lo, hi) = features.subgroup_sizes;
        if lo != hi || lo == 0 {
            return Err(unsupported(
                "a",
                a,
                format!(
                    "the adapter's subgroup size varies ({lo}–{hi} lanes); fragments are assigned per fixed-size subgroup"
                ),
            ));
        }
        let candidates = CoopConfig::candidates(gpu.limits(), lo, operands.orders(), fragment.acc);
        if candidates.is_empty() {
            return Err(unsupported(
                "a",
                a,
                "the device's limits admit none of the tile configurations",
            ));
        }
        let tune_file = gpu.sibling_cache(tune::STEM);
        let (table, tune_load) = match &tune_file {
            Some(disk) => TuneTable::load(disk),
            None => (TuneTable::default(), CacheLoad::Off),
        };
        let op = Self {
            operands,
            subgroup_size: lo,
            subgroup_barrier: features.subgroup_barrier,
            acc: fragment.acc,
            candidates,
            limits: gpu.limits().clone(),
            units: DEFAULT_COMPUTE_UNITS,
            kernels: Mutex::default(),
            tuned: Mutex::new(table),
            tune_file,
            tune_load,
        };
        op.kernel(gpu, Kernel::Gemm(op.candidates[0]))?;
        Ok(op)
    }

    /// Whether the op adds a bias (built by [`new_biased`](Self::new_biased)).
    pub fn has_bias(&self) -> bool {
        self.operands.bias().is_some()
    }

    /// Whether the op adds D (built by [`new_added`](Self::new_added)).
    pub fn has_addend(&self) -> bool {
        self.operands.addend().is_some()
    }

    /// The same product without D (what an added one is tuned as).
    fn plain(&self, gpu: &Gpu) -> Result<Self, OpError> {
        let o = &self.operands;
        Self::new_with(gpu, o.a.view(), o.b.view(), None, None, o.c.view())
    }

    /// The same op choosing split-k candidates for a device of `units` compute units
    /// (multiprocessors; default [`DEFAULT_COMPUTE_UNITS`], an H200's: wgpu does not say).
    pub fn compute_units(mut self, units: u32) -> Self {
        self.units = units.max(1);
        self
    }

    /// The unsplit configurations this op can run, the default first.
    pub fn candidates(&self) -> &[CoopConfig] {
        &self.candidates
    }

    /// The configurations the autotune measures for extents `e` (see
    /// [`CoopConfig::split_candidates`]): split-k ones for products of few blocks and a long
    /// `k`, else [`candidates`](Self::candidates).
    pub fn candidates_for(&self, e: &Extents) -> Vec<CoopConfig> {
        let split = e.gemm().map_or_else(Vec::new, |shape| {
            CoopConfig::split_candidates(
                &self.limits,
                self.subgroup_size,
                self.orders(),
                self.acc,
                shape,
                self.units,
            )
        });
        if split.is_empty() {
            self.candidates.clone()
        } else {
            split
        }
    }

    /// The subgroups the kernels are generated for.
    pub fn lanes(&self) -> Lanes {
        Lanes::new(self.subgroup_size).subgroup_barrier(self.subgroup_barrier)
    }

    /// The accumulator type of the adapter's fragment.
    pub fn accumulator(&self) -> CoopScalar {
        self.acc
    }

    /// How A and B are staged (see the module docs of `shader`).
    pub fn orders(&self) -> (Order, Order) {
        self.operands.orders()
    }

    /// What happened to the autotune file when the op was built.
    pub fn tune_load(&self) -> &CacheLoad {
        &self.tune_load
    }

    /// The WGSL of the GEMM kernel of `config` (with `split_k > 1`, the one writing the
    /// partial sums).
    pub fn source(&self, gpu: &Gpu, config: CoopConfig) -> Result<String, OpError> {
        let kernel = self.kernel(gpu, Kernel::gemm(config, config.split_k))?;
        Ok(kernel.module().source().to_owned())
    }

    /// The WGSL of split-k's reduction kernel.
    pub fn reduce_source(&self, gpu: &Gpu) -> Result<String, OpError> {
        Ok(self
            .kernel(gpu, Kernel::Reduce)?
            .module()
            .source()
            .to_owned())
    }

    /// The kernel `which`, built on first use.
    ///
    /// The lock is not held while the shader is generated and validated, so that
    /// [`prepare`](Self::prepare) can build several at once.
    fn kernel(&self, gpu: &Gpu, which: Kernel) -> Result<Arc<Compiled>, OpError> {
        let lock = || self.kernels.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(k) = lock().get(&which) {
            return Ok(Arc::clone(k));
        }
        let compiled = match which {
            Kernel::Gemm(config) => {
                if let Some(why) = config.problem(gpu.limits(), self.subgroup_size, self.orders()) {
                    return Err(OpError::shape(OP, why));
                }
                let module = self.operands.source(config, self.lanes()).build()?;
                Compiled::from_module(OP, module)
            }
            Kernel::Reduce => {
                Compiled::from_module(Reduction::OP, self.operands.reduce_source().build()?)
            }
        };
        Ok(Arc::clone(
            lock().entry(which).or_insert_with(|| Arc::new(compiled)),
        ))
    }

    /// Builds the GEMM kernels of `configs` for a product of `shape`, on as many threads as
    /// the host has cores.
    fn candidate_kernels(
        &self,
        gpu: &Gpu,
        configs: &[CoopConfig],
        shape: GemmShape,
    ) -> Result<Vec<Arc<Compiled>>, OpError> {
        let mut kinds: Vec<Kernel> = Vec::with_capacity(configs.len());
        for &config in configs {
            let kind = Kernel::gemm(
                config,
                split_parts(shape.k, config.split_k, config.k_step).0,
            );
            if !kinds.contains(&kind) {
                kinds.push(kind);
            }
        }
        threads::try_map(&kinds, |&kind| self.kernel(gpu, kind))
    }

    /// Builds the GEMM kernels of `configs` for a product of `shape` and compiles their
    /// pipelines, on as many threads as the host has cores: the autotune then measures
    /// pipelines that are all ready, rather than waiting for the driver to compile one
    /// candidate after another.
    fn prepare(&self, gpu: &Gpu, configs: &[CoopConfig], shape: GemmShape) -> Result<(), OpError> {
        let built = self.candidate_kernels(gpu, configs, shape)?;
        let entries: Vec<_> = built
            .iter()
            .map(|k| (k.module().module(), shader::ENTRY))
            .collect();
        gpu.prepare_pipelines(&entries)?;
        Ok(())
    }

    /// The configurations of `configs` the device can build.
    fn buildable(&self, gpu: &Gpu, configs: &[CoopConfig]) -> Vec<CoopConfig> {
        configs
            .iter()
            .copied()
            .filter(|config| {
                config
                    .problem(gpu.limits(), self.subgroup_size, self.orders())
                    .is_none()
            })
            .collect()
    }

    /// The checked extents of a call (each argument read through the view the op was built
    /// for).
    pub fn extents(
        &self,
        gpu: &Gpu,
        a: &GpuArg<'_>,
        b: &GpuArg<'_>,
        c: &GpuArg<'_>,
    ) -> Result<Extents, OpError> {
        Extents::of_call(
            &*self.kernel(gpu, Kernel::Gemm(self.candidates[0]))?,
            a,
            b,
            c,
        )
    }

    /// The autotune's key of a problem (a biased product's apart: its kernels differ; an added
    /// product's is its plain one's, see [`new_added`](Self::new_added)).
    fn problem(&self, e: &Extents) -> String {
        let (oa, ob) = self.orders();
        format!(
            "{oa:?},{ob:?}|{}|b{} m{} n{} k{}{}",
            self.acc.wgsl(),
            e.products(),
            e.m,
            e.n,
            e.k,
            if self.has_bias() { "|bias" } else { "" }
        )
    }

    /// The configuration [`record`](Self::record) uses for extents `e`: the autotune's
    /// choice, else the first of the problem's candidates.
    pub fn config_for(&self, e: &Extents) -> CoopConfig {
        let tuned = {
            let table = self.tuned.lock().unwrap_or_else(PoisonError::into_inner);
            table.entries.get(&self.problem(e)).copied()
        };
        let candidates = self.candidates_for(e);
        tuned
            .filter(|c| candidates.contains(c))
            .unwrap_or(candidates[0])
    }

    /// Records `C = A·B` with the configuration chosen for its problem (an error for a biased
    /// op: see [`record_biased`](Self::record_biased)).
    pub fn record(
        &self,
        batch: &mut Batch<'_>,
        a: &GpuArg<'_>,
        b: &GpuArg<'_>,
        c: &GpuArg<'_>,
    ) -> Result<(), OpError> {
        self.record_chosen(batch, a, b, None, c)
    }

    /// Records `C = A·B + bias` with the configuration chosen for its problem (an error for
    /// an op built without a bias).
    pub fn record_biased(
        &self,
        batch: &mut Batch<'_>,
        a: &GpuArg<'_>,
        b: &GpuArg<'_>,
        bias: &GpuArg<'_>,
        c: &GpuArg<'_>,
    ) -> Result<(), OpError> {
        self.record_chosen(batch, a, b, Some((Bias::ROLE, bias)), c)
    }

    /// Records `C = A·B + D` with the configuration chosen for its problem (an error for an op
    /// built without D).
    pub fn record_added(
        &self,
        batch: &mut Batch<'_>,
        a: &GpuArg<'_>,
        b: &GpuArg<'_>,
        d: &GpuArg<'_>,
        c: &GpuArg<'_>,
    ) -> Result<(), OpError> {
        self.record_chosen(batch, a, b, Some((Addend::ROLE, d)), c)
    }

    /// Records `C = A·B + D` with `config` (see [`record_config`](Self::record_config)).
    pub fn record_config_added(
        &self,
        batch: &mut Batch<'_>,
        config: CoopConfig,
        a: &GpuArg<'_>,
        b: &GpuArg<'_>,
        d: &GpuArg<'_>,
        c: &GpuArg<'_>,
    ) -> Result<(), OpError> {
        self.record_config_with(batch, config, a, b, Some((Addend::ROLE, d)), c)
    }

    /// Records `C = A·B + bias` with `config` (see [`record_config`](Self::record_config)).
    pub fn record_config_biased(
        &self,
        batch: &mut Batch<'_>,
        config: CoopConfig,
        a: &GpuArg<'_>,
        b: &GpuArg<'_>,
        bias: &GpuArg<'_>,
        c: &GpuArg<'_>,
    ) -> Result<(), OpError> {
        self.record_config_with(batch, config, a, b, Some((Bias::ROLE, bias)), c)
    }

    /// Records `C = A·B` with `config`. With `config.split_k > 1` the reduction is split into
    /// that many parts (fewer where `k` has fewer k-steps), each of whole k-steps: the GEMM
    /// kernel writes their sums into a workspace (scratch of `batch`), padded to whole
    /// blocks, and the reduction kernel adds them in order into C. An error for a biased op
    /// (see [`record_config_biased`](Self::record_config_biased)).
    pub fn record_config(
        &self,
        batch: &mut Batch<'_>,
        config: CoopConfig,
        a: &GpuArg<'_>,
        b: &GpuArg<'_>,
        c: &GpuArg<'_>,
    ) -> Result<(), OpError> {
        self.record_config_with(batch, config, a, b, None, c)
    }

    /// Records the product, with its extra argument where it has one, under the configuration
    /// chosen for its problem ([`config_for`](Self::config_for)).
    fn record_chosen(
        &self,
        batch: &mut Batch<'_>,
        a: &GpuArg<'_>,
        b: &GpuArg<'_>,
        extra: Option<ExtraArg<'_, '_>>,
        c: &GpuArg<'_>,
    ) -> Result<(), OpError> {
        let e = self.extents(batch.gpu(), a, b, c)?;
        let config = self.config_for(&e);
        self.record_config_with(batch, config, a, b, extra, c)
    }

    fn record_config_with(
        &self,
        batch: &mut Batch<'_>,
        config: CoopConfig,
        a: &GpuArg<'_>,
        b: &GpuArg<'_>,
        extra: Option<ExtraArg<'_, '_>>,
        c: &GpuArg<'_>,
    ) -> Result<(), OpError> {
        let gpu = batch.gpu();
        let first = self.kernel(gpu, Kernel::Gemm(self.candidates[0]))?;
        let e = Extents::of_call(&first, a, b, c)?;
        let reduction = &self.operands.reduction;
        reduction.check_extra(OP, &first, extra, &c.dims())?;
        let too_big = || OpError::shape(OP, format!("{e:?} exceeds the u32 index space"));
        let shape = e.gemm().ok_or_else(too_big)?;
        if shape.batch == 0 || shape.m == 0 || shape.n == 0 {
            return Ok(());
        }
        let (split, split_len) = split_parts(shape.k, config.split_k, config.k_step);
        let (blocks_n, blocks_m) = (
            shape.n.div_ceil(config.block_n),
            shape.m.div_ceil(config.block_m),
        );
        let grid = [blocks_n, blocks_m, shape.batch.saturating_mul(split)];
        check_grid(OP, gpu, grid, format!("{e:?} under {config}"))?;
        let kernel = self.kernel(gpu, Kernel::gemm(config, split))?;
        if split == 1 {
            let mut args = vec![("a", a), ("b", b), ("c", c)];
            args.extend(extra);
            return kernel.record(batch, shader::ENTRY, &args, &[], grid);
        }
        let reduce = self.kernel(gpu, Kernel::Reduce)?;
        let (rows, cols) = workspace_extents(config, shape).ok_or_else(too_big)?;
        let run = SplitRun {
            parts: split,
            len: split_len,
            rows,
            cols,
            grid,
        };
        reduction.record_split(
            batch,
            [&kernel, &reduce],
            shader::ENTRY,
            [a, b, c],
            extra.map(|(_, e)| e),
            Scale::OVERWRITE,
            shape,
            run,
        )
    }

    /// The most scratch the op takes for a product of `shape` on any device (the partial sums
    /// of split-k), choosing for [`DEFAULT_COMPUTE_UNITS`] (as [`new`](Self::new) does): the
    /// largest workspace of the configurations [`candidates_for`](Self::candidates_for) can
    /// list for it ([`CoopConfig::split_fits`]), so also of the one its autotune keeps. A
    /// configuration given to [`record_config`](Self::record_config) may take more.
    pub fn scratch(shape: GemmShape) -> Result<Scratch, OpError> {
        if shape.batch == 0 || shape.m == 0 || shape.n == 0 {
            return Ok(Scratch::none());
        }
        let each = CoopConfig::split_fits(shape, DEFAULT_COMPUTE_UNITS)
            .into_iter()
            .filter_map(|config| {
                let (split, _) = split_parts(shape.k, config.split_k, config.k_step);
                let (rows, cols) = workspace_extents(config, shape)?;
                (split > 1).then(|| Reduction::workspace_scratch(shape.batch, split, rows, cols))
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Scratch::covering(&each))
    }

    /// Measures every candidate of the problem ([`candidates_for`](Self::candidates_for)) on
    /// these arguments (C is overwritten) and keeps the fastest
    /// for their problem, in memory and in the autotune file; returns it. A problem tuned
    /// before (in this process or an earlier one on this adapter) is not measured again.
    ///
    /// Each candidate is compiled, run once and screened briefly, and the fastest few timed
    /// again (wall clock around the submission and the wait); see
    /// [`measure_configs`](Self::measure_configs).
    pub fn tune(
        &self,
        gpu: &Gpu,
        a: &GpuArg<'_>,
        b: &GpuArg<'_>,
        c: &GpuArg<'_>,
    ) -> Result<CoopConfig, OpError> {
        let e = self.extents(gpu, a, b, c)?;
        self.tune_among(gpu, &self.candidates_for(&e), a, b, c)
    }

    /// Like [`tune`](Self::tune), measuring only those of `configs` that are candidates of the
    /// problem (a shorter search, where measuring all of them would take too long); a problem
    /// tuned before keeps its choice. Inside [`compile_ahead`]'s listing pass it measures
    /// nothing: it lists the kernels it would measure and returns the configuration
    /// [`record`](Self::record) would use now.
    pub fn tune_among(
        &self,
        gpu: &Gpu,
        configs: &[CoopConfig],
        a: &GpuArg<'_>,
        b: &GpuArg<'_>,
        c: &GpuArg<'_>,
    ) -> Result<CoopConfig, OpError> {
        let e = self.extents(gpu, a, b, c)?;
        let problem = self.problem(&e);
        if self.has_addend() {
            // Tuned as its plain product, whose choice it shares.
            let best = self.plain(gpu)?.tune_among(gpu, configs, a, b, c)?;
            let mut table = self.tuned.lock().unwrap_or_else(PoisonError::into_inner);
            table.entries.insert(problem, best);
            return Ok(best);
        }
        let candidates = self.candidates_for(&e);
        {
            let mut table = self.tuned.lock().unwrap_or_else(PoisonError::into_inner);
            let known = |table: &TuneTable| {
                table
                    .entries
                    .get(&problem)
                    .copied()
                    .filter(|c| candidates.contains(c))
            };
            if let Some(c) = known(&table) {
                return Ok(c);
            }
            // Another op (or process) may have tuned it since this one loaded the file.
            if let Some(disk) = &self.tune_file {
                for (p, c) in TuneTable::load(disk).0.entries {
                    table.entries.entry(p).or_insert(c);
                }
            }
            if let Some(c) = known(&table) {
                return Ok(c);
            }
        }
        let among: Vec<CoopConfig> = configs
            .iter()
            .copied()
            .filter(|c| candidates.contains(c))
            .collect();
        if ahead::listing() {
            // A listing pass (see `compile_ahead`): the kernels to compile, nothing measured
            // or chosen.
            let shape = e
                .gemm()
                .ok_or_else(|| OpError::shape(OP, format!("{e:?} exceeds the u32 index space")))?;
            ahead::list(&problem, || {
                self.candidate_kernels(gpu, &self.buildable(gpu, &among), shape)
            })?;
            return Ok(self.config_for(&e));
        }
        let (best, _) = self.measure_configs(gpu, &among, a, b, c, 4)?;
        let mut table = self.tuned.lock().unwrap_or_else(PoisonError::into_inner);
        table.entries.insert(problem, best);
        if let Some(disk) = &self.tune_file
            && let Err(err) = table.save(disk)
        {
            // Best effort: an unwritable file only means measuring again next time.
            eprintln!(
                "fblayout: the autotune file {} could not be written: {err}",
                disk.path.display()
            );
        }
        Ok(best)
    }

    /// Times every candidate of the problem (see [`measure_configs`](Self::measure_configs));
    /// returns the fastest and every candidate's time per product.
    pub fn measure(
        &self,
        gpu: &Gpu,
        a: &GpuArg<'_>,
        b: &GpuArg<'_>,
        c: &GpuArg<'_>,
        reps: u32,
    ) -> Result<(CoopConfig, Vec<(CoopConfig, Duration)>), OpError> {
        let candidates = self.candidates_for(&self.extents(gpu, a, b, c)?);
        self.measure_configs(gpu, &candidates, a, b, c, reps)
    }

    /// Times the configurations of `configs` the device can build (others are left out) on
    /// these arguments (C is overwritten; a biased op adds a zero bias of its own); returns the
    /// fastest and each one's time per product (a split-k product is two dispatches).
    ///
    /// A GPU left idle runs at a low clock for a while, which would favour the configurations
    /// measured last, and compiling a pipeline leaves it idle: so every configuration is
    /// compiled (run once) first, then the first one runs for at least [`TUNE_WARMUP`] (or
    /// [`TUNE_WARMUP_AGAIN`] right after another measurement), and only
    /// then is each screened, back to back, by one batch of products (as many as take about
    /// [`SCREEN_TIME`] on the first configuration, at most `reps`: long enough that the
    /// submission's own latency is a small part); the
    /// [`FINALISTS`] fastest are timed again, each by the better of two batches of `reps`, and
    /// the fastest of those wins. The times returned are the screening's, the finalists'
    /// replaced by their second timing.
    pub fn measure_configs(
        &self,
        gpu: &Gpu,
        configs: &[CoopConfig],
        a: &GpuArg<'_>,
        b: &GpuArg<'_>,
        c: &GpuArg<'_>,
        reps: u32,
    ) -> Result<(CoopConfig, Vec<(CoopConfig, Duration)>), OpError> {
        if self.has_addend() {
            return Err(OpError::shape(
                OP,
                "an added product is measured as the same product without D (tune does that)",
            ));
        }
        let reps = reps.max(1);
        let buildable = self.buildable(gpu, configs);
        let Some(&first) = buildable.first() else {
            return Err(OpError::shape(
                OP,
                "the device can build none of the configurations to measure",
            ));
        };
        let zero_bias = match self.operands.bias() {
            Some(bias) => {
                let n = self.extents(gpu, a, b, c)?.n;
                let n = u32::try_from(n)
                    .map_err(|_| OpError::shape(OP, format!("{n} columns exceed u32")))?;
                Some((bias, bias.zeroed(gpu, n)?))
            }
            None => None,
        };
        let bias_arg = zero_bias
            .as_ref()
            .map(|(bias, (buffer, bound))| {
                GpuArg::bound(buffer, bias.operand().view(), bound.clone())
            })
            .transpose()?;
        let batch_of = |config: CoopConfig, n: u32| -> Result<Duration, OpError> {
            let mut batch = gpu.batch();
            for _ in 0..n {
                let bias = bias_arg.as_ref().map(|b| (Bias::ROLE, b));
                self.record_config_with(&mut batch, config, a, b, bias, c)?;
            }
            let start = Instant::now();
            batch.submit()?;
            gpu.wait()?;
            Ok(start.elapsed())
        };
        // Every pipeline is compiled first, several at once; the first batch of each then
        // runs it once.
        let e = self.extents(gpu, a, b, c)?;
        let shape = e
            .gemm()
            .ok_or_else(|| OpError::shape(OP, format!("{e:?} exceeds the u32 index space")))?;
        self.prepare(gpu, &buildable, shape)?;
        for &config in &buildable {
            batch_of(config, 1)?;
        }
        // A GPU measured a moment ago is still clocked up: a short warm-up does.
        let warmup = if gpu.measured_within(STILL_WARM) {
            TUNE_WARMUP_AGAIN
        } else {
            TUNE_WARMUP
        };
        let start = Instant::now();
        while start.elapsed() < warmup {
            batch_of(first, reps)?;
        }
        let one = batch_of(first, 1)?;
        let screen_reps = if one.is_zero() {
            reps
        } else {
            let wanted = SCREEN_TIME.as_secs_f64() / one.as_secs_f64();
            (wanted.ceil() as u32).clamp(1, reps)
        };
        let mut times = Vec::with_capacity(buildable.len());
        for &config in &buildable {
            times.push((config, batch_of(config, screen_reps)? / screen_reps));
        }
        let mut order: Vec<usize> = (0..times.len()).collect();
        order.sort_by_key(|&i| times[i].1);
        for &i in order.iter().take(FINALISTS) {
            let config = times[i].0;
            let t = batch_of(config, reps)?.min(batch_of(config, reps)?);
            times[i].1 = t / reps;
        }
        gpu.measured();
        let best = order
            .iter()
            .take(FINALISTS)
            .map(|&i| times[i])
            .min_by_key(|&(_, t)| t)
            .map_or(first, |(config, _)| config);
        Ok((best, times))
    }
}

/// The rows and columns of split-k's partial sums under `config` for `shape`: whole blocks of
/// C, so that every fragment is stored straight; `None` past the `u32` space.
fn workspace_extents(config: CoopConfig, shape: GemmShape) -> Option<(u32, u32)> {
    let rows = shape
        .m
        .div_ceil(config.block_m)
        .checked_mul(config.block_m)?;
    let cols = shape
        .n
        .div_ceil(config.block_n)
        .checked_mul(config.block_n)?;
    Some((rows, cols))
}
