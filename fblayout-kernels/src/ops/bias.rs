//! Bias: `y = x + b` over `[rows, cols]` views with `b` a vector of the columns, and its
//! gradient `db = Σ_rows dy`.
//!
//! The forward is an elementwise kernel in which `b` is read through a *broadcast view* of
//! itself, `[rows, cols]`, whose every row reads the same `cols` elements: no copy, and the
//! generated body is the same `x + b` as for any other operand. A broadcast axis has a static
//! extent, so the forward kernel is built for each number of rows it meets (and kept). The
//! backward is a column reduction (chunks of rows, then their partial sums): `dy` is read through
//! `y`'s view, `db` written through `b`'s, or added to with `accumulate` (gradient
//! accumulation over micro-batches). Where one chunk holds every row (few tokens), the chunk's
//! sums are `db` itself and the backward is one dispatch ([`BiasLaunch::single_pass`]).

use std::sync::{Arc, Mutex, PoisonError};

use fblayout_core::kernel::KernelModule;
use fblayout_core::layout::View;

use super::elementwise::{Elementwise, Spec, map_cpu};
use super::error::OpError;
use super::reduce_rows::{
    ColumnSum, Partials, PartialsSum, check_2d, check_view, column_sums_cpu, expect_dims,
    matrix_dims, row_cpu, static_extent,
};
use crate::cpu::{Logical, LogicalMut, Real};
use crate::runtime::{Batch, Gpu, Scratch};
use crate::tensor::GpuArg;

const FORWARD: &str = "bias forward";
const BACKWARD: &str = "bias backward";
const SUM: &str = "bias gradient";

/// The forward built for one number of rows: `b`'s broadcast view and the kernel.
#[derive(Debug)]
struct Forward {
    rows: u32,
    broadcast: View,
    kernel: Elementwise,
}

/// The launch shapes of the bias gradient.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct BiasLaunch {
    /// Rows per workgroup of the column sum (rounded up to whole sweeps of its lanes); unset,
    /// chosen when a call is recorded so that about a thousand workgroups run (at least 32
    /// rows each). Must not be 0.
    pub chunk_rows: Option<u32>,
    /// Where one chunk holds every row, write `db` from it in one dispatch instead of one
    /// partial row and a second dispatch adding it.
    pub single_pass: bool,
}

impl Default for BiasLaunch {
    fn default() -> Self {
        Self {
            chunk_rows: None,
            single_pass: true,
        }
    }
}

impl BiasLaunch {
    /// The gradient as it was before launch shapes: always two dispatches.
    pub const BASELINE: BiasLaunch = BiasLaunch {
        chunk_rows: None,
        single_pass: false,
    };
}

/// The bias kernels, built for the views of `x`, `b` and `y`.
#[derive(Debug)]
pub struct BiasOp {
    x: View,
    b: View,
    y: View,
    forwards: Mutex<Vec<Arc<Forward>>>,
    column_sum: ColumnSum,
    sum: PartialsSum,
    launch: BiasLaunch,
}

impl BiasOp {
    /// The kernels for `x` and `y` (`[rows, cols]`, `cols` static) and `b` (`[cols]`); the
    /// backward reads `dy` through `y`'s view and writes `db` through `b`'s.
    pub fn new(gpu: &Gpu, x: &View, b: &View, y: &View) -> Result<Self, OpError> {
        check_2d(FORWARD, "x", x)?;
        check_2d(FORWARD, "y", y)?;
        let cols = static_extent(FORWARD, "y", y, 1)?;
        if b.axes().len() != 1 || b.axes()[0].extent.as_static() != Some(cols.into()) {
            return Err(OpError::shape(
                FORWARD,
                format!("`b` ({}) must be a vector of the {cols} columns", b.name()),
            ));
        }
        let column_sum = ColumnSum::new(gpu, BACKWARD, "dy", y, Some(("db", b)))?;
        let sum = PartialsSum::new(gpu, SUM, column_sum.partials(), &[("db", b)])?;
        let op = Self {
            x: x.clone(),
            b: b.clone(),
            y: y.clone(),
            forwards: Mutex::new(Vec::new()),
            column_sum,
            sum,
            launch: BiasLaunch::default(),
        };
        // Static rows: the one forward kernel there will be, built now.
        if let Some(rows) = y.axes()[0].extent.as_static() {
            op.forward_for(gpu, rows as u32)?;
        }
        Ok(op)
    }

