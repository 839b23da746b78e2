//! Training checkpoints: one safetensors file holding every persistent tensor of the step (the
//! parameters and AdamW's moments, `f64`) and, in its header's metadata, a small JSON of the
//! rest ([`TrainState`]: steps, data position, seed, loss scale).
//!
//! [`save`] writes a temporary file in the same directory, syncs it and renames it over the
//! checkpoint, so a run killed at any moment leaves the previous checkpoint or the new one,
//! never a torn file. [`load`] refuses a truncated or corrupt file, and
//! [`Checkpoint::check_tensors`] one made for another model.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use safetensors::tensor::{Dtype, SafeTensors, TensorView};

use fblayout_plan::exec::LossScaleState;

use crate::data::DataPosition;

/// The metadata key under which the JSON state is stored.
const STATE_KEY: &str = "fblayout-train";
/// The version of the state's format.
const FORMAT: u64 = 1;

/// Everything besides the tensors that a resumed run needs to continue exactly.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TrainState {
    /// Training steps done (optimizer updates and, in mixed precision, skipped steps).
    pub step: u32,
    /// AdamW's step count (the steps that updated the parameters).
    pub adam_steps: u32,
    /// Where the next batch starts.
    pub position: DataPosition,
    /// The run's seed.
    pub seed: u64,
    /// Steps skipped for overflowing gradients (mixed precision).
    pub skipped: u32,
    /// Where dynamic loss scaling stands (mixed precision; `None` without it).
    pub loss_scale: Option<LossScaleState>,
}

/// A checkpoint: the state and the tensors, `(name, shape, values)`.
#[derive(Debug, Clone, PartialEq)]
pub struct Checkpoint {
    /// The state.
    pub state: TrainState,
    /// Every persistent tensor.
    pub tensors: Vec<(String, Vec<usize>, Vec<f64>)>,
}

/// Why a checkpoint could not be written or read.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CheckpointError {
    /// The file could not be written or read.
    #[error("{}: {source}", file.display())]
    Io {
        /// The file.
        file: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The file is not a complete safetensors file (truncated, or not one).
    #[error("{}: not a complete checkpoint: {detail}", file.display())]
    Corrupt {
        /// The file.
        file: PathBuf,
        /// What is wrong.
        detail: String,
    },
    /// The checkpoint does not fit the model being trained.
    #[error("{}: made for another model: {detail}", file.display())]
    Mismatch {
        /// The file.
        file: PathBuf,
        /// What differs.
        detail: String,
    },
}

/// Writes `checkpoint` to `file` atomically (see the module docs).
pub fn save(file: &Path, checkpoint: &Checkpoint) -> Result<(), CheckpointError> {
    let io = |source| CheckpointError::Io {
        file: file.to_owned(),
        source,
    };
    let s = &checkpoint.state;
    let state = serde_json::json!({
        "format": FORMAT,
        "step": s.step,
        "adam_steps": s.adam_steps,
        "epoch": s.position.epoch,
        "next": s.position.next,
        "seed": s.seed,
        "skipped": s.skipped,
        "loss_scale": s.loss_scale.map(|l| l.scale),
        "loss_scale_good": s.loss_scale.map(|l| l.good),
    });
    let bytes: Vec<(String, Vec<usize>, Vec<u8>)> = checkpoint
        .tensors
        .iter()
        .map(|(n, shape, v)| {
            let data = v.iter().flat_map(|x| x.to_le_bytes()).collect();
            (n.clone(), shape.clone(), data)
        })
        .collect();
    let views = bytes
        .iter()
        .map(|(n, shape, data)| {
            Ok((
                n.as_str(),
                TensorView::new(Dtype::F64, shape.clone(), data)?,
            ))
        })
        .collect::<Result<Vec<_>, safetensors::SafeTensorError>>()
        .and_then(|views| {
            safetensors::serialize(
                views,
                Some(HashMap::from([(STATE_KEY.to_owned(), state.to_string())])),
            )
        })
        .map_err(|e| CheckpointError::Corrupt {
            file: file.to_owned(),
            detail: format!("can't serialize: {e}"),
        })?;
    fblayout_hf::files::write_atomically(file, &views).map_err(io)
}

/// Reads the checkpoint in `file`.
pub fn load(file: &Path) -> Result<Checkpoint, CheckpointError> {
    let bytes = std::fs::read(file).map_err(|source| CheckpointError::Io {
        file: file.to_owned(),
        source,
    })?;
    let corrupt = |detail: String| CheckpointError::Corrupt {
        file: file.to_owned(),
        detail,
    };
    let (_, metadata) = SafeTensors::read_metadata(&bytes).map_err(|e| corrupt(e.to_string()))?;
    let st = SafeTensors::deserialize(&bytes).map_err(|e| corrupt(e.to_string()))?;
    let json = metadata
        .metadata()
        .as_ref()
        .and_then(|m| m.get(STATE_KEY))
        .ok_or_else(|| corrupt(format!("no `{STATE_KEY}` state in its metadata")))?;
    let value: serde_json::Value =
        serde_json::from_str(json).map_err(|e| corrupt(format!("its state: {e}")))?;
    let field = |name: &str| {
        value
            .get(name)
            .and_then(serde_json::Value::as_u64)
            .ok_or_else(|| corrupt(format!("its state has no number `{name}`")))
    };
    let small = |name: &str| {
        field(name).and_then(|v| {
            u32::try_from(v).map_err(|_| corrupt(format!("its state's `{name}` is too large")))
        })
    };
    if field("format")? != FORMAT {
        return Err(corrupt(format!(
            "format {} (this version reads {FORMAT})",
            field("format")?
        )));
    }
    let state = TrainState {
        step: small("step")?,
        adam_steps: small("adam_steps")?,
        position: DataPosition {
            epoch: field("epoch")?,
            next: field("next")? as usize,
        },
        seed: field("seed")?,
        skipped: small("skipped")?,
        loss_scale: loss_scale(&value).map_err(corrupt)?,
    };
    let mut tensors = Vec::new();
    for (name, view) in st.tensors() {
        if view.dtype() != Dtype::F64 {
            return Err(corrupt(format!(
                "tensor `{name}` is {:?}, not F64",
                view.dtype()
            )));
        }
        let values = view
            .data()
            .chunks_exact(8)
            .map(|c| f64::from_le_bytes(c.try_into().unwrap_or([0; 8])))
            .collect();
        tensors.push((name, view.shape().to_vec(), values));
    }
    tensors.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(Checkpoint { state, tensors })
}

