//! Equivalence on a real GPU API: the WGSL that fblayout emits, run through wgpu, computes the
//! same offsets and masks as the Rust path, for every coordinate of small shapes (and one step
//! past every edge, where the mask must be false). CI runs this on Mesa's lavapipe; it fails,
//! never skips, when no adapter is found.

use fblayout_core::expr::CpuIndexFn;
use fblayout_tests::catalog::canonical_views;
use fblayout_tests::{apply_steps, arb_case, arb_steps, coords_of, gpu_offsets};
use proptest::prelude::*;

/// The shape enumerated on the GPU: each axis one past its extent.
fn beyond(shape: &[u64]) -> Vec<u64> {
    shape.iter().map(|e| e + 1).collect()
}

#[test]
fn canonical_views_agree_on_the_gpu() {
    for canonical in canonical_views().unwrap() {
        let view = &canonical.view;
        let bound = view.bind(&canonical.bind).unwrap();
        let grid = beyond(bound.shape());
        for f in [view.index_fn(), view.index_fn().simplified()] {
            let gpu = gpu_offsets(&f, &grid, bound.extent_args());
            let cpu = CpuIndexFn::new(&f);
            for (c, got) in coords_of(&grid).zip(&gpu) {
                let inside = c.iter().zip(bound.shape()).all(|(x, e)| x < e);
                let want = if inside { bound.offset(&c) } else { None };
                assert_eq!(
                    *got,
                    want,
                    "{} ({}) at {c:?}",
                    view.name(),
                    canonical.description
                );
                let mut args = c.clone();
                args.extend_from_slice(bound.extent_args());
                assert_eq!(
                    cpu.eval(&args),
                    want,
                    "CPU path of {} at {c:?}",
                    view.name()
                );
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn random_views_agree_on_the_gpu(case in arb_case(), steps in arb_steps()) {
        let vc = apply_steps(&case, &steps);
        let bound = vc.view.bind(&case.bindings()).unwrap();
        let grid = beyond(&vc.shape);
        let naive = vc.view.index_fn();
        for f in [naive.simplified(), naive] {
            let gpu = gpu_offsets(&f, &grid, bound.extent_args());
            for (c, got) in coords_of(&grid).zip(&gpu) {
                let inside = c.iter().zip(&vc.shape).all(|(x, e)| x < e);
                let want = if inside { case.oracle_offset(&vc.oracle_coords(&c)) } else { None };
                prop_assert_eq!(*got, want, "{} at {:?}", f.name, c);
            }
        }
    }
}
