//! The CPU executor: a whole training step on the CPU backend, in `f64`.

use fblayout_core::layout::{BoundView, ElemType};
use fblayout_kernels::cpu::OffsetTable;
use fblayout_kernels::ops::OpError;
use fblayout_kernels::tensor::{HostArg, HostArgMut};

use super::views::{BoundGraph, bind_graph};
use super::{
    AdamWConfig, ExecError, InputBounds, StepInputs, check_settable, check_values, initial_values,
    input_values,
};
use crate::graph::{Graph, Phase, Role, Sizes, TensorId};
use crate::layouts::LayoutChoice;
use crate::memory::MemoryPlan;
use crate::ops::Args;
use crate::ops::cpu::{CpuCtx, In, Ins, Outs};

/// One operand of a node, bound to the run's sizes.
#[derive(Debug)]
struct Arg {
    bound: BoundView,
    table: OffsetTable,
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
    nodes: Vec<Args<Arg>>,
    /// Every tensor as declared, bound.
    whole: Vec<BoundView>,
    /// The index bounds that read each input, checked every step.
    input_bounds: InputBounds,
    buffer_of: Vec<Option<usize>>,
    /// The floating-point buffers, by the plan's buffer index.
    buffers: Vec<Vec<f64>>,
    /// Whether a buffer holds a persistent tensor.
    persistent: Vec<bool>,
    /// The integer tensors, by tensor index.
    ints: Vec<Option<Vec<u32>>>,
    /// The buffers freed after each node.
    freed: Vec<Vec<usize>>,
    /// For each node, the node whose work its product's epilogue does on the GPU
    /// ([`Graph::epilogues`](crate::graph::Graph::epilogues)): run right after it here, where
    /// the memory plan counts its reads and writes.
    epilogues: Vec<Option<usize>>,
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
        let nodes: Vec<Args<Arg>> = ops
            .iter()
            .map(|args| {
                args.try_map(|o| {
                    Ok::<_, ExecError>(Arg {
                        table: OffsetTable::new(&o.value.bound),
                        bound: o.value.bound.clone(),
                    })
                })
            })
            .collect::<Result<_, _>>()?;
        let mut buffer_of: Vec<Option<usize>> = graph
            .ids()
            .map(|t| memory.buffer_of(t).map(|b| b.index()))
            .collect();
        let mut lens = vec![0usize; memory.buffers().len()];
        let mut persistent = vec![false; lens.len()];
        let mut ints = vec![None; whole.len()];
        let mut freed: Vec<Vec<usize>> = (0..graph.nodes().len())
            .map(|i| memory.freed_after(i).iter().map(|b| b.index()).collect())
            .collect();
        // A product's output that the GPU never writes (the product writes its reader's output
        // instead) has no buffer in the plan; here the product writes it and its reader reads
        // it, so it takes a buffer of its own, freed after the two.
        for (i, t) in graph.unwritten() {
            buffer_of[t.index()] = Some(lens.len());
            freed[i].push(lens.len());
            lens.push(0);
            persistent.push(false);
        }
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
            // A constant, and its copy where mixed precision keeps one.
            if let Some(values) = graph.constant(t) {
                for c in std::iter::once(t).chain(graph.copies_of(t)) {
                    let Some(b) = buffer_of[c.index()] else {
                        continue;
                    };
                    let (bound, buffer) = (&whole[c.index()], &mut buffers[b]);
                    check_values(&graph.tensor(c).name, values.len(), bound)?;
                    bound.for_each(|i, _, off| buffer[off as usize] = values[i]);
                }
            }
        }
        Ok(Self {
            graph: graph.clone(),
            nodes,
            input_bounds: InputBounds::new(graph, &whole),
            whole,
            buffer_of,
            buffers,
            persistent,
            ints,
            freed,
            kept: graph.ids().map(|t| memory.kept(t)).collect(),
            epilogues: graph.epilogues(),
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

    /// Sets every parameter, trained or frozen (and its copies), to [`initial_values`] from
    /// `seed`.
    pub fn init_params(&mut self, seed: u64) -> Result<(), ExecError> {
        for p in self.graph.weights() {
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

    /// The logical values (row-major) of tensor `name`: a persistent tensor, the loss, a
    /// parameter's gradient (after a step), or a tensor the memory plan keeps
    /// ([`MemoryOptions::keep`](crate::memory::MemoryOptions::keep); after a step or an
    /// [`evaluate`](Self::evaluate)). Any other tensor of the graph is
    /// [`ExecError::NotKept`].
    pub fn read(&self, name: &str) -> Result<Vec<f64>, ExecError> {
        let t = self.id(name)?;
        if is_int(self.graph.tensor(t).elem) {
            return Err(ExecError::Unknown(name.to_owned()));
        }
        if !self.kept[t.index()] {
            return Err(ExecError::NotKept(name.to_owned()));
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

    /// The learning rate the next AdamW step runs with.
    pub fn learning_rate(&self) -> f32 {
        self.adamw.lr
    }

    /// Sets the learning rate of the next AdamW steps (a schedule sets it before each step).
    pub fn set_learning_rate(&mut self, lr: f32) {
        self.adamw.lr = lr;
    }

    /// Sets the number of steps taken, so that the next AdamW step is `steps + 1` (its bias
    /// corrections): with the moments set back ([`set`](Self::set) on `p.m` and `p.v`), a
    /// step resumed from a checkpoint is the step an uninterrupted run takes.
    pub fn set_steps(&mut self, steps: u32) {
        self.steps = steps;
    }

    /// The forward alone on `inputs`: the loss, with no gradient computed and nothing updated
    /// (the parameters, their copies and the optimizer's state stay as they are, as does the
    /// step count). After it, [`read`](Self::read) returns the tensors the memory plan keeps
    /// ([`MemoryOptions::keep`](crate::memory::MemoryOptions::keep)): a model's logits, its last
    /// hidden state.
    pub fn evaluate(&mut self, inputs: &StepInputs) -> Result<f64, ExecError> {
        self.load(inputs)?;
        if self.poison {
            for (buffer, &keep) in self.buffers.iter_mut().zip(&self.persistent) {
                if !keep {
                    buffer.fill(f64::NAN);
                }
            }
        }
        let mut loss = 0.0;
        for i in self.in_order() {
            if self.graph.nodes()[i].op.phase() == Phase::Forward {
                loss += self.run_node(i, self.steps + 1)?;
            }
        }
        Ok(loss)
    }

    /// The nodes in the order they run, each node whose work a product does on the GPU left
    /// out: [`run_node`](Self::run_node) runs it right after that product.
    fn in_order(&self) -> Vec<usize> {
        let mut folded = vec![false; self.nodes.len()];
        for &j in self.epilogues.iter().flatten() {
            folded[j] = true;
        }
        (0..self.nodes.len()).filter(|&i| !folded[i]).collect()
    }

    /// Runs node `i` and the node whose work its product does on the GPU, if any, right after
    /// it (where the memory plan counts that node's reads and writes); then poisons what the
    /// plan frees after them. Returns the loss they compute (0 where none).
    fn run_node(&mut self, i: usize, adam_step: u32) -> Result<f64, ExecError> {
        let mut loss = 0.0;
        let run: Vec<usize> = std::iter::once(i).chain(self.epilogues[i]).collect();
        for &k in &run {
            loss += self.node(k, adam_step)?.unwrap_or(0.0);
        }
        if self.poison {
            for k in run {
                for &b in &self.freed[k] {
                    self.buffers[b].fill(f64::NAN);
                }
            }
        }
        Ok(loss)
    }

    /// Sets the gradient of parameter `param` to `logical` (row-major over its shape), for
    /// [`update`](Self::update): gradients summed over micro-batches, or clipped.
    pub fn set_grad(&mut self, param: &str, logical: &[f64]) -> Result<(), ExecError> {
        let g = super::param_grad(&self.graph, param)?;
        let name = &self.graph.tensor(g).name;
        let bound = &self.whole[g.index()];
        check_values(name, logical.len(), bound)?;
        let b = self.buffer_of[g.index()].ok_or_else(|| ExecError::Unknown(name.clone()))?;
        let buffer = &mut self.buffers[b];
        bound.for_each(|i, _, off| buffer[off as usize] = logical[i]);
        Ok(())
    }

    /// The AdamW pass alone, on the gradients as they are (from
    /// [`forward_backward`](Self::forward_backward), or [`set_grad`](Self::set_grad)): one
    /// step, refused where a gradient is not finite.
    pub fn update(&mut self) -> Result<(), ExecError> {
        let adam_step = self.steps + 1;
        self.check_finite(0.0, adam_step)?;
        for i in 0..self.nodes.len() {
            if self.graph.nodes()[i].op.phase() == Phase::Optimizer {
                self.node(i, adam_step)?;
            }
        }
        self.steps = adam_step;
        Ok(())
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
        let first_update = self
            .graph
            .nodes()
            .iter()
            .position(|n| n.op.phase() == Phase::Optimizer);
        for i in self.in_order() {
            let op = self.graph.nodes()[i].op;
            if op.phase() == Phase::Optimizer && !optimize {
                continue;
            }
            if first_update == Some(i) {
                self.check_finite(loss, adam_step)?;
            }
            loss += self.run_node(i, adam_step)?;
        }
        if optimize {
            self.steps = adam_step;
        }
        Ok(loss)
    }

    /// Refuses to update anything after a step whose loss or any parameter's gradient is
    /// infinite or NaN: the parameters stay as they were.
    fn check_finite(&self, loss: f64, step: u32) -> Result<(), ExecError> {
        if !loss.is_finite() {
            return Err(ExecError::NonFinite {
                step,
                what: format!("loss ({loss})"),
            });
        }
        for p in self.graph.params() {
            let Some(g) = self.graph.grad(p) else {
                continue;
            };
            let (Some(b), bound) = (self.buffer_of[g.index()], &self.whole[g.index()]) else {
                continue;
            };
            let buffer = &self.buffers[b];
            let mut finite = true;
            bound.for_each(|_, _, off| finite &= buffer[off as usize].is_finite());
            if !finite {
                return Err(ExecError::NonFinite {
                    step,
                    what: format!("gradient of `{}`", self.graph.tensor(p).name),
                });
            }
        }
        Ok(())
    }

    /// Stores the step's inputs in their tensors, after checking them against every index
    /// bound that reads them.
    fn load(&mut self, inputs: &StepInputs) -> Result<(), ExecError> {
        for t in self.graph.ids() {
            let tensor = self.graph.tensor(t);
            if tensor.role != Role::Input {
                continue;
            }
            let bound = &self.whole[t.index()];
            let values = input_values(tensor, inputs, bound)?;
            self.input_bounds.check(&self.graph, t, values)?;
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
        let mut taken: Vec<(usize, Vec<f64>, bool)> = Vec::with_capacity(args.writes().len());
        for w in args.writes() {
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
        // An input in the memory of another tensor written over it (an in-place operation's,
        // given one buffer by the plan) is read from a copy taken before the operation writes.
        // (A tensor updated in place under its own name is read through its written operand.)
        let written: Vec<TensorId> = args.writes().iter().map(|w| w.tensor).collect();
        let before: Vec<(usize, Vec<f64>)> = args
            .reads()
            .iter()
            .filter(|r| !written.contains(&r.tensor))
            .filter_map(|r| self.buffer_of[r.tensor.index()])
            .filter_map(|b| {
                let (_, data, _) = taken.iter().find(|(tb, _, first)| *tb == b && *first)?;
                Some((b, data.clone()))
            })
            .collect();
        let result = {
            let mut ins = Vec::with_capacity(args.reads().len());
            for r in args.reads() {
                // A tensor updated in place is read through its written operand.
                if written.contains(&r.tensor) {
                    continue;
                }
                let table = &r.value.table;
                let value = match &self.ints[r.tensor.index()] {
                    Some(data) => In::U(
                        HostArg::new(data.as_slice(), table)
                            .map_err(|e| ExecError::bind(&self.graph.tensor(r.tensor).name, e))?,
                    ),
                    None => {
                        let b = self.buffer_of[r.tensor.index()].ok_or_else(|| {
                            ExecError::Plan(format!(
                                "no buffer for `{}`",
                                self.graph.tensor(r.tensor).name
                            ))
                        })?;
                        let data = match before.iter().find(|(tb, _)| *tb == b) {
                            Some((_, copy)) => copy.as_slice(),
                            None => self.buffers[b].as_slice(),
                        };
                        In::F(
                            HostArg::new(data, table).map_err(|e| {
                                ExecError::bind(&self.graph.tensor(r.tensor).name, e)
                            })?,
                        )
                    }
                };
                ins.push((r.role, value));
            }
            let mut outs = Vec::with_capacity(taken.len());
            for ((_, data, _), w) in taken.iter_mut().zip(args.writes()) {
                outs.push((
                    w.role,
                    HostArgMut::new(data.as_mut_slice(), &w.value.table)
                        .map_err(|e| ExecError::bind(&self.graph.tensor(w.tensor).name, e))?,
                ));
            }
            let op = node.op.name();
            let ins = Ins { op, list: ins };
            let mut outs = Outs { op, list: outs };
            let ctx = CpuCtx {
                adamw: &self.adamw,
                step: adam_step,
            };
            node.op
                .contract()
                .cpu(&ins, &mut outs, &ctx)
                .map_err(failed)
        };
        let mut copies = Vec::new();
        for ((b, data, first), w) in taken.into_iter().zip(args.writes()) {
            if first {
                self.buffers[b] = data;
            } else {
                copies.push((b, data, &w.value.bound));
            }
        }
        for (b, data, bound) in copies {
            let target = &mut self.buffers[b];
            bound.for_each(|_, _, off| target[off as usize] = data[off as usize]);
        }
        result
    }
}
