//! Tile configurations of the cooperative-matrix GEMM.
//!
//! A [`CoopConfig`] says how big a block of C one workgroup computes (`block_m × block_n`),
//! how many 16×16 accumulator fragments each subgroup owns (`frags_m × frags_n`, so the block
//! holds `block_m / (16 · frags_m) × block_n / (16 · frags_n)` subgroups), how far along `k`
//! each staged step reaches (`k_step`, a multiple of 16), whether the staging is double-
//! buffered (`stages`: 2 lets the next step's loads overlap this step's multiplies), the
//! accumulator's element type, and how many parts the reduction is split into (`split_k`).
//! [`CoopConfig::candidates`] lists the unsplit ones a device can build;
//! [`CoopConfig::split_candidates`] those for one problem where products of few blocks of C
//! and a long `k` get split-k variants instead. The autotune (`tune`) picks among them.
//!
//! **Split-k.** With `split_k = s > 1` the reduction over `k` is cut into `s` parts of whole
//! k-steps; the workgroups of each part write their f32 sums into a workspace of partial
//! products (`[product, part, rows, cols]`, padded to whole blocks, taken as scratch of the
//! batch per record), and a second kernel adds the parts up in part order (so the result does
//! not depend on scheduling) and writes C through C's view. It can pay where C has too few blocks
//! to occupy the device (the weight gradient `Xᵀ·dY` of a linear layer: 384 × 1536 outputs,
//! 4096 tokens); it costs writing and reading back `s` partial products of C's size.

use std::fmt;
use std::str::FromStr;

use super::shader::{Order, staged_elements};
use crate::ops::matmul::GemmShape;
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
    /// Parts the reduction is split into (1: no split; more needs the f32 accumulator).
    pub split_k: u32,
}

/// The splits of the reduction [`CoopConfig::split_candidates`] tries.
pub const SPLITS: [u32; 3] = [2, 4, 8];

/// Each part of a split reduction spans at least this many k-steps (a threshold chosen, not
/// yet measured: a short part spends much of its time filling the staging pipeline and
/// storing its fragments).
pub const MIN_STEPS_PER_PART: u32 = 8;

