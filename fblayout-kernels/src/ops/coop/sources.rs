//! The WGSL of the cooperative GEMM's kernels without a device, for the crate's tests and
//! snapshots: no part of the public surface (reached through
//! [`__private`](crate::__private)).

use fblayout_core::kernel::KernelSource;
use fblayout_core::layout::View;

use super::{CoopConfig, Lanes, Operands, Order};
use crate::ops::error::OpError;

/// The WGSL of the cooperative-matrix GEMM for views `a`, `b`, `c`, `config` and the
/// subgroups `lanes`, before validation (no device needed: for tests that pass every
/// shader through naga's validator and SPIR-V writer, and for snapshots). With
/// `config.split_k > 1` it is the kernel that writes split-k's partial sums
/// ([`reduce_kernel_source`] is the kernel that adds them into C).
pub fn kernel_source(
    a: &View,
    b: &View,
    c: &View,
    config: CoopConfig,
    lanes: Lanes,
) -> Result<KernelSource, OpError> {
    Ok(Operands::new(a, b, None, None, c)?.source(config, lanes))
}

/// Like [`kernel_source`], for the biased product `C = A·B + bias` (`bias` a rank-1 view
/// `[n]`, see [`CoopMatmulOp::new_biased`](super::CoopMatmulOp::new_biased)).
pub fn biased_kernel_source(
    a: &View,
    b: &View,
    bias: &View,
    c: &View,
    config: CoopConfig,
    lanes: Lanes,
) -> Result<KernelSource, OpError> {
    Ok(Operands::new(a, b, Some(bias), None, c)?.source(config, lanes))
}

/// Like [`kernel_source`], for the added product `C = A·B ⊕ D` (`d` a view of C's extents
/// joining the sum as `merge` says, see
/// [`CoopMatmulOp::new_merged`](super::CoopMatmulOp::new_merged)).
pub fn added_kernel_source(
    a: &View,
    b: &View,
    d: &View,
    c: &View,
    config: CoopConfig,
    lanes: Lanes,
    merge: super::Merge,
) -> Result<KernelSource, OpError> {
    Ok(Operands::new(a, b, None, Some((d, merge)), c)?.source(config, lanes))
}

/// The WGSL of split-k's reduction for views `a`, `b`, `c` (it writes C through `c`), before
/// validation; see [`kernel_source`].
pub fn reduce_kernel_source(a: &View, b: &View, c: &View) -> Result<KernelSource, OpError> {
    Ok(Operands::new(a, b, None, None, c)?.reduce_source())
}

/// The WGSL of a biased product's split-k reduction (it adds the bias); see
/// [`biased_kernel_source`].
pub fn biased_reduce_kernel_source(
    a: &View,
    b: &View,
    bias: &View,
    c: &View,
) -> Result<KernelSource, OpError> {
    Ok(Operands::new(a, b, Some(bias), None, c)?.reduce_source())
}

/// The WGSL of an added product's split-k reduction (it adds D); see
/// [`added_kernel_source`].
pub fn added_reduce_kernel_source(
    a: &View,
    b: &View,
    d: &View,
    c: &View,
    merge: super::Merge,
) -> Result<KernelSource, OpError> {
    Ok(Operands::new(a, b, None, Some((d, merge)), c)?.reduce_source())
}

/// How the operands of views `a` and `b` are staged: the order of each (for choosing
/// [`CoopConfig::candidates`] without a device).
pub fn staging_orders(a: &View, b: &View, c: &View) -> Result<(Order, Order), OpError> {
    Ok(Operands::new(a, b, None, None, c)?.orders())
}
