//! Text in a picture: the fonts, `<text>` elements, their width, and XML escaping.
//!
//! Every string a picture shows or carries in an attribute goes through [`escape`], so names
//! and labels can hold any character. Widths are estimates for a monospace font (0.62 em a
//! character), enough to size the picture around its longest line.

use std::fmt::Write as _;

use super::style::{CELL_FONT, INK, MUTED};

/// How a piece of text is set.
pub(super) struct Font {
    size: u64,
    fill: &'static str,
    anchor: &'static str,
    weight: &'static str,
}

impl Font {
    const fn new(
        size: u64,
        fill: &'static str,
        anchor: &'static str,
        weight: &'static str,
    ) -> Self {
        Self {
            size,
            fill,
            anchor,
            weight,
        }
    }
}

/// The picture's title.
pub(super) const TITLE: Font = Font::new(16, INK, "start", "bold");
/// Panel headings.
pub(super) const HEADING: Font = Font::new(13, INK, "start", "bold");
/// The subtitle, axis names and the legend.
pub(super) const NOTE: Font = Font::new(12, MUTED, "start", "normal");
/// Row indices, right-aligned against the grid.
pub(super) const INDEX_END: Font = Font::new(CELL_FONT, MUTED, "end", "normal");
/// Column indices, centred over their column.
pub(super) const INDEX_MID: Font = Font::new(CELL_FONT, MUTED, "middle", "normal");

/// Appends a `<text>` element set in `font` at `(x, y)`.
pub(super) fn text(s: &mut String, font: &Font, x: u64, y: u64, content: &str) {
    let Font {
        size,
        fill,
        anchor,
        weight,
    } = font;
    let _ = writeln!(
        s,
        r#"<text x="{x}" y="{y}" font-size="{size}" fill="{fill}" text-anchor="{anchor}" font-weight="{weight}">{}</text>"#,
        escape(content)
    );
}

/// The estimated width of `content` set in `font`.
pub(super) fn width(content: &str, font: &Font) -> u64 {
    content.chars().count() as u64 * font.size * 62 / 100
}

/// Escapes text for XML content and attribute values.
pub(super) fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for ch in text.chars() {
        match ch {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            _ => out.push(ch),
        }
    }
    out
}
