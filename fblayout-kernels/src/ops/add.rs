//! Sums: `y = a + b` over any layouts of one shape — residual connections in the forward, and
//! gradients that flow into one tensor along two paths in the backward.
//!
//! The backward of a sum is no kernel: `da` and `db` are both `dy`.

use fblayout_core::layout::View;

use super::elementwise::{Elementwise, Spec, map_cpu};
use super::error::OpError;
use crate::cpu::{Logical, LogicalMut, Real};
use crate::runtime::{Batch, Gpu};
use crate::tensor::GpuArg;

const ADD: &str = "add";

/// `y = a + b`, built for the views of `a`, `b` and `y`.
#[derive(Debug, Clone)]
pub struct AddOp {
    kernel: Elementwise,
}

impl AddOp {
    /// The kernel reading `a` and `b` and writing `y` (all of one shape).
    pub fn new(gpu: &Gpu, a: &View, b: &View, y: &View) -> Result<Self, OpError> {
        let kernel = Elementwise::new(
            gpu,
            Spec {
                op: ADD,
                inputs: vec![("a", a), ("b", b)],
                outputs: vec![("y", y, "a + b".to_owned())],
                scalars: vec![],
                helpers: "",
            },
        )?;
        Ok(Self { kernel })
    }

    /// Whether the kernel moves four elements per invocation.
    pub fn is_vectorized(&self) -> bool {
        self.kernel.is_vectorized()
    }

    /// Records `y = a + b`.
    pub fn forward(
        &self,
        batch: &mut Batch<'_>,
        a: &GpuArg<'_>,
        b: &GpuArg<'_>,
        y: &GpuArg<'_>,
    ) -> Result<(), OpError> {
        self.kernel.record(batch, ADD, &[a, b, y], &[])
    }
}

/// `y = a + b` on the CPU.
pub fn add_cpu<T: Real>(
    a: &dyn Logical<T>,
    b: &dyn Logical<T>,
    y: &mut dyn LogicalMut<T>,
) -> Result<(), OpError> {
    map_cpu(ADD, &[a, b], &mut [y], |v, out| out[0] = v[0] + v[1])
}
