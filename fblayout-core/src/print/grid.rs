//! Text tables of a view: offsets by coordinate, and coordinates by offset.
//!
//! [`grid()`] is the forward map, the table a reader checks first: rows are the first view
//! axis, columns the second, each cell the physical offset of that coordinate, with indices
//! along the top and the left and a title line giving the view's name, shape and buffer
//! length. A transposed R-Tile shows the same offsets as the original, mirrored; a padded one
//! shows gaps in the offsets where the padding sits.
//!
//! [`physical_map()`] is the inverse: the buffer in physical order, each offset labelled with
//! the view coordinate stored there (`r,c`), `pad` for padding, `·` for an element of the
//! tensor the view does not read, and `r,c+n` where a broadcast has `n` more coordinates read
//! the same element. For an R-Tile layout each row is one tile, so the table is the tile
//! sequence itself: a tile of a transposed view lists its coordinates column by column.
//!
//! Both refuse more than [`MAX_CELLS`](super::MAX_CELLS) cells.

use std::fmt::Write as _;

use super::PrintError;
use super::cells::{Logical, Physical};
use crate::layout::unravel::unravel;
use crate::layout::{BoundView, TensorLayout};

/// A table row: its label and its cells.
type Row = (String, Vec<String>);

/// The forward map of `view` as a text table of physical offsets.
///
/// Rows are the first view axis and columns the second; a rank-1 view prints one row, and a
/// view of rank 3 or more prints one 2-D table (its last two axes) per index of the leading
/// axes, each labelled `slice [i, :, :]`. The first line names the view, its shape, its
/// number of cells and the length of its buffer, padding included.
///
/// # Errors
/// [`PrintError::TooLarge`] when the view has more than [`MAX_CELLS`](super::MAX_CELLS)
/// cells, and [`PrintError::OutsideBuffer`] if the view maps outside its own buffer.
///
/// ```
/// use fblayout_core::layout::{LayoutSpec, Order};
/// use fblayout_core::print::grid;
///
/// let m = LayoutSpec::new("m").axis("rows", 2).axis("cols", 3).order(Order::ColMajor).build()?;
/// let text = grid(&m.bind(&[])?)?;
/// assert_eq!(
///     text,
///     "view `m`: shape [2, 3], 6 cells, buffer of 6 elements\n  \
///      | 0 1 2\n--+------\n0 | 0 2 4\n1 | 1 3 5\n"
/// );
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn grid(view: &BoundView) -> Result<String, PrintError> {
    let logical = Logical::new(view)?;
    let shape = view.shape();
    let rank = shape.len();
    let (rows, cols) = logical.panel();
    let lead = &shape[..rank.saturating_sub(2)];
    let mut out = format!(
        "view `{}`: shape {:?}, {} cells, buffer of {} elements\n",
        view.name(),
        shape,
        view.logical_len(),
        view.len()
    );
    let headers: Vec<String> = (0..cols).map(|c| c.to_string()).collect();
    let per_slice = (rows * cols) as usize;
    for (s, slice) in (0..).zip(logical.offsets.chunks(per_slice)) {
        if rank >= 3 {
            let mut index = vec![0u64; lead.len()];
            unravel(s, lead, &mut index);
            let index: Vec<String> = index
                .iter()
                .map(u64::to_string)
                .chain([":".into(), ":".into()])
                .collect();
            let _ = writeln!(out, "\nslice [{}]", index.join(", "));
        }
        let body: Vec<Row> = (0..)
            .zip(slice.chunks(cols as usize))
            .map(|(r, offsets)| {
                let label = if rank >= 2 {
                    r.to_string()
                } else {
                    String::new()
                };
                (label, offsets.iter().map(u64::to_string).collect())
            })
            .collect();
        table(&mut out, "", &headers, &body);
    }
    Ok(out)
}

