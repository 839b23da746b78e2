//! The layout core of fblayout.
pub mod algebra;
pub mod catalog;
pub mod emit;
pub mod expr;
pub mod layout;
pub mod typed;
pub mod print;
mod ident;
pub mod wgsl;

pub use ident::ident_problem;
