//! Rotary position embedding (RoPE), forward and backward, as Hugging Face's Llama computes it
//! (`rotate_half`: the pairs are `(i, i + d/2)`, not neighbours).
//!
//! For a head of size `d` (even), half `h = d/2`, a token at position `p` and the tables
//! `cos[p, i]`, `sin[p, i]` (`i < h`), every head of every token is rotated pair by pair:
//!
//! - forward: `y[i] = x[i]·cos[p,i] − x[i+h]·sin[p,i]` and `y[i+h] = x[i+h]·cos[p,i] +
//!   x[i]·sin[p,i]`;
//! - backward, the transpose (a rotation by −θ): `dx[i] = dy[i]·cos + dy[i+h]·sin` and
//!   `dx[i+h] = dy[i+h]·cos − dy[i]·sin`.
//!
//! # Operands
//! `x` and `y` are views `[batch, seq, heads, head_dim]` of any layout, `f32` or `f16` each
//! (computed in `f32`): separate tensors, or the query and key parts of a fused projection as
//! [`qkv_views`](super::qkv_views) gives them. `positions` is `[batch, seq]` of `u32`, any
//! layout; `cos` and `sin` are `[max_positions, head_dim/2]` of `f32`, any layout, built by
//! [`rope_tables`]. The backward reads `dy` through `y`'s view and writes `dx` through `x`'s,
//! so forward and backward share one layout definition. Each invocation rotates one pair (four
//! pairs, with `load4`/`store4`, where x, y and the tables have wide accesses along their last
//! axes and `head_dim/2` is a static multiple of four).
//!
//! # Positions past the tables
//! A position at or past `max_positions` is an error. Positions from the host are checked
//! there ([`check_positions`], [`OpError::OutOfRange`]), and so are the CPU twin's; positions
//! made on the GPU reach the shader unchecked, and it *masks* them: it reads row 0 of the
//! tables instead (never a row outside them) and writes NaN to both elements of every pair of
//! that token, so the mistake shows in the result rather than passing as a plausible rotation.
//!
//! # Tables
//! [`rope_tables`] computes `cos` and `sin` in `f64` from the base `theta`: `inv_freq[i] =
//! theta^(−2i/d)`, angle `(p / s)·inv_freq[i]` where [`RopeScaling`] says `s` (1, or the factor
//! of linear position interpolation).
//!
//! # On the CPU
//! [`rope_forward_cpu`] and [`rope_backward_cpu`] compute the same in `f64` through the
//! operands' addressing, reading the tables as stored.
//!
//! ```no_run
//! use fblayout_core::layout::{ElemType, LayoutSpec};
//! use fblayout_kernels::ops::rope::{RopeAngles, RopeOp, RopeScaling, RopeViews, check_positions, rope_tables};
//! use fblayout_kernels::ops::qkv_views;
//! use fblayout_kernels::runtime::{Gpu, GpuBuffer};
//! use fblayout_kernels::tensor::GpuArg;
//!
//! let gpu = Gpu::new()?;
//! // Llama 3 8B's attention: 32 query heads and 8 key/value heads of 128, one fused projection.
//! let qkv = LayoutSpec::new("qkv").dyn_axis("batch").dyn_axis("seq").axis("hidden", 48 * 128).build()?;
//! let (q, k, _) = qkv_views(&qkv.view(), 32, 8)?;
//! let positions = LayoutSpec::new("pos").elem(ElemType::U32).dyn_axis("batch").dyn_axis("seq").build()?.view();
//! let table = LayoutSpec::new("table").axis("position", 8192).axis("pair", 64).build()?.view();
//! // The rotated queries and keys land in a second buffer of the fused layout, through the same views.
//! let views = |x| RopeViews { x, y: x, positions: &positions, cos: &table, sin: &table };
//! let (rope_q, rope_k) = (RopeOp::new(&gpu, &views(&q))?, RopeOp::new(&gpu, &views(&k))?);
//!
//! let (cos, sin) = rope_tables(500_000.0, 128, 8192, RopeScaling::None);
//! let (b, s) = (2u32, 512u32);
//! let ids: Vec<u32> = (0..b).flat_map(|_| 0..s).collect();
//! check_positions(&ids, 8192)?;
//! let tokens = [("batch", b), ("seq", s)];
//! let (cb, sb) = (GpuBuffer::from_slice(&gpu, &cos)?, GpuBuffer::from_slice(&gpu, &sin)?);
//! let pb = GpuBuffer::from_slice(&gpu, &ids)?;
//! let angles = RopeAngles {
//!     positions: GpuArg::new(&pb, &positions, &tokens)?,
//!     cos: GpuArg::new(&cb, &table, &[])?,
//!     sin: GpuArg::new(&sb, &table, &[])?,
//! };
//! let rows = (b * s) as usize * 48 * 128;
//! let (projected, rotated) = (GpuBuffer::zeroed::<f32>(&gpu, rows)?, GpuBuffer::scratch::<f32>(&gpu, rows)?);
//! let mut batch = gpu.batch();
//! for (op, view) in [(&rope_q, &q), (&rope_k, &k)] {
//!     let (x, y) = (GpuArg::new(&projected, view, &tokens)?, GpuArg::new(&rotated, view, &tokens)?);
//!     op.forward(&mut batch, &x, &angles, &y)?;
//! }
//! batch.submit()?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use fblayout_core::kernel::{KernelSource, Operand};
use fblayout_core::layout::{ElemType, View};
use rayon::prelude::*;

