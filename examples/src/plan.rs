//! `fblayout plan`: the layout and memory plan of a shipped model, explained.
//!
//! It builds the training graph of the encoder or the decoder ([`models::build`]), plans every
//! tensor's layout under all four strategies ([`select::plan`]) with the analytic cost model
//! or, with `--calibrate`, the model calibrated on the GPU in the step's precision (cached on
//! disk, [`CostModel::calibrated_at`]), plans each plan's buffers ([`plan_memory`]), and prints:
//!
//! - the cost model's factors and where they come from;
//! - one line per strategy: its predicted step, its conversions and its peak memory, so that
//!   the chosen strategy's lead is seen;
//! - the chosen plan's explanation (its `Display`: every tensor's layout and its cost under
//!   each candidate, the conversions) and its memory plan (the peak and its breakdown), and
//!   with `--recompute` the memory plan with cheap activations recomputed;
//! - with `--tensor NAME`, instead of the explanation and the memory plans, only why that
//!   tensor has its layout: the operations touching it, and its cost under each candidate (of
//!   it and its gradient together, which share one layout); an unknown name is an error that
//!   lists the names close to it;
//! - with `--svg FILE`, the plan drawn as SVG, written atomically (a temporary file in the same
//!   directory, then renamed): an overview (the first block's operations in full, then a strip
//!   per block showing every tensor's layout and the conversions), or with `--svg-table` every
//!   operation of the step as a row.

use std::path::PathBuf;

use fblayout_core::typed::suggest::closest;
use fblayout_kernels::runtime::{Gpu, GpuError, default_cache_dir};
use fblayout_plan::calibrate::{self, CalibrationError};
use fblayout_plan::graph::precision::Precision;
use fblayout_plan::graph::{GraphError, Sizes, TensorId};
use fblayout_plan::memory::{
    MemoryError, MemoryOptions, MemoryPlan, Recompute, plan_memory, recompute,
};
use fblayout_plan::models::{self, Model, ModelConfig};
use fblayout_plan::select::attention::Fusing;
use fblayout_plan::select::{self, CostModel, Plan, PlanError, Strategy};

use crate::device::PrecisionArg;
use crate::sizes;
use crate::summary::{seconds, summary_line};

/// Which shipped model to plan.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum ModelArg {
    /// BERT-style: post-LayerNorm blocks, bidirectional attention.
    Encoder,
    /// GPT-style: pre-LayerNorm blocks, causal attention.
    Decoder,
}

impl ModelArg {
    fn model(self) -> Model {
        match self {
            Self::Encoder => Model::Encoder,
            Self::Decoder => Model::Decoder,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Self::Encoder => "encoder",
            Self::Decoder => "decoder",
        }
    }
}

/// A strategy by the name it prints with (`row-major`, `per-op`, `guided`, `optimal`).
fn parse_strategy(name: &str) -> Result<Strategy, String> {
    Strategy::ALL
        .into_iter()
        .find(|s| s.to_string() == name)
        .ok_or_else(|| {
            let names: Vec<String> = Strategy::ALL.iter().map(Strategy::to_string).collect();
            format!(
                "no strategy `{name}`; the strategies are {}",
                names.join(", ")
            )
        })
}

