//! The training loop and the builder that sets it up ([`Trainer`]).

mod executor;
mod export;
mod metrics;
mod model;
mod setup;
mod step;

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use fblayout_hf::export::ExportError;
use fblayout_hf::graph::GraphError;
use fblayout_hf::{ModelDir, ModelDirError};
use fblayout_kernels::Gpu;
use fblayout_plan::exec::{ExecError, LossScaling, StepInputs};
use fblayout_plan::graph::Graph;
use fblayout_plan::graph::precision::Precision;
use fblayout_plan::lora::{Lora, LoraConfig};
use fblayout_plan::memory::{MemoryError, Recompute};
pub use fblayout_plan::select::attention::Fusing;
use fblayout_plan::select::{PlanError, Strategy};

use crate::checkpoint::{self, CheckpointError, TrainState};
use crate::data::{Batches, DataError, Example};
use crate::log::{Log, Record};
use crate::schedule::{Decay, Schedule};
use executor::Executor;

/// The checkpoint's file name in the output directory.
pub const CHECKPOINT_FILE: &str = "checkpoint.safetensors";
/// The log's file name in the output directory (see [`crate::log`]).
pub const LOG_FILE: &str = "log.jsonl";
/// The export's directory in the output directory: `model/`, a Hugging Face model directory
/// (the full fine-tuning's weights, or with [`merge`](TrainerBuilder::merge) LoRA's merged
/// in), and `adapter/`, LoRA's adapters as a peft adapter directory.
pub const EXPORT_DIR: &str = "export";
/// The exported Hugging Face model directory, under [`EXPORT_DIR`].
pub const EXPORT_MODEL: &str = "model";
/// The exported peft adapter directory, under [`EXPORT_DIR`].
pub const EXPORT_ADAPTER: &str = "adapter";

/// What the model learns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Task {
    /// Language modelling: each token predicts the next.
    Lm,
    /// Sequence classification: `text,label` records.
    Classify,
}

