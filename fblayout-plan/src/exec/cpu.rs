//! The CPU executor: a whole training step on the CPU backend, in `f64`.

use fblayout_core::layout::{BoundView, ElemType};
use fblayout_kernels::cpu::{Logical, OffsetTable};
use fblayout_kernels::ops::OpError;
use fblayout_kernels::ops::activation::{
    activation_backward_cpu, activation_forward_cpu, swiglu_backward_cpu, swiglu_forward_cpu,
};
use fblayout_kernels::ops::adamw::adamw_step_cpu;
use fblayout_kernels::ops::add::add_cpu;
use fblayout_kernels::ops::attention::{
    AttentionSaved, attention_backward_cpu, attention_forward_cpu,
};
use fblayout_kernels::ops::bias::{bias_backward_cpu, bias_forward_cpu};
use fblayout_kernels::ops::copy::copy_cpu;
use fblayout_kernels::ops::cross_entropy::{cross_entropy_backward_cpu, cross_entropy_forward_cpu};
use fblayout_kernels::ops::embedding::{embedding_backward_cpu, embedding_forward_cpu};
use fblayout_kernels::ops::matmul::linear::{Output, linear_backward_cpu, linear_forward_cpu};
use fblayout_kernels::ops::norm::{
    layer_norm_backward_cpu, layer_norm_forward_cpu, rms_norm_backward_cpu, rms_norm_forward_cpu,
};
use fblayout_kernels::tensor::{HostArg, HostArgMut};

use super::views::{BoundGraph, BoundOperand, bind_graph};
use super::{
    AdamWConfig, ExecError, StepInputs, activation, attention, check_settable, check_values,
    initial_values, input_values,
};
use crate::graph::{Graph, Op, Pass, Role, Sizes, TensorId};
use crate::layouts::LayoutChoice;
use crate::memory::MemoryPlan;

/// One operand of a node, bound to the run's sizes.
#[derive(Debug)]
struct Arg {
    tensor: TensorId,
    bound: BoundView,
    table: OffsetTable,
}

/// A node's operands, in its kernel's order.
#[derive(Debug)]
struct NodeArgs {
    reads: Vec<Arg>,
    writes: Vec<Arg>,
}

/// A training step of a graph on the CPU backend (see the [module docs](super)).
///
/// Every floating-point tensor is stored in `f64` in its layout, in the buffer the memory plan
/// gives it; integer inputs (ids, labels) in `u32`. With [`poison_freed`](Self::poison_freed),
/// every buffer is filled with NaN when the tensor in it dies, and every buffer that holds no
/// persistent tensor at the start of each step: a tensor read after its buffer was given to
/// another, or before it was written, turns the results into NaN.
#[derive(Debug)]
pub struct CpuStep {
    graph: Graph,
    nodes: Vec<NodeArgs>,
    /// Every tensor as declared, bound.
    whole: Vec<BoundView>,
    buffer_of: Vec<Option<usize>>,
    /// The floating-point buffers, by the plan's buffer index.
    buffers: Vec<Vec<f64>>,
    /// Whether a buffer holds a persistent tensor.
    persistent: Vec<bool>,
    /// The integer tensors, by tensor index.
    ints: Vec<Option<Vec<u32>>>,
    /// The buffers freed after each node.
    freed: Vec<Vec<usize>>,
    /// Whether a tensor's values survive the step.
    kept: Vec<bool>,
    poison: bool,
    adamw: AdamWConfig,
    steps: u32,
}

/// Whether tensors of `elem` are stored as integers (the graphs' ids and labels are `u32`).
fn is_int(elem: ElemType) -> bool {
    elem == ElemType::U32
}

