//! BERT encoders: `model_type: "bert"`.

use serde_json::Value;

use super::fields::{Fields, describe};
use super::{Activation, FieldProblem, activation, class, positive, positive_eps};

/// The BERT classes whose checkpoints fblayout loads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BertClass {
    /// `BertModel`: embeddings, encoder and (usually) the pooler, saved without a `bert.`
    /// prefix (sentence-transformers' checkpoints, all-MiniLM-L6-v2 among them).
    Model,
    /// `BertForSequenceClassification`: `bert.`-prefixed base, pooler and a `classifier`.
    SequenceClassification,
}

impl BertClass {
    /// Its name in `architectures`.
    pub fn name(self) -> &'static str {
        match self {
            Self::Model => "BertModel",
            Self::SequenceClassification => "BertForSequenceClassification",
        }
    }

    fn from_name(name: &str) -> Option<Self> {
        [Self::Model, Self::SequenceClassification]
            .into_iter()
            .find(|c| c.name() == name)
    }
}

const CLASS_NAMES: &[&str] = &["BertModel", "BertForSequenceClassification"];
const ACTIVATIONS: &[&str] = &["gelu", "gelu_new", "gelu_pytorch_tanh", "silu", "swish"];

/// A BERT `config.json`.
#[derive(Debug, Clone, PartialEq)]
pub struct BertConfig {
    /// The class of `architectures[0]` (`BertModel` when the file lists none).
    pub class: BertClass,
    /// Rows of `word_embeddings`.
    pub vocab_size: usize,
    /// The model width.
    pub hidden_size: usize,
    /// Encoder layers.
    pub num_hidden_layers: usize,
    /// Attention heads (each `hidden_size / num_attention_heads` wide).
    pub num_attention_heads: usize,
    /// The feed-forward width.
    pub intermediate_size: usize,
    /// The feed-forward activation (`hidden_act`).
    pub hidden_act: Activation,
    /// Rows of `position_embeddings`.
    pub max_position_embeddings: usize,
    /// Rows of `token_type_embeddings` (segments).
    pub type_vocab_size: usize,
    /// LayerNorm's epsilon.
    pub layer_norm_eps: f64,
    /// The classifier's label names by id (`id2label`); its length is `num_labels`. Without
    /// `id2label`, `LABEL_0`, `LABEL_1`, ... for `num_labels` (default 2, as transformers).
    pub id2label: Vec<String>,
    /// The padding token (default 0, as transformers).
    pub pad_token_id: u32,
}

impl BertConfig {
    /// Outputs of the classifier.
    pub fn num_labels(&self) -> usize {
        self.id2label.len()
    }

    /// The width of one attention head.
    pub fn head_dim(&self) -> usize {
        self.hidden_size / self.num_attention_heads.max(1)
    }
}

pub(super) fn parse(f: &mut Fields<'_>) -> BertConfig {
    let class = class(f, CLASS_NAMES, BertClass::from_name, BertClass::Model);
    let config = BertConfig {
        class,
        vocab_size: f.usize("vocab_size"),
        hidden_size: f.usize("hidden_size"),
        num_hidden_layers: f.usize("num_hidden_layers"),
        num_attention_heads: f.usize("num_attention_heads"),
        intermediate_size: f.usize("intermediate_size"),
        hidden_act: activation(f, "hidden_act", None, ACTIVATIONS),
        max_position_embeddings: f.usize("max_position_embeddings"),
        type_vocab_size: f.usize("type_vocab_size"),
        layer_norm_eps: f.f64("layer_norm_eps"),
        id2label: labels(f),
        pad_token_id: f.opt_u32("pad_token_id").unwrap_or(0),
    };
    if let Some(kind) = f.opt_string("position_embedding_type") {
        if kind != "absolute" {
            f.unsupported(
                "position_embedding_type",
                &Value::String(kind),
                &["absolute"],
            );
        }
    }
    for key in ["is_decoder", "add_cross_attention"] {
        if f.opt_bool(key) == Some(true) {
            f.unsupported(key, &Value::Bool(true), &["false"]);
        }
    }
    // Rules across fields only once every field has a value: a placeholder left by a missing
    // or mistyped one would only add follow-on errors.
    if f.all_read() {
        check(f, &config);
    }
    config
}

/// The rules that span fields.
fn check(f: &mut Fields<'_>, c: &BertConfig) {
    for (key, size) in [
        ("vocab_size", c.vocab_size),
        ("hidden_size", c.hidden_size),
        ("num_hidden_layers", c.num_hidden_layers),
        ("num_attention_heads", c.num_attention_heads),
        ("intermediate_size", c.intermediate_size),
        ("max_position_embeddings", c.max_position_embeddings),
        ("type_vocab_size", c.type_vocab_size),
    ] {
        positive(f, key, size);
    }
    positive_eps(f, "layer_norm_eps", c.layer_norm_eps);
    // Heads split the width evenly: the Q/K/V projections are reshaped to [heads, head_dim].
    if c.num_attention_heads > 0 && !c.hidden_size.is_multiple_of(c.num_attention_heads) {
        f.invalid(
            "num_attention_heads",
            format!(
                "{} heads don't divide hidden_size {}",
                c.num_attention_heads, c.hidden_size
            ),
        );
    }
    // The padding row must exist in the embedding table.
    if c.vocab_size > 0 && c.pad_token_id as usize >= c.vocab_size {
        f.invalid(
            "pad_token_id",
            format!(
                "{} is not below vocab_size {}",
                c.pad_token_id, c.vocab_size
            ),
        );
    }
}

/// `id2label` (`{"0": "NEG", "1": "POS"}`) and `num_labels`, which must agree when both are
/// given.
fn labels(f: &mut Fields<'_>) -> Vec<String> {
    let num_labels = f.opt_usize("num_labels");
    let Some(value) = f.get("id2label") else {
        return (0..num_labels.unwrap_or(2))
            .map(|i| format!("LABEL_{i}"))
            .collect();
    };
    let Some(map) = value.as_object() else {
        let found = describe(value);
        f.problem(FieldProblem::WrongType {
            field: "id2label".into(),
            expected: "an object from label ids to names",
            found,
        });
        return Vec::new();
    };
    let mut names = vec![None; map.len()];
    for (key, name) in map {
        let slot = key.parse::<usize>().ok().filter(|&i| i < names.len());
        match (slot, name.as_str()) {
            (Some(i), Some(name)) if names[i].is_none() => names[i] = Some(name.to_string()),
            (Some(_), None) => {
                let found = describe(name);
                f.problem(FieldProblem::WrongType {
                    field: format!("id2label.{key}"),
                    expected: "a string",
                    found,
                });
            }
            _ => f.invalid(
                "id2label",
                format!(
                    "key \"{key}\" is not one of the ids 0..{} (each once)",
                    names.len()
                ),
            ),
        }
    }
    if let Some(n) = num_labels {
        if n != names.len() {
            f.invalid(
                "num_labels",
                format!("is {n} but id2label has {} entries", names.len()),
            );
        }
    }
    names.into_iter().map(Option::unwrap_or_default).collect()
}
