//! Setting a run up: settings checked, the model loaded and planned, the data read, the
//! checkpoint restored.

use std::path::Path;
use std::time::Instant;

use fblayout_hf::ModelDir;
use fblayout_hf::config::ModelConfig;
use fblayout_plan::exec::{AdamWConfig, CpuStep, ExecError, GpuStep};
use fblayout_plan::graph::precision::Precision;
use fblayout_plan::graph::{Role, Sizes};
use fblayout_plan::memory::{MemoryOptions, Recompute, plan_memory, recompute};
use fblayout_plan::select::attention::{ChoiceError, Fusing, Reason};
use fblayout_plan::select::{self, CostModel, Strategy};

use super::executor::Executor;
use super::metrics::LOGITS;
use super::{CHECKPOINT_FILE, Task, TrainError, Trainer, TrainerBuilder, model};
use crate::checkpoint::{self, TrainState};
use crate::data::{self, DataPosition, Example, classify, text};

/// The layout strategy of a run on the CPU: the planner's activation-guided choice.
const CPU_STRATEGY: Strategy = Strategy::Guided;
/// The layout strategy of a run on the GPU: row-major, which measured faster on the H200 than
/// the earlier analytic cost model's guided plans; the refitted model's were checked on one
/// H100 only (see [`TrainerBuilder::strategy`]).
const GPU_STRATEGY: Strategy = Strategy::RowMajor;

/// An error of the executor while doing `what`.
pub(super) fn exec(what: &str) -> impl FnOnce(ExecError) -> TrainError + '_ {
    move |source| TrainError::Exec {
        what: what.to_owned(),
        source,
    }
}

/// Checks the settings' ranges.
fn check(s: &TrainerBuilder<'_>) -> Result<(), TrainError> {
    let bad = |what: &str| Err(TrainError::Setting(what.to_owned()));
    if s.steps == 0 {
        return bad("--steps must be at least 1");
    }
    if s.batch == 0 || s.seq == 0 || s.accumulate == 0 {
        return bad("--batch, --seq and --accumulate must be at least 1");
    }
    if !(s.lr.is_finite() && s.lr > 0.0) {
        return bad("--lr must be a positive number");
    }
    if !(s.weight_decay.is_finite() && s.weight_decay >= 0.0) {
        return bad("--weight-decay must be a number ≥ 0");
    }
    if s.clip.is_some_and(|c| !(c.is_finite() && c > 0.0)) {
        return bad("--clip must be a positive number");
    }
    if s.warmup > s.steps {
        return bad("--warmup can't be longer than --steps");
    }
    if s.head_chunk == Some(0) {
        return bad("--head-chunk must be at least 1");
    }
    if s.merge && s.lora.is_none() {
        return bad("--merge merges LoRA's adapters: it needs --lora");
    }
    if s.gpu.is_none() && s.precision == Precision::Mixed {
        return bad(
            "--precision mixed runs on the GPU (--device gpu): the CPU executor computes in f64",
        );
    }
    if let Err(e) = s.loss_scaling.check() {
        return bad(&format!("loss scaling: {e}"));
    }
    Ok(())
}

/// The ids a language model's data is joined and padded with: the end-of-text token between
/// documents (where the config names one), and the padding id (else that token, else 0).
fn special_ids(config: &ModelConfig) -> (Option<u32>, u32) {
    let eos = match config {
        ModelConfig::Gpt2(c) => c.eos_token_id.first().copied(),
        ModelConfig::Llama(c) => c.eos_token_id.first().copied(),
        ModelConfig::Bert(_) => None,
    };
    (eos, config.pad_token_id().or(eos).unwrap_or(0))
}

/// The language-modelling examples of `file`, `seq` tokens each.
fn lm_examples(file: &Path, dir: &ModelDir, seq: u32) -> Result<Vec<Example>, TrainError> {
    let (eos, pad) = special_ids(dir.config());
    let lines = text::read_text(file)?;
    let stream = text::tokenize(file, &lines, dir.tokenizer(), eos, pad)?;
    let examples = text::pack(&stream, seq as usize, pad);
    if examples.is_empty() {
        return Err(data::DataError::Empty {
            file: file.to_owned(),
            detail: format!("{} token(s): nothing to predict", stream.len()),
        }
        .into());
    }
    Ok(examples)
}

