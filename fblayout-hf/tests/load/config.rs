//! `config.json` of each fixture, and of variants made from them: values, spellings, errors.

use std::path::Path;

use fblayout_hf::config::{
    Activation, BertClass, BertConfig, ConfigError, DecoderClass, FieldProblem, Gpt2Class,
    Gpt2Config, LlamaConfig, LlamaFamily, ModelConfig, Rope, RopeScaling,
};
use serde_json::{Value, json};

use crate::common::model_dir;

fn fixture(arch: &str) -> ModelConfig {
    ModelConfig::from_file(model_dir(arch).join("config.json")).unwrap()
}

fn fixture_json(arch: &str) -> Value {
    let text = std::fs::read_to_string(model_dir(arch).join("config.json")).unwrap();
    serde_json::from_str(&text).unwrap()
}

/// The fixture's config.json with `edit` applied, parsed as if it were `dir/config.json`.
fn edited(
    arch: &str,
    edit: impl FnOnce(&mut serde_json::Map<String, Value>),
) -> Result<ModelConfig, ConfigError> {
    let mut value = fixture_json(arch);
    edit(value.as_object_mut().unwrap());
    ModelConfig::from_json(&value.to_string(), Path::new("some/model/config.json"))
}

fn field_problems(result: Result<ModelConfig, ConfigError>) -> Vec<FieldProblem> {
    let err = result.unwrap_err();
    let message = err.to_string();
    assert!(message.contains("some/model/config.json"), "{message}");
    err.problems().to_vec()
}

#[test]
fn bert_fixture() {
    let expected = BertConfig {
        class: BertClass::SequenceClassification,
        vocab_size: 160,
        hidden_size: 64,
        num_hidden_layers: 2,
        num_attention_heads: 4,
        intermediate_size: 128,
        hidden_act: Activation::Gelu,
        max_position_embeddings: 32,
        type_vocab_size: 2,
        layer_norm_eps: 1e-12,
        id2label: vec!["LABEL_0".into(), "LABEL_1".into(), "LABEL_2".into()],
        pad_token_id: 0,
    };
    assert_eq!(fixture("bert"), ModelConfig::Bert(expected));
    let config = fixture("bert");
    assert_eq!(
        (config.model_type(), config.class_name()),
        ("bert", "BertForSequenceClassification")
    );
}

#[test]
fn gpt2_fixture() {
    let expected = Gpt2Config {
        class: Gpt2Class::LmHead,
        vocab_size: 320,
        n_embd: 64,
        n_layer: 2,
        n_head: 4,
        n_positions: 32,
        n_inner: 256, // null in the file: 4 · n_embd
        activation_function: Activation::GeluTanh,
        layer_norm_epsilon: 1e-5,
        tie_word_embeddings: true,
        bos_token_id: Some(0),
        eos_token_id: vec![0],
        pad_token_id: Some(0),
    };
    assert_eq!(fixture("gpt2"), ModelConfig::Gpt2(expected));
}

#[test]
fn llama_fixture() {
    let expected = LlamaConfig {
        family: LlamaFamily::Llama,
        class: DecoderClass::CausalLm,
        vocab_size: 320,
        hidden_size: 64,
        intermediate_size: 176,
        num_hidden_layers: 2,
        num_attention_heads: 4,
        num_key_value_heads: 2,
        head_dim: 16,
        hidden_act: Activation::Silu,
        rms_norm_eps: 1e-6,
        rope: Rope {
            theta: 5000.0,
            scaling: RopeScaling::None,
        },
        max_position_embeddings: 32,
        tie_word_embeddings: false,
        qkv_bias: false,
        o_bias: false,
        mlp_bias: false,
        sliding_window: None,
        bos_token_id: Some(0),
        eos_token_id: vec![1],
        pad_token_id: Some(2),
    };
    assert_eq!(fixture("llama"), ModelConfig::Llama(expected));
}

fn llama(config: ModelConfig) -> LlamaConfig {
    match config {
        ModelConfig::Llama(c) => c,
        other => panic!("not a Llama: {other:?}"),
    }
}

#[test]
fn llama_rope_spellings() {
    // transformers 4: a top-level rope_theta, rope_scaling {type, factor}.
    let v4 = edited("llama", |c| {
        c.remove("rope_parameters");
        c.insert(
            "rope_scaling".into(),
            json!({"type": "linear", "factor": 2.0}),
        );
    });
    assert_eq!(
        llama(v4.unwrap()).rope,
        Rope {
            theta: 5000.0,
            scaling: RopeScaling::Linear { factor: 2.0 }
        }
    );
    // transformers 5: rope_parameters only.
    let v5 = edited("llama", |c| {
        c.remove("rope_theta");
        c.insert(
            "rope_parameters".into(),
            json!({"rope_theta": 1e6, "rope_type": "linear", "factor": 4}),
        );
    });
    assert_eq!(
        llama(v5.unwrap()).rope,
        Rope {
            theta: 1e6,
            scaling: RopeScaling::Linear { factor: 4.0 }
        }
    );
    // Neither: transformers' default base.
    let none = edited("llama", |c| {
        c.remove("rope_theta");
        c.remove("rope_parameters");
        c.insert("rope_scaling".into(), Value::Null);
    });
    assert_eq!(llama(none.unwrap()).rope.theta, 10_000.0);
}

