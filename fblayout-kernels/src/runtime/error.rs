//! Errors of the wgpu runtime.
//!
//! Every fallible operation of [`Gpu`](super::Gpu), [`GpuBuffer`](super::GpuBuffer) and the
//! kernels built on them returns a [`GpuError`]. Errors that wgpu reports asynchronously
//! (shader compilation, pipeline creation, bind groups, submission) are caught with wgpu's error
//! scopes and come back as [`GpuError::Validation`] or [`GpuError::OutOfMemory`], so a kernel that
//! fails never hands back wrong data.

use fblayout_core::shader::WgslError;

/// What the install hint in [`GpuError::NoAdapter`] says.
pub(crate) const NO_ADAPTER_HINT: &str = "install Mesa's Vulkan drivers, e.g. \
`apt-get install mesa-vulkan-drivers` (lavapipe, a software Vulkan driver, is enough), \
or set FBLAYOUT_ADAPTER/FBLAYOUT_BACKEND to pick another adapter";

/// Why a GPU operation failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum GpuError {
    /// wgpu found no adapter at all.
    #[error("no GPU adapter was found (tried {tried}); {hint}", hint = NO_ADAPTER_HINT)]
    NoAdapter {
        /// The backends and options that were tried.
        tried: String,
    },
    /// `FBLAYOUT_ADAPTER` named an adapter that does not exist.
    #[error(
        "no GPU adapter's name contains {wanted:?} (case-insensitive); available adapters: {}",
        if available.is_empty() { "none".to_string() } else { available.join("; ") }
    )]
    NoMatchingAdapter {
        /// The name fragment that was asked for.
        wanted: String,
        /// The adapters that were found, as `name (backend, device type)`.
        available: Vec<String>,
    },
    /// An environment variable that picks the adapter has a value that is not understood.
    #[error("{var}={value:?} is not understood; expected {expected}")]
    BadEnv {
        /// The variable's name.
        var: &'static str,
        /// Its value.
        value: String,
        /// What values are accepted.
        expected: &'static str,
    },
    /// The adapter refused to create a device.
    #[error("the GPU adapter refused to create a device: {0}")]
    RequestDevice(#[from] wgpu::RequestDeviceError),
    /// A WGSL module did not parse or validate.
    #[error(transparent)]
    Shader(#[from] WgslError),
    /// A buffer would exceed the device's limits.
    #[error("{what} needs {bytes} bytes, more than the device allows ({limit} bytes)")]
    BufferTooLarge {
        /// What the buffer is for.
        what: String,
        /// The bytes it would need (saturated at `u64::MAX`).
        bytes: u64,
        /// The device limit that it exceeds.
        limit: u64,
    },
    /// Mapping a buffer to read it back failed.
    #[error("reading back {what} failed: {message}")]
    Map {
        /// What was being read back.
        what: String,
        /// wgpu's report.
        message: String,
    },
    /// wgpu reported a validation (or internal) error inside an error scope.
    #[error("wgpu rejected {what}:\n{message}")]
    Validation {
        /// The operation that failed (shader module, pipeline, bind group, dispatch, ...).
        what: String,
        /// wgpu's report.
        message: String,
    },
    /// The device ran out of memory.
    #[error("the GPU ran out of memory during {what}: {message}")]
    OutOfMemory {
        /// The operation that failed.
        what: String,
        /// wgpu's report.
        message: String,
    },
    /// The pipeline cache file could not be written.
    #[error("could not save the pipeline cache to {}: {message}", path.display())]
    Cache {
        /// The file.
        path: std::path::PathBuf,
        /// Why.
        message: String,
    },
    /// A kernel's shader could not be assembled from its operands.
    #[error(transparent)]
    Kernel(#[from] fblayout_core::kernel::KernelError),
    /// A piece of work asked a batch's workspace for a scratch buffer larger than any it has
    /// free (see [`Batch::use_workspace`](super::Batch::use_workspace)): the workspace was
    /// sized for less scratch than the work takes.
    #[error(
        "a kernel asks for {bytes} bytes of scratch, but the workspace has no free buffer that \
         large (free: {free:?} bytes; taken by this work already: {taken:?} bytes): it was sized \
         for less scratch than the work takes"
    )]
    WorkspaceTooSmall {
        /// The bytes asked for.
        bytes: u64,
        /// The bytes of each free buffer of the workspace.
        free: Vec<u64>,
        /// The bytes of each buffer the same piece of work took before.
        taken: Vec<u64>,
    },
    /// The caller's arguments do not fit together (lengths, names, limits).
    #[error("bad input to {what}: {reason}")]
    BadInput {
        /// The function, kernel or argument the problem is in.
        what: String,
        /// What is wrong.
        reason: String,
    },
}

impl GpuError {
    /// A [`GpuError::BadInput`].
    pub(crate) fn bad_input(what: impl Into<String>, reason: impl Into<String>) -> Self {
        Self::BadInput {
            what: what.into(),
            reason: reason.into(),
        }
    }
}
