//! fblayout: declare a tensor's memory layout once; get type-checked CPU index code and
//! naga-validated WGSL.
//!
//! A kernel author declares a tensor on a struct whose fields are its axes, with
//! [`#[derive(Tensor)]`](derive@Tensor): extents, tiles, the reduction axes of the forward and
//! backward pass, and the views kernels read it through. The derive checks the declaration
//! with the layout core while it expands (every problem is a compile error at the offending
//! token) and generates a typed index API, `const` offsets for the CPU, naga-validated WGSL
//! and a runtime [`TensorDescriptor`].
//!
//! ```
//! use fblayout::{Axis, Ix, Tensor};
//!
//! #[derive(Clone, Copy, Axis)]
//! pub struct Tokens;
//! #[derive(Clone, Copy, Axis)]
//! pub struct Hidden;
//!
//! /// Activations: LayerNorm reduces `hidden` forward; bias gradients reduce `tokens` backward.
//! #[derive(Clone, Copy, Tensor)]
//! #[tensor(layout = rtile, reduce(forward = [hidden], backward = [tokens]))]
//! #[tensor(view(XT = transpose(tokens, hidden)))]
//! pub struct X {
//!     #[axis(dyn, tile = 4, pad)]
//!     pub tokens: Ix<Tokens>,
//!     #[axis(768, tile = 4)]
//!     pub hidden: Ix<Hidden>,
//! }
//!
//! let ext = XExtents { tokens: 10 };
//! let x = X::new(Ix::of(Tokens, 3), Ix::of(Hidden, 5));
//! let xt = XT::new(x.hidden, x.tokens); // the same element, read transposed
//! assert_eq!(x.offset(ext), xt.offset(ext));
//! // Loops stay typed: iterate the typed extents of the shape.
//! let shape = X::shape(ext);
//! let elements = shape.tokens.into_iter().flat_map(|t| shape.hidden.into_iter().map(move |h| X::new(t, h)));
//! assert_eq!(elements.filter(|x| x.in_bounds(ext)).count(), 10 * 768);
//! assert!(X::WGSL.contains("fn xt_offset(hidden: u32, tokens: u32, tokens_len: u32) -> u32"));
//! ```
//!
//! The modules re-export the layout core: [`layout`] (layouts and views), [`typed`] (the
//! traits the derive implements), [`expr`] (index expressions), [`emit`] (Rust and WGSL
//! emitters), [`shader`] (naga-validated WGSL modules), [`algebra`] (CuTe-style layout algebra) and
//! [`print`](mod@print). With the default features, [`kernels`] is the wgpu runtime and the
//! kernels of fine-tuning (`fblayout-kernels`), and [`plan`] the training graph, layout
//! selection, memory planning and executors (`fblayout-plan`), so `fblayout` is the one
//! dependency a user needs:
//!
//! ```
//! use fblayout::plan::models::{Model, ModelConfig, build};
//! use fblayout::plan::select::{CostModel, Strategy, plan};
//! use fblayout::plan::graph::Sizes;
//!
//! let graph = build(Model::Decoder, ModelConfig::new(100, 32, 4))?;
//! let sizes = Sizes { batch: 2, seq: 16 };
//! let guided = plan(&graph, sizes, &CostModel::analytic(), Strategy::Guided)?;
//! assert!(guided.cost() > 0.0);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

pub use fblayout_core::{algebra, emit, expr, layout, shader, typed};

#[cfg(feature = "pictures")]
pub use fblayout_core::print;

/// The wgpu runtime and the kernels of fine-tuning (the `fblayout-kernels` crate).
#[cfg(feature = "kernels")]
pub use fblayout_kernels as kernels;

/// The training graph, layout selection, memory planning and the executors (the
/// `fblayout-plan` crate).
#[cfg(feature = "plan")]
pub use fblayout_plan as plan;

pub use fblayout_core::typed::{Coord, Extents, Ix, Len, Tensor, TensorDescriptor, each};

/// An axis marker type (the trait); derive it with [`#[derive(Axis)]`](derive@Axis).
pub use fblayout_core::typed::Axis;

#[doc = include_str!("derive_axis.md")]
pub use fblayout_macros::Axis;

#[doc = include_str!("derive_tensor.md")]
pub use fblayout_macros::Tensor;

/// What the code `#[derive(Tensor)]` generates calls: constructors that skip checks the derive
/// made while it expanded. Not a public API; it changes with the derive, which is why the
/// derive's version is pinned exactly.
#[doc(hidden)]
pub mod __private {
    pub use fblayout_core::__private::ViewSpec;
    pub use fblayout_core::typed::derive::{descriptor, gpu_extents, ix, len};
}
