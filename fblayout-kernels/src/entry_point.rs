//! The opening of a compute entry point over a linear index, and the decode of that index into
//! a coordinate: what a kernel author writes around a body that names coordinates.
//!
//! Every kernel of this crate that walks a shape (the elementwise kernels, the embedding, the
//! cross-entropy, [RoPE](crate::ops::rope), the [gather](crate::gather) and the [index
//! probe](crate::probe)) is a compute entry point with one invocation per unit of work,
//! dispatched over a number of workgroups that
//! [`Batch::dispatch_linear`](crate::runtime::Batch::dispatch_linear) (or
//! [`Gpu::dispatch_linear`](crate::runtime::Gpu::dispatch_linear)) folds into a 2-D grid. They
//! share what is written here, and so can a kernel of your own built with
//! [`KernelSource`](fblayout_core::kernel::KernelSource):
//!
//! - [`LinearEntry::open`]: the entry point's signature, the invocation's linear index from the
//!   folded grid (`(wg.x + wg.y · nwg.x) · WORKGROUP_SIZE + lid`, see
//!   [`linear_grid`](crate::runtime::linear_grid)), and an early return past the last unit;
//! - [`LinearEntry::decode`]: that index as the coordinate of a shape, last axis fastest (the
//!   WGSL twin of [`unravel`](fblayout_core::__private::unravel)), named by
//!   [`LinearEntry::coord`];
//! - [`workgroups`]: how many workgroups of [`WORKGROUP_SIZE`] invocations to dispatch, or
//!   `None` where the index would not fit a `u32`.
//!
//! Every name an entry point declares starts with its prefix, so it cannot collide with the
//! functions the kernel surface declares for the operands (`x_load`, `x_dim0`, …) or with the
//! body's own names.
//!
//! ```
//! use fblayout_core::kernel::{KernelSource, Operand};
//! use fblayout_core::layout::LayoutSpec;
//! use fblayout_kernels::entry_point::{LinearEntry, workgroups};
//!
//! // y = 2·x over [tokens, hidden], whatever the layouts: one invocation per element.
//! let x = LayoutSpec::new("x").dyn_axis("tokens").axis("hidden", 96).build()?;
//! let entry = LinearEntry { name: "double", prefix: "dbl" };
//! let extents = ["y_dim0()".to_owned(), "y_dim1()".to_owned()];
//! let (t, h) = (entry.coord(0), entry.coord(1));
//! let body = format!(
//!     "{open}{decode}    y_store({t}, {h}, 2.0 * x_load({t}, {h}));\n}}\n",
//!     open = entry.open(&extents.join(" * ")),
//!     decode = entry.decode(&extents),
//! );
//! let kernel = KernelSource::new("double")
//!     .operand(Operand::read("x", &x.view())?)
//!     .operand(Operand::write("y", &x.view())?)
//!     .body(body)
//!     .build()?; // validated by naga
//! assert!(kernel.source().contains("fn double("));
//! // 1000 tokens of 96: the count to give `Batch::dispatch_linear(&kernel, "double", ..)`.
//! assert_eq!(workgroups(1000 * 96), Some(375));
//! // Past 2^32 invocations the index would wrap: refused.
//! assert_eq!(workgroups(1 << 33), None);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::fmt::Write as _;

/// Invocations per workgroup of every entry point [`LinearEntry::open`] writes.
pub const WORKGROUP_SIZE: u32 = 256;

/// The workgroups that cover `invocations` invocations of an entry point written by
/// [`LinearEntry::open`], for `dispatch_linear`; `None` past 2^32 invocations, whose linear
/// index a `u32` can't hold (the whole grid's, the last workgroup's tail included).
pub fn workgroups(invocations: u64) -> Option<u32> {
    if invocations > 1 << 32 {
        return None;
    }
    u32::try_from(invocations.div_ceil(u64::from(WORKGROUP_SIZE))).ok()
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

/// A compute entry point over a linear index (see the module docs): its name, and the prefix
/// of every name it declares.
///
/// The WGSL it writes uses the names `<prefix>_wg`, `<prefix>_nwg`, `<prefix>_lid` (the
/// built-ins), `<prefix>_i` ([`index`](Self::index)), `<prefix>_rest` and `<prefix>_c<d>`
/// ([`coord`](Self::coord)); a body should not declare names of its own starting with
/// `<prefix>_` but these.
#[derive(Debug, Clone, Copy)]
pub struct LinearEntry<'a> {
    /// The entry point's name: the `entry` a dispatch names.
    pub name: &'a str,
    /// The start of every name the entry point declares (a WGSL identifier).
    pub prefix: &'a str,
}

impl LinearEntry<'_> {
    /// The name of the invocation's linear index, a `u32` below the count given to
    /// [`open`](Self::open).
    pub fn index(&self) -> String {
        format!("{}_i", self.prefix)
    }

    /// The name of coordinate `d` after [`decode`](Self::decode), a `u32`.
    pub fn coord(&self, d: usize) -> String {
        format!("{}_c{d}", self.prefix)
    }

    /// The entry point up to its body: its signature (`@workgroup_size(`[`WORKGROUP_SIZE`]`)`),
    /// the linear index, and a return for the invocations at or past `count` (a WGSL `u32`
    /// expression: the units of work). The caller writes the body and closes it with `}`; it
    /// dispatches [`workgroups`]`(count)` workgroups.
    pub fn open(&self, count: &str) -> String {
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

    /// Statements (indented one level, for the body after [`open`](Self::open)) that decode
    /// the linear index into the coordinates `coord(0)`, …, of a shape with `extents` (WGSL
    /// `u32` expressions, one per axis), row-major: the last coordinate varies fastest. The
    /// first extent is never read: coordinate 0 takes what is left. Nothing for a rank-0
    /// shape.
    pub fn decode(&self, extents: &[String]) -> String {
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
    fn workgroups_cover_the_invocations_while_the_index_fits_a_u32() {
        assert_eq!(workgroups(0), Some(0));
        assert_eq!(workgroups(1), Some(1));
        assert_eq!(workgroups(256), Some(1));
        assert_eq!(workgroups(257), Some(2));
        // The last index of the grid is 2^32 − 1: still a u32.
        assert_eq!(workgroups(1 << 32), Some(1 << 24));
        assert_eq!(workgroups((1 << 32) + 1), None);
        assert_eq!(workgroups(u64::MAX), None);
    }

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
