//! Cross-entropy of logits against integer labels, and its gradient.
//!
//! For logits `x` of shape `[rows, vocab]` and labels `t` (`u32`, `[rows]`), a row whose label
//! is the `ignore_index` does not count; every other row `r` has the loss
//! `ℓ_r = lse_r − x_{r, t_r}` with `lse_r = log Σ_j exp(x_{r,j})`, and the loss of the batch is
//! the mean over the `n_valid` rows that count (0 when none does). Its gradient, scaled by the
//! gradient `dloss` of what the mean feeds (1 for the loss itself), is
//!
//! `dx_r = dloss · (softmax(x_r) − onehot(t_r)) / n_valid`, and 0 for an ignored row.
//!
//! A label that is neither below `vocab` nor the `ignore_index` is an error:
//! [`check_labels`] finds it on the host (the CPU kernels call it), and on the GPU, where labels
//! may come from anywhere, such a row gets a NaN loss and a NaN gradient, so the mean is NaN:
//! never a read past the row, never a silently wrong number.
//!
//! # On the GPU
//! The forward is two dispatches. The first gives each row a workgroup that reads it once,
//! combining the maximum and the sum of exponentials on the fly (as online softmax does, see
//! [`softmax`](super::softmax)), and writes the row's loss and its `lse`. The second, one
//! workgroup, sums the losses of the rows that count and counts them (`n_valid`, **computed on
//! the GPU from the labels**, so labels produced on the device need no trip to the host), and
//! writes the mean and the count. The backward reads the count and each row's `lse`, so it is
//! one pass: it reads the logits once and writes the gradient once, elementwise.
//!
//! The per-row `lse`, the mean and the count live in a [`CrossEntropyState`] that the forward
//! writes and the backward reads; [`CrossEntropyState::mean`] and
//! [`CrossEntropyState::count`] read them back.

use fblayout_core::kernel::{KernelModule, KernelSource, Operand, ParamValue, Scalar};
use fblayout_core::layout::{ElemType, LayoutSpec, View};
use rayon::prelude::*;

use super::compiled::{Compiled, workgroups_for};
use super::error::OpError;
use super::softmax::{
    NAN, Quads, Role, RowCode, RowKernels, RowShape, check_float, map_rows, rows_of, wide_of,
};
use crate::cpu::{Logical, LogicalMut, Real};
use crate::entry_point::LinearEntry;
use crate::runtime::{Batch, Gpu, GpuBuffer, granular};
use crate::tensor::GpuArg;
use crate::wgsl::reduce::{entry_params, subgroup_call_args, workgroup_reduce};

const FORWARD: &str = "cross-entropy forward";
const MEAN: &str = "cross-entropy mean";
const BACKWARD: &str = "cross-entropy backward";
/// The backward written over its logits.
const BACKWARD_IN_PLACE: &str = "cross-entropy backward in place";
const FORWARD_ENTRY: &str = "cross_entropy_rows";
const MEAN_ENTRY: &str = "cross_entropy_mean";
const BACKWARD_ENTRY: &str = "cross_entropy_backward";
/// Invocations of the mean's one workgroup.
const MEAN_SIZE: u32 = 256;

/// The views of what the forward keeps for the backward.
#[derive(Debug, Clone)]
struct StateViews {
    /// `lse` of each row, `f32 [rows]`.
    lse: View,
    /// The mean loss, `f32 [1]`.
    mean: View,
    /// `n_valid`, `u32 [1]`.
    count: View,
}

impl StateViews {
    fn new() -> Result<Self, OpError> {
        let build = |spec: LayoutSpec| -> Result<View, OpError> {
            Ok(spec
                .build()
                .map_err(|e| OpError::shape(FORWARD, e.to_string()))?
                .view())
        };
        Ok(Self {
            lse: build(LayoutSpec::new("lse").dyn_axis("rows"))?,
            mean: build(LayoutSpec::new("mean").axis("one", 1))?,
            count: build(LayoutSpec::new("count").axis("one", 1).elem(ElemType::U32))?,
        })
    }
}

