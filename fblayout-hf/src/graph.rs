//! From a loaded model to fblayout's training graph: the architecture built from its config,
//! and every parameter's values read from the checkpoint.
//!
//! The graph's parameters carry the checkpoint's names (canonical, as the task class names
//! them); a linear layer's weight is stored `[d_in, d_out]` in the graph, the transpose of
//! `nn.Linear`'s `[out, in]` (BERT, the Llama family), so [`parameters`] transposes it and
//! [`to_checkpoint`] transposes a graph value back; GPT-2's `Conv1D` already stores `[in, out]`.
//!
//! GPT-2 ([`fblayout_plan::models::gpt2`], its head tied to the token table) and the Llama
//! family (Llama, and Mistral and Qwen2 without biases; [`fblayout_plan::models::llama`]) and
//! BERT ([`fblayout_plan::models::bert`], with its sequence-classification head; a `BertModel`
//! checkpoint, saved without the `bert.` prefix, maps onto its names) are built.
//!
//! ```
//! use fblayout_hf::ModelDir;
//!
//! let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
//! let model = ModelDir::open(root.join("tests/fixtures/hf/llama/model"))?;
//! let graph = fblayout_hf::graph::build(&model)?;
//! let values = fblayout_hf::graph::parameters(&model, &graph)?;
//! assert_eq!(values.len(), graph.params().len());
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::path::{Path, PathBuf};

use fblayout_plan::graph::optimizer::add_adamw;
use fblayout_plan::graph::{Act, Graph, Role, TensorId, derive_backward};
use fblayout_plan::lora::PEFT_PREFIX;
use fblayout_plan::models::bert::{self, BertConfig as PlanBert};
use fblayout_plan::models::gpt2::{self, Gpt2Config as PlanGpt2};
use fblayout_plan::models::llama::{self, LlamaConfig as PlanLlama};

use crate::config::{self, Activation, ModelConfig, RopeScaling};
use crate::names::NameMismatch;
use crate::weights::WeightsError;
use crate::{CONFIG_FILE, ModelDir};

