//! Shared support for fblayout's cross-crate tests: random layouts and views for property
//! tests, with an independent oracle that computes what their offsets must be.
//!
//! The oracle is written from the definitions (row-major strides, R-Tile's tile-then-element
//! order, each view step as concrete integer arithmetic), not from the library's expression
//! code, so agreement between the two is evidence rather than tautology.
//!
//! [`catalog`] holds the canonical layouts that the tests, snapshots, benchmarks and pictures
//! share.
//!
//! The public-surface test (`tests/public_api.rs`) lists every public item of `fblayout-core`
//! and of the `fblayout` facade (modules, re-exports, types with their public fields, variants
//! and methods, traits with their items, functions and constants; items behind a feature are
//! marked with it) and compares the list with its snapshot. It guards against changing what
//! users can name by accident: adding, removing or renaming a public item fails it. To accept
//! an intended change, run `cargo insta review` (or the test with `INSTA_UPDATE=always`) and
//! commit the updated snapshot with the change.

pub mod catalog;

use fblayout_core::layout::{Extent, LayoutSpec, Order, TensorLayout, View};
use proptest::prelude::*;

/// A random tensor with concrete values for its run-time extents.
#[derive(Debug, Clone)]
pub struct Case {
    /// The layout.
    pub layout: TensorLayout,
    /// The value of every axis extent (run-time ones included).
    pub extents: Vec<u32>,
}

impl Case {
    /// The `(axis, extent)` pairs to bind the run-time extents.
    pub fn bindings(&self) -> Vec<(&str, u32)> {
        self.layout
            .axes()
            .iter()
            .zip(&self.extents)
            .filter(|(a, _)| a.extent == Extent::Dynamic)
            .map(|(a, &e)| (a.name.as_str(), e))
            .collect()
    }

    /// The offset the definitions give for a logical coordinate of the tensor.
    pub fn oracle_offset(&self, coords: &[u64]) -> Option<u64> {
        let axes = self.layout.axes();
        if coords
            .iter()
            .zip(&self.extents)
            .any(|(&c, &e)| c >= u64::from(e))
        {
            return None;
        }
        let ext: Vec<u64> = self.extents.iter().map(|&e| u64::from(e)).collect();
        let row_major = |c: &[u64], e: &[u64]| c.iter().zip(e).fold(0, |acc, (&c, &e)| acc * e + c);
        Some(match self.layout.order() {
            Order::RowMajor => row_major(coords, &ext),
            Order::ColMajor => {
                let c: Vec<u64> = coords.iter().rev().copied().collect();
                let e: Vec<u64> = ext.iter().rev().copied().collect();
                row_major(&c, &e)
            }
            Order::RTile => {
                let tiles: Vec<u64> = axes.iter().map(|a| u64::from(a.tile)).collect();
                let grid: Vec<u64> = ext
                    .iter()
                    .zip(&tiles)
                    .map(|(&e, &t)| e.div_ceil(t))
                    .collect();
                let tile_coord: Vec<u64> =
                    coords.iter().zip(&tiles).map(|(&c, &t)| c / t).collect();
                let order: Vec<usize> = self
                    .layout
                    .in_tile_order()
                    .iter()
                    .map(|n| self.layout.axis_index(n).expect("in-tile axes exist"))
                    .collect();
                let inner_c: Vec<u64> = order.iter().map(|&i| coords[i] % tiles[i]).collect();
                let inner_e: Vec<u64> = order.iter().map(|&i| tiles[i]).collect();
                let tile_elems: u64 = tiles.iter().product();
                row_major(&tile_coord, &grid) * tile_elems + row_major(&inner_c, &inner_e)
            }
        })
    }
}

/// One view step, applied to a view by [`apply_steps`]; inapplicable steps are skipped.
#[derive(Debug, Clone, Copy)]
pub enum StepChoice {
    /// Permute by a seed.
    Permute(u32),
    /// Transpose two axes chosen by seeds.
    Transpose(u32, u32),
    /// Split a static axis by a divisor chosen by seeds.
    Split(u32, u32),
    /// Merge an axis with the next.
    Merge(u32),
    /// Slice an axis.
    Slice(u32, u32, u32),
    /// Broadcast a new axis of extent 1–3.
    Broadcast(u32, u32),
}

