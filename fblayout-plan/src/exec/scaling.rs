//! Dynamic loss scaling for `f16` gradients.
//!
//! A mixed-precision step ([`precision::mixed`](crate::graph::precision::mixed)) computes its
//! gradients in `f16`, whose smallest normal value is about 6·10⁻⁵: many gradients of a
//! transformer are smaller and would flush to zero. So the backward starts from the loss's
//! gradient multiplied by a scale `S`, every gradient comes out `S` times too large, and AdamW
//! divides it back (`grad_scale = 1/S`). Too large a scale overflows `f16` to infinity, which
//! reaches the parameters' gradients as infinities or NaNs; a check of every parameter's
//! gradient then sets a flag, the device skips that step's update (a gated AdamW), and the
//! scale is lowered. After `interval` steps without an
//! overflow it is raised again, so it stays near the largest that fits. (PyTorch's
//! `GradScaler` does the same, with the same defaults.)

/// How the loss scale moves.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LossScaling {
    /// The first step's scale.
    pub initial: f32,
    /// The factor the scale grows by after `interval` steps without an overflow.
    pub growth: f32,
    /// The factor the scale shrinks by on an overflow (below 1).
    pub backoff: f32,
    /// Steps without an overflow before the scale grows.
    pub interval: u32,
}

impl Default for LossScaling {
    /// PyTorch's `GradScaler` defaults: 2¹⁶, ×2 every 2000 good steps, ×½ on an overflow.
    fn default() -> Self {
        Self {
            initial: 65536.0,
            growth: 2.0,
            backoff: 0.5,
            interval: 2000,
        }
    }
}

impl LossScaling {
    /// Checks that the scale starts finite and positive, grows, shrinks, and grows after at
    /// least one step.
    pub fn check(&self) -> Result<(), String> {
        let positive = |x: f32| x.is_finite() && x > 0.0;
        if !positive(self.initial) {
            return Err(format!(
                "the initial loss scale is {}; it must be finite and positive",
                self.initial
            ));
        }
        if !(self.growth.is_finite() && self.growth >= 1.0) {
            return Err(format!(
                "the growth factor is {}; it must be ≥ 1",
                self.growth
            ));
        }
        if !(positive(self.backoff) && self.backoff < 1.0) {
            return Err(format!(
                "the backoff factor is {}; it must be in (0, 1)",
                self.backoff
            ));
        }
        if self.interval == 0 {
            return Err("the growth interval must be at least one step".into());
        }
        Ok(())
    }
}

/// Where dynamic loss scaling stands between steps: what a checkpoint keeps so that a resumed
/// run scales its next step as an uninterrupted run would.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LossScaleState {
    /// The scale the next step multiplies the loss's gradient by.
    pub scale: f32,
    /// Steps without an overflow since the scale last moved.
    pub good: u32,
}

/// The scale of the next step and the steps since the last overflow.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct LossScaler {
    config: LossScaling,
    scale: f32,
    good: u32,
}

impl LossScaler {
    pub(crate) fn new(config: LossScaling) -> Result<Self, String> {
        config.check()?;
        Ok(Self {
            config,
            scale: config.initial,
            good: 0,
        })
    }

    /// The scale the next step multiplies the loss's gradient by.
    pub(crate) fn scale(&self) -> f32 {
        self.scale
    }

    /// Where it stands.
    pub(crate) fn state(&self) -> LossScaleState {
        LossScaleState {
            scale: self.scale,
            good: self.good,
        }
    }

    /// Sets where it stands (a checkpoint's [`state`](Self::state)); an error where the scale
    /// is not finite and positive or the count reaches the growth interval.
    pub(crate) fn restore(&mut self, state: LossScaleState) -> Result<(), String> {
        if !(state.scale.is_finite() && state.scale > 0.0) {
            return Err(format!(
                "the loss scale is {}; it must be finite and positive",
                state.scale
            ));
        }
        if state.good >= self.config.interval {
            return Err(format!(
                "{} steps without an overflow: the scale grows after {}",
                state.good, self.config.interval
            ));
        }
        self.scale = state.scale;
        self.good = state.good;
        Ok(())
    }

