//! `fblayout finetune`: fine-tunes a Hugging Face model directory on a data file with
//! [`fblayout_train::Trainer`], showing a progress bar, and writes beside the checkpoint the
//! log and the loss curves (`curves.svg`), then prints a summary. At the last step it exports
//! what it trained under `export/` in the output directory.
//!
//! Ctrl-C (SIGINT) ends the run after the step under way, its checkpoint written, with the
//! command that resumes it and exit status 130; a second Ctrl-C quits at once (the last
//! checkpoint written stays whole).

use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use clap::ValueEnum;
use fblayout_kernels::GpuError;
use fblayout_plan::exec::LossScaling;
use fblayout_plan::lora::LoraConfig;

use crate::plan::AttentionArg;
use fblayout_plan::memory::Recompute;
use fblayout_train::{Decay, Event, Task, TrainError, Trainer};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use crate::curves;
use crate::device::{self, DeviceArg, PrecisionArg};
use crate::summary::mib;

/// The curves' file name in the output directory.
pub(crate) const CURVES_FILE: &str = "curves.svg";

/// What the model learns.
#[derive(ValueEnum, Clone, Copy, Debug)]
pub(crate) enum TaskArg {
    /// Language modelling on plain text: each token predicts the next.
    Lm,
    /// Classification of `text,label` records (JSONL or CSV).
    Classify,
}

/// The learning rate's decay after the warmup.
#[derive(ValueEnum, Clone, Copy, Debug)]
pub(crate) enum ScheduleArg {
    /// Linearly to 0 at the last step.
    Linear,
    /// Along half a cosine to 0 at the last step.
    Cosine,
    /// None.
    Constant,
}

