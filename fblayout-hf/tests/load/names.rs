//! The name maps against the fixtures' checkpoints, and against tensor lists renamed, reshaped
//! or pruned the ways real checkpoints differ.

use std::collections::BTreeSet;
use std::path::Path;

use fblayout_hf::config::ModelConfig;
use fblayout_hf::names::{NameMap, Presence};
use fblayout_hf::weights::{Checkpoint, Dtype, TensorInfo};
use serde_json::json;

use crate::common::{ARCHS, fixture_json, hf, model_dir};

fn config(arch: &str) -> ModelConfig {
    ModelConfig::from_file(model_dir(arch).join("config.json")).unwrap()
}

/// The fixture's config.json with `edit` applied.
fn edited(
    arch: &str,
    edit: impl FnOnce(&mut serde_json::Map<String, serde_json::Value>),
) -> ModelConfig {
    let text = std::fs::read_to_string(model_dir(arch).join("config.json")).unwrap();
    let mut value: serde_json::Value = serde_json::from_str(&text).unwrap();
    edit(value.as_object_mut().unwrap());
    ModelConfig::from_json(&value.to_string(), "config.json").unwrap()
}

fn tensors(arch: &str) -> Vec<TensorInfo> {
    Checkpoint::open(model_dir(arch).join("model.safetensors"))
        .unwrap()
        .tensors()
        .cloned()
        .collect()
}

fn info(name: &str, dtype: Dtype, shape: &[usize]) -> TensorInfo {
    TensorInfo {
        name: name.into(),
        dtype,
        shape: shape.to_vec(),
    }
}

#[test]
fn every_fixture_tensor_is_expected_and_every_expected_one_present() {
    for arch in ARCHS {
        let map = NameMap::for_config(&config(arch));
        let checkpoint = Checkpoint::open(model_dir(arch).join("model.safetensors")).unwrap();
        let check = map.check(&checkpoint).unwrap_or_else(|e| panic!("{e}"));
        assert!(check.absent().is_empty(), "{arch}: {:?}", check.absent());
        assert!(check.ignored().is_empty(), "{arch}: {:?}", check.ignored());
        assert!(
            check
                .resolved()
                .all(|(canonical, actual)| canonical == actual)
        );
        // The expected names are exactly the parameters the parity fixtures train.
        let params: BTreeSet<String> =
            serde_json::from_value(fixture_json(&hf(arch))["params"].clone()).unwrap();
        let expected: BTreeSet<String> = map.expected().iter().map(|t| t.name.clone()).collect();
        assert_eq!(expected, params, "{arch}");
    }
}

#[test]
fn expected_shapes_follow_hf_orientation() {
    let bert = NameMap::for_config(&config("bert"));
    let shape = |m: &NameMap, n: &str| m.get(n).unwrap().shape.clone();
    assert_eq!(
        shape(&bert, "bert.encoder.layer.1.intermediate.dense.weight"),
        [128, 64]
    );
    assert_eq!(shape(&bert, "classifier.weight"), [3, 64]);
    assert_eq!(
        bert.get("classifier.weight").unwrap().presence,
        Presence::Optional
    );
    assert_eq!(
        bert.get("bert.pooler.dense.bias").unwrap().presence,
        Presence::Optional
    );

    let gpt2 = NameMap::for_config(&config("gpt2"));
    assert_eq!(
        shape(&gpt2, "transformer.h.0.attn.c_attn.weight"),
        [64, 192]
    ); // Conv1D: [in, out]
    assert_eq!(shape(&gpt2, "transformer.h.1.mlp.c_proj.weight"), [256, 64]);
    assert!(gpt2.get("lm_head.weight").is_none()); // tied

    let llama = NameMap::for_config(&config("llama"));
    assert_eq!(
        shape(&llama, "model.layers.0.self_attn.k_proj.weight"),
        [32, 64]
    ); // 2 kv heads × 16
    assert_eq!(
        shape(&llama, "model.layers.0.self_attn.o_proj.weight"),
        [64, 64]
    );
    assert_eq!(
        shape(&llama, "model.layers.1.mlp.down_proj.weight"),
        [64, 176]
    );
    assert_eq!(shape(&llama, "lm_head.weight"), [320, 64]);

    let qwen2 = NameMap::for_config(&edited("llama", |c| {
        c.insert("model_type".into(), json!("qwen2"));
        c.insert("architectures".into(), json!(["Qwen2ForCausalLM"]));
        c.insert("tie_word_embeddings".into(), json!(true));
    }));
    assert_eq!(shape(&qwen2, "model.layers.0.self_attn.k_proj.bias"), [32]);
    assert!(qwen2.get("model.layers.0.self_attn.o_proj.bias").is_none());
    assert!(qwen2.get("lm_head.weight").is_none());
    assert_eq!(qwen2.expected().len(), 21 - 1 + 2 * 3);
}

#[test]
fn minilm_naming_without_the_bert_prefix() {
    // A BertModel checkpoint (sentence-transformers): no `bert.` prefix, no classifier, and
    // the position_ids buffer.
    let config = edited("bert", |c| {
        c.insert("architectures".into(), json!(["BertModel"]));
    });
    let mut list: Vec<TensorInfo> = tensors("bert")
        .into_iter()
        .filter(|t| !t.name.starts_with("classifier."))
        .map(|t| TensorInfo {
            name: t.name.trim_start_matches("bert.").to_string(),
            ..t
        })
        .collect();
    list.push(info("embeddings.position_ids", Dtype::I64, &[1, 32]));
    let check = NameMap::for_config(&config)
        .check_tensors(Path::new("minilm/model.safetensors"), &list)
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        check.actual("bert.embeddings.word_embeddings.weight"),
        Some("embeddings.word_embeddings.weight")
    );
    assert_eq!(check.absent(), ["classifier.weight", "classifier.bias"]);
    assert_eq!(check.ignored().len(), 1);
    assert_eq!(check.ignored()[0].0, "embeddings.position_ids");
    assert_eq!(check.resolved().count(), 39);
}

