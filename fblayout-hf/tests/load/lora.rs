//! LoRA's settings and graph: typed errors for what it can't do, what it freezes and trains,
//! and the memory it saves.

use fblayout_hf::graph::GraphError;
use fblayout_hf::{ModelDir, lora};
use fblayout_plan::graph::{Role, Sizes};
use fblayout_plan::layouts::LayoutChoice;
use fblayout_plan::lora::{LoraConfig, LoraError};
use fblayout_plan::memory::{Category, MemoryOptions, plan_memory};

use crate::common::{hf, model_dir, read_all, write_safetensors};
use safetensors::Dtype;

fn lora_error(arch: &str, config: &LoraConfig) -> LoraError {
    let model = ModelDir::open(model_dir(arch)).unwrap();
    match lora::build(&model, config) {
        Err(GraphError::Lora { source, .. }) => source,
        other => panic!("{arch}: {other:?}"),
    }
}

#[test]
fn what_lora_cannot_do_is_a_typed_error() {
    let err = lora_error("llama", &LoraConfig::new(4, 8.0, ["q_proj", "qkv"]));
    let LoraError::UnknownTarget { target, available } = &err else {
        panic!("{err:?}")
    };
    assert_eq!(target, "qkv");
    // Every linear module that could be targeted, by its last name (the head included).
    let want = [
        "q_proj",
        "k_proj",
        "v_proj",
        "o_proj",
        "gate_proj",
        "up_proj",
        "down_proj",
        "lm_head",
    ];
    assert_eq!(available, &want);
    assert!(err.to_string().contains("gate_proj"), "{err}");
    let dropout = LoraConfig::new(4, 8.0, ["c_attn"]).with_dropout(0.1);
    assert_eq!(lora_error("gpt2", &dropout), LoraError::Dropout(0.1));
    assert!(matches!(
        lora_error("gpt2", &LoraConfig::new(0, 8.0, ["c_attn"])),
        LoraError::Settings { rank: 0, .. }
    ));
    assert!(matches!(
        lora_error("gpt2", &LoraConfig::new(4, 8.0, Vec::<String>::new())),
        LoraError::NoTargets { .. }
    ));
}