/// What a cross-entropy forward leaves for its backward and its caller: each row's `lse`, the
/// mean loss and the number of rows that count, on the GPU.
#[derive(Debug)]
pub struct CrossEntropyState {
    rows: u32,
    views: StateViews,
    lse: GpuBuffer,
    mean: GpuBuffer,
    count: GpuBuffer,
}

impl CrossEntropyState {
    /// The number of rows it is for.
    pub fn rows(&self) -> u32 {
        self.rows
    }

    /// The mean loss of the last forward (waits for the GPU).
    pub fn mean(&self) -> Result<f32, OpError> {
        Ok(self.mean.read_back::<f32>()?[0])
    }

    /// The number of rows that counted in the last forward (waits for the GPU).
    pub fn count(&self) -> Result<u32, OpError> {
        Ok(self.count.read_back::<u32>()?[0])
    }

    /// The buffer holding the mean loss (one `f32`), for kernels that read it.
    pub fn mean_buffer(&self) -> &GpuBuffer {
        &self.mean
    }

    fn lse_arg(&self) -> Result<GpuArg<'_>, OpError> {
        Ok(GpuArg::new(
            &self.lse,
            &self.views.lse,
            &[("rows", self.rows)],
        )?)
    }

    fn mean_arg(&self) -> Result<GpuArg<'_>, OpError> {
        Ok(GpuArg::new(&self.mean, &self.views.mean, &[])?)
    }

    fn count_arg(&self) -> Result<GpuArg<'_>, OpError> {
        Ok(GpuArg::new(&self.count, &self.views.count, &[])?)
    }
}

/// The mean cross-entropy and the number of rows it is over.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CrossEntropyMean {
    /// The mean loss over the rows that count (0 when none does).
    pub mean: f64,
    /// The number of rows that count.
    pub count: u32,
}

/// The cross-entropy kernels, built for the views of the logits, the labels and the per-row
/// loss.
#[derive(Debug, Clone)]
pub struct CrossEntropyOp {
    ignore_index: u32,
    logits: View,
    labels: View,
    loss: View,
    state: StateViews,
    per_row: RowKernels,
    mean: Compiled,
    backward: Compiled,
    /// The backward that reads the logits through `dlogits`' binding, for a gradient written
    /// over its logits.
    backward_in_place: Compiled,
    backward_walk: BackwardWalk,
}

/// How the backward's invocations cover a row: one quad each, the quads of neighbouring
/// invocations next to each other when the logits have wide accesses, else `STEP` apart so
/// that each scalar access of a warp is one contiguous run.
#[derive(Debug, Clone, Copy)]
struct BackwardWalk {
    wide: bool,
}

impl BackwardWalk {
    const STEP: u32 = 64;

    fn step(self) -> u32 {
        if self.wide { 1 } else { Self::STEP }
    }

    /// Invocations per row of `n` elements (a WGSL expression).
    fn per_row(self, n: &str) -> String {
        if self.wide {
            format!("(({n} + 3u) / 4u)")
        } else {
            let s = Self::STEP;
            format!("((({n} + {}u) / {}u) * {s}u)", 4 * s - 1, 4 * s)
        }
    }

    /// The same on the host.
    fn units(self, n: u64) -> u64 {
        if self.wide {
            n.div_ceil(4)
        } else {
            let s = u64::from(Self::STEP);
            n.div_ceil(4 * s) * s
        }
    }

    /// The first key of invocation `chunk`'s quad (a WGSL expression).
    fn first(self, chunk: &str) -> String {
        if self.wide {
            format!("{chunk} * 4u")
        } else {
            let s = Self::STEP;
            format!("({chunk} / {s}u) * {}u + {chunk} % {s}u", 4 * s)
        }
    }
}

