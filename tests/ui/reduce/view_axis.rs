use fblayout::{Axis, Ix, Tensor};

#[derive(Clone, Copy, Axis)]
pub struct Batch;
#[derive(Clone, Copy, Axis)]
pub struct Seq;
#[derive(Clone, Copy, Axis)]
pub struct Hidden;

#[derive(Clone, Copy, Axis)]
pub struct Heads;
#[derive(Clone, Copy, Axis)]
pub struct HeadDim;

// `heads` is an axis of the view `Q`, not of the tensor: a layout reduces its own axes.
#[derive(Clone, Copy, Tensor)]
#[tensor(layout = rtile, reduce(forward = [heads]))]
#[tensor(view(Q = split(hidden => heads: Heads = 12, head_dim: HeadDim = _)))]
pub struct X {
    #[axis(dyn)]
    pub seq: Ix<Seq>,
    #[axis(768)]
    pub hidden: Ix<Hidden>,
}

fn main() {}
