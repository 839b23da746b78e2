//! Matrix products: batched GEMM through views of any layout, and a linear layer's three GEMMs.
//!
//! [`MatmulOp`] computes `C[b.., m, n] = alpha · Σ_k A[b.., m, k] · B[b.., k, n] + beta ·
//! C[b.., m, n]` for views A, B and C of rank 2 plus up to three leading batch axes of equal
//! extents. Every transposition is a view: `Aᵀ` is A's view with its last two axes swapped,
//! attention's `Q [b, s, h, d]` is read as `[b, h, s, d]` by a permute, `Kᵀ` as `[b, h, d, s]`,
//! and grouped-query attention shares K between the heads of a group by a `broadcast` step
//! (`[b, h_kv, g, d, s]`). Nothing is copied: the kernel reads each operand through its view.
//!
//! - [`tiling`]: [`TileConfig`] (workgroup tile, k-step, outputs per invocation) and [`Tiling`]
//!   (a configuration plus a split of the reduction), chosen by shape in one place.
//! - `shader`: the generated WGSL. Tiles are staged through workgroup memory with `vec4`
//!   loads along whichever axis the operand is contiguous in ([`Operand::vectorized`] on the
//!   outer axis, then on `k`, else single elements), into one staging layout, so one
//!   register-blocked inner loop serves every layout.
//! - [`linear`]: [`LinearOp`], `y = x·w` and its backward `dx = dy·wᵀ`, `dw = xᵀ·dy`, built from
//!   the three declarations.
//! - [`narrow`]: [`NarrowMatmulOp`], products with a side of at most 16 (LoRA's rank-`r`
//!   factors), bound by memory, on kernels shaped for that.
//! - `product`: one product on the `f32`-summing GEMM, on the narrow kernels, or on tensor
//!   cores where it can run there (the linear layer's and attention's products).
//! - [`cpu`]: the CPU twin, blocked and parallel, in `f64`.
//!
//! A biased product ([`MatmulOp::new_biased`]) overwrites C with `A·B + bias`, `bias[n]` added
//! to every row in the epilogue (and under split-k once, in the reduction), instead of a
//! separate pass over C; it has no `alpha` or `beta`.
//!
//! Storage is `f32` or `f16` (sums are `f32` on the GPU, `f64` on the CPU). `beta = 0` does
//! not read C, so C may hold anything (NaN) then; `beta = 1` accumulates.
//!
//! ```no_run
//! use fblayout_core::layout::LayoutSpec;
//! use fblayout_kernels::ops::matmul::{MatmulOp, Scale};
//! use fblayout_kernels::runtime::{Gpu, GpuBuffer};
//! use fblayout_kernels::tensor::GpuArg;
//!
//! let gpu = Gpu::new()?;
//! // Attention scores S = Q·Kᵀ per head, from Q and K stored as [batch, seq, heads, head_dim].
//! let qk = LayoutSpec::new("q").dyn_axis("batch").dyn_axis("seq").axis("heads", 12).axis("head_dim", 64).build()?;
//! let q = qk.view().permute(&["batch", "heads", "seq", "head_dim"])?;
//! let k_t = qk.view().permute(&["batch", "heads", "head_dim", "seq"])?;
//! let s = LayoutSpec::new("s").dyn_axis("batch").axis("heads", 12).dyn_axis("seq").axis("key", 128).build()?;
//! let op = MatmulOp::new(&gpu, &q, &k_t, &s.view())?;
//!
//! let extents = [("batch", 8), ("seq", 128)];
//! let elements = 8 * 128 * 12 * 64;
//! let (qb, kb) = (GpuBuffer::zeroed::<f32>(&gpu, elements)?, GpuBuffer::zeroed::<f32>(&gpu, elements)?);
//! let sb = GpuBuffer::scratch::<f32>(&gpu, 8 * 12 * 128 * 128)?;
//! let mut batch = gpu.batch();
//! op.record(
//!     &mut batch,
//!     &GpuArg::new(&qb, &q, &extents)?,
//!     &GpuArg::new(&kb, &k_t, &extents)?,
//!     &GpuArg::new(&sb, &s.view(), &extents)?,
//!     Scale { alpha: 0.125, beta: 0.0 }, // 1/√head_dim
//! )?;
//! batch.submit()?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! [`Operand::vectorized`]: fblayout_core::kernel::Operand::vectorized

pub mod cpu;
mod extra;
pub mod linear;
pub mod narrow;
mod product;
mod shader;
pub mod tiling;

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use fblayout_core::expr::{Node, VarKind};
use fblayout_core::kernel::{KernelSource, Operand, ParamValue, Scalar};
use fblayout_core::layout::{BoundView, ElemType, LayoutSpec, View};

use self::shader::{Epilogue, Finish, GemmSpec, Staging, Store};
use super::compiled::{Compiled, workgroups_for};
use super::error::OpError;
use crate::runtime::{Batch, Gpu, GpuBuffer, Scratch};
use crate::tensor::GpuArg;

