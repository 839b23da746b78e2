//! The complement of a layout: the layout of the offsets it does not reach.
//!
//! `complement(A, M)` is the ordered layout `R` (strictly increasing offsets, so it is unique)
//! that fills in what `A` leaves out of `[0, M)`: the concatenation `(A, R)` is injective and its
//! image is a contiguous range that covers `[0, M)`. When the extent `A` spans (the shape times
//! the stride of its largest-stride mode) divides `M`, the image is exactly `[0, M)`; otherwise
//! it is `[0, M)` rounded up to a multiple of that extent. `R` can be read as "the layout of the
//! repetitions of `A`": `complement(4:1, 24) = 6:4`, `complement(4:2, 24) = (2,3):(1,8)`.
//!
//! It is computed by sorting the modes of `A` by stride (dropping extent-1 and stride-0 modes)
//! and walking up: each gap between the extent covered so far and the next stride becomes a mode
//! of `R`, and a last mode repeats everything up to `M`. Each stride must be a multiple of the
//! extent covered by the smaller ones; when it is not, `A` is not injective or its strides do
//! not nest, and no such `R` exists ([`AlgebraError::ComplementNotAdmissible`]).

use super::coalesce::coalesce;
use super::error::AlgebraError;
use super::int_tuple::{Int, IntTuple, mul};
use super::layout::Layout;

/// The ordered complement of `layout` with respect to the codomain size `cotarget`.
///
/// The result is coalesced; when nothing needs to be added it is `1:0`. Static when `layout`
/// and `cotarget` are.
pub fn complement(layout: &Layout, cotarget: Int) -> Result<Layout, AlgebraError> {
    let mut modes: Vec<(Int, Int)> = layout
        .leaves()
        .into_iter()
        .filter(|(s, d)| s.value() != 1 && d.value() != 0)
        .collect();
    modes.sort_by_key(|(s, d)| (d.value(), s.value()));
    let mut covered = Int::Static(1);
    let mut shape = Vec::with_capacity(modes.len() + 1);
    let mut stride = Vec::with_capacity(modes.len() + 1);
    for (s, d) in modes {
        let not_admissible = AlgebraError::ComplementNotAdmissible {
            shape: s.value(),
            stride: d.value(),
            covered: covered.value(),
        };
        if !d.value().is_multiple_of(covered.value()) {
            return Err(not_admissible);
        }
        shape.push(d.checked_div(covered).ok_or(not_admissible)?);
        stride.push(covered);
        covered = mul(s, d, "a complement")?;
    }
    let rest = cotarget
        .checked_ceil_div(covered)
        .ok_or(AlgebraError::ZeroDivisor { op: "complement" })?;
    shape.push(rest.max(Int::Static(1)));
    stride.push(covered);
    let result = Layout::new(IntTuple::flat(shape), IntTuple::flat(stride))?;
    Ok(coalesce(&result))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn l(s: &str) -> Layout {
        s.parse().unwrap()
    }

    fn comp(a: &str, m: usize) -> String {
        complement(&l(a), Int::Static(m)).unwrap().to_string()
    }

    #[test]
    fn cute_examples() {
        assert_eq!(comp("4:1", 24), "6:4");
        assert_eq!(comp("6:4", 24), "4:1");
        assert_eq!(comp("(4,6):(1,4)", 24), "1:0");
        assert_eq!(comp("4:2", 24), "(2,3):(1,8)");
        assert_eq!(comp("(2,4):(1,6)", 24), "3:2");
        assert_eq!(comp("(2,2):(1,6)", 24), "(3,2):(2,12)");
    }

    #[test]
    fn concatenation_fills_the_codomain() {
        for (a, m) in [
            ("4:2", 24),
            ("(2,2):(1,6)", 24),
            ("(3,2):(8,1)", 48),
            ("4:2", 20),
        ] {
            let a = l(a);
            let r = complement(&a, Int::Static(m)).unwrap();
            let both = Layout::from_modes([a.clone(), r.clone()]).unwrap();
            let mut image: Vec<usize> = (0..both.size()).map(|i| both.call(i)).collect();
            image.sort_unstable();
            assert_eq!(image, (0..both.size()).collect::<Vec<_>>(), "{a} with {r}");
            assert!(both.size() >= m);
            for i in 1..r.size() {
                assert!(r.call(i - 1) < r.call(i), "{r} is not ordered");
            }
        }
    }

    #[test]
    fn staticness_and_errors() {
        let r = complement(&l("(_2,_2):(_1,_6)"), Int::Static(24)).unwrap();
        assert!(r.is_static());
        let r = complement(&l("(_2,_2):(_1,_6)"), Int::Dynamic(24)).unwrap();
        assert_eq!(format!("{r:#}"), "(_3,2):(_2,_12)");
        let e = complement(&l("(2,2):(1,1)"), Int::Static(8)).unwrap_err();
        assert_eq!(
            e.to_string(),
            "complement not admissible: stride 1 of mode 2:1 is not a multiple of 2, the extent \
             covered by the modes with smaller strides (the layout is not injective, or its \
             strides do not nest)"
        );
        assert!(complement(&l("(2,3):(3,2)"), Int::Static(12)).is_err());
    }
}
