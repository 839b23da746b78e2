//! The memory plan of a training step: which buffer holds each tensor, and the peak.
//!
//! **Liveness.** Operations run in the graph's order (forward, backward, optimizer); a tensor
//! is live from the operation that writes it to the last one that reads it. Inputs, parameters,
//! their copies (mixed precision's `f16` weights, which AdamW writes for the next step) and
//! optimizer state ([`Tensor::is_persistent`](crate::graph::Tensor::is_persistent)) are live
//! for the whole step (and across steps), so none shares a buffer; AdamW updates a parameter
//! and its moments in place, so they stay in their buffers. The loss and every parameter's
//! gradient are the step's results: they are live to its end, so they can be read back, as are
//! the tensors [`MemoryOptions::keep`] names (a model's logits, its last hidden state): each is
//! live from the operation that writes it to the end of the step, so no later tensor takes its
//! buffer, and the peak counts it. A gradient that is the gradient of several tensors (through
//! a sum or a bias) is one tensor, placed once.
//!
//! **Buffers.** Each tensor's size is its layout's buffer at the run's sizes, padding included
//! ([`BoundView::len`](fblayout_core::layout::BoundView::len) elements). Tensors are placed
//! largest first (greedy by size): each takes the smallest buffer that already holds only
//! tensors whose lives don't overlap its own, or a new buffer of its size, rounded up as the
//! device's pool allocates it ([`granular`]). Lives include the operations at their ends, so
//! an operation's outputs never share a buffer with its inputs. A bias or an addition a product
//! does itself ([`Graph::epilogues`]) has its output live from that product on, and the
//! product's own output, which no kernel writes ([`Graph::unwritten`]), takes no buffer.
//! An output that an operation's contract lets it write over an input it reads for the last
//! time, stored alike (`Contract::in_place`: the cross-entropy's gradient over the logits,
//! each of whose elements depends on its own logit), takes that input's buffer: the two are
//! placed as one tensor, and the input's bytes count until the operation before.
//! [`MemoryOptions::reuse`] off gives every tensor its own buffer.
//!
//! **Workspace.** An operation's kernels take scratch while they run — the attention's scores,
//! the partial sums of row reductions and of products that split their reduction — as each
//! operation's contract reports it from its kernels ([`MemoryPlan::scratch`]; where the kernels
//! choose by device, a bound that holds on any). The step lends every operation its scratch
//! from one workspace, in turn: as many buffers as the most any operation takes, the `k`-th
//! largest as large as the largest `k`-th largest scratch buffer of any operation
//! ([`Scratch::covering`]), so its bytes are at least, and often exactly, the largest scratch
//! of one operation. (The step records every operation once and submits that recording every
//! step, so scratch each operation took apart would all stay allocated.)
//!
//! **Held throughout.** The GPU step also holds, for all of it, its kernels' state (a
//! cross-entropy's per-row log-sum-exp, which its backward reads), the inputs its kernels read
//! uploaded with their index ([`TokenIds`]), its own small vectors (AdamW's step scalars, the
//! gradients' overflow flag) and its dispatches' parameter blocks, counted as a bound of a
//! kilobyte an operation ([`MemoryPlan::params_bytes`], which the step checks):
//! [`MemoryPlan::held_bytes`].
//!
//! **Peak.** [`MemoryPlan::peak_bytes`] is the sum of the buffers, the workspace and the bytes
//! held throughout: what the step allocates from the device's pool. The live peak — the most
//! bytes of tensors and scratch live at once, at one operation — is what any placement needs
//! at least; its breakdown by [`Category`] says what the memory holds there.
//!
//! [`recompute`] rewrites a graph so that cheap activations (and, if asked, attention's
//! probabilities) are computed again in the backward instead of kept.

mod assign;
pub(crate) mod held;
mod in_place;
mod recompute;

use std::fmt;

use fblayout_core::layout::LayoutError;
use fblayout_kernels::ops::{OpError, TokenIds};
use fblayout_kernels::runtime::{Scratch, granular};