#[test]
fn a_peft_adapter_s_settings_are_read_and_bad_ones_refused() {
    let config = lora::read_config(&hf("gpt2").join("lora_adapter")).unwrap();
    assert_eq!(config, LoraConfig::new(4, 8.0, ["c_attn"]));
    assert_eq!(config.scaling(), 2.0);
    let tmp = tempfile::tempdir().unwrap();
    let write = |json: &str| {
        std::fs::write(tmp.path().join("adapter_config.json"), json).unwrap();
        lora::read_config(tmp.path()).unwrap_err().to_string()
    };
    let base = r#""peft_type": "LORA", "r": 4, "lora_alpha": 8"#;
    assert!(write(&format!(r#"{{{base}, "target_modules": ".*attn"}}"#)).contains("list"));
    assert!(
        write(&format!(
            r#"{{{base}, "target_modules": ["c_attn"], "bias": "all"}}"#
        ))
        .contains("bias")
    );
    assert!(write(r#"{"peft_type": "IA3"}"#).contains("LORA"));
    assert!(write("{").contains("JSON"));
}

#[test]
fn only_the_adapters_train_and_the_memory_plan_saves_the_rest() {
    let model = ModelDir::open(model_dir("llama")).unwrap();
    let full = fblayout_hf::graph::build(&model).unwrap();
    let config = LoraConfig::new(4, 8.0, ["q_proj", "v_proj"]);
    let (g, adapters) = lora::build(&model, &config).unwrap();
    // Two layers, two targets each: eight trained matrices, and every base weight frozen.
    assert_eq!(adapters.adapters.len(), 4);
    assert_eq!(g.params().len(), 8);
    assert_eq!(g.frozen().len(), full.params().len());
    for a in &adapters.adapters {
        assert_eq!(g.tensor(a.base).role, Role::Frozen);
        assert!(g.grad(a.base).is_none());
        assert!(g.grad(a.a).is_some() && g.grad(a.b).is_some());
    }
    let sizes = Sizes { batch: 3, seq: 12 };
    let plan = |g: &fblayout_plan::graph::Graph| {
        let layouts = vec![LayoutChoice::RowMajor; g.tensors().len()];
        plan_memory(g, &layouts, sizes, MemoryOptions::default()).unwrap()
    };
    let (pf, pl) = (plan(&full), plan(&g));
    let elements = |g: &fblayout_plan::graph::Graph| -> u64 {
        g.params()
            .iter()
            .map(|&p| g.tensor(p).elements(sizes))
            .sum()
    };
    // AdamW's two f32 moments of what trains: every weight, or only A and B.
    assert_eq!(
        pf.total_bytes(Category::OptimizerState),
        8 * elements(&full)
    );
    assert_eq!(pl.total_bytes(Category::OptimizerState), 8 * elements(&g));
    // r·(in + out) per adapter: 4·(64 + 64) for q, 4·(64 + 32) for v, in two layers.
    assert_eq!(elements(&g), 2 * (4 * 128 + 4 * 96));
    assert!(pl.peak_live_bytes() < pf.peak_live_bytes());
}

#[test]
fn modules_to_save_train_in_full_and_the_rest_stays_frozen() {
    // peft's SEQ_CLS adapter: `classifier` and `score` (which BERT lacks, left alone as peft
    // leaves it) in modules_to_save.
    let model = ModelDir::open(model_dir("bert")).unwrap();
    let config = lora::read_config(&hf("bert").join("lora_adapter")).unwrap();
    assert_eq!(config.modules_to_save, ["classifier", "score"]);
    let (g, adapters) = lora::build(&model, &config).unwrap();
    let names: Vec<&str> = adapters
        .saved
        .iter()
        .map(|&p| g.tensor(p).name.as_str())
        .collect();
    assert_eq!(names, ["classifier.weight", "classifier.bias"]);
    for &p in &adapters.saved {
        assert_eq!(g.tensor(p).role, Role::Param);
        assert!(g.grad(p).is_some());
    }
    // Two layers, query and value: eight matrices, and the classifier's two tensors.
    assert_eq!(g.params().len(), 8 + 2);
    let pooler = g.find("bert.pooler.dense.weight").unwrap();
    assert_eq!(g.tensor(pooler).role, Role::Frozen);
    // The matrices alone would leave the classifier at the base's values: refused.
    let err = lora::read_adapter(&hf("bert").join("lora_adapter"), &g, &adapters).unwrap_err();
    let text = err.to_string();
    assert!(
        matches!(&err, lora::AdapterError::Module { module, .. } if module == "classifier"),
        "{err:?}"
    );
    assert!(text.contains("read_trained"), "{text}");
}

#[test]
fn modules_to_save_that_fblayout_cannot_train_are_typed_errors_naming_the_module() {
    // The same module adapted and trained in full.
    let both = LoraConfig::new(4, 8.0, ["query"]).with_modules_to_save(["query"]);
    let err = lora_error("bert", &both);
    assert!(
        matches!(&err, LoraError::SavedAndAdapted { module, target }
            if module == "bert.encoder.layer.0.attention.self.query" && target == "query"),
        "{err:?}"
    );
    // GPT-2's embedding is tied to its head: peft would train an untied copy.
    let tied = LoraConfig::new(4, 8.0, ["c_attn"]).with_modules_to_save(["wte"]);
    let err = lora_error("gpt2", &tied);
    assert!(
        matches!(&err, LoraError::SavedTied { entry, name, uses: 2 }
            if entry == "wte" && name == "transformer.wte.weight"),
        "{err:?}"
    );
    assert!(err.to_string().contains("wte"), "{err}");

    // An adapter that saves a module the graph has no parameter for (GPT-2's head is the
    // embedding, tied: no `lm_head.weight`).
    let tmp = tempfile::tempdir().unwrap();
    let peft = hf("gpt2").join("lora_adapter");
    let mut json: serde_json::Value =
        serde_json::from_slice(&std::fs::read(peft.join("adapter_config.json")).unwrap()).unwrap();
    json["modules_to_save"] = serde_json::json!(["lm_head"]);
    std::fs::write(tmp.path().join("adapter_config.json"), json.to_string()).unwrap();
    let source = read_all(&peft.join("adapter_model.safetensors"));
    let mut tensors: Vec<_> = source
        .into_iter()
        .map(|(name, (dtype, shape, bytes))| (name, dtype, shape, bytes))
        .collect();
    let head = vec![0u8; 4 * 320 * 64];
    tensors.push((
        "base_model.model.lm_head.weight".to_owned(),
        Dtype::F32,
        vec![320, 64],
        head,
    ));
    write_safetensors(&tmp.path().join("adapter_model.safetensors"), &tensors);
    let model = ModelDir::open(model_dir("gpt2")).unwrap();
    let config = lora::read_config(tmp.path()).unwrap();
    let (g, adapters) = lora::build(&model, &config).unwrap();
    assert!(adapters.saved.is_empty());
    let err = lora::weights(&model, tmp.path(), &g, &adapters).unwrap_err();
    assert!(
        matches!(&err, lora::AdapterError::Module { module, .. } if module == "lm_head"),
        "{err:?}"
    );
    assert!(err.to_string().contains("lm_head.weight"), "{err}");

    // modules_to_save that is not a list of names.
    json["modules_to_save"] = serde_json::json!("classifier");
    std::fs::write(tmp.path().join("adapter_config.json"), json.to_string()).unwrap();
    let text = lora::read_config(tmp.path()).unwrap_err().to_string();
    assert!(text.contains("modules_to_save"), "{text}");
}
