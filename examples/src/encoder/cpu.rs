//! The layer on the CPU backend, through the same views as the GPU: the reference the GPU run
//! is checked against. Everything is computed and stored in `f64`.

use std::collections::BTreeMap;

use fblayout_kernels::cpu::OffsetTable;
use fblayout_kernels::ops::activation::{activation_backward_cpu, activation_forward_cpu};
use fblayout_kernels::ops::add::{add_cpu, add_into_cpu};
use fblayout_kernels::ops::attention::{
    Attention, AttentionSaved, attention_backward_cpu, attention_forward_cpu,
};
use fblayout_kernels::ops::bias::{bias_backward_cpu, bias_forward_cpu};
use fblayout_kernels::ops::matmul::linear::{Output, linear_backward_cpu, linear_forward_cpu};
use fblayout_kernels::ops::norm::{layer_norm_backward_cpu, layer_norm_forward_cpu};
use fblayout_kernels::ops::{Activation, Mask, OpError};
use fblayout_kernels::tensor::{HostArg, HostArgMut};

use super::data::Data;
use super::gpu::EPS;
use super::plan::Plan;
use super::slots::Slots;

/// The layer's tensors on the CPU: physical buffers in each tensor's layout, and the offset
/// table of every slot.
pub(crate) struct CpuLayer {
    slots: Slots,
    tables: BTreeMap<String, OffsetTable>,
    store: BTreeMap<&'static str, Vec<f64>>,
    attention: Attention,
}

type In<'a> = HostArg<'a, f64, &'a OffsetTable>;
type Out<'a> = HostArgMut<'a, f64, &'a OffsetTable>;

fn e(err: impl std::fmt::Display) -> String {
    err.to_string()
}

impl CpuLayer {
    /// The tensors of `plan` with the inputs of `data` (every other tensor NaN).
    pub(crate) fn new(plan: &Plan, data: &Data) -> Result<Self, String> {
        let slots = Slots::new(plan)?;
        let mut store = BTreeMap::new();
        for name in plan.names() {
            let bound = &slots.get(name).bound;
            let mut buf = vec![f64::NAN; bound.len() as usize];
            if let Some(values) = data.get(name) {
                bound.for_each(|i, _, off| buf[off as usize] = values[i]);
            }
            store.insert(name, buf);
        }
        let c = plan.config;
        Ok(Self {
            tables: BTreeMap::new(),
            slots,
            store,
            attention: Attention {
                heads: c.heads,
                kv_heads: c.heads,
                scale: 1.0 / ((c.hidden / c.heads) as f32).sqrt(),
                mask: Mask::None,
            },
        })
    }

    /// Makes the offset table of every slot in `keys`.
    fn tables(&mut self, keys: &[&str]) {
        for key in keys {
            if !self.tables.contains_key(*key) {
                let table = OffsetTable::new(&self.slots.get(key).bound);
                self.tables.insert((*key).to_owned(), table);
            }
        }
    }

    /// Runs `f` with the slots `reads` as inputs and `writes` as outputs.
    ///
    /// Outputs that are views of one tensor (the queries', keys' and values' gradients are parts
    /// of one fused gradient) are written into copies of it, one each, and each copy's elements
    /// in its view are moved back afterwards: they are disjoint, but Rust cannot lend one buffer
    /// mutably three times.
    fn step(
        &mut self,
        reads: &[&str],
        writes: &[&str],
        f: impl FnOnce(&[In<'_>], &mut [Out<'_>]) -> Result<(), OpError>,
    ) -> Result<(), String> {
        self.tables(reads);
        self.tables(writes);
        let tensors: Vec<&'static str> = writes.iter().map(|k| self.slots.get(k).tensor).collect();
        let mut taken: Vec<Vec<f64>> = Vec::with_capacity(writes.len());
        for (i, t) in tensors.iter().enumerate() {
            let data = match tensors[..i].iter().position(|u| u == t) {
                Some(first) => taken[first].clone(),
                None => self
                    .store
                    .remove(t)
                    .expect("a tensor being written is in the store"),
            };
            taken.push(data);
        }
        let result = {
            let ins: Result<Vec<In<'_>>, String> = reads
                .iter()
                .map(|k| {
                    let data = &self.store[self.slots.get(k).tensor];
                    HostArg::new(data.as_slice(), &self.tables[*k]).map_err(e)
                })
                .collect();
            let ins = ins?;
            let outs: Result<Vec<Out<'_>>, String> = taken
                .iter_mut()
                .zip(writes)
                .map(|(data, k)| HostArgMut::new(data.as_mut_slice(), &self.tables[*k]).map_err(e))
                .collect();
            let mut outs = outs?;
            f(&ins, &mut outs).map_err(e)
        };
        let mut merged: BTreeMap<&'static str, Vec<f64>> = BTreeMap::new();
        for ((t, data), k) in tensors.iter().zip(taken).zip(writes) {
            match merged.get_mut(t) {
                None => {
                    merged.insert(t, data);
                }
                Some(target) => self
                    .slots
                    .get(k)
                    .bound
                    .for_each(|_, _, off| target[off as usize] = data[off as usize]),
            }
        }
        self.store.extend(merged);
        result
    }