/// The loss scale's state in the checkpoint's JSON `state`: none where its fields are absent
/// or null (a run without loss scaling).
fn loss_scale(state: &serde_json::Value) -> Result<Option<LossScaleState>, String> {
    let (scale, good) = (state.get("loss_scale"), state.get("loss_scale_good"));
    let present = |v: Option<&serde_json::Value>| v.is_some_and(|v| !v.is_null());
    match (present(scale), present(good)) {
        (false, false) => Ok(None),
        (true, true) => {
            let scale = scale
                .and_then(serde_json::Value::as_f64)
                .ok_or("its state's `loss_scale` is not a number")?;
            let good = good
                .and_then(serde_json::Value::as_u64)
                .and_then(|g| u32::try_from(g).ok())
                .ok_or("its state's `loss_scale_good` is not a step count")?;
            Ok(Some(LossScaleState {
                scale: scale as f32,
                good,
            }))
        }
        _ => {
            Err("its state has one of `loss_scale` and `loss_scale_good` without the other".into())
        }
    }
}

impl Checkpoint {
    /// Checks that the checkpoint (read from `file`) holds exactly the tensors `expected`
    /// (name and element count), as a step of the model being trained has them.
    pub fn check_tensors(
        &self,
        file: &Path,
        expected: &[(String, usize)],
    ) -> Result<(), CheckpointError> {
        let mismatch = |detail: String| CheckpointError::Mismatch {
            file: file.to_owned(),
            detail,
        };
        for (name, len) in expected {
            match self.tensors.iter().find(|(n, _, _)| n == name) {
                None => return Err(mismatch(format!("it has no tensor `{name}`"))),
                Some((_, _, v)) if v.len() != *len => {
                    return Err(mismatch(format!(
                        "tensor `{name}` has {} values; the model's has {len}",
                        v.len()
                    )));
                }
                Some(_) => {}
            }
        }
        if let Some((extra, _, _)) = self
            .tensors
            .iter()
            .find(|(n, _, _)| !expected.iter().any(|(e, _)| e == n))
        {
            return Err(mismatch(format!("the model has no tensor `{extra}`")));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Checkpoint {
        Checkpoint {
            state: TrainState {
                step: 7,
                adam_steps: 6,
                position: DataPosition { epoch: 2, next: 3 },
                seed: u64::MAX - 1,
                skipped: 1,
                loss_scale: Some(LossScaleState {
                    scale: 1024.0,
                    good: 17,
                }),
            },
            tensors: vec![
                (
                    "a.weight".into(),
                    vec![2, 2],
                    vec![1.0, -2.5, 1e-300, f64::MIN_POSITIVE],
                ),
                ("a.weight.m".into(), vec![3], vec![0.1, 0.2, 0.3]),
            ],
        }
    }

    #[test]
    fn a_checkpoint_round_trips_bit_for_bit_and_leaves_no_temporary_file() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("checkpoint.safetensors");
        save(&file, &sample()).unwrap();
        save(&file, &sample()).unwrap();
        assert_eq!(load(&file).unwrap(), sample());
        let unscaled = Checkpoint {
            state: TrainState {
                loss_scale: None,
                ..sample().state
            },
            ..sample()
        };
        save(&file, &unscaled).unwrap();
        assert_eq!(load(&file).unwrap(), unscaled);
        let names: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, ["checkpoint.safetensors"]);
    }

    #[test]
    fn truncated_corrupt_and_mismatched_checkpoints_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("c.safetensors");
        save(&file, &sample()).unwrap();
        let bytes = std::fs::read(&file).unwrap();
        std::fs::write(&file, &bytes[..bytes.len() - 5]).unwrap();
        assert!(matches!(load(&file), Err(CheckpointError::Corrupt { .. })));
        std::fs::write(&file, b"garbage").unwrap();
        assert!(matches!(load(&file), Err(CheckpointError::Corrupt { .. })));
        let c = sample();
        let want = |v: &[(&str, usize)]| {
            v.iter()
                .map(|&(n, l)| (n.to_owned(), l))
                .collect::<Vec<_>>()
        };
        c.check_tensors(&file, &want(&[("a.weight", 4), ("a.weight.m", 3)]))
            .unwrap();
        for bad in [
            want(&[("a.weight", 4)]),
            want(&[("a.weight", 5), ("a.weight.m", 3)]),
            want(&[("a.weight", 4), ("a.weight.m", 3), ("b", 1)]),
        ] {
            let e = c.check_tensors(&file, &bad).unwrap_err();
            assert!(matches!(e, CheckpointError::Mismatch { .. }), "{e}");
        }
    }
}
