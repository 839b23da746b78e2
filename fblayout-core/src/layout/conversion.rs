//! Conversion classification: what it costs to go from one layout of a tensor to another.
//!
//! Given two [`View`]s of the same logical tensor — the layout the data is in (`src`) and the
//! layout a consumer wants (`dst`) — [`classify_conversion`] says which [`Conversion`] turns
//! one into the other. The planner prices layout choices with it; Triton's linear layouts do
//! the same for its layout conversions.
//!
//! # What the classes mean
//!
//! Everything is defined over the **padded coordinate space**: every coordinate the buffers
//! hold, padding included (`0 ≤ c_a < P_a` with `P_a` the extent of axis `a` padded up to its
//! tile). Both sides must therefore have the same axes in the same (view) order, the same
//! logical extent and the same padded extent per axis, and the same element type; the buffers
//! then hold the same `N = Π P_a` elements. Writing `src(c)` and `dst(c)` for the offsets of
//! coordinate `c` in each buffer:
//!
//! * [`Conversion::Free`]: `src(c) == dst(c)` for every `c`. The two layouts are the same
//!   function, so a kernel can read one buffer through the other's layout; nothing moves.
//! * [`Conversion::InTile`] `{ block }`: not free, but every coordinate stays in the same
//!   aligned block of `block` elements (`src(c) / block == dst(c) / block`), where `block` is
//!   the smallest of the two layouts' tile sizes ([`TensorLayout::tile_elems`], 1 excluded)
//!   for which this holds. The data only moves inside a tile: a permutation in registers or
//!   workgroup memory, no global round trip.
//! * [`Conversion::GlobalCopy`] `{ bytes }`: anything else. A copy kernel reads one buffer and
//!   writes the other: `bytes = (len(src) + len(dst)) × element size`, lengths in elements,
//!   padding included.
//!
//! # How it is computed: the algebra
//!
//! Each side becomes a CuTe layout ([`crate::algebra::Layout`]) with one mode per view axis:
//! the tensor's [`TensorLayout::to_cute`] with its modes reordered to the view's coordinate
//! order (a permuted view with order `perm` has coordinate `i` = tensor axis `perm[i]`). A
//! mode's 1-D coordinate is the padded axis coordinate itself (an R-Tile mode `(t, G)` reads
//! `c % t` then `c / t`), so both layouts are functions of the same 1-D index over `[0, N)`.
//!
//! * Free ⇔ `coalesce(A)` and `coalesce(B)` have the same leaves (by value). Coalescing is a
//!   canonical form for these injective layouts: it drops size-1 modes and merges contiguous
//!   neighbours, and two coalesced injective layouts are the same function exactly when their
//!   leaves agree.
//! * InTile: both layouts are compact bijections of `[0, N)` onto `[0, N)`, so
//!   `conv = B ∘ A⁻¹` (`composition(B, right_inverse(A))`) is the permutation of offsets that
//!   the conversion performs. It keeps blocks of `block` elements exactly when, in
//!   `logical_divide(conv, block:1) = (T, R)`, the tile mode `T` stays inside `[0, block)`
//!   (its cosize is at most `block`) and the rest mode `R` is `k ↦ k·block`.
//!
//! **Fallback.** When the algebra refuses a step (a composition or division that is not
//! admissible, for example tiles that do not nest, such as 3 and 2) the block test falls back
//! to an exact element-by-element comparison of `A(i) / block` and `B(i) / block` over the
//! whole padded space (`N` evaluations; exact, but linear in the buffer size).
//!
//! # What is refused
//!
//! A [`LayoutError::Bind`] naming the source tensor, with a detail that says what is wrong:
//! bad run-time extents (missing, zero, twice, unknown axis, overflow), different axes, order,
//! extents or padding, different element types, and views that are not a pure reordering of
//! the tensor's axes. Identity and permute/transpose views are supported; split, merge, slice
//! and broadcast change the coordinate space, so the two sides would not share one, and are
//! refused. A view is read as a permutation from its own steps: every step must be a permute
//! or a transpose, which keep the tensor's axes (by name), so the permutation is the view's
//! axis order.

