//! Fused attention, forward and backward: the probabilities are never stored.
//!
//! With the tensors of [`attention`](super) (Q and O `[batch, seq_q, heads, head_dim]`, K and V
//! `[batch, seq_k, kv_heads, head_dim]`, any layout, `f32` or `f16`, read and written through
//! their views: separate tensors or the views of a fused projection), the scale `s` and the
//! mask `M`:
//!
//! - the forward writes `O = softmax_M(s·Q·Kᵀ)·V` and, per query, the log-sum-exp of its
//!   scaled scores `lse_i = log Σ_{j∈M} exp(s·S_ij)` into `lse` `[batch, heads, seq_q]`
//!   (`f32`, any layout), computing the softmax online over blocks of keys (FlashAttention's
//!   recurrence: a running maximum `m` and sum `l`, the output rescaled by `exp(m − m')` when
//!   the maximum grows);
//! - the backward recomputes `P_ij = exp(s·S_ij − lse_i)` where it needs it, with
//!   `D_i = Σ dO_i ⊙ O_i` (equal to `Σ_j P_ij dP_ij`): `dS = P ⊙ (dO·Vᵀ − D)`,
//!   `dQ = s·dS·K`, `dK = s·dSᵀ·Q` and `dV = Pᵀ·dO`, the key-side gradients summed over the
//!   query heads that share a key/value head. Three kernels: one per query for `dQ`, one per
//!   key for each of `dK` and `dV`, so each writes one gradient and none needs atomics or a
//!   scratch buffer (for a fused projection, `dK` and `dV` are views of one buffer, which one
//!   dispatch doesn't write through twice). On tensor cores, where `dK` and `dV` are different
//!   buffers (separate tensors, as after RoPE), one kernel per key writes both, making the
//!   scores, `P` and `dP` once for the two: two kernels.
//!
//! So the memory of an attention is its inputs, its output and `batch · heads · seq_q` sums,
//! against the `batch · heads · seq_q · seq_k` probabilities the materialised attention saves
//! and the three scratch tensors of that size its backward takes. The price is computing
//! again: per pair of a query and a key, the backward's three kernels take eight products of a
//! head (the scores in each, `dP` in two, and `dQ`, `dK`, `dV`), its two kernels seven, where
//! the materialised backward takes four: ten or nine for the step against six.
//!
//! The masks are [`Mask`]'s: causal with an offset, or padding read from `keep` `[batch,
//! seq_k]` of `u32` ([`Mask::Keys`]; the backward reads it too, to recompute the same
//! probabilities). A query that sees no key writes 0 (as the materialised softmax's all-zero
//! row does) and saves a log-sum-exp of `3·10³⁸`, so that its recomputed probabilities are 0.
//!
//! The kernels sum in `f32` on any device. They come in two sets with the same operands and
//! grids: on shader cores, one invocation a row (the `shader` module), and on tensor cores,
//! 16 rows a subgroup, the products on cooperative matrices and the softmax on the subgroup's
//! scratch (the `tensor` module; `f16` tensors, heads of a multiple of 16 up to
//! [`TENSOR_BLOCK`], P and dS rounded to `f16` before their products).
//! [`FlashAttentionOp::new`] takes tensor cores from heads of [`TENSOR_HEAD_DIM`], where they
//! were measured faster; [`FlashAttentionOp::tensor_cores`] and
//! [`FlashAttentionOp::with_launch`] pick one set. [`flash_forward_cpu`] and
//! [`flash_backward_cpu`] compute the same in `f64`.
//!
//! ```no_run
//! use fblayout_core::layout::LayoutSpec;
//! use fblayout_kernels::ops::attention::{Attention, AttentionArgs, AttentionViews, qkv_views};
//! use fblayout_kernels::ops::attention::flash::{FlashAttentionOp, FlashGrads};
//! use fblayout_kernels::ops::Mask;
//! use fblayout_kernels::runtime::{Gpu, GpuBuffer};
//! use fblayout_kernels::tensor::GpuArg;
//!
//! let gpu = Gpu::new()?;
//! // GPT-2 small's attention: one fused projection [batch, seq, 3·768], 12 heads of 64, causal.
//! let qkv = LayoutSpec::new("qkv").dyn_axis("batch").dyn_axis("seq").axis("hidden", 3 * 768).build()?;
//! let (q, k, v) = qkv_views(&qkv.view(), 12, 12)?;
//! let out = LayoutSpec::new("o").dyn_axis("batch").dyn_axis("seq").axis("heads", 12).axis("head_dim", 64).build()?;
//! let lse = LayoutSpec::new("lse").dyn_axis("batch").axis("heads", 12).dyn_axis("q").build()?;
//! let (out, lse) = (out.view(), lse.view());
//! let views = AttentionViews { q: &q, k: &k, v: &v, out: &out, scores: &lse };
//! let op = FlashAttentionOp::new(&gpu, &views, None, Attention::new(12, 12, 64, Mask::Causal { offset: 0 }))?;
//!
//! let (b, s) = (8u32, 1024u32);
//! let tokens = [("batch", b), ("seq", s)];
//! let rows = (b * s) as usize;
//! let qkv_buffer = GpuBuffer::zeroed::<f32>(&gpu, rows * 3 * 768)?;
//! let dqkv = GpuBuffer::scratch::<f32>(&gpu, rows * 3 * 768)?;
//! let (o, d_o) = (GpuBuffer::scratch::<f32>(&gpu, rows * 768)?, GpuBuffer::zeroed::<f32>(&gpu, rows * 768)?);
//! let sums = GpuBuffer::scratch::<f32>(&gpu, (b * 12 * s) as usize)?;
//! let args = AttentionArgs {
//!     q: GpuArg::new(&qkv_buffer, &q, &tokens)?,
//!     k: GpuArg::new(&qkv_buffer, &k, &tokens)?,
//!     v: GpuArg::new(&qkv_buffer, &v, &tokens)?,
//!     out: GpuArg::new(&o, &out, &tokens)?,
//!     probs: GpuArg::new(&sums, &lse, &[("batch", b), ("q", s)])?,
//! };
//! let mut batch = gpu.batch();
//! op.forward(&mut batch, &args, None)?;
//! // dQ, dK and dV land in one gradient buffer of the fused layout, each through its view.
//! let grads = FlashGrads {
//!     dout: GpuArg::new(&d_o, &out, &tokens)?,
//!     dq: GpuArg::new(&dqkv, &q, &tokens)?,
//!     dk: GpuArg::new(&dqkv, &k, &tokens)?,
//!     dv: GpuArg::new(&dqkv, &v, &tokens)?,
//! };
//! op.backward(&mut batch, &args, None, &grads)?;
//! batch.submit()?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod cpu;
mod shader;
pub(crate) mod tensor;

