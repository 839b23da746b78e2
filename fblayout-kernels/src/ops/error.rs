//! Why a kernel refused its arguments.

use fblayout_core::kernel::KernelError;
use fblayout_core::layout::LayoutError;

use crate::runtime::GpuError;

/// Why a kernel (on either backend) could not run.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum OpError {
    /// The operands' shapes don't fit together.
    #[error("{op}: {detail}")]
    Shape {
        /// The kernel.
        op: &'static str,
        /// Which shapes, and why not.
        detail: String,
    },
    /// An operand's layout, view or element type is one the kernel does not take.
    #[error("{op}: operand `{role}` (view `{view}`) is not supported: {why}")]
    Unsupported {
        /// The kernel.
        op: &'static str,
        /// The operand.
        role: &'static str,
        /// Its view.
        view: String,
        /// Why not.
        why: String,
    },
    /// An argument is read through another view than the kernel was built for.
    #[error(
        "{op}: operand `{role}` is read through {given}, but the kernel was built for \
         {built}; build the kernel for the views you pass"
    )]
    WrongView {
        /// The kernel.
        op: &'static str,
        /// The operand.
        role: &'static str,
        /// The view passed, and its layout.
        given: String,
        /// The view the kernel was built for, and its layout.
        built: String,
    },
    /// An index the caller gave (a token id, a label) is outside the range it indexes.
    #[error("{op}: `{role}` at position {position} is {value}, which is not below {limit}")]
    OutOfRange {
        /// The kernel.
        op: &'static str,
        /// The operand holding the index.
        role: &'static str,
        /// Where in the operand.
        position: usize,
        /// The index.
        value: u64,
        /// The exclusive upper bound.
        limit: u64,
    },
    /// The GPU failed, or refused the work.
    #[error(transparent)]
    Gpu(#[from] GpuError),
    /// A layout or its extents are wrong.
    #[error(transparent)]
    Layout(#[from] LayoutError),
    /// A kernel's shader could not be assembled.
    #[error(transparent)]
    Kernel(#[from] KernelError),
}

impl OpError {
    /// An [`OpError::Shape`].
    pub(crate) fn shape(op: &'static str, detail: impl Into<String>) -> Self {
        Self::Shape {
            op,
            detail: detail.into(),
        }
    }
}