/// Show the layout plan and the memory plan of a shipped model's training step.
#[derive(clap::Args, Debug)]
pub(crate) struct PlanArgs {
    /// The model.
    #[arg(long, value_enum, default_value_t = ModelArg::Encoder)]
    model: ModelArg,
    /// Blocks.
    #[arg(long, default_value_t = ModelConfig::MINI.layers)]
    layers: u32,
    /// Hidden size (a multiple of --heads).
    #[arg(long, default_value_t = ModelConfig::MINI.hidden)]
    hidden: u32,
    /// Attention heads.
    #[arg(long, default_value_t = ModelConfig::MINI.heads)]
    heads: u32,
    /// Feed-forward size.
    #[arg(long, default_value_t = ModelConfig::MINI.ffn)]
    ffn: u32,
    /// Vocabulary size.
    #[arg(long, default_value_t = ModelConfig::MINI.vocab)]
    vocab: u32,
    /// Position-table size (the longest sequence).
    #[arg(long, default_value_t = ModelConfig::MINI.max_positions)]
    max_positions: u32,
    /// Sequences per batch.
    #[arg(long, default_value_t = 32)]
    batch: u32,
    /// Tokens per sequence.
    #[arg(long, default_value_t = 128)]
    seq: u32,
    /// The step's precision: f32, or mixed (f16 activations and gradients, f32 master
    /// weights).
    #[arg(long, value_enum, default_value_t = PrecisionArg::F32)]
    precision: PrecisionArg,
    /// Fuse the language-model head with its cross-entropy, making the logits this many
    /// tokens at a time instead of storing them whole.
    #[arg(long, value_name = "TOKENS", value_parser = clap::value_parser!(u32).range(1..))]
    head_chunk: Option<u32>,
    /// Which attentions store their probabilities: `materialised` (all), `fused` (none: one
    /// log-sum-exp per query, the scores computed again in the backward), or `auto` (each
    /// layer as the planner chooses, by predicted time and by --memory-budget-mib).
    #[arg(long, value_enum, default_value_t = AttentionArg::Materialised)]
    attention: AttentionArg,
    /// The peak memory `--attention auto` must fit, MiB.
    #[arg(long, value_name = "MIB")]
    memory_budget_mib: Option<u64>,
    /// The strategy whose plan is shown: row-major, per-op, guided or optimal.
    #[arg(long, default_value = "guided", value_parser = parse_strategy)]
    strategy: Strategy,
    /// Calibrate the cost model on the GPU, in the step's precision (cached on disk per
    /// adapter, driver and precision, in FBLAYOUT_CACHE_DIR) instead of the analytic model.
    #[arg(long)]
    calibrate: bool,
    /// Also plan memory with activations recomputed in the backward: `cheap` (elementwise
    /// operations and normalisations) or `attention` (those and attention's probabilities).
    #[arg(long, value_name = "WHAT", num_args = 0..=1, default_missing_value = "cheap")]
    recompute: Option<Recompute>,
    /// Show only why this tensor has its layout: its cost under each candidate.
    #[arg(long, value_name = "NAME")]
    tensor: Option<String>,
    /// Write the plan drawn as SVG to this file: the first block in full and a strip per block.
    #[arg(long, value_name = "FILE")]
    svg: Option<PathBuf>,
    /// With --svg, draw every operation of the step as a row instead of the overview.
    #[arg(long, requires = "svg")]
    svg_table: bool,
}

/// Which attentions are fused (`--attention`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum AttentionArg {
    /// Every attention stores its probabilities.
    Materialised,
    /// No attention does.
    Fused,
    /// The planner chooses each layer.
    Auto,
}

impl AttentionArg {
    /// What the planner is asked for, with `--memory-budget-mib` (which only `auto` reads:
    /// with another choice it is an error, not ignored).
    pub(crate) fn fusing(self, budget_mib: Option<u64>) -> Result<Fusing, String> {
        match (self, budget_mib) {
            (Self::Auto, budget) => Ok(Fusing::Auto {
                budget: budget.map(|m| m.saturating_mul(1 << 20)),
            }),
            (_, Some(_)) => Err(
                "--memory-budget-mib is read by --attention auto, which chooses the layers to \
                 fuse"
                    .into(),
            ),
            (Self::Materialised, None) => Ok(Fusing::Materialised),
            (Self::Fused, None) => Ok(Fusing::Fused),
        }
    }
}

