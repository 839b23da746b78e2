//! Seeing a layout: text tables and SVG pictures of where each element lives.
//!
//! A layout is a function from logical coordinates to physical offsets, and the quickest way
//! to check one is to look at it, the way CuTe's `print_layout` and `print_latex` do. This
//! module draws a [`BoundView`](crate::layout::BoundView) two ways, both computed from the view's own offset function
//! (nothing is restated or hard-coded):
//!
//! - [`grid()`] prints the forward map as a text table: one cell per logical coordinate,
//!   holding its physical offset, with row and column indices around it. Rank-1 views print
//!   one row; views of rank 3 and more print one labelled 2-D slice per leading index.
//! - [`physical_map()`] prints the inverse: the physical buffer in order, each offset labelled
//!   with the logical coordinate stored there, `pad` for padding, or `·` for an element of the
//!   tensor that this view does not read (a slice leaves some out). For an R-Tile layout each
//!   row is one tile, so the tiles and their padding can be read off directly.
//! - [`svg()`] draws both panels as an SVG picture. With a [`TileShading`] every cell is
//!   coloured by the physical tile it lives in (`offset / tile_elems`), so the picture of a
//!   transposed R-Tile view shows the same colours at the same offsets as the original: a
//!   transpose reads the same tiles in another order, with no copy.
//!
//! Pictures are for small examples: more than [`MAX_CELLS`] cells in a panel is a
//! [`PrintError::TooLarge`] rather than megabytes of text.
//!
//! The module is compiled with the `pictures` cargo feature, which is on by default; turn it
//! off (`default-features = false`) where no layout is ever drawn.
//!
//! ```
//! use fblayout_core::layout::LayoutSpec;
//! use fblayout_core::print::{grid, physical_map};
//!
//! let x = LayoutSpec::new("x")
//!     .axis("rows", 6)
//!     .tile(4, true)
//!     .axis("cols", 8)
//!     .rtile()
//!     .reduce_forward(["cols"])
//!     .reduce_backward(["rows"])
//!     .build()?;
//! let bound = x.view().bind(&[])?;
//! let table = grid(&bound)?;
//! assert!(table.starts_with("view `x`: shape [6, 8]"));
//! let map = physical_map(&bound, &x)?;
//! assert_eq!(map.split_whitespace().filter(|w| *w == "pad").count(), 16); // rows 6 and 7
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod cells;
mod error;
mod grid;
mod palette;
mod svg;
#[cfg(test)]
mod test_layouts;

pub use error::PrintError;
pub use grid::{grid, physical_map};
pub use svg::{TileShading, svg};

/// The most cells one table or picture panel draws; beyond it printing fails with
/// [`PrintError::TooLarge`].
pub const MAX_CELLS: u64 = 4096;