    /// Makes each workgroup of the backward reduce `rows` rows (rounded up to whole sweeps)
    /// instead of the number chosen to fill the GPU: for tuning and tests.
    pub fn with_chunk_rows(mut self, rows: u32) -> Self {
        self.launch.chunk_rows = Some(rows);
        self
    }

    /// Uses the launch shapes `launch` for the gradient.
    pub fn with_launch(mut self, launch: BiasLaunch) -> Self {
        self.launch = launch;
        self
    }

    /// The most scratch [`backward`](Self::backward) takes over `rows` rows of `cols` columns
    /// under `launch` ([`BiasLaunch::default`] for an op made by [`new`](Self::new)): the
    /// partial rows of the column sum, as many as its chunks can be for any layout of `dy`.
    pub fn backward_scratch(launch: &BiasLaunch, rows: u32, cols: u32) -> Result<Scratch, OpError> {
        let partials = Partials::new(BACKWARD, Some(cols))?;
        partials.scratch_of(ColumnSum::most_chunks(rows, launch.chunk_rows))
    }

    /// The forward for `rows` rows, built on first use.
    fn forward_for(&self, gpu: &Gpu, rows: u32) -> Result<Arc<Forward>, OpError> {
        let mut forwards = self.forwards.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(f) = forwards.iter().find(|f| f.rows == rows) {
            return Ok(f.clone());
        }
        let axis = &self.y.axes()[0].name;
        let broadcast = self
            .b
            .broadcast(axis, rows, 0)
            .or_else(|_| self.b.broadcast("rows", rows, 0))?;
        let kernel = Elementwise::new(
            gpu,
            Spec {
                op: FORWARD,
                inputs: vec![("x", &self.x), ("b", &broadcast)],
                outputs: vec![("y", &self.y, "x + b".to_owned())],
                scalars: vec![],
                helpers: "",
                unwalked: Vec::new(),
            },
        )?;
        let f = Arc::new(Forward {
            rows,
            broadcast,
            kernel,
        });
        forwards.push(f.clone());
        Ok(f)
    }

    /// Whether the backward's lanes read four elements at once.
    pub fn is_vectorized(&self) -> bool {
        self.column_sum.walk().width == 4
    }

    /// The shaders: the forward for `rows` rows (built if needed), the backward's two passes,
    /// and its single pass.
    pub fn shaders(&self, gpu: &Gpu, rows: u32) -> Result<Vec<String>, OpError> {
        let f = self.forward_for(gpu, rows)?;
        let modules: [Option<&KernelModule>; 3] = [
            Some(self.column_sum.module()),
            Some(self.sum.module()),
            self.column_sum.single_module(),
        ];
        let mut out = vec![f.kernel.source().to_owned()];
        out.extend(modules.iter().flatten().map(|m| m.source().to_owned()));
        Ok(out)
    }

    /// The dispatches the gradient of `rows` rows records: 1 or 2.
    pub fn backward_dispatches(&self, rows: u32) -> u32 {
        if self.single_pass(rows) { 1 } else { 2 }
    }

    fn single_pass(&self, rows: u32) -> bool {
        self.launch.single_pass && self.column_sum.chunks(rows, self.launch.chunk_rows).0 <= 1
    }

