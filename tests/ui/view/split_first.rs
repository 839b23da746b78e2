use fblayout::{Axis, Ix, Tensor};

#[derive(Clone, Copy, Axis)]
pub struct Tokens;
#[derive(Clone, Copy, Axis)]
pub struct Hidden;

#[derive(Clone, Copy, Axis)]
pub struct Heads;
#[derive(Clone, Copy, Axis)]
pub struct HeadDim;

/// `QH` names `heads`, which only the split of `Q` creates: each view starts from the tensor.
#[derive(Clone, Copy, Tensor)]
#[tensor(view(
    Q = split(hidden => heads: Heads = 12, head_dim: HeadDim = _),
    QH = permute(heads, tokens, head_dim),
))]
pub struct X {
    #[axis(dyn)]
    pub tokens: Ix<Tokens>,
    #[axis(768)]
    pub hidden: Ix<Hidden>,
}

fn main() {}
