//! The simplifier: constant folding, algebraic identities, strength reduction and sharing.
//!
//! [`simplify`] rebuilds the expressions at some roots into a fresh shared graph (so common
//! subexpressions become one node) in two passes:
//!
//! 1. **Algebra.** Constants fold; identities such as `x + 0`, `x * 1`, `x * 0`, `x / 1` and
//!    `x % 1` disappear; chains of constants combine (`(x * a) * b`, `(x / a) / b`,
//!    `(x + a) + b`); and a division or remainder by a constant that divides a product's factor
//!    distributes over a sum (`(x * 64 + y) / 4 = x * 16 + y / 4`). With [`Assumptions`] about
//!    the upper bounds of variables, `y / c` and `y % c` fold when `y < c` is known. A
//!    remainder and its quotient put back together, `k · (x % s) + k · s · (x / s)`, become
//!    `k · x` (the unravel of a merged coordinate followed by a row-major offset), whatever
//!    the order and grouping of the terms and factors.
//! 2. **Strength reduction.** Multiplication, division and remainder by a power of two become
//!    shifts and masks, and chains of shifts or masks combine.
//!
//! Every rule holds for unsigned integers without overflow, which layouts guarantee by bounding
//! buffer sizes by `u32::MAX`. The recombination also holds under wrapping arithmetic, but
//! needs `s ≥ 1` (WGSL's `x % 0u` is 0): `s` must be a positive constant, a run-time extent
//! ([`VarKind::Extent`], which binding refuses to be 0), or a product of such.
//!
//! [`VarKind::Extent`]: super::VarKind::Extent

use std::collections::HashMap;

use super::graph::{BinOp, ExprGraph, ExprId, Node, VarId, VarKind};

/// Facts the simplifier may use.
#[derive(Debug, Clone, Default)]
pub struct Assumptions {
    /// Inclusive upper bounds of variables (a coordinate of a static axis of extent `n` is at
    /// most `n - 1` wherever the tensor is in bounds).
    pub upper: HashMap<VarId, u64>,
}

/// Rebuilds the expressions at `roots` of `src` into a new shared graph, simplified.
///
/// Returns the new graph (with the same variables, in the same order) and the new roots.
pub fn simplify(
    src: &ExprGraph,
    roots: &[ExprId],
    assume: &Assumptions,
) -> (ExprGraph, Vec<ExprId>) {
    let mut algebra = Rebuild::new(src, assume, Stage::Algebra);
    let roots1: Vec<ExprId> = roots.iter().map(|&r| algebra.copy(src, r)).collect();
    let stage1 = algebra.out;
    let mut strength = Rebuild::new(&stage1, assume, Stage::Strength);
    let roots2 = roots1.iter().map(|&r| strength.copy(&stage1, r)).collect();
    (strength.out, roots2)
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Stage {
    Algebra,
    Strength,
}

struct Rebuild<'a> {
    out: ExprGraph,
    bounds: Vec<Option<u64>>,
    assume: &'a Assumptions,
    stage: Stage,
    memo: HashMap<ExprId, ExprId>,
}

fn pow2_exponent(c: u64) -> Option<u64> {
    (c > 1 && c.is_power_of_two()).then(|| u64::from(c.trailing_zeros()))
}

impl<'a> Rebuild<'a> {
    fn new(src: &ExprGraph, assume: &'a Assumptions, stage: Stage) -> Self {
        let mut out = ExprGraph::new();
        for var in src.vars() {
            out.declare(var.name.clone(), var.kind);
        }
        Self {
            out,
            bounds: Vec::new(),
            assume,
            stage,
            memo: HashMap::new(),
        }
    }

    /// Copies `id` (and what it needs) from `src`, simplifying on the way.
    fn copy(&mut self, src: &ExprGraph, id: ExprId) -> ExprId {
        for node_id in src.reachable(&[id]) {
            if self.memo.contains_key(&node_id) {
                continue;
            }
            let new = match src.node(node_id) {
                Node::Bin(op, a, b) => {
                    let (a, b) = (self.memo[&a], self.memo[&b]);
                    self.bin(op, a, b)
                }
                Node::Select(c, a, b) => {
                    let (c, a, b) = (self.memo[&c], self.memo[&a], self.memo[&b]);
                    self.select(c, a, b)
                }
                leaf => self.leaf(leaf),
            };
            self.memo.insert(node_id, new);
        }
        self.memo[&id]
    }

