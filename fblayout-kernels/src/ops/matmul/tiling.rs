//! How a GEMM is cut into work: the workgroup tile, the k-step, the outputs of one invocation,
//! and the split of the reduction, chosen in one place ([`Tiling::choose`]).

use std::fmt;

use super::split_parts;

/// The shape of one workgroup's work: a `tile_m × tile_n` block of C, reduced `k_step`
/// elements of `k` at a time through workgroup memory, each invocation computing a
/// `thread_m × thread_n` block of outputs in registers.
///
/// An invocation's outputs are groups of four neighbours (so a group is one `vec4` of
/// workgroup memory and one `store4`), spread over the tile so that neighbouring invocations
/// read neighbouring words.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct TileConfig {
    /// Rows of C per workgroup.
    pub tile_m: u32,
    /// Columns of C per workgroup.
    pub tile_n: u32,
    /// Elements of `k` staged per step.
    pub k_step: u32,
    /// Rows of C per invocation (4 or 8).
    pub thread_m: u32,
    /// Columns of C per invocation (4 or 8).
    pub thread_n: u32,
}

impl TileConfig {
    /// 128 × 128 tiles, k-step 8, 8 × 8 outputs per invocation: the large-problem default.
    pub const LARGE: Self = Self::new(128, 128, 8, 8, 8);
    /// 128 × 128 tiles with k-step 16: fewer barriers per flop, twice the workgroup memory.
    pub const LARGE_K16: Self = Self::new(128, 128, 16, 8, 8);
    /// 128 × 64 tiles, 8 × 8 per invocation (128 invocations).
    pub const TALL: Self = Self::new(128, 64, 8, 8, 8);
    /// 64 × 128 tiles, 8 × 8 per invocation (128 invocations).
    pub const WIDE: Self = Self::new(64, 128, 8, 8, 8);
    /// 64 × 64 tiles, k-step 16, 8 × 8 per invocation (64 invocations).
    pub const MEDIUM: Self = Self::new(64, 64, 16, 8, 8);
    /// 32 × 32 tiles, 4 × 4 per invocation (64 invocations): for small products.
    pub const SMALL: Self = Self::new(32, 32, 8, 4, 4);

    /// 16 × 16 tiles, k-step 4, 4 × 4 per invocation (16 invocations): the least shader, for
    /// tests of many layouts on a software device.
    pub const TINY: Self = Self::new(16, 16, 4, 4, 4);

    /// The tilings [`Tiling::choose`] picks from, each with its cost per multiply-add relative
    /// to [`LARGE`](Self::LARGE), as measured on an H200 at 4096³ and a linear layer's
    /// products (f32, wgpu over Vulkan): 128 × 256 and 256 × 128 ran within 1% of the large
    /// tile, 64 × 128 and 128 × 64 5–8% slower, k-step 16 6% slower, 64 × 64 16–20% and 32 × 32
    /// (4 × 4 per invocation) 73%.
    /// Tilings of 8 × 4 or 4 × 4 outputs per invocation ran 30–40% slower and are left out.
    pub const CANDIDATES: [(Self, f64); 8] = [
        (Self::LARGE, 1.0),
        (Self::new(128, 256, 8, 8, 8), 1.01),
        (Self::new(256, 128, 8, 8, 8), 1.01),
        (Self::WIDE, 1.07),
        (Self::LARGE_K16, 1.06),
        (Self::TALL, 1.08),
        (Self::new(64, 64, 8, 8, 8), 1.2),
        (Self::SMALL, 1.73),
    ];

    /// A configuration (checked by [`check`](Self::check) when a kernel is built for it).
    pub const fn new(tile_m: u32, tile_n: u32, k_step: u32, thread_m: u32, thread_n: u32) -> Self {
        Self {
            tile_m,
            tile_n,
            k_step,
            thread_m,
            thread_n,
        }
    }

    /// Invocations along `n` (the fastest-varying in a workgroup).
    pub fn threads_n(&self) -> u32 {
        self.tile_n / self.thread_n
    }

    /// Invocations along `m`.
    pub fn threads_m(&self) -> u32 {
        self.tile_m / self.thread_m
    }

    /// Invocations per workgroup.
    pub fn invocations(&self) -> u32 {
        self.threads_m() * self.threads_n()
    }

    /// `vec4`s in one row of a staged tile of `extent` outputs: one more than needed, so that
    /// rows start on different banks.
    pub(crate) fn staged_row(extent: u32) -> u32 {
        extent / 4 + 1
    }

    /// Bytes of workgroup memory: two buffers of A and B tiles, `k_step` rows each.
    pub fn workgroup_bytes(&self) -> u32 {
        2 * self.k_step * (Self::staged_row(self.tile_m) + Self::staged_row(self.tile_n)) * 16
    }