pub use cpu::matmul_cpu;
pub use extra::Merge;
pub(crate) use extra::{Addend, Bias, Extra, ExtraArg};
pub use linear::LinearOp;
pub use narrow::NarrowMatmulOp;
pub use product::Output;
pub(crate) use product::Product;
pub use tiling::{DEFAULT_COMPUTE_UNITS, GemmShape, TileConfig, Tiling};

const OP: &str = "matmul";
const REDUCE_OP: &str = "matmul split-k reduction";
/// Batch axes a product may have besides its two matrix axes.
pub const MAX_BATCH_AXES: usize = 3;

/// The factors of a GEMM: `C = alpha · A·B + beta · C`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Scale {
    /// The factor of the product.
    pub alpha: f32,
    /// The factor of C's old value; 0 does not read C.
    pub beta: f32,
}

impl Scale {
    /// `C = A·B`.
    pub const OVERWRITE: Self = Self {
        alpha: 1.0,
        beta: 0.0,
    };
    /// `C += A·B`.
    pub const ACCUMULATE: Self = Self {
        alpha: 1.0,
        beta: 1.0,
    };
}

/// The extents of a product checked against each other: the batch axes and `m`, `n`, `k`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Extents {
    /// The extents of the batch axes (equal in A, B and C).
    pub batch: Vec<usize>,
    /// Rows of A and C.
    pub m: usize,
    /// Columns of B and C.
    pub n: usize,
    /// Columns of A, rows of B.
    pub k: usize,
}

impl Extents {
    /// The extents of a call of a product built as `kernel`: each argument must be read
    /// through the view the kernel was built for, then the shapes must fit ([`Extents::of`]).
    pub(crate) fn of_call(
        kernel: &Compiled,
        a: &GpuArg<'_>,
        b: &GpuArg<'_>,
        c: &GpuArg<'_>,
    ) -> Result<Self, OpError> {
        for (role, arg) in [("a", a), ("b", b), ("c", c)] {
            kernel.check_view(role, arg)?;
        }
        Self::of(&a.dims(), &b.dims(), &c.dims())
    }

    /// The extents of `A [b.., m, k] · B [b.., k, n] → C [b.., m, n]`, or why they don't fit.
    pub fn of(a: &[usize], b: &[usize], c: &[usize]) -> Result<Self, OpError> {
        let rank = c.len();
        if !(2..=2 + MAX_BATCH_AXES).contains(&rank) {
            return Err(OpError::shape(
                OP,
                format!(
                    "C has rank {rank}; a product has 2 matrix axes and at most {MAX_BATCH_AXES} batch axes"
                ),
            ));
        }
        if a.len() != rank || b.len() != rank {
            return Err(OpError::shape(
                OP,
                format!(
                    "A, B and C must have one rank (batch axes, then two matrix axes): A {a:?}, B {b:?}, C {c:?}"
                ),
            ));
        }
        let nb = rank - 2;
        if a[..nb] != c[..nb] || b[..nb] != c[..nb] {
            return Err(OpError::shape(
                OP,
                format!(
                    "the batch axes differ: A {:?}, B {:?}, C {:?} (a shared operand is a broadcast view)",
                    &a[..nb],
                    &b[..nb],
                    &c[..nb]
                ),
            ));
        }
        let (m, k) = (a[nb], a[nb + 1]);
        let (kb, n) = (b[nb], b[nb + 1]);
        if k != kb {
            return Err(OpError::shape(
                OP,
                format!("A is [.., {m}, {k}] but B is [.., {kb}, {n}]: the reduced extents differ"),
            ));
        }
        if c[nb] != m || c[nb + 1] != n {
            return Err(OpError::shape(
                OP,
                format!(
                    "A·B is [.., {m}, {n}] but C is [.., {}, {}]",
                    c[nb],
                    c[nb + 1]
                ),
            ));
        }
        Ok(Self {
            batch: c[..nb].to_vec(),
            m,
            n,
            k,
        })
    }

    /// Products in the batch.
    pub fn products(&self) -> usize {
        self.batch.iter().product()
    }

    /// The shape the tiling is chosen for; `None` past the `u32` space.
    pub fn gemm(&self) -> Option<GemmShape> {
        Some(GemmShape {
            batch: u32::try_from(self.products()).ok()?,
            m: u32::try_from(self.m).ok()?,
            n: u32::try_from(self.n).ok()?,
            k: u32::try_from(self.k).ok()?,
        })
    }
}

/// Which kernel of an op: the direct GEMM or the split-k partial GEMM of a tiling, or the
/// split-k reduction.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Kernel {
    Gemm(TileConfig),
    Partial(TileConfig),
    Reduce,
}

/// A batched GEMM built for the views of A, B and C (see the module docs).
///
/// Kernels are generated per tiling on first use and kept; [`record`](Self::record) picks the
/// tiling by shape ([`Tiling::choose`]), [`record_plan`](Self::record_plan) takes one.
#[derive(Debug, Clone)]
pub struct MatmulOp {
    a: Operand,
    b: Operand,
    partial: Operand,
    reduction: Reduction,
    batch_axes: usize,
    candidates: Vec<(TileConfig, f64)>,
    units: u32,
    kernels: Arc<Mutex<HashMap<Kernel, Arc<Compiled>>>>,
}

