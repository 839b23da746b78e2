use fblayout::{Axis, Ix, Tensor};

#[derive(Clone, Copy, Axis)]
pub struct Batch;
#[derive(Clone, Copy, Axis)]
pub struct Seq;
#[derive(Clone, Copy, Axis)]
pub struct Hidden;

#[derive(Clone, Copy, Tensor)]
#[tensor(elem = i8)]
pub struct X {
    #[axis(dyn)]
    pub seq: Ix<Seq>,
    #[axis(768)]
    pub hidden: Ix<Hidden>,
}

fn main() {}