use fblayout_core::kernel::{KernelSource, Operand, ParamValue, Scalar};
use fblayout_core::layout::{ElemType, View};
use fblayout_core::shader::WgslFeatures;

use super::super::compiled::{Compiled, same_view};
use super::super::elementwise::{check_same_dims, check_same_shape};
use super::super::error::OpError;
use super::super::softmax::{Mask, check_float};
use super::{
    Attention, AttentionArgs, AttentionViews, arg_dims, check_extents, static_dims, static_heads,
};
use crate::runtime::{Batch, CoopScalar, Gpu};
use crate::tensor::GpuArg;
use shader::{Blocks, NO_KEYS, Pass, Wide};
use tensor::Tiles;

pub use cpu::{FlashSaved, flash_backward_cpu, flash_forward_cpu};

const FORWARD: &str = "fused attention forward";
const BACKWARD: &str = "fused attention backward";

/// The roles of the five tensors in [`check_extents`]' order, `lse` standing for the scores.
const LSE_ROLES: [&str; 5] = ["q", "k", "v", "out", "lse"];

/// `lse`'s extents `[batch, heads, seq_q]` as the scores' `[batch, heads, seq_q, seq_k]` with
/// `seq_k` unknown, for [`check_extents`]; a rank other than 3 stays as given (and is refused).
fn lse_dims(dims: &[Option<u64>]) -> Vec<Option<u64>> {
    let mut d = dims.to_vec();
    if d.len() == 3 {
        d.push(None);
    }
    d
}

