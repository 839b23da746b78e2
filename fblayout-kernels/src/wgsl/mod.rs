//! WGSL that kernels share beyond what the kernel surface generates: reductions.

pub(crate) mod reduce;
