//! A linear layer's three GEMMs, built from the declarations of x, w and y.
//!
//! `y = x·w` with `x [tokens, d_in]`, `w [d_in, d_out]`, `y [tokens, d_out]`. With the loss's
//! gradient `dy` (read through y's view):
//!
//! - `dx = dy · wᵀ`, written through x's view;
//! - `dw = xᵀ · dy`, written through w's view.
//!
//! `wᵀ` and `xᵀ` are views of the same declarations (their two axes swapped): the backward reads
//! the forward's tensors where they are, whatever their layouts. Each output can overwrite or
//! accumulate ([`Output`]): gradient accumulation over micro-batches adds into `dw`, and a
//! residual branch adds into `dx`.
//!
//! Built with a bias ([`LinearOp::new_biased`]), the forward is `y = x·w + b` with `b [d_out]`
//! added in the GEMM's epilogue (no separate pass over `y`; it always overwrites `y`); the
//! backward GEMMs are the same, and `db = Σ_tokens dy` stays the bias kernel's.
//!
//! Where the device has tensor cores (cooperative matrices, see
//! [`CoopMatmulOp`](crate::ops::coop::CoopMatmulOp)) and a product's two factors are `f16`,
//! that product runs on them when it overwrites its output (mixed-precision training: `f16`
//! activations and weight copies, `f32` weight gradients); an accumulating product, and every
//! product elsewhere, runs on the `f32`-summing [`MatmulOp`]. [`LinearOp::tune`] chooses the tensor-core tiles of the three products.

use fblayout_core::layout::{ElemType, View};

pub use super::product::Output;
use super::product::Product;
use super::{GemmShape, MatmulOp, Merge, matmul_cpu};
use crate::cpu::{Logical, LogicalMut, Real};
use crate::ops::error::OpError;
use crate::runtime::{Batch, Gpu, Scratch};
use crate::tensor::GpuArg;

const OP: &str = "linear";

/// The view with its two axes swapped.
fn transposed(view: &View) -> Result<View, OpError> {
    match view.axes() {
        [a, b] => Ok(view.transpose(&a.name, &b.name)?),
        axes => Err(OpError::shape(
            OP,
            format!(
                "`{}` has rank {}; a linear layer's operands are matrices",
                view.name(),
                axes.len()
            ),
        )),
    }
}

/// `arg`'s buffer and extents read through `view` (another view of the same tensor).
pub(crate) fn through<'a>(arg: &GpuArg<'a>, view: &'a View) -> Result<GpuArg<'a>, OpError> {
    Ok(arg.through(view)?)
}

/// The forward and backward GEMMs of a linear layer (see the module docs).
#[derive(Debug, Clone)]
pub struct LinearOp {
    forward: Product,
    grad_x: Product,
    grad_w: Product,
    x_t: View,
    w_t: View,
}

impl LinearOp {
    /// The GEMMs of `y = x·w` for views `x [tokens, d_in]`, `w [d_in, d_out]` and `y [tokens,
    /// d_out]`, and of its backward.
    pub fn new(gpu: &Gpu, x: &View, w: &View, y: &View) -> Result<Self, OpError> {
        Self::new_with(gpu, x, w, y, |x, w, y| Product::new(gpu, x, w, y), None)
    }

    /// Like [`new`](Self::new), with the bias `b`, a rank-1 view `[d_out]` (`f32` or `f16`,
    /// any layout) whose extent is y's last (a shape error otherwise): its forward product
    /// ([`forward_biased`](Self::forward_biased)) is `y = x·w + b`, the bias added in the
    /// GEMM's epilogue. The backward products are unchanged; the bias's gradient is
    /// [`BiasOp::backward`](crate::ops::bias::BiasOp::backward)'s.
    pub fn new_biased(gpu: &Gpu, x: &View, w: &View, b: &View, y: &View) -> Result<Self, OpError> {
        Self::new_with(
            gpu,
            x,
            w,
            y,
            |x, w, y| Product::new_biased(gpu, x, w, b, y),
            None,
        )
    }

    /// Like [`new`](Self::new), with the matrix `d` of y's extents (any layout): its forward
    /// product ([`forward_added`](Self::forward_added)) is `y = x·w + d`, `d` added as `y` is
    /// written (LoRA's last product, whose sum with the base layer's output takes no pass of
    /// its own).
    pub fn new_added(gpu: &Gpu, x: &View, w: &View, d: &View, y: &View) -> Result<Self, OpError> {
        Self::new_with(
            gpu,
            x,
            w,
            y,
            |x, w, y| Product::new_added(gpu, x, w, d, y, Merge::Add),
            None,
        )
    }

