//! The GPU handle: a wgpu instance, the chosen adapter, its device and queue.
//!
//! [`Gpu::new`] picks an adapter as [`GpuOptions::from_env`] says and opens a device on it,
//! blocking on wgpu's futures with `pollster`. The device gets the adapter's own buffer, binding
//! and compute limits, so big buffers work on real GPUs, and the optional features kernels use
//! (see [`features`](super::features)) when the adapter has them. [`GpuInfo`] describes the
//! adapter for logs. Every wgpu call that can fail runs inside error scopes ([`scoped`]), so
//! failures come back as [`GpuError`] instead of wgpu's default panic.

use std::fmt;
use std::path::PathBuf;
use std::sync::{Mutex, PoisonError};

use fblayout_core::shader::WgslFeatures;

use super::choice::AdapterChoice;
use super::disk_cache::{CacheLoad, DiskCache, default_cache_dir};
use super::dispatch::{CompileCounters, PipelineCache};
use super::error::GpuError;
use super::features::{DISABLE_ENV, Disabled, GpuFeatures};
use super::gated;
use super::pool::{BufferPool, PoolStats};

/// How [`Gpu::with_options`] opens a device.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GpuOptions {
    /// Which adapter.
    pub choice: AdapterChoice,
    /// Optional features not to use, even where the adapter has them.
    pub disabled: Disabled,
    /// Where compiled pipelines are kept between runs (`None`: nowhere).
    pub cache_dir: Option<PathBuf>,
}

impl GpuOptions {
    /// The options the environment gives: `FBLAYOUT_ADAPTER` and `FBLAYOUT_BACKEND` (see
    /// [`AdapterChoice::from_env`]), `FBLAYOUT_DISABLE` (see [`Disabled::parse`]) and
    /// `FBLAYOUT_CACHE_DIR` (see [`default_cache_dir`](super::default_cache_dir)).
    pub fn from_env() -> Result<Self, GpuError> {
        let disabled = match std::env::var(DISABLE_ENV) {
            Ok(list) => Disabled::parse(&list)?,
            Err(_) => Disabled::default(),
        };
        Ok(Self {
            choice: AdapterChoice::from_env()?,
            disabled,
            cache_dir: default_cache_dir(),
        })
    }
}

/// The largest workgroup count per dimension that [`Gpu::dispatch`] uses: WebGPU's guaranteed
/// minimum. Devices that allow more are still held to it, so kernels see the same grids on every
/// adapter.
pub const MAX_WORKGROUPS_PER_DIMENSION: u32 = 65_535;

/// A wgpu device and queue on a chosen adapter, with a compute pipeline cache.
///
/// `Gpu` is `Send + Sync`: one can be shared between threads (wgpu's error scopes are
/// thread-local, so concurrent operations report their own errors).
pub struct Gpu {
    /// Kept alive for as long as the device is.
    _instance: wgpu::Instance,
    adapter: wgpu::Adapter,
    device: wgpu::Device,
    queue: wgpu::Queue,
    limits: wgpu::Limits,
    info: GpuInfo,
    features: GpuFeatures,
    pub(super) pipelines: Mutex<PipelineCache>,
    /// How many pipelines were compiled, and how long that took ([`Gpu::compile_stats`]).
    pub(super) compile_stats: CompileCounters,
    pool: BufferPool,
    /// The driver's pipeline cache and the file it is saved to, where the backend has one.
    pub(super) pipeline_cache: Option<(wgpu::PipelineCache, DiskCache)>,
    cache_load: CacheLoad,
    /// When the last timed measurement on the device ended ([`Gpu::measured`]).
    measured_at: Mutex<Option<std::time::Instant>>,
}

/// A description of the adapter a [`Gpu`] runs on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GpuInfo {
    /// The adapter's name, e.g. `llvmpipe (LLVM 15.0.6, 256 bits)`.
    pub name: String,
    /// The wgpu backend (Vulkan, Metal, DX12, GL).
    pub backend: wgpu::Backend,
    /// Discrete, integrated, virtual, CPU or other.
    pub device_type: wgpu::DeviceType,
    /// The driver's name, e.g. `llvmpipe`.
    pub driver: String,
    /// The driver's version details.
    pub driver_info: String,
}

