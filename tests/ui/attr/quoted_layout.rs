use fblayout::{Axis, Ix, Tensor};

#[derive(Clone, Copy, Axis)]
pub struct Tokens;
#[derive(Clone, Copy, Axis)]
pub struct Hidden;

/// A quoted value gets the fix, and nothing else is reported: the layout is read as `rtile`.
#[derive(Clone, Copy, Tensor)]
#[tensor(layout = "rtile", reduce(forward = [hidden]))]
pub struct X {
    #[axis(dyn)]
    pub tokens: Ix<Tokens>,
    #[axis(768, tile = 4)]
    pub hidden: Ix<Hidden>,
}

fn main() {}
