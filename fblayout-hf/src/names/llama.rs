//! The Llama family's tensors (transformers' `modeling_llama.py`, and Mistral's and Qwen2's,
//! which differ only in biases).

use crate::config::{DecoderClass, LlamaConfig};

use super::{NameMap, Presence};

pub(super) fn map(c: &LlamaConfig) -> NameMap {
    let h = c.hidden_size;
    let q = c.num_attention_heads * c.head_dim;
    let kv = c.num_key_value_heads * c.head_dim;
    let i = c.intermediate_size;
    let required = Presence::Required;
    let mut m = NameMap::new(c.class_name(), "model.", &["lm_head"]);
    m.weight("model.embed_tokens", &[c.vocab_size, h]);
    for l in 0..c.num_hidden_layers {
        let layer = format!("model.layers.{l}");
        m.weight(&format!("{layer}.input_layernorm"), &[h]);
        let attn = format!("{layer}.self_attn");
        m.linear(&format!("{attn}.q_proj"), q, h, c.qkv_bias, required);
        m.linear(&format!("{attn}.k_proj"), kv, h, c.qkv_bias, required);
        m.linear(&format!("{attn}.v_proj"), kv, h, c.qkv_bias, required);
        m.linear(&format!("{attn}.o_proj"), h, q, c.o_bias, required);
        m.weight(&format!("{layer}.post_attention_layernorm"), &[h]);
        m.linear(
            &format!("{layer}.mlp.gate_proj"),
            i,
            h,
            c.mlp_bias,
            required,
        );
        m.linear(&format!("{layer}.mlp.up_proj"), i, h, c.mlp_bias, required);
        m.linear(
            &format!("{layer}.mlp.down_proj"),
            h,
            i,
            c.mlp_bias,
            required,
        );
    }
    m.weight("model.norm", &[h]);
    if c.class == DecoderClass::CausalLm {
        if c.tie_word_embeddings {
            m.ignore(
                "lm_head.weight".into(),
                "tied to model.embed_tokens.weight (tie_word_embeddings)",
            );
        } else {
            m.linear("lm_head", c.vocab_size, h, false, required);
        }
    }
    m.ignore(
        "model.layers.*.self_attn.rotary_emb.inv_freq".into(),
        "RoPE's frequencies, which older transformers saved; recomputed from rope_theta",
    );
    m
}