impl CrossEntropyOp {
    /// The kernels for `logits` (`[rows, vocab]`, floats), `labels` (`[rows]`, `u32`) and the
    /// per-row `loss` (`[rows]`, floats); rows labelled `ignore_index` don't count. The
    /// gradient of the logits is written through `logits`' view.
    pub fn new(
        gpu: &Gpu,
        logits: &View,
        labels: &View,
        loss: &View,
        ignore_index: u32,
    ) -> Result<Self, OpError> {
        let rank = |role: &str, view: &View, want: usize| {
            if view.axes().len() == want {
                Ok(())
            } else {
                Err(OpError::shape(
                    FORWARD,
                    format!("`{role}` has rank {}, not {want}", view.axes().len()),
                ))
            }
        };
        rank("logits", logits, 2)?;
        rank("labels", labels, 1)?;
        rank("loss", loss, 1)?;
        check_float(FORWARD, "logits", logits)?;
        check_float(FORWARD, "loss", loss)?;
        check_u32_labels(FORWARD, labels)?;
        let rows = |v: &View| v.axes()[0].extent.as_static();
        for (role, view) in [("labels", labels), ("loss", loss)] {
            if let (Some(a), Some(b)) = (rows(view), rows(logits)) {
                if a != b {
                    return Err(OpError::shape(
                        FORWARD,
                        format!("`{role}` has {a} rows, `logits` {b}"),
                    ));
                }
            }
        }
        let state = StateViews::new()?;
        let (backward_walk, backward) = build_backward(gpu, logits, labels, &state, false)?;
        let (_, backward_in_place) = build_backward(gpu, logits, labels, &state, true)?;
        let row_len = logits.axes()[1].extent.as_static();
        let op = Self {
            ignore_index,
            logits: logits.clone(),
            labels: labels.clone(),
            loss: loss.clone(),
            mean: build_mean(gpu, labels, loss, &state)?,
            backward,
            backward_in_place,
            backward_walk,
            state,
            per_row: RowKernels::new(row_len),
        };
        let shape = RowShape::for_len(row_len.unwrap_or(RowShape::LONGEST_CACHED));
        op.per_row.get(shape, |s| op.build_rows(gpu, s))?;
        Ok(op)
    }

    /// The label of the rows that don't count.
    pub fn ignore_index(&self) -> u32 {
        self.ignore_index
    }

    /// Whether the backward moves four elements per access.
    pub fn is_vectorized(&self) -> bool {
        self.backward_walk.wide
    }

    /// A state for batches of `rows` rows (zeros until a forward writes it).
    pub fn state(&self, gpu: &Gpu, rows: u32) -> Result<CrossEntropyState, OpError> {
        new_state(gpu, &self.state, rows)
    }

    /// The 4-byte values of a state's buffers for `rows` rows: each row's `lse`, the mean
    /// loss, the rows that count.
    fn state_lengths(rows: u32) -> [usize; 3] {
        [rows as usize, 1, 1]
    }

    /// The bytes [`state`](Self::state) takes from the device's pool for `rows` rows (held as
    /// long as the state).
    pub fn state_bytes(rows: u32) -> u64 {
        Self::state_lengths(rows)
            .iter()
            .map(|&n| granular(n as u64 * 4))
            .sum()
    }

    /// The shaders built so far: the rows', the mean's and the backward's.
    pub fn modules(&self) -> Vec<KernelModule> {
        let mut all: Vec<KernelModule> = self
            .per_row
            .built()
            .iter()
            .map(|k| k.module().clone())
            .collect();
        all.push(self.mean.module().clone());
        all.push(self.backward.module().clone());
        all.push(self.backward_in_place.module().clone());
        all
    }

