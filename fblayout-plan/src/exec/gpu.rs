//! The GPU executor: every kernel of the graph built once for its views, buffers from the memory
//! plan, and a whole training step recorded into one batch and submitted once. The first step
//! records every dispatch; later steps submit that [`Recording`] again, with only the nodes
//! whose work changes from step to step (the embeddings' token ids; AdamW reads its step
//! number from the device) recorded anew and put in place, and its commands encoded while the
//! GPU runs the step before, so the host's part of a step is small.
//!
//! The AdamW steps of consecutive AdamW nodes run as groups ([`AdamWOp::many`]): as many
//! parameters per dispatch as the device's storage bindings allow
//! ([`AdamWOp::capacity`], or fewer: [`GpuStep::group_adamw`]), each group recorded in the
//! section of its first node, so a step over tiny tensors (biases, a norm's γ and β) and large
//! ones takes a few dispatches instead of one a parameter.

use std::collections::HashMap;
use std::ops::Range;
use std::time::{Duration, Instant};

use fblayout_core::layout::{BoundView, ElemType, LayoutSpec, View};
use fblayout_kernels::ops::adamw::STEP_SCALARS;
use fblayout_kernels::ops::adamw::StepValues;
use fblayout_kernels::ops::matmul::linear::Output;
use fblayout_kernels::ops::{
    ActivationOp, AdamWMember, AdamWOp, AdamWTensors, AddOp, AttentionArgs, AttentionOp,
    AttentionViews, BiasOp, CopyOp, CrossEntropyOp, CrossEntropyState, EmbeddingOp, LayerNormGrads,
    LayerNormOp, LayerNormTensors, LinearOp, NonFiniteOp, OpError, RmsNormGrads, RmsNormOp,
    RmsNormTensors, SwigluOp, TokenIds,
};
use fblayout_kernels::runtime::{Batch, Encoded, Gpu, GpuBuffer, Recording, Timing};
use fblayout_kernels::tensor::GpuArg;

use super::scaling::{LossScaler, LossScaling};
use super::views::{BoundGraph, BoundOperand, bind_graph};
use super::{
    AdamWConfig, ExecError, StepInputs, activation, attention, check_values, initial_values,
    input_values,
};
use crate::graph::{Graph, Op, Role, Sizes, TensorId};
use crate::layouts::LayoutChoice;
use crate::memory::MemoryPlan;

type Arg = BoundOperand;

/// A step's recording, with the range of items each node recorded.
type Recorded<'g> = (Recording<'g>, Vec<Range<usize>>);
/// A node's read and written arguments, bound to their buffers.
type NodeArgs<'a> = (Vec<GpuArg<'a>>, Vec<GpuArg<'a>>);

/// The kernel of one node, built for its operands' views.
#[derive(Debug)]
enum Kernel {
    Embedding(Box<EmbeddingOp>),
    Linear(Box<LinearOp>),
    Bias(Box<BiasOp>),
    Add(Box<AddOp>),
    LayerNorm(Box<LayerNormOp>),
    RmsNorm(Box<RmsNormOp>),
    Activation(Box<ActivationOp>),
    Swiglu(Box<SwigluOp>),
    Attention(Box<AttentionOp>),
    /// A cross-entropy and the state its forward writes and its backward reads.
    CrossEntropy(Box<CrossEntropyOp>, usize),
    /// A step, recorded with its group ([`AdamWGroup`]) by the group's first node.
    AdamW,
    Copy(Box<CopyOp>),
    /// A bias added by the product before it ([`Graph::folded_biases`]): nothing of its own.
    Folded,
}

/// Dynamic loss scaling of a step with `f16` gradients (see [`scaling`](super::scaling)).
struct Scaling {
    scaler: LossScaler,
    /// Set where a parameter's gradient holds an infinity or a NaN: the gate of every AdamW
    /// step, cleared at the start of each step's checks.
    gate: GpuBuffer,
    gate_view: View,
    /// The checks of every AdamW step's gradient, each of as many gradients as one dispatch
    /// reads, in the order of the steps.
    checks: Vec<Check>,
    /// Whether the last step overflowed, and so changed nothing.
    skipped: bool,
    /// The scale the last step's gradients carry.
    applied: f32,
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

impl Scaling {
    fn new(gpu: &Gpu) -> Result<Self, ExecError> {
        let (gate, gate_view) = device_vector(gpu, "grad_overflowed", 1, ElemType::U32)?;
        Ok(Self {
            scaler: LossScaler::new(LossScaling::default()).map_err(ExecError::LossScaling)?,
            gate,
            gate_view,
            checks: Vec::new(),
            skipped: false,
            applied: 1.0,
        })
    }

    fn gate(&self) -> Result<GpuArg<'_>, OpError> {
        Ok(GpuArg::new(&self.gate, &self.gate_view, &[])?)
    }
}