#[test]
fn old_gpt2_checkpoints() {
    // The Hub's GPT-2: no `transformer.` prefix, attention mask buffers, a tied lm_head saved.
    let mut list: Vec<TensorInfo> = tensors("gpt2")
        .into_iter()
        .map(|t| TensorInfo {
            name: t.name.trim_start_matches("transformer.").to_string(),
            ..t
        })
        .collect();
    for l in 0..2 {
        list.push(info(
            &format!("h.{l}.attn.bias"),
            Dtype::F32,
            &[1, 1, 32, 32],
        ));
        list.push(info(&format!("h.{l}.attn.masked_bias"), Dtype::F32, &[]));
    }
    list.push(info("lm_head.weight", Dtype::F32, &[320, 64]));
    let check = NameMap::for_config(&config("gpt2"))
        .check_tensors(Path::new("gpt2/model.safetensors"), &list)
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(check.resolved().count(), 28);
    assert_eq!(check.ignored().len(), 5);
    assert_eq!(
        check.actual("transformer.h.1.ln_2.bias"),
        Some("h.1.ln_2.bias")
    );
}

#[test]
fn tying_decides_whether_lm_head_is_expected() {
    // Llama tied: the fixture's lm_head.weight is ignored, not unexpected.
    let tied = edited("llama", |c| {
        c.insert("tie_word_embeddings".into(), json!(true));
    });
    let check = NameMap::for_config(&tied)
        .check_tensors(Path::new("x"), &tensors("llama"))
        .unwrap();
    assert_eq!(check.ignored()[0].0, "lm_head.weight");
    // GPT-2 untied: the fixture lacks lm_head.weight.
    let untied = edited("gpt2", |c| {
        c.insert("tie_word_embeddings".into(), json!(false));
    });
    let err = NameMap::for_config(&untied)
        .check_tensors(Path::new("x"), &tensors("gpt2"))
        .unwrap_err();
    let missing: Vec<_> = err.missing().collect();
    assert_eq!(missing.len(), 1);
    assert_eq!(missing[0].name, "lm_head.weight");
    assert_eq!(missing[0].shape, [320, 64]);
    assert_eq!(err.problems.len(), 1);
}

#[test]
fn every_problem_is_reported_at_once() {
    let mut list = tensors("bert");
    list.retain(|t| {
        t.name != "bert.encoder.layer.1.output.dense.bias"
            && t.name != "bert.embeddings.LayerNorm.weight"
    });
    for t in &mut list {
        if t.name == "bert.encoder.layer.0.attention.self.key.weight" {
            t.shape = vec![64, 32];
        }
        if t.name == "classifier.bias" {
            t.dtype = Dtype::I32;
        }
    }
    list.push(info("cls.predictions.bias", Dtype::F32, &[160]));
    list.push(info("encoder.layer.0.output.dense.bias", Dtype::F32, &[64])); // a duplicate
    let err = NameMap::for_config(&config("bert"))
        .check_tensors(Path::new("bad/model.safetensors"), &list)
        .unwrap_err();
    let missing: Vec<&str> = err.missing().map(|t| t.name.as_str()).collect();
    assert_eq!(
        missing,
        [
            "bert.embeddings.LayerNorm.weight",
            "bert.encoder.layer.1.output.dense.bias"
        ]
    );
    let unexpected: Vec<&str> = err.unexpected().map(|t| t.name.as_str()).collect();
    assert_eq!(
        unexpected,
        ["cls.predictions.bias", "encoder.layer.0.output.dense.bias"]
    );
    let misshaped: Vec<_> = err.misshaped().collect();
    assert_eq!(misshaped.len(), 1);
    assert_eq!(
        misshaped[0].name,
        "bert.encoder.layer.0.attention.self.key.weight"
    );
    assert_eq!(
        (&misshaped[0].found[..], &misshaped[0].expected[..]),
        (&[64, 32][..], &[64, 64][..])
    );
    let undecodable: Vec<_> = err.undecodable().collect();
    assert_eq!(undecodable.len(), 1);
    assert_eq!(undecodable[0].name, "classifier.bias");
    assert_eq!(err.problems.len(), 6);
    let message = err.to_string();
    assert!(message.starts_with("bad/model.safetensors: the tensors don't match the config's BertForSequenceClassification: 2 missing, 2 unexpected, 1 mis-shaped, 1 not readable as f32"), "{message}");
    assert!(message.contains("mis-shaped: `bert.encoder.layer.0.attention.self.key.weight` is [64, 32], the config implies [64, 64]"), "{message}");
}

#[test]
fn a_config_that_does_not_fit_its_weights() {
    // intermediate_size 256 where the weights have 128: three tensors per layer.
    let wrong = edited("bert", |c| {
        c.insert("intermediate_size".into(), json!(256));
    });
    let checkpoint = Checkpoint::open(model_dir("bert").join("model.safetensors")).unwrap();
    let err = NameMap::for_config(&wrong).check(&checkpoint).unwrap_err();
    assert_eq!(err.misshaped().count(), 6, "{err}");
    assert_eq!(err.problems.len(), 6);
    assert_eq!(err.file, checkpoint.path());
}