impl GpuInfo {
    fn from_adapter_info(info: &wgpu::AdapterInfo) -> Self {
        Self {
            name: info.name.clone(),
            backend: info.backend,
            device_type: info.device_type,
            driver: info.driver.clone(),
            driver_info: info.driver_info.clone(),
        }
    }

    /// Whether the adapter is a software rasteriser (lavapipe, llvmpipe, WARP, ...).
    pub fn is_software(&self) -> bool {
        self.device_type == wgpu::DeviceType::Cpu
    }
}

impl fmt::Display for GpuInfo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} ({:?}, {:?}",
            self.name, self.backend, self.device_type
        )?;
        match (self.driver.is_empty(), self.driver_info.is_empty()) {
            (true, true) => {}
            (false, true) => write!(f, ", driver {}", self.driver)?,
            (true, false) => write!(f, ", driver {}", self.driver_info)?,
            (false, false) => write!(f, ", driver {} {}", self.driver, self.driver_info)?,
        }
        f.write_str(")")
    }
}

impl fmt::Debug for Gpu {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Gpu")
            .field("info", &self.info)
            .finish_non_exhaustive()
    }
}

impl Gpu {
    /// Opens a device as the environment says (see [`GpuOptions::from_env`]): on the adapter
    /// that `FBLAYOUT_ADAPTER`/`FBLAYOUT_BACKEND` pick, or on wgpu's preferred adapter when they
    /// are unset.
    pub fn new() -> Result<Self, GpuError> {
        Self::with_options(GpuOptions::from_env()?)
    }

    /// Opens a device on the adapter that `choice` picks, with every feature it has and the
    /// default pipeline cache directory.
    pub fn with_choice(choice: AdapterChoice) -> Result<Self, GpuError> {
        Self::with_options(GpuOptions {
            choice,
            disabled: Disabled::default(),
            cache_dir: default_cache_dir(),
        })
    }

    /// Opens a device as `options` say.
    pub fn with_options(options: GpuOptions) -> Result<Self, GpuError> {
        pollster::block_on(Self::open(options))
    }

