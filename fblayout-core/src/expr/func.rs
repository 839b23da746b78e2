//! Index functions: the unit that emitters write and kernels call.
//!
//! An [`IndexFn`] names two expressions over the same parameters: the physical `offset` of a
//! logical coordinate, and `in_bounds`, the mask that says whether the coordinate lies inside
//! the tensor (padding of a partial tile lies outside). Parameters are the coordinates, in the
//! order of the axes they index, then the run-time extents.
//!
//! Emitters accept only a [`ValidIndexFn`], which [`IndexFn::validate`] makes after checking
//! names, types, parameters and constant divisors — as naga's back ends take only the
//! `ModuleInfo` its validator produced.

use std::collections::HashSet;
use std::ops::Deref;

use super::graph::{BinOp, ExprGraph, ExprId, Node, Ty, VarId, VarKind};
use super::simplify::{Assumptions, simplify};
use crate::ident::ident_problem;

/// An offset expression and its bounds mask over the same parameters.
#[derive(Debug, Clone)]
pub struct IndexFn {
    /// The name stem: emitters write `<name>_offset` and `<name>_in_bounds`.
    pub name: String,
    /// The graph holding both expressions.
    pub graph: ExprGraph,
    /// The parameters, coordinates first, then run-time extents.
    pub params: Vec<VarId>,
    /// The physical offset, in elements.
    pub offset: ExprId,
    /// Whether the coordinate lies inside the tensor.
    pub in_bounds: ExprId,
    /// Facts about the parameters that hold wherever `in_bounds` is true.
    pub assume: Assumptions,
}

/// Why an index function is malformed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ExprError {
    /// A name can't be emitted.
    #[error("`{name}` can't be used as a name in index function `{function}`: {why}")]
    BadName {
        /// The function.
        function: String,
        /// The offending name.
        name: String,
        /// Why not.
        why: &'static str,
    },
    /// Two parameters share a name.
    #[error("index function `{function}` has two parameters named `{name}`")]
    DuplicateParam {
        /// The function.
        function: String,
        /// The repeated name.
        name: String,
    },
    /// An expression uses a variable that is not a parameter.
    #[error("index function `{function}` uses `{name}`, which is not one of its parameters")]
    Unbound {
        /// The function.
        function: String,
        /// The variable.
        name: String,
    },
    /// An operand has the wrong type.
    #[error("index function `{function}`: `{expr}` mixes integers and booleans")]
    Type {
        /// The function.
        function: String,
        /// The ill-typed expression.
        expr: String,
    },
    /// The offset is not an integer, or the mask not a boolean.
    #[error("index function `{function}`: its {what} must be {expected}")]
    RootType {
        /// The function.
        function: String,
        /// `offset` or `in_bounds`.
        what: &'static str,
        /// `an integer` or `a boolean`.
        expected: &'static str,
    },
    /// A division or remainder by the constant zero.
    #[error("index function `{function}` divides by zero in `{expr}`")]
    DivisionByZero {
        /// The function.
        function: String,
        /// The expression.
        expr: String,
    },
}

/// An [`IndexFn`] that passed [`IndexFn::validate`]; the only input emitters accept.
#[derive(Debug, Clone)]
pub struct ValidIndexFn(IndexFn);

impl Deref for ValidIndexFn {
    type Target = IndexFn;
    fn deref(&self) -> &IndexFn {
        &self.0
    }
}

impl ValidIndexFn {
    /// The number of coordinate parameters.
    pub fn coord_count(&self) -> usize {
        self.params
            .iter()
            .filter(|&&p| self.graph.var_decl(p).kind == VarKind::Coord)
            .count()
    }

    /// The names of the parameters, in order.
    pub fn param_names(&self) -> Vec<&str> {
        self.params
            .iter()
            .map(|&p| self.graph.var_decl(p).name.as_str())
            .collect()
    }

    /// The emitted name of the offset function.
    pub fn offset_fn_name(&self) -> String {
        format!("{}_offset", self.name)
    }

    /// The emitted name of the bounds-mask function.
    pub fn in_bounds_fn_name(&self) -> String {
        format!("{}_in_bounds", self.name)
    }

    /// Operations evaluated for the offset and the mask together (shared nodes once).
    pub fn op_count(&self) -> usize {
        self.graph.op_count(&[self.offset, self.in_bounds])
    }

    /// The simplified form of this function.
    ///
    /// The offset is simplified under the function's [`Assumptions`] (they hold wherever the
    /// coordinate is in bounds); the mask is simplified without them, so padding stays masked.
    pub fn simplified(&self) -> ValidIndexFn {
        let (mut graph, offset) = simplify(&self.graph, &[self.offset], &self.assume);
        let (mask_graph, mask) = simplify(&self.graph, &[self.in_bounds], &Assumptions::default());
        let in_bounds = graph.import(&mask_graph, mask[0]);
        // `simplify` declares the variables in their original order, so parameter ids carry
        // over; it introduces no variable, changes no type and keeps every division by zero,
        // so the result is as valid as its input.
        ValidIndexFn(IndexFn {
            name: self.name.clone(),
            graph,
            params: self.params.clone(),
            offset: offset[0],
            in_bounds,
            assume: self.assume.clone(),
        })
    }
}

