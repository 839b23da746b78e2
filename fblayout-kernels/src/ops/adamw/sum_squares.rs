//! `Σ g²` over every element of a tensor of any layout (for clipping by the global norm), and
//! the pass over a tensor's chunks it shares with the overflow check
//! ([`NonFiniteOp`](crate::ops::NonFiniteOp)).
//!
//! [`SumSquaresOp`] computes the sum in two passes: each workgroup sums a chunk with
//! `fbl_wg_sum` into a partial, one workgroup adds the partials in a fixed order and writes (or
//! adds, to sum over several tensors) the total. The clipping scale `min(1, max_norm / √total)`
//! is the caller's.

use std::fmt::Write as _;

use fblayout_core::__private::unravel;
use fblayout_core::kernel::{KernelModule, KernelSource, Operand, ParamValue, Scalar};
use fblayout_core::layout::View;
use rayon::prelude::*;

use crate::cpu::{Logical, Real};
use crate::entry_point::LinearEntry;
use crate::ops::compiled::Compiled;
use crate::ops::error::OpError;
use crate::ops::reduce_rows::{FILL_WORKGROUPS, Partials, components_sum, getter};
use crate::runtime::{Batch, Gpu, Scratch};
use crate::tensor::GpuArg;
use crate::wgsl::reduce::{entry_params, subgroup_call_args, workgroup_reduce};

/// `Σ g²` over every element of a tensor of any layout, on the GPU (see the module docs).
#[derive(Debug, Clone)]
pub struct SumSquaresOp {
    chunks: Compiled,
    total: Compiled,
    partials: Partials,
    width: u32,
}

const SUM_SQUARES: &str = "sum of squares";
/// The workgroup size of [`chunk_entry`].
pub(crate) const LANES: u32 = 256;
/// Fewest elements (or four-element runs) a lane of pass 1 adds.
const MIN_PER_LANE: u64 = 4;

impl SumSquaresOp {
    /// The kernels for a gradient read through `grad`, and a total written through `out` (one
    /// element: shape `[1]`).
    pub fn new(gpu: &Gpu, grad: &View, out: &View) -> Result<Self, OpError> {
        let rank = grad.axes().len();
        if out.axes().len() != 1 || out.axes()[0].extent.as_static() != Some(1) {
            return Err(OpError::shape(
                SUM_SQUARES,
                format!("`out` ({}) must have shape [1]", out.name()),
            ));
        }
        let partials = Partials::new(SUM_SQUARES, None)?;
        let subgroups = gpu.features().subgroups;
        let g = match rank.checked_sub(1) {
            Some(last) => Operand::read("g", grad)?.vectorized(last),
            None => Operand::read("g", grad)?,
        };
        let width = if g.vector_axis().is_some() { 4 } else { 1 };
        let part = Operand::write("part", partials.view())?;
        let mut body = workgroup_reduce(LANES, subgroups);
        if let Some(last) = rank.checked_sub(1) {
            body += &getter(&g, last, width);
        }
        let pass = ChunkPass {
            name: "sum_squares_chunks",
            groups: "part_dim0()",
            term: "v * v",
            finish: "part_store(group, total);",
        };
        body += &chunk_entry(&pass, rank, width, subgroups);
        let chunks = Compiled::new(
            SUM_SQUARES,
            gpu,
            KernelSource::new(SUM_SQUARES)
                .operand(g)
                .operand(part)
                .scalar("per_group", Scalar::U32)
                .body(body),
        )?;
        let mut body = workgroup_reduce(LANES, subgroups);
        let _ = write!(
            body,
            "@compute @workgroup_size({LANES})\nfn sum_squares_total(\
             @builtin(local_invocation_index) lid: u32, {}) {{\n    var acc = 0.0;\n    \
             for (var q = lid; q < part_dim0(); q = q + {LANES}u) {{\n        \
             acc = acc + part_load(q);\n    }}\n    \
             var total = fbl_wg_sum(acc, lid{});\n    if (lid == 0u) {{\n        \
             if (params.accumulate != 0u) {{\n            total = total + out_load(0u);\n        }}\n        \
             out_store(0u, total);\n    }}\n}}\n",
            entry_params(subgroups),
            subgroup_call_args(subgroups)
        );
        let total = Compiled::new(
            SUM_SQUARES,
            gpu,
            KernelSource::new(SUM_SQUARES)
                .operand(Operand::read("part", partials.view())?)
                .operand(Operand::write("out", out)?)
                .scalar("accumulate", Scalar::U32)
                .body(body),
        )?;
        Ok(Self {
            chunks,
            total,
            partials,
            width,
        })
    }

