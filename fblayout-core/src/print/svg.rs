//! SVG pictures of a view: the logical grid above, the physical buffer below.
//!
//! [`svg()`] draws a rank-1 or rank-2 [`BoundView`] as two panels, in the spirit of CuTe's
//! `print_latex`:
//!
//! - **logical view**: one cell per coordinate (rows are the first view axis, columns the
//!   second), each showing its physical offset, with the indices along the top and the left;
//! - **physical order**: the buffer as rows of cells in offset order (one tile per row for
//!   R-Tile), each labelled with the view coordinate stored there; padding is hatched grey
//!   and labelled `pad`, elements the view does not read are pale grey and labelled `·`.
//!
//! Given a [`TileShading`] (the tensor the view reads), every cell in both panels is filled
//! with the colour of its physical tile, `offset / tile_elems`, from a fixed golden-angle
//! palette, and a dark outline follows the tile edges. The colour depends on the offset alone,
//! so the picture of a transposed R-Tile view has exactly the colours of the original at the
//! same offsets: the tiles reappear, mirrored, and the physical panel shows the same tiles in
//! the same place, only the coordinates inside them swapped. That is the no-copy transpose,
//! visible. For a layout without tiles the colour groups are contiguous runs of the innermost
//! storage axis instead. Without shading the cells are a neutral blue and padding cannot be
//! told apart from skipped elements.
//!
//! The output is a standalone SVG 1.1 document (valid XML, every text escaped) with a
//! `viewBox`, sized to its content; each cell is a `<g>` carrying `data-coord` and
//! `data-offset` so the pictures can be checked by machine as well as by eye.

use std::fmt::Write as _;

use super::PrintError;
use super::cells::{Logical, Physical, Slot};
use super::palette::tile_colour;
use crate::layout::{BoundView, TensorLayout};

/// Colour the cells of a picture by the physical tiles of a tensor.
///
/// It carries the tensor the view reads: its tile size sets the colour groups and the width
/// of the physical rows, and binding it tells padding apart from elements the view skips.
/// Use the same tensor for a view and its transpose to get matching colours.
#[derive(Debug, Clone, Copy)]
pub struct TileShading<'a> {
    layout: &'a TensorLayout,
}

impl<'a> TileShading<'a> {
    /// Shading by the tiles of `layout`, the tensor the pictured view reads.
    pub fn of(layout: &'a TensorLayout) -> Self {
        Self { layout }
    }

    /// The tensor whose tiles colour the picture.
    pub fn layout(self) -> &'a TensorLayout {
        self.layout
    }

    /// The elements in one tile (1 for a layout without tiles).
    pub fn tile_elems(self) -> u64 {
        self.layout.tile_elems()
    }
}

/// The outer margin, in pixels.
const MARGIN: u64 = 16;
/// Cell height.
const CELL_H: u64 = 24;
/// The narrowest cell.
const MIN_CELL_W: u64 = 34;
/// Room left of the grids for row labels.
const LABEL_W: u64 = 64;
/// Font size of cell text.
const CELL_FONT: u64 = 11;
/// Fill of cells when no shading is asked for.
const NEUTRAL: &str = "#dde6f3";
/// Fill of elements the view does not read.
const UNREAD: &str = "#f2f2f2";
/// Dark text.
const INK: &str = "#1a1a1a";
/// Muted text (indices, labels of padding).
const MUTED: &str = "#5a5a5a";
/// The id of the hatch pattern for padding.
const HATCH: &str = "fbl-hatch";

