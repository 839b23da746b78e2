//! GPT-2 decoders: `model_type: "gpt2"`.

use serde_json::Value;

use super::fields::Fields;
use super::{Activation, activation, class, positive, positive_eps, token_ids};

/// The GPT-2 classes whose checkpoints fblayout loads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Gpt2Class {
    /// `GPT2Model`: the base without a head.
    Model,
    /// `GPT2LMHeadModel`: the base and a language-model head (tied to `wte` by default).
    LmHead,
}

impl Gpt2Class {
    /// Its name in `architectures`.
    pub fn name(self) -> &'static str {
        match self {
            Self::Model => "GPT2Model",
            Self::LmHead => "GPT2LMHeadModel",
        }
    }

    fn from_name(name: &str) -> Option<Self> {
        [Self::Model, Self::LmHead]
            .into_iter()
            .find(|c| c.name() == name)
    }
}

const CLASS_NAMES: &[&str] = &["GPT2Model", "GPT2LMHeadModel"];
const ACTIVATIONS: &[&str] = &["gelu_new", "gelu_pytorch_tanh", "gelu", "silu", "swish"];

/// A GPT-2 `config.json`.
#[derive(Debug, Clone, PartialEq)]
pub struct Gpt2Config {
    /// The class of `architectures[0]` (`GPT2LMHeadModel` when the file lists none).
    pub class: Gpt2Class,
    /// Rows of `wte`.
    pub vocab_size: usize,
    /// The model width.
    pub n_embd: usize,
    /// Blocks.
    pub n_layer: usize,
    /// Attention heads.
    pub n_head: usize,
    /// Rows of `wpe`.
    pub n_positions: usize,
    /// The feed-forward width (`n_inner`, `4 · n_embd` when null).
    pub n_inner: usize,
    /// The feed-forward activation (`activation_function`).
    pub activation_function: Activation,
    /// LayerNorm's epsilon.
    pub layer_norm_epsilon: f64,
    /// Whether the LM head shares `wte` (default true); an untied head is `lm_head.weight`.
    pub tie_word_embeddings: bool,
    /// Beginning-of-text token, when given.
    pub bos_token_id: Option<u32>,
    /// End-of-text tokens (one, or several in some configs).
    pub eos_token_id: Vec<u32>,
    /// The padding token, when given (GPT-2's own config has none).
    pub pad_token_id: Option<u32>,
}

impl Gpt2Config {
    /// The width of one attention head.
    pub fn head_dim(&self) -> usize {
        self.n_embd / self.n_head.max(1)
    }
}

pub(super) fn parse(f: &mut Fields<'_>) -> Gpt2Config {
    let class = class(f, CLASS_NAMES, Gpt2Class::from_name, Gpt2Class::LmHead);
    let n_embd = f.usize("n_embd");
    let config = Gpt2Config {
        class,
        vocab_size: f.usize("vocab_size"),
        n_embd,
        n_layer: f.usize("n_layer"),
        n_head: f.usize("n_head"),
        n_positions: f.usize("n_positions"),
        n_inner: f.opt_usize("n_inner").unwrap_or(4 * n_embd),
        activation_function: activation(f, "activation_function", None, ACTIVATIONS),
        layer_norm_epsilon: f.f64("layer_norm_epsilon"),
        tie_word_embeddings: f.opt_bool("tie_word_embeddings").unwrap_or(true),
        bos_token_id: f.opt_u32("bos_token_id"),
        eos_token_id: token_ids(f, "eos_token_id"),
        pad_token_id: f.opt_u32("pad_token_id"),
    };
    // Options that change the attention's arithmetic away from the standard scaled
    // dot-product, which fblayout's attention computes.
    if f.opt_bool("scale_attn_weights") == Some(false) {
        f.unsupported("scale_attn_weights", &Value::Bool(false), &["true"]);
    }
    for key in ["scale_attn_by_inverse_layer_idx", "add_cross_attention"] {
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
fn check(f: &mut Fields<'_>, c: &Gpt2Config) {
    for (key, size) in [
        ("vocab_size", c.vocab_size),
        ("n_embd", c.n_embd),
        ("n_layer", c.n_layer),
        ("n_head", c.n_head),
        ("n_positions", c.n_positions),
        ("n_inner", c.n_inner),
    ] {
        positive(f, key, size);
    }
    positive_eps(f, "layer_norm_epsilon", c.layer_norm_epsilon);
    // c_attn's q | k | v columns are each split into n_head heads.
    if c.n_head > 0 && !c.n_embd.is_multiple_of(c.n_head) {
        f.invalid(
            "n_head",
            format!("{} heads don't divide n_embd {}", c.n_head, c.n_embd),
        );
    }
}
