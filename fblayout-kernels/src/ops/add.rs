//! Sums: `y = a + b` over any layouts of one shape — residual connections in the forward, and
//! gradients that flow into one tensor along two paths in the backward.
//!
//! [`AddOp::new`] writes the sum to a third tensor; [`AddOp::accumulate`] adds into one of the
//! two (`y += a`), which is how a residual joins its branch without another buffer. The
//! backward of a sum is no kernel: `da` and `db` are both `dy`.

use fblayout_core::layout::View;

use super::elementwise::{Elementwise, Spec, map_cpu};
use super::error::OpError;
use crate::cpu::{Logical, LogicalMut, Real};
use crate::runtime::{Batch, Gpu};
use crate::tensor::GpuArg;

const ADD: &str = "add";

/// `y = a + b` (or `y += a`), built for the views of its operands.
#[derive(Debug, Clone)]
pub struct AddOp {
    kernel: Elementwise,
    in_place: bool,
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
                unwalked: Vec::new(),
            },
        )?;
        Ok(Self {
            kernel,
            in_place: false,
        })
    }

    /// The kernel reading `a` and adding it into `y` (one read-write operand).
    pub fn accumulate(gpu: &Gpu, a: &View, y: &View) -> Result<Self, OpError> {
        let kernel = Elementwise::new(
            gpu,
            Spec {
                op: ADD,
                inputs: vec![("a", a), ("y", y)],
                outputs: vec![("y", y, "a + y".to_owned())],
                scalars: vec![],
                helpers: "",
                unwalked: Vec::new(),
            },
        )?;
        Ok(Self {
            kernel,
            in_place: true,
        })
    }

    /// Whether the kernel moves four elements per invocation.
    pub fn is_vectorized(&self) -> bool {
        self.kernel.is_vectorized()
    }

    /// The kernel's WGSL (validated by naga when built).
    pub fn shader(&self) -> &str {
        self.kernel.source()
    }

    /// Records `y = a + b` (built with [`new`](Self::new)).
    pub fn forward(
        &self,
        batch: &mut Batch<'_>,
        a: &GpuArg<'_>,
        b: &GpuArg<'_>,
        y: &GpuArg<'_>,
    ) -> Result<(), OpError> {
        if self.in_place {
            return Err(OpError::shape(
                ADD,
                "this sum was built to add into `y`: call `add_into`",
            ));
        }
        self.kernel.record(batch, ADD, &[a, b, y], &[])
    }

    /// Records `y += a` (built with [`accumulate`](Self::accumulate)).
    pub fn add_into(
        &self,
        batch: &mut Batch<'_>,
        a: &GpuArg<'_>,
        y: &GpuArg<'_>,
    ) -> Result<(), OpError> {
        if !self.in_place {
            return Err(OpError::shape(
                ADD,
                "this sum was built with three operands: call `forward`",
            ));
        }
        self.kernel.record(batch, ADD, &[a, y], &[])
    }
}

/// `y += a` on the CPU.
pub fn add_into_cpu<T: Real>(a: &dyn Logical<T>, y: &mut dyn LogicalMut<T>) -> Result<(), OpError> {
    map_cpu(ADD, &[a], &mut [y], |v, out| out[0] += v[0])
}

/// `y = a + b` on the CPU.
pub fn add_cpu<T: Real>(
    a: &dyn Logical<T>,
    b: &dyn Logical<T>,
    y: &mut dyn LogicalMut<T>,
) -> Result<(), OpError> {
    map_cpu(ADD, &[a, b], &mut [y], |v, out| out[0] = v[0] + v[1])
}
