//! Structured terms ([`crate::emit::tokens`]) written as WGSL, with the caller naming each
//! variable: a view extent becomes an expression over the kernel's parameter block.

use crate::emit::tokens::{Block, Term};

/// `block` as one WGSL expression of type `u32`; each variable is written as `var(name)`.
/// Bindings are inlined (view extents are small products and quotients).
pub(crate) fn expression(block: &Block, var: &impl Fn(&str) -> String) -> String {
    term(&block.result, &block.lets, var)
}

fn term(t: &Term, lets: &[Term], var: &impl Fn(&str) -> String) -> String {
    match t {
        Term::Int(n) => format!("{n}u"),
        Term::Bool(b) => b.to_string(),
        Term::Var(name) => var(name),
        Term::Let(i) => term(&lets[*i], lets, var),
        Term::Bin(op, a, b) => format!(
            "({} {} {})",
            term(a, lets, var),
            op.symbol(),
            term(b, lets, var)
        ),
        Term::Select(c, a, b) => format!(
            "select({}, {}, {})",
            term(b, lets, var),
            term(a, lets, var),
            term(c, lets, var)
        ),
    }
}
