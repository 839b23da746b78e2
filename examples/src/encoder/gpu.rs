//! The layer on the GPU: every kernel built once for the plan's views, then the forward and the
//! backward recorded into one batch (one submit), each step in its own section for timing.

use std::collections::BTreeMap;

use fblayout_kernels::ops::attention::{Attention, AttentionArgs, AttentionOp, AttentionViews};
use fblayout_kernels::ops::matmul::linear::Output;
use fblayout_kernels::ops::{
    Activation, ActivationOp, AddOp, BiasOp, LayerNormGrads, LayerNormOp, LayerNormTensors,
    LinearOp, Mask, OpError,
};
use fblayout_kernels::runtime::{Batch, Gpu, GpuBuffer, Timing};
use fblayout_kernels::tensor::GpuArg;

use super::data::Data;
use super::plan::Plan;
use super::slots::Slots;

/// LayerNorm's ε (BERT's).
pub(crate) const EPS: f32 = 1e-12;

/// The layer's kernels, built for a plan.
pub(crate) struct GpuLayer {
    slots: Slots,
    qkv: LinearOp,
    bqkv: BiasOp,
    attention: AttentionOp,
    wo: LinearOp,
    bo: BiasOp,
    /// The residual joins its branch in place: `h1_pre += x`.
    residual1: AddOp,
    ln1: LayerNormOp,
    w1: LinearOp,
    b1: BiasOp,
    gelu: ActivationOp,
    w2: LinearOp,
    b2: BiasOp,
    residual2: AddOp,
    ln2: LayerNormOp,
    /// The gradient of h1 is the sum of what flows back through the residual and the FFN.
    grad_h1: AddOp,
    /// The gradient of x is the sum of the residual's and the attention's.
    grad_x: AddOp,
}

/// The GPU buffers of every tensor of the layer.
pub(crate) struct Buffers {
    buffers: BTreeMap<&'static str, GpuBuffer>,
}

fn e(err: impl std::fmt::Display) -> String {
    err.to_string()
}

impl GpuLayer {
    /// Builds every kernel of the layer for `plan` (each validated by naga here).
    pub(crate) fn new(gpu: &Gpu, plan: &Plan) -> Result<Self, String> {
        let slots = Slots::new(plan)?;
        let v = |k: &str| slots.view(k);
        let linear = |x: &str, w: &str, y: &str| LinearOp::new(gpu, v(x), v(w), v(y)).map_err(e);
        let bias = |x: &str, b: &str, y: &str| BiasOp::new(gpu, v(x), v(b), v(y)).map_err(e);
        let add = |a: &str, b: &str, y: &str| AddOp::new(gpu, v(a), v(b), v(y)).map_err(e);
        let ln = |x: &str, g: &str, b: &str, y: &str, mean: &str, rstd: &str| {
            let views = LayerNormTensors {
                x: v(x),
                gamma: v(g),
                beta: v(b),
                y: v(y),
                mean: v(mean),
                rstd: v(rstd),
            };
            LayerNormOp::new(gpu, &views, EPS).map_err(e)
        };
        let c = plan.config;
        let attention = AttentionOp::new(
            gpu,
            &AttentionViews {
                q: v("qkv@q"),
                k: v("qkv@k"),
                v: v("qkv@v"),
                out: v("ctx@heads"),
                scores: v("probs"),
            },
            Attention {
                heads: c.heads,
                kv_heads: c.heads,
                scale: 1.0 / ((c.hidden / c.heads) as f32).sqrt(),
                mask: Mask::None,
            },
        )
        .map_err(e)?;
        Ok(Self {
            qkv: linear("x@tokens", "wqkv", "qkv_lin@tokens")?,
            bqkv: bias("qkv_lin@tokens", "bqkv", "qkv@tokens")?,
            attention,
            wo: linear("ctx@tokens", "wo", "attn_lin@tokens")?,
            bo: bias("attn_lin@tokens", "bo", "h1_pre@tokens")?,
            residual1: AddOp::accumulate(gpu, v("x@tokens"), v("h1_pre@tokens")).map_err(e)?,
            ln1: ln(
                "h1_pre@tokens",
                "g1",
                "be1",
                "h1@tokens",
                "mean1@tokens",
                "rstd1@tokens",
            )?,
            w1: linear("h1@tokens", "w1", "f1_lin@tokens")?,
            b1: bias("f1_lin@tokens", "b1", "f1@tokens")?,
            gelu: ActivationOp::new(gpu, Activation::Gelu, v("f1@tokens"), v("g@tokens"))
                .map_err(e)?,
            w2: linear("g@tokens", "w2", "f2_lin@tokens")?,
            b2: bias("f2_lin@tokens", "b2", "h2_pre@tokens")?,
            residual2: AddOp::accumulate(gpu, v("h1@tokens"), v("h2_pre@tokens")).map_err(e)?,
            ln2: ln(
                "h2_pre@tokens",
                "g2",
                "be2",
                "out@tokens",
                "mean2@tokens",
                "rstd2@tokens",
            )?,
            grad_h1: add("d_h2@tokens", "d_h1_ffn@tokens", "d_h1@tokens")?,
            grad_x: add("d_h1_pre@tokens", "d_x_attn@tokens", "d_x@tokens")?,
            slots,
        })
    }

