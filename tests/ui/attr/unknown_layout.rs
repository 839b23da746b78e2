use fblayout::{Axis, Ix, Tensor};

#[derive(Clone, Copy, Axis)]
pub struct Batch;
#[derive(Clone, Copy, Axis)]
pub struct Seq;
#[derive(Clone, Copy, Axis)]
pub struct Hidden;

#[derive(Clone, Copy, Tensor)]
#[tensor(layout = diagonal)]
pub struct X {
    #[axis(8)]
    pub seq: Ix<Seq>,
    #[axis(8)]
    pub hidden: Ix<Hidden>,
}

fn main() {}
