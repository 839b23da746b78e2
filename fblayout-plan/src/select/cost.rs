//! The cost model: what reading, writing, multiplying and converting a tensor costs under a
//! layout, in predicted seconds.
//!
//! - **Bytes**: an operand moves its buffer once per walk, padding included (the layout's
//!   bound length times the element size), at the model's `bandwidth`.
//! - **Coalescing**: each walk (see [`access`](super::access)) is classified by the layout's
//!   memory order along the walked axis ([`Class`]) and its bytes are multiplied by that
//!   class's factor ([`ClassFactors`]), separately for plain walks and for reductions.
//! - **Arithmetic**: a matrix product's flops at the rate of its operands' classes along their
//!   shared axis ([`MatmulRates`]).
//! - **Conversions**: from `fblayout_core`'s classification
//!   ([`classify_layouts`](fblayout_core::layout::classify_layouts)): free costs nothing; an
//!   in-tile permutation reads and writes both buffers once at full bandwidth; a global copy
//!   moves its bytes at the factor of reading the source in the destination's order.
//! - **Dispatch**: every kernel launch (a conversion adds one) costs `dispatch` seconds.
//! - **Kernels**: each operand's bytes and a product's flops are multiplied by the factor that
//!   timing the real kernels under each layout fitted for the operation's kind, the operand and
//!   its layout ([`kernels`](super::kernels)).
//!
//! [`CostModel::analytic_for`] holds the factors of a reference device, an H100 as the
//! calibration measured it ([`Factors::reference`]);
//! [`CostModel::calibrated`](super::CostModel::calibrated) measures them on the actual adapter
//! (see [`calibrate`](crate::calibrate)).

use std::fmt;

use fblayout_core::layout::{BoundView, TensorLayout};

use super::kernels::KernelFactors;
use crate::graph::Graph;
use crate::graph::precision::Precision;

/// How a layout lays out the elements along a walked axis.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Class {
    /// Neighbours along the axis are neighbours in memory.
    Contiguous,
    /// Neighbours along the axis sit in one contiguous tile, 4 to 7 elements apart (the
    /// tile's runs along its inner axis).
    Tiled4,
    /// As `Tiled4`, with runs of 8 or more.
    Tiled8,
    /// Anything else: every neighbour in another memory transaction.
    Strided,
}

impl Class {
    /// Every class, in order.
    pub const ALL: [Class; 4] = [
        Class::Contiguous,
        Class::Tiled4,
        Class::Tiled8,
        Class::Strided,
    ];

    /// The class of a walk along an axis that is not contiguous, given the contiguous run
    /// (elements) that the tile holding its neighbours has along its inner axis (1 when the
    /// axis is not tiled).
    pub(crate) fn of_tile_run(run: u64) -> Class {
        match run {
            8.. => Class::Tiled8,
            4..=7 => Class::Tiled4,
            _ => Class::Strided,
        }
    }
}

impl fmt::Display for Class {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Contiguous => "contiguous",
            Self::Tiled4 => "tiled (runs of 4)",
            Self::Tiled8 => "tiled (runs of 8)",
            Self::Strided => "strided",
        })
    }
}

/// Multipliers of an access's bytes by [`Class`]; a contiguous access is 1 by definition.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ClassFactors {
    /// [`Class::Tiled4`].
    pub tiled4: f64,
    /// [`Class::Tiled8`].
    pub tiled8: f64,
    /// [`Class::Strided`].
    pub strided: f64,
}

impl ClassFactors {
    /// The multiplier of `class`.
    pub fn of(&self, class: Class) -> f64 {
        match class {
            Class::Contiguous => 1.0,
            Class::Tiled4 => self.tiled4,
            Class::Tiled8 => self.tiled8,
            Class::Strided => self.strided,
        }
    }
}

/// The arithmetic rate (flop/s) of a matrix product by the classes of its left and right
/// operands along the shared axis.
#[derive(Debug, Clone, PartialEq)]
pub struct MatmulRates {
    /// `(left, right, flop/s)`; a pair not listed falls back as [`MatmulRates::rate`] says.
    pub rates: Vec<(Class, Class, f64)>,
}

