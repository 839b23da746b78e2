//! Copies: `y = x` between two layouts of one shape — the conversions a layout plan inserts
//! where a consumer reads a tensor in another layout than its producer wrote it in.
//!
//! One elementwise kernel reads `x` through its view and writes `y` through its own, so any pair
//! of layouts (row-major, column-major, R-Tile, views of them) converts in one pass.

use fblayout_core::layout::View;

use super::elementwise::{Elementwise, Spec, map_cpu};
use super::error::OpError;
use crate::cpu::{Logical, LogicalMut, Real};
use crate::runtime::{Batch, Gpu};
use crate::tensor::GpuArg;

const COPY: &str = "copy";

/// `y = x`, built for the views of its operands.
#[derive(Debug, Clone)]
pub struct CopyOp {
    kernel: Elementwise,
}

impl CopyOp {
    /// The kernel reading `x` and writing `y` (of one shape).
    pub fn new(gpu: &Gpu, x: &View, y: &View) -> Result<Self, OpError> {
        let kernel = Elementwise::new(
            gpu,
            Spec {
                op: COPY,
                inputs: vec![("x", x)],
                outputs: vec![("y", y, "x".to_owned())],
                scalars: vec![],
                helpers: "",
                unwalked: Vec::new(),
            },
        )?;
        Ok(Self { kernel })
    }

    /// Whether the kernel moves four elements per invocation.
    pub fn is_vectorized(&self) -> bool {
        self.kernel.is_vectorized()
    }

    /// The kernel's WGSL (validated by naga when built).
    pub fn shader(&self) -> &str {
        self.kernel.source()
    }

    /// Records `y = x`.
    pub fn forward(
        &self,
        batch: &mut Batch<'_>,
        x: &GpuArg<'_>,
        y: &GpuArg<'_>,
    ) -> Result<(), OpError> {
        self.kernel.record(batch, COPY, &[x, y], &[])
    }
}

/// `y = x` on the CPU.
pub fn copy_cpu<T: Real>(x: &dyn Logical<T>, y: &mut dyn LogicalMut<T>) -> Result<(), OpError> {
    map_cpu(COPY, &[x], &mut [y], |v, out| out[0] = v[0])
}
