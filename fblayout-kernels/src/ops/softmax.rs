//! Softmax along the last axis, with an optional scale and causal mask, forward and backward.
//!
//! A view of rank `r ≥ 2` is a stack of rows: every axis but the last is a row index (attention
//! scores `[batch, heads, q, k]` are `batch · heads · q` rows of `k` keys), and the last axis is
//! what the softmax normalises. With the scale `s` and the mask `M` (the keys a row keeps),
//!
//! - forward: `y_j = exp(s·x_j − m) / Σ_{i∈M} exp(s·x_i − m)` for `j ∈ M`, `y_j = 0` for the
//!   masked keys, with `m = max_{i∈M} s·x_i` (subtracting the row maximum keeps `exp` finite);
//!   a row whose every key is masked is all zeros;
//! - backward: `dx = s · y ⊙ (dy − Σ_row dy ⊙ y)` (masked keys have `y = 0`, so `dx = 0`).
//!
//! The causal mask ([`Mask::Causal`]) keeps key `k` of query `q` (the second-to-last axis) when
//! `k ≤ q + offset`: `offset = 0` for square self-attention, `k_len − q_len` when the queries
//! are the last of the keys.
//!
//! # On the GPU
//! A workgroup normalises rows one after the other; its invocations walk a row four elements
//! at a time (one `vec4` where every operand has wide accesses along the last axis, else four
//! elements a workgroup apart, so neighbouring invocations still read neighbouring elements).
//! The workgroup's size and walk follow the row length (`RowShape`): a row of up to 8 chunks
//! of four per invocation stays in registers, so the kernel reads `x` once and writes `y` once
//! (one pass), and short rows go several to a workgroup, all read before the first is reduced,
//! so that every invocation has several loads in flight; a longer row is read twice, first for
//! its maximum and sum (combined on the fly, as online softmax does), then to write `y`. The
//! maximum and the sum are combined across the workgroup with
//! `fbl_wg_max`/`fbl_wg_sum` (`wgsl::reduce`), with subgroup operations where the device
//! has them; everything accumulates in `f32`, whatever the storage. A view whose row length is
//! a run-time extent gets the kernel for its length when it is recorded (built once per length
//! class and kept).
//!
//! The row machinery here (the walk, and the `vec4` helpers around the operands' `load`/`store`)
//! also serves [`cross_entropy`](super::cross_entropy) and [`embedding`](super::embedding).
//!
//! # On the CPU
//! [`softmax_forward_cpu`] and [`softmax_backward_cpu`] compute the same in `f64`, rows in
//! parallel, through the operands' addressing.

use std::fmt::Write as _;
use std::sync::{Arc, Mutex};

use fblayout_core::__private::unravel;
use fblayout_core::kernel::{KernelModule, KernelSource, Operand, ParamValue, Scalar};
use fblayout_core::layout::{ElemType, View};
use rayon::prelude::*;

use super::compiled::Compiled;
use super::elementwise::{check_cpu_shapes, check_same_dims, check_same_shape};
use super::error::OpError;
use crate::cpu::{Logical, LogicalMut, Real};
use crate::entry_point::LinearEntry;
use crate::runtime::{Batch, Gpu};
use crate::tensor::GpuArg;
use crate::wgsl::reduce::{entry_params, subgroup_call_args, workgroup_reduce};

/// Which keys of a row the softmax keeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Mask {
    /// Every key.
    #[default]
    None,
    /// Key `k` of query `q` (the second-to-last axis) when `k ≤ q + offset`.
    Causal {
        /// How far past its own index a query sees.
        offset: i32,
    },
    /// Key `k` of a row whose first coordinate is `b` when `keep[b, k] ≠ 0`, read from a
    /// `[rows' first axis, keys]` operand of `u32` (an attention's padding mask, `[batch,
    /// seq_k]`, 1 for a real token and 0 for padding, as Hugging Face's `attention_mask`).
    /// Built with [`SoftmaxOp::with_keep`] and run with [`SoftmaxOp::forward_keys`] (on the CPU,
    /// [`softmax_forward_keys_cpu`]).
    Keys,
}

impl Mask {
    /// Whether query `q` keeps key `k` by their positions ([`Mask::Keys`] decides by its
    /// operand, so every position passes here).
    pub fn keeps(self, q: usize, k: usize) -> bool {
        match self {
            Self::None | Self::Keys => true,
            Self::Causal { offset } => k as i64 <= q as i64 + i64::from(offset),
        }
    }
}

/// What a softmax computes: `softmax(scale · x)` over the keys `mask` keeps.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Softmax {
    /// The factor applied to the input (`1/√head_dim` for attention scores).
    pub scale: f32,
    /// The keys each row keeps.
    pub mask: Mask,
}

impl Default for Softmax {
    fn default() -> Self {
        Self {
            scale: 1.0,
            mask: Mask::None,
        }
    }
}

impl Softmax {
    /// `softmax(scale · x)` over the keys `mask` keeps.
    pub fn new(scale: f32, mask: Mask) -> Self {
        Self { scale, mask }
    }

    /// The scalar parameters of the kernels.
    fn params(&self) -> Vec<(&'static str, ParamValue)> {
        let mut p = vec![("scale", ParamValue::F32(self.scale))];
        match self.mask {
            Mask::Causal { offset } => p.push(("offset", ParamValue::I32(offset))),
            Mask::None | Mask::Keys => {}
        }
        p
    }
}

const FORWARD: &str = "softmax forward";
const BACKWARD: &str = "softmax backward";
const FORWARD_ROLES: [(&str, Role); 2] = [("x", Role::Read), ("y", Role::Write)];
const FORWARD_ENTRY: &str = "softmax_forward";
const BACKWARD_ENTRY: &str = "softmax_backward";

