//! SVG pictures of a view: the logical grid above, the physical buffer below.
//!
//! [`svg()`] draws a rank-1 or rank-2 [`BoundView`] as two panels, in the spirit of CuTe's
//! `print_latex`:
//!
//! - **logical view**: one cell per coordinate (rows are the first view axis, columns the
//!   second), each showing its physical offset, with the indices along the top and the left;
//! - **physical order**: the buffer as rows of cells in offset order (one tile per row for
//!   R-Tile), each labelled with the view coordinate stored there; padding is hatched grey
//!   and labelled `pad`, elements the view does not read are pale grey and labelled `·`.
//!
//! Given a [`TileShading`] (the tensor the view reads), every cell in both panels is filled
//! with the colour of its physical tile, `offset / tile_elems`, from a fixed golden-angle
//! palette, and a dark outline follows the tile edges. The colour depends on the offset alone,
//! so the picture of a transposed R-Tile view has exactly the colours of the original at the
//! same offsets: the tiles reappear, mirrored, and the physical panel shows the same tiles in
//! the same place, only the coordinates inside them swapped. That is the no-copy transpose,
//! visible. For a layout without tiles the colour groups are contiguous runs of the innermost
//! storage axis instead. Without shading the cells are a neutral blue and padding cannot be
//! told apart from skipped elements.
//!
//! The output is a standalone SVG 1.1 document (valid XML, every text escaped) with a
//! `viewBox`, sized to its content; each cell is a `<g>` carrying `data-coord` and
//! `data-offset` so the pictures can be checked by machine as well as by eye.
//!
//! Inside, each module draws one thing: `frame` (the document, title and subtitle),
//! `logical_panel` and `physical_panel` (each built of `cell`s, `indices` and tile `edges`)
//! and `legend`; `picture` holds what they share, `geometry` where each part sits, and
//! `style` and `text` the sizes, colours and fonts.

mod cell;
mod edges;
mod frame;
mod geometry;
mod indices;
mod legend;
mod logical_panel;
mod physical_panel;
mod picture;
mod style;
#[cfg(test)]
mod tests;
mod text;

use super::PrintError;
use super::cells::{Logical, Physical};
use crate::layout::{BoundView, TensorLayout};
use picture::Picture;
#[cfg(test)]
pub(super) use style::INK;

/// Colour the cells of a picture by the physical tiles of a tensor.
///
/// It carries the tensor the view reads: its tile size sets the colour groups and the width
/// of the physical rows, and binding it tells padding apart from elements the view skips.
/// Use the same tensor for a view and its transpose to get matching colours.
#[derive(Debug, Clone, Copy)]
pub struct TileShading<'a> {
    layout: &'a TensorLayout,
}

impl<'a> TileShading<'a> {
    /// Shading by the tiles of `layout`, the tensor the pictured view reads.
    pub fn of(layout: &'a TensorLayout) -> Self {
        Self { layout }
    }

    /// The tensor whose tiles colour the picture.
    pub fn layout(self) -> &'a TensorLayout {
        self.layout
    }

    /// The elements in one tile (1 for a layout without tiles).
    pub fn tile_elems(self) -> u64 {
        self.layout.tile_elems()
    }
}

/// An SVG picture of the rank-1 or rank-2 `view`: its logical grid of offsets above, its
/// physical buffer in order below (see the module docs).
///
/// With `tiles`, cells are coloured by the physical tile they live in and padding is marked;
/// pass the tensor the view reads, the same for a view and its transpose, so that their
/// pictures agree cell for cell. A rank-1 view is drawn as one row.
///
/// # Errors
/// [`PrintError::Rank`] for views of rank 3 or more; [`PrintError::TooLarge`] when either
/// panel would hold more than [`MAX_CELLS`](super::MAX_CELLS) cells;
/// [`PrintError::LayoutMismatch`] or [`PrintError::Bind`] when the shading's tensor visibly
/// is not the one the view reads.
///
/// ```
/// use fblayout_core::layout::LayoutSpec;
/// use fblayout_core::print::{TileShading, svg};
///
/// let x = LayoutSpec::new("x").axis("rows", 8).axis("cols", 8).rtile()
///     .reduce_forward(["cols"]).reduce_backward(["rows"]).build()?;
/// let xt = x.view().named("xt")?.transpose("rows", "cols")?.bind(&[])?;
/// let picture = svg(&xt, Some(TileShading::of(&x)))?;
/// assert!(picture.contains("<svg") && picture.contains("viewBox"));
/// assert_eq!(picture.matches("<g class=\"cell\"").count(), 64);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn svg(view: &BoundView, tiles: Option<TileShading<'_>>) -> Result<String, PrintError> {
    let shape = view.shape();
    if shape.len() > 2 {
        return Err(PrintError::Rank {
            view: view.name().to_owned(),
            rank: shape.len(),
            printer: "svg",
            accepted: "rank 1 and 2",
            hint: "merge or slice the leading axes, or print it as text with `grid`",
        });
    }
    let logical = Logical::new(view)?;
    let physical = Physical::new(&logical, tiles.map(TileShading::layout))?;
    Ok(Picture::new(&logical, &physical, tiles).draw())
}
