//! Layouts: functions from coordinates to offsets, written as a shape and a stride.
//!
//! A [`Layout`] pairs a shape with a congruent stride, both [`IntTuple`]s. It maps a coordinate
//! of the shape to the inner product of the coordinate with the stride, so `(4,3):(1,4)` is a
//! column-major 4×3 matrix and `(4,3):(3,1)` a row-major one. Because every coordinate has a
//! 1-D index (colexicographic, see [`idx2crd`](super::int_tuple::idx2crd)), a layout is also a
//! function from `[0, size)` to offsets, and that 1-D view is what the algebra of the sibling
//! modules works on: two layouts are the same function when they agree at every index.
//!
//! * The *size* is the number of coordinates (the product of the shape).
//! * The *cosize* is one past the largest offset, `layout(size - 1) + 1`; a *compact* layout has
//!   `cosize == size` and is a bijection onto `[0, size)`.
//!
//! Layouts are validated when built ([`Layout::new`]): shape and stride are congruent, every
//! extent is at least 1, no tuple is empty, and size and cosize fit in `usize`. Strides are
//! non-negative (CuTe also allows negative ones; this algebra does not). Displayed layouts use
//! CuTe's notation `(s0,s1):(d0,d1)`, which [`str::parse`] reads back; the alternate form
//! (`{:#}`) marks static integers `_4` as CuTe does.

use std::fmt;
use std::str::FromStr;

use super::error::AlgebraError;
use super::int_tuple::{Int, IntTuple, exclusive_prefix_product, exclusive_suffix_product, mul};

/// A shape and a congruent stride: a function from coordinates (or 1-D indices) to offsets.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Layout {
    shape: IntTuple,
    stride: IntTuple,
}

impl Layout {
    /// A layout from its shape and stride, after checking that they are congruent, that every
    /// extent is at least 1, that no tuple is empty and that size and cosize fit in `usize`.
    pub fn new(shape: IntTuple, stride: IntTuple) -> Result<Self, AlgebraError> {
        if !shape.is_congruent(&stride) {
            return Err(AlgebraError::NotCongruent { shape, stride });
        }
        if shape.has_empty_tuple() {
            return Err(AlgebraError::EmptyTuple { shape });
        }
        if let Some(leaf) = shape.leaves().iter().position(|s| s.value() == 0) {
            return Err(AlgebraError::ZeroExtent { shape, leaf });
        }
        shape.size()?;
        let mut top = 0usize;
        for (s, d) in shape.leaves().into_iter().zip(stride.leaves()) {
            top = (s.value() - 1)
                .checked_mul(d.value())
                .and_then(|x| x.checked_add(top))
                .ok_or(AlgebraError::Overflow {
                    what: "the cosize of a layout",
                })?;
        }
        top.checked_add(1).ok_or(AlgebraError::Overflow {
            what: "the cosize of a layout",
        })?;
        Ok(Layout { shape, stride })
    }

    /// A layout whose invariants the caller has already established (congruent, non-empty,
    /// non-zero extents, size and cosize within `usize`).
    pub(super) fn from_trusted(shape: IntTuple, stride: IntTuple) -> Self {
        debug_assert!(shape.is_congruent(&stride));
        Layout { shape, stride }
    }

    /// The compact column-major layout of `shape` (CuTe's `LayoutLeft`): the strides are the
    /// exclusive prefix products, so the leftmost leaf varies fastest. `(2,(3,4))` gives
    /// `(2,(3,4)):(1,(2,6))`.
    pub fn compact_col_major(shape: IntTuple) -> Result<Self, AlgebraError> {
        let stride = exclusive_prefix_product(&shape)?;
        Layout::new(shape, stride)
    }

    /// The compact row-major layout of `shape` (CuTe's `LayoutRight`): the rightmost leaf varies
    /// fastest. `(2,(3,4))` gives `(2,(3,4)):(12,(4,1))`.
    pub fn compact_row_major(shape: IntTuple) -> Result<Self, AlgebraError> {
        let stride = exclusive_suffix_product(&shape)?;
        Layout::new(shape, stride)
    }

    /// The layout whose top-level modes are `modes` (CuTe's `make_layout(a, b, ...)`): the
    /// concatenation of the layouts as functions of their own coordinates.
    pub fn from_modes(modes: impl IntoIterator<Item = Layout>) -> Result<Self, AlgebraError> {
        let (shapes, strides): (Vec<_>, Vec<_>) =
            modes.into_iter().map(|m| (m.shape, m.stride)).unzip();
        if shapes.is_empty() {
            return Err(AlgebraError::NoModes);
        }
        Layout::new(IntTuple::Tuple(shapes), IntTuple::Tuple(strides))
    }

