//! Which attentions keep their probabilities: chosen per layer, by predicted time and by
//! memory.
//!
//! A materialised attention stores its probabilities `[batch, heads, seq, seq]` from the
//! forward to the backward and multiplies on the fastest products the device has; a fused one
//! ([`Op::FusedAttention`]) keeps one number per query and
//! computes the scores again in the backward. [`choose`] plans the step both ways with the
//! same cost model and strategy, and asks the memory planner for both peaks:
//!
//! - where every attention fused is predicted no slower, all are fused (less memory too), as
//!   long as the model's attention kernels were timed at the graph's head size (the fused
//!   kernels' speed against the materialised ones' changes with it: [`Reason::Unmeasured`]);
//! - else, where no budget is given or the materialised step fits it, none is;
//! - else the fewest layers are fused, first layers first, that bring the peak under the
//!   budget (each saves about the same: every layer's probabilities are alive where the
//!   backward starts, the step's peak);
//! - and where even every attention fused is over the budget, that is an error naming both.
//!
//! The prediction is the cost model's ([`CostModel`]), as for the layouts; BENCHMARKS.md
//! records how it compares with the measured steps.

use super::{CostModel, Plan, PlanError, Strategy, plan};
use crate::graph::{Graph, GraphError, NodeId, Sizes};
use crate::memory::{MemoryError, MemoryOptions, plan_memory};

/// Why [`choose`] chose as it did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reason {
    /// The graph has no materialised attention.
    NoAttention,
    /// Every attention fused is predicted no slower: all are fused.
    FusedFaster,
    /// Materialised is predicted faster and fits (or nothing limits memory): none is fused.
    MaterialisedFaster,
    /// Materialised is predicted faster but is over the budget: the fewest layers that fit
    /// are fused.
    Budget,
    /// Not chosen: every attention or none, as asked ([`plan_fusing`]).
    Asked,
    /// The model's attention kernels were timed at another head size (or one not known) than
    /// the graph's: its prediction of the fused attention against the materialised one is not
    /// trusted, so none is fused where the step fits. The fused kernels' speed against the
    /// materialised attention's changes with the head size: on an H100 they ran 1.9× its speed
    /// at heads of 32 and 128 tokens, and at heads of 64 and 512 tokens 1.3× before their loads
    /// were overlapped, which took them 1.4–1.6× faster again; heads past 64 run them on shader
    /// cores. The reference device has tables timed at heads of 32, 64 and 128
    /// ([`CostModel::analytic_for_graph`] picks the graph's).
    Unmeasured,
}

/// Which attentions a step fuses: what a user asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Fusing {
    /// None: every attention stores its probabilities.
    #[default]
    Materialised,
    /// Every one.
    Fused,
    /// Each layer as the planner chooses ([`choose`]), the step's peak within `budget` bytes
    /// where one is given.
    Auto {
        /// The most bytes the step may hold at its peak.
        budget: Option<u64>,
    },
}

/// What [`choose`] (or [`plan_fusing`]) decided, with the plan of the chosen graph.
#[derive(Debug, Clone)]
pub struct Chosen {
    /// The plan of the graph with the chosen attentions fused.
    pub plan: Plan,
    /// The attentions fused: ids of forward operations in the graph [`choose`] was given (the
    /// plan's graph has its conversions inserted, so its ids differ).
    pub fused: Vec<NodeId>,
    /// The materialised attentions the graph had.
    pub attentions: usize,
    /// The predicted step, seconds: every attention materialised, and every one fused.
    pub predicted: [f64; 2],
    /// The memory plans' peaks, bytes, likewise.
    pub peaks: [u64; 2],
    /// The chosen step's peak, bytes.
    pub peak: u64,
    /// Why.
    pub reason: Reason,
}

impl std::fmt::Display for Chosen {
    /// One line: how many layers are fused and why, with both predictions and both peaks.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mib = |b: u64| b as f64 / f64::from(1 << 20);
        write!(
            f,
            "{} of {} attentions fused ({:?}): predicted step {:.3} ms materialised, {:.3} ms \
             fused; peak {:.1} MiB materialised, {:.1} MiB fused",
            self.fused.len(),
            self.attentions,
            self.reason,
            self.predicted[0] * 1e3,
            self.predicted[1] * 1e3,
            mib(self.peaks[0]),
            mib(self.peaks[1])
        )
    }
}

