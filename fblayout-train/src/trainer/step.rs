//! One training step (with gradient accumulation and clipping) and one evaluation.

use fblayout_plan::exec::{ExecError, StepInputs};
use fblayout_plan::models::bert::class_labels;

use super::metrics::{LOGITS, correct};
use super::setup::exec;
use super::{EvalResult, Task, TrainError, Trainer};
use crate::data::{Batches, Example, IGNORED};

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

impl Trainer {
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

    /// Step `step` at learning rate `lr`: its loss (the mean over its micro-batches) and the
    /// tokens it trained on.
    pub(super) fn train_step(
        &mut self,
        batches: &mut Batches,
        step: u32,
        lr: f64,
    ) -> Result<(f64, u64), TrainError> {
        self.cpu.set_learning_rate(lr as f32);
        let s = &self.settings;
        if s.accumulate == 1 && s.clip.is_none() {
            let (inputs, tokens) = self.next_inputs(batches);
            let loss = self
                .cpu
                .step(&inputs)
                .map_err(non_finite(step, "the step"))?;
            return Ok((loss, tokens));
        }
        let (micro, clip) = (s.accumulate, s.clip);
        let params: Vec<String> = {
            let g = self.cpu.graph();
            g.params()
                .into_iter()
                .map(|p| g.tensor(p).name.clone())
                .collect()
        };
        let grad_names: Vec<String> = {
            let g = self.cpu.graph();
            g.params()
                .into_iter()
                .map(|p| {
                    g.grad(p)
                        .map_or_else(String::new, |d| g.tensor(d).name.clone())
                })
                .collect()
        };
        let mut sums: Vec<Vec<f64>> = Vec::new();
        let (mut loss, mut tokens) = (0.0, 0);
        for _ in 0..micro {
            let (inputs, counted) = self.next_inputs(batches);
            let l = self
                .cpu
                .forward_backward(&inputs)
                .map_err(non_finite(step, "the step"))?;
            if !l.is_finite() {
                return Err(TrainError::NonFinite {
                    step,
                    what: format!("loss ({l})"),
                });
            }
            loss += l;
            tokens += counted;
            for (k, name) in grad_names.iter().enumerate() {
                let g = self.cpu.read(name).map_err(exec("reading a gradient"))?;
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
        let scale = match clip {
            Some(max) if norm > max => mean * max / norm,
            _ => mean,
        };
        for (name, sum) in params.iter().zip(&sums) {
            let g: Vec<f64> = sum.iter().map(|x| x * scale).collect();
            self.cpu
                .set_grad(name, &g)
                .map_err(exec("setting a gradient"))?;
        }
        self.cpu.update().map_err(non_finite(step, "the update"))?;
        Ok((loss * mean, tokens))
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
            let loss = self.cpu.evaluate(&inputs).map_err(exec("evaluating"))?;
            total += loss * n as f64;
            counted += n;
            if classify {
                let logits = self.cpu.read(LOGITS).map_err(exec("reading the logits"))?;
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
