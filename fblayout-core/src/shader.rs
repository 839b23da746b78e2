//! Shader modules: WGSL source that naga has parsed and validated.
//!
//! Every WGSL module that fblayout emits passes through [`WgslModule::validate`] before it is
//! snapshotted, spliced into a kernel or handed to a GPU: the WGSL is parsed by naga's front end
//! and checked by naga's [`Validator`](naga::valid::Validator). A [`WgslModule`] can only be made
//! that way, so holding one is proof that its source is valid. A failure is a [`WgslError`] that
//! names the module (a layout, a view or a kernel) and carries naga's own report.

use std::fmt;

/// WGSL source that naga has parsed and validated.
#[derive(Clone)]
pub struct WgslModule {
    name: String,
    source: String,
    /// The source without its line comments, and its hash (see [`WgslModule::code`]).
    code: (String, u64),
    module: naga::Module,
    info: naga::valid::ModuleInfo,
}

/// `source` without its `//` comments (the whole source where it has a block comment, inside
/// which `//` would not start one), and a hash of that.
fn code_of(source: &str) -> (String, u64) {
    use std::hash::{Hash, Hasher};
    let code = if source.contains("/*") {
        source.to_owned()
    } else {
        let mut code = String::with_capacity(source.len());
        for line in source.lines() {
            let line = line
                .split_once("//")
                .map_or(line, |(code, _)| code)
                .trim_end();
            if !line.is_empty() {
                code.push_str(line);
                code.push('\n');
            }
        }
        code
    };
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    code.hash(&mut hasher);
    let hash = hasher.finish();
    (code, hash)
}

/// Why a WGSL module was rejected.
#[derive(Debug, Clone, thiserror::Error)]
pub enum WgslError {
    /// The source did not parse as WGSL.
    #[error("WGSL for `{name}` does not parse:\n{report}")]
    Parse {
        /// The layout, view or kernel the WGSL was emitted for.
        name: String,
        /// naga's report, with the offending source line.
        report: String,
    },
    /// Two functions of one module would have the same name.
    #[error(
        "module `{name}` would define `{function}` twice: two index functions (views) share a name; give each view its own name"
    )]
    DuplicateFunction {
        /// The module.
        name: String,
        /// The function defined twice.
        function: String,
    },
    /// The source parsed, but naga's validator rejected it.
    #[error("WGSL for `{name}` fails naga validation:\n{report}")]
    Invalid {
        /// The layout, view or kernel the WGSL was emitted for.
        name: String,
        /// naga's report, with the offending source line.
        report: String,
    },
}

/// Which optional WGSL features a module may use.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WgslFeatures {
    /// `enable f16;` and the `f16` type (adapters with `SHADER_F16`).
    pub f16: bool,
    /// Subgroup operations (`subgroupAdd`, `subgroupMax`, ...) in compute shaders (adapters with
    /// `SUBGROUP`). WGSL needs no `enable` for them in naga; the validator needs the capability.
    pub subgroups: bool,
    /// `enable wgpu_cooperative_matrix;` and the `coop_mat*` types (adapters with
    /// `EXPERIMENTAL_COOPERATIVE_MATRIX`).
    pub cooperative_matrix: bool,
}

impl WgslModule {
    /// Parses and validates `source` with the core WGSL feature set.
    ///
    /// `name` says what the module was emitted for; it appears in every error.
    pub fn validate(name: impl Into<String>, source: impl Into<String>) -> Result<Self, WgslError> {
        Self::validate_with(name, source, WgslFeatures::default())
    }

    /// Parses and validates `source`, allowing the optional `features`.
    pub fn validate_with(
        name: impl Into<String>,
        source: impl Into<String>,
        features: WgslFeatures,
    ) -> Result<Self, WgslError> {
        let name = name.into();
        let source = source.into();
        let module = match naga::front::wgsl::parse_str(&source) {
            Ok(module) => module,
            Err(err) => {
                let report = err.emit_to_string(&source);
                return Err(WgslError::Parse { name, report });
            }
        };
        let mut capabilities = naga::valid::Capabilities::default();
        if features.f16 {
            capabilities |= naga::valid::Capabilities::SHADER_FLOAT16;
        }
        if features.subgroups {
            capabilities |=
                naga::valid::Capabilities::SUBGROUP | naga::valid::Capabilities::SUBGROUP_BARRIER;
        }
        if features.cooperative_matrix {
            capabilities |= naga::valid::Capabilities::COOPERATIVE_MATRIX;
        }
        let mut validator =
            naga::valid::Validator::new(naga::valid::ValidationFlags::all(), capabilities);
        match validator.validate(&module) {
            Ok(info) => Ok(Self {
                name,
                code: code_of(&source),
                source,
                module,
                info,
            }),
            Err(err) => {
                let report = err.emit_to_string(&source);
                Err(WgslError::Invalid { name, report })
            }
        }
    }

    /// What the module was emitted for.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The validated WGSL source.
    pub fn source(&self) -> &str {
        &self.source
    }

    /// The source without its line comments, which name what a kernel was built for (its
    /// tensors' views): two modules of one code are one shader to a device, so a pipeline
    /// cache keys on it. Computed once, with its hash ([`code_hash`](Self::code_hash)).
    pub fn code(&self) -> &str {
        &self.code.0
    }

    /// A hash of [`code`](Self::code).
    pub fn code_hash(&self) -> u64 {
        self.code.1
    }

    /// naga's IR of the module.
    pub fn naga_module(&self) -> &naga::Module {
        &self.module
    }

    /// naga's validation results for the module.
    pub fn naga_info(&self) -> &naga::valid::ModuleInfo {
        &self.info
    }

    /// Validates the concatenation of this module's source and `more` (for example a compute
    /// entry point that calls this module's functions) as a new module named `name`.
    pub fn extend(
        &self,
        name: impl Into<String>,
        more: &str,
        features: WgslFeatures,
    ) -> Result<Self, WgslError> {
        let mut source = self.source.clone();
        if !source.ends_with('\n') {
            source.push('\n');
        }
        source.push_str(more);
        Self::validate_with(name, source, features)
    }
}

impl fmt::Debug for WgslModule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WgslModule")
            .field("name", &self.name)
            .field("source", &self.source)
            .finish_non_exhaustive()
    }
}

impl fmt::Display for WgslModule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.source)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_valid_function() {
        let m = WgslModule::validate("ok", "fn f(a: u32) -> u32 { return a * 2u; }").unwrap();
        assert_eq!(m.name(), "ok");
        assert_eq!(m.naga_module().functions.len(), 1);
    }

    #[test]
    fn parse_error_names_module() {
        let err =
            WgslModule::validate("x_offset", "fn f(a: u32) -> u32 { return a * ; }").unwrap_err();
        assert!(matches!(err, WgslError::Parse { .. }));
        assert!(err.to_string().contains("`x_offset`"), "{err}");
    }

    #[test]
    fn validation_error_names_module() {
        // Parses, but returns a bool from a u32 function.
        let err =
            WgslModule::validate("bad", "fn f(a: u32) -> u32 { return a < 2u; }").unwrap_err();
        assert!(err.to_string().contains("`bad`"), "{err}");
    }

    #[test]
    fn f16_needs_the_feature() {
        let src = "enable f16;\nfn f(a: f16) -> f16 { return a; }";
        assert!(WgslModule::validate("h", src).is_err());
        let features = WgslFeatures {
            f16: true,
            ..Default::default()
        };
        assert!(WgslModule::validate_with("h", src, features).is_ok());
    }
}
