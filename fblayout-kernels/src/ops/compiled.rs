//! A kernel's validated shader with the views it was built for, and how its dispatches are
//! recorded: every op goes through here.

use fblayout_core::kernel::{KernelModule, KernelSource, ParamValue};
use fblayout_core::layout::View;

use super::error::OpError;
use crate::entry_point::workgroups;
use crate::runtime::{Batch, Gpu, linear_grid};
use crate::tensor::GpuArg;

/// A built kernel (see the module docs).
#[derive(Clone)]
pub(crate) struct Compiled {
    op: &'static str,
    module: KernelModule,
}

impl std::fmt::Debug for Compiled {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Compiled")
            .field("op", &self.op)
            .field("shader", &self.module.name())
            .finish_non_exhaustive()
    }
}

impl Compiled {
    /// Builds `source` with the optional features of `gpu`.
    pub(crate) fn new(op: &'static str, gpu: &Gpu, source: KernelSource) -> Result<Self, OpError> {
        let module = source.features(gpu.wgsl_features()).build()?;
        Ok(Self { op, module })
    }

    /// A kernel already built (by an op that chose its own WGSL features).
    pub(crate) fn from_module(op: &'static str, module: KernelModule) -> Self {
        Self { op, module }
    }

    /// The validated shader.
    pub(crate) fn module(&self) -> &KernelModule {
        &self.module
    }

    /// Records `entry` over `grid`, with each operand's argument by role (each read through
    /// the view the kernel was built for) and the kernel's scalars; the run-time extents of
    /// the operands fill the rest of the parameter block.
    pub(crate) fn record(
        &self,
        batch: &mut Batch<'_>,
        entry: &str,
        args: &[(&'static str, &GpuArg<'_>)],
        scalars: &[(&str, ParamValue)],
        grid: [u32; 3],
    ) -> Result<(), OpError> {
        let (buffers, params) = self.bind(args, scalars)?;
        let params: Vec<(&str, ParamValue)> =
            params.iter().map(|(n, v)| (n.as_str(), *v)).collect();
        batch.dispatch(&self.module, entry, &buffers, &params, grid)?;
        Ok(())
    }

    /// Like [`record`](Self::record), over `workgroups` folded into a 2-D grid.
    pub(crate) fn record_linear(
        &self,
        batch: &mut Batch<'_>,
        entry: &str,
        args: &[(&'static str, &GpuArg<'_>)],
        scalars: &[(&str, ParamValue)],
        workgroups: u32,
    ) -> Result<(), OpError> {
        let max = batch.gpu().max_workgroups_per_dimension();
        let grid = linear_grid(workgroups, max).ok_or_else(|| {
            OpError::shape(
                self.op,
                format!("{workgroups} workgroups do not fit a {max} × {max} grid"),
            )
        })?;
        self.record(batch, entry, args, scalars, grid)
    }

    /// Checks that `arg` is read through the view the kernel was built for its operand
    /// `role` (ops that record several kernels check every argument before recording any).
    pub(crate) fn check_view(&self, role: &'static str, arg: &GpuArg<'_>) -> Result<(), OpError> {
        let slot = self.module.slot(role).ok_or_else(|| OpError::Unsupported {
            op: self.op,
            role,
            view: arg.view().name().to_owned(),
            why: "the kernel has no such operand".into(),
        })?;
        same_view(self.op, role, arg.view(), &slot.view)
    }

    #[allow(clippy::type_complexity)]
    fn bind<'b>(
        &self,
        args: &[(&'static str, &'b GpuArg<'_>)],
        scalars: &[(&str, ParamValue)],
    ) -> Result<
        (
            Vec<(&'static str, &'b crate::runtime::GpuBuffer)>,
            Vec<(String, ParamValue)>,
        ),
        OpError,
    > {
        let mut buffers = Vec::with_capacity(args.len());
        let mut params: Vec<(String, ParamValue)> = Vec::new();
        for &(role, arg) in args {
            self.check_view(role, arg)?;
            buffers.push((role, arg.buffer()));
            params.extend(arg.params(role));
        }
        params.extend(scalars.iter().map(|(n, v)| ((*n).to_owned(), *v)));
        Ok((buffers, params))
    }
}

/// The workgroups of `invocations` invocations of a linear entry point of `op`, or why they
/// don't fit its `u32` index.
pub(crate) fn workgroups_for(op: &'static str, invocations: u64) -> Result<u32, OpError> {
    workgroups(invocations).ok_or_else(|| {
        OpError::shape(
            op,
            format!("{invocations} invocations are past the 2^32 a u32 index can count"),
        )
    })
}

/// Checks that an argument of operand `role` of `op` is read through `built`, the view the op
/// was built for, and not through `given`, another one.
pub(crate) fn same_view(
    op: &'static str,
    role: &'static str,
    given: &View,
    built: &View,
) -> Result<(), OpError> {
    if given == built {
        return Ok(());
    }
    let describe = |v: &View| {
        format!(
            "view `{}` of `{}` ({})",
            v.name(),
            v.layout().name(),
            v.layout().order().name()
        )
    };
    Err(OpError::WrongView {
        op,
        role,
        given: describe(given),
        built: describe(built),
    })
}
