//! Division: splitting a layout into tiles and the layout of those tiles.
//!
//! `logical_divide(A, B) = A ∘ (B, complement(B, size(A)))`. The first mode of the result walks
//! the elements of `A` that the tiler `B` selects (one tile); the second walks the tiles, the
//! repetitions of `B` that cover the rest of `A`. As a 1-D function it is exactly `A` composed
//! with the concatenation of `B` and its complement, so nothing is lost or duplicated when `B`
//! is injective and tiles `A` evenly.
//!
//! With a by-mode [`Tiler`], each tiled mode of `A` is divided by its own tiler and the result
//! keeps `A`'s modes in place: `((TileM,RestM),(TileN,RestN),L,...)`. The two other flavours
//! only regroup those modes:
//!
//! * [`zipped_divide`] gives `((TileM,TileN),(RestM,RestN,L,...))`: the tile in mode 0 (each
//!   tiled mode of `A` composed with its tiler) and the layout of the tiles in mode 1;
//! * [`tiled_divide`] gives `((TileM,TileN),RestM,RestN,L,...)`.
//!
//! For a tiler that is a single layout, all three are the same rank-2 layout `(Tile,Rest)`.

use super::complement::complement;
use super::composition::{Tiler, by_mode, composition};
use super::error::AlgebraError;
use super::layout::Layout;

/// `A ⊘ B`: `A ∘ (B, complement(B, size(A)))`, applied mode by mode for a by-mode tiler.
pub fn logical_divide(layout: &Layout, tiler: &Tiler) -> Result<Layout, AlgebraError> {
    by_mode(layout, tiler, &divide_1d)
}

/// [`logical_divide`] with all tiles gathered in mode 0 and all rests (then the untiled modes)
/// in mode 1: `((TileM,TileN),(RestM,RestN,L,...))`.
pub fn zipped_divide(layout: &Layout, tiler: &Tiler) -> Result<Layout, AlgebraError> {
    let (tile, rests) = unzip(&logical_divide(layout, tiler)?, tiler)?;
    Layout::from_modes([tile, group(rests)?])
}

/// [`logical_divide`] with all tiles gathered in mode 0 and the rests (then the untiled modes)
/// as the following modes: `((TileM,TileN),RestM,RestN,L,...)`.
pub fn tiled_divide(layout: &Layout, tiler: &Tiler) -> Result<Layout, AlgebraError> {
    let (tile, rests) = unzip(&logical_divide(layout, tiler)?, tiler)?;
    Layout::from_modes(std::iter::once(tile).chain(rests))
}

fn divide_1d(layout: &Layout, tiler: &Layout) -> Result<Layout, AlgebraError> {
    let rest = complement(tiler, layout.size_int())?;
    composition(layout, &Layout::from_modes([tiler.clone(), rest])?)
}

/// Splits a logically divided layout into its tile and the list of its rest modes.
fn unzip(divided: &Layout, tiler: &Tiler) -> Result<(Layout, Vec<Layout>), AlgebraError> {
    match tiler {
        Tiler::Layout(_) => Ok((divided.mode(0)?, vec![divided.mode(1)?])),
        Tiler::Modes(ts) => {
            let mut tiles = Vec::with_capacity(ts.len());
            let mut rests = Vec::with_capacity(divided.rank());
            for (k, mode) in divided.modes().iter().enumerate() {
                match ts.get(k) {
                    Some(t) => {
                        let (tile, rest) = unzip(mode, t)?;
                        tiles.push(tile);
                        rests.push(group(rest)?);
                    }
                    None => rests.push(mode.clone()),
                }
            }
            Ok((group(tiles)?, rests))
        }
    }
}

/// One layout for a list of modes: the mode itself when there is one, else their tuple.
fn group(mut modes: Vec<Layout>) -> Result<Layout, AlgebraError> {
    if modes.len() == 1 {
        if let Some(only) = modes.pop() {
            return Ok(only);
        }
    }
    Layout::from_modes(modes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::algebra::composition::composition_by_mode;

    fn l(s: &str) -> Layout {
        s.parse().unwrap()
    }

    #[test]
    fn one_dimensional_example_from_the_docs() {
        // The docs print A as (2,4,3):(4,1,8), but the result they show is that of this A.
        let a = l("(_4,_2,_3):(_2,_1,_8)");
        let b = Tiler::from(l("_4:_2"));
        let r = logical_divide(&a, &b).unwrap();
        assert_eq!(format!("{r:#}"), "((_2,_2),(_2,_3)):((_4,_1),(_2,_8))");
        assert_eq!(zipped_divide(&a, &b).unwrap(), r);
        assert_eq!(tiled_divide(&a, &b).unwrap(), r);
        let bb = l("(4,(2,3)):(2,(1,8))");
        for i in 0..24 {
            assert_eq!(r.call(i), a.call(bb.call(i)));
        }
    }

    #[test]
    fn two_dimensional_example_from_the_docs() {
        let a = l("(_9,(_4,_8)):(_59,(_13,_1))");
        let tiler = Tiler::by_mode([l("_3:_3"), l("(_2,_4):(_1,_8)")]);
        let ld = logical_divide(&a, &tiler).unwrap();
        assert_eq!(
            ld.to_string(),
            "((3,3),((2,4),(2,2))):((177,59),((13,2),(26,1)))"
        );
        let zd = zipped_divide(&a, &tiler).unwrap();
        assert_eq!(
            zd.to_string(),
            "((3,(2,4)),(3,(2,2))):((177,(13,2)),(59,(26,1)))"
        );
        assert_eq!(
            zd.mode(0).unwrap(),
            composition_by_mode(&a, &tiler).unwrap()
        );
        assert_eq!(zd.mode(0).unwrap().to_string(), "(3,(2,4)):(177,(13,2))");
        let td = tiled_divide(&a, &tiler).unwrap();
        assert_eq!(
            td.to_string(),
            "((3,(2,4)),3,(2,2)):((177,(13,2)),59,(26,1))"
        );
        assert!(td.is_static());
    }

    #[test]
    fn untiled_modes_go_to_the_rest() {
        let a = l("(4,6,5):(1,4,24)");
        let tiler = Tiler::by_mode([l("2:1")]);
        assert_eq!(
            logical_divide(&a, &tiler).unwrap().to_string(),
            "((2,2),6,5):((1,2),4,24)"
        );
        assert_eq!(
            zipped_divide(&a, &tiler).unwrap().to_string(),
            "(2,(2,6,5)):(1,(2,4,24))"
        );
        assert_eq!(
            tiled_divide(&a, &tiler).unwrap().to_string(),
            "(2,2,6,5):(1,2,4,24)"
        );
    }

    #[test]
    fn uneven_tiles_are_refused() {
        assert!(matches!(
            logical_divide(&l("6:1"), &l("4:1").into()),
            Err(AlgebraError::CompositionNotAdmissible { .. })
        ));
    }
}