/// The inverse map of `view`, which reads tensor `layout`: what each physical offset holds.
///
/// The buffer is printed in rows: one tile each for an R-Tile layout (or equal parts of a
/// tile wider than 32), one contiguous run of the innermost storage axis otherwise. Each row
/// starts with its first offset (and its tile); each cell shows the view coordinate stored
/// there as `a,b`, `pad` for padding, `·` for an element the view does not read, or `a,b+n`
/// when `n` more coordinates read the same element (a broadcast). The first line counts the
/// elements read and the padding.
///
/// # Errors
/// [`PrintError::TooLarge`] when the buffer has more than [`MAX_CELLS`](super::MAX_CELLS)
/// elements; [`PrintError::LayoutMismatch`] or [`PrintError::Bind`] when `view` visibly does
/// not read `layout` (other run-time extents, another buffer length, or reading its padding).
/// A [`BoundView`] does not name its tensor, so a view of another tensor with the same
/// buffer is caught only when it reads that padding.
///
/// ```
/// use fblayout_core::layout::LayoutSpec;
/// use fblayout_core::print::physical_map;
///
/// let v = LayoutSpec::new("v").axis("i", 3).tile(2, true).rtile().build()?;
/// let map = physical_map(&v.bind(&[])?, &v)?;
/// assert!(map.ends_with("0 (tile 0) |   0   1\n2 (tile 1) |   2 pad\n"), "{map}");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn physical_map(view: &BoundView, layout: &TensorLayout) -> Result<String, PrintError> {
    let logical = Logical::new(view)?;
    let physical = Physical::new(&logical, Some(layout))?;
    let mut out = format!(
        "view `{}` of tensor `{}`: buffer of {} elements, {} read by the view, {} padding; {}\n",
        view.name(),
        layout.name(),
        view.len(),
        physical.read(),
        physical.padding(),
        physical.rows_note()
    );
    let row = physical.row as usize;
    let headers: Vec<String> = (0..row).map(|c| format!("+{c}")).collect();
    let body: Vec<Row> = physical
        .slots
        .chunks(row)
        .enumerate()
        .map(|(r, chunk)| {
            let start = (r * row) as u64;
            let label = match physical.group_of(start) {
                Some(tile) if physical.tiled => format!("{start} (tile {tile})"),
                _ => start.to_string(),
            };
            (
                label,
                chunk.iter().map(|slot| slot.label(&logical)).collect(),
            )
        })
        .collect();
    table(&mut out, "offset", &headers, &body);
    Ok(out)
}

