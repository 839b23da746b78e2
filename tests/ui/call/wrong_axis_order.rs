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
    pub batch: Ix<Batch>,
    #[axis(dyn)]
    pub seq: Ix<Seq>,
    #[axis(768)]
    pub hidden: Ix<Hidden>,
}

pub fn at(batch: Ix<Batch>, seq: Ix<Seq>, hidden: Ix<Hidden>) -> X {
    X::new(seq, batch, hidden)
}

fn main() {}
