//! Products with a narrow side: C has at most [`NARROW`] rows or columns, or the reduction
//! at most [`NARROW`] elements, a static extent.
//!
//! A LoRA adapter of rank `r` multiplies by `r`-wide matrices: `u = x·Aᵀ` and `du = dδ·B` have
//! `r` columns, `dA = duᵀ·x` has `r` rows, `dB = dδᵀ·u` `r` columns, and `δ = u·Bᵀ` and
//! `dx += du·A` reduce over `r`. On the GEMMs' tiles (64 or more wide, on tensor cores or in
//! `f32`) such products compute mostly padding and leave most of the device idle. They are
//! bound by memory instead, and these kernels are shaped for that:
//!
//! - **thin** (C has at most 16 columns, or rows): the wide operand is streamed once, each
//!   workgroup a block of its rows, its invocations splitting the reduction between them
//!   (reading neighbouring memory along whichever axis the operand is contiguous in); the
//!   narrow operand's chunk of `k` is staged in workgroup memory. When the blocks are too few
//!   to fill the device (a weight gradient, reduced over every token), the reduction is split
//!   between workgroups too, into the GEMM's partial sums, which its
//!   [`Reduction`](super::Reduction) adds and finishes.
//! - **short** (`k` at most 16): every invocation computes 4 × 4 outputs, each a sum of `k`
//!   products unrolled in registers, written through the GEMM's epilogue; built with a matrix
//!   `D` ([`NarrowMatmulOp::new_added`]), it writes `C = alpha · A·B + D` instead (a LoRA
//!   adapter's update added to its base layer's output as it is written).
//!
//! Either computes `C = alpha · A·B + beta · C` through views of any layout, with the batch
//! axes of [`MatmulOp`](super::MatmulOp), summing in `f32`; [`Product`](super::Product) runs
//! a product here whenever it has a narrow side and no bias.

mod shader;

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use fblayout_core::kernel::{KernelSource, Operand, Scalar};
use fblayout_core::layout::View;

use self::shader::{Geometry, SHORT_TILE, ShortSpec, Side, ThinOut, ThinSpec};
use super::shader::Staging;
use super::{
    DEFAULT_COMPUTE_UNITS, Extents, GemmShape, Merge, Reduction, Scale, SplitRun, check_grid,
    check_static_extents, check_writable, finish_scalars, gemm_shape, split_parts, storage_problem,
    vectorized,
};
use crate::ops::compiled::Compiled;
use crate::ops::error::OpError;
use crate::runtime::{Batch, Gpu, Scratch};
use crate::tensor::GpuArg;

const OP: &str = "matmul narrow";

/// The widest side these kernels take as narrow.
pub const NARROW: u32 = 16;

/// The fewest chunks of `k` a part of a split reduction sums, so that a part does more than
/// stage its chunk.
const MIN_CHUNKS_PER_PART: u32 = 2;

/// Which narrow kernel a product runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Kind {
    /// A narrow side of C: `width` columns ([`Side::N`]) or rows ([`Side::M`]).
    Thin {
        side: Side,
        width: u32,
        wide: Staging,
    },
    /// A short reduction of `k` elements.
    Short { k: u32, a: Staging, b_wide: bool },
}

/// Which kernel of an op.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Kernel {
    Direct,
    Partial,
    Reduce,
}

/// A product with a narrow side, built for the views of A, B and C (see the module docs).
#[derive(Debug, Clone)]
pub struct NarrowMatmulOp {
    kind: Kind,
    a: Operand,
    b: Operand,
    /// Also what the product adds: D of `C = alpha · A·B + D`
    /// ([`new_added`](Self::new_added)).
    reduction: Reduction,
    batch_axes: usize,
    kernels: Arc<Mutex<HashMap<Kernel, Arc<Compiled>>>>,
}

/// Whether a product whose reduction has the static extent `k` (`None`: not static) runs on
/// the short kernel, the one that also adds a matrix as it writes C
/// ([`NarrowMatmulOp::new_added`]).
pub fn is_short(k: Option<u32>) -> bool {
    k.is_some_and(|k| (1..=NARROW).contains(&k))
}

