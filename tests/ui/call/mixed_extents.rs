use fblayout::{Axis, Ix, Tensor};

#[derive(Clone, Copy, Axis)]
pub struct Batch;
#[derive(Clone, Copy, Axis)]
pub struct Seq;
#[derive(Clone, Copy, Axis)]
pub struct Hidden;

#[derive(Clone, Copy, Tensor)]
pub struct X {
    #[axis(dyn)]
    pub seq: Ix<Seq>,
    #[axis(768)]
    pub hidden: Ix<Hidden>,
}

#[derive(Clone, Copy, Tensor)]
pub struct Y {
    #[axis(dyn)]
    pub batch: Ix<Batch>,
    #[axis(768)]
    pub hidden: Ix<Hidden>,
}

/// An offset into X needs the extents of X.
pub fn offset(x: X, y_extents: YExtents) -> usize {
    x.offset(y_extents)
}

fn main() {}
