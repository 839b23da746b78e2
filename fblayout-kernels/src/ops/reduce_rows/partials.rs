//! Scratch tensors of partial sums, and pass 2: adding them up.

use std::fmt::Write as _;

use fblayout_core::kernel::{KernelModule, KernelSource, Operand, ParamValue, Scalar};
use fblayout_core::layout::{ElemType, LayoutSpec, View};

use super::{LANES, getter, putter, value_type};
use crate::ops::compiled::Compiled;
use crate::ops::error::OpError;
use crate::runtime::{Batch, Gpu, GpuBuffer, Scratch};
use crate::tensor::GpuArg;

/// A scratch tensor of partial results, one per chunk: `[chunks, cols]` `f32`s, row-major (or
/// `[chunks]` for partial scalars).
#[derive(Debug, Clone)]
pub(crate) struct Partials {
    view: View,
}

/// The run-time axis of [`Partials`].
const CHUNKS: &str = "chunks";

impl Partials {
    /// Partial rows of `cols` columns, or partial scalars.
    pub(crate) fn new(op: &'static str, cols: Option<u32>) -> Result<Self, OpError> {
        let spec = LayoutSpec::new("partials").dyn_axis(CHUNKS);
        let spec = match cols {
            Some(cols) => spec.axis("cols", cols),
            None => spec,
        };
        let layout = spec
            .elem(ElemType::F32)
            .build()
            .map_err(|e| OpError::shape(op, e.to_string()))?;
        Ok(Self {
            view: layout.view(),
        })
    }

    /// The view kernels read and write them through.
    pub(crate) fn view(&self) -> &View {
        &self.view
    }

    /// The `f32`s of `chunks` partial rows.
    fn len(&self, chunks: u32) -> Result<u64, OpError> {
        Ok(self.view.bind(&[(CHUNKS, chunks)])?.len())
    }

    /// The scratch of `chunks` partial rows (what [`scratch`](Self::scratch) takes).
    pub(crate) fn scratch_of(&self, chunks: u32) -> Result<Scratch, OpError> {
        Ok(Scratch::buffer(self.len(chunks)? * 4))
    }

    /// A scratch buffer of `batch` for `chunks` partial rows.
    pub(crate) fn scratch(&self, batch: &mut Batch<'_>, chunks: u32) -> Result<GpuBuffer, OpError> {
        Ok(batch.scratch::<f32>(self.len(chunks)? as usize)?)
    }

    /// `buffer` as `chunks` partial rows.
    pub(crate) fn arg<'a>(
        &'a self,
        buffer: &'a GpuBuffer,
        chunks: u32,
    ) -> Result<GpuArg<'a>, OpError> {
        Ok(GpuArg::new(buffer, &self.view, &[(CHUNKS, chunks)])?)
    }
}

/// Pass 2: adds the partial rows of one or more [`Partials`] column by column, in a fixed
/// order, into `[cols]` outputs (or onto them, with `accumulate`).
#[derive(Debug, Clone)]
pub(crate) struct PartialsSum {
    op: &'static str,
    compiled: Compiled,
    cols: u32,
    width: u32,
    outputs: usize,
}

const PARTIALS_SUM: &str = "partials_sum";

/// Lanes of pass 2 along the columns, and along the partial rows. There are as many partial
/// rows as pass 1 had workgroups in a column (about a thousand on a large GPU), so a workgroup
/// spreads its lanes over the partial rows of two runs of columns (32 bytes of each partial
/// row), which keeps the loads per lane few.
const SUM_COLS: u32 = 2;
const SUM_ROWS: u32 = LANES / SUM_COLS;

/// The roles of pass 2's `k`-th partials and output.
const PART_ROLES: [&str; 2] = ["p0", "p1"];
const OUT_ROLES: [&str; 2] = ["o0", "o1"];

