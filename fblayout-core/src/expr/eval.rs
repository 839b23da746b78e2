//! Evaluating expressions on the CPU.
//!
//! [`CpuIndexFn`] is the path for index functions that are only known at run time: it compiles
//! a [`ValidIndexFn`] into a flat register program, one instruction a node, operands before
//! users, evaluated in one pass with no allocation, with the GPU's arithmetic. (Layouts known
//! when the crate is compiled get real Rust functions from the macros instead; see
//! [`crate::emit::rust`].)
//!
//! [`eval_exact`] evaluates one expression with exact, checked arithmetic instead: the
//! arithmetic of extents, whose divisions must come out whole.

use super::func::ValidIndexFn;
use super::graph::{BinOp, ExprGraph, ExprId, Node, Var};

#[derive(Debug, Clone, Copy)]
enum Instr {
    Const(u64),
    Arg(usize),
    Bin(BinOp, u32, u32),
    Select(u32, u32, u32),
}

/// A compiled index function for the CPU.
#[derive(Debug, Clone)]
pub struct CpuIndexFn {
    code: Vec<Instr>,
    arity: usize,
    offset: u32,
    in_bounds: u32,
}

/// Evaluates `op` on integers (booleans are 0 and 1), as WGSL does on `u32` for in-range values.
fn apply(op: BinOp, a: u64, b: u64) -> u64 {
    match op {
        BinOp::Add => a.wrapping_add(b),
        BinOp::Sub => a.wrapping_sub(b),
        BinOp::Mul => a.wrapping_mul(b),
        // Validation rejects constant zero divisors and binding refuses zero extents, so a
        // zero here comes only from an argument nobody checked. It then follows WGSL, which
        // defines `x / 0u == x` and `x % 0u == 0u`, so that the CPU and the GPU still agree.
        BinOp::Div => a.checked_div(b).unwrap_or(a),
        BinOp::Rem => a.checked_rem(b).unwrap_or(0),
        BinOp::Shl => a.wrapping_shl(b as u32),
        BinOp::Shr => a.wrapping_shr(b as u32),
        BinOp::BitAnd => a & b,
        BinOp::Lt => u64::from(a < b),
        BinOp::And => u64::from(a != 0 && b != 0),
    }
}

/// Evaluates the expression at `root` of `graph` exactly: natural numbers, every operation
/// checked, each variable's value given by `value_of`.
///
/// `None` when a variable has no value, a result does not fit `u64`, a divisor is zero, or a
/// division (`/`, `>>`) leaves a remainder. This is the arithmetic of extents, which divide
/// exactly by construction (a [`ViewExtent`](crate::layout::ViewExtent) is checked to when it
/// is bound); offsets, whose divisions round down, run on [`CpuIndexFn`].
pub(crate) fn eval_exact(
    graph: &ExprGraph,
    root: ExprId,
    value_of: impl Fn(&Var) -> Option<u64>,
) -> Option<u64> {
    let mut values = vec![0u64; graph.nodes().len()];
    // Operands are created before the nodes that use them, so ascending ids are an
    // evaluation order.
    for id in graph.reachable(&[root]) {
        let at = |e: ExprId| values[e.index()];
        let value = match graph.node(id) {
            Node::Const(c) => c,
            Node::Bool(b) => u64::from(b),
            Node::Var(v) => value_of(graph.var_decl(v))?,
            Node::Bin(op, a, b) => apply_exact(op, at(a), at(b))?,
            Node::Select(c, a, b) => at(if at(c) != 0 { a } else { b }),
        };
        values[id.index()] = value;
    }
    Some(values[root.index()])
}

/// `op` on natural numbers: `None` when the exact result is not a `u64`.
fn apply_exact(op: BinOp, a: u64, b: u64) -> Option<u64> {
    let divide = |d: u64| (a.checked_rem(d)? == 0).then(|| a / d);
    let power = || 1u64.checked_shl(u32::try_from(b).ok()?);
    match op {
        BinOp::Add => a.checked_add(b),
        BinOp::Sub => a.checked_sub(b),
        BinOp::Mul => a.checked_mul(b),
        BinOp::Div => divide(b),
        BinOp::Rem => a.checked_rem(b),
        BinOp::Shl => a.checked_mul(power()?),
        BinOp::Shr => divide(power()?),
        BinOp::BitAnd => Some(a & b),
        BinOp::Lt => Some(u64::from(a < b)),
        BinOp::And => Some(u64::from(a != 0 && b != 0)),
    }
}

impl CpuIndexFn {
    /// Compiles `f`.
    pub fn new(f: &ValidIndexFn) -> Self {
        let roots = [f.offset, f.in_bounds];
        let order = f.graph.reachable(&roots);
        let slot = |id: ExprId| {
            order
                .binary_search(&id)
                .map(|i| i as u32)
                .expect("operands are reachable from the roots, so they have a slot")
        };
        let code = order
            .iter()
            .map(|&id| match f.graph.node(id) {
                Node::Const(c) => Instr::Const(c),
                Node::Bool(b) => Instr::Const(u64::from(b)),
                Node::Var(v) => Instr::Arg(
                    f.params
                        .iter()
                        .position(|&p| p == v)
                        .expect("validation checked that every variable is a parameter"),
                ),
                Node::Bin(op, a, b) => Instr::Bin(op, slot(a), slot(b)),
                Node::Select(c, a, b) => Instr::Select(slot(c), slot(a), slot(b)),
            })
            .collect();
        Self {
            code,
            arity: f.params.len(),
            offset: slot(f.offset),
            in_bounds: slot(f.in_bounds),
        }
    }

