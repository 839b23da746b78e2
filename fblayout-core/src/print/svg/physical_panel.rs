//! The physical panel: the buffer in offset order, each cell showing what is stored there.
//!
//! The buffer is drawn in rows of [`Physical::row`](super::super::cells::Physical) cells (one
//! tile per row for R-Tile), each row labelled with its first offset. Every cell is a
//! `<g class="slot" data-offset="o" data-kind="…">` inside `<g class="physical">`, of kind
//! `read` (filled with its tile colour, labelled with the view coordinate stored there), `pad`
//! (hatched grey, labelled `pad`) or `unread` (pale grey, labelled `·`).

use std::fmt::Write as _;

use super::super::cells::Slot;
use super::cell::Cell;
use super::geometry::Geometry;
use super::picture::Picture;
use super::style::{INK, MARGIN, MUTED, UNREAD, hatch_fill};
use super::text::{HEADING, text};
use super::{edges, indices};

/// Appends the physical panel of `picture`.
pub(super) fn draw(s: &mut String, picture: &Picture<'_>, at: &Geometry) {
    let panel = &at.physical;
    let physical = picture.physical;
    let row = physical.row;
    let heading = format!(
        "physical order: {}; each cell shows the coordinate stored there",
        physical.rows_note()
    );
    text(s, &HEADING, MARGIN, panel.heading_y, &heading);
    indices::corner(s, panel, "offset");
    let steps: Vec<String> = (0..row).map(|k| format!("+{k}")).collect();
    indices::columns(s, at, panel, &steps);
    let starts: Vec<String> = (0..panel.rows).map(|r| (r * row).to_string()).collect();
    indices::rows(s, panel, &starts);
    let _ = writeln!(s, r#"<g class="physical">"#);
    for (offset, slot) in (0..).zip(&physical.slots) {
        let (x, y) = at.corner(panel, offset / row, offset % row);
        let (kind, fill, ink) = match slot {
            Slot::Read { .. } => ("read", picture.fill(offset), INK),
            Slot::Pad => ("pad", hatch_fill(), MUTED),
            Slot::Unread => ("unread", UNREAD.to_owned(), MUTED),
        };
        let _ = write!(
            s,
            r#"<g class="slot" data-offset="{offset}" data-kind="{kind}">"#
        );
        let cell = Cell {
            fill: &fill,
            ink,
            label: &picture.slot_labels[offset as usize],
        };
        cell.draw(s, x, y, at.cell_w);
        let _ = writeln!(s, "</g>");
    }
    let _ = writeln!(s, "</g>");
    let groups: Vec<Option<u64>> = (0..physical.slots.len() as u64)
        .map(|o| physical.group_of(o))
        .collect();
    edges::draw(s, at, panel, row, &groups);
}