#[test]
fn llama_defaults_and_family() {
    let config = llama(
        edited("llama", |c| {
            for key in [
                "num_key_value_heads",
                "head_dim",
                "hidden_act",
                "tie_word_embeddings",
            ] {
                c.remove(key);
            }
            c.insert("eos_token_id".into(), json!([1, 3]));
        })
        .unwrap(),
    );
    assert_eq!(config.num_key_value_heads, 4);
    assert_eq!(config.head_dim, 16);
    assert_eq!(config.hidden_act, Activation::Silu);
    assert!(!config.tie_word_embeddings);
    assert_eq!(config.eos_token_id, [1, 3]);

    let qwen2 = llama(
        edited("llama", |c| {
            c.insert("model_type".into(), json!("qwen2"));
            c.insert("architectures".into(), json!(["Qwen2ForCausalLM"]));
            c.insert("tie_word_embeddings".into(), json!(true));
            c.insert("use_sliding_window".into(), json!(false));
            c.insert("sliding_window".into(), json!(4096));
        })
        .unwrap(),
    );
    assert_eq!(qwen2.family, LlamaFamily::Qwen2);
    assert_eq!(
        (qwen2.qkv_bias, qwen2.o_bias, qwen2.sliding_window),
        (true, false, None)
    );
    assert!(qwen2.tie_word_embeddings);

    let mistral = llama(
        edited("llama", |c| {
            c.insert("model_type".into(), json!("mistral"));
            c.insert("architectures".into(), json!(["MistralModel"]));
            c.insert("sliding_window".into(), json!(4096));
        })
        .unwrap(),
    );
    assert_eq!(mistral.class, DecoderClass::Model);
    assert_eq!(mistral.sliding_window, Some(4096));
    assert_eq!(ModelConfig::Llama(mistral).class_name(), "MistralModel");

    let biased = llama(
        edited("llama", |c| {
            c.insert("attention_bias".into(), json!(true));
        })
        .unwrap(),
    );
    assert!(biased.qkv_bias && biased.o_bias);
}

#[test]
fn minilm_style_bert_config() {
    // all-MiniLM-L6-v2's config.json: BertModel, no labels, no tie_word_embeddings.
    let text = r#"{"_name_or_path": "nreimers/MiniLM-L6-H384-uncased", "architectures": ["BertModel"],
        "attention_probs_dropout_prob": 0.1, "gradient_checkpointing": false, "hidden_act": "gelu",
        "hidden_dropout_prob": 0.1, "hidden_size": 384, "initializer_range": 0.02,
        "intermediate_size": 1536, "layer_norm_eps": 1e-12, "max_position_embeddings": 512,
        "model_type": "bert", "num_attention_heads": 12, "num_hidden_layers": 6, "pad_token_id": 0,
        "position_embedding_type": "absolute", "transformers_version": "4.8.2", "type_vocab_size": 2,
        "use_cache": true, "vocab_size": 30522}"#;
    let ModelConfig::Bert(bert) = ModelConfig::from_json(text, "config.json").unwrap() else {
        panic!()
    };
    assert_eq!(bert.class, BertClass::Model);
    assert_eq!(bert.num_labels(), 2);
    assert_eq!(bert.head_dim(), 32);
}

#[test]
fn unknown_model_type() {
    let err = edited("bert", |c| {
        c.insert("model_type".into(), json!("t5"));
    })
    .unwrap_err();
    assert!(
        matches!(&err, ConfigError::UnknownModelType { file, model_type } if model_type == "t5" && file.ends_with("some/model/config.json")),
        "{err:?}"
    );
    assert!(err.to_string().contains("\"t5\""), "{err}");
}

#[test]
fn unknown_architecture() {
    let problems = field_problems(edited("bert", |c| {
        c.insert("architectures".into(), json!(["BertForMaskedLM"]));
    }));
    assert!(
        matches!(&problems[..], [FieldProblem::Unsupported { field, value, .. }] if field == "architectures" && value == "\"BertForMaskedLM\""),
        "{problems:?}"
    );
}