impl IndexFn {
    /// Checks the function and returns the form emitters accept.
    pub fn validate(self) -> Result<ValidIndexFn, ExprError> {
        let function = self.name.clone();
        let bad_name = |name: &str| {
            ident_problem(name).map(|why| ExprError::BadName {
                function: function.clone(),
                name: name.to_owned(),
                why,
            })
        };
        if let Some(err) = bad_name(&self.name) {
            return Err(err);
        }
        let mut seen = HashSet::new();
        for &p in &self.params {
            let name = &self.graph.var_decl(p).name;
            if let Some(err) = bad_name(name) {
                return Err(err);
            }
            if !seen.insert(name.clone()) {
                return Err(ExprError::DuplicateParam {
                    function,
                    name: name.clone(),
                });
            }
        }
        let roots = [self.offset, self.in_bounds];
        for id in self.graph.reachable(&roots) {
            match self.graph.node(id) {
                Node::Var(v) if !self.params.contains(&v) => {
                    let name = self.graph.var_decl(v).name.clone();
                    return Err(ExprError::Unbound { function, name });
                }
                Node::Bin(op, a, b) => {
                    let want = op.operand_ty();
                    if self.graph.ty(a) != want || self.graph.ty(b) != want {
                        return Err(ExprError::Type {
                            function,
                            expr: self.graph.display(id),
                        });
                    }
                    let zero = matches!(self.graph.node(b), Node::Const(0));
                    if zero && matches!(op, BinOp::Div | BinOp::Rem) {
                        let expr = self.graph.display(id);
                        return Err(ExprError::DivisionByZero { function, expr });
                    }
                }
                Node::Select(c, a, b) => {
                    let ok = self.graph.ty(c) == Ty::Bool
                        && self.graph.ty(a) == Ty::Int
                        && self.graph.ty(b) == Ty::Int;
                    if !ok {
                        return Err(ExprError::Type {
                            function,
                            expr: self.graph.display(id),
                        });
                    }
                }
                _ => {}
            }
        }
        if self.graph.ty(self.offset) != Ty::Int {
            return Err(ExprError::RootType {
                function,
                what: "offset",
                expected: "an integer",
            });
        }
        if self.graph.ty(self.in_bounds) != Ty::Bool {
            return Err(ExprError::RootType {
                function,
                what: "in_bounds",
                expected: "a boolean",
            });
        }
        Ok(ValidIndexFn(self))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn simple(name: &str) -> IndexFn {
        let mut g = ExprGraph::new();
        let x = g.declare("x", VarKind::Coord);
        let vx = g.var(x);
        let c4 = g.constant(4);
        let offset = g.mul(vx, c4);
        let in_bounds = g.lt(vx, c4);
        IndexFn {
            name: name.into(),
            graph: g,
            params: vec![x],
            offset,
            in_bounds,
            assume: Assumptions::default(),
        }
    }

    #[test]
    fn validates_a_good_function() {
        let f = simple("t").validate().unwrap();
        assert_eq!(f.param_names(), ["x"]);
        assert_eq!(f.coord_count(), 1);
        assert_eq!(f.offset_fn_name(), "t_offset");
    }

    #[test]
    fn rejects_reserved_names() {
        let err = simple("fn").validate().unwrap_err();
        assert!(err.to_string().contains("reserved"), "{err}");
    }

    #[test]
    fn rejects_unbound_variables() {
        let mut f = simple("t");
        let y = f.graph.declare("y", VarKind::Extent);
        let vy = f.graph.var(y);
        f.offset = f.graph.add(f.offset, vy);
        let err = f.validate().unwrap_err();
        assert_eq!(
            err,
            ExprError::Unbound {
                function: "t".into(),
                name: "y".into()
            }
        );
    }

    #[test]
    fn rejects_ill_typed_and_zero_division() {
        let mut f = simple("t");
        f.offset = f.in_bounds;
        assert!(matches!(f.validate(), Err(ExprError::RootType { .. })));
        let mut f = simple("t");
        let zero = f.graph.constant(0);
        f.offset = f.graph.div(f.offset, zero);
        assert!(matches!(
            f.validate(),
            Err(ExprError::DivisionByZero { .. })
        ));
        let mut f = simple("t");
        f.offset = f.graph.add(f.offset, f.in_bounds);
        assert!(matches!(f.validate(), Err(ExprError::Type { .. })));
    }
}