use super::compiled::{Compiled, workgroups_for};
use super::error::OpError;
use super::softmax::{NAN, check_float};
use crate::cpu::{Logical, LogicalMut, Real};
use crate::entry_point::LinearEntry;
use crate::runtime::{Batch, Gpu};
use crate::tensor::GpuArg;

const OP: &str = "rope";
const FORWARD: &str = "rope forward";
const BACKWARD: &str = "rope backward";
const FORWARD_ENTRY: &str = "rope_forward";
const BACKWARD_ENTRY: &str = "rope_backward";

/// How positions are scaled before they become angles.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub enum RopeScaling {
    /// Angles of the positions themselves: `p · inv_freq[i]`.
    #[default]
    None,
    /// Linear position interpolation (Hugging Face's `rope_type = "linear"`): positions divided
    /// by `factor` (`(p / factor) · inv_freq[i]`), so a model trained on `n` positions reads
    /// `factor · n`. `factor` should be positive and finite; otherwise the angles are not
    /// numbers and neither are the tables.
    Linear {
        /// What positions are divided by.
        factor: f64,
    },
}

impl RopeScaling {
    /// What a position is divided by.
    fn divisor(self) -> f64 {
        match self {
            Self::None => 1.0,
            Self::Linear { factor } => factor,
        }
    }
}