/// A view together with the oracle map from its coordinates to the tensor's.
#[derive(Debug, Clone)]
pub struct ViewCase {
    /// The view.
    pub view: View,
    /// Concrete extents of the view's axes.
    pub shape: Vec<u64>,
    steps: Vec<OracleStep>,
}

#[derive(Debug, Clone)]
enum OracleStep {
    Permute(Vec<usize>),
    Split { at: usize, parts: Vec<u64> },
    Merge { at: usize, extents: Vec<u64> },
    Slice { at: usize, start: u64 },
    Broadcast { at: usize },
}

impl ViewCase {
    /// The tensor coordinate that a view coordinate reads, by the definitions.
    pub fn oracle_coords(&self, view_coords: &[u64]) -> Vec<u64> {
        let mut cur = view_coords.to_vec();
        for step in self.steps.iter().rev() {
            cur = match step {
                OracleStep::Permute(perm) => {
                    let mut before = cur.clone();
                    for (i, &p) in perm.iter().enumerate() {
                        before[p] = cur[i];
                    }
                    before
                }
                OracleStep::Split { at, parts } => {
                    let joined = parts
                        .iter()
                        .enumerate()
                        .fold(0, |acc, (j, &e)| acc * e + cur[at + j]);
                    let mut before = cur[..*at].to_vec();
                    before.push(joined);
                    before.extend_from_slice(&cur[at + parts.len()..]);
                    before
                }
                OracleStep::Merge { at, extents } => {
                    let mut rest = cur[*at];
                    let mut parts = vec![0; extents.len()];
                    for j in (0..extents.len()).rev() {
                        parts[j] = rest % extents[j];
                        rest /= extents[j];
                    }
                    let mut before = cur[..*at].to_vec();
                    before.extend(parts);
                    before.extend_from_slice(&cur[at + 1..]);
                    before
                }
                OracleStep::Slice { at, start } => {
                    let mut before = cur.clone();
                    before[*at] += start;
                    before
                }
                OracleStep::Broadcast { at } => {
                    let mut before = cur.clone();
                    before.remove(*at);
                    before
                }
            };
        }
        cur
    }
}