impl CpuStep {
    /// The step of `graph` with tensors stored as `layouts` and placed by `memory` (planned for
    /// this graph, these layouts and `sizes`); AdamW runs with `adamw`.
    pub fn new(
        graph: &Graph,
        layouts: &[LayoutChoice],
        memory: &MemoryPlan,
        sizes: Sizes,
        adamw: AdamWConfig,
    ) -> Result<Self, ExecError> {
        memory.check_fits(graph, sizes).map_err(ExecError::Plan)?;
        let BoundGraph { whole, ops } = bind_graph(graph, layouts, sizes)?;
        let tabled = |ops: Vec<BoundOperand>| -> Vec<Arg> {
            ops.into_iter()
                .map(|o| Arg {
                    table: OffsetTable::new(&o.bound),
                    tensor: o.tensor,
                    bound: o.bound,
                })
                .collect()
        };
        let nodes: Vec<NodeArgs> = ops
            .into_iter()
            .map(|(reads, writes)| NodeArgs {
                reads: tabled(reads),
                writes: tabled(writes),
            })
            .collect();
        let buffer_of: Vec<Option<usize>> = graph
            .ids()
            .map(|t| memory.buffer_of(t).map(|b| b.index()))
            .collect();
        let mut lens = vec![0usize; memory.buffers().len()];
        let mut persistent = vec![false; lens.len()];
        let mut ints = vec![None; whole.len()];
        for t in graph.ids() {
            let tensor = graph.tensor(t);
            let len = whole[t.index()].len() as usize;
            if is_int(tensor.elem) {
                ints[t.index()] = Some(vec![0; len]);
            } else if let Some(b) = buffer_of[t.index()] {
                lens[b] = lens[b].max(len);
                persistent[b] |= tensor.is_persistent();
            }
        }
        let mut buffers: Vec<Vec<f64>> = lens.iter().map(|&n| vec![f64::NAN; n]).collect();
        for t in graph.ids() {
            if let (Role::State { .. }, Some(b)) = (graph.tensor(t).role, buffer_of[t.index()]) {
                buffers[b].fill(0.0);
            }
        }
        Ok(Self {
            graph: graph.clone(),
            nodes,
            whole,
            buffer_of,
            buffers,
            persistent,
            ints,
            freed: (0..graph.nodes().len())
                .map(|i| memory.freed_after(i).iter().map(|b| b.index()).collect())
                .collect(),
            kept: graph.ids().map(|t| memory.kept(t)).collect(),
            poison: false,
            adamw,
            steps: 0,
        })
    }

    /// Fills every buffer with NaN where the tensor in it dies (see the type's docs).
    pub fn poison_freed(mut self, poison: bool) -> Self {
        self.poison = poison;
        self
    }

    /// The graph it runs.
    pub fn graph(&self) -> &Graph {
        &self.graph
    }

    /// Sets every parameter (and its copies) to [`initial_values`] from `seed`.
    pub fn init_params(&mut self, seed: u64) -> Result<(), ExecError> {
        for p in self.graph.params() {
            let values = initial_values(&self.graph, p, seed);
            let name = self.graph.tensor(p).name.clone();
            self.set(&name, &values)?;
        }
        Ok(())
    }

    fn id(&self, name: &str) -> Result<TensorId, ExecError> {
        self.graph
            .find(name)
            .ok_or_else(|| ExecError::Unknown(name.to_owned()))
    }

    /// Sets persistent tensor `name` (a parameter, with its copies; a moment) to `logical`
    /// (row-major over its shape). A parameter's copy is not set apart from the parameter.
    pub fn set(&mut self, name: &str, logical: &[f64]) -> Result<(), ExecError> {
        let t = self.id(name)?;
        let tensor = self.graph.tensor(t);
        if !tensor.is_persistent() || is_int(tensor.elem) {
            return Err(ExecError::Unknown(name.to_owned()));
        }
        check_settable(&self.graph, t)?;
        for t in std::iter::once(t).chain(self.graph.copies_of(t)) {
            let name = &self.graph.tensor(t).name;
            let bound = &self.whole[t.index()];
            check_values(name, logical.len(), bound)?;
            let b = self.buffer_of[t.index()].ok_or_else(|| ExecError::Unknown(name.clone()))?;
            let buffer = &mut self.buffers[b];
            bound.for_each(|i, _, off| buffer[off as usize] = logical[i]);
        }
        Ok(())
    }

