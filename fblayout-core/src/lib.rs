//! The layout core of fblayout.
pub mod algebra;
pub mod emit;
mod error_list;
pub mod expr;
mod ident;
pub mod kernel;
pub mod layout;
#[cfg(feature = "pictures")]
pub mod print;
pub mod shader;
pub mod typed;

pub use error_list::ErrorList;
pub use ident::ident_problem;