    fn intern(&mut self, node: Node) -> ExprId {
        let id = self.out.add_node(node);
        if self.bounds.len() <= id.index() {
            self.bounds.resize(id.index() + 1, None);
            self.bounds[id.index()] = self.compute_bound(node);
        }
        id
    }

    fn compute_bound(&self, node: Node) -> Option<u64> {
        let b = |id: ExprId| self.bounds.get(id.index()).copied().flatten();
        match node {
            Node::Const(c) => Some(c),
            Node::Bool(_) => Some(1),
            Node::Var(v) => self.assume.upper.get(&v).copied(),
            Node::Select(_, x, y) => Some(b(x)?.max(b(y)?)),
            Node::Bin(op, x, y) => match op {
                BinOp::Add => b(x)?.checked_add(b(y)?),
                BinOp::Sub => b(x),
                BinOp::Mul => b(x)?.checked_mul(b(y)?),
                BinOp::Div => Some(b(x)? / self.const_of(y).filter(|&c| c > 0)?),
                BinOp::Rem => {
                    let m = self.const_of(y).filter(|&c| c > 0)? - 1;
                    Some(b(x).map_or(m, |bx| bx.min(m)))
                }
                BinOp::Shl => b(x)?.checked_shl(u32::try_from(self.const_of(y)?).ok()?),
                BinOp::Shr => Some(b(x)? >> self.const_of(y)?.min(63)),
                BinOp::BitAnd => match (b(x), b(y)) {
                    (Some(p), Some(q)) => Some(p.min(q)),
                    (p, q) => p.or(q),
                },
                BinOp::Lt | BinOp::And => Some(1),
            },
        }
    }

    fn bound(&self, id: ExprId) -> Option<u64> {
        self.bounds.get(id.index()).copied().flatten()
    }

    fn const_of(&self, id: ExprId) -> Option<u64> {
        match self.out.node(id) {
            Node::Const(c) => Some(c),
            _ => None,
        }
    }

    fn bool_of(&self, id: ExprId) -> Option<bool> {
        match self.out.node(id) {
            Node::Bool(b) => Some(b),
            _ => None,
        }
    }

    fn leaf(&mut self, node: Node) -> ExprId {
        self.intern(node)
    }

    fn constant(&mut self, c: u64) -> ExprId {
        self.intern(Node::Const(c))
    }

    fn select(&mut self, c: ExprId, a: ExprId, b: ExprId) -> ExprId {
        if a == b {
            return a;
        }
        match self.bool_of(c) {
            Some(true) => a,
            Some(false) => b,
            None => self.intern(Node::Select(c, a, b)),
        }
    }

    /// Splits `id` into `(x, c)` when it is `x op c` with a constant `c`.
    fn with_const(&self, id: ExprId, op: BinOp) -> Option<(ExprId, u64)> {
        match self.out.node(id) {
            Node::Bin(o, x, y) if o == op => match (self.const_of(x), self.const_of(y)) {
                (_, Some(c)) => Some((x, c)),
                (Some(c), _) if op.is_commutative() => Some((y, c)),
                _ => None,
            },
            _ => None,
        }
    }

    fn bin(&mut self, op: BinOp, a: ExprId, b: ExprId) -> ExprId {
        if let Some(folded) = self.fold(op, a, b) {
            return folded;
        }
        let rewritten = match self.stage {
            Stage::Algebra => self.algebra(op, a, b),
            Stage::Strength => self.strength(op, a, b),
        };
        rewritten.unwrap_or_else(|| self.intern(Node::Bin(op, a, b)))
    }

