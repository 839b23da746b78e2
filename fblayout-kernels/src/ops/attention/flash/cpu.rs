//! The CPU twin of the fused attention, in `f64`: the same functions as the GPU kernels, from
//! the definitions (no blocks, no online softmax), through the operands' addressing.

use rayon::prelude::*;

use super::super::{Attention, check_extents};
use super::{BACKWARD, FORWARD, LSE_ROLES, NO_KEYS, lse_dims};
use crate::cpu::{Logical, LogicalMut, Real};
use crate::ops::error::OpError;
use crate::ops::softmax::Mask;

/// What the CPU backward reads: the forward's inputs, its output and its log-sum-exp.
pub struct FlashSaved<'a, T> {
    /// Queries `[batch, seq_q, heads, head_dim]`.
    pub q: &'a dyn Logical<T>,
    /// Keys `[batch, seq_k, kv_heads, head_dim]`.
    pub k: &'a dyn Logical<T>,
    /// Values `[batch, seq_k, kv_heads, head_dim]`.
    pub v: &'a dyn Logical<T>,
    /// The forward's output `[batch, seq_q, heads, head_dim]`.
    pub out: &'a dyn Logical<T>,
    /// The forward's log-sum-exp `[batch, heads, seq_q]`.
    pub lse: &'a dyn Logical<T>,
}

/// The extents, and whether query `i` of sequence `b` sees key `j`.
struct Pairs<'a> {
    attention: Attention,
    batch: usize,
    seq_q: usize,
    seq_k: usize,
    heads: usize,
    group: usize,
    head_dim: usize,
    keep: Option<&'a dyn Logical<u32>>,
}

impl Pairs<'_> {
    fn sees(&self, b: usize, i: usize, j: usize) -> bool {
        self.attention.mask.keeps(i, j) && self.keep.is_none_or(|keep| keep.get(&[b, j]) != 0)
    }

    /// `scale · Q[b, i, h] · K[b, j, h / group]`.
    fn score<T: Real>(
        &self,
        q: &dyn Logical<T>,
        k: &dyn Logical<T>,
        b: usize,
        h: usize,
        i: usize,
        j: usize,
    ) -> f64 {
        let kv = h / self.group;
        let s: f64 = (0..self.head_dim)
            .map(|d| q.get(&[b, i, h, d]).to_f64() * k.get(&[b, j, kv, d]).to_f64())
            .sum();
        f64::from(self.attention.scale) * s
    }
}

fn pairs<'a>(
    op: &'static str,
    attention: Attention,
    dims: [&[usize]; 5],
    keep: Option<&'a dyn Logical<u32>>,
) -> Result<Pairs<'a>, OpError> {
    let group = attention.group()? as usize;
    let mut known: [Vec<Option<u64>>; 5] =
        dims.map(|d| d.iter().map(|&n| Some(n as u64)).collect());
    known[4] = lse_dims(&known[4]);
    let [batch, seq_q, seq_k, head_dim] = check_extents(
        op,
        &attention,
        LSE_ROLES,
        known.each_ref().map(Vec::as_slice),
    )?
    .map(|n| n.unwrap_or(0) as usize);
    if let Some(keep) = keep {
        if keep.dims() != [batch, seq_k] {
            return Err(OpError::shape(
                op,
                format!(
                    "`keep` has shape {:?}, not [batch, seq_k] = [{batch}, {seq_k}]",
                    keep.dims()
                ),
            ));
        }
    }
    match (attention.mask, keep) {
        (Mask::Keys, None) => Err(OpError::shape(op, "a key mask (`Mask::Keys`) needs `keep`")),
        (Mask::None | Mask::Causal { .. }, Some(_)) => Err(OpError::shape(
            op,
            "`keep` was given, but the mask is not `Mask::Keys`",
        )),
        _ => Ok(Pairs {
            attention,
            batch,
            seq_q,
            seq_k,
            heads: attention.heads as usize,
            group,
            head_dim,
            keep,
        }),
    }
}

