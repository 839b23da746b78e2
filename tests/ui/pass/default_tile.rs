//! A reduced axis without a tile gets the largest of 4, 2 and 1 that divides its extent: the
//! default never pads. 30 × 6 holds exactly 180 elements.
use fblayout::{Axis, Ix, Tensor};

#[derive(Clone, Copy, Axis)]
struct Rows;
#[derive(Clone, Copy, Axis)]
struct Cols;

#[derive(Clone, Copy, Tensor)]
#[tensor(layout = rtile, reduce(forward = [cols], backward = [rows]))]
struct X {
    #[axis(30)]
    rows: Ix<Rows>,
    #[axis(6)]
    cols: Ix<Cols>,
}

fn main() {
    const _: () = assert!(X::LEN == 30 * 6);
    let tiles: Vec<u32> = X::descriptor().layout.axes().iter().map(|a| a.tile).collect();
    assert_eq!(tiles, [2, 2]);
    assert_eq!(X::TILE_ELEMS, 4);
}