    /// The logical values (row-major) of tensor `name`: a persistent tensor, the loss, or a
    /// parameter's gradient (after a step).
    pub fn read(&self, name: &str) -> Result<Vec<f64>, ExecError> {
        let t = self.id(name)?;
        if !self.kept[t.index()] || is_int(self.graph.tensor(t).elem) {
            return Err(ExecError::Unknown(name.to_owned()));
        }
        let b = self.buffer_of[t.index()].ok_or_else(|| ExecError::Unknown(name.to_owned()))?;
        let (bound, buffer) = (&self.whole[t.index()], &self.buffers[b]);
        let mut out = Vec::with_capacity(bound.logical_len() as usize);
        bound.for_each(|_, _, off| out.push(buffer[off as usize]));
        Ok(out)
    }

    /// The number of steps taken (AdamW's `t` of the last one).
    pub fn steps(&self) -> u32 {
        self.steps
    }

    /// One training step on `inputs`: forward, backward and AdamW. Returns the loss (the sum of
    /// the cross-entropies' means) before the update.
    pub fn step(&mut self, inputs: &StepInputs) -> Result<f64, ExecError> {
        self.run(inputs, true)
    }

    /// The forward and the backward on `inputs`, without updating anything: the loss, and the
    /// gradients to read back.
    pub fn forward_backward(&mut self, inputs: &StepInputs) -> Result<f64, ExecError> {
        self.run(inputs, false)
    }

    fn run(&mut self, inputs: &StepInputs, optimize: bool) -> Result<f64, ExecError> {
        self.load(inputs)?;
        if self.poison {
            for (buffer, &keep) in self.buffers.iter_mut().zip(&self.persistent) {
                if !keep {
                    buffer.fill(f64::NAN);
                }
            }
        }
        let adam_step = self.steps + 1;
        let mut loss = 0.0;
        for i in 0..self.nodes.len() {
            let op = self.graph.nodes()[i].op;
            if op.pass() == Pass::Optimizer && !optimize {
                continue;
            }
            if let Some(l) = self.node(i, adam_step)? {
                loss += l;
            }
            if self.poison {
                for &b in &self.freed[i] {
                    self.buffers[b].fill(f64::NAN);
                }
            }
        }
        if optimize {
            self.steps = adam_step;
        }
        Ok(loss)
    }

    /// Stores the step's inputs in their tensors.
    fn load(&mut self, inputs: &StepInputs) -> Result<(), ExecError> {
        for t in self.graph.ids() {
            let tensor = self.graph.tensor(t);
            if tensor.role != Role::Input {
                continue;
            }
            let bound = &self.whole[t.index()];
            let values = input_values(tensor, inputs, bound)?;
            let store = self.ints[t.index()]
                .as_mut()
                .ok_or_else(|| ExecError::Value {
                    tensor: tensor.name.clone(),
                    detail: "an input must be an integer tensor".into(),
                })?;
            bound.for_each(|i, _, off| store[off as usize] = values[i]);
        }
        Ok(())
    }

