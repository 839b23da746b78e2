//! `--device` and `--precision`: what runs a fine-tuning's steps, shared by the main job and
//! `fblayout finetune`.

use fblayout_kernels::{Gpu, GpuError};
use fblayout_plan::graph::precision::Precision;

/// What runs the steps.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum DeviceArg {
    /// The GPU where one with hardware of its own opens, else the CPU executor (a software
    /// adapter such as lavapipe runs a step slower than the CPU executor does).
    Auto,
    /// The CPU executor (f64): the reference, exact but slow.
    Cpu,
    /// The GPU that `FBLAYOUT_ADAPTER`/`FBLAYOUT_BACKEND` pick (else wgpu's preferred one),
    /// software adapters included; an error where none opens.
    Gpu,
}

/// The step's precision.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum PrecisionArg {
    /// Everything in f32 (f64 on the CPU executor).
    F32,
    /// f16 activations and gradients, f32 master weights, dynamic loss scaling (GPU only).
    Mixed,
}

impl From<PrecisionArg> for Precision {
    fn from(p: PrecisionArg) -> Self {
        match p {
            PrecisionArg::F32 => Precision::F32,
            PrecisionArg::Mixed => Precision::Mixed,
        }
    }
}

/// Whether the machine may have a GPU with hardware of its own: on Linux, a DRM render node
/// (`/dev/dri/renderD*`, Mesa's and most drivers') or an NVIDIA device node (`/dev/nvidia0`,
/// …); elsewhere, always. Where it has neither, [`DeviceArg::Auto`] does not open a Vulkan
/// instance to find only a software adapter (whose drivers may complain on stderr meanwhile).
fn may_have_gpu() -> bool {
    if !cfg!(target_os = "linux") {
        return true;
    }
    let has = |dir: &str, prefix: &str| {
        std::fs::read_dir(dir).is_ok_and(|entries| {
            entries.filter_map(Result::ok).any(|e| {
                e.file_name().to_str().is_some_and(|name| {
                    name.strip_prefix(prefix)
                        .is_some_and(|n| n.chars().next().is_some_and(|c| c.is_ascii_digit()))
                })
            })
        })
    };
    has("/dev/dri", "renderD") || has("/dev", "nvidia")
}

/// The GPU that `device` asks for (`None`: the CPU executor). With [`DeviceArg::Auto`], no
/// GPU device node, a GPU that does not open, or a software one, means the CPU, and stderr
/// says why where it asked for mixed precision (which needs the GPU).
pub(crate) fn open(device: DeviceArg, precision: PrecisionArg) -> Result<Option<Gpu>, GpuError> {
    match device {
        DeviceArg::Cpu => Ok(None),
        DeviceArg::Gpu => Gpu::new().map(Some),
        DeviceArg::Auto if !may_have_gpu() => {
            if precision == PrecisionArg::Mixed {
                eprintln!(
                    "--device auto: no GPU device node on this machine, so the CPU executor \
                     runs the steps; --device gpu tries a software adapter"
                );
            }
            Ok(None)
        }
        DeviceArg::Auto => match Gpu::new() {
            Ok(gpu) if !gpu.info().is_software() => Ok(Some(gpu)),
            Ok(gpu) => {
                if precision == PrecisionArg::Mixed {
                    eprintln!(
                        "--device auto: {} is a software adapter, so the CPU executor runs \
                         the steps; --device gpu runs them there",
                        gpu.info()
                    );
                }
                Ok(None)
            }
            Err(e) => {
                if precision == PrecisionArg::Mixed {
                    eprintln!("--device auto: no GPU ({e}); the CPU executor runs the steps");
                }
                Ok(None)
            }
        },
    }
}
