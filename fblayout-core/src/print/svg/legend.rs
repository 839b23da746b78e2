//! The legend under the physical panel: what the hatched and the pale cells mean.
//!
//! It explains only what the picture shows: padding when the buffer has any, unread elements
//! when the view leaves some out. A picture with neither has no legend.

use std::fmt::Write as _;

use super::super::cells::{Physical, Slot};
use super::style::{MARGIN, UNREAD, hatch_fill};
use super::text::{NOTE, text, width};

/// One entry: a swatch of `fill` and what it means.
pub(super) struct Entry {
    fill: String,
    label: &'static str,
}

/// The entries a picture of `physical` needs, in order.
pub(super) fn entries(physical: &Physical) -> Vec<Entry> {
    let mut out = Vec::new();
    if physical.padding() > 0 {
        out.push(Entry {
            fill: hatch_fill(),
            label: "padding: no element lives here",
        });
    }
    if physical.slots.contains(&Slot::Unread) {
        out.push(Entry {
            fill: UNREAD.to_owned(),
            label: "· an element this view does not read",
        });
    }
    out
}

/// Appends `entries` side by side on the baseline `y`.
pub(super) fn draw(s: &mut String, entries: &[Entry], y: u64) {
    let mut x = MARGIN;
    for Entry { fill, label } in entries {
        let _ = writeln!(
            s,
            r##"<rect x="{x}" y="{}" width="18" height="14" fill="{fill}" stroke="#888888"/>"##,
            y - 11
        );
        text(s, &NOTE, x + 24, y, label);
        x += 24 + width(label, &NOTE) + 24;
    }
}