use self::assign::assign;
use self::held::Held;
use crate::graph::{Graph, Role, Sizes, TensorId};
use crate::layouts::{LayoutChoice, StorageError, tensor_layouts};

pub use recompute::{Recompute, recompute};

/// How to plan.
///
/// ```
/// use fblayout_plan::memory::MemoryOptions;
///
/// let options = MemoryOptions::default().keeping(["logits"]);
/// assert!(options.reuse);
/// assert_eq!(options.keep, ["logits"]);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemoryOptions {
    /// Whether a tensor may take the buffer of a tensor that died (else every tensor has its
    /// own buffer).
    pub reuse: bool,
    /// The tensors, by name, kept readable to the end of the step besides the persistent
    /// tensors, the loss and the gradients (see the module docs): what a forward-only step
    /// returns ([`CpuStep::evaluate`](crate::exec::CpuStep::evaluate)). A name that is no
    /// tensor of the graph, or of one no operation writes or reads, is an error
    /// ([`MemoryError::Keep`]).
    pub keep: Vec<String>,
}

impl Default for MemoryOptions {
    /// Buffers are reused; nothing is kept beyond the step's results.
    fn default() -> Self {
        Self {
            reuse: true,
            keep: Vec::new(),
        }
    }
}

impl MemoryOptions {
    /// These options, also keeping the tensors named `names` (see [`keep`](Self::keep)).
    pub fn keeping<I, S>(mut self, names: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.keep.extend(names.into_iter().map(Into::into));
        self
    }
}

/// What a tensor's bytes are for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Category {
    /// Trained parameters, and their copies in other element types (mixed precision's `f16`
    /// weights).
    Parameters,
    /// AdamW's moments.
    OptimizerState,
    /// Forward tensors: activations, normalisation statistics, attention probabilities, losses.
    Activations,
    /// Gradients.
    Gradients,
    /// The step's inputs (ids, positions, labels) and constant tables.
    Inputs,
    /// Kernels' scratch, taken from the step's workspace while an operation runs: the
    /// attention's scores (in its backward, the gradients of the probabilities and of the
    /// scores), laid out like its probabilities, the partial sums of row reductions (a bias's
    /// or a norm's weight gradients) and of products that split their reduction (see
    /// [`MemoryPlan::scratch`]).
    Workspace,
}

impl Category {
    /// Every category, in display order.
    pub const ALL: [Category; 6] = [
        Self::Parameters,
        Self::OptimizerState,
        Self::Activations,
        Self::Gradients,
        Self::Inputs,
        Self::Workspace,
    ];

    /// The category of a tensor of `role` (no tensor is workspace).
    pub fn of(role: Role) -> Self {
        match role {
            Role::Param | Role::Frozen | Role::ParamCopy { .. } => Self::Parameters,
            Role::State { .. } => Self::OptimizerState,
            Role::Activation | Role::Loss => Self::Activations,
            Role::Grad { .. } => Self::Gradients,
            Role::Input | Role::Constant => Self::Inputs,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Self::Parameters => "parameters",
            Self::OptimizerState => "optimizer state",
            Self::Activations => "activations",
            Self::Gradients => "gradients",
            Self::Inputs => "inputs",
            Self::Workspace => "workspace",
        }
    }
}

/// A buffer of a [`MemoryPlan`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct BufferId(u32);

impl BufferId {
    /// Its position in [`MemoryPlan::buffers`].
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

/// When a tensor is live: from operation `first` to operation `last` (positions in the graph's
/// order, both included).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Live {
    /// The operation that writes it (0 for a persistent tensor).
    pub first: usize,
    /// The last operation that reads it (the last operation for a persistent tensor or a
    /// result).
    pub last: usize,
}

impl Live {
    /// Whether the two ranges share an operation.
    pub fn overlaps(&self, other: &Live) -> bool {
        self.first <= other.last && other.first <= self.last
    }
}