    /// Runs node `i`; returns its loss if it computes one.
    fn node(&mut self, i: usize, adam_step: u32) -> Result<Option<f64>, ExecError> {
        let node = &self.graph.nodes()[i];
        let args = &self.nodes[i];
        let failed = |source: OpError| ExecError::op(i, node.op.name(), source);
        // The buffers written, taken out of the store: a buffer written through several views
        // (the queries', keys' and values' gradients in one fused gradient) is taken once and
        // copied for the others, whose elements are moved back afterwards.
        let mut taken: Vec<(usize, Vec<f64>, bool)> = Vec::with_capacity(args.writes.len());
        for w in &args.writes {
            let b = self.buffer_of[w.tensor.index()].ok_or_else(|| {
                ExecError::Plan(format!(
                    "no buffer for `{}`",
                    self.graph.tensor(w.tensor).name
                ))
            })?;
            match taken.iter().position(|(tb, _, _)| *tb == b) {
                Some(k) => {
                    let copy = taken[k].1.clone();
                    taken.push((b, copy, false));
                }
                None => taken.push((b, std::mem::take(&mut self.buffers[b]), true)),
            }
        }
        let result = {
            let written: Vec<TensorId> = args.writes.iter().map(|w| w.tensor).collect();
            let mut ins = Vec::with_capacity(args.reads.len());
            for r in &args.reads {
                // A tensor updated in place is read through its written operand.
                if written.contains(&r.tensor) {
                    continue;
                }
                ins.push(match &self.ints[r.tensor.index()] {
                    Some(data) => In::U(
                        HostArg::new(data.as_slice(), &r.table)
                            .map_err(|e| ExecError::bind(&self.graph.tensor(r.tensor).name, e))?,
                    ),
                    None => {
                        let b = self.buffer_of[r.tensor.index()].ok_or_else(|| {
                            ExecError::Plan(format!(
                                "no buffer for `{}`",
                                self.graph.tensor(r.tensor).name
                            ))
                        })?;
                        In::F(
                            HostArg::new(self.buffers[b].as_slice(), &r.table).map_err(|e| {
                                ExecError::bind(&self.graph.tensor(r.tensor).name, e)
                            })?,
                        )
                    }
                });
            }
            let mut outs = Vec::with_capacity(taken.len());
            for ((_, data, _), w) in taken.iter_mut().zip(&args.writes) {
                outs.push(
                    HostArgMut::new(data.as_mut_slice(), &w.table)
                        .map_err(|e| ExecError::bind(&self.graph.tensor(w.tensor).name, e))?,
                );
            }
            dispatch(node.op, &ins, &mut outs, &self.adamw, adam_step).map_err(failed)
        };
        let mut copies = Vec::new();
        for ((b, data, first), w) in taken.into_iter().zip(&args.writes) {
            if first {
                self.buffers[b] = data;
            } else {
                copies.push((b, data, &w.bound));
            }
        }
        for (b, data, bound) in copies {
            let target = &mut self.buffers[b];
            bound.for_each(|_, _, off| target[off as usize] = data[off as usize]);
        }
        result
    }
}

type Table<'a> = &'a OffsetTable;

/// An operand read by a CPU kernel.
enum In<'a> {
    F(HostArg<'a, f64, Table<'a>>),
    U(HostArg<'a, u32, Table<'a>>),
}

type Out<'a> = HostArgMut<'a, f64, Table<'a>>;

/// An operand the kernel of `op` can't take.
fn mismatch(op: Op, detail: &str) -> OpError {
    OpError::Shape {
        op: op.name(),
        detail: detail.to_owned(),
    }
}

fn float<'b>(op: Op, x: &'b In<'_>) -> Result<&'b dyn Logical<f64>, OpError> {
    match x {
        In::F(a) => Ok(a),
        In::U(_) => Err(mismatch(op, "an integer tensor where floats are read")),
    }
}

fn int<'b>(op: Op, x: &'b In<'_>) -> Result<&'b dyn Logical<u32>, OpError> {
    match x {
        In::U(a) => Ok(a),
        In::F(_) => Err(mismatch(op, "a float tensor where integers are read")),
    }
}