/// A softmax's forward and backward kernels, built for the views of its input and output.
#[derive(Debug, Clone)]
pub struct SoftmaxOp {
    softmax: Softmax,
    x: View,
    y: View,
    /// The key mask's view, for [`Mask::Keys`].
    keep: Option<View>,
    forward: RowKernels,
    backward: RowKernels,
}

impl SoftmaxOp {
    /// The kernels of `softmax` reading `x` and writing `y` (and back: reading `y` and `dy`
    /// through `y`'s view and writing `dx` through `x`'s). Both views have one shape of rank
    /// at least 2 and store floats.
    /// A [`Mask::Keys`] softmax is built by [`with_keep`](Self::with_keep) instead.
    pub fn new(gpu: &Gpu, x: &View, y: &View, softmax: Softmax) -> Result<Self, OpError> {
        Self::build(gpu, x, y, None, softmax)
    }

    /// The kernels of a [`Mask::Keys`] softmax reading its key mask through `keep`, `[x's
    /// first axis, x's last axis]` of `u32` (the backward reads no mask: a masked key's
    /// probability is 0, and so is its gradient).
    pub fn with_keep(
        gpu: &Gpu,
        x: &View,
        y: &View,
        keep: &View,
        softmax: Softmax,
    ) -> Result<Self, OpError> {
        Self::build(gpu, x, y, Some(keep), softmax)
    }

    fn build(
        gpu: &Gpu,
        x: &View,
        y: &View,
        keep: Option<&View>,
        softmax: Softmax,
    ) -> Result<Self, OpError> {
        let rank = check_same_shape(FORWARD, ("y", y), &[("x", x)])?;
        if rank < 2 {
            return Err(OpError::shape(
                FORWARD,
                format!("a softmax needs rows: `x` has rank {rank}, not at least 2"),
            ));
        }
        check_float(FORWARD, "x", x)?;
        check_float(FORWARD, "y", y)?;
        let row_len = x.axes()[rank - 1].extent.as_static();
        match (softmax.mask, keep) {
            (Mask::Keys, Some(keep)) => check_keep_view(x, keep)?,
            (Mask::Keys, None) => {
                return Err(OpError::shape(
                    FORWARD,
                    "a key mask (`Mask::Keys`) needs its `keep` view: build with `with_keep`",
                ));
            }
            (Mask::None | Mask::Causal { .. }, Some(_)) => {
                return Err(OpError::shape(
                    FORWARD,
                    "a `keep` view was given, but the mask is not `Mask::Keys`",
                ));
            }
            (Mask::None | Mask::Causal { .. }, None) => {}
        }
        let op = Self {
            softmax,
            x: x.clone(),
            y: y.clone(),
            keep: keep.cloned(),
            forward: RowKernels::new(row_len),
            backward: RowKernels::new(row_len),
        };
        // Build the kernels of the row length now (or of the longest cached row when it is a
        // run-time extent), so a view or element type the device can't take fails here.
        let shape = RowShape::for_len(row_len.unwrap_or(RowShape::LONGEST_CACHED));
        op.forward.get(shape, |s| op.build_forward(gpu, s))?;
        op.backward.get(shape, |s| op.build_backward(gpu, s))?;
        Ok(op)
    }

    /// What the kernels compute.
    pub fn softmax(&self) -> Softmax {
        self.softmax
    }

    /// Whether the forward moves four elements per access (both views have wide accesses
    /// along the last axis).
    pub fn is_vectorized(&self) -> bool {
        wide_of(&FORWARD_ROLES, &[&self.x, &self.y]).is_ok_and(|(w, _)| w)
    }

    /// The shaders built so far: for a static row length the forward's and the backward's;
    /// for a run-time one, those of every row length class recorded so far too.
    pub fn modules(&self) -> Vec<KernelModule> {
        let built = self
            .forward
            .built()
            .into_iter()
            .chain(self.backward.built());
        built.map(|k| k.module().clone()).collect()
    }

    fn build_forward(&self, gpu: &Gpu, shape: RowShape) -> Result<Compiled, OpError> {
        let (wide, operands) = wide_of(&FORWARD_ROLES, &[&self.x, &self.y])?;
        let code = RowCode::new(&self.x, "x", wide, shape, gpu);
        let mut body = code.helpers(&["x"], &["y"]);
        body += &valid_keys(self.softmax.mask);
        body += &code.open(FORWARD_ENTRY);
        let (b, q) = (code.coord(0), code.coord(code.rank - 2));
        let valid = format!("row_valid(row_j, row_n, {q}, {b})");
        let load = format!(
            "select(vec4<f32>(row_lowest), {} * params.scale, {valid})",
            code.get("x", "row_j")
        );
        let (max, sum) = (
            code.reduce("fbl_wg_max", "row_m"),
            code.reduce("fbl_wg_sum", "row_s"),
        );
        body += &match shape.walk {
            Walk::Cached(_) => format!(
                "    var row_v: array<vec4<f32>, {cache}>;
{loads}{rest}}}
",
                cache = code.cached(),
                loads = code.rows(&format!(
                    "{chunks}            if (row_live) {{
                row_v[{slot}] = {load};
            }}
        }}
",
                    chunks = code.chunks(),
                    slot = code.slot(),
                )),
                rest = code.rows(&format!(
                    "        var row_m = row_lowest;
{chunks}            row_m = max(row_m, row_max4(row_v[{slot}]));
        }}
        let row_max = {max};
        var row_s = 0.0;
{chunks}            let row_e = select(vec4<f32>(0.0), exp(row_v[{slot}] - row_max), {valid});
            row_v[{slot}] = row_e;
            row_s = row_s + row_sum4(row_e);
        }}
        let row_total = {sum};
        let row_inv = select(0.0, 1.0 / row_total, row_total > 0.0);
{chunks}            if (row_live) {{
                {put};
            }}
        }}
