use fblayout::{Axis, Ix, Tensor};

#[derive(Clone, Copy, Axis)]
pub struct Batch;
#[derive(Clone, Copy, Axis)]
pub struct Seq;
#[derive(Clone, Copy, Axis)]
pub struct Hidden;

/// Not an axis type: it does not derive `Axis`.
#[derive(Clone, Copy)]
pub struct Heads;
#[derive(Clone, Copy, Axis)]
pub struct HeadDim;

#[derive(Clone, Copy, Tensor)]
#[tensor(view(Q = split(hidden => heads: Heads = 12, head_dim: HeadDim = _)))]
pub struct X {
    #[axis(dyn)]
    pub seq: Ix<Seq>,
    #[axis(768)]
    pub hidden: Ix<Hidden>,
}

fn main() {}