/// How the fused attention's kernels are launched: the rows (queries or keys) each workgroup
/// owns, one per invocation, and the rows of the other side staged in workgroup memory at a
/// time. On shader cores [`FlashAttentionOp::new`] takes 128 rows and the most staged rows, of
/// 32, 16, 8 and 4, that fit the device's workgroup memory (on an H100, at heads of 32, 128
/// rows staging 32 ran 1.33× the materialised attention's speed, 64 rows 1.05–1.24×, 256 rows
/// 0.73×: `bench_flash`, BENCHMARKS.md); [`FlashAttentionOp::with_launch`] takes others (to
/// time them).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FlashLaunch {
    /// Invocations (rows) per workgroup: 32, 64, 128 or 256.
    pub rows: u32,
    /// Rows staged at a time: from 1 to `rows`.
    pub staged: u32,
}

/// The gradients of a backward: `dout` read through the output's view, `dq`, `dk` and `dv`
/// written (overwritten) through the views of Q, K and V.
#[derive(Debug, Clone)]
pub struct FlashGrads<'a> {
    /// The gradient of the output.
    pub dout: GpuArg<'a>,
    /// The gradient of Q.
    pub dq: GpuArg<'a>,
    /// The gradient of K.
    pub dk: GpuArg<'a>,
    /// The gradient of V.
    pub dv: GpuArg<'a>,
}

/// The fused attention's four kernels, built for the views of its tensors (see the module
/// docs).
#[derive(Debug, Clone)]
pub struct FlashAttentionOp {
    attention: Attention,
    views: [View; 5],
    keep: Option<View>,
    cores: Cores,
    /// In the order of [`Cores::passes`].
    kernels: Vec<Compiled>,
}

/// How the op was asked to launch its kernels.
#[derive(Debug, Clone, Copy)]
enum Launch {
    /// Tensor cores from heads of [`TENSOR_HEAD_DIM`] where they can, else shader cores.
    Auto,
    /// Tensor cores, or an error.
    Tensor,
    /// Shader cores, launched so.
    Shader(FlashLaunch),
}

/// Which kernels the op runs: on shader cores in `f32` blocks, or on tensor cores.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Cores {
    Shader(Blocks),
    Tensor(Tiles),
}

impl Cores {
    /// The kernels of the set: [`Pass::SHADER`] or [`Pass::TENSOR`].
    fn passes(self) -> &'static [Pass] {
        match self {
            Self::Shader(_) => &Pass::SHADER,
            Self::Tensor(_) => &Pass::TENSOR,
        }
    }

    /// The rows (queries or keys) a workgroup owns.
    fn rows(self) -> u32 {
        match self {
            Self::Shader(blocks) => blocks.rows,
            Self::Tensor(_) => Tiles::ROWS,
        }
    }
}

impl FlashAttentionOp {
    /// The kernels of `attention` over `views`, whose `scores` is the log-sum-exp's view
    /// `[batch, heads, seq_q]` of `f32`; `keep` is the padding mask's view `[batch, seq_k]` of
    /// `u32`, given exactly when the mask is [`Mask::Keys`].
    ///
    /// Checks the head counts, ranks, element types and static extents as
    /// [`AttentionOp::new`](super::AttentionOp::new) does, that `head_dim` is a static extent,
    /// and that a block of its head vectors fits the device's workgroup memory.
    ///
    /// The kernels run on tensor cores ([`tensor_cores`](Self::tensor_cores)) where the device
    /// and the tensors take them and heads are of at least [`TENSOR_HEAD_DIM`]; otherwise on
    /// shader cores, launched with 128 rows a workgroup ([`FlashLaunch`]).
    pub fn new(
        gpu: &Gpu,
        views: &AttentionViews<&View>,
        keep: Option<&View>,
        attention: Attention,
    ) -> Result<Self, OpError> {
        Self::build(gpu, views, keep, attention, Launch::Auto)
    }

    /// [`new`](Self::new) on tensor cores at any head size they take: a 16×16×16 fragment of
    /// `f16` summing in `f32`, subgroups of 32 lanes with subgroup barriers, `f16` Q, K, V and
    /// O, and heads of a multiple of 16 up to [`TENSOR_BLOCK`]. Where any is missing, an
    /// [`OpError::Unsupported`] says which.
    pub fn tensor_cores(
        gpu: &Gpu,
        views: &AttentionViews<&View>,
        keep: Option<&View>,
        attention: Attention,
    ) -> Result<Self, OpError> {
        Self::build(gpu, views, keep, attention, Launch::Tensor)
    }

