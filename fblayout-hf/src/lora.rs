//! LoRA on a loaded model: the graph with its adapters ([`fblayout_plan::lora`]), and peft's
//! adapter directories read.
//!
//! A peft adapter directory holds `adapter_config.json` (the settings: `r`, `lora_alpha`,
//! `lora_dropout`, `target_modules`, …) and `adapter_model.safetensors`, whose tensors are
//! named `base_model.model.<module>.lora_A.weight` (`[r, in]`) and `…lora_B.weight`
//! (`[out, r]`): the names and orientation the graph's adapters take, so values load as
//! stored. peft's `modules_to_save` (the classifier of a `SEQ_CLS` adapter) are saved in full
//! as `base_model.model.<name>` (`classifier.weight`, `[out, in]`), trained parameters of the
//! graph ([`Lora::saved`]); [`read_trained`] reads them with the matrices.
//!
//! ```
//! use fblayout_hf::{ModelDir, lora};
//!
//! let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/hf/llama");
//! let model = ModelDir::open(root.join("model"))?;
//! let config = lora::read_config(&root.join("lora_adapter"))?;
//! let (graph, adapters) = lora::build(&model, &config)?;
//! let values = lora::read_adapter(&root.join("lora_adapter"), &graph, &adapters)?;
//! assert_eq!(values.len(), graph.params().len());
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::path::{Path, PathBuf};

use fblayout_plan::graph::optimizer::add_adamw;
use fblayout_plan::graph::{Graph, derive_backward};
use fblayout_plan::lora::{self as plan_lora, Lora, LoraConfig, LoraError, PEFT_PREFIX, saved_by};

use crate::graph::{GraphError, forward, is_transposed, transpose};
use crate::weights::{Checkpoint, WeightsError};
use crate::{CONFIG_FILE, ModelDir};

/// A peft adapter's settings file.
pub const ADAPTER_CONFIG_FILE: &str = "adapter_config.json";
/// A peft adapter's weights file.
pub const ADAPTER_WEIGHTS_FILE: &str = "adapter_model.safetensors";