/// The fused attention's forward on the CPU: `out = softmax(scale · Q·Kᵀ) · V` over the keys
/// each query sees, and `lse[b, h, i] = log Σ_j exp(scale · S_ij)` (a query that sees no key
/// writes 0s and saves a log-sum-exp of `3·10³⁸`, as the GPU does). `keep` `[batch, seq_k]` is
/// the padding mask of [`Mask::Keys`].
pub fn flash_forward_cpu<T: Real>(
    attention: Attention,
    [q, k, v]: [&dyn Logical<T>; 3],
    keep: Option<&dyn Logical<u32>>,
    out: &mut dyn LogicalMut<T>,
    lse: &mut dyn LogicalMut<T>,
) -> Result<(), OpError> {
    let dims = [q.dims(), k.dims(), v.dims(), out.dims(), lse.dims()];
    let p = pairs(FORWARD, attention, dims, keep)?;
    let d = p.head_dim;
    // One task per (b, i, h): its output row and its log-sum-exp.
    let rows: Vec<(Vec<f64>, f64)> = (0..p.batch * p.seq_q * p.heads)
        .into_par_iter()
        .map(|r| {
            let (b, i, h) = (r / (p.seq_q * p.heads), r / p.heads % p.seq_q, r % p.heads);
            let seen: Vec<(usize, f64)> = (0..p.seq_k)
                .filter(|&j| p.sees(b, i, j))
                .map(|j| (j, p.score(q, k, b, h, i, j)))
                .collect();
            let Some(m) = seen.iter().map(|&(_, s)| s).reduce(f64::max) else {
                return (vec![0.0; d], f64::from(NO_KEYS));
            };
            let total: f64 = seen.iter().map(|&(_, s)| (s - m).exp()).sum();
            let mut o = vec![0.0; d];
            for &(j, s) in &seen {
                let w = (s - m).exp() / total;
                for (e, o) in o.iter_mut().enumerate() {
                    *o += w * v.get(&[b, j, h / p.group, e]).to_f64();
                }
            }
            (o, m + total.ln())
        })
        .collect();
    let dense: Vec<T> = rows
        .iter()
        .flat_map(|(o, _)| o.iter().map(|&x| T::from_f64(x)))
        .collect();
    out.scatter(&dense);
    // `lse` is `[batch, heads, seq_q]`; the rows above are `[batch, seq_q, heads]`.
    let mut sums = vec![T::from_f64(0.0); p.batch * p.heads * p.seq_q];
    for (r, (_, l)) in rows.iter().enumerate() {
        let (b, i, h) = (r / (p.seq_q * p.heads), r / p.heads % p.seq_q, r % p.heads);
        sums[(b * p.heads + h) * p.seq_q + i] = T::from_f64(*l);
    }
    lse.scatter(&sums);
    Ok(())
}