/// Why a model could not be turned into a graph and its values.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum GraphError {
    /// The model uses something the graphs can't express yet.
    #[error("{file}: {what} is not supported yet")]
    Unsupported {
        /// The config file.
        file: PathBuf,
        /// What.
        what: String,
    },
    /// A size of the config doesn't fit fblayout's 32-bit extents.
    #[error("{file}: `{field}` = {value} is too large")]
    TooLarge {
        /// The config file.
        file: PathBuf,
        /// The field.
        field: &'static str,
        /// Its value.
        value: usize,
    },
    /// The graph could not be built.
    #[error("building the graph of {file}: {source}")]
    Graph {
        /// The config file.
        file: PathBuf,
        /// Why.
        source: fblayout_plan::graph::GraphError,
    },
    /// LoRA could not be applied.
    #[error("{file}: {source}")]
    Lora {
        /// The config file.
        file: PathBuf,
        /// Why.
        source: fblayout_plan::lora::LoraError,
    },
    /// The checkpoint's tensors don't match the architecture.
    #[error(transparent)]
    Names(#[from] NameMismatch),
    /// A tensor could not be read.
    #[error(transparent)]
    Weights(#[from] WeightsError),
    /// A graph parameter has no tensor in the checkpoint, or one of another shape.
    #[error("parameter `{name}`: {detail}")]
    Parameter {
        /// The parameter.
        name: String,
        /// What does not fit.
        detail: String,
    },
}

/// The training graph of the model in `dir` (forward, loss, backward, AdamW).
pub fn build(dir: &ModelDir) -> Result<Graph, GraphError> {
    let mut g = forward(dir)?;
    derive_backward(&mut g)
        .and_then(|()| add_adamw(&mut g).map(|_| ()))
        .map_err(|source| GraphError::Graph {
            file: dir.dir().join(CONFIG_FILE),
            source,
        })?;
    Ok(g)
}

/// The forward and loss of the model in `dir`, before its backward: what a transform of the
/// forward ([`lora::build`](crate::lora::build)) rewrites.
pub fn forward(dir: &ModelDir) -> Result<Graph, GraphError> {
    let file = dir.dir().join(CONFIG_FILE);
    match dir.config() {
        ModelConfig::Llama(c) => {
            let spec = llama_config(c, &file)?;
            llama::forward(&spec).map_err(|source| GraphError::Graph { file, source })
        }
        ModelConfig::Gpt2(c) => {
            let spec = gpt2_config(c, &file)?;
            gpt2::forward(&spec).map_err(|source| GraphError::Graph { file, source })
        }
        ModelConfig::Bert(c) => {
            let spec = bert_config(c, &file)?;
            bert::forward(&spec).map_err(|source| GraphError::Graph { file, source })
        }
    }
}

/// The graph-side configuration of a BERT `config` (read from `file`).
pub fn bert_config(c: &config::BertConfig, file: &Path) -> Result<PlanBert, GraphError> {
    let small = |field: &'static str, value: usize| extent(file, field, value);
    Ok(PlanBert::new(
        small("vocab_size", c.vocab_size)?,
        small("hidden_size", c.hidden_size)?,
        small("num_attention_heads", c.num_attention_heads)?,
        small("id2label", c.num_labels())?,
    )
    .with_max_positions(small("max_position_embeddings", c.max_position_embeddings)?)
    .with_type_vocab(small("type_vocab_size", c.type_vocab_size)?)
    .with_ffn(small("intermediate_size", c.intermediate_size)?)
    .with_layers(small("num_hidden_layers", c.num_hidden_layers)?)
    .with_eps(c.layer_norm_eps as f32)
    .with_activation(act(c.hidden_act)))
}

/// The graph's activation of a config's `activation`.
fn act(activation: Activation) -> Act {
    match activation {
        Activation::Gelu => Act::Gelu,
        Activation::GeluTanh => Act::GeluTanh,
        Activation::Silu => Act::Silu,
    }
}

/// `value` of config field `field` (in `file`) as a 32-bit extent.
fn extent(file: &Path, field: &'static str, value: usize) -> Result<u32, GraphError> {
    u32::try_from(value).map_err(|_| GraphError::TooLarge {
        file: file.to_owned(),
        field,
        value,
    })
}

/// The graph-side configuration of a GPT-2 `config` (read from `file`).
pub fn gpt2_config(c: &config::Gpt2Config, file: &Path) -> Result<PlanGpt2, GraphError> {
    if !c.tie_word_embeddings {
        return Err(GraphError::Unsupported {
            file: file.to_owned(),
            what: "a GPT-2 whose head is not tied to its embeddings".into(),
        });
    }
    let activation = act(c.activation_function);
    Ok(PlanGpt2::new(
        extent(file, "vocab_size", c.vocab_size)?,
        extent(file, "n_embd", c.n_embd)?,
        extent(file, "n_head", c.n_head)?,
    )
    .with_max_positions(extent(file, "n_positions", c.n_positions)?)
    .with_ffn(extent(file, "n_inner", c.n_inner)?)
    .with_layers(extent(file, "n_layer", c.n_layer)?)
    .with_eps(c.layer_norm_epsilon as f32)
    .with_activation(activation))
}

/// The graph-side configuration of a Llama-family `config` (read from `file`).
pub fn llama_config(c: &config::LlamaConfig, file: &Path) -> Result<PlanLlama, GraphError> {
    let unsupported = |what: &str| GraphError::Unsupported {
        file: file.to_owned(),
        what: what.to_owned(),
    };
    if c.qkv_bias || c.o_bias || c.mlp_bias {
        return Err(unsupported("a Llama-family model with biases"));
    }
    if c.tie_word_embeddings {
        return Err(unsupported(
            "a Llama-family model whose head is tied to its embeddings",
        ));
    }
    let small = |field: &'static str, value: usize| extent(file, field, value);
    let scaling = match c.rope.scaling {
        RopeScaling::None => fblayout_kernels::ops::RopeScaling::None,
        RopeScaling::Linear { factor } => fblayout_kernels::ops::RopeScaling::Linear { factor },
    };
    Ok(PlanLlama::new(
        small("vocab_size", c.vocab_size)?,
        small("hidden_size", c.hidden_size)?,
        small("num_attention_heads", c.num_attention_heads)?,
    )
    .with_kv_heads(small("num_key_value_heads", c.num_key_value_heads)?)
    .with_head_dim(small("head_dim", c.head_dim)?)
    .with_ffn(small("intermediate_size", c.intermediate_size)?)
    .with_layers(small("num_hidden_layers", c.num_hidden_layers)?)
    .with_eps(c.rms_norm_eps as f32)
    .with_rope(c.rope.theta, scaling)
    .with_max_positions(small("max_position_embeddings", c.max_position_embeddings)?))
}

/// Whether parameter `p` of `graph` is stored transposed from the checkpoint of a model of
/// `config`: a linear layer's weight (`[d_in, d_out]` in the graph) where the checkpoint holds
/// `nn.Linear`'s `[out, in]` (BERT, the Llama family), not GPT-2's `Conv1D`, whose `[in, out]`
/// is the graph's.
pub(crate) fn is_transposed(config: &ModelConfig, graph: &Graph, p: TensorId) -> bool {
    if matches!(config, ModelConfig::Gpt2(_)) {
        return false;
    }
    graph.nodes().iter().any(|n| {
        n.op.linear_weight().is_some_and(|weight| {
            n.op.input_roles()
                .iter()
                .zip(&n.inputs)
                .any(|(&role, &t)| role == weight && t == p)
        })
    })
}

/// `values` of a `[rows, cols]` matrix, transposed.
pub(crate) fn transpose(values: &[f64], rows: usize, cols: usize) -> Vec<f64> {
    let mut out = vec![0.0; values.len()];
    for r in 0..rows {
        for c in 0..cols {
            out[c * rows + r] = values[r * cols + c];
        }
    }
    out
}

/// The weights of `graph` that come from the model's checkpoint: every parameter, trained or
/// frozen, but LoRA's adapter matrices (trained parameters named with peft's prefix, whose
/// values come from an adapter or their initialisation).
pub fn base_weights(graph: &Graph) -> Vec<TensorId> {
    graph
        .weights()
        .into_iter()
        .filter(|&t| {
            let tensor = graph.tensor(t);
            !(tensor.role == Role::Param && tensor.name.starts_with(PEFT_PREFIX))
        })
        .collect()
}

/// Every weight of `graph` from the checkpoint ([`base_weights`]) with its values from the
/// checkpoint of `dir`, by name, in the graph's orientation (a linear weight transposed).
/// Every expected tensor must be there with the shape the config implies.
pub fn parameters(dir: &ModelDir, graph: &Graph) -> Result<Vec<(String, Vec<f64>)>, GraphError> {
    base_weights(graph)
        .into_iter()
        .map(|p| Ok((graph.tensor(p).name.clone(), parameter(dir, graph, p)?)))
        .collect()
}

/// The values of parameter `p` of `graph` from the checkpoint of `dir`, in the graph's
/// orientation, as [`parameters`] reads each: for a checkpoint that lacks some (a `BertModel`
/// has no classifier), the others.
pub fn parameter(dir: &ModelDir, graph: &Graph, p: TensorId) -> Result<Vec<f64>, GraphError> {
    let names = dir.check_names()?;
    let name = graph.tensor(p).name.clone();
    let missing = || GraphError::Parameter {
        name: name.clone(),
        detail: "the checkpoint has no such tensor".into(),
    };
    let actual = names.actual(&name).ok_or_else(missing)?;
    let info = dir.checkpoint().get(actual).ok_or_else(missing)?;
    let shape: Vec<usize> = info.shape.clone();
    let want = graph.tensor(p).fixed_extents();
    let linear = is_transposed(dir.config(), graph, p);
    let expected: Vec<usize> = if linear {
        want.iter().rev().copied().collect()
    } else {
        want.clone()
    };
    if shape != expected {
        return Err(GraphError::Parameter {
            name,
            detail: format!(
                "the checkpoint's `{actual}` is {shape:?}; the graph needs {expected:?}"
            ),
        });
    }
    let values: Vec<f64> = dir
        .checkpoint()
        .read_f32(actual)?
        .into_iter()
        .map(f64::from)
        .collect();
    Ok(if linear {
        transpose(&values, shape[0], shape[1])
    } else {
        values
    })
}

/// `values` of parameter (or gradient) `name` of `graph`, built for a model of `config`, in
/// the checkpoint's orientation: a linear weight (or its gradient) transposed back to
/// `nn.Linear`'s `[out, in]` where [`parameters`] transposed it.
pub fn to_checkpoint(
    config: &ModelConfig,
    graph: &Graph,
    name: &str,
    values: &[f64],
) -> Option<Vec<f64>> {
    let t = graph.find(name)?;
    let p = match graph.tensor(t).role {
        Role::Grad { of } => of,
        _ => t,
    };
    if !is_transposed(config, graph, p) {
        return Some(values.to_vec());
    }
    let e = graph.tensor(p).fixed_extents();
    Some(transpose(values, e[0], e[1]))
}
