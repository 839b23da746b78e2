//! Reading typed fields out of a JSON object while collecting every problem, so that one pass
//! over a `config.json` reports all of its bad fields rather than the first.
//!
//! A getter that fails records a [`FieldProblem`] and returns a placeholder; the caller turns
//! the collected problems into an error before any placeholder is used.

use serde_json::{Map, Value};

use super::error::FieldProblem;

/// A JSON object being read, with the problems found so far.
pub(super) struct Fields<'a> {
    object: &'a Map<String, Value>,
    /// Prepended to every key in problems (`rope_scaling.`), empty at the top level.
    prefix: String,
    pub(super) problems: Vec<FieldProblem>,
}

impl<'a> Fields<'a> {
    pub(super) fn new(object: &'a Map<String, Value>) -> Self {
        Self {
            object,
            prefix: String::new(),
            problems: Vec::new(),
        }
    }

    /// The key as reported: `prefix.key`.
    pub(super) fn path(&self, key: &str) -> String {
        format!("{}{key}", self.prefix)
    }

    /// The value of `key`, `None` when it is absent or `null` (HF writes `null` for "use the
    /// default").
    pub(super) fn get(&self, key: &str) -> Option<&'a Value> {
        self.object.get(key).filter(|v| !v.is_null())
    }

    pub(super) fn has(&self, key: &str) -> bool {
        self.get(key).is_some()
    }

    /// Whether every field read so far had a value of the right type (no placeholder was
    /// returned).
    pub(super) fn all_read(&self) -> bool {
        !self.problems.iter().any(|p| {
            matches!(
                p,
                FieldProblem::Missing { .. } | FieldProblem::WrongType { .. }
            )
        })
    }

    pub(super) fn problem(&mut self, problem: FieldProblem) {
        self.problems.push(problem);
    }

    pub(super) fn invalid(&mut self, key: &str, reason: impl Into<String>) {
        let field = self.path(key);
        self.problems.push(FieldProblem::Invalid {
            field,
            reason: reason.into(),
        });
    }

    pub(super) fn unsupported(
        &mut self,
        key: &str,
        value: &Value,
        supported: &'static [&'static str],
    ) {
        let field = self.path(key);
        self.problems.push(FieldProblem::Unsupported {
            field,
            value: render(value),
            supported,
        });
    }

    pub(super) fn missing(&mut self, key: &str) {
        let field = self.path(key);
        self.problems.push(FieldProblem::Missing { field });
    }

    fn wrong(&mut self, key: &str, expected: &'static str, value: &Value) {
        let field = self.path(key);
        self.problems.push(FieldProblem::WrongType {
            field,
            expected,
            found: describe(value),
        });
    }

    /// A required non-negative integer.
    pub(super) fn usize(&mut self, key: &str) -> usize {
        match self.get(key) {
            None => {
                self.missing(key);
                0
            }
            Some(_) => self.opt_usize(key).unwrap_or(0),
        }
    }

    /// An optional non-negative integer.
    pub(super) fn opt_usize(&mut self, key: &str) -> Option<usize> {
        let value = self.get(key)?;
        match value.as_u64().and_then(|n| usize::try_from(n).ok()) {
            Some(n) => Some(n),
            None => {
                self.wrong(key, "a non-negative integer", value);
                None
            }
        }
    }

    /// An optional token id (a non-negative integer that fits `u32`).
    pub(super) fn opt_u32(&mut self, key: &str) -> Option<u32> {
        let value = self.get(key)?;
        match value.as_u64().and_then(|n| u32::try_from(n).ok()) {
            Some(n) => Some(n),
            None => {
                self.wrong(key, "a non-negative 32-bit integer", value);
                None
            }
        }
    }

    /// A required number (an integer is accepted: `"rope_theta": 10000`).
    pub(super) fn f64(&mut self, key: &str) -> f64 {
        match self.get(key) {
            None => {
                self.missing(key);
                0.0
            }
            Some(_) => self.opt_f64(key).unwrap_or(0.0),
        }
    }

    /// An optional number.
    pub(super) fn opt_f64(&mut self, key: &str) -> Option<f64> {
        let value = self.get(key)?;
        match value.as_f64() {
            Some(x) => Some(x),
            None => {
                self.wrong(key, "a number", value);
                None
            }
        }
    }

    /// An optional boolean.
    pub(super) fn opt_bool(&mut self, key: &str) -> Option<bool> {
        let value = self.get(key)?;
        match value.as_bool() {
            Some(b) => Some(b),
            None => {
                self.wrong(key, "true or false", value);
                None
            }
        }
    }

    /// A required string.
    pub(super) fn string(&mut self, key: &str) -> String {
        match self.get(key) {
            None => {
                self.missing(key);
                String::new()
            }
            Some(_) => self.opt_string(key).unwrap_or_default(),
        }
    }

    /// An optional string.
    pub(super) fn opt_string(&mut self, key: &str) -> Option<String> {
        let value = self.get(key)?;
        match value.as_str() {
            Some(s) => Some(s.to_string()),
            None => {
                self.wrong(key, "a string", value);
                None
            }
        }
    }

    /// An optional list of strings.
    pub(super) fn opt_strings(&mut self, key: &str) -> Option<Vec<String>> {
        let value = self.get(key)?;
        let strings = value
            .as_array()
            .and_then(|items| items.iter().map(|v| v.as_str().map(String::from)).collect());
        if strings.is_none() {
            self.wrong(key, "a list of strings", value);
        }
        strings
    }

    /// An optional nested object, read with the same problem list; `f` gets a reader whose
    /// keys are reported as `key.inner`.
    pub(super) fn opt_object<T>(
        &mut self,
        key: &str,
        f: impl FnOnce(&mut Fields<'a>) -> T,
    ) -> Option<T> {
        let value = self.get(key)?;
        let Some(object) = value.as_object() else {
            self.wrong(key, "an object", value);
            return None;
        };
        let mut inner = Fields {
            object,
            prefix: format!("{}{key}.", self.prefix),
            problems: std::mem::take(&mut self.problems),
        };
        let out = f(&mut inner);
        self.problems = inner.problems;
        Some(out)
    }
}

/// A JSON value for a message: its type and, when short, the value itself.
pub(super) fn describe(value: &Value) -> String {
    let kind = match value {
        Value::Null => return "null".into(),
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "an object",
    };
    format!("{kind} ({})", render(value))
}

/// A JSON value as written, cut short when long.
pub(super) fn render(value: &Value) -> String {
    let text = value.to_string();
    if text.chars().count() > 60 {
        let cut: String = text.chars().take(57).collect();
        format!("{cut}...")
    } else {
        text
    }
}
