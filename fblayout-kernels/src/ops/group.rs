//! Kernels over a group of tensors in one dispatch: what the overflow check
//! ([`NonFiniteOp`](super::NonFiniteOp)) and the grouped elementwise kernels (AdamW's step over
//! many parameters, [`AdamWOp::many`](super::AdamWOp::many)) share.
//!
//! The members of a group take runs of consecutive workgroups: member 0 the first `n0`,
//! member 1 the next `n1`, and so on, each as many as its own extents need. The cumulative
//! counts `end<i> = n0 + … + n<i>` are scalar parameters written when the kernel is recorded
//! ([`ends`]), so one compiled kernel serves any run-time extents. Workgroup `w` of the
//! (folded) grid works for the member `i` with `end<i−1> ≤ w < end<i>`, as that member's
//! workgroup `w − end<i−1>` ([`members_chain`]); workgroups past the last end return at once
//! ([`past_the_end`]). Small and large tensors so share a dispatch, each workgroup doing the
//! same work wherever it lands.
//!
//! Each member's operands are storage bindings of their own, named by position
//! ([`by_position!`]), so how many members one kernel takes is bounded by the device's
//! `max_storage_buffers_per_shader_stage`, by its `max_buffers_and_acceleration_structures_per_shader_stage`
//! (storage and uniform buffers together: the kernel's parameter block is one) and by
//! [`MAX_MEMBERS`] ([`capacity`]): each member adds its operands' index functions and its own
//! code to the shader.

use fblayout_core::kernel::ParamValue;

use super::error::OpError;
use crate::runtime::Gpu;

/// The most members one grouped kernel takes, whatever the device allows: 16 keeps a shader
/// near a thousand lines and its pipeline quick to build.
pub const MAX_MEMBERS: usize = 16;

/// The names `<prefix>0` to `<prefix>15`, one per member of a group ([`MAX_MEMBERS`]): the roles
/// of the members' operands, which the kernels' bindings take as `&'static str`.
macro_rules! by_position {
    ($prefix:literal) => {
        [
            concat!($prefix, "0"),
            concat!($prefix, "1"),
            concat!($prefix, "2"),
            concat!($prefix, "3"),
            concat!($prefix, "4"),
            concat!($prefix, "5"),
            concat!($prefix, "6"),
            concat!($prefix, "7"),
            concat!($prefix, "8"),
            concat!($prefix, "9"),
            concat!($prefix, "10"),
            concat!($prefix, "11"),
            concat!($prefix, "12"),
            concat!($prefix, "13"),
            concat!($prefix, "14"),
            concat!($prefix, "15"),
        ]
    };
}
pub(crate) use by_position;

/// How many members of `per_member` storage bindings each one kernel takes on `gpu`, beside
/// `shared` storage bindings of its own and its parameter block (a uniform buffer): within the
/// device's `max_storage_buffers_per_shader_stage` and
/// `max_buffers_and_acceleration_structures_per_shader_stage`, and at most [`MAX_MEMBERS`].
pub(crate) fn capacity(gpu: &Gpu, shared: usize, per_member: usize) -> usize {
    let limits = gpu.limits();
    let storage = limits.max_storage_buffers_per_shader_stage as usize;
    let buffers = limits.max_buffers_and_acceleration_structures_per_shader_stage as usize;
    let bindings = storage.min(buffers.saturating_sub(1));
    (bindings.saturating_sub(shared) / per_member.max(1)).min(MAX_MEMBERS)
}

/// Checks that a kernel of `op` over `members` members of `per_member` storage bindings each,
/// beside `shared` of its own, fits `gpu` (see [`capacity`]).
pub(crate) fn check_members(
    op: &'static str,
    gpu: &Gpu,
    members: usize,
    shared: usize,
    per_member: usize,
) -> Result<(), OpError> {
    let capacity = capacity(gpu, shared, per_member);
    if (1..=capacity).contains(&members) {
        return Ok(());
    }
    Err(OpError::shape(
        op,
        format!(
            "one dispatch takes 1 to {capacity} tensors on this device ({per_member} storage \
             bindings each beside {shared} and the parameters' uniform, within the device's \
             buffers per shader stage; at most {MAX_MEMBERS}), not {members}"
        ),
    ))
}

/// The name of the scalar parameter `end<i>`: the workgroups of members `0..=i`.
pub(crate) fn end(i: usize) -> String {
    format!("end{i}")
}

/// The scalar parameters `end<i>` of members that take `workgroups` workgroups each, and the
/// workgroups of the whole dispatch.
pub(crate) fn ends(
    op: &'static str,
    workgroups: impl IntoIterator<Item = u32>,
) -> Result<(Vec<(String, ParamValue)>, u32), OpError> {
    let mut total: u32 = 0;
    let mut scalars = Vec::new();
    for (i, n) in workgroups.into_iter().enumerate() {
        total = total
            .checked_add(n)
            .ok_or_else(|| OpError::shape(op, "too many elements for one dispatch"))?;
        scalars.push((end(i), ParamValue::U32(total)));
    }
    Ok((scalars, total))
}

/// WGSL: return where workgroup `group` (a `u32` expression) is past the last of `members`
/// members' runs.
pub(crate) fn past_the_end(group: &str, members: usize) -> String {
    let last = members - 1;
    format!("    if ({group} >= params.end{last}) {{\n        return;\n    }}\n")
}

/// WGSL: the statements that hand workgroup `group` (a `u32` expression, not past the end) to
/// its member: `call(i, local)` for member `i` and its own workgroup `local` (a `u32`
/// expression), which returns the statements of that branch, indented two levels.
pub(crate) fn members_chain(
    group: &str,
    members: usize,
    call: impl Fn(usize, &str) -> String,
) -> String {
    let last = members - 1;
    let mut s = String::new();
    for i in 0..members {
        let local = match i {
            0 => group.to_owned(),
            _ => format!("{group} - params.end{}", i - 1),
        };
        let open = match i {
            0 if i == last => "    {".to_owned(),
            0 => format!("    if ({group} < params.end{i}) {{"),
            _ if i == last => " else {".to_owned(),
            _ => format!(" else if ({group} < params.end{i}) {{"),
        };
        s += &format!("{open}\n{}    }}", call(i, &local));
    }
    s
}