    /// Why the configuration can't be built on a device with these limits, if it can't.
    pub fn check(&self, limits: &wgpu::Limits) -> Result<(), String> {
        let per_thread = [self.thread_m, self.thread_n];
        if per_thread.iter().any(|&t| t != 4 && t != 8) {
            return Err("an invocation computes 4 or 8 rows and 4 or 8 columns".into());
        }
        if !self.tile_m.is_multiple_of(self.thread_m) || !self.tile_n.is_multiple_of(self.thread_n)
        {
            return Err("the tile must be a multiple of one invocation's outputs".into());
        }
        if !self.k_step.is_multiple_of(4) || self.k_step == 0 {
            return Err("the k-step must be a positive multiple of 4".into());
        }
        let n = self.invocations();
        if n > limits.max_compute_invocations_per_workgroup
            || n > limits.max_compute_workgroup_size_x
        {
            return Err(format!(
                "{n} invocations per workgroup exceed the device's limit"
            ));
        }
        if !n.is_multiple_of(32) && n > 32 {
            return Err(format!("{n} invocations are not whole subgroups of 32"));
        }
        let bytes = self.workgroup_bytes();
        if bytes > limits.max_compute_workgroup_storage_size {
            return Err(format!(
                "{bytes} bytes of workgroup memory exceed the device's {}",
                limits.max_compute_workgroup_storage_size
            ));
        }
        Ok(())
    }
}

impl fmt::Display for TileConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}×{} k{} ({}×{}/inv)",
            self.tile_m, self.tile_n, self.k_step, self.thread_m, self.thread_n
        )
    }
}

/// The extents of one product: `batch` independent `[m, k] · [k, n]` products.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct GemmShape {
    /// Products in the batch (the product of the batch axes).
    pub batch: u32,
    /// Rows of C.
    pub m: u32,
    /// Columns of C.
    pub n: u32,
    /// The reduction.
    pub k: u32,
}

impl GemmShape {
    /// Floating-point operations: two per multiply-add.
    pub fn flops(&self) -> f64 {
        2.0 * f64::from(self.batch) * f64::from(self.m) * f64::from(self.n) * f64::from(self.k)
    }
}

/// A configuration and a split of the reduction: `split_k` workgroups share each tile of C,
/// each reducing `k / split_k` of the sum into a scratch buffer that a second kernel adds up.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Tiling {
    /// The tiling.
    pub config: TileConfig,
    /// Parts of the reduction run side by side (1: none).
    pub split_k: u32,
}

/// Compute units (multiprocessors) of the device the plans are made for: an H200 has 132.
/// wgpu does not say how many a device has; [`MatmulOp::compute_units`] sets it.
///
/// [`MatmulOp::compute_units`]: super::MatmulOp::compute_units
pub const DEFAULT_COMPUTE_UNITS: u32 = 132;

/// Bytes of the split-k partial sums moved in the time of one unit of [`Tiling::cost`] (an
/// H200 moves about 2.5 MB while a compute unit does one k-step of a 128 × 128 tile).
const BYTES_PER_UNIT: f64 = 2.5e6;

/// The reduction kernel's own cost in units of [`Tiling::cost`] (its dispatch, and the wait for
/// the partial products): about 5 µs on an H200.
const REDUCE_DISPATCH: f64 = 6.0;

/// The splits of the reduction [`Tiling::choose`] tries (those measured).
const SPLITS: [u32; 6] = [1, 2, 3, 4, 6, 8];

impl Tiling {
    /// The estimated time of this plan for `shape` on `units` compute units, in units of one
    /// k-step (8) of a 128 × 128 tile on one compute unit.
    ///
    /// Workgroups are spread evenly over the compute units, so the busiest one runs
    /// `⌈workgroups / units⌉` of them, each `⌈k / split⌉` deep; `relative` is the tiling's
    /// cost per multiply-add (from [`TileConfig::CANDIDATES`]). A compute unit given fewer than
    /// 512 invocations of k-step 8 hides its loads less well (15% slower, as measured). A split
    /// writes `split` partial products and reads them back once.
    pub fn cost(&self, shape: GemmShape, relative: f64, units: u32) -> f64 {
        let c = self.config;
        let split = self.split_k.max(1);
        let tiles = u64::from(shape.m.div_ceil(c.tile_m))
            * u64::from(shape.n.div_ceil(c.tile_n))
            * u64::from(shape.batch);
        let workgroups = tiles * u64::from(split);
        let per_unit = workgroups.div_ceil(u64::from(units.max(1)));
        let depth = shape.k.div_ceil(split).div_ceil(c.k_step) * c.k_step;
        let area = f64::from(c.tile_m) * f64::from(c.tile_n) / (128.0 * 128.0);
        let resident = per_unit * u64::from(c.invocations());
        let lone = if resident < 512 && c.k_step < 16 {
            1.15
        } else {
            1.0
        };
        let compute = per_unit as f64 * f64::from(depth) / 8.0 * area * relative * lone;
        let reduce = if split > 1 {
            let outputs = f64::from(shape.batch) * f64::from(shape.m) * f64::from(shape.n);
            REDUCE_DISPATCH + f64::from(2 * split + 1) * outputs * 4.0 / BYTES_PER_UNIT
        } else {
            0.0
        };
        compute + reduce
    }