#[test]
fn missing_field() {
    let problems = field_problems(edited("bert", |c| {
        c.remove("hidden_size");
    }));
    assert_eq!(
        problems,
        [FieldProblem::Missing {
            field: "hidden_size".into()
        }]
    );
    let problems = field_problems(ModelConfig::from_json("{}", "some/model/config.json"));
    assert_eq!(
        problems,
        [FieldProblem::Missing {
            field: "model_type".into()
        }]
    );
}

#[test]
fn wrongly_typed_fields_are_all_reported() {
    let err = edited("gpt2", |c| {
        c.insert("n_embd".into(), json!("64"));
        c.insert("n_layer".into(), json!(-2));
        c.insert("tie_word_embeddings".into(), json!("yes"));
        c.remove("vocab_size");
    })
    .unwrap_err();
    let fields: Vec<&str> = err.problems().iter().map(FieldProblem::field).collect();
    assert_eq!(
        fields,
        ["n_embd", "vocab_size", "n_layer", "tie_word_embeddings"]
    );
    let message = err.to_string();
    assert!(
        message.contains("4 fields can't be used in a gpt2 config:"),
        "{message}"
    );
    assert!(
        message.contains("`n_embd` should be a non-negative integer, found a string (\"64\")"),
        "{message}"
    );
    assert!(message.contains("`vocab_size` is missing"), "{message}");
}

#[test]
fn unsupported_options() {
    let problems = field_problems(edited("bert", |c| {
        c.insert("hidden_act".into(), json!("relu"));
    }));
    assert!(
        matches!(&problems[..], [FieldProblem::Unsupported { field, value, .. }] if field == "hidden_act" && value == "\"relu\""),
        "{problems:?}"
    );
    let problems = field_problems(edited("llama", |c| {
        c.insert(
            "rope_scaling".into(),
            json!({"rope_type": "llama3", "factor": 8.0}),
        );
    }));
    assert!(
        matches!(&problems[..], [FieldProblem::Unsupported { field, supported, .. }] if field == "rope_scaling.rope_type" && supported.contains(&"linear")),
        "{problems:?}"
    );
    let problems = field_problems(edited("llama", |c| {
        c.insert(
            "rope_parameters".into(),
            json!({"rope_theta": 5000.0, "rope_type": "yarn", "factor": 4.0}),
        );
    }));
    assert_eq!(problems[0].field(), "rope_parameters.rope_type");
    let problems = field_problems(edited("llama", |c| {
        c.remove("rope_parameters");
        c.insert("rope_scaling".into(), json!({"type": "linear"}));
    }));
    assert_eq!(
        problems,
        [FieldProblem::Missing {
            field: "rope_scaling.factor".into()
        }]
    );
    // Both spellings, disagreeing.
    let problems = field_problems(edited("llama", |c| {
        c.insert(
            "rope_scaling".into(),
            json!({"type": "linear", "factor": 2.0}),
        );
    }));
    assert!(
        matches!(&problems[..], [FieldProblem::Invalid { field, .. }] if field == "rope_scaling"),
        "{problems:?}"
    );
}

#[test]
fn inconsistent_fields() {
    let problems = field_problems(edited("llama", |c| {
        c.insert("num_key_value_heads".into(), json!(3));
        c.insert("rope_theta".into(), json!(10000.0)); // rope_parameters says 5000
    }));
    let fields: Vec<&str> = problems.iter().map(FieldProblem::field).collect();
    assert_eq!(
        fields,
        ["rope_theta", "num_key_value_heads"],
        "{problems:?}"
    );
    assert!(
        problems
            .iter()
            .all(|p| matches!(p, FieldProblem::Invalid { .. }))
    );

    let problems = field_problems(edited("bert", |c| {
        c.insert("num_labels".into(), json!(2)); // id2label has 3
        c.insert("num_attention_heads".into(), json!(5));
    }));
    let fields: Vec<&str> = problems.iter().map(FieldProblem::field).collect();
    assert_eq!(
        fields,
        ["num_labels", "num_attention_heads"],
        "{problems:?}"
    );
}

#[test]
fn unreadable_files() {
    let err = ModelConfig::from_json("{not json", "some/model/config.json").unwrap_err();
    assert!(matches!(err, ConfigError::Json { .. }), "{err:?}");
    assert!(
        err.to_string().starts_with("some/model/config.json: "),
        "{err}"
    );
    let err = ModelConfig::from_json("[1, 2]", "some/model/config.json").unwrap_err();
    assert!(err.to_string().contains("the top level is a list"), "{err}");
    let err = ModelConfig::from_file("no/such/dir/config.json").unwrap_err();
    assert!(matches!(err, ConfigError::Io { .. }), "{err:?}");
    assert!(err.to_string().contains("no/such/dir/config.json"), "{err}");
}