/// The plan of `graph` with the attentions `fusing` asks for fused: [`choose`] for
/// [`Fusing::Auto`], else every attention or none, planned once (the other way is not
/// priced: [`Chosen::predicted`] and [`Chosen::peaks`] hold the one plan's twice, and the
/// reason is [`Reason::Asked`]).
pub fn plan_fusing(
    graph: &Graph,
    sizes: Sizes,
    model: &CostModel,
    strategy: Strategy,
    fusing: Fusing,
) -> Result<Chosen, ChoiceError> {
    let fused = match fusing {
        Fusing::Auto { budget } => return choose(graph, sizes, model, strategy, budget),
        Fusing::Materialised => Vec::new(),
        Fusing::Fused => graph.attentions(),
    };
    let g = graph.with_fused_attention(&fused)?;
    let p = plan(&g, sizes, model, strategy)?;
    let peak = plan_memory(p.graph(), p.layouts(), sizes, MemoryOptions::default())?.peak_bytes();
    let t = p.cost();
    Ok(Chosen {
        plan: p,
        attentions: graph.attentions().len(),
        fused,
        predicted: [t, t],
        peaks: [peak, peak],
        peak,
        reason: Reason::Asked,
    })
}

/// Why [`choose`] could not choose.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ChoiceError {
    /// A plan could not be made.
    #[error(transparent)]
    Plan(#[from] PlanError),
    /// A memory plan could not be made.
    #[error(transparent)]
    Memory(#[from] MemoryError),
    /// Even with every attention fused, the step is over the budget.
    #[error(
        "the step needs {fused} bytes at its peak with every attention fused ({materialised} \
         with none), over the budget of {budget} bytes: a smaller batch or shorter sequences \
         would fit"
    )]
    OverBudget {
        /// The budget.
        budget: u64,
        /// The peak with every attention materialised.
        materialised: u64,
        /// The peak with every attention fused.
        fused: u64,
    },
}

impl From<GraphError> for ChoiceError {
    fn from(e: GraphError) -> Self {
        Self::Plan(PlanError::Graph(e))
    }
}

/// Chooses which of `graph`'s attentions to fuse (see the module docs) for a step of `sizes`
/// planned by `strategy` under `model`, its peak under `budget` bytes where one is given.
pub fn choose(
    graph: &Graph,
    sizes: Sizes,
    model: &CostModel,
    strategy: Strategy,
    budget: Option<u64>,
) -> Result<Chosen, ChoiceError> {
    let all = graph.attentions();
    let planned = |fused: &[NodeId]| -> Result<(Plan, u64), ChoiceError> {
        let g = graph.with_fused_attention(fused)?;
        let p = plan(&g, sizes, model, strategy)?;
        let peak =
            plan_memory(p.graph(), p.layouts(), sizes, MemoryOptions::default())?.peak_bytes();
        Ok((p, peak))
    };
    let (materialised, peak_m) = planned(&[])?;
    let chosen = |plan: Plan, fused: &[NodeId], peak, predicted, peaks, reason| Chosen {
        plan,
        fused: fused.to_vec(),
        attentions: all.len(),
        predicted,
        peaks,
        peak,
        reason,
    };
    if all.is_empty() {
        let t = materialised.cost();
        return Ok(chosen(
            materialised,
            &[],
            peak_m,
            [t, t],
            [peak_m; 2],
            Reason::NoAttention,
        ));
    }
    let (fused, peak_f) = planned(&all)?;
    let predicted = [materialised.cost(), fused.cost()];
    let peaks = [peak_m, peak_f];
    let fits = |peak: u64| budget.is_none_or(|b| peak <= b);
    if !fits(peak_f) {
        return Err(ChoiceError::OverBudget {
            budget: budget.unwrap_or(0),
            materialised: peak_m,
            fused: peak_f,
        });
    }
    let measured = graph
        .attention_head_dims()
        .iter()
        .all(|&d| d.is_some() && model.attention_head_dim() == d);
    if measured && predicted[1] <= predicted[0] {
        return Ok(chosen(
            fused,
            &all,
            peak_f,
            predicted,
            peaks,
            Reason::FusedFaster,
        ));
    }
    if fits(peak_m) {
        let reason = if measured {
            Reason::MaterialisedFaster
        } else {
            Reason::Unmeasured
        };
        return Ok(chosen(materialised, &[], peak_m, predicted, peaks, reason));
    }
    // Over the budget: the fewest layers, estimated from what each saves, then more until
    // the plan fits (it does with all of them).
    let budget = budget.unwrap_or(u64::MAX);
    let each = (peak_m - peak_f.min(peak_m)) as f64 / all.len() as f64;
    let mut k = (((peak_m - budget) as f64 / each.max(1.0)).ceil() as usize).clamp(1, all.len());
    loop {
        if k == all.len() {
            return Ok(chosen(
                fused,
                &all,
                peak_f,
                predicted,
                peaks,
                Reason::Budget,
            ));
        }
        let (p, peak) = planned(&all[..k])?;
        if peak <= budget {
            return Ok(chosen(p, &all[..k], peak, predicted, peaks, Reason::Budget));
        }
        k += 1;
    }
}
