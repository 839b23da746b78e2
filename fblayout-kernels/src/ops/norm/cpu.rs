//! The norms on the CPU: the same functions in `f64`, rows in parallel.

use rayon::prelude::*;

use super::super::error::OpError;
use super::super::reduce_rows::{column_sums_cpu, expect_dims, matrix_dims, row_cpu as row};
use crate::cpu::{Logical, LogicalMut, Real};

const LN_FORWARD: &str = "layer norm forward (cpu)";
const LN_BACKWARD: &str = "layer norm backward (cpu)";
const RMS_FORWARD: &str = "rms norm forward (cpu)";
const RMS_BACKWARD: &str = "rms norm backward (cpu)";

/// The vector `a` (`[n]`) in `f64`.
fn vector<T: Real>(a: &dyn Logical<T>) -> Vec<f64> {
    (0..a.dims()[0]).map(|i| a.get(&[i]).to_f64()).collect()
}

fn scatter<T: Real>(out: &mut dyn LogicalMut<T>, values: impl IntoIterator<Item = f64>) {
    let values: Vec<T> = values.into_iter().map(T::from_f64).collect();
    out.scatter(&values);
}

/// LayerNorm's forward on the CPU: `y`, `mean` and `rstd` from `x`, `γ`, `β` (see the module
/// docs of [`norm`](super)).
pub fn layer_norm_forward_cpu<T: Real>(
    x: &dyn Logical<T>,
    gamma: &dyn Logical<T>,
    beta: &dyn Logical<T>,
    eps: f64,
    y: &mut dyn LogicalMut<T>,
    mean: &mut dyn LogicalMut<T>,
    rstd: &mut dyn LogicalMut<T>,
) -> Result<(), OpError> {
    let op = LN_FORWARD;
    let (rows, cols) = matrix_dims(op, "x", x.dims())?;
    expect_dims(op, "y", y.dims(), &[rows, cols])?;
    expect_dims(op, "gamma", gamma.dims(), &[cols])?;
    expect_dims(op, "beta", beta.dims(), &[cols])?;
    expect_dims(op, "mean", mean.dims(), &[rows])?;
    expect_dims(op, "rstd", rstd.dims(), &[rows])?;
    let (g, b) = (vector(gamma), vector(beta));
    let n = cols as f64;
    let per_row: Vec<(Vec<f64>, f64, f64)> = (0..rows)
        .into_par_iter()
        .map(|r| {
            let xs = row(x, r, cols);
            let mu = xs.iter().sum::<f64>() / n;
            let var = xs.iter().map(|v| (v - mu) * (v - mu)).sum::<f64>() / n;
            let s = 1.0 / (var + eps).sqrt();
            let ys = (0..cols).map(|c| (xs[c] - mu) * s * g[c] + b[c]).collect();
            (ys, mu, s)
        })
        .collect();
    scatter(y, per_row.iter().flat_map(|(ys, _, _)| ys.iter().copied()));
    scatter(mean, per_row.iter().map(|(_, mu, _)| *mu));
    scatter(rstd, per_row.iter().map(|(_, _, s)| *s));
    Ok(())
}

/// LayerNorm's backward on the CPU: `dx`, and `dγ`, `dβ` (added to, with `accumulate`), from
/// the forward's `x`, `γ`, `mean`, `rstd` and `dy`.
#[allow(clippy::too_many_arguments)] // one per tensor of the formulas, as the GPU op's structs
pub fn layer_norm_backward_cpu<T: Real>(
    x: &dyn Logical<T>,
    gamma: &dyn Logical<T>,
    mean: &dyn Logical<T>,
    rstd: &dyn Logical<T>,
    dy: &dyn Logical<T>,
    dx: &mut dyn LogicalMut<T>,
    dgamma: &mut dyn LogicalMut<T>,
    dbeta: &mut dyn LogicalMut<T>,
    accumulate: bool,
) -> Result<(), OpError> {
    let op = LN_BACKWARD;
    let (rows, cols) = matrix_dims(op, "x", x.dims())?;
    for (role, dims) in [("dy", dy.dims()), ("dx", dx.dims())] {
        expect_dims(op, role, dims, &[rows, cols])?;
    }
    for (role, dims) in [("gamma", gamma.dims()), ("dgamma", dgamma.dims())] {
        expect_dims(op, role, dims, &[cols])?;
    }
    expect_dims(op, "dbeta", dbeta.dims(), &[cols])?;
    expect_dims(op, "mean", mean.dims(), &[rows])?;
    expect_dims(op, "rstd", rstd.dims(), &[rows])?;
    let g = vector(gamma);
    let n = cols as f64;
    // Per row: dx, and the row's terms of dγ (dy · x̂) and dβ (dy).
    let per_row: Vec<(Vec<f64>, Vec<f64>, Vec<f64>)> = (0..rows)
        .into_par_iter()
        .map(|r| {
            let (mu, s) = (mean.get(&[r]).to_f64(), rstd.get(&[r]).to_f64());
            let xhat: Vec<f64> = row(x, r, cols).iter().map(|v| (v - mu) * s).collect();
            let dys = row(dy, r, cols);
            let gs: Vec<f64> = (0..cols).map(|c| dys[c] * g[c]).collect();
            let a = gs.iter().sum::<f64>() / n;
            let b = (0..cols).map(|c| gs[c] * xhat[c]).sum::<f64>() / n;
            let dxs = (0..cols).map(|c| s * (gs[c] - a - xhat[c] * b)).collect();
            let dg = (0..cols).map(|c| dys[c] * xhat[c]).collect();
            (dxs, dg, dys)
        })
        .collect();
    scatter(dx, per_row.iter().flat_map(|(d, _, _)| d.iter().copied()));
    column_sums_cpu(dgamma, per_row.iter().map(|(_, dg, _)| dg), accumulate);
    column_sums_cpu(dbeta, per_row.iter().map(|(_, _, db)| db), accumulate);
    Ok(())
}

