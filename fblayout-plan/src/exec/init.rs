//! The initial values of parameters, drawn from a seed.

use crate::graph::{Graph, Op, Sizes, TensorId};

/// A small deterministic generator (xorshift64*).
pub(crate) struct Rng(u64);

impl Rng {
    pub(crate) fn new(seed: u64) -> Self {
        Self(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// Uniform in `[lo, hi)`.
    pub(crate) fn uniform(&mut self, lo: f64, hi: f64) -> f64 {
        let unit = (self.next() >> 11) as f64 / (1u64 << 53) as f64;
        lo + (hi - lo) * unit
    }

    /// Uniform in `0..n` (`n` at least 1).
    pub(crate) fn below(&mut self, n: u32) -> u32 {
        (self.next() % u64::from(n.max(1))) as u32
    }
}

/// The initial logical values (row-major) of parameter `param` of `graph` from `seed`,
/// following what the first operation that reads it (or a copy of it in another layout or
/// element type) does with it: a linear weight
/// `[d_in, d_out]` uniform in ±1/√d_in, an embedding table uniform in ±1, a norm's scale in
/// [0.8, 1.2), a bias or a norm's shift in ±0.1. Each parameter draws from its own stream
/// (`seed` and its id), so values don't depend on the other parameters.
pub fn initial_values(graph: &Graph, param: TensorId, seed: u64) -> Vec<f64> {
    let tensor = graph.tensor(param);
    // Parameters have fixed extents: the run's sizes don't matter.
    let fixed = Sizes { batch: 1, seq: 1 };
    let n = tensor.elements(fixed) as usize;
    let reader = first_reader(graph, param);
    // Whether the first reader reads it as a linear layer's weight (a fused head's included).
    let linear = reader.is_some_and(|(op, k)| {
        op.linear_weight()
            .is_some_and(|role| op.input_roles().get(k) == Some(&role))
    });
    let (lo, hi) = match reader {
        _ if linear => {
            let fan_in = f64::from(tensor.axes[0].dim.value(fixed));
            (-1.0 / fan_in.sqrt(), 1.0 / fan_in.sqrt())
        }
        Some((Op::Embedding, _)) => (-1.0, 1.0),
        Some((op @ (Op::LayerNorm { .. } | Op::RmsNorm { .. }), k))
            if op.input_roles().get(k) == Some(&"gamma") =>
        {
            (0.8, 1.2)
        }
        _ => (-0.1, 0.1),
    };
    let mut rng = initial_values_rng(param, seed);
    (0..n).map(|_| rng.uniform(lo, hi)).collect()
}

/// The stream parameter `param` draws its initial values from, for `seed`.
fn initial_values_rng(param: TensorId, seed: u64) -> Rng {
    Rng::new(seed ^ (u64::from(param.0) << 32))
}

/// The stream a tensor named `name` draws its initial values from, for `seed`: the same in
/// any graph that has a tensor of that name, whatever else the graph holds (FNV-1a of the
/// name).
pub(crate) fn named_rng(name: &str, seed: u64) -> Rng {
    let hash = name.bytes().fold(0xCBF2_9CE4_8422_2325_u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01B3)
    });
    Rng::new(seed ^ hash)
}

/// The first operation that reads `t`, or a copy of it (a parameter's copy, or through
/// conversions), and the position it reads it at.
fn first_reader(graph: &Graph, t: TensorId) -> Option<(Op, usize)> {
    let copies = graph.copies_of(t);
    let (node, k) = graph.nodes().iter().find_map(|node| {
        node.inputs
            .iter()
            .position(|&i| i == t || copies.contains(&i))
            .map(|k| (node, k))
    })?;
    match node.op {
        Op::Convert { .. } => first_reader(graph, node.outputs[0]),
        op => Some((op, k)),
    }
}