/// The layout of split-k's partial sums: `[product, split, rows, cols]`, f32, with `cols`
/// padded to whole `vec4`s (it is `cols4 × 4` merged).
fn partial_view() -> Result<View, OpError> {
    let layout = LayoutSpec::new("mm_partial")
        .dyn_axis("product")
        .dyn_axis("split")
        .dyn_axis("rows")
        .dyn_axis("cols4")
        .axis("lane", 4)
        .build()
        .map_err(|e| OpError::shape(OP, e.to_string()))?;
    Ok(layout.view().merge(&["cols4", "lane"], "cols")?)
}

/// How split-k cuts a reduction of `k` into (at most) `requested` parts of whole k-steps of
/// `k_step`: the number of parts and the length of each (the last may be shorter); `(1, k)`
/// where there is no split (one part, or fewer than two k-steps).
pub(crate) fn split_parts(k: u32, requested: u32, k_step: u32) -> (u32, u32) {
    let split = requested.max(1).min(k.div_ceil(k_step).max(1));
    if split == 1 {
        return (1, k);
    }
    let split_len = k.div_ceil(split).div_ceil(k_step) * k_step;
    (k.div_ceil(split_len), split_len)
}

/// Split-k's second kernel and its workspace, shared by [`MatmulOp`] and the cooperative GEMM:
/// the partial sums of the parts of a reduction, `[product, split, rows, cols]` in f32
/// ([`partial_view`]; `rows` and `cols` may run past C's), are added in part order, so the
/// result does not depend on how the parts were scheduled, and `alpha · Σ + beta · C` is
/// written through C's view (four elements at a time along `n` or `m` where the view allows,
/// masked to C's extents); for a biased product `Σ + bias` instead, the bias added once, and
/// for an added one `alpha · Σ + D` ([`Extra`]).
#[derive(Debug, Clone)]
pub(crate) struct Reduction {
    partial: Operand,
    c: Operand,
    store: Store,
    batch_axes: usize,
    extra: Extra,
}

impl Reduction {
    /// The name of the reduction's kernel.
    pub(crate) const OP: &'static str = REDUCE_OP;
    /// Its entry point.
    pub(crate) const ENTRY: &'static str = shader::REDUCE_ENTRY;

    /// The reduction into C written through `c`, of `batch_axes` batch axes, adding `bias`
    /// where there is one.
    pub(crate) fn new(c: &View, batch_axes: usize, bias: Option<Bias>) -> Result<Self, OpError> {
        let nb = batch_axes;
        let (c, c_axis) = vectorized(Operand::write("c", c)?, &[nb + 1, nb]);
        let store = match c_axis {
            Some(axis) if axis == nb + 1 => Store::N,
            Some(_) => Store::M,
            None => Store::Scalar,
        };
        Ok(Self {
            partial: Operand::read("partial", &partial_view()?)?.vectorized(3),
            c,
            store,
            batch_axes,
            extra: bias.map_or(Extra::None, Extra::Bias),
        })
    }

    /// The same reduction adding D, read through `d` (see [`Addend::new`]), four at a time
    /// along the axis C is stored four at a time along where D's layout grants that; for the
    /// product `op` whose C is `c` (the view this reduction writes, checked against `d`).
    pub(crate) fn with_addend(
        mut self,
        op: &'static str,
        d: &View,
        f16_ok: bool,
        merge: Merge,
    ) -> Result<Self, OpError> {
        let c = self.c.view().clone();
        let wide = self.wide_store_axis();
        self.extra = Extra::Addend(Addend::new(op, d, &c, f16_ok, wide, merge)?);
        Ok(self)
    }

    /// The axis of C that C is stored four at a time along (`m` or `n`), where it is.
    pub(crate) fn wide_store_axis(&self) -> Option<usize> {
        let nb = self.batch_axes;
        match self.store {
            Store::M => Some(nb),
            Store::N => Some(nb + 1),
            Store::Scalar => None,
        }
    }

    /// What the product adds as it writes C (the reduction's: one declaration for every kernel
    /// of the product).
    pub(crate) fn extra(&self) -> &Extra {
        &self.extra
    }

    /// The bias the reduction adds, if any.
    pub(crate) fn bias(&self) -> Option<&Bias> {
        self.extra.bias()
    }

    /// How sums are finished into C.
    fn finish(&self) -> Finish {
        self.extra.finish()
    }

    /// Whether the bias, or D, is read four elements at a time (D along the axis C is stored
    /// along).
    fn extra_wide(&self) -> bool {
        match &self.extra {
            Extra::None => false,
            Extra::Bias(bias) => bias.wide(),
            Extra::Addend(d) => self
                .wide_store_axis()
                .is_some_and(|axis| d.wide_along(axis)),
        }
    }

    /// `source` with what finishing a sum into C needs: the scalars `alpha` and `beta` (and
    /// D), or the bias operand.
    fn finishing(&self, source: KernelSource) -> KernelSource {
        match &self.extra {
            Extra::Bias(bias) => source.operand(bias.operand().clone()),
            Extra::None => source
                .scalar("alpha", Scalar::F32)
                .scalar("beta", Scalar::F32),
            Extra::Addend(d) => {
                let source = source
                    .operand(d.operand().clone())
                    .scalar("alpha", Scalar::F32)
                    .scalar("beta", Scalar::F32);
                match d.merge().helpers() {
                    Some(helpers) => source.body(helpers),
                    None => source,
                }
            }
        }
    }