use super::error::LayoutError;
use super::spec::Extent;
use super::step::ViewStep;
use super::tensor::TensorLayout;
use super::view::View;
use crate::algebra::{Layout, Tiler, coalesce, composition, logical_divide, right_inverse};

/// The class of a conversion between two layouts of one tensor (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Conversion {
    /// Every coordinate has the same offset in both: nothing moves.
    Free,
    /// Elements move only inside aligned blocks of `block` elements (a tile): a permutation in
    /// registers or workgroup memory.
    InTile {
        /// The smallest tile size of the two layouts whose aligned blocks every element stays in.
        block: u64,
    },
    /// A copy through global memory.
    GlobalCopy {
        /// The bytes it moves: both buffers' lengths (padding included) times the element size.
        bytes: u64,
    },
}

/// Classifies the conversion from the layout `src` reads to the one `dst` reads, with the
/// run-time extents of either tensor bound (`(axis, extent)` pairs).
///
/// Both views must have the same axes in the same order, the same logical and padded extents
/// and the same element type; see the module docs for the classes and what is refused.
pub fn classify_conversion(
    src: &View,
    dst: &View,
    extents: &[(&str, u32)],
) -> Result<Conversion, LayoutError> {
    let tensor = src.layout().name().to_owned();
    let fail = |detail: String| LayoutError::Bind {
        tensor: tensor.clone(),
        detail,
    };
    for (name, _) in extents {
        let dynamic_in = |l: &TensorLayout| l.dynamic_axes().any(|a| a.name == *name);
        if !dynamic_in(src.layout()) && !dynamic_in(dst.layout()) {
            return Err(fail(format!(
                "classifying a conversion: `{name}` is a run-time axis of neither `{}` nor `{}`",
                src.layout().name(),
                dst.layout().name()
            )));
        }
    }
    let a = Side::new(src, extents)?;
    let b = Side::new(dst, extents)?;
    let names = |s: &Side| s.axes.iter().map(|x| x.0.clone()).collect::<Vec<_>>();
    if names(&a) != names(&b) {
        return Err(fail(format!(
            "classifying a conversion: `{}` reads axes ({}) but `{}` reads ({}); both must \
             read the same axes in the same order",
            src.name(),
            names(&a).join(", "),
            dst.name(),
            names(&b).join(", ")
        )));
    }
    for (x, y) in a.axes.iter().zip(&b.axes) {
        if x.1 != y.1 || x.2 != y.2 {
            return Err(fail(format!(
                "classifying a conversion: axis `{}` has extent {} padded to {} in `{}` but \
                 extent {} padded to {} in `{}`; the padded coordinate spaces must agree",
                x.0,
                x.1,
                x.2,
                src.name(),
                y.1,
                y.2,
                dst.name()
            )));
        }
    }
    let (ea, eb) = (src.layout().elem(), dst.layout().elem());
    if ea != eb {
        return Err(fail(format!(
            "classifying a conversion: `{}` holds {} but `{}` holds {}; a change of element \
             type is a cast, not a layout conversion",
            src.name(),
            ea.name(),
            dst.name(),
            eb.name()
        )));
    }
    Ok(classify_cute(
        &a.cute,
        &b.cute,
        &tile_candidates(src.layout(), dst.layout()),
        u64::from(ea.size_bytes()),
    ))
}

/// The padded extent of every axis of `view`, in the view's order, with the run-time
/// `extents` bound: two views [`classify_conversion`] can compare have the same.
pub fn padded_extents(view: &View, extents: &[(&str, u32)]) -> Result<Vec<u64>, LayoutError> {
    Ok(Side::new(view, extents)?
        .axes
        .into_iter()
        .map(|(_, _, padded)| padded)
        .collect())
}

/// [`classify_conversion`] for the two tensors read as they are declared.
pub fn classify_layouts(
    src: &TensorLayout,
    dst: &TensorLayout,
    extents: &[(&str, u32)],
) -> Result<Conversion, LayoutError> {
    classify_conversion(&src.view(), &dst.view(), extents)
}

