//! The learning rate of each step: a linear warmup from 0, then a linear or cosine decay to 0
//! at the last step — transformers' `get_linear_schedule_with_warmup` and
//! `get_cosine_schedule_with_warmup` (one half-period), or a constant rate after the warmup.

use std::f64::consts::PI;

/// How the rate decays after the warmup.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Decay {
    /// Linearly to 0 at the last step.
    #[default]
    Linear,
    /// Along half a cosine period to 0 at the last step.
    Cosine,
    /// Not at all.
    Constant,
}

/// A schedule over `total` steps (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Schedule {
    /// The rate at the end of the warmup.
    pub peak: f64,
    /// The steps of the warmup.
    pub warmup: u32,
    /// The steps of the run.
    pub total: u32,
    /// The decay after the warmup.
    pub decay: Decay,
}

impl Schedule {
    /// The rate of the step taken after `done` steps (`done` from 0): `peak · done / warmup`
    /// during the warmup, then `peak · f(p)` with `p = (done − warmup) / (total − warmup)`,
    /// `f(p) = 1 − p` (linear), `(1 + cos πp) / 2` (cosine) or 1 (constant); 0 past the end.
    pub fn rate(&self, done: u32) -> f64 {
        if done < self.warmup {
            return self.peak * f64::from(done) / f64::from(self.warmup);
        }
        let span = f64::from(self.total.saturating_sub(self.warmup).max(1));
        let p = (f64::from(done - self.warmup) / span).min(1.0);
        self.peak
            * match self.decay {
                Decay::Linear => 1.0 - p,
                Decay::Cosine => 0.5 * (1.0 + (PI * p).cos()),
                Decay::Constant => 1.0,
            }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Worked by hand: peak 1e-3, warmup 2, total 6, so the decay spans 4 steps.
    #[test]
    fn rates_match_the_values_worked_by_hand() {
        let s = |decay| Schedule {
            peak: 1e-3,
            warmup: 2,
            total: 6,
            decay,
        };
        // Warmup: 0, 1/2 of the peak. Linear: 1, 3/4, 1/2, 1/4, then 0.
        let linear = [0.0, 0.5e-3, 1e-3, 0.75e-3, 0.5e-3, 0.25e-3, 0.0, 0.0];
        // Cosine at p = 0, 1/4, 1/2, 3/4, 1: (1 + cos πp)/2 = 1, (2 + √2)/4, 1/2, (2 − √2)/4, 0.
        let r2 = std::f64::consts::SQRT_2;
        let cosine = [
            0.0,
            0.5e-3,
            1e-3,
            1e-3 * (2.0 + r2) / 4.0,
            0.5e-3,
            1e-3 * (2.0 - r2) / 4.0,
            0.0,
            0.0,
        ];
        for (done, (l, c)) in linear.iter().zip(&cosine).enumerate() {
            let done = done as u32;
            // Within a few ulps of the hand values (f64 rounding of cos and division).
            assert!(
                (s(Decay::Linear).rate(done) - l).abs() < 1e-15,
                "linear {done}"
            );
            assert!(
                (s(Decay::Cosine).rate(done) - c).abs() < 1e-15,
                "cosine {done}"
            );
        }
        assert_eq!(s(Decay::Constant).rate(5), 1e-3);
        let no_warmup = Schedule {
            warmup: 0,
            ..s(Decay::Linear)
        };
        assert_eq!(no_warmup.rate(0), 1e-3);
        assert!((no_warmup.rate(3) - 0.5e-3).abs() < 1e-15);
    }
}
