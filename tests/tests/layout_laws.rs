//! Property tests of layouts and views on the CPU: the naive index expressions, their
//! simplified forms and the bound CPU path all agree with an independent oracle, for random
//! tensors (row-major, column-major, R-Tile with padding) and random chains of views.

use fblayout_core::expr::CpuIndexFn;
use fblayout_core::layout::Order;
use fblayout_tests::{Case, StepChoice, apply_steps, arb_case, arb_steps, coords_of};
use proptest::prelude::*;
use proptest::test_runner::TestCaseError;

fn args(coords: &[u64], extents: &[u64]) -> Vec<u64> {
    coords.iter().chain(extents).copied().collect()
}

/// A view made of `steps` binds to the shape the oracle gives and reads, at every coordinate,
/// what the oracle says, by its naive and simplified functions and the bound CPU path; one
/// past the end of any axis is masked by both forms.
fn agrees_with_the_oracle(case: &Case, steps: &[StepChoice]) -> Result<(), TestCaseError> {
    let vc = apply_steps(case, steps);
    let bound = vc.view.bind(&case.bindings()).unwrap();
    prop_assert_eq!(bound.shape(), vc.shape.as_slice());
    let naive = vc.view.index_fn();
    let simple = naive.simplified();
    prop_assert!(simple.op_count() <= naive.op_count());
    let (naive, simple) = (CpuIndexFn::new(&naive), CpuIndexFn::new(&simple));
    for c in coords_of(&vc.shape) {
        let want = case.oracle_offset(&vc.oracle_coords(&c));
        prop_assert!(want.is_some(), "view coordinate {:?} left the tensor", c);
        let a = args(&c, bound.extent_args());
        prop_assert_eq!(naive.eval(&a), want, "naive, at {:?}", c);
        prop_assert_eq!(simple.eval(&a), want, "simplified, at {:?}", c);
        prop_assert_eq!(bound.offset(&c), want, "bound, at {:?}", c);
    }
    let beyond: Vec<u64> = vc.shape.iter().map(|e| e + 1).collect();
    for c in coords_of(&beyond) {
        if c.iter().zip(&vc.shape).any(|(x, e)| x >= e) {
            let a = args(&c, bound.extent_args());
            prop_assert_eq!(naive.eval(&a), None, "naive mask at {:?}", c);
            prop_assert_eq!(simple.eval(&a), None, "simplified mask at {:?}", c);
            prop_assert_eq!(bound.offset(&c), None, "bound mask at {:?}", c);
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(192))]

    #[test]
    fn views_agree_with_the_oracle(case in arb_case(), steps in arb_steps()) {
        agrees_with_the_oracle(&case, &steps)?;
    }

    #[test]
    fn tensors_fill_their_buffer_without_overlap(case in arb_case()) {
        let bound = case.layout.bind(&case.bindings()).unwrap();
        let mut used = vec![false; bound.len() as usize];
        bound.for_each(|_, c, off| {
            assert!(off < bound.len(), "offset {off} of {c:?} is past the buffer");
            assert!(!std::mem::replace(&mut used[off as usize], true), "{c:?} overlaps");
        });
        let padding = used.iter().filter(|u| !**u).count() as u64;
        prop_assert_eq!(padding, bound.len() - bound.logical_len());
        if case.layout.order() != Order::RTile {
            prop_assert_eq!(padding, 0);
        }
    }

    #[test]
    fn rtile_tiles_are_contiguous_and_forward_rows_are_vectors(case in arb_case()) {
        prop_assume!(case.layout.order() == Order::RTile);
        let layout = &case.layout;
        let bound = layout.bind(&case.bindings()).unwrap();
        let tiles: Vec<u64> = layout.axes().iter().map(|a| u64::from(a.tile)).collect();
        let grid: Vec<u64> = case.extents.iter().zip(&tiles).map(|(&e, &t)| u64::from(e).div_ceil(t)).collect();
        let t_elems = layout.tile_elems();
        let fwd = layout.axis_index(&layout.forward()[0]).unwrap();
        let innermost = layout.in_tile_order().last().map(|n| layout.axis_index(n).unwrap());
        bound.for_each(|_, c, off| {
            let tile_linear = c.iter().zip(&tiles).zip(&grid).fold(0, |acc, ((&c, &t), &g)| acc * g + c / t);
            assert_eq!(off / t_elems, tile_linear, "{c:?} lies outside its tile's block");
            // Inside a tile the forward reduction axis is innermost: stride 1.
            if innermost == Some(fwd) && c[fwd] % tiles[fwd] + 1 < tiles[fwd] {
                let mut next = c.to_vec();
                next[fwd] += 1;
                if let Some(n) = bound.offset(&next) {
                    assert_eq!(n, off + 1, "forward axis not contiguous at {c:?}");
                }
            }
        });
    }

    #[test]
    fn pack_and_unpack_round_trip(case in arb_case(), steps in arb_steps()) {
        let bound = case.layout.bind(&case.bindings()).unwrap();
        let data: Vec<u32> = (1..=bound.logical_len() as u32).collect();
        let buffer = bound.pack(&data).unwrap();
        prop_assert_eq!(buffer.len() as u64, bound.len());
        prop_assert_eq!(buffer.iter().filter(|&&x| x == 0).count() as u64, bound.len() - bound.logical_len());
        prop_assert_eq!(bound.unpack(&buffer).unwrap(), data);
        // A view reads the packed tensor exactly where the oracle says.
        let vc = apply_steps(&case, &steps);
        let view = vc.view.bind(&case.bindings()).unwrap();
        let read = view.unpack(&buffer).unwrap();
        for (i, c) in coords_of(&vc.shape).enumerate() {
            let base = vc.oracle_coords(&c);
            let linear = base.iter().zip(&case.extents).fold(0, |acc, (&x, &e)| acc * u64::from(e) + x);
            prop_assert_eq!(u64::from(read[i]), linear + 1);
        }
    }
}

