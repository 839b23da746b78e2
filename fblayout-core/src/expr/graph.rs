//! The expression graph: an arena of integer and boolean nodes.
//!
//! An index expression is a DAG over variables (coordinates and run-time extents) and
//! constants. Nodes live in an [`ExprGraph`] arena and are named by [`ExprId`]. A graph built
//! with [`ExprGraph::new`] hash-conses its nodes, so structurally equal subexpressions are one
//! node (common-subexpression sharing); [`ExprGraph::unshared`] builds the plain tree that a
//! naive transcription would give, which is what the simplifier's benchmark counts as "before".
//!
//! Integers are unsigned. Division and remainder truncate. Offsets and extents are bounded by
//! `u32::MAX` (the WGSL index space), which layouts check when they are built.

use std::collections::HashMap;
use std::fmt;

/// A node's handle inside its [`ExprGraph`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ExprId(pub(crate) u32);

impl ExprId {
    /// The node's position in its graph's arena.
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

/// A variable's handle inside its [`ExprGraph`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct VarId(pub(crate) u32);

impl VarId {
    /// The variable's position in its graph's variable table.
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

/// What a variable stands for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum VarKind {
    /// A logical coordinate along one axis.
    Coord,
    /// An extent known only at run time (a dynamic axis length).
    Extent,
}

/// A named variable of an expression graph.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Var {
    /// The name emitted as a parameter (a valid Rust and WGSL identifier).
    pub name: String,
    /// Coordinate or run-time extent.
    pub kind: VarKind,
}

/// A binary operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum BinOp {
    /// `a + b`
    Add,
    /// `a - b` (never below zero in well-formed index code)
    Sub,
    /// `a * b`
    Mul,
    /// `a / b`, truncating
    Div,
    /// `a % b`
    Rem,
    /// `a << b`
    Shl,
    /// `a >> b`
    Shr,
    /// `a & b` (bitwise)
    BitAnd,
    /// `a < b`, giving a boolean
    Lt,
    /// `a && b` over booleans
    And,
}

impl BinOp {
    /// Whether the operands may be swapped.
    pub fn is_commutative(self) -> bool {
        matches!(self, Self::Add | Self::Mul | Self::BitAnd | Self::And)
    }

    /// The operator's spelling in Rust and WGSL (they agree for every operator here).
    pub fn symbol(self) -> &'static str {
        match self {
            Self::Add => "+",
            Self::Sub => "-",
            Self::Mul => "*",
            Self::Div => "/",
            Self::Rem => "%",
            Self::Shl => "<<",
            Self::Shr => ">>",
            Self::BitAnd => "&",
            Self::Lt => "<",
            Self::And => "&&",
        }
    }

    /// Operators of one group have the same precedence and associate to the left: `+ -`
    /// (0) and `* / %` (1); `None` for the others, which [`ExprGraph::display`] always
    /// parenthesises.
    fn arithmetic_group(self) -> Option<u8> {
        match self {
            Self::Add | Self::Sub => Some(0),
            Self::Mul | Self::Div | Self::Rem => Some(1),
            Self::Shl | Self::Shr | Self::BitAnd | Self::Lt | Self::And => None,
        }
    }

    /// The type of the operands.
    pub fn operand_ty(self) -> Ty {
        if self == Self::And { Ty::Bool } else { Ty::Int }
    }

    /// The type of the result.
    pub fn result_ty(self) -> Ty {
        if matches!(self, Self::Lt | Self::And) {
            Ty::Bool
        } else {
            Ty::Int
        }
    }
}

/// The type of a node's value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Ty {
    /// An unsigned integer (`usize` in Rust, `u32` in WGSL).
    Int,
    /// A truth value.
    Bool,
}

/// One node of the graph.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Node {
    /// An integer constant.
    Const(u64),
    /// A boolean constant.
    Bool(bool),
    /// A variable.
    Var(VarId),
    /// A binary operation.
    Bin(BinOp, ExprId, ExprId),
    /// `if cond { a } else { b }` over integers.
    Select(ExprId, ExprId, ExprId),
}