    /// [`new`](Self::new) with the kernels launched as `launch` says: its rows must be 32, 64,
    /// 128 or 256 (and at most the device's invocations per workgroup), its staged rows from 1
    /// to the rows, and two staged blocks of head vectors must fit the workgroup memory.
    pub fn with_launch(
        gpu: &Gpu,
        views: &AttentionViews<&View>,
        keep: Option<&View>,
        attention: Attention,
        launch: FlashLaunch,
    ) -> Result<Self, OpError> {
        Self::build(gpu, views, keep, attention, Launch::Shader(launch))
    }

    /// The launch the kernels were built for (on tensor cores: 16 rows a subgroup, blocks of
    /// [`TENSOR_BLOCK`] staged rows).
    pub fn launch(&self) -> FlashLaunch {
        match self.cores {
            Cores::Shader(blocks) => FlashLaunch {
                rows: blocks.rows,
                staged: blocks.staged,
            },
            Cores::Tensor(_) => FlashLaunch {
                rows: Tiles::ROWS,
                staged: Tiles::BLOCK,
            },
        }
    }

    /// Whether the kernels run on tensor cores (see [`new`](Self::new)).
    pub fn on_tensor_cores(&self) -> bool {
        matches!(self.cores, Cores::Tensor(_))
    }

    fn build(
        gpu: &Gpu,
        views: &AttentionViews<&View>,
        keep: Option<&View>,
        attention: Attention,
        launch: Launch,
    ) -> Result<Self, OpError> {
        let group = attention.group()?;
        let AttentionViews {
            q,
            k,
            v,
            out,
            scores: lse,
        } = *views;
        for (role, view) in [("q", q), ("k", k), ("v", v), ("out", out)] {
            check_float(FORWARD, role, view)?;
        }
        check_same_shape(FORWARD, ("q", q), &[("out", out)])?;
        check_same_shape(FORWARD, ("k", k), &[("v", v)])?;
        if lse.layout().elem() != ElemType::F32 {
            return Err(OpError::Unsupported {
                op: FORWARD,
                role: "lse",
                view: lse.name().to_owned(),
                why: format!("it stores {}; the log-sum-exp is f32", lse.layout().elem()),
            });
        }
        let mut dims = [q, k, v, out, lse].map(static_dims);
        dims[4] = lse_dims(&dims[4]);
        let [_, _, _, head_dim] = check_extents(
            FORWARD,
            &attention,
            LSE_ROLES,
            dims.each_ref().map(Vec::as_slice),
        )?;
        static_heads(FORWARD, [("q", q, 2), ("k", k, 2), ("lse", lse, 1)])?;
        let head_dim = match head_dim {
            Some(d) if d > 0 => d as u32,
            _ => {
                return Err(OpError::shape(
                    FORWARD,
                    "head_dim must be a static extent of at least 1 (the kernels keep a head in \
                     registers)",
                ));
            }
        };
        check_keep(attention.mask, keep)?;
        let limits = gpu.limits();
        let limit = limits.max_compute_workgroup_storage_size;
        let heads = [q, k, v, out];
        let cores = match launch {
            Launch::Tensor => {
                Cores::Tensor(tensor_tiles(gpu, heads, head_dim, group).map_err(|why| {
                    OpError::Unsupported {
                        op: FORWARD,
                        role: "q",
                        view: q.name().to_owned(),
                        why: format!("no tensor-core attention: {why}"),
                    }
                })?)
            }
            Launch::Auto => match tensor_tiles(gpu, heads, head_dim, group) {
                Ok(tiles) if head_dim >= TENSOR_HEAD_DIM => Cores::Tensor(tiles),
                _ => Cores::Shader(Blocks::fitting(head_dim, group, limit).ok_or_else(|| {
                    OpError::shape(
                        FORWARD,
                        format!(
                            "heads of {head_dim} don't fit the device's {limit} bytes of \
                             workgroup memory in blocks of four"
                        ),
                    )
                })?),
            },
            Launch::Shader(FlashLaunch { rows, staged }) => {
                let blocks = Blocks {
                    head_dim,
                    group,
                    rows,
                    staged,
                };
                let bytes = blocks.workgroup_bytes();
                if ![32, 64, 128, 256].contains(&rows)
                    || rows > limits.max_compute_invocations_per_workgroup
                    || staged == 0
                    || staged > rows
                    || bytes > u64::from(limit)
                {
                    return Err(OpError::shape(
                        FORWARD,
                        format!(
                            "a launch of {rows} rows staging {staged} (heads of {head_dim}: \
                             {bytes} bytes of workgroup memory) doesn't fit: rows are 32, 64, \
                             128 or 256 (at most {}), staged rows 1 to the rows, and the \
                             device has {limit} bytes",
                            limits.max_compute_invocations_per_workgroup
                        ),
                    ));
                }
                Cores::Shader(blocks)
            }
        };
        let views = [q, k, v, out, lse].map(Clone::clone);
        let kernels = cores
            .passes()
            .iter()
            .map(|&pass| build(gpu, pass, &views, keep, attention, cores))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Self {
            attention,
            views,
            keep: keep.cloned(),
            cores,
            kernels,
        })
    }

    /// What the op computes.
    pub fn attention(&self) -> Attention {
        self.attention
    }

    /// The WGSL of the forward, `dQ`, `dK` and `dV` kernels (validated by naga when built).
    pub fn shaders(&self) -> [&str; 4] {
        Pass::SHADER.map(|pass| self.kernel(pass).map_or("", |k| k.module().source()))
    }

    /// The WGSL of the tensor-core kernel that writes `dK` and `dV` together (what
    /// [`backward`](Self::backward) runs where the two are different buffers), `None` on
    /// shader cores.
    pub fn grad_kv_shader(&self) -> Option<&str> {
        self.kernel(Pass::GradKV).map(|k| k.module().source())
    }

    /// The kernel of `pass`, where the op's set has one.
    fn kernel(&self, pass: Pass) -> Option<&Compiled> {
        let at = self.cores.passes().iter().position(|&p| p == pass)?;
        self.kernels.get(at)
    }

    /// Records the forward: `out` and the log-sum-exp (`args.probs`, through the `scores`
    /// view). `keep` is the padding mask's argument, given exactly when the op was built with
    /// one. Every argument is checked before anything is recorded.
    pub fn forward(
        &self,
        batch: &mut Batch<'_>,
        args: &AttentionArgs<'_>,
        keep: Option<&GpuArg<'_>>,
    ) -> Result<(), OpError> {
        let [b, sq, _] = self.check(FORWARD, args, keep)?;
        let mut bound = self.bound(args, keep);
        bound.push(("out", &args.out));
        bound.push(("lse", &args.probs));
        self.record(batch, Pass::Forward, &bound, [sq, self.attention.heads, b])
    }

    /// Records the backward from `grads.dout`: `dq`, `dk` and `dv` overwritten, from the
    /// forward's inputs, output and log-sum-exp in `args` (and its `keep`). Every argument is
    /// checked before anything is recorded.
    pub fn backward(
        &self,
        batch: &mut Batch<'_>,
        args: &AttentionArgs<'_>,
        keep: Option<&GpuArg<'_>>,
        grads: &FlashGrads<'_>,
    ) -> Result<(), OpError> {
        let [b, sq, sk] = self.check(BACKWARD, args, keep)?;
        let [q, k, v, out, _] = &self.views;
        for (role, arg, view) in [
            ("dout", &grads.dout, out),
            ("dq", &grads.dq, q),
            ("dk", &grads.dk, k),
            ("dv", &grads.dv, v),
        ] {
            same_view(BACKWARD, role, arg.view(), view)?;
        }
        for (roles, given) in [
            (["dout", "out"], [&grads.dout, &args.out]),
            (["dq", "q"], [&grads.dq, &args.q]),
            (["dk", "k"], [&grads.dk, &args.k]),
            (["dv", "v"], [&grads.dv, &args.v]),
        ] {
            check_same_dims(BACKWARD, &roles, given.iter().map(|a| a.dims()))?;
        }
        let (h, kv) = (self.attention.heads, self.attention.kv_heads);
        // dK and dV in one kernel where the set has it and they are different buffers (a fused
        // projection's are views of one, which one dispatch doesn't write through twice).
        let together = self.kernel(Pass::GradKV).is_some()
            && grads.dk.buffer().buffer() != grads.dv.buffer().buffer();
        let key_side: &[(Pass, &[&GpuArg<'_>])] = if together {
            &[(Pass::GradKV, &[&grads.dk, &grads.dv])]
        } else {
            &[(Pass::GradK, &[&grads.dk]), (Pass::GradV, &[&grads.dv])]
        };
        let query_side: (Pass, &[&GpuArg<'_>]) = (Pass::GradQ, &[&grads.dq]);
        for &(pass, written) in std::iter::once(&query_side).chain(key_side) {
            let mut bound: Vec<(&'static str, &GpuArg<'_>)> = self
                .bound(args, keep)
                .into_iter()
                .filter(|(role, _)| pass.reads().contains(role) || *role == "keep")
                .collect();
            if pass.reads().contains(&"out") {
                bound.push(("out", &args.out));
            }
            bound.push(("lse", &args.probs));
            bound.push(("dout", &grads.dout));
            bound.extend(pass.writes().iter().copied().zip(written.iter().copied()));
            let grid = if pass.per_key() {
                [sk, kv, b]
            } else {
                [sq, h, b]
            };
            self.record(batch, pass, &bound, grid)?;
        }
        Ok(())
    }

    /// Q, K, V and `keep` by role: what every kernel reads (those that don't read V drop it).
    fn bound<'b, 'a>(
        &self,
        args: &'b AttentionArgs<'a>,
        keep: Option<&'b GpuArg<'a>>,
    ) -> Vec<(&'static str, &'b GpuArg<'a>)> {
        let mut bound = vec![("q", &args.q), ("k", &args.k), ("v", &args.v)];
        bound.extend(keep.map(|k| ("keep", k)));
        bound
    }

    /// Records `pass` over `rows` rows (queries or keys, in workgroups of
    /// [`Blocks::rows`]) of `heads` heads and `batch` sequences; nothing where any is 0.
    fn record(
        &self,
        batch: &mut Batch<'_>,
        pass: Pass,
        args: &[(&'static str, &GpuArg<'_>)],
        [rows, heads, sequences]: [u32; 3],
    ) -> Result<(), OpError> {
        if rows == 0 || heads == 0 || sequences == 0 {
            return Ok(());
        }
        let mut scalars = vec![("scale", ParamValue::F32(self.attention.scale))];
        if let Mask::Causal { offset } = self.attention.mask {
            scalars.push(("offset", ParamValue::I32(offset)));
        }
        let kernel = self.kernel(pass).ok_or_else(|| {
            OpError::shape(
                op_of(pass),
                format!("the op's kernels have no `{}`", pass.entry()),
            )
        })?;
        let grid = [rows.div_ceil(self.cores.rows()), heads, sequences];
        kernel.record(batch, pass.entry(), args, &scalars, grid)
    }

    /// Checks every argument's view and extents (and `keep`'s); returns `[batch, seq_q,
    /// seq_k]`, each within a `u32`.
    fn check(
        &self,
        op: &'static str,
        args: &AttentionArgs<'_>,
        keep: Option<&GpuArg<'_>>,
    ) -> Result<[u32; 3], OpError> {
        let given = [&args.q, &args.k, &args.v, &args.out, &args.probs];
        for ((role, built), arg) in LSE_ROLES.iter().zip(&self.views).zip(given) {
            same_view(op, role, arg.view(), built)?;
        }
        let mut dims = given.map(arg_dims);
        dims[4] = lse_dims(&dims[4]);
        let [b, sq, sk, _] = check_extents(
            op,
            &self.attention,
            LSE_ROLES,
            dims.each_ref().map(Vec::as_slice),
        )?
        .map(|n| n.unwrap_or(0));
        let lse = args.probs.dims();
        if lse.len() != 3 || lse[2] as u64 != sq {
            return Err(OpError::shape(
                op,
                format!("`lse` has shape {lse:?}, not [batch, heads, seq_q]"),
            ));
        }
        match (&self.keep, keep) {
            (Some(view), Some(arg)) => {
                same_view(op, "keep", arg.view(), view)?;
                if arg.dims() != [b as usize, sk as usize] {
                    return Err(OpError::shape(
                        op,
                        format!(
                            "`keep` has shape {:?}, not [batch, seq_k] = [{b}, {sk}]",
                            arg.dims()
                        ),
                    ));
                }
            }
            (None, None) => {}
            (Some(_), None) => {
                return Err(OpError::shape(op, "the op masks padding: give its `keep`"));
            }
            (None, Some(_)) => {
                return Err(OpError::shape(
                    op,
                    "a `keep` was given, but the op was built without a padding mask",
                ));
            }
        }
        let fit = |what: &str, n: u64| {
            u32::try_from(n).map_err(|_| OpError::shape(op, format!("{what} {n} is past a u32")))
        };
        Ok([fit("batch", b)?, fit("seq_q", sq)?, fit("seq_k", sk)?])
    }
}

/// Checks that a padding mask's view is given exactly with [`Mask::Keys`], `[batch, seq_k]`
/// of `u32`.
fn check_keep(mask: Mask, keep: Option<&View>) -> Result<(), OpError> {
    match (mask, keep) {
        (Mask::Keys, Some(keep)) => {
            if keep.layout().elem() != ElemType::U32 || keep.axes().len() != 2 {
                return Err(OpError::Unsupported {
                    op: FORWARD,
                    role: "keep",
                    view: keep.name().to_owned(),
                    why: format!(
                        "it is {} of rank {}; a padding mask is [batch, seq_k] of u32",
                        keep.layout().elem(),
                        keep.axes().len()
                    ),
                });
            }
            Ok(())
        }
        (Mask::Keys, None) => Err(OpError::shape(
            FORWARD,
            "a key mask (`Mask::Keys`) needs its `keep` view",
        )),
        (_, Some(_)) => Err(OpError::shape(
            FORWARD,
            "a `keep` view was given, but the mask is not `Mask::Keys`",
        )),
        (_, None) => Ok(()),
    }
}

/// Rows of the other side the tensor-core kernels stage at a time, and their largest head.
pub const TENSOR_BLOCK: u32 = Tiles::BLOCK;

/// The smallest head [`FlashAttentionOp::new`] runs on tensor cores. On an H100 at heads of
/// 32 (32 × 128, causal) one layer took 0.188 ms on them against 0.269 ms on shader cores, and
/// the mixed step's attention kernels 1.09 and 1.02 ms against 1.32 and 1.34 (encoder,
/// decoder); at heads of 64 they took 0.43–0.75× the shader-core kernels' time. Heads of 16
/// were not measured on tensor cores and stay on shader cores (`bench_flash`, `bench_train`;
/// BENCHMARKS.md).
pub const TENSOR_HEAD_DIM: u32 = 32;

/// The tiles of the tensor-core kernels where `gpu` and the tensors take them: a 16×16×16
/// fragment of `f16` summing in `f32`, subgroups of 32 lanes with subgroup barriers, `f16` Q,
/// K, V and O, heads of a multiple of 16 up to [`TENSOR_BLOCK`], and the kernels' workgroup
/// memory and invocations within the device's limits.
fn tensor_tiles(gpu: &Gpu, heads: [&View; 4], head_dim: u32, group: u32) -> Result<Tiles, String> {
    let features = gpu.features();
    let limits = gpu.limits();
    let Some(fragment) = features.coop_fragment else {
        return Err(format!(
            "the device has no usable cooperative matrices ({features})"
        ));
    };
    if (
        fragment.m,
        fragment.n,
        fragment.k,
        fragment.ab,
        fragment.acc,
    ) != (16, 16, 16, CoopScalar::F16, CoopScalar::F32)
    {
        return Err(format!(
            "the device's fragment is {fragment}, not 16×16×16 of f16 summing in f32"
        ));
    }
    if !features.subgroup_barrier || features.subgroup_sizes != (Tiles::LANES, Tiles::LANES) {
        return Err(format!(
            "the kernels need subgroups of {} lanes with subgroup barriers ({features})",
            Tiles::LANES
        ));
    }
    if let Some(view) = heads.iter().find(|v| v.layout().elem() != ElemType::F16) {
        return Err(format!(
            "`{}` stores {}; tensor cores take f16",
            view.name(),
            view.layout().elem()
        ));
    }
    let tiles = Tiles::of(head_dim, group).ok_or_else(|| {
        format!("heads of {head_dim} are not a multiple of 16 up to {TENSOR_BLOCK}")
    })?;
    let bytes = tiles.max_workgroup_bytes();
    if bytes > u64::from(limits.max_compute_workgroup_storage_size)
        || Tiles::invocations() > limits.max_compute_invocations_per_workgroup
    {
        return Err(format!(
            "the kernels take {bytes} bytes of workgroup memory and {} invocations; the device \
             has {} and {}",
            Tiles::invocations(),
            limits.max_compute_workgroup_storage_size,
            limits.max_compute_invocations_per_workgroup
        ));
    }
    Ok(tiles)
}

/// The WGSL features of the tensor-core kernels.
pub(crate) const TENSOR_FEATURES: WgslFeatures = WgslFeatures {
    f16: true,
    subgroups: true,
    cooperative_matrix: true,
};

/// Builds the kernel of `pass`.
fn build(
    gpu: &Gpu,
    pass: Pass,
    views: &[View; 5],
    keep: Option<&View>,
    attention: Attention,
    cores: Cores,
) -> Result<Compiled, OpError> {
    let op = op_of(pass);
    let source = source(pass, views, keep, attention, cores)?;
    match cores {
        Cores::Shader(_) => Compiled::new(op, gpu, source),
        Cores::Tensor(_) => Ok(Compiled::from_module(
            op,
            source.features(TENSOR_FEATURES).build()?,
        )),
    }
}

/// The name of `pass`'s op in errors.
fn op_of(pass: Pass) -> &'static str {
    match pass {
        Pass::Forward => FORWARD,
        _ => BACKWARD,
    }
}

/// The kernel source of `pass`: its operands, scalars and body.
pub(crate) fn source(
    pass: Pass,
    [q, k, v, out, lse]: &[View; 5],
    keep: Option<&View>,
    attention: Attention,
    cores: Cores,
) -> Result<KernelSource, OpError> {
    let op = op_of(pass);
    let head = |role: &str, view: &View, write: bool| -> Result<Operand, OpError> {
        let o = if write {
            Operand::write(role, view)?
        } else {
            Operand::read(role, view)?
        };
        Ok(o.vectorized(3))
    };
    let mut operands = vec![head("q", q, false)?, head("k", k, false)?];
    if pass.reads().contains(&"v") {
        operands.push(head("v", v, false)?);
    }
    if pass.reads().contains(&"out") {
        operands.push(head("out", out, false)?);
    }
    match pass {
        Pass::Forward => {
            operands.push(head("out", out, true)?);
            operands.push(Operand::write("lse", lse)?);
        }
        _ => {
            operands.push(Operand::read("lse", lse)?);
            operands.push(head("dout", out, false)?);
            for &grad in pass.writes() {
                let of = match grad {
                    "dq" => q,
                    "dk" => k,
                    _ => v,
                };
                operands.push(head(grad, of, true)?);
            }
        }
    }
    if let Some(keep) = keep {
        operands.push(Operand::read("keep", keep)?);
    }
    let wide_of = |role: &str| {
        operands
            .iter()
            .find(|o| o.role() == role)
            .is_some_and(|o| o.vector_axis().is_some())
    };
    // `dout` is read through `out`'s view: the kernels that read both read them alike.
    let wide = Wide {
        q: wide_of("q"),
        k: wide_of("k"),
        v: wide_of("v"),
        out: match pass {
            Pass::Forward => wide_of("out"),
            Pass::GradV => wide_of("dout"),
            Pass::GradQ | Pass::GradK | Pass::GradKV => wide_of("out") && wide_of("dout"),
        },
        grads: [0, 1].map(|at| pass.writes().get(at).is_some_and(|role| wide_of(role))),
    };
    let mut source = KernelSource::new(op);
    for o in operands {
        source = source.operand(o);
    }
    source = source.scalar("scale", Scalar::F32);
    if let Mask::Causal { .. } = attention.mask {
        source = source.scalar("offset", Scalar::I32);
    }
    let body = match cores {
        Cores::Shader(blocks) => shader::body(pass, blocks, attention.mask, wide),
        Cores::Tensor(tiles) => tensor::body(pass, tiles, attention.mask, wide),
    };
    Ok(source.body(body))
}

#[cfg(test)]
mod tests {
    use super::shader::Blocks;

    #[test]
    fn blocks_shrink_to_fit_the_workgroup_memory() {
        // 16 KiB (WebGPU's default): heads of 32 stage 32 rows, heads of 128 eight.
        let fit = |d| Blocks::fitting(d, 1, 16 << 10).map(|b| b.staged);
        assert_eq!(fit(32), Some(32));
        assert_eq!(fit(128), Some(8));
        assert_eq!(Blocks::fitting(4096, 1, 16 << 10), None);
        for d in [1, 3, 32, 64, 100, 128, 256] {
            if let Some(b) = Blocks::fitting(d, 1, 16 << 10) {
                assert!(b.workgroup_bytes() <= 16 << 10);
                assert!(b.vecs() * 4 >= d);
            }
        }
    }
}
