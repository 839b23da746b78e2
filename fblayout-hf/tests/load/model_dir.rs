//! Opening model directories: the fixtures, and directories missing a file.

use std::path::Path;

use fblayout_hf::config::ModelConfig;
use fblayout_hf::{ModelDir, ModelDirError};

use crate::common::{ARCHS, hf, model_dir};

#[test]
fn fixture_directories_open() {
    for arch in ARCHS {
        let model = ModelDir::open(model_dir(arch)).unwrap();
        assert_eq!(model.config().model_type(), arch);
        model.check_names().unwrap();
        // The tokenizer pads with config.json's pad_token_id.
        let pad = model.config().pad_token_id();
        assert_eq!(model.tokenizer().options().pad_id, pad, "{arch}");
    }
    let (config, checkpoint, _) = ModelDir::open(model_dir("gpt2")).unwrap().into_parts();
    assert!(matches!(config, ModelConfig::Gpt2(_)));
    assert_eq!(checkpoint.len(), 28);
}

/// A temp directory holding copies of the bert fixture's `files` (and empty `extra` files).
fn dir_with(files: &[&str], extra: &[&str]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    for file in files {
        std::fs::copy(model_dir("bert").join(file), dir.path().join(file)).unwrap();
    }
    for file in extra {
        std::fs::write(dir.path().join(file), b"").unwrap();
    }
    dir
}

fn missing(dir: &Path) -> (String, Vec<String>, Option<String>, String) {
    let err = ModelDir::open(dir).unwrap_err();
    let message = err.to_string();
    match err {
        ModelDirError::MissingFile {
            file, holds, hint, ..
        } => (file.to_string(), holds, hint, message),
        other => panic!("{other:?}"),
    }
}

#[test]
fn missing_files_are_named_with_what_the_directory_holds() {
    let dir = dir_with(&[], &[]);
    let (file, holds, _, message) = missing(dir.path());
    assert_eq!(file, "config.json");
    assert!(holds.is_empty());
    assert!(
        message.contains("no config.json; the directory holds: nothing"),
        "{message}"
    );

    let dir = dir_with(&["config.json", "tokenizer.json"], &["pytorch_model.bin"]);
    let (file, holds, hint, message) = missing(dir.path());
    assert_eq!(file, "model.safetensors or model.safetensors.index.json");
    assert_eq!(
        holds,
        ["config.json", "pytorch_model.bin", "tokenizer.json"]
    );
    assert!(hint.unwrap().contains("PyTorch pickle"), "{message}");
    assert!(
        message.contains(&dir.path().display().to_string()),
        "{message}"
    );

    let dir = dir_with(&["config.json", "model.safetensors"], &["vocab.txt"]);
    let (file, _, hint, _) = missing(dir.path());
    assert_eq!(file, "tokenizer.json");
    assert!(hint.unwrap().contains("vocab.txt"));

    // A PEFT adapter directory is not a model.
    let (file, holds, hint, _) = missing(&hf("bert").join("lora_adapter"));
    assert_eq!(file, "config.json");
    assert_eq!(holds, ["adapter_config.json", "adapter_model.safetensors"]);
    assert!(hint.unwrap().contains("PEFT adapter"));
}

#[test]
fn other_failures_are_typed() {
    let err = ModelDir::open("no/such/model").unwrap_err();
    assert!(
        matches!(err, ModelDirError::NotADirectory { .. }),
        "{err:?}"
    );

    let dir = dir_with(&["model.safetensors", "tokenizer.json"], &[]);
    std::fs::write(dir.path().join("config.json"), r#"{"model_type": "t5"}"#).unwrap();
    let err = ModelDir::open(dir.path()).unwrap_err();
    assert!(matches!(err, ModelDirError::Config(_)), "{err:?}");

    // A vocabulary larger than the embedding table.
    let text = std::fs::read_to_string(model_dir("bert").join("config.json")).unwrap();
    let text = text.replace("\"vocab_size\": 160", "\"vocab_size\": 100");
    std::fs::write(dir.path().join("config.json"), text).unwrap();
    let err = ModelDir::open(dir.path()).unwrap_err();
    assert!(
        matches!(
            err,
            ModelDirError::VocabTooLarge {
                tokenizer: 160,
                config: 100,
                ..
            }
        ),
        "{err:?}"
    );

    // The weights, truncated.
    std::fs::copy(
        model_dir("bert").join("config.json"),
        dir.path().join("config.json"),
    )
    .unwrap();
    std::fs::write(dir.path().join("model.safetensors"), b"\x10\0\0").unwrap();
    let err = ModelDir::open(dir.path()).unwrap_err();
    assert!(matches!(err, ModelDirError::Weights(_)), "{err:?}");
    assert!(err.to_string().contains("truncated"), "{err}");
}
