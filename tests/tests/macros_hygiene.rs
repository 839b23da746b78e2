//! The expansions of `#[derive(Tensor)]` and `#[derive(Axis)]` name everything by absolute
//! path: they compile without the prelude, next to user items that shadow primitive types,
//! prelude items and the crates they use, and they are warning-free (`missing_docs` included)
//! under `cargo clippy -- -D warnings`.
#![no_implicit_prelude]
#![deny(missing_docs)]
#![allow(
    non_camel_case_types,
    dead_code,
    reason = "the shadowing items are named like primitives on purpose and never used"
)]

// Shadows of what a careless expansion would reach for.
struct usize;
struct u32;
struct bool;
struct str;
struct Option;
struct Some;
struct None;
struct Result;
struct Ok;
struct Err;
struct LayoutError;
struct Vec;
struct String;
struct OnceLock;
struct Ix;
trait Clone {}
trait Copy {}
trait Default {}
mod core {}
mod std {}
mod fblayout {}
mod typed {}
mod layout {}

/// The batch axis.
#[derive(::core::clone::Clone, ::core::marker::Copy, ::fblayout::Axis)]
pub struct Batch;
/// The sequence axis.
#[derive(::core::clone::Clone, ::core::marker::Copy, ::fblayout::Axis)]
pub struct Seq;
/// The hidden axis.
#[derive(::core::clone::Clone, ::core::marker::Copy, ::fblayout::Axis)]
pub struct Hidden;
/// Attention heads.
#[derive(::core::clone::Clone, ::core::marker::Copy, ::fblayout::Axis)]
pub struct Heads;
/// The dimension inside a head.
#[derive(::core::clone::Clone, ::core::marker::Copy, ::fblayout::Axis)]
pub struct HeadDim;
/// Tokens: batch and sequence merged.
#[derive(::core::clone::Clone, ::core::marker::Copy, ::fblayout::Axis)]
pub struct Token;
/// A broadcast axis.
#[derive(::core::clone::Clone, ::core::marker::Copy, ::fblayout::Axis)]
pub struct Rep;

/// Activations with run-time extents and one view of every kind.
#[derive(::core::clone::Clone, ::core::marker::Copy, ::fblayout::Tensor)]
#[tensor(layout = rtile, reduce(forward = [hidden], backward = [batch, seq]))]
#[tensor(view(
    XT = permute(hidden, seq, batch),
    Q = split(hidden => heads: Heads = 4, head_dim: HeadDim = _),
    KT = [split(hidden => heads: Heads = 4, head_dim: HeadDim = _), transpose(seq, head_dim)],
    Tokens = merge(batch, seq => token: Token),
    Window = slice(seq, 1..3),
    Rows = broadcast(rep: Rep = 2, at = 0),
))]
pub struct X {
    /// Batch index.
    #[axis(dyn)]
    pub batch: ::fblayout::Ix<Batch>,
    /// Sequence index.
    #[axis(dyn, tile = 4)]
    pub seq: ::fblayout::Ix<Seq>,
    /// Hidden index.
    #[axis(16, tile = 4)]
    pub hidden: ::fblayout::Ix<Hidden>,
}

/// The gradient of `X`: its declaration, its own coordinate type.
#[derive(::core::clone::Clone, ::core::marker::Copy, ::fblayout::Tensor)]
#[tensor(like = X)]
pub struct DX {
    /// Batch index.
    pub batch: ::fblayout::Ix<Batch>,
    /// Sequence index.
    pub seq: ::fblayout::Ix<Seq>,
    /// Hidden index.
    pub hidden: ::fblayout::Ix<Hidden>,
}

/// A static, padded, crate-private tensor.
#[derive(::core::clone::Clone, ::core::marker::Copy, ::fblayout::Tensor)]
#[tensor(layout = rtile, elem = u32, reduce(forward = [hidden]))]
#[tensor(view(MT = transpose(seq, hidden)))]
pub(crate) struct M {
    #[axis(6)]
    pub(crate) seq: ::fblayout::Ix<Seq>,
    #[axis(10, tile = 4, pad)]
    pub(crate) hidden: ::fblayout::Ix<Hidden>,
}

const M_LEN: ::core::primitive::usize = M::LEN;
const M_AT: ::core::primitive::usize =
    M::new(::fblayout::Ix::of(Seq, 1), ::fblayout::Ix::of(Hidden, 5)).offset(MExtents);
