//! The kernel author's surface: everything between a layout's index functions and a compute
//! shader, generated from the declaration.
//!
//! A kernel reads and writes tensors through views. Each tensor it touches is an [`Operand`]: a
//! *role* (the name the kernel's WGSL uses for it, `x`, `dy`, `w`), the [`View`] it is read
//! through, and whether the kernel writes it. [`KernelSource`] turns a list of operands, a few
//! scalar parameters and a WGSL body into one shader that naga has validated
//! ([`KernelModule`]). For an operand with role `x` the shader holds
//!
//! - the storage binding `x_data` (elements of the layout's type, or `vec4`s of them when the
//!   kernel asked for wide accesses along an axis and [`contiguous_run`] proves them);
//! - `x_offset(..)`/`x_in_bounds(..)`: the view's simplified index functions, named after the
//!   role, so two operands of one layout never clash;
//! - `x_at(coords) -> u32` and `x_in(coords) -> bool`: the same with the run-time extents read
//!   from the parameter block;
//! - `x_dim0() -> u32`, `x_dim1()`, ...: the extent of each view axis;
//! - `x_load(coords)` and, when the kernel writes it, `x_store(coords, v)`, converting between
//!   the stored type and the type kernels compute in (`f32` for `f16` storage);
//! - for a wide axis, `x_load4(coords)` / `x_store4(coords, v)`: four neighbours along it, the
//!   coordinate along it a multiple of four.
//!
//! The run-time extents travel in one uniform, `params`: a struct `x_extents` per operand whose
//! layout has run-time axes (one `u32` field `<axis>_len` per such axis, in axis order, as
//! [`TensorLayout::extents_struct`](crate::layout::TensorLayout::extents_struct) writes it), then
//! the kernel's scalars. Its byte layout is read back from naga's IR ([`ParamsLayout`]), so the
//! host fills it ([`ParamsLayout::pack`]) with exactly the offsets the shader reads.
//!
//! Kernel bodies therefore name coordinates, never offsets: `y_store(t, h, x_load(t, h) *
//! 2.0)` is the same code for a row-major, a column-major or an R-Tile `x`, and for `x` read
//! through a transposed, split or merged view.
//!
//! ```
//! use fblayout_core::kernel::{KernelSource, Operand, Scalar};
//! use fblayout_core::layout::LayoutSpec;
//!
//! let x = LayoutSpec::new("x").dyn_axis("tokens").axis("hidden", 64).build()?;
//! let module = KernelSource::new("scale")
//!     .operand(Operand::read("x", &x.view())?.vectorized(1))
//!     .operand(Operand::write("y", &x.view())?.vectorized(1))
//!     .scalar("factor", Scalar::F32)
//!     .body(
//!         "@compute @workgroup_size(64)
//!          fn main(@builtin(global_invocation_id) id: vec3<u32>) {
//!              let t = id.y;
//!              let h = id.x * 4u;
//!              if (t < x_dim0() && h < x_dim1()) {
//!                  y_store4(t, h, x_load4(t, h) * params.factor);
//!              }
//!          }",
//!     )
//!     .build()?;
//! assert!(module.source().contains("fn x_load4(tokens: u32, hidden: u32) -> vec4<f32>"));
//! assert_eq!(module.slot("y").map(|s| s.binding), Some(2)); // `params` is binding 0
//! let params = module.params().expect("a run-time extent and a scalar");
//! assert_eq!(params.field("x.tokens_len").map(|f| f.offset), Some(0));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! [`View`]: crate::layout::View
//! [`contiguous_run`]: crate::expr::ValidIndexFn::contiguous_run

mod error;
mod operand;
mod params;
mod source;
mod wgsl_term;

pub use error::KernelError;
pub use operand::{Access, Operand, VECTOR_WIDTH};
pub use params::{ParamField, ParamValue, ParamsLayout, Scalar};
pub use source::{KernelModule, KernelSource, PARAMS, Slot};
