use fblayout::{Axis, Ix, Tensor};

#[derive(Clone, Copy, Axis)]
pub struct Batch;
#[derive(Clone, Copy, Axis)]
pub struct Seq;
#[derive(Clone, Copy, Axis)]
pub struct Hidden;

/// An alias hides the repetition from the macro; the type system still sees it.
pub type Key = Seq;

#[derive(Clone, Copy, Tensor)]
pub struct S {
    #[axis(dyn)]
    pub query: Ix<Seq>,
    #[axis(dyn)]
    pub key: Ix<Key>,
}

fn main() {}