/// Why a memory plan could not be made.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum MemoryError {
    /// The tensors' layouts could not be built.
    #[error(transparent)]
    Storage(#[from] StorageError),
    /// A tensor can't be bound to the run's sizes.
    #[error("tensor `{tensor}` at the run's sizes: {source}")]
    Bind {
        /// The tensor.
        tensor: String,
        /// Why.
        source: Box<LayoutError>,
    },
    /// A tensor to keep ([`MemoryOptions::keep`]) is not one the step computes.
    #[error("can't keep `{name}` to the end of the step: {detail}")]
    Keep {
        /// The name given.
        name: String,
        /// Why.
        detail: String,
    },
    /// An operation's kernels can't say how much scratch they take for its operands.
    #[error("the scratch of operation {node} (`{op}`): {source}")]
    Scratch {
        /// The node's position.
        node: usize,
        /// The operation.
        op: &'static str,
        /// The kernel's error.
        source: Box<OpError>,
    },
}

/// Every tensor's buffer and the step's peak memory (see the module docs).
#[derive(Debug, Clone, PartialEq)]
pub struct MemoryPlan {
    sizes: Sizes,
    nodes: usize,
    bytes: Vec<u64>,
    live: Vec<Option<Live>>,
    kept: Vec<bool>,
    category: Vec<Category>,
    buffer_of: Vec<Option<BufferId>>,
    buffers: Vec<u64>,
    freed: Vec<Vec<BufferId>>,
    /// Each operation's scratch, as its contract counts it.
    scratch: Vec<Scratch>,
    /// The buffers that lend every operation its scratch in turn.
    workspace: Scratch,
    /// What the step holds beside its buffers and workspace.
    held: Held,
    peak_live: u64,
    peak_at: usize,
    peak_op: String,
    breakdown: Vec<(Category, u64)>,
}

