//! Coalescing: the simplest layout with the same 1-D function.
//!
//! [`coalesce`] forgets a layout's shape and keeps only what it does to 1-D indices: it flattens
//! the layout, drops leaves of extent 1 (their coordinate is always 0) and merges neighbours
//! `s0:d0, s1:d1` into `s0*s1:d0` whenever `d1 == s0*d0`. The result has the same size, the same
//! offset at every index and depth at most 1, so `(2,(1,6)):(1,(6,2))` becomes `12:1`.
//!
//! [`coalesce_by_mode`] and [`coalesce_with_profile`] coalesce only *inside* chosen modes, so a
//! 2-D layout stays 2-D (CuTe's `coalesce(layout, Step<_1,_1>{})`).
//!
//! Decisions are made on values, static or dynamic alike: a coalesced layout is the same
//! function for the values it was computed from. A merged extent is static only if both merged
//! extents were.

use super::error::AlgebraError;
use super::int_tuple::{Int, IntTuple};
use super::layout::Layout;

/// The layout with the same size and the same offset at every index `i < size`, with depth at
/// most 1, no extent-1 leaves (unless the size is 1, which gives `1:0`) and no two neighbouring
/// leaves that could be merged.
pub fn coalesce(layout: &Layout) -> Layout {
    let mut out: Vec<(Int, Int)> = Vec::new();
    for (s, d) in layout.leaves() {
        if s.value() == 1 {
            continue;
        }
        match out.last_mut() {
            Some((s0, d0)) if s0.value().checked_mul(d0.value()) == Some(d.value()) => {
                *s0 = s0
                    .checked_mul(s)
                    .expect("s0 · s divides the layout's size, which fits usize");
            }
            _ => out.push((s, d)),
        }
    }
    match out.as_slice() {
        [] => {
            let one = if layout.size_int().is_static() {
                Int::Static(1)
            } else {
                Int::Dynamic(1)
            };
            Layout::from_trusted(IntTuple::Int(one), IntTuple::Int(Int::Static(0)))
        }
        [(s, d)] => Layout::from_trusted(IntTuple::Int(*s), IntTuple::Int(*d)),
        _ => {
            let (shape, stride): (Vec<Int>, Vec<Int>) = out.into_iter().unzip();
            Layout::from_trusted(IntTuple::flat(shape), IntTuple::flat(stride))
        }
    }
}

/// Coalesces each top-level mode on its own: the rank is kept and each mode is the same
/// function of its 1-D coordinate. `(2,(1,6)):(1,(6,2))` becomes `(2,6):(1,2)`.
pub fn coalesce_by_mode(layout: &Layout) -> Layout {
    match layout.shape() {
        IntTuple::Int(_) => coalesce(layout),
        IntTuple::Tuple(_) => {
            let (shapes, strides): (Vec<_>, Vec<_>) = layout
                .modes()
                .iter()
                .map(coalesce)
                .map(|m| (m.shape().clone(), m.stride().clone()))
                .unzip();
            Layout::from_trusted(IntTuple::Tuple(shapes), IntTuple::Tuple(strides))
        }
    }
}

/// Coalesces the sub-layouts at the leaves of `profile`, which must be weakly congruent with
/// the layout's shape (its leaf values are ignored; they only mark where to coalesce).
pub fn coalesce_with_profile(layout: &Layout, profile: &IntTuple) -> Result<Layout, AlgebraError> {
    match profile {
        IntTuple::Int(_) => Ok(coalesce(layout)),
        IntTuple::Tuple(ps)
            if matches!(layout.shape(), IntTuple::Tuple(_)) && ps.len() == layout.rank() =>
        {
            let modes = layout
                .modes()
                .iter()
                .zip(ps)
                .map(|(m, p)| coalesce_with_profile(m, p))
                .collect::<Result<Vec<_>, _>>()?;
            Layout::from_modes(modes)
        }
        IntTuple::Tuple(_) => Err(AlgebraError::NotWeaklyCongruent {
            tuple: profile.clone(),
            shape: layout.shape().clone(),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn l(s: &str) -> Layout {
        s.parse().unwrap()
    }

    fn same_function(a: &Layout, b: &Layout) -> bool {
        a.size() == b.size() && (0..a.size()).all(|i| a.call(i) == b.call(i))
    }

    #[test]
    fn cute_example() {
        let a = l("(_2,(_1,_6)):(_1,(_6,_2))");
        let c = coalesce(&a);
        assert_eq!(format!("{c:#}"), "_12:_1");
        assert!(same_function(&a, &c));
    }

    #[test]
    fn merges_only_contiguous_neighbours() {
        assert_eq!(coalesce(&l("(2,4):(1,2)")).to_string(), "8:1");
        assert_eq!(coalesce(&l("(2,4):(4,1)")).to_string(), "(2,4):(4,1)");
        assert_eq!(coalesce(&l("(2,(3,4)):(1,(2,6))")).to_string(), "24:1");
        assert_eq!(
            coalesce(&l("(2,3,4):(1,10,30)")).to_string(),
            "(2,12):(1,10)"
        );
        assert_eq!(coalesce(&l("(3,2):(0,0)")).to_string(), "6:0");
        assert_eq!(format!("{:#}", coalesce(&l("(_1,_1):(_3,_5)"))), "_1:_0");
        assert_eq!(format!("{:#}", coalesce(&l("(_2,4):(_1,_2)"))), "8:_1");
    }

    #[test]
    fn by_mode_keeps_the_rank() {
        let a = l("(_2,(_1,_6)):(_1,(_6,_2))");
        let c = coalesce_by_mode(&a);
        assert_eq!(format!("{c:#}"), "(_2,_6):(_1,_2)");
        assert!(same_function(&a, &c));
        let p = coalesce_with_profile(&a, &"(1,1)".parse().unwrap()).unwrap();
        assert_eq!(p, c);
        let whole = coalesce_with_profile(&a, &"1".parse().unwrap()).unwrap();
        assert_eq!(whole, coalesce(&a));
        assert!(coalesce_with_profile(&a, &"(1,1,1)".parse().unwrap()).is_err());
    }
}
