//! Property test: conversion classification against a brute-force oracle.
//!
//! Random pairs of layouts of one logical tensor (rank 1–3, extents 1–12, static or run-time,
//! row-major, column-major or R-Tile with random tiles, padding and reductions), the second
//! declared with its axes in a random order and read through the permutation back; both
//! optionally read through one more shared permutation. The oracle computes every offset of the
//! padded coordinate space from the definitions in the `tensor` module docs (not through the
//! algebra, the expression IR or `BoundView`), and classifies from the definitions in the
//! `conversion` module docs. Its offsets are themselves checked against `BoundView` on the
//! logical coordinates.

use std::cell::Cell;
use std::time::{Duration, Instant};

use fblayout_core::layout::{
    Conversion, Extent, LayoutSpec, Order, TensorLayout, View, classify_conversion,
    classify_layouts,
};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};

#[derive(Debug, Clone)]
struct AxisGen {
    extent: u32,
    dynamic: bool,
}

#[derive(Debug, Clone)]
struct SideGen {
    order: u8,
    tiles: Vec<Option<u32>>,
    forward: Vec<bool>,
    backward: Vec<bool>,
}

fn side(rank: usize) -> impl Strategy<Value = SideGen> {
    (
        0u8..6,
        prop::collection::vec(prop::option::of(1u32..=5), rank),
        prop::collection::vec(any::<bool>(), rank),
        prop::collection::vec(any::<bool>(), rank),
    )
        .prop_map(|(order, tiles, forward, backward)| SideGen {
            order,
            tiles,
            forward,
            backward,
        })
}

/// Builds one side over `axes` (orders 0: row-major, 1: column-major, 2–5: R-Tile); `None`
/// when the spec is refused.
fn build(name: &str, axes: &[(String, AxisGen)], g: &SideGen) -> Option<TensorLayout> {
    let mut spec = LayoutSpec::new(name);
    let rtile = g.order >= 2;
    for (k, (n, a)) in axes.iter().enumerate() {
        let extent = if a.dynamic {
            Extent::Dynamic
        } else {
            Extent::Static(a.extent)
        };
        spec = spec.axis(n.clone(), extent);
        if rtile && let Some(t) = g.tiles[k] {
            spec = spec.tile(t.min(a.extent), true);
        }
    }
    spec = match g.order {
        0 => spec.order(Order::RowMajor),
        1 => spec.order(Order::ColMajor),
        _ => {
            let pick = |flags: &[bool]| -> Vec<String> {
                axes.iter()
                    .zip(flags)
                    .filter(|(_, f)| **f)
                    .map(|((n, _), _)| n.clone())
                    .collect()
            };
            spec.rtile()
                .reduce_forward(pick(&g.forward))
                .reduce_backward(pick(&g.backward))
        }
    };
    spec.build().ok()
}

/// The offset of padded coordinate `c` (by tensor axis) from the layout's definition.
fn oracle_offset(l: &TensorLayout, extent: &[u64], c: &[u64]) -> u64 {
    let r = l.rank();
    let tile: Vec<u64> = l.axes().iter().map(|a| u64::from(a.tile)).collect();
    let padded: Vec<u64> = (0..r)
        .map(|i| extent[i].div_ceil(tile[i]) * tile[i])
        .collect();
    match l.order() {
        Order::RowMajor => (0..r).fold(0, |acc, i| acc * padded[i] + c[i]),
        Order::ColMajor => (0..r).rev().fold(0, |acc, i| acc * padded[i] + c[i]),
        Order::RTile => {
            let grid = (0..r).fold(0, |acc, i| acc * (padded[i] / tile[i]) + c[i] / tile[i]);
            let in_tile = l.in_tile_order().iter().fold(0, |acc, name| {
                let i = l.axis_index(name).expect("in-tile axes are axes");
                acc * tile[i] + c[i] % tile[i]
            });
            grid * l.tile_elems() + in_tile
        }
    }
}

/// The class from the definitions: walk the whole padded space (the view order does not matter
/// for a per-coordinate comparison), or `None` when the padded spaces differ.
fn oracle(src: &TensorLayout, dst: &TensorLayout, extent: &[u64]) -> Option<Conversion> {
    let r = src.rank();
    let pad = |l: &TensorLayout, i: usize| {
        let t = u64::from(l.axes()[i].tile);
        extent[i].div_ceil(t) * t
    };
    let padded: Vec<u64> = (0..r).map(|i| pad(src, i)).collect();
    if (0..r).any(|i| pad(dst, i) != padded[i]) {
        return None;
    }
    let n: u64 = padded.iter().product();
    let mut pairs = Vec::with_capacity(n as usize);
    let mut c = vec![0u64; r];
    for mut lin in 0..n {
        for i in (0..r).rev() {
            c[i] = lin % padded[i];
            lin /= padded[i];
        }
        pairs.push((
            oracle_offset(src, extent, &c),
            oracle_offset(dst, extent, &c),
        ));
    }
    Some(classify_pairs(src, dst, &pairs, n))
}