/// The classification examples of `file` for a head over `classes`, `seq` tokens each.
fn classify_examples(
    file: &Path,
    dir: &ModelDir,
    classes: &[String],
    seq: u32,
) -> Result<Vec<Example>, TrainError> {
    let records = data::read_classify(file, classes)?;
    let pad = special_ids(dir.config()).1;
    Ok(classify::encode(
        file,
        &records,
        dir.tokenizer(),
        seq as usize,
        pad,
    )?)
}

/// Sets a run up (see [`TrainerBuilder::build`]).
pub(super) fn build(s: TrainerBuilder<'_>) -> Result<Trainer<'_>, TrainError> {
    let started = Instant::now();
    check(&s)?;
    let dir = ModelDir::open(&s.model)?;
    let model = model::build(
        &dir,
        s.task,
        s.labels,
        s.lora.as_ref(),
        s.head_chunk,
        s.seed,
    )?;
    let graph = s.precision.apply(&model.graph).map_err(|source| {
        fblayout_hf::graph::GraphError::Graph {
            file: dir.dir().join(fblayout_hf::CONFIG_FILE),
            source,
        }
    })?;
    let sizes = Sizes {
        batch: s.batch,
        seq: s.seq,
    };
    let strategy = s.strategy.unwrap_or(match s.gpu {
        Some(_) => GPU_STRATEGY,
        None => CPU_STRATEGY,
    });
    let chosen = select::attention::plan_fusing(
        &graph,
        sizes,
        &CostModel::analytic_for_graph(s.precision, &graph),
        strategy,
        s.attention.unwrap_or(match s.gpu {
            Some(_) => Fusing::Auto { budget: None },
            None => Fusing::Materialised,
        }),
    )
    .map_err(|e| match e {
        ChoiceError::Plan(e) => TrainError::Plan(e),
        ChoiceError::Memory(e) => TrainError::Memory(e),
        other => TrainError::Attention(other),
    })?;
    // The attention's choice, for the plan's summary.
    let attention = match chosen.reason {
        Reason::NoAttention => None,
        Reason::Asked => Some(format!(
            "attention: {} of {} attentions fused (as set, not chosen)",
            chosen.fused.len(),
            chosen.attentions
        )),
        _ => Some(format!("attention: {chosen}")),
    };
    let plan = chosen.plan;
    let recomputed = if s.recompute == Recompute::Nothing {
        None
    } else {
        let graph_error = |source| fblayout_hf::graph::GraphError::Graph {
            file: dir.dir().join(fblayout_hf::CONFIG_FILE),
            source,
        };
        Some(recompute(plan.graph(), plan.layouts(), s.recompute).map_err(graph_error)?)
    };
    // The graph that runs, and its layouts: the plan's, or the plan's with activations made
    // again in the backward.
    let (run, layouts) = match &recomputed {
        Some((g, l)) => (g, &l[..]),
        None => (plan.graph(), plan.layouts()),
    };
    // A classifier's evaluation reads the logits back for its accuracy.
    let kept = (s.task == Task::Classify).then_some(LOGITS);
    let memory = plan_memory(run, layouts, sizes, MemoryOptions::default().keeping(kept))?;
    let adamw = AdamWConfig {
        lr: s.lr as f32,
        weight_decay: s.weight_decay as f32,
        ..AdamWConfig::default()
    };
    let (mut step, device) = match s.gpu {
        None => {
            let cpu = CpuStep::new(run, layouts, &memory, sizes, adamw)
                .map_err(exec("building the CPU step"))?;
            (
                Executor::Cpu(Box::new(cpu)),
                "the CPU executor (f64)".to_owned(),
            )
        }
        Some(gpu) => {
            let mut step = GpuStep::new(gpu, run, layouts, &memory, sizes, adamw)
                .map_err(exec("building the GPU step"))?;
            if s.precision == Precision::Mixed {
                step.set_loss_scaling(s.loss_scaling)
                    .map_err(exec("setting the loss scaling"))?;
            }
            let on_cores = if s.tune {
                step.tune()
                    .map_err(exec("choosing the tensor-core tiles"))?
            } else {
                0
            };
            let precision = match s.precision {
                Precision::F32 => "f32",
                Precision::Mixed => "mixed precision",
            };
            let cores = match on_cores {
                0 => String::new(),
                n => format!(", {n} products on tensor cores"),
            };
            (
                Executor::Gpu(Box::new(step)),
                format!("{}, {precision}{cores}", gpu.info()),
            )
        }
    };
    for (name, v) in &model.values {
        step.set(name, v)
            .map_err(exec("setting the model's parameters"))?;
    }
    let g = run;
    let persistent: Vec<(String, Vec<usize>)> = g
        .ids()
        .filter(|&t| matches!(g.tensor(t).role, Role::Param | Role::State { .. }))
        .map(|t| (g.tensor(t).name.clone(), g.tensor(t).fixed_extents()))
        .collect();

    let examples = |file: &Path| match s.task {
        Task::Lm => lm_examples(file, &dir, s.seq),
        Task::Classify => classify_examples(file, &dir, &model.classes, s.seq),
    };
    let all = examples(&s.data)?;
    let (train, eval) = match &s.eval_data {
        Some(file) => (all, examples(file)?),
        None => data::split(&s.data, all, s.eval_fraction, s.seed)?,
    };

    std::fs::create_dir_all(&s.out).map_err(|source| TrainError::Io {
        file: s.out.clone(),
        source,
    })?;
    let mut state = TrainState {
        step: 0,
        adam_steps: 0,
        position: DataPosition::default(),
        seed: s.seed,
        skipped: 0,
        loss_scale: None,
    };
    if s.resume {
        let file = s.out.join(CHECKPOINT_FILE);
        let saved = checkpoint::load(&file)?;
        let expected: Vec<(String, usize)> = persistent
            .iter()
            .map(|(n, shape)| (n.clone(), shape.iter().product()))
            .collect();
        saved.check_tensors(&file, &expected)?;
        if saved.state.seed != s.seed {
            return Err(TrainError::Setting(format!(
                "{}: saved with --seed {}, resumed with --seed {}: the data would come in \
                 another order",
                file.display(),
                saved.state.seed,
                s.seed
            )));
        }
        for (name, _, v) in &saved.tensors {
            step.set(name, v)
                .map_err(exec("restoring the checkpoint"))?;
        }
        step.set_steps(saved.state.adam_steps);
        match (saved.state.loss_scale, step.loss_scale().is_some()) {
            (Some(scale), true) => step
                .restore_loss_scale(scale)
                .map_err(exec("restoring the loss scale"))?,
            (None, false) => {}
            (saved_scale, _) => {
                let (saved, now) = match saved_scale {
                    Some(_) => ("with", "without"),
                    None => ("without", "with"),
                };
                return Err(TrainError::Setting(format!(
                    "{}: saved {saved} loss scaling, resumed {now}: resume with the --device \
                     and --precision it was saved with",
                    file.display(),
                )));
            }
        }
        state = saved.state;
    }
    let mut plan_summary = plan
        .to_string()
        .split("\n\n")
        .next()
        .unwrap_or_default()
        .to_owned();
    if let Some(line) = attention {
        plan_summary = format!("{plan_summary}\n{line}");
    }
    Ok(Trainer {
        pad: special_ids(dir.config()).1,
        settings: s,
        dir,
        graph: model.graph,
        lora: model.lora,
        classes: model.classes,
        relabelled: model.relabelled,
        exec: step,
        device,
        train,
        eval,
        state,
        persistent,
        peak_bytes: memory.peak_bytes(),
        plan_summary,
        started,
        pending: None,
    })
}
