use fblayout::{Axis, Ix, Tensor};

#[derive(Clone, Copy, Axis)]
pub struct Batch;
#[derive(Clone, Copy, Axis)]
pub struct Seq;
#[derive(Clone, Copy, Axis)]
pub struct Hidden;

#[derive(Clone, Copy, Axis)]
pub struct In;
#[derive(Clone, Copy, Axis)]
pub struct Out;

#[derive(Clone, Copy, Tensor)]
pub struct X {
    #[axis(dyn)]
    pub seq: Ix<Seq>,
    #[axis(768)]
    pub hidden: Ix<Hidden>,
}

#[derive(Clone, Copy, Tensor)]
pub struct W {
    #[axis(768)]
    pub input: Ix<In>,
    #[axis(768)]
    pub output: Ix<Out>,
}

/// The row of W to multiply with x: the hidden index of X is not an index of W.
pub fn weight_for(x: X, o: Ix<Out>) -> W {
    W::new(x.hidden, o)
}

fn main() {}