    /// Checks a call's extra argument (the bias or D, `arg`) against what the product was
    /// built with (see [`Extra::check_call`]), C's extents `c_dims`; `kernel` is one of the
    /// product's kernels that reads it.
    pub(crate) fn check_extra(
        &self,
        op: &'static str,
        kernel: &Compiled,
        arg: Option<ExtraArg<'_, '_>>,
        c_dims: &[usize],
    ) -> Result<(), OpError> {
        self.extra.check_call(op, kernel, arg, c_dims)
    }

    /// The view of the partial sums (the workspace's).
    pub(crate) fn partial_view(&self) -> &View {
        self.partial.view()
    }

    /// The partial sums as the operand a split-k kernel writes (four columns at a time).
    pub(crate) fn partial_writer(&self) -> Result<Operand, OpError> {
        Ok(Operand::write("partial", self.partial_view())?.vectorized(3))
    }

    /// The kernel's source (scalars `alpha`, `beta` or the bias, and `splits`).
    pub(crate) fn source(&self) -> KernelSource {
        let source = KernelSource::new(REDUCE_OP)
            .operand(self.partial.clone())
            .operand(self.c.clone());
        self.finishing(source)
            .scalar("splits", Scalar::U32)
            .body(shader::reduce(
                self.store,
                self.batch_axes,
                self.finish(),
                self.extra_wide(),
            ))
    }

    /// The extents of the partial sums of `split` parts of `products` products of `rows ×
    /// cols` sums (`cols` rounded up to whole `vec4`s), bound on their view `partial`.
    fn workspace_bound(
        partial: &View,
        products: u32,
        split: u32,
        rows: u32,
        cols: u32,
    ) -> Result<BoundView, OpError> {
        Ok(partial.bind(&[
            ("product", products),
            ("split", split),
            ("rows", rows),
            ("cols4", cols.div_ceil(4)),
        ])?)
    }

    /// The scratch of a [`workspace`](Self::workspace) of these extents.
    pub(crate) fn workspace_scratch(
        products: u32,
        split: u32,
        rows: u32,
        cols: u32,
    ) -> Result<Scratch, OpError> {
        let bound = Self::workspace_bound(&partial_view()?, products, split, rows, cols)?;
        Ok(Scratch::buffer(bound.len() * 4))
    }

    /// A workspace, a scratch buffer of `batch`, for `split` parts of `products` products of
    /// `rows × cols` partial sums (`cols` rounded up to whole `vec4`s), and its extents.
    pub(crate) fn workspace(
        &self,
        batch: &mut Batch<'_>,
        products: u32,
        split: u32,
        rows: u32,
        cols: u32,
    ) -> Result<(GpuBuffer, BoundView), OpError> {
        let bound = Self::workspace_bound(self.partial_view(), products, split, rows, cols)?;
        let scratch = batch.scratch::<f32>(bound.len() as usize)?;
        Ok((scratch, bound))
    }

    /// Records `C = alpha · Σ_split partial + beta · C` (with a bias: `C = Σ_split partial +
    /// bias`, and `scale` is not used; with D: `alpha · Σ_split partial + D`) for `shape` with
    /// the reduction's `kernel` (built from [`source`](Self::source)), over every part of the
    /// workspace `partial` (a [`workspace`](Self::workspace)). The extra argument (bias or D)
    /// must already be checked ([`check_extra`](Self::check_extra)).
    #[allow(clippy::too_many_arguments)] // one argument per operand of the kernel, and its shape
    pub(crate) fn record(
        &self,
        kernel: &Compiled,
        batch: &mut Batch<'_>,
        partial: &GpuArg<'_>,
        c: &GpuArg<'_>,
        extra: Option<&GpuArg<'_>>,
        scale: Scale,
        shape: GemmShape,
    ) -> Result<(), OpError> {
        // The workspace's `split` axis: its parts.
        let split = u32::try_from(partial.dims()[1]).map_err(|_| {
            OpError::shape(
                REDUCE_OP,
                format!("{:?} parts of a reduction", partial.dims()),
            )
        })?;
        let units = u64::from(shape.batch) * u64::from(shape.m) * u64::from(shape.n.div_ceil(4));
        let mut args = vec![("partial", partial), ("c", c)];
        args.extend(extra.zip(self.extra.role()).map(|(e, role)| (role, e)));
        let mut scalars = finish_scalars(self.extra.bias().is_some(), scale);
        scalars.push(("splits", ParamValue::U32(split)));
        kernel.record_linear(
            batch,
            Self::ENTRY,
            &args,
            &scalars,
            workgroups_for(REDUCE_OP, units)?,
        )
    }
}