/// The blocks and fragments per subgroup the candidates are made of: from four subgroups of
/// 2×2 fragments (which won at 4096³ on the H200) to eight or sixteen subgroups of 4×4 (more
/// fragments per staged block, for large products), and blocks 32 wide of two or four
/// subgroups for outputs of few columns (attention's products at a head width of 32).
const SHAPES: [(u32, u32, u32, u32); 15] = [
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
    (64, 32, 2, 2),
    (128, 32, 2, 2),
    (128, 32, 4, 2),
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
        split_k: 1,
    };

    /// A small configuration every device with cooperative matrices can build: 64×64 blocks
    /// of four subgroups with 2×2 fragments, k-step 16, one stage.
    pub const SMALL: CoopConfig = Self::single_staged(64, 64, 2, 2, 16);

    /// The block shapes split-k candidates are made of (each with splits of [`SPLITS`]): the
    /// default, the configurations the H200 ran fastest at 4096³ (128×256 blocks of 4×4
    /// fragments, k-step 32) and at the MiniLM products (128×128 of 2×4, k-step 64), and the
    /// 64×64 blocks its autotune chose for the weight gradient before split-k existed (and
    /// with split-k: 2 parts, 55 TFLOP/s, short of the other products), with k-step 64 too,
    /// and 64×128 blocks of 2×4 fragments; all single-staged but the default
    /// (single-buffered staging won 15 of 20 pairs there).
    pub const SPLIT_BASES: [CoopConfig; 6] = [
        Self::DEFAULT,
        Self::single_staged(128, 256, 4, 4, 32),
        Self::single_staged(128, 128, 2, 4, 64),
        Self::single_staged(64, 64, 2, 2, 32),
        Self::single_staged(64, 64, 2, 2, 64),
        Self::single_staged(64, 128, 2, 4, 32),
    ];

    /// An unsplit, single-staged configuration with the f32 accumulator: blocks of
    /// `block_m × block_n`, `frags_m × frags_n` fragments per subgroup, k-step `k_step`.
    pub const fn single_staged(
        block_m: u32,
        block_n: u32,
        frags_m: u32,
        frags_n: u32,
        k_step: u32,
    ) -> CoopConfig {
        CoopConfig {
            block_m,
            block_n,
            frags_m,
            frags_n,
            k_step,
            stages: 1,
            acc: CoopScalar::F32,
            split_k: 1,
        }
    }

    /// The same configuration with accumulator type `acc`.
    pub fn with_acc(self, acc: CoopScalar) -> Self {
        Self { acc, ..self }
    }

    /// The same configuration with the reduction split into `split_k` parts.
    pub fn with_split(self, split_k: u32) -> Self {
        Self { split_k, ..self }
    }

    /// Workgroups of one part of the reduction for `shape`: its blocks of C, over the batch.
    pub fn blocks(&self, shape: GemmShape) -> u64 {
        u64::from(shape.batch)
            * u64::from(shape.m.div_ceil(self.block_m.max(1)))
            * u64::from(shape.n.div_ceil(self.block_n.max(1)))
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
        // Split-k stores every fragment straight into the workspace: no scratch for C.
        let scratch = if self.split_k > 1 {
            0
        } else {
            acc_bytes * 256 * self.subgroups()
        };
        2 * staged * self.stages + scratch
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
        if self.split_k == 0 {
            return Some(format!("{self}: the reduction has at least one part"));
        }
        if self.split_k > 1 && self.acc != CoopScalar::F32 {
            return Some(format!(
                "{self}: split-k's partial sums are f32, so it needs the f32 accumulator"
            ));
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

    /// Every unsplit configuration of the search space (blocks 64 to 256, 2×2 to 4×4 fragments
    /// per subgroup, k-steps 16, 32 and 64, one or two stages) with accumulator `acc`, before
    /// any device's limits.
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
                        split_k: 1,
                    });
                }
            }
        }
        all
    }

    /// The split-k configurations of the search space with the f32 accumulator:
    /// [`SPLIT_BASES`](Self::SPLIT_BASES) × [`SPLITS`], before any device's limits or problem.
    pub fn split_space() -> Vec<CoopConfig> {
        Self::SPLIT_BASES
            .into_iter()
            .flat_map(|base| SPLITS.map(|s| base.with_split(s)))
            .collect()
    }

    /// The unsplit configurations of [`space`](Self::space) a device can build (see
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

    /// The configurations [`split_candidates`](Self::split_candidates) lists for `shape` on
    /// `units` compute units, before the device's limits and accumulator: where C has fewer
    /// [`DEFAULT`](Self::DEFAULT) blocks than twice the compute units, the
    /// [`SPLIT_BASES`](Self::SPLIT_BASES) unsplit and with each split of [`SPLITS`] that keeps
    /// [`MIN_STEPS_PER_PART`] k-steps a part and four workgroups a compute unit; else none.
    pub fn split_fits(shape: GemmShape, units: u32) -> Vec<CoopConfig> {
        let units = u64::from(units.max(1));
        if Self::DEFAULT.blocks(shape) >= 2 * units {
            return Vec::new();
        }
        let fits = |c: &CoopConfig| {
            c.split_k == 1
                || (u64::from(shape.k)
                    >= u64::from(MIN_STEPS_PER_PART * c.k_step) * u64::from(c.split_k)
                    && c.blocks(shape) * u64::from(c.split_k) <= 4 * units)
        };
        Self::SPLIT_BASES
            .into_iter()
            .flat_map(|base| std::iter::once(base).chain(SPLITS.map(|s| base.with_split(s))))
            .filter(fits)
            .collect()
    }

    /// The split-k configurations the autotune measures for `shape` on a device with
    /// `limits`, subgroups of `subgroup_size` lanes and about `units` compute units, or
    /// nothing where no split can pay; the op's
    /// [`candidates_for`](super::CoopMatmulOp::candidates_for) falls back on
    /// [`candidates`](Self::candidates) then.
    ///
    /// Where C has fewer [`DEFAULT`](Self::DEFAULT) blocks than twice the compute units and
    /// the accumulator is f32, the reduction can pay to split: then the list is
    /// [`SPLIT_BASES`](Self::SPLIT_BASES) unsplit and with each split `s` of [`SPLITS`] for which
    /// every part keeps [`MIN_STEPS_PER_PART`] k-steps (`k ≥ 8 · k_step · s`) and the split's
    /// workgroups stay within four per compute unit; first `DEFAULT` with the largest split
    /// that stays within two (what runs before an autotune). So the autotune measures about 20
    /// configurations for such a product (19 for a MiniLM weight gradient), fewer than the
    /// unsplit list. Where no split
    /// passes (or for other shapes, or the f16 accumulator) it is empty.
    pub fn split_candidates(
        limits: &wgpu::Limits,
        subgroup_size: u32,
        orders: (Order, Order),
        acc: CoopScalar,
        shape: GemmShape,
        units: u32,
    ) -> Vec<CoopConfig> {
        if acc != CoopScalar::F32 {
            return Vec::new();
        }
        let mut list: Vec<CoopConfig> = Self::split_fits(shape, units)
            .into_iter()
            .filter(|c| c.problem(limits, subgroup_size, orders).is_none())
            .collect();
        if list.iter().all(|c| c.split_k == 1) {
            return Vec::new();
        }
        let units = u64::from(units.max(1));
        let first = list
            .iter()
            .enumerate()
            .filter(|(_, c)| {
                **c == Self::DEFAULT.with_split(c.split_k)
                    && c.blocks(shape) * u64::from(c.split_k) <= 2 * units
            })
            .max_by_key(|(_, c)| c.split_k)
            .map(|(at, _)| at);
        if let Some(at) = first {
            let d = list.remove(at);
            list.insert(0, d);
        }
        list
    }
}

