//! BERT's tensors (transformers' `modeling_bert.py`).

use crate::config::BertConfig;

use super::{NameMap, Presence};

pub(super) fn map(c: &BertConfig) -> NameMap {
    let (h, i) = (c.hidden_size, c.intermediate_size);
    let mut m = NameMap::new(c.class.name(), "bert.", &["classifier"]);
    m.weight("bert.embeddings.word_embeddings", &[c.vocab_size, h]);
    m.weight(
        "bert.embeddings.position_embeddings",
        &[c.max_position_embeddings, h],
    );
    m.weight(
        "bert.embeddings.token_type_embeddings",
        &[c.type_vocab_size, h],
    );
    m.layer_norm("bert.embeddings.LayerNorm", h);
    for l in 0..c.num_hidden_layers {
        let layer = format!("bert.encoder.layer.{l}");
        for proj in ["query", "key", "value"] {
            m.linear(
                &format!("{layer}.attention.self.{proj}"),
                h,
                h,
                true,
                Presence::Required,
            );
        }
        m.linear(
            &format!("{layer}.attention.output.dense"),
            h,
            h,
            true,
            Presence::Required,
        );
        m.layer_norm(&format!("{layer}.attention.output.LayerNorm"), h);
        m.linear(
            &format!("{layer}.intermediate.dense"),
            i,
            h,
            true,
            Presence::Required,
        );
        m.linear(
            &format!("{layer}.output.dense"),
            h,
            i,
            true,
            Presence::Required,
        );
        m.layer_norm(&format!("{layer}.output.LayerNorm"), h);
    }
    // A BertModel checkpoint may lack the pooler (`add_pooling_layer=False`), and one saved
    // before classification fine-tuning lacks the classifier: both are then initialised.
    m.linear("bert.pooler.dense", h, h, true, Presence::Optional);
    m.linear("classifier", c.num_labels(), h, true, Presence::Optional);
    m.ignore(
        "bert.embeddings.position_ids".into(),
        "a buffer of 0..max_position_embeddings, not a parameter",
    );
    m.ignore(
        "bert.embeddings.token_type_ids".into(),
        "a buffer of zeros, not a parameter",
    );
    m
}
