//! The main job: fine-tunes the shipped pretrained model on the embedded task and prints the
//! held-out evaluation before and after.
//!
//! The model is `examples/kjv/model/`: a tiny Llama that `examples/examples/pretrain_default.rs`
//! pretrained with fblayout on the narrative books of the King James Bible (public domain; see
//! `examples/kjv/README.md`) and exported as a Hugging Face model directory. The task is
//! language modelling on the Book of Proverbs (`examples/kjv/proverbs.txt`), a style the
//! narrative books hardly have. Both are compiled into the binary and written to a temporary
//! directory, from which [`Trainer`] loads them through fblayout-hf exactly as it loads a
//! user's model directory and data file — which `--model` and `--data` give instead.
//!
//! The run is the Trainer's: on the GPU where one with hardware of its own opens, else the CPU
//! executor (`f64`; `--device` chooses), a held-out tenth of the data's sequences
//! (chosen by the seed), a linear warmup of one step and a linear decay. The held-out set is
//! evaluated with the pretrained weights before the first step ([`Trainer::evaluate`]), halfway
//! and after the last step.

use std::path::{Path, PathBuf};

use fblayout_hf::ModelDir;
use fblayout_hf::config::ModelConfig;
use fblayout_train::{Decay, EvalResult, Event, Task, TrainError, Trainer};

use crate::device::{self, DeviceArg, PrecisionArg};
use crate::progress::Progress;
use crate::summary::mib;

/// The shipped model's files, written to a temporary directory as a model directory.
const MODEL_FILES: [(&str, &[u8]); 3] = [
    (
        fblayout_hf::CONFIG_FILE,
        include_bytes!("../kjv/model/config.json"),
    ),
    (
        fblayout_hf::WEIGHTS_FILE,
        include_bytes!("../kjv/model/model.safetensors"),
    ),
    (
        fblayout_hf::TOKENIZER_FILE,
        include_bytes!("../kjv/model/tokenizer.json"),
    ),
];

/// The embedded task: the Book of Proverbs, one verse a line.
const TASK: &str = include_str!("../kjv/proverbs.txt");
/// The task's file name in the temporary directory.
const TASK_FILE: &str = "proverbs.txt";

/// Optimizer steps of the default run.
const STEPS: u32 = 40;
/// Sequences per step.
const BATCH: u32 = 4;
/// Tokens per sequence (fewer where the model's position table is shorter).
const SEQ: u32 = 64;
/// The peak learning rate.
const LR: f64 = 2e-3;
/// The fraction of the data's sequences held out.
const HELD_OUT: f64 = 0.1;
/// The seed of the held-out split and of the order of the batches.
const SEED: u64 = 0;

/// The main job's options: by default the shipped model and the embedded task.
#[derive(clap::Args, Debug)]
pub(crate) struct JobArgs {
    /// A Hugging Face model directory (config.json, safetensors weights, tokenizer.json) to
    /// fine-tune instead of the shipped model.
    #[arg(long, value_name = "DIR")]
    model: Option<PathBuf>,
    /// A text file, one document a line, to fine-tune on instead of the embedded Proverbs.
    #[arg(long, value_name = "FILE")]
    data: Option<PathBuf>,
    /// Optimizer steps.
    #[arg(long, value_name = "N", default_value_t = STEPS)]
    steps: u32,
    /// Where the run's checkpoint, log and curves are kept [default: a temporary directory,
    /// removed at the end].
    #[arg(long, value_name = "DIR")]
    out: Option<PathBuf>,
    /// What runs the steps.
    #[arg(long, value_enum, default_value = "auto")]
    device: DeviceArg,
    /// The step's precision (`mixed` needs the GPU).
    #[arg(long, value_enum, default_value = "f32")]
    precision: PrecisionArg,
}

