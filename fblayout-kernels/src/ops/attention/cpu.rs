//! The CPU twin of the attention, in `f64`: the products written out over dense copies of Q,
//! K, V and dO, the softmax and its backward those of [`softmax`](crate::ops::softmax).
//!
//! The scores `S` and the gradients `dP` and `dS` are kept dense, `[batch, heads, seq_q,
//! seq_k]`, and rounded to the element type, as the GPU stores them; the probabilities are the
//! caller's `probs`, read back as stored. Each task computes whole rows of one output (a row of
//! scores, or one head's `head_dim` elements of one token), in parallel with rayon.

use rayon::prelude::*;

use super::{ARG_ROLES, Attention, BACKWARD, FORWARD, check_extents};
use crate::cpu::{Dense, Logical, LogicalMut, Real};
use crate::ops::error::OpError;
use crate::ops::matmul::cpu::pack;
use crate::ops::softmax::{
    Softmax, softmax_backward_cpu, softmax_forward_cpu, softmax_forward_keys_cpu,
};

/// What the CPU backward reads: the forward's inputs and the probabilities it saved.
pub struct AttentionSaved<'a, T> {
    /// Queries `[batch, seq_q, heads, head_dim]`.
    pub q: &'a dyn Logical<T>,
    /// Keys `[batch, seq_k, kv_heads, head_dim]`.
    pub k: &'a dyn Logical<T>,
    /// Values `[batch, seq_k, kv_heads, head_dim]`.
    pub v: &'a dyn Logical<T>,
    /// The forward's probabilities `[batch, heads, seq_q, seq_k]`.
    pub probs: &'a dyn Logical<T>,
}

/// The extents of one attention.
#[derive(Debug, Clone, Copy)]
struct Shape {
    batch: usize,
    seq_q: usize,
    seq_k: usize,
    heads: usize,
    kv_heads: usize,
    head_dim: usize,
}

impl Shape {
    /// The extents of Q, K, V, O and the scores, checked against each other.
    fn of(
        op: &'static str,
        attention: &Attention,
        roles: [&str; 5],
        dims: [&[usize]; 5],
    ) -> Result<Self, OpError> {
        attention.group()?;
        let known = dims.map(|d| d.iter().map(|&n| Some(n as u64)).collect::<Vec<_>>());
        let [batch, seq_q, seq_k, head_dim] =
            check_extents(op, attention, roles, known.each_ref().map(Vec::as_slice))?
                .map(|n| n.unwrap_or(0) as usize);
        Ok(Self {
            batch,
            seq_q,
            seq_k,
            heads: attention.heads as usize,
            kv_heads: attention.kv_heads as usize,
            head_dim,
        })
    }

    /// The key/value head query head `h` reads.
    fn kv_of(&self, h: usize) -> usize {
        h / (self.heads / self.kv_heads)
    }

    /// Where `[b, s, h, ..]` starts in a dense `[batch, seq, heads_of, head_dim]`.
    fn token(&self, (b, s, h): (usize, usize, usize), seq: usize, heads_of: usize) -> usize {
        ((b * seq + s) * heads_of + h) * self.head_dim
    }

    /// Where row `[b, h, i, ..]` starts in dense scores.
    fn score_row(&self, b: usize, h: usize, i: usize) -> usize {
        ((b * self.heads + h) * self.seq_q + i) * self.seq_k
    }

    fn scores_dims(&self) -> Vec<usize> {
        vec![self.batch, self.heads, self.seq_q, self.seq_k]
    }
}

/// `x` `[a, b, c, d]` read densely, row-major.
fn dense<T: Real>(x: &dyn Logical<T>) -> Vec<f64> {
    let d = x.dims();
    pack(x, &d[..2], d[2], d[3])
}

/// The row-major coordinates of row `r` of `[outer, middle, inner, ..]`.
fn split3(r: usize, middle: usize, inner: usize) -> (usize, usize, usize) {
    (r / (middle * inner), r / inner % middle, r % inner)
}

