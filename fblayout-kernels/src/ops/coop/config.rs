//! Tile configurations of the cooperative-matrix GEMM.
//!
//! A [`CoopConfig`] says how big a block of C one workgroup computes (`block_m × block_n`),
//! how many 16×16 accumulator fragments each subgroup owns (`frags_m × frags_n`, so the block
//! holds `block_m / (16 · frags_m) × block_n / (16 · frags_n)` subgroups), how far along `k`
//! each staged step reaches (`k_step`, a multiple of 16), whether the staging is double-
//! buffered (`stages`: 2 lets the next step's loads overlap this step's multiplies) and the
//! accumulator's element type. [`CoopConfig::candidates`] lists the ones a device can build;
//! the autotune (`tune`) picks among them.

use std::fmt;
use std::str::FromStr;

use super::shader::{Order, staged_elements};
use crate::runtime::CoopScalar;

/// One tile configuration (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct CoopConfig {
    /// Rows of C per workgroup.
    pub block_m: u32,
    /// Columns of C per workgroup.
    pub block_n: u32,
    /// Accumulator fragments per subgroup along `m`.
    pub frags_m: u32,
    /// Accumulator fragments per subgroup along `n`.
    pub frags_n: u32,
    /// Elements of `k` per staged step (a multiple of 16).
    pub k_step: u32,
    /// Staging buffers: 1, or 2 to overlap loads with multiplies.
    pub stages: u32,
    /// The accumulator's element type (`F32` or `F16`).
    pub acc: CoopScalar,
}

/// The blocks and fragments per subgroup the candidates are made of: from four subgroups of
/// 2×2 fragments (which won at 4096³ on the H200) to eight or sixteen subgroups of 4×4 (more
/// fragments per staged block, for large products).
const SHAPES: [(u32, u32, u32, u32); 12] = [
    (64, 64, 2, 2),
    (128, 64, 4, 2),
    (64, 128, 2, 4),
    (128, 64, 2, 2),
    (64, 128, 2, 2),
    (128, 128, 4, 4),
    (128, 128, 4, 2),
    (128, 128, 2, 4),
    (128, 128, 2, 2),
    (256, 128, 4, 4),
    (128, 256, 4, 4),
    (256, 256, 4, 4),
];

impl CoopConfig {
    /// The configuration used before (or without) an autotune: 128×128 blocks of four
    /// subgroups with 4×4 fragments each, k-step 32, double-buffered.
    pub const DEFAULT: CoopConfig = CoopConfig {
        block_m: 128,
        block_n: 128,
        frags_m: 4,
        frags_n: 4,
        k_step: 32,
        stages: 2,
        acc: CoopScalar::F32,
    };

    /// A small configuration every device with cooperative matrices can build: 64×64 blocks
    /// of four subgroups with 2×2 fragments, k-step 16, one stage.
    pub const SMALL: CoopConfig = CoopConfig {
        block_m: 64,
        block_n: 64,
        frags_m: 2,
        frags_n: 2,
        k_step: 16,
        stages: 1,
        acc: CoopScalar::F32,
    };

    /// The same configuration with accumulator type `acc`.
    pub fn with_acc(self, acc: CoopScalar) -> Self {
        Self { acc, ..self }
    }

    /// Subgroups along `m` and along `n` of the block.
    pub fn subgroup_grid(&self) -> (u32, u32) {
        (
            self.block_m / (16 * self.frags_m),
            self.block_n / (16 * self.frags_n),
        )
    }

    /// Subgroups per workgroup.
    pub fn subgroups(&self) -> u32 {
        let (m, n) = self.subgroup_grid();
        m * n
    }

    /// Invocations per workgroup with subgroups of `subgroup_size` lanes.
    pub fn invocations(&self, subgroup_size: u32) -> u32 {
        self.subgroups() * subgroup_size
    }

    /// Bytes of workgroup memory the kernel takes for A and B staged in `orders`.
    pub fn workgroup_bytes(&self, orders: (Order, Order)) -> u32 {
        let staged = staged_elements(orders.0, self.block_m, self.k_step)
            + staged_elements(orders.1, self.block_n, self.k_step);
        let acc_bytes = match self.acc {
            CoopScalar::F16 => 2,
            _ => 4,
        };
        2 * staged * self.stages + acc_bytes * 256 * self.subgroups()
    }

    /// Why the configuration can't be built on a device with `limits` and subgroups of
    /// `subgroup_size` lanes, for operands staged in `orders`; `None` if it can.
    pub fn problem(
        &self,
        limits: &wgpu::Limits,
        subgroup_size: u32,
        orders: (Order, Order),
    ) -> Option<String> {
        let tiles = self.frags_m > 0
            && self.frags_n > 0
            && self.block_m.is_multiple_of(16 * self.frags_m)
            && self.block_n.is_multiple_of(16 * self.frags_n);
        if !tiles {
            return Some(format!(
                "{self}: the blocks are not whole numbers of 16×16 fragments per subgroup"
            ));
        }
        if self.k_step == 0 || !self.k_step.is_multiple_of(16) {
            return Some(format!("{self}: the k-step must be a multiple of 16"));
        }
        if !(1..=2).contains(&self.stages) {
            return Some(format!("{self}: 1 or 2 staging buffers"));
        }
        if !matches!(self.acc, CoopScalar::F32 | CoopScalar::F16) {
            return Some(format!("{self}: the accumulator is f32 or f16"));
        }
        let threads = self.invocations(subgroup_size);
        if threads > limits.max_compute_invocations_per_workgroup
            || threads > limits.max_compute_workgroup_size_x
        {
            return Some(format!(
                "{self}: {threads} invocations per workgroup; the device allows {}",
                limits.max_compute_invocations_per_workgroup
            ));
        }
        let bytes = self.workgroup_bytes(orders);
        if bytes > limits.max_compute_workgroup_storage_size {
            return Some(format!(
                "{self}: {bytes} bytes of workgroup memory; the device allows {}",
                limits.max_compute_workgroup_storage_size
            ));
        }
        None
    }

