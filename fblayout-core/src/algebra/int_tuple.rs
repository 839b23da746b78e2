//! Integers and hierarchical integer tuples, the vocabulary that shapes, strides and coordinates
//! are written in.
//!
//! An [`Int`] is a non-negative integer that also records *when* it is known. A static `Int` is
//! fixed when a layout is declared (CuTe's `Int<4>{}`, printed `_4` in CuTe's notation); a
//! dynamic one is only known at run time (a sequence length, a batch size). Both carry their
//! value, so every operation of the algebra can be evaluated, but the flag travels with the
//! arithmetic: a result is static only when everything it was computed from is static. A code
//! generator can therefore inline static numbers and pass dynamic ones as parameters.
//!
//! An [`IntTuple`] is either an `Int` or a tuple of `IntTuple`s, so `(2,(3,4))` is a rank-2 tuple
//! whose second mode is itself a rank-2 tuple. Shapes, strides and coordinates are all
//! `IntTuple`s; what relates them is *congruence* (the same tree), *weak congruence* (one tree is
//! a coarsening of the other) and *compatibility* (coordinates of one can index the other).
//!
//! Coordinates are read colexicographically, as in CuTe: the leftmost mode varies fastest, so in
//! a shape `(2,3)` the 1-D index `i` is the coordinate `(i % 2, i / 2)` ([`idx2crd`]) and back
//! ([`crd2idx`]).
//!
//! Everything here uses checked arithmetic: overflow is an [`AlgebraError::Overflow`], never a
//! panic or a silent wrap.

use std::fmt;
use std::str::FromStr;

use super::error::AlgebraError;

/// A non-negative integer that is either static (known when a layout is declared) or dynamic
/// (known only at run time). Both kinds carry their value.
///
/// Arithmetic propagates staticness: the result of an operation is static exactly when all of
/// its operands are static. Two `Int`s with the same value but different staticness are not
/// equal (`Int::Static(4) != Int::Dynamic(4)`); compare [`Int::value`]s to ignore the flag.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Int {
    /// Known when the layout is declared (CuTe's `Int<N>{}`).
    Static(usize),
    /// Known only at run time.
    Dynamic(usize),
}

impl Int {
    /// The integer's value.
    pub const fn value(self) -> usize {
        match self {
            Int::Static(v) | Int::Dynamic(v) => v,
        }
    }

    /// Whether the integer is known when the layout is declared.
    pub const fn is_static(self) -> bool {
        matches!(self, Int::Static(_))
    }

    /// Whether the integer is only known at run time.
    pub const fn is_dynamic(self) -> bool {
        !self.is_static()
    }

    /// An `Int` with value `v`, static exactly when both `self` and `other` are.
    const fn joined(self, other: Int, v: usize) -> Int {
        if self.is_static() && other.is_static() {
            Int::Static(v)
        } else {
            Int::Dynamic(v)
        }
    }

    /// `self * rhs`, or `None` on overflow.
    pub fn checked_mul(self, rhs: Int) -> Option<Int> {
        Some(self.joined(rhs, self.value().checked_mul(rhs.value())?))
    }

    /// `self + rhs`, or `None` on overflow.
    pub fn checked_add(self, rhs: Int) -> Option<Int> {
        Some(self.joined(rhs, self.value().checked_add(rhs.value())?))
    }

    /// `self - rhs`, or `None` when `rhs > self`.
    pub fn checked_sub(self, rhs: Int) -> Option<Int> {
        Some(self.joined(rhs, self.value().checked_sub(rhs.value())?))
    }

    /// `self / rhs` rounded down, or `None` when `rhs` is zero.
    pub fn checked_div(self, rhs: Int) -> Option<Int> {
        Some(self.joined(rhs, self.value().checked_div(rhs.value())?))
    }

    /// `self % rhs`, or `None` when `rhs` is zero.
    pub fn checked_rem(self, rhs: Int) -> Option<Int> {
        Some(self.joined(rhs, self.value().checked_rem(rhs.value())?))
    }

