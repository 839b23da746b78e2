//! `fblayout`: the main job (the `job` module) fine-tunes the shipped pretrained model — a tiny
//! Llama that fblayout pretrained on the King James Bible — on the embedded task, the Book of
//! Proverbs, and prints the held-out evaluation before and after; `--model` and `--data` run
//! the user's own.
//!
//! `fblayout step` runs one training step of the shipped encoder through the planner and the
//! executors (the `step` module): under unified row-major layouts and under the planner's
//! choice, on the GPU, checked against the CPU executor, and timed.
//!
//! `fblayout finetune` fine-tunes a Hugging Face model on a data file (the `finetune` module).
//!
//! `fblayout plan` instead shows the layout plan and the memory plan of a shipped model's
//! training step (see the `plan` module).

mod curves;
mod device;
mod finetune;
mod job;
mod plan;
mod progress;
mod sizes;
mod step;
mod summary;

use std::process::ExitCode;

use clap::Parser;

/// Fine-tunes the shipped pretrained model on the embedded task and prints the held-out
/// evaluation before and after.
///
/// With no arguments: writes the model compiled into the program (a tiny Llama that fblayout
/// pretrained on the narrative books of the King James Bible, examples/kjv/model) and the task
/// (language modelling on the Book of Proverbs) to a temporary directory, evaluates the model
/// on a held-out tenth of the task, fine-tunes it with the Trainer on the rest (CPU executor,
/// f64), evaluates it again and prints the change. `--model DIR` and `--data FILE` fine-tune
/// your own model or data instead (`fblayout finetune` has every setting). `fblayout step` runs
/// the planner's training step of the shipped encoder on the GPU, checked and timed.
#[derive(Parser, Debug)]
#[command(version, args_conflicts_with_subcommands = true)]
struct Args {
    /// Another job than the default run.
    #[command(subcommand)]
    command: Option<Command>,
    #[command(flatten)]
    job: job::JobArgs,
}

/// The jobs besides the default run.
#[derive(clap::Subcommand, Debug)]
enum Command {
    /// Run one training step of the shipped encoder, planned under row-major layouts and under
    /// the planner's choice, on the GPU, checked against the CPU executor in f64 and timed.
    ///
    /// Builds the encoder's training graph (forward, backward, AdamW), plans every tensor's
    /// layout twice (unified row-major, and the planner's activation-guided choice) and each
    /// plan's memory, prints the plans' summary, runs one step of each on the GPU from the same
    /// parameters and batch, checks the loss and every parameter's gradient against the CPU
    /// executor in f64, then times a few steps of each and prints the ratio. The size follows
    /// the adapter: the MiniLM-sized encoder at batch 32 × sequence 128 on a GPU, a small one
    /// on a software adapter (lavapipe, llvmpipe) or the CPU; the size flags override it.
    Step(step::StepArgs),
    /// Show the layout plan and memory plan of a shipped model's training step (encoder or
    /// decoder), every tensor's layout and why.
    Plan(plan::PlanArgs),
    /// Fine-tune a Hugging Face model directory on a data file (on the CPU executor, f64), in
    /// full or with LoRA, as a language model or a classifier: progress, held-out evaluation
    /// (loss and perplexity, or loss and accuracy), checkpoints that `--resume` continues
    /// exactly, loss curves, and the export of what was trained (`<out>/export/`). Ctrl-C stops
    /// after the step, checkpointed (exit status 130). The book's chapter "Fine-tuning" has
    /// the details.
    Finetune(finetune::FinetuneArgs),
}

fn main() -> ExitCode {
    let args = Args::parse();
    let failed = |e: &dyn std::error::Error| (error_chain(e), ExitCode::FAILURE);
    let result = match &args.command {
        Some(Command::Plan(plan_args)) => plan::run(plan_args).map_err(|e| failed(&e)),
        Some(Command::Finetune(ft)) => {
            finetune::run(ft).map_err(|e| (error_chain(&e), e.exit_code()))
        }
        Some(Command::Step(step_args)) => step::run(step_args).map_err(|e| failed(&e)),
        None => job::run(&args.job).map_err(|e| failed(&e)),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err((message, code)) => {
            eprintln!("fblayout: error: {message}");
            code
        }
    }
}

/// `error` and its sources, joined by `: ` where a source's text is not already in its
/// message.
fn error_chain(error: &dyn std::error::Error) -> String {
    let mut message = error.to_string();
    let mut source = error.source();
    while let Some(s) = source {
        let text = s.to_string();
        if !message.contains(&text) {
            message = format!("{message}: {text}");
        }
        source = s.source();
    }
    message
}
