//! The R-Tile tile helpers, run on the GPU, agree with the layout docs.
//!
//! For every canonical R-Tile layout, `<name>_tile_offset` and `<name>_tile_in_bounds`
//! (`TensorLayout::tile_index_fn`, the functions `snapshots.rs` snapshots as
//! `<name>_tile.wgsl`) are evaluated on the GPU by the index probe at every coordinate of the
//! tile grid and two past it along each axis. The oracle is the module docs of the layout
//! core: an axis of extent `E` in tiles of `t` has `ceil(E / t)` tiles; tiles are stored one
//! after another in row-major grid order, each holding `Π t` elements, so the first element
//! of tile `g` is at `row_major(g, grid) · Π t`, and a grid coordinate past the grid is out of
//! bounds.
//!
//! The canonical layouts have static extents, so each is also rebuilt with every extent
//! known only at run time (same tiles and reductions) and bound to extents that leave
//! partial tiles, whole tiles and a single element, then to random ones. CI runs this on
//! Mesa's lavapipe; it fails, never skips, when no adapter is found.

use fblayout_core::layout::{Extent, LayoutSpec, TensorLayout};
use fblayout_tests::{canonical_tiled_layouts, coords_of, gpu_offsets};
use proptest::prelude::*;

/// How many tile coordinates past the grid each axis is probed at.
const PAST: u64 = 2;

/// `layout` with every extent a run-time one, its tiles and reductions kept.
fn runtime_twin(layout: &TensorLayout) -> TensorLayout {
    let mut spec = LayoutSpec::new(layout.name()).rtile();
    for axis in layout.axes() {
        spec = spec.dyn_axis(axis.name.clone()).tile(axis.tile, true);
    }
    spec.reduce_forward(layout.forward().to_vec())
        .reduce_backward(layout.backward().to_vec())
        .build()
        .unwrap_or_else(|err| panic!("the run-time twin of `{}`: {err}", layout.name()))
}

/// The first offset of the tile at grid coordinate `tile` of a tensor with `extents` in
/// tiles of `tiles`, or `None` when the grid has no such tile: the layout docs' formula.
fn oracle(tiles: &[u64], extents: &[u64], tile: &[u64]) -> Option<u64> {
    let grid: Vec<u64> = extents
        .iter()
        .zip(tiles)
        .map(|(e, t)| e.div_ceil(*t))
        .collect();
    if tile.iter().zip(&grid).any(|(g, n)| g >= n) {
        return None;
    }
    let index = tile.iter().zip(&grid).fold(0, |acc, (g, n)| acc * n + g);
    Some(index * tiles.iter().product::<u64>())
}

/// Checks the tile helpers of `layout` with its run-time axes bound to `runtime` (in axis
/// order), on the GPU, before and after simplification.
fn check(layout: &TensorLayout, runtime: &[u32]) {
    let mut values = runtime.iter();
    let extents: Vec<u64> = layout
        .axes()
        .iter()
        .map(|axis| match axis.extent {
            Extent::Static(n) => u64::from(n),
            Extent::Dynamic => u64::from(*values.next().expect("one value per run-time axis")),
        })
        .collect();
    let bindings: Vec<(&str, u32)> = layout
        .dynamic_axes()
        .map(|a| a.name.as_str())
        .zip(runtime.iter().copied())
        .collect();
    let bound = layout.bind(&bindings).unwrap();
    let tiles: Vec<u64> = layout.axes().iter().map(|a| u64::from(a.tile)).collect();
    let probed: Vec<u64> = extents
        .iter()
        .zip(&tiles)
        .map(|(e, t)| e.div_ceil(*t) + PAST)
        .collect();
    let in_grid: u64 = probed.iter().map(|n| n - PAST).product();
    let naive = layout.tile_index_fn();
    for f in [naive.simplified(), naive] {
        let gpu = gpu_offsets(&f, &probed, bound.extent_args());
        assert_eq!(gpu.len() as u64, probed.iter().product::<u64>());
        let mut inside = 0;
        for (tile, got) in coords_of(&probed).zip(&gpu) {
            let want = oracle(&tiles, &extents, &tile);
            assert_eq!(
                *got, want,
                "{} at tile {tile:?}, extents {extents:?}",
                f.name
            );
            inside += u64::from(want.is_some());
        }
        assert_eq!(
            inside, in_grid,
            "{}: every tile of the grid is in bounds",
            f.name
        );
    }
}

#[test]
fn canonical_tile_helpers_agree_with_the_docs_on_the_gpu() {
    let layouts = canonical_tiled_layouts();
    assert!(!layouts.is_empty(), "the catalog has R-Tile layouts");
    for layout in &layouts {
        check(layout, &[]);
    }
}

#[test]
fn run_time_extents_with_partial_tiles_agree_with_the_docs_on_the_gpu() {
    for layout in canonical_tiled_layouts() {
        let twin = runtime_twin(&layout);
        // Per axis: one element, one partial tile, one whole tile, whole tiles and a partial.
        let candidates: Vec<Vec<u32>> = twin
            .axes()
            .iter()
            .map(|a| vec![1, a.tile.saturating_sub(1).max(1), a.tile, 2 * a.tile + 1])
            .collect();
        let counts: Vec<u64> = candidates.iter().map(|c| c.len() as u64).collect();
        for pick in coords_of(&counts) {
            let extents: Vec<u32> = pick
                .iter()
                .zip(&candidates)
                .map(|(&i, c)| c[i as usize])
                .collect();
            check(&twin, &extents);
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(16))]

    #[test]
    fn random_run_time_extents_agree_with_the_docs_on_the_gpu(
        extents in prop::collection::vec(1u32..=70, 8)
    ) {
        for layout in canonical_tiled_layouts() {
            let twin = runtime_twin(&layout);
            check(&twin, &extents[..twin.rank()]);
        }
    }
}