/// Merges of run-time axes: the unravel of a merged coordinate leaves its outermost part
/// unwrapped and the simplifier folds a remainder and its quotient back together, which is
/// exact only where the view is in bounds; the offsets there must still be the oracle's.
mod run_time_merges {
    use super::{agrees_with_the_oracle, args};
    use fblayout_core::__private::unravel;
    use fblayout_core::expr::CpuIndexFn;
    use fblayout_core::layout::{LayoutSpec, MAX_ELEMENTS, Order};
    use fblayout_tests::{Case, StepChoice, apply_steps, arb_case, arb_merge_steps};
    use proptest::prelude::*;

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        /// Random tensors with at least two run-time axes (row-major, column-major, R-Tile
        /// with padded tiles) under chains that merge often: every coordinate reads what the
        /// oracle says, by the naive and the simplified function and the bound view, and one
        /// past the end is masked.
        #[test]
        fn merged_views_agree_with_the_oracle(
            case in arb_case().prop_filter("two run-time axes", |c| c.layout.dynamic_axes().count() >= 2),
            steps in arb_merge_steps(),
        ) {
            agrees_with_the_oracle(&case, &steps)?;
        }

        /// Two run-time axes and a static one, with extents up to a tensor of nearly
        /// `u32::MAX` elements (padding included), merged two or three at a time: the corners
        /// and random coordinates read what the oracle says, and the first coordinate past
        /// the merged axis is masked.
        #[test]
        fn large_merged_views_agree_with_the_oracle(
            order in 0u8..3,
            tile in 1u32..=8,
            a in 1u32..=1 << 16,
            c in 1u32..=16,
            b_seed in any::<u32>(),
            near_limit in any::<bool>(),
            all_three in any::<bool>(),
            samples in prop::collection::vec(any::<u64>(), 24),
        ) {
            let order = [Order::RowMajor, Order::ColMajor, Order::RTile][order as usize];
            let mut spec = LayoutSpec::new("t").order(order).dyn_axis("a0").dyn_axis("a1");
            if order == Order::RTile {
                spec = spec.tile(tile, true);
            }
            spec = spec.axis("a2", c);
            if order == Order::RTile {
                spec.forward = vec!["a2".into()];
            }
            // The most rows `a1` may have, padded to its tile, with `a0 · a1 · a2` elements
            // in the buffer; half the cases take one of the last eight.
            let most = MAX_ELEMENTS / (u64::from(a) * u64::from(c));
            let most = most - most % u64::from(tile);
            prop_assume!(most >= 1);
            let b = if near_limit {
                most - u64::from(b_seed) % most.min(8)
            } else {
                1 + u64::from(b_seed) % most
            };
            let b = u32::try_from(b).unwrap();
            let case = Case { layout: spec.build().unwrap(), extents: vec![a, b, c] };
            let steps: &[StepChoice] = if all_three {
                &[StepChoice::Merge(0), StepChoice::Merge(0)]
            } else {
                &[StepChoice::Merge(0)]
            };
            let vc = apply_steps(&case, steps);
            let bound = vc.view.bind(&case.bindings()).unwrap();
            let simple = CpuIndexFn::new(vc.view.simplified_fn());
            let total: u64 = vc.shape.iter().product();
            let mut coord = vec![0; vc.shape.len()];
            for linear in [0, total - 1].into_iter().chain(samples.iter().map(|s| s % total)) {
                unravel(linear, &vc.shape, &mut coord);
                let want = case.oracle_offset(&vc.oracle_coords(&coord));
                prop_assert!(want.is_some_and(|w| w < bound.len()), "{:?} left the buffer", coord);
                let a = args(&coord, bound.extent_args());
                prop_assert_eq!(simple.eval(&a), want, "simplified, at {:?}", coord);
                prop_assert_eq!(bound.offset(&coord), want, "bound, at {:?}", coord);
            }
            let mut past = vec![0; vc.shape.len()];
            past[0] = vc.shape[0];
            prop_assert_eq!(simple.eval(&args(&past, bound.extent_args())), None);
        }
    }
}

