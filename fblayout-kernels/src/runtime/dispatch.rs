//! Compute dispatch and the pipeline cache.
//!
//! [`Gpu::dispatch`] runs one entry point of a validated [`WgslModule`] over a grid of workgroups,
//! with [`Binding`]s that attach [`GpuBuffer`]s to the module's `@group/@binding` slots. The
//! pipeline (auto layout) is compiled once per [`Gpu`] for each (WGSL source, entry point) pair
//! and cached. Shader, pipeline, bind group and submission errors are caught with wgpu's error
//! scopes and returned as [`GpuError::Validation`].
//!
//! A dispatch may have at most [`Gpu::max_workgroups_per_dimension`] (65535) workgroups in each
//! dimension; [`Gpu::dispatch_linear`] folds longer work into a 2-D grid (see [`linear_grid`] for
//! the index its entry points compute).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::PoisonError;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use fblayout_core::shader::WgslModule;
use wgpu::naga;

use super::buffer::GpuBuffer;
use super::error::GpuError;
use super::gpu::{Gpu, scoped};

/// A buffer attached to a `@group(g) @binding(b)` slot of a kernel.
#[derive(Debug, Clone, Copy)]
pub struct Binding<'a> {
    /// The `@group` index.
    pub group: u32,
    /// The `@binding` index within the group.
    pub binding: u32,
    /// The buffer; its [`BufferKind`](super::BufferKind) must match the slot's address space.
    pub buffer: &'a GpuBuffer,
}

impl<'a> Binding<'a> {
    /// `buffer` at `@group(0) @binding(binding)`.
    pub fn new(binding: u32, buffer: &'a GpuBuffer) -> Self {
        Self {
            group: 0,
            binding,
            buffer,
        }
    }

    /// `buffer` at `@group(group) @binding(binding)`.
    pub fn in_group(group: u32, binding: u32, buffer: &'a GpuBuffer) -> Self {
        Self {
            group,
            binding,
            buffer,
        }
    }
}

/// Compiled shader modules and pipelines, keyed by WGSL source and entry point.
#[derive(Default)]
pub(crate) struct PipelineCache {
    /// By the hash of a module's code: the modules of that hash, each with its code.
    modules: HashMap<u64, Vec<(String, CachedModule)>>,
}

/// What compiling a pipeline reads of a WGSL module: its name and source, and its code (the
/// source without comments) with that code's hash, which find it in the cache.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Shader<'a> {
    pub(crate) name: &'a str,
    pub(crate) source: &'a str,
    pub(crate) code: &'a str,
    pub(crate) hash: u64,
}

impl<'a> Shader<'a> {
    pub(crate) fn of(module: &'a WgslModule) -> Self {
        Self {
            name: module.name(),
            source: module.source(),
            code: module.code(),
            hash: module.code_hash(),
        }
    }

    /// Whether `other` is the same code (so the same shader and pipelines), whatever its name
    /// and comments.
    pub(crate) fn same(self, other: Shader<'_>) -> bool {
        self.hash == other.hash && self.code == other.code
    }
}

/// A [`Shader`] kept until its pipeline is compiled (a [`Batch`](super::Batch)'s, at its
/// finish, with the batch's other new pipelines at once).
#[derive(Debug, Clone)]
pub(crate) struct OwnedShader {
    name: String,
    source: String,
    code: String,
    hash: u64,
}

impl OwnedShader {
    pub(crate) fn new(shader: Shader<'_>) -> Self {
        Self {
            name: shader.name.to_owned(),
            source: shader.source.to_owned(),
            code: shader.code.to_owned(),
            hash: shader.hash,
        }
    }

    pub(crate) fn shader(&self) -> Shader<'_> {
        Shader {
            name: &self.name,
            source: &self.source,
            code: &self.code,
            hash: self.hash,
        }
    }
}

/// How many pipelines a [`Gpu`] compiled and how long that took (see
/// [`Gpu::compile_stats`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CompileStats {
    /// Pipelines compiled.
    pub pipelines: u64,
    /// Their compilations' durations, summed (several run at once on a host of many cores).
    pub compiling: Duration,
    /// How long callers waited for compilations, wall clock.
    pub waited: Duration,
}

