//! The sizes and colours every part of a picture shares.
//!
//! Sizes are in SVG user units (pixels at 100 %); colours are `#rrggbb`. Tile fills come from
//! the [palette](super::super::palette), not from here.

/// The outer margin.
pub(super) const MARGIN: u64 = 16;
/// Cell height.
pub(super) const CELL_H: u64 = 24;
/// The narrowest cell.
pub(super) const MIN_CELL_W: u64 = 34;
/// Room left of the grids for row labels.
pub(super) const LABEL_W: u64 = 64;
/// Font size of cell text and of the indices around the grids.
pub(super) const CELL_FONT: u64 = 11;
/// Fill of cells when no shading is asked for.
pub(super) const NEUTRAL: &str = "#dde6f3";
/// Fill of elements the view does not read.
pub(super) const UNREAD: &str = "#f2f2f2";
/// Dark text, the colour of labels on tile fills (the palette is chosen to keep it legible).
pub(in crate::print) const INK: &str = "#1a1a1a";
/// Muted text (indices, labels of padding).
pub(super) const MUTED: &str = "#5a5a5a";
/// The id of the pattern that hatches padding, defined once per picture by
/// [`frame`](super::frame).
pub(super) const HATCH_ID: &str = "fbl-hatch";

/// The fill that hatches padding.
pub(super) fn hatch_fill() -> String {
    format!("url(#{HATCH_ID})")
}
