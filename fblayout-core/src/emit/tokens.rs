//! The structured emitter: an index expression as a tree of Rust terms, for code generators
//! that build tokens (the derive) rather than text.
//!
//! [`block`] lowers one root of a graph to a [`Block`]: `let` bindings, then a result, each a
//! [`Term`]. It decides sharing as the text emitters do: an operation used more than once is
//! bound once, in operand order, and referred to by position; every other node is written
//! inline. Variables keep their names; the caller decides what each stands for (a coordinate
//! field, a run-time extent). Nothing is printed and parsed back.
//!
//! ```
//! use fblayout_core::emit::tokens::{Term, block};
//! use fblayout_core::layout::LayoutSpec;
//!
//! let x = LayoutSpec::new("x").dyn_axis("seq").axis("hidden", 8).build()?;
//! let len = x.len_fn().simplified();
//! let b = block(&len.graph, len.offset);
//! assert!(b.lets.is_empty());
//! assert_eq!(b.vars(), ["seq_len"]);
//! assert!(matches!(b.result, Term::Bin(..)));
//! # Ok::<(), fblayout_core::layout::LayoutErrors>(())
//! ```

use crate::expr::{Assumptions, BinOp, ExprGraph, ExprId, Node, simplify};
use crate::layout::ViewExtent;

/// One Rust expression.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Term {
    /// An integer literal.
    Int(u64),
    /// A boolean literal.
    Bool(bool),
    /// A variable of the graph, by name.
    Var(String),
    /// The `let` binding at this position of [`Block::lets`].
    Let(usize),
    /// `a op b`.
    Bin(BinOp, Box<Term>, Box<Term>),
    /// `if cond { a } else { b }`.
    Select(Box<Term>, Box<Term>, Box<Term>),
}

impl Term {
    fn visit_vars<'a>(&'a self, f: &mut impl FnMut(&'a str)) {
        match self {
            Self::Var(name) => f(name),
            Self::Bin(_, a, b) => {
                a.visit_vars(f);
                b.visit_vars(f);
            }
            Self::Select(c, a, b) => {
                c.visit_vars(f);
                a.visit_vars(f);
                b.visit_vars(f);
            }
            Self::Int(_) | Self::Bool(_) | Self::Let(_) => {}
        }
    }
}

/// Straight-line code for one root: `let`s in evaluation order, then the result.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Block {
    /// The bindings; [`Term::Let`]`(i)` refers to the `i`th.
    pub lets: Vec<Term>,
    /// The value of the block.
    pub result: Term,
}

impl Block {
    /// The names of the variables the block reads, each once, in order of first use.
    pub fn vars(&self) -> Vec<&str> {
        let mut names: Vec<&str> = Vec::new();
        for t in self.lets.iter().chain([&self.result]) {
            t.visit_vars(&mut |n| {
                if !names.contains(&n) {
                    names.push(n);
                }
            });
        }
        names
    }
}

/// Lowers the expression at `root` of `graph`.
pub fn block(graph: &ExprGraph, root: ExprId) -> Block {
    let uses = graph.use_counts(&[root]);
    let mut bound: Vec<Option<usize>> = vec![None; graph.nodes().len()];
    let mut lets = Vec::new();
    for id in graph.reachable(&[root]) {
        if graph.node(id).is_op() && uses[id.index()] > 1 && id != root {
            lets.push(term(graph, id, &bound, true));
            bound[id.index()] = Some(lets.len() - 1);
        }
    }
    let result = term(graph, root, &bound, true);
    Block { lets, result }
}

/// The extent of a view axis as a block over the run-time extent parameters (`<axis>_len`),
/// simplified.
pub fn view_extent(extent: &ViewExtent) -> Block {
    let mut g = ExprGraph::unshared();
    let e = extent.expr(&mut g);
    let (g, roots) = simplify(&g, &[e], &Assumptions::default());
    block(&g, roots[0])
}

fn term(graph: &ExprGraph, id: ExprId, bound: &[Option<usize>], top: bool) -> Term {
    if let (Some(i), false) = (bound[id.index()], top) {
        return Term::Let(i);
    }
    let sub = |e: ExprId| Box::new(term(graph, e, bound, false));
    match graph.node(id) {
        Node::Const(c) => Term::Int(c),
        Node::Bool(b) => Term::Bool(b),
        Node::Var(v) => Term::Var(graph.var_decl(v).name.clone()),
        Node::Bin(op, a, b) => Term::Bin(op, sub(a), sub(b)),
        Node::Select(c, a, b) => Term::Select(sub(c), sub(a), sub(b)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layout::LayoutSpec;

    #[test]
    fn shared_operations_are_bound_once() {
        let mut g = ExprGraph::new();
        let x = g.declare("x", crate::expr::VarKind::Coord);
        let vx = g.var(x);
        let one = g.constant(1);
        let sum = g.add(vx, one);
        let root = g.mul(sum, sum);
        let b = block(&g, root);
        assert_eq!(
            b.lets,
            [Term::Bin(
                BinOp::Add,
                Box::new(Term::Var("x".into())),
                Box::new(Term::Int(1))
            )]
        );
        assert_eq!(
            b.result,
            Term::Bin(BinOp::Mul, Box::new(Term::Let(0)), Box::new(Term::Let(0)))
        );
        assert_eq!(b.vars(), ["x"]);
    }

    #[test]
    fn static_view_extents_fold() {
        let x = LayoutSpec::new("x").axis("a", 6).build().unwrap();
        let b = view_extent(&x.view().axes()[0].extent);
        assert_eq!(b.result, Term::Int(6));
    }
}
