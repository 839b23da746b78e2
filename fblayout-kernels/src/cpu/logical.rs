//! CPU operands read and written by logical index, whatever their addressing: what CPU
//! kernels are written against, so one kernel serves every layout.

/// A CPU operand read by logical index, whatever its addressing.
pub trait Logical<T>: Sync {
    /// The extent of each axis.
    fn dims(&self) -> &[usize];
    /// The element at `index`.
    fn get(&self, index: &[usize]) -> T;
}

/// A CPU operand written by logical index, whatever its addressing.
pub trait LogicalMut<T>: Logical<T> {
    /// Writes `dense`, row-major over [`dims`](Logical::dims).
    fn scatter(&mut self, dense: &[T]);
}

impl<T: Copy + Sync, A: super::Addressing> Logical<T> for crate::tensor::HostArg<'_, T, A> {
    fn dims(&self) -> &[usize] {
        crate::tensor::HostArg::dims(self)
    }
    fn get(&self, index: &[usize]) -> T {
        crate::tensor::HostArg::get(self, index)
    }
}

impl<T: Copy + Sync + Send, A: super::Addressing> Logical<T>
    for crate::tensor::HostArgMut<'_, T, A>
{
    fn dims(&self) -> &[usize] {
        crate::tensor::HostArgMut::dims(self)
    }
    fn get(&self, index: &[usize]) -> T {
        crate::tensor::HostArgMut::get(self, index)
    }
}

impl<T: Copy + Sync + Send, A: super::Addressing> LogicalMut<T>
    for crate::tensor::HostArgMut<'_, T, A>
{
    fn scatter(&mut self, dense: &[T]) {
        crate::tensor::HostArgMut::scatter(self, dense);
    }
}