    /// How many arguments the function takes (coordinates, then run-time extents).
    pub fn arity(&self) -> usize {
        self.arity
    }

    fn run(&self, args: &[u64], regs: &mut Vec<u64>) {
        regs.clear();
        for instr in &self.code {
            let value = match *instr {
                Instr::Const(c) => c,
                Instr::Arg(i) => args[i],
                Instr::Bin(op, a, b) => apply(op, regs[a as usize], regs[b as usize]),
                Instr::Select(c, a, b) => {
                    if regs[c as usize] != 0 {
                        regs[a as usize]
                    } else {
                        regs[b as usize]
                    }
                }
            };
            regs.push(value);
        }
    }

    /// The offset of the coordinate in `args`, or `None` when it is out of bounds.
    ///
    /// # Panics
    /// When `args.len()` differs from [`arity`](Self::arity); callers that take arguments from
    /// users check the length first (the typed APIs do so by construction).
    pub fn eval(&self, args: &[u64]) -> Option<u64> {
        assert_eq!(
            args.len(),
            self.arity,
            "index function takes {} arguments",
            self.arity
        );
        let mut regs = Vec::with_capacity(self.code.len());
        self.run(args, &mut regs);
        (regs[self.in_bounds as usize] != 0).then(|| regs[self.offset as usize])
    }

    /// Like [`eval`](Self::eval), reusing `regs` as scratch space (no allocation in loops).
    pub fn eval_with(&self, args: &[u64], regs: &mut Vec<u64>) -> Option<u64> {
        assert_eq!(
            args.len(),
            self.arity,
            "index function takes {} arguments",
            self.arity
        );
        self.run(args, regs);
        (regs[self.in_bounds as usize] != 0).then(|| regs[self.offset as usize])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::expr::graph::VarKind;
    use crate::expr::{Assumptions, IndexFn};

    #[test]
    fn exact_evaluation_refuses_what_is_not_a_natural_number() {
        let mut g = ExprGraph::unshared();
        let n = g.declare("n", VarKind::Extent);
        let vn = g.var(n);
        let twelve = g.constant(12);
        let four = g.constant(4);
        let product = g.mul(twelve, vn);
        let quotient = g.div(product, four);
        let n_is = |v: u64| move |_: &Var| Some(v);
        assert_eq!(eval_exact(&g, quotient, n_is(5)), Some(15));
        // 12 · 5 / 8 is not whole; the index arithmetic would round it down to 7.
        let eight = g.constant(8);
        let inexact = g.div(product, eight);
        assert_eq!(eval_exact(&g, inexact, n_is(5)), None);
        assert_eq!(eval_exact(&g, product, n_is(u64::MAX)), None);
        assert_eq!(eval_exact(&g, product, |_| None), None);
        let zero = g.constant(0);
        let by_zero = g.div(vn, zero);
        assert_eq!(eval_exact(&g, by_zero, n_is(3)), None);
        let two = g.constant(2);
        let shr = g.bin(BinOp::Shr, vn, two);
        assert_eq!(eval_exact(&g, shr, n_is(12)), Some(3));
        assert_eq!(eval_exact(&g, shr, n_is(13)), None);
        let sixty_four = g.constant(64);
        let shl = g.bin(BinOp::Shl, vn, sixty_four);
        assert_eq!(eval_exact(&g, shl, n_is(1)), None);
    }

    #[test]
    fn evaluates_offset_and_mask() {
        let mut g = ExprGraph::new();
        let r = g.declare("r", VarKind::Coord);
        let c = g.declare("c", VarKind::Coord);
        let n = g.declare("n", VarKind::Extent);
        let (vr, vc, vn) = (g.var(r), g.var(c), g.var(n));
        let row = g.mul(vr, vn);
        let offset = g.add(row, vc);
        let four = g.constant(4);
        let r_ok = g.lt(vr, four);
        let c_ok = g.lt(vc, vn);
        let in_bounds = g.and(r_ok, c_ok);
        let f = IndexFn {
            name: "m".into(),
            graph: g,
            params: vec![r, c, n],
            offset,
            in_bounds,
            assume: Assumptions::default(),
        }
        .validate()
        .unwrap();
        let cpu = CpuIndexFn::new(&f);
        assert_eq!(cpu.eval(&[2, 3, 10]), Some(23));
        assert_eq!(cpu.eval(&[4, 0, 10]), None);
        assert_eq!(cpu.eval(&[0, 10, 10]), None);
        let simple = CpuIndexFn::new(&f.simplified());
        assert_eq!(simple.eval(&[3, 9, 10]), Some(39));
    }
}