",
                    chunks = code.chunks(),
                    slot = code.slot(),
                    put = code.put("y", "row_j", &format!("row_v[{}] * row_inv", code.slot())),
                )),
            ),
            Walk::Streamed => format!(
                "{}}}
",
                code.rows(&format!(
                    "        var row_m = row_lowest;
        var row_s = 0.0;
{chunks}            let row_x = {load};
            let row_mk = max(row_m, row_max4(row_x));
            let row_e = select(vec4<f32>(0.0), exp(row_x - row_mk), {valid});
            row_s = row_s * exp(row_m - row_mk) + row_sum4(row_e);
            row_m = row_mk;
        }}
        let row_max = {max};
        let row_total = {total};
        let row_inv = select(0.0, 1.0 / row_total, row_total > 0.0);
{chunks}            let row_x = {load};
            {put};
        }}
",
                    chunks = code.chunks(),
                    total = code.reduce("fbl_wg_sum", "row_s * exp(row_m - row_max)"),
                    put = code.put(
                        "y",
                        "row_j",
                        &format!("select(vec4<f32>(0.0), exp(row_x - row_max), {valid}) * row_inv")
                    ),
                ))
            ),
        };
        let mut source = KernelSource::new(FORWARD);
        for o in operands {
            source = source.operand(o);
        }
        if let Some(keep) = &self.keep {
            source = source.operand(Operand::read("keep", keep)?);
        }
        source = source.scalar("scale", Scalar::F32);
        if let Mask::Causal { .. } = self.softmax.mask {
            source = source.scalar("offset", Scalar::I32);
        }
        let source = source
            .body(workgroup_reduce(shape.size, code.subgroups))
            .body(body);
        Compiled::new(FORWARD, gpu, source)
    }

    fn build_backward(&self, gpu: &Gpu, shape: RowShape) -> Result<Compiled, OpError> {
        let roles = [("y", Role::Read), ("dy", Role::Read), ("dx", Role::Write)];
        let views = [&self.y, &self.y, &self.x];
        let (wide, operands) = wide_of(&roles, &views)?;
        let code = RowCode::new(&self.y, "y", wide, shape, gpu);
        let mut body = code.helpers(&["y", "dy"], &["dx"]);
        body += &code.open(BACKWARD_ENTRY);
        let (y, g) = (code.get("y", "row_j"), code.get("dy", "row_j"));
        let sum = code.reduce("fbl_wg_sum", "row_d");
        body += &match shape.walk {
            Walk::Cached(_) => format!(
                "    var row_ys: array<vec4<f32>, {cache}>;
    var row_gs: array<vec4<f32>, {cache}>;
{loads}{rest}}}
",
                cache = code.cached(),
                loads = code.rows(&format!(
                    "{chunks}            if (row_live) {{
                row_ys[{slot}] = {y};
                row_gs[{slot}] = {g};
            }}
        }}
",
                    chunks = code.chunks(),
                    slot = code.slot(),
                )),
                rest = code.rows(&format!(
                    "        var row_d = 0.0;
{chunks}            row_d = row_d + dot(row_ys[{slot}], row_gs[{slot}]);
        }}
        let row_dot = {sum};
{chunks}            if (row_live) {{
                {put};
            }}
        }}
",
                    chunks = code.chunks(),
                    slot = code.slot(),
                    put = code.put(
                        "dx",
                        "row_j",
                        &format!(
                            "params.scale * row_ys[{0}] * (row_gs[{0}] - row_dot)",
                            code.slot()
                        )
                    ),
                )),
            ),
            Walk::Streamed => format!(
                "{}}}
",
                code.rows(&format!(
                    "        var row_d = 0.0;
{chunks}            row_d = row_d + dot({y}, {g});
        }}
        let row_dot = {sum};
{chunks}            let row_y = {y};
            let row_g = {g};
            {put};
        }}
