//! Contiguous runs: which coordinates of an index function walk memory one element at a time.
//!
//! A kernel that reads four neighbours along one axis with a single `vec4` load needs two facts
//! about that axis: four consecutive coordinates `4q, 4q + 1, 4q + 2, 4q + 3` land on four
//! consecutive offsets, and the first of them is a multiple of four (a `vec4` load is aligned).
//! [`ValidIndexFn::contiguous_run`] proves both from the offset expression, for any layout and
//! any chain of views, by abstract interpretation over one aligned run of `width` coordinates.
//! Each node of the expression is classified as
//!
//! - **invariant**: the same for every coordinate of the run, and divisible by a known `d`;
//! - **linear**: `B + r` for the run's `r`-th coordinate, where `B` is invariant and divisible by
//!   `width`;
//! - **other**: anything else (the proof fails).
//!
//! The coordinate itself is linear (`width · q + r`); other parameters are invariant. Sums,
//! products, shifts, divisions, remainders and masks combine the classes by the rules of
//! unsigned arithmetic; a division or remainder by a constant multiple of `width` keeps a
//! linear value inside one run (`(B + r) % k = (B % k) + r` and `(B + r) / k = B / k` when
//! `width` divides both `B` and `k`). Anything involving a run-time divisor is *other*: the
//! proof must hold for every extent. The answer is conservative: `false` means "not proved",
//! and a kernel then reads the axis one element at a time.
//!
//! The proof covers coordinates where the function is in bounds: a kernel issues a wide load
//! only when the whole run is inside the view (`4q + 3 < extent`) and falls back to single
//! elements for a partial last run.

use super::func::ValidIndexFn;
use super::graph::{BinOp, ExprId, Node, VarKind};

/// The class of a value over one aligned run of coordinates (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Run {
    /// The same for the whole run; divisible by the value (0: known to be 0, divisible by all).
    Invariant(u64),
    /// `B + r`, with `B` invariant and a multiple of the run's width.
    Linear,
    /// A boolean that is the same for the whole run.
    InvariantBool,
    /// Not proved to be either.
    Other,
}

/// The greatest common divisor (`gcd(0, 0) = 0`): what divides both of two known divisors.
pub(super) fn gcd(a: u64, b: u64) -> u64 {
    if b == 0 { a } else { gcd(b, a % b) }
}

/// Whether `d` is a multiple of `width` (0 is a multiple of everything).
fn multiple(d: u64, width: u64) -> bool {
    d.is_multiple_of(width)
}

impl ValidIndexFn {
    /// Whether aligned runs of `width` consecutive values of coordinate `coord` (an index into
    /// the coordinate parameters) are `width` consecutive offsets starting at a multiple of
    /// `width`, wherever the function is in bounds, for every value of the run-time extents.
    ///
    /// `width` must be a power of two; `false` for any other, for a coordinate that does not
    /// exist, and whenever the proof fails (see the module docs).
    ///
    /// ```
    /// use fblayout_core::layout::LayoutSpec;
    ///
    /// let x = LayoutSpec::new("x").dyn_axis("tokens").axis("hidden", 64).build()?;
    /// let f = x.view().index_fn().simplified();
    /// assert!(f.contiguous_run(1, 4)); // along hidden: a vec4 per four elements
    /// assert!(!f.contiguous_run(0, 4)); // along tokens: 64 apart
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn contiguous_run(&self, coord: usize, width: u64) -> bool {
        if !width.is_power_of_two() {
            return false;
        }
        let Some(&var) = self
            .params
            .iter()
            .filter(|&&p| self.graph.var_decl(p).kind == VarKind::Coord)
            .nth(coord)
        else {
            return false;
        };
        let graph = &self.graph;
        let mut class: Vec<Option<Run>> = vec![None; graph.nodes().len()];
        for id in graph.reachable(&[self.offset]) {
            let c = classify(
                graph.node(id),
                var,
                width,
                |e: ExprId| class[e.index()].expect("operands come before their users"),
                |e: ExprId| match graph.node(e) {
                    Node::Const(k) => Some(k),
                    _ => None,
                },
            );
            class[id.index()] = Some(c);
        }
        width == 1 || class[self.offset.index()] == Some(Run::Linear)
    }
}

