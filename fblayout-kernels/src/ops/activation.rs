//! Activations: GELU, SiLU and SwiGLU, forward and backward.
//!
//! - GELU: `y = x · Φ(x)` with the normal CDF `Φ(x) = (1 + erf(x/√2)) / 2`
//!   ([`Activation::Gelu`], BERT's), or the tanh form `y = x/2 · (1 + tanh(√(2/π)(x +
//!   0.044715 x³)))` ([`Activation::GeluTanh`], GPT-2's). WGSL has no `erf`, so the shader uses
//!   Abramowitz and Stegun's 7.1.26 (absolute error below 1.5·10⁻⁷); the CPU uses the same
//!   formula in `f64`, so both compute one function.
//! - SiLU: `y = x · σ(x)`; its derivative `σ(x) · (1 + x(1 − σ(x)))`.
//! - tanh (BERT's pooler): `y = tanh(x)`; its derivative `1 − tanh²(x)`.
//! - SwiGLU (Llama's feed-forward): `y = silu(gate) · up`, with `d gate = dy · up · silu'(gate)`
//!   and `d up = dy · silu(gate)`.
//!
//! A kernel is built for the views of its input and output ([`ActivationOp::new`]); the
//! backward reads the gradient of the output through the output's view and writes the gradient
//! of the input through the input's, so forward and backward share one layout definition.

use fblayout_core::layout::View;

use super::elementwise::{Elementwise, Spec, map_cpu, widths};
use super::error::OpError;
use crate::cpu::{Logical, LogicalMut, Real};
use crate::runtime::{Batch, Gpu};
use crate::tensor::GpuArg;

/// A pointwise activation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Activation {
    /// GELU with the exact normal CDF (erf).
    Gelu,
    /// GELU with the tanh approximation.
    GeluTanh,
    /// SiLU (swish): `x · σ(x)`.
    Silu,
    /// The hyperbolic tangent.
    Tanh,
}

/// WGSL of the activations and their derivatives, for both widths (see [`Spec::helpers`]).
const HELPERS: &str = "
fn fbl_erf{S}(x: {T}) -> {T} {
    let t = 1.0 / (1.0 + 0.3275911 * abs(x));
    let poly = t * (0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027 + t * 1.061405429))));
    return sign(x) * (1.0 - poly * exp(-x * x));
}
fn fbl_sigmoid{S}(x: {T}) -> {T} {
    return 1.0 / (1.0 + exp(-x));
}
fn fbl_gelu{S}(x: {T}) -> {T} {
    return 0.5 * x * (1.0 + fbl_erf{S}(x * 0.7071067811865476));
}
fn fbl_gelu_grad{S}(x: {T}) -> {T} {
    let cdf = 0.5 * (1.0 + fbl_erf{S}(x * 0.7071067811865476));
    return cdf + x * 0.3989422804014327 * exp(-0.5 * x * x);
}
fn fbl_gelu_tanh{S}(x: {T}) -> {T} {
    return 0.5 * x * (1.0 + tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)));
}
fn fbl_gelu_tanh_grad{S}(x: {T}) -> {T} {
    let u = 0.7978845608028654 * (x + 0.044715 * x * x * x);
    let th = tanh(u);
    return 0.5 * (1.0 + th) + 0.5 * x * (1.0 - th * th) * 0.7978845608028654 * (1.0 + 0.134145 * x * x);
}
fn fbl_silu{S}(x: {T}) -> {T} {
    return x * fbl_sigmoid{S}(x);
}
fn fbl_silu_grad{S}(x: {T}) -> {T} {
    let s = fbl_sigmoid{S}(x);
    return s * (1.0 + x * (1.0 - s));
}
fn fbl_tanh{S}(x: {T}) -> {T} {
    return tanh(x);
}
fn fbl_tanh_grad{S}(x: {T}) -> {T} {
    let th = tanh(x);
    return 1.0 - th * th;
}
";

impl Activation {
    /// The WGSL helpers of every activation and its derivative, for both widths: for a kernel
    /// that applies a derivative in its own epilogue ([`derivative_call`](Self::derivative_call)).
    pub(crate) fn helpers() -> String {
        widths(HELPERS, false) + &widths(HELPERS, true)
    }

    /// The WGSL call of its derivative at `x`, an `f32` (or a `vec4<f32>` where `vector`),
    /// from [`helpers`](Self::helpers).
    pub(crate) fn derivative_call(self, x: &str, vector: bool) -> String {
        let width = if vector { 4 } else { 1 };
        format!("fbl_{}_grad_{width}({x})", self.name())
    }

