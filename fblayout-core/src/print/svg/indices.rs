//! The indices around a grid: labels over its columns and left of its rows.
//!
//! Column labels are centred over their column on the panel's index line; row labels are
//! right-aligned a little left of the grid, on the baseline of their row.

use super::geometry::{Geometry, LEFT, Panel, baseline};
use super::style::CELL_H;
use super::text::{INDEX_END, INDEX_MID, text};

/// The x that row labels end at.
const GUTTER: u64 = LEFT - 8;

/// Appends `labels` over the columns of `panel`, the first over column 0.
pub(super) fn columns(s: &mut String, at: &Geometry, panel: &Panel, labels: &[String]) {
    for (c, label) in (0..).zip(labels) {
        text(s, &INDEX_MID, at.column_centre(c), panel.index_y, label);
    }
}

/// Appends `labels` left of the rows of `panel`, the first by row 0.
pub(super) fn rows(s: &mut String, panel: &Panel, labels: &[String]) {
    for (r, label) in (0..).zip(labels) {
        let y = baseline(panel.top() + r * CELL_H);
        text(s, &INDEX_END, GUTTER, y, label);
    }
}

/// Appends `label` where the row labels meet the column labels: left of the grid, on the
/// line of the column indices.
pub(super) fn corner(s: &mut String, panel: &Panel, label: &str) {
    text(s, &INDEX_END, GUTTER, panel.index_y, label);
}
