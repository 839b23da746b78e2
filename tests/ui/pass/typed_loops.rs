//! Loops over a tensor stay typed: `shape` returns one typed extent per axis, and iterating
//! one yields typed indices, so no `usize` is ever turned back into an index by inference.
//! `reduce(forward = hidden)` without brackets names one axis.
use fblayout::{Axis, Ix, Len, Tensor};

#[derive(Clone, Copy, Axis)]
struct Tokens;
#[derive(Clone, Copy, Axis)]
struct Hidden;

#[derive(Clone, Copy, Tensor)]
#[tensor(layout = rtile, reduce(forward = hidden, backward = tokens))]
struct X {
    #[axis(dyn, tile = 4)]
    tokens: Ix<Tokens>,
    #[axis(8)]
    hidden: Ix<Hidden>,
}

fn main() {
    let ext = XExtents { tokens: 3 };
    let shape: XShape = X::shape(ext);
    assert_eq!(shape.tokens, Len::of(Tokens, 3));
    let mut sum = 0;
    for t in shape.tokens {
        for h in shape.hidden {
            sum += X::new(t, h).offset(ext);
        }
    }
    let all: usize = fblayout::each::<X>(ext).map(|x| x.offset(ext)).sum();
    assert_eq!(sum, all);
    assert_eq!(X::descriptor().layout.forward(), ["hidden"]);
}