/// The tables `(cos, sin)` of RoPE for heads of `head_dim` and positions `0..max_positions`,
/// each `[max_positions, head_dim/2]` row-major: `cos[p · head_dim/2 + i] = cos(θ(p, i))` with
/// `θ(p, i) = (p / s) · theta^(−2i/head_dim)`, computed in `f64` and rounded to `f32` once.
/// `s` is 1, or the factor of [`RopeScaling::Linear`]. `theta` is the base (10 000 for Llama
/// 2, 500 000 for Llama 3).
///
/// An odd `head_dim` gives `⌊head_dim/2⌋` columns (the op refuses odd heads); `max_positions`
/// 0 gives empty tables. A `theta` or factor that is not positive and finite gives tables that
/// are not numbers, never a panic.
///
/// ```
/// use fblayout_kernels::ops::rope::{RopeScaling, rope_tables};
///
/// let (cos, sin) = rope_tables(10_000.0, 4, 3, RopeScaling::None);
/// // Position 0 is the identity; column 1's frequency is 10 000^(−1/2) = 0.01.
/// assert_eq!((cos[0], sin[0], cos[1], sin[1]), (1.0, 0.0, 1.0, 0.0));
/// assert!((sin[2 * 2 + 1] - 0.02f32.sin()).abs() < 1e-8);
/// ```
pub fn rope_tables(
    theta: f64,
    head_dim: u32,
    max_positions: u32,
    scaling: RopeScaling,
) -> (Vec<f32>, Vec<f32>) {
    let d = f64::from(head_dim);
    let inv_freq: Vec<f64> = (0..head_dim / 2)
        .map(|i| theta.powf(-2.0 * f64::from(i) / d))
        .collect();
    let divisor = scaling.divisor();
    let n = max_positions as usize * inv_freq.len();
    let (mut cos, mut sin) = (Vec::with_capacity(n), Vec::with_capacity(n));
    for p in 0..max_positions {
        let t = f64::from(p) / divisor;
        for f in &inv_freq {
            let angle = t * f;
            cos.push(angle.cos() as f32);
            sin.push(angle.sin() as f32);
        }
    }
    (cos, sin)
}

/// Checks positions from the host (`[batch, seq]` in any order) against tables of
/// `max_positions` rows: [`OpError::OutOfRange`] names the first one at or past it.
pub fn check_positions(positions: &[u32], max_positions: u32) -> Result<(), OpError> {
    positions_below(OP, positions, u64::from(max_positions))
}

/// [`check_positions`] for `op`.
fn positions_below(op: &'static str, positions: &[u32], max_positions: u64) -> Result<(), OpError> {
    match positions
        .iter()
        .position(|&p| u64::from(p) >= max_positions)
    {
        Some(at) => Err(OpError::OutOfRange {
            op,
            role: "positions",
            position: at,
            value: u64::from(positions[at]),
            limit: max_positions,
        }),
        None => Ok(()),
    }
}

/// The views a [`RopeOp`] is built for (see the module docs for their shapes).
#[derive(Debug, Clone, Copy)]
pub struct RopeViews<'a> {
    /// The input `[batch, seq, heads, head_dim]`, `f32` or `f16` (the backward writes `dx`
    /// through it).
    pub x: &'a View,
    /// The output `[batch, seq, heads, head_dim]`, `f32` or `f16` (the backward reads `dy`
    /// through it).
    pub y: &'a View,
    /// The position of each token, `[batch, seq]` of `u32`.
    pub positions: &'a View,
    /// `[max_positions, head_dim/2]` of `f32`.
    pub cos: &'a View,
    /// `[max_positions, head_dim/2]` of `f32`, the shape of `cos`.
    pub sin: &'a View,
}

/// Where the angles of a forward or backward come from: each token's position and the tables,
/// read through the views the op was built for.
#[derive(Debug, Clone)]
pub struct RopeAngles<'a> {
    /// `[batch, seq]` positions.
    pub positions: GpuArg<'a>,
    /// `[max_positions, head_dim/2]` cosines.
    pub cos: GpuArg<'a>,
    /// `[max_positions, head_dim/2]` sines.
    pub sin: GpuArg<'a>,
}

/// RoPE's forward and backward kernels, built for the views of their operands.
#[derive(Debug, Clone)]
pub struct RopeOp {
    forward: Kernel,
    backward: Kernel,
}

/// One of the two kernels, and whether it rotates four pairs per invocation.
#[derive(Debug, Clone)]
struct Kernel {
    compiled: Compiled,
    wide: bool,
}