    fn fold(&mut self, op: BinOp, a: ExprId, b: ExprId) -> Option<ExprId> {
        if op == BinOp::And {
            return match (self.bool_of(a), self.bool_of(b)) {
                (Some(false), _) | (_, Some(false)) => Some(self.intern(Node::Bool(false))),
                (Some(true), _) => Some(b),
                (_, Some(true)) => Some(a),
                _ if a == b => Some(a),
                _ => None,
            };
        }
        let (ca, cb) = (self.const_of(a), self.const_of(b));
        if let (Some(x), Some(y)) = (ca, cb) {
            let value = match op {
                BinOp::Add => x.checked_add(y),
                BinOp::Sub => x.checked_sub(y),
                BinOp::Mul => x.checked_mul(y),
                BinOp::Div => x.checked_div(y),
                BinOp::Rem => x.checked_rem(y),
                BinOp::Shl => u32::try_from(y).ok().and_then(|s| x.checked_shl(s)),
                BinOp::Shr => u32::try_from(y).ok().and_then(|s| x.checked_shr(s)),
                BinOp::BitAnd => Some(x & y),
                BinOp::Lt => return Some(self.intern(Node::Bool(x < y))),
                BinOp::And => None,
            };
            return value.map(|v| self.constant(v));
        }
        match (op, ca, cb) {
            (BinOp::Add, Some(0), _) => Some(b),
            (BinOp::Add | BinOp::Sub | BinOp::Shl | BinOp::Shr, _, Some(0)) => Some(a),
            (BinOp::Mul, Some(1), _) => Some(b),
            (BinOp::Mul | BinOp::Div, _, Some(1)) => Some(a),
            (BinOp::Mul, Some(0), _) | (BinOp::Mul, _, Some(0)) => Some(self.constant(0)),
            (BinOp::Div | BinOp::Rem | BinOp::Shl | BinOp::Shr | BinOp::BitAnd, Some(0), _)
            | (BinOp::Rem, _, Some(1))
            | (BinOp::BitAnd, _, Some(0)) => Some(self.constant(0)),
            (BinOp::Sub, _, _) if a == b => Some(self.constant(0)),
            (BinOp::Lt, _, Some(0)) => Some(self.intern(Node::Bool(false))),
            (BinOp::Lt, _, Some(c)) if self.bound(a).is_some_and(|ub| ub < c) => {
                Some(self.intern(Node::Bool(true)))
            }
            (BinOp::Div, _, Some(c)) if self.bound(a).is_some_and(|ub| ub < c) => {
                Some(self.constant(0))
            }
            (BinOp::Rem, _, Some(c)) if self.bound(a).is_some_and(|ub| ub < c) => Some(a),
            (BinOp::BitAnd, _, Some(m))
                if (m + 1).is_power_of_two() && self.bound(a).is_some_and(|ub| ub <= m) =>
            {
                Some(a)
            }
            _ => None,
        }
    }

    fn algebra(&mut self, op: BinOp, a: ExprId, b: ExprId) -> Option<ExprId> {
        let cb = self.const_of(b);
        match op {
            BinOp::Add => {
                // (x + c1) + c2 -> x + (c1 + c2), whichever side holds the constant.
                let (other, c2) = match (self.const_of(a), cb) {
                    (Some(c), _) => (b, c),
                    (_, Some(c)) => (a, c),
                    _ => return self.recombine(a, b),
                };
                let (x, c1) = self.with_const(other, BinOp::Add)?;
                let c = self.constant(c1.checked_add(c2)?);
                Some(self.bin(BinOp::Add, x, c))
            }
            BinOp::Mul => {
                let (other, c2) = match (self.const_of(a), cb) {
                    (Some(c), _) => (b, c),
                    (_, Some(c)) => (a, c),
                    _ => return None,
                };
                let (x, c1) = self.with_const(other, BinOp::Mul)?;
                let c = self.constant(c1.checked_mul(c2)?);
                Some(self.bin(BinOp::Mul, x, c))
            }
            BinOp::Div => self.div_by_const(a, cb?),
            BinOp::Rem => self.rem_by_const(a, cb?),
            _ => None,
        }
    }

    /// `a + b` with a remainder and its quotient put back together: among the terms of the
    /// sum, `k · (x % s)` and `k · s · (x / s)` (factors in any order and grouping, constants
    /// multiplied out) become `k · x`, because `x % s + s · (x / s) = x` for every `x` and every
    /// `s ≥ 1`. `s` must be known to be at least 1 (see [`at_least_one`](Self::at_least_one));
    /// `None` when no two terms pair up.
    fn recombine(&mut self, a: ExprId, b: ExprId) -> Option<ExprId> {
        let mut terms = self.terms(a);
        terms.extend(self.terms(b));
        for i in 0..terms.len() {
            for j in 0..terms.len() {
                if i == j {
                    continue;
                }
                if let Some(whole) = self.unsplit(terms[i], terms[j]) {
                    let rest = terms
                        .iter()
                        .enumerate()
                        .filter(|&(k, _)| k != i && k != j)
                        .map(|(_, &t)| t);
                    let mut sum = whole;
                    for t in rest {
                        sum = self.bin(BinOp::Add, sum, t);
                    }
                    return Some(sum);
                }
            }
        }
        None
    }

