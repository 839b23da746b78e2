//! One product of a layer: the `f32`-summing [`MatmulOp`], and the tensor-core
//! [`CoopMatmulOp`] where it can run there.
//!
//! A product runs on tensor cores when the device has cooperative matrices, both factors are
//! `f16` and it overwrites its output with factor 1 (the cooperative kernel has no `alpha` or
//! `beta`; a biased product always overwrites); anything else runs on the `f32`-summing GEMM,
//! which every device has. The linear
//! layer's three products and attention's six are built from this.
//!
//! A linear layer's product with a side of at most [`THIN`] known when it is built (LoRA's
//! rank-8 products: `x·Aᵀ`, `u·Bᵀ` and both adapters' weight gradients) runs on the
//! `f32`-summing GEMM too ([`Product::linear`]): the tensor-core blocks are 32 to 256 wide and
//! 16×16 fragments deep, so such a product computes 2 to 16 times what it needs and walks its
//! long side in few workgroups. On an H100 (BENCHMARKS.md) the tensor-core kernels took 21 to
//! 36 µs for each of the Llama-family LoRA step's 420 rank-8 products, longer than its
//! 576 × 192 projection's 18 µs.

use std::sync::Arc;

use fblayout_core::layout::{ElemType, View};

use super::{GemmShape, MatmulOp, Scale};
use crate::ops::coop::{CoopConfig, CoopMatmulOp};
use crate::ops::error::OpError;
use crate::runtime::{Batch, Gpu, GpuBuffer, Scratch};
use crate::tensor::GpuArg;

/// Whether a product overwrites its output or adds to it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Output {
    /// `out = product` (the old value is not read).
    Overwrite,
    /// `out += product`.
    Accumulate,
}

impl Output {
    /// The GEMM factors of this output.
    pub fn scale(self) -> Scale {
        match self {
            Self::Overwrite => Scale::OVERWRITE,
            Self::Accumulate => Scale::ACCUMULATE,
        }
    }
}

/// Whether a product whose factors are of the element types `factors` runs on tensor cores
/// where the device has them: both `f16`.
fn may_run_on_cores(factors: [ElemType; 2]) -> bool {
    factors.iter().all(|&e| e == ElemType::F16)
}

/// The `f32`-summing GEMM of a product, and the tensor-core one where it runs (see the module
/// docs).
#[derive(Debug, Clone)]
pub(crate) struct Product {
    f32: MatmulOp,
    coop: Option<Arc<CoopMatmulOp>>,
}

/// The widest side (rows, columns or reduction) of a linear layer's product that runs on the
/// `f32`-summing GEMM though the device has tensor cores (see the module docs).
pub(crate) const THIN: u64 = 16;

/// Whether the product `c = a·b` has a side of at most [`THIN`] known from its views: `m` (A's
/// and C's rows), `n` (B's and C's columns) or `k` (A's columns, B's rows), a static extent
/// of any of the views that holds it.
fn thin(a: &View, b: &View, c: &View) -> bool {
    let rank = c.axes().len();
    if rank < 2 || a.axes().len() != rank || b.axes().len() != rank {
        return false;
    }
    let (m, n) = (rank - 2, rank - 1);
    [(a, m), (c, m), (b, n), (c, n), (a, n), (b, m)]
        .iter()
        .any(|(v, i)| v.axes()[*i].extent.as_static().is_some_and(|e| e <= THIN))
}

impl Product {
    /// The product `c = a·b` of the three views.
    pub(crate) fn new(gpu: &Gpu, a: &View, b: &View, c: &View) -> Result<Self, OpError> {
        Self::new_with(gpu, a, b, None, c, true)
    }

    /// A linear layer's product `c = a·b`, or `c = a·b + bias` (`bias[n]` in every row, `c`
    /// overwritten) where given: like [`new`](Self::new), but on the `f32`-summing GEMM where
    /// a side is at most [`THIN`] (see the module docs).
    pub(crate) fn linear(
        gpu: &Gpu,
        a: &View,
        b: &View,
        bias: Option<&View>,
        c: &View,
    ) -> Result<Self, OpError> {
        Self::new_with(gpu, a, b, bias, c, !thin(a, b, c))
    }