/// `Σ_d a[d] · b[d]`.
fn dot(a: &[f64], b: &[f64]) -> f64 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

/// The scores-by-rows product `Σ_j m[b, h, i, j] · x[b, j, kv(h), :]` for every token row
/// `[b, i, h, :]` of the query side (`O = P·V`, `dQ = dS·K`).
fn scores_times_keys(shape: &Shape, m: &[f64], x: &[f64]) -> Vec<f64> {
    let s = *shape;
    let mut out = vec![0.0; s.batch * s.seq_q * s.heads * s.head_dim];
    out.par_chunks_mut(s.head_dim.max(1))
        .enumerate()
        .for_each(|(r, row)| {
            let (b, i, h) = split3(r, s.seq_q, s.heads);
            let at = s.score_row(b, h, i);
            for (j, &w) in m[at..at + s.seq_k].iter().enumerate() {
                let from = s.token((b, j, s.kv_of(h)), s.seq_k, s.kv_heads);
                for (o, &xv) in row.iter_mut().zip(&x[from..from + s.head_dim]) {
                    *o += w * xv;
                }
            }
        });
    out
}

/// The transposed product `Σ_{h ∈ group(kv)} Σ_i m[b, h, i, j] · x[b, i, h, :]` for every token
/// row `[b, j, kv, :]` of the key side (`dV = Pᵀ·dO`, `dK = dSᵀ·Q`).
fn scores_t_times_queries(shape: &Shape, m: &[f64], x: &[f64]) -> Vec<f64> {
    let s = *shape;
    let group = s.heads / s.kv_heads;
    let mut out = vec![0.0; s.batch * s.seq_k * s.kv_heads * s.head_dim];
    out.par_chunks_mut(s.head_dim.max(1))
        .enumerate()
        .for_each(|(r, row)| {
            let (b, j, kv) = split3(r, s.seq_k, s.kv_heads);
            for h in kv * group..(kv + 1) * group {
                for i in 0..s.seq_q {
                    let w = m[s.score_row(b, h, i) + j];
                    let from = s.token((b, i, h), s.seq_q, s.heads);
                    for (o, &xv) in row.iter_mut().zip(&x[from..from + s.head_dim]) {
                        *o += w * xv;
                    }
                }
            }
        });
    out
}

/// The rows-by-keys product `Σ_d a[b, i, h, d] · x[b, j, kv(h), d]` for every scores element,
/// rounded to `T` (`S = Q·Kᵀ`, `dP = dO·Vᵀ`).
fn queries_times_keys_t<T: Real>(shape: &Shape, a: &[f64], x: &[f64]) -> Dense<T> {
    let s = *shape;
    let n = s.batch * s.heads * s.seq_q * s.seq_k;
    let values = (0..n).into_par_iter().map(|e| {
        let (bh, i, j) = split3(e, s.seq_q, s.seq_k);
        let (b, h) = (bh / s.heads, bh % s.heads);
        let qa = s.token((b, i, h), s.seq_q, s.heads);
        let ka = s.token((b, j, s.kv_of(h)), s.seq_k, s.kv_heads);
        dot(&a[qa..qa + s.head_dim], &x[ka..ka + s.head_dim])
    });
    Dense::new(s.scores_dims(), values)
}

/// Writes dense `values` through `out`, rounded to `T`.
fn write<T: Real>(out: &mut dyn LogicalMut<T>, values: &[f64]) {
    let dense: Vec<T> = values.par_iter().map(|&v| T::from_f64(v)).collect();
    out.scatter(&dense);
}

/// The attention's forward on the CPU: `probs = softmax(scale·S)` (masked) of the scores
/// `S = Q·Kᵀ` (rounded to `T`), `out = probs·V`. An attention masked by padding
/// ([`Mask::Keys`](crate::ops::Mask::Keys)) runs [`attention_forward_keys_cpu`] instead.
pub fn attention_forward_cpu<T: Real>(
    attention: Attention,
    q: &dyn Logical<T>,
    k: &dyn Logical<T>,
    v: &dyn Logical<T>,
    out: &mut dyn LogicalMut<T>,
    probs: &mut dyn LogicalMut<T>,
) -> Result<(), OpError> {
    forward(attention, [q, k, v], None, out, probs)
}

