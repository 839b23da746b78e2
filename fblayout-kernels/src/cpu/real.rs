//! Element types of the CPU kernels.

/// A floating-point element type: stored as itself, computed with as `f64`.
pub trait Real: Copy + Send + Sync + PartialEq + std::fmt::Debug + 'static {
    /// The layout element type that stores it, where WGSL has one (`f64` has none).
    const ELEM: fblayout_core::layout::ElemType;
    /// The unit round-off of the type (half the distance from 1 to the next value): what
    /// tolerances are scaled by.
    const EPSILON: f64;

    /// The value as an `f64`.
    fn to_f64(self) -> f64;
    /// The nearest value to `v`.
    fn from_f64(v: f64) -> Self;
}

impl Real for f32 {
    const ELEM: fblayout_core::layout::ElemType = fblayout_core::layout::ElemType::F32;
    const EPSILON: f64 = f32::EPSILON as f64 / 2.0;

    fn to_f64(self) -> f64 {
        f64::from(self)
    }
    fn from_f64(v: f64) -> Self {
        v as f32
    }
}

impl Real for f64 {
    const ELEM: fblayout_core::layout::ElemType = fblayout_core::layout::ElemType::F64;
    const EPSILON: f64 = f64::EPSILON / 2.0;

    fn to_f64(self) -> f64 {
        self
    }
    fn from_f64(v: f64) -> Self {
        v
    }
}

impl Real for half::f16 {
    const ELEM: fblayout_core::layout::ElemType = fblayout_core::layout::ElemType::F16;
    const EPSILON: f64 = 1.0 / 2048.0;

    fn to_f64(self) -> f64 {
        self.to_f64()
    }
    fn from_f64(v: f64) -> Self {
        half::f16::from_f64(v)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `EPSILON` is the unit round-off: 1 + 2·EPSILON is the next value after 1, and a value
    /// less than EPSILON above 1 rounds back to 1.
    fn check_unit_roundoff<T: Real>() {
        let eps = T::EPSILON;
        assert_eq!(T::from_f64(1.0 + 2.0 * eps).to_f64(), 1.0 + 2.0 * eps);
        assert_eq!(T::from_f64(1.0 + 0.9 * eps).to_f64(), 1.0);
        assert_eq!(T::from_f64(1.0 + 1.1 * eps).to_f64(), 1.0 + 2.0 * eps);
    }

    #[test]
    fn epsilons_are_the_unit_round_off() {
        check_unit_roundoff::<f32>();
        check_unit_roundoff::<half::f16>();
        assert_eq!(f32::from_f64(0.5).to_f64(), 0.5);
        // f64 stores exactly what it computes.
        assert_eq!(f64::from_f64(0.1 + 0.2).to_f64(), 0.1 + 0.2);
    }
}
