//! Products: repeating a layout according to another.
//!
//! `logical_product(A, B) = (A, complement(A, size(A)·cosize(B)) ∘ B)`. Mode 0 is the tile `A`;
//! mode 1 is `B` with each of its offsets replaced by a fresh, non-overlapping copy of `A` (the
//! complement of `A` is "the layout of the repetitions of `A`"). For compact `A` and injective
//! `B` the result is injective and its size is `size(A)·size(B)`.
//!
//! [`blocked_product`] and [`raked_product`] make that product rank-sensitive. Both layouts are
//! padded with `1:0` modes to the same rank, the logical product is taken, and mode `k` of the
//! result gathers mode `k` of the tile with mode `k` of the tiling, then is coalesced:
//!
//! * blocked: `(A_k, B_k)`, so a 2×5 tile laid out 3×4 times gives a 6×20 matrix made of
//!   contiguous 2×5 blocks;
//! * raked: `(B_k, A_k)`, so the copies of the tile are interleaved element by element (a
//!   cyclic distribution).

use super::coalesce::coalesce;
use super::complement::complement;
use super::composition::composition;
use super::error::AlgebraError;
use super::int_tuple::{Int, mul};
use super::layout::Layout;

/// `A ⊗ B`: the rank-2 layout `(A, complement(A, size(A)·cosize(B)) ∘ B)`.
pub fn logical_product(block: &Layout, tiler: &Layout) -> Result<Layout, AlgebraError> {
    let cotarget = mul(block.size_int(), tiler.cosize_int(), "a product's codomain")?;
    let repeats = complement(block, cotarget)?;
    Layout::from_modes([block.clone(), composition(&repeats, tiler)?])
}

/// The blocked product: mode `k` is `(block_k, tiler_k)`, coalesced, so each copy of `block`
/// stays a contiguous block and the copies are arranged as `tiler` says.
pub fn blocked_product(block: &Layout, tiler: &Layout) -> Result<Layout, AlgebraError> {
    zipped_product(block, tiler, false)
}

/// The raked product: mode `k` is `(tiler_k, block_k)`, coalesced, so the copies of `block` are
/// interleaved element by element.
pub fn raked_product(block: &Layout, tiler: &Layout) -> Result<Layout, AlgebraError> {
    zipped_product(block, tiler, true)
}

fn zipped_product(
    block: &Layout,
    tiler: &Layout,
    tiler_first: bool,
) -> Result<Layout, AlgebraError> {
    let rank = block.rank().max(tiler.rank());
    let product = logical_product(&pad(block, rank)?, &pad(tiler, rank)?)?;
    let (tiles, repeats) = (product.mode(0)?, product.mode(1)?);
    let mut modes = Vec::with_capacity(rank);
    for k in 0..rank {
        let (t, r) = (tiles.mode(k)?, repeats.mode(k)?);
        let pair = if tiler_first { [r, t] } else { [t, r] };
        modes.push(coalesce(&Layout::from_modes(pair)?));
    }
    match modes.len() {
        1 => Ok(modes.remove(0)),
        _ => Layout::from_modes(modes),
    }
}

/// `layout` with `1:0` modes appended up to `rank` modes.
fn pad(layout: &Layout, rank: usize) -> Result<Layout, AlgebraError> {
    if layout.rank() >= rank {
        return Ok(layout.clone());
    }
    let unit = Layout::leaf(Int::Static(1), Int::Static(0))?;
    let mut modes = layout.modes();
    modes.resize(rank, unit);
    Layout::from_modes(modes)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn l(s: &str) -> Layout {
        s.parse().unwrap()
    }

    #[test]
    fn one_dimensional_example_from_the_docs() {
        let r = logical_product(&l("(_2,_2):(_4,_1)"), &l("_6:_1")).unwrap();
        assert_eq!(format!("{r:#}"), "((_2,_2),(_2,_3)):((_4,_1),(_2,_8))");
        let r = logical_product(&l("(2,2):(4,1)"), &l("(4,2):(2,1)")).unwrap();
        assert_eq!(r.to_string(), "((2,2),(4,2)):((4,1),(8,2))");
        assert_eq!(r.size(), 32);
    }

    #[test]
    fn blocked_and_raked_two_dimensional_examples() {
        let (tile, grid) = (l("(_2,_5):(_5,_1)"), l("(_3,_4):(_1,_3)"));
        let blocked = blocked_product(&tile, &grid).unwrap();
        assert_eq!(format!("{blocked:#}"), "(_6,(_5,_4)):(_5,(_1,_30))");
        let raked = raked_product(&tile, &grid).unwrap();
        assert_eq!(
            format!("{raked:#}"),
            "((_3,_2),(_4,_5)):((_10,_5),(_30,_1))"
        );
        for i in 0..6 {
            for j in 0..20 {
                let c = |a: usize, b: usize| format!("({a},{b})").parse().unwrap();
                let expect_blocked = tile.call_coord(&c(i % 2, j % 5)).unwrap()
                    + 10 * grid.call_coord(&c(i / 2, j / 5)).unwrap();
                assert_eq!(blocked.call_coord(&c(i, j)).unwrap(), expect_blocked);
                let expect_raked = tile.call_coord(&c(i / 3, j / 4)).unwrap()
                    + 10 * grid.call_coord(&c(i % 3, j % 4)).unwrap();
                assert_eq!(raked.call_coord(&c(i, j)).unwrap(), expect_raked);
            }
        }
    }

    #[test]
    fn ranks_are_padded() {
        let r = blocked_product(&l("4:1"), &l("(2,3):(1,2)")).unwrap();
        assert_eq!(r.to_string(), "(8,3):(1,8)");
        let r = raked_product(&l("4:1"), &l("3:1")).unwrap();
        assert_eq!(r.to_string(), "(3,4):(4,1)");
    }
}
