//! LoRA on a loaded model: the graph with its adapters ([`fblayout_plan::lora`]), and peft's
//! adapter directories read.
//!
//! A peft adapter directory holds `adapter_config.json` (the settings: `r`, `lora_alpha`,
//! `lora_dropout`, `target_modules`, …) and `adapter_model.safetensors`, whose tensors are
//! named `base_model.model.<module>.lora_A.weight` (`[r, in]`) and `…lora_B.weight`
//! (`[out, r]`): the names and orientation the graph's adapters take, so values load as
//! stored.
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
use fblayout_plan::lora::{self as plan_lora, Lora, LoraConfig, LoraError};

use crate::graph::{GraphError, forward};
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
    // peft trains these modules in full beside the adapters (a classifier, for SEQ_CLS);
    // reading the adapters alone would freeze them and train a different model.
    let saved = field("modules_to_save").and_then(|v| v.as_array());
    if let Some(modules) = saved.filter(|m| !m.is_empty()) {
        return Err(bad(format!(
            "modules_to_save {} is not supported: peft trains those modules in full beside \
             the adapters, and fblayout's LoRA trains only the adapter matrices",
            serde_json::Value::Array(modules.clone())
        )));
    }
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
    Ok(LoraConfig::new(rank, alpha, targets).with_dropout(dropout))
}

/// The training graph of the model in `dir` with LoRA's adapters (every base weight frozen;
/// see [`fblayout_plan::lora`]), and what the adapters are.
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
pub fn read_adapter(
    dir: &Path,
    graph: &Graph,
    lora: &Lora,
) -> Result<Vec<(String, Vec<f64>)>, AdapterError> {
    let file = dir.join(ADAPTER_WEIGHTS_FILE);
    let checkpoint = Checkpoint::open(&file)?;
    let mut out = Vec::with_capacity(2 * lora.adapters.len());
    for t in lora.adapters.iter().flat_map(|a| [a.a, a.b]) {
        let tensor = graph.tensor(t);
        let want = tensor.fixed_extents();
        let problem = |detail: String| AdapterError::Tensor {
            file: file.clone(),
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
