//! The tensors each architecture's checkpoint holds: their Hugging Face names and shapes
//! given the config, and a check of a checkpoint against them.
//!
//! [`NameMap::for_config`] lists what a checkpoint of that config should hold
//! ([`ExpectedTensor`]), under **canonical** names: the names of the family's task class
//! (`bert.encoder.layer.0.attention.self.query.weight`, `transformer.h.0.attn.c_attn.weight`,
//! `model.layers.0.self_attn.q_proj.weight`), heads outside the base model unprefixed
//! (`classifier.weight`, `lm_head.weight`). Checkpoints saved from the base class drop the
//! base's prefix (sentence-transformers' BERTs such as all-MiniLM-L6-v2, GPT-2 from the Hub,
//! a `LlamaModel`): the check reads a name without the prefix as the prefixed one, and
//! [`NameCheck::actual`] gives back the name the checkpoint uses.
//!
//! Shapes are HF's orientation: `nn.Linear` weights `[out, in]`, GPT-2's `Conv1D` weights
//! `[in, out]` (`c_attn`'s columns are q | k | v), embeddings `[rows, hidden]`, norms and
//! biases `[n]`.
//!
//! Some tensors may be absent ([`Presence::Optional`]: a BERT's pooler and classifier, which
//! a fine-tuning run initialises when the checkpoint lacks them), and some may be present
//! but are not parameters ([`NameMap::ignorable`]: BERT's `embeddings.position_ids`, old GPT-2
//! checkpoints' `attn.bias`/`attn.masked_bias` masks, old Llama checkpoints' `inv_freq`, an
//! `lm_head.weight` saved although tied). [`NameMap::check`] reports every missing,
//! unexpected, mis-shaped and undecodable tensor at once ([`NameMismatch`]).

mod bert;
mod check;
mod gpt2;
mod llama;

use crate::config::ModelConfig;

pub use check::{Misshaped, NameCheck, NameMismatch, TensorProblem};

/// Whether a checkpoint must hold a tensor.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Presence {
    /// A checkpoint without it can't be loaded.
    Required,
    /// It may be absent, to be initialised by whoever trains the model (a new
    /// classification head); present, it must have the expected shape.
    Optional,
}

/// A tensor a checkpoint of some config should hold.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExpectedTensor {
    /// Its canonical name (see the [module docs](self)).
    pub name: String,
    /// Its shape in HF's orientation.
    pub shape: Vec<usize>,
    /// Whether it must be present.
    pub presence: Presence,
}

/// A tensor that may be in a checkpoint without being a parameter: a pattern over canonical
/// names, `*` standing for one layer index.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ignorable {
    /// The pattern (`transformer.h.*.attn.bias`).
    pub pattern: String,
    /// Why it can be ignored.
    pub reason: &'static str,
}

impl Ignorable {
    /// Whether the canonical name `name` matches the pattern.
    pub fn matches(&self, name: &str) -> bool {
        let mut pattern = self.pattern.split('.');
        let mut parts = name.split('.');
        loop {
            match (pattern.next(), parts.next()) {
                (None, None) => return true,
                (Some("*"), Some(part)) if is_index(part) => {}
                (Some(p), Some(part)) if p == part => {}
                _ => return false,
            }
        }
    }
}

fn is_index(part: &str) -> bool {
    !part.is_empty() && part.bytes().all(|b| b.is_ascii_digit())
}

/// What a checkpoint of one config should hold.
#[derive(Debug, Clone)]
pub struct NameMap {
    class: &'static str,
    /// The base model's prefix, with its dot (`bert.`).
    base_prefix: &'static str,
    /// The first name segments of modules outside the base model (`classifier`, `lm_head`).
    heads: &'static [&'static str],
    expected: Vec<ExpectedTensor>,
    ignorable: Vec<Ignorable>,
}

impl NameMap {
    /// The tensors a checkpoint of `config` holds.
    pub fn for_config(config: &ModelConfig) -> Self {
        match config {
            ModelConfig::Bert(c) => bert::map(c),
            ModelConfig::Gpt2(c) => gpt2::map(c),
            ModelConfig::Llama(c) => llama::map(c),
        }
    }

