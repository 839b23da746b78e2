//! What runs a run's steps: the CPU executor (`f64`, the reference) or the GPU's (`f32`, or
//! mixed precision with dynamic loss scaling), behind the few calls the training loop makes.

use fblayout_plan::exec::{CpuStep, ExecError, GpuStep, LossScaleState, StepInputs};
use fblayout_plan::graph::Graph;

/// The executor of a run.
#[derive(Debug)]
pub(super) enum Executor<'g> {
    /// The CPU's.
    Cpu(Box<CpuStep>),
    /// The GPU's.
    Gpu(Box<GpuStep<'g>>),
}

impl Executor<'_> {
    /// The graph it runs (planned: the parameters' and gradients' names are the model's).
    pub(super) fn graph(&self) -> &Graph {
        match self {
            Self::Cpu(cpu) => cpu.graph(),
            Self::Gpu(gpu) => gpu.graph(),
        }
    }

    /// Sets persistent tensor `name` (a parameter with its copies, or a moment).
    pub(super) fn set(&mut self, name: &str, values: &[f64]) -> Result<(), ExecError> {
        match self {
            Self::Cpu(cpu) => cpu.set(name, values),
            Self::Gpu(gpu) => gpu.set(name, values),
        }
    }

    /// Tensor `name`'s values (a persistent tensor, a gradient, a kept output).
    pub(super) fn read(&self, name: &str) -> Result<Vec<f64>, ExecError> {
        match self {
            Self::Cpu(cpu) => cpu.read(name),
            Self::Gpu(gpu) => gpu.read(name),
        }
    }

    /// AdamW's step count: the steps that updated the parameters.
    pub(super) fn steps(&self) -> u32 {
        match self {
            Self::Cpu(cpu) => cpu.steps(),
            Self::Gpu(gpu) => gpu.steps(),
        }
    }

    /// Sets AdamW's step count (resuming).
    pub(super) fn set_steps(&mut self, steps: u32) {
        match self {
            Self::Cpu(cpu) => cpu.set_steps(steps),
            Self::Gpu(gpu) => gpu.set_steps(steps),
        }
    }

    /// Sets the next update's learning rate.
    pub(super) fn set_learning_rate(&mut self, lr: f64) {
        match self {
            Self::Cpu(cpu) => cpu.set_learning_rate(lr as f32),
            Self::Gpu(gpu) => gpu.set_learning_rate(lr as f32),
        }
    }

    /// One step on `inputs`: the loss before the update, and whether the update was skipped
    /// (mixed precision: the scaled gradients overflowed, and the loss scale was lowered).
    pub(super) fn step(&mut self, inputs: &StepInputs) -> Result<(f64, bool), ExecError> {
        match self {
            Self::Cpu(cpu) => cpu.step(inputs).map(|loss| (loss, false)),
            Self::Gpu(gpu) => {
                let loss = gpu.step(inputs)?;
                Ok((f64::from(loss), gpu.last_step_skipped()))
            }
        }
    }

    /// [`step`](Self::step) on `inputs`, and while the GPU runs it, `next`'s inputs written for
    /// the step after ([`GpuStep::step_then_load`]); on the CPU, the step alone.
    pub(super) fn step_then_load(
        &mut self,
        inputs: &StepInputs,
        next: &StepInputs,
    ) -> Result<(f64, bool), ExecError> {
        match self {
            Self::Cpu(cpu) => cpu.step(inputs).map(|loss| (loss, false)),
            Self::Gpu(gpu) => {
                let loss = gpu.step_then_load(inputs, next)?;
                Ok((f64::from(loss), gpu.last_step_skipped()))
            }
        }
    }

    /// The forward alone on `inputs`: the loss; the kept outputs can be read after it.
    pub(super) fn evaluate(&mut self, inputs: &StepInputs) -> Result<f64, ExecError> {
        match self {
            Self::Cpu(cpu) => cpu.evaluate(inputs),
            Self::Gpu(gpu) => gpu.evaluate(inputs).map(f64::from),
        }
    }

    /// The forward and the backward on `inputs`, nothing updated: the loss; the gradients can
    /// be read after it.
    pub(super) fn forward_backward(&mut self, inputs: &StepInputs) -> Result<f64, ExecError> {
        match self {
            Self::Cpu(cpu) => cpu.forward_backward(inputs),
            Self::Gpu(gpu) => gpu.forward_backward(inputs).map(f64::from),
        }
    }

    /// Sets the parameters' gradients (`(parameter, values)`) for [`update`](Self::update).
    pub(super) fn set_grads(&mut self, grads: &[(String, Vec<f64>)]) -> Result<(), ExecError> {
        match self {
            Self::Cpu(cpu) => grads
                .iter()
                .try_for_each(|(param, values)| cpu.set_grad(param, values)),
            Self::Gpu(gpu) => gpu.set_grads(grads),
        }
    }

    /// The update alone, on the gradients as they are; whether it was skipped (loss scaling:
    /// a gradient overflowed).
    pub(super) fn update(&mut self) -> Result<bool, ExecError> {
        match self {
            Self::Cpu(cpu) => cpu.update().map(|()| false),
            Self::Gpu(gpu) => {
                gpu.update()?;
                Ok(gpu.last_step_skipped())
            }
        }
    }

    /// Whether a gradient that is not finite skips the step (loss scaling) rather than ends
    /// the run.
    pub(super) fn skips_overflows(&self) -> bool {
        self.loss_scale().is_some()
    }

    /// No update after [`forward_backward`](Self::forward_backward): the step skipped, the
    /// loss scale lowered (loss scaling only).
    pub(super) fn skip(&mut self) -> Result<(), ExecError> {
        match self {
            Self::Cpu(_) => Err(ExecError::LossScaling(
                "the CPU executor computes in f64: nothing is scaled, nothing skipped".into(),
            )),
            Self::Gpu(gpu) => gpu.skip(),
        }
    }

    /// Where loss scaling stands (mixed precision on the GPU).
    pub(super) fn loss_scale(&self) -> Option<LossScaleState> {
        match self {
            Self::Cpu(_) => None,
            Self::Gpu(gpu) => gpu.loss_scale_state(),
        }
    }

    /// Sets where loss scaling stands (resuming).
    pub(super) fn restore_loss_scale(&mut self, state: LossScaleState) -> Result<(), ExecError> {
        match self {
            Self::Cpu(_) => Err(ExecError::LossScaling(
                "the CPU executor computes in f64: nothing is scaled".into(),
            )),
            Self::Gpu(gpu) => gpu.restore_loss_scale(state),
        }
    }
}
