use fblayout::{Axis, Ix, Tensor};

#[derive(Clone, Copy, Axis)]
pub struct Tokens;
#[derive(Clone, Copy, Axis)]
pub struct Hidden;

/// `reduce(...)` says which axes R-Tile tiles; a row-major tensor would silently ignore it.
#[derive(Clone, Copy, Tensor)]
#[tensor(reduce(forward = [hidden]))]
pub struct X {
    #[axis(dyn)]
    pub tokens: Ix<Tokens>,
    #[axis(768)]
    pub hidden: Ix<Hidden>,
}

fn main() {}