impl RopeOp {
    /// The kernels for `views`: checks their ranks, element types and the extents known when
    /// building (an odd `head_dim`, tables that aren't `head_dim/2` wide, `cos` and `sin` of
    /// different shapes, positions of another batch or sequence are errors).
    pub fn new(gpu: &Gpu, views: &RopeViews<'_>) -> Result<Self, OpError> {
        let RopeViews {
            x,
            y,
            positions,
            cos,
            sin,
        } = *views;
        check_float(FORWARD, "x", x)?;
        check_float(FORWARD, "y", y)?;
        check_elem(positions, "positions", ElemType::U32)?;
        check_elem(cos, "cos", ElemType::F32)?;
        check_elem(sin, "sin", ElemType::F32)?;
        let statics = |v: &View| -> Vec<Option<u64>> {
            v.axes().iter().map(|a| a.extent.as_static()).collect()
        };
        let all = [x, y, positions, cos, sin].map(statics);
        check_extents(
            FORWARD,
            ["x", "y", "positions", "cos", "sin"],
            all.each_ref().map(Vec::as_slice),
        )?;
        Ok(Self {
            forward: build(gpu, Pass::Forward, views)?,
            backward: build(gpu, Pass::Backward, views)?,
        })
    }

    /// Whether both kernels rotate four pairs per invocation.
    pub fn is_vectorized(&self) -> bool {
        self.forward.wide && self.backward.wide
    }

    /// The WGSL of the forward and of the backward (validated by naga when built).
    pub fn shaders(&self) -> [&str; 2] {
        [
            self.forward.compiled.module().source(),
            self.backward.compiled.module().source(),
        ]
    }

    /// Records `y = rope(x)` at the positions and tables of `angles`.
    pub fn forward(
        &self,
        batch: &mut Batch<'_>,
        x: &GpuArg<'_>,
        angles: &RopeAngles<'_>,
        y: &GpuArg<'_>,
    ) -> Result<(), OpError> {
        self.record(batch, Pass::Forward, x, angles, y)
    }

    /// Records `dx = ropeᵀ(dy)`: `dy` read through `y`'s view, `dx` written through `x`'s.
    pub fn backward(
        &self,
        batch: &mut Batch<'_>,
        dy: &GpuArg<'_>,
        angles: &RopeAngles<'_>,
        dx: &GpuArg<'_>,
    ) -> Result<(), OpError> {
        self.record(batch, Pass::Backward, dy, angles, dx)
    }

    fn record(
        &self,
        batch: &mut Batch<'_>,
        pass: Pass,
        input: &GpuArg<'_>,
        angles: &RopeAngles<'_>,
        output: &GpuArg<'_>,
    ) -> Result<(), OpError> {
        let (op, entry) = (pass.op(), pass.entry());
        let kernel = match pass {
            Pass::Forward => &self.forward,
            Pass::Backward => &self.backward,
        };
        let [input_role, output_role] = pass.roles();
        let RopeAngles {
            positions,
            cos,
            sin,
        } = angles;
        let known =
            |d: Vec<usize>| -> Vec<Option<u64>> { d.into_iter().map(|n| Some(n as u64)).collect() };
        let (x, y) = pass.x_y(
            (input_role, known(input.dims())),
            (output_role, known(output.dims())),
        );
        check_extents(
            op,
            [x.0, y.0, "positions", "cos", "sin"],
            [
                &x.1,
                &y.1,
                &known(positions.dims()),
                &known(cos.dims()),
                &known(sin.dims()),
            ],
        )?;
        // One invocation per pair, or per run of four pairs: `head_dim / 2` or `/ 8` per head.
        let d = output.dims();
        let runs = if kernel.wide { 8 } else { 2 };
        let invocations = [d[0], d[1], d[2], d[3] / runs]
            .iter()
            .fold(1u64, |n, &e| n.saturating_mul(e as u64));
        kernel.compiled.record_linear(
            batch,
            entry,
            &[
                (input_role, input),
                ("positions", positions),
                ("cos", cos),
                ("sin", sin),
                (output_role, output),
            ],
            &[],
            workgroups_for(op, invocations)?,
        )
    }
}

/// Which of the two kernels.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Pass {
    Forward,
    Backward,
}

