//! The named numbers of a declared tensor, the same on the host and in WGSL.
//!
//! A kernel written against a declaration should never spell a number the declaration already
//! holds (`const HIDDEN: u32 = 64u`, `r * 4u`). For tensor `x` with an axis `hidden` of static
//! extent 768 in tiles of 4, the declaration therefore names
//!
//! - each **static extent** ([`AxisConstKind::Extent`]): `X::HIDDEN_EXTENT: usize = 768` in
//!   Rust and `const X_HIDDEN_EXTENT: u32 = 768u;` in the tensor's WGSL. A run-time extent has
//!   no constant: it travels in the **extents struct** `x_extents`
//!   ([`extents_struct_name`]), one `u32` `<axis>_len` per run-time axis, in axis order, as
//!   [`TensorLayout::extents_struct`] writes it;
//! - each axis's **tile** ([`AxisConstKind::Tile`]): `X::HIDDEN_TILE` and `X_HIDDEN_TILE`, 1
//!   when the axis is not tiled, so that code stepping through tiles reads the same for every
//!   layout;
//! - the elements of one tile, `X::TILE_ELEMS` (a [`Tensor`](super::Tensor) constant) and, for
//!   R-Tile layouts, `X_TILE_ELEMS`
//!   ([`TensorDescriptor::tile_elems_const`](super::TensorDescriptor::tile_elems_const)).
//!
//! [`axis_consts`] lists the per-axis constants; the derive writes the Rust ones and
//! [`TensorDescriptor`](super::TensorDescriptor) the WGSL ones from that one list. The Rust
//! names can't clash with the derive's other associated items (none of `LEN`, `TILE_ELEMS`,
//! `WGSL`, `NAME`, `AXES`, `RANK`, `OFFSET_FN` or `IN_BOUNDS_FN` ends in `_EXTENT` or `_TILE`),
//! nor an extent with a tile; they clash only when two axis names differ in case alone
//! (`seq`, `Seq`), which [`TensorDescriptor::declare`](super::TensorDescriptor::declare)
//! refuses ([`DeclareError::ConstName`](super::DeclareError::ConstName)).
//!
//! ```
//! use fblayout_core::layout::LayoutSpec;
//! use fblayout_core::__private::{AxisConstKind, axis_consts};
//!
//! let x = LayoutSpec::new("x").dyn_axis("tokens").axis("hidden", 768).rtile().reduce_forward(["hidden"]).build()?;
//! let consts = axis_consts(&x);
//! let names: Vec<String> = consts.iter().map(|c| c.rust_name()).collect();
//! assert_eq!(names, ["HIDDEN_EXTENT", "TOKENS_TILE", "HIDDEN_TILE"]);
//! assert_eq!(consts[0].wgsl_name("x"), "X_HIDDEN_EXTENT");
//! assert_eq!((consts[0].kind, consts[0].value), (AxisConstKind::Extent, 768));
//! assert_eq!(consts[1].value, 1); // `tokens` is not tiled
//! # Ok::<(), fblayout_core::layout::LayoutErrors>(())
//! ```
//!
//! [`TensorLayout::extents_struct`]: crate::layout::TensorLayout::extents_struct

use crate::layout::{Extent, TensorLayout};

/// What an axis constant holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AxisConstKind {
    /// The axis's static extent.
    Extent,
    /// The axis's tile (1 when it is not tiled).
    Tile,
}

impl AxisConstKind {
    /// The suffix of the constant's name.
    fn suffix(self) -> &'static str {
        match self {
            Self::Extent => "EXTENT",
            Self::Tile => "TILE",
        }
    }
}

/// One named constant of an axis (see the module docs).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct AxisConst {
    /// The axis.
    pub axis: String,
    /// What the constant holds.
    pub kind: AxisConstKind,
    /// Its value.
    pub value: u32,
}

impl AxisConst {
    /// The name of the associated constant the derive generates: `HIDDEN_EXTENT`.
    pub fn rust_name(&self) -> String {
        format!("{}_{}", self.axis.to_ascii_uppercase(), self.kind.suffix())
    }

    /// The name of the WGSL constant in the WGSL of tensor `tensor`: `X_HIDDEN_EXTENT`.
    pub fn wgsl_name(&self, tensor: &str) -> String {
        format!("{}_{}", tensor.to_ascii_uppercase(), self.rust_name())
    }
}

/// The constants of `layout`'s axes: each static extent, in axis order, then each tile.
pub fn axis_consts(layout: &TensorLayout) -> Vec<AxisConst> {
    let extents = layout.axes().iter().filter_map(|a| match a.extent {
        Extent::Static(n) => Some(AxisConst {
            axis: a.name.clone(),
            kind: AxisConstKind::Extent,
            value: n,
        }),
        Extent::Dynamic => None,
    });
    let tiles = layout.axes().iter().map(|a| AxisConst {
        axis: a.name.clone(),
        kind: AxisConstKind::Tile,
        value: a.tile,
    });
    extents.chain(tiles).collect()
}

/// The first two constants of `layout` that share a name, if any (axes whose names differ
/// only in case).
pub(crate) fn const_clash(layout: &TensorLayout) -> Option<(AxisConst, AxisConst)> {
    let consts = axis_consts(layout);
    consts.iter().enumerate().find_map(|(i, later)| {
        consts[..i]
            .iter()
            .find(|earlier| earlier.rust_name() == later.rust_name())
            .map(|earlier| (earlier.clone(), later.clone()))
    })
}

/// The name of the WGSL struct that carries the run-time extents of tensor (or kernel operand)
/// `name`: `<name>_extents`.
pub fn extents_struct_name(name: &str) -> String {
    format!("{name}_extents")
}

/// The name of the WGSL constant holding the elements of one tile of tensor `tensor`:
/// `<NAME>_TILE_ELEMS` (declared for R-Tile layouts).
pub(crate) fn tile_elems_name(tensor: &str) -> String {
    format!("{}_TILE_ELEMS", tensor.to_ascii_uppercase())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layout::LayoutSpec;

    #[test]
    fn names_differing_in_case_clash() {
        let x = LayoutSpec::new("x")
            .axis("seq", 4)
            .axis("Seq", 8)
            .build()
            .unwrap();
        let (a, b) = const_clash(&x).expect("SEQ_EXTENT twice");
        assert_eq!((a.axis.as_str(), b.axis.as_str()), ("seq", "Seq"));
        assert_eq!(b.rust_name(), "SEQ_EXTENT");
        let y = LayoutSpec::new("y")
            .axis("seq", 4)
            .axis("seq_tile", 8)
            .build()
            .unwrap();
        assert_eq!(const_clash(&y), None);
    }

    #[test]
    fn run_time_axes_have_only_a_tile() {
        let x = LayoutSpec::new("x").dyn_axis("batch").build().unwrap();
        let consts = axis_consts(&x);
        assert_eq!(consts.len(), 1);
        assert_eq!((consts[0].kind, consts[0].value), (AxisConstKind::Tile, 1));
        assert_eq!(extents_struct_name("x"), "x_extents");
        assert_eq!(tile_elems_name("x"), "X_TILE_ELEMS");
    }
}