    /// `x · k` when `rem` is `k · (x % s)` and `quot` is `k · s · (x / s)` (see
    /// [`recombine`](Self::recombine)).
    fn unsplit(&mut self, rem: ExprId, quot: ExprId) -> Option<ExprId> {
        let (Some(k_rem), f_rem) = self.factors(rem) else {
            return None;
        };
        let (k_quot, f_quot) = self.factors(quot);
        for (at, &r) in f_rem.iter().enumerate() {
            let Node::Bin(BinOp::Rem, x, s) = self.out.node(r) else {
                continue;
            };
            if !self.at_least_one(s) {
                continue;
            }
            // The quotient as this graph writes it (`(y / c1) / c2` folds to `y / (c1 · c2)`).
            let q = self.bin(BinOp::Div, x, s);
            let (k_s, f_s) = self.factors(s);
            let mut want: Vec<ExprId> = f_rem
                .iter()
                .enumerate()
                .filter(|&(i, _)| i != at)
                .map(|(_, &f)| f)
                .chain(f_s)
                .chain([q])
                .collect();
            want.sort_unstable();
            if want == f_quot
                && k_s
                    .and_then(|k| k.checked_mul(k_rem))
                    .is_some_and(|k| Some(k) == k_quot)
            {
                let mut whole = x;
                for (i, &f) in f_rem.iter().enumerate() {
                    if i != at {
                        whole = self.bin(BinOp::Mul, whole, f);
                    }
                }
                let k = self.constant(k_rem);
                return Some(self.bin(BinOp::Mul, whole, k));
            }
        }
        None
    }

    /// The terms of a sum: `id` split at every `+`.
    fn terms(&self, id: ExprId) -> Vec<ExprId> {
        match self.out.node(id) {
            Node::Bin(BinOp::Add, p, q) => {
                let mut t = self.terms(p);
                t.extend(self.terms(q));
                t
            }
            _ => vec![id],
        }
    }

    /// The factors of a product: its constant part (`None` past `u64`), and the other factors
    /// sorted by id (`id` split at every `*`).
    fn factors(&self, id: ExprId) -> (Option<u64>, Vec<ExprId>) {
        let mut k = Some(1u64);
        let mut rest = Vec::new();
        let mut stack = vec![id];
        while let Some(f) = stack.pop() {
            match self.out.node(f) {
                Node::Bin(BinOp::Mul, p, q) => stack.extend([p, q]),
                Node::Const(c) => k = k.and_then(|k| k.checked_mul(c)),
                _ => rest.push(f),
            }
        }
        rest.sort_unstable();
        (k, rest)
    }

    /// Whether `id` is known to be at least 1: a positive constant, a run-time extent
    /// (binding refuses zero extents), or a product of such.
    fn at_least_one(&self, id: ExprId) -> bool {
        match self.out.node(id) {
            Node::Const(c) => c >= 1,
            Node::Var(v) => self.out.var_decl(v).kind == VarKind::Extent,
            Node::Bin(BinOp::Mul, p, q) => self.at_least_one(p) && self.at_least_one(q),
            _ => false,
        }
    }

