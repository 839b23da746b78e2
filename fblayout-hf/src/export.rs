//! Exporting what fblayout trained, for transformers and peft to carry on with.
//!
//! - [`model`]: the full model as a Hugging Face directory — `model.safetensors` with every
//!   tensor the source checkpoint had, under the source's own names, shapes and orientation
//!   (`nn.Linear`'s `[out, in]`, GPT-2's `Conv1D` `[in, out]`; a tied head written as the
//!   source wrote it, i.e. not at all where it only shares the embedding), in `f32`; and the
//!   source's `config.json` and `tokenizer.json`, unchanged. LoRA's adapters can be merged in:
//!   `W += (alpha / r) · (B·A)ᵀ` in the graph's `[d_in, d_out]`, which [`to_checkpoint`] turns
//!   into the checkpoint's orientation (`W + s·B·A` for `nn.Linear`, `W + s·(B·A)ᵀ` for
//!   `Conv1D`, peft's `fan_in_fan_out`).
//! - [`adapter`]: LoRA's adapters as peft's `save_pretrained` writes them —
//!   `adapter_config.json` and `adapter_model.safetensors` (`base_model.model.<module>.lora_A.weight`,
//!   `[r, in]`; `…lora_B.weight`, `[out, r]`), and the parameters of `modules_to_save` trained
//!   in full (`base_model.model.classifier.weight`, in the checkpoint's orientation), which
//!   `adapter_config.json` lists as peft does.
//!
//! Every file is written to a temporary file in the destination directory, then renamed over
//! its name: a reader never sees half a file.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use fblayout_plan::graph::{Graph, TensorId};
use fblayout_plan::lora::{Lora, PEFT_PREFIX};
use safetensors::Dtype;
use safetensors::tensor::TensorView;

use crate::config::ModelConfig;
use crate::graph::{base_weights, is_transposed, to_checkpoint};
use crate::lora::{ADAPTER_CONFIG_FILE, ADAPTER_WEIGHTS_FILE};
use crate::names::NameMismatch;
use crate::{CONFIG_FILE, ModelDir, TOKENIZER_FILE, WEIGHTS_FILE};

/// Why an export failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ExportError {
    /// A file could not be read or written.
    #[error("{file}: {source}")]
    Io {
        /// The file.
        file: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The source checkpoint's tensors don't match its architecture.
    #[error(transparent)]
    Names(#[from] NameMismatch),
    /// A tensor to write has no values, or values of another size.
    #[error("`{name}`: {detail}")]
    Values {
        /// The tensor (the graph's name).
        name: String,
        /// What is wrong.
        detail: String,
    },
    /// The tensors could not be serialized.
    #[error("serializing {file}: {source}")]
    Serialize {
        /// The file.
        file: PathBuf,
        /// Why.
        source: safetensors::SafeTensorError,
    },
}

/// Writes `bytes` to `dir/name` through a temporary file in `dir` renamed over it.
fn write_atomic(dir: &Path, name: &str, bytes: &[u8]) -> Result<(), ExportError> {
    let file = dir.join(name);
    let io = |source| ExportError::Io {
        file: file.clone(),
        source,
    };
    std::fs::create_dir_all(dir).map_err(io)?;
    crate::files::write_atomically(&file, bytes).map_err(io)
}

/// `values` as little-endian `f32` bytes.
fn f32_bytes(values: &[f64]) -> Vec<u8> {
    values
        .iter()
        .flat_map(|&v| (v as f32).to_le_bytes())
        .collect()
}

/// Serializes `tensors` (name, shape, `f32` bytes) with safetensors' metadata `format: pt`
/// (what transformers reads) and writes them atomically to `dir/name`.
fn write_tensors(
    dir: &Path,
    name: &str,
    tensors: &[(String, Vec<usize>, Vec<u8>)],
) -> Result<(), ExportError> {
    let file = dir.join(name);
    let serialize = |source| ExportError::Serialize {
        file: file.clone(),
        source,
    };
    let views = tensors
        .iter()
        .map(|(n, shape, bytes)| {
            TensorView::new(Dtype::F32, shape.clone(), bytes).map(|v| (n.as_str(), v))
        })
        .collect::<Result<Vec<_>, _>>()
        .map_err(serialize)?;
    let metadata = HashMap::from([("format".to_owned(), "pt".to_owned())]);
    let bytes = safetensors::serialize(views, Some(metadata)).map_err(serialize)?;
    write_atomic(dir, name, &bytes)
}

/// The values `values` give tensor `t` of `graph`, checked against its size.
fn values_of<'a>(
    graph: &Graph,
    values: &'a [(String, Vec<f64>)],
    t: TensorId,
) -> Result<&'a [f64], ExportError> {
    let name = &graph.tensor(t).name;
    let (_, v) = values
        .iter()
        .find(|(n, _)| n == name)
        .ok_or_else(|| ExportError::Values {
            name: name.clone(),
            detail: "no values were given for it".into(),
        })?;
    let want = graph.tensor(t).fixed_extents().iter().product::<usize>();
    if v.len() != want {
        return Err(ExportError::Values {
            name: name.clone(),
            detail: format!("{} values given for {want} elements", v.len()),
        });
    }
    Ok(v)
}