/// One dispatch of the overflow checks: the kernel, and the gradients it reads (AdamW's
/// operands).
struct Check {
    op: NonFiniteOp,
    grads: Vec<Arg>,
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
    let steps: Vec<(usize, &Arg)> = kernels
        .iter()
        .enumerate()
        .filter(|(_, n)| matches!(n.kernel, Kernel::AdamW))
        .map(|(i, n)| (i, &n.reads[1]))
        .collect();
    steps
        .chunks(NonFiniteOp::capacity(gpu))
        .map(|group| {
            let views: Vec<&View> = group.iter().map(|(_, a)| v(a)).collect();
            let op = NonFiniteOp::many(gpu, &views, gate).map_err(|source| {
                let first = group[0].0;
                ExecError::op(first, graph.nodes()[first].op.name(), source)
            })?;
            Ok(Check {
                op,
                grads: group.iter().map(|(_, a)| (*a).clone()).collect(),
            })
        })
        .collect()
}

/// One dispatch of AdamW steps: the kernel over its nodes' parameters, and the nodes, in order
/// (consecutive AdamW nodes of the graph).
struct AdamWGroup {
    op: AdamWOp,
    nodes: Vec<usize>,
}

/// An AdamW node's tensors among its operands `r` (read) and `w` (written): `param, grad, m,
/// v → param, m, v`, and the parameters' copy where the node writes one.
fn adamw_operands<'a, T>(r: &'a [T], w: &'a [T]) -> AdamWMember<&'a T> {
    AdamWMember {
        tensors: AdamWTensors {
            param: &w[0],
            grad: &r[1],
            m: &w[1],
            v: &w[2],
        },
        copy: w.get(3),
    }
}

/// The AdamW steps among `kernels` as groups: each run of consecutive AdamW nodes split into
/// groups of at most `most` parameters and as many as one dispatch takes
/// ([`AdamWOp::capacity`]), each reading the step's values from `scalars` and gated by `gate`
/// where given.
fn build_adamw_groups(
    gpu: &Gpu,
    graph: &Graph,
    kernels: &[NodeKernel],
    (scalars, gate): (&View, Option<&View>),
    most: usize,
) -> Result<Vec<AdamWGroup>, ExecError> {
    let mut runs: Vec<Vec<usize>> = Vec::new();
    for (i, node) in kernels.iter().enumerate() {
        if !matches!(node.kernel, Kernel::AdamW) {
            continue;
        }
        match runs.last_mut() {
            Some(run) if run.last() == Some(&(i - 1)) => run.push(i),
            _ => runs.push(vec![i]),
        }
    }
    let mut groups = Vec::new();
    for run in runs {
        let copies = run.iter().any(|&i| kernels[i].writes.len() > 3);
        let size = AdamWOp::capacity(gpu, copies).min(most).max(1);
        for nodes in run.chunks(size) {
            let members: Vec<AdamWMember<&View>> = nodes
                .iter()
                .map(|&i| {
                    let m = adamw_operands(&kernels[i].reads, &kernels[i].writes);
                    AdamWMember {
                        tensors: AdamWTensors {
                            param: v(m.tensors.param),
                            grad: v(m.tensors.grad),
                            m: v(m.tensors.m),
                            v: v(m.tensors.v),
                        },
                        copy: m.copy.map(v),
                    }
                })
                .collect();
            let op = AdamWOp::many(gpu, &members, Some(scalars), gate).map_err(|source| {
                ExecError::op(nodes[0], graph.nodes()[nodes[0]].op.name(), source)
            })?;
            groups.push(AdamWGroup {
                op,
                nodes: nodes.to_vec(),
            });
        }
    }
    Ok(groups)
}

