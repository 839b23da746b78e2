use fblayout::{Axis, Ix, Tensor};
use fblayout_kernels::runtime::GpuError;
use fblayout_kernels::tensor::{GpuArg, GpuTensor};

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

#[derive(Clone, Copy, Tensor)]
#[tensor(view(KT = transpose(seq, dim)))]
pub struct K {
    #[axis(dyn)]
    pub seq: Ix<Seq>,
    #[axis(64)]
    pub dim: Ix<Dim>,
}

/// Kᵀ is a view of K's buffer, not of Q's.
pub fn keys_transposed(q: &GpuTensor<Q>) -> Result<GpuArg<'_>, GpuError> {
    q.view::<KT>()
}

fn main() {}
