//! Tests of typed coordinates and declarations.

use std::collections::HashSet;

use super::constants::axis_consts;
use super::coord::bindings;
use super::declare::ViewSpec;
use super::*;
use crate::layout::{ElemType, LayoutError, LayoutSpec, Pass, Site, View, ViewStep};
use crate::shader::WgslModule;

#[derive(Clone, Copy)]
struct Seq;
impl Axis for Seq {
    const NAME: &'static str = "Seq";
}

#[derive(Clone, Copy)]
struct Hidden;
impl Axis for Hidden {
    const NAME: &'static str = "Hidden";
}

/// A hand-written coordinate of `x` [seq (dyn), hidden = 8], what the derive generates.
#[derive(Clone, Copy, Debug, PartialEq)]
struct X {
    seq: Ix<Seq>,
    hidden: Ix<Hidden>,
}

#[derive(Clone, Copy, Debug)]
struct XExtents {
    seq: usize,
}

impl Extents for XExtents {
    const AXES: &'static [&'static str] = &["seq"];
    fn values(&self) -> Vec<usize> {
        vec![self.seq]
    }
}

fn x_spec() -> LayoutSpec {
    LayoutSpec::new("x")
        .dyn_axis("seq")
        .axis("hidden", 8)
        .tile(4, false)
        .rtile()
        .reduce_forward(["hidden"])
}

impl Coord for X {
    type Tensor = X;
    type Indices = [usize; 2];
    type Shape = (Len<Seq>, Len<Hidden>);
    const NAME: &'static str = "x";
    const AXES: &'static [&'static str] = &["seq", "hidden"];
    const OFFSET_FN: &'static str = "x_offset";
    const IN_BOUNDS_FN: &'static str = "x_in_bounds";
    fn indices(&self) -> [usize; 2] {
        [self.seq.get(), self.hidden.get()]
    }
    fn from_indices(i: &[usize]) -> Option<Self> {
        match *i {
            [s, h] => Some(Self {
                seq: Ix::of(Seq, s),
                hidden: Ix::of(Hidden, h),
            }),
            _ => None,
        }
    }
    fn offset(&self, _: XExtents) -> usize {
        (self.seq.get() * 2 + self.hidden.get() / 4) * 4 + self.hidden.get() % 4
    }
    fn in_bounds(&self, e: XExtents) -> bool {
        self.seq.get() < e.seq && self.hidden.get() < 8
    }
    fn shape(e: XExtents) -> (Len<Seq>, Len<Hidden>) {
        (Len::of(Seq, e.seq), Len::of(Hidden, 8))
    }
    fn dims(e: XExtents) -> [usize; 2] {
        [e.seq, 8]
    }
    fn view() -> &'static View {
        &Self::descriptor().identity
    }
}

impl Tensor for X {
    type Extents = XExtents;
    const WGSL: &'static str = "";
    const TILE_ELEMS: usize = 4;
    fn descriptor() -> &'static TensorDescriptor {
        static D: std::sync::OnceLock<TensorDescriptor> = std::sync::OnceLock::new();
        D.get_or_init(|| {
            TensorDescriptor::declare::<&str>(&x_spec(), &[]).expect("x_spec is valid")
        })
    }
    fn len(e: XExtents) -> usize {
        e.seq * 8
    }
}

#[test]
fn ix_is_a_tagged_usize() {
    let a = Ix::of(Seq, 3);
    const B: Ix<Seq> = Ix::of(Seq, 5);
    const FIVE: usize = B.get();
    assert_eq!(FIVE, 5);
    assert!(a < B && a == Ix::of(Seq, 3) && a != B);
    assert_eq!(a.next(), Ix::of(Seq, 4));
    assert_eq!(a.max(B), B);
    assert_eq!(usize::from(a), 3);
    assert_eq!(format!("{a}"), "Seq=3");
    assert_eq!(format!("{a:?}"), "Ix::<Seq>(3)");
    let h: Ix<Hidden> = a.retag();
    assert_eq!(format!("{h}"), "Hidden=3");
    let set: HashSet<Ix<Seq>> = [a, a, B].into_iter().collect();
    assert_eq!(set.len(), 2);
    // No bounds on the marker for the traits: a type that is not an axis works as a tag too.
    struct NotAnAxis;
    assert_eq!(derive::ix::<NotAnAxis>(1), derive::ix(1));
}