    fn build_rows(&self, gpu: &Gpu, shape: RowShape) -> Result<Compiled, OpError> {
        // One read per row whatever its length: nothing is written per element.
        let shape = shape.streamed();
        let (wide, mut operands) = wide_of(&[("logits", Role::Read)], &[&self.logits])?;
        operands.push(Operand::read("labels", &self.labels)?);
        operands.push(Operand::write("loss", &self.loss)?);
        operands.push(Operand::write("lse", &self.state.lse)?);
        let code = RowCode::new(&self.logits, "logits", wide, shape, gpu);
        let keep = "row_keys(row_j) < vec4<u32>(row_n)";
        let per_row = format!(
            "        var row_m = row_lowest;
        var row_s = 0.0;
{chunks}            let row_x = select(vec4<f32>(row_lowest), {x}, {keep});
            let row_mk = max(row_m, row_max4(row_x));
            let row_e = select(vec4<f32>(0.0), exp(row_x - row_mk), {keep});
            row_s = row_s * exp(row_m - row_mk) + row_sum4(row_e);
            row_m = row_mk;
        }}
        let row_max = {max};
        let row_total = {sum};
        if (row_lid == 0u) {{
            let row_lse = row_max + log(row_total);
            lse_store(row_c0, row_lse);
            let row_label = labels_load(row_c0);
            var row_loss = 0.0;
            if (row_label != params.ignore_index) {{
                if (row_label < row_n) {{
                    row_loss = row_lse - logits_load(row_c0, row_label);
                }} else {{
                    row_loss = fbl_nan();
                }}
            }}
            loss_store(row_c0, row_loss);
        }}
",
            chunks = code.chunks(),
            x = code.get("logits", "row_j"),
            max = code.reduce("fbl_wg_max", "row_m"),
            sum = code.reduce("fbl_wg_sum", "row_s * exp(row_m - row_max)"),
        );
        let body = format!(
            "{NAN}{}{}{}}}\n",
            code.helpers(&["logits"], &[]),
            code.open(FORWARD_ENTRY),
            code.rows(&per_row)
        );
        let mut source = KernelSource::new(FORWARD);
        for o in operands {
            source = source.operand(o);
        }
        let source = source
            .scalar("ignore_index", Scalar::U32)
            .body(workgroup_reduce(shape.size, gpu.features().subgroups))
            .body(body);
        Compiled::new(FORWARD, gpu, source)
    }

    fn check_rows(
        &self,
        op: &'static str,
        state: &CrossEntropyState,
        args: &[(&'static str, &GpuArg<'_>)],
    ) -> Result<(u32, u64), OpError> {
        let (logits, rest) = args.split_first().expect("the logits come first");
        let (rows, n) = rows_of(op, &logits.1.dims())?;
        for (role, arg) in rest {
            let d = arg.dims();
            if d.first().copied() != Some(rows as usize) {
                return Err(OpError::shape(
                    op,
                    format!("`{role}` has shape {d:?}; the logits have {rows} rows"),
                ));
            }
        }
        if state.rows != rows {
            return Err(OpError::shape(
                op,
                format!(
                    "the state is for {} rows; the logits have {rows}",
                    state.rows
                ),
            ));
        }
        Ok((rows, n))
    }

    /// Records the forward: each row's loss into `loss`, and `lse`, the mean and the count
    /// into `state`.
    pub fn forward(
        &self,
        batch: &mut Batch<'_>,
        logits: &GpuArg<'_>,
        labels: &GpuArg<'_>,
        loss: &GpuArg<'_>,
        state: &CrossEntropyState,
    ) -> Result<(), OpError> {
        self.forward_rows(batch, logits, labels, loss, state)?;
        record_mean(&self.mean, self.ignore_index, batch, labels, loss, state)
    }

    /// Records the forward's first pass alone: each row's loss into `loss` and its `lse` into
    /// `state`, but not the mean or the count (see [`CrossEntropyTotal`], which takes them
    /// over the rows of several such passes).
    pub fn forward_rows(
        &self,
        batch: &mut Batch<'_>,
        logits: &GpuArg<'_>,
        labels: &GpuArg<'_>,
        loss: &GpuArg<'_>,
        state: &CrossEntropyState,
    ) -> Result<(), OpError> {
        let (rows, n) = self.check_rows(
            FORWARD,
            state,
            &[("logits", logits), ("labels", labels), ("loss", loss)],
        )?;
        let lse = state.lse_arg()?;
        let gpu = batch.gpu();
        let shape = RowShape::for_len(n);
        let kernel = self.per_row.get(shape, |s| self.build_rows(gpu, s))?;
        let ignore = [("ignore_index", ParamValue::U32(self.ignore_index))];
        kernel.record_linear(
            batch,
            FORWARD_ENTRY,
            &[
                ("logits", logits),
                ("labels", labels),
                ("loss", loss),
                ("lse", &lse),
            ],
            &ignore,
            shape.streamed().workgroups(rows),
        )
    }

    /// Records the gradient of `dloss · mean` with respect to the logits into `dlogits`
    /// (through the logits' view), from the `state` of the forward of these logits and labels.
    /// `dlogits` may be in the memory of `logits`: each element is then read and overwritten by
    /// one invocation, and the logits are gone.
    pub fn backward(
        &self,
        batch: &mut Batch<'_>,
        logits: &GpuArg<'_>,
        labels: &GpuArg<'_>,
        state: &CrossEntropyState,
        dloss: f32,
        dlogits: &GpuArg<'_>,
    ) -> Result<(), OpError> {
        self.backward_counted(batch, logits, labels, state, state, dloss, dlogits)
    }

    /// [`backward`](Self::backward) of rows whose `lse` is in `state` (written by
    /// [`forward_rows`](Self::forward_rows)) but whose mean is over the rows `counted` counted
    /// (written by a [`CrossEntropyTotal`] over these rows and others).
    #[allow(clippy::too_many_arguments)]
    pub fn backward_counted(
        &self,
        batch: &mut Batch<'_>,
        logits: &GpuArg<'_>,
        labels: &GpuArg<'_>,
        state: &CrossEntropyState,
        counted: &CrossEntropyState,
        dloss: f32,
        dlogits: &GpuArg<'_>,
    ) -> Result<(), OpError> {
        let (rows, n) = self.check_rows(
            BACKWARD,
            state,
            &[("logits", logits), ("labels", labels), ("dlogits", dlogits)],
        )?;
        if dlogits.dims() != logits.dims() {
            return Err(OpError::shape(
                BACKWARD,
                format!(
                    "`dlogits` has shape {:?}, `logits` {:?}",
                    dlogits.dims(),
                    logits.dims()
                ),
            ));
        }
        let (lse, count) = (state.lse_arg()?, counted.count_arg()?);
        let units = u64::from(rows) * self.backward_walk.units(n);
        let mut args = vec![
            ("labels", labels),
            ("lse", &lse),
            ("count", &count),
            ("dlogits", dlogits),
        ];
        // Over its logits the gradient reads them through its own binding: one buffer is not
        // bound twice in a dispatch.
        // (Both are addressed through the logits' view the kernel was built for, at the same
        // extents: in one memory, every element is read where it is written.)
        let kernel = if logits.buffer().same_memory(dlogits.buffer()) {
            &self.backward_in_place
        } else {
            args.insert(0, ("logits", logits));
            &self.backward
        };
        kernel.record_linear(
            batch,
            BACKWARD_ENTRY,
            &args,
            &[
                ("ignore_index", ParamValue::U32(self.ignore_index)),
                ("dloss", ParamValue::F32(dloss)),
            ],
            workgroups_for(BACKWARD, units)?,
        )
    }
}