",
                    chunks = code.chunks(),
                    put = code.put("dx", "row_j", "params.scale * row_y * (row_g - row_dot)"),
                ))
            ),
        };
        let mut source = KernelSource::new(BACKWARD);
        for o in operands {
            source = source.operand(o);
        }
        let source = source
            .scalar("scale", Scalar::F32)
            .body(workgroup_reduce(shape.size, code.subgroups))
            .body(body);
        Compiled::new(BACKWARD, gpu, source)
    }

    /// Records `y = softmax(scale · x)` (of a softmax built without a key mask).
    pub fn forward(
        &self,
        batch: &mut Batch<'_>,
        x: &GpuArg<'_>,
        y: &GpuArg<'_>,
    ) -> Result<(), OpError> {
        self.record_forward(batch, x, None, y)
    }

    /// Records `y = softmax(scale · x)` over the keys `keep` keeps (of a softmax built by
    /// [`with_keep`](Self::with_keep)). `keep` is `[x's first extent, x's last extent]`; any
    /// value but 0 keeps a key.
    pub fn forward_keys(
        &self,
        batch: &mut Batch<'_>,
        x: &GpuArg<'_>,
        keep: &GpuArg<'_>,
        y: &GpuArg<'_>,
    ) -> Result<(), OpError> {
        self.record_forward(batch, x, Some(keep), y)
    }

    fn record_forward(
        &self,
        batch: &mut Batch<'_>,
        x: &GpuArg<'_>,
        keep: Option<&GpuArg<'_>>,
        y: &GpuArg<'_>,
    ) -> Result<(), OpError> {
        let dims = check_same_dims(FORWARD, &["x", "y"], [x.dims(), y.dims()].into_iter())?;
        let (rows, n) = rows_of(FORWARD, &dims)?;
        let mut args = vec![("x", x), ("y", y)];
        match (&self.keep, keep) {
            (Some(_), Some(keep)) => {
                check_keep_dims(&dims, &keep.dims())?;
                args.push(("keep", keep));
            }
            (None, None) => {}
            (Some(_), None) => {
                return Err(OpError::shape(
                    FORWARD,
                    "the softmax masks keys: record it with `forward_keys`",
                ));
            }
            (None, Some(_)) => {
                return Err(OpError::shape(
                    FORWARD,
                    "the softmax was built without a key mask: record it with `forward`",
                ));
            }
        }
        let gpu = batch.gpu();
        let shape = RowShape::for_len(n);
        let kernel = self.forward.get(shape, |s| self.build_forward(gpu, s))?;
        kernel.record_linear(
            batch,
            FORWARD_ENTRY,
            &args,
            &self.softmax.params(),
            shape.workgroups(rows),
        )
    }

    /// Records `dx = scale · y ⊙ (dy − Σ_row dy ⊙ y)`, with `y` the forward's output.
    pub fn backward(
        &self,
        batch: &mut Batch<'_>,
        y: &GpuArg<'_>,
        dy: &GpuArg<'_>,
        dx: &GpuArg<'_>,
    ) -> Result<(), OpError> {
        let dims = check_same_dims(
            BACKWARD,
            &["y", "dy", "dx"],
            [y.dims(), dy.dims(), dx.dims()].into_iter(),
        )?;
        let (rows, n) = rows_of(BACKWARD, &dims)?;
        let gpu = batch.gpu();
        let shape = RowShape::for_len(n);
        let kernel = self.backward.get(shape, |s| self.build_backward(gpu, s))?;
        kernel.record_linear(
            batch,
            BACKWARD_ENTRY,
            &[("y", y), ("dy", dy), ("dx", dx)],
            &[("scale", ParamValue::F32(self.softmax.scale))],
            shape.workgroups(rows),
        )
    }
}

/// `row_valid(j, n, q, b)`: which of the four keys of the chunk at `j` row `q` (of first
/// coordinate `b`) keeps.
fn valid_keys(mask: Mask) -> String {
    let keep = match mask {
        Mask::None => "row_in",
        Mask::Causal { .. } => {
            "row_in & (vec4<i32>(row_keys(row_j)) <= vec4<i32>(i32(row_q) + params.offset))"
        }
        Mask::Keys => "row_kept(row_in, row_keys(row_j), row_b)",
    };
    let kept = match mask {
        Mask::None | Mask::Causal { .. } => "",
        Mask::Keys => {
            "fn row_kept(row_in: vec4<bool>, row_ks: vec4<u32>, row_b: u32) -> vec4<bool> {
    var row_ok = vec4<bool>(false);
    for (var row_l = 0u; row_l < 4u; row_l = row_l + 1u) {
        if (row_in[row_l]) {
            row_ok[row_l] = keep_load(row_b, row_ks[row_l]) != 0u;
        }
    }
    return row_ok;
}
"
        }
    };
    format!(
        "{kept}fn row_valid(row_j: u32, row_n: u32, row_q: u32, row_b: u32) -> vec4<bool> {{
    let row_in = row_keys(row_j) < vec4<u32>(row_n);
    return {keep};
}}
"
    )
}

/// Refuses a key mask's view that is not `[x's first axis, x's last axis]` of `u32`.
fn check_keep_view(x: &View, keep: &View) -> Result<(), OpError> {
    if keep.layout().elem() != ElemType::U32 {
        return Err(OpError::Unsupported {
            op: FORWARD,
            role: "keep",
            view: keep.name().to_owned(),
            why: format!("it stores {}; a key mask is u32", keep.layout().elem()),
        });
    }
    let axes = x.axes();
    let (first, last) = (&axes[0], &axes[axes.len() - 1]);
    let [kb, kk] = keep.axes() else {
        return Err(OpError::shape(
            FORWARD,
            format!(
                "the key mask `{}` has rank {}, not 2",
                keep.name(),
                keep.axes().len()
            ),
        ));
    };
    for (what, a, b) in [("first", first, kb), ("last", last, kk)] {
        if let (Some(m), Some(n)) = (a.extent.as_static(), b.extent.as_static())
            && m != n
        {
            return Err(OpError::shape(
                FORWARD,
                format!("`x`'s {what} axis has {m} elements but the key mask's {n}"),
            ));
        }
    }
    Ok(())
}

/// Refuses a key mask whose extents are not `[dims' first, dims' last]`.
fn check_keep_dims(dims: &[usize], keep: &[usize]) -> Result<(), OpError> {
    let want = [dims[0], dims[dims.len() - 1]];
    if keep != want {
        return Err(OpError::shape(
            FORWARD,
            format!("the key mask has shape {keep:?}, not {want:?} (`x`'s first and last extents)"),
        ));
    }
    Ok(())
}

/// `y = softmax(scale · x)` along the last axis, on the CPU.
///
/// A [`Mask::Keys`] softmax runs [`softmax_forward_keys_cpu`] instead.
pub fn softmax_forward_cpu<T: Real>(
    softmax: Softmax,
    x: &dyn Logical<T>,
    y: &mut dyn LogicalMut<T>,
) -> Result<(), OpError> {
    if softmax.mask == Mask::Keys {
        return Err(OpError::shape(
            FORWARD,
            "a key mask (`Mask::Keys`) needs its values: run `softmax_forward_keys_cpu`",
        ));
    }
    forward_rows(softmax, x, None, y)
}