    fn new_with(
        gpu: &Gpu,
        a: &View,
        b: &View,
        bias: Option<&View>,
        c: &View,
        cores: bool,
    ) -> Result<Self, OpError> {
        let f32 = match bias {
            Some(bias) => MatmulOp::new_biased(gpu, a, b, bias, c)?,
            None => MatmulOp::new(gpu, a, b, c)?,
        };
        let halves = may_run_on_cores([a, b].map(|v| v.layout().elem()));
        let coop = if cores && halves && gpu.features().coop_fragment.is_some() {
            let built = match bias {
                Some(bias) => CoopMatmulOp::new_biased(gpu, a, b, bias, c),
                None => CoopMatmulOp::new(gpu, a, b, c),
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
        Ok(Self { f32, coop })
    }

    /// The most scratch a product of `shape` whose factors are of the element types `factors`
    /// takes on any device: the `f32`-summing GEMM's, or where the factors may run on tensor
    /// cores the larger of its and the cooperative GEMM's (see their `scratch`).
    pub(crate) fn scratch(shape: GemmShape, factors: [ElemType; 2]) -> Result<Scratch, OpError> {
        let f32 = MatmulOp::scratch(shape)?;
        if !may_run_on_cores(factors) {
            return Ok(f32);
        }
        Ok(Scratch::covering([&f32, &CoopMatmulOp::scratch(shape)?]))
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

    /// Records the product, on tensor cores where it can run there (an error for a biased
    /// product: see [`record_biased`](Self::record_biased)).
    pub(crate) fn record(
        &self,
        batch: &mut Batch<'_>,
        a: &GpuArg<'_>,
        b: &GpuArg<'_>,
        c: &GpuArg<'_>,
        out: Output,
    ) -> Result<(), OpError> {
        match (&self.coop, out) {
            (Some(coop), Output::Overwrite) => coop.record(batch, a, b, c),
            _ => self.f32.record(batch, a, b, c, out.scale()),
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

#[cfg(test)]
mod tests {
    use fblayout_core::layout::{LayoutSpec, View};

    use super::thin;

    /// A row-major `[rows, cols]` view, `rows` dynamic where `None`.
    fn matrix(name: &str, rows: Option<u32>, cols: u32) -> View {
        let spec = LayoutSpec::new(name);
        let spec = match rows {
            Some(r) => spec.axis("rows", r),
            None => spec.dyn_axis("rows"),
        };
        spec.axis("cols", cols).build().unwrap().view()
    }

    /// The sides of a linear layer's three products, as LoRA's rank-8 adapters and a
    /// projection have them: tokens are a run-time extent, the rest static.
    #[test]
    fn a_static_side_of_16_or_less_makes_a_product_thin() {
        let t = |v: &View| v.transpose("rows", "cols").unwrap();
        // x [tokens, 576] · Aᵀ [576, 8] → [tokens, 8]: n is 8.
        let (x, a_t, xa) = (
            matrix("x", None, 576),
            matrix("a_t", Some(576), 8),
            matrix("xa", None, 8),
        );
        assert!(thin(&x, &a_t, &xa));
        // xa [tokens, 8] · B [8, 576]: k is 8.
        let (b, y) = (matrix("b", Some(8), 576), matrix("y", None, 576));
        assert!(thin(&xa, &b, &y));
        // The weight gradient xᵀ [576, tokens] · dxa [tokens, 8] → [576, 8]: n is 8.
        assert!(thin(&t(&x), &xa, &a_t));
        // A projection's products: 576 × 192 over run-time tokens.
        let (w, y) = (matrix("w", Some(576), 192), matrix("y", None, 192));
        assert!(!thin(&x, &w, &y));
        assert!(!thin(&y, &t(&w), &x));
        assert!(!thin(&t(&x), &y, &w));
        // 16 is thin, 17 is not.
        for (cols, want) in [(16, true), (17, false)] {
            let (w, y) = (matrix("w", Some(576), cols), matrix("y", None, cols));
            assert_eq!(thin(&x, &w, &y), want, "{cols}");
        }
    }
}
