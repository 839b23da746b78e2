//! What the printers draw, computed once from the view.
//!
//! Both the text tables and the SVG pictures draw the same two facts about a [`BoundView`]:
//! the forward map (the offset of every logical coordinate, in row-major order, from
//! [`BoundView::for_each`]) and its inverse over the physical buffer (which coordinate, if
//! any, each offset holds). The inverse needs the tensor's own layout to tell padding from
//! elements the view merely skips: the tensor's identity view is bound with the same run-time
//! extents, and every offset it never reaches is padding.
//!
//! The physical buffer is drawn in rows. For an R-Tile layout a row is one tile
//! (`tile_elems` elements), or an equal part of one when tiles are wide; for a layout without
//! tiles it is one contiguous run of the innermost storage axis. The same grouping colours
//! the SVG cells.

use super::{MAX_CELLS, PrintError};
use crate::layout::unravel::unravel;
use crate::layout::{BoundView, Order, TensorLayout};

/// Rows of the physical panel never grow wider than this many cells.
const MAX_ROW: u64 = 32;
/// A tile split across rows uses parts at least this wide, or rows of [`MAX_ROW`].
const MIN_PART: u64 = 8;
/// The row width when no layout is known.
const PLAIN_ROW: u64 = 16;

/// The forward map of a view: the physical offset of each logical coordinate.
#[derive(Debug)]
pub(crate) struct Logical<'v> {
    /// The view.
    pub(crate) view: &'v BoundView,
    /// The offset of each coordinate, in row-major order of the view's shape.
    pub(crate) offsets: Vec<u64>,
}

impl<'v> Logical<'v> {
    /// Evaluates every offset of `view`, refusing views of more than [`MAX_CELLS`] cells.
    pub(crate) fn new(view: &'v BoundView) -> Result<Self, PrintError> {
        let cells = u128::from(view.logical_len());
        check_size(view, "logical cells", cells)?;
        let mut offsets = Vec::with_capacity(cells as usize);
        view.for_each(|_, _, offset| offsets.push(offset));
        if let Some(&offset) = offsets.iter().find(|&&o| o >= view.len()) {
            return Err(PrintError::OutsideBuffer {
                view: view.name().to_owned(),
                offset,
                len: view.len(),
            });
        }
        Ok(Self { view, offsets })
    }

    /// The rows and columns of one 2-D panel of the view: its last two axes (a rank-1 view
    /// is one row, a rank-0 view one cell).
    pub(crate) fn panel(&self) -> (u64, u64) {
        match *self.view.shape() {
            [] => (1, 1),
            [n] => (1, n),
            [.., rows, cols] => (rows, cols),
        }
    }

    /// The coordinate of the `linear`-th cell (row-major).
    pub(crate) fn coords(&self, linear: usize) -> Vec<u64> {
        let shape = self.view.shape();
        let mut coords = vec![0; shape.len()];
        unravel(linear as u64, shape, &mut coords);
        coords
    }

    /// The coordinate of the `linear`-th cell, written `a,b,c`.
    pub(crate) fn coord_label(&self, linear: usize) -> String {
        self.coords(linear)
            .iter()
            .map(u64::to_string)
            .collect::<Vec<_>>()
            .join(",")
    }
}

/// What one physical offset holds, as seen through a view.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Slot {
    /// The view reads it: the first (row-major) cell that does, and how many cells do
    /// (more than one under a broadcast).
    Read {
        /// The linear index of the first cell that reads it.
        first: usize,
        /// How many cells read it.
        readers: usize,
    },
    /// The view does not read it. With a layout given, it is known to hold an element of the
    /// tensor (a slice left it out); without one it may also be padding.
    Unread,
    /// Padding: no element of the tensor lives here.
    Pad,
}

impl Slot {
    /// The label of this slot in the physical panels.
    pub(crate) fn label(self, logical: &Logical<'_>) -> String {
        match self {
            Self::Read { first, readers: 1 } => logical.coord_label(first),
            Self::Read { first, readers } => {
                format!("{}+{}", logical.coord_label(first), readers - 1)
            }
            Self::Unread => "·".to_owned(),
            Self::Pad => "pad".to_owned(),
        }
    }
}

/// The inverse map: what each physical offset holds, and how the buffer is drawn in rows.
#[derive(Debug)]
pub(crate) struct Physical {
    /// One slot per physical offset.
    pub(crate) slots: Vec<Slot>,
    /// Cells per drawn row.
    pub(crate) row: u64,
    /// Elements per colour group (a tile, or a contiguous run), when a layout is known.
    pub(crate) group: Option<u64>,
    /// Whether the groups are R-Tile tiles.
    pub(crate) tiled: bool,
}

impl Physical {
    /// Inverts `logical`; `layout` (the tensor the view reads) tells padding apart and sets the
    /// row width.
    pub(crate) fn new(
        logical: &Logical<'_>,
        layout: Option<&TensorLayout>,
    ) -> Result<Self, PrintError> {
        let view = logical.view;
        check_size(view, "physical elements", u128::from(view.len()))?;
        let len = view.len() as usize;
        let mut slots = vec![Slot::Unread; len];
        let (group, tiled) = match layout {
            Some(layout) => {
                let whole = bind_tensor(view, layout)?;
                mark_padding(&whole, &mut slots)?;
                colour_groups(layout, &whole)
            }
            None => (None, false),
        };
        for (linear, &offset) in logical.offsets.iter().enumerate() {
            slots[offset as usize] = match slots[offset as usize] {
                Slot::Read { first, readers } => Slot::Read {
                    first,
                    readers: readers + 1,
                },
                Slot::Unread => Slot::Read {
                    first: linear,
                    readers: 1,
                },
                Slot::Pad => {
                    let tensor = layout.map_or_else(String::new, |l| l.name().to_owned());
                    return Err(PrintError::LayoutMismatch {
                        view: view.name().to_owned(),
                        tensor,
                        detail: format!(
                            "the view reads offset {offset}, which is padding in the tensor"
                        ),
                    });
                }
            };
        }
        let row = group.map_or(PLAIN_ROW, row_width).min(view.len()).max(1);
        Ok(Self {
            slots,
            row,
            group,
            tiled,
        })
    }