    /// Runs the forward and the backward.
    pub(crate) fn run(&mut self) -> Result<(), String> {
        let ow = Output::Overwrite;
        let linear = |this: &mut Self, x: &str, w: &str, y: &str| {
            this.step(&[x, w], &[y], |i, o| {
                linear_forward_cpu(&i[0], &i[1], &mut o[0], ow)
            })
        };
        let bias = |this: &mut Self, x: &str, b: &str, y: &str| {
            this.step(&[x, b], &[y], |i, o| {
                bias_forward_cpu(&i[0], &i[1], &mut o[0])
            })
        };
        linear(self, "x@tokens", "wqkv", "qkv_lin@tokens")?;
        bias(self, "qkv_lin@tokens", "bqkv", "qkv@tokens")?;
        let att = self.attention;
        self.step(
            &["qkv@q", "qkv@k", "qkv@v"],
            &["ctx@heads", "probs"],
            |i, o| {
                let (out, probs) = o.split_at_mut(1);
                attention_forward_cpu(att, &i[0], &i[1], &i[2], &mut out[0], &mut probs[0])
            },
        )?;
        linear(self, "ctx@tokens", "wo", "attn_lin@tokens")?;
        bias(self, "attn_lin@tokens", "bo", "h1_pre@tokens")?;
        self.step(&["x@tokens"], &["h1_pre@tokens"], |i, o| {
            add_into_cpu(&i[0], &mut o[0])
        })?;
        self.layer_norm("h1_pre", "g1", "be1", "h1", "mean1", "rstd1")?;
        linear(self, "h1@tokens", "w1", "f1_lin@tokens")?;
        bias(self, "f1_lin@tokens", "b1", "f1@tokens")?;
        self.step(&["f1@tokens"], &["g@tokens"], |i, o| {
            activation_forward_cpu(Activation::Gelu, &i[0], &mut o[0])
        })?;
        linear(self, "g@tokens", "w2", "f2_lin@tokens")?;
        bias(self, "f2_lin@tokens", "b2", "h2_pre@tokens")?;
        self.step(&["h1@tokens"], &["h2_pre@tokens"], |i, o| {
            add_into_cpu(&i[0], &mut o[0])
        })?;
        self.layer_norm("h2_pre", "g2", "be2", "out", "mean2", "rstd2")?;

        // Backward.
        self.layer_norm_backward(
            "h2_pre", "g2", "mean2", "rstd2", "d_out", "d_h2", "d_g2", "d_be2",
        )?;
        self.step(&["d_h2@tokens"], &["d_b2"], |i, o| {
            bias_backward_cpu(&i[0], &mut o[0], false)
        })?;
        self.linear_backward("g", "w2", "d_h2", "d_g", "d_w2")?;
        self.step(&["f1@tokens", "d_g@tokens"], &["d_f1@tokens"], |i, o| {
            activation_backward_cpu(Activation::Gelu, &i[0], &i[1], &mut o[0])
        })?;
        self.step(&["d_f1@tokens"], &["d_b1"], |i, o| {
            bias_backward_cpu(&i[0], &mut o[0], false)
        })?;
        self.linear_backward("h1", "w1", "d_f1", "d_h1_ffn", "d_w1")?;
        self.step(
            &["d_h2@tokens", "d_h1_ffn@tokens"],
            &["d_h1@tokens"],
            |i, o| add_cpu(&i[0], &i[1], &mut o[0]),
        )?;
        self.layer_norm_backward(
            "h1_pre", "g1", "mean1", "rstd1", "d_h1", "d_h1_pre", "d_g1", "d_be1",
        )?;
        self.step(&["d_h1_pre@tokens"], &["d_bo"], |i, o| {
            bias_backward_cpu(&i[0], &mut o[0], false)
        })?;
        self.linear_backward("ctx", "wo", "d_h1_pre", "d_ctx", "d_wo")?;
        self.step(
            &["qkv@q", "qkv@k", "qkv@v", "probs", "d_ctx@heads"],
            &["d_qkv@q", "d_qkv@k", "d_qkv@v"],
            |i, o| {
                let (dq, rest) = o.split_at_mut(1);
                let (dk, dv) = rest.split_at_mut(1);
                let saved = AttentionSaved {
                    q: &i[0],
                    k: &i[1],
                    v: &i[2],
                    probs: &i[3],
                };
                attention_backward_cpu(att, &saved, &i[4], &mut dq[0], &mut dk[0], &mut dv[0])
            },
        )?;
        self.step(&["d_qkv@tokens"], &["d_bqkv"], |i, o| {
            bias_backward_cpu(&i[0], &mut o[0], false)
        })?;
        self.linear_backward("x", "wqkv", "d_qkv", "d_x_attn", "d_wqkv")?;
        self.step(
            &["d_h1_pre@tokens", "d_x_attn@tokens"],
            &["d_x@tokens"],
            |i, o| add_cpu(&i[0], &i[1], &mut o[0]),
        )
    }

