//! Pretrains the model that `fblayout` (the main job, no arguments) fine-tunes: a tiny Llama
//! trained from scratch with fblayout on the narrative books of the King James Bible, written as
//! a Hugging Face model directory through fblayout-hf's export.
//!
//! The exact commands that made `examples/kjv/model/`, from the repository root (the corpus
//! and the tokenizer come from `examples/kjv/make_data.py`; see `examples/kjv/README.md`):
//!
//! ```sh
//! gunzip -k examples/kjv/pretrain.txt.gz
//! cargo run --release -p fblayout-examples --example pretrain_default
//! ```
//!
//! 1. It writes the initial model directory in `--work` (default `target/pretrain_default`):
//!    `config.json` (the shape in [`CONFIG`]), the tokenizer `examples/kjv/model/tokenizer.json`,
//!    and `model.safetensors` holding fblayout-plan's initial values of every weight
//!    ([`initial_values`], seed [`SEED`]) under Hugging Face's names and orientation.
//! 2. It trains that model with [`Trainer`] (the CPU executor, `f64`) as a language model on
//!    `examples/kjv/pretrain.txt`, [`STEPS`] steps of batch [`BATCH`] × sequence [`SEQ`],
//!    AdamW at a peak rate of [`LR`] after [`WARMUP`] warmup steps, decaying along a cosine,
//!    0.5 % of the corpus held out; the run's checkpoint, log and curves are in `--work/run`
//!    (`--resume` continues an interrupted run exactly).
//! 3. It exports the trained weights with [`fblayout_hf::export::model`] to `--out` (default
//!    `examples/kjv/model`): `config.json`, `model.safetensors` (`f32`) and `tokenizer.json` —
//!    the files the main job embeds.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::Parser;
use fblayout_hf::config::ModelConfig;
use fblayout_hf::names::NameMap;
use fblayout_hf::{CONFIG_FILE, ModelDir, TOKENIZER_FILE, WEIGHTS_FILE};
use fblayout_plan::exec::initial_values;
use fblayout_train::{CHECKPOINT_FILE, Decay, Event, Task, Trainer};

/// The model's `config.json`: a 2-block Llama of width 64 (4 query heads and 2 key/value heads
/// of 16), SwiGLU feed-forward 176, the 512-entry tokenizer, untied head, positions up to 128.
const CONFIG: &str = r#"{
  "architectures": ["LlamaForCausalLM"],
  "model_type": "llama",
  "vocab_size": 512,
  "hidden_size": 64,
  "intermediate_size": 176,
  "num_hidden_layers": 2,
  "num_attention_heads": 4,
  "num_key_value_heads": 2,
  "head_dim": 16,
  "hidden_act": "silu",
  "max_position_embeddings": 128,
  "rms_norm_eps": 1e-06,
  "rope_theta": 10000.0,
  "attention_bias": false,
  "mlp_bias": false,
  "tie_word_embeddings": false,
  "bos_token_id": 0,
  "eos_token_id": 1,
  "pad_token_id": 2,
  "torch_dtype": "float32"
}
"#;

/// The seed of the initial weights and of the data's shuffle and split.
const SEED: u64 = 2024;
/// Optimizer steps.
const STEPS: u32 = 1500;
/// Sequences per step.
const BATCH: u32 = 8;
/// Tokens per sequence.
const SEQ: u32 = 64;
/// The peak learning rate.
const LR: f64 = 3e-3;
/// Warmup steps.
const WARMUP: u32 = 50;
/// The fraction of the corpus held out.
const HELD_OUT: f64 = 0.005;
/// Evaluate and save every this many steps.
const EVERY: u32 = 100;

/// Pretrains the main job's model (see the module docs).
#[derive(Parser, Debug)]
struct Args {
    /// The pretraining corpus, one document a line (`gunzip -k examples/kjv/pretrain.txt.gz`).
    #[arg(long, default_value = "examples/kjv/pretrain.txt")]
    corpus: PathBuf,
    /// The tokenizer.
    #[arg(long, default_value = "examples/kjv/model/tokenizer.json")]
    tokenizer: PathBuf,
    /// The working directory: the initial model (`init/`) and the run (`run/`).
    #[arg(long, default_value = "target/pretrain_default")]
    work: PathBuf,
    /// Where the trained model directory is written.
    #[arg(long, default_value = "examples/kjv/model")]
    out: PathBuf,
    /// Optimizer steps.
    #[arg(long, default_value_t = STEPS)]
    steps: u32,
    /// Continue the run in `--work` from its checkpoint.
    #[arg(long)]
    resume: bool,
}

type Error = Box<dyn std::error::Error>;

