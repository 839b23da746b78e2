//! One product of a layer: the `f32`-summing [`MatmulOp`], the [`NarrowMatmulOp`] of a product
//! with a narrow side, and the tensor-core [`CoopMatmulOp`] where it can run there.
//!
//! A product with a side of at most [`NARROW`](super::narrow::NARROW) (a static extent) and no
//! bias runs on the narrow kernels, whatever its factors and output: the GEMMs' tiles would
//! compute mostly padding (LoRA's rank-8 products took 18–32 µs on tensor cores at 8 × 512
//! tokens on an H100, against 12–29 µs narrow; see BENCHMARKS.md). Otherwise a product runs on
//! tensor cores when the device has cooperative matrices, both factors are
//! `f16` and it overwrites its output with factor 1 (the cooperative kernel has no `alpha` or
//! `beta`; a biased product always overwrites); anything else runs on the `f32`-summing GEMM,
//! which every device has. An added product (`c = alpha · a·b + d`) runs the same way: every
//! kernel adds `d` as it writes `c`. The linear layer's three products and attention's six are
//! built from this.

use std::sync::Arc;

use fblayout_core::layout::{ElemType, View};

use super::{GemmShape, MatmulOp, Merge, NarrowMatmulOp, Scale};
use crate::ops::coop::{CoopConfig, CoopMatmulOp};
use crate::ops::error::OpError;
use crate::runtime::{Batch, Gpu, GpuBuffer, Scratch};
use crate::tensor::GpuArg;

/// Whether a product overwrites its output or adds to it, and by what factor.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Output {
    /// `out = product` (the old value is not read).
    Overwrite,
    /// `out += product`.
    Accumulate,
    /// `out = factor · product` (the old value is not read): a layer whose weight is read
    /// scaled (LoRA's `alpha / rank`), with no pass of its own.
    Scaled(f32),
}

impl Output {
    /// `out = factor · product`: [`Output::Overwrite`] where `factor` is 1.
    pub fn scaled(factor: f32) -> Self {
        if factor == 1.0 {
            Self::Overwrite
        } else {
            Self::Scaled(factor)
        }
    }

    /// The GEMM factors of this output.
    pub fn scale(self) -> Scale {
        match self {
            Self::Overwrite => Scale::OVERWRITE,
            Self::Accumulate => Scale::ACCUMULATE,
            Self::Scaled(alpha) => Scale { alpha, beta: 0.0 },
        }
    }
}

/// Whether a product whose factors are of the element types `factors` runs on tensor cores
/// where the device has them: both `f16`.
fn may_run_on_cores(factors: [ElemType; 2]) -> bool {
    factors.iter().all(|&e| e == ElemType::F16)
}