/// Why the main job failed.
#[derive(Debug, thiserror::Error)]
pub(crate) enum JobError {
    /// The shipped files could not be written out, or the curves could not be written.
    #[error("{}: {source}", file.display())]
    Io {
        /// The file or directory.
        file: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// `--steps 0`: nothing to fine-tune.
    #[error("--steps must be at least 1")]
    Steps,
    /// The model directory could not be loaded.
    #[error("--model: {0}")]
    Model(#[source] fblayout_hf::ModelDirError),
    /// The run could not be set up, or failed.
    #[error(transparent)]
    Train(#[from] TrainError),
    /// `--device gpu` and no GPU opened.
    #[error("--device gpu: {0}")]
    Gpu(#[from] fblayout_kernels::GpuError),
    /// The run ended without a held-out evaluation (a data file too short to hold any out).
    #[error("{}: too short to hold out a sequence for the evaluation", file.display())]
    NoEval {
        /// The data file.
        file: PathBuf,
    },
}

/// `source` writing `file`.
fn io(file: &Path) -> impl FnOnce(std::io::Error) -> JobError + '_ {
    move |source| JobError::Io {
        file: file.to_owned(),
        source,
    }
}

/// `e` in one line: its loss and perplexity.
fn eval_line(e: &EvalResult) -> String {
    format!(
        "held-out loss {:.4}, perplexity {:.2}",
        e.loss, e.perplexity
    )
}

/// The positions a model of `config` has: the longest sequence it can run.
fn positions(config: &ModelConfig) -> usize {
    match config {
        ModelConfig::Llama(c) => c.max_position_embeddings,
        ModelConfig::Gpt2(c) => c.n_positions,
        ModelConfig::Bert(c) => c.max_position_embeddings,
    }
}

/// The run's settings (see the module docs).
fn settings(
    model: &Path,
    data: &Path,
    (steps, seq): (u32, u32),
    out: &Path,
) -> fblayout_train::TrainerBuilder<'static> {
    Trainer::builder(model, data, Task::Lm)
        .steps(steps)
        .batch(BATCH)
        .seq(seq)
        .lr(LR)
        .warmup(1)
        .decay(Decay::Linear)
        .eval_fraction(HELD_OUT)
        .seed(SEED)
        .save_every(0)
        .out(out)
}

/// Runs the main job.
pub(crate) fn run(args: &JobArgs) -> Result<(), JobError> {
    if args.steps == 0 {
        return Err(JobError::Steps);
    }
    let temp = tempfile::Builder::new()
        .prefix("fblayout-")
        .tempdir()
        .map_err(io(&std::env::temp_dir()))?;
    let model = match &args.model {
        Some(dir) => dir.clone(),
        None => {
            let dir = temp.path().join("model");
            std::fs::create_dir_all(&dir).map_err(io(&dir))?;
            for (name, bytes) in MODEL_FILES {
                let file = dir.join(name);
                std::fs::write(&file, bytes).map_err(io(&file))?;
            }
            dir
        }
    };
    let data = match &args.data {
        Some(file) => file.clone(),
        None => {
            let file = temp.path().join(TASK_FILE);
            std::fs::write(&file, TASK).map_err(io(&file))?;
            file
        }
    };
    let out = args.out.clone().unwrap_or_else(|| temp.path().join("run"));

    let dir = ModelDir::open(&model).map_err(JobError::Model)?;
    let parameters: usize = dir.checkpoint().tensors().map(|t| t.numel()).sum();
    let seq = SEQ.min(u32::try_from(positions(dir.config())).unwrap_or(u32::MAX));
    match &args.model {
        Some(given) => println!(
            "model: {} ({}, {parameters} parameters)",
            given.display(),
            dir.config().class_name()
        ),
        None => println!(
            "model: the shipped {} ({parameters} parameters), pretrained with fblayout on the \
             King James Bible's narrative books (examples/kjv/model)",
            dir.config().class_name()
        ),
    }
    drop(dir);
    match &args.data {
        Some(file) => println!("task: language modelling on {}", file.display()),
        None => println!(
            "task: language modelling on the Book of Proverbs ({} verses, embedded)",
            TASK.lines().count()
        ),
    }
    let gpu = device::open(args.device, args.precision)?;

    let steps = args.steps;
    let started = std::time::Instant::now();
    // Stages: loading, the evaluation before, the steps, the evaluation after.
    let mut progress = Progress::new(u64::from(steps) + 3);
    progress.stage("loading and planning the model");
    let every = (steps / 2).max(1);
    // The shipped model's products are too small for the tiles' choice to pay for its time.
    let mut builder = settings(&model, &data, (steps, seq), &out)
        .eval_every(every)
        .precision(args.precision.into())
        .tune(args.model.is_some());
    if let Some(gpu) = &gpu {
        builder = builder.gpu(gpu);
    }
    let mut trainer = builder.build()?;
    progress.println(format!(
        "fine-tuning: {} steps of {BATCH} × {seq} tokens, peak learning rate {LR:e}, {:.0} % of \
         the sequences held out; on {}",
        args.steps,
        HELD_OUT * 100.0,
        trainer.device()
    ));
    progress.stage("evaluating the pretrained model");
    let before = trainer
        .evaluate()?
        .ok_or_else(|| JobError::NoEval { file: data.clone() })?;
    progress.println(format!("before fine-tuning: {}", eval_line(&before)));
    let summary = trainer.run(|event| match event {
        Event::Started { .. } => progress.stage(format!("step 1/{steps}")),
        // The evaluations follow their step's event.
        Event::Step { step, .. } if step == steps || step.is_multiple_of(every) => {
            progress.stage(format!("evaluating after step {step}"));
        }
        Event::Step { step, loss, .. } => {
            progress.stage(format!("step {}/{steps} (loss {loss:.3})", step + 1));
        }
        Event::Eval(e) if e.step < steps => {
            progress.println(format!("step {}: {}", e.step, eval_line(&e)));
            progress.stage(format!("step {}/{steps}", e.step + 1));
        }
        _ => {}
    })?;
    progress.finish();
    let after = summary
        .final_eval
        .ok_or_else(|| JobError::NoEval { file: data.clone() })?;
    println!("after {steps} steps: {}", eval_line(&after));
    if summary.skipped > 0 {
        println!(
            "{} step(s) skipped: their scaled gradients overflowed f16",
            summary.skipped
        );
    }
    println!(
        "held-out loss {:+.4} ({:.1} %), perplexity {:.2} → {:.2}",
        after.loss - before.loss,
        100.0 * (after.loss - before.loss) / before.loss,
        before.perplexity,
        after.perplexity
    );
    println!(
        "{steps} steps in {:.1} s (setup and evaluations included); peak memory of the plan \
         {:.2} MiB",
        started.elapsed().as_secs_f64(),
        mib(summary.peak_bytes)
    );
    if args.out.is_some() {
        let curves = out.join(crate::finetune::CURVES_FILE);
        fblayout_hf::files::write_atomically(
            &curves,
            crate::curves::svg(&summary.records).as_bytes(),
        )
        .map_err(io(&curves))?;
        println!(
            "checkpoint {}\nlog {}\ncurves {}",
            summary.checkpoint.display(),
            summary.log.display(),
            curves.display()
        );
    }
    Ok(())
}
