//! Sharded checkpoints (`model.safetensors.index.json` and its shards), made in a temp dir by
//! splitting a fixture in two.

use std::path::{Path, PathBuf};

use fblayout_hf::ModelDir;
use fblayout_hf::weights::{Checkpoint, WeightsError};
use serde_json::json;

use crate::common::{model_dir, read_all, write_safetensors};

const SHARDS: [&str; 2] = [
    "model-00001-of-00002.safetensors",
    "model-00002-of-00002.safetensors",
];

/// The llama fixture split in two shards (alternate tensors) with its index, and config.json
/// and tokenizer.json beside them: a model directory without model.safetensors.
fn split(dir: &Path) -> PathBuf {
    let tensors: Vec<_> = read_all(&model_dir("llama").join("model.safetensors"))
        .into_iter()
        .map(|(name, (dtype, shape, bytes))| (name, dtype, shape, bytes))
        .collect();
    let mut weight_map = serde_json::Map::new();
    for (s, shard) in SHARDS.iter().enumerate() {
        let part: Vec<_> = tensors.iter().skip(s).step_by(2).cloned().collect();
        for (name, ..) in &part {
            weight_map.insert(name.clone(), json!(shard));
        }
        write_safetensors(&dir.join(shard), &part);
    }
    let total: usize = tensors.iter().map(|t| t.3.len()).sum();
    let index = json!({"metadata": {"total_size": total}, "weight_map": weight_map});
    let index_path = dir.join("model.safetensors.index.json");
    std::fs::write(&index_path, serde_json::to_string_pretty(&index).unwrap()).unwrap();
    for file in ["config.json", "tokenizer.json"] {
        std::fs::copy(model_dir("llama").join(file), dir.join(file)).unwrap();
    }
    index_path
}

/// The index as JSON, edited and written back.
fn edit_index(path: &Path, edit: impl FnOnce(&mut serde_json::Value)) {
    let mut index: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    edit(&mut index);
    std::fs::write(path, index.to_string()).unwrap();
}

#[test]
fn loads_like_the_single_file() {
    let dir = tempfile::tempdir().unwrap();
    let index = split(dir.path());
    let sharded = Checkpoint::open(&index).unwrap();
    let single = Checkpoint::open(model_dir("llama").join("model.safetensors")).unwrap();
    assert_eq!(sharded.path(), index);
    assert_eq!(sharded.files().count(), 2);
    assert_eq!(
        sharded.tensors().collect::<Vec<_>>(),
        single.tensors().collect::<Vec<_>>()
    );
    for info in single.tensors() {
        let a = sharded.read_f32(&info.name).unwrap();
        let b = single.read_f32(&info.name).unwrap();
        assert!(
            a.iter().zip(&b).all(|(x, y)| x.to_bits() == y.to_bits()),
            "{}",
            info.name
        );
        assert_eq!(a.len(), b.len());
    }
    assert_eq!(
        sharded.file_of("lm_head.weight"),
        Some(dir.path().join(SHARDS[0]).as_path())
    );

    // The same as a model directory: found through the index, every name as expected.
    let model = ModelDir::open(dir.path()).unwrap();
    assert_eq!(model.checkpoint().len(), 21);
    model.check_names().unwrap();
}

#[test]
fn a_missing_shard() {
    let dir = tempfile::tempdir().unwrap();
    let index = split(dir.path());
    std::fs::remove_file(dir.path().join(SHARDS[1])).unwrap();
    let err = Checkpoint::open(&index).unwrap_err();
    assert!(
        matches!(&err, WeightsError::MissingShard { shard, count: 10, .. } if shard == SHARDS[1]),
        "{err:?}"
    );
    let message = err.to_string();
    assert!(
        message.contains("model.safetensors.index.json"),
        "{message}"
    );
    assert!(message.contains(SHARDS[1]), "{message}");
}

#[test]
fn a_tensor_listed_but_absent_from_its_shard() {
    let dir = tempfile::tempdir().unwrap();
    let index = split(dir.path());
    edit_index(&index, |i| {
        i["weight_map"]["model.layers.9.mlp.up_proj.weight"] = json!(SHARDS[0]);
    });
    let err = Checkpoint::open(&index).unwrap_err();
    let WeightsError::NotInShard { shard, tensors, .. } = &err else {
        panic!("{err:?}")
    };
    assert!(shard.ends_with(SHARDS[0]));
    assert_eq!(tensors, &["model.layers.9.mlp.up_proj.weight"]);
    let message = err.to_string();
    assert!(
        message.contains("`model.layers.9.mlp.up_proj.weight`") && message.contains(SHARDS[0]),
        "{message}"
    );
}

#[test]
fn a_truncated_shard_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let index = split(dir.path());
    let shard = dir.path().join(SHARDS[1]);
    let bytes = std::fs::read(&shard).unwrap();
    std::fs::write(&shard, &bytes[..bytes.len() / 2]).unwrap();
    let err = Checkpoint::open(&index).unwrap_err();
    assert!(
        matches!(&err, WeightsError::Truncated { file, tensors, .. } if file == &shard && !tensors.is_empty()),
        "{err:?}"
    );
}

#[test]
fn broken_indexes() {
    let dir = tempfile::tempdir().unwrap();
    let index = split(dir.path());
    type Edit = fn(&mut serde_json::Value);
    let cases: [(&str, Edit); 3] = [
        ("no `weight_map`", |i| {
            i.as_object_mut().unwrap().remove("weight_map");
        }),
        ("not a file name", |i| {
            i["weight_map"]["lm_head.weight"] = json!(7);
        }),
        ("is empty", |i| {
            i["weight_map"] = json!({});
        }),
    ];
    for (what, edit) in cases {
        let backup = std::fs::read(&index).unwrap();
        edit_index(&index, edit);
        let err = Checkpoint::open(&index).unwrap_err();
        assert!(matches!(err, WeightsError::Index { .. }), "{what}: {err:?}");
        assert!(err.to_string().contains(what), "{err}");
        std::fs::write(&index, backup).unwrap();
    }
    edit_index(&index, |i| {
        i["weight_map"]["lm_head.weight"] = json!("../elsewhere.safetensors");
    });
    let err = Checkpoint::open(&index).unwrap_err();
    assert!(matches!(err, WeightsError::BadShardName { .. }), "{err:?}");
    std::fs::write(&index, "{").unwrap();
    let err = Checkpoint::open(&index).unwrap_err();
    assert!(matches!(err, WeightsError::Index { .. }), "{err:?}");
}