#[test]
fn oracle_matches_a_hand_worked_rtile() {
    // 6×10 in 4×4 tiles (padded to 8×12): tiles are 16 elements, 3 tiles per row of tiles.
    let layout = fblayout_tests::catalog::padded_rtile("p").unwrap();
    let case = Case {
        layout,
        extents: vec![6, 10],
    };
    assert_eq!(case.oracle_offset(&[0, 5]), Some(16 + 1));
    // Tile (1, 2) is the sixth tile: 5 * 16 = 80; inside it, (1, 1) is 1 * 4 + 1.
    assert_eq!(case.oracle_offset(&[5, 9]), Some(5 * 16 + 4 + 1));
    assert_eq!(case.oracle_offset(&[6, 0]), None);
    let bound = case.layout.bind(&[]).unwrap();
    assert_eq!(bound.offset(&[5, 9]), Some(85));
}

mod cute {
    use super::*;
    use fblayout_core::algebra::{Int, IntTuple, Layout, blocked_product};

    fn coord(c: &[u64]) -> IntTuple {
        IntTuple::Tuple(
            c.iter()
                .map(|&x| IntTuple::Int(Int::Dynamic(x as usize)))
                .collect(),
        )
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(128))]

        /// Each tensor layout, as a CuTe layout, is the same function, and its cosize is the
        /// buffer length.
        #[test]
        fn cute_form_is_the_same_function(case in arb_case()) {
            let bound = case.layout.bind(&case.bindings()).unwrap();
            let cute = case.layout.to_cute(&case.bindings()).unwrap();
            prop_assert_eq!(cute.size() as u64, bound.len());
            prop_assert_eq!(cute.is_static(), case.layout.is_static());
            bound.for_each(|_, c, off| {
                assert_eq!(cute.call_coord(&coord(c)).unwrap() as u64, off, "at {c:?} of {cute}");
            });
        }

        /// A 2-D R-Tile is CuTe's blocked product of its tile and its grid of tiles.
        #[test]
        fn rtile_is_a_blocked_product(rows in 1usize..=12, cols in 1usize..=12, tr in 1u32..=4, tc in 1u32..=4) {
            let (tr, tc) = (tr.min(rows as u32), tc.min(cols as u32));
            let layout = fblayout_core::layout::LayoutSpec::new("m")
                .axis("rows", rows as u32).tile(tr, true)
                .axis("cols", cols as u32).tile(tc, true)
                .rtile().reduce_forward(["cols"]).reduce_backward(["rows"])
                .build().unwrap();
            let (gr, gc) = (rows.div_ceil(tr as usize), cols.div_ceil(tc as usize));
            let tile = Layout::compact_row_major(IntTuple::flat([Int::Static(tr as usize), Int::Static(tc as usize)])).unwrap();
            let grid = Layout::compact_row_major(IntTuple::flat([Int::Static(gr), Int::Static(gc)])).unwrap();
            let product = blocked_product(&tile, &grid).unwrap();
            let ours = layout.to_cute(&[]).unwrap();
            prop_assert_eq!(product.size(), ours.size());
            for r in 0..tr as usize * gr {
                for c in 0..tc as usize * gc {
                    let at = coord(&[r as u64, c as u64]);
                    prop_assert_eq!(product.call_coord(&at).unwrap(), ours.call_coord(&at).unwrap(), "at ({}, {})", r, c);
                }
            }
        }
    }
}

/// Splits of run-time extents are checked when bound, whatever steps follow them.
mod run_time_splits {
    use fblayout_core::layout::LayoutSpec;
    use proptest::prelude::*;

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        /// A split of a run-time axis binds exactly when its known part divides the extent,
        /// merged back or not; and when it binds, the merged view reads the tensor in place.
        #[test]
        fn a_split_binds_only_when_it_divides(n in 1u32..=64, k in 2u32..=8, merge in any::<bool>()) {
            let x = LayoutSpec::new("x").dyn_axis("n").build().unwrap();
            let mut v = x.view().split("n", &[("a", None), ("b", Some(k))]).unwrap();
            if merge {
                v = v.merge(&["a", "b"], "m").unwrap();
            }
            let bound = v.bind(&[("n", n)]);
            prop_assert_eq!(bound.is_ok(), n % k == 0, "n = {}, k = {}", n, k);
            if let (Ok(bound), true) = (bound, merge) {
                for i in 0..u64::from(n) {
                    prop_assert_eq!(bound.offset(&[i]), Some(i));
                }
            }
        }
    }
}
