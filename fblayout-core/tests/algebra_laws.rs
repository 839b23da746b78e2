//! Property tests: the laws of the layout algebra on random layouts.
//!
//! Layouts have ranks 1–4, nesting depth at most 2, extents 1–8 and random static/dynamic
//! flags; their strides are compact (column-major, row-major or permuted), injective with gaps,
//! or random. Tilers and right-hand sides of compositions are either independent random layouts
//! (the laws are checked whenever the operation is admissible, and the tests count how often it
//! was) or built from the digits of the left-hand layout, for which the operation must succeed.

use std::cell::Cell;
use std::collections::HashSet;
use std::fmt::Debug;

use fblayout_core::algebra::{
    AlgebraError, Int, IntTuple, Layout, Tiler, blocked_product, coalesce, coalesce_by_mode,
    complement, composition, composition_by_mode, idx2crd, left_inverse, logical_divide,
    logical_product, raked_product, right_inverse, tiled_divide, zipped_divide,
};
use proptest::prelude::*;
use proptest::sample::select;
use proptest::test_runner::{Config, TestCaseError, TestRunner};

const CASES: u32 = 256;

/// Runs `test` on `CASES` values of `strategy`, panicking with the (shrunk) failing input.
fn check<S>(strategy: S, test: impl Fn(S::Value) -> Result<(), TestCaseError>)
where
    S: Strategy,
    S::Value: Debug,
{
    let mut config = Config::with_cases(CASES);
    config.max_global_rejects = 100_000;
    config.failure_persistence = None;
    if let Err(e) = TestRunner::new(config).run(&strategy, test) {
        panic!("{e}");
    }
}

