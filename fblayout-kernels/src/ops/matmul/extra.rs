//! What a product adds to its sums as it writes C, besides `alpha · Σ + beta · C`: a bias
//! ([`Bias`], `bias[n]` in every row) or a matrix ([`Addend`], `D` of C's extents). Each is
//! declared and checked here once for every kernel of a product (the `f32`-summing GEMM's,
//! the narrow kernels', the tensor cores', split-k's reduction) and for a call's argument;
//! [`Extra`] is the one a product has.

use fblayout_core::kernel::Operand;
use fblayout_core::layout::{BoundView, View};

use super::shader::Finish;
use super::storage_problem;
use crate::ops::activation::Activation;
use crate::ops::compiled::Compiled;
use crate::ops::elementwise::{check_same_dims, check_same_shape};
use crate::ops::error::OpError;
use crate::runtime::{Gpu, GpuBuffer};
use crate::tensor::GpuArg;

/// The bias of a biased product, `C[.., m, n] = Σ_k A[.., m, k] · B[.., k, n] + bias[n]`: a
/// rank-1 view `[n]` of `f32` or `f16` elements, read through its own view (any layout),
/// whose extent is C's last one. The one declaration and check of the operand for the
/// `f32`-summing GEMM and the cooperative one, and of a call's bias argument.
#[derive(Debug, Clone)]
pub(crate) struct Bias {
    operand: Operand,
}

impl Bias {
    /// The operand's role in the kernels.
    pub(crate) const ROLE: &'static str = "bias";

    /// The bias read through `bias` for a product of `op` writing C through `c`: a rank-1
    /// view of `f32` or `f16` (`f16` where `f16_ok`, the device has it) whose extent is C's
    /// last where both are static (run-time ones are checked per call).
    pub(crate) fn new(
        op: &'static str,
        bias: &View,
        c: &View,
        f16_ok: bool,
    ) -> Result<Self, OpError> {
        let [axis] = bias.axes() else {
            return Err(OpError::shape(
                op,
                format!(
                    "the bias `{}` has rank {}; it is a vector [n] of C's columns",
                    bias.name(),
                    bias.axes().len()
                ),
            ));
        };
        let n_axis = c.axes().last().map(|a| a.extent.as_static());
        if let (Some(e), Some(Some(n))) = (axis.extent.as_static(), n_axis)
            && e != n
        {
            return Err(OpError::shape(
                op,
                format!(
                    "the bias `{}` has {e} elements but C `{}` has {n} columns",
                    bias.name(),
                    c.name()
                ),
            ));
        }
        if let Some(why) = storage_problem(bias.layout().elem(), f16_ok) {
            return Err(OpError::Unsupported {
                op,
                role: Self::ROLE,
                view: bias.name().to_owned(),
                why,
            });
        }
        Ok(Self {
            operand: Operand::read(Self::ROLE, bias)?.vectorized(0),
        })
    }

    /// The operand (four elements at a time where its view allows).
    pub(crate) fn operand(&self) -> &Operand {
        &self.operand
    }

    /// Whether the kernels read it four elements at a time.
    pub(crate) fn wide(&self) -> bool {
        self.operand.vector_axis().is_some()
    }

    /// A zeroed bias of `n` elements (for timing a biased product without the caller's).
    pub(crate) fn zeroed(&self, gpu: &Gpu, n: u32) -> Result<(GpuBuffer, BoundView), OpError> {
        let view = self.operand.view();
        let names: Vec<String> = view
            .layout()
            .dynamic_axes()
            .map(|a| a.name.clone())
            .collect();
        let extents: Vec<(&str, u32)> = names.iter().map(|a| (a.as_str(), n)).collect();
        let bound = view.bind(&extents)?;
        let buffer = GpuBuffer::zeroed::<f32>(gpu, bound.len() as usize)?;
        Ok((buffer, bound))
    }
}

/// How an added product's D joins its sum as C is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Merge {
    /// `C = alpha · Σ + D`: the addition after a product (a LoRA adapter's sum with its base
    /// layer, a gradient's sum of contributions).
    Add,
    /// `C = alpha · Σ · f'(D)`: the backward of an activation `y = f(x)` whose output's
    /// gradient is the product, D being `x` (a feed-forward's down-projection's input
    /// gradient, which then is its up-projection's output's).
    ActivationGrad(Activation),
}

impl Merge {
    /// The WGSL of `value` (the scaled sum) merged with D's `d`: both `f32`, or both
    /// `vec4<f32>` where `vector`.
    pub(crate) fn wgsl(self, value: &str, d: &str, vector: bool) -> String {
        match self {
            Self::Add => format!("{value} + {d}"),
            Self::ActivationGrad(f) => format!("{value} * {}", f.derivative_call(d, vector)),
        }
    }

    /// The WGSL functions [`wgsl`](Self::wgsl) calls, if any.
    pub(crate) fn helpers(self) -> Option<String> {
        match self {
            Self::Add => None,
            Self::ActivationGrad(_) => Some(Activation::helpers()),
        }
    }

    /// The merge in `f64` (for the CPU and tests).
    pub fn apply(self, value: f64, d: f64) -> f64 {
        match self {
            Self::Add => value + d,
            Self::ActivationGrad(f) => value * f.derivative(d),
        }
    }
}

/// D of an added product, `C = alpha · A·B ⊕ D` ([`Merge`]): a matrix of C's extents, `f32` or
/// `f16`, read through its own view (any layout) as C is written, so the operation after the
/// product takes no pass of its own. D may be C's own tensor only where the kernels bind them
/// as one operand; a call passes two buffers.
#[derive(Debug, Clone)]
pub(crate) struct Addend {
    operand: Operand,
    merge: Merge,
}