/// Plans the buffers of `graph`'s tensors, stored as `layouts`, for a run of `sizes`.
pub fn plan_memory(
    graph: &Graph,
    layouts: &[LayoutChoice],
    sizes: Sizes,
    options: MemoryOptions,
) -> Result<MemoryPlan, MemoryError> {
    let choices = layouts;
    let layouts = tensor_layouts(graph, choices)?;
    let whole = graph
        .ids()
        .map(|t| {
            let tensor = graph.tensor(t);
            layouts[t.index()]
                .bind(&tensor.run_extents(sizes))
                .map_err(|source| MemoryError::Bind {
                    tensor: tensor.name.clone(),
                    source: Box::new(source),
                })
        })
        .collect::<Result<Vec<_>, MemoryError>>()?;
    let bytes: Vec<u64> = graph
        .ids()
        .map(|t| whole[t.index()].len() * u64::from(graph.tensor(t).elem.size_bytes()))
        .collect();
    let unwritten = graph.is_unwritten();
    let keep = kept_tensors(graph, &options.keep, &unwritten)?;
    let (live, kept) = liveness(graph, &keep, &unwritten);
    let n = graph.nodes().len();
    let category: Vec<Category> = graph
        .tensors()
        .iter()
        .map(|t| Category::of(t.role))
        .collect();

    // An output written over its input takes the input's buffer (with reuse only).
    let pairs = if options.reuse {
        in_place::shared(graph, choices, &live, &kept, &bytes)
    } else {
        Vec::new()
    };
    let placed = in_place::placement_lives(&live, &pairs);
    let (buffers, mut buffer_of) = assign(graph, &placed, &bytes, options.reuse);
    for p in &pairs {
        buffer_of[p.output.index()] = buffer_of[p.input.index()];
    }
    let mut freed: Vec<Vec<BufferId>> = vec![Vec::new(); n];
    for t in graph.ids() {
        if let (Some(l), Some(b), false) =
            (placed[t.index()], buffer_of[t.index()], kept[t.index()])
        {
            freed[l.last].push(b);
        }
    }
    let counted = in_place::counted_lives(&live, &pairs);

    // The scratch and state of each operation, as its contract counts them.
    let tensor_bytes = |t: TensorId| bytes[t.index()];
    let mut scratch = Vec::with_capacity(n);
    let mut state = 0;
    let mut params = 0;
    for (i, node) in graph.nodes().iter().enumerate() {
        let shapes = crate::ops::shapes(graph, node, sizes, &tensor_bytes);
        let contract = node.op.contract();
        let s = contract
            .scratch(&shapes)
            .map_err(|source| MemoryError::Scratch {
                node: i,
                op: node.op.name(),
                source: Box::new(source),
            })?;
        scratch.push(s);
        state += contract.state_bytes(&shapes);
        params +=
            contract.dispatches(&shapes).max(held::DISPATCHES_PER_NODE) * held::PARAMS_PER_DISPATCH;
    }
    let uploads = graph
        .ids()
        .filter_map(|t| {
            let (_, rows) = crate::ops::uploaded_ids(graph, &whole, t)?;
            Some(TokenIds::bytes(whole[t.index()].logical_len() as u32, rows))
        })
        .sum();
    let held = Held {
        state,
        uploads,
        vectors: held::step_vectors_bytes(graph),
        params,
    };

    // The live peak, from the ranges.
    let mut delta = vec![0i128; n + 1];
    for (i, s) in scratch.iter().enumerate() {
        delta[i] += i128::from(s.bytes());
        delta[i + 1] -= i128::from(s.bytes());
    }
    for t in graph.ids() {
        if let Some(l) = counted[t.index()] {
            delta[l.first] += i128::from(bytes[t.index()]);
            delta[l.last + 1] -= i128::from(bytes[t.index()]);
        }
    }
    let (mut running, mut peak_live, mut peak_at) = (0i128, 0u64, 0usize);
    for (i, d) in delta.iter().take(n).enumerate() {
        running += d;
        if running as u64 > peak_live {
            peak_live = running as u64;
            peak_at = i;
        }
    }
    let breakdown = Category::ALL
        .iter()
        .map(|&c| {
            if c == Category::Workspace {
                return (c, scratch.get(peak_at).map_or(0, Scratch::bytes));
            }
            let sum = graph
                .ids()
                .filter(|t| category[t.index()] == c)
                .filter(|t| {
                    counted[t.index()].is_some_and(|l| l.first <= peak_at && peak_at <= l.last)
                })
                .map(|t| bytes[t.index()])
                .sum();
            (c, sum)
        })
        .collect();
    Ok(MemoryPlan {
        sizes,
        nodes: n,
        bytes,
        live,
        kept,
        category,
        buffer_of,
        buffers,
        freed,
        workspace: Scratch::covering(&scratch),
        scratch,
        held,
        peak_live,
        peak_at,
        peak_op: graph
            .nodes()
            .get(peak_at)
            .map_or_else(String::new, |node| node.op.name().to_owned()),
        breakdown,
    })
}

/// The tensors `names` name, each one some operation writes or reads and a kernel writes (see
/// [`MemoryOptions::keep`]; `unwritten` is [`Graph::is_unwritten`]).
fn kept_tensors(
    graph: &Graph,
    names: &[String],
    unwritten: &[bool],
) -> Result<Vec<TensorId>, MemoryError> {
    names
        .iter()
        .map(|name| {
            let refused = |detail: &str| MemoryError::Keep {
                name: name.clone(),
                detail: detail.to_owned(),
            };
            let t = graph
                .find(name)
                .ok_or_else(|| refused("the graph has no tensor of that name"))?;
            let touched = graph
                .nodes()
                .iter()
                .any(|n| n.inputs.contains(&t) || n.outputs.contains(&t));
            if !touched {
                return Err(refused("no operation of the graph writes or reads it"));
            }
            if unwritten[t.index()] {
                return Err(refused(
                    "the product that makes it does the work of the operation that reads it, \
                     and writes that operation's output instead: keep that output",
                ));
            }
            Ok(t)
        })
        .collect()
}