struct NodeKernel {
    kernel: Kernel,
    reads: Vec<Arg>,
    writes: Vec<Arg>,
    /// For a linear forward that adds the bias after it in its epilogue: that bias and the
    /// bias's output, which the product writes instead of its own.
    bias: Option<(Arg, Arg)>,
    /// The section its dispatches are timed under.
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
/// [`new`](Self::new) builds every kernel (each validated by naga) and allocates every buffer
/// of the memory plan from the device's pool; [`step`](Self::step) records the whole step —
/// forward, backward and AdamW — into one batch, one named section per operation, and submits
/// it once (the first step records it; later ones submit that recording again, with only the
/// work that changes per step recorded anew). The kernels read a gradient through the view of the tensor it is the gradient of,
/// so a gradient must be stored like that tensor ([`tensor_layouts`](super::views::tensor_layouts)
/// then gives both one layout); where a kernel's operands don't fit, building fails with the kernel's error.
pub struct GpuStep<'g> {
    gpu: &'g Gpu,
    graph: Graph,
    kernels: Vec<NodeKernel>,
    whole: Vec<BoundView>,
    buffer_of: Vec<Option<usize>>,
    buffers: Vec<GpuBuffer>,
    persistent: Vec<bool>,
    kept: Vec<bool>,
    /// Every cross-entropy's state, with the node of its forward.
    states: Vec<(usize, CrossEntropyState)>,
    adamw: AdamWConfig,
    steps: u32,
    /// Scratch for the physical values of one tensor (inputs written each step).
    scratch: Vec<u32>,
    /// The step as recorded the first time, with the items of each node, submitted again by
    /// every later step.
    recorded: Option<Recorded<'g>>,
    /// The host's time of the last step up to its submission.
    host: HostTime,
    /// The token ids of every input an embedding reads (by tensor), refilled each step.
    token_ids: Vec<Option<TokenIds>>,
    /// Each input's physical offset of every logical element, found at the first step.
    input_offsets: HashMap<TensorId, Vec<usize>>,
    /// Loss scaling, where the graph has `f16` gradients.
    scaling: Option<Scaling>,
    /// What every AdamW step reads of its step ([`AdamWConfig::step_scalars`]), written before
    /// each submission: the recorded steps never change.
    step_scalars: (GpuBuffer, View),
    /// The AdamW steps, in groups of one dispatch each.
    adamw_groups: Vec<AdamWGroup>,
    /// The first AdamW node, before which the overflow checks are recorded.
    first_adamw: Option<usize>,
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

/// The view of operand `a`.
fn v(a: &Arg) -> &View {
    &a.view
}

/// A LayerNorm node's tensors among its operands `r` (read) and `w` (written): the forward's
/// `x, γ, β → y, mean, rstd`, the backward's `x, γ, mean, rstd, dy → dx, dγ, dβ`. The backward
/// reads neither β nor y: dβ and dy stand in for them, as the kernel's views.
fn layer_norm_operands<'a, T>(forward: bool, r: &'a [T], w: &'a [T]) -> LayerNormTensors<&'a T> {
    if forward {
        LayerNormTensors {
            x: &r[0],
            gamma: &r[1],
            beta: &r[2],
            y: &w[0],
            mean: &w[1],
            rstd: &w[2],
        }
    } else {
        LayerNormTensors {
            x: &r[0],
            gamma: &r[1],
            beta: &w[2],
            y: &r[4],
            mean: &r[2],
            rstd: &r[3],
        }
    }
}

/// An RMSNorm node's tensors: the forward's `x, γ → y, rstd`, the backward's
/// `x, γ, rstd, dy → dx, dγ` (dy stands in for y).
fn rms_norm_operands<'a, T>(forward: bool, r: &'a [T], w: &'a [T]) -> RmsNormTensors<&'a T> {
    if forward {
        RmsNormTensors {
            x: &r[0],
            gamma: &r[1],
            y: &w[0],
            rstd: &w[1],
        }
    } else {
        RmsNormTensors {
            x: &r[0],
            gamma: &r[1],
            y: &r[3],
            rstd: &r[2],
        }
    }
}

/// An attention node's queries, keys, values, output and probabilities: the forward's
/// `q, k, v → out, probs`, the backward's `q, k, v, probs, dout → dq, dk, dv` (dout stands in for
/// the output, which the backward does not read).
fn attention_operands<'a, T>(forward: bool, r: &'a [T], w: &'a [T]) -> [&'a T; 5] {
    if forward {
        [&r[0], &r[1], &r[2], &w[0], &w[1]]
    } else {
        [&r[0], &r[1], &r[2], &r[4], &r[3]]
    }
}