    /// The shaders: pass 1, pass 2.
    pub fn shaders(&self) -> [&KernelModule; 2] {
        [self.chunks.module(), self.total.module()]
    }

    /// The scratch [`record`](Self::record) takes for a gradient of extents `dims`: one
    /// partial sum per chunk.
    pub fn scratch(&self, dims: &[usize]) -> Result<Scratch, OpError> {
        let (_, groups) = chunking(SUM_SQUARES, dims, self.width)?;
        self.partials.scratch_of(groups)
    }

    /// Records `out = Σ g²` (or `out += Σ g²`, with `accumulate`).
    pub fn record(
        &self,
        batch: &mut Batch<'_>,
        grad: &GpuArg<'_>,
        out: &GpuArg<'_>,
        accumulate: bool,
    ) -> Result<(), OpError> {
        let (per_group, groups) = chunking(SUM_SQUARES, &grad.dims(), self.width)?;
        let buffer = self.partials.scratch(batch, groups)?;
        let part = self.partials.arg(&buffer, groups)?;
        self.chunks.record_linear(
            batch,
            "sum_squares_chunks",
            &[("g", grad), ("part", &part)],
            &[("per_group", ParamValue::U32(per_group))],
            groups,
        )?;
        self.total.record(
            batch,
            "sum_squares_total",
            &[("part", &part), ("out", out)],
            &[("accumulate", ParamValue::U32(u32::from(accumulate)))],
            [1, 1, 1],
        )
    }
}

/// What a pass over chunks of a tensor computes: per element `v` (`f32`, or `vec4<f32>` four at a
/// time) the term `term` sums, and with its workgroup's total `total` the statement `finish`;
/// `groups` is how many workgroups do work.
pub(crate) struct ChunkPass<'a> {
    /// The entry point's name.
    pub name: &'a str,
    /// The number of workgroups with a chunk.
    pub groups: &'a str,
    /// What is summed per element, over `v`.
    pub term: &'a str,
    /// What the first lane does with the workgroup's `total`.
    pub finish: &'a str,
}

/// Every element's `g_get` value, the pass's term summed over a chunk of `params.per_group`
/// units (elements, or runs of `width` along the last axis) per workgroup.
pub(crate) fn chunk_entry(
    pass: &ChunkPass<'_>,
    rank: usize,
    width: u32,
    subgroups: bool,
) -> String {
    let mut s = format!(
        "@compute @workgroup_size({LANES})\nfn {}(\
         @builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>, \
         @builtin(local_invocation_index) lid: u32, {}) {{\n",
        pass.name,
        entry_params(subgroups)
    );
    let _ = writeln!(s, "    let group = wg.x + wg.y * nwg.x;");
    let _ = writeln!(
        s,
        "    if (group >= {}) {{\n        return;\n    }}",
        pass.groups
    );
    s += &chunk_loop(
        &ChunkLoop {
            role: "g",
            chunk: "group",
            per_group: "params.per_group",
            term: pass.term,
        },
        rank,
        width,
    );
    let _ = writeln!(
        s,
        "    let total = fbl_wg_sum(acc, lid{});\n    if (lid == 0u) {{\n        \
         {}\n    }}\n}}",
        subgroup_call_args(subgroups),
        pass.finish
    );
    s
}