/// `y = softmax(scale · x)` along the last axis over the keys `keep` keeps, on the CPU (a
/// [`Mask::Keys`] softmax): key `k` of a row of first coordinate `b` when `keep[b, k] ≠ 0`.
pub fn softmax_forward_keys_cpu<T: Real>(
    softmax: Softmax,
    x: &dyn Logical<T>,
    keep: &dyn Logical<u32>,
    y: &mut dyn LogicalMut<T>,
) -> Result<(), OpError> {
    if softmax.mask != Mask::Keys {
        return Err(OpError::shape(
            FORWARD,
            "a key mask's values were given, but the mask is not `Mask::Keys`",
        ));
    }
    check_keep_dims(x.dims(), keep.dims())?;
    forward_rows(softmax, x, Some(keep), y)
}

fn forward_rows<T: Real>(
    softmax: Softmax,
    x: &dyn Logical<T>,
    keep: Option<&dyn Logical<u32>>,
    y: &mut dyn LogicalMut<T>,
) -> Result<(), OpError> {
    let s = f64::from(softmax.scale);
    map_rows(FORWARD, &[x], &mut [y], |lead, input, out| {
        let q = lead.last().copied().unwrap_or(0);
        let b = lead.first().copied().unwrap_or(0);
        let keeps = |k: usize| softmax.mask.keeps(q, k) && keep.is_none_or(|m| m.get(&[b, k]) != 0);
        let max = input[0]
            .iter()
            .enumerate()
            .filter(|&(k, _)| keeps(k))
            .map(|(_, &v)| s * v)
            .fold(f64::NEG_INFINITY, f64::max);
        for (k, (o, &v)) in out[0].iter_mut().zip(&input[0]).enumerate() {
            *o = if keeps(k) { (s * v - max).exp() } else { 0.0 };
        }
        let total: f64 = out[0].iter().sum();
        let inv = if total > 0.0 { 1.0 / total } else { 0.0 };
        out[0].iter_mut().for_each(|o| *o *= inv);
    })
}

/// `dx = scale · y ⊙ (dy − Σ_row dy ⊙ y)` on the CPU.
pub fn softmax_backward_cpu<T: Real>(
    softmax: Softmax,
    y: &dyn Logical<T>,
    dy: &dyn Logical<T>,
    dx: &mut dyn LogicalMut<T>,
) -> Result<(), OpError> {
    let s = f64::from(softmax.scale);
    map_rows(BACKWARD, &[y, dy], &mut [dx], |_, input, out| {
        let dot: f64 = input[0].iter().zip(&input[1]).map(|(y, g)| y * g).sum();
        for (o, (y, g)) in out[0].iter_mut().zip(input[0].iter().zip(&input[1])) {
            *o = s * y * (g - dot);
        }
    })
}

// ---------------------------------------------------------------------------------------------
// Rows: shared with the cross-entropy and embedding kernels.

/// `NaN`, from bits WGSL's constant evaluation doesn't see (it refuses NaN constants).
pub(crate) const NAN: &str = "var<private> fbl_nan_bits: u32 = 0x7fc00000u;
fn fbl_nan() -> f32 {
    return bitcast<f32>(fbl_nan_bits);
}
";

/// Whether a kernel reads or writes an operand.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Role {
    /// Read.
    Read,
    /// Written.
    Write,
}

/// The operands `roles` read through `views`, each asking for wide accesses along its last
/// axis, and whether every one got them.
pub(crate) fn wide_of(
    roles: &[(&'static str, Role)],
    views: &[&View],
) -> Result<(bool, Vec<Operand>), OpError> {
    let mut all = true;
    let mut operands = Vec::with_capacity(roles.len());
    for (&(role, access), view) in roles.iter().zip(views) {
        let o = match access {
            Role::Read => Operand::read(role, view)?,
            Role::Write => Operand::write(role, view)?,
        };
        let last = view.axes().len().checked_sub(1);
        let o = match last {
            Some(axis) => o.vectorized(axis),
            None => o,
        };
        all &= last.is_some() && o.vector_axis() == last;
        operands.push(o);
    }
    Ok((all, operands))
}

/// Refuses a view that doesn't store floats.
pub(crate) fn check_float(
    op: &'static str,
    role: &'static str,
    view: &View,
) -> Result<(), OpError> {
    match view.layout().elem() {
        ElemType::F32 | ElemType::F16 => Ok(()),
        other => Err(OpError::Unsupported {
            op,
            role,
            view: view.name().to_owned(),
            why: format!("it stores {other}; the kernel takes f32 or f16"),
        }),
    }
}

/// The number of rows (every axis but the last) and the row length of `dims`.
pub(crate) fn rows_of(op: &'static str, dims: &[usize]) -> Result<(u32, u64), OpError> {
    let (&n, lead) = dims
        .split_last()
        .ok_or_else(|| OpError::shape(op, "a row kernel needs rows, not a scalar"))?;
    let rows: usize = lead.iter().product();
    let rows = u32::try_from(rows)
        .map_err(|_| OpError::shape(op, format!("{dims:?} has more than 2^32 rows")))?;
    Ok((rows, n as u64))
}

/// How a workgroup walks its rows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Walk {
    /// Every invocation keeps its chunks (this many per row) in registers: one read of the row.
    Cached(u32),
    /// The row is read once for its statistics and once more to write the result.
    Streamed,
}

/// The workgroup that handles rows: its size (a power of two), how many rows it takes one
/// after the other, and its walk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct RowShape {
    /// Invocations per workgroup.
    pub(crate) size: u32,
    /// Rows per workgroup (several for short rows, so each invocation has several loads in
    /// flight).
    pub(crate) rows: u32,
    /// How they walk a row.
    pub(crate) walk: Walk,
}

