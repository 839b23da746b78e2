//! The GPU executor: every kernel of the graph built once for its views, buffers from the memory
//! plan, and a whole training step recorded into one batch and submitted once. The first step
//! records every dispatch; later steps submit that [`Recording`] again (the inputs and the
//! embeddings' token ids are written into the same buffers, AdamW reads its step number from
//! the device, and only the nodes that read a loss scale that moved are recorded anew and put
//! in place), its commands encoded while the GPU runs the step before, so the host's part of a
//! step is small; [`GpuStep::step_then_load`] writes the next step's inputs during this one.
//!
//! The recording keeps everything its dispatches bind, so the kernels' scratch comes from one
//! [`Workspace`] the memory plan sized ([`MemoryPlan::workspace`]): each node borrows its
//! buffers while it is recorded and gives them back for the next, and a node whose kernels
//! take more than its contract counts ([`MemoryPlan::scratch`]), or parameter blocks past the
//! plan's bound, is an error ([`ExecError::Uncounted`]): nothing is allocated that the plan
//! does not count.
//!
//! The AdamW steps of consecutive AdamW nodes run as groups ([`AdamWOp::many`]): as many
//! parameters per dispatch as the device's storage bindings allow
//! ([`AdamWOp::capacity`](fblayout_kernels::ops::AdamWOp::capacity), or fewer: [`GpuStep::group_adamw`]), each group recorded in the
//! section of its first node, so a step over tiny tensors (biases, a norm's γ and β) and large
//! ones takes a few dispatches instead of one a parameter.

mod split;

use std::collections::HashMap;
use std::ops::Range;
use std::time::{Duration, Instant};

use fblayout_core::layout::{BoundView, ElemType, LayoutSpec, View};
use fblayout_kernels::ops::adamw::STEP_SCALARS;
use fblayout_kernels::ops::coop::compile_ahead;
use fblayout_kernels::ops::{NonFiniteOp, OpError, TokenIds};
use fblayout_kernels::runtime::{
    Batch, Encoded, Gpu, GpuBuffer, Recording, Scratch, Timing, Workspace,
};
use fblayout_kernels::tensor::GpuArg;

use super::scaling::{LossScaleState, LossScaler, LossScaling};
use super::views::{BoundGraph, BoundOperand, bind_graph};
use super::{
    AdamWConfig, ExecError, InputBounds, StepInputs, check_values, initial_values, input_values,
};
use crate::graph::{Graph, Op, Phase, Role, Sizes, TensorId};
use crate::layouts::LayoutChoice;
use crate::memory::MemoryPlan;
use crate::memory::held::{GATE_VALUES, gated};
use crate::ops::gpu::{BuildCtx, GpuKernel, RecordCtx, Shared};
use crate::ops::{AdamWGroup, Args, build_adamw_groups, record_adamw_group};

/// A step's recording, with the range of items each node recorded.
type Recorded<'g> = (Recording<'g>, Vec<Range<usize>>);

/// Dynamic loss scaling of a step with `f16` gradients (see [`scaling`](super::scaling)).
struct Scaling {
    scaler: LossScaler,
    /// Whether the last step overflowed, and so changed nothing.
    skipped: bool,
    /// The scale the last step's gradients carry.
    applied: f32,
}

/// The gate of every AdamW step: set where a parameter's gradient holds an infinity or a NaN,
/// cleared at the start of each step's checks. With `f16` gradients an overflow lowers the
/// loss scale and the step is skipped; with `f32` gradients it is an error. Either way the
/// update never reaches the parameters.
struct Gate {
    gate: GpuBuffer,
    view: View,
    /// The checks of every AdamW step's gradient, each of as many gradients as one dispatch
    /// reads, in the order of the steps.
    checks: Vec<Check>,
}

impl Gate {
    fn arg(&self) -> Result<GpuArg<'_>, OpError> {
        Ok(GpuArg::new(&self.gate, &self.view, &[])?)
    }
}

/// A device vector of `n` values of `elem` named `name`, and its view.
fn device_vector(
    gpu: &Gpu,
    name: &str,
    n: u32,
    elem: ElemType,
) -> Result<(GpuBuffer, View), ExecError> {
    let view = LayoutSpec::new(name)
        .axis("values", n)
        .elem(elem)
        .build()
        .map_err(|source| ExecError::Layout {
            tensor: name.to_owned(),
            choice: LayoutChoice::RowMajor,
            source,
        })?
        .view();
    let buffer = GpuBuffer::scratch::<u32>(gpu, n as usize)
        .map_err(|e| ExecError::gpu("allocating a step's device values", e))?;
    Ok((buffer, view))
}

/// One dispatch of the overflow checks: the kernel, and the gradients it reads (AdamW's
/// `grad` operands), with their tensors.
struct Check {
    op: NonFiniteOp,
    grads: Vec<(TensorId, BoundOperand)>,
}

/// The overflow checks of the gradients that the AdamW steps among `kernels` read, into the
/// flag `gate`: as few dispatches as the device's storage bindings allow
/// ([`NonFiniteOp::capacity`]), built once with the kernels.
fn build_checks(
    gpu: &Gpu,
    graph: &Graph,
    kernels: &[NodeKernel],
    gate: &View,
) -> Result<Vec<Check>, ExecError> {
    let mut steps: Vec<(usize, TensorId, BoundOperand)> = Vec::new();
    for (i, n) in kernels.iter().enumerate() {
        if n.kernel.grouped() {
            let grad = n
                .args
                .read_bound("grad")
                .map_err(|source| ExecError::op(i, graph.nodes()[i].op.name(), source))?;
            steps.push((i, grad.tensor, grad.value.clone()));
        }
    }
    steps
        .chunks(NonFiniteOp::capacity(gpu))
        .map(|group| {
            let views: Vec<&View> = group.iter().map(|(_, _, a)| &a.view).collect();
            let op = NonFiniteOp::many(gpu, &views, gate).map_err(|source| {
                let first = group[0].0;
                ExecError::op(first, graph.nodes()[first].op.name(), source)
            })?;
            Ok(Check {
                op,
                grads: group.iter().map(|(_, t, a)| (*t, a.clone())).collect(),
            })
        })
        .collect()
}

