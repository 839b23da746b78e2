//! The index-expression IR.
//!
//! Layouts and views lower to integer expressions over coordinates and run-time extents
//! ([`ExprGraph`]). The IR is small on purpose: constants, variables, the integer operators
//! that index code needs, a comparison, a conjunction and a select. [`simplify`] folds and
//! strength-reduces it and shares common subexpressions; [`IndexFn`] pairs an offset with its
//! bounds mask, and [`IndexFn::validate`] produces the [`ValidIndexFn`] that the Rust and WGSL
//! emitters ([`crate::emit`]) and the CPU evaluator ([`CpuIndexFn`]) accept.

mod eval;
mod func;
mod graph;
mod runs;
mod simplify;
mod steps;

pub use eval::CpuIndexFn;
pub(crate) use eval::eval_exact;
pub use func::{ExprError, IndexFn, ValidIndexFn};
pub use graph::{BinOp, ExprGraph, ExprId, Node, Ty, Var, VarId, VarKind};
pub use simplify::{Assumptions, simplify};
