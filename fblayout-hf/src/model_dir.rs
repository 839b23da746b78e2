//! A Hugging Face model directory — `config.json`, the weights, `tokenizer.json` — opened as
//! one.
//!
//! [`ModelDir::open`] finds and loads all three, so a directory that can't be trained from
//! fails at once with the file at fault: a missing file is named along with what the
//! directory does hold (and, when it holds another format — PyTorch pickles, a slow
//! tokenizer's vocabulary, a PEFT adapter — what to do about it).
//!
//! | file | loaded as |
//! |---|---|
//! | `config.json` | [`ModelConfig`] |
//! | `model.safetensors`, or `model.safetensors.index.json` and its shards | [`Checkpoint`] |
//! | `tokenizer.json` | [`Tokenizer`], padding with `config.json`'s `pad_token_id` when the file names no padding token |

use std::path::{Path, PathBuf};

use crate::config::{ConfigError, ModelConfig};
use crate::names::{NameCheck, NameMap, NameMismatch};
use crate::tokenizer::{Tokenizer, TokenizerError};
use crate::weights::{Checkpoint, WeightsError};

/// The config file's name.
pub const CONFIG_FILE: &str = "config.json";
/// The single-file checkpoint's name.
pub const WEIGHTS_FILE: &str = "model.safetensors";
/// The sharded checkpoint's index.
pub const WEIGHTS_INDEX_FILE: &str = "model.safetensors.index.json";
/// The tokenizer's file.
pub const TOKENIZER_FILE: &str = "tokenizer.json";

/// Why a model directory can't be opened.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ModelDirError {
    /// The path is not a readable directory.
    #[error("{}: not a model directory: {source}", path.display())]
    NotADirectory {
        /// The path given.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// A file the directory must hold is absent.
    #[error(
        "{}: no {file}; the directory holds: {}{}",
        dir.display(),
        if holds.is_empty() { "nothing".to_string() } else { holds.join(", ") },
        hint.as_deref().map(|h| format!(". {h}")).unwrap_or_default()
    )]
    MissingFile {
        /// The directory.
        dir: PathBuf,
        /// The file looked for (for the weights: both names tried).
        file: &'static str,
        /// The directory's entries (sub-directories with a trailing `/`).
        holds: Vec<String>,
        /// What to do, when the directory holds something recognisable instead.
        hint: Option<String>,
    },
    /// `config.json` can't be used.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The weights can't be opened.
    #[error(transparent)]
    Weights(#[from] WeightsError),
    /// `tokenizer.json` can't be loaded.
    #[error(transparent)]
    Tokenizer(#[from] TokenizerError),
    /// The tokenizer can produce ids past the end of the embedding table.
    #[error(
        "{}: the tokenizer has {tokenizer} ids but config.json's vocab_size is {config}: ids past it have no embedding row",
        dir.display()
    )]
    VocabTooLarge {
        /// The directory.
        dir: PathBuf,
        /// The tokenizer's vocabulary, added tokens included.
        tokenizer: usize,
        /// The config's `vocab_size`.
        config: usize,
    },
}

/// An opened model directory.
#[derive(Debug)]
pub struct ModelDir {
    dir: PathBuf,
    config: ModelConfig,
    checkpoint: Checkpoint,
    tokenizer: Tokenizer,
}

impl ModelDir {
    /// Opens the model directory at `path`: reads `config.json`, maps the weights
    /// (`model.safetensors`, else the shards of `model.safetensors.index.json`) and loads
    /// `tokenizer.json`.
    pub fn open(path: impl AsRef<Path>) -> Result<Self, ModelDirError> {
        let dir = path.as_ref().to_path_buf();
        let holds = list(&dir)?;
        let missing = |file: &'static str, hint: Option<String>| ModelDirError::MissingFile {
            dir: dir.clone(),
            file,
            holds: holds.clone(),
            hint,
        };
        let has = |name: &str| holds.iter().any(|h| h == name);