/// The extent of the last axis of `q` (the queries' head size).
fn head_dim(q: &Arg) -> u32 {
    q.bound.shape().last().copied().unwrap_or(1) as u32
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
        let mut scaling = half_grads.then(|| Scaling::new(gpu)).transpose()?;
        let step_scalars = device_vector(gpu, "adamw_step_scalars", STEP_SCALARS, ElemType::F32)?;
        let mut kernels = Vec::with_capacity(graph.nodes().len());
        let mut states = Vec::new();
        let folded = graph.folded_biases();
        let mut kept: Vec<bool> = graph.ids().map(|t| memory.kept(t)).collect();
        for (i, node) in graph.nodes().iter().enumerate() {
            let (reads, writes) = ops[i].clone();
            let bias = folded[i].map(|j| {
                let (r, w) = &ops[j];
                (r[1].clone(), w[0].clone())
            });
            let kernel = match (&bias, folded.contains(&Some(i))) {
                // The product before it adds this bias.
                (_, true) => Ok(Kernel::Folded),
                (Some((b, y)), false) => {
                    LinearOp::new_biased(gpu, v(&reads[0]), v(&reads[1]), v(b), v(y))
                        .map(|k| Kernel::Linear(Box::new(k)))
                }
                (None, false) => build(
                    gpu,
                    graph,
                    i,
                    node.op,
                    &reads,
                    &writes,
                    &mut states,
                    &kernels,
                ),
            }
            .map_err(|source| ExecError::op(i, node.op.name(), source))?;
            if bias.is_some() {
                // Never written: the product writes the bias's output instead.
                kept[node.outputs[0].index()] = false;
            }
            kernels.push(NodeKernel {
                kernel,
                reads,
                writes,
                bias,
                section: section(graph, i),
            });
        }
        if let Some(s) = &mut scaling {
            s.checks = build_checks(gpu, graph, &kernels, &s.gate_view)?;
        }
        let gate = scaling.as_ref().map(|s| &s.gate_view);
        let adamw_groups =
            build_adamw_groups(gpu, graph, &kernels, (&step_scalars.1, gate), usize::MAX)?;
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
        let mut step = Self {
            gpu,
            graph: graph.clone(),
            kernels,
            whole,
            buffer_of: graph
                .ids()
                .map(|t| memory.buffer_of(t).map(|b| b.index()))
                .collect(),
            buffers,
            persistent,
            kept,
            states,
            adamw,
            steps: 0,
            scratch: Vec::new(),
            recorded: None,
            host: HostTime::default(),
            token_ids: Vec::new(),
            input_offsets: HashMap::new(),
            scaling,
            step_scalars,
            adamw_groups,
            first_adamw: graph
                .nodes()
                .iter()
                .position(|n| matches!(n.op, Op::AdamW { .. })),
            next: None,
        };
        for t in graph.ids() {
            if let Role::State { .. } = graph.tensor(t).role {
                let zeros = vec![0.0; step.whole[t.index()].logical_len() as usize];
                step.store(t, &zeros)?;
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

    /// Sets every parameter (and its copies) to [`initial_values`] from `seed` (what
    /// [`CpuStep::init_params`](super::CpuStep::init_params) sets).
    pub fn upload_params(&mut self, seed: u64) -> Result<(), ExecError> {
        for p in self.graph.params() {
            let values = initial_values(&self.graph, p, seed);
            self.store(p, &values)?;
        }
        Ok(())
    }

    /// The logical values (row-major) of tensor `name`, read back: a persistent tensor (a
    /// parameter's `f16` copy included), the loss, or a parameter's gradient (after a step; with loss scaling, divided by the scale
    /// that step used, so it is the loss's gradient either way).
    pub fn read(&self, name: &str) -> Result<Vec<f64>, ExecError> {
        let t = self.id(name)?;
        let tensor = self.graph.tensor(t);
        if !self.kept[t.index()] || tensor.role == Role::Input {
            return Err(ExecError::Unknown(name.to_owned()));
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

    /// The loss scale the next step starts its backward with, where the graph's gradients are
    /// `f16` (`None` where they are `f32` and nothing is scaled).
    pub fn loss_scale(&self) -> Option<f32> {
        self.scaling.as_ref().map(|s| s.scaler.scale())
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

    /// Chooses the tensor-core tiles of every linear layer's and attention's products for this
    /// step's extents, timing a short list once per adapter and problem (see
    /// [`LinearOp::tune`] and [`AttentionOp::tune`]); returns how many operations run a
    /// product on tensor cores. Nothing of the step's tensors is overwritten; without tensor
    /// cores this does nothing.
    pub fn tune(&self) -> Result<usize, ExecError> {
        let mut on_cores = 0;
        for (i, node) in self.kernels.iter().enumerate() {
            let (r, w) = (&node.reads, &node.writes);
            let op = self.graph.nodes()[i].op;
            let tuned = match &node.kernel {
                Kernel::Linear(k) => {
                    // The operands the op was built with: x, w, y (see `build`).
                    let (x, wt, y) = match op {
                        Op::Linear => (&r[0], &r[1], node.bias.as_ref().map_or(&w[0], |(_, y)| y)),
                        Op::LinearGradInput => (&w[0], &r[1], &r[0]),
                        _ => (&r[0], &w[0], &r[1]),
                    };
                    let tuned =
                        (|| k.tune(self.gpu, &self.arg(x)?, &self.arg(wt)?, &self.arg(y)?))();
                    tuned.map(|()| k.tensor_cores().contains(&true))
                }
                Kernel::Attention(k) => {
                    let forward = matches!(op, Op::Attention { .. });
                    let tuned = (|| {
                        let [q, kk, v, out, probs] =
                            attention_operands(forward, r, w).map(|a| self.arg(a));
                        let args = AttentionArgs {
                            q: q?,
                            k: kk?,
                            v: v?,
                            out: out?,
                            probs: probs?,
                        };
                        k.tune(self.gpu, &args)
                    })();
                    tuned.map(|()| k.tensor_cores().contains(&true))
                }
                _ => continue,
            };
            let cores = tuned.map_err(|source| ExecError::op(i, op.name(), source))?;
            on_cores += usize::from(cores);
        }
        Ok(on_cores)
    }

    /// Sets the most parameters one AdamW dispatch updates (`most`, at least 1; the device's
    /// [`AdamWOp::capacity`] bounds it too, and is the default) and builds the groups again, so
    /// the next step records everything anew; returns how many dispatches a step's AdamW takes
    /// now. For a benchmark to sweep the grouping in one run: the results do not depend on it.
    pub fn group_adamw(&mut self, most: usize) -> Result<usize, ExecError> {
        let gate = self.scaling.as_ref().map(|s| &s.gate_view);
        self.adamw_groups = build_adamw_groups(
            self.gpu,
            &self.graph,
            &self.kernels,
            (&self.step_scalars.1, gate),
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
        let (loss, _) = self.run(inputs, false)?;
        Ok(loss)
    }

    /// [`step`](Self::step), timing every dispatch (one section per operation).
    pub fn step_timed(&mut self, inputs: &StepInputs) -> Result<(f32, Vec<Timing>), ExecError> {
        self.run(inputs, true)
    }

    fn run(&mut self, inputs: &StepInputs, timed: bool) -> Result<(f32, Vec<Timing>), ExecError> {
        let start = Instant::now();
        self.load(inputs)?;
        let loaded = start.elapsed();
        let ids = &self.token_ids;
        let adam_step = self.steps + 1;
        let again = match self.recorded.take() {
            Some(recorded) => self.rerecord(recorded, ids)?,
            None => None,
        };
        let mut recorded = match again {
            Some(recorded) => recorded,
            None => self.record_all(ids)?,
        };
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
        let mut loss = 0.0;
        for (node, state) in &self.states {
            loss += state
                .mean()
                .map_err(|source| ExecError::op(*node, "cross_entropy", source))?;
        }
        if let Some(scaling) = &mut self.scaling {
            let flag: Vec<u32> = scaling
                .gate
                .read_back()
                .map_err(|e| ExecError::gpu("reading the gradients' overflow flag", e))?;
            scaling.applied = scaling.scaler.scale();
            scaling.skipped = scaling.scaler.update(flag[0] != 0);
            if scaling.skipped {
                // The device changed nothing: the next step is this step again.
                return Ok((loss, timings));
            }
        }
        self.steps = adam_step;
        Ok((loss, timings))
    }

    /// Records the whole step: every node, with the range of items each one recorded, and the
    /// overflow checks (the same every step, so outside any node's range) before the first
    /// AdamW node where the loss is scaled.
    fn record_all(&self, ids: &[Option<TokenIds>]) -> Result<Recorded<'g>, ExecError> {
        let mut batch = self.gpu.batch();
        let mut spans = Vec::with_capacity(self.kernels.len());
        for i in 0..self.kernels.len() {
            let failed = |source| ExecError::op(i, self.graph.nodes()[i].op.name(), source);
            if let Some(scaling) = &self.scaling
                && self.first_adamw == Some(i)
            {
                self.record_checks(&mut batch, scaling).map_err(failed)?;
            }
            let start = batch.len();
            self.record(&mut batch, i, ids).map_err(failed)?;
            spans.push(start..batch.len());
        }
        let recording = batch
            .finish()
            .map_err(|e| ExecError::gpu("recording the step", e))?;
        Ok((recording, spans))
    }

    /// Whether node `i` records something that changes from step to step: the uploaded token
    /// ids (embeddings), the loss scale (the loss's gradient, where the loss is scaled). AdamW
    /// reads its step's values from the device ([`AdamWConfig::step_scalars`]), written each step.
    fn changes_per_step(&self, i: usize) -> bool {
        match self.graph.nodes()[i].op {
            Op::Embedding | Op::EmbeddingGrad => true,
            Op::CrossEntropyGrad { .. } => self.scaling.is_some(),
            _ => false,
        }
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
            if !self.changes_per_step(i) {
                continue;
            }
            let mut batch = self.gpu.batch();
            self.record(&mut batch, i, ids)
                .map_err(|source| ExecError::op(i, self.graph.nodes()[i].op.name(), source))?;
            if batch.len() != span.len() || recording.replace(span.start, batch).is_err() {
                return Ok(None);
            }
        }
        Ok(Some((recording, spans)))
    }

    /// Writes the step's integer inputs into their buffers, and the token ids of every input
    /// an embedding reads, with their index, into `token_ids` (by tensor; the same
    /// buffers every step).
    fn load(&mut self, inputs: &StepInputs) -> Result<(), ExecError> {
        self.token_ids.resize_with(self.whole.len(), || None);
        for t in self.graph.ids() {
            let tensor = self.graph.tensor(t);
            if tensor.role != Role::Input {
                continue;
            }
            let bound = &self.whole[t.index()];
            let values = input_values(tensor, inputs, bound)?;
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
            // An embedding's table bounds its ids (the positions' table, the vocabulary).
            let lookup = self.graph.nodes().iter().enumerate().find_map(|(i, n)| {
                (n.op == Op::Embedding && n.inputs[0] == t)
                    .then(|| (i, self.whole[n.inputs[1].index()].shape()[0] as u32))
            });
            if let Some((node, rows)) = lookup {
                let uploaded = match self.token_ids[t.index()].take() {
                    Some(mut ids) => ids.refill(values).map(|()| ids),
                    None => TokenIds::new(self.gpu, values, rows),
                }
                .map_err(|source| ExecError::op(node, "embedding", source))?;
                self.token_ids[t.index()] = Some(uploaded);
            }
        }
        Ok(())
    }

    /// Records the check of every parameter's gradient into the gate, cleared first, before
    /// any AdamW step reads it: recorded once, before the first AdamW node, and not again (its
    /// work is the same every step), in a section of its own, with as many gradients per
    /// dispatch as the device allows.
    fn record_checks(&self, batch: &mut Batch<'_>, scaling: &Scaling) -> Result<(), OpError> {
        batch.section(OVERFLOW_SECTION);
        batch.clear(&scaling.gate);
        let gate = scaling.gate()?;
        for check in &scaling.checks {
            let args = check
                .grads
                .iter()
                .map(|a| self.arg(a))
                .collect::<Result<Vec<_>, _>>()?;
            let args: Vec<&GpuArg<'_>> = args.iter().collect();
            check.op.record(batch, &args, &gate)?;
        }
        Ok(())
    }

    /// Records the AdamW steps of `group` in one dispatch, reading the step's values from the
    /// device and gated on the overflow checks where the loss is scaled.
    fn record_adamw(&self, batch: &mut Batch<'_>, group: &AdamWGroup) -> Result<(), OpError> {
        let mut args = Vec::with_capacity(group.nodes.len());
        for &i in &group.nodes {
            args.push(self.node_args(&self.kernels[i])?);
        }
        let members: Vec<AdamWMember<&GpuArg<'_>>> =
            args.iter().map(|(r, w)| adamw_operands(r, w)).collect();
        let (buffer, view) = &self.step_scalars;
        let scalars = GpuArg::new(buffer, view, &[])?;
        let gate = self.scaling.as_ref().map(Scaling::gate).transpose()?;
        group.op.record(
            batch,
            &members,
            &self.adamw,
            StepValues::Device(&scalars),
            gate.as_ref(),
        )
    }

    /// The arguments a node reads and those it writes, bound to their buffers.
    fn node_args<'a>(&'a self, node: &'a NodeKernel) -> Result<NodeArgs<'a>, OpError> {
        let bind = |args: &'a [Arg]| -> Result<Vec<GpuArg<'a>>, OpError> {
            args.iter().map(|a| self.arg(a)).collect()
        };
        Ok((bind(&node.reads)?, bind(&node.writes)?))
    }

    fn arg<'a>(&'a self, a: &'a Arg) -> Result<GpuArg<'a>, OpError> {
        let b = self.buffer_of[a.tensor.index()].ok_or_else(|| OpError::Shape {
            op: "gpu step",
            detail: format!("`{}` has no buffer", self.graph.tensor(a.tensor).name),
        })?;
        Ok(GpuArg::bound(&self.buffers[b], &a.view, a.bound.clone())?)
    }

    /// Records node `i` into `batch`.
    fn record(
        &self,
        batch: &mut Batch<'_>,
        i: usize,
        ids: &[Option<TokenIds>],
    ) -> Result<(), OpError> {
        let node = &self.kernels[i];
        batch.section(node.section.clone());
        let (r, w) = self.node_args(node)?;
        let op = self.graph.nodes()[i].op;
        let tokens = |k: usize| {
            let t = node.reads[k].tensor;
            ids[t.index()].as_ref().ok_or_else(|| OpError::Shape {
                op: "embedding",
                detail: format!(
                    "`{}` is no input of the step: the GPU embedding reads uploaded ids",
                    self.graph.tensor(t).name
                ),
            })
        };
        let ow = Output::Overwrite;
        match (&node.kernel, op) {
            (Kernel::Embedding(k), Op::Embedding) => {
                k.forward(batch, &tokens(0)?.ids()?, &r[1], &w[0])
            }
            (Kernel::Embedding(k), _) => k.backward(batch, tokens(0)?, &r[1], &w[0], false),
            (Kernel::Linear(k), Op::Linear) => match &node.bias {
                Some((b, y)) => k.forward_biased(batch, &r[0], &r[1], &self.arg(b)?, &self.arg(y)?),
                None => k.forward(batch, &r[0], &r[1], &w[0], ow),
            },
            (Kernel::Folded, _) => Ok(()),
            // Built with dx's view for x, which the product of dx does not read.
            (Kernel::Linear(k), Op::LinearGradInput) => {
                k.backward(batch, &w[0], &r[1], &r[0], Some((&w[0], ow)), None)
            }
            // Built with dw's view for w, which the product of dw does not read.
            (Kernel::Linear(k), _) => {
                k.backward(batch, &r[0], &w[0], &r[1], None, Some((&w[0], ow)))
            }
            (Kernel::Bias(k), Op::Bias) => k.forward(batch, &r[0], &r[1], &w[0]),
            (Kernel::Bias(k), _) => k.backward(batch, &r[0], &w[0], false),
            (Kernel::Add(k), _) => k.forward(batch, &r[0], &r[1], &w[0]),
            (Kernel::LayerNorm(k), Op::LayerNorm { .. }) => {
                k.forward(batch, &layer_norm_operands(true, &r, &w))
            }
            (Kernel::LayerNorm(k), _) => k.backward(
                batch,
                &layer_norm_operands(false, &r, &w),
                &LayerNormGrads {
                    dy: &r[4],
                    dx: &w[0],
                    dgamma: &w[1],
                    dbeta: &w[2],
                },
                false,
            ),
            (Kernel::RmsNorm(k), Op::RmsNorm { .. }) => {
                k.forward(batch, &rms_norm_operands(true, &r, &w))
            }
            (Kernel::RmsNorm(k), _) => k.backward(
                batch,
                &rms_norm_operands(false, &r, &w),
                &RmsNormGrads {
                    dy: &r[3],
                    dx: &w[0],
                    dgamma: &w[1],
                },
                false,
            ),
            (Kernel::Activation(k), Op::Activation(_)) => k.forward(batch, &r[0], &w[0]),
            (Kernel::Activation(k), _) => k.backward(batch, &r[0], &r[1], &w[0]),
            (Kernel::Swiglu(k), Op::Swiglu) => k.forward(batch, &r[0], &r[1], &w[0]),
            (Kernel::Swiglu(k), _) => k.backward(batch, &r[0], &r[1], &r[2], &w[0], &w[1]),
            (Kernel::Attention(k), op) => {
                let forward = matches!(op, Op::Attention { .. });
                let [q, kk, vv, out, probs] = attention_operands(forward, &r, &w).map(Clone::clone);
                let args = AttentionArgs {
                    q,
                    k: kk,
                    v: vv,
                    out,
                    probs,
                };
                if forward {
                    k.forward(batch, &args)
                } else {
                    k.backward(batch, &args, &r[4], &w[0], &w[1], &w[2])
                }
            }
            (Kernel::CrossEntropy(k, s), Op::CrossEntropy { .. }) => {
                k.forward(batch, &r[0], &r[1], &w[0], &self.states[*s].1)
            }
            (Kernel::CrossEntropy(k, s), _) => {
                // The loss's gradient starts the backward, scaled where gradients are f16.
                let dloss = self.scaling.as_ref().map_or(1.0, |s| s.scaler.scale());
                k.backward(batch, &r[0], &r[1], &self.states[*s].1, dloss, &w[0])
            }
            (Kernel::AdamW, _) => match self.adamw_groups.iter().find(|g| g.nodes[0] == i) {
                Some(group) => self.record_adamw(batch, group),
                // Recorded with its group, by the group's first node.
                None => Ok(()),
            },
            (Kernel::Copy(k), _) => k.forward(batch, &r[0], &w[0]),
        }
    }
}

/// The kernel of `op` for operands `r` (reads) and `w` (writes); a cross-entropy's state is
/// added to `states` by its forward and found there by its backward (the forward over the same
/// labels, among the nodes `built` so far).
#[allow(clippy::too_many_arguments)] // the node, its operands, and what earlier nodes built
fn build(
    gpu: &Gpu,
    graph: &Graph,
    node: usize,
    op: Op,
    r: &[Arg],
    w: &[Arg],
    states: &mut Vec<(usize, CrossEntropyState)>,
    built: &[NodeKernel],
) -> Result<Kernel, OpError> {
    Ok(match op {
        Op::Embedding => Kernel::Embedding(Box::new(EmbeddingOp::new(gpu, v(&r[1]), v(&w[0]))?)),
        Op::EmbeddingGrad => {
            Kernel::Embedding(Box::new(EmbeddingOp::new(gpu, v(&w[0]), v(&r[1]))?))
        }
        Op::Linear => Kernel::Linear(Box::new(LinearOp::new(gpu, v(&r[0]), v(&r[1]), v(&w[0]))?)),
        Op::LinearGradInput => {
            Kernel::Linear(Box::new(LinearOp::new(gpu, v(&w[0]), v(&r[1]), v(&r[0]))?))
        }
        Op::LinearGradWeight => {
            Kernel::Linear(Box::new(LinearOp::new(gpu, v(&r[0]), v(&w[0]), v(&r[1]))?))
        }
        Op::Bias => Kernel::Bias(Box::new(BiasOp::new(gpu, v(&r[0]), v(&r[1]), v(&w[0]))?)),
        Op::BiasGrad => Kernel::Bias(Box::new(BiasOp::new(gpu, v(&r[0]), v(&w[0]), v(&r[0]))?)),
        Op::Add | Op::Accumulate => {
            Kernel::Add(Box::new(AddOp::new(gpu, v(&r[0]), v(&r[1]), v(&w[0]))?))
        }
        Op::LayerNorm { eps } | Op::LayerNormGrad { eps } => {
            let t = layer_norm_operands(matches!(op, Op::LayerNorm { .. }), r, w);
            let views = LayerNormTensors {
                x: v(t.x),
                gamma: v(t.gamma),
                beta: v(t.beta),
                y: v(t.y),
                mean: v(t.mean),
                rstd: v(t.rstd),
            };
            Kernel::LayerNorm(Box::new(LayerNormOp::new(gpu, &views, eps)?))
        }
        Op::RmsNorm { eps } | Op::RmsNormGrad { eps } => {
            let t = rms_norm_operands(matches!(op, Op::RmsNorm { .. }), r, w);
            let views = RmsNormTensors {
                x: v(t.x),
                gamma: v(t.gamma),
                y: v(t.y),
                rstd: v(t.rstd),
            };
            Kernel::RmsNorm(Box::new(RmsNormOp::new(gpu, &views, eps)?))
        }
        Op::Activation(a) => Kernel::Activation(Box::new(ActivationOp::new(
            gpu,
            activation(a),
            v(&r[0]),
            v(&w[0]),
        )?)),
        Op::ActivationGrad(a) => Kernel::Activation(Box::new(ActivationOp::new(
            gpu,
            activation(a),
            v(&r[0]),
            v(&r[1]),
        )?)),
        Op::Swiglu => Kernel::Swiglu(Box::new(SwigluOp::new(gpu, v(&r[0]), v(&r[1]), v(&w[0]))?)),
        Op::SwigluGrad => {
            Kernel::Swiglu(Box::new(SwigluOp::new(gpu, v(&r[0]), v(&r[1]), v(&r[2]))?))
        }
        Op::Attention {
            heads,
            kv_heads,
            causal,
        }
        | Op::AttentionGrad {
            heads,
            kv_heads,
            causal,
        } => {
            let forward = matches!(op, Op::Attention { .. });
            let [q, k, vv, out, scores] = attention_operands(forward, r, w).map(v);
            let views = AttentionViews {
                q,
                k,
                v: vv,
                out,
                scores,
            };
            let shape = attention(heads, kv_heads, causal, head_dim(&r[0]));
            Kernel::Attention(Box::new(AttentionOp::new(gpu, &views, shape)?))
        }
        Op::CrossEntropy { ignore_index } => {
            let k = CrossEntropyOp::new(gpu, v(&r[0]), v(&r[1]), v(&w[0]), ignore_index)?;
            states.push((node, k.state(gpu, r[1].bound.shape()[0] as u32)?));
            Kernel::CrossEntropy(Box::new(k), states.len() - 1)
        }
        Op::CrossEntropyGrad { ignore_index } => {
            // The forward over the same labels (or a copy of them in another layout) wrote the
            // state this backward reads.
            let labels = graph.copied_from(r[1].tensor);
            let forward = built.iter().find_map(|n| match &n.kernel {
                Kernel::CrossEntropy(_, s) if graph.copied_from(n.reads[1].tensor) == labels => {
                    Some((*s, v(&n.writes[0]).clone()))
                }
                _ => None,
            });
            let Some((s, loss)) = forward else {
                return Err(OpError::Shape {
                    op: "cross-entropy backward",
                    detail: format!(
                        "no cross-entropy forward over `{}` comes before it",
                        graph.tensor(r[1].tensor).name
                    ),
                });
            };
            let k = CrossEntropyOp::new(gpu, v(&r[0]), v(&r[1]), &loss, ignore_index)?;
            Kernel::CrossEntropy(Box::new(k), s)
        }
        // Built with its group (`build_adamw_groups`).
        Op::AdamW { .. } => Kernel::AdamW,
        Op::Convert { .. } => Kernel::Copy(Box::new(CopyOp::new(gpu, v(&r[0]), v(&w[0]))?)),
    })
}
