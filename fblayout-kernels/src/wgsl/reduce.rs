//! Workgroup reductions in WGSL: with subgroup operations where the device has them, through
//! workgroup memory where it does not.
//!
//! [`workgroup_reduce`] writes `fbl_wg_sum(v, lid) -> f32` and `fbl_wg_max(v, lid) -> f32`,
//! which combine one `f32` from every invocation of a workgroup of `size` invocations and give
//! every invocation the result. All invocations of the workgroup must call them, in uniform
//! control flow (they contain barriers). With subgroups, each subgroup combines its values with
//! `subgroupAdd`/`subgroupMax` and its first lane writes one partial to workgroup memory; every
//! invocation then folds the partials in the same order, so the result is the same on every
//! invocation and from run to run. Without, the values are folded pairwise in workgroup memory
//! (a tree of `log2(size)` steps). The entry point passes its `subgroup_invocation_id` and
//! `subgroup_size` builtins through [`SUBGROUP_ARGS`] when the device has subgroups.
//!
//! Both forms are tested against each other and the CPU by building kernels with the feature
//! turned off ([`Disabled`](crate::runtime::Disabled)).

use std::fmt::Write as _;

/// The entry point parameters a reduction needs with subgroups (empty without): add them to
/// the entry point's signature and pass [`subgroup_call_args`] to the reductions.
pub(crate) const SUBGROUP_ARGS: &str = "@builtin(subgroup_invocation_id) fbl_lane: u32, \
                                        @builtin(subgroup_size) fbl_width: u32,";

/// The trailing arguments of `fbl_wg_sum`/`fbl_wg_max` calls.
pub(crate) fn subgroup_call_args(subgroups: bool) -> &'static str {
    if subgroups {
        ", fbl_lane, fbl_width"
    } else {
        ""
    }
}

/// The entry point parameters for the reductions (see [`SUBGROUP_ARGS`]).
pub(crate) fn entry_params(subgroups: bool) -> &'static str {
    if subgroups { SUBGROUP_ARGS } else { "" }
}

/// WGSL for `fbl_wg_sum` and `fbl_wg_max` over a workgroup of `size` invocations (a power of
/// two), with or without subgroup operations.
pub(crate) fn workgroup_reduce(size: u32, subgroups: bool) -> String {
    assert!(size.is_power_of_two(), "workgroup sizes are powers of two");
    let mut s = String::new();
    let _ = writeln!(s, "var<workgroup> fbl_partials: array<f32, {size}>;");
    for (name, op, subgroup_op) in [
        ("fbl_wg_sum", "{a} + {b}", "subgroupAdd"),
        ("fbl_wg_max", "max({a}, {b})", "subgroupMax"),
    ] {
        let combine = |a: &str, b: &str| op.replace("{a}", a).replace("{b}", b);
        if subgroups {
            let _ = write!(
                s,
                "fn {name}(v: f32, lid: u32, lane: u32, width: u32) -> f32 {{
    let part = {subgroup_op}(v);
    if (lane == 0u) {{
        fbl_partials[lid / width] = part;
    }}
    workgroupBarrier();
    var acc = fbl_partials[0];
    for (var i = 1u; i < {size}u / width; i = i + 1u) {{
        acc = {};
    }}
    workgroupBarrier();
    return acc;
}}
",
                combine("acc", "fbl_partials[i]")
            );
        } else {
            let _ = write!(
                s,
                "fn {name}(v: f32, lid: u32) -> f32 {{
    fbl_partials[lid] = v;
    workgroupBarrier();
    for (var half = {}u; half > 0u; half = half >> 1u) {{
        if (lid < half) {{
            fbl_partials[lid] = {};
        }}
        workgroupBarrier();
    }}
    let acc = fbl_partials[0];
    workgroupBarrier();
    return acc;
}}
",
                size / 2,
                combine("fbl_partials[lid]", "fbl_partials[lid + half]")
            );
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use fblayout_core::shader::{WgslFeatures, WgslModule};

    use super::*;

    #[test]
    fn both_forms_validate_for_every_size() {
        for size in [1, 2, 64, 256] {
            for subgroups in [false, true] {
                let src = format!(
                    "{}\n@group(0) @binding(0) var<storage, read_write> out: array<f32>;\n\
                     @compute @workgroup_size({size})\n\
                     fn main(@builtin(local_invocation_index) lid: u32, {}) {{\n\
                         let s = fbl_wg_sum(f32(lid), lid{args});\n\
                         let m = fbl_wg_max(f32(lid), lid{args});\n\
                         if (lid == 0u) {{ out[0] = s; out[1] = m; }}\n\
                     }}\n",
                    workgroup_reduce(size, subgroups),
                    entry_params(subgroups),
                    args = subgroup_call_args(subgroups),
                );
                let features = WgslFeatures {
                    subgroups,
                    ..Default::default()
                };
                WgslModule::validate_with("reduce", &src, features)
                    .unwrap_or_else(|e| panic!("size {size}, subgroups {subgroups}: {e}\n{src}"));
            }
        }
    }
}