/// Checks that every AdamW step's operands are written before the first AdamW node
/// (`first_adamw`): there the overflow checks read every gradient, and each group's dispatch
/// reads its members' (a conversion before a later member, say, would be read before it is
/// written). The contract keeps the planner from making such a graph (AdamW reads its
/// operands as stored); this refuses one made by hand.
fn optimizer_inputs_ready(graph: &Graph, first_adamw: Option<usize>) -> Result<(), ExecError> {
    let nodes = graph.nodes();
    let is_adamw = |n: &crate::graph::Node| matches!(n.op, Op::AdamW { .. });
    let Some(first) = first_adamw else {
        return Ok(());
    };
    for (j, late) in nodes.iter().enumerate().skip(first) {
        if is_adamw(late) {
            continue;
        }
        let read = nodes[first..]
            .iter()
            .filter(|n| is_adamw(n))
            .flat_map(|n| &n.inputs)
            .find(|t| late.outputs.contains(t));
        if let Some(&t) = read {
            let detail = format!(
                "`{}` is written by operation {j} ({}), after the first AdamW step (operation \
                 {first}), where the optimizer's steps and overflow checks are recorded",
                graph.tensor(t).name,
                late.op.name()
            );
            return Err(ExecError::op(
                j,
                late.op.name(),
                OpError::Shape {
                    op: "gpu step",
                    detail,
                },
            ));
        }
    }
    Ok(())
}

/// The AdamW groups of `kernels` (see [`build_adamw_groups`]).
fn adamw_groups(
    gpu: &Gpu,
    graph: &Graph,
    kernels: &[NodeKernel],
    scalars: &View,
    gate: Option<&View>,
    most: usize,
) -> Result<Vec<AdamWGroup>, ExecError> {
    let nodes: Vec<Option<&Args<BoundOperand>>> = kernels
        .iter()
        .map(|n| n.kernel.grouped().then_some(&n.args))
        .collect();
    build_adamw_groups(gpu, graph, &nodes, (scalars, gate), most)
}

/// One node: its kernel (from its contract), its operands by role, the node whose work its
/// epilogue does, and the section its dispatches are timed under.
struct NodeKernel {
    kernel: Box<dyn GpuKernel>,
    args: Args<BoundOperand>,
    epilogue: Option<usize>,
    section: String,
}

/// The host's part of a step, before the GPU has all of it: the GPU idles meanwhile.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct HostTime {
    /// Writing the inputs (and the token ids' index).
    pub inputs: Duration,
    /// Recording: the first step records everything, later ones only what changes per step,
    /// then AdamW's step values are written.
    pub recording: Duration,
    /// Submitting the step's commands (encoded while the GPU ran the step before, or here when
    /// there is none or they went stale).
    pub submission: Duration,
}

impl HostTime {
    /// The three together.
    pub fn total(&self) -> Duration {
        self.inputs + self.recording + self.submission
    }
}

/// A training step of a graph on the GPU (see the [module docs](super)).
///
/// [`new`](Self::new) builds every node's kernel from its operation's contract (each validated
/// by naga) and allocates every buffer and the workspace of the memory plan from the device's
/// pool;
/// [`step`](Self::step) records the whole step — forward, backward and AdamW — into one batch,
/// one named section per operation, and submits it once (the first step records it; later
/// ones submit that recording again, with only the work that changes per step recorded anew).
/// The kernels read a gradient through the view of the tensor it is the gradient of, so a
/// gradient must be stored like that tensor ([`tensor_layouts`](crate::layouts::tensor_layouts)
/// then gives both one layout); where a kernel's operands don't fit, building fails with the
/// kernel's error.
///
/// Every step's inputs are checked against the operations' index bounds first (token ids below
/// their table, labels below the vocabulary). A gradient that is infinite or NaN never reaches
/// the parameters: every AdamW step is gated on a check of the gradients; with `f16`
/// gradients the step is skipped and the loss scale lowered, with `f32` gradients the step
/// returns [`ExecError::NonFinite`].
pub struct GpuStep<'g> {
    gpu: &'g Gpu,
    graph: Graph,
    kernels: Vec<NodeKernel>,
    whole: Vec<BoundView>,
    /// The index bounds that read each input, checked every step.
    input_bounds: InputBounds,
    buffer_of: Vec<Option<usize>>,
    /// The tensors no kernel writes ([`Graph::is_unwritten`]): operands bound to nothing.
    unwritten: Vec<bool>,
    buffers: Vec<GpuBuffer>,
    persistent: Vec<bool>,
    kept: Vec<bool>,
    adamw: AdamWConfig,
    /// Whether the learning rate changed since the AdamW steps were recorded: the next
    /// recording records them again ([`set_learning_rate`](GpuStep::set_learning_rate)).
    lr_changed: bool,
    steps: u32,
    /// Scratch for the physical values of one tensor (inputs written each step).
    scratch: Vec<u32>,
    /// The step as recorded the first time, with the items of each node, submitted again by
    /// every later step.
    recorded: Option<Recorded<'g>>,
    /// The loss scale the recording's nodes that read it were recorded with.
    recorded_scale: f32,
    /// The host's time of the last step up to its submission.
    host: HostTime,
    /// The token ids of every input a kernel reads uploaded (by tensor), refilled each step.
    token_ids: Vec<Option<TokenIds>>,
    /// Each input's physical offset of every logical element, found at the first step.
    input_offsets: HashMap<TensorId, Vec<usize>>,
    /// The inputs the last step wrote for the next one while the GPU ran it
    /// ([`step_then_load`](Self::step_then_load)), until anything else loads inputs.
    preloaded: Option<StepInputs>,
    /// Loss scaling, where the graph has `f16` gradients.
    scaling: Option<Scaling>,
    /// The AdamW steps' gate, where the graph has any.
    gate: Option<Gate>,
    /// What every AdamW step reads of its step ([`AdamWConfig::step_scalars`]), written before
    /// each submission: the recorded steps never change.
    step_scalars: (GpuBuffer, View),
    /// The AdamW steps, in groups of one dispatch each.
    adamw_groups: Vec<AdamWGroup>,
    /// The buffers every node's kernels take their scratch from in turn, as the memory plan
    /// sized them.
    workspace: Workspace,
    /// Each node's scratch as the memory plan counts it (what its kernels may take).
    planned: Vec<Scratch>,
    /// The bytes of parameter blocks the memory plan counts for the recording.
    planned_params: u64,
    /// The first AdamW node, before which the overflow checks are recorded.
    first_adamw: Option<usize>,
    /// The nodes of the forward, `..forward_end`: what [`evaluate`](Self::evaluate) submits.
    forward_end: usize,
    /// The next step's commands, encoded while the GPU ran this one.
    next: Option<Encoded>,
}

