use fblayout::{Axis, Ix, Tensor};

#[derive(Clone, Copy, Axis)]
pub struct Tokens;
#[derive(Clone, Copy, Axis)]
pub struct Hidden;

pub const HIDDEN: u32 = 768;

/// The derive lays the tensor out while it expands, before constants have values.
#[derive(Clone, Copy, Tensor)]
pub struct X {
    #[axis(dyn)]
    pub tokens: Ix<Tokens>,
    #[axis(HIDDEN)]
    pub hidden: Ix<Hidden>,
}

fn main() {}