/// Why the plan command failed.
#[derive(Debug, thiserror::Error)]
pub(crate) enum PlanCommandError {
    /// A size is out of range.
    #[error("{0}")]
    Size(String),
    /// The model's graph could not be built.
    #[error("building the {model} graph: {source}")]
    Graph {
        /// The model.
        model: &'static str,
        /// What the graph said.
        #[source]
        source: GraphError,
    },
    /// No GPU for `--calibrate`.
    #[error("--calibrate needs a GPU: {0}")]
    Gpu(#[source] GpuError),
    /// Calibration failed.
    #[error("calibrating the cost model: {0}")]
    Calibrate(#[source] CalibrationError),
    /// A strategy's plan failed.
    #[error("the {strategy} plan: {source}")]
    Plan {
        /// The strategy.
        strategy: Strategy,
        /// What the planner said.
        #[source]
        source: PlanError,
    },
    /// Choosing the attentions failed (or nothing fits the budget).
    #[error("choosing which attentions to fuse: {0}")]
    Attention(#[source] select::attention::ChoiceError),
    /// A memory plan failed.
    #[error("the memory plan of the {strategy} plan: {source}")]
    Memory {
        /// The strategy.
        strategy: Strategy,
        /// What the memory planner said.
        #[source]
        source: MemoryError,
    },
    /// The recomputing rewrite failed.
    #[error("recomputing the activations of the {strategy} plan: {source}")]
    Recompute {
        /// The strategy.
        strategy: Strategy,
        /// What the rewrite said.
        #[source]
        source: GraphError,
    },
    /// `--tensor` names no tensor of the plan.
    #[error("no tensor `{name}` in the plan{}", close_list(.close))]
    UnknownTensor {
        /// The name asked for.
        name: String,
        /// Names close to it.
        close: Vec<String>,
    },
    /// The SVG could not be written.
    #[error("writing the SVG `{}`: {source}", path.display())]
    Svg {
        /// The file asked for.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// Printing failed (a closed pipe).
    #[error("printing the plan: {0}")]
    Print(#[source] std::io::Error),
}

fn close_list(close: &[String]) -> String {
    if close.is_empty() {
        String::new()
    } else {
        let names: Vec<String> = close.iter().map(|n| format!("`{n}`")).collect();
        format!("; close matches: {}", names.join(", "))
    }
}

/// The most close matches an unknown tensor's error lists.
const CLOSE_MATCHES: usize = 8;

/// Runs the plan command, printing to stdout.
pub(crate) fn run(args: &PlanArgs) -> Result<(), PlanCommandError> {
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    run_to(args, &mut out)
}

fn run_to(args: &PlanArgs, out: &mut dyn std::io::Write) -> Result<(), PlanCommandError> {
    let mut config = ModelConfig::new(args.vocab, args.hidden, args.heads)
        .with_max_positions(args.max_positions)
        .with_ffn(args.ffn)
        .with_layers(args.layers);
    if let Some(chunk) = args.head_chunk {
        config = config.with_head_chunk(chunk);
    }
    let sizes = Sizes {
        batch: args.batch,
        seq: args.seq,
    };
    check_sizes(config, sizes)?;
    let name = args.model.name();
    let graph = models::build(args.model.model(), config)
        .and_then(|g| Precision::from(args.precision).apply(&g))
        .map_err(|source| PlanCommandError::Graph {
            model: name,
            source,
        })?;
    let precision = Precision::from(args.precision);
    let model = if args.calibrate {
        let gpu = Gpu::new().map_err(PlanCommandError::Gpu)?;
        let cache = default_cache_dir();
        // The small calibration block, in the step's precision.
        let at = select::CalibrationShape {
            precision,
            ..select::CALIBRATION
        };
        // Measuring takes seconds (tens of them on a software adapter): say so before it
        // starts, where no cache file can spare it.
        let file = cache
            .as_deref()
            .map(|dir| calibrate::cache_path(dir, gpu.info(), &at));
        if !file.as_deref().is_some_and(std::path::Path::is_file) {
            let kept = match &file {
                Some(file) => format!(
                    "the factors are cached in {} for later runs",
                    file.display()
                ),
                None => "no cache directory: every run measures".to_owned(),
            };
            eprintln!("calibrating the cost model on {} ({kept})", gpu.info().name);
        }
        CostModel::calibrated_at(&gpu, cache.as_deref(), at).map_err(PlanCommandError::Calibrate)?
    } else {
        CostModel::analytic_for_graph(precision, &graph)
    };
    // Everything that can fail runs before anything is printed.
    let fusing = args
        .attention
        .fusing(args.memory_budget_mib)
        .map_err(PlanCommandError::Size)?;
    let c = select::attention::plan_fusing(&graph, sizes, &model, args.strategy, fusing)
        .map_err(PlanCommandError::Attention)?;
    let decision = matches!(fusing, Fusing::Auto { .. }).then(|| format!("attention: {c}\n"));
    let fused = c.fused;
    let graph = graph
        .with_fused_attention(&fused)
        .map_err(|source| PlanCommandError::Graph {
            model: name,
            source,
        })?;
    let chosen = select::plan(&graph, sizes, &model, args.strategy).map_err(|source| {
        PlanCommandError::Plan {
            strategy: args.strategy,
            source,
        }
    })?;
    let memory = memory_of(&chosen)?;
    let tensor = args
        .tensor
        .as_deref()
        .map(|name| find_tensor(&chosen, name))
        .transpose()?;
    let mut others = Vec::new();
    for strategy in Strategy::ALL {
        if strategy == args.strategy {
            continue;
        }
        others.push(match select::plan(&graph, sizes, &model, strategy) {
            Ok(p) => {
                let peak = memory_of(&p)?.peak_bytes();
                Ok((p, peak))
            }
            // The exact solver refuses graphs too entangled for it; the others still compare.
            Err(e @ PlanError::TooWide { .. }) => Err((strategy, e)),
            Err(source) => return Err(PlanCommandError::Plan { strategy, source }),
        });
    }
    let recomputed = if let Some(what) = args
        .recompute
        .filter(|&what| what != Recompute::Nothing && tensor.is_none())
    {
        let (g, layouts) = recompute(chosen.graph(), chosen.layouts(), what).map_err(|source| {
            PlanCommandError::Recompute {
                strategy: args.strategy,
                source,
            }
        })?;
        let again =
            plan_memory(&g, &layouts, sizes, MemoryOptions::default()).map_err(|source| {
                PlanCommandError::Memory {
                    strategy: args.strategy,
                    source,
                }
            })?;
        Some((what, g.nodes().len() - chosen.graph().nodes().len(), again))
    } else {
        None
    };
    if let Some(svg) = &args.svg {
        let drawing = if args.svg_table {
            chosen.svg_table()
        } else {
            chosen.svg()
        };
        fblayout_hf::files::write_atomically(svg, drawing.as_bytes()).map_err(|source| {
            PlanCommandError::Svg {
                path: svg.clone(),
                source,
            }
        })?;
    }

    let print = PlanCommandError::Print;
    writeln!(
        out,
        "fblayout plan: {name} of {} blocks, hidden {} ({} heads), feed-forward {}, vocabulary \
         {}; batch {} × sequence {}; {} tensors, {} operations\n",
        config.layers,
        config.hidden,
        config.heads,
        config.ffn,
        config.vocab,
        sizes.batch,
        sizes.seq,
        graph.tensors().len(),
        graph.nodes().len()
    )
    .map_err(print)?;
    writeln!(out, "{model}").map_err(print)?;
    if let Some(line) = &decision {
        writeln!(out, "{line}").map_err(print)?;
    }
    writeln!(
        out,
        "strategies: predicted step, conversions, peak memory (* = shown below)"
    )
    .map_err(print)?;
    let mut others = others.into_iter();
    for strategy in Strategy::ALL {
        let line = if strategy == args.strategy {
            summary_line(&chosen, memory.peak_bytes(), "*")
        } else {
            match others.next() {
                Some(Ok((p, peak))) => summary_line(&p, peak, " "),
                Some(Err((s, e))) => format!("  {:<10}   not solved: {e}", s.to_string()),
                None => continue,
            }
        };
        writeln!(out, "{line}").map_err(print)?;
    }
    writeln!(out).map_err(print)?;
    if let Some(t) = tensor {
        explain_tensor(&chosen, t, out).map_err(print)?;
    } else {
        write!(out, "{chosen}\n{memory}").map_err(print)?;
    }
    if let Some((what, operations, again)) = recomputed {
        let which = match what {
            Recompute::Attention => "cheap activations and attention",
            _ => "cheap activations",
        };
        write!(
            out,
            "\nwith {which} recomputed in the backward ({operations} operations run again):\n\
             {again}"
        )
        .map_err(print)?;
    }
    if let Some(svg) = &args.svg {
        writeln!(out, "\nthe plan's SVG is in {}", svg.display()).map_err(print)?;
    }
    Ok(())
}

/// Refuses sizes no graph or run can have, naming the flag.
fn check_sizes(config: ModelConfig, sizes: Sizes) -> Result<(), PlanCommandError> {
    sizes::check_sizes(config, sizes).map_err(PlanCommandError::Size)
}

/// The memory plan of `plan`, buffers reused.
fn memory_of(plan: &Plan) -> Result<MemoryPlan, PlanCommandError> {
    plan_memory(
        plan.graph(),
        plan.layouts(),
        plan.sizes(),
        MemoryOptions::default(),
    )
    .map_err(|source| PlanCommandError::Memory {
        strategy: plan.strategy(),
        source,
    })
}

/// The tensor of `plan` named `name`, or an error listing the names close to it: those that
/// contain it, then the closest spelling.
fn find_tensor(plan: &Plan, name: &str) -> Result<TensorId, PlanCommandError> {
    let g = plan.graph();
    if let Some(t) = g.find(name) {
        return Ok(t);
    }
    let names = || g.tensors().iter().map(|t| t.name.as_str());
    let lower = name.to_lowercase();
    let mut close: Vec<String> = names()
        .filter(|n| n.to_lowercase().contains(&lower))
        .take(CLOSE_MATCHES)
        .map(str::to_owned)
        .collect();
    if let Some(c) = closest(name, names())
        && !close.iter().any(|n| n == c)
    {
        close.insert(0, c.to_owned());
        close.truncate(CLOSE_MATCHES);
    }
    Err(PlanCommandError::UnknownTensor {
        name: name.to_owned(),
        close,
    })
}

/// Why `t` has its layout in `plan`: the operations touching it as planned, and what they
/// would cost under each candidate.
fn explain_tensor(plan: &Plan, t: TensorId, out: &mut dyn std::io::Write) -> std::io::Result<()> {
    let g = plan.graph();
    let tensor = g.tensor(t);
    let shape: Vec<String> = tensor
        .axes
        .iter()
        .map(|a| format!("{}={}", a.name, a.dim))
        .collect();
    let chosen = plan.layout(t);
    write!(
        out,
        "{} [{}] is {chosen} in the {} plan",
        tensor.name,
        shape.join(", "),
        plan.strategy()
    )?;
    if g.saved().contains(&t) {
        write!(
            out,
            " (saved: the forward writes it and the backward reads it again)"
        )?;
    }
    writeln!(out)?;
    if plan.is_copy(t) {
        for c in plan.conversions().iter().filter(|c| c.copy == t) {
            writeln!(
                out,
                "it is a copy the plan inserted: operation #{} converts `{}` from {} to {} for \
                 operation #{} {} ({})",
                c.node.index(),
                g.tensor(c.source).name,
                c.from,
                c.to,
                c.consumer.index(),
                g.nodes()[c.consumer.index()].op,
                seconds(c.cost)
            )?;
        }
        return Ok(());
    }
    // A gradient shares its tensor's layout, so the two are priced together.
    let mut group = vec![t];
    if let Some(grad) = g.grad(t) {
        group.push(grad);
        writeln!(
            out,
            "its gradient `{}` is stored like it (the backward kernels write a gradient through \
             its tensor's view), so each candidate below is priced for both",
            g.tensor(grad).name
        )?;
    }
    if let fblayout_plan::graph::Role::Grad { of } = tensor.role {
        group.push(of);
        writeln!(
            out,
            "it is the gradient of `{}` and is stored like it, so each candidate below is priced \
             for both",
            g.tensor(of).name
        )?;
    }
    writeln!(
        out,
        "\nthe operations touching it, with their whole predicted time as planned:"
    )?;
    for (i, node) in g.nodes().iter().enumerate() {
        if node
            .inputs
            .iter()
            .chain(&node.outputs)
            .any(|x| group.contains(x))
        {
            writeln!(
                out,
                "  #{i:<5} {:<40} {:>12}",
                node.op.to_string(),
                seconds(plan.node_costs()[i])
            )?;
        }
    }
    for c in plan
        .conversions()
        .iter()
        .filter(|c| group.contains(&c.source))
    {
        writeln!(
            out,
            "  #{:<5} conversion of `{}` from {} to {}, for #{} {:>12}",
            c.node.index(),
            g.tensor(c.source).name,
            c.from,
            c.to,
            c.consumer.index(),
            seconds(c.cost)
        )?;
    }
    let Some(candidates) = plan.candidates(t) else {
        return Ok(());
    };
    if candidates.costs.len() < 2 {
        writeln!(out, "\n{chosen} is its only candidate")?;
        return Ok(());
    }
    let own = candidates
        .costs
        .iter()
        .find(|c| c.0 == chosen)
        .map_or(0.0, |c| c.1);
    writeln!(
        out,
        "\nunder each candidate, the part of those operations' time that its layout decides \
         (every read, write and product of it; every other tensor as planned, conversions where \
         they pay):"
    )?;
    for &(layout, cost) in &candidates.costs {
        let versus = if layout == chosen {
            "chosen".to_owned()
        } else if cost >= own {
            format!("{} more", seconds(cost - own))
        } else {
            format!("{} less", seconds(own - cost))
        };
        writeln!(
            out,
            "  {:<14} {:>12}   {versus}",
            layout.to_string(),
            seconds(cost)
        )?;
    }
    Ok(())
}