    fn div_by_const(&mut self, a: ExprId, c: u64) -> Option<ExprId> {
        if c == 0 {
            return None;
        }
        // (x / c1) / c -> x / (c1 * c)
        if let Some((x, c1)) = self.with_const(a, BinOp::Div) {
            let k = self.constant(c1.checked_mul(c)?);
            return Some(self.bin(BinOp::Div, x, k));
        }
        // (x * c1) / c -> x * (c1 / c) or x / (c / c1)
        if let Some((x, c1)) = self.with_const(a, BinOp::Mul) {
            if c1.is_multiple_of(c) {
                let k = self.constant(c1 / c);
                return Some(self.bin(BinOp::Mul, x, k));
            }
            if c.is_multiple_of(c1) {
                let k = self.constant(c / c1);
                return Some(self.bin(BinOp::Div, x, k));
            }
        }
        // (x * c1 + y) / c -> x * (c1 / c) + y / c, when c divides c1
        if let Node::Bin(BinOp::Add, p, q) = self.out.node(a) {
            for (term, rest) in [(p, q), (q, p)] {
                if let Some((x, c1)) = self.with_const(term, BinOp::Mul) {
                    if c1.is_multiple_of(c) {
                        let k = self.constant(c1 / c);
                        let hi = self.bin(BinOp::Mul, x, k);
                        let kc = self.constant(c);
                        let lo = self.bin(BinOp::Div, rest, kc);
                        return Some(self.bin(BinOp::Add, hi, lo));
                    }
                }
            }
        }
        None
    }

    fn rem_by_const(&mut self, a: ExprId, c: u64) -> Option<ExprId> {
        if c == 0 {
            return None;
        }
        // (x * c1) % c -> 0 when c divides c1
        if let Some((_, c1)) = self.with_const(a, BinOp::Mul) {
            if c1.is_multiple_of(c) {
                return Some(self.constant(0));
            }
        }
        // (x % c1) % c -> x % c when c divides c1
        if let Some((x, c1)) = self.with_const(a, BinOp::Rem) {
            if c1.is_multiple_of(c) {
                let kc = self.constant(c);
                return Some(self.bin(BinOp::Rem, x, kc));
            }
        }
        // (x * c1 + y) % c -> y % c when c divides c1
        if let Node::Bin(BinOp::Add, p, q) = self.out.node(a) {
            for (term, rest) in [(p, q), (q, p)] {
                if let Some((_, c1)) = self.with_const(term, BinOp::Mul) {
                    if c1.is_multiple_of(c) {
                        let kc = self.constant(c);
                        return Some(self.bin(BinOp::Rem, rest, kc));
                    }
                }
            }
        }
        None
    }