/// Checks the oracle's offsets against the bound layout on every logical coordinate.
fn oracle_matches_bind(l: &TensorLayout, extent: &[u64], binds: &[(&str, u32)]) {
    let bound = l.bind(binds).expect("binds");
    bound.for_each(|_, c, off| assert_eq!(off, oracle_offset(l, extent, c), "{l:?} at {c:?}"));
}

fn case() -> impl Strategy<Value = Case> {
    (1usize..=3).prop_flat_map(|rank| {
        let perm = Just((0..rank).collect::<Vec<_>>()).prop_shuffle();
        (
            prop::collection::vec(
                (1u32..=12, prop::bool::weighted(0.3))
                    .prop_map(|(extent, dynamic)| AxisGen { extent, dynamic }),
                rank,
            ),
            side(rank),
            side(rank),
            perm.clone(),
            prop::option::of(perm),
            any::<bool>(),
        )
    })
}

type Case = (
    Vec<AxisGen>,
    SideGen,
    SideGen,
    Vec<usize>,
    Option<Vec<usize>>,
    bool,
);

/// One case: `Ok(None)` when a spec was refused, else the class the oracle expected (`None`
/// inside for an expected refusal).
fn check(
    (axes, a, mut b, dst_order, view_perm, same_tiles): Case,
) -> Result<Option<Option<Conversion>>, TestCaseError> {
    if same_tiles {
        b.tiles = a.tiles.clone();
    }
    let named: Vec<(String, AxisGen)> = axes
        .iter()
        .enumerate()
        .map(|(i, g)| (format!("a{i}"), g.clone()))
        .collect();
    let reordered: Vec<(String, AxisGen)> = dst_order.iter().map(|&i| named[i].clone()).collect();
    let (Some(src), Some(dst)) = (build("s", &named, &a), build("d", &reordered, &b)) else {
        return Ok(None);
    };
    let binds: Vec<(&str, u32)> = named
        .iter()
        .filter(|(_, g)| g.dynamic)
        .map(|(n, g)| (n.as_str(), g.extent))
        .collect();
    // A run-time extent that a tile without `pad` doesn't divide doesn't bind: classifying
    // such a pair is refused too.
    if src.check_extents(&binds).is_err() || dst.check_extents(&binds).is_err() {
        let names: Vec<&str> = named.iter().map(|(n, _)| n.as_str()).collect();
        let dst_view = dst.view().permute(&names).expect("a permutation");
        let got = classify_conversion(&src.view(), &dst_view, &binds);
        prop_assert!(got.is_err(), "extents that don't bind, yet {got:?}");
        return Ok(None);
    }
    let extent: Vec<u64> = axes.iter().map(|g| u64::from(g.extent)).collect();
    let dst_extent: Vec<u64> = dst_order.iter().map(|&i| extent[i]).collect();
    oracle_matches_bind(&src, &extent, &binds);
    oracle_matches_bind(&dst, &dst_extent, &binds);
    let names: Vec<&str> = named.iter().map(|(n, _)| n.as_str()).collect();
    let order: Vec<&str> = match &view_perm {
        Some(p) => p.iter().map(|&i| names[i]).collect(),
        None => names.clone(),
    };
    let src_view: View = if view_perm.is_some() {
        src.view().permute(&order).expect("a permutation")
    } else {
        src.view()
    };
    // dst is declared in another axis order and read back in src's view order.
    let dst_view = dst.view().permute(&order).expect("a permutation");
    let got = classify_conversion(&src_view, &dst_view, &binds);
    let want = oracle_for(&src, &dst, &dst_order, &extent);
    match want {
        None => prop_assert!(got.is_err(), "expected a refusal, got {got:?}"),
        Some(w) => prop_assert_eq!(got.expect("classifies"), w),
    }
    Ok(Some(want))
}

#[test]
fn classification_matches_the_oracle() {
    let counts = Cell::new([0usize; 5]);
    let mut runner = TestRunner::new(Config {
        cases: 1536,
        ..Config::default()
    });
    runner
        .run(&case(), |c| {
            let k = match check(c)? {
                None => 0,
                Some(None) => 1,
                Some(Some(Conversion::Free)) => 2,
                Some(Some(Conversion::InTile { .. })) => 3,
                Some(Some(Conversion::GlobalCopy { .. })) => 4,
            };
            let mut v = counts.get();
            v[k] += 1;
            counts.set(v);
            Ok(())
        })
        .expect("classification matches the oracle");
    let [skipped, refused, free, in_tile, copy] = counts.get();
    eprintln!("skipped {skipped}, refused {refused}, free {free}, in-tile {in_tile}, copy {copy}");
    for (what, n) in [
        ("refused", refused),
        ("free", free),
        ("in-tile", in_tile),
        ("copy", copy),
    ] {
        assert!(n >= 10, "only {n} {what} cases");
    }
}

