//! Inverses: undoing a layout as a function on indices.
//!
//! A *right inverse* `R` of a layout `L` satisfies `L(R(i)) == i` for every `i < size(R)`: it
//! finds, for each offset in the contiguous range `[0, size(R))` that `L` reaches from 0, an
//! index that reaches it. [`right_inverse`] builds the largest such `R` the way CuTe does:
//! starting from offset 1 it repeatedly picks the (coalesced) mode whose stride is the extent
//! covered so far, and maps it back to the index stride of that mode. For a compact layout (a
//! bijection onto `[0, size)`), `R` has the full size and is the inverse permutation, so
//! `R ∘ L` and `L ∘ R` are both the identity.
//!
//! A *left inverse* `R` satisfies `R(L(i)) == i` for every `i < size(L)`; it exists for injective
//! layouts. [`left_inverse`] completes `L` with its complement (so `(L, L*)` is a bijection onto
//! a contiguous range) and takes the right inverse of that.

use super::coalesce::coalesce;
use super::complement::complement;
use super::error::AlgebraError;
use super::int_tuple::{Int, IntTuple};
use super::layout::Layout;

/// The right inverse of `layout`: `layout.call(r.call(i)) == i` for every `i < r.size()`. It is
/// `1:0` when offset 1 is not reached by any single step of `layout`.
pub fn right_inverse(layout: &Layout) -> Layout {
    let modes = coalesce(layout).leaves();
    // The index stride of each coalesced mode: the exclusive prefix product of the extents.
    let mut index_strides = Vec::with_capacity(modes.len());
    let mut acc = Int::Static(1);
    for (s, _) in &modes {
        index_strides.push(acc);
        acc = acc
            .checked_mul(*s)
            .expect("a product of extents divides the layout's size, which fits usize");
    }
    let mut shape = Vec::new();
    let mut stride = Vec::new();
    let mut reached = 1usize;
    while let Some(k) = modes
        .iter()
        .position(|(s, d)| d.value() == reached && s.value() > 1)
    {
        shape.push(modes[k].0);
        stride.push(index_strides[k]);
        match modes[k].0.value().checked_mul(reached) {
            Some(next) => reached = next,
            None => break,
        }
    }
    if shape.is_empty() {
        return Layout::from_trusted(IntTuple::Int(Int::Static(1)), IntTuple::Int(Int::Static(0)));
    }
    // The extents are distinct modes of `layout`, so size and cosize stay within its size.
    coalesce(&Layout::from_trusted(
        IntTuple::flat(shape),
        IntTuple::flat(stride),
    ))
}

/// A left inverse of an injective `layout`: `r.call(layout.call(i)) == i` for every
/// `i < layout.size()`. Refused when the layout's strides do not nest (see
/// [`complement`](super::complement::complement)).
pub fn left_inverse(layout: &Layout) -> Result<Layout, AlgebraError> {
    let rest = complement(layout, layout.cosize_int())?;
    Ok(right_inverse(&Layout::from_modes([layout.clone(), rest])?))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn l(s: &str) -> Layout {
        s.parse().unwrap()
    }

    #[test]
    fn inverts_permutations() {
        for text in [
            "(2,3):(3,1)",
            "((2,2),3):((1,6),2)",
            "(4,(2,3)):(6,(1,2))",
            "8:1",
        ] {
            let a = l(text);
            let r = right_inverse(&a);
            assert_eq!(r.size(), a.size(), "{a} -> {r}");
            for i in 0..a.size() {
                assert_eq!(a.call(r.call(i)), i);
                assert_eq!(r.call(a.call(i)), i);
            }
        }
        assert_eq!(right_inverse(&l("(2,3):(3,1)")).to_string(), "(3,2):(2,1)");
    }

    #[test]
    fn partial_right_inverses() {
        let a = l("(2,4):(1,4)");
        let r = right_inverse(&a);
        assert_eq!(r.to_string(), "2:1");
        assert_eq!(right_inverse(&l("4:2")).to_string(), "1:0");
        let r = right_inverse(&l("(_4,_2):(_2,_1)"));
        assert_eq!(format!("{r:#}"), "(_2,_4):(_4,_1)");
    }

    #[test]
    fn left_inverse_of_an_injective_layout() {
        for text in ["4:2", "(2,2):(1,6)", "(3,2):(8,1)", "(2,3):(3,1)"] {
            let a = l(text);
            let r = left_inverse(&a).unwrap();
            for i in 0..a.size() {
                assert_eq!(r.call(a.call(i)), i, "{a} with left inverse {r}");
            }
        }
        assert!(left_inverse(&l("(2,2):(1,1)")).is_err());
    }
}