/// Why a run could not be set up or went wrong.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TrainError {
    /// The model directory could not be loaded.
    #[error(transparent)]
    Model(#[from] ModelDirError),
    /// The model's graph or parameters could not be built.
    #[error(transparent)]
    Graph(#[from] GraphError),
    /// A data file could not be used.
    #[error(transparent)]
    Data(#[from] DataError),
    /// The layouts could not be planned.
    #[error("planning the layouts: {0}")]
    Plan(#[from] PlanError),
    /// The memory could not be planned.
    #[error("planning the memory: {0}")]
    Memory(#[from] MemoryError),
    /// Which attentions to fuse could not be chosen, or nothing fits the memory budget.
    #[error("choosing which attentions to fuse: {0}")]
    Attention(#[source] fblayout_plan::select::attention::ChoiceError),
    /// The executor failed.
    #[error("{what}: {source}")]
    Exec {
        /// What was being done.
        what: String,
        /// Why.
        source: ExecError,
    },
    /// A step's loss or gradient was infinite or NaN: the run stops, that step not taken.
    #[error(
        "step {step}: the {what} is not finite; the run stops (the last checkpoint holds the steps before)"
    )]
    NonFinite {
        /// The step, from 1.
        step: u32,
        /// The loss, or the gradient found so.
        what: String,
    },
    /// The checkpoint could not be written or read.
    #[error(transparent)]
    Checkpoint(#[from] CheckpointError),
    /// The log or output directory could not be written.
    #[error("{}: {source}", file.display())]
    Io {
        /// The file.
        file: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// A setting is out of its range, or asks for something this version can't do.
    #[error("{0}")]
    Setting(String),
    /// What was trained could not be exported.
    #[error("exporting: {0}")]
    Export(#[from] ExportError),
    /// The run was told to stop ([`TrainerBuilder::interrupt`]): it finished step `step` and
    /// wrote the checkpoint, which a run with [`TrainerBuilder::resume`] continues.
    #[error("interrupted after step {step}; the checkpoint {} holds it", checkpoint.display())]
    Interrupted {
        /// The last step done.
        step: u32,
        /// The checkpoint written.
        checkpoint: PathBuf,
    },
}

/// The result of an evaluation over the held-out set.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct EvalResult {
    /// The step it followed.
    pub step: u32,
    /// The mean cross-entropy over the held-out tokens.
    pub loss: f64,
    /// `exp(loss)` (language modelling).
    pub perplexity: f64,
    /// Classification: the fraction of held-out sequences whose largest logit at the `[CLS]`
    /// row is their label (`None` for language modelling).
    pub accuracy: Option<f64>,
}

/// What a run reports as it goes.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Event {
    /// The run starts (or resumes) after `done` of `total` steps.
    Started {
        /// Steps already done.
        done: u32,
        /// Steps in the run.
        total: u32,
    },
    /// A step was taken.
    Step {
        /// The step, from 1.
        step: u32,
        /// Its loss (before its update).
        loss: f64,
        /// Its learning rate.
        lr: f64,
        /// Tokens it trained on (labels counted).
        tokens: u64,
        /// Seconds it took.
        seconds: f64,
        /// Whether its update was skipped: mixed precision's scaled gradients overflowed, the
        /// loss scale was lowered, and no parameter changed.
        skipped: bool,
    },
    /// An evaluation ran.
    Eval(EvalResult),
    /// A checkpoint was written after a step.
    Saved {
        /// The step.
        step: u32,
    },
}

/// The end of a run.
#[derive(Debug, Clone)]
pub struct Summary {
    /// The steps done in all.
    pub steps: u32,
    /// The last step's loss (`None` where the run had nothing left to do).
    pub final_loss: Option<f64>,
    /// The last evaluation (`None` without a held-out set).
    pub final_eval: Option<EvalResult>,
    /// Every step's loss and every evaluation, this run's and (resumed) the checkpoint's.
    pub records: Vec<Record>,
    /// Steps whose update was skipped for overflowing gradients (mixed precision), this run's
    /// and (resumed) the checkpoint's.
    pub skipped: u32,
    /// What ran the steps: the CPU executor, or the GPU adapter and the precision.
    pub device: String,
    /// The memory plan's peak, in bytes.
    pub peak_bytes: u64,
    /// Seconds the run took (setup included).
    pub seconds: f64,
    /// The layout plan's one-paragraph summary, with a line saying how many attentions are
    /// fused and why, where the model has some.
    pub plan_summary: String,
    /// The checkpoint.
    pub checkpoint: PathBuf,
    /// The log.
    pub log: PathBuf,
    /// Where what was trained was exported ([`EXPORT_DIR`] in the output directory).
    pub export: PathBuf,
}

/// The settings of a run (see [`Trainer::builder`] for the defaults).
#[derive(Debug, Clone)]
pub struct TrainerBuilder<'g> {
    model: PathBuf,
    data: PathBuf,
    task: Task,
    eval_data: Option<PathBuf>,
    eval_fraction: f64,
    steps: u32,
    lr: f64,
    decay: Decay,
    warmup: u32,
    weight_decay: f64,
    batch: u32,
    seq: u32,
    accumulate: u32,
    clip: Option<f64>,
    eval_every: u32,
    save_every: u32,
    seed: u64,
    out: PathBuf,
    resume: bool,
    stop_after: Option<u32>,
    lora: Option<LoraConfig>,
    merge: bool,
    labels: Option<u32>,
    interrupt: Option<Arc<AtomicBool>>,
    gpu: Option<&'g Gpu>,
    precision: Precision,
    loss_scaling: LossScaling,
    strategy: Option<Strategy>,
    tune: bool,
    recompute: Recompute,
    head_chunk: Option<u32>,
    attention: Option<Fusing>,
}

impl<'g> TrainerBuilder<'g> {
    /// A held-out set from `file` (else [`eval_fraction`](Self::eval_fraction) of the data).
    pub fn eval_data(mut self, file: impl Into<PathBuf>) -> Self {
        self.eval_data = Some(file.into());
        self
    }

    /// Holds out this fraction of the data's examples, chosen by the seed (default 0.1; 0: no
    /// held-out set). Ignored with [`eval_data`](Self::eval_data).
    pub fn eval_fraction(mut self, fraction: f64) -> Self {
        self.eval_fraction = fraction;
        self
    }

    /// The number of optimizer steps (default 100).
    pub fn steps(mut self, steps: u32) -> Self {
        self.steps = steps;
        self
    }

    /// The peak learning rate (default 5e-4).
    pub fn lr(mut self, lr: f64) -> Self {
        self.lr = lr;
        self
    }

    /// The decay after the warmup (default linear).
    pub fn decay(mut self, decay: Decay) -> Self {
        self.decay = decay;
        self
    }

    /// The warmup steps (default 0).
    pub fn warmup(mut self, steps: u32) -> Self {
        self.warmup = steps;
        self
    }

    /// AdamW's decoupled weight decay (default 0.01).
    pub fn weight_decay(mut self, decay: f64) -> Self {
        self.weight_decay = decay;
        self
    }

    /// Sequences per micro-batch (default 4).
    pub fn batch(mut self, batch: u32) -> Self {
        self.batch = batch;
        self
    }

    /// Tokens per sequence (default 64).
    pub fn seq(mut self, seq: u32) -> Self {
        self.seq = seq;
        self
    }

    /// Micro-batches whose gradients are averaged into each step (default 1).
    pub fn accumulate(mut self, micro_batches: u32) -> Self {
        self.accumulate = micro_batches;
        self
    }

    /// Scales the gradients down to this global norm where they exceed it (default: no
    /// clipping).
    pub fn clip(mut self, max_norm: f64) -> Self {
        self.clip = Some(max_norm);
        self
    }

    /// Evaluates every this many steps, and at the end (default 50; 0: at the end only).
    pub fn eval_every(mut self, steps: u32) -> Self {
        self.eval_every = steps;
        self
    }

    /// Writes the checkpoint every this many steps, and at the end (default 50; 0: at the
    /// end only).
    pub fn save_every(mut self, steps: u32) -> Self {
        self.save_every = steps;
        self
    }

    /// The seed of the data's shuffle and split (default 0).
    pub fn seed(mut self, seed: u64) -> Self {
        self.seed = seed;
        self
    }

    /// The output directory (default `finetune-out`).
    pub fn out(mut self, dir: impl Into<PathBuf>) -> Self {
        self.out = dir.into();
        self
    }

    /// Continues from the checkpoint in the output directory.
    pub fn resume(mut self, resume: bool) -> Self {
        self.resume = resume;
        self
    }

    /// Ends this session after step `step` (writing the checkpoint), as if interrupted there:
    /// the schedule is still that of [`steps`](Self::steps), and a run with
    /// [`resume`](Self::resume) continues it.
    pub fn stop_after(mut self, step: u32) -> Self {
        self.stop_after = Some(step);
        self
    }

    /// Trains LoRA's adapters ([`fblayout_plan::lora`]) instead of the whole model: every
    /// base weight frozen. Without target modules in `config`, peft's defaults for the
    /// architecture (the attention's query and value: GPT-2's `c_attn`, Llama's `q_proj` and
    /// `v_proj`, BERT's `query` and `value`). The adapters start as peft's do, `A` from the
    /// seed and `B` zero.
    pub fn lora(mut self, config: LoraConfig) -> Self {
        self.lora = Some(config);
        self
    }

    /// With [`lora`](Self::lora), also exports the model with the adapters merged into its
    /// weights (`model/` under [`EXPORT_DIR`]).
    pub fn merge(mut self, merge: bool) -> Self {
        self.merge = merge;
        self
    }

    /// The classification head's number of classes (default: the config's `id2label`, or
    /// `num_labels`). A head of another width than the checkpoint's starts afresh, its classes
    /// named `LABEL_0`, `LABEL_1`, …
    pub fn labels(mut self, classes: u32) -> Self {
        self.labels = Some(classes);
        self
    }

    /// Stops the run once `flag` is set: the step under way is finished, the checkpoint
    /// written, and [`Trainer::run`] returns [`TrainError::Interrupted`] (a Ctrl-C handler
    /// sets it).
    pub fn interrupt(mut self, flag: Arc<AtomicBool>) -> Self {
        self.interrupt = Some(flag);
        self
    }

    /// Runs the steps on `gpu` (default: the CPU executor, `f64`). With gradient accumulation
    /// or clipping, each micro-batch's gradients are read back and summed (and clipped) on the
    /// host, then written back for the update.
    pub fn gpu(mut self, gpu: &'g Gpu) -> Self {
        self.gpu = Some(gpu);
        self
    }

    /// The step's precision (default `f32`): [`Precision::Mixed`] needs the GPU
    /// ([`gpu`](Self::gpu)).
    pub fn precision(mut self, precision: Precision) -> Self {
        self.precision = precision;
        self
    }

    /// How mixed precision's loss scale starts and moves (default PyTorch's `GradScaler`'s:
    /// 2¹⁶, halved on an overflow, doubled after 2000 steps without one).
    pub fn loss_scaling(mut self, config: LossScaling) -> Self {
        self.loss_scaling = config;
        self
    }

    /// The layout strategy. By default the planner's activation-guided choice on the CPU, and
    /// row-major on the GPU: on the H200 the analytic cost model's guided plans measured
    /// slower than row-major (BENCHMARKS.md), and they compute the same values.
    pub fn strategy(mut self, strategy: Strategy) -> Self {
        self.strategy = Some(strategy);
        self
    }

    /// Whether a run on the GPU first chooses the tensor-core tiles of its products for their
    /// shapes (default `true`): tens of seconds on a fresh machine for a whole model, then read
    /// from the cache beside the pipeline cache, per adapter. Without tensor cores (a software
    /// adapter) there is nothing to choose. A short run of a small model does better without.
    pub fn tune(mut self, tune: bool) -> Self {
        self.tune = tune;
        self
    }

    /// Which activations the step makes again in the backward instead of keeping them from
    /// the forward (default [`Recompute::Nothing`]): [`Recompute::Cheap`] (elementwise
    /// operations and normalisations) lowers the peak of memory for a few more passes over it,
    /// [`Recompute::Attention`] also drops attention's probabilities for a second attention
    /// forward. The values are the same.
    pub fn recompute(mut self, what: Recompute) -> Self {
        self.recompute = what;
        self
    }

    /// A language model's head and its cross-entropy fused, making the logits `tokens` rows at a
    /// time instead of storing all of them and their gradient (default: not fused). The
    /// vocabulary-wide logits are usually the largest tensors of a step; the fused head makes
    /// the head's product a second time in the backward. Evaluation reads only the loss, so
    /// it is the same either way.
    pub fn head_chunk(mut self, tokens: u32) -> Self {
        self.head_chunk = Some(tokens);
        self
    }

    /// Which attentions store their probabilities for the backward. [`Fusing::Materialised`]:
    /// every one; [`Fusing::Fused`]: none (one number per query, the scores computed again in
    /// the backward); [`Fusing::Auto`]: the planner chooses each layer by predicted time,
    /// fusing the fewest layers that bring the step under a memory budget where one is given
    /// (an error names both peaks where even every attention fused is over it). The default
    /// is `Auto` without a budget on the GPU, which fuses where the cost model's attention
    /// kernels were timed at the model's head size and the fused ones predicted faster (the
    /// reference H100's tables,
    /// [`analytic_for_graph`](fblayout_plan::select::CostModel::analytic_for_graph): heads of
    /// 32, MiniLM's, and of 64, GPT-2's, BERT-base's and most Llama-family models'; in mixed
    /// precision both predict the fused attention faster, in `f32` heads of 64 the
    /// materialised one, as measured there), and `Materialised` on the CPU, whose `f64` twin of
    /// the fused attention only adds the recomputation. Heads of another size keep their
    /// probabilities where they fit; a model with heads of 128 can still ask for `Fused`.
    pub fn attention(mut self, fusing: Fusing) -> Self {
        self.attention = Some(fusing);
        self
    }

    /// Another training data file.
    pub fn data(mut self, file: impl Into<PathBuf>) -> Self {
        self.data = file.into();
        self
    }

    /// Loads and plans everything (see [`Trainer`]).
    pub fn build(self) -> Result<Trainer<'g>, TrainError> {
        setup::build(self)
    }
}

/// A run set up and ready to train.
///
/// [`Trainer::builder`] takes the model directory, the data file and the task; the rest has
/// defaults. [`TrainerBuilder::build`] loads the model, builds its training graph, plans its
/// layouts and memory, reads and tokenizes the data, and (with [`resume`](TrainerBuilder::resume))
/// reads the checkpoint; [`Trainer::run`] trains, reporting each step and evaluation as an
/// [`Event`], writing the log ([`LOG_FILE`]) and the checkpoint ([`CHECKPOINT_FILE`]) in the
/// output directory.
///
/// Steps run on the CPU executor ([`CpuStep`](fblayout_plan::exec::CpuStep), `f64`), the
/// reference, or with [`gpu`](TrainerBuilder::gpu) on the GPU
/// ([`GpuStep`](fblayout_plan::exec::GpuStep)): in `f32`, or with
/// [`precision`](TrainerBuilder::precision) in mixed precision, where dynamic loss scaling
/// skips a step whose scaled gradients overflowed (counted in [`Summary::skipped`]). Either
/// way a run resumed from a checkpoint continues with exactly the losses of an uninterrupted
/// one on the same executor.
///
/// The whole model is trained, or with [`lora`](TrainerBuilder::lora) only LoRA's adapters
/// (the base weights frozen: no gradient, no optimizer state, not in the checkpoint). A run
/// that reaches its last step exports what it trained under [`EXPORT_DIR`] (see
/// [`Summary::export`]). A run told to stop ([`interrupt`](TrainerBuilder::interrupt))
/// finishes its step, writes the checkpoint and returns [`TrainError::Interrupted`].
#[derive(Debug)]
pub struct Trainer<'g> {
    settings: TrainerBuilder<'g>,
    dir: ModelDir,
    /// The training graph as built, before planning: what the export names and orients
    /// weights by.
    graph: Graph,
    lora: Option<Lora>,
    /// The classes' names (classification).
    classes: Vec<String>,
    /// Whether the classes differ from the config's.
    relabelled: bool,
    exec: Executor<'g>,
    /// What runs the steps, in words.
    device: String,
    train: Vec<Example>,
    eval: Vec<Example>,
    pad: u32,
    state: TrainState,
    /// The persistent tensors a checkpoint holds: `(name, shape)`.
    persistent: Vec<(String, Vec<usize>)>,
    peak_bytes: u64,
    plan_summary: String,
    started: Instant,
    /// The next step's batch (its inputs and counted tokens), drawn while the GPU ran the last
    /// step so that its inputs were written then (see `train_step`).
    pending: Option<(StepInputs, u64)>,
}

impl<'g> Trainer<'g> {
    /// The settings of a run of `task` on the model in directory `model` and the data in
    /// `data`, with the defaults given by each setter.
    pub fn builder(
        model: impl Into<PathBuf>,
        data: impl Into<PathBuf>,
        task: Task,
    ) -> TrainerBuilder<'g> {
        TrainerBuilder {
            model: model.into(),
            data: data.into(),
            task,
            eval_data: None,
            eval_fraction: 0.1,
            steps: 100,
            lr: 5e-4,
            decay: Decay::Linear,
            warmup: 0,
            weight_decay: 0.01,
            batch: 4,
            seq: 64,
            accumulate: 1,
            clip: None,
            eval_every: 50,
            save_every: 50,
            seed: 0,
            out: PathBuf::from("finetune-out"),
            resume: false,
            stop_after: None,
            lora: None,
            merge: false,
            labels: None,
            interrupt: None,
            gpu: None,
            precision: Precision::F32,
            loss_scaling: LossScaling::default(),
            strategy: None,
            tune: true,
            recompute: Recompute::Nothing,
            head_chunk: None,
            attention: None,
        }
    }

    /// The steps already done (from the checkpoint where resumed).
    pub fn done(&self) -> u32 {
        self.state.step
    }

    /// What runs the steps: the CPU executor, or the GPU adapter and the precision.
    pub fn device(&self) -> &str {
        &self.device
    }

    /// The layout plan's one-paragraph summary, with a line saying how many attentions are
    /// fused and why, where the model has some.
    pub fn plan_summary(&self) -> &str {
        &self.plan_summary
    }

    /// The classification head's classes, by name (empty for language modelling).
    pub fn classes(&self) -> &[String] {
        &self.classes
    }

    /// LoRA's adapters, where the run trains them.
    pub fn adapters(&self) -> Option<&Lora> {
        self.lora.as_ref()
    }

    /// Every weight's values now, by name, in the graph's orientation: the trained ones and
    /// (with LoRA) the frozen ones.
    pub fn weights(&self) -> Result<Vec<(String, Vec<f64>)>, TrainError> {
        let g = self.exec.graph();
        g.weights()
            .into_iter()
            .map(|t| {
                let name = &g.tensor(t).name;
                let values = self
                    .exec
                    .read(name)
                    .map_err(setup::exec("reading a weight"))?;
                Ok((name.clone(), values))
            })
            .collect()
    }

    /// Evaluates the held-out set with the weights now (`None` without a held-out set),
    /// reported as after the steps done.
    pub fn evaluate(&mut self) -> Result<Option<EvalResult>, TrainError> {
        if self.eval.is_empty() {
            return Ok(None);
        }
        self.eval_at(self.state.step).map(Some)
    }

    /// Whether the run was told to stop.
    fn interrupted(&self) -> bool {
        self.settings
            .interrupt
            .as_ref()
            .is_some_and(|flag| flag.load(Ordering::SeqCst))
    }

    /// Trains to the last step, telling `on_event` of each step, evaluation and checkpoint,
    /// then exports what it trained (see [`Trainer`]).
    pub fn run(&mut self, mut on_event: impl FnMut(Event)) -> Result<Summary, TrainError> {
        let s = self.settings.clone();
        let log_file = s.out.join(LOG_FILE);
        let io = |file: &PathBuf| {
            let file = file.clone();
            move |source| TrainError::Io { file, source }
        };
        let resumed = s.resume.then_some(self.state.step);
        let mut log = Log::open(&log_file, resumed).map_err(io(&log_file))?;
        let schedule = Schedule {
            peak: s.lr,
            warmup: s.warmup,
            total: s.steps,
            decay: s.decay,
        };
        let mut batches = Batches::new(self.train.len(), s.seed, true, self.state.position);
        // A batch drawn ahead belongs to the iterator it came from: this run draws afresh from
        // the position after the last step done.
        self.pending = None;
        on_event(Event::Started {
            done: self.state.step,
            total: s.steps,
        });
        let mut final_loss = None;
        let mut final_eval = None;
        while self.state.step < s.steps {
            let step = self.state.step + 1;
            let lr = schedule.rate(self.state.step);
            let started = Instant::now();
            let (loss, tokens, skipped, position) = self.train_step(&mut batches, step, lr)?;
            self.state.step = step;
            self.state.adam_steps = self.exec.steps();
            self.state.skipped += u32::from(skipped);
            self.state.position = position;
            final_loss = Some(loss);
            log.write(Record::Step { step, loss, lr })
                .map_err(io(&log_file))?;
            on_event(Event::Step {
                step,
                loss,
                lr,
                tokens,
                seconds: started.elapsed().as_secs_f64(),
                skipped,
            });
            let last = step == s.steps;
            let stopping = !last && (s.stop_after == Some(step) || self.interrupted());
            let every = |n: u32| n > 0 && step.is_multiple_of(n);
            if !self.eval.is_empty() && (last || every(s.eval_every)) {
                let result = self.eval_at(step)?;
                log.write(Record::Eval {
                    step,
                    loss: result.loss,
                    perplexity: result.perplexity,
                    accuracy: result.accuracy,
                })
                .map_err(io(&log_file))?;
                final_eval = Some(result);
                on_event(Event::Eval(result));
            }
            if last || stopping || every(s.save_every) {
                self.save()?;
                on_event(Event::Saved { step });
            }
            if stopping {
                break;
            }
        }
        let checkpoint = s.out.join(CHECKPOINT_FILE);
        if self.state.step < s.steps && s.stop_after != Some(self.state.step) {
            return Err(TrainError::Interrupted {
                step: self.state.step,
                checkpoint,
            });
        }
        let export = s.out.join(EXPORT_DIR);
        if self.state.step == s.steps {
            self.export(&export)?;
        }
        let records = crate::log::read(&log_file).map_err(io(&log_file))?;
        if final_eval.is_none() {
            final_eval = records.iter().rev().find_map(|r| match *r {
                Record::Eval {
                    step,
                    loss,
                    perplexity,
                    accuracy,
                } => Some(EvalResult {
                    step,
                    loss,
                    perplexity,
                    accuracy,
                }),
                Record::Step { .. } => None,
            });
        }
        Ok(Summary {
            steps: self.state.step,
            final_loss,
            final_eval,
            records,
            skipped: self.state.skipped,
            device: self.device.clone(),
            peak_bytes: self.peak_bytes,
            seconds: self.started.elapsed().as_secs_f64(),
            plan_summary: self.plan_summary.clone(),
            checkpoint,
            log: log_file,
            export,
        })
    }

    /// Writes the checkpoint of the steps done.
    fn save(&self) -> Result<(), TrainError> {
        let mut tensors = Vec::with_capacity(self.persistent.len());
        for (name, shape) in &self.persistent {
            let values = self.exec.read(name).map_err(|source| TrainError::Exec {
                what: "reading the state to save".into(),
                source,
            })?;
            tensors.push((name.clone(), shape.clone(), values));
        }
        let file = self.settings.out.join(CHECKPOINT_FILE);
        checkpoint::save(
            &file,
            &checkpoint::Checkpoint {
                state: TrainState {
                    loss_scale: self.exec.loss_scale(),
                    ..self.state
                },
                tensors,
            },
        )?;
        Ok(())
    }
}