/// The tile sizes to try for [`Conversion::InTile`], smallest first, 1 excluded.
fn tile_candidates(a: &TensorLayout, b: &TensorLayout) -> Vec<u64> {
    let mut blocks: Vec<u64> = [a.tile_elems(), b.tile_elems()]
        .into_iter()
        .filter(|&t| t > 1)
        .collect();
    blocks.sort_unstable();
    blocks.dedup();
    blocks
}

/// The classification proper, on two layouts of the same padded domain `[0, N)`, both compact.
fn classify_cute(a: &Layout, b: &Layout, blocks: &[u64], elem_bytes: u64) -> Conversion {
    let leaves = |l: &Layout| -> Vec<(usize, usize)> {
        coalesce(l)
            .leaves()
            .into_iter()
            .map(|(s, d)| (s.value(), d.value()))
            .collect()
    };
    if leaves(a) == leaves(b) {
        return Conversion::Free;
    }
    let conv = composition(b, &right_inverse(a)).ok();
    for &block in blocks {
        let keeps = conv
            .as_ref()
            .and_then(|c| keeps_blocks_algebra(c, block))
            .unwrap_or_else(|| keeps_blocks_exact(a, b, block));
        if keeps {
            return Conversion::InTile { block };
        }
    }
    let n = a.size() as u64 + b.size() as u64;
    Conversion::GlobalCopy {
        bytes: n.saturating_mul(elem_bytes),
    }
}

/// Whether the permutation `conv` of `[0, N)` keeps every aligned block of `block` elements,
/// read off `logical_divide(conv, block:1) = (T, R)`: `T` inside `[0, block)`, `R(k) = k·block`.
/// `None` when the algebra cannot tell (an inadmissible division).
fn keeps_blocks_algebra(conv: &Layout, block: u64) -> Option<bool> {
    let n = conv.size() as u64;
    if block == 0 || !n.is_multiple_of(block) {
        return None;
    }
    let b = usize::try_from(block).ok()?;
    let tiler = Layout::leaf(
        crate::algebra::Int::Static(b),
        crate::algebra::Int::Static(1),
    )
    .ok()?;
    let divided = logical_divide(conv, &Tiler::Layout(tiler)).ok()?;
    let modes = divided.modes();
    let (tile, rest) = match modes.as_slice() {
        [t, r] => (t, r),
        _ => return None,
    };
    if tile.size() != b {
        return None;
    }
    if tile.cosize() > b {
        return Some(false);
    }
    let rest = coalesce(rest);
    let rest_ok = rest.size() == 1
        || rest
            .leaves()
            .iter()
            .map(|(s, d)| (s.value(), d.value()))
            .eq([(rest.size(), b)]);
    Some(rest_ok)
}

/// The exact fallback: every 1-D index `i` of the padded space has `A(i)` and `B(i)` in the same
/// aligned block.
fn keeps_blocks_exact(a: &Layout, b: &Layout, block: u64) -> bool {
    let block = block as usize;
    (0..a.size()).all(|i| a.call(i) / block == b.call(i) / block)
}

/// One side of a conversion: its axes in view order (name, logical extent, padded extent) and
/// its CuTe layout over those coordinates.
struct Side {
    axes: Vec<(String, u64, u64)>,
    cute: Layout,
}

impl Side {
    fn new(view: &View, extents: &[(&str, u32)]) -> Result<Self, LayoutError> {
        let layout = view.layout();
        let fail = |detail: String| LayoutError::Bind {
            tensor: layout.name().to_owned(),
            detail,
        };
        let own: Vec<(&str, u32)> = extents
            .iter()
            .copied()
            .filter(|(n, _)| layout.dynamic_axes().any(|a| a.name == *n))
            .collect();
        let perm = permutation_of(view)?;
        let cute = layout.to_cute(&own)?;
        let modes = cute.modes();
        if modes.len() != layout.rank() {
            return Err(fail(format!(
                "as a CuTe layout it has {} modes for {} axes",
                modes.len(),
                layout.rank()
            )));
        }
        let cute = Layout::from_modes(perm.iter().map(|&i| modes[i].clone())).map_err(|e| {
            fail(format!(
                "reordering its CuTe modes for view `{}`: {e}",
                view.name()
            ))
        })?;
        let axes = perm
            .iter()
            .map(|&i| {
                let axis = &layout.axes()[i];
                let n = match axis.extent {
                    Extent::Static(n) => n,
                    Extent::Dynamic => own
                        .iter()
                        .find(|(a, _)| *a == axis.name)
                        .map_or(1, |&(_, v)| v),
                };
                (axis.name.clone(), u64::from(n), axis.padded(u64::from(n)))
            })
            .collect();
        Ok(Self { axes, cute })
    }
}