impl std::fmt::Debug for GpuStep<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GpuStep")
            .field("nodes", &self.kernels.len())
            .field("buffers", &self.buffers.len())
            .field("steps", &self.steps)
            .finish_non_exhaustive()
    }
}

/// Host values go in and out of the step as `f32` — the persistent tensors, the loss and the
/// parameters' gradients, which mixed precision keeps `f32` too — or as `f16`, the parameters'
/// copies of mixed precision.
fn check_float(tensor: &crate::graph::Tensor) -> Result<(), ExecError> {
    match tensor.elem {
        ElemType::F32 | ElemType::F16 => Ok(()),
        other => Err(ExecError::Value {
            tensor: tensor.name.clone(),
            detail: format!("it is stored as {other}; values are read and written as f32 or f16"),
        }),
    }
}

/// The section the overflow checks of loss scaling are timed under.
pub const OVERFLOW_SECTION: &str = "loss_scaling overflow check";

/// The section node `i` of `graph` is timed under in [`GpuStep::step_timed`]: the operation's
/// name and its first output's, `"<op> <first output>"`.
pub fn section(graph: &Graph, i: usize) -> String {
    let node = &graph.nodes()[i];
    let first = node
        .outputs
        .first()
        .map_or("", |&t| graph.tensor(t).name.as_str());
    format!("{} {first}", node.op.name())
}

impl<'g> GpuStep<'g> {
    /// The step of `graph` on `gpu`, with tensors stored as `layouts` and placed by `memory`
    /// (planned for this graph, these layouts and `sizes`); AdamW runs with `adamw`.
    pub fn new(
        gpu: &'g Gpu,
        graph: &Graph,
        layouts: &[LayoutChoice],
        memory: &MemoryPlan,
        sizes: Sizes,
        adamw: AdamWConfig,
    ) -> Result<Self, ExecError> {
        memory.check_fits(graph, sizes).map_err(ExecError::Plan)?;
        let BoundGraph { whole, ops } = bind_graph(graph, layouts, sizes)?;
        let half_grads = graph
            .tensors()
            .iter()
            .any(|t| t.elem == ElemType::F16 && matches!(t.role, Role::Grad { .. }));
        let scaling = half_grads
            .then(|| {
                Ok::<_, ExecError>(Scaling {
                    scaler: LossScaler::new(LossScaling::default())
                        .map_err(ExecError::LossScaling)?,
                    skipped: false,
                    applied: 1.0,
                })
            })
            .transpose()?;
        let step_scalars = device_vector(gpu, "adamw_step_scalars", STEP_SCALARS, ElemType::F32)?;
        let folded = graph.epilogues();
        let mut kept: Vec<bool> = graph.ids().map(|t| memory.kept(t)).collect();
        let mut shared: Vec<(TensorId, Shared)> = Vec::new();
        let mut kernels = Vec::with_capacity(graph.nodes().len());
        for (i, node) in graph.nodes().iter().enumerate() {
            let epilogue = folded[i];
            let mut ctx = BuildCtx {
                gpu,
                graph,
                epilogue: epilogue.map(|j| ops[j].as_ref()),
                epilogue_op: epilogue.map(|j| graph.nodes()[j].op),
                folded: folded.contains(&Some(i)),
                shared: &mut shared,
            };
            let kernel = node
                .op
                .contract()
                .gpu(&ops[i].as_ref(), &mut ctx)
                .map_err(|source| ExecError::op(i, node.op.name(), source))?;
            if epilogue.is_some() {
                // Never written: the product writes the bias's output instead.
                kept[node.outputs[0].index()] = false;
            }
            kernels.push(NodeKernel {
                kernel,
                args: ops[i].clone(),
                epilogue,
                section: section(graph, i),
            });
        }
        let first_adamw = graph
            .nodes()
            .iter()
            .position(|n| matches!(n.op, Op::AdamW { .. }));
        optimizer_inputs_ready(graph, first_adamw)?;
        let gate = if gated(graph) {
            let (gate, view) = device_vector(gpu, "grad_overflowed", GATE_VALUES, ElemType::U32)?;
            let checks = build_checks(gpu, graph, &kernels, &view)?;
            Some(Gate { gate, view, checks })
        } else {
            None
        };
        let adamw_groups = adamw_groups(
            gpu,
            graph,
            &kernels,
            &step_scalars.1,
            gate.as_ref().map(|g| &g.view),
            usize::MAX,
        )?;
        let mut persistent = vec![false; memory.buffers().len()];
        for t in graph.ids() {
            if let Some(b) = memory.buffer_of(t) {
                persistent[b.index()] |= graph.tensor(t).is_persistent();
            }
        }
        let buffers = memory
            .buffers()
            .iter()
            .map(|&bytes| {
                GpuBuffer::scratch::<u8>(gpu, bytes as usize)
                    .map_err(|e| ExecError::gpu("allocating the plan's buffers", e))
            })
            .collect::<Result<Vec<_>, _>>()?;
        let workspace = Workspace::new(gpu, memory.workspace())
            .map_err(|e| ExecError::gpu("allocating the plan's workspace", e))?;
        let mut step = Self {
            gpu,
            graph: graph.clone(),
            kernels,
            input_bounds: InputBounds::new(graph, &whole),
            whole,
            buffer_of: graph
                .ids()
                .map(|t| memory.buffer_of(t).map(|b| b.index()))
                .collect(),
            unwritten: graph.is_unwritten(),
            buffers,
            persistent,
            kept,
            adamw,
            lr_changed: false,
            steps: 0,
            scratch: Vec::new(),
            recorded: None,
            recorded_scale: 1.0,
            host: HostTime::default(),
            token_ids: Vec::new(),
            input_offsets: HashMap::new(),
            preloaded: None,
            scaling,
            gate,
            step_scalars,
            adamw_groups,
            workspace,
            planned: (0..graph.nodes().len())
                .map(|i| memory.scratch(i).clone())
                .collect(),
            planned_params: memory.params_bytes(),
            first_adamw,
            forward_end: graph
                .nodes()
                .iter()
                .position(|n| n.op.phase() != Phase::Forward)
                .unwrap_or(graph.nodes().len()),
            next: None,
        };
        for t in graph.ids() {
            if let Role::State { .. } = graph.tensor(t).role {
                let zeros = vec![0.0; step.whole[t.index()].logical_len() as usize];
                step.store(t, &zeros)?;
            }
            if let Some(values) = graph.constant(t) {
                step.store(t, values)?;
            }
        }
        step.poison()?;
        Ok(step)
    }