    /// `self / rhs` rounded up, or `None` when `rhs` is zero.
    pub fn checked_ceil_div(self, rhs: Int) -> Option<Int> {
        let (a, b) = (self.value(), rhs.value());
        if b == 0 {
            return None;
        }
        Some(self.joined(rhs, a / b + usize::from(!a.is_multiple_of(b))))
    }

    /// The smaller of the two values; static when both operands are.
    pub fn min(self, rhs: Int) -> Int {
        self.joined(rhs, self.value().min(rhs.value()))
    }

    /// The larger of the two values; static when both operands are.
    pub fn max(self, rhs: Int) -> Int {
        self.joined(rhs, self.value().max(rhs.value()))
    }
}

/// Prints the value; the alternate form (`{:#}`) prints static integers as `_4`, as CuTe does.
impl fmt::Display for Int {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if f.alternate() && self.is_static() {
            write!(f, "_{}", self.value())
        } else {
            write!(f, "{}", self.value())
        }
    }
}

/// `a * b`, naming `what` on overflow.
pub(crate) fn mul(a: Int, b: Int, what: &'static str) -> Result<Int, AlgebraError> {
    a.checked_mul(b).ok_or(AlgebraError::Overflow { what })
}

/// `a + b`, naming `what` on overflow.
pub(crate) fn add(a: Int, b: Int, what: &'static str) -> Result<Int, AlgebraError> {
    a.checked_add(b).ok_or(AlgebraError::Overflow { what })
}

/// A hierarchical tuple of [`Int`]s: an integer or a tuple of `IntTuple`s.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum IntTuple {
    /// A single integer (a leaf).
    Int(Int),
    /// A tuple of modes, each itself an `IntTuple`.
    Tuple(Vec<IntTuple>),
}

impl From<Int> for IntTuple {
    fn from(value: Int) -> Self {
        IntTuple::Int(value)
    }
}

impl From<Vec<IntTuple>> for IntTuple {
    fn from(value: Vec<IntTuple>) -> Self {
        IntTuple::Tuple(value)
    }
}

impl IntTuple {
    /// A static leaf.
    pub const fn fixed(v: usize) -> Self {
        IntTuple::Int(Int::Static(v))
    }

    /// A dynamic leaf.
    pub const fn dynamic(v: usize) -> Self {
        IntTuple::Int(Int::Dynamic(v))
    }

    /// A flat tuple of the given leaves.
    pub fn flat(leaves: impl IntoIterator<Item = Int>) -> Self {
        IntTuple::Tuple(leaves.into_iter().map(IntTuple::Int).collect())
    }

    /// The number of top-level modes: 1 for an integer, the length for a tuple.
    pub fn rank(&self) -> usize {
        self.modes().len()
    }

    /// The nesting depth: 0 for an integer, 1 for a flat tuple, and so on.
    pub fn depth(&self) -> usize {
        match self {
            IntTuple::Int(_) => 0,
            IntTuple::Tuple(ms) => 1 + ms.iter().map(IntTuple::depth).max().unwrap_or(0),
        }
    }

    /// The top-level modes; an integer is its own single mode.
    pub fn modes(&self) -> &[IntTuple] {
        match self {
            IntTuple::Int(_) => std::slice::from_ref(self),
            IntTuple::Tuple(ms) => ms,
        }
    }

    /// Mode `i`, or `None` when `i >= rank`.
    pub fn mode(&self, i: usize) -> Option<&IntTuple> {
        self.modes().get(i)
    }

    /// The leaves, left to right.
    pub fn leaves(&self) -> Vec<Int> {
        let mut out = Vec::new();
        self.push_leaves(&mut out);
        out
    }

    fn push_leaves(&self, out: &mut Vec<Int>) {
        match self {
            IntTuple::Int(v) => out.push(*v),
            IntTuple::Tuple(ms) => ms.iter().for_each(|m| m.push_leaves(out)),
        }
    }