        // Every file is looked for before any is read, so that a missing one is reported
        // before a broken one.
        if !has(CONFIG_FILE) {
            let hint = has("adapter_config.json").then(|| {
                "It holds a PEFT adapter (adapter_config.json): open the base model's directory"
                    .to_string()
            });
            return Err(missing(CONFIG_FILE, hint));
        }
        let weights = if has(WEIGHTS_FILE) {
            dir.join(WEIGHTS_FILE)
        } else if has(WEIGHTS_INDEX_FILE) {
            dir.join(WEIGHTS_INDEX_FILE)
        } else {
            return Err(missing(
                "model.safetensors or model.safetensors.index.json",
                weights_hint(&holds),
            ));
        };
        if !has(TOKENIZER_FILE) {
            return Err(missing(TOKENIZER_FILE, tokenizer_hint(&holds)));
        }

        let config = ModelConfig::from_file(dir.join(CONFIG_FILE))?;
        let checkpoint = Checkpoint::open(weights)?;
        let mut tokenizer = Tokenizer::from_file(dir.join(TOKENIZER_FILE))?;
        if tokenizer.vocab_size() > config.vocab_size() {
            return Err(ModelDirError::VocabTooLarge {
                dir,
                tokenizer: tokenizer.vocab_size(),
                config: config.vocab_size(),
            });
        }
        if let (None, Some(pad_id)) = (tokenizer.options().pad_id, config.pad_token_id()) {
            let options = crate::tokenizer::EncodeOptions {
                pad_id: Some(pad_id),
                ..*tokenizer.options()
            };
            tokenizer.set_options(options)?;
        }
        Ok(Self {
            dir,
            config,
            checkpoint,
            tokenizer,
        })
    }

    /// The directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Its `config.json`.
    pub fn config(&self) -> &ModelConfig {
        &self.config
    }

    /// Its weights.
    pub fn checkpoint(&self) -> &Checkpoint {
        &self.checkpoint
    }

    /// Its tokenizer.
    pub fn tokenizer(&self) -> &Tokenizer {
        &self.tokenizer
    }

    /// Its tokenizer, to change the options it encodes with.
    pub fn tokenizer_mut(&mut self) -> &mut Tokenizer {
        &mut self.tokenizer
    }

    /// The tensors its config implies.
    pub fn name_map(&self) -> NameMap {
        NameMap::for_config(&self.config)
    }

    /// Checks the weights against the tensors the config implies.
    pub fn check_names(&self) -> Result<NameCheck, NameMismatch> {
        self.name_map().check(&self.checkpoint)
    }

    /// Config, weights and tokenizer, owned.
    pub fn into_parts(self) -> (ModelConfig, Checkpoint, Tokenizer) {
        (self.config, self.checkpoint, self.tokenizer)
    }
}

/// The directory's entries, sorted, sub-directories with a trailing `/`.
fn list(dir: &Path) -> Result<Vec<String>, ModelDirError> {
    let not_dir = |source| ModelDirError::NotADirectory {
        path: dir.to_path_buf(),
        source,
    };
    let mut names = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(not_dir)? {
        let entry = entry.map_err(not_dir)?;
        let mut name = entry.file_name().to_string_lossy().into_owned();
        if entry.file_type().is_ok_and(|t| t.is_dir()) {
            name.push('/');
        }
        names.push(name);
    }
    names.sort();
    Ok(names)
}

fn weights_hint(holds: &[String]) -> Option<String> {
    if let Some(bin) = holds
        .iter()
        .find(|h| h.ends_with(".bin") || h.ends_with(".pt"))
    {
        return Some(format!(
            "Only safetensors weights are read, and {bin} is a PyTorch pickle: re-save the \
             model with transformers' save_pretrained (safetensors is its default)"
        ));
    }
    if let Some(other) = holds.iter().find(|h| h.ends_with(".safetensors")) {
        return Some(format!(
            "{other} is a safetensors file under another name (a PEFT adapter's is \
             adapter_model.safetensors; open the base model's directory for it)"
        ));
    }
    None
}

fn tokenizer_hint(holds: &[String]) -> Option<String> {
    let slow = ["vocab.txt", "vocab.json", "merges.txt", "tokenizer.model"];
    let found: Vec<&str> = slow
        .into_iter()
        .filter(|s| holds.iter().any(|h| h == s))
        .collect();
    (!found.is_empty()).then(|| {
        format!(
            "It has a slow tokenizer's files ({}); write tokenizer.json with transformers: \
             AutoTokenizer.from_pretrained(dir).save_pretrained(dir)",
            found.join(", ")
        )
    })
}
