//! The Llama family of decoders: `model_type` `"llama"`, `"mistral"` or `"qwen2"`.
//!
//! The three share transformers' Llama layout — RMSNorm before each block, RoPE on the
//! queries and keys (rotate-half order), grouped-query attention, a SwiGLU feed-forward
//! `down(silu(gate(x)) · up(x))` — and differ only in which projections carry biases
//! (Llama: all four attention ones or none, by `attention_bias`; Qwen2: q, k and v; Mistral:
//! none) and in their defaults.

use serde_json::Value;

use super::fields::Fields;
use super::rope::{self, Rope};
use super::{Activation, activation, class, positive, positive_eps, token_ids};

/// Which member of the family a config is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LlamaFamily {
    /// `model_type: "llama"`.
    Llama,
    /// `model_type: "mistral"`.
    Mistral,
    /// `model_type: "qwen2"`.
    Qwen2,
}

impl LlamaFamily {
    /// Its `model_type`.
    pub fn model_type(self) -> &'static str {
        match self {
            Self::Llama => "llama",
            Self::Mistral => "mistral",
            Self::Qwen2 => "qwen2",
        }
    }

    /// The class names in `architectures`: the base model and the causal LM.
    fn class_names(self) -> &'static [&'static str] {
        match self {
            Self::Llama => &["LlamaModel", "LlamaForCausalLM"],
            Self::Mistral => &["MistralModel", "MistralForCausalLM"],
            Self::Qwen2 => &["Qwen2Model", "Qwen2ForCausalLM"],
        }
    }
}

/// Which class of a decoder family the weights were saved from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DecoderClass {
    /// `<Family>Model`: the base without a head, saved without the `model.` prefix.
    Model,
    /// `<Family>ForCausalLM`: `model.`-prefixed base and `lm_head` (unless tied).
    CausalLm,
}

/// A Llama-family `config.json`.
#[derive(Debug, Clone, PartialEq)]
pub struct LlamaConfig {
    /// Llama, Mistral or Qwen2.
    pub family: LlamaFamily,
    /// The class of `architectures[0]` (the causal LM when the file lists none).
    pub class: DecoderClass,
    /// Rows of `embed_tokens`.
    pub vocab_size: usize,
    /// The model width.
    pub hidden_size: usize,
    /// The feed-forward width (of gate and up).
    pub intermediate_size: usize,
    /// Blocks.
    pub num_hidden_layers: usize,
    /// Query heads.
    pub num_attention_heads: usize,
    /// Key/value heads (default: `num_attention_heads`); query head `h` reads kv head
    /// `h / (num_attention_heads / num_key_value_heads)`.
    pub num_key_value_heads: usize,
    /// The width of one head (`head_dim`, default `hidden_size / num_attention_heads`).
    pub head_dim: usize,
    /// The SwiGLU gate's activation (`hidden_act`, SiLU).
    pub hidden_act: Activation,
    /// RMSNorm's epsilon.
    pub rms_norm_eps: f64,
    /// RoPE's base and scaling.
    pub rope: Rope,
    /// The longest sequence the model was trained for.
    pub max_position_embeddings: usize,
    /// Whether the LM head shares `embed_tokens` (default false): then there is no
    /// `lm_head.weight`.
    pub tie_word_embeddings: bool,
    /// Whether q, k and v projections have biases (Llama: `attention_bias`; Qwen2: always).
    pub qkv_bias: bool,
    /// Whether the output projection has a bias (Llama: `attention_bias`).
    pub o_bias: bool,
    /// Whether gate, up and down projections have biases (Llama's `mlp_bias`).
    pub mlp_bias: bool,
    /// Mistral's attention window: a query sees at most this many keys back. Only sequences
    /// longer than it are affected; fblayout's attention must apply it to run those.
    pub sliding_window: Option<usize>,
    /// Beginning-of-sequence token, when given.
    pub bos_token_id: Option<u32>,
    /// End-of-sequence tokens (Llama 3 lists several).
    pub eos_token_id: Vec<u32>,
    /// The padding token, when given.
    pub pad_token_id: Option<u32>,
}

impl LlamaConfig {
    /// The class name of `class` for this family (`MistralForCausalLM`, ...).
    pub fn class_name(&self) -> &'static str {
        let names = self.family.class_names();
        match self.class {
            DecoderClass::Model => names[0],
            DecoderClass::CausalLm => names[1],
        }
    }
}

