//! `like = X` declares once, uses many times: dX shares X's layout and extents type, and is a
//! coordinate type of its own.
use fblayout::{Axis, Coord, Ix, Tensor};

#[derive(Clone, Copy, Axis)]
struct Tokens;
#[derive(Clone, Copy, Axis)]
struct Hidden;

#[derive(Clone, Copy, Debug, PartialEq, Tensor)]
#[tensor(layout = rtile, reduce(forward = [hidden], backward = [tokens]))]
struct X {
    #[axis(dyn, tile = 4)]
    tokens: Ix<Tokens>,
    #[axis(12)]
    hidden: Ix<Hidden>,
}

/// The gradient of `X`.
#[derive(Clone, Copy, Debug, PartialEq, Tensor)]
#[tensor(like = X)]
struct DX {
    tokens: Ix<Tokens>,
    hidden: Ix<Hidden>,
}

fn main() {
    let ext = XExtents { tokens: 5 };
    let same: DXExtents = ext; // one extents type, no re-wrapping
    let dx = DX::new(Ix::of(Tokens, 3), Ix::of(Hidden, 7));
    assert_eq!(dx.as_like(), X::new(dx.tokens, dx.hidden));
    assert_eq!(dx.offset(same), dx.as_like().offset(ext));
    assert!(dx.in_bounds(ext));
    assert_eq!(DX::len(ext), X::len(ext));
    assert_eq!(DX::shape(ext), X::shape(ext));
    assert_eq!(DX::WGSL, X::WGSL);
    assert_eq!(<DX as Coord>::OFFSET_FN, "x_offset");
    assert!(std::ptr::eq(DX::descriptor(), X::descriptor()));
    let offsets: Vec<usize> = fblayout::each::<DX>(ext).map(|c| c.offset(ext)).collect();
    let expected: Vec<usize> = fblayout::each::<X>(ext).map(|c| c.offset(ext)).collect();
    assert_eq!(offsets, expected);
}
