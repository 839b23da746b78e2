//! The logical panel: the view's grid of coordinates, each cell showing its offset.
//!
//! Rows are the first view axis and columns the second (a rank-1 view is one row), with the
//! axis names and indices along the top and the left. Every cell is a
//! `<g class="cell" data-coord="r,c" data-offset="o">` inside `<g class="logical">`, filled
//! with the colour of the tile its offset lies in.

use std::fmt::Write as _;

use super::cell::Cell;
use super::geometry::{AXIS_Y, Geometry, LEFT};
use super::picture::Picture;
use super::style::{INK, MARGIN};
use super::text::{HEADING, NOTE, escape, text};
use super::{edges, indices};

/// Appends the logical panel of `picture`.
pub(super) fn draw(s: &mut String, picture: &Picture<'_>, at: &Geometry) {
    let panel = &at.logical;
    let logical = picture.logical;
    let (rows, cols) = picture.grid;
    let rank = logical.view.shape().len();
    text(
        s,
        &HEADING,
        MARGIN,
        panel.heading_y,
        "logical view: the offset of each coordinate",
    );
    let names = logical.view.axis_names();
    let col_axis = names
        .get(usize::from(rank >= 2))
        .map_or_else(String::new, |n| format!("{n} →"));
    text(s, &NOTE, LEFT, AXIS_Y, &col_axis);
    let numbers = |n: u64| -> Vec<String> { (0..n).map(|i| i.to_string()).collect() };
    if rank >= 2 {
        text(s, &NOTE, MARGIN, panel.index_y, &format!("{} ↓", names[0]));
        indices::rows(s, panel, &numbers(rows));
    }
    indices::columns(s, at, panel, &numbers(cols));
    let _ = writeln!(s, r#"<g class="logical">"#);
    for (linear, &offset) in logical.offsets.iter().enumerate() {
        let (x, y) = at.corner(panel, linear as u64 / cols, linear as u64 % cols);
        let _ = write!(
            s,
            r#"<g class="cell" data-coord="{}" data-offset="{offset}">"#,
            escape(&logical.coord_label(linear))
        );
        let cell = Cell {
            fill: &picture.fill(offset),
            ink: INK,
            label: &picture.offset_labels[linear],
        };
        cell.draw(s, x, y, at.cell_w);
        let _ = writeln!(s, "</g>");
    }
    let _ = writeln!(s, "</g>");
    let groups: Vec<Option<u64>> = logical
        .offsets
        .iter()
        .map(|&o| picture.physical.group_of(o))
        .collect();
    edges::draw(s, at, panel, cols, &groups);
}