#[test]
fn each_enumerates_row_major() {
    let all: Vec<[usize; 2]> = each::<X>(XExtents { seq: 2 })
        .map(|x| x.indices())
        .collect();
    assert_eq!(all.len(), 16);
    assert_eq!(all[0], [0, 0]);
    assert_eq!(all[1], [0, 1]);
    assert_eq!(all[8], [1, 0]);
    assert_eq!(all[15], [1, 7]);
    assert_eq!(each::<X>(XExtents { seq: 0 }).count(), 0);
}

#[test]
fn typed_and_bound_offsets_agree() {
    let ext = XExtents { seq: 3 };
    let bound = X::bind(ext).unwrap();
    assert_eq!(bound.len() as usize, X::len(ext));
    let mut seen = HashSet::new();
    for x in each::<X>(ext) {
        assert!(x.in_bounds(ext));
        let coords: Vec<u64> = x.indices().iter().map(|&i| i as u64).collect();
        assert_eq!(bound.offset(&coords), Some(x.offset(ext) as u64), "{x:?}");
        assert!(seen.insert(x.offset(ext)));
    }
    assert!(!X::from_indices(&[3, 0]).unwrap().in_bounds(ext));
    assert_eq!(X::from_indices(&[1]), None);
}

#[test]
fn extents_bind_by_name_and_reject_huge_values() {
    assert_eq!(bindings::<X>(XExtents { seq: 7 }).unwrap(), [("seq", 7)]);
    if let Ok(huge) = usize::try_from(u64::from(u32::MAX) + 1) {
        let err = bindings::<X>(XExtents { seq: huge }).unwrap_err();
        assert!(err.to_string().contains("tensor `x`"), "{err}");
    }
    assert!(().values().is_empty());
}

#[test]
fn declare_builds_views_and_validated_wgsl() {
    let spec = LayoutSpec::new("act")
        .dyn_axis("tokens")
        .axis("hidden", 16)
        .rtile()
        .reduce_forward(["hidden"])
        .reduce_backward(["tokens"]);
    let steps = [ViewStep::Split {
        axis: "hidden",
        parts: vec![("heads", Some(4)), ("head_dim", None)],
    }];
    let views = [
        ViewSpec {
            name: "act_t",
            steps: vec![ViewStep::Transpose("tokens", "hidden")],
        },
        ViewSpec {
            name: "heads",
            steps: steps.to_vec(),
        },
    ];
    let d = TensorDescriptor::declare(&spec, &views).unwrap();
    assert_eq!(d.views.len(), 2);
    assert_eq!(d.identity.name(), "act");
    let heads = d.view("heads").unwrap();
    let names: Vec<&str> = heads.axes().iter().map(|a| a.name.as_str()).collect();
    assert_eq!(names, ["tokens", "heads", "head_dim"]);
    let src = d.wgsl();
    for f in [
        "act_offset",
        "act_in_bounds",
        "act_tile_offset",
        "act_t_offset",
        "heads_in_bounds",
    ] {
        assert!(src.contains(&format!("fn {f}(")), "{f} missing:\n{src}");
    }
    assert!(src.contains("const ACT_TILE_ELEMS: u32 = 16u;"), "{src}");
    assert_eq!(d.tile_elems_const(), "ACT_TILE_ELEMS");
    assert!(
        d.summary()
            .starts_with("act f32 rtile [tokens=dyn/4, hidden=16/4]"),
        "{}",
        d.summary()
    );
    // Re-validating the text gives the same module.
    assert!(WgslModule::validate("again", src).is_ok());
    assert_eq!(d.wgsl_module().source(), src);
}

#[test]
fn row_major_has_no_tile_helpers() {
    let spec = LayoutSpec::new("m").axis("r", 3).axis("c", 5);
    let d = TensorDescriptor::declare::<&str>(&spec, &[]).unwrap();
    for helper in ["fn m_tile_", "M_TILE_ELEMS"] {
        assert!(!d.wgsl().contains(helper), "{}", d.wgsl());
    }
    // Every axis still names its tile (1), so kernel code reads alike for every layout.
    assert!(
        d.wgsl().contains("const M_R_TILE: u32 = 1u;"),
        "{}",
        d.wgsl()
    );
    // Every extent is static: no extents struct (WGSL has no empty structs).
    assert_eq!(d.extents_struct_name(), None);
    assert!(!d.wgsl().contains("struct"), "{}", d.wgsl());
}