    fn strength(&mut self, op: BinOp, a: ExprId, b: ExprId) -> Option<ExprId> {
        let cb = self.const_of(b);
        match op {
            BinOp::Mul => {
                let (x, c) = match (self.const_of(a), cb) {
                    (Some(c), _) => (b, c),
                    (_, Some(c)) => (a, c),
                    _ => return None,
                };
                let k = pow2_exponent(c)?;
                let k = self.constant(k);
                Some(self.bin(BinOp::Shl, x, k))
            }
            BinOp::Div => {
                let k = self.constant(pow2_exponent(cb?)?);
                Some(self.bin(BinOp::Shr, a, k))
            }
            BinOp::Rem => {
                let c = cb?;
                pow2_exponent(c)?;
                let m = self.constant(c - 1);
                Some(self.bin(BinOp::BitAnd, a, m))
            }
            BinOp::Shl | BinOp::Shr => {
                let (x, k1) = self.with_const(a, op)?;
                let k = self.constant(k1.checked_add(cb?)?);
                Some(self.bin(op, x, k))
            }
            BinOp::BitAnd => {
                let (other, m2) = match (self.const_of(a), cb) {
                    (Some(c), _) => (b, c),
                    (_, Some(c)) => (a, c),
                    _ => return None,
                };
                let (x, m1) = self.with_const(other, BinOp::BitAnd)?;
                let m = self.constant(m1 & m2);
                Some(self.bin(BinOp::BitAnd, x, m))
            }
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn setup() -> (ExprGraph, ExprId, ExprId) {
        let mut g = ExprGraph::unshared();
        let x = g.declare("x", VarKind::Coord);
        let y = g.declare("y", VarKind::Coord);
        let (vx, vy) = (g.var(x), g.var(y));
        (g, vx, vy)
    }

    fn simplified(g: &ExprGraph, root: ExprId) -> (ExprGraph, ExprId) {
        let (out, roots) = simplify(g, &[root], &Assumptions::default());
        (out, roots[0])
    }

    #[test]
    fn folds_constants_and_identities() {
        let (mut g, x, _) = setup();
        let (c2, c3, c0, c1) = (g.constant(2), g.constant(3), g.constant(0), g.constant(1));
        let six = g.mul(c2, c3);
        let e = g.mul(x, c1);
        let e = g.add(e, c0);
        let e = g.add(e, six);
        let (out, r) = simplified(&g, e);
        assert_eq!(out.display(r), "x + 6");
    }

    #[test]
    fn powers_of_two_become_shifts_and_masks() {
        let (mut g, x, y) = setup();
        let c4 = g.constant(4);
        let c8 = g.constant(8);
        let d = g.div(x, c4);
        let m = g.rem(y, c8);
        let s = g.mul(d, c8);
        let e = g.add(s, m);
        let (out, r) = simplified(&g, e);
        assert_eq!(out.display(r), "(y & 7) + ((x >> 2) << 3)");
    }

    #[test]
    fn division_distributes_over_aligned_sums() {
        // (x * 64 + y) / 4 -> x * 16 + y / 4, and % 4 -> y % 4.
        let (mut g, x, y) = setup();
        let c64 = g.constant(64);
        let c4 = g.constant(4);
        let xm = g.mul(x, c64);
        let s = g.add(xm, y);
        let d = g.div(s, c4);
        let r = g.rem(s, c4);
        let (out, roots) = simplify(&g, &[d, r], &Assumptions::default());
        assert_eq!(out.display(roots[0]), "(x << 4) + (y >> 2)");
        assert_eq!(out.display(roots[1]), "y & 3");
    }

    #[test]
    fn bounds_fold_division_and_comparison() {
        let (mut g, x, _) = setup();
        let c16 = g.constant(16);
        let d = g.div(x, c16);
        let r = g.rem(x, c16);
        let lt = g.lt(x, c16);
        let mut assume = Assumptions::default();
        assume.upper.insert(VarId(0), 15);
        let (out, roots) = simplify(&g, &[d, r, lt], &assume);
        assert_eq!(out.display(roots[0]), "0");
        assert_eq!(out.display(roots[1]), "x");
        assert_eq!(out.display(roots[2]), "true");
    }

    #[test]
    fn shares_common_subexpressions() {
        let (mut g, x, y) = setup();
        let c3 = g.constant(3);
        let a = g.mul(x, c3);
        let c3b = g.constant(3);
        let b = g.mul(x, c3b);
        let e1 = g.add(a, y);
        let e2 = g.add(b, y);
        let e = g.mul(e1, e2);
        assert_eq!(g.op_count(&[e]), 5);
        let (out, r) = simplified(&g, e);
        assert_eq!(out.op_count(&[r]), 3);
    }

    #[test]
    fn keeps_division_by_zero_for_the_validator() {
        let (mut g, x, _) = setup();
        let c0 = g.constant(0);
        let d = g.div(x, c0);
        let (out, r) = simplified(&g, d);
        assert_eq!(out.display(r), "x / 0");
    }

    /// Evaluates `id` with `env` giving each variable's value, in unbounded unsigned
    /// arithmetic (no overflow happens at these sizes).
    fn eval(g: &ExprGraph, id: ExprId, env: &[u64]) -> u64 {
        match g.node(id) {
            Node::Const(c) => c,
            Node::Var(v) => env[v.index()],
            Node::Bin(op, a, b) => {
                let (a, b) = (eval(g, a, env), eval(g, b, env));
                match op {
                    BinOp::Add => a + b,
                    BinOp::Sub => a - b,
                    BinOp::Mul => a * b,
                    BinOp::Div => a / b,
                    BinOp::Rem => a % b,
                    BinOp::Shl => a << b,
                    BinOp::Shr => a >> b,
                    BinOp::BitAnd => a & b,
                    BinOp::Lt => u64::from(a < b),
                    BinOp::And => u64::from(a != 0 && b != 0),
                }
            }
            Node::Bool(b) => u64::from(b),
            Node::Select(c, a, b) => {
                if eval(g, c, env) != 0 {
                    eval(g, a, env)
                } else {
                    eval(g, b, env)
                }
            }
        }
    }

    /// `x % s + s · (x / s) = x` for every `x` and `s ≥ 1`, whatever the order and grouping of
    /// the terms and factors, scaled by a constant or not, and with the parts of a three-way
    /// unravel nested; each rewrite is checked against the sum as written, for every `x`, `s`
    /// and `t` in a range.
    #[test]
    fn a_remainder_and_its_quotient_recombine() {
        let mut g = ExprGraph::unshared();
        let [x, h] = ["x", "h"].map(|n| {
            let v = g.declare(n, VarKind::Coord);
            g.var(v)
        });
        let [s, t] = ["s_len", "t_len"].map(|n| {
            let v = g.declare(n, VarKind::Extent);
            g.var(v)
        });
        let (c3, c4, c12, c36, c768) = (
            g.constant(3),
            g.constant(4),
            g.constant(12),
            g.constant(36),
            g.constant(768),
        );
        let mut cases = Vec::new();
        // x % s + s * (x / s)
        let r = g.rem(x, s);
        let q = g.div(x, s);
        let sq = g.mul(s, q);
        cases.push((g.add(r, sq), "x"));
        // ((x / s) * s + x % s) * 768 + h: the row-major offset of a merge
        let qs = g.mul(q, s);
        let row = g.add(qs, r);
        let scaled = g.mul(row, c768);
        cases.push((g.add(scaled, h), "h + (x * 768)"));
        // (x % s) * 768 + h + (x / s) * (s * 768): strides multiplied out, terms apart
        let r768 = g.mul(r, c768);
        let s768 = g.mul(s, c768);
        let q_s768 = g.mul(q, s768);
        let left = g.add(r768, h);
        cases.push((g.add(left, q_s768), "h + (x * 768)"));
        // Constant divisors: x % 4 + 4 * (x / 4), and 3 * (x % 12) + (x / 12) * 36
        let r4 = g.rem(x, c4);
        let q4 = g.div(x, c4);
        let q4x4 = g.mul(c4, q4);
        cases.push((g.add(r4, q4x4), "x"));
        let r12 = g.rem(x, c12);
        let r12x3 = g.mul(c3, r12);
        let q12 = g.div(x, c12);
        let q12x36 = g.mul(q12, c36);
        cases.push((g.add(r12x3, q12x36), "x * 3"));
        // A three-way unravel of x over (_, t, s), recombined row-major
        let qt = g.div(q, t);
        let rt = g.rem(q, t);
        let tqt = g.mul(t, qt);
        let mid = g.add(rt, tqt);
        let smid = g.mul(s, mid);
        cases.push((g.add(r, smid), "x"));
        let roots: Vec<ExprId> = cases.iter().map(|c| c.0).collect();
        let (out, simple) = simplify(&g, &roots, &Assumptions::default());
        for ((&before, want), &after) in roots.iter().zip(cases.iter().map(|c| c.1)).zip(&simple) {
            assert_eq!(out.display(after), want, "{}", g.display(before));
            for env in (0..40u64)
                .flat_map(|x| (1..7u64).flat_map(move |s| (1..4u64).map(move |t| [x, 5, s, t])))
            {
                assert_eq!(eval(&out, after, &env), eval(&g, before, &env), "{env:?}");
            }
        }
    }

    /// The sums recombine only when they are `x`: a divisor that may be 0 (a coordinate, not a
    /// run-time extent) or a quotient with the wrong factor stays as written.
    #[test]
    fn a_remainder_recombines_only_with_its_own_quotient() {
        let mut g = ExprGraph::unshared();
        let [x, y] = ["x", "y"].map(|n| {
            let v = g.declare(n, VarKind::Coord);
            g.var(v)
        });
        let s = {
            let v = g.declare("s_len", VarKind::Extent);
            g.var(v)
        };
        let two = g.constant(2);
        // y may be 0, where x % y + y * (x / y) is 0 (WGSL), not x.
        let r = g.rem(x, y);
        let q = g.div(x, y);
        let yq = g.mul(y, q);
        let by_coord = g.add(r, yq);
        // x % s + 2 * s * (x / s) is not x.
        let rs = g.rem(x, s);
        let qs = g.div(x, s);
        let s2 = g.mul(s, two);
        let s2q = g.mul(s2, qs);
        let doubled = g.add(rs, s2q);
        let (out, roots) = simplify(&g, &[by_coord, doubled], &Assumptions::default());
        assert_eq!(out.display(roots[0]), "(x % y) + (y * (x / y))");
        assert!(
            out.display(roots[1]).contains('%'),
            "{}",
            out.display(roots[1])
        );
    }
}
