//! The layout core of fblayout.
pub mod algebra;
pub mod catalog;
pub mod emit;
pub mod expr;
mod ident;
pub mod layout;
pub mod print;
pub mod typed;
pub mod wgsl;

pub use ident::ident_problem;