/// What a product adds as it writes its output, besides its factor.
#[derive(Clone, Copy)]
enum With<'a> {
    Nothing,
    Bias(&'a View),
    Addend(&'a View, Merge),
}

/// The `f32`-summing GEMM of a product, and the tensor-core one where it runs (see the module
/// docs).
#[derive(Debug, Clone)]
pub(crate) struct Product {
    f32: MatmulOp,
    narrow: Option<Arc<NarrowMatmulOp>>,
    coop: Option<Arc<CoopMatmulOp>>,
}

impl Product {
    /// The product `c = a·b` of the three views.
    pub(crate) fn new(gpu: &Gpu, a: &View, b: &View, c: &View) -> Result<Self, OpError> {
        Self::new_with(gpu, a, b, With::Nothing, c)
    }

    /// The biased product `c = a·b + bias` (`bias[n]` in every row, `c` overwritten).
    pub(crate) fn new_biased(
        gpu: &Gpu,
        a: &View,
        b: &View,
        bias: &View,
        c: &View,
    ) -> Result<Self, OpError> {
        Self::new_with(gpu, a, b, With::Bias(bias), c)
    }

    /// The added product `c = alpha · a·b ⊕ d` (`d` of `c`'s extents, any layout, joining the
    /// sum as `merge` says; `c` overwritten): on the narrow kernel where the reduction is
    /// short ([`is_short`](super::narrow::is_short)), else on tensor cores where the product
    /// runs there, else on the `f32`-summing GEMM, each reading `d` as it writes `c`.
    pub(crate) fn new_added(
        gpu: &Gpu,
        a: &View,
        b: &View,
        d: &View,
        c: &View,
        merge: Merge,
    ) -> Result<Self, OpError> {
        Self::new_with(gpu, a, b, With::Addend(d, merge), c)
    }

    fn new_with(gpu: &Gpu, a: &View, b: &View, with: With<'_>, c: &View) -> Result<Self, OpError> {
        let f32 = match with {
            With::Bias(bias) => MatmulOp::new_biased(gpu, a, b, bias, c)?,
            With::Addend(d, merge) => MatmulOp::new_merged(gpu, a, b, d, c, merge)?,
            With::Nothing => MatmulOp::new(gpu, a, b, c)?,
        };
        let narrow = match with {
            With::Bias(_) => None,
            With::Addend(d, merge) => match NarrowMatmulOp::new_merged(gpu, a, b, d, c, merge) {
                Ok(op) => Some(Arc::new(op)),
                // Not a short reduction: a GEMM adds it.
                Err(OpError::Unsupported { .. }) => None,
                Err(other) => return Err(other),
            },
            With::Nothing => match NarrowMatmulOp::new(gpu, a, b, c) {
                Ok(op) => Some(Arc::new(op)),
                // No narrow side: a GEMM runs.
                Err(OpError::Unsupported { .. }) => None,
                Err(other) => return Err(other),
            },
        };
        let halves = may_run_on_cores([a, b].map(|v| v.layout().elem()));
        let coop = if narrow.is_none() && halves && gpu.features().coop_fragment.is_some() {
            let built = match with {
                With::Bias(bias) => CoopMatmulOp::new_biased(gpu, a, b, bias, c),
                With::Addend(d, merge) => CoopMatmulOp::new_merged(gpu, a, b, d, c, merge),
                With::Nothing => CoopMatmulOp::new(gpu, a, b, c),
            };
            match built {
                Ok(op) => Some(Arc::new(op)),
                // Operands or a device the tensor-core path does not take: the f32 path runs.
                Err(OpError::Unsupported { .. }) => None,
                Err(other) => return Err(other),
            }
        } else {
            None
        };
        Ok(Self { f32, narrow, coop })
    }

    /// The most scratch a product of `shape` whose factors are of the element types `factors`
    /// takes on any device: the larger of the `f32`-summing GEMM's and the narrow kernels', and
    /// where the factors may run on tensor cores the cooperative GEMM's (see their `scratch`).
    pub(crate) fn scratch(shape: GemmShape, factors: [ElemType; 2]) -> Result<Scratch, OpError> {
        let mut each = vec![MatmulOp::scratch(shape)?, NarrowMatmulOp::scratch(shape)?];
        if may_run_on_cores(factors) {
            each.push(CoopMatmulOp::scratch(shape)?);
        }
        Ok(Scratch::covering(each.iter()))
    }

    /// The `f32`-summing GEMM (also what checks a call's arguments).
    pub(crate) fn f32(&self) -> &MatmulOp {
        &self.f32
    }

    /// Whether the product runs on tensor cores when it overwrites its output.
    pub(crate) fn tensor_cores(&self) -> bool {
        self.coop.is_some()
    }

    /// Records the biased product `c = a·b + bias`, on tensor cores where it can run there
    /// (a biased product always overwrites).
    pub(crate) fn record_biased(
        &self,
        batch: &mut Batch<'_>,
        a: &GpuArg<'_>,
        b: &GpuArg<'_>,
        bias: &GpuArg<'_>,
        c: &GpuArg<'_>,
    ) -> Result<(), OpError> {
        match &self.coop {
            Some(coop) => coop.record_biased(batch, a, b, bias, c),
            None => self.f32.record_biased(batch, a, b, bias, c),
        }
    }

    /// Records the product, on the narrow kernels or on tensor cores where it runs there (an
    /// error for a biased product: see [`record_biased`](Self::record_biased)).
    pub(crate) fn record(
        &self,
        batch: &mut Batch<'_>,
        a: &GpuArg<'_>,
        b: &GpuArg<'_>,
        c: &GpuArg<'_>,
        out: Output,
    ) -> Result<(), OpError> {
        match (&self.narrow, &self.coop, out) {
            (Some(narrow), _, _) => narrow.record(batch, a, b, c, out.scale()),
            (None, Some(coop), Output::Overwrite) => coop.record(batch, a, b, c),
            _ => self.f32.record(batch, a, b, c, out.scale()),
        }
    }

    /// Records the added product `c = factor · a·b + d` (`out`'s factor; on tensor cores only
    /// with factor 1, which is all they do) of an op built by [`new_added`](Self::new_added);
    /// an error for any other, or for an `out` that accumulates.
    pub(crate) fn record_added(
        &self,
        batch: &mut Batch<'_>,
        a: &GpuArg<'_>,
        b: &GpuArg<'_>,
        d: &GpuArg<'_>,
        c: &GpuArg<'_>,
        out: Output,
    ) -> Result<(), OpError> {
        let Scale { alpha, beta: 0.0 } = out.scale() else {
            return Err(OpError::shape(
                "matmul",
                "an added product overwrites its output, built with a matrix to add",
            ));
        };
        match (&self.narrow, &self.coop) {
            (Some(narrow), _) => narrow.record_added(batch, a, b, d, c, alpha),
            (None, Some(coop)) if alpha == 1.0 => coop.record_added(batch, a, b, d, c),
            _ => self.f32.record_added(batch, a, b, d, c, alpha),
        }
    }

    /// Tunes the tensor-core product on `a`, `b` and a scratch output shaped like `c` (so
    /// nothing of the arguments is overwritten; a biased product with a zero bias of its own), from the [shortlist](shortlist) once per
    /// adapter and problem. Does nothing where the product does not run on tensor cores.
    pub(crate) fn tune(
        &self,
        gpu: &Gpu,
        a: &GpuArg<'_>,
        b: &GpuArg<'_>,
        c: &GpuArg<'_>,
    ) -> Result<(), OpError> {
        let Some(coop) = &self.coop else {
            return Ok(());
        };
        let scratch = GpuBuffer::scratch::<u8>(gpu, c.buffer().len_bytes() as usize)?;
        let c = GpuArg::bound(&scratch, c.view(), c.bound_view().clone())?;
        let extents = coop.extents(gpu, a, b, &c)?;
        let candidates = coop.candidates_for(&extents);
        let narrow = extents.n < 64;
        let short: Vec<CoopConfig> = candidates
            .iter()
            .copied()
            .filter(|k| shortlist(k, coop.accumulator(), narrow))
            .collect();
        let among = if short.is_empty() {
            &candidates
        } else {
            &short
        };
        coop.tune_among(gpu, among, a, b, &c)?;
        Ok(())
    }
}

/// The tile shapes (block and fragments per subgroup) [`Product::tune`] measures,
/// single-staged with the device's accumulator and the k-steps of [`TUNE_K_STEPS`]: the ones
/// that won some product of a transformer layer on the H200 (see BENCHMARKS.md), a short search
/// where the whole space takes minutes a model.
const TUNE_SHORTLIST: [(u32, u32, u32, u32); 6] = [
    (64, 64, 2, 2),
    (128, 128, 2, 4),
    (128, 128, 4, 2),
    (128, 128, 4, 4),
    (256, 128, 4, 4),
    (128, 256, 4, 4),
];

/// The tile shapes measured besides [`TUNE_SHORTLIST`] for a product whose output has fewer
/// than 64 columns (attention's `P·V` and gradients at a head width of 32), where a 64-wide
/// block would compute half its fragments for nothing.
const NARROW_SHORTLIST: [(u32, u32, u32, u32); 3] =
    [(64, 32, 2, 2), (128, 32, 2, 2), (128, 32, 4, 2)];

/// The k-steps [`Product::tune`] measures.
const TUNE_K_STEPS: [u32; 2] = [32, 64];

/// Whether [`Product::tune`] measures `config`: every split-k candidate (such a problem has a
/// short list of its own), else the shortlisted shapes and k-steps, single-staged, with the
/// device's accumulator `acc`.
fn shortlist(config: &CoopConfig, acc: crate::runtime::CoopScalar, narrow: bool) -> bool {
    let shape = (
        config.block_m,
        config.block_n,
        config.frags_m,
        config.frags_n,
    );
    config.split_k > 1
        || ((TUNE_SHORTLIST.contains(&shape) || (narrow && NARROW_SHORTLIST.contains(&shape)))
            && TUNE_K_STEPS.contains(&config.k_step)
            && config.stages == 1
            && config.acc == acc)
}
