//! One picture: what it says (labels, title, subtitle), and drawing it part by part.
//!
//! [`Picture::new`] settles everything the parts share: the label of every cell of both
//! panels, the cell width that fits the widest label, the title and the subtitle that
//! explains the colours. [`Picture::draw`] lays it out ([`Geometry`]) and appends the frame,
//! the two panels and the legend in order.

use super::super::cells::{Logical, Physical};
use super::super::palette::tile_colour;
use super::geometry::Geometry;
use super::style::{MIN_CELL_W, NEUTRAL};
use super::{TileShading, frame, legend, logical_panel, physical_panel};

/// The content of one picture.
pub(super) struct Picture<'a> {
    /// The forward map.
    pub(super) logical: &'a Logical<'a>,
    /// The inverse map.
    pub(super) physical: &'a Physical,
    /// Whether cells are coloured by tile.
    shaded: bool,
    /// Rows and columns of the logical grid.
    pub(super) grid: (u64, u64),
    /// The width of every cell.
    pub(super) cell_w: u64,
    /// The label of each logical cell (its offset), row-major.
    pub(super) offset_labels: Vec<String>,
    /// The label of each physical slot, in offset order.
    pub(super) slot_labels: Vec<String>,
    /// The title.
    pub(super) title: String,
    /// What the colours mean.
    pub(super) subtitle: String,
}

impl<'a> Picture<'a> {
    /// The picture of `logical` and `physical`, coloured by `tiles` when given.
    pub(super) fn new(
        logical: &'a Logical<'a>,
        physical: &'a Physical,
        tiles: Option<TileShading<'_>>,
    ) -> Self {
        let view = logical.view;
        let offset_labels: Vec<String> = logical.offsets.iter().map(u64::to_string).collect();
        let slot_labels: Vec<String> = physical.slots.iter().map(|s| s.label(logical)).collect();
        let widest = offset_labels
            .iter()
            .chain(&slot_labels)
            .map(|l| l.chars().count())
            .max()
            .unwrap_or(1);
        let cell_w = MIN_CELL_W.max(12 + 7 * widest as u64);
        let title = format!(
            "view `{}`: shape {:?} over a buffer of {} elements",
            view.name(),
            view.shape(),
            view.len()
        );
        let subtitle = match (tiles, physical.group) {
            (Some(t), Some(g)) if physical.tiled => format!(
                "R-Tile tensor `{}`: tiles of {g} elements; fill = physical tile (offset / {g}), \
                 the same in every view of `{}`",
                t.layout().name(),
                t.layout().name()
            ),
            (Some(t), Some(g)) => format!(
                "tensor `{}` has no tiles; fill = contiguous run of {g} elements (offset / {g})",
                t.layout().name()
            ),
            _ => "no tile shading: pass the tensor's TileShading to colour tiles and mark padding"
                .to_owned(),
        };
        Self {
            logical,
            physical,
            shaded: tiles.is_some(),
            grid: logical.panel(),
            cell_w,
            offset_labels,
            slot_labels,
            title,
            subtitle,
        }
    }

    /// The fill of a cell holding `offset`.
    pub(super) fn fill(&self, offset: u64) -> String {
        match self.physical.group_of(offset) {
            Some(group) if self.shaded => tile_colour(group),
            _ => NEUTRAL.to_owned(),
        }
    }

    /// The SVG document.
    pub(super) fn draw(&self) -> String {
        let legend = legend::entries(self.physical);
        let at = Geometry::of(self, !legend.is_empty());
        let mut s = String::new();
        frame::open(&mut s, &at, &self.title, &self.subtitle);
        logical_panel::draw(&mut s, self, &at);
        physical_panel::draw(&mut s, self, &at);
        if let Some(y) = at.legend_y {
            legend::draw(&mut s, &legend, y);
        }
        frame::close(&mut s);
        s
    }
}