    /// The leaves as a flat tuple; an integer stays an integer.
    pub fn flatten(&self) -> IntTuple {
        match self {
            IntTuple::Int(_) => self.clone(),
            IntTuple::Tuple(_) => IntTuple::flat(self.leaves()),
        }
    }

    /// The product of the leaves (1 for an empty tuple); static when every leaf is.
    pub fn size(&self) -> Result<Int, AlgebraError> {
        self.leaves()
            .into_iter()
            .try_fold(Int::Static(1), |acc, v| mul(acc, v, "the size of a shape"))
    }

    /// Whether every leaf is static.
    pub fn is_static(&self) -> bool {
        self.leaves().iter().all(|v| v.is_static())
    }

    /// Whether the tuple contains an empty tuple anywhere.
    pub fn has_empty_tuple(&self) -> bool {
        match self {
            IntTuple::Int(_) => false,
            IntTuple::Tuple(ms) => ms.is_empty() || ms.iter().any(IntTuple::has_empty_tuple),
        }
    }

    /// Whether `self` and `other` have the same tree (leaf values may differ).
    pub fn is_congruent(&self, other: &IntTuple) -> bool {
        match (self, other) {
            (IntTuple::Int(_), IntTuple::Int(_)) => true,
            (IntTuple::Tuple(a), IntTuple::Tuple(b)) => {
                a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.is_congruent(y))
            }
            _ => false,
        }
    }

    /// Whether `self`'s tree is a coarsening of `other`'s: wherever `self` has a leaf, `other`
    /// may have any subtree; wherever `self` has a tuple, `other` has a tuple of the same rank.
    pub fn is_weakly_congruent(&self, other: &IntTuple) -> bool {
        match (self, other) {
            (IntTuple::Int(_), _) => true,
            (IntTuple::Tuple(a), IntTuple::Tuple(b)) => {
                a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.is_weakly_congruent(y))
            }
            (IntTuple::Tuple(_), IntTuple::Int(_)) => false,
        }
    }

    /// Whether every coordinate of shape `self` is also a coordinate of shape `other`: the sizes
    /// agree and, wherever `self` is a tuple, `other` is a tuple of the same rank whose modes are
    /// compatible in turn. (CuTe's `compatible`.)
    pub fn is_compatible(&self, other: &IntTuple) -> bool {
        match (self, other) {
            (IntTuple::Int(a), _) => other.size().is_ok_and(|b| b.value() == a.value()),
            (IntTuple::Tuple(a), IntTuple::Tuple(b)) => {
                a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.is_compatible(y))
            }
            (IntTuple::Tuple(_), IntTuple::Int(_)) => false,
        }
    }

    /// Replaces the leaves of `self`, left to right, by the trees that `parts` yields.
    /// Returns `None` when `parts` runs out.
    pub(crate) fn replace_leaves(
        &self,
        parts: &mut impl Iterator<Item = IntTuple>,
    ) -> Option<IntTuple> {
        match self {
            IntTuple::Int(_) => parts.next(),
            IntTuple::Tuple(ms) => ms
                .iter()
                .map(|m| m.replace_leaves(parts))
                .collect::<Option<Vec<_>>>()
                .map(IntTuple::Tuple),
        }
    }
}

/// Prints `4`, `(2,3)`, `(2,(3,4))`; the alternate form (`{:#}`) prints static leaves as `_4`.
impl fmt::Display for IntTuple {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            IntTuple::Int(v) => fmt::Display::fmt(v, f),
            IntTuple::Tuple(ms) => {
                f.write_str("(")?;
                for (i, m) in ms.iter().enumerate() {
                    if i > 0 {
                        f.write_str(",")?;
                    }
                    fmt::Display::fmt(m, f)?;
                }
                f.write_str(")")
            }
        }
    }
}