    /// The colour group of `offset`, when groups are known.
    pub(crate) fn group_of(&self, offset: u64) -> Option<u64> {
        self.group.map(|g| offset / g.max(1))
    }

    /// How many rows the buffer is drawn in.
    pub(crate) fn rows(&self) -> u64 {
        (self.slots.len() as u64).div_ceil(self.row)
    }

    /// How many slots are padding.
    pub(crate) fn padding(&self) -> usize {
        self.slots.iter().filter(|s| **s == Slot::Pad).count()
    }

    /// How many slots the view reads.
    pub(crate) fn read(&self) -> usize {
        self.slots
            .iter()
            .filter(|s| matches!(s, Slot::Read { .. }))
            .count()
    }

    /// A sentence on how the rows are drawn.
    pub(crate) fn rows_note(&self) -> String {
        match (self.group, self.tiled) {
            (Some(g), true) if g == self.row => format!("each row is one tile of {g} elements"),
            (Some(g), true) => format!("rows of {}, tiles of {g} elements", self.row),
            (Some(g), false) if g == self.row => format!("each row is one contiguous run of {g}"),
            _ => format!("rows of {} elements", self.row),
        }
    }
}

/// The width of a row that draws groups of `group` elements: the whole group when it is
/// narrow, otherwise an equal part of it, otherwise [`MAX_ROW`].
fn row_width(group: u64) -> u64 {
    if group <= MAX_ROW {
        return group.max(1);
    }
    (MIN_PART..=MAX_ROW)
        .rev()
        .find(|d| group.is_multiple_of(*d))
        .unwrap_or(MAX_ROW)
}

/// Refuses panels of more than [`MAX_CELLS`] cells.
fn check_size(view: &BoundView, what: &'static str, cells: u128) -> Result<(), PrintError> {
    if cells > u128::from(MAX_CELLS) {
        return Err(PrintError::TooLarge {
            view: view.name().to_owned(),
            what,
            cells,
            limit: MAX_CELLS,
        });
    }
    Ok(())
}

/// The tensor `layout` bound with the run-time extents of `view`, which must read it: the
/// same extents, the same buffer.
fn bind_tensor(view: &BoundView, layout: &TensorLayout) -> Result<BoundView, PrintError> {
    let mismatch = |detail: String| PrintError::LayoutMismatch {
        view: view.name().to_owned(),
        tensor: layout.name().to_owned(),
        detail,
    };
    let dynamic: Vec<&str> = layout.dynamic_axes().map(|a| a.name.as_str()).collect();
    let args = view.extent_args();
    if dynamic.len() != args.len() {
        return Err(mismatch(format!(
            "the view was bound with {} run-time extents, the tensor has {} run-time axes",
            args.len(),
            dynamic.len()
        )));
    }
    let mut pairs = Vec::with_capacity(args.len());
    for (&axis, &value) in dynamic.iter().zip(args) {
        let value = u32::try_from(value).map_err(|_| {
            mismatch(format!(
                "run-time extent {value} of `{axis}` does not fit u32"
            ))
        })?;
        pairs.push((axis, value));
    }
    let whole = layout.bind(&pairs).map_err(|source| PrintError::Bind {
        tensor: layout.name().to_owned(),
        source: Box::new(source),
    })?;
    if whole.len() != view.len() {
        return Err(mismatch(format!(
            "the tensor's buffer holds {} elements, the view's {}",
            whole.len(),
            view.len()
        )));
    }
    Ok(whole)
}

/// Marks as [`Slot::Pad`] every slot that no element of the tensor `whole` lives in.
fn mark_padding(whole: &BoundView, slots: &mut [Slot]) -> Result<(), PrintError> {
    let mut stored = vec![false; slots.len()];
    let mut outside = None;
    whole.for_each(|_, _, offset| match stored.get_mut(offset as usize) {
        Some(s) => *s = true,
        None => outside = Some(offset),
    });
    if let Some(offset) = outside {
        return Err(PrintError::OutsideBuffer {
            view: whole.name().to_owned(),
            offset,
            len: whole.len(),
        });
    }
    for (slot, stored) in slots.iter_mut().zip(stored) {
        if !stored {
            *slot = Slot::Pad;
        }
    }
    Ok(())
}

/// The colour groups of the tensor `layout`, bound as `whole`: its tiles, or without tiles
/// the contiguous runs of its innermost storage axis (which no tile pads, so its extent is
/// the one bound). Returns the group size and whether the groups are tiles.
fn colour_groups(layout: &TensorLayout, whole: &BoundView) -> (Option<u64>, bool) {
    if layout.tile_elems() > 1 {
        return (Some(layout.tile_elems()), true);
    }
    let run = match layout.order() {
        Order::ColMajor => whole.shape().first(),
        Order::RowMajor | Order::RTile => whole.shape().last(),
    };
    (run.copied(), false)
}