impl RowShape {
    /// The fewest and most invocations of a row's workgroup. 256 is WebGPU's guaranteed
    /// limit; 32 fills a subgroup of every NVIDIA and most other GPUs.
    const SIZES: (u32, u32) = (32, 256);
    /// The most chunks of four an invocation keeps in registers for one row.
    const CACHED_CHUNKS: u32 = 8;
    /// The chunks an invocation should have in flight: short rows are taken this many to a
    /// workgroup.
    const IN_FLIGHT: u32 = 4;
    /// The longest row kept in registers.
    pub(crate) const LONGEST_CACHED: u64 = 4 * Self::SIZES.1 as u64 * Self::CACHED_CHUNKS as u64;

    /// The workgroup for rows of `n` elements: enough invocations for one chunk of four each,
    /// between 32 and 256; the row in registers when it fits 8 chunks per invocation, and
    /// then as many rows per workgroup as make 4 chunks per invocation.
    pub(crate) fn for_len(n: u64) -> Self {
        let chunks = n.div_ceil(4).max(1);
        let (least, most) = Self::SIZES;
        let size = chunks
            .next_power_of_two()
            .clamp(u64::from(least), u64::from(most));
        let per = chunks.div_ceil(size);
        let (rows, walk) = if per <= u64::from(Self::CACHED_CHUNKS) {
            let per = per as u32;
            ((Self::IN_FLIGHT / per).max(1), Walk::Cached(per))
        } else {
            (1, Walk::Streamed)
        };
        Self {
            size: size as u32,
            rows,
            walk,
        }
    }

    /// The same workgroup streaming one row at a time.
    pub(crate) fn streamed(self) -> Self {
        Self {
            rows: 1,
            walk: Walk::Streamed,
            ..self
        }
    }

    /// The workgroups that cover `rows` rows.
    pub(crate) fn workgroups(&self, rows: u32) -> u32 {
        rows.div_ceil(self.rows)
    }
}

/// The kernels of one entry point, one per [`RowShape`], built when first needed and kept.
#[derive(Debug, Clone)]
pub(crate) struct RowKernels {
    /// The row length when it is static (then one shape is ever used).
    row_len: Option<u64>,
    built: Arc<Mutex<Vec<Built>>>,
}

/// A kernel and the shape it was built for.
type Built = (RowShape, Arc<Compiled>);

impl RowKernels {
    pub(crate) fn new(row_len: Option<u64>) -> Self {
        Self {
            row_len,
            built: Arc::default(),
        }
    }

    /// The kernel for `shape`, built by `build` unless it was built before.
    pub(crate) fn get(
        &self,
        shape: RowShape,
        build: impl FnOnce(RowShape) -> Result<Compiled, OpError>,
    ) -> Result<Arc<Compiled>, OpError> {
        debug_assert!(
            self.row_len.is_none_or(|n| RowShape::for_len(n) == shape),
            "a static row length has one shape"
        );
        let mut built = self.built.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((_, k)) = built.iter().find(|(s, _)| *s == shape) {
            return Ok(Arc::clone(k));
        }
        let kernel = Arc::new(build(shape)?);
        built.push((shape, Arc::clone(&kernel)));
        Ok(kernel)
    }

    /// Every kernel built so far, in the order they were built.
    pub(crate) fn built(&self) -> Vec<Arc<Compiled>> {
        let built = self.built.lock().unwrap_or_else(|e| e.into_inner());
        built.iter().map(|(_, k)| Arc::clone(k)).collect()
    }
}

/// Quads: four elements along the last axis of an operand, read as one `vec4<f32>` and written
/// from one, the building block of every kernel here.
///
/// For each read role `r` the WGSL gets `{p}_get_r(lead.., j, n) -> vec4<f32>` and for each
/// written role `w` `{p}_put_w(lead.., j, n, v)`: the elements at keys `{p}_keys(j)` of the
/// row at the leading coordinates `lead`, those at or past `n` read as 0 and left unwritten.
/// The keys are `j, j+1, j+2, j+3` (read with one `load4` when the operand is wide and the
/// quad lies inside the row) or `j + i·step` when a walk wants neighbouring invocations on
/// neighbouring elements.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Quads<'a> {
    /// The start of every name the helpers declare.
    pub(crate) prefix: &'a str,
    /// The number of leading coordinates (the operands' rank less one).
    pub(crate) lead: usize,
    /// Whether the operands have `load4`/`store4` along the last axis.
    pub(crate) wide: bool,
    /// The distance between the keys of a quad.
    pub(crate) step: u32,
}

