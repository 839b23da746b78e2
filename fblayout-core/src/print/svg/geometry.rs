//! Where every part of a picture sits.
//!
//! A picture is a column: the title and subtitle, the logical panel, the physical panel, and
//! a legend when there is padding or unread elements to explain. Each panel is a heading, a
//! row of column indices, then its grid of [`CELL_H`]-high cells, starting [`LEFT`] from the
//! picture's edge so that row labels fit on its left. The picture is as wide as its widest
//! grid or line of text.

use super::picture::Picture;
use super::style::{CELL_H, LABEL_W, MARGIN};
use super::text::{Font, NOTE, TITLE, width};

/// The left edge of both grids.
pub(super) const LEFT: u64 = MARGIN + LABEL_W;
/// The baseline of the title.
pub(super) const TITLE_Y: u64 = MARGIN + 16;
/// The baseline of the subtitle.
pub(super) const SUBTITLE_Y: u64 = TITLE_Y + 20;
/// The baseline of the logical panel's heading.
const LOGICAL_HEADING_Y: u64 = SUBTITLE_Y + 32;
/// The baseline of the name of the logical panel's column axis, under its heading.
pub(super) const AXIS_Y: u64 = LOGICAL_HEADING_Y + 20;
/// The room every picture leaves for its legend, whether or not it draws one.
const LEGEND_W: u64 = 420;

/// The vertical place of one panel.
#[derive(Debug, Clone, Copy)]
pub(super) struct Panel {
    /// The baseline of its heading.
    pub(super) heading_y: u64,
    /// The baseline of its column indices.
    pub(super) index_y: u64,
    /// How many rows of cells its grid has.
    pub(super) rows: u64,
}

impl Panel {
    /// The top of its grid, just under the column indices.
    pub(super) fn top(&self) -> u64 {
        self.index_y + 8
    }

    /// The bottom of its grid.
    pub(super) fn bottom(&self) -> u64 {
        self.top() + self.rows * CELL_H
    }
}

/// The geometry of one picture.
#[derive(Debug, Clone, Copy)]
pub(super) struct Geometry {
    /// The width of every cell.
    pub(super) cell_w: u64,
    /// The logical panel.
    pub(super) logical: Panel,
    /// The physical panel.
    pub(super) physical: Panel,
    /// The baseline of the legend, when there is one.
    pub(super) legend_y: Option<u64>,
    /// The picture's size.
    pub(super) size: (u64, u64),
}

impl Geometry {
    /// Lays out `picture`, with a legend when `legend`.
    pub(super) fn of(picture: &Picture<'_>, legend: bool) -> Self {
        let cell_w = picture.cell_w;
        // The logical panel's column indices sit under the axis name.
        let logical = Panel {
            heading_y: LOGICAL_HEADING_Y,
            index_y: AXIS_Y + 18,
            rows: picture.grid.0,
        };
        let heading_y = logical.bottom() + 36;
        let physical = Panel {
            heading_y,
            index_y: heading_y + 20,
            rows: picture.physical.rows(),
        };
        let legend_y = legend.then_some(physical.bottom() + 28);
        let height = legend_y.map_or(physical.bottom(), |y| y + 12) + MARGIN;
        let line_w = |line: &str, font: &Font| MARGIN + width(line, font);
        let width = [
            LEFT + picture.grid.1 * cell_w,
            LEFT + picture.physical.row * cell_w,
            line_w(&picture.title, &TITLE),
            line_w(&picture.subtitle, &NOTE),
            MARGIN + LEGEND_W,
        ]
        .into_iter()
        .max()
        .unwrap_or(0)
            + MARGIN;
        Self {
            cell_w,
            logical,
            physical,
            legend_y,
            size: (width, height),
        }
    }

    /// The x of the centre of column `c` of a grid.
    pub(super) fn column_centre(&self, c: u64) -> u64 {
        LEFT + c * self.cell_w + self.cell_w / 2
    }

    /// The top-left corner of the cell at row `r`, column `c` of `panel`.
    pub(super) fn corner(&self, panel: &Panel, r: u64, c: u64) -> (u64, u64) {
        (LEFT + c * self.cell_w, panel.top() + r * CELL_H)
    }
}

/// The baseline of text centred in a row of cells whose top is `top`.
pub(super) fn baseline(top: u64) -> u64 {
    top + CELL_H / 2 + 4
}
