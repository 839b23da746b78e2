//! Pictures read back with an XML parser and checked against the layout definitions.
//!
//! Every picture is parsed with `roxmltree`, so a picture that is not well-formed XML fails;
//! its cells are then found by their `class` and `data-*` attributes. Where a test needs the
//! offset of a coordinate or where padding lies, it computes them from the R-Tile formula of
//! the layout docs (tiles one after another in row-major grid order, `T` elements each,
//! `cols` innermost in a tile), not from the library.

use std::collections::{BTreeMap, BTreeSet};

use roxmltree::{Document, Node};

use super::style::NEUTRAL;
use super::text::escape;
use super::*;
use crate::layout::{LayoutSpec, Order};
use crate::print::MAX_CELLS;
use crate::print::test_layouts::{TILE, rtile, transposed};

/// Parses `svg`, failing the test with the parser's message when it is not well formed.
fn parse(svg: &str) -> Document<'_> {
    Document::parse(svg).unwrap_or_else(|err| panic!("not well-formed XML: {err}\n{svg}"))
}

/// The `<g>` elements of class `class` (`cell` in the logical panel, `slot` in the physical
/// one), in document order.
fn groups<'d, 'i>(doc: &'d Document<'i>, class: &str) -> Vec<Node<'d, 'i>> {
    doc.descendants()
        .filter(|n| n.has_tag_name("g") && n.attribute("class") == Some(class))
        .collect()
}

/// The value of attribute `name` of `node`, which must have it.
fn attr<'d>(node: Node<'d, '_>, name: &str) -> &'d str {
    node.attribute(name)
        .unwrap_or_else(|| panic!("<{}> has no {name}", node.tag_name().name()))
}

/// The first child element of `node` called `tag`.
fn child<'d, 'i>(node: Node<'d, 'i>, tag: &str) -> Node<'d, 'i> {
    node.children()
        .find(|n| n.has_tag_name(tag))
        .unwrap_or_else(|| panic!("no <{tag}> in <{}>", node.tag_name().name()))
}

/// The fill of a cell's rectangle.
fn fill<'d>(cell: Node<'d, '_>) -> &'d str {
    attr(child(cell, "rect"), "fill")
}

/// The text a cell shows.
fn label<'d>(cell: Node<'d, '_>) -> &'d str {
    child(cell, "text").text().unwrap_or("")
}

/// A coordinate written `a,b`.
fn coords(text: &str) -> Vec<u64> {
    text.split(',').map(|n| n.parse().unwrap()).collect()
}

/// Offset → fill of every logical cell.
fn fills(doc: &Document<'_>) -> BTreeMap<u64, String> {
    groups(doc, "cell")
        .into_iter()
        .map(|g| (attr(g, "data-offset").parse().unwrap(), fill(g).to_owned()))
        .collect()
}

/// The offset of `(r, c)` in [`rtile`]`(_, cols)`, by the formula of the layout docs.
fn rtile_offset(r: u64, c: u64, cols: u64) -> u64 {
    let grid_cols = cols.div_ceil(TILE);
    let tile = (r / TILE) * grid_cols + c / TILE;
    tile * TILE * TILE + (r % TILE) * TILE + c % TILE
}

