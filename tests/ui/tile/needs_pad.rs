use fblayout::{Axis, Ix, Tensor};

#[derive(Clone, Copy, Axis)]
pub struct Batch;
#[derive(Clone, Copy, Axis)]
pub struct Seq;
#[derive(Clone, Copy, Axis)]
pub struct Hidden;

#[derive(Clone, Copy, Tensor)]
#[tensor(layout = rtile, reduce(forward = [hidden]))]
pub struct X {
    #[axis(dyn)]
    pub seq: Ix<Seq>,
    #[axis(30, tile = 4)]
    pub hidden: Ix<Hidden>,
}

fn main() {}
