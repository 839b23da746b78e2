//! Layouts with every extent known: the CPU path at run time.
//!
//! [`View::bind`] (and [`TensorLayout::bind`]) take the run-time extents, check them (present,
//! non-zero, divisible where a view splits them, within the u32 index space), and return a
//! [`BoundView`]: concrete shape, buffer length (padding included), and a compiled offset
//! function. [`BoundView::pack`] and [`BoundView::unpack`] move data between a dense row-major
//! array of the view's shape and the tensor's physical buffer; padding is filled with the
//! default value and never read back.

use std::sync::Arc;

use super::error::{LayoutError, MAX_ELEMENTS};
use super::spec::Extent;
use super::tensor::TensorLayout;
use super::unravel::unravel;
use super::view::{Requirement, View};
use crate::expr::CpuIndexFn;

/// A view with every extent known (see the module docs).
#[derive(Debug, Clone)]
pub struct BoundView {
    name: String,
    axis_names: Vec<String>,
    shape: Vec<u64>,
    extent_args: Vec<u64>,
    len: u64,
    cpu: Arc<CpuIndexFn>,
}

impl TensorLayout {
    /// Binds the run-time extents (`(axis, extent)` pairs) of the tensor itself.
    pub fn bind(&self, extents: &[(&str, u32)]) -> Result<BoundView, LayoutError> {
        self.view().bind(extents)
    }

    /// Checks the run-time extents (`(axis, extent)` pairs) as [`bind`](Self::bind) does and
    /// returns the buffer length, padding included.
    pub fn check_extents(&self, extents: &[(&str, u32)]) -> Result<u64, LayoutError> {
        self.bind_extents(extents).map(|b| b.len)
    }

    /// Checks the run-time extents (`(axis, extent)` pairs): each run-time axis bound once, to
    /// a non-zero extent that its tile divides unless it consented to padding, and the buffer
    /// within the u32 index space.
    pub(crate) fn bind_extents(
        &self,
        extents: &[(&str, u32)],
    ) -> Result<BoundExtents, LayoutError> {
        let fail = |detail: String| LayoutError::Bind {
            tensor: self.name().to_owned(),
            detail,
        };
        for (name, _) in extents {
            match self.axis_index(name) {
                None => return Err(fail(format!("it has no axis `{name}`"))),
                Some(i) if self.axes()[i].extent != Extent::Dynamic => {
                    return Err(fail(format!(
                        "axis `{name}` has a static extent; only run-time extents are bound"
                    )));
                }
                Some(_) => {}
            }
        }
        let mut args = Vec::new();
        for axis in self.dynamic_axes() {
            let given: Vec<u32> = extents
                .iter()
                .filter(|(a, _)| *a == axis.name)
                .map(|&(_, v)| v)
                .collect();
            let n = match given.as_slice() {
                [] => {
                    return Err(fail(format!(
                        "no extent given for run-time axis `{}`",
                        axis.name
                    )));
                }
                [0] => return Err(fail(format!("axis `{}` bound to extent 0", axis.name))),
                [v] => *v,
                _ => return Err(fail(format!("axis `{}` is bound twice", axis.name))),
            };
            if !n.is_multiple_of(axis.tile) && !axis.pad {
                return Err(fail(format!(
                    "axis `{}` is bound to {n}, which its tile {} does not divide, and it \
                     was not declared with `pad`; declare the tile with `pad` to accept \
                     padding to {}, or bind a multiple of {}",
                    axis.name,
                    axis.tile,
                    u64::from(n).next_multiple_of(u64::from(axis.tile)),
                    axis.tile
                )));
            }
            args.push(u64::from(n));
        }
        let mut dynamic = args.iter().copied();
        let extents = self.extents_with(|_| {
            dynamic
                .next()
                .expect("one argument per run-time axis, in axis order")
        });
        if let Some((axis, elements)) = self.exceeds(&extents, MAX_ELEMENTS) {
            return Err(LayoutError::Overflow {
                tensor: self.name().to_owned(),
                axis: self.axes()[axis].name.clone(),
                elements,
            });
        }
        let len = self
            .len_for(&extents)
            .expect("a length within the u32 index space does not overflow u64");
        Ok(BoundExtents { args, extents, len })
    }
}

/// Run-time extents that passed [`TensorLayout::bind_extents`].
#[derive(Debug, Clone)]
pub(crate) struct BoundExtents {
    /// The run-time extents, in parameter order.
    pub args: Vec<u64>,
    /// The logical extent of every axis.
    pub extents: Vec<u64>,
    /// The buffer length, padding included.
    pub len: u64,
}

