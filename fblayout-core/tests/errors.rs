//! Every invalid description gets a typed error whose message names the axis or extent at
//! fault, and every problem in one description is reported at once.

use fblayout_core::layout::{ElemType, LayoutError, LayoutSpec, Order, Pass, Site};

fn errors(spec: &LayoutSpec) -> Vec<LayoutError> {
    spec.build()
        .expect_err("the description is invalid")
        .into_iter()
        .collect()
}

fn one(spec: &LayoutSpec) -> LayoutError {
    let mut all = errors(spec);
    assert_eq!(all.len(), 1, "{all:?}");
    all.remove(0)
}

fn rtile() -> LayoutSpec {
    LayoutSpec::new("x").rtile().reduce_forward(["cols"])
}

#[test]
fn zero_extent_names_the_axis() {
    let e = one(&LayoutSpec::new("x").axis("rows", 0).axis("cols", 4));
    assert_eq!(e.site(), Site::Axis("rows".into()));
    assert!(
        e.to_string()
            .contains("axis `rows` of tensor `x` has extent 0"),
        "{e}"
    );
}

#[test]
fn overflowing_extent_names_the_axis_and_the_size() {
    let e = one(&LayoutSpec::new("big").axis("a", 65536).axis("b", 65536));
    assert!(
        matches!(&e, LayoutError::Overflow { axis, .. } if axis == "b"),
        "{e:?}"
    );
    assert!(e.to_string().contains("4294967296 elements"), "{e}");
    // Padding counts: 65535 rows padded to 65536 in tiles of 2 overflow too.
    let spec = LayoutSpec::new("p")
        .axis("a", 65535)
        .tile(2, true)
        .axis("b", 65537)
        .rtile()
        .reduce_forward(["a"]);
    assert!(matches!(one(&spec), LayoutError::Overflow { .. }));
}

/// A zero extent does not hide an overflow of the other axes: both are reported, each naming
/// its axis.
#[test]
fn zero_extent_and_overflow_are_both_reported() {
    let all = errors(
        &LayoutSpec::new("x")
            .axis("a", 0)
            .axis("b", 1 << 20)
            .axis("c", 1 << 20),
    );
    assert_eq!(all.len(), 2, "{all:?}");
    assert!(
        matches!(&all[0], LayoutError::ZeroExtent { axis, .. } if axis == "a"),
        "{all:?}"
    );
    assert!(
        matches!(&all[1], LayoutError::Overflow { axis, elements, .. }
            if axis == "c" && *elements == 1 << 40),
        "{all:?}"
    );
    // A product past 2^64 of 8-byte elements, behind a zero: still both.
    let all = errors(
        &LayoutSpec::new("y")
            .elem(ElemType::F64)
            .axis("a", 0)
            .axis("b", u32::MAX)
            .axis("c", u32::MAX)
            .axis("d", u32::MAX),
    );
    assert!(
        all.iter()
            .any(|e| matches!(e, LayoutError::ZeroExtent { axis, .. } if axis == "a")),
        "{all:?}"
    );
    assert!(
        all.iter()
            .any(|e| matches!(e, LayoutError::Overflow { axis, .. } if axis == "c")),
        "{all:?}"
    );
}

#[test]
fn run_time_overflow_is_caught_when_binding() {
    let x = LayoutSpec::new("x")
        .dyn_axis("seq")
        .axis("hidden", 65536)
        .build()
        .unwrap();
    let e = x.bind(&[("seq", 65536)]).unwrap_err();
    assert!(
        matches!(&e, LayoutError::Overflow { axis, .. } if axis == "hidden"),
        "{e:?}"
    );
    let e = x.bind(&[]).unwrap_err();
    assert!(
        e.to_string()
            .contains("no extent given for run-time axis `seq`"),
        "{e}"
    );
    let e = x.bind(&[("seq", 0)]).unwrap_err();
    assert!(e.to_string().contains("`seq` bound to extent 0"), "{e}");
    let e = x.bind(&[("seq", 2), ("hidden", 3)]).unwrap_err();
    assert!(
        e.to_string().contains("`hidden` has a static extent"),
        "{e}"
    );
}

#[test]
fn tile_larger_than_its_axis_is_rejected() {
    let e = one(&rtile().axis("rows", 4).axis("cols", 3).tile(4, true));
    assert_eq!(e.site(), Site::Tile("cols".into()));
    assert!(
        e.to_string()
            .contains("tile 4 of axis `cols` is larger than its extent 3"),
        "{e}"
    );
    assert!(e.to_string().contains("rejected"), "{e}");
}

#[test]
fn tile_that_does_not_divide_needs_consent_to_pad() {
    let e = one(&rtile().axis("rows", 4).axis("cols", 10).tile(4, false));
    assert!(
        e.to_string()
            .contains("tile 4 does not divide extent 10 of axis `cols`"),
        "{e}"
    );
    assert!(e.to_string().contains("padded to 12"), "{e}");
}

#[test]
fn padding_with_consent_counts_in_the_buffer() {
    // 4 rows of 10 columns padded to 12 by a tile of 4: 4 × 12 elements.
    let ok = rtile()
        .axis("rows", 4)
        .axis("cols", 10)
        .tile(4, true)
        .build()
        .unwrap();
    assert_eq!(ok.static_len(), Some(48));
}

#[test]
fn zero_tile_and_tiles_on_plain_layouts() {
    let e = one(&rtile().axis("cols", 8).tile(0, false));
    assert!(matches!(e, LayoutError::ZeroTile { .. }), "{e:?}");
    let e = one(&LayoutSpec::new("x").axis("cols", 8).tile(4, false));
    assert!(
        e.to_string().contains("tiles belong to `rtile` layouts"),
        "{e}"
    );
}