/// `w` (`[d_in, d_out]`, the graph's orientation) with the update of `A` (`[r, d_in]`) and `B`
/// (`[d_out, r]`) scaled by `scaling` merged in: `w[i, o] + scaling · Σ_k A[k, i] · B[o, k]`.
fn merged(
    w: &[f64],
    a: &[f64],
    b: &[f64],
    [d_in, d_out]: [usize; 2],
    r: usize,
    scaling: f64,
) -> Vec<f64> {
    let mut out = w.to_vec();
    for i in 0..d_in {
        for o in 0..d_out {
            let update: f64 = (0..r).map(|k| a[k * d_in + i] * b[o * r + k]).sum();
            out[i * d_out + o] += scaling * update;
        }
    }
    out
}

/// Writes the model of `dir`, with the weights `values` (by the graph's names, in the graph's
/// orientation: what the executors read back) of `graph`, as a Hugging Face model directory
/// `out`; with `merge`, LoRA's adapters (whose values `values` also holds) merged into their
/// base weights (see the module docs).
///
/// A weight the source checkpoint lacks (a `BertModel`'s classifier, trained from a fresh
/// start) is written too, and then every tensor under its canonical name (`bert.…`,
/// `classifier.…`), as transformers saves the task model: a checkpoint that mixed the base
/// model's unprefixed names with the head's would not load. A weight of another size than the
/// source's (a head of another width) takes the graph's shape, in the checkpoint's
/// orientation.
pub fn model(
    dir: &ModelDir,
    graph: &Graph,
    values: &[(String, Vec<f64>)],
    merge: Option<&Lora>,
    out: &Path,
) -> Result<(), ExportError> {
    let names = dir.check_names()?;
    let base = base_weights(graph);
    let absent: Vec<&str> = names
        .absent()
        .iter()
        .map(String::as_str)
        .filter(|n| graph.find(n).is_some_and(|t| base.contains(&t)))
        .collect();
    let canonical_names = !absent.is_empty();
    let every = names
        .resolved()
        .map(|(canonical, actual)| (canonical, if canonical_names { canonical } else { actual }))
        .chain(absent.iter().map(|&n| (n, n)));
    let mut tensors = Vec::new();
    for (canonical, actual) in every {
        let t = graph
            .find(canonical)
            .filter(|t| base.contains(t))
            .ok_or_else(|| ExportError::Values {
                name: canonical.to_owned(),
                detail: "the checkpoint has it, the graph has no such weight".into(),
            })?;
        let mut value = values_of(graph, values, t)?.to_vec();
        let adapter = merge.and_then(|l| l.adapters.iter().find(|a| a.base == t).map(|a| (l, a)));
        if let Some((lora, adapter)) = adapter {
            let e = graph.tensor(t).fixed_extents();
            let a = values_of(graph, values, adapter.a)?;
            let b = values_of(graph, values, adapter.b)?;
            let r = lora.config.rank as usize;
            value = merged(&value, a, b, [e[0], e[1]], r, lora.config.scaling());
        }
        let (value, mut shape) = as_in_checkpoint(dir.config(), graph, t, canonical, &value)?;
        let source = names
            .actual(canonical)
            .and_then(|a| dir.checkpoint().get(a));
        if let Some(info) = source.filter(|i| i.shape.iter().product::<usize>() == value.len()) {
            shape = info.shape.clone();
        }
        tensors.push((actual.to_owned(), shape, f32_bytes(&value)));
    }
    write_tensors(out, WEIGHTS_FILE, &tensors)?;
    for name in [CONFIG_FILE, TOKENIZER_FILE] {
        let file = dir.dir().join(name);
        let text = std::fs::read(&file).map_err(|source| ExportError::Io { file, source })?;
        write_atomic(out, name, &text)?;
    }
    Ok(())
}