impl Quads<'_> {
    fn params(&self) -> String {
        let p = self.prefix;
        let mut s: Vec<String> = (0..self.lead).map(|d| format!("{p}_a{d}: u32")).collect();
        s.push(format!("{p}_j: u32"));
        s.push(format!("{p}_n: u32"));
        s.join(", ")
    }

    fn at(&self, key: &str) -> String {
        let p = self.prefix;
        let mut s: Vec<String> = (0..self.lead).map(|d| format!("{p}_a{d}")).collect();
        s.push(key.to_owned());
        s.join(", ")
    }

    /// The helpers' WGSL for operands `reads` and `writes`.
    pub(crate) fn wgsl(&self, reads: &[&str], writes: &[&str]) -> String {
        let p = self.prefix;
        let step = self.step;
        let mut s = format!(
            "fn {p}_keys({p}_j: u32) -> vec4<u32> {{
    return vec4<u32>({p}_j) + vec4<u32>(0u, {step}u, {}u, {}u);
}}
",
            2 * step,
            3 * step
        );
        let params = self.params();
        let whole = |call: String| {
            if self.wide && self.step == 1 {
                format!("    if ({p}_j + 3u < {p}_n) {{\n        {call}\n    }}\n")
            } else {
                String::new()
            }
        };
        let (quad, key) = (
            self.at(&format!("{p}_j")),
            self.at(&format!("{p}_k[{p}_l]")),
        );
        let each = |stmt: String| {
            format!(
                "    let {p}_k = {p}_keys({p}_j);
    for (var {p}_l = 0u; {p}_l < 4u; {p}_l = {p}_l + 1u) {{
        if ({p}_k[{p}_l] < {p}_n) {{
            {stmt}
        }}
    }}
"
            )
        };
        for role in reads {
            let _ = write!(
                s,
                "fn {p}_get_{role}({params}) -> vec4<f32> {{
{}    var {p}_v = vec4<f32>(0.0);
{}    return {p}_v;
}}
",
                whole(format!("return {role}_load4({quad});")),
                each(format!("{p}_v[{p}_l] = {role}_load({key});")),
            );
        }
        for role in writes {
            let _ = write!(
                s,
                "fn {p}_put_{role}({params}, {p}_v: vec4<f32>) {{
{}{}}}
",
                whole(format!("{role}_store4({quad}, {p}_v);\n        return;")),
                each(format!("{role}_store({key}, {p}_v[{p}_l]);")),
            );
        }
        s
    }

    /// A call of `{p}_get_{role}` at the leading coordinates `lead` and key `j` of a row of
    /// `n`.
    pub(crate) fn get(&self, role: &str, lead: &str, j: &str, n: &str) -> String {
        format!("{}_get_{role}({lead}, {j}, {n})", self.prefix)
    }

    /// A call of `{p}_put_{role}` writing `v`.
    pub(crate) fn put(&self, role: &str, lead: &str, j: &str, n: &str, v: &str) -> String {
        format!("{}_put_{role}({lead}, {j}, {n}, {v})", self.prefix)
    }
}

/// The WGSL of a row kernel: workgroups of rows of the operand `shape_of`.
///
/// The entry point ([`open`](Self::open)) finds its workgroup `row_g` from the folded grid and
/// names the row length `row_n`; [`rows`](Self::rows) writes a body out for each of the
/// workgroup's rows, binding its index `row_i`, whether it exists (`row_live`) and its leading
/// coordinates `row_c0, …`; the chunk loop ([`chunks`](Self::chunks)) gives each invocation
/// its chunks `row_k` of a row, each starting at key `row_j`, which a cached walk keeps at
/// [`slot`](Self::slot).
#[derive(Debug, Clone)]
pub(crate) struct RowCode<'a> {
    shape_of: &'a str,
    rank: usize,
    shape: RowShape,
    quads: Quads<'static>,
    subgroups: bool,
}

impl<'a> RowCode<'a> {
    /// The code for rows of `view` (bound as operand `shape_of`), walked as `shape` says,
    /// with wide accesses when `wide`, on `gpu`.
    pub(crate) fn new(
        view: &View,
        shape_of: &'a str,
        wide: bool,
        shape: RowShape,
        gpu: &Gpu,
    ) -> Self {
        let rank = view.axes().len();
        Self {
            shape_of,
            rank,
            shape,
            quads: Quads {
                prefix: "row",
                lead: rank - 1,
                wide,
                // Four keys a workgroup apart keep scalar accesses coalesced.
                step: if wide { 1 } else { shape.size },
            },
            subgroups: gpu.features().subgroups,
        }
    }

    /// The name of leading coordinate `d`.
    pub(crate) fn coord(&self, d: usize) -> String {
        ENTRY.coord(d)
    }