impl MatmulRates {
    /// The rate of `(a, b)`: the listed one; else that of `(b, a)` (a product and its
    /// transpose, `Cᵀ = Bᵀ·Aᵀ`, read the same tiles); else the separable estimate
    /// `rate(a, C) · rate(C, b) / rate(C, C)` (with `C` contiguous); else the slowest listed.
    pub fn rate(&self, a: Class, b: Class) -> f64 {
        let find = |x: Class, y: Class| {
            self.rates
                .iter()
                .find(|r| r.0 == x && r.1 == y)
                .or_else(|| self.rates.iter().find(|r| r.0 == y && r.1 == x))
                .map(|r| r.2)
        };
        let c = Class::Contiguous;
        find(a, b)
            .or_else(|| Some(find(a, c)? * find(c, b)? / find(c, c)?))
            .unwrap_or_else(|| self.rates.iter().map(|r| r.2).fold(f64::INFINITY, f64::min))
    }
}

/// Every factor of the model (see the module docs).
#[derive(Debug, Clone, PartialEq)]
pub struct Factors {
    /// Bytes per second of a contiguous copy, reads and writes counted.
    pub bandwidth: f64,
    /// Multipliers of plain walks.
    pub access: ClassFactors,
    /// Multipliers of walks that reduce along the walked axis.
    pub reduce: ClassFactors,
    /// Matrix-product rates.
    pub matmul: MatmulRates,
    /// Seconds per kernel launch.
    pub dispatch: f64,
    /// The multipliers fitted by timing the kernels under each layout (where one is missing,
    /// the term as the byte and flop counts have it).
    pub kernels: KernelFactors,
}

impl Factors {
    /// The reference device's factors for a step in `precision`, timed at heads of
    /// [`REFERENCE_HEAD_DIM`] ([`reference_at`](Self::reference_at)).
    pub fn reference(precision: Precision) -> Self {
        Self::reference_at(precision, REFERENCE_HEAD_DIM)
            .expect("the reference device has tables at its own head size")
    }

    /// The reference device's factors for a step in `precision`, their kernels timed at heads
    /// of `head_dim`: `None` where no table was (see [`REFERENCE_TABLES`]).
    pub fn reference_at(precision: Precision, head_dim: u32) -> Option<Self> {
        let tables = REFERENCE_TABLES.iter().find(|t| t.head_dim == head_dim)?;
        let text = match precision {
            Precision::F32 => tables.f32,
            Precision::Mixed => tables.mixed,
        };
        Some(super::text::decode(text.as_bytes()).unwrap_or_else(|why| {
            panic!("the reference device's {precision:?} factors at heads of {head_dim}: {why}")
        }))
    }

    /// Seconds to move `bytes` through a walk of `class`.
    pub fn walk(&self, bytes: u64, class: Class, reduce: bool) -> f64 {
        let factors = if reduce { &self.reduce } else { &self.access };
        bytes as f64 / self.bandwidth * factors.of(class)
    }

    /// Checks that every factor is a positive finite number (the dispatch may be 0).
    pub(crate) fn check(&self) -> Result<(), String> {
        let mut values = vec![
            ("bandwidth", self.bandwidth),
            ("access.tiled4", self.access.tiled4),
            ("access.tiled8", self.access.tiled8),
            ("access.strided", self.access.strided),
            ("reduce.tiled4", self.reduce.tiled4),
            ("reduce.tiled8", self.reduce.tiled8),
            ("reduce.strided", self.reduce.strided),
        ];
        values.extend(self.matmul.rates.iter().map(|r| ("matmul", r.2)));
        if let Some((name, v)) = values.iter().find(|(_, v)| !(v.is_finite() && *v > 0.0)) {
            return Err(format!("factor `{name}` is {v}, not a positive number"));
        }
        if self.matmul.rates.is_empty() {
            return Err("no matrix-product rate".into());
        }
        if !(self.dispatch.is_finite() && self.dispatch >= 0.0) {
            return Err(format!("the dispatch time {} is not a time", self.dispatch));
        }
        self.kernels.check()
    }
}