    /// The layout with a single mode of extent `size` and stride `stride`.
    pub fn leaf(size: Int, stride: Int) -> Result<Self, AlgebraError> {
        Layout::new(IntTuple::Int(size), IntTuple::Int(stride))
    }

    /// The shape.
    pub fn shape(&self) -> &IntTuple {
        &self.shape
    }

    /// The stride.
    pub fn stride(&self) -> &IntTuple {
        &self.stride
    }

    /// The number of coordinates, the product of the shape.
    pub fn size(&self) -> usize {
        self.size_int().value()
    }

    /// The size as an [`Int`]: static when every extent is.
    pub fn size_int(&self) -> Int {
        self.leaves()
            .into_iter()
            .fold(Int::Static(1), |acc, (s, _)| {
                mul(acc, s, "size").expect("Layout::new checked that the size fits usize")
            })
    }

    /// One past the largest offset: `layout(size - 1) + 1`.
    pub fn cosize(&self) -> usize {
        self.cosize_int().value()
    }

    /// The cosize as an [`Int`]: static when every extent and stride is.
    pub fn cosize_int(&self) -> Int {
        let v = 1 + self
            .leaves()
            .into_iter()
            .map(|(s, d)| (s.value() - 1) * d.value())
            .sum::<usize>();
        if self.is_static() {
            Int::Static(v)
        } else {
            Int::Dynamic(v)
        }
    }

    /// The number of top-level modes.
    pub fn rank(&self) -> usize {
        self.shape.rank()
    }

    /// The nesting depth of the shape (0 for a single integer mode).
    pub fn depth(&self) -> usize {
        self.shape.depth()
    }

    /// Top-level mode `i` as a layout; a layout with an integer shape is its own mode 0.
    pub fn mode(&self, i: usize) -> Result<Layout, AlgebraError> {
        match (self.shape.mode(i), self.stride.mode(i)) {
            (Some(s), Some(d)) => Ok(Layout::from_trusted(s.clone(), d.clone())),
            _ => Err(AlgebraError::ModeOutOfRange {
                index: i,
                rank: self.rank(),
            }),
        }
    }

    /// The top-level modes as layouts.
    pub fn modes(&self) -> Vec<Layout> {
        self.shape
            .modes()
            .iter()
            .zip(self.stride.modes())
            .map(|(s, d)| Layout::from_trusted(s.clone(), d.clone()))
            .collect()
    }

    /// The `(extent, stride)` pairs of the leaves, left to right.
    pub fn leaves(&self) -> Vec<(Int, Int)> {
        self.shape
            .leaves()
            .into_iter()
            .zip(self.stride.leaves())
            .collect()
    }

    /// The same function with a flat shape: the leaves become the modes.
    pub fn flatten(&self) -> Layout {
        Layout::from_trusted(self.shape.flatten(), self.stride.flatten())
    }

    /// Whether every extent and stride is static.
    pub fn is_static(&self) -> bool {
        self.shape.is_static() && self.stride.is_static()
    }

    /// The offset of the 1-D index `idx`.
    ///
    /// For `idx < size` this is exact. Larger indices follow CuTe's convention that the last
    /// leaf is unbounded (its coordinate absorbs what is left of the index); that extension
    /// saturates at `usize::MAX` rather than overflow.
    pub fn call(&self, idx: usize) -> usize {
        let mut rest = idx;
        let mut acc = 0usize;
        let mut last = (1usize, 0usize);
        for (s, d) in self.leaves() {
            let (s, d) = (s.value(), d.value());
            acc += (rest % s) * d;
            rest /= s;
            last = (s, d);
        }
        if rest > 0 {
            acc = acc.saturating_add(rest.saturating_mul(last.0).saturating_mul(last.1));
        }
        acc
    }

    /// The offset of a coordinate. The coordinate must be weakly congruent with the shape (an
    /// integer standing for a tuple mode is a 1-D index into that mode) and inside it.
    pub fn call_coord(&self, coord: &IntTuple) -> Result<usize, AlgebraError> {
        match (coord, &self.shape) {
            (IntTuple::Int(c), _) => {
                if c.value() >= self.size() {
                    return Err(AlgebraError::CoordinateOutOfBounds {
                        coord: c.value(),
                        size: self.size(),
                    });
                }
                Ok(self.call(c.value()))
            }
            (IntTuple::Tuple(cs), IntTuple::Tuple(ss)) if cs.len() == ss.len() => {
                let mut acc = 0usize;
                for (c, m) in cs.iter().zip(self.modes()) {
                    acc += m.call_coord(c)?;
                }
                Ok(acc)
            }
            _ => Err(AlgebraError::NotWeaklyCongruent {
                tuple: coord.clone(),
                shape: self.shape.clone(),
            }),
        }
    }
}