/// Checks that `labels` stores `u32`s.
fn check_u32_labels(op: &'static str, labels: &View) -> Result<(), OpError> {
    if labels.layout().elem() == ElemType::U32 {
        return Ok(());
    }
    Err(OpError::Unsupported {
        op,
        role: "labels",
        view: labels.name().to_owned(),
        why: format!("it stores {}; labels are u32", labels.layout().elem()),
    })
}

/// A state of `views` for batches of `rows` rows (zeros until a forward writes it).
fn new_state(gpu: &Gpu, views: &StateViews, rows: u32) -> Result<CrossEntropyState, OpError> {
    if rows == 0 || rows >= 1 << 24 {
        return Err(OpError::shape(
            FORWARD,
            format!("{rows} rows: the count is summed in f32, so 1 to 2^24 rows"),
        ));
    }
    let [lse, mean, count] = CrossEntropyOp::state_lengths(rows);
    Ok(CrossEntropyState {
        rows,
        views: views.clone(),
        lse: GpuBuffer::zeroed::<f32>(gpu, lse)?,
        mean: GpuBuffer::zeroed::<f32>(gpu, mean)?,
        count: GpuBuffer::zeroed::<u32>(gpu, count)?,
    })
}

/// Records the mean pass: the mean of `loss` over the rows whose label counts, and their
/// count, into `state`.
fn record_mean(
    mean: &Compiled,
    ignore_index: u32,
    batch: &mut Batch<'_>,
    labels: &GpuArg<'_>,
    loss: &GpuArg<'_>,
    state: &CrossEntropyState,
) -> Result<(), OpError> {
    let rows = labels.dims().first().copied().unwrap_or(0);
    if loss.dims().first().copied() != Some(rows) || state.rows as usize != rows {
        return Err(OpError::shape(
            MEAN,
            format!(
                "`labels` has shape {:?}, `loss` {:?} and the state is for {} rows",
                labels.dims(),
                loss.dims(),
                state.rows
            ),
        ));
    }
    mean.record_linear(
        batch,
        MEAN_ENTRY,
        &[
            ("labels", labels),
            ("loss", loss),
            ("mean", &state.mean_arg()?),
            ("count", &state.count_arg()?),
        ],
        &[("ignore_index", ParamValue::U32(ignore_index))],
        1,
    )
}