/// The static extent of axis `axis` of `view` where it is at most [`NARROW`].
fn narrow_extent(view: &View, axis: usize) -> Option<u32> {
    let e = view.axes()[axis].extent.as_static()?;
    u32::try_from(e).ok().filter(|&e| is_short(Some(e)))
}

/// The staging of an operand asked for wide accesses along `outer`, then `k`.
fn staging(operand: &Operand, outer: usize) -> Staging {
    match operand.vector_axis() {
        Some(axis) if axis == outer => Staging::Outer,
        Some(_) => Staging::K,
        None => Staging::Scalar,
    }
}

impl NarrowMatmulOp {
    /// The product reading A and B through `a` and `b` and writing C through `c`, where `k`,
    /// C's columns or C's rows (preferred in that order) have a static extent of at most
    /// [`NARROW`]; [`OpError::Unsupported`] where none has. Checks the views as
    /// [`MatmulOp::new`](super::MatmulOp::new) does and builds the direct kernel, so a problem
    /// with the views shows here.
    pub fn new(gpu: &Gpu, a: &View, b: &View, c: &View) -> Result<Self, OpError> {
        let op = Self::unbuilt(gpu, a, b, c)?;
        op.kernel(gpu, Kernel::Direct)?;
        Ok(op)
    }

    /// The op of [`new`](Self::new), its kernels not built yet.
    fn unbuilt(gpu: &Gpu, a: &View, b: &View, c: &View) -> Result<Self, OpError> {
        let nb = check_static_extents(OP, a, b, c)?;
        let (m_axis, k_axis, n_axis) = (nb, nb + 1, nb + 1);
        // The narrow side first, from the views alone: most products have none, and are
        // refused before anything is built for them.
        let Some((narrow, extent)) = [(a, k_axis), (c, n_axis), (c, m_axis)]
            .iter()
            .enumerate()
            .find_map(|(i, &(v, axis))| narrow_extent(v, axis).map(|e| (i, e)))
        else {
            return Err(OpError::Unsupported {
                op: OP,
                role: "c",
                view: c.name().to_owned(),
                why: format!(
                    "neither k, C's rows nor C's columns has a static extent of at most {NARROW}"
                ),
            });
        };
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
        check_writable(c)?;
        let reduction = Reduction::new(c, nb, None)?;
        // In the order found: a short `k`, few columns, few rows.
        let (kind, a, b) = match narrow {
            0 => {
                let (a, _) = vectorized(Operand::read("a", a)?, &[m_axis, k_axis]);
                let (b, _) = vectorized(Operand::read("b", b)?, &[n_axis]);
                let kind = Kind::Short {
                    k: extent,
                    a: staging(&a, m_axis),
                    b_wide: b.vector_axis().is_some(),
                };
                (kind, a, b)
            }
            1 => {
                let (a, _) = vectorized(Operand::read("a", a)?, &[m_axis, k_axis]);
                let kind = Kind::Thin {
                    side: Side::N,
                    width: extent,
                    wide: staging(&a, m_axis),
                };
                (kind, a, Operand::read("b", b)?)
            }
            _ => {
                // B is `[k, n]`: its wide side is `n`, its last axis.
                let (b, _) = vectorized(Operand::read("b", b)?, &[n_axis, nb]);
                let kind = Kind::Thin {
                    side: Side::M,
                    width: extent,
                    wide: staging(&b, n_axis),
                };
                (kind, Operand::read("a", a)?, b)
            }
        };
        Ok(Self {
            kind,
            a,
            b,
            reduction,
            batch_axes: nb,
            kernels: Arc::default(),
        })
    }

