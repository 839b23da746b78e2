//! The WGSL the kernels generate around a layout's index functions.
//!
//! Every kernel of this crate (the [gather](crate::gather), the [index probe](crate::probe)) is
//! a compute entry point with one invocation per element of a row-major array, dispatched with
//! [`Gpu::dispatch_linear`](crate::runtime::Gpu::dispatch_linear). They share what is written
//! here:
//!
//! - their storage buffers of `u32` words ([`storage_array`]);
//! - the entry point's opening ([`LinearEntry::open`]): the invocation's linear index from the
//!   folded 2-D workgroup grid (`(wg.x + wg.y · nwg.x) · WORKGROUP_SIZE + lid`, see
//!   [`linear_grid`](crate::runtime::linear_grid)), and an early return past the last element;
//! - the decode of that index into the coordinate of a shape, last axis fastest
//!   ([`LinearEntry::decode`]): the WGSL twin of
//!   [`unravel`](fblayout_core::layout::unravel).
//!
//! Every name an entry point declares starts with its prefix, so it cannot collide with the
//! layout functions of the module it is appended to.

use std::fmt::Write as _;

/// Invocations per workgroup of every generated entry point.
pub(crate) const WORKGROUP_SIZE: u32 = 256;

/// The workgroups that cover `invocations` invocations, for
/// [`Gpu::dispatch_linear`](crate::runtime::Gpu::dispatch_linear).
pub(crate) fn workgroups(invocations: u64) -> u32 {
    invocations.div_ceil(u64::from(WORKGROUP_SIZE)) as u32
}

/// Whether a kernel writes a buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Access {
    /// Read only.
    Read,
    /// Read and written.
    ReadWrite,
}

/// The declaration of a storage buffer of `u32` words, `name`, at `@group(0) @binding(binding)`.
pub(crate) fn storage_array(binding: u32, access: Access, name: &str) -> String {
    let access = match access {
        Access::Read => "read",
        Access::ReadWrite => "read_write",
    };
    format!("@group(0) @binding({binding}) var<storage, {access}> {name}: array<u32>;\n")
}

/// A compute entry point over a linear index.
#[derive(Debug, Clone, Copy)]
pub(crate) struct LinearEntry<'a> {
    /// The entry point's name.
    pub(crate) name: &'a str,
    /// The start of every name the entry point declares.
    pub(crate) prefix: &'a str,
}

impl LinearEntry<'_> {
    /// The name of the invocation's linear index.
    pub(crate) fn index(&self) -> String {
        format!("{}_i", self.prefix)
    }

    /// The name of coordinate `d` after [`decode`](Self::decode).
    pub(crate) fn coord(&self, d: usize) -> String {
        format!("{}_c{d}", self.prefix)
    }

    /// The entry point up to its body: its signature, the linear index, and a return for the
    /// invocations at or past `count` (a WGSL `u32` expression). The caller closes the body.
    pub(crate) fn open(&self, count: &str) -> String {
        let LinearEntry { name, prefix } = *self;
        let i = self.index();
        format!(
            "@compute @workgroup_size({WORKGROUP_SIZE})\n\
             fn {name}(\n\
             \x20   @builtin(workgroup_id) {prefix}_wg: vec3<u32>,\n\
             \x20   @builtin(num_workgroups) {prefix}_nwg: vec3<u32>,\n\
             \x20   @builtin(local_invocation_index) {prefix}_lid: u32,\n\
             ) {{\n\
             \x20   let {i} = ({prefix}_wg.x + {prefix}_wg.y * {prefix}_nwg.x) * {WORKGROUP_SIZE}u \
             + {prefix}_lid;\n\
             \x20   if ({i} >= {count}) {{\n\
             \x20       return;\n\
             \x20   }}\n"
        )
    }

    /// The arguments of a layout function called at the decoded coordinate: the `coords`
    /// coordinates, then `extents` (WGSL `u32` expressions).
    pub(crate) fn arguments(&self, coords: usize, extents: &[String]) -> String {
        let coords = (0..coords).map(|d| self.coord(d));
        coords
            .chain(extents.iter().cloned())
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// Statements that decode the linear index into the coordinates `coord(0)`, …, of a shape
    /// with `extents` (WGSL `u32` expressions, one per axis), row-major: the last coordinate
    /// varies fastest. The first extent is never read: coordinate 0 takes what is left.
    pub(crate) fn decode(&self, extents: &[String]) -> String {
        let mut s = String::new();
        if extents.is_empty() {
            return s;
        }
        let rest = format!("{}_rest", self.prefix);
        let _ = writeln!(s, "    var {rest} = {};", self.index());
        for (d, extent) in extents.iter().enumerate().skip(1).rev() {
            let _ = writeln!(
                s,
                "    let {} = {rest} % {extent};\n    {rest} = {rest} / {extent};",
                self.coord(d)
            );
        }
        let _ = writeln!(s, "    let {} = {rest};", self.coord(0));
        s
    }
}

#[cfg(test)]
mod tests {
    use fblayout_core::shader::WgslModule;
    use wgpu::naga;

    use super::*;

    #[test]
    fn entry_points_validate_for_every_rank_and_count() {
        let entry = LinearEntry {
            name: "decode_main",
            prefix: "t",
        };
        let shapes: [&[u32]; 5] = [&[], &[7], &[3, 5], &[2, 3, 4], &[2, 1, 3, 2, 2, 1, 2, 3]];
        for shape in shapes {
            for count in ["arrayLength(&out)", "24u"] {
                // Store the sum of the coordinates, so that every one of them is used.
                let extents: Vec<String> = shape.iter().map(|e| format!("{e}u")).collect();
                let sum: Vec<String> = (0..shape.len())
                    .map(|d| entry.coord(d))
                    .chain(["0u".to_owned()])
                    .collect();
                let source = format!(
                    "{}{}{}    out[{}] = {};\n}}\n",
                    storage_array(0, Access::ReadWrite, "out"),
                    entry.open(count),
                    entry.decode(&extents),
                    entry.index(),
                    sum.join(" + ")
                );
                let module = WgslModule::validate("decode", &source)
                    .unwrap_or_else(|err| panic!("{shape:?}, {count}: {err}\n{source}"));
                let ep = &module.naga_module().entry_points[0];
                assert_eq!(ep.name, "decode_main");
                assert_eq!(ep.stage, naga::ShaderStage::Compute);
                assert_eq!(ep.workgroup_size, [WORKGROUP_SIZE, 1, 1]);
            }
        }
    }
}
