//! Emitters: Rust source and WGSL for validated index functions.
//!
//! Both emitters follow naga's back ends: a writer over an output sink that accepts only
//! validated input ([`ValidIndexFn`]). They share `Body`, which decides how an expression
//! DAG becomes straight-line code: a node used more than once is bound once with `let` (in
//! operand order) and referred to by name; every other node is written inline. The WGSL
//! emitter's output is validated by naga before anyone sees it ([`wgsl::emit_module`]).

pub mod rust;
#[doc(hidden)]
pub mod tokens;
pub mod wgsl;

use crate::expr::{ExprGraph, ExprId, Node, ValidIndexFn};

/// How a language spells the few things the two emitters write differently.
pub(crate) trait Syntax {
    /// An integer literal.
    fn int(&self, value: u64) -> String;
    /// `if cond { a } else { b }`.
    fn select(&self, cond: &str, a: &str, b: &str) -> String;
}

/// The straight-line form of one root of an index function.
#[derive(Debug, Clone)]
pub(crate) struct Body {
    /// `let` bindings, in evaluation order: (name, expression).
    pub lets: Vec<(String, String)>,
    /// The final expression.
    pub result: String,
}

impl Body {
    /// Lowers the expression at `root` of `f`.
    pub(crate) fn new(f: &ValidIndexFn, root: ExprId, syntax: &dyn Syntax) -> Self {
        let graph = &f.graph;
        let uses = graph.use_counts(&[root]);
        let mut names: Vec<Option<String>> = vec![None; graph.nodes().len()];
        let mut lets = Vec::new();
        // Temporaries are `t0`, `t1`, ...; a number whose name a parameter already has is
        // skipped, so a temporary never shadows an axis or extent.
        let params = f.param_names();
        let mut next = 0usize;
        for id in graph.reachable(&[root]) {
            let node = graph.node(id);
            if node.is_op() && uses[id.index()] > 1 && id != root {
                let text = render(graph, id, &names, syntax, false);
                let name = loop {
                    let candidate = format!("t{next}");
                    next += 1;
                    if !params.contains(&candidate.as_str()) {
                        break candidate;
                    }
                };
                lets.push((name.clone(), text));
                names[id.index()] = Some(name);
            }
        }
        let result = render(graph, root, &names, syntax, true);
        Self { lets, result }
    }
}

fn render(
    graph: &ExprGraph,
    id: ExprId,
    names: &[Option<String>],
    syntax: &dyn Syntax,
    top: bool,
) -> String {
    if let Some(name) = &names[id.index()] {
        if !top {
            return name.clone();
        }
    }
    let sub = |e: ExprId| render(graph, e, names, syntax, false);
    match graph.node(id) {
        Node::Const(c) => syntax.int(c),
        Node::Bool(b) => b.to_string(),
        Node::Var(v) => graph.var_decl(v).name.clone(),
        Node::Bin(op, a, b) => {
            let text = format!("{} {} {}", sub(a), op.symbol(), sub(b));
            if top { text } else { format!("({text})") }
        }
        Node::Select(c, a, b) => syntax.select(&sub(c), &sub(a), &sub(b)),
    }
}

/// Whether the parameter `index` of `f` appears in the expression at `root`.
pub(crate) fn uses_param(f: &ValidIndexFn, root: ExprId, index: usize) -> bool {
    let var = f.params[index];
    f.graph
        .reachable(&[root])
        .into_iter()
        .any(|id| f.graph.node(id) == Node::Var(var))
}