    async fn open(options: GpuOptions) -> Result<Self, GpuError> {
        let GpuOptions {
            choice,
            disabled,
            cache_dir,
        } = options;
        let mut desc = wgpu::InstanceDescriptor::new_without_display_handle();
        desc.backends = choice.backends;
        desc.flags = wgpu::InstanceFlags::from_env_or_default();
        desc.backend_options = wgpu::BackendOptions::from_env_or_default();
        let instance = wgpu::Instance::new(desc);
        let tried = format!(
            "backends {:?}, power preference {:?}{}",
            choice.backends,
            choice.power_preference,
            match &choice.name_contains {
                Some(name) => format!(", adapter name containing {name:?}"),
                None => String::new(),
            }
        );

        let adapter = match &choice.name_contains {
            Some(wanted) => {
                let adapters = instance.enumerate_adapters(choice.backends).await;
                if adapters.is_empty() {
                    return Err(GpuError::NoAdapter { tried });
                }
                let describe = |a: &wgpu::Adapter| {
                    let info = a.get_info();
                    format!("{} ({:?}, {:?})", info.name, info.backend, info.device_type)
                };
                let available = adapters.iter().map(describe).collect();
                adapters
                    .into_iter()
                    .filter(|a| choice.matches_name(&a.get_info().name))
                    .find(supports_compute)
                    .ok_or_else(|| GpuError::NoMatchingAdapter {
                        wanted: wanted.clone(),
                        available,
                    })?
            }
            None => {
                let options = wgpu::RequestAdapterOptions {
                    power_preference: choice.power_preference,
                    force_fallback_adapter: false,
                    ..Default::default()
                };
                let adapter = instance.request_adapter(&options).await.map_err(|err| {
                    GpuError::NoAdapter {
                        tried: format!("{tried}: {err}"),
                    }
                })?;
                if !supports_compute(&adapter) {
                    let name = adapter.get_info().name;
                    return Err(GpuError::NoAdapter {
                        tried: format!("{tried}: the adapter found ({name}) lacks compute shaders"),
                    });
                }
                adapter
            }
        };

        let required_limits = required_limits(&adapter.limits());
        let required_features = disabled.request(adapter.features());
        let (device, queue) = adapter
            .request_device(&wgpu::DeviceDescriptor {
                label: Some("fblayout"),
                required_features,
                required_limits,
                experimental_features: gated::experimental_features(required_features),
                ..Default::default()
            })
            .await?;
        let limits = device.limits();
        let adapter_info = adapter.get_info();
        let info = GpuInfo::from_adapter_info(&adapter_info);
        let features = GpuFeatures::of(device.features(), &adapter);
        let (pipeline_cache, cache_load) = match (&cache_dir, features.pipeline_cache) {
            (None, _) | (_, false) => (None, CacheLoad::Off),
            (Some(dir), true) => match super::disk_cache::key(&adapter_info) {
                None => (None, CacheLoad::Unsupported),
                Some(key) => {
                    let disk = DiskCache::new(dir, key);
                    let (data, load) = disk.load();
                    let cache = scoped(
                        &device,
                        || "the pipeline cache".to_owned(),
                        || gated::pipeline_cache(&device, data.as_deref()),
                    )?;
                    (Some((cache, disk)), load)
                }
            },
        };
        Ok(Self {
            _instance: instance,
            adapter,
            device,
            queue,
            limits,
            info,
            features,
            pipelines: Mutex::new(PipelineCache::default()),
            compile_stats: CompileCounters::default(),
            pool: BufferPool::default(),
            pipeline_cache,
            cache_load,
            measured_at: Mutex::new(None),
        })
    }

    /// Notes that a timed measurement (an autotune's) kept the device busy until now.
    pub(crate) fn measured(&self) {
        *self
            .measured_at
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(std::time::Instant::now());
    }

    /// Whether a timed measurement ended less than `within` ago: the device is still at its
    /// working clock, and another measurement needs no long warm-up.
    pub(crate) fn measured_within(&self, within: std::time::Duration) -> bool {
        self.measured_at
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .is_some_and(|at| at.elapsed() < within)
    }

    /// The optional features the device has (see [`features`](super::features)).
    pub fn features(&self) -> GpuFeatures {
        self.features
    }

    /// What happened to the pipeline cache file when the device opened.
    pub fn pipeline_cache_load(&self) -> &CacheLoad {
        &self.cache_load
    }

    /// Where the pipeline cache is saved, when the backend has one and a directory was given.
    pub fn pipeline_cache_path(&self) -> Option<&std::path::Path> {
        self.pipeline_cache.as_ref().map(|(_, d)| d.path.as_path())
    }

    /// A file beside the pipeline cache, in its envelope, keyed by the adapter and `stem`
    /// (autotune results); `None` where there is no pipeline cache on disk.
    pub(crate) fn sibling_cache(&self, stem: &str) -> Option<DiskCache> {
        self.pipeline_cache.as_ref().map(|(_, d)| d.sibling(stem))
    }

    /// Writes the driver's compiled pipelines to the cache file (atomically). Does nothing
    /// where there is no pipeline cache. [`Gpu`] also saves when it is dropped.
    pub fn save_pipeline_cache(&self) -> Result<(), GpuError> {
        let Some((cache, disk)) = &self.pipeline_cache else {
            return Ok(());
        };
        let Some(data) = cache.get_data() else {
            return Ok(());
        };
        disk.save(&data).map_err(|err| GpuError::Cache {
            path: disk.path.clone(),
            message: err.to_string(),
        })
    }

    /// The buffer pool's counters: allocations, reuses and bytes.
    pub fn pool_stats(&self) -> PoolStats {
        self.pool.stats()
    }