/// Writes the initial model directory `dir` (see the module docs, step 1).
fn write_initial(dir: &Path, tokenizer: &Path) -> Result<(), Error> {
    std::fs::create_dir_all(dir)?;
    std::fs::write(dir.join(CONFIG_FILE), CONFIG)?;
    std::fs::copy(tokenizer, dir.join(TOKENIZER_FILE))
        .map_err(|e| format!("{}: {e}", tokenizer.display()))?;
    let file = dir.join(CONFIG_FILE);
    let config = ModelConfig::from_json(CONFIG, &file)?;
    let ModelConfig::Llama(llama) = &config else {
        return Err("CONFIG is not a Llama".into());
    };
    let graph =
        fblayout_plan::models::llama::build(&fblayout_hf::graph::llama_config(llama, &file)?)?;
    let names = NameMap::for_config(&config);
    let mut tensors = Vec::new();
    for t in fblayout_hf::graph::base_weights(&graph) {
        let name = graph.tensor(t).name.clone();
        let values = initial_values(&graph, t, SEED);
        let values = fblayout_hf::graph::to_checkpoint(&config, &graph, &name, &values)
            .ok_or_else(|| format!("`{name}` is not in the graph"))?;
        let shape = names
            .get(&name)
            .ok_or_else(|| format!("`{name}`: no Hugging Face tensor of that name"))?
            .shape
            .clone();
        let bytes: Vec<u8> = values
            .iter()
            .flat_map(|&v| (v as f32).to_le_bytes())
            .collect();
        tensors.push((name, shape, bytes));
    }
    let views = tensors
        .iter()
        .map(|(n, shape, bytes)| {
            safetensors::tensor::TensorView::new(safetensors::Dtype::F32, shape.clone(), bytes)
                .map(|v| (n.as_str(), v))
        })
        .collect::<Result<Vec<_>, _>>()?;
    let metadata = std::collections::HashMap::from([("format".to_owned(), "pt".to_owned())]);
    std::fs::write(
        dir.join(WEIGHTS_FILE),
        safetensors::serialize(views, Some(metadata))?,
    )?;
    Ok(())
}

fn run(args: &Args) -> Result<(), Error> {
    if !args.corpus.is_file() {
        return Err(format!(
            "{}: no such file (`gunzip -k examples/kjv/pretrain.txt.gz` writes the shipped \
             corpus)",
            args.corpus.display()
        )
        .into());
    }
    let init = args.work.join("init");
    let run_dir = args.work.join("run");
    if !args.resume {
        write_initial(&init, &args.tokenizer)?;
    }
    let mut trainer = Trainer::builder(&init, &args.corpus, Task::Lm)
        .steps(args.steps)
        .batch(BATCH)
        .seq(SEQ)
        .lr(LR)
        .warmup(WARMUP)
        .decay(Decay::Cosine)
        .weight_decay(0.01)
        .eval_fraction(HELD_OUT)
        .eval_every(EVERY)
        .save_every(EVERY)
        .seed(SEED)
        .out(&run_dir)
        .resume(args.resume)
        .build()?;
    println!("{}", trainer.plan_summary());
    let mut tokens = 0u64;
    let mut seconds = 0.0;
    let summary = trainer.run(|event| match event {
        Event::Step {
            step,
            loss,
            tokens: n,
            seconds: s,
            ..
        } => {
            tokens += n;
            seconds += s;
            if step % 10 == 0 {
                println!(
                    "step {step}: loss {loss:.4}, {:.0} tokens/s",
                    tokens as f64 / seconds.max(1e-9)
                );
            }
        }
        Event::Eval(e) => println!(
            "step {}: held-out loss {:.4}, perplexity {:.2}",
            e.step, e.loss, e.perplexity
        ),
        Event::Started { .. } | Event::Saved { .. } => {}
    })?;
    println!("{} steps in {:.0} s", summary.steps, summary.seconds);

    // The trained weights, by the graph's names, from the run's last checkpoint.
    let dir = ModelDir::open(&init)?;
    let graph = fblayout_hf::graph::build(&dir)?;
    let saved = fblayout_train::checkpoint::load(&run_dir.join(CHECKPOINT_FILE))?;
    let values: Vec<(String, Vec<f64>)> = saved
        .tensors
        .into_iter()
        .map(|(name, _, v)| (name, v))
        .collect();
    fblayout_hf::export::model(&dir, &graph, &values, None, &args.out)?;
    println!("the model: {}", args.out.display());
    Ok(())
}

fn main() -> ExitCode {
    let args = Args::parse();
    match run(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("pretrain_default: error: {e}");
            ExitCode::FAILURE
        }
    }
}