/// The arguments of `fblayout finetune`.
#[derive(clap::Args, Debug)]
pub(crate) struct FinetuneArgs {
    /// The Hugging Face model directory (config.json, safetensors weights, tokenizer.json).
    #[arg(long)]
    model: PathBuf,
    /// The training data: plain text for `lm` (one document a line), JSONL or CSV of
    /// `text,label` for `classify`.
    #[arg(long)]
    data: PathBuf,
    /// The task.
    #[arg(long, value_enum, default_value = "lm")]
    task: TaskArg,
    /// A held-out data file (else `--eval-fraction` of the data is held out).
    #[arg(long)]
    eval_data: Option<PathBuf>,
    /// The fraction of the data's examples held out for evaluation, chosen by the seed.
    #[arg(long, default_value_t = 0.1)]
    eval_fraction: f64,
    /// Optimizer steps.
    #[arg(long, default_value_t = 100)]
    steps: u32,
    /// The peak learning rate.
    #[arg(long, default_value_t = 5e-4)]
    lr: f64,
    /// The learning rate's decay after the warmup.
    #[arg(long, value_enum, default_value = "linear")]
    schedule: ScheduleArg,
    /// Warmup steps, the learning rate rising linearly from 0.
    #[arg(long, default_value_t = 0)]
    warmup: u32,
    /// AdamW's decoupled weight decay.
    #[arg(long, default_value_t = 0.01)]
    weight_decay: f64,
    /// Sequences per micro-batch.
    #[arg(long, default_value_t = 4)]
    batch: u32,
    /// Tokens per sequence (truncated and padded to it).
    #[arg(long, default_value_t = 64)]
    seq: u32,
    /// Micro-batches whose gradients are averaged into each step.
    #[arg(long, default_value_t = 1)]
    accumulate: u32,
    /// Scales the gradients down to this global norm where they exceed it.
    #[arg(long)]
    clip: Option<f64>,
    /// Evaluate every this many steps, and at the end (0: at the end only).
    #[arg(long, default_value_t = 50)]
    eval_every: u32,
    /// Write the checkpoint every this many steps, and at the end (0: at the end only).
    #[arg(long, default_value_t = 50)]
    save_every: u32,
    /// The seed of the data's split and shuffle.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// The output directory: checkpoint, log, curves, and at the last step the export
    /// (`export/model`: a Hugging Face model directory; `export/adapter`: LoRA's peft adapter).
    #[arg(long, default_value = "finetune-out")]
    out: PathBuf,
    /// Continue from the checkpoint in `--out` (same settings), exactly where it stopped.
    #[arg(long)]
    resume: bool,
    /// End this session after this step (checkpointed), to continue later with `--resume`.
    #[arg(long)]
    stop_after: Option<u32>,
    /// Train LoRA adapters of this rank instead of the whole model (every base weight frozen);
    /// the export is then a peft adapter (`export/adapter`).
    #[arg(long, value_name = "RANK")]
    lora: Option<u32>,
    /// LoRA's alpha: the adapters' update is scaled by alpha / rank [default: 2 × rank].
    #[arg(long, requires = "lora")]
    lora_alpha: Option<f64>,
    /// The modules LoRA adapts, by name, comma-separated [default: the attention's query and
    /// value, peft's: `c_attn` for GPT-2, `q_proj,v_proj` for Llama, `query,value` for BERT].
    #[arg(long, value_delimiter = ',', requires = "lora")]
    lora_targets: Vec<String>,
    /// With `--lora`, also export the model with the adapters merged in (`export/model`).
    #[arg(long, requires = "lora")]
    merge: bool,
    /// `classify`: the number of classes [default: the config's `id2label` / `num_labels`]. A
    /// head of another width than the checkpoint's starts afresh, its classes `LABEL_0`, …
    #[arg(long, value_name = "N")]
    labels: Option<u32>,
    /// What runs the steps.
    #[arg(long, value_enum, default_value = "auto")]
    device: DeviceArg,
    /// The step's precision (`mixed` needs the GPU).
    #[arg(long, value_enum, default_value = "f32")]
    precision: PrecisionArg,
    /// With `--precision mixed`, the first step's loss scale (halved on each overflow, doubled
    /// after 2000 steps without one).
    #[arg(long, value_name = "SCALE", default_value_t = LossScaling::default().initial)]
    loss_scale: f32,
    /// On the GPU, skip choosing the tensor-core tiles of the products (tens of seconds on a
    /// fresh machine, then cached): a short run of a small model does better without.
    #[arg(long)]
    no_tune: bool,
    /// Make activations again in the backward instead of keeping them: `cheap` (elementwise
    /// operations and normalisations: less memory, a little more time), or `attention` (those
    /// and attention's probabilities: less again, attention's forward twice). The same values.
    #[arg(long, value_name = "WHAT", num_args = 0..=1, default_missing_value = "cheap")]
    recompute: Option<Recompute>,
    /// `lm`: fuse the head with its cross-entropy, making the logits this many tokens at a time
    /// instead of storing all of them (less memory; the head's product runs again in the
    /// backward).
    #[arg(long, value_name = "TOKENS", value_parser = clap::value_parser!(u32).range(1..))]
    head_chunk: Option<u32>,
    /// Which attentions store their probabilities for the backward: `materialised` (all),
    /// `fused` (none: one number per query, the scores computed again in the backward), or
    /// `auto` (each layer as the planner chooses, by predicted time and by
    /// --memory-budget-mib) [default: auto on the GPU, materialised on the CPU].
    #[arg(long, value_enum)]
    attention: Option<AttentionArg>,
    /// The peak memory of a step that `--attention auto` must fit, MiB (given alone, it asks
    /// for `auto`).
    #[arg(long, value_name = "MIB")]
    memory_budget_mib: Option<u64>,
}

