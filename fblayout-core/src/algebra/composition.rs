//! Functional composition `A ∘ B` of layouts, and tilers that apply it mode by mode.
//!
//! [`composition`] returns a layout `R` with `R(i) == A(B(i))` for every `i < size(B)` whose
//! shape is compatible with `B`'s (each leaf of `B` becomes a mode, possibly split in several).
//! This is the core of the algebra: divides and products are compositions with complements.
//! [`composition`]'s own documentation says how it is computed and when it is admissible.
//!
//! A [`Tiler`] is either a layout (composition as 1-D functions) or a tuple of tilers applied to
//! the corresponding modes of `A` ([`composition_by_mode`]); modes of `A` past the tiler's rank
//! are kept as they are.

use super::coalesce::coalesce;
use super::error::{AlgebraError, Inadmissible};
use super::int_tuple::{Int, IntTuple, mul};
use super::layout::Layout;

/// What to compose, divide or tile by: a layout, or one tiler per mode.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Tiler {
    /// A layout, used as a 1-D function.
    Layout(Layout),
    /// A tiler for each leading mode of the layout it is applied to.
    Modes(Vec<Tiler>),
}

impl From<Layout> for Tiler {
    fn from(value: Layout) -> Self {
        Tiler::Layout(value)
    }
}

impl Tiler {
    /// A tiler with one layout per top-level mode.
    pub fn by_mode(layouts: impl IntoIterator<Item = Layout>) -> Self {
        Tiler::Modes(layouts.into_iter().map(Tiler::Layout).collect())
    }

    /// A shape read as a tiler, as CuTe does: every leaf `n` is the layout `n:1` and every tuple
    /// a tuple of tilers.
    pub fn from_shape(shape: &IntTuple) -> Result<Self, AlgebraError> {
        match shape {
            IntTuple::Int(n) => Ok(Tiler::Layout(Layout::leaf(*n, Int::Static(1))?)),
            IntTuple::Tuple(ms) => ms
                .iter()
                .map(Tiler::from_shape)
                .collect::<Result<_, _>>()
                .map(Tiler::Modes),
        }
    }
}

/// `A ∘ B`: the layout `R`, compatible with `B`, with `R(i) == A(B(i))` for every `i < size(B)`.
///
/// Refused with [`AlgebraError::CompositionNotAdmissible`] when `R` is not a layout under the
/// conditions below.
///
/// # How it is computed, and when it is admissible
///
/// `A` is coalesced, so it is a flat list of modes `S_i:D_i`, and read as a mixed-radix number
/// system: index `x < size(A)` has digits `x_i < S_i` and `A(x) = Σ D_i x_i`. Each leaf `s:d` of
/// `B` asks for the indices `d·c`, `c < s`. Modes whose extent divides what is left of `d` are
/// skipped (their digit is always 0). In the mode `i` where the leaf lands, with `r` what is left
/// of `d`, either the whole leaf fits (`r·(s-1) < S_i`, giving the mode `s:D_i·r`), or `r`
/// divides `S_i` and `s` is a multiple of `S_i/r`, giving the mode `S_i/r : D_i·r` and
/// continuing in mode `i+1` with `s / (S_i/r)`. Otherwise the leaf has no layout and the
/// composition is refused ([`Inadmissible::Stride`], [`Inadmissible::Shape`]); a leaf that runs
/// past the last mode asks for indices outside `A` ([`Inadmissible::OutOfDomain`]). These are
/// CuTe's divisibility conditions, relaxed where a leaf fits inside one mode.
///
/// `A` is additive over the leaves only if adding their indices never carries from one digit
/// into the next, so the largest digits the leaves place in each mode must sum to less than its
/// extent ([`Inadmissible::Overlap`]). Under these conditions the result is exactly `A ∘ B` on
/// `[0, size(B))`. Unlike CuTe, this algebra does not extend `A`'s last mode past its size: an
/// admissible composition only ever evaluates `A` inside its domain.
pub fn composition(a: &Layout, b: &Layout) -> Result<Layout, AlgebraError> {
    let ca = coalesce(a);
    let modes = ca.leaves();
    let mut digits = vec![0usize; modes.len()];
    let mut shapes = Vec::new();
    let mut strides = Vec::new();
    for (leaf, (s, d)) in b.leaves().into_iter().enumerate() {
        let refuse = |reason| AlgebraError::CompositionNotAdmissible {
            reason,
            a: Box::new(ca.clone()),
            leaf,
            b_leaf: Box::new(Layout::from_trusted(IntTuple::Int(s), IntTuple::Int(d))),
        };
        let parts = compose_leaf(&modes, a.size(), s, d).map_err(|e| match e {
            LeafError::Algebra(e) => e,
            LeafError::Inadmissible(r) => refuse(r),
        })?;
        for &(i, r, q) in &parts.digits {
            digits[i] += r * (q - 1);
            if digits[i] >= modes[i].0.value() {
                return Err(refuse(Inadmissible::Overlap {
                    mode: i,
                    digits: digits[i],
                    extent: modes[i].0.value(),
                }));
            }
        }
        shapes.push(parts.shape);
        strides.push(parts.stride);
    }
    let shape = b.shape().replace_leaves(&mut shapes.into_iter());
    let stride = b.stride().replace_leaves(&mut strides.into_iter());
    match (shape, stride) {
        (Some(shape), Some(stride)) => Layout::new(shape, stride),
        _ => Err(AlgebraError::NotCongruent {
            shape: b.shape().clone(),
            stride: b.stride().clone(),
        }),
    }
}