impl Pass {
    /// `(x's, y's)` of what belongs to the tensor read and to the tensor written: the forward
    /// reads x and writes y, the backward reads dy (y's view) and writes dx (x's). Its own
    /// inverse: it maps `(x's, y's)` to `(read, written)` too.
    fn x_y<T>(self, read: T, written: T) -> (T, T) {
        match self {
            Self::Forward => (read, written),
            Self::Backward => (written, read),
        }
    }

    /// The entry point's name.
    fn entry(self) -> &'static str {
        match self {
            Self::Forward => FORWARD_ENTRY,
            Self::Backward => BACKWARD_ENTRY,
        }
    }

    /// The kernel's name.
    fn op(self) -> &'static str {
        match self {
            Self::Forward => FORWARD,
            Self::Backward => BACKWARD,
        }
    }

    /// The roles of the tensor read and of the tensor written.
    fn roles(self) -> [&'static str; 2] {
        match self {
            Self::Forward => ["x", "y"],
            Self::Backward => ["dy", "dx"],
        }
    }
}

/// Refuses a view that doesn't store `elem`.
fn check_elem(view: &View, role: &'static str, elem: ElemType) -> Result<(), OpError> {
    match view.layout().elem() {
        e if e == elem => Ok(()),
        other => Err(OpError::Unsupported {
            op: FORWARD,
            role,
            view: view.name().to_owned(),
            why: format!("it stores {other}; RoPE reads `{role}` as {elem}"),
        }),
    }
}

/// Checks the extents of x, y, positions, cos and sin (named `roles`) against each other
/// (`None`: not known yet, which any value fits): x and y `[batch, seq, heads, head_dim]` alike,
/// positions `[batch, seq]`, cos and sin `[rows, head_dim/2]` alike, `head_dim` even.
fn check_extents(
    op: &'static str,
    roles: [&str; 5],
    dims: [&[Option<u64>]; 5],
) -> Result<(), OpError> {
    for ((role, d), rank) in roles.iter().zip(&dims).zip([4, 4, 2, 2, 2]) {
        if d.len() != rank {
            return Err(OpError::shape(
                op,
                format!("`{role}` has rank {}, not {rank}", d.len()),
            ));
        }
    }
    let [x, y, positions, cos, sin] = dims;
    // (what, [(operand, axis)]) for every extent that appears in several operands.
    let pairs: [(&str, [(usize, usize); 2]); 9] = [
        ("batch", [(0, 0), (1, 0)]),
        ("seq", [(0, 1), (1, 1)]),
        ("heads", [(0, 2), (1, 2)]),
        ("head_dim", [(0, 3), (1, 3)]),
        ("batch", [(0, 0), (2, 0)]),
        ("seq", [(0, 1), (2, 1)]),
        ("batch", [(1, 0), (2, 0)]),
        ("seq", [(1, 1), (2, 1)]),
        ("the tables' rows", [(3, 0), (4, 0)]),
    ];
    let all = [x, y, positions, cos, sin];
    for (what, [(a, i), (b, j)]) in pairs {
        if let (Some(m), Some(n)) = (all[a][i], all[b][j]) {
            if m != n {
                return Err(OpError::shape(
                    op,
                    format!(
                        "{what} is {m} in `{}` (axis {i}) but {n} in `{}` (axis {j})",
                        roles[a], roles[b]
                    ),
                ));
            }
        }
    }
    let head_dim = x[3].or(y[3]);
    if let Some(d) = head_dim {
        if d == 0 || d % 2 != 0 {
            return Err(OpError::shape(
                op,
                format!(
                    "head_dim is {d}: RoPE rotates the pairs (i, i + head_dim/2), so a head has \
                     an even, positive size"
                ),
            ));
        }
    }
    for (k, table) in [(3, cos), (4, sin)] {
        if let (Some(d), Some(w)) = (head_dim, table[1]) {
            if w != d / 2 {
                return Err(OpError::shape(
                    op,
                    format!(
                        "`{}` has {w} columns; heads of {d} need head_dim/2 = {}",
                        roles[k],
                        d / 2
                    ),
                ));
            }
        }
    }
    Ok(())
}