/// Every tensor's live range (`None` for one no operation touches, or no kernel writes:
/// `unwritten`, [`Graph::is_unwritten`]) and whether it is kept to the end of the step
/// (persistent tensors, results, and the tensors of `keep`).
fn liveness(
    graph: &Graph,
    keep: &[TensorId],
    unwritten: &[bool],
) -> (Vec<Option<Live>>, Vec<bool>) {
    let n = graph.nodes().len();
    let end = n.saturating_sub(1);
    let mut first: Vec<Option<usize>> = vec![None; graph.tensors().len()];
    let mut last: Vec<Option<usize>> = vec![None; graph.tensors().len()];
    // A bias, sum or activation's backward folded into the product before it is done where
    // that product runs (the GPU's epilogue; the CPU executor runs it right after the
    // product): its operands are touched there.
    let mut at: Vec<usize> = (0..n).collect();
    for (i, fold) in graph.epilogues().into_iter().enumerate() {
        if let Some(j) = fold {
            at[j] = i;
        }
    }
    for (k, node) in graph.nodes().iter().enumerate() {
        let i = at[k];
        for &t in node.inputs.iter().chain(&node.outputs) {
            let (f, l) = (&mut first[t.index()], &mut last[t.index()]);
            *f = Some(f.map_or(i, |f| f.min(i)));
            *l = Some(l.map_or(i, |l| l.max(i)));
        }
    }
    let results: Vec<TensorId> = graph
        .params()
        .iter()
        .filter_map(|&p| graph.grad(p))
        .collect();
    let mut live = Vec::with_capacity(first.len());
    let mut kept = Vec::with_capacity(first.len());
    for t in graph.ids() {
        let tensor = graph.tensor(t);
        let persistent = tensor.is_persistent();
        let stays =
            persistent || tensor.role == Role::Loss || results.contains(&t) || keep.contains(&t);
        kept.push(stays);
        live.push(match (first[t.index()], last[t.index()]) {
            _ if unwritten[t.index()] => None,
            _ if persistent => Some(Live {
                first: 0,
                last: end,
            }),
            (Some(f), Some(l)) => Some(Live {
                first: f,
                last: if stays { end } else { l },
            }),
            _ => None,
        });
    }
    (live, kept)
}

impl MemoryPlan {
    /// The bytes of every buffer, of the workspace and of what the step holds besides
    /// ([`held_bytes`](Self::held_bytes)) together: the memory the step allocates.
    pub fn peak_bytes(&self) -> u64 {
        self.buffers.iter().sum::<u64>() + self.workspace_bytes() + self.held.bytes()
    }

    /// The bytes of the workspace that lends every operation its scratch (see the module
    /// docs and [`Category::Workspace`]).
    pub fn workspace_bytes(&self) -> u64 {
        self.workspace.bytes()
    }

    /// The workspace's buffers (see the module docs).
    pub fn workspace(&self) -> &Scratch {
        &self.workspace
    }

    /// The scratch operation `node`'s kernels take while it runs, as its contract counts it
    /// (none for a position past the graph's operations).
    pub fn scratch(&self, node: usize) -> &Scratch {
        const NONE: &Scratch = &Scratch::none();
        self.scratch.get(node).unwrap_or(NONE)
    }

    /// The bytes the GPU step holds from when it is built to its end beside its buffers and
    /// workspace: its kernels' state, its uploaded inputs' indices, its own vectors and a bound
    /// on its parameter blocks (see the module docs).
    pub fn held_bytes(&self) -> u64 {
        self.held.bytes()
    }

    /// The bytes of parameter blocks it counts for the step's dispatches: a bound, the part of
    /// [`held_bytes`](Self::held_bytes) the GPU step checks its recording against.
    pub fn params_bytes(&self) -> u64 {
        self.held.params
    }

    /// The most bytes of tensors and scratch live at one operation: what any placement needs
    /// at least.
    pub fn peak_live_bytes(&self) -> u64 {
        self.peak_live
    }

    /// The position of the operation where the live peak is.
    pub fn peak_at(&self) -> usize {
        self.peak_at
    }

    /// The bytes live at the peak, by category (every category, in [`Category::ALL`] order).
    pub fn breakdown(&self) -> &[(Category, u64)] {
        &self.breakdown
    }