/// RMSNorm's forward on the CPU: `y` and `rstd` from `x` and `γ`.
pub fn rms_norm_forward_cpu<T: Real>(
    x: &dyn Logical<T>,
    gamma: &dyn Logical<T>,
    eps: f64,
    y: &mut dyn LogicalMut<T>,
    rstd: &mut dyn LogicalMut<T>,
) -> Result<(), OpError> {
    let op = RMS_FORWARD;
    let (rows, cols) = matrix_dims(op, "x", x.dims())?;
    expect_dims(op, "y", y.dims(), &[rows, cols])?;
    expect_dims(op, "gamma", gamma.dims(), &[cols])?;
    expect_dims(op, "rstd", rstd.dims(), &[rows])?;
    let g = vector(gamma);
    let n = cols as f64;
    let per_row: Vec<(Vec<f64>, f64)> = (0..rows)
        .into_par_iter()
        .map(|r| {
            let xs = row(x, r, cols);
            let s = 1.0 / (xs.iter().map(|v| v * v).sum::<f64>() / n + eps).sqrt();
            ((0..cols).map(|c| xs[c] * s * g[c]).collect(), s)
        })
        .collect();
    scatter(y, per_row.iter().flat_map(|(ys, _)| ys.iter().copied()));
    scatter(rstd, per_row.iter().map(|(_, s)| *s));
    Ok(())
}

/// RMSNorm's backward on the CPU: `dx`, and `dγ` (added to, with `accumulate`), from the
/// forward's `x`, `γ`, `rstd` and `dy`.
#[allow(clippy::too_many_arguments)] // one per tensor of the formulas, as the GPU op's structs
pub fn rms_norm_backward_cpu<T: Real>(
    x: &dyn Logical<T>,
    gamma: &dyn Logical<T>,
    rstd: &dyn Logical<T>,
    dy: &dyn Logical<T>,
    dx: &mut dyn LogicalMut<T>,
    dgamma: &mut dyn LogicalMut<T>,
    accumulate: bool,
) -> Result<(), OpError> {
    let op = RMS_BACKWARD;
    let (rows, cols) = matrix_dims(op, "x", x.dims())?;
    for (role, dims) in [("dy", dy.dims()), ("dx", dx.dims())] {
        expect_dims(op, role, dims, &[rows, cols])?;
    }
    for (role, dims) in [("gamma", gamma.dims()), ("dgamma", dgamma.dims())] {
        expect_dims(op, role, dims, &[cols])?;
    }
    expect_dims(op, "rstd", rstd.dims(), &[rows])?;
    let g = vector(gamma);
    let n = cols as f64;
    let per_row: Vec<(Vec<f64>, Vec<f64>)> = (0..rows)
        .into_par_iter()
        .map(|r| {
            let s = rstd.get(&[r]).to_f64();
            let xs = row(x, r, cols);
            let dys = row(dy, r, cols);
            let gs: Vec<f64> = (0..cols).map(|c| dys[c] * g[c]).collect();
            let b = (0..cols).map(|c| gs[c] * xs[c]).sum::<f64>() / n;
            let dxs = (0..cols).map(|c| s * (gs[c] - xs[c] * s * s * b)).collect();
            let dg = (0..cols).map(|c| dys[c] * xs[c] * s).collect();
            (dxs, dg)
        })
        .collect();
    scatter(dx, per_row.iter().flat_map(|(d, _)| d.iter().copied()));
    column_sums_cpu(dgamma, per_row.iter().map(|(_, dg)| dg), accumulate);
    Ok(())
}
