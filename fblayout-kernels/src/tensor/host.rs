//! Tensors in CPU memory.

use std::ops::{Index, IndexMut};

use fblayout_core::layout::{BoundView, LayoutError};
use fblayout_core::typed::{Coord, Tensor};

use crate::cpu::{Addressing, OffsetTable, Typed};

/// A buffer read through an [`Addressing`]: what CPU kernels read.
#[derive(Debug, Clone)]
pub struct HostArg<'a, T, A> {
    data: &'a [T],
    addr: A,
}

/// A buffer written through an [`Addressing`]: what CPU kernels write.
#[derive(Debug)]
pub struct HostArgMut<'a, T, A> {
    data: &'a mut [T],
    addr: A,
}

fn check_len(name: &str, len: usize, needed: usize) -> Result<(), LayoutError> {
    if len < needed {
        return Err(LayoutError::Bind {
            tensor: name.to_owned(),
            detail: format!("its buffer holds {len} elements; the layout needs {needed}"),
        });
    }
    Ok(())
}

impl<'a, T: Copy> HostArg<'a, T, OffsetTable> {
    /// `data` read through a view bound at run time.
    pub fn bound(data: &'a [T], bound: &BoundView) -> Result<Self, LayoutError> {
        Self::new(data, OffsetTable::new(bound))
    }
}

impl<'a, T: Copy, A: Addressing> HostArg<'a, T, A> {
    /// `data` read through `addr`; fails when `data` is shorter than the layout's buffer.
    pub fn new(data: &'a [T], addr: A) -> Result<Self, LayoutError> {
        check_len(addr.name(), data.len(), addr.buffer_len())?;
        Ok(Self { data, addr })
    }

    /// The element at `index`.
    pub fn get(&self, index: &[usize]) -> T {
        self.data[self.addr.offset(index)]
    }

    /// The addressing.
    pub fn addressing(&self) -> &A {
        &self.addr
    }

    /// The extent of each axis.
    pub fn dims(&self) -> &[usize] {
        self.addr.dims()
    }
}

impl<'a, T: Copy> HostArgMut<'a, T, OffsetTable> {
    /// `data` written through a view bound at run time.
    pub fn bound(data: &'a mut [T], bound: &BoundView) -> Result<Self, LayoutError> {
        Self::new(data, OffsetTable::new(bound))
    }
}

impl<'a, T: Copy, A: Addressing> HostArgMut<'a, T, A> {
    /// `data` written through `addr`; fails when `data` is shorter than the layout's buffer.
    pub fn new(data: &'a mut [T], addr: A) -> Result<Self, LayoutError> {
        check_len(addr.name(), data.len(), addr.buffer_len())?;
        Ok(Self { data, addr })
    }

    /// The element at `index`.
    pub fn get(&self, index: &[usize]) -> T {
        self.data[self.addr.offset(index)]
    }

    /// Sets the element at `index`.
    pub fn set(&mut self, index: &[usize], value: T) {
        let at = self.addr.offset(index);
        self.data[at] = value;
    }

    /// The addressing.
    pub fn addressing(&self) -> &A {
        &self.addr
    }

    /// The extent of each axis.
    pub fn dims(&self) -> &[usize] {
        self.addr.dims()
    }

    /// Writes `dense` (row-major over [`dims`](Self::dims)) through the addressing.
    pub fn scatter(&mut self, dense: &[T]) {
        let dims = self.addr.dims().to_vec();
        let mut index = vec![0; dims.len()];
        for &v in dense {
            let at = self.addr.offset(&index);
            self.data[at] = v;
            for d in (0..dims.len()).rev() {
                index[d] += 1;
                if index[d] < dims[d] {
                    break;
                }
                index[d] = 0;
            }
        }
    }
}

/// A tensor declared with `#[derive(Tensor)]`, in CPU memory: exactly `X::len(extents)`
/// elements, padding included.
///
/// It is indexed by coordinates of `X` and of the views declared on `X`, and by nothing else.
#[derive(Clone, PartialEq)]
pub struct CpuTensor<X: Tensor, T> {
    data: Vec<T>,
    extents: X::Extents,
}

impl<X: Tensor, T: std::fmt::Debug> std::fmt::Debug for CpuTensor<X, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CpuTensor")
            .field("tensor", &X::NAME)
            .field("extents", &self.extents)
            .field("len", &self.data.len())
            .finish()
    }
}

impl<X: Tensor, T: Copy + Send + Sync> CpuTensor<X, T> {
    /// A tensor with every element, padding included, set to `value`.
    pub fn filled(extents: X::Extents, value: T) -> Result<Self, LayoutError> {
        let len = X::check_extents(extents)?;
        Ok(Self {
            data: vec![value; len],
            extents,
        })
    }

    /// A tensor whose element at each coordinate `x` is `f(x)`; padding is `pad`.
    pub fn from_fn(
        extents: X::Extents,
        pad: T,
        mut f: impl FnMut(X) -> T,
    ) -> Result<Self, LayoutError> {
        let mut t = Self::filled(extents, pad)?;
        for x in fblayout_core::typed::each::<X>(extents) {
            t[x] = f(x);
        }
        Ok(t)
    }

    /// A tensor holding `data`, which must be its whole buffer (`X::len(extents)` elements).
    pub fn from_buffer(extents: X::Extents, data: Vec<T>) -> Result<Self, LayoutError> {
        let len = X::check_extents(extents)?;
        if data.len() != len {
            return Err(LayoutError::Bind {
                tensor: X::NAME.to_owned(),
                detail: format!(
                    "a buffer of {} elements was given; the layout needs {len}",
                    data.len()
                ),
            });
        }
        Ok(Self { data, extents })
    }

    /// The run-time extents.
    pub fn extents(&self) -> X::Extents {
        self.extents
    }

    /// The whole buffer, in layout order, padding included.
    pub fn data(&self) -> &[T] {
        &self.data
    }

    /// The whole buffer, mutably.
    pub fn data_mut(&mut self) -> &mut [T] {
        &mut self.data
    }

    /// The buffer, taken.
    pub fn into_data(self) -> Vec<T> {
        self.data
    }

    /// The elements read through `V`, row-major over `V`'s shape (padding left out).
    pub fn to_logical<V: Coord<Tensor = X>>(&self) -> Vec<T> {
        fblayout_core::typed::each::<V>(self.extents)
            .map(|v| self[v])
            .collect()
    }

    /// The tensor as a CPU kernel argument, read through `V`: `X` itself or a view of it.
    pub fn arg<V: Coord<Tensor = X>>(&self) -> Result<HostArg<'_, T, Typed<V>>, LayoutError> {
        HostArg::new(&self.data, Typed::new(self.extents)?)
    }

    /// The tensor as a CPU kernel output, written through `V`.
    pub fn arg_mut<V: Coord<Tensor = X>>(
        &mut self,
    ) -> Result<HostArgMut<'_, T, Typed<V>>, LayoutError> {
        HostArgMut::new(&mut self.data, Typed::new(self.extents)?)
    }
}

impl<X: Tensor, T, C: Coord<Tensor = X>> Index<C> for CpuTensor<X, T> {
    type Output = T;
    fn index(&self, c: C) -> &T {
        &self.data[c.offset(self.extents)]
    }
}

impl<X: Tensor, T, C: Coord<Tensor = X>> IndexMut<C> for CpuTensor<X, T> {
    fn index_mut(&mut self, c: C) -> &mut T {
        &mut self.data[c.offset(self.extents)]
    }
}