    fn new(class: &'static str, base_prefix: &'static str, heads: &'static [&'static str]) -> Self {
        Self {
            class,
            base_prefix,
            heads,
            expected: Vec::new(),
            ignorable: Vec::new(),
        }
    }

    /// The class of the config (`BertForSequenceClassification`, ...).
    pub fn class(&self) -> &'static str {
        self.class
    }

    /// The base model's prefix, with its dot (`bert.`, `transformer.`, `model.`).
    pub fn base_prefix(&self) -> &'static str {
        self.base_prefix
    }

    /// Every tensor expected, in the model's order (embeddings, each layer, final norm,
    /// heads).
    pub fn expected(&self) -> &[ExpectedTensor] {
        &self.expected
    }

    /// The expected tensor of canonical name `name`.
    pub fn get(&self, name: &str) -> Option<&ExpectedTensor> {
        self.expected.iter().find(|t| t.name == name)
    }

    /// The tensors that may be present without being expected.
    pub fn ignorable(&self) -> &[Ignorable] {
        &self.ignorable
    }

    /// The canonical name of a checkpoint's tensor name: the base prefix added unless the
    /// name has it or belongs to a head.
    pub fn canonical(&self, name: &str) -> String {
        let first = name.split('.').next().unwrap_or("");
        if name.starts_with(self.base_prefix) || self.heads.contains(&first) {
            name.to_string()
        } else {
            format!("{}{name}", self.base_prefix)
        }
    }

    /// Why the canonical name `name` may be ignored, if it may.
    pub fn ignore_reason(&self, name: &str) -> Option<&'static str> {
        self.ignorable
            .iter()
            .find(|i| i.matches(name))
            .map(|i| i.reason)
    }

    fn push(&mut self, name: String, shape: &[usize], presence: Presence) {
        self.expected.push(ExpectedTensor {
            name,
            shape: shape.to_vec(),
            presence,
        });
    }

    /// `name.weight` of `shape`.
    fn weight(&mut self, name: &str, shape: &[usize]) {
        self.push(format!("{name}.weight"), shape, Presence::Required);
    }

    /// An `nn.Linear` from `inputs` to `outputs`: `weight [out, in]`, and `bias [out]` when
    /// it has one.
    fn linear(&mut self, name: &str, outputs: usize, inputs: usize, bias: bool, p: Presence) {
        self.push(format!("{name}.weight"), &[outputs, inputs], p);
        if bias {
            self.push(format!("{name}.bias"), &[outputs], p);
        }
    }

    /// A LayerNorm of width `n`: `weight [n]`, `bias [n]`.
    fn layer_norm(&mut self, name: &str, n: usize) {
        self.weight(name, &[n]);
        self.push(format!("{name}.bias"), &[n], Presence::Required);
    }

    fn ignore(&mut self, pattern: String, reason: &'static str) {
        self.ignorable.push(Ignorable { pattern, reason });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_star_matches_one_layer_index() {
        let mask = Ignorable {
            pattern: "transformer.h.*.attn.bias".into(),
            reason: "",
        };
        assert!(mask.matches("transformer.h.0.attn.bias"));
        assert!(mask.matches("transformer.h.11.attn.bias"));
        assert!(!mask.matches("transformer.h.x.attn.bias"));
        assert!(!mask.matches("transformer.h.0.attn.bias.extra"));
        assert!(!mask.matches("transformer.h.0.attn"));
        assert!(!mask.matches("transformer.h..attn.bias"));
    }

    #[test]
    fn canonical_names_add_the_base_prefix_outside_heads() {
        let map = NameMap::new("BertForSequenceClassification", "bert.", &["classifier"]);
        assert_eq!(
            map.canonical("bert.pooler.dense.weight"),
            "bert.pooler.dense.weight"
        );
        assert_eq!(
            map.canonical("pooler.dense.weight"),
            "bert.pooler.dense.weight"
        );
        assert_eq!(map.canonical("classifier.bias"), "classifier.bias");
        // Only a whole first segment is a head.
        assert_eq!(map.canonical("classifiers.bias"), "bert.classifiers.bias");
    }
}
