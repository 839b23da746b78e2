//! Layout selection: one layout for every tensor of a training graph, chosen for the graph
//! as a whole.
//!
//! Every tensor has candidate layouts ([`LayoutChoice::candidates`]: row-major, column-major,
//! R-Tiles of 4 and 8). Every operation reads and writes its operands along the axes its
//! kernel walks ([`access`]), and the [`CostModel`] says what that costs under each layout
//! ([`cost`]): bytes moved, coalescing along the walked axis, matrix-product rates, and the
//! conversions classified by `fblayout_core`. The costs add up to one [`Objective`] over the
//! layouts of all tensors ([`objective`]); the [`Strategy`] says how it is minimised:
//!
//! - [`Strategy::RowMajor`]: every tensor row-major, nothing converted — the unified layout;
//! - [`Strategy::PerOp`]: every operation picks the layouts best for itself alone; a tensor
//!   is stored as the first operation touching it wants, and a `Convert` goes before every
//!   consumer that wants it otherwise ([`per_op`]);
//! - [`Strategy::Guided`]: the paper's activation-guided selection — the saved activations
//!   first, then outward to their gradients and neighbours ([`guided`]);
//! - [`Strategy::Optimal`]: the exact minimum, by variable elimination ([`exact`]).
//!
//! Each returns a [`Plan`]: the graph rewritten with its conversions, every tensor's layout,
//! the cost of every operation, and for every tensor what it would cost under each candidate
//! — the explanation ([`explain`], and [`Plan::svg`]). The executor takes
//! `(plan.graph(), plan.layouts())`.
//!
//! A plan is made for one run's sizes; [`PlanCache`] makes one per shape (or per bucket of
//! sequence lengths) and reuses it for every later batch of that shape.
//!
//! [`CostModel::calibrated`] times the kernels of `fblayout-kernels` on the adapter to
//! measure the model's factors ([`calibrate`](crate::calibrate)), and times a training step under each layout
//! to fit a multiplier per kind of operation and layout that corrects the analytic terms
//! ([`kernels`]); both are cached on disk per adapter and driver.
//!
//! ```
//! use fblayout_plan::graph::Sizes;
//! use fblayout_plan::models::{Model, ModelConfig, build};
//! use fblayout_plan::select::{CostModel, Strategy, plan};
//!
//! let config = ModelConfig::new(64, 32, 4).with_max_positions(16).with_ffn(64).with_layers(1);
//! let g = build(Model::Encoder, config)?;
//! let sizes = Sizes { batch: 2, seq: 16 };
//! let model = CostModel::analytic();
//! let unified = plan(&g, sizes, &model, Strategy::RowMajor)?;
//! let guided = plan(&g, sizes, &model, Strategy::Guided)?;
//! assert!(guided.cost() <= unified.cost());
//! // Why is the attention's probabilities tensor stored the way it is?
//! let probs = guided.graph().find("l0.attn.probs").unwrap();
//! println!("{} is {}", guided.graph().tensor(probs).name, guided.layout(probs));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

pub mod access;
pub mod attention;
mod cache;
pub mod cost;
pub mod exact;
pub mod explain;
pub mod guided;
pub mod kernels;
pub mod objective;
pub mod per_op;
mod plan;
pub mod svg;
mod svg_overview;
pub(crate) mod text;

use std::fmt;

use fblayout_core::layout::{LayoutError, LayoutErrors};

use crate::graph::{Graph, GraphError, Sizes};
use crate::layouts::LayoutChoice;

pub use cache::{Buckets, CacheError, PlanCache, Planned};
pub use cost::{
    Class, ClassFactors, CostModel, Factors, MatmulRates, Origin, REFERENCE_HEAD_DIM,
    REFERENCE_TABLES, ReferenceTables,
};
pub use kernels::{CALIBRATION, CalibrationShape, KernelFactors, KernelKind, OperandKind};
pub use objective::Objective;
pub use plan::{Candidates, Inserted, Plan};