    /// Frees the pool's idle buffers.
    pub fn trim_pool(&self) {
        self.pool.trim();
    }

    pub(crate) fn pool(&self) -> &BufferPool {
        &self.pool
    }

    /// The adapter's name, backend, device type and driver.
    pub fn info(&self) -> &GpuInfo {
        &self.info
    }

    /// The wgpu adapter.
    pub fn adapter(&self) -> &wgpu::Adapter {
        &self.adapter
    }

    /// The wgpu device. Errors of work done on it directly are not caught by this crate; wgpu's
    /// default handler panics on them.
    pub fn device(&self) -> &wgpu::Device {
        &self.device
    }

    /// The wgpu queue.
    pub fn queue(&self) -> &wgpu::Queue {
        &self.queue
    }

    /// The limits the device was created with.
    pub fn limits(&self) -> &wgpu::Limits {
        &self.limits
    }

    /// The optional WGSL features the device supports, for
    /// [`WgslModule::validate_with`](fblayout_core::shader::WgslModule::validate_with).
    pub fn wgsl_features(&self) -> WgslFeatures {
        WgslFeatures {
            f16: self.features.f16,
            subgroups: self.features.subgroups,
            // Only the kernels written for cooperative matrices ask for them (see
            // `ops::coop`); every other shader is built without the extension.
            cooperative_matrix: false,
        }
    }

    /// The largest workgroup count per dispatch dimension: the device's limit, capped at
    /// [`MAX_WORKGROUPS_PER_DIMENSION`].
    pub fn max_workgroups_per_dimension(&self) -> u32 {
        self.limits
            .max_compute_workgroups_per_dimension
            .min(MAX_WORKGROUPS_PER_DIMENSION)
    }

    /// Waits until all submitted work has finished (for timing, and before reading results
    /// that were not read back through [`GpuBuffer::read_back`](super::GpuBuffer::read_back)).
    pub fn wait(&self) -> Result<(), GpuError> {
        self.device
            .poll(wgpu::PollType::wait_indefinitely())
            .map(|_| ())
            .map_err(|err| GpuError::Validation {
                what: "waiting for the queue".into(),
                message: err.to_string(),
            })
    }

    /// The number of compute pipelines compiled so far (one per WGSL source and entry point).
    pub fn cached_pipelines(&self) -> usize {
        self.pipelines
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .pipeline_count()
    }
}

impl Drop for Gpu {
    fn drop(&mut self) {
        // Best effort: a cache that can't be written only makes the next start slower.
        if let Err(err) = self.save_pipeline_cache() {
            eprintln!("fblayout: {err}");
        }
    }
}

fn supports_compute(adapter: &wgpu::Adapter) -> bool {
    adapter
        .get_downlevel_capabilities()
        .flags
        .contains(wgpu::DownlevelFlags::COMPUTE_SHADERS)
}

/// WebGPU's default limits (or the downlevel ones where the adapter lacks them), raised to the
/// adapter's own values for buffer sizes and compute.
fn required_limits(supported: &wgpu::Limits) -> wgpu::Limits {
    let mut limits = if wgpu::Limits::default().check_limits(supported) {
        wgpu::Limits::default()
    } else if wgpu::Limits::downlevel_defaults().check_limits(supported) {
        wgpu::Limits::downlevel_defaults()
    } else {
        return supported.clone();
    };
    limits.max_buffer_size = supported.max_buffer_size;
    limits.max_storage_buffer_binding_size = supported.max_storage_buffer_binding_size;
    limits.max_uniform_buffer_binding_size = supported.max_uniform_buffer_binding_size;
    limits.max_storage_buffers_per_shader_stage = supported.max_storage_buffers_per_shader_stage;
    // Storage and uniform buffers together: the grouped kernels (AdamW over many parameters)
    // bind as many as the storage limit allows, which the default of 28 would refuse.
    limits.max_buffers_and_acceleration_structures_per_shader_stage =
        supported.max_buffers_and_acceleration_structures_per_shader_stage;
    limits.max_compute_workgroup_storage_size = supported.max_compute_workgroup_storage_size;
    limits.max_compute_invocations_per_workgroup = supported.max_compute_invocations_per_workgroup;
    limits.max_compute_workgroup_size_x = supported.max_compute_workgroup_size_x;
    limits.max_compute_workgroup_size_y = supported.max_compute_workgroup_size_y;
    limits.max_compute_workgroup_size_z = supported.max_compute_workgroup_size_z;
    limits.max_compute_workgroups_per_dimension = supported.max_compute_workgroups_per_dimension;
    limits.using_alignment(supported.clone())
}

