// One mistake in the declaration gives one error: the tensor's extents and view types are
// still declared, so the code that uses them adds nothing.
use fblayout::{Axis, Ix, Tensor};

#[derive(Clone, Copy, Axis)]
pub struct Seq;
#[derive(Clone, Copy, Axis)]
pub struct Hidden;

#[derive(Clone, Copy, Tensor)]
#[tensor(layout = rtile, colour = red, reduce(forward = [hidden]))]
#[tensor(view(XT = transpose(seq, hidden)))]
pub struct X {
    #[axis(dyn)]
    pub seq: Ix<Seq>,
    #[axis(768, tile = 4)]
    pub hidden: Ix<Hidden>,
}

fn reads_the_transpose(_: XT, _: XExtents) {}

fn loops_over(_: XShape, _: XTShape) {}

fn main() {
    let _ = X::new(Ix::of(Seq, 0), Ix::of(Hidden, 1));
    let _ = reads_the_transpose;
    let _ = loops_over;
    let _ = XExtents { seq: 4 };
}
