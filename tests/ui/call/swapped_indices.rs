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

/// Making an index names its axis, so indices given in the wrong order do not compile.
pub fn at(t: usize, h: usize) -> X {
    X::new(Ix::of(Hidden, h), Ix::of(Tokens, t))
}

fn main() {}