    /// The bytes of every tensor of `category`, live or not: what the step would need without
    /// reuse.
    pub fn total_bytes(&self, category: Category) -> u64 {
        self.category
            .iter()
            .zip(&self.bytes)
            .filter(|(c, _)| **c == category)
            .map(|(_, b)| b)
            .sum()
    }

    /// The size in bytes of every buffer, by [`BufferId::index`].
    pub fn buffers(&self) -> &[u64] {
        &self.buffers
    }

    /// The buffer of tensor `t` (`None` for a tensor no operation touches).
    pub fn buffer_of(&self, t: TensorId) -> Option<BufferId> {
        self.buffer_of.get(t.index()).copied().flatten()
    }

    /// The bytes of tensor `t` in its layout, padding included.
    pub fn bytes(&self, t: TensorId) -> u64 {
        self.bytes[t.index()]
    }

    /// When tensor `t` is live.
    pub fn live(&self, t: TensorId) -> Option<Live> {
        self.live.get(t.index()).copied().flatten()
    }

    /// Whether tensor `t`'s values survive the step (persistent tensors, the loss, the
    /// parameters' gradients, the tensors [`MemoryOptions::keep`] names).
    pub fn kept(&self, t: TensorId) -> bool {
        self.kept.get(t.index()).copied().unwrap_or(false)
    }

    /// The buffers that are free after operation `node` (their tensors were read for the last
    /// time there).
    pub fn freed_after(&self, node: usize) -> &[BufferId] {
        self.freed.get(node).map_or(&[], Vec::as_slice)
    }

    /// The run's sizes.
    pub fn sizes(&self) -> Sizes {
        self.sizes
    }

    /// Checks the plan was made for a graph of `graph`'s tensors and operations and for `sizes`.
    pub fn check_fits(&self, graph: &Graph, sizes: Sizes) -> Result<(), String> {
        if graph.tensors().len() != self.bytes.len() || graph.nodes().len() != self.nodes {
            return Err(format!(
                "it was made for {} tensors and {} operations, the graph has {} and {}",
                self.bytes.len(),
                self.nodes,
                graph.tensors().len(),
                graph.nodes().len()
            ));
        }
        if sizes != self.sizes {
            return Err(format!(
                "it was made for batch {} × seq {}, the run is batch {} × seq {}",
                self.sizes.batch, self.sizes.seq, sizes.batch, sizes.seq
            ));
        }
        Ok(())
    }
}

/// `bytes` in MiB, to two places.
fn mib(bytes: u64) -> String {
    format!("{:.2} MiB", bytes as f64 / (1024.0 * 1024.0))
}

impl fmt::Display for MemoryPlan {
    /// The peak, the buffers, and the live peak by category, in bytes and MiB.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let alone = self
            .live
            .iter()
            .zip(&self.bytes)
            .filter(|(l, _)| l.is_some())
            .map(|(_, &b)| granular(b))
            .sum::<u64>()
            + self.workspace_bytes()
            + self.held.bytes();
        writeln!(
            f,
            "memory at batch {} × seq {}: {} bytes ({}) in {} buffers, {} bytes of workspace in \
             {} and {} bytes held throughout; without reuse {} bytes ({})",
            self.sizes.batch,
            self.sizes.seq,
            self.peak_bytes(),
            mib(self.peak_bytes()),
            self.buffers.len(),
            self.workspace_bytes(),
            match self.workspace.buffers().len() {
                1 => "1 buffer".to_owned(),
                k => format!("{k} buffers"),
            },
            self.held.bytes(),
            alone,
            mib(alone),
        )?;
        writeln!(
            f,
            "live peak {} bytes ({}) at operation {} (`{}`):",
            self.peak_live,
            mib(self.peak_live),
            self.peak_at,
            self.peak_op
        )?;
        for (c, b) in &self.breakdown {
            writeln!(f, "  {:<16} {:>12} bytes  {:>12}", c.name(), b, mib(*b))?;
        }
        Ok(())
    }
}
