//! LayerNorm and RMSNorm over the last axis of `[rows, cols]` views, forward and backward.
//!
//! - **LayerNorm**: `y = (x − μ)/√(σ² + ε) · γ + β` per row, with `μ` and `σ²` the row's mean and
//!   (biased) variance. The forward saves `mean = μ` and `rstd = 1/√(σ² + ε)` per row. With
//!   `x̂ = (x − μ) · rstd` and `g = dy · γ`, the backward is
//!   `dx = rstd · (g − mean(g) − x̂ · mean(g · x̂))`, `dγ = Σ_rows dy · x̂`, `dβ = Σ_rows dy`.
//! - **RMSNorm** (Llama): `y = x · rstd · γ` with `rstd = 1/√(mean(x²) + ε)`, saved per row;
//!   `dx = rstd · (g − x · rstd² · mean(g · x))`, `dγ = Σ_rows dy · x · rstd`.
//!
//! Means run over the `cols` elements of a row. A 3-D activation `[batch, seq, hidden]` is
//! passed through a merge view (`batch, seq → tokens`); `mean` and `rstd` are vectors over the
//! rows, `γ` and `β` over the columns. Kernels are built for the views of their tensors
//! ([`LayerNormOp::new`]); the backward reads `dy` through `y`'s view and writes `dx` through
//! `x`'s, `dγ` through `γ`'s and `dβ` through `β`'s, so one layout definition serves both
//! passes. Sums are accumulated in `f32` on the GPU whatever the storage, and in `f64` on the
//! CPU ([`layer_norm_forward_cpu`] and the other `*_cpu` twins).
//!
//! On the GPU a workgroup normalises a block of rows at once, a few lanes on each row (stacking
//! the rows of R-Tile tile rows, so that the lanes running together read whole tiles), keeping
//! the rows in registers: `x` is read once. A row's sums add over its own lanes: by subgroup
//! shuffles where the device has subgroups, without a barrier. The backward is fused: `dx` and
//! the partial sums of `dγ` (and `dβ`) over a chunk of rows come out of one pass over `x` and
//! `dy`, and a second, small pass adds the partial sums. How many lanes share a row, how many
//! rows a block holds and a chunk walks are the op's launch shapes ([`NormLaunch`]), with
//! defaults; [`NormLaunch::BASELINE`] builds the kernels as they were before them, with one
//! whole-workgroup sum per row. The default ([`RowSum::Auto`]) takes the lanes' sums only where
//! the H200 ran them faster (row-major rows one subgroup covers), the baseline elsewhere.
//!
//! The CPU twins take any addressing; here a 3 × 8 R-Tile (4 × 4 tiles, rows padded):
//!
//! ```
//! use fblayout_core::layout::LayoutSpec;
//! use fblayout_kernels::ops::norm::layer_norm_forward_cpu;
//! use fblayout_kernels::tensor::{HostArg, HostArgMut};
//!
//! let x = LayoutSpec::new("x").dyn_axis("rows").tile(4, true).axis("cols", 8).tile(4, true)
//!     .rtile().reduce_forward(["cols"]).reduce_backward(["rows"]).build()?;
//! let vector = |name: &str, axis: &str, n| LayoutSpec::new(name).axis(axis, n).build();
//! let (cols, rows) = (vector("gamma", "cols", 8)?, vector("stat", "rows", 3)?);
//! let bound = x.bind(&[("rows", 3)])?;
//! let xs: Vec<f64> = (0..bound.len()).map(|i| (i % 5) as f64).collect();
//! let ones = vec![1.0; 8];
//! let zeros = vec![0.0; 8];
//! let (mut y, mut mean, mut rstd) = (vec![0.0; xs.len()], vec![0.0; 3], vec![0.0; 3]);
//! let (cols, rows) = (cols.bind(&[])?, rows.bind(&[])?);
//! layer_norm_forward_cpu(
//!     &HostArg::bound(&xs, &bound)?,
//!     &HostArg::bound(&ones, &cols)?,
//!     &HostArg::bound(&zeros, &cols)?,
//!     1e-5,
//!     &mut HostArgMut::bound(&mut y, &bound)?,
//!     &mut HostArgMut::bound(&mut mean, &rows)?,
//!     &mut HostArgMut::bound(&mut rstd, &rows)?,
//! )?;
//! // Every row of y has mean 0.
//! let row0: f64 = (0..8).map(|c| y[bound.offset(&[0, c]).unwrap() as usize]).sum();
//! assert!(row0.abs() < 1e-12);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod cpu;
mod launch;
mod rows;