    fn name(self) -> &'static str {
        match self {
            Self::Gelu => "gelu",
            Self::GeluTanh => "gelu_tanh",
            Self::Silu => "silu",
            Self::Tanh => "tanh",
        }
    }

    /// The activation in `f64`, as the shader computes it.
    pub fn eval(self, x: f64) -> f64 {
        match self {
            Self::Gelu => 0.5 * x * (1.0 + erf(x * std::f64::consts::FRAC_1_SQRT_2)),
            Self::GeluTanh => {
                0.5 * x * (1.0 + (0.797_884_560_802_865_4 * (x + 0.044715 * x * x * x)).tanh())
            }
            Self::Silu => x * sigmoid(x),
            Self::Tanh => x.tanh(),
        }
    }

    /// Its derivative in `f64`.
    pub fn derivative(self, x: f64) -> f64 {
        match self {
            Self::Gelu => {
                0.5 * (1.0 + erf(x * std::f64::consts::FRAC_1_SQRT_2))
                    + x * 0.398_942_280_401_432_7 * (-0.5 * x * x).exp()
            }
            Self::GeluTanh => {
                let u = 0.797_884_560_802_865_4 * (x + 0.044715 * x * x * x);
                let th = u.tanh();
                0.5 * (1.0 + th)
                    + 0.5 * x * (1.0 - th * th) * 0.797_884_560_802_865_4 * (1.0 + 0.134145 * x * x)
            }
            Self::Silu => {
                let s = sigmoid(x);
                s * (1.0 + x * (1.0 - s))
            }
            Self::Tanh => 1.0 - x.tanh() * x.tanh(),
        }
    }
}

/// The error function by Abramowitz and Stegun 7.1.26 (the shader's formula).
fn erf(x: f64) -> f64 {
    let t = 1.0 / (1.0 + 0.327_591_1 * x.abs());
    let poly = t
        * (0.254_829_592
            + t * (-0.284_496_736
                + t * (1.421_413_741 + t * (-1.453_152_027 + t * 1.061_405_429))));
    x.signum() * (1.0 - poly * (-x * x).exp())
}

fn sigmoid(x: f64) -> f64 {
    1.0 / (1.0 + (-x).exp())
}

/// An activation's forward and backward kernels, built for the views of its input and output.
#[derive(Debug, Clone)]
pub struct ActivationOp {
    activation: Activation,
    forward: Elementwise,
    backward: Elementwise,
}

const FORWARD: &str = "activation forward";
const BACKWARD: &str = "activation backward";

impl ActivationOp {
    /// The kernels of `activation` reading `x` and writing `y` (and back: reading `dy` through
    /// `y`'s view and writing `dx` through `x`'s).
    pub fn new(gpu: &Gpu, activation: Activation, x: &View, y: &View) -> Result<Self, OpError> {
        let f = activation.name();
        let forward = Elementwise::new(
            gpu,
            Spec {
                op: FORWARD,
                inputs: vec![("x", x)],
                outputs: vec![("y", y, format!("fbl_{f}{{S}}(x)"))],
                scalars: vec![],
                helpers: HELPERS,
                unwalked: Vec::new(),
            },
        )?;
        let backward = Elementwise::new(
            gpu,
            Spec {
                op: BACKWARD,
                inputs: vec![("x", x), ("dy", y)],
                outputs: vec![("dx", x, format!("dy * fbl_{f}_grad{{S}}(x)"))],
                scalars: vec![],
                helpers: HELPERS,
                unwalked: Vec::new(),
            },
        )?;
        Ok(Self {
            activation,
            forward,
            backward,
        })
    }

    /// The activation.
    pub fn activation(&self) -> Activation {
        self.activation
    }

    /// Whether the forward moves four elements per invocation.
    pub fn is_vectorized(&self) -> bool {
        self.forward.is_vectorized()
    }

    /// The WGSL of the forward and of the backward (validated by naga when built).
    pub fn shaders(&self) -> [&str; 2] {
        [self.forward.source(), self.backward.source()]
    }

    /// Records `y = f(x)`.
    pub fn forward(
        &self,
        batch: &mut Batch<'_>,
        x: &GpuArg<'_>,
        y: &GpuArg<'_>,
    ) -> Result<(), OpError> {
        self.forward.record(batch, FORWARD, &[x, y], &[])
    }

    /// Records `dx = dy · f'(x)`.
    pub fn backward(
        &self,
        batch: &mut Batch<'_>,
        x: &GpuArg<'_>,
        dy: &GpuArg<'_>,
        dx: &GpuArg<'_>,
    ) -> Result<(), OpError> {
        self.backward.record(batch, BACKWARD, &[x, dy, dx], &[])
    }
}