/// [`attention_forward_cpu`] of an attention masked by padding
/// ([`Mask::Keys`](crate::ops::Mask::Keys)): key `k` of batch `b` is seen when
/// `keep[b, k] ≠ 0`, `keep` `[batch, seq_k]`.
pub fn attention_forward_keys_cpu<T: Real>(
    attention: Attention,
    q: &dyn Logical<T>,
    k: &dyn Logical<T>,
    v: &dyn Logical<T>,
    keep: &dyn Logical<u32>,
    out: &mut dyn LogicalMut<T>,
    probs: &mut dyn LogicalMut<T>,
) -> Result<(), OpError> {
    forward(attention, [q, k, v], Some(keep), out, probs)
}

fn forward<T: Real>(
    attention: Attention,
    [q, k, v]: [&dyn Logical<T>; 3],
    keep: Option<&dyn Logical<u32>>,
    out: &mut dyn LogicalMut<T>,
    probs: &mut dyn LogicalMut<T>,
) -> Result<(), OpError> {
    let dims = [q.dims(), k.dims(), v.dims(), out.dims(), probs.dims()];
    let shape = Shape::of(FORWARD, &attention, ARG_ROLES, dims)?;
    let (qd, kd, vd) = (dense(q), dense(k), dense(v));
    let scores = queries_times_keys_t::<T>(&shape, &qd, &kd);
    let softmax = Softmax::new(attention.scale, attention.mask);
    match keep {
        Some(keep) => softmax_forward_keys_cpu(softmax, &scores, keep, probs)?,
        None => softmax_forward_cpu(softmax, &scores, probs)?,
    }
    let p = dense(&*probs);
    write(out, &scores_times_keys(&shape, &p, &vd));
    Ok(())
}

/// The attention's backward on the CPU: from `dout` (the output's gradient), `dq`, `dk` and
/// `dv` (overwritten), with the forward's inputs and probabilities in `saved`.
pub fn attention_backward_cpu<T: Real>(
    attention: Attention,
    saved: &AttentionSaved<'_, T>,
    dout: &dyn Logical<T>,
    dq: &mut dyn LogicalMut<T>,
    dk: &mut dyn LogicalMut<T>,
    dv: &mut dyn LogicalMut<T>,
) -> Result<(), OpError> {
    let AttentionSaved { q, k, v, probs } = *saved;
    let dims = [q.dims(), k.dims(), v.dims(), dout.dims(), probs.dims()];
    let roles = ["q", "k", "v", "dout", "probs"];
    let shape = Shape::of(BACKWARD, &attention, roles, dims)?;
    for (role, grad, of) in [("dq", &*dq, q), ("dk", &*dk, k), ("dv", &*dv, v)] {
        if grad.dims() != of.dims() {
            return Err(OpError::shape(
                BACKWARD,
                format!(
                    "`{role}` has shape {:?}, its tensor {:?}",
                    grad.dims(),
                    of.dims()
                ),
            ));
        }
    }
    let (qd, kd, vd, p, d_o) = (dense(q), dense(k), dense(v), dense(probs), dense(dout));
    let dp = queries_times_keys_t::<T>(&shape, &d_o, &vd);
    let mut ds = Dense::<T>::new(
        shape.scores_dims(),
        (0..p.len()).into_par_iter().map(|_| 0.0),
    );
    // The gradient of the unscaled scores: the softmax's backward applies the scale.
    let softmax = Softmax::new(attention.scale, attention.mask);
    softmax_backward_cpu(softmax, probs, &dp, &mut ds)?;
    let ds = ds.values();
    write(dv, &scores_t_times_queries(&shape, &p, &d_o));
    write(dq, &scores_times_keys(&shape, &ds, &kd));
    write(dk, &scores_t_times_queries(&shape, &ds, &qd));
    Ok(())
}