/// The values `value` of weight `t` of `graph` (named `name`, the checkpoint's canonical name)
/// and its shape, both as a checkpoint of `config` stores it (a `Conv1D` or `nn.Linear` weight
/// transposed back).
fn as_in_checkpoint(
    config: &ModelConfig,
    graph: &Graph,
    t: TensorId,
    name: &str,
    value: &[f64],
) -> Result<(Vec<f64>, Vec<usize>), ExportError> {
    let value = to_checkpoint(config, graph, name, value).ok_or_else(|| ExportError::Values {
        name: name.to_owned(),
        detail: "not in the graph".into(),
    })?;
    let mut shape = graph.tensor(t).fixed_extents();
    if is_transposed(config, graph, t) {
        shape.reverse();
    }
    Ok((value, shape))
}

/// peft's `task_type` of a model of `config` with LoRA `lora`: `CAUSAL_LM` for the decoders;
/// for BERT (a sequence classifier), `SEQ_CLS` where modules are trained in full (the
/// classifier: what peft's `SEQ_CLS` saves), else none (peft's plain `PeftModel`).
fn task_type(config: &ModelConfig, lora: &Lora) -> Option<&'static str> {
    match config {
        ModelConfig::Gpt2(_) | ModelConfig::Llama(_) => Some("CAUSAL_LM"),
        ModelConfig::Bert(_) if !lora.saved.is_empty() => Some("SEQ_CLS"),
        ModelConfig::Bert(_) => None,
    }
}

/// Writes LoRA's adapters `lora` of `graph`, with the values `values` (by the graph's names),
/// for the model of `dir`, as a peft adapter directory `out` (see the module docs).
/// `base_model` is written as `base_model_name_or_path`.
pub fn adapter(
    dir: &ModelDir,
    graph: &Graph,
    values: &[(String, Vec<f64>)],
    lora: &Lora,
    base_model: Option<&str>,
    out: &Path,
) -> Result<(), ExportError> {
    let mut tensors = Vec::with_capacity(2 * lora.adapters.len() + lora.saved.len());
    for t in lora.adapters.iter().flat_map(|a| [a.a, a.b]) {
        let v = values_of(graph, values, t)?;
        tensors.push((
            graph.tensor(t).name.clone(),
            graph.tensor(t).fixed_extents(),
            f32_bytes(v),
        ));
    }
    // What peft's `save_pretrained` writes of a `modules_to_save` module: its parameters as
    // the module holds them, named without peft's `modules_to_save.default`.
    for &t in &lora.saved {
        let name = &graph.tensor(t).name;
        let v = values_of(graph, values, t)?;
        let (v, shape) = as_in_checkpoint(dir.config(), graph, t, name, v)?;
        tensors.push((format!("{PEFT_PREFIX}{name}"), shape, f32_bytes(&v)));
    }
    write_tensors(out, ADAPTER_WEIGHTS_FILE, &tensors)?;
    let c = &lora.config;
    let settings = serde_json::json!({
        "alpha_pattern": {},
        "base_model_name_or_path": base_model,
        "bias": "none",
        // GPT-2's Conv1D stores its weights [in, out].
        "fan_in_fan_out": matches!(dir.config(), ModelConfig::Gpt2(_)),
        "inference_mode": true,
        "init_lora_weights": true,
        "layers_pattern": null,
        "layers_to_transform": null,
        "lora_alpha": c.alpha,
        "lora_dropout": c.dropout,
        "modules_to_save": (!c.modules_to_save.is_empty()).then_some(&c.modules_to_save),
        "peft_type": "LORA",
        "r": c.rank,
        "rank_pattern": {},
        "revision": null,
        "target_modules": c.target_modules,
        "task_type": task_type(dir.config(), lora),
        "use_dora": false,
        "use_rslora": false,
    });
    let text = serde_json::to_string_pretty(&settings).map_err(|e| ExportError::Io {
        file: out.join(ADAPTER_CONFIG_FILE),
        source: e.into(),
    })?;
    write_atomic(out, ADAPTER_CONFIG_FILE, text.as_bytes())
}
