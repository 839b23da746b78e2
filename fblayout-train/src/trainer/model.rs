//! The model a run trains: its training graph (the task checked against the architecture, the
//! classification head sized, LoRA's adapters added) and every weight's starting values.

use fblayout_hf::config::ModelConfig;
use fblayout_hf::graph::GraphError;
use fblayout_hf::{CONFIG_FILE, ModelDir};
use fblayout_plan::exec::initial_values;
use fblayout_plan::graph::optimizer::add_adamw;
use fblayout_plan::graph::{Graph, derive_backward};
use fblayout_plan::lora::{self, Lora, LoraConfig};
use fblayout_plan::models::{bert, gpt2, llama};

use super::{Task, TrainError};

/// The prefix of the classification head's weights (`classifier.weight`, `classifier.bias`):
/// what a `BertModel` checkpoint lacks, and what a head of another size can't take from it.
const HEAD_PREFIX: &str = "classifier.";

/// The training graph of a run, and what it starts from.
#[derive(Debug)]
pub(super) struct Model {
    /// Forward, loss, backward, AdamW.
    pub(super) graph: Graph,
    /// LoRA's adapters, where the run trains them.
    pub(super) lora: Option<Lora>,
    /// The classes' names, index by index (classification).
    pub(super) classes: Vec<String>,
    /// Whether the classes differ from the config's (so an export writes them into its
    /// `config.json`).
    pub(super) relabelled: bool,
    /// Every weight's starting values, by name.
    pub(super) values: Vec<(String, Vec<f64>)>,
}

/// peft's default `target_modules` for a model of `config` (its
/// `TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING`): the attention's query and value,
/// what a [`LoraConfig`] without targets adapts.
pub(super) fn default_lora_targets(config: &ModelConfig) -> Vec<String> {
    let targets: &[&str] = match config {
        ModelConfig::Gpt2(_) => &["c_attn"],
        ModelConfig::Llama(_) => &["q_proj", "v_proj"],
        ModelConfig::Bert(_) => &["query", "value"],
    };
    targets.iter().map(|&t| t.to_owned()).collect()
}

/// Checks that `task` fits the architecture of `config`.
fn check_task(config: &ModelConfig, task: Task) -> Result<(), TrainError> {
    let bad = |what: String| Err(TrainError::Setting(what));
    match (task, config) {
        (Task::Lm, ModelConfig::Bert(_)) => bad(format!(
            "--task lm needs a language model, and a {} is a sequence classifier here: use \
             --task classify",
            config.class_name()
        )),
        (Task::Classify, ModelConfig::Gpt2(_) | ModelConfig::Llama(_)) => bad(format!(
            "--task classify needs a model with a classification head (BERT), and a {} is a \
             language model: use --task lm",
            config.class_name()
        )),
        _ => Ok(()),
    }
}

/// The forward of the model in `dir`, its classification head `classes` wide where given, a
/// language model's head fused with its cross-entropy `head_chunk` tokens at a time where
/// given.
fn forward(
    dir: &ModelDir,
    classes: Option<u32>,
    head_chunk: Option<u32>,
) -> Result<Graph, GraphError> {
    let file = dir.dir().join(CONFIG_FILE);
    let graph = |source| GraphError::Graph {
        file: file.clone(),
        source,
    };
    match (dir.config(), classes, head_chunk) {
        (ModelConfig::Bert(c), Some(n), _) if n as usize != c.num_labels() => {
            let mut spec = fblayout_hf::graph::bert_config(c, &file)?;
            spec.labels = n;
            bert::forward(&spec).map_err(graph)
        }
        (ModelConfig::Gpt2(c), _, Some(chunk)) => {
            let spec = fblayout_hf::graph::gpt2_config(c, &file)?.with_head_chunk(chunk);
            gpt2::forward(&spec).map_err(graph)
        }
        (ModelConfig::Llama(c), _, Some(chunk)) => {
            let spec = fblayout_hf::graph::llama_config(c, &file)?.with_head_chunk(chunk);
            llama::forward(&spec).map_err(graph)
        }
        _ => fblayout_hf::graph::forward(dir),
    }
}

/// The model of `dir` for `task` (see the module docs): the head `classes` wide (else as the
/// config says), with LoRA's adapters where `lora` is given (initialised from `seed`, as peft
/// does).
pub(super) fn build(
    dir: &ModelDir,
    task: Task,
    classes: Option<u32>,
    lora: Option<&LoraConfig>,
    head_chunk: Option<u32>,
    seed: u64,
) -> Result<Model, TrainError> {
    check_task(dir.config(), task)?;
    if classes == Some(0) {
        return Err(TrainError::Setting("--labels must be at least 1".into()));
    }
    if classes.is_some() && task != Task::Classify {
        return Err(TrainError::Setting(
            "--labels sizes a classification head: it needs --task classify".into(),
        ));
    }
    if head_chunk.is_some() && task != Task::Lm {
        return Err(TrainError::Setting(
            "--head-chunk fuses a language model's head with its loss: it needs --task lm".into(),
        ));
    }
    let file = dir.dir().join(CONFIG_FILE);
    let mut graph = forward(dir, classes, head_chunk)?;
    let adapters = lora
        .map(|config| {
            let mut config = config.clone();
            if config.target_modules.is_empty() {
                config.target_modules = default_lora_targets(dir.config());
            }
            lora::apply(&mut graph, &config)
        })
        .transpose()
        .map_err(|source| GraphError::Lora {
            file: file.clone(),
            source,
        })?;
    derive_backward(&mut graph)
        .and_then(|()| add_adamw(&mut graph).map(|_| ()))
        .map_err(|source| GraphError::Graph { file, source })?;

    let (classes, relabelled) = match dir.config() {
        ModelConfig::Bert(c) => match classes {
            Some(n) if n as usize != c.num_labels() => {
                ((0..n).map(|i| format!("LABEL_{i}")).collect(), true)
            }
            _ => (c.id2label.clone(), false),
        },
        _ => (Vec::new(), false),
    };
    let mut values = Vec::new();
    let mut fresh = Vec::new();
    for p in fblayout_hf::graph::base_weights(&graph) {
        let name = graph.tensor(p).name.clone();
        let head = task == Task::Classify && name.starts_with(HEAD_PREFIX);
        // A `BertModel` checkpoint has no head, and one of another width can't be used.
        let v = match fblayout_hf::graph::parameter(dir, &graph, p) {
            Ok(v) if !(head && relabelled) => v,
            Err(e) if !(head && matches!(e, GraphError::Parameter { .. })) => {
                return Err(e.into());
            }
            _ => {
                fresh.push(name.clone());
                initial_values(&graph, p, seed)
            }
        };
        values.push((name, v));
    }
    if let Some(first) = fresh.first().filter(|_| adapters.is_some()) {
        return Err(TrainError::Setting(format!(
            "LoRA freezes every weight of the model, and `{first}` is not in the checkpoint \
             (or, with --labels, of another width): the classification head would stay at its \
             random start. Fine-tune in full (without --lora)"
        )));
    }
    if let Some(adapters) = &adapters {
        values.extend(adapters.initial_values(&graph, seed));
    }
    Ok(Model {
        graph,
        lora: adapters,
        classes,
        relabelled,
        values,
    })
}