/// Why a peft adapter could not be read.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AdapterError {
    /// The settings file could not be read.
    #[error("reading {file}: {source}")]
    Io {
        /// The file.
        file: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The settings file is not what peft writes, or asks for what fblayout's LoRA lacks.
    #[error("{file}: {detail}")]
    Config {
        /// The file.
        file: PathBuf,
        /// What is wrong.
        detail: String,
    },
    /// The weights file could not be read.
    #[error(transparent)]
    Weights(#[from] WeightsError),
    /// The base model's weights could not be read.
    #[error(transparent)]
    Model(#[from] Box<GraphError>),
    /// The adapter trains a module in full (peft's `modules_to_save`) that the graph has no
    /// parameter for, or holds a tensor that is neither an adapter matrix nor such a module's.
    #[error("{file}: module `{module}`: {detail}")]
    Module {
        /// The weights file.
        file: PathBuf,
        /// The module (the `modules_to_save` entry, or the tensor's name).
        module: String,
        /// What is wrong.
        detail: String,
    },
    /// An adapter matrix is missing or misshaped.
    #[error("{file}: `{name}`: {detail}")]
    Tensor {
        /// The weights file.
        file: PathBuf,
        /// The tensor.
        name: String,
        /// What is wrong.
        detail: String,
    },
}

/// The LoRA settings of the peft adapter directory `dir` (its `adapter_config.json`).
/// `target_modules` must be a list of names (peft's regex form is refused), `peft_type`
/// `LORA` and `bias` `none`.
pub fn read_config(dir: &Path) -> Result<LoraConfig, AdapterError> {
    let file = dir.join(ADAPTER_CONFIG_FILE);
    let text = std::fs::read_to_string(&file).map_err(|source| AdapterError::Io {
        file: file.clone(),
        source,
    })?;
    let bad = |detail: String| AdapterError::Config {
        file: file.clone(),
        detail,
    };
    let json: serde_json::Value =
        serde_json::from_str(&text).map_err(|e| bad(format!("not JSON: {e}")))?;
    let field = |key: &str| json.get(key).filter(|v| !v.is_null());
    match field("peft_type").and_then(|v| v.as_str()) {
        Some("LORA") => {}
        other => return Err(bad(format!("peft_type is {other:?}, not \"LORA\""))),
    }
    match field("bias").and_then(|v| v.as_str()) {
        None | Some("none") => {}
        Some(bias) => {
            return Err(bad(format!(
                "bias \"{bias}\" is not supported: only \"none\""
            )));
        }
    }
    // peft trains these modules in full beside the adapters (a classifier, for SEQ_CLS).
    let saved = match field("modules_to_save") {
        None => Vec::new(),
        Some(v) => v
            .as_array()
            .and_then(|m| {
                m.iter()
                    .map(|t| t.as_str().map(str::to_owned))
                    .collect::<Option<Vec<String>>>()
            })
            .ok_or_else(|| {
                bad(format!(
                    "`modules_to_save` must be a list of module names, not {v}"
                ))
            })?,
    };
    for flag in ["use_dora", "use_rslora"] {
        if field(flag).and_then(|v| v.as_bool()) == Some(true) {
            return Err(bad(format!("{flag} is not supported")));
        }
    }
    let rank = field("r")
        .and_then(|v| v.as_u64())
        .and_then(|r| u32::try_from(r).ok())
        .ok_or_else(|| bad("`r` must be a positive integer".into()))?;
    let alpha = field("lora_alpha")
        .and_then(|v| v.as_f64())
        .ok_or_else(|| bad("`lora_alpha` must be a number".into()))?;
    let dropout = field("lora_dropout")
        .and_then(|v| v.as_f64())
        .unwrap_or(0.0);
    let targets = field("target_modules")
        .and_then(|v| v.as_array())
        .ok_or_else(|| bad("`target_modules` must be a list of module names".into()))?
        .iter()
        .map(|t| t.as_str().map(str::to_owned))
        .collect::<Option<Vec<String>>>()
        .ok_or_else(|| bad("`target_modules` must be a list of module names".into()))?;
    Ok(LoraConfig::new(rank, alpha, targets)
        .with_dropout(dropout)
        .with_modules_to_save(saved))
}

/// The training graph of the model in `dir` with LoRA's adapters (every base weight frozen
/// but those of `modules_to_save`, trained in full; see [`fblayout_plan::lora`]), and what
/// the adapters are.
pub fn build(dir: &ModelDir, config: &LoraConfig) -> Result<(Graph, Lora), GraphError> {
    let file = dir.dir().join(CONFIG_FILE);
    let mut g = forward(dir)?;
    let lora = plan_lora::apply(&mut g, config).map_err(|source| match source {
        LoraError::Graph(source) => GraphError::Graph {
            file: file.clone(),
            source,
        },
        source => GraphError::Lora {
            file: file.clone(),
            source,
        },
    })?;
    derive_backward(&mut g)
        .and_then(|()| add_adamw(&mut g).map(|_| ()))
        .map_err(|source| GraphError::Graph { file, source })?;
    Ok((g, lora))
}

/// Every adapter matrix of `lora` (in `graph`) with its values from the peft adapter
/// directory `dir`, by name, as stored (peft's orientation is the graph's).
///
/// An adapter that also trains modules in full (`modules_to_save` matched parameters of the
/// graph: [`Lora::saved`]) is read with [`read_trained`], which takes the model for their
/// orientation; here it is an error, not a silent half.
pub fn read_adapter(
    dir: &Path,
    graph: &Graph,
    lora: &Lora,
) -> Result<Vec<(String, Vec<f64>)>, AdapterError> {
    let file = dir.join(ADAPTER_WEIGHTS_FILE);
    if let Some(&p) = lora.saved.first() {
        return Err(AdapterError::Module {
            file,
            module: saved_by(&lora.config.modules_to_save, &graph.tensor(p).name)
                .unwrap_or_default()
                .to_owned(),
            detail: format!(
                "modules_to_save trains `{}` in full: read the adapter with \
                 `lora::read_trained`, which takes the model for the checkpoint's orientation",
                graph.tensor(p).name
            ),
        });
    }
    let checkpoint = Checkpoint::open(&file)?;
    accounted(&file, &checkpoint, graph, lora)?;
    matrices(&file, &checkpoint, graph, lora)
}

/// Every parameter that `lora` trains in `graph` (built from the model of `model`: see
/// [`build`]) with its values from the peft adapter directory `dir`, by name, in the graph's
/// orientation: the adapter matrices as stored, and the parameters of `modules_to_save`
/// ([`Lora::saved`], stored by peft as `base_model.model.<name>` in the checkpoint's
/// orientation), whose values replace the base model's. Every tensor of the adapter must be
/// one of them: a module the adapter trains in full that the graph lacks is an
/// [`AdapterError::Module`] naming it.
///
/// ```
/// use fblayout_hf::{ModelDir, lora};
///
/// // A peft SEQ_CLS adapter: LoRA on `query` and `value`, the classifier trained in full.
/// let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/hf/bert");
/// let model = ModelDir::open(root.join("model"))?;
/// let config = lora::read_config(&root.join("lora_adapter"))?;
/// assert_eq!(config.modules_to_save, ["classifier", "score"]);
/// let (graph, adapters) = lora::build(&model, &config)?;
/// assert_eq!(adapters.saved.len(), 2); // classifier.weight and classifier.bias
/// let values = lora::read_trained(&model, &root.join("lora_adapter"), &graph, &adapters)?;
/// assert_eq!(values.len(), graph.params().len());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn read_trained(
    model: &ModelDir,
    dir: &Path,
    graph: &Graph,
    lora: &Lora,
) -> Result<Vec<(String, Vec<f64>)>, AdapterError> {
    let file = dir.join(ADAPTER_WEIGHTS_FILE);
    let checkpoint = Checkpoint::open(&file)?;
    accounted(&file, &checkpoint, graph, lora)?;
    let mut out = matrices(&file, &checkpoint, graph, lora)?;
    for &p in &lora.saved {
        let tensor = graph.tensor(p);
        let key = format!("{PEFT_PREFIX}{}", tensor.name);
        let transposed = is_transposed(model.config(), graph, p);
        let mut want = tensor.fixed_extents();
        if transposed {
            want.reverse();
        }
        let problem = |detail: String| AdapterError::Tensor {
            file: file.clone(),
            name: key.clone(),
            detail,
        };
        let info = checkpoint.get(&key).ok_or_else(|| {
            problem(format!(
                "modules_to_save `{}` trains `{}` in full, and the adapter has no such tensor",
                saved_by(&lora.config.modules_to_save, &tensor.name).unwrap_or_default(),
                tensor.name
            ))
        })?;
        if info.shape != want {
            return Err(problem(format!(
                "the adapter's is {:?}; the model's is {want:?}",
                info.shape
            )));
        }
        let values: Vec<f64> = checkpoint
            .read_f32(&key)?
            .into_iter()
            .map(f64::from)
            .collect();
        let values = if transposed {
            transpose(&values, want[0], want[1])
        } else {
            values
        };
        out.push((tensor.name.clone(), values));
    }
    Ok(out)
}

/// Every weight of `graph` (built from the model of `model`: see [`build`]) with its values:
/// the base model's from its checkpoint ([`parameters`](crate::graph::parameters)), and what
/// the adapter of `dir` trains ([`read_trained`]) in place of the base's — what an executor
/// starts from to go on training, or to evaluate, the adapted model.
pub fn weights(
    model: &ModelDir,
    dir: &Path,
    graph: &Graph,
    lora: &Lora,
) -> Result<Vec<(String, Vec<f64>)>, AdapterError> {
    let trained = read_trained(model, dir, graph, lora)?;
    let mut values = crate::graph::parameters(model, graph).map_err(Box::new)?;
    values.retain(|(name, _)| !trained.iter().any(|(t, _)| t == name));
    values.extend(trained);
    Ok(values)
}

/// Checks that every tensor of the adapter `checkpoint` (the file `file`) is an adapter
/// matrix of `lora` or a parameter of its `modules_to_save`.
fn accounted(
    file: &Path,
    checkpoint: &Checkpoint,
    graph: &Graph,
    lora: &Lora,
) -> Result<(), AdapterError> {
    for info in checkpoint.tensors() {
        let name = &info.name;
        let known = graph.find(name).is_some_and(|t| lora.is_adapter(t))
            || name
                .strip_prefix(PEFT_PREFIX)
                .and_then(|n| graph.find(n))
                .is_some_and(|t| lora.saved.contains(&t));
        if known {
            continue;
        }
        let inner = name.strip_prefix(PEFT_PREFIX).unwrap_or(name);
        let err = match saved_by(&lora.config.modules_to_save, inner) {
            Some(entry) => AdapterError::Module {
                file: file.to_owned(),
                module: entry.to_owned(),
                detail: format!(
                    "modules_to_save trains `{inner}` in full, and the {} graph has no such \
                     parameter",
                    if graph.find(inner).is_some() {
                        "trained"
                    } else {
                        "model's"
                    }
                ),
            },
            None => AdapterError::Module {
                file: file.to_owned(),
                module: inner.rsplit_once('.').map_or(inner, |(m, _)| m).to_owned(),
                detail: format!(
                    "the adapter holds `{name}`, which is neither a LoRA matrix of the targets {:?} \
                     nor a parameter of modules_to_save {:?}",
                    lora.config.target_modules, lora.config.modules_to_save
                ),
            },
        };
        return Err(err);
    }
    Ok(())
}

/// The adapter matrices of `lora` from the adapter `checkpoint` (the file `file`).
fn matrices(
    file: &Path,
    checkpoint: &Checkpoint,
    graph: &Graph,
    lora: &Lora,
) -> Result<Vec<(String, Vec<f64>)>, AdapterError> {
    let mut out = Vec::with_capacity(2 * lora.adapters.len() + lora.saved.len());
    for t in lora.adapters.iter().flat_map(|a| [a.a, a.b]) {
        let tensor = graph.tensor(t);
        let want = tensor.fixed_extents();
        let problem = |detail: String| AdapterError::Tensor {
            file: file.to_owned(),
            name: tensor.name.clone(),
            detail,
        };
        let info = checkpoint
            .get(&tensor.name)
            .ok_or_else(|| problem("the adapter has no such tensor".into()))?;
        if info.shape != want {
            return Err(problem(format!(
                "the adapter's is {:?}; the graph needs {want:?}",
                info.shape
            )));
        }
        let values = checkpoint.read_f32(&tensor.name)?;
        out.push((
            tensor.name.clone(),
            values.into_iter().map(f64::from).collect(),
        ));
    }
    Ok(out)
}
