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

/// The fields of a tensor declared `like = X` are X's axes, in X's order.
#[derive(Clone, Copy, Tensor)]
#[tensor(like = X)]
pub struct Y {
    pub hidden: Ix<Hidden>,
    pub tokens: Ix<Tokens>,
}

fn main() {}