impl fmt::Display for CoopConfig {
    /// `128x128/4x4/k32/s2/f32`: block, fragments per subgroup, k-step, stages, accumulator,
    /// then `/split4` where the reduction is split (the form [`FromStr`] reads back).
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
        )?;
        if self.split_k != 1 {
            write!(f, "/split{}", self.split_k)?;
        }
        Ok(())
    }
}

/// Why a configuration did not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "`{text}` is not a cooperative-matrix configuration (expected e.g. 128x128/4x4/k32/s2/f32, \
     or 128x128/4x4/k32/s2/f32/split4 with the reduction split in 4)"
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
        let (block, frags, k, stages, acc, split) = match parts.as_slice() {
            [block, frags, k, stages, acc] => (block, frags, k, stages, acc, None),
            [block, frags, k, stages, acc, split] => (block, frags, k, stages, acc, Some(split)),
            _ => return Err(err()),
        };
        let split_k = match split {
            None => 1,
            Some(s) => s
                .strip_prefix("split")
                .and_then(|v| v.parse().ok())
                .ok_or_else(err)?,
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
            split_k,
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
            .chain(CoopConfig::split_space())
        {
            assert_eq!(c.to_string().parse::<CoopConfig>().unwrap(), c);
        }
        assert_eq!(CoopConfig::DEFAULT.to_string(), "128x128/4x4/k32/s2/f32");
        assert_eq!(
            "64x64/2x2/k32/s1/f32/split8".parse::<CoopConfig>().unwrap(),
            CoopConfig::SPLIT_BASES[3].with_split(8)
        );
        assert!(
            "128x128/4x4/k32/s2/f32/split"
                .parse::<CoopConfig>()
                .is_err()
        );
        assert!("128x128/4x4/k32/s2/f32/k4".parse::<CoopConfig>().is_err());
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

    /// The weight gradient of a MiniLM linear layer (384 × 1536 outputs, 4096 tokens) gets a
    /// short list of split-k candidates, each part at least eight k-steps deep; a product with
    /// many blocks, a short k or the f16 accumulator gets none.
    #[test]
    fn few_blocks_and_a_long_k_get_split_k_candidates() {
        let orders = (Order::KRows, Order::KRows);
        let units = 132;
        let shape = |m, n, k| GemmShape { batch: 1, m, n, k };
        let unsplit = CoopConfig::candidates(&h200(), 32, orders, CoopScalar::F32);
        let for_shape =
            |s: GemmShape, acc| CoopConfig::split_candidates(&h200(), 32, orders, acc, s, units);
        let dw = shape(384, 1536, 4096);
        let list = for_shape(dw, CoopScalar::F32);
        // 36 blocks of 128×128: split in 4 they are 144 workgroups, in 8 more than 264.
        assert_eq!(list[0], CoopConfig::DEFAULT.with_split(4));
        assert!(
            list.len() < unsplit.len() / 2,
            "{} of {}",
            list.len(),
            unsplit.len()
        );
        assert_eq!(list.len(), 19, "{list:?}");
        assert!(list.contains(&CoopConfig::DEFAULT));
        for c in &list {
            assert!(c.problem(&h200(), 32, orders).is_none(), "{c}");
            assert!(CoopConfig::SPLIT_BASES.contains(&c.with_split(1)), "{c}");
            if c.split_k > 1 {
                // Every part reduces at least eight whole k-steps.
                let part = dw.k / c.split_k;
                assert!(part >= 8 * c.k_step, "{c}");
                let (rows, cols) = (dw.m.div_ceil(c.block_m), dw.n.div_ceil(c.block_n));
                assert!(u64::from(rows * cols * c.split_k) <= 4 * 132, "{c}");
            }
        }
        // The other thin products of the layer's backward split too.
        for s in [
            shape(384, 384, 4096),
            shape(1536, 384, 4096),
            shape(384, 1152, 4096),
        ] {
            assert!(for_shape(s, CoopScalar::F32).iter().any(|c| c.split_k > 1));
        }
        // Many blocks (the forward product), a short k, or the f16 accumulator: no split.
        for s in [shape(4096, 1536, 384), shape(384, 1536, 256)] {
            assert_eq!(for_shape(s, CoopScalar::F32), Vec::new());
        }
        assert_eq!(for_shape(dw, CoopScalar::F16), Vec::new());
        // Split-k needs the f32 accumulator, and its kernels keep no scratch for C.
        let f16_split = CoopConfig::DEFAULT.with_acc(CoopScalar::F16).with_split(2);
        assert!(
            f16_split
                .problem(&h200(), 32, orders)
                .unwrap()
                .contains("f32")
        );
        assert!(
            CoopConfig::DEFAULT.with_split(2).workgroup_bytes(orders)
                < CoopConfig::DEFAULT.workgroup_bytes(orders)
        );
    }
}