impl PartialsSum {
    /// Pass 2 into `outputs` (one or two `[cols]` views), each from partial rows of `partials`.
    pub(crate) fn new(
        gpu: &Gpu,
        op: &'static str,
        partials: &Partials,
        outputs: &[(&'static str, &View)],
    ) -> Result<Self, OpError> {
        assert!((1..=PART_ROLES.len()).contains(&outputs.len()));
        let cols = partials.view().axes()[1]
            .extent
            .as_static()
            .expect("partial rows have static columns") as u32;
        for (role, view) in outputs {
            if view.axes().len() != 1 || view.axes()[0].extent.as_static() != Some(cols.into()) {
                return Err(OpError::shape(
                    op,
                    format!(
                        "`{role}` ({}) must be a vector of the {cols} columns",
                        view.name()
                    ),
                ));
            }
        }
        let first = Operand::read(PART_ROLES[0], partials.view())?.vectorized(1);
        let width = if first.vector_axis().is_some() { 4 } else { 1 };
        let mut source = KernelSource::new(op);
        let mut body = String::new();
        for (k, (_, view)) in outputs.iter().enumerate() {
            let p = Operand::read(PART_ROLES[k], partials.view())?.vectorized(1);
            let o = Operand::write(OUT_ROLES[k], view)?.vectorized(0);
            body += &(getter(&p, 1, width) + &getter(&o, 0, width) + &putter(&o, 0, width));
            source = source.operand(p).operand(o);
        }
        body += &partials_sum_entry(outputs.len(), width);
        let source = source.scalar("accumulate", Scalar::U32).body(body);
        Ok(Self {
            op,
            compiled: Compiled::new(op, gpu, source)?,
            cols,
            width,
            outputs: outputs.len(),
        })
    }

    /// The shader.
    pub(crate) fn module(&self) -> &KernelModule {
        self.compiled.module()
    }

    /// Records pass 2: output `k` gets the column sums of `parts[k]` (or adds them, with
    /// `accumulate`).
    pub(crate) fn record(
        &self,
        batch: &mut Batch<'_>,
        parts: &[&GpuArg<'_>],
        outputs: &[&GpuArg<'_>],
        accumulate: bool,
    ) -> Result<(), OpError> {
        if parts.len() != self.outputs || outputs.len() != self.outputs {
            return Err(OpError::shape(
                self.op,
                format!("{} outputs expected, {} given", self.outputs, outputs.len()),
            ));
        }
        let mut args: Vec<(&'static str, &GpuArg<'_>)> = Vec::new();
        for k in 0..self.outputs {
            args.push((PART_ROLES[k], parts[k]));
            args.push((OUT_ROLES[k], outputs[k]));
        }
        let groups = self.cols.div_ceil(SUM_COLS * self.width);
        self.compiled.record(
            batch,
            PARTIALS_SUM,
            &args,
            &[("accumulate", ParamValue::U32(u32::from(accumulate)))],
            [groups, 1, 1],
        )
    }
}

fn partials_sum_entry(outputs: usize, width: u32) -> String {
    let ty = value_type(width);
    let w = width;
    let mut s = String::new();
    let _ = writeln!(s, "var<workgroup> ps_tile: array<{ty}, {LANES}>;");
    let _ = writeln!(
        s,
        "@compute @workgroup_size({LANES})\nfn {PARTIALS_SUM}(@builtin(workgroup_id) wg: vec3<u32>, \
         @builtin(local_invocation_index) lid: u32) {{"
    );
    let _ = writeln!(s, "    let ps_col = lid % {SUM_COLS}u;");
    let _ = writeln!(s, "    let ps_row = lid / {SUM_COLS}u;");
    let _ = writeln!(s, "    let c = (wg.x * {SUM_COLS}u + ps_col) * {w}u;");
    for k in 0..outputs {
        let (p, o) = (PART_ROLES[k], OUT_ROLES[k]);
        if k > 0 {
            s.push_str("    workgroupBarrier();\n");
        }
        let _ = writeln!(
            s,
            "    var sum{k} = {ty}(0.0);\n    \
             for (var q = ps_row; q < {p}_dim0(); q = q + {SUM_ROWS}u) {{\n        \
             sum{k} = sum{k} + {p}_get{w}(q, c);\n    }}\n    \
             ps_tile[lid] = sum{k};\n    workgroupBarrier();\n    \
             for (var half = {}u; half > 0u; half = half >> 1u) {{\n        \
             if (ps_row < half) {{\n            \
             ps_tile[lid] = ps_tile[lid] + ps_tile[lid + half * {SUM_COLS}u];\n        }}\n        \
             workgroupBarrier();\n    }}\n    \
             if (ps_row == 0u) {{\n        var total = ps_tile[lid];\n        \
             if (params.accumulate != 0u) {{\n            total = total + {o}_get{w}(c);\n        }}\n        \
             {o}_put{w}(c, total);\n    }}",
            SUM_ROWS / 2
        );
    }
    s.push_str("}\n");
    s
}