/// One lane's part of a chunk of a tensor: the statements of a function body (declaring `acc`,
/// the lane's sum of `term` over its units of the chunk) that read the tensor through operand
/// `role`'s `<role>_get<width>` ([`getter`]) and `<role>_dim<d>()`, and the lane through `lid`.
pub(crate) struct ChunkLoop<'a> {
    /// The operand read.
    pub role: &'a str,
    /// The chunk's number, a WGSL `u32` expression.
    pub chunk: &'a str,
    /// Units per chunk, a WGSL `u32` expression.
    pub per_group: &'a str,
    /// What is summed per element, over `v`.
    pub term: &'a str,
}

/// The statements of [`ChunkLoop`] for a tensor of rank `rank` read in runs of `width` along
/// its last axis, indented one level.
pub(crate) fn chunk_loop(l: &ChunkLoop<'_>, rank: usize, width: u32) -> String {
    let entry = LinearEntry {
        name: "",
        prefix: "ss",
    };
    let role = l.role;
    // Units: elements, with the last axis in runs of `width`.
    let mut units: Vec<String> = (0..rank).map(|d| format!("{role}_dim{d}()")).collect();
    if let Some(last) = units.last_mut() {
        *last = format!("(({last} + {}u) / {width}u)", width - 1);
    }
    let count = if units.is_empty() {
        "1u".to_owned()
    } else {
        units.join(" * ")
    };
    let mut s = String::new();
    let _ = writeln!(s, "    let count = {count};");
    let _ = writeln!(s, "    let first = {} * {};", l.chunk, l.per_group);
    let _ = writeln!(s, "    let end = min(first + {}, count);", l.per_group);
    let _ = writeln!(s, "    var acc = 0.0;");
    let _ = writeln!(
        s,
        "    for (var unit = first + lid; unit < end; unit = unit + {LANES}u) {{"
    );
    let _ = writeln!(s, "        let {} = unit;", entry.index());
    // Inside the loop: one more level of indentation.
    for line in entry.decode(&units).lines() {
        let _ = writeln!(s, "    {line}");
    }
    let value = if rank == 0 {
        format!("{role}_load()")
    } else {
        let mut coords: Vec<String> = (0..rank).map(|d| entry.coord(d)).collect();
        let last = coords.len() - 1;
        coords[last] = format!("{} * {width}u", coords[last]);
        format!("{role}_get{width}({})", coords.join(", "))
    };
    let _ = writeln!(s, "        let v = {value};");
    let _ = writeln!(s, "        let term = {};", l.term);
    let _ = writeln!(
        s,
        "        acc = acc + {};\n    }}",
        components_sum("term", width)
    );
    s
}

/// How [`chunk_entry`] splits `dims` (runs of `width` along the last axis): units per
/// workgroup and workgroups.
pub(crate) fn chunking(
    op: &'static str,
    dims: &[usize],
    width: u32,
) -> Result<(u32, u32), OpError> {
    let mut units: u64 = 1;
    for (d, &n) in dims.iter().enumerate() {
        let n = if d + 1 == dims.len() {
            (n as u64).div_ceil(u64::from(width))
        } else {
            n as u64
        };
        units *= n;
    }
    let lanes = u64::from(LANES);
    let per_group =
        (units.div_ceil(FILL_WORKGROUPS).max(MIN_PER_LANE * lanes)).next_multiple_of(lanes);
    let groups = units.div_ceil(per_group).max(1);
    Ok((
        u32::try_from(per_group).map_err(|_| OpError::shape(op, "too many elements"))?,
        u32::try_from(groups).map_err(|_| OpError::shape(op, "too many elements"))?,
    ))
}

/// `Σ g²` over every element of `grad`, on the CPU in `f64`.
pub fn sum_squares_cpu<T: Real>(grad: &dyn Logical<T>) -> f64 {
    let shape: Vec<u64> = grad.dims().iter().map(|&n| n as u64).collect();
    let n: u64 = shape.iter().product();
    (0..n)
        .into_par_iter()
        .map(|linear| {
            let mut coords = vec![0u64; shape.len()];
            unravel(linear, &shape, &mut coords);
            let index: Vec<usize> = coords.iter().map(|&c| c as usize).collect();
            let v = grad.get(&index).to_f64();
            v * v
        })
        .sum()
}