/// How a plan chooses layouts (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Strategy {
    /// Every tensor row-major, no conversions.
    RowMajor,
    /// Each operation's own best layouts, joined by conversions.
    PerOp,
    /// Activation-guided selection.
    Guided,
    /// The exact optimum of the objective.
    Optimal,
}

impl Strategy {
    /// Every strategy, in order.
    pub const ALL: [Strategy; 4] = [
        Strategy::RowMajor,
        Strategy::PerOp,
        Strategy::Guided,
        Strategy::Optimal,
    ];
}

impl fmt::Display for Strategy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::RowMajor => "row-major",
            Self::PerOp => "per-op",
            Self::Guided => "guided",
            Self::Optimal => "optimal",
        })
    }
}

/// Why a plan or a cost model could not be made.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PlanError {
    /// A candidate layout of a tensor could not be built.
    #[error("tensor `{tensor}` as {choice}: {source}")]
    Layouts {
        /// The tensor.
        tensor: String,
        /// The candidate.
        choice: LayoutChoice,
        /// What the layout checks said.
        #[source]
        source: Box<LayoutErrors>,
    },
    /// A layout of a tensor could not be bound at the run's sizes.
    #[error("tensor `{tensor}`: {source}")]
    Layout {
        /// The tensor.
        tensor: String,
        /// What binding said.
        #[source]
        source: Box<LayoutError>,
    },
    /// The rewritten graph could not be built.
    #[error("rewriting the graph with its conversions: {0}")]
    Graph(#[from] GraphError),
    /// An assignment of layouts given to the objective does not fit the graph.
    #[error("bad assignment of layouts: {detail}")]
    Assignment {
        /// What is wrong.
        detail: String,
    },
    /// The exact solver would need a table too large to hold.
    #[error(
        "the exact solver would need a table over {tensors} tensors ({entries} entries, more than \
         {limit}) when eliminating `{at}`; the graph is too entangled for exact selection"
    )]
    TooWide {
        /// The tensor being eliminated.
        at: String,
        /// The tensors of the table.
        tensors: usize,
        /// Its entries.
        entries: u128,
        /// The most the solver holds.
        limit: u128,
    },
    /// A cost factor is not a positive number.
    #[error("bad cost factors: {detail}")]
    Factors {
        /// Which one, and its value.
        detail: String,
    },
}

/// The plan of `graph` at `sizes` under `model` by `strategy`.
///
/// A [`Strategy::Guided`] plan also solves the exact optimum to report its gap
/// ([`Plan::gap`]); where the graph is too entangled for that, the gap is unknown. A
/// [`Strategy::Optimal`] plan fails with [`PlanError::TooWide`] there.
pub fn plan(
    graph: &Graph,
    sizes: Sizes,
    model: &CostModel,
    strategy: Strategy,
) -> Result<Plan, PlanError> {
    let objective = Objective::new(graph, sizes, model)?;
    let (assignment, reads) = match strategy {
        Strategy::RowMajor => {
            let all: Vec<LayoutChoice> = vec![LayoutChoice::RowMajor; graph.tensors().len()];
            let assignment = objective.assignment(&all)?;
            let reads = per_op::own_reads(&objective, &assignment);
            (assignment, Some(reads))
        }
        Strategy::PerOp => {
            let (assignment, reads) = per_op::choose(&objective);
            (assignment, Some(reads))
        }
        Strategy::Guided => (guided::choose(&objective), None),
        Strategy::Optimal => (exact::solve(&objective)?, None),
    };
    let optimum = match strategy {
        Strategy::Guided => match exact::solve(&objective) {
            Ok(best) => Some(objective.total(&best)),
            Err(PlanError::TooWide { .. }) => None,
            Err(e) => return Err(e),
        },
        Strategy::Optimal => Some(objective.total(&assignment)),
        _ => None,
    };
    plan::assemble(
        &objective,
        model,
        strategy,
        &assignment,
        reads.as_deref(),
        optimum,
    )
}
