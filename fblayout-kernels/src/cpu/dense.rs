//! A dense row-major tensor on the host: the scratch a CPU kernel keeps between its steps (an
//! attention's scores, a language-model head's logits).

use rayon::prelude::*;

use super::{Logical, LogicalMut, Real};

/// A dense row-major tensor of `T`s, read and written by logical index.
#[derive(Debug, Clone, PartialEq)]
pub struct Dense<T> {
    dims: Vec<usize>,
    data: Vec<T>,
}

impl<T: Real> Dense<T> {
    /// The tensor of extents `dims` holding `values` (row-major), each rounded to `T`.
    pub fn new(dims: Vec<usize>, values: impl IndexedParallelIterator<Item = f64>) -> Self {
        let data = values.map(T::from_f64).collect();
        Self { dims, data }
    }

    /// A tensor of extents `dims` holding zeros.
    pub fn zeros(dims: Vec<usize>) -> Self {
        let n = dims.iter().product();
        Self {
            dims,
            data: vec![T::from_f64(0.0); n],
        }
    }

    /// Its values in `f64`, row-major.
    pub fn values(&self) -> Vec<f64> {
        self.data.par_iter().map(|v| v.to_f64()).collect()
    }
}

impl<T: Real> Logical<T> for Dense<T> {
    fn dims(&self) -> &[usize] {
        &self.dims
    }
    fn get(&self, index: &[usize]) -> T {
        let at = index
            .iter()
            .zip(&self.dims)
            .fold(0, |acc, (&i, &n)| acc * n + i);
        self.data[at]
    }
}

impl<T: Real> LogicalMut<T> for Dense<T> {
    fn scatter(&mut self, dense: &[T]) {
        self.data.copy_from_slice(dense);
    }
}