/// `y = f(x)` on the CPU.
pub fn activation_forward_cpu<T: Real>(
    activation: Activation,
    x: &dyn Logical<T>,
    y: &mut dyn LogicalMut<T>,
) -> Result<(), OpError> {
    map_cpu(FORWARD, &[x], &mut [y], |a, out| {
        out[0] = activation.eval(a[0]);
    })
}

/// `dx = dy · f'(x)` on the CPU.
pub fn activation_backward_cpu<T: Real>(
    activation: Activation,
    x: &dyn Logical<T>,
    dy: &dyn Logical<T>,
    dx: &mut dyn LogicalMut<T>,
) -> Result<(), OpError> {
    map_cpu(BACKWARD, &[x, dy], &mut [dx], |a, out| {
        out[0] = a[1] * activation.derivative(a[0]);
    })
}

/// SwiGLU's forward and backward kernels: `y = silu(gate) · up`.
#[derive(Debug, Clone)]
pub struct SwigluOp {
    forward: Elementwise,
    backward: Elementwise,
}

const SWIGLU_FORWARD: &str = "swiglu forward";
const SWIGLU_BACKWARD: &str = "swiglu backward";

impl SwigluOp {
    /// The kernels reading `gate` and `up` and writing `y`; the backward reads `dy` through
    /// `y`'s view and writes `d gate` and `d up` through `gate`'s and `up`'s.
    pub fn new(gpu: &Gpu, gate: &View, up: &View, y: &View) -> Result<Self, OpError> {
        let forward = Elementwise::new(
            gpu,
            Spec {
                op: SWIGLU_FORWARD,
                inputs: vec![("gate", gate), ("up", up)],
                outputs: vec![("y", y, "fbl_silu{S}(gate) * up".to_owned())],
                scalars: vec![],
                helpers: HELPERS,
                unwalked: Vec::new(),
            },
        )?;
        let backward = Elementwise::new(
            gpu,
            Spec {
                op: SWIGLU_BACKWARD,
                inputs: vec![("gate", gate), ("up", up), ("dy", y)],
                outputs: vec![
                    ("dgate", gate, "dy * up * fbl_silu_grad{S}(gate)".to_owned()),
                    ("dup", up, "dy * fbl_silu{S}(gate)".to_owned()),
                ],
                scalars: vec![],
                helpers: HELPERS,
                unwalked: Vec::new(),
            },
        )?;
        Ok(Self { forward, backward })
    }

    /// The WGSL of the forward and of the backward (validated by naga when built).
    pub fn shaders(&self) -> [&str; 2] {
        [self.forward.source(), self.backward.source()]
    }

    /// Records `y = silu(gate) · up`.
    pub fn forward(
        &self,
        batch: &mut Batch<'_>,
        gate: &GpuArg<'_>,
        up: &GpuArg<'_>,
        y: &GpuArg<'_>,
    ) -> Result<(), OpError> {
        self.forward
            .record(batch, SWIGLU_FORWARD, &[gate, up, y], &[])
    }

    /// Records the gradients of `gate` and `up`.
    pub fn backward(
        &self,
        batch: &mut Batch<'_>,
        gate: &GpuArg<'_>,
        up: &GpuArg<'_>,
        dy: &GpuArg<'_>,
        dgate: &GpuArg<'_>,
        dup: &GpuArg<'_>,
    ) -> Result<(), OpError> {
        self.backward
            .record(batch, SWIGLU_BACKWARD, &[gate, up, dy, dgate, dup], &[])
    }
}

/// SwiGLU's forward on the CPU.
pub fn swiglu_forward_cpu<T: Real>(
    gate: &dyn Logical<T>,
    up: &dyn Logical<T>,
    y: &mut dyn LogicalMut<T>,
) -> Result<(), OpError> {
    map_cpu(SWIGLU_FORWARD, &[gate, up], &mut [y], |a, out| {
        out[0] = Activation::Silu.eval(a[0]) * a[1];
    })
}

/// SwiGLU's backward on the CPU.
pub fn swiglu_backward_cpu<T: Real>(
    gate: &dyn Logical<T>,
    up: &dyn Logical<T>,
    dy: &dyn Logical<T>,
    dgate: &mut dyn LogicalMut<T>,
    dup: &mut dyn LogicalMut<T>,
) -> Result<(), OpError> {
    map_cpu(
        SWIGLU_BACKWARD,
        &[gate, up, dy],
        &mut [dgate, dup],
        |a, out| {
            out[0] = a[2] * a[1] * Activation::Silu.derivative(a[0]);
            out[1] = a[2] * Activation::Silu.eval(a[0]);
        },
    )
}