/// An SVG picture of the rank-1 or rank-2 `view`: its logical grid of offsets above, its
/// physical buffer in order below (see the module docs).
///
/// With `tiles`, cells are coloured by the physical tile they live in and padding is marked;
/// pass the tensor the view reads, the same for a view and its transpose, so that their
/// pictures agree cell for cell. A rank-1 view is drawn as one row.
///
/// # Errors
/// [`PrintError::Rank`] for views of rank 3 or more; [`PrintError::TooLarge`] when either
/// panel would hold more than [`MAX_CELLS`](super::MAX_CELLS) cells;
/// [`PrintError::LayoutMismatch`] or [`PrintError::Bind`] when the shading's tensor visibly
/// is not the one the view reads.
///
/// ```
/// use fblayout_core::layout::LayoutSpec;
/// use fblayout_core::print::{TileShading, svg};
///
/// let x = LayoutSpec::new("x").axis("rows", 8).axis("cols", 8).rtile()
///     .reduce_forward(["cols"]).reduce_backward(["rows"]).build()?;
/// let xt = x.view().named("xt")?.transpose("rows", "cols")?.bind(&[])?;
/// let picture = svg(&xt, Some(TileShading::of(&x)))?;
/// assert!(picture.contains("<svg") && picture.contains("viewBox"));
/// assert_eq!(picture.matches("<g class=\"cell\"").count(), 64);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn svg(view: &BoundView, tiles: Option<TileShading<'_>>) -> Result<String, PrintError> {
    let shape = view.shape();
    if shape.len() > 2 {
        return Err(PrintError::Rank {
            view: view.name().to_owned(),
            rank: shape.len(),
            printer: "svg",
            accepted: "rank 1 and 2",
            hint: "merge or slice the leading axes, or print it as text with `grid`",
        });
    }
    let logical = Logical::new(view)?;
    let physical = Physical::new(&logical, tiles.map(TileShading::layout))?;
    Ok(Picture::new(&logical, &physical, tiles).draw())
}

/// The geometry and content of one picture.
struct Picture<'a> {
    logical: &'a Logical<'a>,
    physical: &'a Physical,
    shaded: bool,
    rank: usize,
    rows: u64,
    cols: u64,
    cell_w: u64,
    offset_labels: Vec<String>,
    slot_labels: Vec<String>,
    title: String,
    subtitle: String,
}