/// The counters behind [`CompileStats`], in nanoseconds.
#[derive(Debug, Default)]
pub(crate) struct CompileCounters {
    pipelines: AtomicU64,
    compiling: AtomicU64,
    waited: AtomicU64,
}

impl CompileCounters {
    fn nanos(d: Duration) -> u64 {
        u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
    }

    fn compiled(&self, took: Duration) {
        self.pipelines.fetch_add(1, Ordering::Relaxed);
        self.compiling
            .fetch_add(Self::nanos(took), Ordering::Relaxed);
    }

    fn waited(&self, took: Duration) {
        self.waited.fetch_add(Self::nanos(took), Ordering::Relaxed);
    }

    fn read(&self) -> CompileStats {
        CompileStats {
            pipelines: self.pipelines.load(Ordering::Relaxed),
            compiling: Duration::from_nanos(self.compiling.load(Ordering::Relaxed)),
            waited: Duration::from_nanos(self.waited.load(Ordering::Relaxed)),
        }
    }
}

struct CachedModule {
    shader: wgpu::ShaderModule,
    pipelines: HashMap<String, wgpu::ComputePipeline>,
}

impl PipelineCache {
    /// The cached module with `shader`'s code, if any.
    fn module(&self, shader: Shader<'_>) -> Option<&CachedModule> {
        self.modules
            .get(&shader.hash)
            .and_then(|same| same.iter().find(|(c, _)| c == shader.code))
            .map(|(_, m)| m)
    }

    pub(crate) fn pipeline_count(&self) -> usize {
        self.modules
            .values()
            .flatten()
            .map(|(_, m)| m.pipelines.len())
            .sum()
    }
}

/// Folds `workgroups` into a grid `[x, y, 1]` with `x, y <= max_per_dimension` and
/// `x * y >= workgroups`: `x = min(workgroups, max)`, `y = ceil(workgroups / x)`, so the grid
/// overshoots by less than one row of `x`. `None` if even `max_per_dimension²` workgroups are not
/// enough (or `max_per_dimension` is 0).
///
/// Entry points run with [`Gpu::dispatch_linear`] must compute their linear workgroup index as
/// `wg.x + wg.y * nwg.x` and skip the invocations past their data:
///
/// ```wgsl
/// @compute @workgroup_size(64)
/// fn main(@builtin(workgroup_id) wg: vec3<u32>,
///         @builtin(num_workgroups) nwg: vec3<u32>,
///         @builtin(local_invocation_index) lid: u32) {
///     let i = (wg.x + wg.y * nwg.x) * 64u + lid;
///     if (i >= arrayLength(&out)) { return; }
///     // ...
/// }
/// ```
pub fn linear_grid(workgroups: u32, max_per_dimension: u32) -> Option<[u32; 3]> {
    if workgroups == 0 {
        return Some([0, 1, 1]);
    }
    if max_per_dimension == 0 {
        return None;
    }
    let x = workgroups.min(max_per_dimension);
    let y = workgroups.div_ceil(x);
    (y <= max_per_dimension).then_some([x, y, 1])
}