/// The mean of per-row losses that several [`CrossEntropyOp::forward_rows`] wrote, each over
/// some of the rows (a language-model head's chunks of tokens): the mean over the rows whose
/// label counts, and their count, which [`CrossEntropyOp::backward_counted`] divides by.
#[derive(Debug, Clone)]
pub struct CrossEntropyTotal {
    ignore_index: u32,
    state: StateViews,
    mean: Compiled,
}

impl CrossEntropyTotal {
    /// The mean pass over `labels` (`[rows]`, `u32`) and the per-row `loss` (`[rows]`,
    /// floats); rows labelled `ignore_index` don't count.
    pub fn new(gpu: &Gpu, labels: &View, loss: &View, ignore_index: u32) -> Result<Self, OpError> {
        for (role, view) in [("labels", labels), ("loss", loss)] {
            if view.axes().len() != 1 {
                return Err(OpError::shape(
                    MEAN,
                    format!("`{role}` has rank {}, not 1", view.axes().len()),
                ));
            }
        }
        check_float(MEAN, "loss", loss)?;
        check_u32_labels(MEAN, labels)?;
        let state = StateViews::new()?;
        Ok(Self {
            ignore_index,
            mean: build_mean(gpu, labels, loss, &state)?,
            state,
        })
    }

    /// A state for batches of `rows` rows: its mean and count are what it writes (its `lse`
    /// is unused).
    pub fn state(&self, gpu: &Gpu, rows: u32) -> Result<CrossEntropyState, OpError> {
        new_state(gpu, &self.state, rows)
    }

    /// Records the mean of `loss` over the rows whose label counts, and their count, into
    /// `state`.
    pub fn record(
        &self,
        batch: &mut Batch<'_>,
        labels: &GpuArg<'_>,
        loss: &GpuArg<'_>,
        state: &CrossEntropyState,
    ) -> Result<(), OpError> {
        record_mean(&self.mean, self.ignore_index, batch, labels, loss, state)
    }
}

