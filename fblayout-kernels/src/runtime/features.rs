//! The optional adapter features kernels use, and how to turn them off.
//!
//! A [`Gpu`](super::Gpu) asks for every feature below that its adapter has, unless it was told
//! not to ([`Disabled`], or `FBLAYOUT_DISABLE=subgroups,f16,timestamps,pipeline-cache`). Each
//! one has a fallback, and turning a feature off is how the fallback is tested:
//!
//! - `SUBGROUP`: reductions combine a subgroup's values with `subgroupAdd`/`subgroupMax`;
//!   without it, through workgroup memory.
//! - `SHADER_F16`: `f16` tensors; without it, kernels refuse them with an error.
//! - `TIMESTAMP_QUERY`: [`Batch::submit_timed`](super::Batch::submit_timed) times each dispatch
//!   on the GPU; without it, by the wall clock around a submission each.
//! - `PIPELINE_CACHE`: compiled pipelines persist on disk between runs; without it they are
//!   compiled again at each start.
//!
//! `EXPERIMENTAL_COOPERATIVE_MATRIX` (tensor cores from WGSL) is reported, not requested: its
//! kernels are a later step.

use super::error::GpuError;

/// The variable that turns features off.
pub const DISABLE_ENV: &str = "FBLAYOUT_DISABLE";

const DISABLE_EXPECTED: &str =
    "a comma-separated list of subgroups, f16, timestamps, pipeline-cache (or none)";

/// Features a [`Gpu`](super::Gpu) must not use even where the adapter has them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Disabled {
    /// Don't use `SUBGROUP`.
    pub subgroups: bool,
    /// Don't use `SHADER_F16`.
    pub f16: bool,
    /// Don't use `TIMESTAMP_QUERY`.
    pub timestamps: bool,
    /// Don't use `PIPELINE_CACHE`.
    pub pipeline_cache: bool,
}

impl Disabled {
    /// Everything off: the fallback of every feature.
    pub const ALL: Disabled = Disabled {
        subgroups: true,
        f16: true,
        timestamps: true,
        pipeline_cache: true,
    };

    /// Parses the value of `FBLAYOUT_DISABLE`.
    pub fn parse(list: &str) -> Result<Self, GpuError> {
        let mut off = Self::default();
        for word in list.split(',').map(str::trim).filter(|w| !w.is_empty()) {
            match word.to_lowercase().as_str() {
                "subgroups" | "subgroup" => off.subgroups = true,
                "f16" | "shader-f16" => off.f16 = true,
                "timestamps" | "timestamp" => off.timestamps = true,
                "pipeline-cache" | "pipeline_cache" => off.pipeline_cache = true,
                "all" => off = Self::ALL,
                "none" => {}
                _ => {
                    return Err(GpuError::BadEnv {
                        var: DISABLE_ENV,
                        value: list.to_owned(),
                        expected: DISABLE_EXPECTED,
                    });
                }
            }
        }
        Ok(off)
    }

    /// The wgpu features to request from an adapter that has `available`.
    pub(crate) fn request(self, available: wgpu::Features) -> wgpu::Features {
        let mut wanted = wgpu::Features::empty();
        let mut want = |on: bool, f: wgpu::Features| {
            if on {
                wanted |= f;
            }
        };
        want(!self.f16, wgpu::Features::SHADER_F16);
        want(!self.subgroups, wgpu::Features::SUBGROUP);
        want(!self.timestamps, wgpu::Features::TIMESTAMP_QUERY);
        want(!self.pipeline_cache, wgpu::Features::PIPELINE_CACHE);
        wanted & available
    }
}

/// What the device a [`Gpu`](super::Gpu) opened can do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GpuFeatures {
    /// `f16` storage and arithmetic.
    pub f16: bool,
    /// Subgroup operations in compute shaders.
    pub subgroups: bool,
    /// The smallest and largest subgroup size the adapter reports.
    pub subgroup_sizes: (u32, u32),
    /// GPU timestamps around compute passes.
    pub timestamps: bool,
    /// A pipeline cache that can be saved and loaded.
    pub pipeline_cache: bool,
    /// Whether the adapter offers `EXPERIMENTAL_COOPERATIVE_MATRIX` (not requested here).
    pub cooperative_matrix: bool,
}

impl GpuFeatures {
    pub(crate) fn of(device: wgpu::Features, adapter: &wgpu::Adapter) -> Self {
        let info = adapter.get_info();
        Self {
            f16: device.contains(wgpu::Features::SHADER_F16),
            subgroups: device.contains(wgpu::Features::SUBGROUP),
            subgroup_sizes: (info.subgroup_min_size, info.subgroup_max_size),
            timestamps: device.contains(wgpu::Features::TIMESTAMP_QUERY),
            pipeline_cache: device.contains(wgpu::Features::PIPELINE_CACHE),
            cooperative_matrix: adapter
                .features()
                .contains(wgpu::Features::EXPERIMENTAL_COOPERATIVE_MATRIX),
        }
    }
}

impl std::fmt::Display for GpuFeatures {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let yes = |b: bool| if b { "yes" } else { "no" };
        write!(
            f,
            "f16 {}, subgroups {}",
            yes(self.f16),
            if self.subgroups {
                format!(
                    "yes ({}–{} lanes)",
                    self.subgroup_sizes.0, self.subgroup_sizes.1
                )
            } else {
                "no".to_owned()
            }
        )?;
        write!(
            f,
            ", timestamps {}, pipeline cache {}, cooperative matrices {}",
            yes(self.timestamps),
            yes(self.pipeline_cache),
            if self.cooperative_matrix {
                "available (not used yet)"
            } else {
                "no"
            }
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn disable_lists_parse() {
        assert_eq!(Disabled::parse("").unwrap(), Disabled::default());
        assert_eq!(Disabled::parse("none").unwrap(), Disabled::default());
        let d = Disabled::parse("Subgroups, f16").unwrap();
        assert!(d.subgroups && d.f16 && !d.timestamps && !d.pipeline_cache);
        assert_eq!(Disabled::parse("all").unwrap(), Disabled::ALL);
        let err = Disabled::parse("subgroups,tensor-cores").unwrap_err();
        assert!(err.to_string().contains("FBLAYOUT_DISABLE"), "{err}");
    }

    #[test]
    fn requests_only_what_the_adapter_has() {
        let adapter = wgpu::Features::SHADER_F16 | wgpu::Features::TIMESTAMP_QUERY;
        let got = Disabled::default().request(adapter);
        assert_eq!(got, adapter);
        let off = Disabled {
            f16: true,
            ..Default::default()
        };
        assert_eq!(off.request(adapter), wgpu::Features::TIMESTAMP_QUERY);
        assert!(Disabled::ALL.request(wgpu::Features::all()).is_empty());
    }
}