/// Fails unless `grid` fits the device's limit of workgroups per dimension: a shape error of
/// `op` naming `what` (the problem, and how it is cut) and the grid it needed.
pub(crate) fn check_grid(
    op: &'static str,
    gpu: &Gpu,
    grid: [u32; 3],
    what: impl std::fmt::Display,
) -> Result<(), OpError> {
    let max = gpu.max_workgroups_per_dimension();
    if grid.iter().all(|&g| g <= max) {
        return Ok(());
    }
    Err(OpError::shape(
        op,
        format!(
            "{what} needs a grid of {grid:?} workgroups; the device allows {max} per dimension"
        ),
    ))
}

/// One product's split-k: its parts and the length of each along `k`, the rows and columns of
/// each part's partial sums, and the grid of the kernel that writes them.
#[derive(Debug, Clone, Copy)]
pub(crate) struct SplitRun {
    pub parts: u32,
    pub len: u32,
    pub rows: u32,
    pub cols: u32,
    pub grid: [u32; 3],
}

impl Reduction {
    /// Records both halves of split-k for `shape`: `partial` (entry `entry`; operands `a`, `b`
    /// and `partial`; scalars `splits` and `split_len`) writes the partial sums of `run`'s parts
    /// into a [`workspace`](Self::workspace), then `reduce` finishes them into C as
    /// [`record`](Self::record) does.
    #[allow(clippy::too_many_arguments)] // one argument per operand and kernel of the two halves
    pub(crate) fn record_split(
        &self,
        batch: &mut Batch<'_>,
        [partial, reduce]: [&Compiled; 2],
        entry: &str,
        [a, b, c]: [&GpuArg<'_>; 3],
        extra: Option<&GpuArg<'_>>,
        scale: Scale,
        shape: GemmShape,
        run: SplitRun,
    ) -> Result<(), OpError> {
        let (scratch, bound) = self.workspace(batch, shape.batch, run.parts, run.rows, run.cols)?;
        let sums = GpuArg::bound(&scratch, self.partial_view(), bound)?;
        partial.record(
            batch,
            entry,
            &[("a", a), ("b", b), ("partial", &sums)],
            &[
                ("splits", ParamValue::U32(run.parts)),
                ("split_len", ParamValue::U32(run.len)),
            ],
            run.grid,
        )?;
        self.record(reduce, batch, &sums, c, extra, scale, shape)
    }
}

/// Why a product's operand can't be stored as `elem` (`f16_ok`: the device has `f16`), if it
/// can't: products are of `f32` or `f16` elements.
pub(crate) fn storage_problem(elem: ElemType, f16_ok: bool) -> Option<String> {
    match elem {
        ElemType::F32 => None,
        ElemType::F16 if f16_ok => None,
        ElemType::F16 => Some("f16 storage needs a device with SHADER_F16".to_owned()),
        other => Some(format!("products are of f32 or f16 elements, not {other}")),
    }
}

/// The scalars finishing a sum into C: `alpha` and `beta`, or none for a biased product.
fn finish_scalars(biased: bool, scale: Scale) -> Vec<(&'static str, ParamValue)> {
    if biased {
        Vec::new()
    } else {
        vec![
            ("alpha", ParamValue::F32(scale.alpha)),
            ("beta", ParamValue::F32(scale.beta)),
        ]
    }
}

/// `op` with wide accesses along the first of `axes` that grants them.
fn vectorized(op: Operand, axes: &[usize]) -> (Operand, Option<usize>) {
    for &axis in axes {
        let v = op.clone().vectorized(axis);
        if v.vector_axis().is_some() {
            return (v, Some(axis));
        }
    }
    (op, None)
}

/// Checks views `a`, `b`, `c` of the product `op` before any device is involved: one rank of 2
/// matrix axes plus at most [`MAX_BATCH_AXES`] batch axes, and every pair of extents that must
/// agree (the batch axes, `m`, `n`, `k`) equal where both are static (run-time ones are checked
/// per call by [`Extents::of`]). Returns the number of batch axes.
pub(crate) fn check_static_extents(
    op: &'static str,
    a: &View,
    b: &View,
    c: &View,
) -> Result<usize, OpError> {
    let rank = c.axes().len();
    if a.axes().len() != rank || b.axes().len() != rank || !(2..=2 + MAX_BATCH_AXES).contains(&rank)
    {
        let ranks = |v: &View| vec![1; v.axes().len()];
        Extents::of(&ranks(a), &ranks(b), &ranks(c))?;
    }
    let nb = rank - 2;
    let agree =
        |what: &str, (x, vx, i): (&str, &View, usize), (y, vy, j): (&str, &View, usize)| match (
            vx.axes()[i].extent.as_static(),
            vy.axes()[j].extent.as_static(),
        ) {
            (Some(e), Some(f)) if e != f => Err(OpError::shape(
                op,
                format!("{what} has extent {e} in {x} but {f} in {y}"),
            )),
            _ => Ok(()),
        };
    for d in 0..nb {
        let what = format!("batch axis {d}");
        agree(&what, ("A", a, d), ("C", c, d))?;
        agree(&what, ("B", b, d), ("C", c, d))?;
    }
    agree("m", ("A", a, nb), ("C", c, nb))?;
    agree("n", ("B", b, nb + 1), ("C", c, nb + 1))?;
    agree("k", ("A", a, nb + 1), ("B", b, nb))?;
    Ok(nb)
}

/// Fails when writing C through `view` would write one element from several products: a view
/// whose offset ignores an axis longer than one (a broadcast).
pub(crate) fn check_writable(view: &View) -> Result<(), OpError> {
    let f = view.simplified_fn();
    let reached = f.graph.reachable(&[f.offset]);
    let coords = f
        .params
        .iter()
        .filter(|&&p| f.graph.var_decl(p).kind == VarKind::Coord);
    for (axis, &p) in view.axes().iter().zip(coords) {
        let used = reached
            .iter()
            .any(|&id| matches!(f.graph.node(id), Node::Var(v) if v == p));
        if !used && axis.extent.as_static() != Some(1) {
            return Err(OpError::Unsupported {
                op: OP,
                role: "c",
                view: view.name().to_owned(),
                why: format!(
                    "its offset ignores axis `{}` (a broadcast), so several products would \
                     write one element",
                    axis.name
                ),
            });
        }
    }
    Ok(())
}

impl MatmulOp {
    /// The GEMM reading A and B through `a` and `b` and writing C through `c`.
    ///
    /// Checks the ranks, the static extents, the element types (`f32`, or `f16` where the
    /// device has it) and that C is not written through a broadcast; builds the kernel of the
    /// large tiling, so a problem with the views shows here.
    pub fn new(gpu: &Gpu, a: &View, b: &View, c: &View) -> Result<Self, OpError> {
        Self::new_with(gpu, a, b, None, None, c)
    }

