//! A model's `config.json`, read into the architecture it describes.
//!
//! Hugging Face writes one `config.json` per model: `model_type` names the family (`bert`,
//! `gpt2`, `llama`, ...), `architectures` the class the weights were saved from
//! (`BertForSequenceClassification`, `GPT2LMHeadModel`, ...), and the other keys are the
//! family's hyper-parameters, each spelled the family's way (`hidden_size` for BERT, `n_embd`
//! for GPT-2). [`ModelConfig`] is that file read into one typed variant per family that
//! fblayout loads:
//!
//! - [`BertConfig`]: BERT encoders (`BertModel`, `BertForSequenceClassification`), e.g.
//!   all-MiniLM-L6-v2;
//! - [`Gpt2Config`]: GPT-2 decoders (`GPT2Model`, `GPT2LMHeadModel`);
//! - [`LlamaConfig`]: the Llama family of decoders — Llama, Mistral and Qwen2 share one
//!   layout (RMSNorm, RoPE, grouped-query attention, SwiGLU) and differ in a few flags.
//!
//! `model_type` chooses the variant and every entry of `architectures` must be a class of that
//! family that fblayout can load. A field that is absent takes transformers' default where the
//! model code has one (`n_inner`, `num_key_value_heads`, `rope_theta`, ...) and is an error
//! where it doesn't; a field with the wrong JSON type, a value fblayout can't run (an
//! activation, a RoPE scaling) or sizes that don't fit together are errors too. All of a
//! file's problems are reported at once, each naming its field ([`ConfigError::Fields`]).
//!
//! ```
//! use fblayout_hf::config::{Activation, ModelConfig};
//!
//! let json = r#"{"model_type": "gpt2", "architectures": ["GPT2LMHeadModel"],
//!     "vocab_size": 320, "n_embd": 64, "n_layer": 2, "n_head": 4, "n_positions": 32,
//!     "n_inner": null, "activation_function": "gelu_new", "layer_norm_epsilon": 1e-5}"#;
//! let ModelConfig::Gpt2(gpt2) = ModelConfig::from_json(json, "config.json")? else {
//!     unreachable!()
//! };
//! assert_eq!(gpt2.n_inner, 256); // null: 4 · n_embd
//! assert_eq!(gpt2.activation_function, Activation::GeluTanh);
//! assert!(gpt2.tie_word_embeddings);
//!
//! let err = ModelConfig::from_json(r#"{"model_type": "gpt2", "n_embd": "64"}"#, "config.json")
//!     .unwrap_err();
//! assert!(err.to_string().contains("`n_embd` should be a non-negative integer, found a string"));
//! # Ok::<(), fblayout_hf::config::ConfigError>(())
//! ```

mod bert;
mod error;
mod fields;
mod gpt2;
mod llama;
mod rope;

use std::path::{Path, PathBuf};

use serde_json::Value;

pub use bert::{BertClass, BertConfig};
pub use error::{ConfigError, FieldProblem};
pub use gpt2::{Gpt2Class, Gpt2Config};
pub use llama::{DecoderClass, LlamaConfig, LlamaFamily};
pub use rope::{Rope, RopeScaling};

use fields::Fields;

/// The `model_type`s fblayout loads.
pub const SUPPORTED_MODEL_TYPES: &[&str] = &["bert", "gpt2", "llama", "mistral", "qwen2"];

/// A model's `config.json`, by architecture family.
#[derive(Debug, Clone, PartialEq)]
pub enum ModelConfig {
    /// `model_type: "bert"`.
    Bert(BertConfig),
    /// `model_type: "gpt2"`.
    Gpt2(Gpt2Config),
    /// `model_type: "llama"`, `"mistral"` or `"qwen2"`.
    Llama(LlamaConfig),
}

impl ModelConfig {
    /// Reads and checks the `config.json` at `path`.
    pub fn from_file(path: impl AsRef<Path>) -> Result<Self, ConfigError> {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Io {
            file: path.to_path_buf(),
            source,
        })?;
        Self::from_json(&text, path)
    }

    /// Reads and checks a `config.json` given as text; `file` names it in errors.
    pub fn from_json(text: &str, file: impl AsRef<Path>) -> Result<Self, ConfigError> {
        let file = file.as_ref().to_path_buf();
        let value: Value = serde_json::from_str(text).map_err(|e| ConfigError::Json {
            file: file.clone(),
            detail: e.to_string(),
        })?;
        let Some(object) = value.as_object() else {
            return Err(ConfigError::Json {
                file,
                detail: format!("the top level is {}", fields::describe(&value)),
            });
        };
        let mut fields = Fields::new(object);
        let model_type = fields.string("model_type");
        if !fields.problems.is_empty() {
            return Err(fields_error(file, model_type, fields.problems));
        }
        let config = match model_type.as_str() {
            "bert" => Self::Bert(bert::parse(&mut fields)),
            "gpt2" => Self::Gpt2(gpt2::parse(&mut fields)),
            "llama" => Self::Llama(llama::parse(&mut fields, LlamaFamily::Llama)),
            "mistral" => Self::Llama(llama::parse(&mut fields, LlamaFamily::Mistral)),
            "qwen2" => Self::Llama(llama::parse(&mut fields, LlamaFamily::Qwen2)),
            _ => return Err(ConfigError::UnknownModelType { file, model_type }),
        };
        if fields.problems.is_empty() {
            Ok(config)
        } else {
            Err(fields_error(file, model_type, fields.problems))
        }
    }

    /// The `model_type` this config was read from.
    pub fn model_type(&self) -> &'static str {
        match self {
            Self::Bert(_) => "bert",
            Self::Gpt2(_) => "gpt2",
            Self::Llama(c) => c.family.model_type(),
        }
    }

    /// The class the weights were saved from (`architectures[0]`, or the family's default
    /// class when the file has none).
    pub fn class_name(&self) -> &'static str {
        match self {
            Self::Bert(c) => c.class.name(),
            Self::Gpt2(c) => c.class.name(),
            Self::Llama(c) => c.class_name(),
        }
    }

    /// Rows of the token embedding table.
    pub fn vocab_size(&self) -> usize {
        match self {
            Self::Bert(c) => c.vocab_size,
            Self::Gpt2(c) => c.vocab_size,
            Self::Llama(c) => c.vocab_size,
        }
    }

    /// The id of the padding token, when the config names one.
    pub fn pad_token_id(&self) -> Option<u32> {
        match self {
            Self::Bert(c) => Some(c.pad_token_id),
            Self::Gpt2(c) => c.pad_token_id,
            Self::Llama(c) => c.pad_token_id,
        }
    }
}

