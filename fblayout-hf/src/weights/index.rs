//! `model.safetensors.index.json`: which shard file holds each tensor of a sharded
//! checkpoint.
//!
//! ```json
//! {"metadata": {"total_size": 2000}, "weight_map": {"a.weight": "model-00001-of-00002.safetensors", ...}}
//! ```
//!
//! Shard names are file names in the index's directory; anything else (a path, `..`) is
//! refused rather than followed.

use std::collections::BTreeMap;
use std::path::Path;

use serde_json::Value;

use super::error::WeightsError;

/// The index's `weight_map`, shard name → the tensors it holds (each list in name order).
pub(super) fn read(path: &Path) -> Result<BTreeMap<String, Vec<String>>, WeightsError> {
    let bad = |detail: String| WeightsError::Index {
        file: path.to_path_buf(),
        detail,
    };
    let text = std::fs::read_to_string(path).map_err(|source| WeightsError::Io {
        file: path.to_path_buf(),
        source,
    })?;
    let value: Value = serde_json::from_str(&text).map_err(|e| bad(e.to_string()))?;
    let Some(map) = value.get("weight_map") else {
        return Err(bad("no `weight_map`".into()));
    };
    let Some(map) = map.as_object() else {
        return Err(bad("`weight_map` is not an object".into()));
    };
    let mut shards: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (tensor, shard) in map {
        let Some(shard) = shard.as_str() else {
            return Err(bad(format!(
                "`weight_map.{tensor}` is not a file name but {shard}"
            )));
        };
        if !is_plain_file_name(shard) {
            return Err(WeightsError::BadShardName {
                index: path.to_path_buf(),
                shard: shard.to_string(),
            });
        }
        shards
            .entry(shard.to_string())
            .or_default()
            .push(tensor.clone());
    }
    if shards.is_empty() {
        return Err(bad("`weight_map` is empty".into()));
    }
    Ok(shards)
}

fn is_plain_file_name(name: &str) -> bool {
    !name.is_empty() && name != "." && name != ".." && !name.contains(['/', '\\'])
}
