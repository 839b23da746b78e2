//! What a contract's CPU twin is given: its operands by role, in `f64` (floats) or `u32`
//! (ids, labels), through their layouts' offset tables.

use fblayout_kernels::cpu::{Logical, OffsetTable};
use fblayout_kernels::tensor::{HostArg, HostArgMut};

use super::OpErr;
use crate::exec::AdamWConfig;

type Table<'a> = &'a OffsetTable;

/// An operand read by a CPU twin.
pub(crate) enum In<'a> {
    /// Floats.
    F(HostArg<'a, f64, Table<'a>>),
    /// Integers.
    U(HostArg<'a, u32, Table<'a>>),
}

/// An operand written by a CPU twin.
pub(crate) type Out<'a> = HostArgMut<'a, f64, Table<'a>>;

/// What a node reads on the CPU, by role: without the tensors it updates in place, which are
/// among what it writes ([`Outs`]).
pub(crate) struct Ins<'a> {
    pub(crate) op: &'static str,
    pub(crate) list: Vec<(&'static str, In<'a>)>,
}

/// What a node writes on the CPU, by role.
pub(crate) struct Outs<'a> {
    pub(crate) op: &'static str,
    pub(crate) list: Vec<(&'static str, Out<'a>)>,
}

fn error(op: &'static str, detail: String) -> OpErr {
    OpErr::Shape { op, detail }
}

/// What a CPU twin reads besides its operands.
pub(crate) struct CpuCtx<'a> {
    /// AdamW's hyper-parameters.
    pub(crate) adamw: &'a AdamWConfig,
    /// AdamW's step number (from 1).
    pub(crate) step: u32,
}

impl<'a> Ins<'a> {
    fn error(&self, detail: String) -> OpErr {
        error(self.op, detail)
    }

    fn input(&self, role: &str) -> Result<&In<'a>, OpErr> {
        self.list
            .iter()
            .find(|(n, _)| *n == role)
            .map(|(_, x)| x)
            .ok_or_else(|| self.error(format!("it has no read operand `{role}`")))
    }

    /// The float operand read as `role`.
    pub(crate) fn f(&self, role: &str) -> Result<&dyn Logical<f64>, OpErr> {
        match self.input(role)? {
            In::F(a) => Ok(a),
            In::U(_) => Err(self.error(format!("`{role}` is an integer tensor; floats are read"))),
        }
    }

    /// The integer operand read as `role`.
    pub(crate) fn int(&self, role: &str) -> Result<&dyn Logical<u32>, OpErr> {
        match self.input(role)? {
            In::U(a) => Ok(a),
            In::F(_) => Err(self.error(format!("`{role}` is a float tensor; integers are read"))),
        }
    }

    /// The integer operand read as `role`, in logical (row-major) order.
    pub(crate) fn dense_ints(&self, role: &str) -> Result<Vec<u32>, OpErr> {
        let ids = self.int(role)?;
        let n = ids.dims().iter().product::<usize>();
        Ok((0..n).map(|i| ids.get(&[i])).collect())
    }
}

impl<'a> Outs<'a> {
    /// The operands written as `roles`, each once, for the twin to write together.
    pub(crate) fn outs<const N: usize>(
        &mut self,
        roles: [&str; N],
    ) -> Result<[&mut Out<'a>; N], OpErr> {
        let mut at = [0usize; N];
        for (k, role) in roles.iter().enumerate() {
            at[k] = self
                .list
                .iter()
                .position(|(n, _)| n == role)
                .ok_or_else(|| error(self.op, format!("it has no written operand `{role}`")))?;
        }
        let op = self.op;
        let outs = self.list.get_disjoint_mut(at).map_err(|_| OpErr::Shape {
            op,
            detail: format!("the roles {roles:?} are not distinct"),
        })?;
        Ok(outs.map(|(_, o)| o))
    }
}