fn fields_error(file: PathBuf, model_type: String, problems: Vec<FieldProblem>) -> ConfigError {
    ConfigError::Fields {
        file,
        model_type,
        problems,
    }
}

/// The activation of a feed-forward block, as transformers' `ACT2FN` names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Activation {
    /// `"gelu"`: `x/2 · (1 + erf(x/√2))` (BERT's).
    Gelu,
    /// `"gelu_new"`, `"gelu_pytorch_tanh"`: `x/2 · (1 + tanh(√(2/π)(x + 0.044715 x³)))`
    /// (GPT-2's).
    GeluTanh,
    /// `"silu"`, `"swish"`: `x · sigmoid(x)` (the gate of Llama's SwiGLU).
    Silu,
}

impl Activation {
    fn from_name(name: &str) -> Option<Self> {
        match name {
            "gelu" => Some(Self::Gelu),
            "gelu_new" | "gelu_pytorch_tanh" => Some(Self::GeluTanh),
            "silu" | "swish" => Some(Self::Silu),
            _ => None,
        }
    }
}

/// Reads the activation under `key` (`default` when absent); one outside `allowed` is
/// unsupported.
fn activation(
    fields: &mut Fields<'_>,
    key: &str,
    default: Option<&str>,
    allowed: &'static [&'static str],
) -> Activation {
    let name = match (fields.opt_string(key), default) {
        (Some(name), _) => name,
        (None, Some(default)) if !fields.has(key) => default.to_string(),
        (None, _) => {
            if !fields.has(key) {
                fields.missing(key);
            }
            return Activation::Gelu;
        }
    };
    match Activation::from_name(&name).filter(|_| allowed.contains(&name.as_str())) {
        Some(act) => act,
        None => {
            fields.unsupported(key, &Value::String(name), allowed);
            Activation::Gelu
        }
    }
}

/// The class named by `architectures`: every entry must be one of `names` (the family's
/// loadable classes, read by `from_name`); the first decides. `default` when the key is
/// absent or the list empty.
fn class<C>(
    fields: &mut Fields<'_>,
    names: &'static [&'static str],
    from_name: impl Fn(&str) -> Option<C>,
    default: C,
) -> C {
    let Some(listed) = fields.opt_strings("architectures") else {
        return default;
    };
    let mut chosen = None;
    for name in listed {
        match from_name(&name) {
            Some(c) => {
                chosen.get_or_insert(c);
            }
            None => fields.unsupported("architectures", &Value::String(name), names),
        }
    }
    chosen.unwrap_or(default)
}

/// Reads `eos_token_id`-like keys: one id or a list of ids (Llama 3 lists two).
fn token_ids(fields: &mut Fields<'_>, key: &str) -> Vec<u32> {
    match fields.get(key) {
        Some(Value::Array(items)) => {
            let ids: Option<Vec<u32>> = items
                .iter()
                .map(|v| v.as_u64().and_then(|n| u32::try_from(n).ok()))
                .collect();
            ids.unwrap_or_else(|| {
                let field = fields.path(key);
                let found = fields::describe(&Value::Array(items.clone()));
                fields.problem(FieldProblem::WrongType {
                    field,
                    expected: "a token id or a list of token ids",
                    found,
                });
                Vec::new()
            })
        }
        _ => fields.opt_u32(key).into_iter().collect(),
    }
}

/// Records an `Invalid` problem unless `size` is positive.
fn positive(fields: &mut Fields<'_>, key: &str, size: usize) {
    if size == 0 && fields.has(key) {
        fields.invalid(key, "must be at least 1");
    }
}

/// Records an `Invalid` problem unless `eps` is a positive finite number.
fn positive_eps(fields: &mut Fields<'_>, key: &str, eps: f64) {
    if fields.has(key) && !(eps > 0.0 && eps.is_finite()) {
        fields.invalid(key, format!("must be a positive number, is {eps}"));
    }
}