impl Gpu {
    /// Runs `entry` of `module` on a `workgroups` grid with `bindings` attached.
    ///
    /// Each dimension of `workgroups` must be at most [`Gpu::max_workgroups_per_dimension`]; use
    /// [`Gpu::dispatch_linear`] for longer one-dimensional work. The work is submitted to the
    /// queue and runs before later dispatches and [`GpuBuffer::read_back`]s; this call does not
    /// wait for it.
    pub fn dispatch(
        &self,
        module: &WgslModule,
        entry: &str,
        bindings: &[Binding<'_>],
        workgroups: [u32; 3],
    ) -> Result<(), GpuError> {
        let what = || format!("the dispatch of `{entry}` in `{}`", module.name());
        check_compute_entry(module, entry)?;
        let max = self.max_workgroups_per_dimension();
        if workgroups.iter().any(|&n| n > max) {
            return Err(GpuError::bad_input(
                what(),
                format!(
                    "the grid {workgroups:?} has more than {max} workgroups in a dimension; \
                     use Gpu::dispatch_linear or a smaller grid"
                ),
            ));
        }
        let mut seen = HashSet::new();
        for b in bindings {
            if !seen.insert((b.group, b.binding)) {
                return Err(GpuError::bad_input(
                    what(),
                    format!("@group({}) @binding({}) is bound twice", b.group, b.binding),
                ));
            }
        }
        let pipeline = self.pipeline(module, entry)?;
        let device = self.device();
        scoped(device, what, || {
            let mut groups: BTreeMap<u32, Vec<wgpu::BindGroupEntry<'_>>> = BTreeMap::new();
            for b in bindings {
                groups
                    .entry(b.group)
                    .or_default()
                    .push(wgpu::BindGroupEntry {
                        binding: b.binding,
                        resource: b.buffer.buffer().as_entire_binding(),
                    });
            }
            let bind_groups: Vec<(u32, wgpu::BindGroup)> = groups
                .iter()
                .map(|(&group, entries)| {
                    let layout = pipeline.get_bind_group_layout(group);
                    let bind_group = device.create_bind_group(&wgpu::BindGroupDescriptor {
                        label: Some(entry),
                        layout: &layout,
                        entries,
                    });
                    (group, bind_group)
                })
                .collect();
            let mut encoder = device
                .create_command_encoder(&wgpu::CommandEncoderDescriptor { label: Some(entry) });
            {
                let mut pass = encoder.begin_compute_pass(&wgpu::ComputePassDescriptor {
                    label: Some(entry),
                    timestamp_writes: None,
                });
                pass.set_pipeline(&pipeline);
                for (group, bind_group) in &bind_groups {
                    pass.set_bind_group(*group, bind_group, &[]);
                }
                let [x, y, z] = workgroups;
                pass.dispatch_workgroups(x, y, z);
            }
            self.queue().submit([encoder.finish()]);
        })
    }

    /// Runs `entry` of `module` on `workgroups` workgroups folded into a 2-D grid by
    /// [`linear_grid`], which says what index the entry point must compute.
    /// Returns the grid used.
    pub fn dispatch_linear(
        &self,
        module: &WgslModule,
        entry: &str,
        bindings: &[Binding<'_>],
        workgroups: u32,
    ) -> Result<[u32; 3], GpuError> {
        let max = self.max_workgroups_per_dimension();
        let grid = linear_grid(workgroups, max).ok_or_else(|| {
            GpuError::bad_input(
                format!("the dispatch of `{entry}` in `{}`", module.name()),
                format!("{workgroups} workgroups do not fit a {max} × {max} grid"),
            )
        })?;
        self.dispatch(module, entry, bindings, grid)?;
        Ok(grid)
    }

    /// The compute pipeline for `entry` of `module`, compiled on first use.
    ///
    /// The cache's lock is not held while the driver compiles, so that several threads can
    /// compile at once ([`prepare_pipelines`](Self::prepare_pipelines)); two threads asking
    /// for the same pipeline at once may both compile it, and the first one stored is kept.
    pub(crate) fn pipeline(
        &self,
        module: &WgslModule,
        entry: &str,
    ) -> Result<wgpu::ComputePipeline, GpuError> {
        let shader = Shader::of(module);
        if let Some(pipeline) = self.cached_pipeline(shader, entry) {
            return Ok(pipeline);
        }
        let start = Instant::now();
        let pipeline = self.compile_pipeline(shader, entry);
        self.compile_stats.waited(start.elapsed());
        pipeline
    }

    /// The pipeline for `entry` of `shader` if it was compiled already.
    pub(crate) fn cached_pipeline(
        &self,
        shader: Shader<'_>,
        entry: &str,
    ) -> Option<wgpu::ComputePipeline> {
        self.lock_pipelines()
            .module(shader)
            .and_then(|m| m.pipelines.get(entry))
            .cloned()
    }

    /// Compiles the pipeline for `entry` of `shader` (and its shader module, unless cached)
    /// and keeps it; the cached one where another thread stored it first.
    fn compile_pipeline(
        &self,
        shader: Shader<'_>,
        entry: &str,
    ) -> Result<wgpu::ComputePipeline, GpuError> {
        // Modules that differ only in their comments share a shader and its pipelines.
        let cached = {
            let cache = self.lock_pipelines();
            let module = cache.module(shader);
            if let Some(pipeline) = module.and_then(|m| m.pipelines.get(entry)) {
                return Ok(pipeline.clone());
            }
            module.map(|m| m.shader.clone())
        };
        let start = Instant::now();
        let device = self.device();
        let module = match cached {
            Some(module) => module,
            None => scoped(
                device,
                || format!("the shader module `{}`", shader.name),
                || {
                    device.create_shader_module(wgpu::ShaderModuleDescriptor {
                        label: Some(shader.name),
                        source: wgpu::ShaderSource::Wgsl(shader.source.into()),
                    })
                },
            )?,
        };
        let pipeline = scoped(
            device,
            || format!("the compute pipeline for `{entry}` in `{}`", shader.name),
            || {
                device.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
                    label: Some(entry),
                    layout: None,
                    module: &module,
                    entry_point: Some(entry),
                    compilation_options: wgpu::PipelineCompilationOptions::default(),
                    cache: self.pipeline_cache.as_ref().map(|(cache, _)| cache),
                })
            },
        )?;
        self.compile_stats.compiled(start.elapsed());
        let mut cache = self.lock_pipelines();
        let same = cache.modules.entry(shader.hash).or_default();
        let at = match same.iter().position(|(c, _)| c == shader.code) {
            Some(at) => at,
            None => {
                same.push((
                    shader.code.to_owned(),
                    CachedModule {
                        shader: module,
                        pipelines: HashMap::new(),
                    },
                ));
                same.len() - 1
            }
        };
        Ok(same[at]
            .1
            .pipelines
            .entry(entry.to_owned())
            .or_insert(pipeline)
            .clone())
    }

