//! Whether a tensor holds an infinite or NaN element: the overflow check of dynamic loss
//! scaling.
//!
//! [`NonFiniteOp`] reads a tensor of any layout in chunks, one workgroup a chunk (the sum of
//! squares' pass, [`SumSquaresOp`](super::SumSquaresOp), with another term), counts the
//! elements whose exponent bits are all set — infinities and NaNs, tested on the bits so that
//! no fast-math assumption about floats can fold the test away — and sets a `u32` flag to 1
//! where a chunk has any. Nothing clears the flag but the caller (a batch's
//! [`clear`](crate::runtime::Batch::clear)), so one flag collects the check of every tensor of
//! a step in one dispatch each; an AdamW step [gated](super::AdamWOp::gated) on it then skips
//! the update on the device. Racing invocations only ever store 1, so the flag is exact.

use fblayout_core::kernel::{KernelSource, Operand, ParamValue, Scalar};
use fblayout_core::layout::{ElemType, View, unravel};
use rayon::prelude::*;

use super::adamw::{ChunkPass, LANES, chunk_entry, chunking};
use super::compiled::Compiled;
use super::error::OpError;
use super::reduce_rows::getter;
use crate::cpu::{Logical, Real};
use crate::runtime::{Batch, Gpu};
use crate::tensor::GpuArg;
use crate::wgsl::reduce::workgroup_reduce;

const OP: &str = "non-finite check";
const ENTRY: &str = "non_finite_chunks";

/// The check of one tensor (see the module docs).
#[derive(Debug, Clone)]
pub struct NonFiniteOp {
    kernel: Compiled,
    width: u32,
}

impl NonFiniteOp {
    /// The kernel reading a tensor through `tensor` and setting `flag` (`u32`, shape `[1]`).
    pub fn new(gpu: &Gpu, tensor: &View, flag: &View) -> Result<Self, OpError> {
        let axes = flag.axes();
        if axes.len() != 1
            || axes[0].extent.as_static() != Some(1)
            || flag.layout().elem() != ElemType::U32
        {
            return Err(OpError::shape(
                OP,
                format!("the flag `{}` must be u32 of shape [1]", flag.name()),
            ));
        }
        let rank = tensor.axes().len();
        let g = match rank.checked_sub(1) {
            Some(last) => Operand::read("g", tensor)?.vectorized(last),
            None => Operand::read("g", tensor)?,
        };
        let width = if g.vector_axis().is_some() { 4 } else { 1 };
        let subgroups = gpu.features().subgroups;
        let mut body = workgroup_reduce(LANES, subgroups);
        if let Some(last) = rank.checked_sub(1) {
            body += &getter(&g, last, width);
        }
        let term = if width == 4 {
            "select(vec4<f32>(0.0), vec4<f32>(1.0), \
             (bitcast<vec4<u32>>(v) & vec4<u32>(0x7f800000u)) == vec4<u32>(0x7f800000u))"
        } else {
            "select(0.0, 1.0, (bitcast<u32>(v) & 0x7f800000u) == 0x7f800000u)"
        };
        let pass = ChunkPass {
            name: ENTRY,
            groups: "params.groups",
            term,
            finish: "if (total > 0.0) {\n            flag_store(0u, 1u);\n        }",
        };
        body += &chunk_entry(&pass, rank, width, subgroups);
        let kernel = Compiled::new(
            OP,
            gpu,
            KernelSource::new(OP)
                .operand(g)
                .operand(Operand::write("flag", flag)?)
                .scalar("per_group", Scalar::U32)
                .scalar("groups", Scalar::U32)
                .body(body),
        )?;
        Ok(Self { kernel, width })
    }

    /// The shader.
    pub fn shader(&self) -> &str {
        self.kernel.module().source()
    }

    /// Records the check of `tensor`: `flag` becomes 1 where it holds an infinite or NaN
    /// element, and is left as it is otherwise.
    pub fn record(
        &self,
        batch: &mut Batch<'_>,
        tensor: &GpuArg<'_>,
        flag: &GpuArg<'_>,
    ) -> Result<(), OpError> {
        let (per_group, groups) = chunking(OP, &tensor.dims(), self.width)?;
        self.kernel.record_linear(
            batch,
            ENTRY,
            &[("g", tensor), ("flag", flag)],
            &[
                ("per_group", ParamValue::U32(per_group)),
                ("groups", ParamValue::U32(groups)),
            ],
            groups,
        )
    }
}

/// Whether `tensor` holds an infinite or NaN element, on the CPU.
pub fn non_finite_cpu<T: Real>(tensor: &dyn Logical<T>) -> bool {
    let shape: Vec<u64> = tensor.dims().iter().map(|&n| n as u64).collect();
    let n: u64 = shape.iter().product();
    (0..n).into_par_iter().any(|linear| {
        let mut coords = vec![0u64; shape.len()];
        unravel(linear, &shape, &mut coords);
        let index: Vec<usize> = coords.iter().map(|&c| c as usize).collect();
        !tensor.get(&index).to_f64().is_finite()
    })
}
