//! What can be wrong with a `config.json`: the file as a whole ([`ConfigError`]) and each field
//! of it ([`FieldProblem`]), all of which are reported together.

use std::fmt;
use std::path::PathBuf;

/// A `config.json` that can't be read as one of the supported architectures.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// The file could not be read.
    #[error("{}: can't read the model config: {source}", file.display())]
    Io {
        /// The config file.
        file: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The file is not JSON, or its top level is not an object.
    #[error("{}: not a JSON object: {detail}", file.display())]
    Json {
        /// The config file.
        file: PathBuf,
        /// serde_json's message, with line and column.
        detail: String,
    },
    /// `model_type` names an architecture this crate doesn't load.
    #[error(
        "{}: `model_type` is \"{model_type}\", which fblayout can't load (supported: {})",
        file.display(),
        crate::config::SUPPORTED_MODEL_TYPES.join(", ")
    )]
    UnknownModelType {
        /// The config file.
        file: PathBuf,
        /// The value found.
        model_type: String,
    },
    /// One or more fields are missing, mistyped, unsupported or inconsistent; every such field
    /// is listed.
    #[error("{}: {}{}:\n{}", file.display(), summary(problems), of_type(model_type), list(problems))]
    Fields {
        /// The config file.
        file: PathBuf,
        /// Its `model_type` (the architecture whose fields were read; empty when that is the
        /// field at fault).
        model_type: String,
        /// Every problem found, in field order.
        problems: Vec<FieldProblem>,
    },
}

impl ConfigError {
    /// The field problems, empty unless this is [`ConfigError::Fields`].
    pub fn problems(&self) -> &[FieldProblem] {
        match self {
            Self::Fields { problems, .. } => problems,
            _ => &[],
        }
    }
}

fn summary(problems: &[FieldProblem]) -> String {
    match problems.len() {
        1 => "1 field can't be used".to_string(),
        n => format!("{n} fields can't be used"),
    }
}

fn of_type(model_type: &str) -> String {
    if model_type.is_empty() {
        String::new()
    } else {
        format!(" in a {model_type} config")
    }
}

fn list(problems: &[FieldProblem]) -> String {
    let lines: Vec<String> = problems.iter().map(|p| format!("  - {p}")).collect();
    lines.join("\n")
}

/// One field of a `config.json` that can't be used. `field` is the JSON key, dotted for a
/// nested one (`rope_scaling.factor`).
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum FieldProblem {
    /// A field without a default is absent (or `null`).
    Missing {
        /// The key.
        field: String,
    },
    /// A field has the wrong JSON type or range (a string for a size, a negative count).
    WrongType {
        /// The key.
        field: String,
        /// What it should be.
        expected: &'static str,
        /// What it is (a JSON type and a short rendering of the value).
        found: String,
    },
    /// A field has a value this crate knows but can't load a model with.
    Unsupported {
        /// The key.
        field: String,
        /// The value found.
        value: String,
        /// The values that are supported.
        supported: &'static [&'static str],
    },
    /// A field's value contradicts another's, or is out of range (sizes that don't divide).
    Invalid {
        /// The key.
        field: String,
        /// Why, naming the other fields involved.
        reason: String,
    },
}

impl FieldProblem {
    /// The key of the field concerned.
    pub fn field(&self) -> &str {
        match self {
            Self::Missing { field }
            | Self::WrongType { field, .. }
            | Self::Unsupported { field, .. }
            | Self::Invalid { field, .. } => field,
        }
    }
}

impl fmt::Display for FieldProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Missing { field } => write!(f, "`{field}` is missing"),
            Self::WrongType {
                field,
                expected,
                found,
            } => write!(f, "`{field}` should be {expected}, found {found}"),
            Self::Unsupported {
                field,
                value,
                supported,
            } => write!(
                f,
                "`{field}` is {value}, which fblayout doesn't support (supported: {})",
                supported.join(", ")
            ),
            Self::Invalid { field, reason } => write!(f, "`{field}`: {reason}"),
        }
    }
}
