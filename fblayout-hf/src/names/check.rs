//! Checking a checkpoint's tensors against a [`NameMap`].

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};

use crate::weights::{Checkpoint, TensorInfo};

use super::{ExpectedTensor, NameMap, Presence};

/// A checkpoint that matches its [`NameMap`]: how its names map to the canonical ones.
#[derive(Debug, Clone)]
pub struct NameCheck {
    /// Canonical name → the checkpoint's name, for every expected tensor present.
    resolved: BTreeMap<String, String>,
    absent: Vec<String>,
    ignored: Vec<(String, &'static str)>,
}

impl NameCheck {
    /// The checkpoint's name for the canonical `name`, if the checkpoint holds it.
    pub fn actual(&self, name: &str) -> Option<&str> {
        self.resolved.get(name).map(String::as_str)
    }

    /// Every present expected tensor: (canonical name, the checkpoint's name).
    pub fn resolved(&self) -> impl Iterator<Item = (&str, &str)> {
        self.resolved.iter().map(|(c, a)| (c.as_str(), a.as_str()))
    }

    /// The optional tensors the checkpoint lacks (canonical names), to be initialised.
    pub fn absent(&self) -> &[String] {
        &self.absent
    }

    /// The checkpoint's tensors that were ignored, and why.
    pub fn ignored(&self) -> &[(String, &'static str)] {
        &self.ignored
    }
}

/// A tensor whose shape isn't the one its config implies.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Misshaped {
    /// Its name in the checkpoint.
    pub name: String,
    /// Its shape there.
    pub found: Vec<usize>,
    /// The shape the config implies.
    pub expected: Vec<usize>,
}

/// One way a checkpoint's tensors differ from what its config implies.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TensorProblem {
    /// A required tensor is absent (its canonical name and expected shape).
    Missing(ExpectedTensor),
    /// A tensor is neither expected nor ignorable (the checkpoint's name).
    Unexpected(TensorInfo),
    /// An expected tensor has another shape.
    Misshaped(Misshaped),
    /// An expected tensor is in a dtype that can't be read as f32.
    Undecodable(TensorInfo),
}

/// Every way a checkpoint's tensors differ from what its config implies.
#[derive(Debug, Clone, thiserror::Error)]
pub struct NameMismatch {
    /// The checkpoint (its file, or its index).
    pub file: PathBuf,
    /// The class the config describes.
    pub class: &'static str,
    /// Every problem: the missing tensors, then the unexpected, the mis-shaped and the
    /// undecodable ones.
    pub problems: Vec<TensorProblem>,
}

impl NameMismatch {
    /// The required tensors the checkpoint lacks.
    pub fn missing(&self) -> impl Iterator<Item = &ExpectedTensor> {
        self.problems.iter().filter_map(|p| match p {
            TensorProblem::Missing(t) => Some(t),
            _ => None,
        })
    }

    /// The tensors neither expected nor ignorable.
    pub fn unexpected(&self) -> impl Iterator<Item = &TensorInfo> {
        self.problems.iter().filter_map(|p| match p {
            TensorProblem::Unexpected(t) => Some(t),
            _ => None,
        })
    }

    /// The expected tensors with another shape.
    pub fn misshaped(&self) -> impl Iterator<Item = &Misshaped> {
        self.problems.iter().filter_map(|p| match p {
            TensorProblem::Misshaped(t) => Some(t),
            _ => None,
        })
    }

    /// The expected tensors in a dtype that can't be read as f32.
    pub fn undecodable(&self) -> impl Iterator<Item = &TensorInfo> {
        self.problems.iter().filter_map(|p| match p {
            TensorProblem::Undecodable(t) => Some(t),
            _ => None,
        })
    }
}

impl NameMap {
    /// Checks `checkpoint`'s tensors against this map.
    pub fn check(&self, checkpoint: &Checkpoint) -> Result<NameCheck, NameMismatch> {
        self.check_tensors(checkpoint.path(), checkpoint.tensors())
    }

