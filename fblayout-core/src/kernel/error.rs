//! Why a kernel's shader could not be put together.

use crate::shader::WgslError;

/// Why [`KernelSource::build`](super::KernelSource::build) or
/// [`ParamsLayout::pack`](super::ParamsLayout::pack) failed.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum KernelError {
    /// A role, scalar or axis name can't be used in the shader.
    #[error("kernel `{kernel}`: `{name}` can't name {what}: {why}")]
    BadName {
        /// The kernel.
        kernel: String,
        /// The name.
        name: String,
        /// What it was meant to name (an operand, a scalar parameter, an axis).
        what: &'static str,
        /// Why not.
        why: &'static str,
    },
    /// An operand's role or one of its view's axes can't be used in a shader.
    #[error("kernel operand `{role}`: `{name}` can't name {what}: {why}")]
    BadOperand {
        /// The operand's role.
        role: String,
        /// The name at fault.
        name: String,
        /// What it was meant to name.
        what: &'static str,
        /// Why not.
        why: &'static str,
    },
    /// Two operands or scalars of one kernel share a name.
    #[error("kernel `{kernel}` has two operands or parameters named `{name}`")]
    DuplicateName {
        /// The kernel.
        kernel: String,
        /// The name used twice.
        name: String,
    },
    /// An element type WGSL can't store, or `f16` without the feature.
    #[error("kernel `{kernel}`: operand `{role}` holds {elem}: {why}")]
    ElemType {
        /// The kernel.
        kernel: String,
        /// The operand.
        role: String,
        /// Its element type.
        elem: crate::layout::ElemType,
        /// Why it can't be used.
        why: &'static str,
    },
    /// The parameter values given don't match the parameter block.
    #[error("kernel `{kernel}`: parameter `{field}`: {problem}")]
    Params {
        /// The kernel.
        kernel: String,
        /// The field at fault.
        field: String,
        /// What is wrong with it.
        problem: String,
    },
    /// The assembled WGSL was rejected by naga (a bug in the body, or in fblayout).
    #[error(transparent)]
    Wgsl(#[from] WgslError),
}