#[test]
fn wgsl_names_extents_and_tiles() {
    let spec = LayoutSpec::new("act")
        .dyn_axis("batch")
        .dyn_axis("tokens")
        .axis("hidden", 16)
        .rtile()
        .reduce_forward(["hidden"])
        .reduce_backward(["tokens"]);
    let d = TensorDescriptor::declare::<&str>(&spec, &[]).unwrap();
    let src = d.wgsl();
    // The struct is the one `TensorLayout::extents_struct` writes, under the tensor's name.
    assert_eq!(d.extents_struct_name().as_deref(), Some("act_extents"));
    assert!(
        src.contains(d.layout.extents_struct("act_extents").trim_end()),
        "{src}"
    );
    assert!(
        src.contains("    batch_len: u32,\n    tokens_len: u32,\n}"),
        "{src}"
    );
    for c in axis_consts(&d.layout) {
        let line = format!("const {}: u32 = {}u;", c.wgsl_name("act"), c.value);
        assert!(src.contains(&line), "{line} missing:\n{src}");
    }
    for line in [
        "const ACT_HIDDEN_EXTENT: u32 = 16u;",
        "const ACT_BATCH_TILE: u32 = 1u;",
        "const ACT_TOKENS_TILE: u32 = 4u;",
        "const ACT_HIDDEN_TILE: u32 = 4u;",
    ] {
        assert!(src.contains(line), "{line} missing:\n{src}");
    }
    assert!(
        !src.contains("ACT_TOKENS_EXTENT"),
        "a run-time extent has no constant"
    );
}

#[test]
fn axes_differing_only_in_case_are_refused() {
    let spec = LayoutSpec::new("x").axis("seq", 4).dyn_axis("Seq");
    let errs = TensorDescriptor::declare::<&str>(&spec, &[]).unwrap_err();
    match errs.errors() {
        [
            DeclareError::ConstName {
                name,
                first,
                second,
            },
        ] => {
            assert_eq!(
                (name.as_str(), first.as_str(), second.as_str()),
                ("SEQ_TILE", "seq", "Seq")
            );
        }
        other => panic!("unexpected {other:?}"),
    }
    assert!(
        errs.to_string().contains("differ in more than case"),
        "{errs}"
    );
}

#[test]
fn declare_reports_every_problem_with_its_place() {
    let mut spec = x_spec().reduce_backward(["batch"]);
    spec.elem = ElemType::F64;
    let errs = TensorDescriptor::declare::<&str>(&spec, &[]).unwrap_err();
    let sites: Vec<Site> = errs
        .errors()
        .iter()
        .map(|e| match e {
            DeclareError::Layout(e) => e.site(),
            other => panic!("unexpected {other}"),
        })
        .collect();
    assert!(
        sites.contains(&Site::Reduction(Pass::Backward, "batch".into())),
        "{sites:?}"
    );
    assert!(sites.contains(&Site::Elem), "{sites:?}");

    let spec = x_spec();
    let views = [
        ViewSpec {
            name: "a",
            steps: vec![ViewStep::Permute(vec!["hidden", "hidden"])],
        },
        ViewSpec {
            name: "b",
            steps: vec![
                ViewStep::Transpose("seq", "hidden"),
                ViewStep::Transpose("seq", "heads"),
            ],
        },
        ViewSpec {
            name: "a",
            steps: vec![],
        },
        ViewSpec {
            name: "x_tile",
            steps: vec![],
        },
        ViewSpec {
            name: "fn",
            steps: vec![],
        },
    ];
    let errs = TensorDescriptor::declare(&spec, &views).unwrap_err();
    let found: Vec<(usize, Option<usize>)> = errs
        .errors()
        .iter()
        .filter_map(|e| match e {
            DeclareError::View { view, step, .. } => Some((*view, *step)),
            _ => None,
        })
        .collect();
    assert_eq!(found, [(0, Some(0)), (1, Some(1)), (4, None)]);
    let names: Vec<usize> = errs
        .errors()
        .iter()
        .filter_map(|e| match e {
            DeclareError::ViewName { view, .. } => Some(*view),
            _ => None,
        })
        .collect();
    assert_eq!(names, [2, 3]);
    assert!(
        errs.to_string()
            .contains("view name `a` is already used by view #1"),
        "{errs}"
    );
}

