//! The run's log: one JSON object a line, `{"step", "loss", "lr"}` for a training step and
//! `{"step", "eval_loss", "perplexity"}` for an evaluation (with `"accuracy"` for a
//! classifier), appended and flushed as they
//! happen. A resumed run first drops the lines of steps past its checkpoint (a killed run
//! may have logged steps it never saved), so the log of an interrupted and resumed run is the
//! log of an uninterrupted one.

use std::io::Write;
use std::path::{Path, PathBuf};

/// One line of the log.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Record {
    /// A training step: its loss (before its update) and learning rate.
    Step {
        /// The step, from 1.
        step: u32,
        /// Its loss.
        loss: f64,
        /// Its learning rate.
        lr: f64,
    },
    /// An evaluation after a step.
    Eval {
        /// The step it followed.
        step: u32,
        /// The mean loss over the held-out tokens.
        loss: f64,
        /// `exp(loss)`.
        perplexity: f64,
        /// The fraction of held-out sequences classified right (classification).
        accuracy: Option<f64>,
    },
}

impl Record {
    /// The step of the record.
    pub fn step(&self) -> u32 {
        match *self {
            Self::Step { step, .. } | Self::Eval { step, .. } => step,
        }
    }

    /// A training step's `(step, loss)`; `None` for an evaluation.
    pub fn training_loss(&self) -> Option<(u32, f64)> {
        match *self {
            Self::Step { step, loss, .. } => Some((step, loss)),
            Self::Eval { .. } => None,
        }
    }

    /// An evaluation's `(step, held-out loss)`; `None` for a training step.
    pub fn eval_loss(&self) -> Option<(u32, f64)> {
        match *self {
            Self::Eval { step, loss, .. } => Some((step, loss)),
            Self::Step { .. } => None,
        }
    }

    fn to_json(self) -> serde_json::Value {
        match self {
            Self::Step { step, loss, lr } => {
                serde_json::json!({"step": step, "loss": loss, "lr": lr})
            }
            Self::Eval {
                step,
                loss,
                perplexity,
                accuracy,
            } => {
                let mut v =
                    serde_json::json!({"step": step, "eval_loss": loss, "perplexity": perplexity});
                if let Some(a) = accuracy {
                    v["accuracy"] = a.into();
                }
                v
            }
        }
    }

    fn from_json(v: &serde_json::Value) -> Option<Self> {
        let step = u32::try_from(v.get("step")?.as_u64()?).ok()?;
        let num = |k: &str| v.get(k).and_then(serde_json::Value::as_f64);
        match (num("loss"), num("eval_loss")) {
            (Some(loss), None) => Some(Self::Step {
                step,
                loss,
                lr: num("lr")?,
            }),
            (None, Some(loss)) => Some(Self::Eval {
                step,
                loss,
                perplexity: num("perplexity")?,
                accuracy: num("accuracy"),
            }),
            _ => None,
        }
    }
}

/// Reads the log in `file`; an error names a line that is not a record.
pub fn read(file: &Path) -> Result<Vec<Record>, std::io::Error> {
    let text = std::fs::read_to_string(file)?;
    text.lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
        .map(|(i, l)| {
            serde_json::from_str(l)
                .ok()
                .and_then(|v| Record::from_json(&v))
                .ok_or_else(|| {
                    std::io::Error::new(
                        std::io::ErrorKind::InvalidData,
                        format!("{}:{}: not a log record", file.display(), i + 1),
                    )
                })
        })
        .collect()
}

/// The log being written.
#[derive(Debug)]
pub struct Log {
    file: PathBuf,
    out: std::fs::File,
}

impl Log {
    /// Starts the log in `file`: empty for a new run; for a run resumed after `step`, the
    /// records up to it (a torn last line, from a kill mid-write, is dropped with the rest).
    pub fn open(file: &Path, resumed_after: Option<u32>) -> Result<Self, std::io::Error> {
        let kept: Vec<Record> = match resumed_after {
            Some(step) if file.exists() => {
                let text = std::fs::read_to_string(file)?;
                text.lines()
                    .filter_map(|l| serde_json::from_str(l).ok())
                    .filter_map(|v| Record::from_json(&v))
                    .filter(|r| r.step() <= step)
                    .collect()
            }
            _ => Vec::new(),
        };
        let mut out = std::fs::File::create(file)?;
        for r in kept {
            writeln!(out, "{}", r.to_json())?;
        }
        out.flush()?;
        Ok(Self {
            file: file.to_owned(),
            out,
        })
    }

    /// Appends `record`.
    pub fn write(&mut self, record: Record) -> Result<(), std::io::Error> {
        writeln!(self.out, "{}", record.to_json())?;
        self.out.flush()
    }

    /// The file.
    pub fn path(&self) -> &Path {
        &self.file
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_resumed_log_keeps_the_records_up_to_its_checkpoint() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("log.jsonl");
        let mut log = Log::open(&file, None).unwrap();
        let records = [
            Record::Step {
                step: 1,
                loss: 2.5,
                lr: 0.1,
            },
            Record::Eval {
                step: 1,
                loss: 2.0,
                perplexity: 2f64.exp(),
                accuracy: Some(0.75),
            },
            Record::Eval {
                step: 1,
                loss: 2.0,
                perplexity: 2f64.exp(),
                accuracy: None,
            },
            Record::Step {
                step: 2,
                loss: 1.0 / 3.0,
                lr: 0.05,
            },
        ];
        for r in records {
            log.write(r).unwrap();
        }
        drop(log);
        assert_eq!(read(&file).unwrap(), records);
        // A torn line from a kill mid-write.
        std::fs::write(
            &file,
            std::fs::read_to_string(&file).unwrap() + "{\"step\": 3, \"lo",
        )
        .unwrap();
        drop(Log::open(&file, Some(1)).unwrap());
        assert_eq!(read(&file).unwrap(), records[..3]);
    }
}