/// The class of `node`, given the classes of its operands.
fn classify(
    node: Node,
    var: super::graph::VarId,
    width: u64,
    of: impl Fn(ExprId) -> Run,
    literal: impl Fn(ExprId) -> Option<u64>,
) -> Run {
    use Run::{Invariant, InvariantBool, Linear, Other};
    match node {
        Node::Const(k) => Invariant(k),
        Node::Bool(_) => InvariantBool,
        Node::Var(v) if v == var => Linear,
        Node::Var(_) => Invariant(1),
        Node::Select(c, a, b) => match (of(c), of(a), of(b)) {
            (InvariantBool, Invariant(x), Invariant(y)) => Invariant(gcd(x, y)),
            (InvariantBool, Linear, Linear) => Linear,
            _ => Other,
        },
        Node::Bin(op, a_id, b_id) => {
            let (a, b) = (of(a_id), of(b_id));
            match (op, a, b) {
                (BinOp::Lt | BinOp::And, x, y) => {
                    let invariant = |r| matches!(r, Invariant(_) | InvariantBool);
                    if invariant(x) && invariant(y) {
                        InvariantBool
                    } else {
                        Other
                    }
                }
                (_, Other, _) | (_, _, Other) | (_, InvariantBool, _) | (_, _, InvariantBool) => {
                    Other
                }
                (BinOp::Add, Invariant(x), Invariant(y)) => Invariant(gcd(x, y)),
                (BinOp::Add, Linear, Invariant(d)) | (BinOp::Add, Invariant(d), Linear)
                    if multiple(d, width) =>
                {
                    Linear
                }
                (BinOp::Sub, Invariant(x), Invariant(y)) => Invariant(gcd(x, y)),
                (BinOp::Sub, Linear, Invariant(d)) if multiple(d, width) => Linear,
                (BinOp::Mul, Invariant(x), Invariant(y)) => Invariant(x.saturating_mul(y)),
                (BinOp::Mul, Linear, Invariant(1)) | (BinOp::Mul, Invariant(1), Linear) => Linear,
                // `x << s` is divisible by `x · 2^s` for a literal `s`, and by `x` in any case.
                (BinOp::Shl, Invariant(x), _) => match literal(b_id) {
                    Some(s) if s < 64 => Invariant(x.checked_shl(s as u32).unwrap_or(x)),
                    _ => Invariant(x),
                },
                (
                    BinOp::Div | BinOp::Shr | BinOp::BitAnd | BinOp::Rem,
                    Invariant(x),
                    Invariant(y),
                ) => {
                    // `x % y` is divisible by gcd(x, y); the others by nothing known.
                    if op == BinOp::Rem {
                        Invariant(gcd(x, y))
                    } else {
                        Invariant(1)
                    }
                }
                (BinOp::Div, Linear, Invariant(d)) if d != 0 && multiple(d, width) => Invariant(1),
                (BinOp::Rem, Linear, Invariant(d)) if d != 0 && multiple(d, width) => Linear,
                (BinOp::Shr, Linear, _) => match literal(b_id) {
                    Some(s) if s < 64 && multiple(1u64 << s, width) => Invariant(1),
                    _ => Other,
                },
                (BinOp::BitAnd, Linear, _) | (BinOp::BitAnd, _, Linear) => {
                    let mask = literal(b_id).or_else(|| literal(a_id));
                    match mask {
                        Some(m)
                            if m != u64::MAX
                                && (m + 1).is_power_of_two()
                                && multiple(m + 1, width) =>
                        {
                            Linear
                        }
                        _ => Other,
                    }
                }
                _ => Other,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::layout::LayoutSpec;

    #[test]
    fn row_major_runs_along_its_last_axis_when_four_divide_it() {
        let x = LayoutSpec::new("x")
            .dyn_axis("t")
            .axis("h", 12)
            .build()
            .unwrap();
        let f = x.view().index_fn().simplified();
        assert!(f.contiguous_run(1, 4));
        assert!(f.contiguous_run(1, 2));
        assert!(!f.contiguous_run(1, 8), "12 is not a multiple of 8");
        assert!(!f.contiguous_run(0, 4));
        assert!(!f.contiguous_run(2, 4), "no third coordinate");
        assert!(!f.contiguous_run(1, 3), "not a power of two");
        let odd = LayoutSpec::new("x")
            .axis("t", 3)
            .axis("h", 6)
            .build()
            .unwrap();
        assert!(!odd.view().index_fn().simplified().contiguous_run(1, 4));
    }

    #[test]
    fn a_run_time_last_axis_is_never_proved() {
        let x = LayoutSpec::new("x")
            .axis("t", 8)
            .dyn_axis("h")
            .build()
            .unwrap();
        assert!(!x.view().index_fn().simplified().contiguous_run(1, 4));
    }

    #[test]
    fn rtile_runs_along_its_forward_axis_and_its_transpose_reads_it() {
        let x = LayoutSpec::new("x")
            .dyn_axis("t")
            .tile(4, true)
            .axis("h", 64)
            .tile(4, false)
            .rtile()
            .reduce_forward(["h"])
            .reduce_backward(["t"])
            .build()
            .unwrap();
        let f = x.view().index_fn().simplified();
        assert!(f.contiguous_run(1, 4));
        assert!(!f.contiguous_run(1, 8), "a 4-wide tile breaks runs of 8");
        assert!(!f.contiguous_run(0, 4));
        let xt = x.view().named("xt").unwrap().transpose("t", "h").unwrap();
        let ft = xt.index_fn().simplified();
        assert!(ft.contiguous_run(0, 4));
        assert!(!ft.contiguous_run(1, 4));
    }
}
