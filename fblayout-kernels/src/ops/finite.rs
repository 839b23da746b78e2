//! Whether tensors hold an infinite or NaN element: the overflow check of dynamic loss scaling.
//!
//! [`NonFiniteOp`] reads a group of tensors, each of any layout and element type, in one
//! dispatch: each tensor is split into chunks (the sum of squares' split,
//! [`SumSquaresOp`](super::SumSquaresOp)), one workgroup a chunk, and the workgroups of the
//! group's tensors follow one another — tensor 0's chunks first, then tensor 1's — so that
//! workgroup `w` reads chunk `w − end[i−1]` of the tensor `i` with `end[i−1] ≤ w < end[i]`
//! (`end[i]`, the chunks of tensors `0..=i`, are scalar parameters written when the check is
//! recorded). A workgroup counts the elements of its chunk whose exponent bits are all set —
//! infinities and NaNs, tested on the bits so that no fast-math assumption about floats can
//! fold the test away — and sets a `u32` flag to 1 where it found any. Nothing clears the flag
//! but the caller (a batch's [`clear`](crate::runtime::Batch::clear)), so one flag collects the
//! check of every tensor of a step; an AdamW step [gated](super::AdamWOp::gated) on it then
//! skips the update on the device. Racing invocations only ever store 1, so the flag is exact.
//!
//! The group's workgroup ranges, its roles by position and its bound are the grouped kernels'
//! (`ops::group`, shared with [`AdamWOp::many`](super::AdamWOp::many)). One dispatch reads at
//! most [`NonFiniteOp::capacity`] tensors: each is a storage binding of its own beside the
//! flag's, within the device's `max_storage_buffers_per_shader_stage`, and at most
//! [`MAX_TENSORS`] so that a shader stays small (each tensor adds its index functions and a
//! loop over its chunks, about sixty lines). Checking many tensors in few dispatches
//! matters because every dispatch writes the flag: wgpu orders two dispatches that both use a
//! buffer as read-write storage with a barrier, so one check a tensor runs as a chain of tiny
//! dispatches, each waiting for the last. A group may read one buffer through two of its
//! tensors (both are read only); a tensor in the flag's buffer is refused when recorded.

use std::fmt::Write as _;

use fblayout_core::__private::unravel;
use fblayout_core::kernel::{KernelSource, Operand, ParamValue, Scalar};
use fblayout_core::layout::{ElemType, View};
use rayon::prelude::*;

use super::adamw::{ChunkLoop, LANES, chunk_loop, chunking};
use super::compiled::Compiled;
use super::error::OpError;
use super::group::{self, by_position};
use super::reduce_rows::getter;
use crate::cpu::{Logical, Real};
use crate::runtime::{Batch, Gpu};
use crate::tensor::GpuArg;
use crate::wgsl::reduce::{entry_params, subgroup_call_args, workgroup_reduce};

const OP: &str = "non-finite check";
const ENTRY: &str = "non_finite_chunks";

/// The most tensors one [`NonFiniteOp`] reads, whatever the device allows: 16 keeps a shader
/// near a thousand lines and its pipeline quick to build, and checks the hundred gradients of
/// a six-block encoder in seven dispatches (the barriers between them cost little next to the
/// hundred they replace).
pub const MAX_TENSORS: usize = group::MAX_MEMBERS;

/// The roles of a group's tensors, by position: `g0`, `g1`, ….
const ROLES: [&str; MAX_TENSORS] = by_position!("g");

/// Whether the exponent bits of `v` (`f32`, or `vec4<f32>` of `width` 4) are all set.
fn term(width: u32) -> &'static str {
    if width == 4 {
        "select(vec4<f32>(0.0), vec4<f32>(1.0), \
         (bitcast<vec4<u32>>(v) & vec4<u32>(0x7f800000u)) == vec4<u32>(0x7f800000u))"
    } else {
        "select(0.0, 1.0, (bitcast<u32>(v) & 0x7f800000u) == 0x7f800000u)"
    }
}

/// The check of a group of tensors in one dispatch (see the module docs).
#[derive(Debug, Clone)]
pub struct NonFiniteOp {
    kernel: Compiled,
    /// Each tensor's run along its last axis: 4 where it is read four elements at a time.
    widths: Vec<u32>,
}

impl NonFiniteOp {
    /// How many tensors one check reads on `gpu`: one storage binding each beside the flag's,
    /// within the device's `max_storage_buffers_per_shader_stage`, and at most
    /// [`MAX_TENSORS`].
    pub fn capacity(gpu: &Gpu) -> usize {
        group::capacity(gpu, 1, 1)
    }

    /// The check of one tensor read through `tensor`, setting `flag` (`u32`, shape `[1]`).
    pub fn new(gpu: &Gpu, tensor: &View, flag: &View) -> Result<Self, OpError> {
        Self::many(gpu, &[tensor], flag)
    }

