//! Tensor layouts: axes, R-Tile, views.
//!
//! A kernel author describes how a tensor is stored with a [`LayoutSpec`]: named axes with
//! static or run-time extents, tiles, the storage [`Order`] and the reduction axes of the
//! forward and backward pass. [`LayoutSpec::build`] checks it into a [`TensorLayout`], whose
//! [`View`]s (permute, split, merge, slice, broadcast) change how it is read without copying.
//! Each lowers to an [`IndexFn`](crate::expr::IndexFn) for the emitters; [`BoundView`] is the
//! run-time CPU path once every extent is known.
//!
//! ```
//! use fblayout_core::layout::{LayoutSpec, Order};
//!
//! // Activations [tokens, hidden]: forward reduces hidden (LayerNorm), backward reduces
//! // tokens (bias and weight gradients).
//! let x = LayoutSpec::new("x")
//!     .dyn_axis("tokens")
//!     .tile(4, true) // a run-time extent is padded to whole tiles only with consent
//!     .axis("hidden", 8)
//!     .rtile()
//!     .reduce_forward(["hidden"])
//!     .reduce_backward(["tokens"])
//!     .build()?;
//! assert_eq!(x.in_tile_order(), ["tokens", "hidden"]);
//! let xt = x.view().named("xt")?.transpose("tokens", "hidden")?;
//! let bound = xt.bind(&[("tokens", 6)])?; // 6 tokens, padded to 8 in 4×4 tiles
//! assert_eq!(bound.shape(), [8, 6]);
//! assert_eq!(bound.len(), 64);
//! assert_eq!(bound.offset(&[1, 0]), Some(1)); // hidden 1, token 0: next to hidden 0
//! assert_eq!(bound.offset(&[0, 1]), Some(4)); // token 1 starts the tile's second row
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod bound;
mod conversion;
mod cute;
mod elem;
mod error;
mod leaves;
mod memo;
mod spec;
mod step;
mod tensor;
pub(crate) mod unravel;
mod view;

pub use bound::BoundView;
pub use conversion::{Conversion, classify_conversion, classify_layouts, padded_extents};
pub use elem::{ElemType, UnknownElemType};
pub use error::{LayoutError, LayoutErrors, MAX_ELEMENTS, Pass, Site};
pub use spec::{AxisSpec, DEFAULT_REDUCTION_TILE, Extent, LayoutSpec, Order};
pub use step::ViewStep;
pub use tensor::{LayoutAxis, TensorLayout};

pub use view::{SplitPart, View, ViewAxis, ViewExtent};
