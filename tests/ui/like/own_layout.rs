use fblayout::{Axis, Ix, Tensor};

#[derive(Clone, Copy, Axis)]
pub struct Tokens;
#[derive(Clone, Copy, Axis)]
pub struct Hidden;

#[derive(Clone, Copy, Tensor)]
pub struct X {
    #[axis(dyn)]
    pub tokens: Ix<Tokens>,
    #[axis(768)]
    pub hidden: Ix<Hidden>,
}

/// `like = X` takes all of X's declaration; a layout or an extent of its own contradicts it.
#[derive(Clone, Copy, Tensor)]
#[tensor(like = X, layout = col_major)]
pub struct Y {
    pub tokens: Ix<Tokens>,
    #[axis(768)]
    pub hidden: Ix<Hidden>,
}

fn main() {}