fn build_mean(
    gpu: &Gpu,
    labels: &View,
    loss: &View,
    state: &StateViews,
) -> Result<Compiled, OpError> {
    let subgroups = gpu.features().subgroups;
    let args = subgroup_call_args(subgroups);
    let body = format!(
        "@compute @workgroup_size({MEAN_SIZE})
fn {MEAN_ENTRY}(
    @builtin(local_invocation_index) ce_lid: u32,
    {sub}
) {{
    var ce_sum = 0.0;
    var ce_n = 0.0;
    for (var ce_r = ce_lid; ce_r < labels_dim0(); ce_r = ce_r + {MEAN_SIZE}u) {{
        if (labels_load(ce_r) != params.ignore_index) {{
            ce_sum = ce_sum + loss_load(ce_r);
            ce_n = ce_n + 1.0;
        }}
    }}
    let ce_total = fbl_wg_sum(ce_sum, ce_lid{args});
    let ce_count = fbl_wg_sum(ce_n, ce_lid{args});
    if (ce_lid == 0u) {{
        mean_store(0u, select(0.0, ce_total / ce_count, ce_count > 0.0));
        count_store(0u, u32(ce_count));
    }}
}}
",
        sub = entry_params(subgroups),
    );
    let source = KernelSource::new(MEAN)
        .operand(Operand::read("labels", labels)?)
        .operand(Operand::read("loss", loss)?)
        .operand(Operand::write("mean", &state.mean)?)
        .operand(Operand::write("count", &state.count)?)
        .scalar("ignore_index", Scalar::U32)
        .body(workgroup_reduce(MEAN_SIZE, subgroups))
        .body(body);
    Compiled::new(MEAN, gpu, source)
}

/// The backward's kernel; `in_place`, one that reads the logits through `dlogits`, which it
/// overwrites (each element read and written by one invocation).
fn build_backward(
    gpu: &Gpu,
    logits: &View,
    labels: &View,
    state: &StateViews,
    in_place: bool,
) -> Result<(BackwardWalk, Compiled), OpError> {
    let (wide, mut operands) = if in_place {
        wide_of(&[("dlogits", Role::Write)], &[logits])?
    } else {
        wide_of(
            &[("logits", Role::Read), ("dlogits", Role::Write)],
            &[logits, logits],
        )?
    };
    let src = if in_place { "dlogits" } else { "logits" };
    let dlogits = operands.pop().expect("the written operand is last");
    operands.push(Operand::read("labels", labels)?);
    operands.push(Operand::read("lse", &state.lse)?);
    operands.push(Operand::read("count", &state.count)?);
    operands.push(dlogits);
    let walk = BackwardWalk { wide };
    let quads = Quads {
        prefix: "ce",
        lead: 1,
        wide,
        step: walk.step(),
    };
    let entry = LinearEntry {
        name: BACKWARD_ENTRY,
        prefix: "ce",
    };
    let units = [
        format!("{src}_dim0()"),
        walk.per_row(&format!("{src}_dim1()")),
    ];
    let (row, chunk) = (entry.coord(0), entry.coord(1));
    let body = format!(
        "{NAN}{helpers}{open}{decode}    let ce_n = {src}_dim1();
    let ce_label = labels_load({row});
    let ce_count = count_load(0u);
    let ce_ignored = ce_label == params.ignore_index;
    let ce_factor = select(0.0, params.dloss / f32(ce_count), ce_count > 0u);
    let ce_j = {first};
    let ce_p = exp({x} - lse_load({row}));
    let ce_hot = select(vec4<f32>(0.0), vec4<f32>(1.0), ce_keys(ce_j) == vec4<u32>(ce_label));
    var ce_g = (ce_p - ce_hot) * ce_factor;
    if (ce_ignored) {{
        ce_g = vec4<f32>(0.0);
    }} else if (ce_label >= ce_n) {{
        ce_g = vec4<f32>(fbl_nan());
    }}
    {put};
}}
",
        helpers = quads.wgsl(&[src], &["dlogits"]),
        open = entry.open(&units.join(" * ")),
        decode = entry.decode(&units),
        first = walk.first(&chunk),
        x = quads.get(src, &row, "ce_j", "ce_n"),
        put = quads.put("dlogits", &row, "ce_j", "ce_n", "ce_g"),
    );
    let name = if in_place {
        BACKWARD_IN_PLACE
    } else {
        BACKWARD
    };
    let mut source = KernelSource::new(name);
    for o in operands {
        source = source.operand(o);
    }
    let source = source
        .scalar("ignore_index", Scalar::U32)
        .scalar("dloss", Scalar::F32)
        .body(body);
    Ok((walk, Compiled::new(name, gpu, source)?))
}