impl Node {
    /// Whether this node is an operation (counted by [`ExprGraph::op_count`]).
    pub fn is_op(&self) -> bool {
        matches!(self, Self::Bin(..) | Self::Select(..))
    }

    /// The node's operands, in order.
    pub fn operands(&self) -> impl Iterator<Item = ExprId> {
        let (n, ops) = match *self {
            Self::Bin(_, a, b) => (2, [a, b, a]),
            Self::Select(c, a, b) => (3, [c, a, b]),
            Self::Const(_) | Self::Bool(_) | Self::Var(_) => (0, [ExprId(0); 3]),
        };
        ops.into_iter().take(n)
    }
}

/// An arena of expression nodes with its variable table.
#[derive(Clone, Default)]
pub struct ExprGraph {
    vars: Vec<Var>,
    nodes: Vec<Node>,
    interned: Option<HashMap<Node, ExprId>>,
}

impl ExprGraph {
    /// A graph that shares structurally equal nodes (hash-consing).
    pub fn new() -> Self {
        Self {
            vars: Vec::new(),
            nodes: Vec::new(),
            interned: Some(HashMap::new()),
        }
    }

    /// A graph that never shares nodes: every call adds a node, as a naive transcription would.
    pub fn unshared() -> Self {
        Self {
            vars: Vec::new(),
            nodes: Vec::new(),
            interned: None,
        }
    }

    /// Whether this graph shares structurally equal nodes.
    pub fn is_shared(&self) -> bool {
        self.interned.is_some()
    }

    /// Declares a variable, or returns the one already declared with this name and kind.
    pub fn declare(&mut self, name: impl Into<String>, kind: VarKind) -> VarId {
        let name = name.into();
        if let Some(i) = self
            .vars
            .iter()
            .position(|v| v.name == name && v.kind == kind)
        {
            return VarId(i as u32);
        }
        self.vars.push(Var { name, kind });
        VarId((self.vars.len() - 1) as u32)
    }

    /// Looks a variable up by name.
    pub fn find_var(&self, name: &str) -> Option<VarId> {
        self.vars
            .iter()
            .position(|v| v.name == name)
            .map(|i| VarId(i as u32))
    }

    /// The variable table.
    pub fn vars(&self) -> &[Var] {
        &self.vars
    }

    /// A variable's declaration.
    pub fn var_decl(&self, id: VarId) -> &Var {
        &self.vars[id.index()]
    }

    /// The node behind `id`.
    pub fn node(&self, id: ExprId) -> Node {
        self.nodes[id.index()]
    }

    /// Every node, in creation order (operands always come before their users).
    pub fn nodes(&self) -> &[Node] {
        &self.nodes
    }

    /// Adds `node` (or finds its twin in a shared graph).
    pub fn add_node(&mut self, node: Node) -> ExprId {
        let node = match node {
            Node::Bin(op, a, b) if op.is_commutative() && b < a => Node::Bin(op, b, a),
            other => other,
        };
        if let Some(found) = self.interned.as_ref().and_then(|m| m.get(&node)) {
            return *found;
        }
        let id = ExprId(self.nodes.len() as u32);
        self.nodes.push(node);
        if let Some(map) = self.interned.as_mut() {
            map.insert(node, id);
        }
        id
    }

    /// An integer constant.
    pub fn constant(&mut self, value: u64) -> ExprId {
        self.add_node(Node::Const(value))
    }

    /// A boolean constant.
    pub fn boolean(&mut self, value: bool) -> ExprId {
        self.add_node(Node::Bool(value))
    }

    /// A variable reference.
    pub fn var(&mut self, var: VarId) -> ExprId {
        self.add_node(Node::Var(var))
    }

    /// `op(a, b)`.
    pub fn bin(&mut self, op: BinOp, a: ExprId, b: ExprId) -> ExprId {
        self.add_node(Node::Bin(op, a, b))
    }

    /// `a + b`
    pub fn add(&mut self, a: ExprId, b: ExprId) -> ExprId {
        self.bin(BinOp::Add, a, b)
    }