#[test]
fn unknown_and_repeated_reduction_axes() {
    let spec = LayoutSpec::new("x")
        .axis("rows", 4)
        .axis("cols", 4)
        .rtile()
        .reduce_forward(["cols", "cols"])
        .reduce_backward(["batch"]);
    let all = errors(&spec);
    assert_eq!(all.len(), 2, "both problems are reported: {all:?}");
    assert!(
        all.iter()
            .any(|e| e.site() == Site::Reduction(Pass::Forward, "cols".into()))
    );
    let unknown = all
        .iter()
        .find(|e| e.site() == Site::Reduction(Pass::Backward, "batch".into()))
        .unwrap();
    assert!(
        unknown
            .to_string()
            .contains("doesn't declare (its axes: rows, cols)"),
        "{unknown}"
    );
}

#[test]
fn rtile_needs_something_to_tile() {
    let e = one(&LayoutSpec::new("x").axis("rows", 4).order(Order::RTile));
    assert!(
        matches!(e, LayoutError::RTileWithoutReduction { .. }),
        "{e:?}"
    );
}

#[test]
fn names_are_checked() {
    let spec = LayoutSpec::new("fn")
        .axis("rows", 4)
        .axis("rows", 2)
        .axis("u32", 2)
        .axis("a-b", 1);
    let all = errors(&spec);
    assert_eq!(all.len(), 4, "{all:?}");
    assert!(
        all.iter()
            .any(|e| matches!(e, LayoutError::DuplicateAxis { axis, .. } if axis == "rows"))
    );
    assert!(
        all.iter()
            .any(|e| e.to_string().contains("tensor name `fn`"))
    );
    assert!(
        all.iter()
            .any(|e| e.to_string().contains("axis name `u32`"))
    );
    assert!(
        all.iter()
            .any(|e| e.to_string().contains("axis name `a-b`"))
    );
    let e = one(&LayoutSpec::new("x").dyn_axis("seq").axis("seq_len", 2));
    assert!(matches!(e, LayoutError::NameClash { .. }), "{e:?}");
    assert!(matches!(
        one(&LayoutSpec::new("x")),
        LayoutError::NoAxes { .. }
    ));
}

#[test]
fn element_types_wgsl_cannot_store_are_refused() {
    for elem in [ElemType::F64, ElemType::I8, ElemType::I16, ElemType::U64] {
        let e = one(&LayoutSpec::new("x").axis("n", 4).elem(elem));
        assert_eq!(e.site(), Site::Elem);
        assert!(e.to_string().contains(elem.name()), "{e}");
    }
    assert!(
        LayoutSpec::new("x")
            .axis("n", 4)
            .elem(ElemType::F16)
            .build()
            .is_ok()
    );
}

#[test]
fn view_errors_name_the_view_and_axis() {
    let x = LayoutSpec::new("x")
        .dyn_axis("seq")
        .axis("hidden", 768)
        .build()
        .unwrap();
    let v = x.view().named("v").unwrap();
    let e = v.transpose("seq", "heads").unwrap_err();
    assert_eq!(
        e.site(),
        Site::View {
            view: "v".into(),
            axis: Some("heads".into())
        }
    );
    assert!(e.to_string().contains("view `v` names axis `heads`"), "{e}");
    let e = v.permute(&["hidden", "hidden"]).unwrap_err();
    assert!(matches!(e, LayoutError::NotAPermutation { .. }), "{e:?}");
    let e = v
        .split("hidden", &[("heads", Some(12)), ("head_dim", Some(32))])
        .unwrap_err();
    assert!(
        e.to_string().contains("the parts multiply to 384, not 768"),
        "{e}"
    );
    let e = v
        .split("hidden", &[("heads", Some(7)), ("head_dim", None)])
        .unwrap_err();
    assert!(e.to_string().contains("768 is not a multiple of 7"), "{e}");
    let e = v
        .split("seq", &[("chunks", Some(4)), ("inner", Some(16))])
        .unwrap_err();
    assert!(e.to_string().contains("one part must be inferred"), "{e}");
    let e = v.merge(&["hidden", "seq"], "tokens").unwrap_err();
    assert!(matches!(e, LayoutError::MergeNotAdjacent { .. }), "{e:?}");
    let e = v.slice("hidden", 700, 100).unwrap_err();
    assert!(
        e.to_string().contains("700..800, outside its extent 768"),
        "{e}"
    );
    let e = v.broadcast("hidden", 2, 0).unwrap_err();
    assert!(matches!(e, LayoutError::DuplicateViewAxis { .. }), "{e:?}");
    assert!(x.view().named("var").is_err());
}

#[test]
fn run_time_view_requirements_are_checked_when_binding() {
    let x = LayoutSpec::new("x")
        .dyn_axis("seq")
        .axis("hidden", 8)
        .build()
        .unwrap();
    let chunks = x
        .view()
        .named("c")
        .unwrap()
        .split("seq", &[("chunk", None), ("pos", Some(16))])
        .unwrap();
    assert_eq!(chunks.bind(&[("seq", 64)]).unwrap().shape(), [4, 16, 8]);
    let e = chunks.bind(&[("seq", 100)]).unwrap_err();
    assert!(
        e.to_string()
            .contains("view `c` splits `seq` (seq_len) into 16 parts"),
        "{e}"
    );
    let window = x.view().named("w").unwrap().slice("seq", 8, 8).unwrap();
    assert!(window.bind(&[("seq", 16)]).is_ok());
    let e = window.bind(&[("seq", 10)]).unwrap_err();
    assert!(
        e.to_string()
            .contains("slices `seq` up to 16, but the extent is 10"),
        "{e}"
    );
}