    /// Fills every buffer that holds no persistent tensor with NaN: whatever a step reads
    /// before writing it shows.
    pub fn poison(&mut self) -> Result<(), ExecError> {
        // NaN as one f32 and as each of two f16s.
        const NAN: u32 = 0x7fff_7fff;
        for (buffer, &keep) in self.buffers.iter().zip(&self.persistent) {
            if !keep {
                let nan = vec![NAN; buffer.len_bytes() as usize / 4];
                buffer
                    .write(&nan)
                    .map_err(|e| ExecError::gpu("poisoning a buffer", e))?;
            }
        }
        Ok(())
    }

    /// The graph it runs.
    pub fn graph(&self) -> &Graph {
        &self.graph
    }

    fn id(&self, name: &str) -> Result<TensorId, ExecError> {
        self.graph
            .find(name)
            .ok_or_else(|| ExecError::Unknown(name.to_owned()))
    }

    /// Writes the logical values `logical` of tensor `t` into its buffer (which it has to
    /// itself: a persistent tensor), in its layout, rounded to `f32` (to `f16` from that for
    /// an `f16` tensor, as the GPU rounds); padding is zero. A parameter's copies are written
    /// with it.
    fn store(&mut self, t: TensorId, logical: &[f64]) -> Result<(), ExecError> {
        for t in std::iter::once(t).chain(self.graph.copies_of(t)) {
            let tensor = self.graph.tensor(t);
            let bound = &self.whole[t.index()];
            check_values(&tensor.name, logical.len(), bound)?;
            check_float(tensor)?;
            let b =
                self.buffer_of[t.index()].ok_or_else(|| ExecError::Unknown(tensor.name.clone()))?;
            let buffer = &self.buffers[b];
            let written = if tensor.elem == ElemType::F16 {
                let mut physical = vec![half::f16::ZERO; buffer.len_bytes() as usize / 2];
                bound.for_each(|i, _, off| {
                    physical[off as usize] = half::f16::from_f32(logical[i] as f32);
                });
                buffer.write(&physical)
            } else {
                let mut physical = vec![0f32; buffer.len_bytes() as usize / 4];
                bound.for_each(|i, _, off| physical[off as usize] = logical[i] as f32);
                buffer.write(&physical)
            };
            written.map_err(|e| ExecError::gpu("writing a tensor", e))?;
        }
        Ok(())
    }

    /// Sets persistent tensor `name` (a parameter, with its copies; a moment) to `logical`
    /// (row-major over its shape). A parameter's copy is not set apart from the parameter.
    pub fn set(&mut self, name: &str, logical: &[f64]) -> Result<(), ExecError> {
        let t = self.id(name)?;
        let tensor = self.graph.tensor(t);
        if !tensor.is_persistent() || tensor.role == Role::Input {
            return Err(ExecError::Unknown(name.to_owned()));
        }
        super::check_settable(&self.graph, t)?;
        self.store(t, logical)
    }

    /// Sets every parameter, trained or frozen (and its copies), to [`initial_values`] from `seed` (what
    /// [`CpuStep::init_params`](super::CpuStep::init_params) sets).
    pub fn upload_params(&mut self, seed: u64) -> Result<(), ExecError> {
        for p in self.graph.weights() {
            let values = initial_values(&self.graph, p, seed);
            self.store(p, &values)?;
        }
        Ok(())
    }