#[test]
fn step_display_reads_like_the_attribute() {
    let split = ViewStep::Split {
        axis: "hidden",
        parts: vec![("heads", Some(4)), ("head_dim", None)],
    };
    assert_eq!(
        split.to_string(),
        "split(hidden => heads = 4, head_dim = _)"
    );
    assert_eq!(
        ViewStep::Slice {
            axis: "seq",
            start: 2,
            len: 3
        }
        .to_string(),
        "slice(seq, 2..5)"
    );
    assert_eq!(
        ViewStep::Merge {
            axes: vec!["a", "b"],
            into: "ab"
        }
        .to_string(),
        "merge(a, b => ab)"
    );
}

#[test]
fn derived_descriptors_reuse_what_was_checked() {
    let spec = x_spec();
    let views = [ViewSpec {
        name: "xt",
        steps: vec![ViewStep::Transpose("seq", "hidden")],
    }];
    let checked = TensorDescriptor::declare(&spec, &views).unwrap();
    let wgsl: &'static str = checked.wgsl().to_owned().leak();
    let derived = derive::descriptor(&spec, checked.layout.axes().to_vec(), &views, wgsl);
    assert_eq!(derived.layout, checked.layout);
    assert_eq!(derived.views, checked.views);
    assert_eq!(derived.wgsl(), checked.wgsl());
    assert_eq!(derived.wgsl_module().source(), checked.wgsl());
}

#[test]
fn typed_extents_iterate_typed_indices() {
    let seq = Len::of(Seq, 3);
    let back: Vec<usize> = seq.iter().rev().map(Ix::get).collect();
    assert_eq!(back, [2, 1, 0]);
    assert_eq!(seq.iter().len(), 3);
    assert_eq!(format!("{seq:?}"), "Len::<Seq>(3)");
    assert_eq!(usize::from(seq), 3);
    let (s, h) = X::shape(XExtents { seq: 2 });
    let all: Vec<X> = s
        .into_iter()
        .flat_map(|seq| h.into_iter().map(move |hidden| X { seq, hidden }))
        .collect();
    assert_eq!(all, each::<X>(XExtents { seq: 2 }).collect::<Vec<_>>());
}

#[test]
fn declarations_the_core_refuses() {
    let errors = |spec: &LayoutSpec| -> Vec<LayoutError> {
        match TensorDescriptor::declare::<&str>(spec, &[]) {
            Ok(_) => Vec::new(),
            Err(errs) => errs
                .errors()
                .iter()
                .filter_map(|e| match e {
                    DeclareError::Layout(e) => Some(e.clone()),
                    _ => None,
                })
                .collect(),
        }
    };
    // `pad` without a tile.
    let mut spec = LayoutSpec::new("x")
        .axis("a", 6)
        .rtile()
        .reduce_forward(["a"]);
    spec.axes[0].pad = true;
    let found = errors(&spec);
    assert!(
        found
            .iter()
            .any(|e| matches!(e, LayoutError::PadWithoutTile { .. })
                && e.site() == Site::Pad("a".into())),
        "{found:?}"
    );
    // Reductions on a layout that is not R-Tile.
    let spec = LayoutSpec::new("x").axis("a", 6).reduce_backward(["a"]);
    let found = errors(&spec);
    assert!(
        found
            .iter()
            .any(|e| matches!(e, LayoutError::ReductionWithoutRTile { .. })
                && e.site() == Site::Pass(Pass::Backward)),
        "{found:?}"
    );
}

#[test]
fn default_tiles_divide_static_extents() {
    let x = LayoutSpec::new("x")
        .axis("rows", 30)
        .axis("cols", 6)
        .rtile()
        .reduce_forward(["cols"])
        .reduce_backward(["rows"])
        .build()
        .unwrap();
    let tiles: Vec<u32> = x.axes().iter().map(|a| a.tile).collect();
    assert_eq!(tiles, [2, 2]);
    assert_eq!(x.static_len(), Some(180));
    let odd = LayoutSpec::new("y")
        .axis("n", 7)
        .rtile()
        .reduce_forward(["n"])
        .build()
        .unwrap();
    assert_eq!(odd.axes()[0].tile, 1);
}
