use fblayout::{Axis, Ix, Tensor};

#[derive(Clone, Copy, Axis)]
pub struct Batch;
#[derive(Clone, Copy, Axis)]
pub struct Seq;
#[derive(Clone, Copy, Axis)]
pub struct Hidden;

#[derive(Clone, Copy, Tensor)]
#[tensor(view(XT = transpose(seq, hidden)))]
pub struct X {
    #[axis(dyn)]
    pub seq: Ix<Seq>,
    #[axis(768)]
    pub hidden: Ix<Hidden>,
}

/// A kernel that reads X as declared.
pub fn load(buffer: &[f32], at: X, extents: XExtents) -> f32 {
    buffer[at.offset(extents)]
}

pub fn transposed(buffer: &[f32], at: XT, extents: XExtents) -> f32 {
    load(buffer, at, extents)
}

fn main() {}