/// Where a model's factors come from.
#[derive(Debug, Clone, PartialEq)]
pub enum Origin {
    /// The reference device's ([`Factors::reference`]), for a step in `precision`.
    Analytic {
        /// The precision whose tables they are.
        precision: Precision,
        /// The head size the tables' attention kernels were timed at.
        head_dim: u32,
    },
    /// Measured on an adapter.
    Calibrated {
        /// The adapter and driver.
        adapter: String,
        /// Whether they were read from the cache or measured now, and why.
        cache: String,
    },
}

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Analytic {
                precision,
                head_dim,
            } => write!(
                f,
                "analytic cost model, the H100's {} at heads of {head_dim}, not checked on this \
                 adapter",
                precision_name(*precision)
            ),
            Self::Calibrated { adapter, cache } => write!(f, "calibrated on {adapter} ({cache})"),
        }
    }
}

/// The cost model the planner prices layouts with (see the module docs).
#[derive(Debug, Clone, PartialEq)]
pub struct CostModel {
    pub(crate) factors: Factors,
    pub(crate) origin: Origin,
    /// The head size at which its attention kernels were timed, where known.
    pub(crate) attention_head_dim: Option<u32>,
}

/// The head size of the reference device's default tables (the shipped encoder's: hidden 384
/// over 12 heads).
pub const REFERENCE_HEAD_DIM: u32 = 32;

/// One pair of the reference device's tables: each the cache's text
/// ([`encode`](crate::calibrate::encode)) of a calibration by the same
/// [`calibrate`](crate::calibrate) as `--calibrate` (format 8: the real kernels timed under
/// each layout, not gathers) on an NVIDIA H100 80GB HBM3 (Vulkan, driver 580.159.04), at one
/// block of the encoder, its attention timed materialised and fused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReferenceTables {
    /// The head size their attention kernels were timed at.
    pub head_dim: u32,
    /// The `f32` step's.
    pub f32: &'static str,
    /// The mixed-precision step's.
    pub mixed: &'static str,
    /// How their predictions compared with measured steps on the reference device.
    pub checked: &'static str,
}

/// The reference device's tables, by the head size their kernels were timed at:
///
/// - heads of 32: the shipped encoder's shape (hidden 384, 12 heads, feed-forward 1536,
///   vocabulary 30 522, batch 32 × 128), calibrated on 2026-12-06. In that lease the
///   predictions were within 14 % of every measured step of the shipped encoder and decoder,
///   materialised and fused, and put the fused attention ahead as the kernels' timestamps did
///   (its kernels then ran 64 rows a workgroup on shader cores; they have run 128 rows a
///   workgroup since, and on tensor cores since the twelfth session: the fused multipliers are
///   high, with the same sign) (`BENCHMARKS.md`, "Fused attention").
/// - heads of 64: SmolLM-135M's attention (hidden 576, 9 heads, feed-forward 1536, vocabulary
///   30 522, batch 8 × 512), calibrated on 2026-12-06 with the fused attention on tensor cores.
///   In that lease the predictions of six blocks at that shape were within 8 % of the measured
///   steps and ordered the two attentions as measured in each precision (`BENCHMARKS.md`,
///   "The planner's tables at heads of 64").
/// - heads of 128: the attention of Llama-2-7B-class models (hidden 1024, 8 heads, feed-forward
///   2816, vocabulary 30 522, batch 8 × 512), calibrated on 2026-12-07. In that lease the
///   predictions of six blocks at that shape were within 3 % of the four measured steps
///   (`f32` and mixed, materialised and fused) and put the materialised attention ahead in both
///   precisions, as measured: at heads of 128 the fused kernels run on shader cores
///   (`BENCHMARKS.md`, "The planner's tables at heads of 128").
pub const REFERENCE_TABLES: [ReferenceTables; 3] = [
    ReferenceTables {
        head_dim: 32,
        f32: include_str!("reference/h100-f32.txt"),
        mixed: include_str!("reference/h100-mixed.txt"),
        checked: "the predicted steps of the shipped encoder and decoder (row-major and guided, \
                  attention materialised and fused) were within 14 % of the measured ones",
    },
    ReferenceTables {
        head_dim: 64,
        f32: include_str!("reference/h100-f32-h64.txt"),
        mixed: include_str!("reference/h100-mixed-h64.txt"),
        checked: "the predicted steps of six encoder blocks at hidden 576, heads of 64 and 8 × 512 \
                  tokens (row-major, attention materialised and fused) were within 8 % of the \
                  measured ones",
    },
    ReferenceTables {
        head_dim: 128,
        f32: include_str!("reference/h100-f32-h128.txt"),
        mixed: include_str!("reference/h100-mixed-h128.txt"),
        checked: "the predicted steps of six encoder blocks at hidden 1024, heads of 128 and 8 × 512 \
                  tokens (row-major, attention materialised and fused) were within 3 % of the \
                  measured ones",
    },
];