    /// `a * b`
    pub fn mul(&mut self, a: ExprId, b: ExprId) -> ExprId {
        self.bin(BinOp::Mul, a, b)
    }

    /// `a / b`
    pub fn div(&mut self, a: ExprId, b: ExprId) -> ExprId {
        self.bin(BinOp::Div, a, b)
    }

    /// `a % b`
    pub fn rem(&mut self, a: ExprId, b: ExprId) -> ExprId {
        self.bin(BinOp::Rem, a, b)
    }

    /// `a < b`
    pub fn lt(&mut self, a: ExprId, b: ExprId) -> ExprId {
        self.bin(BinOp::Lt, a, b)
    }

    /// `a && b`
    pub fn and(&mut self, a: ExprId, b: ExprId) -> ExprId {
        self.bin(BinOp::And, a, b)
    }

    /// `if cond { a } else { b }`
    pub fn select(&mut self, cond: ExprId, a: ExprId, b: ExprId) -> ExprId {
        self.add_node(Node::Select(cond, a, b))
    }

    /// The nodes reachable from `roots`, in an order where operands precede users.
    pub fn reachable(&self, roots: &[ExprId]) -> Vec<ExprId> {
        let mut seen = vec![false; self.nodes.len()];
        let mut stack: Vec<ExprId> = roots.to_vec();
        while let Some(id) = stack.pop() {
            if std::mem::replace(&mut seen[id.index()], true) {
                continue;
            }
            stack.extend(self.node(id).operands());
        }
        (0..self.nodes.len())
            .filter(|&i| seen[i])
            .map(|i| ExprId(i as u32))
            .collect()
    }

    /// The number of operations evaluated to compute `roots`, each distinct node once.
    ///
    /// In a shared graph this is the cost after common-subexpression elimination; in an
    /// unshared graph every occurrence is its own node, so it is the cost of the naive tree.
    pub fn op_count(&self, roots: &[ExprId]) -> usize {
        self.reachable(roots)
            .into_iter()
            .filter(|&id| self.node(id).is_op())
            .count()
    }

    /// How often each node is used as an operand among the nodes reachable from `roots`
    /// (roots count once each).
    pub fn use_counts(&self, roots: &[ExprId]) -> Vec<u32> {
        let mut uses = vec![0u32; self.nodes.len()];
        for id in self.reachable(roots) {
            for operand in self.node(id).operands() {
                uses[operand.index()] += 1;
            }
        }
        for root in roots {
            uses[root.index()] += 1;
        }
        uses
    }

    /// The type of a node, if its operands are well typed.
    pub fn ty(&self, id: ExprId) -> Ty {
        match self.node(id) {
            Node::Const(_) | Node::Var(_) | Node::Select(..) => Ty::Int,
            Node::Bool(_) => Ty::Bool,
            Node::Bin(op, ..) => op.result_ty(),
        }
    }

    /// Copies the expression at `id` from `other` into this graph, mapping its variables by
    /// name (declaring them here when missing). Returns the copy's id.
    pub fn import(&mut self, other: &ExprGraph, id: ExprId) -> ExprId {
        let mut map: HashMap<ExprId, ExprId> = HashMap::new();
        for node_id in other.reachable(&[id]) {
            let new = match other.node(node_id) {
                Node::Var(v) => {
                    let decl = other.var_decl(v);
                    let here = self.declare(decl.name.clone(), decl.kind);
                    self.var(here)
                }
                Node::Bin(op, a, b) => self.bin(op, map[&a], map[&b]),
                Node::Select(c, a, b) => self.select(map[&c], map[&a], map[&b]),
                leaf => self.add_node(leaf),
            };
            map.insert(node_id, new);
        }
        map[&id]
    }

    /// Writes the expression at `id` as one infix string (for messages and tests).
    ///
    /// An operand that is itself an operation is parenthesised, except the left operand of an
    /// operation of the same arithmetic group, which reads the same without them:
    /// `a * b / c` is `(a * b) / c`, `a + b - c` is `(a + b) - c`.
    pub fn display(&self, id: ExprId) -> String {
        self.infix(id, None)
    }

