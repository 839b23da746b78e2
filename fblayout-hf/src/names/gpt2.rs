//! GPT-2's tensors (transformers' `modeling_gpt2.py`). Its projections are `Conv1D`s, whose
//! weights are `[in, out]`.

use crate::config::{Gpt2Class, Gpt2Config};

use super::{NameMap, Presence};

pub(super) fn map(c: &Gpt2Config) -> NameMap {
    let (e, i) = (c.n_embd, c.n_inner);
    let mut m = NameMap::new(c.class.name(), "transformer.", &["lm_head"]);
    m.weight("transformer.wte", &[c.vocab_size, e]);
    m.weight("transformer.wpe", &[c.n_positions, e]);
    for l in 0..c.n_layer {
        let block = format!("transformer.h.{l}");
        m.layer_norm(&format!("{block}.ln_1"), e);
        conv1d(&mut m, &format!("{block}.attn.c_attn"), e, 3 * e);
        conv1d(&mut m, &format!("{block}.attn.c_proj"), e, e);
        m.layer_norm(&format!("{block}.ln_2"), e);
        conv1d(&mut m, &format!("{block}.mlp.c_fc"), e, i);
        conv1d(&mut m, &format!("{block}.mlp.c_proj"), i, e);
    }
    m.layer_norm("transformer.ln_f", e);
    if c.class == Gpt2Class::LmHead {
        if c.tie_word_embeddings {
            m.ignore(
                "lm_head.weight".into(),
                "tied to transformer.wte.weight (tie_word_embeddings)",
            );
        } else {
            m.linear("lm_head", c.vocab_size, e, false, Presence::Required);
        }
    }
    m.ignore(
        "transformer.h.*.attn.bias".into(),
        "the causal mask buffer older transformers saved",
    );
    m.ignore(
        "transformer.h.*.attn.masked_bias".into(),
        "the masking constant older transformers saved",
    );
    m
}

/// A `Conv1D` from `inputs` to `outputs`: `weight [in, out]`, `bias [out]`.
fn conv1d(m: &mut NameMap, name: &str, inputs: usize, outputs: usize) {
    m.weight(name, &[inputs, outputs]);
    m.push(format!("{name}.bias"), &[outputs], Presence::Required);
}
