use fblayout::{Axis, Ix, Tensor};

#[derive(Clone, Copy, Axis)]
pub struct Batch;
#[derive(Clone, Copy, Axis)]
pub struct Seq;
#[derive(Clone, Copy, Axis)]
pub struct Hidden;

#[derive(Clone, Copy, Tensor)]
#[tensor(layout = rtile, tile = 4, reduce(forward = [hidden]))]
pub struct X {
    #[axis(768)]
    pub hidden: Ix<Hidden>,
}

fn main() {}