    /// [`display`](Self::display) of `id` as the left (`true`) or right operand of `parent`.
    fn infix(&self, id: ExprId, parent: Option<(BinOp, bool)>) -> String {
        match self.node(id) {
            Node::Const(c) => c.to_string(),
            Node::Bool(b) => b.to_string(),
            Node::Var(v) => self.var_decl(v).name.clone(),
            Node::Bin(op, a, b) => {
                let text = format!(
                    "{} {} {}",
                    self.infix(a, Some((op, true))),
                    op.symbol(),
                    self.infix(b, Some((op, false)))
                );
                let bare = parent.is_none_or(|(p, left)| {
                    left && op.arithmetic_group().is_some()
                        && op.arithmetic_group() == p.arithmetic_group()
                });
                if bare { text } else { format!("({text})") }
            }
            Node::Select(c, a, b) => format!(
                "select({}, {}, {})",
                self.display(c),
                self.display(a),
                self.display(b)
            ),
        }
    }
}

impl fmt::Debug for ExprGraph {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ExprGraph")
            .field("vars", &self.vars)
            .field("nodes", &self.nodes.len())
            .field("shared", &self.is_shared())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shared_graph_interns_equal_nodes() {
        let mut g = ExprGraph::new();
        let x = g.declare("x", VarKind::Coord);
        let y = g.declare("y", VarKind::Coord);
        let (vx, vy) = (g.var(x), g.var(y));
        let a = g.add(vx, vy);
        let b = g.add(vy, vx);
        assert_eq!(a, b, "commutative operands are canonicalised");
        let c4 = g.constant(4);
        let m1 = g.mul(a, c4);
        let m2 = g.mul(b, c4);
        assert_eq!(m1, m2);
        assert_eq!(g.op_count(&[m1, m2]), 2);
    }

    #[test]
    fn unshared_graph_counts_every_occurrence() {
        let mut g = ExprGraph::unshared();
        let x = g.declare("x", VarKind::Coord);
        let vx = g.var(x);
        let c = g.constant(3);
        let a = g.mul(vx, c);
        let vx2 = g.var(x);
        let c2 = g.constant(3);
        let b = g.mul(vx2, c2);
        let s = g.add(a, b);
        assert_eq!(g.op_count(&[s]), 3);
        assert_eq!(g.display(s), "(x * 3) + (x * 3)");
    }

    #[test]
    fn display_drops_only_parentheses_that_change_nothing() {
        let mut g = ExprGraph::unshared();
        let [a, b, c] = ["a", "b", "c"].map(|n| {
            let v = g.declare(n, VarKind::Extent);
            g.var(v)
        });
        let ab = g.mul(a, b);
        assert_eq!(g.display(ab), "a * b");
        let ab_c = g.div(ab, c);
        assert_eq!(g.display(ab_c), "a * b / c");
        let bc = g.mul(b, c);
        let a_bc = g.div(a, bc);
        assert_eq!(g.display(a_bc), "a / (b * c)");
        let sum = g.add(a, b);
        let diff = g.bin(BinOp::Sub, sum, c);
        assert_eq!(g.display(diff), "a + b - c");
        let scaled = g.mul(sum, c);
        // Commutative operands are ordered by id, and `c` is older than `a + b`.
        assert_eq!(g.display(scaled), "c * (a + b)");
        let sum_ab = g.add(a, ab);
        assert_eq!(g.display(sum_ab), "a + (a * b)");
        let shifted = g.bin(BinOp::Shl, ab, c);
        assert_eq!(g.display(shifted), "(a * b) << c");
    }

    #[test]
    fn import_maps_variables_by_name() {
        let mut a = ExprGraph::new();
        let x = a.declare("x", VarKind::Coord);
        let vx = a.var(x);
        let two = a.constant(2);
        let e = a.mul(vx, two);
        let mut b = ExprGraph::new();
        b.declare("y", VarKind::Coord);
        let copied = b.import(&a, e);
        assert_eq!(b.display(copied), "x * 2");
        assert_eq!(b.vars().len(), 2);
    }
}