    /// The logical values (row-major) of tensor `name`, read back: a persistent tensor (a
    /// parameter's `f16` copy included), the loss, a parameter's gradient (after a step; with
    /// loss scaling, divided by the scale that step used, so it is the loss's gradient either
    /// way), or a tensor the memory plan keeps
    /// ([`MemoryOptions::keep`](crate::memory::MemoryOptions::keep); after a step or an
    /// [`evaluate`](Self::evaluate)). Any other tensor of the graph is
    /// [`ExecError::NotKept`], as is the output of a product whose bias the product adds
    /// itself (it is never written: keep the bias's output).
    pub fn read(&self, name: &str) -> Result<Vec<f64>, ExecError> {
        let t = self.id(name)?;
        let tensor = self.graph.tensor(t);
        if tensor.role == Role::Input {
            return Err(ExecError::Unknown(name.to_owned()));
        }
        if !self.kept[t.index()] {
            return Err(ExecError::NotKept(name.to_owned()));
        }
        let b = self.buffer_of[t.index()].ok_or_else(|| ExecError::Unknown(name.to_owned()))?;
        check_float(tensor)?;
        let buffer = &self.buffers[b];
        let data: Vec<f32> = match tensor.elem {
            ElemType::F16 => buffer
                .read_back::<half::f16>()
                .map(|h| h.into_iter().map(f32::from).collect()),
            _ => buffer.read_back(),
        }
        .map_err(|e| ExecError::gpu("reading a tensor back", e))?;
        let bound = &self.whole[t.index()];
        // A gradient of a scaled loss carries the scale.
        let unscale = match (&self.scaling, tensor.role) {
            (Some(s), Role::Grad { .. }) => 1.0 / f64::from(s.applied),
            _ => 1.0,
        };
        let mut out = Vec::with_capacity(bound.logical_len() as usize);
        bound.for_each(|_, _, off| out.push(f64::from(data[off as usize]) * unscale));
        Ok(out)
    }

    /// The number of steps taken.
    pub fn steps(&self) -> u32 {
        self.steps
    }

    /// The learning rate the next AdamW step runs with.
    pub fn learning_rate(&self) -> f32 {
        self.adamw.lr
    }

    /// Sets the learning rate of the next AdamW steps (a schedule's). The rate is in the AdamW
    /// dispatches' parameter blocks, so the next step records those dispatches again (and
    /// nothing else) where it changed.
    pub fn set_learning_rate(&mut self, lr: f32) {
        if lr.to_bits() != self.adamw.lr.to_bits() {
            self.adamw.lr = lr;
            self.lr_changed = true;
        }
    }

    /// Sets the number of steps taken, so that the next AdamW step is `steps + 1` (its bias
    /// corrections): with the moments set back ([`set`](Self::set) on `p.m` and `p.v`), a
    /// step resumed from a checkpoint is the step an uninterrupted run takes.
    pub fn set_steps(&mut self, steps: u32) {
        self.steps = steps;
    }

    /// The loss scale the next step starts its backward with, where the graph's gradients are
    /// `f16` (`None` where they are `f32` and nothing is scaled).
    pub fn loss_scale(&self) -> Option<f32> {
        self.scaling.as_ref().map(|s| s.scaler.scale())
    }

    /// Where dynamic loss scaling stands (`None` where the gradients are `f32`): with the
    /// persistent tensors and [`steps`](Self::steps), what a checkpoint keeps.
    pub fn loss_scale_state(&self) -> Option<LossScaleState> {
        self.scaling.as_ref().map(|s| s.scaler.state())
    }

    /// Sets where dynamic loss scaling stands (a checkpoint's
    /// [`loss_scale_state`](Self::loss_scale_state)); an error where the graph has no `f16`
    /// gradients or `state` is out of range.
    pub fn restore_loss_scale(&mut self, state: LossScaleState) -> Result<(), ExecError> {
        let Some(scaling) = &mut self.scaling else {
            return Err(ExecError::LossScaling(
                "the graph's gradients are f32: nothing is scaled".into(),
            ));
        };
        scaling
            .scaler
            .restore(state)
            .map_err(ExecError::LossScaling)
    }

    /// Whether the last step's scaled gradients overflowed, so that it changed no parameter
    /// (and did not count as a step); always `false` without loss scaling.
    pub fn last_step_skipped(&self) -> bool {
        self.scaling.as_ref().is_some_and(|s| s.skipped)
    }

    /// Sets how the loss scale starts and moves (it restarts at `config.initial`); an error
    /// where the graph has no `f16` gradients or `config` is out of range.
    pub fn set_loss_scaling(&mut self, config: LossScaling) -> Result<(), ExecError> {
        let Some(scaling) = &mut self.scaling else {
            return Err(ExecError::LossScaling(
                "the graph's gradients are f32: nothing is scaled".into(),
            ));
        };
        scaling.scaler = LossScaler::new(config).map_err(ExecError::LossScaling)?;
        Ok(())
    }

    /// Chooses the launch parameters of every kernel that has any (the tensor-core tiles of the
    /// linear layers' and attention's products) for this step's extents, timing a short list
    /// once per adapter and problem; returns how many operations run a product on tensor
    /// cores. Nothing of the step's tensors is overwritten; without tensor cores this does
    /// nothing.
    ///
    /// The pipelines of every problem's candidates are compiled first, all at once
    /// ([`compile_ahead`]), then each problem is measured.
    pub fn tune(&self) -> Result<usize, ExecError> {
        compile_ahead(self.gpu, || self.tune_nodes())
            .map_err(|e| ExecError::gpu("compiling the autotune's candidates", e))??;
        self.tune_nodes()
    }

    /// [`tune`](Self::tune)'s pass over the nodes.
    fn tune_nodes(&self) -> Result<usize, ExecError> {
        let mut on_cores = 0;
        let ids = &self.token_ids;
        for (i, node) in self.kernels.iter().enumerate() {
            let op = self.graph.nodes()[i].op;
            let failed = |source| ExecError::op(i, op.name(), source);
            let args = self.args(&node.args).map_err(failed)?;
            let epilogue = self.epilogue(node).map_err(failed)?;
            let ctx = self.ctx(ids, epilogue.as_ref());
            if let Some(cores) = node.kernel.tune(self.gpu, &args, &ctx).map_err(failed)? {
                on_cores += usize::from(cores);
            }
        }
        Ok(on_cores)
    }

