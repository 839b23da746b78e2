//! The crate's only `unsafe` code: wgpu calls whose preconditions the compiler can't check.
//!
//! Everything else in fblayout is written without `unsafe` (the workspace denies it; this
//! module alone is allowed it, in `runtime/mod.rs`). Each call states why its precondition
//! holds.

/// A pipeline cache for `device`, primed with `data` when given.
///
/// `fallback: true` makes wgpu start an empty cache instead of failing when the data is not
/// usable (another driver, another wgpu version, a stale file).
pub(super) fn pipeline_cache(device: &wgpu::Device, data: Option<&[u8]>) -> wgpu::PipelineCache {
    // SAFETY: wgpu requires that `data` came from `PipelineCache::get_data` of an adapter with
    // the same `wgpu::util::pipeline_cache_key`. The only data passed here is what
    // `disk_cache::load` returns: bytes that this crate wrote from `get_data`, in a file named
    // after that key, whose envelope repeats the key (with the driver's name and version) and
    // a checksum of key and data, both checked before the bytes are handed over. A file that
    // fails any check is ignored and rebuilt. wgpu then validates its own header (magic,
    // version, backend, adapter and driver keys) and, with `fallback`, ignores data that does
    // not match, as the driver does for its own blob.
    unsafe {
        device.create_pipeline_cache(&wgpu::PipelineCacheDescriptor {
            label: Some("fblayout pipeline cache"),
            data,
            fallback: true,
        })
    }
}

/// wgpu's token for its experimental features: enabled when `features` asks for one
/// (`EXPERIMENTAL_COOPERATIVE_MATRIX` is the only one this crate requests), else disabled.
pub(super) fn experimental_features(features: wgpu::Features) -> wgpu::ExperimentalFeatures {
    if !features.contains(wgpu::Features::EXPERIMENTAL_COOPERATIVE_MATRIX) {
        return wgpu::ExperimentalFeatures::disabled();
    }
    // SAFETY: `enabled` asks the caller to accept that wgpu's experimental features may have
    // bugs with undefined behaviour. The only experimental feature requested is cooperative
    // matrices, and the only shaders that use it are `ops::coop`'s, which naga validates with
    // the COOPERATIVE_MATRIX capability and which fblayout's tests also pass through naga's
    // SPIR-V writer (so the writer's known panic on inline `coopLoad` operands cannot be
    // reached from them). Every other shader is built without the extension, so it cannot
    // touch the experimental paths. `FBLAYOUT_DISABLE=cooperative-matrix` turns it off.
    unsafe { wgpu::ExperimentalFeatures::enabled() }
}
