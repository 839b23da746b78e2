//! Why a layout could not be printed.
//!
//! Printing can fail for a few reasons, each a [`PrintError`] that names the view: the picture
//! would be too large to read ([`MAX_CELLS`](super::MAX_CELLS) per panel), the view has a rank
//! the picture does not draw, the layout passed for tile sizes and padding is not the one
//! the view reads, or (a bug elsewhere) the view maps outside its own buffer.

use crate::layout::LayoutError;

/// A view that could not be printed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PrintError {
    /// A panel would hold more cells than [`MAX_CELLS`](super::MAX_CELLS).
    #[error(
        "view `{view}` has {cells} {what} to draw, more than the {limit} a picture shows; \
         slice it to a smaller window first"
    )]
    TooLarge {
        /// The view.
        view: String,
        /// What would be drawn (`logical cells` or `physical elements`).
        what: &'static str,
        /// How many.
        cells: u128,
        /// The limit.
        limit: u64,
    },
    /// The view's rank is not one this printer draws.
    #[error("view `{view}` has rank {rank}, but {printer} draws {accepted}; {hint}")]
    Rank {
        /// The view.
        view: String,
        /// Its rank.
        rank: usize,
        /// The printer (`svg`).
        printer: &'static str,
        /// The ranks it accepts.
        accepted: &'static str,
        /// What to do instead.
        hint: &'static str,
    },
    /// The layout given for tile sizes and padding does not match the view.
    #[error("view `{view}` does not read tensor `{tensor}` as given: {detail}")]
    LayoutMismatch {
        /// The view.
        view: String,
        /// The tensor the printer was given.
        tensor: String,
        /// What does not match.
        detail: String,
    },
    /// The view maps a coordinate outside its own buffer.
    #[error(
        "view `{view}` maps a coordinate to offset {offset}, outside its buffer of {len} elements"
    )]
    OutsideBuffer {
        /// The view.
        view: String,
        /// The offset.
        offset: u64,
        /// The buffer length.
        len: u64,
    },
    /// Binding the tensor itself (to find its padding) failed.
    #[error("binding tensor `{tensor}` to find its padding failed: {source}")]
    Bind {
        /// The tensor.
        tensor: String,
        /// The binding error (boxed to keep `PrintError` small).
        source: Box<LayoutError>,
    },
}