/// The oracle with dst's axes re-read in src's axis order.
fn oracle_for(
    src: &TensorLayout,
    dst: &TensorLayout,
    dst_order: &[usize],
    extent: &[u64],
) -> Option<Conversion> {
    // Wrap dst so that oracle() can index it by src axis: evaluate through the permutation.
    let r = src.rank();
    let dst_extent: Vec<u64> = dst_order.iter().map(|&i| extent[i]).collect();
    let pad = |l: &TensorLayout, k: usize, e: u64| {
        let t = u64::from(l.axes()[k].tile);
        e.div_ceil(t) * t
    };
    let padded: Vec<u64> = (0..r).map(|i| pad(src, i, extent[i])).collect();
    for (k, &i) in dst_order.iter().enumerate() {
        if pad(dst, k, extent[i]) != padded[i] {
            return None;
        }
    }
    if dst_order.iter().enumerate().all(|(k, &i)| k == i) {
        return oracle(src, dst, extent);
    }
    let n: u64 = padded.iter().product();
    let mut pairs = Vec::with_capacity(n as usize);
    let mut c = vec![0u64; r];
    let mut cd = vec![0u64; r];
    for mut lin in 0..n {
        for i in (0..r).rev() {
            c[i] = lin % padded[i];
            lin /= padded[i];
        }
        for (k, &i) in dst_order.iter().enumerate() {
            cd[k] = c[i];
        }
        pairs.push((
            oracle_offset(src, extent, &c),
            oracle_offset(dst, &dst_extent, &cd),
        ));
    }
    Some(classify_pairs(src, dst, &pairs, n))
}

/// Sizes near the u32 limit: only the algebra path can answer in time.
#[test]
fn huge_run_time_axis_is_classified_by_the_algebra() {
    let big = 1u32 << 30;
    let rtile = |forward: &str| {
        LayoutSpec::new("x")
            .dyn_axis("tokens")
            .tile(4, true)
            .axis("h", 2)
            .tile(2, false)
            .rtile()
            .reduce_forward([forward])
            .build()
            .expect("valid")
    };
    let plain = |o: Order| {
        LayoutSpec::new("x")
            .dyn_axis("tokens")
            .axis("h", 2)
            .order(o)
            .build()
            .expect("valid")
    };
    let binds = [("tokens", big)];
    let n = u64::from(big) * 2;
    let start = Instant::now();
    let fw_t = rtile("tokens");
    let fw_h = rtile("h");
    assert_eq!(
        classify_layouts(&fw_t, &fw_t, &binds).unwrap(),
        Conversion::Free
    );
    assert_eq!(
        classify_layouts(&fw_t, &fw_h, &binds).unwrap(),
        Conversion::InTile { block: 8 }
    );
    let t = |l: &TensorLayout| l.view().transpose("tokens", "h").expect("transpose");
    assert_eq!(
        classify_conversion(&t(&fw_h), &t(&fw_t), &binds).unwrap(),
        Conversion::InTile { block: 8 }
    );
    assert_eq!(
        classify_layouts(&plain(Order::RowMajor), &plain(Order::ColMajor), &binds).unwrap(),
        Conversion::GlobalCopy { bytes: 2 * n * 4 }
    );
    // 4×2 tiles with h innermost are row-major order itself: (t / 4)·8 + (t % 4)·2 + h.
    assert_eq!(
        classify_layouts(&plain(Order::RowMajor), &fw_h, &binds).unwrap(),
        Conversion::Free
    );
    // With tokens innermost, each 8-element tile is a transposed block of row-major.
    assert_eq!(
        classify_layouts(&plain(Order::RowMajor), &fw_t, &binds).unwrap(),
        Conversion::InTile { block: 8 }
    );
    assert_eq!(
        classify_layouts(&plain(Order::ColMajor), &fw_h, &binds).unwrap(),
        Conversion::GlobalCopy { bytes: 2 * n * 4 }
    );
    // 2^31 tokens of one element each: row- and column-major are the same function.
    let one = |o: Order| {
        LayoutSpec::new("y")
            .dyn_axis("tokens")
            .axis("h", 1)
            .order(o)
            .build()
            .expect("valid")
    };
    assert_eq!(
        classify_layouts(
            &one(Order::RowMajor),
            &one(Order::ColMajor),
            &[("tokens", 1 << 31)]
        )
        .unwrap(),
        Conversion::Free
    );
    assert!(
        start.elapsed() < Duration::from_secs(5),
        "took {:?}",
        start.elapsed()
    );
}

/// The class the definitions give to `(src offset, dst offset)` pairs over all `n` coordinates
/// of the padded space (f32 elements).
fn classify_pairs(
    src: &TensorLayout,
    dst: &TensorLayout,
    pairs: &[(u64, u64)],
    n: u64,
) -> Conversion {
    if pairs.iter().all(|(a, b)| a == b) {
        return Conversion::Free;
    }
    let mut blocks: Vec<u64> = [src.tile_elems(), dst.tile_elems()]
        .into_iter()
        .filter(|&t| t > 1)
        .collect();
    blocks.sort_unstable();
    for block in blocks {
        if pairs.iter().all(|(a, b)| a / block == b / block) {
            return Conversion::InTile { block };
        }
    }
    Conversion::GlobalCopy { bytes: 2 * n * 4 }
}