    fn lead(&self) -> String {
        (0..self.rank - 1)
            .map(|d| self.coord(d))
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// The quad helpers of `reads` and `writes`, the first key of chunk `k` and the reductions
    /// of four values.
    pub(crate) fn helpers(&self, reads: &[&str], writes: &[&str]) -> String {
        let size = self.shape.size;
        let first = if self.quads.wide {
            format!("(row_k * {size}u + row_lid) * 4u")
        } else {
            format!("row_k * {}u + row_lid", 4 * size)
        };
        format!(
            "const row_lowest: f32 = -3.4028234663852886e38f;
fn row_first(row_k: u32, row_lid: u32) -> u32 {{
    return {first};
}}
fn row_max4(row_v: vec4<f32>) -> f32 {{
    return max(max(row_v.x, row_v.y), max(row_v.z, row_v.w));
}}
fn row_sum4(row_v: vec4<f32>) -> f32 {{
    return dot(row_v, vec4<f32>(1.0));
}}
{}",
            self.quads.wgsl(reads, writes)
        )
    }

    /// The entry point `name` up to its rows: signature, the workgroup's index `row_g`, early
    /// return past the last row (uniform: the whole workgroup leaves) and the row length
    /// `row_n`.
    pub(crate) fn open(&self, name: &str) -> String {
        format!(
            "@compute @workgroup_size({size})
fn {name}(
    @builtin(workgroup_id) row_wg: vec3<u32>,
    @builtin(num_workgroups) row_nwg: vec3<u32>,
    @builtin(local_invocation_index) row_lid: u32,
    {subgroup}
) {{
    let row_g = row_wg.x + row_wg.y * row_nwg.x;
    if (row_g * {per}u >= {rows}) {{
        return;
    }}
    let row_n = {n};
",
            size = self.shape.size,
            subgroup = entry_params(self.subgroups),
            per = self.shape.rows,
            rows = self.rows_expr(),
            n = self.dim(self.rank - 1),
        )
    }

    fn dim(&self, d: usize) -> String {
        format!("{}_dim{d}()", self.shape_of)
    }

    /// The number of rows, a WGSL expression.
    fn rows_expr(&self) -> String {
        let lead: Vec<String> = (0..self.rank - 1).map(|d| self.dim(d)).collect();
        lead.join(" * ")
    }

    /// `body` once for each of the workgroup's rows (written out, so that every index into
    /// the registers is a constant), each in a block that binds the row's place `row_r` in
    /// the workgroup, its index `row_i`, whether it exists (`row_live`, uniform) and its
    /// leading coordinates.
    pub(crate) fn rows(&self, body: &str) -> String {
        let lead: Vec<String> = (0..self.rank - 1).map(|d| self.dim(d)).collect();
        let decode = ENTRY.decode(&lead).replace("\n    ", "\n        ");
        let mut s = String::new();
        for r in 0..self.shape.rows {
            let _ = write!(
                s,
                "    {{
        let row_r = {r}u;
        let {i} = row_g * {per}u + row_r;
        let row_live = {i} < {rows};
    {decode}{body}    }}
",
                per = self.shape.rows,
                i = ENTRY.index(),
                rows = self.rows_expr(),
            );
        }
        s
    }

    /// The number of chunks a cached walk keeps for all its rows.
    pub(crate) fn cached(&self) -> u32 {
        match self.shape.walk {
            Walk::Cached(k) => k * self.shape.rows,
            Walk::Streamed => 0,
        }
    }

    /// Where a cached walk keeps chunk `row_k` of row `row_r`, a WGSL expression.
    pub(crate) fn slot(&self) -> String {
        match self.shape.walk {
            Walk::Cached(k) => format!("row_r * {k}u + row_k"),
            Walk::Streamed => "row_k".to_owned(),
        }
    }

    /// The opening of a loop over the invocation's chunks of a row, which binds `row_k` and
    /// `row_j`; the caller closes it.
    pub(crate) fn chunks(&self) -> String {
        let bound = match self.shape.walk {
            Walk::Cached(k) => format!("{k}u"),
            Walk::Streamed => format!(
                "(row_n + {}u) / {}u",
                4 * self.shape.size - 1,
                4 * self.shape.size
            ),
        };
        format!(
            "        for (var row_k = 0u; row_k < {bound}; row_k = row_k + 1u) {{
            let row_j = row_first(row_k, row_lid);
"
        )
    }

    /// `op` (`fbl_wg_sum` or `fbl_wg_max`) of `value` over the workgroup.
    pub(crate) fn reduce(&self, op: &str, value: &str) -> String {
        format!(
            "{op}({value}, row_lid{})",
            subgroup_call_args(self.subgroups)
        )
    }

    /// The quad of `role` at key `j` of this invocation's row.
    pub(crate) fn get(&self, role: &str, j: &str) -> String {
        self.quads.get(role, &self.lead(), j, "row_n")
    }

    /// Writes `v` to the quad of `role` at key `j` of this invocation's row.
    pub(crate) fn put(&self, role: &str, j: &str, v: &str) -> String {
        self.quads.put(role, &self.lead(), j, "row_n", v)
    }
}

/// The row entry point's names (`row_i`, `row_c0`, …).
const ENTRY: LinearEntry<'static> = LinearEntry {
    name: "",
    prefix: "row",
};

/// The CPU twin of a row kernel: `f(lead, inputs, outputs)` for every row (all operands of one
/// shape, rank at least 2), in `f64`, rows in parallel; `lead` is the row's coordinate along
/// the leading axes, `inputs` its elements in each input, and `outputs` (zeros) what to write
/// to each output.
pub(crate) fn map_rows<T: Real>(
    op: &'static str,
    inputs: &[&dyn Logical<T>],
    outputs: &mut [&mut dyn LogicalMut<T>],
    f: impl Fn(&[usize], &[Vec<f64>], &mut [Vec<f64>]) + Sync,
) -> Result<(), OpError> {
    let dims = check_cpu_shapes(op, inputs, outputs)?;
    if dims.len() < 2 {
        return Err(OpError::shape(
            op,
            format!("a row kernel needs rank at least 2, not {}", dims.len()),
        ));
    }
    let (n, lead_dims) = (dims[dims.len() - 1], &dims[..dims.len() - 1]);
    let lead_shape: Vec<u64> = lead_dims.iter().map(|&d| d as u64).collect();
    let rows: usize = lead_dims.iter().product();
    let n_out = outputs.len();
    let results: Vec<Vec<Vec<f64>>> = (0..rows)
        .into_par_iter()
        .map(|r| {
            let mut c = vec![0u64; lead_shape.len()];
            unravel(r as u64, &lead_shape, &mut c);
            let lead: Vec<usize> = c.iter().map(|&v| v as usize).collect();
            let mut index = lead.clone();
            index.push(0);
            let rows_in: Vec<Vec<f64>> = inputs
                .iter()
                .map(|a| {
                    (0..n)
                        .map(|j| {
                            *index.last_mut().expect("rank ≥ 2") = j;
                            a.get(&index).to_f64()
                        })
                        .collect()
                })
                .collect();
            let mut rows_out = vec![vec![0.0; n]; n_out];
            f(&lead, &rows_in, &mut rows_out);
            rows_out
        })
        .collect();
    for (k, o) in outputs.iter_mut().enumerate() {
        let dense: Vec<T> = results
            .iter()
            .flat_map(|row| row[k].iter().map(|&v| T::from_f64(v)))
            .collect();
        o.scatter(&dense);
    }
    Ok(())
}
