//! Every view step, chains of steps, and private visibility, in one declaration.
use fblayout::{Axis, Coord, Ix, Tensor};

#[derive(Clone, Copy, Axis)]
struct Batch;
#[derive(Clone, Copy, Axis)]
struct Seq;
#[derive(Clone, Copy, Axis)]
struct Hidden;
#[derive(Clone, Copy, Axis)]
struct Heads;
#[derive(Clone, Copy, Axis)]
struct HeadDim;
#[derive(Clone, Copy, Axis)]
struct Token;
#[derive(Clone, Copy, Axis)]
struct Rep;

#[derive(Clone, Copy, Tensor)]
#[tensor(layout = rtile, elem = f16, reduce(forward = [hidden], backward = [batch, seq]))]
#[tensor(view(
    XT = permute(hidden, seq, batch),
    SH = transpose(seq, hidden),
    Q = split(hidden => heads: Heads = 4, head_dim: HeadDim = _),
    KT = [split(hidden => heads: Heads = 4, head_dim: HeadDim = _), permute(batch, heads, head_dim, seq)],
    Merged = merge(batch, seq => token: Token),
    Window = slice(seq, 2..6),
    Window2 = slice(seq, 2, 4),
    Rows = broadcast(rep: Rep = 3, at = 1),
))]
struct X {
    #[axis(dyn)]
    batch: Ix<Batch>,
    #[axis(dyn, tile = 4)]
    seq: Ix<Seq>,
    #[axis(32, tile = 4)]
    hidden: Ix<Hidden>,
}

fn main() {
    let ext = XExtents { batch: 2, seq: 7 };
    let x = X::new(Ix::of(Batch, 1), Ix::of(Seq, 3), Ix::of(Hidden, 9));
    assert_eq!(XT::new(x.hidden, x.seq, x.batch).offset(ext), x.offset(ext));
    assert_eq!(SH::new(x.batch, x.hidden, x.seq).offset(ext), x.offset(ext));
    assert_eq!(
        Q::new(x.batch, x.seq, Ix::of(Heads, 1), Ix::of(HeadDim, 1)).offset(ext),
        x.offset(ext)
    );
    assert_eq!(
        KT::new(x.batch, Ix::of(Heads, 1), Ix::of(HeadDim, 1), x.seq).offset(ext),
        x.offset(ext)
    );
    assert_eq!(
        Merged::new(Ix::of(Token, 7 + 3), x.hidden).offset(ext),
        x.offset(ext)
    );
    assert_eq!(
        Window::new(x.batch, Ix::of(Seq, 1), x.hidden).offset(ext),
        x.offset(ext)
    );
    assert_eq!(Window2::dims(ext), Window::dims(ext));
    assert_eq!(
        Rows::new(x.batch, Ix::of(Rep, 2), x.seq, x.hidden).offset(ext),
        x.offset(ext)
    );
    assert_eq!(<X as Coord>::NAME, "x");
    assert_eq!(<Rows as Coord>::AXES, ["batch", "rep", "seq", "hidden"]);
    assert!(X::WGSL.contains("fn window2_offset("));
}
