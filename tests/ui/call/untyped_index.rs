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

/// There is no constructor that infers the axis from where the index goes.
pub fn at(t: usize, h: usize) -> X {
    X::new(Ix::new(t), Ix::new(h))
}

fn main() {}