    /// The check of the tensors read through `tensors` (from one to
    /// [`capacity`](Self::capacity) of them, any layouts, f32 or f16), in one dispatch, setting
    /// `flag` (`u32`, shape `[1]`).
    pub fn many(gpu: &Gpu, tensors: &[&View], flag: &View) -> Result<Self, OpError> {
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
        group::check_members(OP, gpu, tensors.len(), 1, 1)?;
        let subgroups = gpu.features().subgroups;
        let mut source = KernelSource::new(OP);
        let mut body = workgroup_reduce(LANES, subgroups);
        let mut widths = Vec::with_capacity(tensors.len());
        for (i, (&view, role)) in tensors.iter().zip(ROLES).enumerate() {
            let rank = view.axes().len();
            let g = match rank.checked_sub(1) {
                Some(last) => Operand::read(role, view)?.vectorized(last),
                None => Operand::read(role, view)?,
            };
            let width = if g.vector_axis().is_some() { 4 } else { 1 };
            if let Some(last) = rank.checked_sub(1) {
                body += &getter(&g, last, width);
            }
            let per_group = format!("params.per_group{i}");
            let _ = writeln!(body, "fn {role}_chunk_sum(chunk: u32, lid: u32) -> f32 {{");
            body += &chunk_loop(
                &ChunkLoop {
                    role,
                    chunk: "chunk",
                    per_group: &per_group,
                    term: term(width),
                },
                rank,
                width,
            );
            let _ = writeln!(body, "    return acc;\n}}");
            source = source.operand(g);
            widths.push(width);
        }
        body += &entry(widths.len(), subgroups);
        source = source.operand(Operand::write("flag", flag)?);
        for i in 0..widths.len() {
            source = source
                .scalar(format!("per_group{i}"), Scalar::U32)
                .scalar(group::end(i), Scalar::U32);
        }
        let kernel = Compiled::new(OP, gpu, source.body(body))?;
        Ok(Self { kernel, widths })
    }

    /// How many tensors it checks.
    pub fn tensors(&self) -> usize {
        self.widths.len()
    }

    /// The shader.
    pub fn shader(&self) -> &str {
        self.kernel.module().source()
    }

    /// Records the check of `tensors` (one for each view the kernel was built for, in that
    /// order): `flag` becomes 1 where one of them holds an infinite or NaN element, and is left
    /// as it is otherwise.
    pub fn record(
        &self,
        batch: &mut Batch<'_>,
        tensors: &[&GpuArg<'_>],
        flag: &GpuArg<'_>,
    ) -> Result<(), OpError> {
        if tensors.len() != self.widths.len() {
            return Err(OpError::shape(
                OP,
                format!(
                    "the check was built for {} tensors, and {} were given",
                    self.widths.len(),
                    tensors.len()
                ),
            ));
        }
        let mut args: Vec<(&'static str, &GpuArg<'_>)> = Vec::with_capacity(tensors.len() + 1);
        let mut names = Vec::with_capacity(2 * tensors.len());
        let mut groups = Vec::with_capacity(tensors.len());
        for (i, ((&tensor, &width), role)) in
            tensors.iter().zip(&self.widths).zip(ROLES).enumerate()
        {
            let (per_group, n) = chunking(OP, &tensor.dims(), width)?;
            names.push((format!("per_group{i}"), ParamValue::U32(per_group)));
            groups.push(n);
            args.push((role, tensor));
        }
        let (ends, total) = group::ends(OP, groups)?;
        names.extend(ends);
        args.push(("flag", flag));
        let scalars: Vec<(&str, ParamValue)> =
            names.iter().map(|(n, v)| (n.as_str(), *v)).collect();
        self.kernel
            .record_linear(batch, ENTRY, &args, &scalars, total)
    }
}

/// The entry point of a group of `tensors` tensors: each workgroup finds its tensor and chunk
/// from the cumulative chunk counts `params.end<i>`, sums its lanes' counts, and sets the flag
/// where the sum is not 0.
fn entry(tensors: usize, subgroups: bool) -> String {
    let mut s = format!(
        "@compute @workgroup_size({LANES})\nfn {ENTRY}(\
         @builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>, \
         @builtin(local_invocation_index) lid: u32, {}) {{\n",
        entry_params(subgroups)
    );
    let _ = writeln!(s, "    let group = wg.x + wg.y * nwg.x;");
    s += &group::past_the_end("group", tensors);
    let _ = writeln!(s, "    var acc = 0.0;");
    s += &group::members_chain("group", tensors, |i, chunk| {
        format!("        acc = {}_chunk_sum({chunk}, lid);\n", ROLES[i])
    });
    let _ = writeln!(
        s,
        "\n    let total = fbl_wg_sum(acc, lid{});\n    if (lid == 0u && total > 0.0) {{\n        \
         flag_store(0u, 1u);\n    }}\n}}",
        subgroup_call_args(subgroups)
    );
    s
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
