//! Tile edges: a dark line wherever neighbouring cells belong to different tiles.
//!
//! Each panel is a grid filled row by row from a list of cells, each with its colour group
//! (its tile, or its contiguous run) when one is known. An edge is drawn on every side of a
//! cell with a group where the cell across that side has another group, or none (outside
//! the grid, or a cell without a group). One `<path>` holds all edges of a panel.

use std::fmt::Write as _;

use super::geometry::{Geometry, Panel};
use super::style::CELL_H;

/// Appends the tile edges of `panel`, whose cells, row by row `cols` to a row, have the
/// colour groups `groups`. Nothing when no cell has a group.
pub(super) fn draw(
    s: &mut String,
    at: &Geometry,
    panel: &Panel,
    cols: u64,
    groups: &[Option<u64>],
) {
    let group = |r: u64, c: u64| {
        if c >= cols {
            return None;
        }
        groups.get((r * cols + c) as usize).copied().flatten()
    };
    let w = at.cell_w;
    let mut d = String::new();
    for r in 0..panel.rows {
        for c in 0..cols {
            let g = group(r, c);
            if g.is_none() {
                continue;
            }
            let (x, y) = at.corner(panel, r, c);
            if r == 0 || group(r - 1, c) != g {
                let _ = write!(d, "M{x} {y}h{w}");
            }
            if group(r + 1, c) != g {
                let _ = write!(d, "M{x} {}h{w}", y + CELL_H);
            }
            if c == 0 || group(r, c - 1) != g {
                let _ = write!(d, "M{x} {y}v{CELL_H}");
            }
            if group(r, c + 1) != g {
                let _ = write!(d, "M{} {y}v{CELL_H}", x + w);
            }
        }
    }
    if !d.is_empty() {
        let _ = writeln!(
            s,
            r##"<path class="tile-edges" d="{d}" fill="none" stroke="#262626" stroke-width="2" stroke-linecap="square"/>"##
        );
    }
}