impl View {
    /// Binds the run-time extents of the viewed tensor (`(axis, extent)` pairs).
    pub fn bind(&self, extents: &[(&str, u32)]) -> Result<BoundView, LayoutError> {
        let layout = self.layout();
        let BoundExtents {
            args,
            extents: values,
            len,
        } = layout.bind_extents(extents)?;
        // View extents name axes of the tensor, each bound above.
        let value_of = |axis: &str| {
            layout
                .axis_index(axis)
                .map(|i| values[i])
                .expect("view extents name axes of the viewed tensor")
        };
        let fail = |detail: String| LayoutError::Bind {
            tensor: layout.name().to_owned(),
            detail,
        };
        for requirement in self.requirements() {
            match requirement {
                Requirement::Divides { what, extent } => {
                    if extent.eval(value_of).is_none() {
                        return Err(fail(format!(
                            "{what}, but the extent does not divide exactly ({extent} is not whole)"
                        )));
                    }
                }
                Requirement::AtLeast { what, extent, min } => {
                    let n = extent
                        .eval(value_of)
                        .expect("a sliced extent is evaluated after the splits before it");
                    if n < *min {
                        return Err(fail(format!("{what}, but the extent is {n}")));
                    }
                }
            }
        }
        let mut shape = Vec::with_capacity(self.axes().len());
        for axis in self.axes() {
            let n = axis.extent.eval(value_of).ok_or_else(|| {
                fail(format!(
                    "view `{}` needs axis `{}` ({}) to divide exactly",
                    self.name(),
                    axis.name,
                    axis.extent
                ))
            })?;
            if n > MAX_ELEMENTS {
                return Err(LayoutError::ViewAxisTooLong {
                    view: self.name().to_owned(),
                    axis: axis.name.clone(),
                    extent: u128::from(n),
                });
            }
            shape.push(n);
        }
        if shape
            .iter()
            .try_fold(1u64, |acc, &n| acc.checked_mul(n))
            .is_none()
        {
            return Err(fail(format!(
                "view `{}` of shape {shape:?} has more than 2^64 coordinates",
                self.name()
            )));
        }
        let cpu = Arc::clone(&self.compiled().cpu);
        Ok(BoundView {
            name: self.name().to_owned(),
            axis_names: self.axes().iter().map(|a| a.name.clone()).collect(),
            shape,
            extent_args: args,
            len,
            cpu,
        })
    }
}

impl BoundView {
    /// The view's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The name of each view axis, in coordinate order.
    pub fn axis_names(&self) -> &[String] {
        &self.axis_names
    }

    /// The extent of each view axis.
    pub fn shape(&self) -> &[u64] {
        &self.shape
    }

    /// The number of logical elements (the product of the shape).
    ///
    /// Binding checked that it fits `u64`.
    pub fn logical_len(&self) -> u64 {
        self.shape.iter().product()
    }

    /// The physical buffer length in elements, padding included.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Whether the buffer is empty (never: extents are at least 1).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The run-time extents, in parameter order (what the WGSL functions take after the
    /// coordinates).
    pub fn extent_args(&self) -> &[u64] {
        &self.extent_args
    }

    /// The physical offset of `coords`, or `None` when it lies outside the view.
    ///
    /// # Panics
    /// When `coords.len()` is not the view's rank.
    pub fn offset(&self, coords: &[u64]) -> Option<u64> {
        assert_eq!(
            coords.len(),
            self.shape.len(),
            "view `{}` has rank {}",
            self.name,
            self.shape.len()
        );
        let mut args = coords.to_vec();
        args.extend_from_slice(&self.extent_args);
        self.cpu.eval(&args)
    }

    /// Calls `f(linear_index, coords, offset)` for every coordinate of the view, row-major.
    pub fn for_each(&self, mut f: impl FnMut(usize, &[u64], u64)) {
        let rank = self.shape.len();
        let mut args = vec![0u64; rank];
        args.extend_from_slice(&self.extent_args);
        let mut regs = Vec::new();
        for linear in 0..self.logical_len() as usize {
            unravel(linear as u64, &self.shape, &mut args[..rank]);
            let offset = self
                .cpu
                .eval_with(&args, &mut regs)
                .expect("every coordinate of a view's shape is inside the view");
            f(linear, &args[..rank], offset);
        }
    }

    /// Scatters a dense row-major array of the view's shape into a physical buffer.
    pub fn pack<T: Copy + Default>(&self, logical: &[T]) -> Result<Vec<T>, LayoutError> {
        self.check_logical(logical.len())?;
        let mut buffer = vec![T::default(); self.len as usize];
        self.for_each(|i, _, off| buffer[off as usize] = logical[i]);
        Ok(buffer)
    }

    /// Gathers a physical buffer into a dense row-major array of the view's shape.
    pub fn unpack<T: Copy>(&self, buffer: &[T]) -> Result<Vec<T>, LayoutError> {
        if buffer.len() as u64 != self.len {
            return Err(LayoutError::Bind {
                tensor: self.name.clone(),
                detail: format!(
                    "buffer holds {} elements, the layout needs {}",
                    buffer.len(),
                    self.len
                ),
            });
        }
        let mut out = Vec::with_capacity(self.logical_len() as usize);
        self.for_each(|_, _, off| out.push(buffer[off as usize]));
        Ok(out)
    }

    fn check_logical(&self, n: usize) -> Result<(), LayoutError> {
        if n as u64 != self.logical_len() {
            return Err(LayoutError::Bind {
                tensor: self.name.clone(),
                detail: format!(
                    "{n} elements given for view `{}` of shape {:?} ({} elements)",
                    self.name,
                    self.shape,
                    self.logical_len()
                ),
            });
        }
        Ok(())
    }
}