use fblayout_core::kernel::KernelModule;
use fblayout_core::layout::View;

pub use cpu::{
    layer_norm_backward_cpu, layer_norm_forward_cpu, rms_norm_backward_cpu, rms_norm_forward_cpu,
};
pub use launch::{LaunchShape, NormLaunch, RowLaunch, RowSum, SumForm};
use rows::{Kind, NormKernels, Views};

use super::error::OpError;
use crate::runtime::{Batch, Gpu, Scratch};
use crate::tensor::GpuArg;

/// The tensors of a LayerNorm, each a `T`: views to build its kernels, GPU arguments to run
/// them.
#[derive(Debug, Clone, Copy)]
pub struct LayerNormTensors<T> {
    /// The input, `[rows, cols]`.
    pub x: T,
    /// The scale `γ`, `[cols]`.
    pub gamma: T,
    /// The shift `β`, `[cols]`.
    pub beta: T,
    /// The output, `[rows, cols]`.
    pub y: T,
    /// The mean of each row, `[rows]`, saved by the forward.
    pub mean: T,
    /// `1/√(σ² + ε)` of each row, `[rows]`, saved by the forward.
    pub rstd: T,
}

/// The gradients of a LayerNorm: `dy` in, the others out.
#[derive(Debug, Clone, Copy)]
pub struct LayerNormGrads<T> {
    /// The gradient of the output (read through `y`'s view).
    pub dy: T,
    /// The gradient of the input (written through `x`'s view).
    pub dx: T,
    /// The gradient of `γ`.
    pub dgamma: T,
    /// The gradient of `β`.
    pub dbeta: T,
}

/// The tensors of an RMSNorm, each a `T` (see [`LayerNormTensors`]).
#[derive(Debug, Clone, Copy)]
pub struct RmsNormTensors<T> {
    /// The input, `[rows, cols]`.
    pub x: T,
    /// The scale `γ`, `[cols]`.
    pub gamma: T,
    /// The output, `[rows, cols]`.
    pub y: T,
    /// `1/√(mean(x²) + ε)` of each row, `[rows]`, saved by the forward.
    pub rstd: T,
}

/// The gradients of an RMSNorm: `dy` in, the others out.
#[derive(Debug, Clone, Copy)]
pub struct RmsNormGrads<T> {
    /// The gradient of the output (read through `y`'s view).
    pub dy: T,
    /// The gradient of the input (written through `x`'s view).
    pub dx: T,
    /// The gradient of `γ`.
    pub dgamma: T,
}

/// A residual connection fused into a norm's kernels (built with
/// [`LayerNormOp::fused`] or [`RmsNormOp::fused`]), each operand a `T`.
///
/// The forward normalises `x + res` instead of `x`, writing the sum to `sum` as it reads it:
/// the residual stream of a pre-norm block, and what the backward reads as its `x`. The
/// backward (built with the sum's view as `x`) adds `dsum`, the sum's gradient from its other
/// readers, to `dx`, so that `dx` is the sum's whole gradient. Either half may be fused alone,
/// and each saves a pass over the activations: an addition's read of both summands and write of
/// the sum, or an accumulation's read of two gradients and write of their sum.
#[derive(Debug, Clone, Copy)]
pub struct Residual<T> {
    /// The forward's second summand `res` and the sum `sum` it writes, `[rows, cols]` each.
    pub sum: Option<(T, T)>,
    /// The backward's `dsum`, `[rows, cols]`.
    pub carry: Option<T>,
}