impl CostModel {
    /// The analytic model of an `f32` step ([`analytic_for`](Self::analytic_for)).
    pub fn analytic() -> Self {
        Self::analytic_for(Precision::F32)
    }

    /// The analytic model with the reference device's factors for a step in `precision`:
    /// deterministic, for tests, snapshots and planning without an adapter.
    pub fn analytic_for(precision: Precision) -> Self {
        Self::analytic_at(precision, REFERENCE_HEAD_DIM)
            .expect("the reference device has tables at its own head size")
    }

    /// The analytic model with the reference device's tables timed at heads of `head_dim`,
    /// where there are some.
    fn analytic_at(precision: Precision, head_dim: u32) -> Option<Self> {
        Some(Self {
            factors: Factors::reference_at(precision, head_dim)?,
            origin: Origin::Analytic {
                precision,
                head_dim,
            },
            attention_head_dim: Some(head_dim),
        })
    }

    /// The analytic model for planning `graph` in `precision`: the reference device's tables
    /// timed at the head size of `graph`'s attentions where every attention has the same one
    /// and a table was timed at it ([`Factors::reference_at`]), else
    /// [`analytic_for`](Self::analytic_for)'s (whose attention kernels, timed at another head
    /// size, [`choose`](super::attention::choose) then does not trust).
    pub fn analytic_for_graph(precision: Precision, graph: &Graph) -> Self {
        let dims = graph.attention_head_dims();
        let shared = match dims.first() {
            Some(&Some(d)) if dims.iter().all(|&x| x == Some(d)) => Some(d),
            _ => None,
        };
        shared
            .and_then(|d| Self::analytic_at(precision, d))
            .unwrap_or_else(|| Self::analytic_for(precision))
    }

    /// A model with the given factors (fails when one is not a positive number).
    pub fn with_factors(factors: Factors, origin: Origin) -> Result<Self, super::PlanError> {
        factors
            .check()
            .map_err(|detail| super::PlanError::Factors { detail })?;
        Ok(Self {
            factors,
            origin,
            attention_head_dim: None,
        })
    }

    /// This model, its attention kernels said to be timed at heads of `head_dim` (what
    /// [`choose`](super::attention::choose) compares a graph's heads with before trusting its
    /// prediction of the fused attention against the materialised one).
    pub fn timed_at_head_dim(mut self, head_dim: u32) -> Self {
        self.attention_head_dim = Some(head_dim);
        self
    }

    /// The head size at which its attention kernels were timed (the reference device's for
    /// the analytic model, the calibration shape's for a calibrated one), where known.
    pub fn attention_head_dim(&self) -> Option<u32> {
        self.attention_head_dim
    }

    /// Its factors.
    pub fn factors(&self) -> &Factors {
        &self.factors
    }

    /// Where they come from.
    pub fn origin(&self) -> &Origin {
        &self.origin
    }
}

/// The analytic model's reference device.
const REFERENCE: &str = "reference device: H100";

/// What the analytic model's output says of the predictions of the tables timed at heads of
/// `head_dim`: they were checked on the reference device ([`ReferenceTables::checked`]), not on
/// the adapter that will run the plan.
fn unchecked(head_dim: u32) -> String {
    let checked = REFERENCE_TABLES
        .iter()
        .find(|t| t.head_dim == head_dim)
        .map_or(
            "its predictions were not compared with measured steps",
            |t| t.checked,
        );
    format!(
        "  not checked on this adapter: on the reference device itself, {checked} \
         (BENCHMARKS.md); `--calibrate` measures the kernels on this adapter"
    )
}