    /// The product `C = alpha · A·B + D`, D read through `d` (C's extents, any layout), where
    /// `k` has a static extent of at most [`NARROW`] ([`is_short`]): the short kernel adds D as
    /// it writes C, so the addition after the product takes no pass of its own.
    /// [`OpError::Unsupported`] for any other product.
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
        let mut op = Self::unbuilt(gpu, a, b, c)?;
        if !matches!(op.kind, Kind::Short { .. }) {
            return Err(OpError::Unsupported {
                op: OP,
                role: "a",
                view: a.name().to_owned(),
                why: format!("only a reduction of at most {NARROW} adds a matrix as it writes C"),
            });
        }
        op.reduction = op.reduction.with_addend(OP, d, gpu.features().f16, merge)?;
        op.kernel(gpu, Kernel::Direct)?;
        Ok(op)
    }

    /// D of an added product.
    fn addend(&self) -> Option<&super::Addend> {
        self.reduction.extra().addend()
    }

    /// The most scratch [`record`](Self::record) takes for a product of `shape` whichever
    /// narrow kernel its views choose: the partial sums of a thin product's split reduction
    /// ([`Self::parts`]), none for a short one.
    pub fn scratch(shape: GemmShape) -> Result<Scratch, OpError> {
        let mut scratch = Vec::new();
        for (narrow, wide) in [(shape.n, shape.m), (shape.m, shape.n)] {
            if narrow > NARROW {
                continue;
            }
            for staged in [Staging::K, Staging::Outer, Staging::Scalar] {
                let (parts, _) = Self::parts(shape.batch, wide, shape.k, Geometry::of(staged));
                if parts > 1 {
                    scratch.push(Reduction::workspace_scratch(
                        shape.batch,
                        parts,
                        shape.m,
                        shape.n,
                    )?);
                }
            }
        }
        Ok(Scratch::covering(scratch.iter()))
    }

    /// How a thin product's reduction of `k` is split between workgroups: into enough parts
    /// that the `products × ⌈wide / rows⌉` blocks of its wide side fill twice
    /// [`DEFAULT_COMPUTE_UNITS`] workgroups, each part at least [`MIN_CHUNKS_PER_PART`] chunks of
    /// `k` ([`split_parts`]: the parts and the length of each).
    fn parts(products: u32, wide: u32, k: u32, geometry: Geometry) -> (u32, u32) {
        let blocks = u64::from(products) * u64::from(wide.div_ceil(geometry.rows()));
        let target = 2 * u64::from(DEFAULT_COMPUTE_UNITS);
        let requested = target.div_ceil(blocks.max(1)).min(u64::from(u32::MAX)) as u32;
        let most = k.div_ceil(MIN_CHUNKS_PER_PART * geometry.k_chunk()).max(1);
        split_parts(k, requested.min(most), geometry.k_chunk())
    }

    /// The WGSL of the kernel that writes C (for snapshots and inspection).
    pub fn source(&self, gpu: &Gpu) -> Result<String, OpError> {
        Ok(self
            .kernel(gpu, Kernel::Direct)?
            .module()
            .source()
            .to_owned())
    }

    /// The kernel `which`, built on first use.
    fn kernel(&self, gpu: &Gpu, which: Kernel) -> Result<Arc<Compiled>, OpError> {
        let mut kernels = self.kernels.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(k) = kernels.get(&which) {
            return Ok(Arc::clone(k));
        }
        let nb = self.batch_axes;
        let operands = KernelSource::new(OP)
            .operand(self.a.clone())
            .operand(self.b.clone());
        let scaled = |source: KernelSource| {
            source
                .operand(self.reduction.c.clone())
                .scalar("alpha", Scalar::F32)
                .scalar("beta", Scalar::F32)
        };
        let (op, source) = match (which, self.kind) {
            (Kernel::Reduce, _) => (Reduction::OP, self.reduction.source()),
            (Kernel::Direct, Kind::Short { k, a, b_wide }) => {
                let spec = ShortSpec {
                    k,
                    batch_axes: nb,
                    a,
                    b_wide,
                    store: self.reduction.store,
                    added: self.addend().map(super::Addend::merge),
                    d_wide: self.addend().is_some_and(|d| {
                        self.reduction
                            .wide_store_axis()
                            .is_some_and(|axis| d.wide_along(axis))
                    }),
                };
                let source = match self.addend() {
                    Some(d) => {
                        let source = scaled(operands).operand(d.operand().clone());
                        match d.merge().helpers() {
                            Some(helpers) => source.body(helpers),
                            None => source,
                        }
                    }
                    None => scaled(operands),
                };
                (OP, source.body(shader::short(&spec)))
            }
            (Kernel::Partial, Kind::Short { .. }) => {
                return Err(OpError::shape(
                    OP,
                    "a short reduction is never split between workgroups",
                ));
            }
            (_, Kind::Thin { side, width, wide }) => {
                let out = if which == Kernel::Direct {
                    ThinOut::Direct
                } else {
                    ThinOut::Partial
                };
                let spec = ThinSpec {
                    side,
                    width,
                    wide,
                    batch_axes: nb,
                    out,
                };
                let source = match out {
                    ThinOut::Direct => scaled(operands),
                    ThinOut::Partial => operands
                        .operand(self.reduction.partial_writer()?)
                        .scalar("splits", Scalar::U32)
                        .scalar("split_len", Scalar::U32),
                };
                (OP, source.body(shader::thin(&spec)))
            }
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
        Extents::of_call(&*self.kernel(gpu, Kernel::Direct)?, a, b, c)
    }

    /// Records `C = alpha · A·B + beta · C` (an error for an op built with an addend: see
    /// [`record_added`](Self::record_added)).
    pub fn record(
        &self,
        batch: &mut Batch<'_>,
        a: &GpuArg<'_>,
        b: &GpuArg<'_>,
        c: &GpuArg<'_>,
        scale: Scale,
    ) -> Result<(), OpError> {
        self.record_with(batch, a, b, None, c, scale)
    }

    /// Records `C = alpha · A·B + D` for an op built by [`new_added`](Self::new_added); an error
    /// for any other.
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
        self.record_with(batch, a, b, Some((super::Addend::ROLE, d)), c, scale)
    }

    fn record_with(
        &self,
        batch: &mut Batch<'_>,
        a: &GpuArg<'_>,
        b: &GpuArg<'_>,
        d: Option<super::ExtraArg<'_, '_>>,
        c: &GpuArg<'_>,
        scale: Scale,
    ) -> Result<(), OpError> {
        let gpu = batch.gpu();
        let kernel = self.kernel(gpu, Kernel::Direct)?;
        let extents = Extents::of_call(&kernel, a, b, c)?;
        self.reduction.check_extra(OP, &kernel, d, &c.dims())?;
        let shape = gemm_shape(&extents)?;
        if shape.batch == 0 || shape.m == 0 || shape.n == 0 {
            return Ok(());
        }
        let (grid_xy, split, split_len) = match self.kind {
            Kind::Short { .. } => (
                [shape.n.div_ceil(SHORT_TILE), shape.m.div_ceil(SHORT_TILE)],
                1,
                shape.k,
            ),
            Kind::Thin { side, wide, .. } => {
                let geometry = Geometry::of(wide);
                let big = match side {
                    Side::N => shape.m,
                    Side::M => shape.n,
                };
                let (split, split_len) = Self::parts(shape.batch, big, shape.k, geometry);
                let blocks = big.div_ceil(geometry.rows());
                let x = blocks.min(gpu.max_workgroups_per_dimension());
                ([x, blocks.div_ceil(x)], split, split_len)
            }
        };
        let grid = [grid_xy[0], grid_xy[1], shape.batch.saturating_mul(split)];
        check_grid(OP, gpu, grid, format!("{extents:?}"))?;
        if split == 1 {
            let kernel = self.kernel(gpu, Kernel::Direct)?;
            let scalars = finish_scalars(false, scale);
            let mut args = vec![("a", a), ("b", b), ("c", c)];
            args.extend(d);
            return kernel.record(batch, shader::ENTRY, &args, &scalars, grid);
        }
        let partial = self.kernel(gpu, Kernel::Partial)?;
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
            None,
            scale,
            shape,
            run,
        )
    }
}
