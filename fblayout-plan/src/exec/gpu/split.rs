//! A step in two parts, for what the host does between the gradients and the update: the
//! forward and the backward ([`GpuStep::forward_backward`]), the gradients read back and
//! written again ([`GpuStep::set_grads`]: summed over micro-batches, clipped), then the update
//! alone ([`GpuStep::update`]), or no update ([`GpuStep::skip`]). Both parts are ranges of the
//! one recording [`GpuStep::step`] submits whole: the update is everything from the overflow
//! checks on, so the gradients written are checked as the backward's are.

use std::collections::BTreeMap;

use fblayout_core::layout::ElemType;

use super::GpuStep;
use crate::exec::{ExecError, check_values, param_grad};
use crate::graph::{Phase, TensorId};

impl GpuStep<'_> {
    /// The item the update starts at in a recording of `spans`: the overflow checks, recorded
    /// after the last node before the first AdamW node. An error where the graph has no AdamW
    /// step or a node of another phase follows one.
    fn update_start(&self, spans: &[std::ops::Range<usize>]) -> Result<usize, ExecError> {
        let nodes = self.graph.nodes();
        let first = match self.first_adamw {
            Some(first) if first > 0 => first,
            _ => {
                return Err(ExecError::Plan(
                    "the graph has no AdamW step after its backward: nothing to update".into(),
                ));
            }
        };
        if let Some(other) = nodes[first..]
            .iter()
            .find(|n| n.op.phase() != Phase::Optimizer)
        {
            return Err(ExecError::Plan(format!(
                "`{}` follows the first AdamW step: the update is not the step's last part",
                other.op.name()
            )));
        }
        Ok(spans[first - 1].end)
    }

    /// The forward and the backward on `inputs`, submitted once, without the update: the loss
    /// (the sum of the cross-entropies' means). After it, [`read`](Self::read) returns each
    /// parameter's gradient (divided by the loss scale it carries), and nothing persistent has
    /// changed: [`update`](Self::update) takes the step, with the gradients as they are or
    /// as [`set_grads`](Self::set_grads) sets them, or [`skip`](Self::skip) does not.
    pub fn forward_backward(&mut self, inputs: &crate::exec::StepInputs) -> Result<f32, ExecError> {
        self.load(inputs)?;
        let mut recorded = self.recording()?;
        let start = self.update_start(&recorded.1);
        // A part submitted alone: the next whole step encodes its commands afresh.
        self.next = None;
        let submitted = start.and_then(|start| {
            recorded
                .0
                .submit_range(0..start)
                .map_err(|e| ExecError::gpu("submitting the forward and backward", e))
        });
        self.recorded = Some(recorded);
        submitted?;
        if let Some(scaling) = &mut self.scaling {
            scaling.applied = scaling.scaler.scale();
        }
        let (loss, _) = self.read_loss(self.kernels.len(), false)?;
        Ok(loss)
    }

    /// Sets the gradients of the parameters `grads` names (`(parameter, values)`, row-major
    /// over its shape) for [`update`](Self::update): the loss's gradients, as
    /// [`read`](Self::read) returns them. With loss scaling they are stored multiplied by the
    /// scale of the last [`forward_backward`](Self::forward_backward), which the update
    /// divides by. Each buffer holding any of them is read back and written once.
    pub fn set_grads(&mut self, grads: &[(String, Vec<f64>)]) -> Result<(), ExecError> {
        let scale = self.scaling.as_ref().map_or(1.0, |s| f64::from(s.applied));
        let mut by_buffer: BTreeMap<usize, Vec<(TensorId, &[f64])>> = BTreeMap::new();
        for (param, values) in grads {
            let g = param_grad(&self.graph, param)?;
            let tensor = self.graph.tensor(g);
            check_values(&tensor.name, values.len(), &self.whole[g.index()])?;
            super::check_float(tensor)?;
            let b =
                self.buffer_of[g.index()].ok_or_else(|| ExecError::Unknown(tensor.name.clone()))?;
            by_buffer.entry(b).or_default().push((g, values));
        }
        for (b, tensors) in by_buffer {
            let buffer = &self.buffers[b];
            let mut bytes: Vec<u8> = buffer
                .read_back()
                .map_err(|e| ExecError::gpu("reading a gradient's buffer back", e))?;
            for (g, values) in tensors {
                let half = self.graph.tensor(g).elem == ElemType::F16;
                self.whole[g.index()].for_each(|i, _, off| {
                    let x = (values[i] * scale) as f32;
                    let off = off as usize;
                    if half {
                        let h = half::f16::from_f32(x).to_le_bytes();
                        bytes[2 * off..2 * off + 2].copy_from_slice(&h);
                    } else {
                        bytes[4 * off..4 * off + 4].copy_from_slice(&x.to_le_bytes());
                    }
                });
            }
            buffer
                .write(&bytes)
                .map_err(|e| ExecError::gpu("writing a gradient's buffer", e))?;
        }
        Ok(())
    }

    /// The update alone, on the gradients of the last
    /// [`forward_backward`](Self::forward_backward) as they are now: the overflow checks and
    /// AdamW, submitted once. Gated as a whole step's: with loss scaling an infinite or NaN
    /// gradient skips it and lowers the scale ([`last_step_skipped`](Self::last_step_skipped));
    /// without, it is [`ExecError::NonFinite`] and changes nothing.
    pub fn update(&mut self) -> Result<(), ExecError> {
        let adam_step = self.steps + 1;
        if self.recorded.is_none() {
            return Err(ExecError::Plan(
                "an update needs the gradients of a forward_backward first".into(),
            ));
        }
        // The recording as it stands, with AdamW recorded again where the rate changed.
        let mut recorded = self.recording()?;
        let start = self.update_start(&recorded.1);
        let unscale = self.scaling.as_ref().map_or(1.0, |s| 1.0 / s.applied);
        let scalars = self
            .adamw
            .step_scalars(adam_step, unscale)
            .map_err(|source| ExecError::op(self.first_adamw.unwrap_or(0), "adamw", source));
        let submitted = start.and_then(|start| {
            self.step_scalars
                .0
                .write(&scalars?)
                .map_err(|e| ExecError::gpu("writing AdamW's step", e))?;
            let end = recorded.0.len();
            recorded
                .0
                .submit_range(start..end)
                .map_err(|e| ExecError::gpu("submitting the update", e))
        });
        self.recorded = Some(recorded);
        submitted?;
        let (_, overflowed) = self.read_loss(0, true)?;
        if let Some(scaling) = &mut self.scaling {
            scaling.skipped = scaling.scaler.update(overflowed);
            if scaling.skipped {
                return Ok(());
            }
        } else if overflowed {
            return Err(ExecError::NonFinite {
                step: adam_step,
                what: "gradient of a parameter".into(),
            });
        }
        self.steps = adam_step;
        Ok(())
    }

    /// No update after [`forward_backward`](Self::forward_backward): the step is skipped as an
    /// overflow skips it (the loss scale lowered; [`last_step_skipped`](Self::last_step_skipped)),
    /// for a host that found a gradient not finite. An error without loss scaling, where a
    /// gradient that is not finite is an error of the step.
    pub fn skip(&mut self) -> Result<(), ExecError> {
        let Some(scaling) = &mut self.scaling else {
            return Err(ExecError::LossScaling(
                "the graph's gradients are f32: a step is skipped only with loss scaling".into(),
            ));
        };
        scaling.skipped = scaling.scaler.update(true);
        Ok(())
    }
}