    /// Sets the most parameters one AdamW dispatch updates (`most`, at least 1; the device's
    /// [`AdamWOp::capacity`](fblayout_kernels::ops::AdamWOp::capacity) bounds it too, and is the default) and builds the groups again, so
    /// the next step records everything anew; returns how many dispatches a step's AdamW takes
    /// now. For a benchmark to sweep the grouping in one run: the results do not depend on it.
    pub fn group_adamw(&mut self, most: usize) -> Result<usize, ExecError> {
        self.adamw_groups = adamw_groups(
            self.gpu,
            &self.graph,
            &self.kernels,
            &self.step_scalars.1,
            self.gate.as_ref().map(|g| &g.view),
            most,
        )?;
        self.recorded = None;
        self.next = None;
        Ok(self.adamw_dispatches())
    }

    /// How many dispatches a step's AdamW takes (see [`group_adamw`](Self::group_adamw)).
    pub fn adamw_dispatches(&self) -> usize {
        self.adamw_groups.len()
    }

    /// How long the host took in the last untimed [`step`](Self::step) before the GPU had all
    /// of it (see [`HostTime`]).
    pub fn host_time(&self) -> HostTime {
        self.host
    }

    /// One training step on `inputs`, submitted once; returns the loss before the update.
    pub fn step(&mut self, inputs: &StepInputs) -> Result<f32, ExecError> {
        let (loss, _) = self.run(inputs, false, None)?;
        Ok(loss)
    }

    /// [`step`](Self::step) on `inputs`, and while the GPU runs it, the next step's inputs
    /// `next` checked and written: for a training loop that knows its next batch, whose next
    /// step then submits at once instead of waiting for the host to load its inputs. (The
    /// writes land after this step's work in the queue's order, so nothing this step reads
    /// changes under it.)
    ///
    /// Where the next call's inputs are not `next`, or anything else loads inputs in between
    /// ([`evaluate`](Self::evaluate), [`forward_backward`](Self::forward_backward)), they are
    /// loaded as usual. Where `next` is refused (an id out of range), nothing is kept, and the
    /// step given those inputs reports it.
    pub fn step_then_load(
        &mut self,
        inputs: &StepInputs,
        next: &StepInputs,
    ) -> Result<f32, ExecError> {
        let (loss, _) = self.run(inputs, false, Some(next))?;
        Ok(loss)
    }

    /// [`step`](Self::step), timing every dispatch (one section per operation).
    pub fn step_timed(&mut self, inputs: &StepInputs) -> Result<(f32, Vec<Timing>), ExecError> {
        self.run(inputs, true, None)
    }

    /// The forward alone on `inputs`, submitted once: the loss, with no gradient computed and
    /// nothing updated (the parameters, their copies, the optimizer's state, the step count and
    /// the loss scale stay as they are). It submits the forward's part of the step's recording
    /// (recorded by the first step or evaluation, as [`step`](Self::step) records it), so it
    /// allocates nothing the memory plan does not count. After it, [`read`](Self::read) returns
    /// the tensors the memory plan keeps
    /// ([`MemoryOptions::keep`](crate::memory::MemoryOptions::keep)): a model's logits, its last
    /// hidden state.
    pub fn evaluate(&mut self, inputs: &StepInputs) -> Result<f32, ExecError> {
        self.load(inputs)?;
        let mut recorded = self.recording()?;
        // The items of the forward's nodes: everything recorded before the first other node
        // (the overflow checks come later, before the first AdamW node).
        let end = match self.forward_end {
            0 => 0,
            k => recorded.1[k - 1].end,
        };
        let submitted = recorded.0.submit_range(0..end);
        self.recorded = Some(recorded);
        submitted.map_err(|e| ExecError::gpu("submitting the forward", e))?;
        let (loss, _) = self.read_loss(self.forward_end, false)?;
        Ok(loss)
    }

