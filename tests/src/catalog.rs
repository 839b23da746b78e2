//! The canonical layouts: a fixed set that tests, snapshots and benchmarks share.
//!
//! Each entry is a [`View`] (a tensor itself is its identity view) with a short description.
//! They cover the shapes fine-tuning needs: plain row- and column-major matrices, R-Tile with
//! 4×4 and 8×8 tiles, the transposed view of each, the `[batch, seq, heads, head_dim]`
//! attention tensor with the permuted and key-transposed views attention reads, and an R-Tile
//! whose extents the tile does not divide.

use fblayout_core::layout::{LayoutErrors, LayoutSpec, Order, TensorLayout, View};

/// One canonical view.
#[derive(Debug, Clone)]
pub struct CanonicalView {
    /// What it is.
    pub description: &'static str,
    /// The view (emitted functions are named after it).
    pub view: View,
    /// Run-time extents to bind for tests (`(axis, extent)`).
    pub bind: Vec<(&'static str, u32)>,
}

/// A `rows × cols` matrix in `order`. With a tile, it is tiled `tile × tile` and reduced over
/// `cols` forward and `rows` backward (as activations and weights are).
pub fn matrix(name: &str, order: Order, tile: Option<u32>, rows: u32, cols: u32) -> LayoutSpec {
    let spec = LayoutSpec::new(name)
        .axis("rows", rows)
        .axis("cols", cols)
        .order(order);
    match tile {
        Some(t) => {
            let mut spec = spec.reduce_forward(["cols"]).reduce_backward(["rows"]);
            for axis in &mut spec.axes {
                axis.tile = Some(t);
            }
            spec
        }
        None => spec,
    }
}

fn entry(description: &'static str, view: View) -> CanonicalView {
    CanonicalView {
        description,
        view,
        bind: Vec::new(),
    }
}

/// A 6×10 R-Tile in 4×4 tiles, padded to 8×12 (forward reduces `cols`, backward `rows`): the
/// smallest layout with padding along both axes.
pub fn padded_rtile(name: &str) -> Result<TensorLayout, LayoutErrors> {
    LayoutSpec::new(name)
        .axis("rows", 6)
        .tile(4, true)
        .axis("cols", 10)
        .tile(4, true)
        .rtile()
        .reduce_forward(["cols"])
        .reduce_backward(["rows"])
        .build()
}

/// The canonical views, in a fixed order.
pub fn canonical_views() -> Result<Vec<CanonicalView>, LayoutErrors> {
    let mut out = Vec::new();
    let matrices = [
        (
            "rowmajor",
            Order::RowMajor,
            None,
            "16×32 row-major",
            "its transpose",
        ),
        (
            "colmajor",
            Order::ColMajor,
            None,
            "16×32 column-major",
            "its transpose",
        ),
        (
            "rtile4",
            Order::RTile,
            Some(4),
            "16×32 R-Tile, 4×4 tiles",
            "its transpose",
        ),
        (
            "rtile8",
            Order::RTile,
            Some(8),
            "16×32 R-Tile, 8×8 tiles",
            "its transpose",
        ),
    ];
    for (name, order, tile, what, what_t) in matrices {
        let layout = matrix(name, order, tile, 16, 32).build()?;
        out.push(entry(what, layout.view()));
        let t = layout
            .view()
            .named(format!("{name}_t"))?
            .transpose("rows", "cols")?;
        out.push(entry(what_t, t));
    }
    let attn = LayoutSpec::new("attn")
        .dyn_axis("batch")
        .dyn_axis("seq")
        .axis("heads", 12)
        .axis("head_dim", 64)
        .build()?;
    let bind = vec![("batch", 2), ("seq", 5)];
    out.push(CanonicalView {
        description: "attention [batch, seq, heads, head_dim], run-time batch and seq",
        view: attn.view(),
        bind: bind.clone(),
    });
    out.push(CanonicalView {
        description: "attention permuted to [batch, heads, seq, head_dim]",
        view: attn
            .view()
            .named("attn_bhsd")?
            .permute(&["batch", "heads", "seq", "head_dim"])?,
        bind: bind.clone(),
    });
    out.push(CanonicalView {
        description: "keys transposed to [batch, heads, head_dim, seq] for Q·Kᵀ",
        view: attn
            .view()
            .named("attn_kt")?
            .permute(&["batch", "heads", "head_dim", "seq"])?,
        bind,
    });
    let padded = padded_rtile("padded")?;
    out.push(entry(
        "6×10 R-Tile, 4×4 tiles, padded to 8×12",
        padded.view(),
    ));
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn canonical_views_build_and_bind() {
        let views = canonical_views().unwrap();
        assert_eq!(views.len(), 12);
        for c in &views {
            let bound = c.view.bind(&c.bind).unwrap();
            assert!(bound.len() >= bound.logical_len(), "{}", c.view.name());
        }
        let padded = views.last().unwrap().view.bind(&[]).unwrap();
        assert_eq!((padded.logical_len(), padded.len()), (60, 96));
    }
}
