//! Random inputs of the layer, and how close two runs of it are.

use std::collections::BTreeMap;

use super::plan::{Kind, Plan};

/// The tensors the layer reads and does not compute: the input, the weights and the gradient of
/// the output.
pub(crate) const INPUTS: &[&str] = &[
    "x", "wqkv", "bqkv", "wo", "bo", "w1", "b1", "w2", "b2", "g1", "be1", "g2", "be2", "d_out",
];

/// What the comparison of the two backends checks: the output, every gradient of a weight and
/// the gradient of the input.
pub(crate) const RESULTS: &[&str] = &[
    "out", "d_x", "d_wqkv", "d_bqkv", "d_wo", "d_bo", "d_w1", "d_b1", "d_w2", "d_b2", "d_g1",
    "d_be1", "d_g2", "d_be2",
];

/// Logical values (row-major over each tensor's declared shape) of the inputs.
#[derive(Debug, Clone)]
pub(crate) struct Data {
    values: BTreeMap<&'static str, Vec<f64>>,
}

/// A small deterministic generator (xorshift64*).
struct Rng(u64);

impl Rng {
    fn uniform(&mut self, lo: f64, hi: f64) -> f64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        let unit = (x.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 11) as f64 / (1u64 << 53) as f64;
        lo + (hi - lo) * unit
    }
}

impl Data {
    /// Random inputs for `plan`: activations and output gradients in [−1, 1), weights uniform
    /// in ±1/√d_in (the usual initialisation scale), biases in ±0.1, LayerNorm scales around 1.
    pub(crate) fn random(plan: &Plan, seed: u64) -> Result<Self, String> {
        let mut rng = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
        let mut values = BTreeMap::new();
        for &name in INPUTS {
            let bound = plan
                .view(name)
                .bind(&plan.bind(name))
                .map_err(|e| e.to_string())?;
            let n = bound.logical_len() as usize;
            let (lo, hi) = match (plan.decl(name).kind, name) {
                (Kind::Weight, _) => {
                    let fan_in = bound.shape()[0] as f64;
                    (-1.0 / fan_in.sqrt(), 1.0 / fan_in.sqrt())
                }
                (_, "g1" | "g2") => (0.8, 1.2),
                (Kind::Vector, _) => (-0.1, 0.1),
                _ => (-1.0, 1.0),
            };
            values.insert(name, (0..n).map(|_| rng.uniform(lo, hi)).collect());
        }
        Ok(Self { values })
    }

    /// The values of input `name`, if it is one.
    pub(crate) fn get(&self, name: &str) -> Option<&[f64]> {
        self.values.get(name).map(Vec::as_slice)
    }
}

/// `‖a − b‖ / ‖b‖`, or infinity where a value is not finite (an element never written).
pub(crate) fn relative_error(a: &[f64], b: &[f64]) -> f64 {
    if a.len() != b.len() || a.iter().chain(b).any(|v| !v.is_finite()) {
        return f64::INFINITY;
    }
    let diff: f64 = a.iter().zip(b).map(|(x, y)| (x - y) * (x - y)).sum();
    let norm: f64 = b.iter().map(|y| y * y).sum();
    (diff / norm.max(f64::MIN_POSITIVE)).sqrt()
}