/// The tensor axis each view coordinate reads, if every step of the view reorders axes.
fn permutation_of(view: &View) -> Result<Vec<usize>, LayoutError> {
    let layout = view.layout();
    let reorders =
        |s: &&ViewStep<String>| matches!(s, ViewStep::Permute(_) | ViewStep::Transpose(..));
    if let Some(step) = view.steps().find(|s| !reorders(s)) {
        return Err(LayoutError::Bind {
            tensor: layout.name().to_owned(),
            detail: format!(
                "classifying a conversion through view `{}`: its step `{step}` does not only \
                 reorder axes; only identity and permute/transpose views can be compared, \
                 because split, merge, slice and broadcast change the coordinate space",
                view.name()
            ),
        });
    }
    Ok(view
        .axes()
        .iter()
        .map(|a| {
            layout
                .axis_index(&a.name)
                .expect("a view whose steps only reorder axes has the tensor's axes")
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layout::{LayoutSpec, Order};

    fn sq(order: Order) -> TensorLayout {
        LayoutSpec::new("x")
            .axis("m", 8)
            .axis("n", 8)
            .order(order)
            .build()
            .expect("valid")
    }

    fn rtile(forward: &str) -> TensorLayout {
        LayoutSpec::new("x")
            .axis("m", 8)
            .tile(4, false)
            .axis("n", 8)
            .tile(4, false)
            .rtile()
            .reduce_forward([forward])
            .build()
            .expect("valid")
    }

    #[test]
    fn a_layout_with_itself_is_free() {
        for l in [sq(Order::RowMajor), sq(Order::ColMajor), rtile("n")] {
            assert_eq!(classify_layouts(&l, &l, &[]).unwrap(), Conversion::Free);
        }
    }

    #[test]
    fn row_major_to_rtile_is_a_global_copy() {
        let c = classify_layouts(&sq(Order::RowMajor), &rtile("n"), &[]).unwrap();
        assert_eq!(c, Conversion::GlobalCopy { bytes: 2 * 64 * 4 });
    }

    #[test]
    fn same_tiles_other_in_tile_order_stay_in_the_tile() {
        let c = classify_layouts(&rtile("n"), &rtile("m"), &[]).unwrap();
        assert_eq!(c, Conversion::InTile { block: 16 });
    }

    #[test]
    fn tiles_that_do_not_nest_but_same_offsets_are_free() {
        let tiled = |t: u32| {
            LayoutSpec::new("v")
                .axis("k", 6)
                .tile(t, false)
                .rtile()
                .reduce_forward(["k"])
                .build()
                .expect("valid")
        };
        let c = classify_layouts(&tiled(3), &tiled(2), &[]).unwrap();
        assert_eq!(c, Conversion::Free);
    }

    #[test]
    fn transposed_column_major_matches_row_major() {
        let spec = |o: Order| {
            LayoutSpec::new("x")
                .axis("m", 3)
                .axis("n", 5)
                .order(o)
                .build()
                .expect("valid")
        };
        // Column-major [n, m] transposed reads (m, n) with n contiguous: row-major [m, n].
        let col = LayoutSpec::new("y")
            .axis("n", 5)
            .axis("m", 3)
            .order(Order::ColMajor)
            .build()
            .expect("valid");
        let t = col.view().transpose("n", "m").unwrap();
        let row = spec(Order::RowMajor).view();
        assert_eq!(
            classify_conversion(&row, &t, &[]).unwrap(),
            Conversion::Free
        );
        // The untransposed column-major [m, n] is a copy.
        let c = classify_layouts(&spec(Order::RowMajor), &spec(Order::ColMajor), &[]).unwrap();
        assert_eq!(c, Conversion::GlobalCopy { bytes: 2 * 15 * 4 });
    }

    #[test]
    fn mismatches_are_refused() {
        let other = LayoutSpec::new("y")
            .axis("m", 8)
            .axis("n", 4)
            .build()
            .expect("valid");
        let err = classify_layouts(&sq(Order::RowMajor), &other, &[]).unwrap_err();
        assert!(err.to_string().contains("axis `n` has extent 8"), "{err}");
        let t = sq(Order::RowMajor).view().transpose("m", "n").unwrap();
        let err = classify_conversion(&sq(Order::RowMajor).view(), &t, &[]).unwrap_err();
        assert!(err.to_string().contains("same order"), "{err}");
        let err =
            classify_layouts(&sq(Order::RowMajor), &sq(Order::RowMajor), &[("q", 3)]).unwrap_err();
        assert!(
            err.to_string().contains("run-time axis of neither"),
            "{err}"
        );
        let dynamic = LayoutSpec::new("d")
            .dyn_axis("m")
            .axis("n", 8)
            .build()
            .unwrap();
        let err = classify_layouts(&dynamic, &dynamic, &[]).unwrap_err();
        assert!(err.to_string().contains("no extent given"), "{err}");
        let err = classify_layouts(&dynamic, &dynamic, &[("m", 0)]).unwrap_err();
        assert!(err.to_string().contains("extent 0"), "{err}");
        let sliced = sq(Order::RowMajor).view().slice("n", 1, 7).unwrap();
        let err = classify_conversion(&sliced, &sliced, &[]).unwrap_err();
        assert!(err.to_string().contains("permute/transpose"), "{err}");
        let split = sq(Order::RowMajor)
            .view()
            .split("n", &[("a", Some(2)), ("b", Some(4))])
            .unwrap()
            .permute(&["m", "b", "a"])
            .unwrap()
            .merge(&["b", "a"], "n")
            .unwrap();
        let err = classify_conversion(&split, &split, &[]).unwrap_err();
        assert!(
            err.to_string()
                .contains("its step `split(n => a = 2, b = 4)` does not only reorder axes"),
            "{err}"
        );
    }

    #[test]
    fn padding_must_agree() {
        let padded = |t: u32| {
            LayoutSpec::new("p")
                .axis("k", 6)
                .tile(t, true)
                .rtile()
                .reduce_forward(["k"])
                .build()
                .expect("valid")
        };
        let err = classify_layouts(&padded(4), &padded(3), &[]).unwrap_err();
        assert!(err.to_string().contains("padded to 8"), "{err}");
    }

    #[test]
    fn tiles_that_do_not_nest_fall_back_to_the_exact_comparison() {
        // Axis 0 (extent 6) in tiles of 3 against tiles of 2: B ∘ A⁻¹ is not admissible.
        let a: Layout = "((3,2),(2,2)):((1,12),(3,6))".parse().unwrap();
        let b: Layout = "((2,3),(2,2)):((1,8),(2,4))".parse().unwrap();
        assert!(composition(&b, &right_inverse(&a)).is_err());
        let brute = |block: usize| (0..24).all(|i| a.call(i) / block == b.call(i) / block);
        let want = [4u64, 6]
            .into_iter()
            .find(|&k| brute(k as usize))
            .map_or(Conversion::GlobalCopy { bytes: 2 * 24 * 4 }, |block| {
                Conversion::InTile { block }
            });
        assert_eq!(classify_cute(&a, &b, &[4, 6], 4), want);
        assert_eq!(want, Conversion::GlobalCopy { bytes: 192 });
        // Blocks of 24 (the whole buffer) are kept trivially, and found by the fallback.
        assert!(brute(24));
        assert_eq!(
            classify_cute(&a, &b, &[4, 24], 4),
            Conversion::InTile { block: 24 }
        );
    }
}