    /// Like [`new`](Self::new), with the matrix `d` of x's extents (any layout): its input's
    /// gradient ([`backward_added`](Self::backward_added)) is `dx = dy·wᵀ ⊕ d`, `d` read as
    /// `dx` is written and joining it as `merge` says: [`Merge::Add`] for a gradient's sum of
    /// this contribution and the ones before it, [`Merge::ActivationGrad`] for the backward of
    /// the activation whose output `x` feeds this layer (`d` its input), with no pass of its
    /// own.
    pub fn new_grad_added(
        gpu: &Gpu,
        x: &View,
        w: &View,
        d: &View,
        y: &View,
        merge: Merge,
    ) -> Result<Self, OpError> {
        let forward = |x: &View, w: &View, y: &View| Product::new(gpu, x, w, y);
        Self::new_with(gpu, x, w, y, forward, Some((d, merge)))
    }

    /// The op whose forward product `forward` builds from `x`, `w` and `y`, whose input's
    /// gradient adds `grad_d` where there is one.
    fn new_with(
        gpu: &Gpu,
        x: &View,
        w: &View,
        y: &View,
        forward: impl FnOnce(&View, &View, &View) -> Result<Product, OpError>,
        grad_d: Option<(&View, Merge)>,
    ) -> Result<Self, OpError> {
        let (x_t, w_t) = (transposed(x)?, transposed(w)?);
        transposed(y)?;
        let forward = forward(x, w, y)?;
        let grad_x = match grad_d {
            Some((d, merge)) => Product::new_added(gpu, y, &w_t, d, x, merge)?,
            None => Product::new(gpu, y, &w_t, x)?,
        };
        Ok(Self {
            forward,
            grad_x,
            grad_w: Product::new(gpu, &x_t, y, w)?,
            x_t,
            w_t,
        })
    }

    /// The most scratch each product takes on any device for `tokens` rows of `d_in` inputs
    /// and `d_out` outputs, the views `x`, `w` and `y` of the op being of the element types
    /// `elems`: the forward's (`y = x·w`), `dx`'s (`dy·wᵀ`, `dy` of `y`'s type) and `dw`'s
    /// (`xᵀ·dy`). Split-k's partial sums, where a product may split its reduction (see
    /// [`MatmulOp::scratch`]).
    pub fn scratch(
        tokens: u32,
        d_in: u32,
        d_out: u32,
        elems: [ElemType; 3],
    ) -> Result<[Scratch; 3], OpError> {
        let [x, w, y] = elems;
        let shape = |m, n, k| GemmShape { batch: 1, m, n, k };
        Ok([
            Product::scratch(shape(tokens, d_out, d_in), [x, w])?,
            Product::scratch(shape(tokens, d_in, d_out), [y, w])?,
            Product::scratch(shape(d_in, d_out, tokens), [x, y])?,
        ])
    }

    /// Whether the forward adds a bias (built by [`new_biased`](Self::new_biased)).
    pub fn has_bias(&self) -> bool {
        self.forward.f32().has_bias()
    }

    /// The three `f32`-summing GEMMs: forward, `dx` and `dw` (to choose their plans, or read
    /// their kernels).
    pub fn gemms(&self) -> [&MatmulOp; 3] {
        [self.forward.f32(), self.grad_x.f32(), self.grad_w.f32()]
    }

    /// Whether each product (forward, `dx`, `dw`) runs on tensor cores when it overwrites its
    /// output.
    pub fn tensor_cores(&self) -> [bool; 3] {
        [&self.forward, &self.grad_x, &self.grad_w].map(Product::tensor_cores)
    }

    /// Chooses the tensor-core tiles of the three products for the extents of `x`, `w` and
    /// `y` (`dy`, `dx` and `dw` are shaped like them), by timing a short list of
    /// configurations once per adapter and problem (kept with the autotune's results, see
    /// [`CoopMatmulOp::tune`](crate::ops::coop::CoopMatmulOp::tune)). Outputs go to scratch
    /// buffers: nothing of the arguments is overwritten. A biased forward is tuned as the biased product, with a zero bias of its
    /// own. Does nothing where no product runs on tensor cores.
    pub fn tune(
        &self,
        gpu: &Gpu,
        x: &GpuArg<'_>,
        w: &GpuArg<'_>,
        y: &GpuArg<'_>,
    ) -> Result<(), OpError> {
        self.forward.f32().extents(gpu, x, w, y)?;
        let (x_t, w_t) = (through(x, &self.x_t)?, through(w, &self.w_t)?);
        self.forward.tune(gpu, x, w, y)?;
        self.grad_x.tune(gpu, y, &w_t, x)?;
        self.grad_w.tune(gpu, &x_t, y, w)
    }

    /// Records `y = x·w + b` (overwriting `y`), `b` read through the bias's view; an error for
    /// an op built without a bias.
    pub fn forward_biased(
        &self,
        batch: &mut Batch<'_>,
        x: &GpuArg<'_>,
        w: &GpuArg<'_>,
        b: &GpuArg<'_>,
        y: &GpuArg<'_>,
    ) -> Result<(), OpError> {
        self.forward.record_biased(batch, x, w, b, y)
    }