/// CuTe's notation, `(s0,s1):(d0,d1)`; `{:#}` prints static integers as `_4`.
impl fmt::Display for Layout {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if f.alternate() {
            write!(f, "{:#}:{:#}", self.shape, self.stride)
        } else {
            write!(f, "{}:{}", self.shape, self.stride)
        }
    }
}

/// Reads CuTe's notation `shape:stride`, e.g. `(_2,(_1,_6)):(_1,(_6,_2))`; `_4` is static and
/// `4` dynamic. The result is validated as by [`Layout::new`].
impl FromStr for Layout {
    type Err = AlgebraError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let (shape, stride) = s.split_once(':').ok_or_else(|| AlgebraError::Parse {
            input: s.to_string(),
            reason: "expected `shape:stride`".to_string(),
        })?;
        Layout::new(shape.parse()?, stride.parse()?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn l(s: &str) -> Layout {
        s.parse().unwrap()
    }

    #[test]
    fn new_checks_congruence_and_extents() {
        let e = Layout::new("(2,3)".parse().unwrap(), "(1)".parse().unwrap()).unwrap_err();
        assert_eq!(
            e.to_string(),
            "shape (2,3) and stride (1) are not congruent"
        );
        assert!(matches!(
            "(2,0):(1,2)".parse::<Layout>(),
            Err(AlgebraError::ZeroExtent { leaf: 1, .. })
        ));
        assert!(matches!(
            "(2,()):(1,())".parse::<Layout>(),
            Err(AlgebraError::EmptyTuple { .. })
        ));
        let huge = format!("({0},{0}):(1,1)", usize::MAX);
        assert!(matches!(
            huge.parse::<Layout>(),
            Err(AlgebraError::Overflow { .. })
        ));
        assert!("(2,3)".parse::<Layout>().is_err());
    }

    #[test]
    fn compact_layouts() {
        let shape: IntTuple = "(2,(3,4))".parse().unwrap();
        let col = Layout::compact_col_major(shape.clone()).unwrap();
        assert_eq!(col.to_string(), "(2,(3,4)):(1,(2,6))");
        let row = Layout::compact_row_major(shape).unwrap();
        assert_eq!(row.to_string(), "(2,(3,4)):(12,(4,1))");
        for layout in [col, row] {
            assert_eq!((layout.size(), layout.cosize()), (24, 24));
            let mut seen: Vec<usize> = (0..24).map(|i| layout.call(i)).collect();
            seen.sort_unstable();
            assert_eq!(seen, (0..24).collect::<Vec<_>>());
        }
    }

    #[test]
    fn accessors_and_evaluation() {
        let a = l("(4,(3,2)):(2,(8,40))");
        assert_eq!((a.rank(), a.depth(), a.size(), a.cosize()), (2, 2, 24, 63));
        assert_eq!(a.mode(1).unwrap().to_string(), "(3,2):(8,40)");
        assert!(a.mode(2).is_err());
        assert_eq!(a.flatten().to_string(), "(4,3,2):(2,8,40)");
        // index 13 = (1, (0, 1)) colexicographically
        assert_eq!(a.call(13), 2 + 40);
        let c: IntTuple = "(1,(0,1))".parse().unwrap();
        assert_eq!(a.call_coord(&c).unwrap(), 42);
        let c: IntTuple = "(1,3)".parse().unwrap();
        assert_eq!(a.call_coord(&c).unwrap(), 42);
        let c: IntTuple = "13".parse().unwrap();
        assert_eq!(a.call_coord(&c).unwrap(), 42);
        assert!(a.call_coord(&"(4,0)".parse().unwrap()).is_err());
        assert!(a.call_coord(&"(1,2,3)".parse().unwrap()).is_err());
        // past the size, the last leaf is unbounded
        assert_eq!(a.call(24), 80);
        assert_eq!(l("8:1").mode(0).unwrap(), l("8:1"));
    }

    #[test]
    fn display_and_parse_round_trip_with_staticness() {
        let a = l("(_2,(3,_4)):(_1,(2,6))");
        assert_eq!(a.to_string(), "(2,(3,4)):(1,(2,6))");
        assert_eq!(format!("{a:#}"), "(_2,(3,_4)):(_1,(2,6))");
        assert_eq!(l(&format!("{a:#}")), a);
        assert!(!a.is_static());
        assert!(a.size_int().is_dynamic());
        let s = l("(_2,_3):(_3,_1)");
        assert!(s.is_static() && s.size_int().is_static() && s.cosize_int().is_static());
        assert_eq!(
            Layout::compact_col_major("(_2,_3)".parse().unwrap()).unwrap(),
            l("(_2,_3):(_1,_2)")
        );
    }
}