pub(super) fn parse(f: &mut Fields<'_>, family: LlamaFamily) -> LlamaConfig {
    let names = family.class_names();
    let class = class(
        f,
        names,
        |name| match names.iter().position(|n| *n == name) {
            Some(0) => Some(DecoderClass::Model),
            Some(_) => Some(DecoderClass::CausalLm),
            None => None,
        },
        DecoderClass::CausalLm,
    );
    let hidden_size = f.usize("hidden_size");
    let num_attention_heads = f.usize("num_attention_heads");
    let explicit_head_dim = f.opt_usize("head_dim");
    let attention_bias = f.opt_bool("attention_bias").unwrap_or(false);
    let (qkv_bias, o_bias) = match family {
        LlamaFamily::Llama => (attention_bias, attention_bias),
        LlamaFamily::Mistral => (false, false),
        LlamaFamily::Qwen2 => (true, false),
    };
    let sliding_window = match family {
        LlamaFamily::Mistral => f.opt_usize("sliding_window"),
        LlamaFamily::Qwen2 => {
            // Qwen2 applies its window only to some layers (`max_window_layers`), and only
            // when `use_sliding_window` is set.
            if f.opt_bool("use_sliding_window") == Some(true) {
                f.unsupported("use_sliding_window", &Value::Bool(true), &["false"]);
            }
            None
        }
        LlamaFamily::Llama => None,
    };
    let config = LlamaConfig {
        family,
        class,
        vocab_size: f.usize("vocab_size"),
        hidden_size,
        intermediate_size: f.usize("intermediate_size"),
        num_hidden_layers: f.usize("num_hidden_layers"),
        num_attention_heads,
        num_key_value_heads: f
            .opt_usize("num_key_value_heads")
            .unwrap_or(num_attention_heads),
        head_dim: explicit_head_dim.unwrap_or(hidden_size / num_attention_heads.max(1)),
        hidden_act: activation(f, "hidden_act", Some("silu"), &["silu", "swish"]),
        rms_norm_eps: f.f64("rms_norm_eps"),
        rope: rope::parse(f),
        max_position_embeddings: f.usize("max_position_embeddings"),
        tie_word_embeddings: f.opt_bool("tie_word_embeddings").unwrap_or(false),
        qkv_bias,
        o_bias,
        mlp_bias: f.opt_bool("mlp_bias").unwrap_or(false),
        sliding_window,
        bos_token_id: f.opt_u32("bos_token_id"),
        eos_token_id: token_ids(f, "eos_token_id"),
        pad_token_id: f.opt_u32("pad_token_id"),
    };
    // Rules across fields only once every field has a value: a placeholder left by a missing
    // or mistyped one would only add follow-on errors.
    if f.all_read() {
        check(f, &config, explicit_head_dim.is_some());
    }
    config
}

/// The rules that span fields.
fn check(f: &mut Fields<'_>, c: &LlamaConfig, explicit_head_dim: bool) {
    for (key, size) in [
        ("vocab_size", c.vocab_size),
        ("hidden_size", c.hidden_size),
        ("intermediate_size", c.intermediate_size),
        ("num_hidden_layers", c.num_hidden_layers),
        ("num_attention_heads", c.num_attention_heads),
        ("num_key_value_heads", c.num_key_value_heads),
        ("head_dim", c.head_dim),
        ("max_position_embeddings", c.max_position_embeddings),
    ] {
        positive(f, key, size);
    }
    positive_eps(f, "rms_norm_eps", c.rms_norm_eps);
    let heads = c.num_attention_heads;
    // Without head_dim, the heads split hidden_size evenly (transformers divides).
    if !explicit_head_dim && heads > 0 && !c.hidden_size.is_multiple_of(heads) {
        f.invalid(
            "num_attention_heads",
            format!(
                "{heads} heads don't divide hidden_size {} (and there is no head_dim)",
                c.hidden_size
            ),
        );
    }
    // Grouped-query attention: each kv head serves the same number of query heads.
    let kv = c.num_key_value_heads;
    if kv > 0 && heads > 0 && (kv > heads || !heads.is_multiple_of(kv)) {
        f.invalid(
            "num_key_value_heads",
            format!("{kv} kv heads don't divide num_attention_heads {heads}"),
        );
    }
    // Rotate-half pairs dimension i with i + head_dim/2.
    if !c.head_dim.is_multiple_of(2) {
        f.invalid(
            if explicit_head_dim {
                "head_dim"
            } else {
                "hidden_size"
            },
            format!("RoPE needs an even head width, it is {}", c.head_dim),
        );
    }
}