/// Runs the kernel of `op` on its operands (reads `ins` without the tensors updated in place,
/// which are in `outs`); returns the loss of a cross-entropy.
fn dispatch(
    op: Op,
    ins: &[In<'_>],
    outs: &mut [Out<'_>],
    adamw: &AdamWConfig,
    adam_step: u32,
) -> Result<Option<f64>, OpError> {
    let arity = || mismatch(op, "the wrong number of operands");
    let f = |k: usize| ins.get(k).ok_or_else(arity).and_then(|x| float(op, x));
    let ow = Output::Overwrite;
    match (op, outs) {
        (Op::Embedding, [out]) => {
            let ids = int(op, ins.first().ok_or_else(arity)?)?;
            embedding_forward_cpu(&dense_ids(ids), f(1)?, out)?;
        }
        (Op::EmbeddingGrad, [dtable]) => {
            let ids = int(op, ins.first().ok_or_else(arity)?)?;
            embedding_backward_cpu(&dense_ids(ids), f(1)?, dtable, false)?;
        }
        (Op::Linear, [y]) => linear_forward_cpu(f(0)?, f(1)?, y, ow)?,
        // The kernel reads `x` only for the weight's gradient, which is not asked for here.
        (Op::LinearGradInput, [dx]) => {
            linear_backward_cpu(f(0)?, f(1)?, f(0)?, Some((dx, ow)), None)?;
        }
        (Op::LinearGradWeight, [dw]) => {
            // `w` is read only for the input's gradient, which is not asked for here.
            linear_backward_cpu(f(0)?, f(1)?, f(1)?, None, Some((dw, ow)))?;
        }
        (Op::Bias, [y]) => bias_forward_cpu(f(0)?, f(1)?, y)?,
        (Op::BiasGrad, [db]) => bias_backward_cpu(f(0)?, db, false)?,
        (Op::Add | Op::Accumulate, [y]) => add_cpu(f(0)?, f(1)?, y)?,
        (Op::LayerNorm { eps }, [y, mean, rstd]) => {
            layer_norm_forward_cpu(f(0)?, f(1)?, f(2)?, f64::from(eps), y, mean, rstd)?;
        }
        (Op::LayerNormGrad { .. }, [dx, dg, db]) => {
            layer_norm_backward_cpu(f(0)?, f(1)?, f(2)?, f(3)?, f(4)?, dx, dg, db, false)?;
        }
        (Op::RmsNorm { eps }, [y, rstd]) => {
            rms_norm_forward_cpu(f(0)?, f(1)?, f64::from(eps), y, rstd)?;
        }
        (Op::RmsNormGrad { .. }, [dx, dg]) => {
            rms_norm_backward_cpu(f(0)?, f(1)?, f(2)?, f(3)?, dx, dg, false)?;
        }
        (Op::Activation(a), [y]) => activation_forward_cpu(activation(a), f(0)?, y)?,
        (Op::ActivationGrad(a), [dx]) => {
            activation_backward_cpu(activation(a), f(0)?, f(1)?, dx)?;
        }
        (Op::Swiglu, [y]) => swiglu_forward_cpu(f(0)?, f(1)?, y)?,
        (Op::SwigluGrad, [dgate, dup]) => swiglu_backward_cpu(f(0)?, f(1)?, f(2)?, dgate, dup)?,
        (
            Op::Attention {
                heads,
                kv_heads,
                causal,
            },
            [out, probs],
        ) => {
            let a = attention(heads, kv_heads, causal, head_dim(f(0)?));
            attention_forward_cpu(a, f(0)?, f(1)?, f(2)?, out, probs)?;
        }
        (
            Op::AttentionGrad {
                heads,
                kv_heads,
                causal,
            },
            [dq, dk, dv],
        ) => {
            let a = attention(heads, kv_heads, causal, head_dim(f(0)?));
            let saved = AttentionSaved {
                q: f(0)?,
                k: f(1)?,
                v: f(2)?,
                probs: f(3)?,
            };
            attention_backward_cpu(a, &saved, f(4)?, dq, dk, dv)?;
        }
        (Op::CrossEntropy { ignore_index }, [loss]) => {
            let labels = int(op, ins.get(1).ok_or_else(arity)?)?;
            let mean = cross_entropy_forward_cpu(ignore_index, f(0)?, labels, loss)?;
            return Ok(Some(mean.mean));
        }
        (Op::CrossEntropyGrad { ignore_index }, [dlogits]) => {
            let labels = int(op, ins.get(1).ok_or_else(arity)?)?;
            cross_entropy_backward_cpu(ignore_index, 1.0, f(0)?, labels, dlogits)?;
        }
        (Op::AdamW { copy: false }, [param, m, v]) => {
            adamw_step_cpu(param, f(0)?, m, v, adamw, adam_step, 1.0)?;
        }
        // The copy holds the updated parameters.
        (Op::AdamW { copy: true }, [param, m, v, copy]) => {
            adamw_step_cpu(param, f(0)?, m, v, adamw, adam_step, 1.0)?;
            copy_cpu(&*param, copy)?;
        }
        (Op::Convert { .. }, [y]) => copy_cpu(f(0)?, y)?,
        _ => return Err(arity()),
    }
    Ok(None)
}

/// The extent of the last axis of `q` (the queries' head size).
fn head_dim(q: &dyn Logical<f64>) -> u32 {
    q.dims().last().copied().unwrap_or(1) as u32
}

/// Token ids in token order.
fn dense_ids(ids: &dyn Logical<u32>) -> Vec<u32> {
    let n = ids.dims().iter().product::<usize>();
    (0..n).map(|i| ids.get(&[i])).collect()
}