    /// Moves the scale after a step whose gradients `overflowed` (an infinity or a NaN) or
    /// not; returns whether it overflowed (and so was skipped).
    pub(crate) fn update(&mut self, overflowed: bool) -> bool {
        if !overflowed {
            self.good += 1;
            if self.good >= self.config.interval {
                let grown = self.scale * self.config.growth;
                // Past f32's range the scale stays where it is.
                if grown.is_finite() {
                    self.scale = grown;
                }
                self.good = 0;
            }
            false
        } else {
            // Never below the smallest positive f32: a scale of zero would zero every gradient.
            self.scale = (self.scale * self.config.backoff).max(f32::MIN_POSITIVE);
            self.good = 0;
            true
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_scale_halves_on_an_overflow_and_doubles_after_the_interval() {
        let mut s = LossScaler::new(LossScaling {
            interval: 3,
            ..LossScaling::default()
        })
        .unwrap();
        assert_eq!(s.scale(), 65536.0);
        assert!(s.update(true));
        assert_eq!(s.scale(), 32768.0);
        assert!(s.update(true));
        assert_eq!(s.scale(), 16384.0);
        for _ in 0..2 {
            assert!(!s.update(false));
            assert_eq!(s.scale(), 16384.0);
        }
        assert!(!s.update(false));
        assert_eq!(s.scale(), 32768.0);
        // An overflow restarts the count.
        assert!(!s.update(false));
        assert!(s.update(true));
        for _ in 0..2 {
            s.update(false);
        }
        assert_eq!(s.scale(), 16384.0);
        s.update(false);
        assert_eq!(s.scale(), 32768.0);
    }

    #[test]
    fn the_scale_stays_finite_and_positive() {
        let mut s = LossScaler::new(LossScaling {
            initial: f32::MAX,
            interval: 1,
            ..LossScaling::default()
        })
        .unwrap();
        s.update(false);
        assert_eq!(s.scale(), f32::MAX);
        for _ in 0..300 {
            s.update(true);
        }
        assert_eq!(s.scale(), f32::MIN_POSITIVE);
    }

    #[test]
    fn a_restored_state_continues_as_the_saved_one_would() {
        let config = LossScaling {
            interval: 3,
            ..LossScaling::default()
        };
        let mut run = LossScaler::new(config).unwrap();
        run.update(true);
        run.update(false);
        let mut resumed = LossScaler::new(config).unwrap();
        resumed.restore(run.state()).unwrap();
        assert_eq!(
            resumed.state(),
            LossScaleState {
                scale: 32768.0,
                good: 1
            }
        );
        for overflowed in [false, false, true, false] {
            assert_eq!(run.update(overflowed), resumed.update(overflowed));
            assert_eq!(run.state(), resumed.state());
        }
        for bad in [
            LossScaleState {
                scale: 0.0,
                good: 0,
            },
            LossScaleState {
                scale: f32::NAN,
                good: 0,
            },
            LossScaleState {
                scale: 1.0,
                good: 3,
            },
        ] {
            assert!(resumed.restore(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn bad_settings_are_refused_with_their_cause() {
        let bad = [
            LossScaling {
                initial: 0.0,
                ..LossScaling::default()
            },
            LossScaling {
                initial: f32::INFINITY,
                ..LossScaling::default()
            },
            LossScaling {
                growth: 0.5,
                ..LossScaling::default()
            },
            LossScaling {
                backoff: 1.0,
                ..LossScaling::default()
            },
            LossScaling {
                interval: 0,
                ..LossScaling::default()
            },
        ];
        for config in bad {
            assert!(LossScaler::new(config).is_err(), "{config:?}");
        }
    }
}