/// Builds the kernel of `pass`.
fn build(gpu: &Gpu, pass: Pass, views: &RopeViews<'_>) -> Result<Kernel, OpError> {
    let (op, entry) = (pass.op(), pass.entry());
    let [input, output] = pass.roles();
    let (input_view, output_view) = pass.x_y(views.x, views.y); // read, written
    let operands = [
        Operand::read(input, input_view)?.vectorized(3),
        Operand::read("positions", views.positions)?,
        Operand::read("cos", views.cos)?.vectorized(1),
        Operand::read("sin", views.sin)?.vectorized(1),
        Operand::write(output, output_view)?.vectorized(3),
    ];
    let head_dim = |v: &View| v.axes()[3].extent.as_static();
    let half = head_dim(views.x).or(head_dim(views.y)).map(|d| d / 2);
    let wide = half.is_some_and(|h| h % 4 == 0)
        && operands
            .iter()
            .filter(|o| o.role() != "positions")
            .all(|o| o.vector_axis().is_some());
    let mut source = KernelSource::new(op);
    for o in operands {
        source = source.operand(o);
    }
    let body = body(pass, entry, wide);
    Ok(Kernel {
        compiled: Compiled::new(op, gpu, source.body(body))?,
        wide,
    })
}

/// The entry point of `pass` (see the module docs): one invocation per pair, or per four
/// pairs where `wide`, over `[batch, seq, heads, head_dim/2]`.
fn body(pass: Pass, name: &str, wide: bool) -> String {
    let [input, output] = pass.roles();
    // The backward rotates by −θ: the sine changes sign.
    let sign = match pass {
        Pass::Forward => "",
        Pass::Backward => "-",
    };
    let entry = LinearEntry {
        name,
        prefix: "rope",
    };
    let [b, s, h, c] = [0, 1, 2, 3].map(|d| entry.coord(d));
    // The first pair of the invocation's run (four pairs, or one), and what head_dim is
    // divided by to count the runs of a head.
    let (w, first, runs) = if wide {
        ("4", format!("{c} * 4u"), 8)
    } else {
        ("", c.clone(), 2)
    };
    let units = [
        format!("{output}_dim0()"),
        format!("{output}_dim1()"),
        format!("{output}_dim2()"),
        format!("({output}_dim3() / {runs}u)"),
    ];
    let nan = if wide {
        "vec4<f32>(fbl_nan())"
    } else {
        "fbl_nan()"
    };
    let at = |i: &str| format!("{b}, {s}, {h}, {i}");
    format!(
        "{NAN}{open}{decode}    let rot_half = {output}_dim3() / 2u;
    let rot_i = {first};
    let rot_j = rot_i + rot_half;
    let rot_pos = positions_load({b}, {s});
    // A position past the tables reads row 0 and writes NaN: never a read outside them.
    let rot_ok = rot_pos < cos_dim0() && rot_pos < sin_dim0();
    let rot_row = select(0u, rot_pos, rot_ok);
    let rot_cos = cos_load{w}(rot_row, rot_i);
    let rot_sin = {sign}sin_load{w}(rot_row, rot_i);
    let rot_a = {input}_load{w}({lo});
    let rot_b = {input}_load{w}({hi});
    {output}_store{w}({lo}, select({nan}, rot_a * rot_cos - rot_b * rot_sin, rot_ok));
    {output}_store{w}({hi}, select({nan}, rot_b * rot_cos + rot_a * rot_sin, rot_ok));
}}
",
        open = entry.open(&units.join(" * ")),
        decode = entry.decode(&units),
        lo = at("rot_i"),
        hi = at("rot_j"),
    )
}

