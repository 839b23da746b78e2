//! One cell of a grid: a filled rectangle with its label centred in it.
//!
//! Both panels are made of these; the caller wraps each in a `<g>` that says what the cell
//! stands for (`data-coord`, `data-offset`, `data-kind`).

use std::fmt::Write as _;

use super::geometry::baseline;
use super::style::{CELL_FONT, CELL_H};
use super::text::escape;

/// What one cell shows: its fill, the colour of its label, and the label.
pub(super) struct Cell<'c> {
    /// The fill: a colour or a pattern reference.
    pub(super) fill: &'c str,
    /// The colour of the label.
    pub(super) ink: &'c str,
    /// The label.
    pub(super) label: &'c str,
}

impl Cell<'_> {
    /// Appends the cell, `width` wide, with its top-left corner at `(x, y)`.
    pub(super) fn draw(&self, s: &mut String, x: u64, y: u64, width: u64) {
        let _ = write!(
            s,
            r##"<rect x="{x}" y="{y}" width="{width}" height="{CELL_H}" fill="{}" stroke="#ffffff" stroke-width="1"/><text x="{}" y="{}" font-size="{CELL_FONT}" fill="{}" text-anchor="middle">{}</text>"##,
            escape(self.fill),
            x + width / 2,
            baseline(y),
            self.ink,
            escape(self.label)
        );
    }
}
