//! `fblayout finetune`: fine-tunes a Hugging Face model directory on a data file with
//! [`fblayout_train::Trainer`], showing a progress bar, and writes beside the checkpoint the
//! log and the loss curves (`curves.svg`), then prints a summary.

use std::io::IsTerminal;
use std::path::PathBuf;
use std::time::Duration;

use clap::ValueEnum;
use fblayout_train::{Decay, Event, Task, TrainError, Trainer};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use crate::curves;
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
    /// The output directory: checkpoint, log, curves.
    #[arg(long, default_value = "finetune-out")]
    out: PathBuf,
    /// Continue from the checkpoint in `--out` (same settings), exactly where it stopped.
    #[arg(long)]
    resume: bool,
    /// End this session after this step (checkpointed), to continue later with `--resume`.
    #[arg(long)]
    stop_after: Option<u32>,
}

/// Why `fblayout finetune` failed.
#[derive(Debug, thiserror::Error)]
pub(crate) enum FinetuneError {
    /// The run failed.
    #[error(transparent)]
    Train(#[from] TrainError),
    /// The curves could not be written.
    #[error("{}: {source}", file.display())]
    Io {
        /// The file.
        file: PathBuf,
        /// Why.
        source: std::io::Error,
    },
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
    let trainer = builder.build()?;
    if trainer.done() > 0 {
        println!("resuming after step {}", trainer.done());
    }
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
        } => {
            bar.set_position(u64::from(step));
            bar.set_message(format!(
                "loss {loss:.4} lr {lr:.2e} {:.0} tokens/s [CPU executor, f64]",
                tokens as f64 / seconds.max(1e-9)
            ));
        }
        Event::Eval(e) => {
            let line = format!(
                "step {}: held-out loss {:.4}, perplexity {:.2}",
                e.step, e.loss, e.perplexity
            );
            if terminal {
                bar.println(line);
            } else {
                eprintln!("{line}");
            }
        }
        Event::Saved { .. } => {}
    });
    bar.finish_and_clear();
    let summary = summary?;
    let curves = args.out.join(CURVES_FILE);
    fblayout_hf::files::write_atomically(&curves, curves::svg(&summary.records).as_bytes())
        .map_err(|source| FinetuneError::Io {
            file: curves.clone(),
            source,
        })?;
    println!("{} steps in {:.1} s", summary.steps, summary.seconds);
    if let Some(loss) = summary.final_loss {
        println!("final training loss {loss:.4}");
    }
    match summary.final_eval {
        Some(e) => println!(
            "final evaluation (step {}): loss {:.4}, perplexity {:.2}",
            e.step, e.loss, e.perplexity
        ),
        None => println!("no held-out set: no evaluation"),
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
    Ok(())
}
