//! The optional adapter features kernels use, and how to turn them off.
//!
//! A [`Gpu`](super::Gpu) asks for every feature below that its adapter has, unless it was told
//! not to ([`Disabled`], or `FBLAYOUT_DISABLE=subgroups,f16,timestamps,pipeline-cache`). Each
//! one has a fallback, and turning a feature off is how the fallback is tested:
//!
//! - `SUBGROUP`: reductions combine a subgroup's values with `subgroupAdd`/`subgroupMax`;
//!   without it, through workgroup memory. `SUBGROUP_BARRIER` comes with it: the tensor-core
//!   GEMM's subgroups wait for their own lanes around their scratch with `subgroupBarrier()`;
//!   without it, with workgroup barriers.
//! - `SHADER_F16`: `f16` tensors; without it, kernels refuse them with an error.
//! - `TIMESTAMP_QUERY`: [`Batch::submit_timed`](super::Batch::submit_timed) times each dispatch
//!   on the GPU; without it, by the wall clock around a submission each.
//! - `PIPELINE_CACHE`: compiled pipelines persist on disk between runs; without it they are
//!   compiled again at each start.
//! - `EXPERIMENTAL_COOPERATIVE_MATRIX` (tensor cores from WGSL, `cooperative-matrix` in the
//!   list), requested only together with `SHADER_F16`: [`CoopMatmulOp`](crate::ops::coop)
//!   multiplies f16 fragments on it; without it that op is refused with an error and the f32
//!   [`MatmulOp`](crate::ops::MatmulOp) is the path. wgpu gates it behind its experimental
//!   token (see the runtime's `gated` module). The adapter's fragment configurations
//!   ([`CoopFragment`]) are reported in [`GpuFeatures::cooperative_matrices`], and
//!   [`GpuFeatures::coop_fragment`] is the one the kernels use: 16×16×16 with f16 inputs,
//!   preferring an f32 accumulator to an f16 one.

use super::error::GpuError;

/// The variable that turns features off.
pub const DISABLE_ENV: &str = "FBLAYOUT_DISABLE";

const DISABLE_EXPECTED: &str = "a comma-separated list of subgroups, f16, timestamps, pipeline-cache, cooperative-matrix (or none)";

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
    /// Don't use `EXPERIMENTAL_COOPERATIVE_MATRIX`.
    pub cooperative_matrix: bool,
}

impl Disabled {
    /// Everything off: the fallback of every feature.
    pub const ALL: Disabled = Disabled {
        subgroups: true,
        f16: true,
        timestamps: true,
        pipeline_cache: true,
        cooperative_matrix: true,
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
                "cooperative-matrix" | "cooperative_matrix" | "coop" => {
                    off.cooperative_matrix = true;
                }
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
        want(
            !self.subgroups,
            wgpu::Features::SUBGROUP | wgpu::Features::SUBGROUP_BARRIER,
        );
        want(!self.timestamps, wgpu::Features::TIMESTAMP_QUERY);
        want(!self.pipeline_cache, wgpu::Features::PIPELINE_CACHE);
        // Fragments hold f16 inputs, so the one is no use without the other.
        let coop = wgpu::Features::EXPERIMENTAL_COOPERATIVE_MATRIX | wgpu::Features::SHADER_F16;
        want(
            !self.cooperative_matrix && !self.f16 && available.contains(coop),
            coop,
        );
        wanted & available
    }
}

/// The element type of a cooperative-matrix operand or accumulator.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CoopScalar {
    /// 32-bit float.
    F32,
    /// 16-bit float.
    F16,
    /// 32-bit signed integer.
    I32,
    /// 32-bit unsigned integer.
    U32,
}

impl CoopScalar {
    fn of(t: wgpu::CooperativeScalarType) -> Self {
        match t {
            wgpu::CooperativeScalarType::F32 => Self::F32,
            wgpu::CooperativeScalarType::F16 => Self::F16,
            wgpu::CooperativeScalarType::I32 => Self::I32,
            wgpu::CooperativeScalarType::U32 => Self::U32,
        }
    }

    /// The WGSL scalar type.
    pub fn wgsl(self) -> &'static str {
        match self {
            Self::F32 => "f32",
            Self::F16 => "f16",
            Self::I32 => "i32",
            Self::U32 => "u32",
        }
    }
}

/// One fragment configuration an adapter multiplies on cooperative matrices: `C[m×n] +=
/// A[m×k] · B[k×n]` with A and B of `ab` elements and C of `acc` elements.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct CoopFragment {
    /// Rows of A and C.
    pub m: u32,
    /// Columns of B and C.
    pub n: u32,
    /// Columns of A, rows of B.
    pub k: u32,
    /// The element type of A and B.
    pub ab: CoopScalar,
    /// The element type of the accumulator C.
    pub acc: CoopScalar,
}

impl CoopFragment {
    fn of(p: &wgpu::CooperativeMatrixProperties) -> Self {
        Self {
            m: p.m_size,
            n: p.n_size,
            k: p.k_size,
            ab: CoopScalar::of(p.ab_type),
            acc: CoopScalar::of(p.cr_type),
        }
    }

    /// The fragment the kernels use among `offered`: 16×16×16 with f16 inputs (WGSL has
    /// `coop_mat16x16` and `coop_mat8x8` only, and the kernels stage f16), an f32 accumulator
    /// where offered, else an f16 one.
    pub fn choose(offered: &[CoopFragment]) -> Option<CoopFragment> {
        let square16 = |f: &&CoopFragment| f.m == 16 && f.n == 16 && f.k == 16;
        let with = |acc| {
            offered
                .iter()
                .filter(square16)
                .find(|f| f.ab == CoopScalar::F16 && f.acc == acc)
                .copied()
        };
        with(CoopScalar::F32).or_else(|| with(CoopScalar::F16))
    }
}

