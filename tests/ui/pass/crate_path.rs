//! `crate = path` names fblayout when it is reached by another path.
mod renamed {
    pub use fblayout as layouts;
}

use fblayout::{Axis, Ix, Tensor};

#[derive(Clone, Copy, Axis)]
#[axis(crate = renamed::layouts)]
pub struct Row;
#[derive(Clone, Copy, Axis)]
#[axis(crate = renamed::layouts)]
pub struct Col;

#[derive(Clone, Copy, Tensor)]
#[tensor(crate = renamed::layouts, layout = col_major, elem = u32)]
pub struct M {
    #[axis(3)]
    pub row: Ix<Row>,
    #[axis(4)]
    pub col: Ix<Col>,
}

fn main() {
    const AT: usize = M::new(Ix::of(Row, 1), Ix::of(Col, 2)).offset(MExtents);
    assert_eq!(AT, 2 * 3 + 1);
    assert_eq!(M::LEN, 12);
}
