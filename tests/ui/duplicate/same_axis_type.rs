use fblayout::{Axis, Ix, Tensor};

#[derive(Clone, Copy, Axis)]
pub struct Batch;
#[derive(Clone, Copy, Axis)]
pub struct Seq;
#[derive(Clone, Copy, Axis)]
pub struct Hidden;

/// Scores [batch, query, key]: both sequence axes need their own axis type.
#[derive(Clone, Copy, Tensor)]
pub struct S {
    #[axis(dyn)]
    pub batch: Ix<Batch>,
    #[axis(dyn)]
    pub query: Ix<Seq>,
    #[axis(dyn)]
    pub key: Ix<Seq>,
}

fn main() {}