/// Parses CuTe's notation: `_4` is a static leaf, `4` a dynamic one, and tuples are written
/// `(a,b,...)`. Whitespace is ignored.
impl FromStr for IntTuple {
    type Err = AlgebraError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let compact: Vec<u8> = s.bytes().filter(|b| !b.is_ascii_whitespace()).collect();
        let fail = |reason: &str| AlgebraError::Parse {
            input: s.to_string(),
            reason: reason.to_string(),
        };
        let mut pos = 0;
        let tuple = parse_tuple(&compact, &mut pos, 0).map_err(fail)?;
        if pos != compact.len() {
            return Err(fail("trailing characters after the tuple"));
        }
        Ok(tuple)
    }
}

/// Nesting deeper than this is refused rather than risk the parser's stack.
const MAX_PARSE_DEPTH: usize = 64;

fn parse_tuple(s: &[u8], pos: &mut usize, depth: usize) -> Result<IntTuple, &'static str> {
    match s.get(*pos) {
        Some(b'(') => {
            if depth >= MAX_PARSE_DEPTH {
                return Err("tuples nested too deeply");
            }
            *pos += 1;
            let mut modes = Vec::new();
            if s.get(*pos) == Some(&b')') {
                *pos += 1;
                return Ok(IntTuple::Tuple(modes));
            }
            loop {
                modes.push(parse_tuple(s, pos, depth + 1)?);
                match s.get(*pos) {
                    Some(b',') => *pos += 1,
                    Some(b')') => {
                        *pos += 1;
                        return Ok(IntTuple::Tuple(modes));
                    }
                    _ => return Err("expected `,` or `)`"),
                }
            }
        }
        Some(_) => {
            let is_static = s.get(*pos) == Some(&b'_');
            if is_static {
                *pos += 1;
            }
            let start = *pos;
            while s.get(*pos).is_some_and(u8::is_ascii_digit) {
                *pos += 1;
            }
            let digits = std::str::from_utf8(&s[start..*pos]).map_err(|_| "invalid text")?;
            let v: usize = digits.parse().map_err(|_| "expected an integer")?;
            Ok(IntTuple::Int(if is_static {
                Int::Static(v)
            } else {
                Int::Dynamic(v)
            }))
        }
        None => Err("unexpected end of input"),
    }
}

/// The inner product of two congruent tuples: the sum of the products of matching leaves.
pub fn inner_product(a: &IntTuple, b: &IntTuple) -> Result<Int, AlgebraError> {
    if !a.is_congruent(b) {
        return Err(AlgebraError::NotCongruent {
            shape: a.clone(),
            stride: b.clone(),
        });
    }
    a.leaves()
        .into_iter()
        .zip(b.leaves())
        .try_fold(Int::Static(0), |acc, (x, y)| {
            add(acc, mul(x, y, "an inner product")?, "an inner product")
        })
}

/// The exclusive prefix product of a shape, in colexicographic order: the strides of the compact
/// column-major layout of that shape. `(2,(3,4))` gives `(1,(2,6))`.
pub fn exclusive_prefix_product(shape: &IntTuple) -> Result<IntTuple, AlgebraError> {
    fn go(t: &IntTuple, acc: &mut Int) -> Result<IntTuple, AlgebraError> {
        match t {
            IntTuple::Int(v) => {
                let here = *acc;
                *acc = mul(*acc, *v, "a prefix product")?;
                Ok(IntTuple::Int(here))
            }
            IntTuple::Tuple(ms) => ms
                .iter()
                .map(|m| go(m, acc))
                .collect::<Result<_, _>>()
                .map(IntTuple::Tuple),
        }
    }
    go(shape, &mut Int::Static(1))
}