    /// Buffers for every tensor of `plan`: the inputs of `data` uploaded, every other tensor
    /// filled with NaN so that anything the layer fails to write shows.
    pub(crate) fn buffers(gpu: &Gpu, plan: &Plan, data: &Data) -> Result<Buffers, String> {
        let mut buffers = BTreeMap::new();
        for name in plan.names() {
            let bound = plan.view(name).bind(&plan.bind(name)).map_err(e)?;
            let physical: Vec<f32> = match data.get(name) {
                Some(values) => {
                    let mut buf = vec![f32::NAN; bound.len() as usize];
                    bound.for_each(|i, _, off| buf[off as usize] = values[i] as f32);
                    buf
                }
                None => vec![f32::NAN; bound.len() as usize],
            };
            buffers.insert(name, GpuBuffer::from_slice(gpu, &physical).map_err(e)?);
        }
        Ok(Buffers { buffers })
    }

    fn arg<'a>(&'a self, buffers: &'a Buffers, key: &str) -> Result<GpuArg<'a>, String> {
        let slot = self.slots.get(key);
        GpuArg::bound(
            &buffers.buffers[slot.tensor],
            &slot.view,
            slot.bound.clone(),
        )
        .map_err(e)
    }

    /// Records the forward and the backward into `batch`, one section per step.
    pub(crate) fn record(&self, batch: &mut Batch<'_>, b: &Buffers) -> Result<(), String> {
        let a = |k: &str| self.arg(b, k);
        let op = |r: Result<(), OpError>| r.map_err(e);
        batch.section("QKV projection");
        op(self.qkv.forward(
            batch,
            &a("x@tokens")?,
            &a("wqkv")?,
            &a("qkv_lin@tokens")?,
            Output::Overwrite,
        ))?;
        op(self
            .bqkv
            .forward(batch, &a("qkv_lin@tokens")?, &a("bqkv")?, &a("qkv@tokens")?))?;
        batch.section("attention");
        let attention = AttentionArgs {
            q: a("qkv@q")?,
            k: a("qkv@k")?,
            v: a("qkv@v")?,
            out: a("ctx@heads")?,
            probs: a("probs")?,
        };
        op(self.attention.forward(batch, &attention))?;
        batch.section("output projection");
        op(self.wo.forward(
            batch,
            &a("ctx@tokens")?,
            &a("wo")?,
            &a("attn_lin@tokens")?,
            Output::Overwrite,
        ))?;
        op(self.bo.forward(
            batch,
            &a("attn_lin@tokens")?,
            &a("bo")?,
            &a("h1_pre@tokens")?,
        ))?;
        batch.section("residual + LayerNorm");
        let ln1 = LayerNormTensors {
            x: &a("h1_pre@tokens")?,
            gamma: &a("g1")?,
            beta: &a("be1")?,
            y: &a("h1@tokens")?,
            mean: &a("mean1@tokens")?,
            rstd: &a("rstd1@tokens")?,
        };
        op(self.residual1.add_into(batch, &a("x@tokens")?, ln1.x))?;
        op(self.ln1.forward(batch, &ln1))?;
        batch.section("feed-forward up + GELU");
        op(self.w1.forward(
            batch,
            &a("h1@tokens")?,
            &a("w1")?,
            &a("f1_lin@tokens")?,
            Output::Overwrite,
        ))?;
        op(self
            .b1
            .forward(batch, &a("f1_lin@tokens")?, &a("b1")?, &a("f1@tokens")?))?;
        op(self.gelu.forward(batch, &a("f1@tokens")?, &a("g@tokens")?))?;
        batch.section("feed-forward down");
        op(self.w2.forward(
            batch,
            &a("g@tokens")?,
            &a("w2")?,
            &a("f2_lin@tokens")?,
            Output::Overwrite,
        ))?;
        op(self
            .b2
            .forward(batch, &a("f2_lin@tokens")?, &a("b2")?, &a("h2_pre@tokens")?))?;
        batch.section("residual + LayerNorm");
        let ln2 = LayerNormTensors {
            x: &a("h2_pre@tokens")?,
            gamma: &a("g2")?,
            beta: &a("be2")?,
            y: &a("out@tokens")?,
            mean: &a("mean2@tokens")?,
            rstd: &a("rstd2@tokens")?,
        };
        op(self.residual2.add_into(batch, &a("h1@tokens")?, ln2.x))?;
        op(self.ln2.forward(batch, &ln2))?;

        // Backward, from d_out.
        batch.section("LayerNorm backward");
        let g2 = LayerNormGrads {
            dy: &a("d_out@tokens")?,
            dx: &a("d_h2@tokens")?,
            dgamma: &a("d_g2")?,
            dbeta: &a("d_be2")?,
        };
        op(self.ln2.backward(batch, &ln2, &g2, false))?;
        batch.section("feed-forward down backward");
        op(self
            .b2
            .backward(batch, &a("d_h2@tokens")?, &a("d_b2")?, false))?;
        op(self.w2.backward(
            batch,
            &a("g@tokens")?,
            &a("w2")?,
            &a("d_h2@tokens")?,
            Some((&a("d_g@tokens")?, Output::Overwrite)),
            Some((&a("d_w2")?, Output::Overwrite)),
        ))?;
        batch.section("feed-forward up backward");
        op(self.gelu.backward(
            batch,
            &a("f1@tokens")?,
            &a("d_g@tokens")?,
            &a("d_f1@tokens")?,
        ))?;
        op(self
            .b1
            .backward(batch, &a("d_f1@tokens")?, &a("d_b1")?, false))?;
        op(self.w1.backward(
            batch,
            &a("h1@tokens")?,
            &a("w1")?,
            &a("d_f1@tokens")?,
            Some((&a("d_h1_ffn@tokens")?, Output::Overwrite)),
            Some((&a("d_w1")?, Output::Overwrite)),
        ))?;
        batch.section("LayerNorm backward");
        op(self.grad_h1.forward(
            batch,
            &a("d_h2@tokens")?,
            &a("d_h1_ffn@tokens")?,
            &a("d_h1@tokens")?,
        ))?;
        let g1 = LayerNormGrads {
            dy: &a("d_h1@tokens")?,
            dx: &a("d_h1_pre@tokens")?,
            dgamma: &a("d_g1")?,
            dbeta: &a("d_be1")?,
        };
        op(self.ln1.backward(batch, &ln1, &g1, false))?;
        batch.section("output projection backward");
        op(self
            .bo
            .backward(batch, &a("d_h1_pre@tokens")?, &a("d_bo")?, false))?;
        op(self.wo.backward(
            batch,
            &a("ctx@tokens")?,
            &a("wo")?,
            &a("d_h1_pre@tokens")?,
            Some((&a("d_ctx@tokens")?, Output::Overwrite)),
            Some((&a("d_wo")?, Output::Overwrite)),
        ))?;
        batch.section("attention backward");
        op(self.attention.backward(
            batch,
            &attention,
            &a("d_ctx@heads")?,
            &a("d_qkv@q")?,
            &a("d_qkv@k")?,
            &a("d_qkv@v")?,
        ))?;
        batch.section("QKV projection backward");
        op(self
            .bqkv
            .backward(batch, &a("d_qkv@tokens")?, &a("d_bqkv")?, false))?;
        op(self.qkv.backward(
            batch,
            &a("x@tokens")?,
            &a("wqkv")?,
            &a("d_qkv@tokens")?,
            Some((&a("d_x_attn@tokens")?, Output::Overwrite)),
            Some((&a("d_wqkv")?, Output::Overwrite)),
        ))?;
        op(self.grad_x.forward(
            batch,
            &a("d_h1_pre@tokens")?,
            &a("d_x_attn@tokens")?,
            &a("d_x@tokens")?,
        ))?;
        Ok(())
    }

    /// Runs the layer once and times every dispatch; also returns the seconds of CPU time it
    /// took to record the batch (binding every argument, checking it, packing parameters).
    pub(crate) fn run_timed(&self, gpu: &Gpu, b: &Buffers) -> Result<(Vec<Timing>, f64), String> {
        let start = std::time::Instant::now();
        let mut batch = gpu.batch();
        self.record(&mut batch, b)?;
        let recording = start.elapsed().as_secs_f64();
        Ok((batch.submit_timed().map_err(e)?, recording))
    }

    /// The logical values of tensor `name` (read back from the GPU).
    pub(crate) fn read(&self, b: &Buffers, name: &str) -> Result<Vec<f64>, String> {
        let slot = self.slots.get(name);
        let data: Vec<f32> = b.buffers[slot.tensor].read_back().map_err(e)?;
        let mut out = Vec::with_capacity(slot.bound.logical_len() as usize);
        slot.bound
            .for_each(|_, _, off| out.push(f64::from(data[off as usize])));
        Ok(out)
    }
}
