//! Tensors in GPU buffers.

use fblayout_core::__private::bindings;
use fblayout_core::kernel::ParamValue;
use fblayout_core::layout::{BoundView, ElemType, TensorLayout, View};
use fblayout_core::typed::{Coord, Tensor};

use super::host::CpuTensor;
use crate::runtime::{Gpu, GpuBuffer, GpuError};

/// An element type a GPU buffer holds: `f32`, `f16`, `u32` or `i32`.
pub trait GpuElem: bytemuck::Pod + Send + Sync + 'static {
    /// The layout element type it is.
    const ELEM: ElemType;
}

impl GpuElem for f32 {
    const ELEM: ElemType = ElemType::F32;
}
impl GpuElem for half::f16 {
    const ELEM: ElemType = ElemType::F16;
}
impl GpuElem for u32 {
    const ELEM: ElemType = ElemType::U32;
}
impl GpuElem for i32 {
    const ELEM: ElemType = ElemType::I32;
}

/// A GPU buffer read through a view bound to its run-time extents: what GPU kernels take.
#[derive(Debug, Clone)]
pub struct GpuArg<'a> {
    buffer: &'a GpuBuffer,
    view: &'a View,
    bound: BoundView,
}

impl<'a> GpuArg<'a> {
    /// `buffer` read through `view` with the tensor's run-time extents `extents` (`(axis,
    /// extent)` pairs, as [`View::bind`] takes them). Fails when the extents don't bind or the
    /// buffer is shorter than the layout needs.
    pub fn new(
        buffer: &'a GpuBuffer,
        view: &'a View,
        extents: &[(&str, u32)],
    ) -> Result<Self, GpuError> {
        let bound = view.bind(extents).map_err(|err| {
            GpuError::bad_input(
                format!("tensor `{}`", view.layout().name()),
                err.to_string(),
            )
        })?;
        Self::bound(buffer, view, bound)
    }

    /// `buffer` read through `view`, already bound.
    pub fn bound(
        buffer: &'a GpuBuffer,
        view: &'a View,
        bound: BoundView,
    ) -> Result<Self, GpuError> {
        let layout = view.layout();
        let needed = bound.len() * u64::from(layout.elem().size_bytes());
        if buffer.len_bytes() < needed {
            return Err(GpuError::bad_input(
                format!("tensor `{}`", layout.name()),
                format!(
                    "its buffer holds {} bytes; the layout needs {needed} ({} × {} padding \
                     included)",
                    buffer.len_bytes(),
                    bound.len(),
                    layout.elem()
                ),
            ));
        }
        Ok(Self {
            buffer,
            view,
            bound,
        })
    }

    /// The same buffer read through `view`, another view of the same tensor (its transpose,
    /// a slice of it), bound to the same run-time extents.
    pub fn through(&self, view: &'a View) -> Result<GpuArg<'a>, GpuError> {
        let names: Vec<String> = view
            .layout()
            .dynamic_axes()
            .map(|a| a.name.clone())
            .collect();
        let extents: Vec<(&str, u32)> = names
            .iter()
            .map(String::as_str)
            .zip(self.bound.extent_args().iter().map(|&n| n as u32))
            .collect();
        GpuArg::new(self.buffer, view, &extents)
    }

    /// `buffer` read through this argument's view and extents: another tensor stored as this
    /// one is (a scratch copy of it).
    pub fn with_buffer<'b>(&self, buffer: &'b GpuBuffer) -> Result<GpuArg<'b>, GpuError>
    where
        'a: 'b,
    {
        GpuArg::bound(buffer, self.view, self.bound.clone())
    }

    /// The buffer.
    pub fn buffer(&self) -> &'a GpuBuffer {
        self.buffer
    }

    /// The view.
    pub fn view(&self) -> &'a View {
        self.view
    }

    /// The bound view: shape, buffer length and run-time extents.
    pub fn bound_view(&self) -> &BoundView {
        &self.bound
    }

    /// The extent of each view axis.
    pub fn dims(&self) -> Vec<usize> {
        self.bound.shape().iter().map(|&n| n as usize).collect()
    }

    /// The element type stored.
    pub fn elem(&self) -> ElemType {
        self.view.layout().elem()
    }

    /// The parameter-block fields of this argument bound as operand `role`: one
    /// `role.<axis>_len` per run-time axis of its layout.
    pub fn params(&self, role: &str) -> Vec<(String, ParamValue)> {
        self.view
            .layout()
            .dynamic_axes()
            .zip(self.bound.extent_args())
            .map(|(axis, &n)| {
                (
                    format!("{role}.{}", TensorLayout::extent_param(&axis.name)),
                    // Binding keeps extents inside the u32 space.
                    ParamValue::U32(n as u32),
                )
            })
            .collect()
    }
}