    /// Checks a list of tensors against this map; `file` names them in the error.
    pub fn check_tensors<'a>(
        &self,
        file: &Path,
        tensors: impl IntoIterator<Item = &'a TensorInfo>,
    ) -> Result<NameCheck, NameMismatch> {
        let (mut missing, mut unexpected, mut misshaped, mut undecodable) =
            (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        let mut resolved = BTreeMap::new();
        let mut ignored = Vec::new();
        for tensor in tensors {
            let canonical = self.canonical(&tensor.name);
            let Some(expected) = self.get(&canonical) else {
                match self.ignore_reason(&canonical) {
                    Some(reason) => ignored.push((tensor.name.clone(), reason)),
                    None => unexpected.push(TensorProblem::Unexpected(tensor.clone())),
                }
                continue;
            };
            // The same tensor with and without the prefix: the second is one too many.
            if resolved.contains_key(&canonical) {
                unexpected.push(TensorProblem::Unexpected(tensor.clone()));
                continue;
            }
            if tensor.shape != expected.shape {
                misshaped.push(TensorProblem::Misshaped(Misshaped {
                    name: tensor.name.clone(),
                    found: tensor.shape.clone(),
                    expected: expected.shape.clone(),
                }));
            }
            if !Checkpoint::readable_as_f32(tensor.dtype) {
                undecodable.push(TensorProblem::Undecodable(tensor.clone()));
            }
            resolved.insert(canonical, tensor.name.clone());
        }
        let mut absent = Vec::new();
        for expected in &self.expected {
            if !resolved.contains_key(&expected.name) {
                match expected.presence {
                    Presence::Required => missing.push(TensorProblem::Missing(expected.clone())),
                    Presence::Optional => absent.push(expected.name.clone()),
                }
            }
        }
        let problems: Vec<TensorProblem> = [missing, unexpected, misshaped, undecodable].concat();
        if problems.is_empty() {
            Ok(NameCheck {
                resolved,
                absent,
                ignored,
            })
        } else {
            Err(NameMismatch {
                file: file.to_path_buf(),
                class: self.class,
                problems,
            })
        }
    }
}

/// Lines shown per kind of problem; the error holds them all.
const SHOWN: usize = 16;

impl fmt::Display for NameMismatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let counts: Vec<String> = [
            (self.missing().count(), "missing"),
            (self.unexpected().count(), "unexpected"),
            (self.misshaped().count(), "mis-shaped"),
            (self.undecodable().count(), "not readable as f32"),
        ]
        .into_iter()
        .filter(|(n, _)| *n > 0)
        .map(|(n, what)| format!("{n} {what}"))
        .collect();
        write!(
            f,
            "{}: the tensors don't match the config's {}: {}",
            self.file.display(),
            self.class,
            counts.join(", ")
        )?;
        let section = |f: &mut fmt::Formatter<'_>, lines: Vec<String>| -> fmt::Result {
            for line in lines.iter().take(SHOWN) {
                write!(f, "\n  {line}")?;
            }
            if lines.len() > SHOWN {
                write!(f, "\n  ... and {} more", lines.len() - SHOWN)?;
            }
            Ok(())
        };
        section(
            f,
            self.missing()
                .map(|t| format!("missing: `{}` {:?}", t.name, t.shape))
                .collect(),
        )?;
        section(
            f,
            self.unexpected()
                .map(|t| format!("unexpected: `{}` {} {:?}", t.name, t.dtype, t.shape))
                .collect(),
        )?;
        section(
            f,
            self.misshaped()
                .map(|t| {
                    format!(
                        "mis-shaped: `{}` is {:?}, the config implies {:?}",
                        t.name, t.found, t.expected
                    )
                })
                .collect(),
        )?;
        section(
            f,
            self.undecodable()
                .map(|t| format!("not readable as f32: `{}` is {}", t.name, t.dtype))
                .collect(),
        )
    }
}