impl Addend {
    /// The operand's role in the kernels.
    pub(crate) const ROLE: &'static str = "d";

    /// D read through `d` for a product of `op` writing C through `c`: C's rank and, where
    /// both are static, its extents, of `f32` or `f16` (`f16` where `f16_ok`), read four at a
    /// time along `wide_axis` where its layout grants that (the axis C is stored four at a
    /// time along, so both move together).
    pub(crate) fn new(
        op: &'static str,
        d: &View,
        c: &View,
        f16_ok: bool,
        wide_axis: Option<usize>,
        merge: Merge,
    ) -> Result<Self, OpError> {
        check_same_shape(op, ("c", c), &[(Self::ROLE, d)])?;
        if let Some(why) = storage_problem(d.layout().elem(), f16_ok) {
            return Err(OpError::Unsupported {
                op,
                role: Self::ROLE,
                view: d.name().to_owned(),
                why,
            });
        }
        let operand = Operand::read(Self::ROLE, d)?;
        let wide = wide_axis
            .map(|axis| operand.clone().vectorized(axis))
            .filter(|v| v.vector_axis().is_some());
        Ok(Self {
            operand: wide.unwrap_or(operand),
            merge,
        })
    }

    /// How it joins the sum.
    pub(crate) fn merge(&self) -> Merge {
        self.merge
    }

    /// The operand.
    pub(crate) fn operand(&self) -> &Operand {
        &self.operand
    }

    /// Whether the kernels may read it four elements at a time along `axis`.
    pub(crate) fn wide_along(&self, axis: usize) -> bool {
        self.operand.vector_axis() == Some(axis)
    }
}

/// A call's bias or D, with its role ([`Bias::ROLE`] or [`Addend::ROLE`]).
pub(crate) type ExtraArg<'a, 'b> = (&'static str, &'a GpuArg<'b>);

/// The one thing a product adds as it writes C, if any (see the module docs).
#[derive(Debug, Clone)]
pub(crate) enum Extra {
    /// `alpha · Σ + beta · C` only.
    None,
    /// `Σ + bias[n]`.
    Bias(Bias),
    /// `alpha · Σ ⊕ D`, as its [`Merge`] says.
    Addend(Addend),
}

impl Extra {
    /// The bias of a biased product.
    pub(crate) fn bias(&self) -> Option<&Bias> {
        match self {
            Self::Bias(b) => Some(b),
            _ => None,
        }
    }

    /// D of an added product.
    pub(crate) fn addend(&self) -> Option<&Addend> {
        match self {
            Self::Addend(d) => Some(d),
            _ => None,
        }
    }

    /// How the kernels finish a sum into C.
    pub(crate) fn finish(&self) -> Finish {
        match self {
            Self::None => Finish::Scaled,
            Self::Bias(_) => Finish::Biased,
            Self::Addend(d) => Finish::Added(d.merge),
        }
    }

    /// The operand the kernels read (its role is [`role`](Self::role)'s).
    pub(crate) fn operand(&self) -> Option<&Operand> {
        match self {
            Self::None => None,
            Self::Bias(b) => Some(b.operand()),
            Self::Addend(d) => Some(d.operand()),
        }
    }

    /// The role of a call's argument for it.
    pub(crate) fn role(&self) -> Option<&'static str> {
        match self {
            Self::None => None,
            Self::Bias(_) => Some(Bias::ROLE),
            Self::Addend(_) => Some(Addend::ROLE),
        }
    }

    /// What an operand of `role` adds (`None`: none), for errors.
    fn what(role: Option<&str>) -> &'static str {
        match role {
            None => "nothing",
            Some(Bias::ROLE) => "a bias",
            Some(_) => "a matrix `d`",
        }
    }

    /// Checks a call's argument (`arg`, with `role` its role in the call) against what the op
    /// was built with: present exactly when the op has something to add, read through the view
    /// the kernel (`kernel`) was built for, and a bias of C's `c_dims`' last extent or a D of
    /// C's `c_dims`.
    pub(crate) fn check_call(
        &self,
        op: &'static str,
        kernel: &Compiled,
        arg: Option<ExtraArg<'_, '_>>,
        c_dims: &[usize],
    ) -> Result<(), OpError> {
        match (self.role(), arg) {
            (None, None) => Ok(()),
            (Some(role), Some((given, arg))) if role == given => {
                kernel.check_view(role, arg)?;
                match self {
                    Self::Bias(_) => {
                        let n = c_dims.last().copied().unwrap_or(0);
                        if arg.dims() != [n] {
                            return Err(OpError::shape(
                                op,
                                format!("the bias is {:?} but C has {n} columns", arg.dims()),
                            ));
                        }
                        Ok(())
                    }
                    _ => {
                        check_same_dims(op, &["c", "d"], [c_dims.to_vec(), arg.dims()].into_iter())
                            .map(drop)
                    }
                }
            }
            (_, given) => Err(OpError::Unsupported {
                op,
                role: given.map_or(self.role().unwrap_or("c"), |(r, _)| r),
                view: given.map_or_else(
                    || self.operand().map_or("", |o| o.view().name()).to_owned(),
                    |(_, a)| a.view().name().to_owned(),
                ),
                why: format!(
                    "the product was built to add {}, and the call passes {}: record it as it \
                     was built (new_biased with the biased record, new_added with the added \
                     record, new with the plain one)",
                    Self::what(self.role()),
                    Self::what(given.map(|(r, _)| r)),
                ),
            }),
        }
    }
}
