//! Wrong answers and panics that an independent check of the public API found, each pinned by
//! a test that failed before its fix. What each test expects comes from the documentation
//! (the book and the rustdoc), not from the code.

use fblayout_core::layout::{LayoutError, LayoutSpec};

type Result = std::result::Result<(), Box<dyn std::error::Error>>;

/// A split of a run-time axis must divide exactly, even when a merge multiplies the divisor
/// back out (offsets were silently wrong).
#[test]
fn a_split_then_merged_is_still_checked_at_bind() -> Result {
    let x = LayoutSpec::new("x").dyn_axis("n").build()?;
    let v = x
        .view()
        .split("n", &[("a", None), ("b", Some(2))])?
        .merge(&["a", "b"], "m")?;
    let err = v.bind(&[("n", 5)]).unwrap_err();
    assert!(err.to_string().contains("splits `n`"), "{err}");
    let ok = v.bind(&[("n", 6)])?;
    assert_eq!(ok.shape(), [6]);
    for i in 0..6 {
        assert_eq!(
            ok.offset(&[i]),
            Some(i),
            "a split then merge reads in place"
        );
    }
    Ok(())
}

/// Every view axis must fit the u32 coordinate space (the GPU mask wrapped to 0).
#[test]
fn a_view_axis_longer_than_u32_is_refused() -> Result {
    let x = LayoutSpec::new("x").dyn_axis("n").build()?;
    let v = x.view().broadcast("r", 2, 0)?.merge(&["r", "n"], "m")?;
    let err = v.bind(&[("n", 1 << 31)]).unwrap_err();
    assert!(
        matches!(&err, LayoutError::ViewAxisTooLong { axis, extent, .. }
            if axis == "m" && *extent == 1u128 << 32),
        "{err:?}"
    );
    assert!(v.bind(&[("n", (1 << 31) - 1)]).is_ok());
    // Statically, the merge itself is refused (its literal would not parse as WGSL).
    let s = LayoutSpec::new("s").axis("n", 1 << 31).build()?;
    let err = s
        .view()
        .broadcast("r", 2, 0)?
        .merge(&["r", "n"], "m")
        .unwrap_err();
    assert!(
        matches!(err, LayoutError::ViewAxisTooLong { .. }),
        "{err:?}"
    );
    Ok(())
}

/// Parts whose product overflows u64 are a reshape mismatch, not a panic.
#[test]
fn split_parts_overflowing_u64_are_an_error() -> Result {
    let x = LayoutSpec::new("x").axis("n", 8).build()?;
    let m = u32::MAX;
    let err = x
        .view()
        .split("n", &[("a", Some(m)), ("b", Some(m)), ("c", Some(m))])
        .unwrap_err();
    assert!(
        matches!(err, LayoutError::ReshapeMismatch { .. }),
        "{err:?}"
    );
    Ok(())
}

/// Three broadcasts of u32::MAX: more coordinates than u64 counts, refused when bound.
#[test]
fn huge_broadcasts_are_refused_at_bind_not_panicking() -> Result {
    let x = LayoutSpec::new("x").axis("n", 2).build()?;
    let m = u32::MAX;
    let v = x
        .view()
        .broadcast("a", m, 0)?
        .broadcast("b", m, 0)?
        .broadcast("c", m, 0)?;
    let err = v.bind(&[]).unwrap_err();
    assert!(err.to_string().contains("more than 2^64"), "{err}");
    Ok(())
}

/// `build()` reports every problem, the size included, even when others exist.
#[test]
fn overflow_is_reported_beside_other_errors() {
    let errors: Vec<LayoutError> = LayoutSpec::new("x")
        .axis("a", 65536)
        .axis("b", 65536)
        .axis("a", 0)
        .build()
        .unwrap_err()
        .into_iter()
        .collect();
    assert!(
        errors
            .iter()
            .any(|e| matches!(e, LayoutError::Overflow { .. })),
        "{errors:?}"
    );
    assert!(
        errors
            .iter()
            .any(|e| matches!(e, LayoutError::DuplicateAxis { .. })),
        "{errors:?}"
    );
}

/// Padding is never silent: a default tile divides its static extent.
#[test]
fn default_tiles_never_pad() -> Result {
    let x = LayoutSpec::new("x")
        .axis("rows", 30)
        .axis("cols", 6)
        .rtile()
        .reduce_forward(["cols"])
        .reduce_backward(["rows"])
        .build()?;
    assert_eq!(x.static_len(), Some(180));
    assert_eq!(x.axes()[0].tile, 2, "the largest of 4, 2, 1 dividing 30");
    assert_eq!(x.axes()[1].tile, 2, "the largest of 4, 2, 1 dividing 6");
    Ok(())
}