impl std::fmt::Display for CoopFragment {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}×{}×{} {}→{}",
            self.m,
            self.n,
            self.k,
            self.ab.wgsl(),
            self.acc.wgsl()
        )
    }
}

/// The most fragment configurations [`GpuFeatures`] keeps (adapters list a handful).
pub const MAX_COOP_FRAGMENTS: usize = 16;

/// The fragment configurations of an adapter (a copyable list of at most
/// [`MAX_COOP_FRAGMENTS`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CoopFragments {
    items: [Option<CoopFragment>; MAX_COOP_FRAGMENTS],
}

impl CoopFragments {
    fn of(props: &[wgpu::CooperativeMatrixProperties]) -> Self {
        let mut items = [None; MAX_COOP_FRAGMENTS];
        for (slot, p) in items.iter_mut().zip(props) {
            *slot = Some(CoopFragment::of(p));
        }
        Self { items }
    }

    /// The configurations, in the adapter's order.
    pub fn to_vec(&self) -> Vec<CoopFragment> {
        self.items.iter().flatten().copied().collect()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.items[0].is_none()
    }
}

/// What the device a [`Gpu`](super::Gpu) opened can do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GpuFeatures {
    /// `f16` storage and arithmetic.
    pub f16: bool,
    /// Subgroup operations in compute shaders.
    pub subgroups: bool,
    /// `subgroupBarrier()` in compute shaders (with [`subgroups`](Self::subgroups)).
    pub subgroup_barrier: bool,
    /// The smallest and largest subgroup size the adapter reports.
    pub subgroup_sizes: (u32, u32),
    /// GPU timestamps around compute passes.
    pub timestamps: bool,
    /// A pipeline cache that can be saved and loaded.
    pub pipeline_cache: bool,
    /// Whether the device has `EXPERIMENTAL_COOPERATIVE_MATRIX` (with `SHADER_F16`).
    pub cooperative_matrix: bool,
    /// The adapter's cooperative-matrix configurations (empty where the device lacks the
    /// feature).
    pub cooperative_matrices: CoopFragments,
    /// The configuration the kernels use ([`CoopFragment::choose`]); `None` where there is
    /// none they can use.
    pub coop_fragment: Option<CoopFragment>,
}

impl GpuFeatures {
    pub(crate) fn of(device: wgpu::Features, adapter: &wgpu::Adapter) -> Self {
        let info = adapter.get_info();
        let cooperative_matrix = device
            .contains(wgpu::Features::EXPERIMENTAL_COOPERATIVE_MATRIX | wgpu::Features::SHADER_F16);
        let cooperative_matrices = if cooperative_matrix {
            CoopFragments::of(&adapter.cooperative_matrix_properties())
        } else {
            CoopFragments::default()
        };
        Self {
            f16: device.contains(wgpu::Features::SHADER_F16),
            subgroups: device.contains(wgpu::Features::SUBGROUP),
            subgroup_barrier: device
                .contains(wgpu::Features::SUBGROUP | wgpu::Features::SUBGROUP_BARRIER),
            subgroup_sizes: (info.subgroup_min_size, info.subgroup_max_size),
            timestamps: device.contains(wgpu::Features::TIMESTAMP_QUERY),
            pipeline_cache: device.contains(wgpu::Features::PIPELINE_CACHE),
            cooperative_matrix,
            cooperative_matrices,
            coop_fragment: CoopFragment::choose(&cooperative_matrices.to_vec()),
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
            match (self.cooperative_matrix, self.coop_fragment) {
                (false, _) => "no".to_owned(),
                (true, chosen) => {
                    let all: Vec<String> = self
                        .cooperative_matrices
                        .to_vec()
                        .iter()
                        .map(ToString::to_string)
                        .collect();
                    let used = chosen.map_or("none usable".to_owned(), |f| format!("using {f}"));
                    format!("yes ({}; {used})", all.join(", "))
                }
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
        assert!(!d.cooperative_matrix);
        assert!(
            Disabled::parse("cooperative-matrix")
                .unwrap()
                .cooperative_matrix
        );
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
        // Cooperative matrices come with f16 or not at all.
        let coop = wgpu::Features::EXPERIMENTAL_COOPERATIVE_MATRIX;
        assert!(Disabled::default().request(coop).is_empty());
        let both = coop | wgpu::Features::SHADER_F16;
        assert_eq!(Disabled::default().request(both), both);
        assert_eq!(off.request(both), wgpu::Features::empty());
        let no_coop = Disabled {
            cooperative_matrix: true,
            ..Default::default()
        };
        assert_eq!(no_coop.request(both), wgpu::Features::SHADER_F16);
    }

    #[test]
    fn the_kernels_take_16x16x16_f16_preferring_an_f32_accumulator() {
        let frag = |m, n, k, acc| CoopFragment {
            m,
            n,
            k,
            ab: CoopScalar::F16,
            acc,
        };
        let h200 = [
            frag(16, 8, 16, CoopScalar::F32),
            frag(16, 16, 16, CoopScalar::F16),
            frag(16, 16, 16, CoopScalar::F32),
        ];
        assert_eq!(
            CoopFragment::choose(&h200),
            Some(frag(16, 16, 16, CoopScalar::F32))
        );
        assert_eq!(
            CoopFragment::choose(&h200[..2]),
            Some(frag(16, 16, 16, CoopScalar::F16))
        );
        assert_eq!(CoopFragment::choose(&h200[..1]), None);
        assert_eq!(h200[2].to_string(), "16×16×16 f16→f32");
    }
}
