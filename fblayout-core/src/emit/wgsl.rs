//! The WGSL emitter.
//!
//! [`WgslWriter`] writes a validated index function as `fn <name>_offset(...) -> u32` and
//! `fn <name>_in_bounds(...) -> bool` over `u32` parameters named after the axes (coordinates
//! first, then run-time extents). [`emit_module`] writes several functions and passes the text
//! through naga ([`WgslModule::validate`]): what it returns is always valid WGSL, and a failure
//! is a typed error naming the layout.

use std::fmt::{self, Write};

use super::{Body, Syntax};
use crate::expr::{ExprId, ValidIndexFn};
use crate::shader::{WgslError, WgslModule};

struct WgslSyntax;

impl Syntax for WgslSyntax {
    fn int(&self, value: u64) -> String {
        format!("{value}u")
    }
    fn select(&self, cond: &str, a: &str, b: &str) -> String {
        format!("select({b}, {a}, {cond})")
    }
}

/// Writes index functions as WGSL source.
#[derive(Debug)]
pub struct WgslWriter<W: Write> {
    out: W,
}

impl<W: Write> WgslWriter<W> {
    /// A writer into `out`.
    pub fn new(out: W) -> Self {
        Self { out }
    }

    /// Writes `<name>_offset` and `<name>_in_bounds` for `f`.
    pub fn write(&mut self, f: &ValidIndexFn) -> fmt::Result {
        self.write_one(f, &f.offset_fn_name(), f.offset, "u32")?;
        writeln!(self.out)?;
        self.write_one(f, &f.in_bounds_fn_name(), f.in_bounds, "bool")
    }

    fn write_one(&mut self, f: &ValidIndexFn, name: &str, root: ExprId, ret: &str) -> fmt::Result {
        let params: Vec<String> = f
            .param_names()
            .iter()
            .map(|p| format!("{p}: u32"))
            .collect();
        writeln!(self.out, "fn {name}({}) -> {ret} {{", params.join(", "))?;
        let body = Body::new(f, root, &WgslSyntax);
        for (name, expr) in &body.lets {
            writeln!(self.out, "    let {name} = {expr};")?;
        }
        writeln!(self.out, "    return {};", body.result)?;
        writeln!(self.out, "}}")
    }

    /// Writes a line of WGSL as it is (a constant, a comment, a helper).
    pub fn write_raw(&mut self, text: &str) -> fmt::Result {
        writeln!(self.out, "{text}")
    }

    /// The sink.
    pub fn finish(self) -> W {
        self.out
    }
}

/// Writes `fns` into one WGSL module named `name` and validates it with naga.
pub fn emit_module(name: &str, fns: &[&ValidIndexFn]) -> Result<WgslModule, WgslError> {
    for (i, f) in fns.iter().enumerate() {
        if fns[..i].iter().any(|g| g.name == f.name) {
            return Err(WgslError::DuplicateFunction {
                name: name.to_owned(),
                function: f.offset_fn_name(),
            });
        }
    }
    let mut w = WgslWriter::new(String::new());
    for (i, f) in fns.iter().enumerate() {
        if i > 0 {
            let _ = writeln!(w.out);
        }
        // Writing into a String cannot fail.
        let _ = w.write(f);
    }
    WgslModule::validate(name, w.finish())
}

/// The WGSL of `views` (each simplified), one offset and bounds function pair each, in one
/// module named `name`, validated by naga.
pub fn emit_views(name: &str, views: &[&crate::layout::View]) -> Result<WgslModule, WgslError> {
    let fns: Vec<ValidIndexFn> = views.iter().map(|v| v.simplified_fn().clone()).collect();
    emit_module(name, &fns.iter().collect::<Vec<_>>())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layout::LayoutSpec;

    #[test]
    fn emits_valid_wgsl_for_a_tiled_view() {
        let x = LayoutSpec::new("x")
            .dyn_axis("seq")
            .axis("hidden", 16)
            .rtile()
            .reduce_forward(["hidden"])
            .reduce_backward(["seq"])
            .build()
            .unwrap();
        let xt = x
            .view()
            .named("xt")
            .unwrap()
            .transpose("seq", "hidden")
            .unwrap();
        let module = emit_views("x", &[&x.view(), &xt]).unwrap();
        let src = module.source();
        assert!(
            src.contains("fn x_offset(seq: u32, hidden: u32, seq_len: u32) -> u32"),
            "{src}"
        );
        assert!(
            src.contains("fn xt_in_bounds(hidden: u32, seq: u32, seq_len: u32) -> bool"),
            "{src}"
        );
        assert!(!src.contains('/'), "powers of two become shifts:\n{src}");
        assert_eq!(module.naga_module().functions.len(), 4);
    }

    #[test]
    fn two_views_of_one_name_are_refused_before_naga() {
        let x = LayoutSpec::new("x")
            .axis("a", 4)
            .axis("b", 4)
            .build()
            .unwrap();
        let t = x.view().named("t").unwrap().transpose("a", "b").unwrap();
        let err = emit_views("x", &[&t, &t]).unwrap_err();
        assert!(
            matches!(&err, WgslError::DuplicateFunction { function, .. } if function == "t_offset"),
            "{err}"
        );
    }

    #[test]
    fn temporaries_never_shadow_parameters() {
        // A merge of a run-time axis shares subexpressions; name the view axes `t0` and `t1`.
        let x = LayoutSpec::new("x")
            .dyn_axis("a")
            .axis("b", 6)
            .build()
            .unwrap();
        let v = x
            .view()
            .named("v")
            .unwrap()
            .merge(&["a", "b"], "t0")
            .unwrap();
        let v = v.split("t0", &[("t1", None), ("t0", Some(3))]).unwrap();
        let naive = v.index_fn();
        let module = emit_module("v", &[&naive]).unwrap_or_else(|e| panic!("{e}"));
        assert!(module.source().contains("let t2 = "), "{}", module.source());
    }
}