impl<T> Residual<T> {
    /// No residual connection: the norm alone.
    pub fn none() -> Self {
        Self {
            sum: None,
            carry: None,
        }
    }
}

/// The views of `residual`, for [`Views`].
fn residual_views<'a>(
    residual: &Residual<&'a View>,
) -> (Option<(&'a View, &'a View)>, Option<&'a View>) {
    (residual.sum, residual.carry)
}

/// `args` with the forward's fused operands, where given.
fn with_sum<'a, 'b>(
    mut args: Vec<(&'static str, &'a GpuArg<'b>)>,
    sum: Option<[&'a GpuArg<'b>; 2]>,
) -> Vec<(&'static str, &'a GpuArg<'b>)> {
    if let Some([res, total]) = sum {
        args.extend([("res", res), ("sum", total)]);
    }
    args
}

/// `args` with the backward's `dsum`, where given.
fn with_carry<'a, 'b>(
    mut args: Vec<(&'static str, &'a GpuArg<'b>)>,
    dsum: Option<&'a GpuArg<'b>>,
) -> Vec<(&'static str, &'a GpuArg<'b>)> {
    if let Some(d) = dsum {
        args.push(("dsum", d));
    }
    args
}

/// LayerNorm, as a kind of [`NormOp`].
#[derive(Debug, Clone, Copy)]
pub struct LayerNorm;

/// RMSNorm, as a kind of [`NormOp`].
#[derive(Debug, Clone, Copy)]
pub struct RmsNorm;

/// A norm's kernels, built for the views of its tensors: [`LayerNormOp`] or [`RmsNormOp`].
#[derive(Debug, Clone)]
pub struct NormOp<K> {
    kernels: NormKernels,
    kind: std::marker::PhantomData<K>,
}

/// LayerNorm's kernels.
pub type LayerNormOp = NormOp<LayerNorm>;

/// RMSNorm's kernels.
pub type RmsNormOp = NormOp<RmsNorm>;

impl<K> NormOp<K> {
    fn built(kernels: NormKernels) -> Self {
        Self {
            kernels,
            kind: std::marker::PhantomData,
        }
    }

    /// Makes each workgroup of the backward take `rows` rows (rounded up to whole blocks)
    /// instead of the number chosen to fill the GPU: for tuning and tests (the launch's
    /// `chunk_rows`; 0 is refused when the backward is recorded).
    pub fn with_chunk_rows(mut self, rows: u32) -> Self {
        self.kernels.set_chunk(Some(rows));
        self
    }

    /// Rows of the layout's own block a workgroup of the forward takes together (more than one
    /// where a row alone is not contiguous, as in an R-Tile).
    pub fn rows_per_block(&self) -> u32 {
        self.kernels.walk().across
    }

    /// The shapes the forward and the backward were built with.
    pub fn launch_shapes(&self) -> [LaunchShape; 2] {
        self.kernels.launch_shapes()
    }

    /// Whether the row kernels move four elements per access.
    pub fn is_vectorized(&self) -> bool {
        self.kernels.walk().width == 4
    }

    /// The shaders: forward, backward, and the weight gradients' second pass.
    pub fn shaders(&self) -> [&KernelModule; 3] {
        self.kernels.modules()
    }
}

impl NormOp<LayerNorm> {
    /// The kernels for tensors read through `views`, with `ε = eps`. `x` and `y` are
    /// `[rows, cols]` with a static `cols`; `γ`, `β` are vectors of `cols`, `mean` and `rstd`
    /// vectors of the rows.
    pub fn new(gpu: &Gpu, views: &LayerNormTensors<&View>, eps: f32) -> Result<Self, OpError> {
        Self::with_launch(gpu, views, eps, NormLaunch::default())
    }

    /// The kernels of [`new`](Self::new) with the launch shapes `launch`.
    pub fn with_launch(
        gpu: &Gpu,
        views: &LayerNormTensors<&View>,
        eps: f32,
        launch: NormLaunch,
    ) -> Result<Self, OpError> {
        Self::fused(gpu, views, &Residual::none(), eps, launch)
    }

    /// The kernels of [`with_launch`](Self::with_launch) with the residual connection
    /// `residual` fused (see [`Residual`]); record them with
    /// [`forward_fused`](Self::forward_fused) and [`backward_fused`](Self::backward_fused).
    pub fn fused(
        gpu: &Gpu,
        views: &LayerNormTensors<&View>,
        residual: &Residual<&View>,
        eps: f32,
        launch: NormLaunch,
    ) -> Result<Self, OpError> {
        let (residual, carry) = residual_views(residual);
        let v = Views {
            x: views.x,
            gamma: views.gamma,
            beta: Some(views.beta),
            y: views.y,
            mean: Some(views.mean),
            rstd: views.rstd,
            residual,
            carry,
        };
        Ok(Self::built(NormKernels::new(
            gpu,
            Kind::Layer,
            &v,
            eps,
            launch,
        )?))
    }

    /// The most scratch [`backward`](Self::backward) takes over `rows` rows of `cols` columns
    /// under `launch` (its `chunk_rows`; [`NormLaunch::default`] for [`new`](Self::new)),
    /// whatever the layouts and the device: partial rows of `dγ` and `dβ`.
    pub fn backward_scratch(launch: &NormLaunch, rows: u32, cols: u32) -> Result<Scratch, OpError> {
        rows::backward_scratch(Kind::Layer, rows, cols, launch.chunk_rows)
    }

    /// Records the forward: `y`, `mean` and `rstd` from `x`, `γ` and `β`.
    pub fn forward(
        &self,
        batch: &mut Batch<'_>,
        t: &LayerNormTensors<&GpuArg<'_>>,
    ) -> Result<(), OpError> {
        self.forward_fused(batch, t, None)
    }

    /// Records the forward of kernels built with a residual connection, `sum` its `[res, sum]`
    /// (`None` where the forward fuses none): normalises `x + res` and writes the sum.
    pub fn forward_fused(
        &self,
        batch: &mut Batch<'_>,
        t: &LayerNormTensors<&GpuArg<'_>>,
        sum: Option<[&GpuArg<'_>; 2]>,
    ) -> Result<(), OpError> {
        let args = vec![
            ("x", t.x),
            ("gamma", t.gamma),
            ("beta", t.beta),
            ("y", t.y),
            ("mean", t.mean),
            ("rstd", t.rstd),
        ];
        self.kernels.forward(batch, &with_sum(args, sum))
    }

    /// Records the backward from the forward's tensors `t` (`y` and `β` are not read) and
    /// `g.dy`: writes `g.dx`, and `g.dgamma`, `g.dbeta` (or adds to them, with `accumulate`).
    pub fn backward(
        &self,
        batch: &mut Batch<'_>,
        t: &LayerNormTensors<&GpuArg<'_>>,
        g: &LayerNormGrads<&GpuArg<'_>>,
        accumulate: bool,
    ) -> Result<(), OpError> {
        self.backward_fused(batch, t, g, None, accumulate)
    }

    /// Records the backward of kernels built with a carried gradient, `dsum` (`None` where the
    /// backward fuses none): as [`backward`](Self::backward), with `dsum` added to `dx`.
    pub fn backward_fused(
        &self,
        batch: &mut Batch<'_>,
        t: &LayerNormTensors<&GpuArg<'_>>,
        g: &LayerNormGrads<&GpuArg<'_>>,
        dsum: Option<&GpuArg<'_>>,
        accumulate: bool,
    ) -> Result<(), OpError> {
        let args = vec![
            ("x", t.x),
            ("dy", g.dy),
            ("gamma", t.gamma),
            ("mean", t.mean),
            ("rstd", t.rstd),
            ("dx", g.dx),
        ];
        self.kernels.backward(
            batch,
            &with_carry(args, dsum),
            &[g.dgamma, g.dbeta],
            accumulate,
        )
    }
}

impl NormOp<RmsNorm> {
    /// The kernels for tensors read through `views`, with `ε = eps` (see
    /// [`LayerNormOp::new`]).
    pub fn new(gpu: &Gpu, views: &RmsNormTensors<&View>, eps: f32) -> Result<Self, OpError> {
        Self::with_launch(gpu, views, eps, NormLaunch::default())
    }

    /// The kernels of [`new`](Self::new) with the launch shapes `launch`.
    pub fn with_launch(
        gpu: &Gpu,
        views: &RmsNormTensors<&View>,
        eps: f32,
        launch: NormLaunch,
    ) -> Result<Self, OpError> {
        Self::fused(gpu, views, &Residual::none(), eps, launch)
    }

    /// The kernels of [`with_launch`](Self::with_launch) with the residual connection
    /// `residual` fused (see [`Residual`] and [`LayerNormOp::fused`]).
    pub fn fused(
        gpu: &Gpu,
        views: &RmsNormTensors<&View>,
        residual: &Residual<&View>,
        eps: f32,
        launch: NormLaunch,
    ) -> Result<Self, OpError> {
        let (residual, carry) = residual_views(residual);
        let v = Views {
            x: views.x,
            gamma: views.gamma,
            beta: None,
            y: views.y,
            mean: None,
            rstd: views.rstd,
            residual,
            carry,
        };
        Ok(Self::built(NormKernels::new(
            gpu,
            Kind::Rms,
            &v,
            eps,
            launch,
        )?))
    }

    /// The most scratch [`backward`](Self::backward) takes over `rows` rows of `cols` columns
    /// under `launch` (see [`LayerNormOp::backward_scratch`]): partial rows of `dγ`.
    pub fn backward_scratch(launch: &NormLaunch, rows: u32, cols: u32) -> Result<Scratch, OpError> {
        rows::backward_scratch(Kind::Rms, rows, cols, launch.chunk_rows)
    }

    /// Records the forward: `y` and `rstd` from `x` and `γ`.
    pub fn forward(
        &self,
        batch: &mut Batch<'_>,
        t: &RmsNormTensors<&GpuArg<'_>>,
    ) -> Result<(), OpError> {
        self.forward_fused(batch, t, None)
    }

    /// Records the forward of kernels built with a residual connection (see
    /// [`LayerNormOp::forward_fused`]).
    pub fn forward_fused(
        &self,
        batch: &mut Batch<'_>,
        t: &RmsNormTensors<&GpuArg<'_>>,
        sum: Option<[&GpuArg<'_>; 2]>,
    ) -> Result<(), OpError> {
        let args = vec![("x", t.x), ("gamma", t.gamma), ("y", t.y), ("rstd", t.rstd)];
        self.kernels.forward(batch, &with_sum(args, sum))
    }

    /// Records the backward from the forward's tensors `t` (`y` is not read) and `g.dy`:
    /// writes `g.dx` and `g.dgamma` (or adds to it, with `accumulate`).
    pub fn backward(
        &self,
        batch: &mut Batch<'_>,
        t: &RmsNormTensors<&GpuArg<'_>>,
        g: &RmsNormGrads<&GpuArg<'_>>,
        accumulate: bool,
    ) -> Result<(), OpError> {
        self.backward_fused(batch, t, g, None, accumulate)
    }

    /// Records the backward of kernels built with a carried gradient (see
    /// [`LayerNormOp::backward_fused`]).
    pub fn backward_fused(
        &self,
        batch: &mut Batch<'_>,
        t: &RmsNormTensors<&GpuArg<'_>>,
        g: &RmsNormGrads<&GpuArg<'_>>,
        dsum: Option<&GpuArg<'_>>,
        accumulate: bool,
    ) -> Result<(), OpError> {
        let args = vec![
            ("x", t.x),
            ("dy", g.dy),
            ("gamma", t.gamma),
            ("rstd", t.rstd),
            ("dx", g.dx),
        ];
        self.kernels
            .backward(batch, &with_carry(args, dsum), &[g.dgamma], accumulate)
    }
}
