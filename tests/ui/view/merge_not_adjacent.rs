use fblayout::{Axis, Ix, Tensor};

#[derive(Clone, Copy, Axis)]
pub struct Batch;
#[derive(Clone, Copy, Axis)]
pub struct Seq;
#[derive(Clone, Copy, Axis)]
pub struct Hidden;

#[derive(Clone, Copy, Axis)]
pub struct Rows;

#[derive(Clone, Copy, Tensor)]
#[tensor(view(R = merge(batch, hidden => rows: Rows)))]
pub struct X {
    #[axis(dyn)]
    pub batch: Ix<Batch>,
    #[axis(dyn)]
    pub seq: Ix<Seq>,
    #[axis(768)]
    pub hidden: Ix<Hidden>,
}

fn main() {}