/// Checks that every label is below `vocab` or is `ignore_index`.
pub fn check_labels(
    labels: &dyn Logical<u32>,
    vocab: usize,
    ignore_index: u32,
) -> Result<(), OpError> {
    let rows = labels.dims().first().copied().unwrap_or(0);
    for r in 0..rows {
        let t = labels.get(&[r]);
        if t != ignore_index && t as usize >= vocab {
            return Err(OpError::OutOfRange {
                op: FORWARD,
                role: "labels",
                position: r,
                value: u64::from(t),
                limit: vocab as u64,
            });
        }
    }
    Ok(())
}

/// Checks the shapes of the CPU kernels' operands; returns the number of rows that count.
fn check_cpu<T>(
    op: &'static str,
    logits: &dyn Logical<T>,
    labels: &dyn Logical<u32>,
    ignore_index: u32,
) -> Result<u32, OpError> {
    let (l, t) = (logits.dims(), labels.dims());
    if l.len() != 2 || t.len() != 1 || t[0] != l[0] {
        return Err(OpError::shape(
            op,
            format!("logits {l:?} and labels {t:?} are not [rows, vocab] and [rows]"),
        ));
    }
    check_labels(labels, l[1], ignore_index)?;
    Ok((0..t[0])
        .filter(|&r| labels.get(&[r]) != ignore_index)
        .count() as u32)
}

/// The forward on the CPU: each row's loss into `loss` (0 for ignored rows), and the mean.
pub fn cross_entropy_forward_cpu<T: Real>(
    ignore_index: u32,
    logits: &dyn Logical<T>,
    labels: &dyn Logical<u32>,
    loss: &mut dyn LogicalMut<T>,
) -> Result<CrossEntropyMean, OpError> {
    let count = check_cpu(FORWARD, logits, labels, ignore_index)?;
    let rows = labels.dims()[0];
    if loss.dims() != [rows] {
        return Err(OpError::shape(
            FORWARD,
            format!("`loss` has shape {:?}, not [{rows}]", loss.dims()),
        ));
    }
    let vocab = logits.dims()[1];
    let losses: Vec<f64> = (0..rows)
        .into_par_iter()
        .map(|r| {
            let t = labels.get(&[r]);
            if t == ignore_index {
                return 0.0;
            }
            let x: Vec<f64> = (0..vocab).map(|j| logits.get(&[r, j]).to_f64()).collect();
            let max = x.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            let lse = max + x.iter().map(|v| (v - max).exp()).sum::<f64>().ln();
            lse - x[t as usize]
        })
        .collect();
    let total: f64 = losses.iter().sum();
    let stored: Vec<T> = losses.iter().map(|&v| T::from_f64(v)).collect();
    loss.scatter(&stored);
    Ok(CrossEntropyMean {
        mean: if count > 0 {
            total / f64::from(count)
        } else {
            0.0
        },
        count,
    })
}

/// The gradient of `dloss · mean` with respect to the logits on the CPU, into `dlogits`.
pub fn cross_entropy_backward_cpu<T: Real>(
    ignore_index: u32,
    dloss: f64,
    logits: &dyn Logical<T>,
    labels: &dyn Logical<u32>,
    dlogits: &mut dyn LogicalMut<T>,
) -> Result<(), OpError> {
    let count = check_cpu(BACKWARD, logits, labels, ignore_index)?;
    let factor = if count > 0 {
        dloss / f64::from(count)
    } else {
        0.0
    };
    map_rows(BACKWARD, &[logits], &mut [dlogits], |lead, x, out| {
        let t = labels.get(&[lead[0]]);
        if t == ignore_index {
            return;
        }
        let max = x[0].iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let sum: f64 = x[0].iter().map(|v| (v - max).exp()).sum();
        for (j, (o, v)) in out[0].iter_mut().zip(&x[0]).enumerate() {
            let hot = if j == t as usize { 1.0 } else { 0.0 };
            *o = factor * ((v - max).exp() / sum - hot);
        }
    })
}
