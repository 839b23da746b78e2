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
//! [`group_reduce`] writes `fbl_group_sum(v, lid)`, which adds a value over a *group* of
//! invocations only (the lanes of one row, when a workgroup handles several rows at once) and
//! gives every lane of the group the sum. The group of `lid` is the lanes that differ from it
//! only in the bits of a [`LaneGroup`]'s mask. Where those bits are all below the device's
//! smallest subgroup size, a group lies inside one subgroup (subgroups are runs of consecutive
//! `local_invocation_index`, as the subgroup form of `fbl_wg_sum` assumes too), and the sum is
//! a butterfly of `subgroupShuffleXor` over the mask's bits: no workgroup memory, no barrier.
//! Otherwise the lanes write their values to workgroup memory and each adds its group's in lane
//! order, between two barriers, whatever the number of groups. Either way every lane of a group
//! gets the same bits (floating-point addition is commutative, and the butterfly's partners add
//! the same two values), so the lanes of a row agree on its statistics.
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

/// The lanes of one group of a workgroup: `inner` consecutive lanes, repeated `outer` times
/// `stride` lanes apart (all three powers of two, `inner <= stride`). The group of a lane is the
/// lanes whose `local_invocation_index` differs from its own only in the bits of [`mask`].
///
/// [`mask`]: LaneGroup::mask
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct LaneGroup {
    pub(crate) inner: u32,
    pub(crate) stride: u32,
    pub(crate) outer: u32,
}

impl LaneGroup {
    /// The bits in which the lanes of a group differ.
    pub(crate) fn mask(self) -> u32 {
        (self.inner - 1) | (self.stride * (self.outer - 1))
    }

    /// Whether a group lies inside one subgroup of at least `subgroup_size` lanes.
    pub(crate) fn fits(self, subgroup_size: u32) -> bool {
        self.mask() < subgroup_size.max(1)
    }
}

/// WGSL for `fbl_group_sum(v: {ty}, lid: u32) -> {ty}` over the groups of `group` in a
/// workgroup of `size` invocations: by subgroup shuffles with `shuffle` (the caller checked
/// [`LaneGroup::fits`] against the device's smallest subgroup size), else through workgroup
/// memory. `ty` is `f32` or a vector of them. All invocations of the workgroup must call it in
/// uniform control flow.
pub(crate) fn group_reduce(size: u32, group: LaneGroup, ty: &str, shuffle: bool) -> String {
    assert!(
        [size, group.inner, group.stride, group.outer]
            .iter()
            .all(|n| n.is_power_of_two())
            && group.inner <= group.stride
            && group.mask() < size,
        "lane groups are powers of two inside the workgroup"
    );
    let mut s = String::new();
    if shuffle {
        let _ = writeln!(
            s,
            "fn fbl_group_sum(v: {ty}, lid: u32) -> {ty} {{
    var acc = v;"
        );
        let mask = group.mask();
        for bit in (0..32).map(|b| 1u32 << b).filter(|b| mask & b != 0) {
            let _ = writeln!(s, "    acc = acc + subgroupShuffleXor(acc, {bit}u);");
        }
        s.push_str(
            "    return acc;
}
",
        );
    } else {
        let LaneGroup {
            inner,
            stride,
            outer,
        } = group;
        let _ = write!(
            s,
            "var<workgroup> fbl_group: array<{ty}, {size}>;
fn fbl_group_sum(v: {ty}, lid: u32) -> {ty} {{
    fbl_group[lid] = v;
    workgroupBarrier();
    let base = lid & ~{}u;
    var acc = {ty}(0.0);
    for (var o = 0u; o < {outer}u; o = o + 1u) {{
        for (var i = 0u; i < {inner}u; i = i + 1u) {{
            acc = acc + fbl_group[base + o * {stride}u + i];
        }}
    }}
    workgroupBarrier();
    return acc;
}}
",
            group.mask()
        );
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

    #[test]
    fn group_sums_validate_in_both_forms() {
        let groups = [
            (
                1,
                LaneGroup {
                    inner: 1,
                    stride: 1,
                    outer: 1,
                },
            ),
            (
                256,
                LaneGroup {
                    inner: 32,
                    stride: 32,
                    outer: 1,
                },
            ),
            (
                64,
                LaneGroup {
                    inner: 1,
                    stride: 4,
                    outer: 16,
                },
            ),
            (
                128,
                LaneGroup {
                    inner: 2,
                    stride: 8,
                    outer: 4,
                },
            ),
        ];
        for (size, group) in groups {
            for (ty, shuffle) in [("f32", false), ("vec2<f32>", false), ("vec2<f32>", true)] {
                let src = format!(
                    "{}\n@group(0) @binding(0) var<storage, read_write> out: array<{ty}>;\n\
                     @compute @workgroup_size({size})\n\
                     fn main(@builtin(local_invocation_index) lid: u32) {{\n\
                         out[lid] = fbl_group_sum({ty}(f32(lid)), lid);\n\
                     }}\n",
                    group_reduce(size, group, ty, shuffle),
                );
                let features = WgslFeatures {
                    subgroups: shuffle,
                    ..Default::default()
                };
                WgslModule::validate_with("group", &src, features)
                    .unwrap_or_else(|e| panic!("{group:?}, {ty}, shuffle {shuffle}: {e}\n{src}"));
            }
        }
    }

    #[test]
    fn a_group_fits_a_subgroup_when_its_mask_does() {
        let row = LaneGroup {
            inner: 32,
            stride: 32,
            outer: 1,
        };
        assert_eq!(row.mask(), 31);
        assert!(row.fits(32) && !row.fits(16));
        // An R-Tile's row: one lane per tile row, 8 tiles across, 4 rows a tile.
        let tiled = LaneGroup {
            inner: 1,
            stride: 4,
            outer: 8,
        };
        assert_eq!(tiled.mask(), 28);
        assert!(tiled.fits(32) && !tiled.fits(16));
    }
}