/// The fused attention's backward on the CPU, from the definitions: with `P_ij = exp(scale ·
/// S_ij − lse_i)` for the keys query `i` sees (else 0), `D_i = Σ_e dO_ie · O_ie`, `dS = P ⊙
/// (dO·Vᵀ − D)`: `dQ = scale · dS·K`, `dK = scale · dSᵀ·Q`, `dV = Pᵀ·dO`, the key-side
/// gradients summed over the query heads of each group. `dq`, `dk` and `dv` are overwritten.
pub fn flash_backward_cpu<T: Real>(
    attention: Attention,
    saved: &FlashSaved<'_, T>,
    keep: Option<&dyn Logical<u32>>,
    dout: &dyn Logical<T>,
    [dq, dk, dv]: [&mut dyn LogicalMut<T>; 3],
) -> Result<(), OpError> {
    let FlashSaved { q, k, v, out, lse } = *saved;
    let dims = [q.dims(), k.dims(), v.dims(), out.dims(), lse.dims()];
    let p = pairs(BACKWARD, attention, dims, keep)?;
    for (role, grad, of) in [
        ("dq", dq.dims(), q),
        ("dk", dk.dims(), k),
        ("dv", dv.dims(), v),
        ("dout", dout.dims(), out),
    ] {
        if grad != of.dims() {
            return Err(OpError::shape(
                BACKWARD,
                format!("`{role}` has shape {grad:?}, its tensor {:?}", of.dims()),
            ));
        }
    }
    let (d, kv_heads) = (p.head_dim, p.heads / p.group);
    let row = |x: &dyn Logical<T>, b, s, h| -> Vec<f64> {
        (0..d).map(|e| x.get(&[b, s, h, e]).to_f64()).collect()
    };
    // Per (b, h, i): D_i, and dS_ij for every key.
    let ds: Vec<Vec<f64>> = (0..p.batch * p.heads * p.seq_q)
        .into_par_iter()
        .map(|r| {
            let (b, h, i) = (r / (p.heads * p.seq_q), r / p.seq_q % p.heads, r % p.seq_q);
            let (g, o) = (row(dout, b, i, h), row(out, b, i, h));
            let dd: f64 = g.iter().zip(&o).map(|(a, b)| a * b).sum();
            let l = lse.get(&[b, h, i]).to_f64();
            (0..p.seq_k)
                .map(|j| {
                    if !p.sees(b, i, j) {
                        return 0.0;
                    }
                    let prob = (p.score(q, k, b, h, i, j) - l).exp();
                    let vj = row(v, b, j, h / p.group);
                    let dp: f64 = g.iter().zip(&vj).map(|(a, b)| a * b).sum();
                    prob * (dp - dd)
                })
                .collect()
        })
        .collect();
    let scale = f64::from(attention.scale);
    let at = |b: usize, h: usize, i: usize| (b * p.heads + h) * p.seq_q + i;
    // dQ[b, i, h] = scale · Σ_j dS_ij K_j.
    let dq_rows: Vec<f64> = (0..p.batch * p.seq_q * p.heads)
        .into_par_iter()
        .flat_map_iter(|r| {
            let (b, i, h) = (r / (p.seq_q * p.heads), r / p.heads % p.seq_q, r % p.heads);
            let mut acc = vec![0.0; d];
            for (j, &w) in ds[at(b, h, i)].iter().enumerate() {
                for (e, a) in acc.iter_mut().enumerate() {
                    *a += scale * w * k.get(&[b, j, h / p.group, e]).to_f64();
                }
            }
            acc
        })
        .collect();
    // dK[b, j, kv] = scale · Σ_{h ∈ kv} Σ_i dS_ij Q_i; dV[b, j, kv] = Σ_{h ∈ kv} Σ_i P_ij dO_i.
    let key_rows = |grad_k: bool| -> Vec<f64> {
        (0..p.batch * p.seq_k * kv_heads)
            .into_par_iter()
            .flat_map_iter(|r| {
                let (b, j, kv) = (
                    r / (p.seq_k * kv_heads),
                    r / kv_heads % p.seq_k,
                    r % kv_heads,
                );
                let mut acc = vec![0.0; d];
                for h in kv * p.group..(kv + 1) * p.group {
                    for i in 0..p.seq_q {
                        let w = if grad_k {
                            scale * ds[at(b, h, i)][j]
                        } else if p.sees(b, i, j) {
                            (p.score(q, k, b, h, i, j) - lse.get(&[b, h, i]).to_f64()).exp()
                        } else {
                            0.0
                        };
                        if w == 0.0 {
                            continue;
                        }
                        let x = if grad_k {
                            row(q, b, i, h)
                        } else {
                            row(dout, b, i, h)
                        };
                        for (a, x) in acc.iter_mut().zip(x) {
                            *a += w * x;
                        }
                    }
                }
                acc
            })
            .collect()
    };
    let write = |out: &mut dyn LogicalMut<T>, values: &[f64]| {
        let dense: Vec<T> = values.iter().map(|&x| T::from_f64(x)).collect();
        out.scatter(&dense);
    };
    write(dq, &dq_rows);
    write(dk, &key_rows(true));
    write(dv, &key_rows(false));
    Ok(())
}
