use fblayout::{Axis, Ix, Tensor};
use fblayout_kernels::tensor::CpuTensor;

#[derive(Clone, Copy, Axis)]
pub struct Seq;
#[derive(Clone, Copy, Axis)]
pub struct Dim;

#[derive(Clone, Copy, Tensor)]
pub struct Q {
    #[axis(dyn)]
    pub seq: Ix<Seq>,
    #[axis(64)]
    pub dim: Ix<Dim>,
}

/// K has Q's axes but another layout: column-major.
#[derive(Clone, Copy, Tensor)]
#[tensor(layout = col_major)]
pub struct K {
    #[axis(dyn)]
    pub seq: Ix<Seq>,
    #[axis(64)]
    pub dim: Ix<Dim>,
}

/// Reads q at k's coordinate: an offset of K's layout would index Q's buffer.
pub fn read(q: &CpuTensor<Q, f32>, k: K) -> f32 {
    q[k]
}

fn main() {}