/// A run-time extent its tile doesn't divide is padded only with consent.
#[test]
fn run_time_padding_needs_consent() -> Result {
    let strict = LayoutSpec::new("x")
        .dyn_axis("t")
        .tile(4, false)
        .axis("h", 4)
        .rtile()
        .reduce_backward(["t"])
        .build()?;
    let err = strict.bind(&[("t", 2)]).unwrap_err();
    assert!(
        err.to_string().contains("declare the tile with `pad`"),
        "{err}"
    );
    assert_eq!(strict.bind(&[("t", 8)])?.len(), 32);
    let padded = LayoutSpec::new("x")
        .dyn_axis("t")
        .tile(4, true)
        .axis("h", 4)
        .rtile()
        .reduce_backward(["t"])
        .build()?;
    assert_eq!(
        padded.bind(&[("t", 2)])?.len(),
        16,
        "2 tokens padded to one tile of 4"
    );
    Ok(())
}

#[test]
fn a_tile_before_any_axis_is_reported() {
    let errors: Vec<LayoutError> = LayoutSpec::new("x")
        .tile(4, true)
        .axis("a", 8)
        .build()
        .unwrap_err()
        .into_iter()
        .collect();
    assert!(
        errors
            .iter()
            .any(|e| matches!(e, LayoutError::TileBeforeAxis { .. })),
        "{errors:?}"
    );
}

#[test]
fn broadcast_past_the_end_is_refused() -> Result {
    let x = LayoutSpec::new("x").axis("a", 2).axis("b", 3).build()?;
    let err = x.view().broadcast("r", 4, 99).unwrap_err();
    assert!(
        matches!(
            err,
            LayoutError::BroadcastPosition {
                at: 99,
                rank: 2,
                ..
            }
        ),
        "{err:?}"
    );
    assert_eq!(
        x.view().broadcast("r", 4, 2)?.axes()[2].name,
        "r",
        "appending is position 2"
    );
    Ok(())
}

#[test]
fn an_empty_slice_says_so() -> Result {
    let x = LayoutSpec::new("x").axis("a", 4).build()?;
    let err = x.view().slice("a", 2, 0).unwrap_err();
    assert!(matches!(err, LayoutError::EmptySlice { .. }), "{err:?}");
    assert!(err.to_string().contains("length 0"), "{err}");
    Ok(())
}

#[test]
fn a_part_named_like_an_extent_parameter_names_the_clash() -> Result {
    let x = LayoutSpec::new("x").dyn_axis("n").build()?;
    let err = x
        .view()
        .split("n", &[("n_len", None), ("b", Some(2))])
        .unwrap_err();
    assert!(
        matches!(&err, LayoutError::ViewNameClash { extent_of, .. } if extent_of == "n"),
        "{err:?}"
    );
    Ok(())
}

#[test]
fn reductions_belong_to_rtile() {
    let errors: Vec<LayoutError> = LayoutSpec::new("x")
        .axis("a", 8)
        .reduce_forward(["a"])
        .build()
        .unwrap_err()
        .into_iter()
        .collect();
    assert!(
        errors
            .iter()
            .any(|e| matches!(e, LayoutError::ReductionWithoutRTile { .. })),
        "{errors:?}"
    );
}

/// A view that reorders elements is not a permutation of the tensor's axes, even where it keeps
/// every coordinate that a probe grid looks at (it was classified `Free`). Splitting `m` into
/// `(h, x, y, l)` and merging it back with `x` and `y` swapped keeps `0..4`, the middle and the
/// last two coordinates, and moves almost every other element.
#[test]
fn a_reordering_split_and_merge_is_not_classified_as_free() -> Result {
    use fblayout_core::layout::classify_conversion;
    let x = LayoutSpec::new("x").axis("m", 2 * 64 * 64 * 4).build()?;
    let parts = [
        ("h", Some(2)),
        ("x", Some(64)),
        ("y", Some(64)),
        ("l", Some(4)),
    ];
    let v = x
        .view()
        .named("swapped")?
        .split("m", &parts)?
        .permute(&["h", "y", "x", "l"])?
        .merge(&["h", "y", "x", "l"], "m")?;
    let bound = v.bind(&[])?;
    // Coordinate x = 1 (m = 256) reads the element at y = 1 (offset 4): not in place.
    assert_eq!(bound.offset(&[256]), Some(4));
    let err = classify_conversion(&v, &x.view(), &[]).unwrap_err();
    assert!(err.to_string().contains("permute/transpose"), "{err}");
    Ok(())
}