/// Composition mode by mode: a [`Tiler::Layout`] is composed as a 1-D function; the `k`-th tiler
/// of a [`Tiler::Modes`] is applied to mode `k` of `a`, and later modes are kept.
pub fn composition_by_mode(a: &Layout, tiler: &Tiler) -> Result<Layout, AlgebraError> {
    by_mode(a, tiler, &|mode, t| composition(mode, t))
}

/// Applies `op` to the modes of `a` that `tiler` addresses, keeping the other modes.
pub(super) fn by_mode(
    a: &Layout,
    tiler: &Tiler,
    op: &dyn Fn(&Layout, &Layout) -> Result<Layout, AlgebraError>,
) -> Result<Layout, AlgebraError> {
    match tiler {
        Tiler::Layout(t) => op(a, t),
        Tiler::Modes(ts) => {
            if ts.len() > a.rank() {
                return Err(AlgebraError::TilerRank {
                    tiler_rank: ts.len(),
                    layout: a.clone(),
                    layout_rank: a.rank(),
                });
            }
            let mut modes = Vec::with_capacity(a.rank());
            for (k, mode) in a.modes().iter().enumerate() {
                modes.push(match ts.get(k) {
                    Some(t) => by_mode(mode, t, op)?,
                    None => mode.clone(),
                });
            }
            Layout::from_modes(modes)
        }
    }
}

enum LeafError {
    Algebra(AlgebraError),
    Inadmissible(Inadmissible),
}

impl From<AlgebraError> for LeafError {
    fn from(value: AlgebraError) -> Self {
        LeafError::Algebra(value)
    }
}

/// The composition of the coalesced `A` (its modes) with one leaf `s:d` of `B`.
struct LeafParts {
    shape: IntTuple,
    stride: IntTuple,
    /// `(mode, step, count)`: the leaf puts the digits `step·c`, `c < count`, in that mode.
    digits: Vec<(usize, usize, usize)>,
}