/// The exclusive suffix product of a shape: the strides of the compact row-major layout, in
/// which the rightmost leaf varies fastest. `(2,(3,4))` gives `(12,(4,1))`.
pub fn exclusive_suffix_product(shape: &IntTuple) -> Result<IntTuple, AlgebraError> {
    fn go(t: &IntTuple, acc: &mut Int) -> Result<IntTuple, AlgebraError> {
        match t {
            IntTuple::Int(v) => {
                let here = *acc;
                *acc = mul(*acc, *v, "a suffix product")?;
                Ok(IntTuple::Int(here))
            }
            IntTuple::Tuple(ms) => {
                let mut out = ms
                    .iter()
                    .rev()
                    .map(|m| go(m, acc))
                    .collect::<Result<Vec<_>, _>>()?;
                out.reverse();
                Ok(IntTuple::Tuple(out))
            }
        }
    }
    go(shape, &mut Int::Static(1))
}

/// The 1-D (colexicographic) index of `coord` in `shape`.
///
/// `coord` must be weakly congruent with `shape`; an integer coordinate standing for a tuple
/// mode is already a 1-D index into that mode. Every coordinate must lie inside its mode.
pub fn crd2idx(coord: &IntTuple, shape: &IntTuple) -> Result<usize, AlgebraError> {
    match (coord, shape) {
        (IntTuple::Int(c), _) => {
            let size = shape.size()?.value();
            if c.value() >= size {
                return Err(AlgebraError::CoordinateOutOfBounds {
                    coord: c.value(),
                    size,
                });
            }
            Ok(c.value())
        }
        (IntTuple::Tuple(cs), IntTuple::Tuple(ss)) if cs.len() == ss.len() => {
            let mut idx = 0usize;
            let mut scale = 1usize;
            for (c, s) in cs.iter().zip(ss) {
                let part = crd2idx(c, s)?;
                idx = part
                    .checked_mul(scale)
                    .and_then(|p| p.checked_add(idx))
                    .ok_or(AlgebraError::Overflow { what: "crd2idx" })?;
                scale = scale
                    .checked_mul(s.size()?.value())
                    .ok_or(AlgebraError::Overflow { what: "crd2idx" })?;
            }
            Ok(idx)
        }
        _ => Err(AlgebraError::NotWeaklyCongruent {
            tuple: coord.clone(),
            shape: shape.clone(),
        }),
    }
}

/// The coordinate, congruent with `shape`, of the 1-D index `idx` (colexicographic: the leftmost
/// mode varies fastest). The index must be smaller than the size of `shape`. The coordinate's
/// leaves are dynamic, as coordinates are run-time values.
pub fn idx2crd(idx: usize, shape: &IntTuple) -> Result<IntTuple, AlgebraError> {
    let size = shape.size()?.value();
    if idx >= size {
        return Err(AlgebraError::IndexOutOfBounds {
            index: idx,
            shape: shape.clone(),
            size,
        });
    }
    fn go(idx: usize, t: &IntTuple) -> Result<IntTuple, AlgebraError> {
        match t {
            IntTuple::Int(_) => Ok(IntTuple::dynamic(idx)),
            IntTuple::Tuple(ms) => {
                let mut rest = idx;
                let mut out = Vec::with_capacity(ms.len());
                for m in ms {
                    let n = m.size()?.value();
                    out.push(go(rest % n, m)?);
                    rest /= n;
                }
                Ok(IntTuple::Tuple(out))
            }
        }
    }
    go(idx, shape)
}

/// Divides the first `divisor` elements out of `shape`, leaf by leaf from the left (CuTe's
/// `shape_div`): `(3,6,2,8) / 9 = (1,2,2,8)`. At each leaf either the leaf is a multiple of what
/// is left of the divisor or the other way round; otherwise the division is not defined.
pub fn shape_div(shape: &IntTuple, divisor: Int) -> Result<IntTuple, AlgebraError> {
    if divisor.value() == 0 {
        return Err(AlgebraError::ZeroDivisor { op: "shape_div" });
    }
    let mut rest = divisor;
    let mut parts = Vec::new();
    for (leaf, s) in shape.leaves().into_iter().enumerate() {
        let (sv, rv) = (s.value(), rest.value());
        let not_divisible = AlgebraError::NotDivisible {
            op: "shape_div",
            divisor: rv,
            extent: sv,
            leaf,
        };
        if sv == 0 || (!sv.is_multiple_of(rv) && !rv.is_multiple_of(sv)) {
            return Err(not_divisible);
        }
        parts.push(IntTuple::Int(
            s.checked_ceil_div(rest).ok_or(not_divisible.clone())?,
        ));
        rest = rest.checked_ceil_div(s).ok_or(not_divisible)?;
    }
    Ok(shape
        .replace_leaves(&mut parts.into_iter())
        .unwrap_or_else(|| shape.clone()))
}