#[test]
fn escape_covers_the_xml_specials() {
    assert_eq!(
        escape(r#"<a & 'b' "c">"#),
        "&lt;a &amp; &apos;b&apos; &quot;c&quot;&gt;"
    );
    assert_eq!(escape("axis 1 →"), "axis 1 →");
    let nasty = r#"</t><x a="1">&amp; 'q'"#;
    let doc = format!(r#"<t v="{}">{}</t>"#, escape(nasty), escape(nasty));
    let doc = parse(&doc);
    let root = doc.root_element();
    assert_eq!(root.text(), Some(nasty), "text round-trips");
    assert_eq!(root.attribute("v"), Some(nasty), "attributes round-trip");
}

#[test]
fn padded_picture_has_a_cell_per_coordinate_and_hatches_the_padding() {
    // 6 × 10 in 4 × 4 tiles: padded to 8 × 12, so 96 elements of which 36 are padding.
    let (rows, cols) = (6, 10);
    let (padded_rows, padded_cols) = (8, 12);
    let x = rtile(rows as u32, cols as u32);
    let view = x.view().bind(&[]).unwrap();
    let picture = svg(&view, Some(TileShading::of(&x))).unwrap();
    let doc = parse(&picture);

    let root = doc.root_element();
    assert!(root.has_tag_name(("http://www.w3.org/2000/svg", "svg")));
    let (w, h) = (attr(root, "width"), attr(root, "height"));
    assert_eq!(attr(root, "viewBox"), format!("0 0 {w} {h}"));
    assert_eq!(
        child(root, "title").text(),
        Some("view `x`: shape [6, 10] over a buffer of 96 elements")
    );

    // Logical panel: one cell per coordinate, showing the offset the formula gives.
    let cells = groups(&doc, "cell");
    assert_eq!(cells.len() as u64, rows * cols);
    let mut seen = BTreeSet::new();
    for g in &cells {
        let c = coords(attr(*g, "data-coord"));
        assert!(seen.insert(c.clone()), "{c:?} drawn twice");
        let offset = rtile_offset(c[0], c[1], cols);
        assert_eq!(attr(*g, "data-offset"), offset.to_string(), "cell {c:?}");
        assert_eq!(label(*g), offset.to_string(), "cell {c:?} shows its offset");
    }

    // Physical panel: every offset of the padded buffer in order; what lives at each one is
    // the padded coordinate the formula sends there, padding when outside 6 × 10.
    let mut at_offset = BTreeMap::new();
    for r in 0..padded_rows {
        for c in 0..padded_cols {
            at_offset.insert(rtile_offset(r, c, cols), (r, c));
        }
    }
    let slots = groups(&doc, "slot");
    assert_eq!(slots.len() as u64, padded_rows * padded_cols);
    let mut pads = 0;
    for (k, g) in (0u64..).zip(&slots) {
        assert_eq!(attr(*g, "data-offset"), k.to_string(), "physical order");
        let (r, c) = at_offset[&k];
        if r < rows && c < cols {
            assert_eq!(attr(*g, "data-kind"), "read", "offset {k}");
            assert_eq!(label(*g), format!("{r},{c}"), "offset {k}");
        } else {
            pads += 1;
            assert_eq!(attr(*g, "data-kind"), "pad", "offset {k}");
            assert_eq!(fill(*g), "url(#fbl-hatch)", "offset {k}");
            assert_eq!(label(*g), "pad", "offset {k}");
        }
    }
    assert_eq!(pads, padded_rows * padded_cols - rows * cols);
    assert!(
        doc.descendants()
            .any(|n| n.has_tag_name("pattern") && n.attribute("id") == Some("fbl-hatch")),
        "the hatch pattern is defined"
    );
    assert!(
        doc.descendants()
            .any(|n| n.text() == Some("padding: no element lives here")),
        "the legend explains the padding"
    );
    assert!(
        doc.descendants()
            .any(|n| n.has_tag_name("path") && n.attribute("class") == Some("tile-edges"))
    );
}

#[test]
fn transposed_picture_has_the_same_colour_at_every_offset() {
    let x = rtile(6, 8);
    let base = svg(&x.view().bind(&[]).unwrap(), Some(TileShading::of(&x))).unwrap();
    let xt = transposed(&x).bind(&[]).unwrap();
    let flipped = svg(&xt, Some(TileShading::of(&x))).unwrap();
    let (base, flipped) = (parse(&base), parse(&flipped));
    let (a, b) = (fills(&base), fills(&flipped));
    assert_eq!(a.len(), 48);
    assert_eq!(a, b, "a transpose reads the same tiles");
    // Colours follow tiles: equal within a tile, different across the 4 tiles.
    let tile = TILE * TILE;
    for (&p, fp) in &a {
        for (&q, fq) in &a {
            assert_eq!(p / tile == q / tile, fp == fq, "offsets {p} and {q}");
        }
    }
    assert_eq!(a.values().collect::<BTreeSet<_>>().len(), 4);
    // The physical panel is the same buffer, coordinates swapped.
    let slots = |doc: &Document<'_>| -> Vec<(String, String, String)> {
        groups(doc, "slot")
            .into_iter()
            .map(|g| {
                let owned = |s: &str| s.to_owned();
                (owned(attr(g, "data-kind")), owned(fill(g)), owned(label(g)))
            })
            .collect()
    };
    let (p, q) = (slots(&base), slots(&flipped));
    assert_eq!(p.len(), 64);
    for ((kind_p, fill_p, label_p), (kind_q, fill_q, label_q)) in p.iter().zip(&q) {
        assert_eq!((kind_p, fill_p), (kind_q, fill_q));
        let swapped: Vec<&str> = label_p.split(',').rev().collect();
        assert_eq!(label_q, &swapped.join(","));
    }
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
    let doc = parse(&picture);
    assert!(picture.contains("fill = contiguous run of 3 elements (offset / 3)"));
    // Column-major: column c holds offsets 3c..3c+3, one run, so colours follow the columns.
    let mut by_column: BTreeMap<u64, BTreeSet<&str>> = BTreeMap::new();
    for g in groups(&doc, "cell") {
        let c = coords(attr(g, "data-coord"));
        assert_eq!(attr(g, "data-offset"), (c[1] * 3 + c[0]).to_string());
        by_column.entry(c[1]).or_default().insert(fill(g));
    }
    assert_eq!(by_column.len(), 4);
    assert!(by_column.values().all(|f| f.len() == 1), "{by_column:?}");
    let colours: BTreeSet<_> = by_column.values().flatten().collect();
    assert_eq!(colours.len(), 4, "each run its own colour");
    let slot_rows: BTreeSet<&str> = groups(&doc, "slot")
        .into_iter()
        .map(|g| attr(child(g, "rect"), "y"))
        .collect();
    assert_eq!(
        slot_rows.len(),
        4,
        "the physical panel draws one run per row"
    );
}

#[test]
fn rank1_is_one_row_and_unshaded_cells_are_neutral() {
    let v = LayoutSpec::new("v").axis("i", 6).build().unwrap();
    let sliced = v.view().slice("i", 2, 3).unwrap().bind(&[]).unwrap();
    let picture = svg(&sliced, None).unwrap();
    let doc = parse(&picture);
    let cells = groups(&doc, "cell");
    assert_eq!(cells.len(), 3);
    let ys: BTreeSet<&str> = cells.iter().map(|g| attr(child(*g, "rect"), "y")).collect();
    assert_eq!(ys.len(), 1, "one row");
    assert!(cells.iter().all(|g| fill(*g) == NEUTRAL));
    assert!(!picture.contains("tile-edges"));
    let kinds: Vec<&str> = groups(&doc, "slot")
        .into_iter()
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