fn compose_leaf(
    modes: &[(Int, Int)],
    size_a: usize,
    s: Int,
    d: Int,
) -> Result<LeafParts, LeafError> {
    if s.value() == 1 || d.value() == 0 {
        // A single index, or a broadcast: every coordinate reads A(0) = 0.
        let stride = if s.value() == 1 { Int::Static(0) } else { d };
        return Ok(LeafParts {
            shape: IntTuple::Int(s),
            stride: IntTuple::Int(stride),
            digits: Vec::new(),
        });
    }
    let out_of_domain = || {
        LeafError::Inadmissible(Inadmissible::OutOfDomain {
            reach: d.value().saturating_mul(s.value() - 1),
            size: size_a,
        })
    };
    let mut i = 0;
    let mut r = d;
    // Skip the modes whose digit is always 0 for this leaf.
    while i < modes.len() && r.value().is_multiple_of(modes[i].0.value()) {
        r = r.checked_div(modes[i].0).ok_or_else(out_of_domain)?;
        i += 1;
    }
    let mut rest = s;
    let mut shape = Vec::new();
    let mut stride = Vec::new();
    let mut digits = Vec::new();
    loop {
        let Some(&(extent, mode_stride)) = modes.get(i) else {
            return Err(out_of_domain());
        };
        let (ev, rv, sv) = (extent.value(), r.value(), rest.value());
        if rv.saturating_mul(sv - 1) < ev {
            shape.push(rest);
            stride.push(mul(mode_stride, r, "a composed stride")?);
            digits.push((i, rv, sv));
            break;
        }
        if i + 1 == modes.len() {
            return Err(out_of_domain());
        }
        if !ev.is_multiple_of(rv) {
            return Err(LeafError::Inadmissible(Inadmissible::Stride {
                stride: rv,
                extent: ev,
                mode: i,
            }));
        }
        let q = extent.checked_div(r).ok_or_else(out_of_domain)?;
        if !sv.is_multiple_of(q.value()) {
            return Err(LeafError::Inadmissible(Inadmissible::Shape {
                shape: sv,
                extent: q.value(),
                mode: i,
            }));
        }
        shape.push(q);
        stride.push(mul(mode_stride, r, "a composed stride")?);
        digits.push((i, rv, q.value()));
        rest = rest.checked_div(q).ok_or_else(out_of_domain)?;
        r = Int::Static(1);
        i += 1;
    }
    let (shape, stride) = if shape.len() == 1 {
        (IntTuple::Int(shape[0]), IntTuple::Int(stride[0]))
    } else {
        (IntTuple::flat(shape), IntTuple::flat(stride))
    };
    Ok(LeafParts {
        shape,
        stride,
        digits,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn l(s: &str) -> Layout {
        s.parse().unwrap()
    }

    fn check(a: &Layout, b: &Layout, r: &Layout) {
        assert!(b.shape().is_compatible(r.shape()), "{b} vs {r}");
        for i in 0..b.size() {
            assert_eq!(r.call(i), a.call(b.call(i)), "index {i} of {a} o {b} = {r}");
        }
    }

    #[test]
    fn cute_worked_example() {
        let (a, b) = (l("(6,2):(8,2)"), l("(4,3):(3,1)"));
        let r = composition(&a, &b).unwrap();
        assert_eq!(r.to_string(), "((2,2),3):((24,2),8)");
        check(&a, &b, &r);
    }

    #[test]
    fn reshapes_from_the_docs() {
        let (a, b) = (l("20:2"), l("(5,4):(4,1)"));
        let r = composition(&a, &b).unwrap();
        assert_eq!(r.to_string(), "(5,4):(8,2)");
        check(&a, &b, &r);
        let (a, b) = (l("(_10,_2):(_16,_4)"), l("(_5,_4):(_1,_5)"));
        let r = composition(&a, &b).unwrap();
        assert_eq!(format!("{r:#}"), "(_5,(_2,_2)):(_16,(_80,_4))");
        check(&a, &b, &r);
    }

    #[test]
    fn by_mode_tilers_from_the_docs() {
        let a = l("(12,(4,8)):(59,(13,1))");
        let tiler = Tiler::by_mode([l("_3:_4"), l("_8:_2")]);
        let r = composition_by_mode(&a, &tiler).unwrap();
        assert_eq!(format!("{r:#}"), "(_3,(2,4)):(236,(26,1))");
        let shape_tiler = Tiler::from_shape(&"(_3,_8)".parse().unwrap()).unwrap();
        let r = composition_by_mode(&a, &shape_tiler).unwrap();
        assert_eq!(r.to_string(), "(3,(4,2)):(59,(13,1))");
        let too_many = Tiler::by_mode([l("1:0"), l("1:0"), l("1:0")]);
        assert!(matches!(
            composition_by_mode(&a, &too_many),
            Err(AlgebraError::TilerRank { tiler_rank: 3, .. })
        ));
    }

    #[test]
    fn inadmissible_compositions_name_the_mode() {
        let a = l("(4,6):(1,8)");
        let e = composition(&a, &l("3:3")).unwrap_err();
        assert_eq!(
            e.to_string(),
            "composition not admissible: stride 3 does not divide shape 4 of mode 0 \
             (A coalesces to (4,6):(1,8); leaf 0 of B is 3:3)"
        );
        let e = composition(&a, &l("(2,3):(1,2)")).unwrap_err();
        assert!(
            e.to_string()
                .contains("shape 3 is not a multiple of 2, the extent of mode 0"),
            "{e}"
        );
        assert!(e.to_string().contains("leaf 1 of B is 3:2"), "{e}");
        let e = composition(&l("8:1"), &l("4:3")).unwrap_err();
        assert!(
            e.to_string().contains("reaches index 9, past size 8"),
            "{e}"
        );
        let e = composition(&l("(2,2):(1,10)"), &l("(2,2):(1,1)")).unwrap_err();
        assert!(e.to_string().contains("overlap in mode 0"), "{e}");
        // A leaf that fits inside one mode needs no divisibility.
        let r = composition(&a, &l("2:3")).unwrap();
        assert_eq!(r.to_string(), "2:3");
        let r = composition(&l("8:1"), &l("3:3")).unwrap();
        assert_eq!(r.to_string(), "3:3");
    }

    #[test]
    fn broadcasts_and_unit_leaves() {
        let a = l("(4,6):(1,8)");
        let b = l("(3,1,2):(0,7,4)");
        let r = composition(&a, &b).unwrap();
        check(&a, &b, &r);
    }
}
