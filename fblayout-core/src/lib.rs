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

/// What `fblayout-macros`, the code it generates and `fblayout-kernels` need of the core
/// beyond its API: no stable interface, and no part of the public surface.
#[doc(hidden)]
pub mod __private {
    pub use crate::emit::tokens;
    pub use crate::layout::unravel::unravel;
    pub use crate::typed::constants::{AxisConst, AxisConstKind, axis_consts, extents_struct_name};
    pub use crate::typed::coord::bindings;
    pub use crate::typed::declare::ViewSpec;
}
pub use ident::ident_problem;
