//! The layouts the printers' tests draw.
//!
//! Small R-Tile activations in 4 × 4 tiles, reduced over `cols` forward and `rows` backward,
//! so that tiles, padding and the transpose all show on a few dozen cells.

use crate::layout::{LayoutSpec, TensorLayout, View};

/// The side of a tile of [`rtile`].
pub(super) const TILE: u64 = 4;

/// A `rows × cols` R-Tile tensor `x` in [`TILE`] × [`TILE`] tiles, each axis padded up to a
/// multiple of the tile; inside a tile `cols` is innermost.
pub(super) fn rtile(rows: u32, cols: u32) -> TensorLayout {
    LayoutSpec::new("x")
        .axis("rows", rows)
        .tile(TILE as u32, true)
        .axis("cols", cols)
        .tile(TILE as u32, true)
        .rtile()
        .reduce_forward(["cols"])
        .reduce_backward(["rows"])
        .build()
        .expect("a valid R-Tile layout")
}

/// The transposed view `xt` of `x`: `cols` first, then `rows`.
pub(super) fn transposed(x: &TensorLayout) -> View {
    x.view()
        .named("xt")
        .and_then(|v| v.transpose("rows", "cols"))
        .expect("`x` has axes `rows` and `cols`")
}