/// Appends a table: a header row, a rule, then one row per `(label, cells)`, every column
/// right-aligned to its widest entry. Short rows leave their last columns empty.
fn table(out: &mut String, corner: &str, headers: &[String], body: &[Row]) {
    let width = |s: &String| s.chars().count();
    let label_w = body
        .iter()
        .map(|(l, _)| width(l))
        .chain([corner.chars().count()])
        .max()
        .unwrap_or(0);
    let cell_w = body
        .iter()
        .flat_map(|(_, cells)| cells.iter().map(width))
        .chain(headers.iter().map(width))
        .max()
        .unwrap_or(0);
    let mut line = format!("{corner:>label_w$} |");
    for h in headers {
        let _ = write!(line, " {h:>cell_w$}");
    }
    out.push_str(line.trim_end());
    out.push('\n');
    let _ = writeln!(
        out,
        "{}+{}",
        "-".repeat(label_w + 1),
        "-".repeat(headers.len() * (cell_w + 1))
    );
    for (label, cells) in body {
        let mut line = format!("{label:>label_w$} |");
        for c in cells {
            let _ = write!(line, " {c:>cell_w$}");
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layout::{LayoutSpec, Order};
    use crate::print::MAX_CELLS;
    use crate::print::test_layouts::{rtile, transposed};

    /// Parses the tables of `text`: for each, its column headers and its `(label, cells)` rows.
    fn parse_tables(text: &str) -> Vec<(Vec<String>, Vec<Row>)> {
        let lines: Vec<&str> = text.lines().collect();
        let mut tables = Vec::new();
        let mut i = 0;
        while i < lines.len() {
            let is_rule = |l: &str| {
                !l.is_empty() && l.chars().all(|c| c == '-' || c == '+') && l.contains('+')
            };
            if i + 1 < lines.len() && is_rule(lines[i + 1]) {
                let split = |l: &str| {
                    let (label, rest) = l.split_once('|').expect("a table line has a `|`");
                    (
                        label.trim().to_owned(),
                        rest.split_whitespace()
                            .map(str::to_owned)
                            .collect::<Vec<_>>(),
                    )
                };
                let headers = split(lines[i]).1;
                let mut rows = Vec::new();
                i += 2;
                while i < lines.len() && lines[i].contains('|') {
                    rows.push(split(lines[i]));
                    i += 1;
                }
                tables.push((headers, rows));
            } else {
                i += 1;
            }
        }
        tables
    }

    #[test]
    fn rank2_grid_lists_every_offset_under_its_indices() {
        let x = rtile(6, 8);
        let view = x.view().bind(&[]).unwrap();
        let text = grid(&view).unwrap();
        assert_eq!(
            text.lines().next().unwrap(),
            "view `x`: shape [6, 8], 48 cells, buffer of 64 elements"
        );
        let tables = parse_tables(&text);
        assert_eq!(tables.len(), 1);
        let (headers, rows) = &tables[0];
        let expected: Vec<String> = (0..8).map(|c| c.to_string()).collect();
        assert_eq!(headers, &expected);
        assert_eq!(rows.len(), 6);
        for (r, (label, cells)) in rows.iter().enumerate() {
            assert_eq!(label, &r.to_string());
            assert_eq!(cells.len(), 8);
            for (c, cell) in cells.iter().enumerate() {
                let offset = view.offset(&[r as u64, c as u64]).unwrap();
                assert_eq!(cell, &offset.to_string(), "cell ({r}, {c})");
            }
        }
    }

    #[test]
    fn transposed_grid_is_the_mirror_of_the_original() {
        let x = rtile(6, 8);
        let base = parse_tables(&grid(&x.view().bind(&[]).unwrap()).unwrap())
            .remove(0)
            .1;
        let xt = transposed(&x);
        let text = grid(&xt.bind(&[]).unwrap()).unwrap();
        assert!(text.starts_with("view `xt`: shape [8, 6], 48 cells, buffer of 64 elements\n"));
        let flipped = parse_tables(&text).remove(0).1;
        assert_eq!(flipped.len(), 8);
        for (c, (_, cells)) in flipped.iter().enumerate() {
            for (r, cell) in cells.iter().enumerate() {
                assert_eq!(cell, &base[r].1[c]);
            }
        }
    }

    #[test]
    fn rank1_grid_is_one_row() {
        let v = LayoutSpec::new("v").axis("i", 5).build().unwrap();
        let view = v.view().slice("i", 1, 3).unwrap().bind(&[]).unwrap();
        let text = grid(&view).unwrap();
        let tables = parse_tables(&text);
        assert_eq!(tables.len(), 1);
        assert_eq!(
            tables[0].1,
            vec![(
                String::new(),
                vec!["1".to_owned(), "2".to_owned(), "3".to_owned()]
            )]
        );
        assert!(text.contains("shape [3], 3 cells, buffer of 5 elements"));
    }

    #[test]
    fn rank3_grid_prints_one_labelled_slice_per_leading_index() {
        let t = LayoutSpec::new("t")
            .axis("a", 3)
            .axis("b", 2)
            .axis("c", 4)
            .order(Order::ColMajor)
            .build()
            .unwrap();
        let view = t.view().bind(&[]).unwrap();
        let text = grid(&view).unwrap();
        for a in 0..3 {
            assert_eq!(
                text.matches(&format!("slice [{a}, :, :]")).count(),
                1,
                "{text}"
            );
        }
        let tables = parse_tables(&text);
        assert_eq!(tables.len(), 3);
        for (a, (headers, rows)) in tables.iter().enumerate() {
            assert_eq!(headers.len(), 4);
            assert_eq!(rows.len(), 2);
            for (b, (_, cells)) in rows.iter().enumerate() {
                for (c, cell) in cells.iter().enumerate() {
                    let offset = view.offset(&[a as u64, b as u64, c as u64]).unwrap();
                    assert_eq!(cell, &offset.to_string());
                }
            }
        }
    }

    #[test]
    fn physical_map_inverts_the_view_and_shows_the_padding() {
        let x = rtile(6, 8);
        let view = x.view().bind(&[]).unwrap();
        let text = physical_map(&view, &x).unwrap();
        assert!(
            text.lines()
                .next()
                .unwrap()
                .contains("buffer of 64 elements, 48 read by the view, 16 padding")
        );
        let (headers, rows) = parse_tables(&text).remove(0);
        assert_eq!(headers.len() as u64, x.tile_elems());
        assert_eq!(rows.len(), 4, "one row per tile");
        let mut pads = 0;
        for (r, (label, cells)) in rows.iter().enumerate() {
            assert_eq!(label, &format!("{} (tile {r})", r * 16));
            for (k, cell) in cells.iter().enumerate() {
                let offset = (r * 16 + k) as u64;
                if cell == "pad" {
                    pads += 1;
                    continue;
                }
                let coords: Vec<u64> = cell.split(',').map(|n| n.parse().unwrap()).collect();
                assert_eq!(
                    view.offset(&coords),
                    Some(offset),
                    "cell {cell} at offset {offset}"
                );
            }
        }
        assert_eq!(pads, view.len() - view.logical_len());
        // The padding is rows 6 and 7, which live in the second row of tiles (tiles 2 and 3).
        for (r, (_, cells)) in rows.iter().enumerate() {
            let row_pads = cells.iter().filter(|c| *c == "pad").count();
            assert_eq!(row_pads, if r >= 2 { 8 } else { 0 });
        }
    }

    #[test]
    fn transposed_physical_map_holds_the_same_elements_with_swapped_coordinates() {
        let x = rtile(6, 8);
        let base = parse_tables(&physical_map(&x.view().bind(&[]).unwrap(), &x).unwrap())
            .remove(0)
            .1;
        let xt = transposed(&x).bind(&[]).unwrap();
        let flipped = parse_tables(&physical_map(&xt, &x).unwrap()).remove(0).1;
        assert_eq!(base.len(), flipped.len());
        for ((_, a), (_, b)) in base.iter().zip(&flipped) {
            for (p, q) in a.iter().zip(b) {
                let swapped: Vec<&str> = p.split(',').rev().collect();
                assert_eq!(q, &swapped.join(","));
            }
        }
    }

    #[test]
    fn slices_and_broadcasts_are_marked() {
        let v = LayoutSpec::new("v").axis("i", 4).build().unwrap();
        let sliced = v.view().slice("i", 1, 2).unwrap().bind(&[]).unwrap();
        let text = physical_map(&sliced, &v).unwrap();
        let cells = parse_tables(&text).remove(0).1.remove(0).1;
        assert_eq!(cells, ["·", "0", "1", "·"]);
        assert!(text.contains("2 read by the view, 0 padding"));
        let wide = v.view().broadcast("b", 3, 0).unwrap().bind(&[]).unwrap();
        let cells = parse_tables(&physical_map(&wide, &v).unwrap())
            .remove(0)
            .1
            .remove(0)
            .1;
        assert_eq!(cells, ["0,0+2", "0,1+2", "0,2+2", "0,3+2"]);
    }

    #[test]
    fn dynamic_extents_are_bound_for_the_padding() {
        let x = LayoutSpec::new("x")
            .dyn_axis("tokens")
            .tile(4, true)
            .axis("hidden", 8)
            .rtile()
            .reduce_forward(["hidden"])
            .reduce_backward(["tokens"])
            .build()
            .unwrap();
        let view = x.bind(&[("tokens", 5)]).unwrap();
        let text = physical_map(&view, &x).unwrap();
        assert!(
            text.contains("buffer of 64 elements, 40 read by the view, 24 padding"),
            "{text}"
        );
    }

    #[test]
    fn a_view_of_another_tensor_is_refused() {
        let x = rtile(6, 8);
        // Same buffer length, but the dense view reads what is padding in `x`.
        let dense = LayoutSpec::new("y").axis("i", 64).build().unwrap();
        let err = physical_map(&dense.view().bind(&[]).unwrap(), &x).unwrap_err();
        assert!(matches!(err, PrintError::LayoutMismatch { .. }), "{err}");
        assert!(
            err.to_string().contains("which is padding in the tensor"),
            "{err}"
        );
        let short = LayoutSpec::new("y").axis("i", 10).build().unwrap();
        let err = physical_map(&x.view().bind(&[]).unwrap(), &short).unwrap_err();
        assert!(
            err.to_string().contains("holds 10 elements, the view's 64"),
            "{err}"
        );
    }

    #[test]
    fn too_large_views_are_refused() {
        let big = LayoutSpec::new("big")
            .axis("rows", 100)
            .axis("cols", 100)
            .build()
            .unwrap();
        let view = big.view().bind(&[]).unwrap();
        let err = grid(&view).unwrap_err();
        assert_eq!(
            err,
            PrintError::TooLarge {
                view: "big".into(),
                what: "logical cells",
                cells: 10_000,
                limit: MAX_CELLS
            }
        );
        assert!(matches!(
            physical_map(&view, &big),
            Err(PrintError::TooLarge { .. })
        ));
        // A window of it prints, though its buffer is still too large to map.
        let window = big
            .view()
            .slice("rows", 0, 4)
            .unwrap()
            .slice("cols", 0, 4)
            .unwrap()
            .bind(&[])
            .unwrap();
        assert!(grid(&window).is_ok());
        assert!(matches!(
            physical_map(&window, &big),
            Err(PrintError::TooLarge {
                what: "physical elements",
                cells: 10_000,
                ..
            })
        ));
    }
}