/// Keeps the first `modulus` elements of `shape`, leaf by leaf from the left (CuTe's
/// `shape_mod`): `(3,6,2,8) % 6 = (3,2,1,1)`. The same divisibility condition as [`shape_div`]
/// applies at every leaf.
pub fn shape_mod(shape: &IntTuple, modulus: Int) -> Result<IntTuple, AlgebraError> {
    if modulus.value() == 0 {
        return Err(AlgebraError::ZeroDivisor { op: "shape_mod" });
    }
    let mut rest = modulus;
    let mut parts = Vec::new();
    for (leaf, s) in shape.leaves().into_iter().enumerate() {
        let (sv, rv) = (s.value(), rest.value());
        let not_divisible = AlgebraError::NotDivisible {
            op: "shape_mod",
            divisor: rv,
            extent: sv,
            leaf,
        };
        if sv == 0 || (!sv.is_multiple_of(rv) && !rv.is_multiple_of(sv)) {
            return Err(not_divisible);
        }
        parts.push(IntTuple::Int(s.min(rest)));
        rest = rest.checked_ceil_div(s).ok_or(not_divisible)?;
    }
    Ok(shape
        .replace_leaves(&mut parts.into_iter())
        .unwrap_or_else(|| shape.clone()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(s: &str) -> IntTuple {
        s.parse().unwrap()
    }

    #[test]
    fn staticness_propagates_through_arithmetic() {
        let (s, d) = (Int::Static(6), Int::Dynamic(4));
        assert_eq!(s.checked_mul(Int::Static(2)), Some(Int::Static(12)));
        assert_eq!(s.checked_mul(d), Some(Int::Dynamic(24)));
        assert_eq!(d.checked_add(s), Some(Int::Dynamic(10)));
        assert_eq!(s.checked_ceil_div(d), Some(Int::Dynamic(2)));
        assert_eq!(s.min(Int::Static(3)), Int::Static(3));
        assert_eq!(s.checked_div(Int::Static(0)), None);
        assert_eq!(Int::Static(usize::MAX).checked_mul(s), None);
    }

    #[test]
    fn parse_and_display_round_trip() {
        let x = t("(_2,(3, _4))");
        assert_eq!(x.to_string(), "(2,(3,4))");
        assert_eq!(format!("{x:#}"), "(_2,(3,_4))");
        assert_eq!(t(&format!("{x:#}")), x);
        assert!(t("()").has_empty_tuple());
        assert!("(2,".parse::<IntTuple>().is_err());
        assert!("(2)x".parse::<IntTuple>().is_err());
        assert!("(,)".parse::<IntTuple>().is_err());
        assert!("(".repeat(100_000).parse::<IntTuple>().is_err());
    }

    #[test]
    fn rank_depth_size_flatten() {
        let x = t("(2,(3,4),5)");
        assert_eq!((x.rank(), x.depth()), (3, 2));
        assert_eq!(x.size().unwrap().value(), 120);
        assert_eq!(x.flatten(), t("(2,3,4,5)"));
        assert_eq!((t("7").rank(), t("7").depth()), (1, 0));
        assert_eq!(t("()").size().unwrap().value(), 1);
        assert!(t("(_2,_3)").size().unwrap().is_static());
        assert!(t("(_2,3)").size().unwrap().is_dynamic());
    }

    #[test]
    fn congruence_and_compatibility() {
        assert!(t("(2,(3,4))").is_congruent(&t("(9,(9,9))")));
        assert!(!t("(2,(3,4))").is_congruent(&t("(9,9)")));
        assert!(t("(2,3)").is_weakly_congruent(&t("(9,(9,9))")));
        assert!(!t("(9,(9,9))").is_weakly_congruent(&t("(2,3)")));
        assert!(t("(2,12)").is_compatible(&t("(2,(3,4))")));
        assert!(!t("(2,(3,4))").is_compatible(&t("(2,12)")));
        assert!(t("24").is_compatible(&t("(2,(3,4))")));
    }

    #[test]
    fn prefix_products_and_inner_product() {
        assert_eq!(
            exclusive_prefix_product(&t("(2,(3,4))")).unwrap(),
            t("(_1,(2,6))")
        );
        assert_eq!(
            exclusive_suffix_product(&t("(2,(3,4))")).unwrap(),
            t("(12,(4,_1))")
        );
        assert_eq!(
            inner_product(&t("(1,(2,3))"), &t("(4,(5,6))"))
                .unwrap()
                .value(),
            32
        );
        assert!(inner_product(&t("(1,2)"), &t("4")).is_err());
    }

    #[test]
    fn coordinates_are_colexicographic() {
        let shape = t("(2,(3,4))");
        for i in 0..24 {
            let c = idx2crd(i, &shape).unwrap();
            assert!(c.is_congruent(&shape));
            assert_eq!(crd2idx(&c, &shape).unwrap(), i);
        }
        assert_eq!(idx2crd(5, &shape).unwrap(), t("(1,(2,0))"));
        assert_eq!(crd2idx(&t("(1,7)"), &shape).unwrap(), 15);
        assert!(idx2crd(24, &shape).is_err());
        assert!(crd2idx(&t("(2,0)"), &shape).is_err());
        assert!(crd2idx(&t("(1,2,3)"), &shape).is_err());
    }

    #[test]
    fn shape_div_and_mod_match_the_cute_examples() {
        let div = |s: &str, d| shape_div(&t(s), Int::Dynamic(d)).unwrap().to_string();
        assert_eq!(div("(6,2)", 2), "(3,2)");
        assert_eq!(div("(6,2)", 3), "(2,2)");
        assert_eq!(div("(6,2)", 6), "(1,2)");
        assert_eq!(div("(6,2)", 12), "(1,1)");
        assert_eq!(div("(3,6,2,8)", 6), "(1,3,2,8)");
        assert_eq!(div("(3,6,2,8)", 9), "(1,2,2,8)");
        assert_eq!(div("(42,16,3)", 2), "(21,16,3)");
        assert_eq!(div("(42,16,3)", 6), "(7,16,3)");
        let md = |s: &str, m| shape_mod(&t(s), Int::Dynamic(m)).unwrap().to_string();
        assert_eq!(md("(6,2)", 2), "(2,1)");
        assert_eq!(md("(6,2)", 3), "(3,1)");
        assert_eq!(md("(6,2)", 6), "(6,1)");
        assert_eq!(md("(6,2)", 12), "(6,2)");
        assert_eq!(md("(3,6,2,8)", 6), "(3,2,1,1)");
        assert_eq!(md("(3,6,2,8)", 9), "(3,3,1,1)");
        assert_eq!(md("(1,2,2,8)", 2), "(1,2,1,1)");
        assert_eq!(md("(1,2,2,8)", 16), "(1,2,2,4)");
        let err = shape_div(&t("(6,2)"), Int::Dynamic(4)).unwrap_err();
        assert_eq!(
            err.to_string(),
            "shape_div: 4 and shape 6 of leaf 0 do not divide one another"
        );
        assert!(shape_mod(&t("(6,2)"), Int::Dynamic(0)).is_err());
    }
}