    /// Records `y = factor · x·w + d` (`out`'s factor: [`Output::Overwrite`] or
    /// [`Output::Scaled`]), `d` read through the view it was built with; an error for an op
    /// built without one (see [`new_added`](Self::new_added)).
    pub fn forward_added(
        &self,
        batch: &mut Batch<'_>,
        x: &GpuArg<'_>,
        w: &GpuArg<'_>,
        d: &GpuArg<'_>,
        y: &GpuArg<'_>,
        out: Output,
    ) -> Result<(), OpError> {
        self.forward.record_added(batch, x, w, d, y, out)
    }

    /// Records `y = x·w` (or `y += x·w`); an error for an op built with a bias (see
    /// [`forward_biased`](Self::forward_biased)).
    pub fn forward(
        &self,
        batch: &mut Batch<'_>,
        x: &GpuArg<'_>,
        w: &GpuArg<'_>,
        y: &GpuArg<'_>,
        out: Output,
    ) -> Result<(), OpError> {
        self.forward.record(batch, x, w, y, out)
    }

    /// Records `dx = factor · dy·wᵀ ⊕ d` (`out`'s factor: [`Output::Overwrite`] or
    /// [`Output::Scaled`]), `d` read through the view the op was built with and `dx` written
    /// through x's; an error for an op built without one (see
    /// [`new_grad_added`](Self::new_grad_added)).
    pub fn backward_added(
        &self,
        batch: &mut Batch<'_>,
        w: &GpuArg<'_>,
        dy: &GpuArg<'_>,
        d: &GpuArg<'_>,
        dx: &GpuArg<'_>,
        out: Output,
    ) -> Result<(), OpError> {
        let w_t = through(w, &self.w_t)?;
        self.grad_x.record_added(batch, dy, &w_t, d, dx, out)
    }

    /// Records the gradients of the inputs: `dx = dy · wᵀ` and `dw = xᵀ · dy`, each when asked
    /// for, overwriting or accumulating. `dy` is read through y's view, `dx` written through
    /// x's and `dw` through w's. Every argument is checked before anything is recorded.
    pub fn backward(
        &self,
        batch: &mut Batch<'_>,
        x: &GpuArg<'_>,
        w: &GpuArg<'_>,
        dy: &GpuArg<'_>,
        dx: Option<(&GpuArg<'_>, Output)>,
        dw: Option<(&GpuArg<'_>, Output)>,
    ) -> Result<(), OpError> {
        let gpu = batch.gpu();
        // x and w must be read through the views the op was built for before their
        // transposes are taken.
        self.forward.f32().extents(gpu, x, w, dy)?;
        let (x_t, w_t) = (through(x, &self.x_t)?, through(w, &self.w_t)?);
        if let Some((dx, _)) = dx {
            self.grad_x.f32().extents(gpu, dy, &w_t, dx)?;
        }
        if let Some((dw, _)) = dw {
            self.grad_w.f32().extents(gpu, &x_t, dy, dw)?;
        }
        if let Some((dx, out)) = dx {
            self.grad_x.record(batch, dy, &w_t, dx, out)?;
        }
        if let Some((dw, out)) = dw {
            self.grad_w.record(batch, &x_t, dy, dw, out)?;
        }
        Ok(())
    }
}

/// A matrix read through its transpose.
struct Transposed<'a, T> {
    inner: &'a dyn Logical<T>,
    dims: [usize; 2],
}

impl<'a, T> Transposed<'a, T> {
    fn new(inner: &'a dyn Logical<T>) -> Result<Self, OpError> {
        match *inner.dims() {
            [r, c] => Ok(Self {
                inner,
                dims: [c, r],
            }),
            ref d => Err(OpError::shape(
                OP,
                format!("an operand has shape {d:?}; a linear layer's operands are matrices"),
            )),
        }
    }
}

impl<T> Logical<T> for Transposed<'_, T> {
    fn dims(&self) -> &[usize] {
        &self.dims
    }
    fn get(&self, index: &[usize]) -> T {
        self.inner.get(&[index[1], index[0]])
    }
}

/// `y = x·w` (or `y += x·w`) on the CPU.
pub fn linear_forward_cpu<T: Real>(
    x: &dyn Logical<T>,
    w: &dyn Logical<T>,
    y: &mut dyn LogicalMut<T>,
    out: Output,
) -> Result<(), OpError> {
    matmul_cpu(x, w, y, out.scale())
}

/// `dx = dy · wᵀ` and `dw = xᵀ · dy` on the CPU, each when asked for.
pub fn linear_backward_cpu<T: Real>(
    x: &dyn Logical<T>,
    w: &dyn Logical<T>,
    dy: &dyn Logical<T>,
    dx: Option<(&mut dyn LogicalMut<T>, Output)>,
    dw: Option<(&mut dyn LogicalMut<T>, Output)>,
) -> Result<(), OpError> {
    if let Some((dx, out)) = dx {
        matmul_cpu(dy, &Transposed::new(w)?, dx, out.scale())?;
    }
    if let Some((dw, out)) = dw {
        matmul_cpu(&Transposed::new(x)?, dy, dw, out.scale())?;
    }
    Ok(())
}