impl<'a> Picture<'a> {
    fn new(
        logical: &'a Logical<'a>,
        physical: &'a Physical,
        tiles: Option<TileShading<'_>>,
    ) -> Self {
        let view = logical.view;
        let shape = view.shape();
        let (rows, cols) = match shape {
            [] => (1, 1),
            [n] => (1, *n),
            [r, c, ..] => (*r, *c),
        };
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
            shape,
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
            rank: shape.len(),
            rows,
            cols,
            cell_w,
            offset_labels,
            slot_labels,
            title,
            subtitle,
        }
    }

    /// The fill of a cell holding `offset`.
    fn fill(&self, offset: u64) -> String {
        match self.physical.group_of(offset) {
            Some(group) if self.shaded => tile_colour(group),
            _ => NEUTRAL.to_owned(),
        }
    }

    fn draw(&self) -> String {
        let len = self.physical.slots.len() as u64;
        let prow = self.physical.row;
        let prows = len.div_ceil(prow);
        let gx = MARGIN + LABEL_W;
        // Vertical positions, top to bottom.
        let title_y = MARGIN + 16;
        let subtitle_y = title_y + 20;
        let logical_head_y = subtitle_y + 32;
        let axis_y = logical_head_y + 20;
        let index_y = axis_y + 18;
        let gy = index_y + 8;
        let physical_head_y = gy + self.rows * CELL_H + 36;
        let physical_index_y = physical_head_y + 20;
        let py = physical_index_y + 8;
        let pad = self.physical.padding() > 0;
        let unread = self.physical.slots.contains(&Slot::Unread);
        let legend_y = py + prows * CELL_H + 28;
        let height = if pad || unread {
            legend_y + 12 + MARGIN
        } else {
            py + prows * CELL_H + MARGIN
        };
        let text_w = |s: &str, size: u64| s.chars().count() as u64 * size * 62 / 100;
        let width = [
            gx + self.cols * self.cell_w,
            gx + prow * self.cell_w,
            MARGIN + text_w(&self.title, 16),
            MARGIN + text_w(&self.subtitle, 12),
            MARGIN + 420,
        ]
        .into_iter()
        .max()
        .unwrap_or(0)
            + MARGIN;

        let mut s = String::new();
        let _ = writeln!(s, r#"<?xml version="1.0" encoding="UTF-8"?>"#);
        let _ = writeln!(
            s,
            r#"<svg xmlns="http://www.w3.org/2000/svg" version="1.1" width="{width}" height="{height}" viewBox="0 0 {width} {height}" font-family="DejaVu Sans Mono, Menlo, Consolas, monospace">"#
        );
        let _ = writeln!(s, "<title>{}</title>", escape(&self.title));
        let _ = writeln!(
            s,
            r##"<defs><pattern id="{HATCH}" width="8" height="8" patternUnits="userSpaceOnUse" patternTransform="rotate(45)"><rect width="8" height="8" fill="#dcdcdc"/><line x1="0" y1="0" x2="0" y2="8" stroke="#a8a8a8" stroke-width="3"/></pattern></defs>"##
        );
        let _ = writeln!(
            s,
            r##"<rect width="{width}" height="{height}" fill="#ffffff"/>"##
        );
        text(&mut s, &TITLE, MARGIN, title_y, &self.title);
        text(&mut s, &NOTE, MARGIN, subtitle_y, &self.subtitle);

        // Logical panel.
        text(
            &mut s,
            &HEADING,
            MARGIN,
            logical_head_y,
            "logical view: the offset of each coordinate",
        );
        let names = self.logical.view.axis_names();
        let col_axis = names
            .get(usize::from(self.rank >= 2))
            .map_or_else(String::new, |n| format!("{n} →"));
        text(&mut s, &NOTE, gx, axis_y, &col_axis);
        if self.rank >= 2 {
            text(&mut s, &NOTE, MARGIN, index_y, &format!("{} ↓", names[0]));
            for r in 0..self.rows {
                let y = gy + r * CELL_H + CELL_H / 2 + 4;
                text(&mut s, &INDEX_END, gx - 8, y, &r.to_string());
            }
        }
        for c in 0..self.cols {
            let x = gx + c * self.cell_w + self.cell_w / 2;
            text(&mut s, &INDEX_MID, x, index_y, &c.to_string());
        }
        let _ = writeln!(s, r#"<g class="logical">"#);
        for (linear, &offset) in self.logical.offsets.iter().enumerate() {
            let (r, c) = (linear as u64 / self.cols, linear as u64 % self.cols);
            let (x, y) = (gx + c * self.cell_w, gy + r * CELL_H);
            let _ = write!(
                s,
                r#"<g class="cell" data-coord="{}" data-offset="{offset}">"#,
                escape(&self.logical.coord_label(linear))
            );
            self.cell(
                &mut s,
                x,
                y,
                &self.fill(offset),
                INK,
                &self.offset_labels[linear],
            );
            let _ = writeln!(s, "</g>");
        }
        let _ = writeln!(s, "</g>");
        let logical_group = |r: u64, c: u64| {
            self.physical
                .group_of(self.logical.offsets[(r * self.cols + c) as usize])
        };
        outline(&mut s, gx, gy, self.cell_w, self.rows, self.cols, |r, c| {
            (r < self.rows && c < self.cols)
                .then(|| logical_group(r, c))
                .flatten()
        });

        // Physical panel.
        let heading = format!(
            "physical order: {}; each cell shows the coordinate stored there",
            self.physical.rows_note()
        );
        text(&mut s, &HEADING, MARGIN, physical_head_y, &heading);
        text(&mut s, &INDEX_END, gx - 8, physical_index_y, "offset");
        for k in 0..prow {
            let x = gx + k * self.cell_w + self.cell_w / 2;
            text(&mut s, &INDEX_MID, x, physical_index_y, &format!("+{k}"));
        }
        for r in 0..prows {
            let y = py + r * CELL_H + CELL_H / 2 + 4;
            text(&mut s, &INDEX_END, gx - 8, y, &(r * prow).to_string());
        }
        let _ = writeln!(s, r#"<g class="physical">"#);
        for (offset, slot) in self.physical.slots.iter().enumerate() {
            let offset = offset as u64;
            let (x, y) = (
                gx + (offset % prow) * self.cell_w,
                py + (offset / prow) * CELL_H,
            );
            let (kind, fill, ink) = match slot {
                Slot::Read { .. } => ("read", self.fill(offset), INK),
                Slot::Pad => ("pad", format!("url(#{HATCH})"), MUTED),
                Slot::Unread => ("unread", UNREAD.to_owned(), MUTED),
            };
            let _ = write!(
                s,
                r#"<g class="slot" data-offset="{offset}" data-kind="{kind}">"#
            );
            self.cell(&mut s, x, y, &fill, ink, &self.slot_labels[offset as usize]);
            let _ = writeln!(s, "</g>");
        }
        let _ = writeln!(s, "</g>");
        outline(&mut s, gx, py, self.cell_w, prows, prow, |r, c| {
            let offset = r * prow + c;
            (c < prow && offset < len)
                .then(|| self.physical.group_of(offset))
                .flatten()
        });

        // Legend.
        let mut x = MARGIN;
        for (present, fill, label) in [
            (
                pad,
                format!("url(#{HATCH})"),
                "padding: no element lives here",
            ),
            (
                unread,
                UNREAD.to_owned(),
                "· an element this view does not read",
            ),
        ] {
            if present {
                let _ = writeln!(
                    s,
                    r##"<rect x="{x}" y="{}" width="18" height="14" fill="{fill}" stroke="#888888"/>"##,
                    legend_y - 11
                );
                text(&mut s, &NOTE, x + 24, legend_y, label);
                x += 24 + text_w(label, 12) + 24;
            }
        }
        s.push_str("</svg>\n");
        s
    }

    /// One cell: a rectangle with centred text.
    fn cell(&self, s: &mut String, x: u64, y: u64, fill: &str, ink: &str, label: &str) {
        let _ = write!(
            s,
            r##"<rect x="{x}" y="{y}" width="{}" height="{CELL_H}" fill="{}" stroke="#ffffff" stroke-width="1"/><text x="{}" y="{}" font-size="{CELL_FONT}" fill="{ink}" text-anchor="middle">{}</text>"##,
            self.cell_w,
            escape(fill),
            x + self.cell_w / 2,
            y + CELL_H / 2 + 4,
            escape(label)
        );
    }
}

/// How a piece of text is set.
struct Font {
    size: u64,
    fill: &'static str,
    anchor: &'static str,
    weight: &'static str,
}

/// The picture's title.
const TITLE: Font = Font {
    size: 16,
    fill: INK,
    anchor: "start",
    weight: "bold",
};
/// Panel headings.
const HEADING: Font = Font {
    size: 13,
    fill: INK,
    anchor: "start",
    weight: "bold",
};
/// The subtitle, axis names and the legend.
const NOTE: Font = Font {
    size: 12,
    fill: MUTED,
    anchor: "start",
    weight: "normal",
};
/// Row indices, right-aligned against the grid.
const INDEX_END: Font = Font {
    size: CELL_FONT,
    fill: MUTED,
    anchor: "end",
    weight: "normal",
};
/// Column indices, centred over their column.
const INDEX_MID: Font = Font {
    size: CELL_FONT,
    fill: MUTED,
    anchor: "middle",
    weight: "normal",
};

/// Appends a `<text>` element set in `font` at `(x, y)`.
fn text(s: &mut String, font: &Font, x: u64, y: u64, content: &str) {
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

/// Appends a path along every edge of a `rows × cols` grid at `(x0, y0)` where the group of
/// a cell differs from its neighbour's (outside the grid, or without a group, counts as no
/// group): the tile edges. Nothing when no cell has a group.
fn outline(
    s: &mut String,
    x0: u64,
    y0: u64,
    cell_w: u64,
    rows: u64,
    cols: u64,
    group: impl Fn(u64, u64) -> Option<u64>,
) {
    let mut d = String::new();
    for r in 0..rows {
        for c in 0..cols {
            let g = group(r, c);
            if g.is_none() {
                continue;
            }
            let (x, y) = (x0 + c * cell_w, y0 + r * CELL_H);
            if r == 0 || group(r - 1, c) != g {
                let _ = write!(d, "M{x} {y}h{cell_w}");
            }
            if group(r + 1, c) != g {
                let _ = write!(d, "M{x} {}h{cell_w}", y + CELL_H);
            }
            if c == 0 || group(r, c - 1) != g {
                let _ = write!(d, "M{x} {y}v{CELL_H}");
            }
            if group(r, c + 1) != g {
                let _ = write!(d, "M{} {y}v{CELL_H}", x + cell_w);
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

/// Escapes text for XML content and attribute values.
fn escape(text: &str) -> String {
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

#[cfg(test)]
mod tests {
    use std::collections::{BTreeMap, BTreeSet, HashSet};

    use super::*;
    use crate::layout::{LayoutSpec, Order};
    use crate::print::MAX_CELLS;

    /// Checks that `xml` is well formed: one root element, every tag closed in order,
    /// attributes quoted and unique, no raw `<` in text or values, `&` only in entities.
    /// Returns the number of elements.
    fn check_well_formed(xml: &str) -> Result<usize, String> {
        fn entities_ok(text: &str) -> Result<(), String> {
            let mut rest = text;
            while let Some(at) = rest.find('&') {
                let end = rest[at..]
                    .find(';')
                    .ok_or_else(|| format!("unterminated entity in {text:?}"))?;
                let name = &rest[at + 1..at + end];
                let numeric = name.strip_prefix('#').is_some_and(|n| {
                    n.strip_prefix('x').map_or(
                        !n.is_empty() && n.chars().all(|c| c.is_ascii_digit()),
                        |h| !h.is_empty() && h.chars().all(|c| c.is_ascii_hexdigit()),
                    )
                });
                if !numeric && !["amp", "lt", "gt", "quot", "apos"].contains(&name) {
                    return Err(format!("unknown entity &{name}; in {text:?}"));
                }
                rest = &rest[at + end + 1..];
            }
            Ok(())
        }
        let is_name = |n: &str| {
            !n.is_empty()
                && n.chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | ':' | '.'))
                && !n.starts_with(|c: char| c.is_ascii_digit() || c == '-')
        };
        let mut stack: Vec<&str> = Vec::new();
        let (mut roots, mut elements, mut i) = (0, 0, 0);
        while i < xml.len() {
            let rest = &xml[i..];
            if !rest.starts_with('<') {
                let end = rest.find('<').unwrap_or(rest.len());
                let content = &rest[..end];
                if content.contains('>') {
                    return Err(format!("raw `>` in text {content:?}"));
                }
                entities_ok(content)?;
                if stack.is_empty() && !content.trim().is_empty() {
                    return Err(format!("text outside the root: {content:?}"));
                }
                i += end;
                continue;
            }
            if let Some(body) = rest.strip_prefix("<?") {
                if i != 0 {
                    return Err("declaration not at the start".into());
                }
                i += 2 + body.find("?>").ok_or("unterminated declaration")? + 2;
                continue;
            }
            if let Some(body) = rest.strip_prefix("<!--") {
                i += 4 + body.find("-->").ok_or("unterminated comment")? + 3;
                continue;
            }
            if let Some(body) = rest.strip_prefix("</") {
                let end = body.find('>').ok_or("unterminated end tag")?;
                let name = body[..end].trim_end();
                match stack.pop() {
                    Some(open) if open == name => {}
                    other => return Err(format!("`</{name}>` closes {other:?}")),
                }
                i += 2 + end + 1;
                continue;
            }
            // A start tag: name, attributes, then `>` or `/>`.
            let body = &rest[1..];
            let name_end = body
                .find(|c: char| c.is_whitespace() || c == '>' || c == '/')
                .ok_or("unterminated tag")?;
            let name = &body[..name_end];
            if !is_name(name) {
                return Err(format!("bad element name {name:?}"));
            }
            if stack.is_empty() {
                roots += 1;
            }
            elements += 1;
            let mut j = name_end;
            let mut seen = HashSet::new();
            loop {
                let after = &body[j..];
                let trimmed = after.trim_start();
                j += after.len() - trimmed.len();
                if trimmed.starts_with("/>") {
                    j += 2;
                    break;
                }
                if trimmed.starts_with('>') {
                    j += 1;
                    stack.push(name);
                    break;
                }
                let eq = trimmed
                    .find('=')
                    .ok_or_else(|| format!("attribute without value in <{name}>"))?;
                let attr = &trimmed[..eq];
                if !is_name(attr) || !seen.insert(attr) {
                    return Err(format!("bad or repeated attribute {attr:?} in <{name}>"));
                }
                let value = trimmed[eq + 1..]
                    .strip_prefix('"')
                    .ok_or_else(|| format!("unquoted {attr} in <{name}>"))?;
                let close = value
                    .find('"')
                    .ok_or_else(|| format!("unterminated {attr} in <{name}>"))?;
                let value = &value[..close];
                if value.contains('<') {
                    return Err(format!("raw `<` in {attr}={value:?}"));
                }
                entities_ok(value)?;
                j += eq + 2 + close + 1;
                if !body[j..].starts_with(|c: char| c.is_whitespace() || c == '>' || c == '/') {
                    return Err(format!("attributes of <{name}> run together"));
                }
            }
            i += 1 + j;
        }
        if let Some(open) = stack.pop() {
            return Err(format!("<{open}> is never closed"));
        }
        if roots != 1 {
            return Err(format!("{roots} root elements"));
        }
        Ok(elements)
    }

    /// The value of attribute `name` in the first tag of `tag_text`.
    fn attr<'t>(tag_text: &'t str, name: &str) -> &'t str {
        let key = format!(" {name}=\"");
        let at = tag_text
            .find(&key)
            .unwrap_or_else(|| panic!("no {name} in {tag_text}"))
            + key.len();
        &tag_text[at..at + tag_text[at..].find('"').unwrap()]
    }

    /// The `<g class="…">` groups of class `class`, as text up to their `</g>`.
    fn groups<'t>(svg: &'t str, class: &str) -> Vec<&'t str> {
        let open = format!("<g class=\"{class}\"");
        svg.match_indices(&open)
            .map(|(at, _)| &svg[at..at + svg[at..].find("</g>").unwrap()])
            .collect()
    }

    /// Offset → fill of every logical cell.
    fn fills(svg: &str) -> BTreeMap<u64, String> {
        groups(svg, "cell")
            .into_iter()
            .map(|g| {
                let rect = &g[g.find("<rect").unwrap()..];
                (
                    attr(g, "data-offset").parse().unwrap(),
                    attr(rect, "fill").to_owned(),
                )
            })
            .collect()
    }

    fn rtile(rows: u32, cols: u32) -> TensorLayout {
        LayoutSpec::new("x")
            .axis("rows", rows)
            .tile(4, true)
            .axis("cols", cols)
            .tile(4, true)
            .rtile()
            .reduce_forward(["cols"])
            .reduce_backward(["rows"])
            .build()
            .unwrap()
    }

    #[test]
    fn the_checker_rejects_broken_xml() {
        assert_eq!(
            check_well_formed(r#"<?xml version="1.0"?><a x="1"><b/>t &amp; u</a>"#),
            Ok(2)
        );
        for bad in [
            "<a><b></a></b>",
            "<a>",
            "<a/><b/>",
            "<a x=1/>",
            r#"<a x="1" x="2"/>"#,
            "<a>x & y</a>",
            "<a>x < y</a>",
            r#"<a x="<"/>"#,
            "<a>&bogus;</a>",
            "text<a/>",
        ] {
            assert!(check_well_formed(bad).is_err(), "accepted {bad:?}");
        }
    }

    #[test]
    fn escape_covers_the_xml_specials() {
        assert_eq!(
            escape(r#"<a & 'b' "c">"#),
            "&lt;a &amp; &apos;b&apos; &quot;c&quot;&gt;"
        );
        assert_eq!(escape("axis 1 →"), "axis 1 →");
        assert!(check_well_formed(&format!("<t>{}</t>", escape("</t><x>&"))).is_ok());
    }

    #[test]
    fn padded_picture_is_well_formed_with_one_cell_per_coordinate_and_element() {
        let x = rtile(6, 10);
        let view = x.view().bind(&[]).unwrap();
        let picture = svg(&view, Some(TileShading::of(&x))).unwrap();
        let elements = check_well_formed(&picture).unwrap_or_else(|e| panic!("{e}\n{picture}"));
        assert!(elements > 200);
        let root = &picture[picture.find("<svg").unwrap()..];
        let (w, h) = (attr(root, "width"), attr(root, "height"));
        assert_eq!(attr(root, "viewBox"), format!("0 0 {w} {h}"));
        assert!(picture.contains(&format!(
            "<title>view `x`: shape [6, 10] over a buffer of {} elements",
            view.len()
        )));

        let cells = groups(&picture, "cell");
        assert_eq!(cells.len() as u64, view.logical_len());
        let coords: BTreeSet<&str> = cells.iter().map(|g| attr(g, "data-coord")).collect();
        assert_eq!(coords.len(), cells.len(), "one cell per coordinate");
        for g in &cells {
            let c: Vec<u64> = attr(g, "data-coord")
                .split(',')
                .map(|n| n.parse().unwrap())
                .collect();
            let offset = view.offset(&c).unwrap();
            assert_eq!(attr(g, "data-offset"), offset.to_string());
            assert!(
                g.contains(&format!(">{offset}</text>")),
                "the cell shows its offset"
            );
        }

        // 8 × 12 padded buffer: 96 elements, 36 of them padding, hatched and labelled.
        let slots = groups(&picture, "slot");
        assert_eq!(slots.len() as u64, view.len());
        let pads: Vec<&&str> = slots
            .iter()
            .filter(|g| attr(g, "data-kind") == "pad")
            .collect();
        assert_eq!(pads.len() as u64, view.len() - view.logical_len());
        for g in &pads {
            assert!(g.contains(r#"fill="url(#fbl-hatch)""#) && g.contains(">pad</text>"));
        }
        for (k, g) in slots.iter().enumerate() {
            assert_eq!(attr(g, "data-offset"), k.to_string(), "physical order");
            if attr(g, "data-kind") == "read" {
                let label = &g[g.rfind("\">").unwrap() + 2..g.rfind("</text>").unwrap()];
                let c: Vec<u64> = label.split(',').map(|n| n.parse().unwrap()).collect();
                assert_eq!(
                    view.offset(&c),
                    Some(k as u64),
                    "slot {k} is labelled by its coordinate"
                );
            }
        }
        assert!(picture.contains("padding: no element lives here"));
        assert!(picture.contains(r#"class="tile-edges""#));
    }

    #[test]
    fn transposed_picture_has_the_same_colour_at_every_offset() {
        let x = rtile(6, 8);
        let base = svg(&x.view().bind(&[]).unwrap(), Some(TileShading::of(&x))).unwrap();
        let xt = x
            .view()
            .named("xt")
            .unwrap()
            .transpose("rows", "cols")
            .unwrap()
            .bind(&[])
            .unwrap();
        let flipped = svg(&xt, Some(TileShading::of(&x))).unwrap();
        check_well_formed(&flipped).unwrap();
        let (a, b) = (fills(&base), fills(&flipped));
        assert_eq!(a.len(), 48);
        assert_eq!(a, b, "a transpose reads the same tiles");
        // Colours follow tiles: equal within a tile, different across the 4 tiles.
        let tile = x.tile_elems();
        for (&p, fp) in &a {
            for (&q, fq) in &a {
                assert_eq!(p / tile == q / tile, fp == fq, "offsets {p} and {q}");
            }
        }
        assert_eq!(a.values().collect::<BTreeSet<_>>().len(), 4);
        // The physical panel is the same buffer, coordinates swapped.
        let slots = |s: &str| -> Vec<(String, String)> {
            groups(s, "slot")
                .iter()
                .map(|g| {
                    (
                        attr(g, "data-kind").to_owned(),
                        attr(&g[g.find("<rect").unwrap()..], "fill").to_owned(),
                    )
                })
                .collect()
        };
        assert_eq!(slots(&base), slots(&flipped));
    }

    #[test]
    fn layouts_without_tiles_are_shaded_by_contiguous_runs() {
        let m = LayoutSpec::new("m")
            .axis("rows", 3)
            .axis("cols", 4)
            .order(Order::ColMajor)
            .build()
            .unwrap();
        let view = m.view().bind(&[]).unwrap();
        let picture = svg(&view, Some(TileShading::of(&m))).unwrap();
        check_well_formed(&picture).unwrap();
        assert!(picture.contains("fill = contiguous run of 3 elements (offset / 3)"));
        // Column-major: each column is one run of 3, so colours follow the columns.
        let by_offset = fills(&picture);
        for g in groups(&picture, "cell") {
            let c: Vec<u64> = attr(g, "data-coord")
                .split(',')
                .map(|n| n.parse().unwrap())
                .collect();
            let column_top = view.offset(&[0, c[1]]).unwrap();
            assert_eq!(
                by_offset[&attr(g, "data-offset").parse().unwrap()],
                by_offset[&column_top]
            );
        }
        assert_eq!(by_offset.values().collect::<BTreeSet<_>>().len(), 4);
        let slot_rows: BTreeSet<&str> = groups(&picture, "slot")
            .iter()
            .map(|g| attr(&g[g.find("<rect").unwrap()..], "y"))
            .collect();
        assert_eq!(
            slot_rows.len(),
            4,
            "the physical panel draws one run per row"
        );
    }

    #[test]
    fn pictures_are_deterministic() {
        let x = rtile(6, 10);
        let view = x.view().bind(&[]).unwrap();
        assert_eq!(
            svg(&view, Some(TileShading::of(&x))),
            svg(&view, Some(TileShading::of(&x)))
        );
    }

    #[test]
    fn rank1_is_one_row_and_unshaded_cells_are_neutral() {
        let v = LayoutSpec::new("v").axis("i", 6).build().unwrap();
        let sliced = v.view().slice("i", 2, 3).unwrap().bind(&[]).unwrap();
        let picture = svg(&sliced, None).unwrap();
        check_well_formed(&picture).unwrap();
        let cells = groups(&picture, "cell");
        assert_eq!(cells.len(), 3);
        let ys: BTreeSet<&str> = cells
            .iter()
            .map(|g| attr(&g[g.find("<rect").unwrap()..], "y"))
            .collect();
        assert_eq!(ys.len(), 1, "one row");
        assert!(fills(&picture).values().all(|f| f == NEUTRAL));
        assert!(!picture.contains("tile-edges"));
        let kinds: Vec<&str> = groups(&picture, "slot")
            .iter()
            .map(|g| attr(g, "data-kind"))
            .collect();
        assert_eq!(
            kinds,
            ["unread", "unread", "read", "read", "read", "unread"]
        );
    }

    #[test]
    fn rank3_and_too_large_views_are_refused() {
        let t = LayoutSpec::new("t")
            .axis("a", 2)
            .axis("b", 2)
            .axis("c", 2)
            .build()
            .unwrap();
        let err = svg(&t.bind(&[]).unwrap(), Some(TileShading::of(&t))).unwrap_err();
        assert!(matches!(err, PrintError::Rank { rank: 3, .. }), "{err}");
        let big = LayoutSpec::new("big")
            .axis("rows", 64)
            .axis("cols", 65)
            .build()
            .unwrap();
        let err = svg(&big.bind(&[]).unwrap(), None).unwrap_err();
        assert_eq!(
            err,
            PrintError::TooLarge {
                view: "big".into(),
                what: "logical cells",
                cells: 64 * 65,
                limit: MAX_CELLS
            }
        );
    }
}
