//! The CPU twin of the GEMM: operands packed into dense `f64` through their addressing, a
//! blocked product parallel over blocks of rows, the result scattered back.
//!
//! Each block of 16 rows of C is computed with the `i-k-j` loop order over 256-column strips of
//! B: the innermost loop runs along a row of B and a row of C, so it vectorises, and a strip of
//! B is read from cache by every row of the block. A `[1024×768]·[768×2304]` product takes
//! under a second on two cores.

use rayon::prelude::*;

use super::{Extents, Scale};
use crate::cpu::{Logical, LogicalMut, Real};
use crate::ops::error::OpError;

/// Rows of C per parallel task.
const ROWS: usize = 16;
/// Columns of B per strip.
const COLS: usize = 256;

/// The coordinates of the `p`-th product of `batch` (row-major), then `i`, `j`.
fn index(batch: &[usize], mut p: usize, i: usize, j: usize) -> Vec<usize> {
    let mut index = vec![0; batch.len() + 2];
    for d in (0..batch.len()).rev() {
        index[d] = p % batch[d];
        p /= batch[d];
    }
    index[batch.len()] = i;
    index[batch.len() + 1] = j;
    index
}

/// `x` read densely, `[products, rows, cols]` row-major (`x` has dims `[batch.., rows, cols]`).
pub(crate) fn pack<T: Real>(
    x: &dyn Logical<T>,
    batch: &[usize],
    rows: usize,
    cols: usize,
) -> Vec<f64> {
    let products: usize = batch.iter().product();
    let mut dense = vec![0.0; products * rows * cols];
    dense
        .par_chunks_mut(cols.max(1))
        .enumerate()
        .for_each(|(r, row)| {
            let (p, i) = (r / rows.max(1), r % rows.max(1));
            for (j, v) in row.iter_mut().enumerate() {
                *v = x.get(&index(batch, p, i, j)).to_f64();
            }
        });
    dense
}

/// `C = alpha · A·B + beta · C` on the CPU, in `f64`, for `A [b.., m, k]`, `B [b.., k, n]`,
/// `C [b.., m, n]` read and written through their addressing. `beta = 0` does not read C.
pub fn matmul_cpu<T: Real>(
    a: &dyn Logical<T>,
    b: &dyn Logical<T>,
    c: &mut dyn LogicalMut<T>,
    scale: Scale,
) -> Result<(), OpError> {
    let e = Extents::of(a.dims(), b.dims(), c.dims())?;
    let (m, n, k) = (e.m, e.n, e.k);
    let products = e.products();
    let da = pack(a, &e.batch, m, k);
    let db = pack(b, &e.batch, k, n);
    let mut dc = vec![0.0; products * m * n];
    if n > 0 {
        dc.par_chunks_mut(m * n).enumerate().for_each(|(p, cp)| {
            let ap = &da[p * m * k..(p + 1) * m * k];
            let bp = &db[p * k * n..(p + 1) * k * n];
            cp.par_chunks_mut(ROWS * n)
                .enumerate()
                .for_each(|(block, rows)| block_product(ap, bp, rows, block * ROWS, k, n));
        });
    }
    let (alpha, beta) = (f64::from(scale.alpha), f64::from(scale.beta));
    let old = if beta != 0.0 {
        pack(&*c, &e.batch, m, n)
    } else {
        Vec::new()
    };
    let out: Vec<T> = dc
        .par_iter()
        .enumerate()
        .map(|(i, &v)| {
            let v = alpha * v;
            T::from_f64(if beta != 0.0 { v + beta * old[i] } else { v })
        })
        .collect();
    c.scatter(&out);
    Ok(())
}

/// Rows `first..` of one product into `rows` (whole rows of C): `C[i, :] = Σ_k A[i, k] ·
/// B[k, :]`, strip by strip of B.
fn block_product(a: &[f64], b: &[f64], rows: &mut [f64], first: usize, k: usize, n: usize) {
    for j0 in (0..n).step_by(COLS) {
        let j1 = (j0 + COLS).min(n);
        for (r, c_row) in rows.chunks_mut(n).enumerate() {
            let a_row = &a[(first + r) * k..(first + r + 1) * k];
            let c = &mut c_row[j0..j1];
            for (kk, &av) in a_row.iter().enumerate() {
                let b_row = &b[kk * n + j0..kk * n + j1];
                for (cv, &bv) in c.iter_mut().zip(b_row) {
                    *cv += av * bv;
                }
            }
        }
    }
}