const MT_AT: ::core::primitive::usize =
    MT::new(::fblayout::Ix::of(Hidden, 5), ::fblayout::Ix::of(Seq, 1)).offset(MExtents);
// The named constants and the tile helpers are `const` too.
const M_HIDDEN: [::core::primitive::usize; 3] = [M::HIDDEN_EXTENT, M::HIDDEN_TILE, M::SEQ_TILE];
const M_LAST_TILE: ::core::primitive::usize = M::tile_offset(5, 2, MExtents);

#[test]
fn expansions_work_without_the_prelude() {
    use ::fblayout::{Coord, Tensor};
    ::core::assert_eq!(M_LEN, 6 * 12);
    ::core::assert_eq!(M_AT, MT_AT);
    let ext = XExtents { batch: 2, seq: 3 };
    let x = X::new(
        ::fblayout::Ix::of(Batch, 1),
        ::fblayout::Ix::of(Seq, 2),
        ::fblayout::Ix::of(Hidden, 13),
    );
    let q = Q::new(
        x.batch,
        x.seq,
        ::fblayout::Ix::of(Heads, 3),
        ::fblayout::Ix::of(HeadDim, 1),
    );
    let kt = KT::new(
        x.batch,
        ::fblayout::Ix::of(HeadDim, 1),
        ::fblayout::Ix::of(Heads, 3),
        x.seq,
    );
    let w = Window::new(x.batch, ::fblayout::Ix::of(Seq, 1), x.hidden);
    let r = Rows::new(::fblayout::Ix::of(Rep, 1), x.batch, x.seq, x.hidden);
    let t = Tokens::new(::fblayout::Ix::of(Token, 3 + 2), x.hidden);
    for offset in [
        XT::new(x.hidden, x.seq, x.batch).offset(ext),
        q.offset(ext),
        kt.offset(ext),
        w.offset(ext),
        r.offset(ext),
        t.offset(ext),
    ] {
        ::core::assert_eq!(offset, x.offset(ext));
    }
    ::core::assert!(x.in_bounds(ext));
    let shape = X::shape(ext);
    ::core::assert_eq!(shape.dims(), [2, 3, 16]);
    ::core::assert!(shape.seq.contains(x.seq));
    ::core::assert_eq!(Rows::shape(ext).rep.get(), 2);
    let dx = DX::new(x.batch, x.seq, x.hidden);
    ::core::assert_eq!(dx.offset(ext), x.offset(ext));
    ::core::assert_eq!(DX::len(ext), X::len(ext));
    ::core::assert_eq!(<DX as Coord>::NAME, "x");
    ::core::assert_eq!(<X as Coord>::view().name(), "x");
    ::core::assert_eq!(<Rows as Coord>::view().name(), "rows");
    ::core::assert_eq!(X::descriptor().views.len(), 6);
    ::core::assert_eq!(<M as Tensor>::wgsl_module().source(), <M as Tensor>::WGSL);

    // The kernel author's surface: constants, tile helpers, the GPU twin of the extents.
    ::core::assert_eq!(M_HIDDEN, [10, 4, 1]);
    ::core::assert_eq!(M_LAST_TILE, M_LEN - <M as Tensor>::TILE_ELEMS);
    ::core::assert!(M::tile_in_bounds(5, 2, MExtents));
    ::core::assert_eq!([X::HIDDEN_EXTENT, X::BATCH_TILE, X::SEQ_TILE], [16, 4, 4]);
    ::core::assert!(X::tile_in_bounds(0, 0, 3, ext) && !X::tile_in_bounds(0, 1, 0, ext));
    ::core::assert_eq!(X::tile_offset(0, 0, 1, ext), <X as Tensor>::TILE_ELEMS);
    // Checked as `check_extents` checks: `batch` and `seq` are tiled by 4 without `pad`.
    ::core::assert!(X::gpu_extents(ext).is_err());
    let twin: XGpuExtents = X::gpu_extents(XExtents { batch: 4, seq: 8 }).unwrap();
    ::core::assert_eq!(twin, [4, 8]);
    let none: MGpuExtents = M::gpu_extents(MExtents).unwrap();
    ::core::assert_eq!(none.len(), 0);
    ::core::assert!(<X as Tensor>::WGSL.contains("struct x_extents {"));
}