/// `precision` as the model's output names it.
fn precision_name(precision: Precision) -> &'static str {
    match precision {
        Precision::F32 => "f32 tables",
        Precision::Mixed => "mixed-precision tables",
    }
}

impl fmt::Display for CostModel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let x = &self.factors;
        match &self.origin {
            Origin::Analytic {
                precision,
                head_dim,
            } => {
                let tables = precision_name(*precision);
                writeln!(
                    f,
                    "cost model: analytic ({REFERENCE}, {tables} at heads of {head_dim})"
                )?;
                writeln!(f, "{}", unchecked(*head_dim))?;
            }
            Origin::Calibrated { adapter, cache } => {
                writeln!(f, "cost model: calibrated on {adapter} ({cache})")?;
            }
        }
        writeln!(
            f,
            "  bandwidth {:.1} GB/s, dispatch {:.2} µs",
            x.bandwidth / 1e9,
            x.dispatch * 1e6
        )?;
        for (name, c) in [("access", x.access), ("reduce", x.reduce)] {
            writeln!(
                f,
                "  {name}: tiled4 {:.2}×, tiled8 {:.2}×, strided {:.2}×",
                c.tiled4, c.tiled8, c.strided
            )?;
        }
        let rates: Vec<String> = x
            .matmul
            .rates
            .iter()
            .map(|(a, b, r)| format!("{}·{} {:.3}", short(*a), short(*b), r / 1e12))
            .collect();
        writeln!(f, "  matmul TFLOP/s: {}", rates.join(", "))?;
        if !x.kernels.multipliers.is_empty() {
            writeln!(
                f,
                "  kernel multipliers, activations | weights (rm / cm / rt4 / rt8):"
            )?;
            for kind in super::kernels::KernelKind::ALL {
                let row = |o| {
                    crate::layouts::LayoutChoice::candidates(2)
                        .into_iter()
                        .map(|l| format!("{:.2}", x.kernels.of(kind, o, l)))
                        .collect::<Vec<_>>()
                        .join(" / ")
                };
                use super::kernels::OperandKind::{Activation, Weight};
                writeln!(f, "    {kind}: {} | {}", row(Activation), row(Weight))?;
            }
        }
        Ok(())
    }
}

/// A class in two letters, for tables.
pub(crate) fn short(class: Class) -> &'static str {
    match class {
        Class::Contiguous => "C",
        Class::Tiled4 => "T4",
        Class::Tiled8 => "T8",
        Class::Strided => "S",
    }
}

/// The class of a walk along each axis of `layout` bound as `bound`, and its fastest axis.
///
/// An axis is contiguous when [`contiguous_run`](fblayout_core::expr::ValidIndexFn::contiguous_run)
/// proves aligned runs of 4 along it, or when neighbours along it are neighbours in memory at
/// these extents (a column-major first axis at a run-time extent: contiguous but not provably
/// aligned). A tiled axis that is not contiguous is [`Class::Tiled4`] or [`Class::Tiled8`] by
/// the tile's run along its other axes (its elements over its extent along this one); any
/// other axis is strided.
pub(crate) fn walk_classes(layout: &TensorLayout, bound: &BoundView) -> (Vec<Class>, usize) {
    let f = layout.view().simplified_fn().clone();
    let rank = layout.rank();
    let origin = vec![0u64; rank];
    let unit = |axis: usize| {
        if bound.shape()[axis] < 2 {
            return true;
        }
        let mut next = origin.clone();
        next[axis] = 1;
        matches!((bound.offset(&origin), bound.offset(&next)), (Some(a), Some(b)) if b == a + 1)
    };
    let classes = (0..rank)
        .map(|axis| {
            if f.contiguous_run(axis, 4) || unit(axis) {
                return Class::Contiguous;
            }
            let tile = u64::from(layout.axes()[axis].tile);
            if tile > 1 {
                Class::of_tile_run(layout.tile_elems() / tile)
            } else {
                Class::Strided
            }
        })
        .collect();
    let inner = (0..rank)
        .find(|&a| unit(a) && bound.shape()[a] > 1)
        .unwrap_or(rank.saturating_sub(1));
    (classes, inner)
}
