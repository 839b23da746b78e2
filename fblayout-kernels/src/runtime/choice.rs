//! Which GPU adapter to run on.
//!
//! An [`AdapterChoice`] names the wgpu backends to look at, a power preference, and optionally a
//! fragment of the adapter's name. [`AdapterChoice::from_env`] reads it from the environment:
//!
//! - `FBLAYOUT_ADAPTER`: a substring of the adapter name, case-insensitive (e.g. `llvmpipe`,
//!   `nvidia`, `apple m2`). When set, the adapters are enumerated and the first match is taken.
//! - `FBLAYOUT_BACKEND`: `vulkan`, `metal`, `dx12`, `gl` or `all`, or a comma-separated list of
//!   them (also `vk`, `mtl`, `d3d12`, `gles`, `opengl`).
//!
//! Software adapters (Mesa's lavapipe/llvmpipe) are accepted like any other, so CI machines
//! without a GPU run the kernels on the CPU.

use super::error::GpuError;

/// The environment variable holding a substring of the adapter name.
pub const ADAPTER_ENV: &str = "FBLAYOUT_ADAPTER";
/// The environment variable holding the backends to try.
pub const BACKEND_ENV: &str = "FBLAYOUT_BACKEND";

const BACKEND_EXPECTED: &str = "vulkan, metal, dx12, gl or all (or a comma-separated list of them)";

/// How [`Gpu`](super::Gpu) picks its adapter.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AdapterChoice {
    /// The wgpu backends to look at.
    pub backends: wgpu::Backends,
    /// Which adapter `request_adapter` prefers when no name is given.
    pub power_preference: wgpu::PowerPreference,
    /// A fragment of the adapter name (case-insensitive); `None` lets wgpu choose.
    pub name_contains: Option<String>,
}

impl Default for AdapterChoice {
    /// All native backends, high performance, any name.
    fn default() -> Self {
        Self {
            backends: all_backends(),
            power_preference: wgpu::PowerPreference::HighPerformance,
            name_contains: None,
        }
    }
}

/// The backends that `all` stands for: every real backend (not the no-op one).
fn all_backends() -> wgpu::Backends {
    wgpu::Backends::PRIMARY | wgpu::Backends::SECONDARY
}

impl AdapterChoice {
    /// Reads the choice from `FBLAYOUT_ADAPTER` and `FBLAYOUT_BACKEND`; unset or empty variables
    /// keep the defaults.
    pub fn from_env() -> Result<Self, GpuError> {
        let adapter = std::env::var(ADAPTER_ENV).ok();
        let backend = std::env::var(BACKEND_ENV).ok();
        Self::from_values(adapter.as_deref(), backend.as_deref())
    }

    /// Builds the choice from the values of `FBLAYOUT_ADAPTER` and `FBLAYOUT_BACKEND` (`None`
    /// when unset). This is [`AdapterChoice::from_env`] without the environment.
    pub fn from_values(adapter: Option<&str>, backend: Option<&str>) -> Result<Self, GpuError> {
        let mut choice = Self::default();
        if let Some(name) = adapter.map(str::trim).filter(|s| !s.is_empty()) {
            choice.name_contains = Some(name.to_string());
        }
        if let Some(list) = backend.map(str::trim).filter(|s| !s.is_empty()) {
            choice.backends = parse_backends(list).ok_or_else(|| GpuError::BadEnv {
                var: BACKEND_ENV,
                value: list.to_string(),
                expected: BACKEND_EXPECTED,
            })?;
        }
        Ok(choice)
    }

    /// Whether `adapter_name` is acceptable under [`AdapterChoice::name_contains`].
    pub fn matches_name(&self, adapter_name: &str) -> bool {
        match &self.name_contains {
            None => true,
            Some(wanted) => adapter_name.to_lowercase().contains(&wanted.to_lowercase()),
        }
    }
}

/// Parses a comma-separated backend list; `None` if any entry is unknown.
fn parse_backends(list: &str) -> Option<wgpu::Backends> {
    let mut backends = wgpu::Backends::empty();
    for word in list.split(',') {
        backends |= match word.trim().to_lowercase().as_str() {
            "vulkan" | "vk" => wgpu::Backends::VULKAN,
            "metal" | "mtl" => wgpu::Backends::METAL,
            "dx12" | "d3d12" => wgpu::Backends::DX12,
            "gl" | "gles" | "opengl" => wgpu::Backends::GL,
            "all" => all_backends(),
            _ => return None,
        };
    }
    Some(backends)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unset_values_give_the_default() {
        let choice = AdapterChoice::from_values(None, None).unwrap();
        assert_eq!(choice, AdapterChoice::default());
        assert_eq!(
            choice.power_preference,
            wgpu::PowerPreference::HighPerformance
        );
        assert!(
            choice
                .backends
                .contains(wgpu::Backends::VULKAN | wgpu::Backends::GL)
        );
        assert_eq!(choice.name_contains, None);
        // Empty and blank values count as unset.
        assert_eq!(
            AdapterChoice::from_values(Some(""), Some("  ")).unwrap(),
            choice
        );
    }

    #[test]
    fn adapter_name_is_a_case_insensitive_substring() {
        let choice = AdapterChoice::from_values(Some(" LLVMpipe "), None).unwrap();
        assert_eq!(choice.name_contains.as_deref(), Some("LLVMpipe"));
        assert!(choice.matches_name("llvmpipe (LLVM 15.0.6, 256 bits)"));
        assert!(!choice.matches_name("NVIDIA GeForce RTX 4090"));
        assert!(AdapterChoice::default().matches_name("anything"));
    }

    #[test]
    fn backends_parse() {
        let one = |s| AdapterChoice::from_values(None, Some(s)).unwrap().backends;
        assert_eq!(one("vulkan"), wgpu::Backends::VULKAN);
        assert_eq!(one("VK"), wgpu::Backends::VULKAN);
        assert_eq!(one("metal"), wgpu::Backends::METAL);
        assert_eq!(one("dx12"), wgpu::Backends::DX12);
        assert_eq!(one("gl"), wgpu::Backends::GL);
        assert_eq!(
            one("Vulkan, GL"),
            wgpu::Backends::VULKAN | wgpu::Backends::GL
        );
        assert_eq!(one("all"), all_backends());
        assert!(!one("all").contains(wgpu::Backends::NOOP));
    }

    #[test]
    fn unknown_backend_is_an_error_naming_the_variable() {
        let err = AdapterChoice::from_values(None, Some("vulkan,cuda")).unwrap_err();
        assert!(
            matches!(
                err,
                GpuError::BadEnv {
                    var: BACKEND_ENV,
                    ..
                }
            ),
            "{err:?}"
        );
        let msg = err.to_string();
        assert!(
            msg.contains("FBLAYOUT_BACKEND") && msg.contains("vulkan,cuda"),
            "{msg}"
        );
    }
}