/// Why `fblayout finetune` failed.
#[derive(Debug, thiserror::Error)]
pub(crate) enum FinetuneError {
    /// The run failed, or was interrupted.
    #[error(transparent)]
    Train(#[from] TrainError),
    /// `--device gpu` and no GPU opened.
    #[error("--device gpu: {0}")]
    Gpu(#[from] GpuError),
    /// Options that don't go together.
    #[error("{0}")]
    Setting(String),
    /// The curves could not be written.
    #[error("{}: {source}", file.display())]
    Io {
        /// The file.
        file: PathBuf,
        /// Why.
        source: std::io::Error,
    },
}

impl FinetuneError {
    /// The process's exit status: 130 (128 + SIGINT) where Ctrl-C ended the run, else 1.
    pub(crate) fn exit_code(&self) -> ExitCode {
        match self {
            Self::Train(TrainError::Interrupted { .. }) => ExitCode::from(130),
            _ => ExitCode::FAILURE,
        }
    }
}

/// The flag Ctrl-C sets: the run stops after its step. A second Ctrl-C quits at once.
fn interrupt_flag() -> Arc<AtomicBool> {
    let flag = Arc::new(AtomicBool::new(false));
    let set = Arc::clone(&flag);
    let installed = ctrlc::set_handler(move || {
        if set.swap(true, Ordering::SeqCst) {
            eprintln!("\ninterrupted again: quitting without a checkpoint of this step");
            std::process::exit(130);
        }
        eprintln!("\ninterrupted: stopping after this step (Ctrl-C again to quit at once)");
    });
    if let Err(e) = installed {
        eprintln!("warning: Ctrl-C will end the run without a checkpoint: {e}");
    }
    flag
}

/// The command line that resumes this run: this one, with `--resume`.
fn resume_command() -> String {
    let mut args: Vec<String> = std::env::args().collect();
    if !args.iter().any(|a| a == "--resume") {
        args.push("--resume".into());
    }
    args.join(" ")
}

/// The progress bar of the steps: step, loss, tokens/s, ETA and the executor.
fn bar(total: u32) -> ProgressBar {
    let target = if std::io::stderr().is_terminal() {
        ProgressDrawTarget::stderr()
    } else {
        ProgressDrawTarget::hidden()
    };
    let bar = ProgressBar::with_draw_target(Some(u64::from(total)), target);
    if let Ok(style) =
        ProgressStyle::with_template("{elapsed:>4} [{bar:24}] step {pos}/{len} {msg} ETA {eta}")
    {
        bar.set_style(style.progress_chars("=> "));
    }
    bar.enable_steady_tick(Duration::from_millis(200));
    bar
}

/// An accuracy as a percentage (`-` where there is none).
fn percent(accuracy: Option<f64>) -> String {
    accuracy.map_or_else(|| "-".to_owned(), |a| format!("{:.1} %", 100.0 * a))
}

/// Runs `fblayout finetune`.
pub(crate) fn run(args: &FinetuneArgs) -> Result<(), FinetuneError> {
    let task = match args.task {
        TaskArg::Lm => Task::Lm,
        TaskArg::Classify => Task::Classify,
    };
    let decay = match args.schedule {
        ScheduleArg::Linear => Decay::Linear,
        ScheduleArg::Cosine => Decay::Cosine,
        ScheduleArg::Constant => Decay::Constant,
    };
    let mut builder = Trainer::builder(&args.model, &args.data, task)
        .eval_fraction(args.eval_fraction)
        .steps(args.steps)
        .lr(args.lr)
        .decay(decay)
        .warmup(args.warmup)
        .weight_decay(args.weight_decay)
        .batch(args.batch)
        .seq(args.seq)
        .accumulate(args.accumulate)
        .eval_every(args.eval_every)
        .save_every(args.save_every)
        .seed(args.seed)
        .out(&args.out)
        .resume(args.resume);
    if let Some(file) = &args.eval_data {
        builder = builder.eval_data(file);
    }
    if let Some(clip) = args.clip {
        builder = builder.clip(clip);
    }
    if let Some(step) = args.stop_after {
        builder = builder.stop_after(step);
    }
    if let Some(rank) = args.lora {
        let alpha = args.lora_alpha.unwrap_or(2.0 * f64::from(rank));
        builder = builder
            .lora(LoraConfig::new(rank, alpha, args.lora_targets.clone()))
            .merge(args.merge);
    }
    if let Some(classes) = args.labels {
        builder = builder.labels(classes);
    }
    if let Some(tokens) = args.head_chunk {
        builder = builder.head_chunk(tokens);
    }
    // A budget alone asks the planner to choose within it.
    let fusing = match (args.attention, args.memory_budget_mib) {
        (None, None) => None,
        (None, Some(_)) => Some(AttentionArg::Auto),
        (Some(a), _) => Some(a),
    };
    if let Some(a) = fusing {
        let fusing = a
            .fusing(args.memory_budget_mib)
            .map_err(FinetuneError::Setting)?;
        builder = builder.attention(fusing);
    }
    let gpu = device::open(args.device, args.precision)?;
    if let Some(gpu) = &gpu {
        builder = builder.gpu(gpu);
    }
    let mut trainer = builder
        .precision(args.precision.into())
        .tune(!args.no_tune)
        .recompute(args.recompute.unwrap_or_default())
        .loss_scaling(LossScaling {
            initial: args.loss_scale,
            ..LossScaling::default()
        })
        .interrupt(interrupt_flag())
        .build()?;
    if trainer.done() > 0 {
        println!("resuming after step {}", trainer.done());
    }
    let device = trainer.device().to_owned();
    let mut skipped = 0u32;
    let bar = bar(args.steps);
    let terminal = std::io::stderr().is_terminal();
    let summary = trainer.run(|event| match event {
        Event::Started { done, .. } => bar.set_position(u64::from(done)),
        Event::Step {
            step,
            loss,
            lr,
            tokens,
            seconds,
            skipped: this,
        } => {
            skipped += u32::from(this);
            let skips = match skipped {
                0 => String::new(),
                n => format!(" ({n} skipped)"),
            };
            bar.set_position(u64::from(step));
            bar.set_message(format!(
                "loss {loss:.4} lr {lr:.2e}{skips} {:.0} tokens/s [{device}]",
                tokens as f64 / seconds.max(1e-9)
            ));
        }
        Event::Eval(e) => {
            let line = match task {
                Task::Lm => format!(
                    "step {}: held-out loss {:.4}, perplexity {:.2}",
                    e.step, e.loss, e.perplexity
                ),
                Task::Classify => format!(
                    "step {}: held-out loss {:.4}, accuracy {}",
                    e.step,
                    e.loss,
                    percent(e.accuracy)
                ),
            };
            if terminal {
                bar.println(line);
            } else {
                eprintln!("{line}");
            }
        }
        Event::Saved { .. } => {}
    });
    bar.finish_and_clear();
    if let Err(TrainError::Interrupted { step, .. }) = &summary {
        eprintln!(
            "stopped after step {step}, checkpointed; to continue:\n  {}",
            resume_command()
        );
    }
    let summary = summary?;
    let curves = args.out.join(CURVES_FILE);
    fblayout_hf::files::write_atomically(&curves, curves::svg(&summary.records).as_bytes())
        .map_err(|source| FinetuneError::Io {
            file: curves.clone(),
            source,
        })?;
    println!(
        "{} steps in {:.1} s on {}",
        summary.steps, summary.seconds, summary.device
    );
    if summary.skipped > 0 {
        println!(
            "{} step(s) skipped: their scaled gradients overflowed f16, and the loss scale was \
             lowered",
            summary.skipped
        );
    }
    if let Some(loss) = summary.final_loss {
        println!("final training loss {loss:.4}");
    }
    match (summary.final_eval, task) {
        (Some(e), Task::Lm) => println!(
            "final evaluation (step {}): loss {:.4}, perplexity {:.2}",
            e.step, e.loss, e.perplexity
        ),
        (Some(e), Task::Classify) => println!(
            "final evaluation (step {}): loss {:.4}, accuracy {}",
            e.step,
            e.loss,
            percent(e.accuracy)
        ),
        (None, _) => println!("no held-out set: no evaluation"),
    }
    println!(
        "peak memory (the memory plan's): {:.2} MiB",
        mib(summary.peak_bytes)
    );
    println!("\n{}\n", summary.plan_summary);
    println!(
        "checkpoint {}\nlog {}\ncurves {}",
        summary.checkpoint.display(),
        summary.log.display(),
        curves.display()
    );
    if summary.steps == args.steps {
        println!("export {}", summary.export.display());
    }
    Ok(())
}