    /// Records `y = x + b`.
    pub fn forward(
        &self,
        batch: &mut Batch<'_>,
        x: &GpuArg<'_>,
        b: &GpuArg<'_>,
        y: &GpuArg<'_>,
    ) -> Result<(), OpError> {
        let (rows, _) = matrix_dims(FORWARD, "y", &y.dims())?;
        // `b` is re-read through its broadcast view: check the view it comes in first.
        check_view(FORWARD, "b", b, &self.b)?;
        let f = self.forward_for(batch.gpu(), rows as u32)?;
        let extents: Vec<(String, u32)> = self
            .b
            .layout()
            .dynamic_axes()
            .zip(b.bound_view().extent_args())
            .map(|(a, &n)| (a.name.clone(), n as u32))
            .collect();
        let pairs: Vec<(&str, u32)> = extents.iter().map(|(a, n)| (a.as_str(), *n)).collect();
        let rows_of_b = GpuArg::new(b.buffer(), &f.broadcast, &pairs)?;
        f.kernel.record(batch, FORWARD, &[x, &rows_of_b, y], &[])
    }

    /// Records `db = Σ_rows dy` (or `db += Σ_rows dy`, with `accumulate`).
    pub fn backward(
        &self,
        batch: &mut Batch<'_>,
        dy: &GpuArg<'_>,
        db: &GpuArg<'_>,
        accumulate: bool,
    ) -> Result<(), OpError> {
        let cols = static_extent(BACKWARD, "y", &self.y, 1)? as usize;
        expect_dims(BACKWARD, "db", &db.dims(), &[cols])?;
        check_view(BACKWARD, "db", db, &self.b)?;
        if self.launch.chunk_rows == Some(0) {
            return Err(OpError::shape(
                BACKWARD,
                "0 rows per chunk: at least one is needed",
            ));
        }
        let (rows, _) = matrix_dims(BACKWARD, "dy", &dy.dims())?;
        if self.single_pass(rows as u32) {
            return self.column_sum.record_single(batch, dy, db, accumulate);
        }
        let (buffer, chunks) = self.column_sum.record(batch, dy, self.launch.chunk_rows)?;
        let part = self.column_sum.partials().arg(&buffer, chunks)?;
        self.sum.record(batch, &[&part], &[db], accumulate)
    }
}

/// A `[cols]` vector read as `[rows, cols]`: the CPU twin of a broadcast view.
struct RowsOf<'a, T> {
    b: &'a dyn Logical<T>,
    dims: [usize; 2],
}

impl<T> Logical<T> for RowsOf<'_, T> {
    fn dims(&self) -> &[usize] {
        &self.dims
    }
    fn get(&self, index: &[usize]) -> T {
        self.b.get(&index[1..])
    }
}

/// `y = x + b` on the CPU.
pub fn bias_forward_cpu<T: Real>(
    x: &dyn Logical<T>,
    b: &dyn Logical<T>,
    y: &mut dyn LogicalMut<T>,
) -> Result<(), OpError> {
    let (rows, cols) = matrix_dims(FORWARD, "y", y.dims())?;
    expect_dims(FORWARD, "b", b.dims(), &[cols])?;
    let rows_of_b = RowsOf {
        b,
        dims: [rows, cols],
    };
    map_cpu(FORWARD, &[x, &rows_of_b], &mut [y], |a, out| {
        out[0] = a[0] + a[1];
    })
}

/// `db = Σ_rows dy` (or `db += Σ_rows dy`, with `accumulate`) on the CPU.
pub fn bias_backward_cpu<T: Real>(
    dy: &dyn Logical<T>,
    db: &mut dyn LogicalMut<T>,
    accumulate: bool,
) -> Result<(), OpError> {
    let (rows, cols) = matrix_dims(BACKWARD, "dy", dy.dims())?;
    expect_dims(BACKWARD, "db", db.dims(), &[cols])?;
    let rows: Vec<Vec<f64>> = (0..rows).map(|r| row_cpu(dy, r, cols)).collect();
    column_sums_cpu(db, rows.iter(), accumulate);
    Ok(())
}