/// Applies `choices` to the identity view of `case`, keeping the oracle in step.
pub fn apply_steps(case: &Case, choices: &[StepChoice]) -> ViewCase {
    let mut view = case.layout.view().named("v").expect("`v` is a valid name");
    let mut shape: Vec<u64> = case.extents.iter().map(|&e| u64::from(e)).collect();
    let mut steps = Vec::new();
    let mut fresh = 0;
    let mut new_name = || {
        fresh += 1;
        format!("n{fresh}")
    };
    for &choice in choices {
        let names: Vec<String> = view.axes().iter().map(|a| a.name.clone()).collect();
        let rank = names.len();
        let pick = |seed: u32| seed as usize % rank;
        match choice {
            StepChoice::Permute(seed) => {
                let mut perm: Vec<usize> = (0..rank).collect();
                let mut s = seed as usize;
                for i in (1..rank).rev() {
                    perm.swap(i, s % (i + 1));
                    s /= i + 1;
                }
                let order: Vec<&str> = perm.iter().map(|&i| names[i].as_str()).collect();
                view = view.permute(&order).expect("a permutation of the axes");
                shape = perm.iter().map(|&i| shape[i]).collect();
                steps.push(OracleStep::Permute(perm));
            }
            StepChoice::Transpose(a, b) => {
                let (i, j) = (pick(a), pick(b));
                view = view.transpose(&names[i], &names[j]).expect("existing axes");
                let mut perm: Vec<usize> = (0..rank).collect();
                perm.swap(i, j);
                shape.swap(i, j);
                steps.push(OracleStep::Permute(perm));
            }
            StepChoice::Split(a, d) => {
                let i = pick(a);
                let e = shape[i];
                // Run-time axes are split too, by a divisor of the value they are bound to
                // (a split that doesn't divide must fail to bind: see `layout_laws`).
                let divisors: Vec<u64> = (2..e).filter(|&k| e.is_multiple_of(k)).collect();
                if divisors.is_empty() {
                    continue;
                }
                let inner = divisors[d as usize % divisors.len()];
                let (outer_name, inner_name) = (new_name(), new_name());
                let parts = [
                    (outer_name.as_str(), None),
                    (inner_name.as_str(), Some(inner as u32)),
                ];
                view = view.split(&names[i], &parts).expect("an exact split");
                shape.splice(i..=i, [e / inner, inner]);
                steps.push(OracleStep::Split {
                    at: i,
                    parts: vec![e / inner, inner],
                });
            }
            StepChoice::Merge(a) => {
                if rank < 2 {
                    continue;
                }
                let i = a as usize % (rank - 1);
                let merged = new_name();
                view = view
                    .merge(&[&names[i], &names[i + 1]], &merged)
                    .expect("adjacent axes");
                let extents = vec![shape[i], shape[i + 1]];
                shape.splice(i..=i + 1, [extents[0] * extents[1]]);
                steps.push(OracleStep::Merge { at: i, extents });
            }
            StepChoice::Slice(a, s, l) => {
                let i = pick(a);
                let e = shape[i];
                if view.axes()[i].extent.as_static().is_none() || e < 2 {
                    continue;
                }
                let start = u64::from(s) % e;
                let len = 1 + u64::from(l) % (e - start);
                view = view
                    .slice(&names[i], start as u32, len as u32)
                    .expect("inside the axis");
                shape[i] = len;
                steps.push(OracleStep::Slice { at: i, start });
            }
            StepChoice::Broadcast(at, n) => {
                let at = at as usize % (rank + 1);
                let extent = 1 + n % 3;
                view = view
                    .broadcast(&new_name(), extent, at)
                    .expect("a fresh axis");
                shape.insert(at, u64::from(extent));
                steps.push(OracleStep::Broadcast { at });
            }
        }
    }
    ViewCase { view, shape, steps }
}

/// Random tensors: rank 1–4, extents 1–9 (some run-time), any order, R-Tile with random tiles
/// (padding allowed) and reduction axes.
pub fn arb_case() -> impl Strategy<Value = Case> {
    let axis = (
        1u32..=9,
        any::<bool>(),
        prop_oneof![Just(None), (1u32..=8).prop_map(Some)],
    );
    (
        prop::collection::vec(axis, 1..=4),
        0u8..3,
        any::<u8>(),
        any::<u8>(),
    )
        .prop_filter_map("the description must build", |(axes, order, fwd, bwd)| {
            let order = [Order::RowMajor, Order::ColMajor, Order::RTile][order as usize];
            let mut spec = LayoutSpec::new("t").order(order);
            let mut extents = Vec::new();
            for (i, (extent, dynamic, tile)) in axes.iter().enumerate() {
                let name = format!("a{i}");
                spec = if *dynamic {
                    spec.dyn_axis(name)
                } else {
                    spec.axis(name, *extent)
                };
                if order == Order::RTile {
                    if let Some(t) = tile {
                        spec = spec.tile((*t).min(*extent), true);
                    }
                }
                extents.push(*extent);
            }
            if order == Order::RTile {
                let rank = axes.len();
                spec.forward = vec![format!("a{}", fwd as usize % rank)];
                let b = bwd as usize % (rank + 1);
                if b < rank {
                    spec.backward = vec![format!("a{b}")];
                }
            }
            // Only cases whose extents bind: a run-time extent that its tile doesn't divide
            // needs `pad`, which a default tile never has.
            let layout = spec.build().ok()?;
            let case = Case { layout, extents };
            case.layout.check_extents(&case.bindings()).ok()?;
            Some(case)
        })
}

/// Random view steps.
pub fn arb_steps() -> impl Strategy<Value = Vec<StepChoice>> {
    let step = prop_oneof![
        any::<u32>().prop_map(StepChoice::Permute),
        (any::<u32>(), any::<u32>()).prop_map(|(a, b)| StepChoice::Transpose(a, b)),
        (any::<u32>(), any::<u32>()).prop_map(|(a, b)| StepChoice::Split(a, b)),
        any::<u32>().prop_map(StepChoice::Merge),
        (any::<u32>(), any::<u32>(), any::<u32>()).prop_map(|(a, b, c)| StepChoice::Slice(a, b, c)),
        (any::<u32>(), any::<u32>()).prop_map(|(a, b)| StepChoice::Broadcast(a, b)),
    ];
    prop::collection::vec(step, 0..=4)
}

