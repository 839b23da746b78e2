//! The tensors of one transformer layer (`macros_layer/tensors.rs`), checked on the CPU.
//!
//! For every tensor and view, at every coordinate of small shapes and a margin past them, the
//! macro's `const fn` offsets and bounds masks agree with the untyped path of the runtime
//! descriptor (`descriptor().view(..).bind(..)`); views address exactly the elements of their
//! tensor; padding is masked yet completes the buffer; and static tensors evaluate in `const`.

#[path = "macros_layer/tensors.rs"]
pub mod tensors;

use std::collections::BTreeSet;
use std::fmt::Debug;

use fblayout::{Coord, Extents, Ix, Tensor, each};
use tensors::*;

/// Checks `C` against the descriptor at every coordinate of its shape plus a margin, and
/// returns the offsets of the in-bounds coordinates (which must be distinct).
fn agrees_with_descriptor<C: Coord + Debug>(
    ext: <C::Tensor as Tensor>::Extents,
) -> BTreeSet<usize> {
    let bound = C::bind(ext).expect("valid extents bind");
    let shape = C::dims(ext);
    let shape = shape.as_ref();
    assert_eq!(
        bound.shape(),
        shape.iter().map(|&n| n as u64).collect::<Vec<_>>(),
        "{}",
        C::NAME
    );
    let len = <C::Tensor as Tensor>::len(ext);
    assert_eq!(bound.len(), len as u64, "{}: buffer length", C::NAME);
    let mut offsets = BTreeSet::new();
    for index in grid(shape, 2) {
        let c = C::from_indices(&index).expect("rank matches");
        assert_eq!(c.indices().as_ref(), index.as_slice());
        let coords: Vec<u64> = index.iter().map(|&i| i as u64).collect();
        let expected = bound.offset(&coords);
        assert_eq!(
            c.in_bounds(ext),
            expected.is_some(),
            "{}{index:?} in bounds with {ext:?}",
            C::NAME
        );
        if let Some(expected) = expected {
            let offset = c.offset(ext);
            assert_eq!(offset as u64, expected, "{}{index:?} with {ext:?}", C::NAME);
            assert!(offset < len, "{}{index:?} lies in the buffer", C::NAME);
            assert!(
                offsets.insert(offset),
                "{}{index:?}: offset {offset} twice",
                C::NAME
            );
        }
    }
    assert_eq!(
        offsets.len(),
        shape.iter().product::<usize>(),
        "{}",
        C::NAME
    );
    offsets
}

#[test]
fn activations_and_views_agree_with_the_descriptor() {
    for (batch, seq) in sizes() {
        let ext = XExtents { batch, seq };
        let x = agrees_with_descriptor::<X>(ext);
        assert_eq!(
            agrees_with_descriptor::<XT>(ext),
            x,
            "XT reads the elements of X"
        );
        assert_eq!(
            agrees_with_descriptor::<XH>(ext),
            x,
            "XH reads the elements of X"
        );
        assert_eq!(
            agrees_with_descriptor::<Tokens>(ext),
            x,
            "Tokens reads the elements of X"
        );
    }
}

#[test]
fn weights_agree_with_the_descriptor() {
    let w = agrees_with_descriptor::<W>(WExtents);
    assert_eq!(agrees_with_descriptor::<WT>(WExtents), w);
    assert_eq!(w.len(), 32 * 36);
}

#[test]
fn attention_and_views_agree_with_the_descriptor() {
    for (batch, seq) in sizes() {
        let ext = AttnExtents { batch, seq };
        let a = agrees_with_descriptor::<Attn>(ext);
        assert_eq!(agrees_with_descriptor::<QH>(ext), a);
        assert_eq!(agrees_with_descriptor::<KT>(ext), a);
    }
}

#[test]
fn scores_and_views_agree_with_the_descriptor() {
    for (batch, seq) in sizes() {
        let ext = ScoresExtents {
            batch,
            query: seq,
            key: seq + 1,
        };
        let s = agrees_with_descriptor::<Scores>(ext);
        assert_eq!(agrees_with_descriptor::<ByQuery>(ext), s);
        let first = agrees_with_descriptor::<First>(ext);
        assert!(first.is_subset(&s));
        assert_eq!(first.len(), batch * 4 * seq * 2);
    }
}

/// A view coordinate built from a tensor coordinate names the same element.
#[test]
fn views_name_the_same_element() {
    let ext = XExtents { batch: 3, seq: 5 };
    for x in each::<X>(ext) {
        let at = x.offset(ext);
        assert_eq!(XT::new(x.hidden, x.seq, x.batch).offset(ext), at);
        let (h, d) = (x.hidden.get() / 8, x.hidden.get() % 8);
        assert_eq!(
            XH::new(x.batch, x.seq, Ix::of(Heads, h), Ix::of(HeadDim, d)).offset(ext),
            at
        );
        let token = x.batch.get() * ext.seq + x.seq.get();
        assert_eq!(Tokens::new(Ix::of(Token, token), x.hidden).offset(ext), at);
    }
    let ext = AttnExtents { batch: 2, seq: 3 };
    for a in each::<Attn>(ext) {
        assert_eq!(
            QH::new(a.batch, a.heads, a.seq, a.head_dim).offset(ext),
            a.offset(ext)
        );
        assert_eq!(
            KT::new(a.batch, a.heads, a.head_dim, a.seq).offset(ext),
            a.offset(ext)
        );
    }
}

