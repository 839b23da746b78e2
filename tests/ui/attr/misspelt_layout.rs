use fblayout::{Axis, Ix, Tensor};

#[derive(Clone, Copy, Axis)]
pub struct Tokens;
#[derive(Clone, Copy, Axis)]
pub struct Hidden;

/// A misspelt layout is reported once; the tile and the reduction are not judged against the
/// default row-major order.
#[derive(Clone, Copy, Tensor)]
#[tensor(layout = rtiles, reduce(forward = [hidden]))]
pub struct X {
    #[axis(dyn)]
    pub tokens: Ix<Tokens>,
    #[axis(768, tile = 4)]
    pub hidden: Ix<Hidden>,
}

fn main() {}
