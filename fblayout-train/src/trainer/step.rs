//! One training step (with gradient accumulation and clipping) and one evaluation.

use fblayout_plan::exec::{ExecError, StepInputs};
use fblayout_plan::models::bert::class_labels;

use super::metrics::{LOGITS, correct};
use super::setup::exec;
use super::{EvalResult, Task, TrainError, Trainer};
use crate::data::{Batches, DataPosition, Example, IGNORED};

/// The error of step `step` where the executor found a loss or gradient not finite.
fn non_finite(step: u32, what: &str) -> impl FnOnce(ExecError) -> TrainError + '_ {
    move |e| match e {
        ExecError::NonFinite { what, .. } => TrainError::NonFinite { step, what },
        source => TrainError::Exec {
            what: what.to_owned(),
            source,
        },
    }
}

impl Trainer<'_> {
    /// The inputs of a batch of `rows` (fewer rows than the batch are filled with padding
    /// that counts for nothing), and the labels it counts (tokens, or sequences).
    ///
    /// A classifier (BERT) also reads `token_types` (0: one segment) and `mask`, 1 at each
    /// token and 0 at the padding (the tokenizer pads with the padding id, which no text
    /// encodes to); a row of padding alone keeps its first position, so that its attention
    /// has a key.
    fn inputs(&self, rows: &[&Example]) -> (StepInputs, u64) {
        let (batch, seq) = (self.settings.batch as usize, self.settings.seq as usize);
        let classify = self.settings.task == Task::Classify;
        let mut ids = Vec::with_capacity(batch * seq);
        let mut labels = Vec::with_capacity(batch * seq);
        for r in 0..batch {
            match rows.get(r) {
                Some(e) => {
                    ids.extend_from_slice(&e.ids);
                    if classify {
                        labels.extend(class_labels(&e.labels[..1], seq));
                    } else {
                        labels.extend_from_slice(&e.labels);
                    }
                }
                None => {
                    ids.extend(std::iter::repeat_n(self.pad, seq));
                    labels.extend(std::iter::repeat_n(IGNORED, seq));
                }
            }
        }
        let counted = labels.iter().filter(|&&l| l != IGNORED).count() as u64;
        let positions = (0..batch * seq).map(|i| (i % seq) as u32).collect();
        let mask: Vec<u32> = ids
            .iter()
            .enumerate()
            .map(|(i, &id)| u32::from(id != self.pad || i % seq == 0))
            .collect();
        let mut inputs = StepInputs::new(ids, positions, labels);
        if classify {
            inputs = inputs
                .with("token_types", vec![0; batch * seq])
                .with("mask", mask);
        }
        (inputs, counted)
    }

    /// The inputs of the next batch drawn from `batches`.
    fn next_inputs(&self, batches: &mut Batches) -> (StepInputs, u64) {
        let rows: Vec<&Example> = batches
            .next_batch(self.settings.batch as usize)
            .into_iter()
            .map(|i| &self.train[i])
            .collect();
        self.inputs(&rows)
    }

    /// Step `step` at learning rate `lr`: its loss (the mean over its micro-batches), the
    /// tokens it trained on, whether its update was skipped (mixed precision's scaled
    /// gradients overflowed), and where the data stands after its batches (what a checkpoint
    /// after it records). A loss that is not finite stops the run, skipped or not: the model
    /// has diverged, and no scale mends that.
    ///
    /// A step of one batch draws the next step's batch too, where one follows, and has the
    /// executor write its inputs while the GPU runs this step
    /// ([`Executor::step_then_load`](super::executor::Executor::step_then_load));
    /// the next step takes it from `pending`. Batches are drawn in the same order either way,
    /// and the position returned is the one after this step's own batch.
    pub(super) fn train_step(
        &mut self,
        batches: &mut Batches,
        step: u32,
        lr: f64,
    ) -> Result<(f64, u64, bool, DataPosition), TrainError> {
        self.exec.set_learning_rate(lr);
        let s = &self.settings;
        if s.accumulate == 1 && s.clip.is_none() {
            let (inputs, tokens) = match self.pending.take() {
                Some(drawn) => drawn,
                None => self.next_inputs(batches),
            };
            let position = batches.position();
            let result = if step < self.settings.steps {
                let next = self.next_inputs(batches);
                let result = self.exec.step_then_load(&inputs, &next.0);
                self.pending = Some(next);
                result
            } else {
                self.exec.step(&inputs)
            };
            let (loss, skipped) = result.map_err(non_finite(step, "the step"))?;
            if !loss.is_finite() {
                return Err(TrainError::NonFinite {
                    step,
                    what: format!("loss ({loss})"),
                });
            }
            return Ok((loss, tokens, skipped, position));
        }
        let (micro, clip) = (s.accumulate, s.clip);
        let next: Vec<(StepInputs, u64)> = (0..micro).map(|_| self.next_inputs(batches)).collect();
        let g = self.exec.graph();
        // Each trained parameter and the name of its gradient.
        let params: Vec<(String, String)> = g
            .params()
            .into_iter()
            .filter_map(|p| {
                let grad = g.grad(p)?;
                Some((g.tensor(p).name.clone(), g.tensor(grad).name.clone()))
            })
            .collect();
        let mut sums: Vec<Vec<f64>> = Vec::with_capacity(params.len());
        let (mut loss, mut tokens) = (0.0, 0);
        for (inputs, counted) in &next {
            let l = self
                .exec
                .forward_backward(inputs)
                .map_err(non_finite(step, "the step"))?;
            if !l.is_finite() {
                return Err(TrainError::NonFinite {
                    step,
                    what: format!("loss ({l})"),
                });
            }
            loss += l;
            tokens += *counted;
            for (k, (_, grad)) in params.iter().enumerate() {
                let g = self.exec.read(grad).map_err(exec("reading a gradient"))?;
                match sums.get_mut(k) {
                    Some(sum) => sum.iter_mut().zip(&g).for_each(|(s, x)| *s += x),
                    None => sums.push(g),
                }
            }
        }
        let mean = 1.0 / f64::from(micro);
        let norm = sums
            .iter()
            .flatten()
            .map(|g| (g * mean) * (g * mean))
            .sum::<f64>()
            .sqrt();
        if !norm.is_finite() {
            // An overflow of mixed precision's scaled gradients skips the step; in f32 (or
            // f64) nothing explains it, and the run stops.
            if self.exec.skips_overflows() {
                self.exec.skip().map_err(exec("skipping the step"))?;
                return Ok((loss * mean, tokens, true, batches.position()));
            }
            let name = params
                .iter()
                .zip(&sums)
                .find(|(_, s)| s.iter().any(|x| !x.is_finite()))
                .map_or("a parameter", |((p, _), _)| p.as_str());
            return Err(TrainError::NonFinite {
                step,
                what: format!("gradient of `{name}`"),
            });
        }
        let scale = match clip {
            Some(max) if norm > max => mean * max / norm,
            _ => mean,
        };
        let grads: Vec<(String, Vec<f64>)> = params
            .into_iter()
            .zip(sums)
            .map(|((p, _), sum)| (p, sum.into_iter().map(|x| x * scale).collect()))
            .collect();
        self.exec
            .set_grads(&grads)
            .map_err(exec("setting the gradients"))?;
        let skipped = self.exec.update().map_err(non_finite(step, "the update"))?;
        Ok((loss * mean, tokens, skipped, batches.position()))
    }

    /// Evaluates the held-out set after step `step`: the mean loss over its labels and, for a
    /// classifier, the accuracy (from the logits the memory plan keeps).
    pub(super) fn eval_at(&mut self, step: u32) -> Result<EvalResult, TrainError> {
        let (mut total, mut counted, mut right) = (0.0, 0u64, 0u64);
        let batch = self.settings.batch as usize;
        let classify = self.settings.task == Task::Classify;
        for chunk in 0..self.eval.len().div_ceil(batch) {
            let rows: Vec<&Example> = self.eval[chunk * batch..].iter().take(batch).collect();
            let (inputs, n) = self.inputs(&rows);
            let loss = self.exec.evaluate(&inputs).map_err(exec("evaluating"))?;
            total += loss * n as f64;
            counted += n;
            if classify {
                let logits = self.exec.read(LOGITS).map_err(exec("reading the logits"))?;
                let labels: Vec<u32> = rows.iter().map(|e| e.labels[0]).collect();
                let seq = self.settings.seq as usize;
                let classes = logits.len() / (batch * seq);
                right += correct(&logits, seq, classes, &labels);
            }
        }
        let loss = total / counted.max(1) as f64;
        Ok(EvalResult {
            step,
            loss,
            perplexity: loss.exp(),
            accuracy: classify.then(|| right as f64 / self.eval.len() as f64),
        })
    }
}