    /// Every configuration of the search space (blocks 64 to 256, 2×2 to 4×4 fragments per
    /// subgroup, k-steps 16, 32 and 64, one or two stages) with accumulator `acc`, before any
    /// device's limits.
    pub fn space(acc: CoopScalar) -> Vec<CoopConfig> {
        let mut all = Vec::new();
        for (block_m, block_n, frags_m, frags_n) in SHAPES {
            for k_step in [16, 32, 64] {
                for stages in [2, 1] {
                    all.push(CoopConfig {
                        block_m,
                        block_n,
                        frags_m,
                        frags_n,
                        k_step,
                        stages,
                        acc,
                    });
                }
            }
        }
        all
    }

    /// The configurations of [`space`](Self::space) a device can build (see
    /// [`problem`](Self::problem)), [`DEFAULT`](Self::DEFAULT) first when it is among them.
    pub fn candidates(
        limits: &wgpu::Limits,
        subgroup_size: u32,
        orders: (Order, Order),
        acc: CoopScalar,
    ) -> Vec<CoopConfig> {
        let mut list: Vec<CoopConfig> = Self::space(acc)
            .into_iter()
            .filter(|c| c.problem(limits, subgroup_size, orders).is_none())
            .collect();
        if let Some(at) = list.iter().position(|c| *c == Self::DEFAULT.with_acc(acc)) {
            let d = list.remove(at);
            list.insert(0, d);
        }
        list
    }
}

impl fmt::Display for CoopConfig {
    /// `128x128/4x4/k32/s2/f32`: block, fragments per subgroup, k-step, stages, accumulator
    /// (the form [`FromStr`] reads back).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}x{}/{}x{}/k{}/s{}/{}",
            self.block_m,
            self.block_n,
            self.frags_m,
            self.frags_n,
            self.k_step,
            self.stages,
            self.acc.wgsl()
        )
    }
}

/// Why a configuration did not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "`{text}` is not a cooperative-matrix configuration (expected e.g. 128x128/4x4/k32/s2/f32)"
)]
pub struct ParseConfigError {
    /// The text.
    pub text: String,
}

impl FromStr for CoopConfig {
    type Err = ParseConfigError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let err = || ParseConfigError {
            text: text.to_owned(),
        };
        let parts: Vec<&str> = text.trim().split('/').collect();
        let [block, frags, k, stages, acc] = parts.as_slice() else {
            return Err(err());
        };
        let pair = |s: &str| -> Option<(u32, u32)> {
            let (x, y) = s.split_once('x')?;
            Some((x.parse().ok()?, y.parse().ok()?))
        };
        let (block_m, block_n) = pair(block).ok_or_else(err)?;
        let (frags_m, frags_n) = pair(frags).ok_or_else(err)?;
        let k_step = k.strip_prefix('k').and_then(|v| v.parse().ok());
        let stages = stages.strip_prefix('s').and_then(|v| v.parse().ok());
        let acc = match *acc {
            "f32" => CoopScalar::F32,
            "f16" => CoopScalar::F16,
            _ => return Err(err()),
        };
        Ok(CoopConfig {
            block_m,
            block_n,
            frags_m,
            frags_n,
            k_step: k_step.ok_or_else(err)?,
            stages: stages.ok_or_else(err)?,
            acc,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn h200() -> wgpu::Limits {
        wgpu::Limits {
            max_compute_workgroup_storage_size: 48 << 10,
            max_compute_invocations_per_workgroup: 1024,
            max_compute_workgroup_size_x: 1024,
            ..wgpu::Limits::default()
        }
    }

    #[test]
    fn configurations_print_and_parse_back() {
        for c in CoopConfig::space(CoopScalar::F32)
            .into_iter()
            .chain(CoopConfig::space(CoopScalar::F16))
        {
            assert_eq!(c.to_string().parse::<CoopConfig>().unwrap(), c);
        }
        assert_eq!(CoopConfig::DEFAULT.to_string(), "128x128/4x4/k32/s2/f32");
        assert!("128x128/4x4/k32".parse::<CoopConfig>().is_err());
        assert!("128x128/4x4/k32/s2/i8".parse::<CoopConfig>().is_err());
    }

    #[test]
    fn candidates_fit_the_device_and_put_the_default_first() {
        let orders = (Order::OuterRows, Order::KRows);
        let list = CoopConfig::candidates(&h200(), 32, orders, CoopScalar::F32);
        assert_eq!(list[0], CoopConfig::DEFAULT);
        assert!(list.len() > 10, "{}", list.len());
        for c in &list {
            assert!(c.workgroup_bytes(orders) <= 48 << 10, "{c}");
            assert_eq!(c.block_m % (16 * c.frags_m), 0);
        }
        // 128×128 at k-step 64, double-buffered: 2 · (2 · 128 · 72) · 2 bytes > 48 KiB.
        let big = CoopConfig {
            k_step: 64,
            ..CoopConfig::DEFAULT
        };
        assert!(
            big.problem(&h200(), 32, orders)
                .unwrap()
                .contains("workgroup memory")
        );
    }
}