    /// The biased GEMM `C = A·B + bias` (every row of C gets `bias[n]`; C is overwritten,
    /// there is no `alpha` or `beta`): like [`new`](Self::new), with `bias` a rank-1 view
    /// `[n]` of `f32` or `f16` whose extent is C's last (a shape error otherwise). Record it
    /// with [`record_biased`](Self::record_biased) or
    /// [`record_plan_biased`](Self::record_plan_biased). Under split-k the reduction adds the
    /// bias, once.
    pub fn new_biased(
        gpu: &Gpu,
        a: &View,
        b: &View,
        bias: &View,
        c: &View,
    ) -> Result<Self, OpError> {
        Self::new_with(gpu, a, b, Some(bias), None, c)
    }

    /// The added GEMM `C = alpha · A·B + D` (C overwritten, D read through `d`, a view of C's
    /// extents of `f32` or `f16`, any layout; a shape error otherwise): like
    /// [`new`](Self::new), the addition after the product done as C is written. Record it with
    /// [`record_added`](Self::record_added). Under split-k the reduction adds D.
    pub fn new_added(gpu: &Gpu, a: &View, b: &View, d: &View, c: &View) -> Result<Self, OpError> {
        Self::new_merged(gpu, a, b, d, c, Merge::Add)
    }

    /// Like [`new_added`](Self::new_added), D joining the sum as `merge` says (`C = alpha ·
    /// A·B · f'(D)` for [`Merge::ActivationGrad`]).
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
        let nb = check_static_extents(OP, a, b, c)?;
        for (role, v) in [("a", a), ("b", b), ("c", c)] {
            if let Some(why) = storage_problem(v.layout().elem(), gpu.features().f16) {
                return Err(OpError::Unsupported {
                    op: OP,
                    role,
                    view: v.name().to_owned(),
                    why,
                });
            }
        }
        let bias = bias
            .map(|v| Bias::new(OP, v, c, gpu.features().f16))
            .transpose()?;
        check_writable(c)?;
        let (a, _) = vectorized(Operand::read("a", a)?, &[nb, nb + 1]);
        let (b, _) = vectorized(Operand::read("b", b)?, &[nb + 1, nb]);
        let mut reduction = Reduction::new(c, nb, bias)?;
        if let Some((d, merge)) = d {
            reduction = reduction.with_addend(OP, d, gpu.features().f16, merge)?;
        }
        let partial = reduction.partial_writer()?;
        let candidates: Vec<(TileConfig, f64)> = TileConfig::CANDIDATES
            .into_iter()
            .filter(|(t, _)| t.check(gpu.limits()).is_ok())
            .collect();
        let op = Self {
            a,
            b,
            partial,
            reduction,
            batch_axes: nb,
            candidates,
            units: DEFAULT_COMPUTE_UNITS,
            kernels: Arc::default(),
        };
        let (first, _) = op
            .candidates
            .first()
            .copied()
            .ok_or_else(|| OpError::shape(OP, "the device can build none of the tilings"))?;
        op.kernel(gpu, Kernel::Gemm(first))?;
        Ok(op)
    }

    /// Whether the op adds a bias (built by [`new_biased`](Self::new_biased)).
    pub fn has_bias(&self) -> bool {
        self.reduction.bias().is_some()
    }

    /// The same op planning for a device of `units` compute units (multiprocessors; default
    /// [`DEFAULT_COMPUTE_UNITS`]).
    pub fn compute_units(mut self, units: u32) -> Self {
        self.units = units.max(1);
        self
    }