    /// The step's recording for the inputs just loaded: the one recorded before, with what
    /// changes per step recorded again, or a new one.
    fn recording(&mut self) -> Result<Recorded<'g>, ExecError> {
        let again = match self.recorded.take() {
            Some(recorded) => self.rerecord(recorded, &self.token_ids)?,
            None => None,
        };
        let recorded = match again {
            Some(recorded) => recorded,
            None => self.record_all(&self.token_ids)?,
        };
        // Either way the AdamW steps are recorded with the rate now, and the loss's gradient
        // with the scale now.
        self.lr_changed = false;
        self.recorded_scale = self.loss_scale_now();
        Ok(recorded)
    }

    fn run(
        &mut self,
        inputs: &StepInputs,
        timed: bool,
        then: Option<&StepInputs>,
    ) -> Result<(f32, Vec<Timing>), ExecError> {
        let start = Instant::now();
        if self.preloaded.take().as_ref() != Some(inputs) {
            self.load(inputs)?;
        }
        let loaded = start.elapsed();
        let adam_step = self.steps + 1;
        let mut recorded = self.recording()?;
        let unscale = self
            .scaling
            .as_ref()
            .map_or(1.0, |s| 1.0 / s.scaler.scale());
        let scalars = self
            .adamw
            .step_scalars(adam_step, unscale)
            .map_err(|source| ExecError::op(self.first_adamw.unwrap_or(0), "adamw", source))?;
        self.step_scalars
            .0
            .write(&scalars)
            .map_err(|e| ExecError::gpu("writing AdamW's step", e))?;
        let recorded_at = start.elapsed();
        let next = self.next.take();
        let timings = if timed {
            recorded.0.submit_timed()
        } else {
            match next {
                Some(encoded) => recorded.0.submit_encoded(encoded),
                None => recorded.0.submit(),
            }
            .map(|()| Vec::new())
        }
        .map_err(|e| ExecError::gpu("submitting the step", e))?;
        if !timed {
            self.host = HostTime {
                inputs: loaded,
                recording: recorded_at - loaded,
                submission: start.elapsed() - recorded_at,
            };
            // While the GPU runs this step, encode the next one's commands.
            let ahead = recorded
                .0
                .encode()
                .map_err(|e| ExecError::gpu("encoding the next step", e))?;
            self.next = Some(ahead);
        }
        self.recorded = Some(recorded);
        // While the GPU runs this step, the next one's inputs (see `step_then_load`).
        if let Some(then) = then
            && self.load(then).is_ok()
        {
            self.preloaded = Some(then.clone());
        }
        let (loss, overflowed) = self.read_loss(self.kernels.len(), true)?;
        if let Some(scaling) = &mut self.scaling {
            scaling.applied = scaling.scaler.scale();
            scaling.skipped = scaling.scaler.update(overflowed);
            if scaling.skipped {
                // The device changed nothing: the next step is this step again.
                return Ok((loss, timings));
            }
        } else if overflowed || !loss.is_finite() {
            // With f32 gradients nothing explains an overflow: the gated update changed
            // nothing, and the step is an error.
            let what = if loss.is_finite() {
                "gradient of a parameter".to_owned()
            } else {
                format!("loss ({loss})")
            };
            return Err(ExecError::NonFinite {
                step: adam_step,
                what,
            });
        }
        self.steps = adam_step;
        Ok((loss, timings))
    }

    /// The mean losses of the first `nodes` nodes' kernels, summed, and with `flag`, whether
    /// the last submission's overflow checks found a gradient not finite (`false` without
    /// checks): read back together, in one wait for the GPU.
    pub(super) fn read_loss(&self, nodes: usize, flag: bool) -> Result<(f32, bool), ExecError> {
        let mut buffers: Vec<&GpuBuffer> = self.kernels[..nodes]
            .iter()
            .filter_map(|node| node.kernel.loss())
            .collect();
        let losses = buffers.len();
        if flag && let Some(gate) = &self.gate {
            buffers.push(&gate.gate);
        }
        let values = GpuBuffer::read_back_all::<u32>(&buffers)
            .map_err(|e| ExecError::gpu("reading the loss and the overflow flag", e))?;
        let loss = values[..losses].iter().map(|v| f32::from_bits(v[0])).sum();
        let overflowed = values[losses..].iter().any(|v| v[0] != 0);
        Ok((loss, overflowed))
    }

    /// Records the whole step: every node, with the range of items each one recorded, and the
    /// overflow checks (the same every step, so outside any node's range) before the first
    /// AdamW node.
    fn record_all(&self, ids: &[Option<TokenIds>]) -> Result<Recorded<'g>, ExecError> {
        let mut batch = self.gpu.batch();
        batch.use_workspace(&self.workspace);
        let mut spans = Vec::with_capacity(self.kernels.len());
        for i in 0..self.kernels.len() {
            let failed = |source| ExecError::op(i, self.graph.nodes()[i].op.name(), source);
            if let Some(gate) = &self.gate
                && self.first_adamw == Some(i)
            {
                self.record_checks(&mut batch, gate).map_err(failed)?;
            }
            let start = batch.len();
            self.record_counted(&mut batch, i, ids)?;
            spans.push(start..batch.len());
        }
        let recording = batch
            .finish()
            .map_err(|e| ExecError::gpu("recording the step", e))?;
        let params = recording.params_bytes();
        if params > self.planned_params {
            return Err(ExecError::Uncounted(format!(
                "the parameter blocks of the step's dispatches take {params} bytes, more than \
                 the {} bytes it counts for {} operations",
                self.planned_params,
                self.kernels.len()
            )));
        }
        Ok((recording, spans))
    }

    /// Records node `i` (see [`record`](Self::record)) into `batch`, whose workspace lends it
    /// its scratch, and frees that scratch for the next node; an error where its kernels took
    /// more scratch than the memory plan counts for it.
    fn record_counted(
        &self,
        batch: &mut Batch<'_>,
        i: usize,
        ids: &[Option<TokenIds>],
    ) -> Result<(), ExecError> {
        let op = self.graph.nodes()[i].op.name();
        self.record(batch, i, ids)
            .map_err(|source| ExecError::op(i, op, source))?;
        let taken = batch.release_scratch();
        if !self.planned[i].covers(&taken) {
            return Err(ExecError::Uncounted(format!(
                "operation {i} (`{op}`) took {taken} of scratch; its contract counts {}",
                self.planned[i]
            )));
        }
        Ok(())
    }

    /// The loss scale the next recording is made with (1 without scaling).
    fn loss_scale_now(&self) -> f32 {
        self.scaling.as_ref().map_or(1.0, |s| s.scaler.scale())
    }

    /// Whether node `i` records something that changed since the step was recorded: the loss
    /// scale, where it moved and the node's kernel reads it. (The token ids are refilled in
    /// the same buffers, and nothing recorded depends on which ids they hold.)
    fn changes_per_step(&self, i: usize) -> bool {
        self.kernels[i].kernel.reads_loss_scale()
            && self.loss_scale_now().to_bits() != self.recorded_scale.to_bits()
    }

    /// The recorded step with every node that [changes per step](Self::changes_per_step)
    /// recorded again for this one and put in place; `None` where a node's work no longer
    /// fits its place (then the whole step is recorded again).
    fn rerecord(
        &self,
        (mut recording, spans): Recorded<'g>,
        ids: &[Option<TokenIds>],
    ) -> Result<Option<Recorded<'g>>, ExecError> {
        for (i, span) in spans.iter().enumerate() {
            // An AdamW node that is not its group's first records nothing of its own.
            let new_rate = self.lr_changed && self.kernels[i].kernel.grouped() && !span.is_empty();
            if !self.changes_per_step(i) && !new_rate {
                continue;
            }
            let mut batch = self.gpu.batch();
            batch.use_workspace(&self.workspace);
            self.record_counted(&mut batch, i, ids)?;
            if batch.len() != span.len() || recording.replace(span.start, batch).is_err() {
                return Ok(None);
            }
        }
        Ok(Some((recording, spans)))
    }

    /// Writes the step's integer inputs into their buffers, after checking them against every
    /// index bound that reads them, and the ids of every input a kernel reads uploaded, with
    /// their index, into `token_ids` (by tensor; the same buffers every step).
    fn load(&mut self, inputs: &StepInputs) -> Result<(), ExecError> {
        self.preloaded = None;
        self.token_ids.resize_with(self.whole.len(), || None);
        for t in self.graph.ids() {
            let tensor = self.graph.tensor(t);
            if tensor.role != Role::Input {
                continue;
            }
            let bound = &self.whole[t.index()];
            let values = input_values(tensor, inputs, bound)?;
            self.input_bounds.check(&self.graph, t, values)?;
            if let Some(b) = self.buffer_of[t.index()] {
                let buffer = &self.buffers[b];
                // Where each logical element sits: the same every step, so found once (the
                // layout's offsets cost an evaluation of its index expression each).
                let offsets = self.input_offsets.entry(t).or_insert_with(|| {
                    let mut offsets = Vec::with_capacity(values.len());
                    bound.for_each(|_, _, off| offsets.push(off as usize));
                    offsets
                });
                self.scratch.clear();
                self.scratch.resize(buffer.len_bytes() as usize / 4, 0);
                for (&off, &v) in offsets.iter().zip(values) {
                    self.scratch[off] = v;
                }
                buffer
                    .write(&self.scratch)
                    .map_err(|e| ExecError::gpu("writing an input", e))?;
            }
            if let Some((node, rows)) = self.input_bounds.uploaded(t) {
                let failed =
                    |source| ExecError::op(node, self.graph.nodes()[node].op.name(), source);
                match &mut self.token_ids[t.index()] {
                    // The same buffers: what was recorded over them reads the new ids.
                    Some(ids) => ids.refill(values).map_err(failed)?,
                    slot @ None => {
                        *slot = Some(TokenIds::new(self.gpu, values, rows).map_err(failed)?);
                        // New buffers: nothing recorded before reads them.
                        self.recorded = None;
                        self.next = None;
                    }
                }
            }
        }
        Ok(())
    }

    /// Records the check of every parameter's gradient into the gate, cleared first, before
    /// any AdamW step reads it: recorded once, before the first AdamW node, and not again (its
    /// work is the same every step), in a section of its own, with as many gradients per
    /// dispatch as the device allows.
    fn record_checks(&self, batch: &mut Batch<'_>, gate: &Gate) -> Result<(), OpError> {
        batch.section(OVERFLOW_SECTION);
        batch.clear(&gate.gate);
        let flag = gate.arg()?;
        for check in &gate.checks {
            let args = check
                .grads
                .iter()
                .map(|(t, a)| self.arg(*t, a))
                .collect::<Result<Vec<_>, _>>()?;
            let args: Vec<&GpuArg<'_>> = args.iter().collect();
            check.op.record(batch, &args, &flag)?;
        }
        Ok(())
    }

    /// The operands `args`, bound to their buffers, less those no kernel writes (a folding
    /// product's own output, which neither it nor the folded operation binds).
    fn args<'a>(&'a self, args: &'a Args<BoundOperand>) -> Result<Args<GpuArg<'a>>, OpError> {
        args.try_filter_map(|b| {
            (!self.unwritten[b.tensor.index()])
                .then(|| self.arg(b.tensor, &b.value))
                .transpose()
        })
    }

    /// The bound operands of the node whose work `node`'s epilogue does.
    fn epilogue<'a>(&'a self, node: &NodeKernel) -> Result<Option<Args<GpuArg<'a>>>, OpError> {
        node.epilogue
            .map(|j| self.args(&self.kernels[j].args))
            .transpose()
    }

    fn ctx<'a>(
        &'a self,
        ids: &'a [Option<TokenIds>],
        epilogue: Option<&'a Args<GpuArg<'a>>>,
    ) -> RecordCtx<'a> {
        RecordCtx {
            token_ids: ids,
            loss_scale: self.loss_scale_now(),
            graph: &self.graph,
            epilogue,
        }
    }

    fn arg<'a>(&'a self, t: TensorId, a: &'a BoundOperand) -> Result<GpuArg<'a>, OpError> {
        let b = self.buffer_of[t.index()].ok_or_else(|| OpError::Shape {
            op: "gpu step",
            detail: format!("`{}` has no buffer", self.graph.tensor(t).name),
        })?;
        Ok(GpuArg::bound(&self.buffers[b], &a.view, a.bound.clone())?)
    }

    /// Records node `i` into `batch`: its kernel, or for the first node of an AdamW group, the
    /// group's dispatch (the group's other nodes record nothing of their own).
    fn record(
        &self,
        batch: &mut Batch<'_>,
        i: usize,
        ids: &[Option<TokenIds>],
    ) -> Result<(), OpError> {
        let node = &self.kernels[i];
        batch.section(node.section.clone());
        if node.kernel.grouped() {
            let Some(group) = self.adamw_groups.iter().find(|g| g.nodes[0] == i) else {
                return Ok(());
            };
            let args = group
                .nodes
                .iter()
                .map(|&j| self.args(&self.kernels[j].args))
                .collect::<Result<Vec<_>, _>>()?;
            let (buffer, view) = &self.step_scalars;
            let scalars = GpuArg::new(buffer, view, &[])?;
            let gate = self.gate.as_ref().map(Gate::arg).transpose()?;
            return record_adamw_group(batch, group, &args, &self.adamw, &scalars, gate.as_ref());
        }
        let args = self.args(&node.args)?;
        let epilogue = self.epilogue(node)?;
        node.kernel
            .record(batch, &args, &self.ctx(ids, epilogue.as_ref()))
    }
}