    fn layer_norm(
        &mut self,
        x: &str,
        g: &str,
        b: &str,
        y: &str,
        mean: &str,
        rstd: &str,
    ) -> Result<(), String> {
        let t = |n: &str| format!("{n}@tokens");
        self.step(&[&t(x), g, b], &[&t(y), &t(mean), &t(rstd)], |i, o| {
            let (y, rest) = o.split_at_mut(1);
            let (mean, rstd) = rest.split_at_mut(1);
            layer_norm_forward_cpu(
                &i[0],
                &i[1],
                &i[2],
                f64::from(EPS),
                &mut y[0],
                &mut mean[0],
                &mut rstd[0],
            )
        })
    }

    #[allow(clippy::too_many_arguments)] // one name per tensor of the step
    fn layer_norm_backward(
        &mut self,
        x: &str,
        g: &str,
        mean: &str,
        rstd: &str,
        dy: &str,
        dx: &str,
        dg: &str,
        db: &str,
    ) -> Result<(), String> {
        let t = |n: &str| format!("{n}@tokens");
        self.step(
            &[&t(x), g, &t(mean), &t(rstd), &t(dy)],
            &[&t(dx), dg, db],
            |i, o| {
                let (dx, rest) = o.split_at_mut(1);
                let (dg, db) = rest.split_at_mut(1);
                layer_norm_backward_cpu(
                    &i[0], &i[1], &i[2], &i[3], &i[4], &mut dx[0], &mut dg[0], &mut db[0], false,
                )
            },
        )
    }

    fn linear_backward(
        &mut self,
        x: &str,
        w: &str,
        dy: &str,
        dx: &str,
        dw: &str,
    ) -> Result<(), String> {
        let t = |n: &str| format!("{n}@tokens");
        self.step(&[&t(x), w, &t(dy)], &[&t(dx), dw], |i, o| {
            let (dx, dw) = o.split_at_mut(1);
            linear_backward_cpu(
                &i[0],
                &i[1],
                &i[2],
                Some((&mut dx[0], Output::Overwrite)),
                Some((&mut dw[0], Output::Overwrite)),
            )
        })
    }

    /// The logical values of tensor `name`.
    pub(crate) fn read(&self, name: &str) -> Vec<f64> {
        let slot = self.slots.get(name);
        let data = &self.store[slot.tensor];
        let mut out = Vec::with_capacity(slot.bound.logical_len() as usize);
        slot.bound
            .for_each(|_, _, off| out.push(data[off as usize]));
        out
    }
}