    /// The tilings the device can build, each with its relative cost (see
    /// [`TileConfig::CANDIDATES`]).
    pub fn candidates(&self) -> &[(TileConfig, f64)] {
        &self.candidates
    }

    /// The plan [`record`](Self::record) uses for `shape`.
    pub fn plan(&self, shape: GemmShape) -> Tiling {
        Tiling::choose(shape, &self.candidates, self.units)
    }

    /// The most scratch [`record`](Self::record) takes for a product of `shape` on any device,
    /// planning for [`DEFAULT_COMPUTE_UNITS`] (as [`new`](Self::new) does): the partial sums
    /// of the most parts [`Tiling::choose`] splits its reduction into with the tilings any
    /// device's limits leave ([`Tiling::most_parts`]); none where it is never split. A plan
    /// given to [`record_plan`](Self::record_plan) may take more.
    pub fn scratch(shape: GemmShape) -> Result<Scratch, OpError> {
        let parts = Tiling::most_parts(shape, DEFAULT_COMPUTE_UNITS);
        if parts <= 1 || shape.batch == 0 || shape.m == 0 || shape.n == 0 {
            return Ok(Scratch::none());
        }
        Reduction::workspace_scratch(shape.batch, parts, shape.m, shape.n)
    }

    /// Whether A, B and C are read and written four elements at a time (along which axis each
    /// is contiguous, as the kernel surface proved): for tests and the benchmark.
    pub fn vector_axes(&self) -> [Option<usize>; 3] {
        [
            self.a.vector_axis(),
            self.b.vector_axis(),
            self.reduction.c.vector_axis(),
        ]
    }

    /// The WGSL of the GEMM kernel of `config` (for snapshots and inspection).
    pub fn source(&self, gpu: &Gpu, config: TileConfig) -> Result<String, OpError> {
        Ok(self
            .kernel(gpu, Kernel::Gemm(config))?
            .module()
            .source()
            .to_owned())
    }

    fn staging(&self, operand: &Operand, outer: usize) -> Staging {
        match operand.vector_axis() {
            Some(axis) if axis == outer => Staging::Outer,
            Some(_) => Staging::K,
            None => Staging::Scalar,
        }
    }

    /// The kernel `which`, built on first use.
    fn kernel(&self, gpu: &Gpu, which: Kernel) -> Result<Arc<Compiled>, OpError> {
        let mut kernels = self.kernels.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(k) = kernels.get(&which) {
            return Ok(Arc::clone(k));
        }
        let nb = self.batch_axes;
        let gemm = |config: TileConfig, epilogue| -> Result<KernelSource, OpError> {
            config
                .check(gpu.limits())
                .map_err(|why| OpError::shape(OP, format!("tiling {config}: {why}")))?;
            let spec = GemmSpec {
                config,
                batch_axes: nb,
                a: self.staging(&self.a, nb),
                b: self.staging(&self.b, nb + 1),
                epilogue,
                bias_wide: self.reduction.extra_wide(),
            };
            Ok(KernelSource::new(OP)
                .operand(self.a.clone())
                .operand(self.b.clone())
                .body(shader::gemm(&spec)))
        };
        let source = match which {
            Kernel::Gemm(config) => {
                let epilogue = Epilogue::Direct(self.reduction.store, self.reduction.finish());
                self.reduction
                    .finishing(gemm(config, epilogue)?.operand(self.reduction.c.clone()))
            }
            Kernel::Partial(config) => gemm(config, Epilogue::Partial)?
                .operand(self.partial.clone())
                .scalar("splits", Scalar::U32)
                .scalar("split_len", Scalar::U32),
            Kernel::Reduce => self.reduction.source(),
        };
        let op = if which == Kernel::Reduce {
            REDUCE_OP
        } else {
            OP
        };
        let compiled = Arc::new(Compiled::new(op, gpu, source)?);
        kernels.insert(which, Arc::clone(&compiled));
        Ok(compiled)
    }

    /// The checked extents of a call: views first (each argument must be read through the view
    /// the op was built for), then shapes.
    pub fn extents(
        &self,
        gpu: &Gpu,
        a: &GpuArg<'_>,
        b: &GpuArg<'_>,
        c: &GpuArg<'_>,
    ) -> Result<Extents, OpError> {
        Extents::of_call(&*self.first_kernel(gpu)?, a, b, c)
    }

    /// The GEMM kernel of the first candidate tiling (what checks a call's views).
    fn first_kernel(&self, gpu: &Gpu) -> Result<Arc<Compiled>, OpError> {
        let first = self.candidates.first().map_or(TileConfig::SMALL, |c| c.0);
        self.kernel(gpu, Kernel::Gemm(first))
    }

    /// Records `C = alpha · A·B + beta · C` with the tiling chosen for its shape (an error for
    /// a biased op: see [`record_biased`](Self::record_biased)).
    pub fn record(
        &self,
        batch: &mut Batch<'_>,
        a: &GpuArg<'_>,
        b: &GpuArg<'_>,
        c: &GpuArg<'_>,
        scale: Scale,
    ) -> Result<(), OpError> {
        self.record_with(batch, None, a, b, None, c, scale)
    }

