//! Plans cached per shape ([`PlanCache`]).

use std::collections::HashMap;

use super::{CostModel, Plan, PlanError, Strategy};
use crate::graph::{Graph, Sizes};
use crate::memory::{MemoryError, MemoryOptions, MemoryPlan, plan_memory};

/// Which shape a batch is planned at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Buckets {
    /// Its own sizes.
    Exact,
    /// Its batch size, and its sequence length rounded up to a power of two, at most `max_seq`
    /// (the model's positions, say); a longer sequence is an error.
    PowersOfTwo {
        /// The longest sequence planned.
        max_seq: u32,
    },
}

impl Buckets {
    /// The sizes a batch of `sizes` is planned and run at.
    pub fn sizes_for(self, sizes: Sizes) -> Result<Sizes, CacheError> {
        if sizes.batch == 0 || sizes.seq == 0 {
            return Err(CacheError::Empty(sizes));
        }
        match self {
            Self::Exact => Ok(sizes),
            Self::PowersOfTwo { max_seq } if sizes.seq > max_seq => {
                Err(CacheError::TooLong { sizes, max_seq })
            }
            Self::PowersOfTwo { max_seq } => Ok(Sizes {
                batch: sizes.batch,
                seq: sizes.seq.next_power_of_two().min(max_seq),
            }),
        }
    }
}

/// Why a shape could not be planned.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CacheError {
    /// A batch of no sequences, or of empty ones.
    #[error("batch {} × seq {}: nothing to plan", .0.batch, .0.seq)]
    Empty(Sizes),
    /// A sequence longer than the buckets go.
    #[error("seq {} is longer than the longest bucket, {max_seq}", .sizes.seq)]
    TooLong {
        /// The sizes asked for.
        sizes: Sizes,
        /// The longest sequence planned.
        max_seq: u32,
    },
    /// The layout plan failed.
    #[error(transparent)]
    Plan(#[from] PlanError),
    /// The memory plan failed.
    #[error(transparent)]
    Memory(#[from] MemoryError),
}

/// A shape's plans: the layouts (the graph with its conversions) and the buffers.
#[derive(Debug, Clone)]
pub struct Planned {
    plan: Plan,
    memory: MemoryPlan,
}

impl Planned {
    /// The layout plan: the executor takes `(plan.graph(), plan.layouts())`.
    pub fn plan(&self) -> &Plan {
        &self.plan
    }

    /// The memory plan of [`plan`](Self::plan)'s graph and layouts.
    pub fn memory(&self) -> &MemoryPlan {
        &self.memory
    }

    /// The sizes both were made for (a bucket's, where the cache buckets).
    pub fn sizes(&self) -> Sizes {
        self.memory.sizes()
    }
}

/// Plans cached per shape: a graph's layout plan ([`plan`](super::plan)) and memory plan
/// ([`plan_memory`]) are made for one run's sizes, so a padded batch of another length needs
/// its own. A [`PlanCache`] makes each once per shape and hands it out again for every later
/// batch of that shape; with [`Buckets::PowersOfTwo`] the sequence length is first rounded up
/// to a power of two (the caller pads its batch to [`Planned::sizes`]), so batches of many
/// lengths share a few plans.
///
/// ```
/// use fblayout_plan::graph::Sizes;
/// use fblayout_plan::memory::MemoryOptions;
/// use fblayout_plan::models::{Model, ModelConfig, build};
/// use fblayout_plan::select::{Buckets, CostModel, PlanCache, Strategy};
///
/// let config = ModelConfig::new(64, 32, 4).with_max_positions(16).with_ffn(64).with_layers(1);
/// let g = build(Model::Decoder, config)?;
/// let mut cache = PlanCache::new(g, CostModel::analytic(), Strategy::Guided)
///     .with_buckets(Buckets::PowersOfTwo { max_seq: 16 })
///     .with_memory(MemoryOptions::default().keeping(["head.lin"]));
/// let planned = cache.get(Sizes { batch: 2, seq: 11 })?;
/// assert_eq!(planned.sizes(), Sizes { batch: 2, seq: 16 }); // pad the batch to 16
/// cache.get(Sizes { batch: 2, seq: 13 })?; // the same bucket: planned once
/// assert_eq!(cache.plans_made(), 1);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone)]
pub struct PlanCache {
    graph: Graph,
    model: CostModel,
    strategy: Strategy,
    memory: MemoryOptions,
    buckets: Buckets,
    plans: HashMap<Sizes, Planned>,
}

impl PlanCache {
    /// Plans of `graph` under `model` by `strategy`, each shape exactly, with the default
    /// memory options.
    pub fn new(graph: Graph, model: CostModel, strategy: Strategy) -> Self {
        Self {
            graph,
            model,
            strategy,
            memory: MemoryOptions::default(),
            buckets: Buckets::Exact,
            plans: HashMap::new(),
        }
    }

    /// With shapes bucketed by `buckets` (the plans made so far are dropped).
    pub fn with_buckets(mut self, buckets: Buckets) -> Self {
        self.buckets = buckets;
        self.plans.clear();
        self
    }

    /// With memory planned under `options`, the tensors to keep, say (the plans made so far
    /// are dropped).
    pub fn with_memory(mut self, options: MemoryOptions) -> Self {
        self.memory = options;
        self.plans.clear();
        self
    }

    /// The plans of a batch of `sizes`, at its bucket's sizes ([`Planned::sizes`]): made the
    /// first time that shape is asked for, the same ones every later time.
    pub fn get(&mut self, sizes: Sizes) -> Result<&Planned, CacheError> {
        let at = self.buckets.sizes_for(sizes)?;
        if !self.plans.contains_key(&at) {
            let plan = super::plan(&self.graph, at, &self.model, self.strategy)?;
            let memory = plan_memory(plan.graph(), plan.layouts(), at, self.memory.clone())?;
            self.plans.insert(at, Planned { plan, memory });
        }
        Ok(&self.plans[&at])
    }

    /// How many shapes were planned: one per shape asked for, however often.
    pub fn plans_made(&self) -> usize {
        self.plans.len()
    }

    /// The graph planned.
    pub fn graph(&self) -> &Graph {
        &self.graph
    }
}