/// A small deterministic generator for choices derived from a proptest seed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    fn coin(&mut self) -> bool {
        self.next() & 1 == 1
    }

    fn int(&mut self, v: usize, all_static: bool) -> Int {
        if all_static || self.coin() {
            Int::Static(v)
        } else {
            Int::Dynamic(v)
        }
    }

    fn shuffle<T>(&mut self, v: &mut [T]) {
        for i in (1..v.len()).rev() {
            v.swap(i, self.below(i + 1));
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Strides {
    ColMajor,
    RowMajor,
    /// Compact, with the leaves taken in a random order.
    Permuted,
    /// Injective with nesting strides: a random order and gaps of 1–3 between the leaves.
    Gapped,
    /// Random strides in 0..=16.
    Random,
}

const COMPACT: &[Strides] = &[Strides::ColMajor, Strides::RowMajor, Strides::Permuted];
const INJECTIVE: &[Strides] = &[
    Strides::ColMajor,
    Strides::RowMajor,
    Strides::Permuted,
    Strides::Gapped,
];
const ANY: &[Strides] = &[
    Strides::ColMajor,
    Strides::RowMajor,
    Strides::Permuted,
    Strides::Gapped,
    Strides::Random,
];

fn leaf(all_static: bool) -> impl Strategy<Value = IntTuple> + Clone {
    (1usize..=8, any::<bool>()).prop_map(move |(v, s)| {
        IntTuple::Int(if s || all_static {
            Int::Static(v)
        } else {
            Int::Dynamic(v)
        })
    })
}

/// Shapes of rank 1–4 and depth at most 2 whose size is at most `max_size`.
fn shape(all_static: bool, max_size: usize) -> impl Strategy<Value = IntTuple> {
    let mode = prop_oneof![
        3 => leaf(all_static),
        1 => prop::collection::vec(leaf(all_static), 1..=2).prop_map(IntTuple::Tuple),
    ];
    prop_oneof![
        1 => leaf(all_static),
        4 => prop::collection::vec(mode, 1..=4).prop_map(IntTuple::Tuple),
    ]
    .prop_filter("size within bound", move |s| {
        s.size().is_ok_and(|n| n.value() <= max_size)
    })
}

/// `profile` with its leaves replaced, left to right, by `leaves`.
fn unflatten(profile: &IntTuple, leaves: &mut impl Iterator<Item = Int>) -> IntTuple {
    match profile {
        IntTuple::Int(_) => IntTuple::Int(leaves.next().expect("one leaf per leaf")),
        IntTuple::Tuple(ms) => IntTuple::Tuple(ms.iter().map(|m| unflatten(m, leaves)).collect()),
    }
}

fn build(shape: IntTuple, kind: Strides, seed: u64, all_static: bool) -> Layout {
    let mut rng = Rng(seed);
    let extents = shape.leaves();
    let strides: Vec<Int> = match kind {
        Strides::ColMajor => return Layout::compact_col_major(shape).unwrap(),
        Strides::RowMajor => return Layout::compact_row_major(shape).unwrap(),
        Strides::Permuted | Strides::Gapped => {
            let mut order: Vec<usize> = (0..extents.len()).collect();
            rng.shuffle(&mut order);
            let mut strides = vec![Int::Static(0); extents.len()];
            let mut acc = Int::Static(1);
            for k in order {
                if kind == Strides::Gapped {
                    let g = 1 + rng.below(3);
                    let gap = rng.int(g, all_static);
                    acc = acc.checked_mul(gap).unwrap();
                }
                strides[k] = acc;
                acc = acc.checked_mul(extents[k]).unwrap();
            }
            strides
        }
        Strides::Random => (0..extents.len())
            .map(|_| {
                let v = rng.below(17);
                rng.int(v, all_static)
            })
            .collect(),
    };
    let stride = unflatten(&shape, &mut strides.into_iter());
    Layout::new(shape, stride).unwrap()
}

fn layout(
    all_static: bool,
    max_size: usize,
    kinds: &'static [Strides],
) -> impl Strategy<Value = Layout> {
    (shape(all_static, max_size), select(kinds), any::<u64>())
        .prop_map(move |(s, k, seed)| build(s, k, seed, all_static))
        .prop_filter("cosize within bound", |l| l.cosize() <= 1 << 16)
}

/// The layouts `pairs` (extent, stride) grouped into a random shape of rank at most 4 and
/// depth at most 2; `1:0` when there are none.
fn group_pairs(pairs: Vec<(Int, Int)>, rng: &mut Rng) -> Layout {
    if pairs.is_empty() {
        return Layout::leaf(Int::Static(1), Int::Static(0)).unwrap();
    }
    if pairs.len() == 1 && rng.coin() {
        return Layout::leaf(pairs[0].0, pairs[0].1).unwrap();
    }
    let chunks = 1 + rng.below(pairs.len().min(4));
    let mut modes: Vec<Vec<(Int, Int)>> = vec![Vec::new(); chunks];
    for (k, p) in pairs.into_iter().enumerate() {
        let c = if k < chunks { k } else { rng.below(chunks) };
        modes[c].push(p);
    }
    let modes = modes.into_iter().map(|m| {
        if m.len() == 1 {
            Layout::leaf(m[0].0, m[0].1).unwrap()
        } else {
            let (s, d): (Vec<_>, Vec<_>) = m.into_iter().unzip();
            Layout::new(IntTuple::flat(s), IntTuple::flat(d)).unwrap()
        }
    });
    Layout::from_modes(modes).unwrap()
}

/// A layout whose leaves pick distinct sub-digits of `a`'s index space (each mode of the
/// coalesced `a` possibly split in two factors), in a random order: composing `a` with it, or
/// dividing `a` by it, is always admissible. With `extras`, broadcast (stride-0) and extent-1
/// leaves are mixed in.
fn aligned(a: &Layout, seed: u64, extras: bool, all_static: bool) -> Layout {
    let mut rng = Rng(seed);
    let mut digits = Vec::new();
    let mut index_stride = 1;
    for (s, _) in coalesce(a).leaves() {
        let s = s.value();
        let divisors: Vec<usize> = (2..s).filter(|f| s.is_multiple_of(*f)).collect();
        if !divisors.is_empty() && rng.coin() {
            let f = divisors[rng.below(divisors.len())];
            digits.push((f, index_stride));
            digits.push((s / f, index_stride * f));
        } else {
            digits.push((s, index_stride));
        }
        index_stride *= s;
    }
    let mut pairs: Vec<(Int, Int)> = Vec::new();
    for (s, d) in digits {
        if rng.coin() {
            pairs.push((rng.int(s, all_static), rng.int(d, all_static)));
        }
    }
    if extras && rng.below(4) == 0 {
        let v = 1 + rng.below(3);
        pairs.push((rng.int(v, all_static), rng.int(0, all_static)));
    }
    if extras && rng.below(4) == 0 {
        let v = rng.below(100);
        pairs.push((rng.int(1, all_static), rng.int(v, all_static)));
    }
    rng.shuffle(&mut pairs);
    group_pairs(pairs, &mut rng)
}

/// Aligned tilers for a random number of leading modes of `a`.
fn aligned_by_mode(a: &Layout, seed: u64, all_static: bool) -> Vec<Layout> {
    let mut rng = Rng(seed);
    let count = 1 + rng.below(a.rank());
    a.modes()
        .iter()
        .take(count)
        .map(|m| aligned(m, rng.next(), false, all_static))
        .collect()
}

fn image(l: &Layout) -> Vec<usize> {
    (0..l.size()).map(|i| l.call(i)).collect()
}

fn is_injective(l: &Layout) -> bool {
    let mut seen = HashSet::new();
    (0..l.size()).all(|i| seen.insert(l.call(i)))
}

/// Whether `l` maps `[0, size)` one-to-one onto `[0, size)`.
fn is_compact_bijection(l: &Layout) -> bool {
    let mut hit = vec![false; l.size()];
    (0..l.size()).all(|i| {
        let v = l.call(i);
        v < hit.len() && !std::mem::replace(&mut hit[v], true)
    })
}

fn same_function(a: &Layout, b: &Layout) -> bool {
    a.size() == b.size() && (0..a.size()).all(|i| a.call(i) == b.call(i))
}

/// `A ∘ B`, checked against function composition whenever it is admissible. Returns whether it
/// was.
fn composition_law(a: &Layout, b: &Layout) -> Result<bool, TestCaseError> {
    match composition(a, b) {
        Ok(r) => {
            prop_assert!(b.shape().is_compatible(r.shape()), "{} vs {}", b, r);
            for i in 0..b.size() {
                let x = b.call(i);
                prop_assert!(
                    x < a.size(),
                    "admissible, yet B({}) = {} is outside A",
                    i,
                    x
                );
                prop_assert_eq!(r.call(i), a.call(x), "index {} of {} o {} = {}", i, a, b, r);
            }
            Ok(true)
        }
        Err(AlgebraError::CompositionNotAdmissible { .. }) => Ok(false),
        Err(e) => Err(TestCaseError::fail(format!("unexpected error: {e}"))),
    }
}

/// The coordinate of a group of coordinates, mirroring how the divides group modes.
fn group(mut coords: Vec<IntTuple>) -> IntTuple {
    if coords.len() == 1 {
        coords.remove(0)
    } else {
        IntTuple::Tuple(coords)
    }
}

#[test]
fn compact_layouts_are_bijections() {
    check(layout(false, 2048, COMPACT), |l| {
        prop_assert_eq!(l.cosize(), l.size());
        prop_assert!(is_compact_bijection(&l), "{}", l);
        Ok(())
    });
}

#[test]
fn coalesce_preserves_the_function() {
    check(layout(false, 2048, ANY), |l| {
        let c = coalesce(&l);
        prop_assert!(same_function(&l, &c), "{} -> {}", l, c);
        prop_assert!(c.depth() <= 1);
        prop_assert!(c.rank() <= l.flatten().rank(), "{} -> {}", l, c);
        prop_assert_eq!(coalesce(&c), c.clone());
        let m = coalesce_by_mode(&l);
        prop_assert_eq!(m.rank(), l.rank());
        prop_assert!(same_function(&l, &m), "{} -> {}", l, m);
        for (x, y) in l.modes().iter().zip(m.modes()) {
            prop_assert!(same_function(x, &y));
        }
        Ok(())
    });
}

#[test]
fn composition_is_function_composition() {
    check((layout(false, 1024, ANY), any::<u64>()), |(a, seed)| {
        let b = aligned(&a, seed, true, false);
        prop_assert!(composition_law(&a, &b)?, "{} o {} was refused", a, b);
        Ok(())
    });
    let admissible = Cell::new(0);
    check(
        (layout(false, 1024, ANY), layout(false, 64, ANY)),
        |(a, b)| {
            if composition_law(&a, &b)? {
                admissible.set(admissible.get() + 1);
            }
            Ok(())
        },
    );
    assert!(
        admissible.get() >= CASES as usize / 10,
        "only {} of {} random compositions were admissible",
        admissible.get(),
        CASES
    );
}

/// The complement laws for `l` and codomain size `m`; `nesting` when `l`'s strides are known
/// to nest, so that the complement must exist.
fn complement_law(l: &Layout, m: usize, nesting: bool) -> Result<(), TestCaseError> {
    let c = match complement(l, Int::Dynamic(m)) {
        Ok(c) => c,
        Err(AlgebraError::ComplementNotAdmissible { .. }) => {
            prop_assert!(!nesting, "complement of {} refused", l);
            return Ok(());
        }
        Err(e) => return Err(TestCaseError::fail(format!("unexpected error: {e}"))),
    };
    for i in 1..c.size() {
        prop_assert!(c.call(i - 1) < c.call(i), "{} is not ordered", c);
    }
    if !is_injective(l) {
        return Ok(());
    }
    let both = Layout::from_modes([l.clone(), c.clone()]).unwrap();
    // (layout, complement) is a bijection onto a contiguous range covering [0, m) ...
    prop_assert!(
        is_compact_bijection(&both),
        "({}, {}) is not a bijection",
        l,
        c
    );
    prop_assert!(both.size() >= m, "({}, {}) does not cover {}", l, c, m);
    // ... rounded up to a multiple of the extent the layout spans, so exactly [0, m) when that
    // extent divides m.
    let span = l
        .leaves()
        .iter()
        .filter(|(s, d)| s.value() > 1 && d.value() > 0)
        .map(|(s, d)| s.value() * d.value())
        .max()
        .unwrap_or(1);
    prop_assert_eq!(both.size() % span, 0);
    prop_assert!(
        both.size() < m.max(1) + span,
        "({}, {}) overshoots {}",
        l,
        c,
        m
    );
    if m.is_multiple_of(span) {
        prop_assert_eq!(both.size(), m.max(1));
    }
    Ok(())
}

#[test]
fn complement_completes_the_codomain() {
    check(
        (layout(false, 256, INJECTIVE), 0usize..4, 1usize..=4),
        |(l, k, scale)| {
            // Multiples of the cosize, and codomains that cut through the layout.
            let m = if k == 0 {
                scale * l.cosize()
            } else {
                1 + (l.cosize() * scale * k) / 3
            };
            complement_law(&l, m, true)
        },
    );
    check((layout(false, 256, ANY), 1usize..512), |(l, m)| {
        complement_law(&l, m, false)
    });
}

/// Checks the three divides of `a` by a by-mode tiler of layouts; `exact` when the tilers are
/// aligned, so that each mode is split into a permutation of itself.
fn divide_laws(a: &Layout, tilers: &[Layout], exact: bool) -> Result<bool, TestCaseError> {
    let tiler = Tiler::by_mode(tilers.iter().cloned());
    let ld = match logical_divide(a, &tiler) {
        Ok(ld) => ld,
        Err(AlgebraError::CompositionNotAdmissible { .. })
        | Err(AlgebraError::ComplementNotAdmissible { .. }) => {
            prop_assert!(!exact, "aligned tiler refused for {}", a);
            return Ok(false);
        }
        Err(e) => return Err(TestCaseError::fail(format!("unexpected error: {e}"))),
    };
    prop_assert_eq!(ld.rank(), a.rank().max(1));
    let a_modes = a.modes();
    for (k, a_k) in a_modes.iter().enumerate() {
        let ld_k = ld.mode(k).unwrap();
        let Some(b_k) = tilers.get(k) else {
            prop_assert_eq!(&ld_k, a_k);
            continue;
        };
        // Mode k is a_k composed with (b_k, complement(b_k, size(a_k))).
        let rest = complement(b_k, a_k.size_int()).unwrap();
        let bb = Layout::from_modes([b_k.clone(), rest]).unwrap();
        prop_assert_eq!(ld_k.size(), bb.size());
        for j in 0..ld_k.size() {
            prop_assert_eq!(ld_k.call(j), a_k.call(bb.call(j)));
        }
        if exact {
            let (mut x, mut y) = (image(&ld_k), image(a_k));
            x.sort_unstable();
            y.sort_unstable();
            prop_assert_eq!(x, y, "mode {} of {} is not a permutation of {}", k, ld, a_k);
        }
    }
    // zipped and tiled divides regroup the same coordinates.
    let zd = zipped_divide(a, &tiler).unwrap();
    let td = tiled_divide(a, &tiler).unwrap();
    let tiles: Vec<Layout> = a_modes
        .iter()
        .zip(tilers)
        .map(|(a_k, b_k)| composition(a_k, b_k).unwrap())
        .collect();
    prop_assert_eq!(zd.mode(0).unwrap(), group_layouts(tiles));
    prop_assert_eq!(zd.size(), ld.size());
    prop_assert_eq!(td.size(), ld.size());
    for i in 0..ld.size() {
        let c = idx2crd(i, ld.shape()).unwrap();
        let (mut tile_c, mut rest_c) = (Vec::new(), Vec::new());
        for (k, ck) in c.modes().iter().enumerate() {
            if k < tilers.len() {
                tile_c.push(ck.mode(0).unwrap().clone());
                rest_c.push(ck.mode(1).unwrap().clone());
            } else {
                rest_c.push(ck.clone());
            }
        }
        let zc = IntTuple::Tuple(vec![group(tile_c.clone()), group(rest_c.clone())]);
        prop_assert_eq!(zd.call_coord(&zc).unwrap(), ld.call(i));
        let mut tc = vec![group(tile_c)];
        tc.extend(rest_c);
        prop_assert_eq!(td.call_coord(&IntTuple::Tuple(tc)).unwrap(), ld.call(i));
    }
    Ok(true)
}

fn group_layouts(mut modes: Vec<Layout>) -> Layout {
    if modes.len() == 1 {
        modes.remove(0)
    } else {
        Layout::from_modes(modes).unwrap()
    }
}

#[test]
fn divides_are_compositions_with_the_complement() {
    // A single layout as the tiler.
    check((layout(false, 1024, ANY), any::<u64>()), |(a, seed)| {
        let b = aligned(&a, seed, false, false);
        let tiler = Tiler::from(b.clone());
        let ld = logical_divide(&a, &tiler).map_err(|e| TestCaseError::fail(e.to_string()))?;
        let bb = Layout::from_modes([b.clone(), complement(&b, a.size_int()).unwrap()]).unwrap();
        prop_assert_eq!(ld.size(), a.size());
        for i in 0..ld.size() {
            prop_assert_eq!(ld.call(i), a.call(bb.call(i)));
        }
        prop_assert_eq!(ld.mode(0).unwrap(), composition(&a, &b).unwrap());
        prop_assert_eq!(zipped_divide(&a, &tiler).unwrap(), ld.clone());
        prop_assert_eq!(tiled_divide(&a, &tiler).unwrap(), ld);
        Ok(())
    });
    // One tiler per leading mode.
    check((layout(false, 1024, ANY), any::<u64>()), |(a, seed)| {
        let tilers = aligned_by_mode(&a, seed, false);
        divide_laws(&a, &tilers, true).map(|_| ())
    });
    // Independent random tilers: the laws hold whenever the divide is admissible.
    let admissible = Cell::new(0);
    check(
        (
            layout(false, 1024, ANY),
            prop::collection::vec(layout(false, 16, INJECTIVE), 1..=4),
        ),
        |(a, mut tilers)| {
            tilers.truncate(a.rank());
            if divide_laws(&a, &tilers, false)? {
                admissible.set(admissible.get() + 1);
            }
            Ok(())
        },
    );
    assert!(
        admissible.get() >= CASES as usize / 20,
        "only {} of {} random divides were admissible",
        admissible.get(),
        CASES
    );
}

/// The 1-D coordinates, in each top-level mode of `l`, of the index `i`; with `rank == 1` the
/// whole index.
fn per_mode(l: &Layout, rank: usize, i: usize) -> Vec<usize> {
    if rank == 1 {
        return vec![i];
    }
    let mut rest = i;
    l.modes()
        .iter()
        .map(|m| {
            let x = rest % m.size();
            rest /= m.size();
            x
        })
        .collect()
}

/// `l` at the given 1-D coordinate of each of its modes (missing trailing ones are 0).
fn at_modes(l: &Layout, xs: &[usize]) -> usize {
    l.modes().iter().zip(xs).map(|(m, &x)| m.call(x)).sum()
}

/// The extent of mode `k`, 1 past the rank.
fn extent(l: &Layout, k: usize) -> usize {
    l.mode(k).map_or(1, |m| m.size())
}

#[test]
fn products_multiply_sizes_and_stay_injective() {
    check(
        (layout(false, 64, COMPACT), layout(false, 64, COMPACT)),
        |(a, b)| {
            let lp = logical_product(&a, &b).unwrap();
            prop_assert_eq!(lp.mode(0).unwrap(), a.clone());
            let blocked = blocked_product(&a, &b).unwrap();
            let raked = raked_product(&a, &b).unwrap();
            for p in [&lp, &blocked, &raked] {
                prop_assert_eq!(p.size(), a.size() * b.size());
                prop_assert!(is_compact_bijection(p), "{} x {} = {}", a, b, p);
            }
            // Mode k of the blocked product walks mode k of the tile, then mode k of the grid of
            // tiles, whose offsets are scaled by the tile's size; the raked product walks the grid
            // first. Modes past a layout's rank have extent 1.
            let rank = a.rank().max(b.rank());
            for i in 0..blocked.size() {
                let xs = per_mode(&blocked, rank, i);
                let ta: Vec<usize> = xs
                    .iter()
                    .enumerate()
                    .map(|(k, x)| x % extent(&a, k))
                    .collect();
                let tb: Vec<usize> = xs
                    .iter()
                    .enumerate()
                    .map(|(k, x)| x / extent(&a, k))
                    .collect();
                prop_assert_eq!(
                    blocked.call(i),
                    at_modes(&a, &ta) + a.size() * at_modes(&b, &tb)
                );
            }
            for i in 0..raked.size() {
                let xs = per_mode(&raked, rank, i);
                let ta: Vec<usize> = xs
                    .iter()
                    .enumerate()
                    .map(|(k, x)| x / extent(&b, k))
                    .collect();
                let tb: Vec<usize> = xs
                    .iter()
                    .enumerate()
                    .map(|(k, x)| x % extent(&b, k))
                    .collect();
                prop_assert_eq!(
                    raked.call(i),
                    at_modes(&a, &ta) + a.size() * at_modes(&b, &tb)
                );
            }
            Ok(())
        },
    );
    // A tile with gaps: the logical product is injective whenever it is admissible.
    let admissible = Cell::new(0);
    check(
        (layout(false, 32, INJECTIVE), layout(false, 32, COMPACT)),
        |(a, b)| {
            match logical_product(&a, &b) {
                Ok(p) => {
                    admissible.set(admissible.get() + 1);
                    prop_assert_eq!(p.mode(0).unwrap(), a.clone());
                    prop_assert_eq!(p.size(), a.size() * b.size());
                    prop_assert!(is_injective(&p), "{} x {} = {}", a, b, p);
                }
                Err(AlgebraError::CompositionNotAdmissible { .. }) => {}
                Err(e) => return Err(TestCaseError::fail(e.to_string())),
            }
            Ok(())
        },
    );
    assert!(
        admissible.get() >= CASES as usize / 10,
        "only {} of {} logical products were admissible",
        admissible.get(),
        CASES
    );
}

#[test]
fn inverses_undo_layouts() {
    check(layout(false, 2048, ANY), |l| {
        let r = right_inverse(&l);
        for i in 0..r.size() {
            prop_assert_eq!(l.call(r.call(i)), i, "{} with right inverse {}", l, r);
        }
        if is_compact_bijection(&l) {
            prop_assert_eq!(r.size(), l.size());
            for i in 0..l.size() {
                prop_assert_eq!(r.call(l.call(i)), i);
            }
        }
        Ok(())
    });
    check(layout(false, 2048, INJECTIVE), |l| {
        let r = left_inverse(&l).map_err(|e| TestCaseError::fail(e.to_string()))?;
        for i in 0..l.size() {
            prop_assert_eq!(r.call(l.call(i)), i, "{} with left inverse {}", l, r);
        }
        Ok(())
    });
}

#[test]
fn static_layouts_stay_static() {
    check(
        (
            layout(true, 256, ANY),
            layout(true, 64, ANY),
            any::<u64>(),
            1usize..512,
        ),
        |(a, b, seed, m)| {
            let mut results: Vec<(&str, Layout)> = vec![
                ("coalesce", coalesce(&a)),
                ("coalesce_by_mode", coalesce_by_mode(&a)),
                ("right_inverse", right_inverse(&a)),
            ];
            let aligned_b = aligned(&a, seed, true, true);
            let tilers = aligned_by_mode(&a, seed, true);
            let by_mode = Tiler::by_mode(tilers);
            let fallible = [
                ("composition", composition(&a, &aligned_b)),
                ("composition (random)", composition(&a, &b)),
                ("composition_by_mode", composition_by_mode(&a, &by_mode)),
                ("complement", complement(&a, Int::Static(m))),
                ("left_inverse", left_inverse(&a)),
                (
                    "logical_divide",
                    logical_divide(&a, &aligned_b.clone().into()),
                ),
                ("logical_divide (by mode)", logical_divide(&a, &by_mode)),
                ("zipped_divide", zipped_divide(&a, &by_mode)),
                ("tiled_divide", tiled_divide(&a, &by_mode)),
                ("logical_product", logical_product(&a, &b)),
                ("blocked_product", blocked_product(&a, &b)),
                ("raked_product", raked_product(&a, &b)),
            ];
            prop_assert!(fallible[0].1.is_ok() && fallible[2].1.is_ok() && fallible[6].1.is_ok());
            results.extend(
                fallible
                    .into_iter()
                    .filter_map(|(n, r)| r.ok().map(|r| (n, r))),
            );
            for (name, r) in results {
                prop_assert!(
                    r.is_static(),
                    "{}: {:#} from {:#} is not static",
                    name,
                    r,
                    a
                );
            }
            Ok(())
        },
    );
}