    /// The plan of least [`cost`](Self::cost) for `shape` among `candidates` (tilings with
    /// their relative costs) and the splits of the reduction that leave each part at least
    /// four k-steps. Ties go to the earlier candidate and the smaller split.
    pub fn choose(shape: GemmShape, candidates: &[(TileConfig, f64)], units: u32) -> Tiling {
        let mut best: Option<(f64, Tiling)> = None;
        for &(config, relative) in candidates {
            for split_k in SPLITS {
                if split_k > 1 && shape.k.div_ceil(split_k) < 4 * config.k_step {
                    continue;
                }
                let plan = Tiling { config, split_k };
                let cost = plan.cost(shape, relative, units);
                if best.is_none_or(|(c, _)| cost < c) {
                    best = Some((cost, plan));
                }
            }
        }
        best.map_or(
            Tiling {
                config: TileConfig::SMALL,
                split_k: 1,
            },
            |(_, p)| p,
        )
    }

    /// The most parts a plan that [`choose`](Self::choose) makes for `shape` on `units` compute
    /// units cuts the reduction into (as many as its split, fewer where `k` has fewer
    /// k-steps), whichever of [`TileConfig::CANDIDATES`] the device's limits leave: those
    /// within a number of invocations and bytes of workgroup memory ([`TileConfig::check`]),
    /// so every such set is tried. 1 where no plan splits it.
    pub fn most_parts(shape: GemmShape, units: u32) -> u32 {
        let candidates = TileConfig::CANDIDATES;
        let mut most = 1;
        for (i, _) in &candidates {
            for (w, _) in &candidates {
                let limits = wgpu::Limits {
                    max_compute_invocations_per_workgroup: i.invocations(),
                    max_compute_workgroup_size_x: i.invocations(),
                    max_compute_workgroup_storage_size: w.workgroup_bytes(),
                    ..wgpu::Limits::default()
                };
                let left: Vec<(TileConfig, f64)> = candidates
                    .into_iter()
                    .filter(|(t, _)| t.check(&limits).is_ok())
                    .collect();
                if left.is_empty() {
                    continue;
                }
                let plan = Self::choose(shape, &left, units);
                let (parts, _) = split_parts(shape.k, plan.split_k, plan.config.k_step);
                most = most.max(parts);
            }
        }
        most
    }
}

impl fmt::Display for Tiling {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.split_k > 1 {
            write!(f, "{} split-k {}", self.config, self.split_k)
        } else {
            write!(f, "{}", self.config)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_most_parts_bound_every_plan_and_are_one_where_nothing_splits() {
        for (m, n, k) in [
            (4096, 384, 1536),
            (384, 1536, 4096),
            (13, 20, 37),
            (8, 16, 2048),
        ] {
            let shape = GemmShape { batch: 1, m, n, k };
            let most = Tiling::most_parts(shape, DEFAULT_COMPUTE_UNITS);
            let p = Tiling::choose(shape, &TileConfig::CANDIDATES, DEFAULT_COMPUTE_UNITS);
            let (parts, _) = split_parts(k, p.split_k, p.config.k_step);
            assert!(
                parts <= most,
                "{m}×{n}×{k}: {p} in {parts} parts, at most {most}"
            );
        }
        let square = GemmShape {
            batch: 1,
            m: 4096,
            n: 4096,
            k: 4096,
        };
        assert_eq!(Tiling::most_parts(square, DEFAULT_COMPUTE_UNITS), 1);
        let thin = GemmShape {
            batch: 1,
            m: 384,
            n: 1536,
            k: 4096,
        };
        assert!(Tiling::most_parts(thin, DEFAULT_COMPUTE_UNITS) > 1);
    }

    fn plan(m: u32, n: u32, k: u32) -> Tiling {
        let shape = GemmShape { batch: 1, m, n, k };
        Tiling::choose(shape, &TileConfig::CANDIDATES, DEFAULT_COMPUTE_UNITS)
    }

    /// The plans measured best on an H200 (f32): the large tile everywhere; the thin products
    /// of a linear layer's backward split the reduction to fill the 132 multiprocessors.
    #[test]
    fn plans_match_what_was_measured_best_on_an_h200() {
        let large = |split_k| Tiling {
            config: TileConfig::LARGE,
            split_k,
        };
        assert_eq!(plan(4096, 4096, 4096), large(1));
        assert_eq!(plan(4096, 1536, 384), large(1));
        assert_eq!(plan(4096, 384, 1536), large(4));
        assert_eq!(plan(384, 1536, 4096), large(6));
        for (m, n, k) in [(4096, 3072, 768), (4096, 768, 3072), (768, 3072, 4096)] {
            eprintln!("{m}x{n}x{k}: {}", plan(m, n, k));
        }
        eprintln!("13x20x37: {}", plan(13, 20, 37));
        eprintln!("130x70x129: {}", plan(130, 70, 129));
    }
}
