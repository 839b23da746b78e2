//! How each operation's kernel walks its operands: the table the cost model reads, derived
//! from every operation's contract ([`crate::ops`]), whose roles declare their walks.
//!
//! The kernels of `fblayout-kernels` take views of any layout, so every candidate layout is
//! accepted for every operand; what differs is the cost. That cost depends on which axis the
//! kernel's neighbouring threads walk when they touch an operand (`Walk`): along a
//! contiguous axis they share memory transactions, along a strided one they do not. A
//! reduction along the walked axis is priced with the model's reduction factors. The two
//! operands of a matrix product also set its arithmetic rate (`Matmul`).
//!
//! `own` is the operand's own memory order: the kernel walks its buffer linearly, which is
//! contiguous whatever the layout. `like the output` reads the operand in the order of the
//! first output's layout: free when both share a layout, strided when they differ.

use crate::graph::{Graph, Node, Op, Sizes};
pub(crate) use crate::ops::{Access, Walk};

/// Whether `op` reads every input in the layout it is stored in, with no conversion before
/// it (its contract says; see [`crate::ops`]).
pub(crate) fn reads_stored(op: Op) -> bool {
    op.contract().reads_stored()
}

/// The matrix product of an operation: which inputs it multiplies, along which axis each is
/// read for the shared (`k`) dimension, and its floating-point operations.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Matmul {
    /// The left operand: input position and the walk of its `k` axis.
    pub(crate) a: (usize, Walk),
    /// The right operand.
    pub(crate) b: (usize, Walk),
    /// Floating-point operations (multiply and add counted apart).
    pub(crate) flops: f64,
}

/// How one operation touches its operands.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct OpAccess {
    /// The walks over each input, by position (an input may be walked twice).
    pub(crate) inputs: Vec<Vec<Access>>,
    /// The walk over each output, by position.
    pub(crate) outputs: Vec<Access>,
    /// The matrix product, for the operations that compute one.
    pub(crate) matmul: Option<Matmul>,
}

/// The access table of `node` of `graph` at `sizes`: its contract's walks, role by role, and
/// its product with the roles resolved to input positions. `Convert` is priced by the
/// conversion classification, not by this table.
pub(crate) fn accesses(graph: &Graph, node: &Node, sizes: Sizes) -> OpAccess {
    let contract = node.op.contract();
    let inputs = contract.inputs();
    let no_bytes = |_| 0;
    let shapes = crate::ops::shapes(graph, node, sizes, &no_bytes);
    let position = |role: &str| {
        inputs
            .iter()
            .position(|s| s.name == role)
            .expect("a contract's product multiplies two of its input roles")
    };
    OpAccess {
        inputs: inputs.iter().map(|s| s.access.to_vec()).collect(),
        outputs: contract
            .outputs()
            .iter()
            .map(|s| {
                s.access
                    .first()
                    .copied()
                    .unwrap_or(Access::along(Walk::Own))
            })
            .collect(),
        matmul: contract.product(&shapes).map(|p| Matmul {
            a: (position(p.a.0), p.a.1),
            b: (position(p.b.0), p.b.1),
            flops: p.flops,
        }),
    }
}