/// Loops over typed extents stay typed and visit what `each` visits.
#[test]
fn typed_shapes_iterate_typed_indices() {
    let ext = XExtents { batch: 2, seq: 3 };
    let shape = X::shape(ext);
    assert_eq!(shape.dims(), X::dims(ext));
    let mut typed = Vec::new();
    for batch in shape.batch {
        for seq in shape.seq {
            for hidden in shape.hidden {
                typed.push(X::new(batch, seq, hidden));
            }
        }
    }
    assert_eq!(typed, each::<X>(ext).collect::<Vec<_>>());
    let heads = XH::shape(ext);
    assert_eq!(heads.heads.get() * heads.head_dim.get(), shape.hidden.get());
    assert_eq!(Tokens::shape(ext).token.get(), 2 * 3);
}

/// Static extents: lengths, offsets and masks are constants.
const W_LEN: usize = W::LEN;
const W_AT: usize = W::new(Ix::of(In, 5), Ix::of(Out, 9)).offset(WExtents);
const WT_AT: usize = WT::new(Ix::of(Out, 9), Ix::of(In, 5)).offset(WExtents);
const W_PADDING_IN_BOUNDS: bool = W::new(Ix::of(In, 0), Ix::of(Out, 36)).in_bounds(WExtents);
const X_LEN: usize = X::len(XExtents { batch: 3, seq: 5 });
const _: () = assert!(W_LEN == 32 * 40);
const _: () = assert!(!W_PADDING_IN_BOUNDS);
const _: () = assert!(W_AT == WT_AT);

#[test]
fn const_evaluation_matches_run_time() {
    let bound = W::bind(WExtents).unwrap();
    assert_eq!(bound.offset(&[5, 9]), Some(W_AT as u64));
    assert_eq!(W_LEN, W::len(WExtents));
    assert_eq!(
        X::bind(XExtents { batch: 3, seq: 5 }).unwrap().len(),
        X_LEN as u64
    );
    // batch (a backward reduction axis) gets R-Tile's default tile 4; seq pads 5 → 8.
    assert_eq!(X_LEN, 4 * 8 * 32);
}

/// Padding lies outside `in_bounds`, but the offset formula over the padded box addresses every
/// slot of the buffer exactly once: padding completes the buffer, nothing else is wasted.
#[test]
fn in_bounds_masks_padding() {
    let mut offsets = BTreeSet::new();
    for index in grid(&[32, 40], 0) {
        let w = W::from_indices(&index).unwrap();
        assert_eq!(w.in_bounds(WExtents), index[1] < 36, "{index:?}");
        assert!(offsets.insert(w.offset(WExtents)));
    }
    assert_eq!(offsets, (0..W::LEN).collect());

    let ext = XExtents { batch: 3, seq: 5 };
    let mut offsets = BTreeSet::new();
    for index in grid(&[4, 8, 32], 0) {
        let x = X::from_indices(&index).unwrap();
        assert_eq!(x.in_bounds(ext), index[0] < 3 && index[1] < 5, "{index:?}");
        assert!(offsets.insert(x.offset(ext)));
    }
    assert_eq!(offsets, (0..X::len(ext)).collect());
}

/// Data packed through the descriptor reads back through the typed views.
#[test]
fn typed_views_read_packed_data() {
    let ext = AttnExtents { batch: 2, seq: 3 };
    let bound = Attn::bind(ext).unwrap();
    let logical: Vec<u32> = (0..bound.logical_len() as u32).collect();
    let buffer = bound.pack(&logical).unwrap();
    for (i, a) in each::<Attn>(ext).enumerate() {
        assert_eq!(buffer[a.offset(ext)], logical[i]);
        let k = KT::new(a.batch, a.heads, a.head_dim, a.seq);
        assert_eq!(buffer[k.offset(ext)], logical[i]);
    }
}

#[test]
fn descriptors_describe_the_layer() {
    let x = X::descriptor();
    assert_eq!(x.layout.forward(), ["hidden"]);
    assert_eq!(x.layout.backward(), ["batch", "seq"]);
    assert_eq!(
        x.views.iter().map(|v| v.name()).collect::<Vec<_>>(),
        ["xt", "xh", "tokens"]
    );
    assert_eq!(x.view("xh"), Some(<XH as Coord>::view()));
    assert_eq!(X::TILE_ELEMS as u64, x.layout.tile_elems());
    assert_eq!(<XExtents as Extents>::AXES, ["batch", "seq"]);
    assert_eq!(XExtents { batch: 2, seq: 7 }.values(), [2, 7]);
    assert_eq!(W::descriptor().layout.backward(), ["output"]);
    assert_eq!(<Attn as Coord>::AXES, ["batch", "seq", "heads", "head_dim"]);
    assert_eq!(<KT as Coord>::AXES, ["batch", "heads", "head_dim", "seq"]);
    assert_eq!(Scores::descriptor().layout.name(), "scores");
    for (wgsl, descriptor) in [
        (X::WGSL, X::descriptor()),
        (W::WGSL, W::descriptor()),
        (Attn::WGSL, Attn::descriptor()),
        (Scores::WGSL, Scores::descriptor()),
    ] {
        assert_eq!(
            wgsl,
            descriptor.wgsl(),
            "the embedded WGSL is the descriptor's"
        );
        let functions = descriptor.wgsl_module().naga_module().functions.len();
        // offset and in_bounds for the tensor, its tile helpers and each view.
        assert_eq!(
            functions,
            2 * (2 + descriptor.views.len()),
            "{}",
            descriptor.layout.name()
        );
    }
    // Tiles of 4 along batch (the default for a reduction axis), seq and hidden.
    assert_eq!(X::TILE_ELEMS, 64);
    for name in [
        <XT as Coord>::OFFSET_FN,
        <XT as Coord>::IN_BOUNDS_FN,
        "x_tile_offset",
        "const X_TILE_ELEMS: u32 = 64u;",
    ] {
        assert!(X::WGSL.contains(name), "{name}");
    }
}