    /// Records `C = A·B + bias` with the tiling chosen for its shape (an error for an op built
    /// without a bias).
    pub fn record_biased(
        &self,
        batch: &mut Batch<'_>,
        a: &GpuArg<'_>,
        b: &GpuArg<'_>,
        bias: &GpuArg<'_>,
        c: &GpuArg<'_>,
    ) -> Result<(), OpError> {
        self.record_with(
            batch,
            None,
            a,
            b,
            Some((Bias::ROLE, bias)),
            c,
            Scale::OVERWRITE,
        )
    }

    /// Records `C = alpha · A·B + D` with the tiling chosen for its shape (an error for an op
    /// built without D: see [`new_added`](Self::new_added)).
    pub fn record_added(
        &self,
        batch: &mut Batch<'_>,
        a: &GpuArg<'_>,
        b: &GpuArg<'_>,
        d: &GpuArg<'_>,
        c: &GpuArg<'_>,
        alpha: f32,
    ) -> Result<(), OpError> {
        let scale = Scale { alpha, beta: 0.0 };
        self.record_with(batch, None, a, b, Some((Addend::ROLE, d)), c, scale)
    }

    /// Records `C = A·B + bias` with `plan`.
    pub fn record_plan_biased(
        &self,
        batch: &mut Batch<'_>,
        plan: Tiling,
        a: &GpuArg<'_>,
        b: &GpuArg<'_>,
        bias: &GpuArg<'_>,
        c: &GpuArg<'_>,
    ) -> Result<(), OpError> {
        self.record_with(
            batch,
            Some(plan),
            a,
            b,
            Some((Bias::ROLE, bias)),
            c,
            Scale::OVERWRITE,
        )
    }

    /// Records `C = alpha · A·B + beta · C` with `plan`.
    pub fn record_plan(
        &self,
        batch: &mut Batch<'_>,
        plan: Tiling,
        a: &GpuArg<'_>,
        b: &GpuArg<'_>,
        c: &GpuArg<'_>,
        scale: Scale,
    ) -> Result<(), OpError> {
        self.record_with(batch, Some(plan), a, b, None, c, scale)
    }

    /// The checked extents of a call with its extra argument, the bias or D (see
    /// [`extents`](Self::extents) and [`Reduction::check_extra`]).
    fn call_extents(
        &self,
        gpu: &Gpu,
        a: &GpuArg<'_>,
        b: &GpuArg<'_>,
        extra: Option<ExtraArg<'_, '_>>,
        c: &GpuArg<'_>,
    ) -> Result<Extents, OpError> {
        let kernel = self.first_kernel(gpu)?;
        let extents = Extents::of_call(&kernel, a, b, c)?;
        self.reduction.check_extra(OP, &kernel, extra, &c.dims())?;
        Ok(extents)
    }

    #[allow(clippy::too_many_arguments)] // the public records' arguments, each optional part named
    fn record_with(
        &self,
        batch: &mut Batch<'_>,
        plan: Option<Tiling>,
        a: &GpuArg<'_>,
        b: &GpuArg<'_>,
        extra: Option<ExtraArg<'_, '_>>,
        c: &GpuArg<'_>,
        scale: Scale,
    ) -> Result<(), OpError> {
        let gpu = batch.gpu();
        let extents = self.call_extents(gpu, a, b, extra, c)?;
        let shape = gemm_shape(&extents)?;
        if shape.batch == 0 || shape.m == 0 || shape.n == 0 {
            return Ok(());
        }
        let plan = plan.unwrap_or_else(|| self.plan(shape));
        let config = plan.config;
        // Split-k: each part reduces a whole number of k-steps into the partial sums.
        let (split, split_len) = split_parts(shape.k, plan.split_k, config.k_step);
        let grid = [
            shape.n.div_ceil(config.tile_n),
            shape.m.div_ceil(config.tile_m),
            shape.batch.saturating_mul(split),
        ];
        check_grid(OP, gpu, grid, format!("{extents:?} under {plan}"))?;
        if split == 1 {
            let gemm = self.kernel(gpu, Kernel::Gemm(config))?;
            let mut args = vec![("a", a), ("b", b), ("c", c)];
            args.extend(extra);
            let scalars = finish_scalars(self.has_bias(), scale);
            return gemm.record(batch, shader::ENTRY, &args, &scalars, grid);
        }
        let partial = self.kernel(gpu, Kernel::Partial(config))?;
        let reduce = self.kernel(gpu, Kernel::Reduce)?;
        let run = SplitRun {
            parts: split,
            len: split_len,
            rows: shape.m,
            cols: shape.n,
            grid,
        };
        self.reduction.record_split(
            batch,
            [&partial, &reduce],
            shader::ENTRY,
            [a, b, c],
            extra.map(|(_, e)| e),
            scale,
            shape,
            run,
        )
    }
}

/// The tiling shape of checked extents.
fn gemm_shape(extents: &Extents) -> Result<GemmShape, OpError> {
    extents
        .gemm()
        .ok_or_else(|| OpError::shape(OP, format!("{extents:?} exceeds the u32 index space")))
}