    /// Compiles the pipelines of `entries` (module, entry point) that are not compiled yet, on
    /// as many threads as the host has cores (at most one per pipeline): a driver compiles
    /// each pipeline on the calling thread, so an autotune that measures many candidates
    /// would otherwise wait for one compilation after another. The first error is returned.
    pub(crate) fn prepare_pipelines(
        &self,
        entries: &[(&WgslModule, &str)],
    ) -> Result<(), GpuError> {
        let shaders: Vec<(Shader<'_>, &str)> = entries
            .iter()
            .map(|&(module, entry)| (Shader::of(module), entry))
            .collect();
        self.compile_all(&shaders).map(drop)
    }

    /// The pipelines of `entries` (shader, entry point), in order: those not compiled yet
    /// compiled at once, on as many threads as the host has cores, each distinct one once
    /// (two threads given the same one would both compile it).
    pub(crate) fn compile_all(
        &self,
        entries: &[(Shader<'_>, &str)],
    ) -> Result<Vec<wgpu::ComputePipeline>, GpuError> {
        let start = Instant::now();
        let mut distinct: Vec<(Shader<'_>, &str)> = Vec::with_capacity(entries.len());
        let at: Vec<usize> = entries
            .iter()
            .map(|&(shader, entry)| {
                let same = |&(s, e): &(Shader<'_>, &str)| s.same(shader) && e == entry;
                distinct.iter().position(same).unwrap_or_else(|| {
                    distinct.push((shader, entry));
                    distinct.len() - 1
                })
            })
            .collect();
        let missing = distinct
            .iter()
            .any(|&(shader, entry)| self.cached_pipeline(shader, entry).is_none());
        let pipelines = super::threads::try_map(&distinct, |&(shader, entry)| {
            self.compile_pipeline(shader, entry)
        });
        if missing {
            self.compile_stats.waited(start.elapsed());
        }
        let pipelines = pipelines?;
        Ok(at.into_iter().map(|i| pipelines[i].clone()).collect())
    }

    /// How many pipelines this device compiled, how long their compilations took together
    /// (summed over the threads that ran them), and how long callers waited for them (wall
    /// clock, parallel compilations counted once).
    pub fn compile_stats(&self) -> CompileStats {
        self.compile_stats.read()
    }

    fn lock_pipelines(&self) -> std::sync::MutexGuard<'_, PipelineCache> {
        self.pipelines
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }
}

/// Checks that `module` has a compute entry point named `entry`.
pub(crate) fn check_compute_entry(module: &WgslModule, entry: &str) -> Result<(), GpuError> {
    let entry_points = &module.naga_module().entry_points;
    match entry_points.iter().find(|ep| ep.name == entry) {
        Some(ep) if ep.stage == naga::ShaderStage::Compute => Ok(()),
        Some(ep) => Err(GpuError::bad_input(
            format!("`{}`", module.name()),
            format!(
                "entry point `{entry}` is a {:?} entry point, not a compute one",
                ep.stage
            ),
        )),
        None => {
            let names: Vec<&str> = entry_points
                .iter()
                .filter(|ep| ep.stage == naga::ShaderStage::Compute)
                .map(|ep| ep.name.as_str())
                .collect();
            Err(GpuError::bad_input(
                format!("`{}`", module.name()),
                format!(
                    "no compute entry point named `{entry}` (it has: {})",
                    if names.is_empty() {
                        "none".to_string()
                    } else {
                        names.join(", ")
                    }
                ),
            ))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn linear_grid_covers_the_count_without_a_spare_row() {
        let max = 65_535;
        for n in [
            1,
            2,
            64,
            65_534,
            65_535,
            65_536,
            131_070,
            131_071,
            1 << 20,
            4_000_000_000,
        ] {
            let [x, y, z] = linear_grid(n, max).unwrap();
            assert!(x <= max && y <= max && z == 1, "{n}: {x} {y} {z}");
            let total = u64::from(x) * u64::from(y);
            assert!(total >= u64::from(n), "{n}: {x} × {y} too small");
            assert!(
                total < u64::from(n) + u64::from(x),
                "{n}: {x} × {y} has a spare row"
            );
        }
        assert_eq!(linear_grid(70_000, max), Some([65_535, 2, 1]));
        assert_eq!(linear_grid(10, max), Some([10, 1, 1]));
        assert_eq!(linear_grid(0, max), Some([0, 1, 1]));
        assert_eq!(linear_grid(17, 4), None);
        assert_eq!(linear_grid(16, 4), Some([4, 4, 1]));
        assert_eq!(linear_grid(1, 0), None);
    }

    #[test]
    fn compiling_at_once_compiles_each_distinct_pipeline_once() {
        // GPU tests fail without an adapter (lavapipe in CI), never skip.
        let gpu = Gpu::new().unwrap_or_else(|err| panic!("no GPU adapter: {err}"));
        let src = "@group(0) @binding(0) var<storage, read_write> d: array<u32>;\n\
                   @compute @workgroup_size(64) fn main(@builtin(global_invocation_id) i: vec3<u32>) \
                   { if (i.x < arrayLength(&d)) { d[i.x] = d[i.x] + 1u; } }";
        let m = WgslModule::validate("k", src).unwrap();
        // The same code under another name and with a comment is the same pipeline.
        let again = WgslModule::validate("k again", format!("// another name\n{src}")).unwrap();
        let other = WgslModule::validate("k2", src.replace("1u;", "2u;")).unwrap();
        let entries = [
            (&m, "main"),
            (&again, "main"),
            (&m, "main"),
            (&other, "main"),
        ];
        gpu.prepare_pipelines(&entries).unwrap();
        assert_eq!(gpu.compile_stats().pipelines, 2);
        assert_eq!(gpu.cached_pipelines(), 2);
        // Compiled ones are not compiled again.
        gpu.prepare_pipelines(&entries).unwrap();
        assert_eq!(gpu.compile_stats().pipelines, 2);
    }

    #[test]
    fn missing_and_non_compute_entry_points_are_reported() {
        let src = "@compute @workgroup_size(1) fn main() {}\n\
                   @vertex fn vs() -> @builtin(position) vec4<f32> { return vec4<f32>(0.0); }";
        let module = WgslModule::validate("k", src).unwrap();
        assert!(check_compute_entry(&module, "main").is_ok());
        let err = check_compute_entry(&module, "nope")
            .unwrap_err()
            .to_string();
        assert!(err.contains("`nope`") && err.contains("main"), "{err}");
        let err = check_compute_entry(&module, "vs").unwrap_err().to_string();
        assert!(err.contains("not a compute"), "{err}");
    }
}