/// Runs `f` inside wgpu error scopes for validation, internal and out-of-memory errors, and turns
/// a caught error into a [`GpuError`] about `what`.
pub(crate) fn scoped<R>(
    device: &wgpu::Device,
    what: impl FnOnce() -> String,
    f: impl FnOnce() -> R,
) -> Result<R, GpuError> {
    let oom = device.push_error_scope(wgpu::ErrorFilter::OutOfMemory);
    let internal = device.push_error_scope(wgpu::ErrorFilter::Internal);
    let validation = device.push_error_scope(wgpu::ErrorFilter::Validation);
    let result = f();
    // Scopes are popped innermost first.
    let validation = pollster::block_on(validation.pop());
    let internal = pollster::block_on(internal.pop());
    let oom = pollster::block_on(oom.pop());
    match validation.or(internal).or(oom) {
        None => Ok(result),
        Some(err @ wgpu::Error::OutOfMemory { .. }) => Err(GpuError::OutOfMemory {
            what: what(),
            message: err.to_string(),
        }),
        Some(err) => Err(GpuError::Validation {
            what: what(),
            message: error_report(&err),
        }),
    }
}

/// wgpu's error with its chain of sources.
fn error_report(err: &wgpu::Error) -> String {
    let mut report = err.to_string();
    let mut source = std::error::Error::source(err);
    while let Some(cause) = source {
        let line = cause.to_string();
        if !report.contains(&line) {
            report.push_str("\n  caused by: ");
            report.push_str(&line);
        }
        source = cause.source();
    }
    report
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_take_the_adapter_buffer_sizes() {
        let adapter = wgpu::Limits {
            max_buffer_size: 8 << 30,
            max_storage_buffer_binding_size: 4 << 30,
            max_compute_workgroups_per_dimension: 1 << 20,
            max_storage_buffers_per_shader_stage: 64,
            max_buffers_and_acceleration_structures_per_shader_stage: 96,
            ..Default::default()
        };
        let limits = required_limits(&adapter);
        assert_eq!(limits.max_storage_buffers_per_shader_stage, 64);
        assert_eq!(
            limits.max_buffers_and_acceleration_structures_per_shader_stage,
            96
        );
        assert_eq!(limits.max_buffer_size, 8 << 30);
        assert_eq!(limits.max_storage_buffer_binding_size, 4 << 30);
        assert_eq!(limits.max_compute_workgroups_per_dimension, 1 << 20);
        assert!(limits.check_limits(&adapter));
    }

    #[test]
    fn limits_fall_back_to_downlevel() {
        let adapter = wgpu::Limits::downlevel_defaults();
        let limits = required_limits(&adapter);
        assert!(limits.check_limits(&adapter));
    }

    #[test]
    fn info_display_names_the_adapter() {
        let info = GpuInfo {
            name: "llvmpipe (LLVM 15.0.6, 256 bits)".into(),
            backend: wgpu::Backend::Vulkan,
            device_type: wgpu::DeviceType::Cpu,
            driver: "llvmpipe".into(),
            driver_info: "Mesa 22.3.6".into(),
        };
        assert!(info.is_software());
        let shown = info.to_string();
        assert!(
            shown.starts_with("llvmpipe (LLVM 15.0.6, 256 bits) (Vulkan, Cpu"),
            "{shown}"
        );
        assert!(shown.contains("Mesa 22.3.6"), "{shown}");
    }
}
