//! The frame of a picture: the SVG document around the panels, its title and subtitle.
//!
//! The document is standalone SVG 1.1 with a `viewBox` as large as the picture, a `<title>`
//! for viewers and screen readers, the hatch pattern that marks padding, and a white
//! background.

use std::fmt::Write as _;

use super::geometry::{Geometry, SUBTITLE_Y, TITLE_Y};
use super::style::{HATCH_ID, MARGIN};
use super::text::{NOTE, TITLE, escape, text};

/// Opens the document and draws the title and subtitle.
pub(super) fn open(s: &mut String, at: &Geometry, title: &str, subtitle: &str) {
    let (width, height) = at.size;
    let _ = writeln!(s, r#"<?xml version="1.0" encoding="UTF-8"?>"#);
    let _ = writeln!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" version="1.1" width="{width}" height="{height}" viewBox="0 0 {width} {height}" font-family="DejaVu Sans Mono, Menlo, Consolas, monospace">"#
    );
    let _ = writeln!(s, "<title>{}</title>", escape(title));
    let _ = writeln!(
        s,
        r##"<defs><pattern id="{HATCH_ID}" width="8" height="8" patternUnits="userSpaceOnUse" patternTransform="rotate(45)"><rect width="8" height="8" fill="#dcdcdc"/><line x1="0" y1="0" x2="0" y2="8" stroke="#a8a8a8" stroke-width="3"/></pattern></defs>"##
    );
    let _ = writeln!(
        s,
        r##"<rect width="{width}" height="{height}" fill="#ffffff"/>"##
    );
    text(s, &TITLE, MARGIN, TITLE_Y, title);
    text(s, &NOTE, MARGIN, SUBTITLE_Y, subtitle);
}

/// Closes the document.
pub(super) fn close(s: &mut String) {
    s.push_str("</svg>\n");
}
