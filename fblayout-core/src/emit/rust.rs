//! The Rust emitter.
//!
//! [`RustWriter`] writes a validated index function as two Rust functions,
//! `<name>_offset(...) -> usize` and `<name>_in_bounds(...) -> bool`, over `usize` parameters
//! named after the axes (coordinates first, then run-time extents). With
//! [`RustFlags::const_fn`] they are `const fn`, so a layout with static extents computes its
//! offsets at compile time. A parameter that an expression doesn't use is written with a
//! leading `_`, so the output is warning-free.

use std::fmt::{self, Write};

use super::{Body, Syntax, uses_param};
use crate::expr::{ExprId, ValidIndexFn};

/// Options for [`RustWriter`].
#[derive(Debug, Clone)]
pub struct RustFlags {
    /// Emit `const fn`.
    pub const_fn: bool,
    /// The visibility prefix, e.g. `"pub "` or `""`.
    pub visibility: String,
}

impl Default for RustFlags {
    fn default() -> Self {
        Self {
            const_fn: true,
            visibility: "pub ".into(),
        }
    }
}

struct RustSyntax;

impl Syntax for RustSyntax {
    fn int(&self, value: u64) -> String {
        value.to_string()
    }
    fn select(&self, cond: &str, a: &str, b: &str) -> String {
        format!("(if {cond} {{ {a} }} else {{ {b} }})")
    }
}

/// Writes index functions as Rust source.
#[derive(Debug)]
pub struct RustWriter<W: Write> {
    out: W,
    flags: RustFlags,
}

impl<W: Write> RustWriter<W> {
    /// A writer into `out`.
    pub fn new(out: W, flags: RustFlags) -> Self {
        Self { out, flags }
    }

    /// Writes `<name>_offset` and `<name>_in_bounds` for `f`.
    pub fn write(&mut self, f: &ValidIndexFn) -> fmt::Result {
        self.write_one(f, &f.offset_fn_name(), f.offset, "usize")?;
        writeln!(self.out)?;
        self.write_one(f, &f.in_bounds_fn_name(), f.in_bounds, "bool")
    }

    fn write_one(&mut self, f: &ValidIndexFn, name: &str, root: ExprId, ret: &str) -> fmt::Result {
        let konst = if self.flags.const_fn { "const " } else { "" };
        let params: Vec<String> = f
            .param_names()
            .iter()
            .enumerate()
            .map(|(i, p)| {
                let unused = if uses_param(f, root, i) { "" } else { "_" };
                format!("{unused}{p}: usize")
            })
            .collect();
        writeln!(
            self.out,
            "{}{konst}fn {name}({}) -> {ret} {{",
            self.flags.visibility,
            params.join(", ")
        )?;
        write_body(&mut self.out, f, root, "    ")?;
        writeln!(self.out, "}}")
    }

    /// The sink.
    pub fn finish(self) -> W {
        self.out
    }
}

/// Writes the statements of one root as a Rust block body (`let`s, then the tail expression),
/// each line prefixed with `indent`.
pub fn write_body(
    out: &mut impl Write,
    f: &ValidIndexFn,
    root: ExprId,
    indent: &str,
) -> fmt::Result {
    let body = Body::new(f, root, &RustSyntax);
    for (name, expr) in &body.lets {
        writeln!(out, "{indent}let {name} = {expr};")?;
    }
    writeln!(out, "{indent}{}", body.result)
}

/// The Rust source of `f`'s two functions.
pub fn to_rust(f: &ValidIndexFn, flags: RustFlags) -> String {
    let mut w = RustWriter::new(String::new(), flags);
    // Writing into a String cannot fail.
    let _ = w.write(f);
    w.finish()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layout::LayoutSpec;

    #[test]
    fn writes_const_fns_and_marks_unused_params() {
        let x = LayoutSpec::new("x")
            .dyn_axis("seq")
            .axis("hidden", 8)
            .build()
            .unwrap();
        let src = to_rust(&x.index_fn().simplified(), RustFlags::default());
        // Row-major: the offset needs `hidden` but not the run-time sequence length.
        assert!(
            src.contains(
                "pub const fn x_offset(seq: usize, hidden: usize, _seq_len: usize) -> usize"
            ),
            "{src}"
        );
        assert!(
            src.contains(
                "pub const fn x_in_bounds(seq: usize, hidden: usize, seq_len: usize) -> bool"
            ),
            "{src}"
        );
        assert!(
            src.contains("(seq << 3) + hidden") || src.contains("hidden + (seq << 3)"),
            "{src}"
        );
    }
}