/// `y = rope(x)` on the CPU, in `f64` (see the module docs): `x` and `y` `[batch, seq, heads,
/// head_dim]`, `positions` `[batch, seq]`, `cos` and `sin` `[max_positions, head_dim/2]` (of any
/// element type: the GPU reads `f32` tables, an `f64` executor its own). A
/// position at or past `max_positions` is an [`OpError::OutOfRange`] (its `position` the
/// token's, `b · seq + s`), raised before anything is written.
pub fn rope_forward_cpu<X: Real, Y: Real, T: Real>(
    x: &dyn Logical<X>,
    positions: &dyn Logical<u32>,
    cos: &dyn Logical<T>,
    sin: &dyn Logical<T>,
    y: &mut dyn LogicalMut<Y>,
) -> Result<(), OpError> {
    rotate_cpu(Pass::Forward, x, positions, [cos, sin], y)
}

/// `dx = ropeᵀ(dy)` on the CPU, in `f64`: `dy` of `y`'s shape, `dx` of `x`'s; as
/// [`rope_forward_cpu`] otherwise.
pub fn rope_backward_cpu<Y: Real, X: Real, T: Real>(
    dy: &dyn Logical<Y>,
    positions: &dyn Logical<u32>,
    cos: &dyn Logical<T>,
    sin: &dyn Logical<T>,
    dx: &mut dyn LogicalMut<X>,
) -> Result<(), OpError> {
    rotate_cpu(Pass::Backward, dy, positions, [cos, sin], dx)
}

/// The rotation of `pass` from `input` into `output`.
fn rotate_cpu<I: Real, O: Real, T: Real>(
    pass: Pass,
    input: &dyn Logical<I>,
    positions: &dyn Logical<u32>,
    [cos, sin]: [&dyn Logical<T>; 2],
    output: &mut dyn LogicalMut<O>,
) -> Result<(), OpError> {
    let op = pass.op();
    let [input_role, output_role] = pass.roles();
    let known = |d: &[usize]| -> Vec<Option<u64>> { d.iter().map(|&n| Some(n as u64)).collect() };
    let (x, y) = pass.x_y(
        (input_role, known(input.dims())),
        (output_role, known(output.dims())),
    );
    check_extents(
        op,
        [x.0, y.0, "positions", "cos", "sin"],
        [
            &x.1,
            &y.1,
            &known(positions.dims()),
            &known(cos.dims()),
            &known(sin.dims()),
        ],
    )?;
    let dims = output.dims().to_vec();
    let (seq, rows) = (dims[1], cos.dims()[0]);
    // Every position, checked before anything is written.
    let mut pos = Vec::with_capacity(dims[0] * seq);
    for b in 0..dims[0] {
        for s in 0..seq {
            pos.push(positions.get(&[b, s]));
        }
    }
    positions_below(op, &pos, rows as u64)?;
    let sign = match pass {
        Pass::Forward => 1.0,
        Pass::Backward => -1.0,
    };
    let (d, half) = (dims[3], dims[3] / 2);
    let n: usize = dims.iter().product();
    let dense: Vec<O> = (0..n)
        .into_par_iter()
        .map(|linear| {
            let (i, rest) = (linear % d, linear / d);
            let (h, rest) = (rest % dims[2], rest / dims[2]);
            let (s, b) = (rest % seq, rest / seq);
            let p = pos[b * seq + s] as usize;
            let k = i % half;
            let c = cos.get(&[p, k]).to_f64();
            let sn = sign * sin.get(&[p, k]).to_f64();
            let a = input.get(&[b, s, h, k]).to_f64();
            let other = input.get(&[b, s, h, k + half]).to_f64();
            let v = if i < half {
                a * c - other * sn
            } else {
                other * c + a * sn
            };
            O::from_f64(v)
        })
        .collect();
    output.scatter(&dense);
    Ok(())
}