/// A tensor declared with `#[derive(Tensor)]`, in a GPU buffer of exactly `X::len(extents)`
/// elements.
pub struct GpuTensor<X: Tensor> {
    buffer: GpuBuffer,
    extents: X::Extents,
}

impl<X: Tensor> std::fmt::Debug for GpuTensor<X> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GpuTensor")
            .field("tensor", &X::NAME)
            .field("extents", &self.extents)
            .field("buffer", &self.buffer)
            .finish()
    }
}

impl<X: Tensor> Clone for GpuTensor<X> {
    fn clone(&self) -> Self {
        Self {
            buffer: self.buffer.clone(),
            extents: self.extents,
        }
    }
}

fn bad_extents<X: Tensor>(err: impl std::fmt::Display) -> GpuError {
    GpuError::bad_input(format!("tensor `{}`", X::NAME), err.to_string())
}

impl<X: Tensor> GpuTensor<X> {
    fn elem() -> ElemType {
        X::descriptor().layout.elem()
    }

    fn check_elem<T: GpuElem>() -> Result<(), GpuError> {
        if T::ELEM != Self::elem() {
            return Err(GpuError::bad_input(
                format!("tensor `{}`", X::NAME),
                format!(
                    "it holds {}, not {}",
                    Self::elem(),
                    std::any::type_name::<T>()
                ),
            ));
        }
        Ok(())
    }

    fn len(extents: X::Extents) -> Result<usize, GpuError> {
        X::check_extents(extents).map_err(bad_extents::<X>)
    }

    /// A tensor whose elements are unspecified (a pooled buffer keeps what it held): for a
    /// kernel's output.
    pub fn scratch(gpu: &Gpu, extents: X::Extents) -> Result<Self, GpuError> {
        let bytes = Self::len(extents)? * Self::elem().size_bytes() as usize;
        Ok(Self {
            buffer: GpuBuffer::scratch::<u8>(gpu, bytes)?,
            extents,
        })
    }

    /// A tensor of zeros.
    pub fn zeroed(gpu: &Gpu, extents: X::Extents) -> Result<Self, GpuError> {
        let bytes = Self::len(extents)? * Self::elem().size_bytes() as usize;
        Ok(Self {
            buffer: GpuBuffer::zeroed::<u8>(gpu, bytes)?,
            extents,
        })
    }

    /// A copy of `host` on the GPU.
    pub fn upload<T: GpuElem>(gpu: &Gpu, host: &CpuTensor<X, T>) -> Result<Self, GpuError> {
        Self::check_elem::<T>()?;
        Ok(Self {
            buffer: GpuBuffer::from_slice(gpu, host.data())?,
            extents: host.extents(),
        })
    }

    /// The tensor copied back to the CPU (waits for the GPU work queued so far).
    pub fn download<T: GpuElem>(&self) -> Result<CpuTensor<X, T>, GpuError> {
        Self::check_elem::<T>()?;
        let mut data: Vec<T> = self.buffer.read_back()?;
        data.truncate(Self::len(self.extents)?);
        CpuTensor::from_buffer(self.extents, data).map_err(bad_extents::<X>)
    }

    /// The run-time extents.
    pub fn extents(&self) -> X::Extents {
        self.extents
    }

    /// The buffer.
    pub fn buffer(&self) -> &GpuBuffer {
        &self.buffer
    }

    /// The tensor as a kernel argument, read through `V`: `X` itself or one of the views
    /// declared on it.
    pub fn view<V: Coord<Tensor = X>>(&self) -> Result<GpuArg<'_>, GpuError> {
        let extents = bindings::<X>(self.extents).map_err(bad_extents::<X>)?;
        GpuArg::new(&self.buffer, V::view(), &extents)
    }

    /// The tensor as a kernel argument, read as declared.
    pub fn arg(&self) -> Result<GpuArg<'_>, GpuError> {
        self.view::<X>()
    }
}