/// Random view steps that merge often (run-time axes among them, when the case has some),
/// with splits, transposes and slices in between.
pub fn arb_merge_steps() -> impl Strategy<Value = Vec<StepChoice>> {
    let step = prop_oneof![
        3 => any::<u32>().prop_map(StepChoice::Merge),
        1 => (any::<u32>(), any::<u32>()).prop_map(|(a, b)| StepChoice::Split(a, b)),
        1 => (any::<u32>(), any::<u32>()).prop_map(|(a, b)| StepChoice::Transpose(a, b)),
        1 => (any::<u32>(), any::<u32>(), any::<u32>()).prop_map(|(a, b, c)| StepChoice::Slice(a, b, c)),
    ];
    prop::collection::vec(step, 1..=5)
}

/// The R-Tile tensors among the canonical views (those with tiles of more than one
/// element), each once, in catalog order: the layouts whose tile helpers
/// (`TensorLayout::tile_index_fn`) the tests snapshot and run.
pub fn canonical_tiled_layouts() -> Vec<TensorLayout> {
    catalog::canonical_views()
        .expect("the canonical views build")
        .into_iter()
        .filter(|c| c.view.is_identity() && c.view.layout().tile_elems() > 1)
        .map(|c| c.view.layout().clone())
        .collect()
}

/// Every coordinate of `shape`, row-major.
pub fn coords_of(shape: &[u64]) -> impl Iterator<Item = Vec<u64>> + '_ {
    let total: u64 = shape.iter().product();
    (0..total).map(move |mut linear| {
        let mut c = vec![0; shape.len()];
        for d in (0..shape.len()).rev() {
            c[d] = linear % shape[d];
            linear /= shape[d];
        }
        c
    })
}

/// The GPU that the tests of this crate share.
///
/// Fails — never skips — when no adapter is found: CI runs these tests on Mesa's lavapipe.
pub fn test_gpu() -> &'static fblayout_kernels::runtime::Gpu {
    static GPU: std::sync::OnceLock<fblayout_kernels::runtime::Gpu> = std::sync::OnceLock::new();
    GPU.get_or_init(|| {
        let gpu = fblayout_kernels::runtime::Gpu::new().unwrap_or_else(|err| {
            panic!(
                "no GPU adapter for fblayout's GPU tests; install Mesa's Vulkan drivers \
                 (`apt-get install mesa-vulkan-drivers`, which brings lavapipe) or run \
                 `cargo xtask test`, which does.\n{err}"
            )
        });
        eprintln!("GPU tests run on {}", gpu.info());
        gpu
    })
}

/// Runs the offset and mask of `f` on the GPU for every coordinate of `shape` (row-major).
pub fn gpu_offsets(
    f: &fblayout_core::expr::ValidIndexFn,
    shape: &[u64],
    extent_args: &[u64],
) -> Vec<Option<u64>> {
    let module = fblayout_core::emit::wgsl::emit_module(&f.name, &[f])
        .unwrap_or_else(|err| panic!("emitted WGSL must validate: {err}"));
    let shape: Vec<u32> = shape.iter().map(|&e| e as u32).collect();
    let extent_args: Vec<u32> = extent_args.iter().map(|&e| e as u32).collect();
    let request = fblayout_kernels::probe::ProbeRequest {
        module: &module,
        offset_fn: &f.offset_fn_name(),
        in_bounds_fn: &f.in_bounds_fn_name(),
        shape: &shape,
        extent_args: &extent_args,
    };
    fblayout_kernels::probe::probe_offsets(test_gpu(), &request)
        .unwrap_or_else(|err| panic!("probe of `{}` failed: {err}", f.name))
        .into_iter()
        .map(|o| o.map(u64::from))
        .collect()
}
