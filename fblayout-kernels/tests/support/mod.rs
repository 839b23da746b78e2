//! Shared support for the kernel tests: the GPU, layouts to test every kernel under, random
//! data, poisoned outputs, tolerances scaled to the element type, and finite differences.
//!
//! Tests are written once: a case builds its operands as [`Tensor`]s (a view, its extents, and
//! logical values), runs the CPU kernel and the GPU kernel on the same layouts, and compares
//! both with a reference written from the kernel's definition on dense row-major `f64` arrays
//! (never with the kernel's own code). Outputs are poisoned with NaN, padding included, so an
//! element a kernel never writes fails the comparison; inputs carry NaN in their padding, so a
//! kernel that reads padding fails too.

#![allow(dead_code, unreachable_pub, missing_docs)]
// `!(err <= tol)` is meant: it is true for NaN, so a NaN never passes a comparison.
#![allow(clippy::neg_cmp_op_on_partial_ord)]

use std::sync::OnceLock;

use fblayout_core::layout::{BoundView, ElemType, LayoutSpec, TensorLayout, View};
use fblayout_kernels::runtime::{Disabled, Gpu, GpuBuffer, GpuOptions};
use fblayout_kernels::tensor::{GpuArg, HostArg, HostArgMut};

/// The GPU the tests run on. Fails, never skips: CI runs the tests on lavapipe.
pub fn gpu() -> &'static Gpu {
    static GPU: OnceLock<Gpu> = OnceLock::new();
    GPU.get_or_init(|| {
        let gpu = Gpu::new().unwrap_or_else(|err| {
            panic!(
                "could not open a GPU for the kernel tests; install Mesa's Vulkan drivers \
                 (`apt-get install mesa-vulkan-drivers`, which includes lavapipe) or set \
                 FBLAYOUT_ADAPTER/FBLAYOUT_BACKEND.\n{err}"
            )
        });
        eprintln!("kernel tests run on {} ({})", gpu.info(), gpu.features());
        gpu
    })
}

/// Set to 1, a test that needs cooperative matrices fails where they are missing.
pub const REQUIRE: &str = "FBLAYOUT_REQUIRE_COOP";

/// The test GPU when it has cooperative matrices; otherwise prints why `test` is skipped and
/// returns `None`, or panics when `FBLAYOUT_REQUIRE_COOP=1`.
pub fn coop_gpu(test: &str) -> Option<&'static Gpu> {
    let gpu = gpu();
    if gpu.features().coop_fragment.is_some() {
        return Some(gpu);
    }
    let why = format!(
        "{test}: SKIPPED: the adapter {} has no usable cooperative matrices ({})",
        gpu.info(),
        gpu.features()
    );
    if std::env::var(REQUIRE).is_ok_and(|v| v == "1") {
        panic!("{why}, and {REQUIRE}=1 requires them");
    }
    eprintln!("{why}; set {REQUIRE}=1 to make this a failure");
    None
}

/// A second device on the same adapter with subgroup operations turned off: kernels built for
/// it take the workgroup-memory fallback of their reductions.
pub fn gpu_without_subgroups() -> &'static Gpu {
    static GPU: OnceLock<Gpu> = OnceLock::new();
    GPU.get_or_init(|| {
        let mut options = GpuOptions::from_env().expect("the GPU options");
        options.disabled = Disabled {
            subgroups: true,
            ..options.disabled
        };
        let gpu = Gpu::with_options(options)
            .unwrap_or_else(|err| panic!("could not open the GPU without subgroups: {err}"));
        assert!(!gpu.features().subgroups);
        gpu
    })
}

/// Both reduction paths: the device with its subgroups (where it has them) and without.
pub fn gpus() -> [(&'static str, &'static Gpu); 2] {
    [
        ("subgroups", gpu()),
        ("workgroup memory", gpu_without_subgroups()),
    ]
}

/// The element types a kernel is tested in on the GPU: f32, and f16 where the adapter has it.
pub fn gpu_elems() -> Vec<ElemType> {
    let mut elems = vec![ElemType::F32];
    if gpu().features().f16 {
        elems.push(ElemType::F16);
    }
    elems
}

/// A small deterministic generator (xorshift64*), so failures reproduce.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Self(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// Uniform in `[lo, hi)`.
    pub fn uniform(&mut self, lo: f64, hi: f64) -> f64 {
        let unit = (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64;
        lo + (hi - lo) * unit
    }

    /// `n` values uniform in `[lo, hi)`, never exactly zero.
    pub fn values(&mut self, n: usize, lo: f64, hi: f64) -> Vec<f64> {
        (0..n)
            .map(|_| {
                loop {
                    let v = self.uniform(lo, hi);
                    if v != 0.0 {
                        break v;
                    }
                }
            })
            .collect()
    }

    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n
    }
}

/// How a 2-D tensor `[rows, cols]` is stored: the layouts every 2-D kernel is tested under.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Layout2 {
    /// Row-major.
    RowMajor,
    /// Column-major.
    ColMajor,
    /// R-Tile with `t × t` tiles, `cols` the forward (innermost) axis, both axes padded.
    RTile(u32),
    /// A row-major `[cols, rows]` tensor read through its transpose.
    RowMajorT,
    /// An R-Tile `[cols, rows]` tensor (forward axis `rows`) read through its transpose.
    RTileT(u32),
}

impl Layout2 {
    /// Every layout above, with 4×4 and 8×8 tiles.
    pub const ALL: [Layout2; 7] = [
        Layout2::RowMajor,
        Layout2::ColMajor,
        Layout2::RTile(4),
        Layout2::RTile(8),
        Layout2::RowMajorT,
        Layout2::RTileT(4),
        Layout2::RTileT(8),
    ];
}

/// Pairs of (input, output) layouts: each layout of [`Layout2::ALL`] once as input and once as
/// output, and row-major and 4×4 R-Tile into themselves.
pub fn layout_pairs() -> impl Iterator<Item = (Layout2, Layout2)> {
    Layout2::ALL
        .into_iter()
        .zip(Layout2::ALL.into_iter().rev())
        .chain([
            (Layout2::RowMajor, Layout2::RowMajor),
            (Layout2::RTile(4), Layout2::RTile(4)),
        ])
}

/// A tensor for a test: a view, the extents it is bound to, and its logical values (dense,
/// row-major over the view's shape, `f64`).
#[derive(Debug, Clone)]
pub struct Tensor {
    pub view: View,
    pub bind: Vec<(String, u32)>,
    pub bound: BoundView,
    pub values: Vec<f64>,
}

fn spec_2d(name: &str, outer: (&str, u32), inner: (&str, u32), dyn_outer: bool) -> LayoutSpec {
    let spec = LayoutSpec::new(name);
    let spec = if dyn_outer {
        spec.dyn_axis(outer.0)
    } else {
        spec.axis(outer.0, outer.1)
    };
    spec.axis(inner.0, inner.1)
}

/// A `[rows, cols]` view of `elem`s of static extents, stored in `order` (the tensor as
/// declared).
pub fn static_2d(
    name: &str,
    rows: u32,
    cols: u32,
    elem: ElemType,
    order: fblayout_core::layout::Order,
) -> View {
    LayoutSpec::new(name)
        .elem(elem)
        .order(order)
        .axis("rows", rows)
        .axis("cols", cols)
        .build()
        .unwrap_or_else(|e| panic!("test layout {name}: {e}"))
        .view()
}

/// A `[rows, cols]` view of `elem`s stored as `layout`, with `rows` a run-time extent (bound
/// to `rows`).
pub fn view_2d(
    name: &str,
    layout: Layout2,
    rows: u32,
    cols: u32,
    elem: ElemType,
) -> (View, Vec<(String, u32)>) {
    let build = |spec: LayoutSpec| -> TensorLayout {
        spec.elem(elem)
            .build()
            .unwrap_or_else(|e| panic!("test layout {layout:?}: {e}"))
    };
    let bind = vec![("rows".to_owned(), rows)];
    let view = match layout {
        Layout2::RowMajor => build(spec_2d(name, ("rows", rows), ("cols", cols), true)).view(),
        Layout2::ColMajor => build(
            spec_2d(name, ("rows", rows), ("cols", cols), true)
                .order(fblayout_core::layout::Order::ColMajor),
        )
        .view(),
        Layout2::RTile(t) => build(
            LayoutSpec::new(name)
                .dyn_axis("rows")
                .tile(t, true)
                .axis("cols", cols)
                .tile(t, true)
                .rtile()
                .reduce_forward(["cols"])
                .reduce_backward(["rows"]),
        )
        .view(),
        Layout2::RowMajorT => build(LayoutSpec::new(name).axis("cols", cols).dyn_axis("rows"))
            .view()
            .transpose("cols", "rows")
            .unwrap(),
        Layout2::RTileT(t) => build(
            LayoutSpec::new(name)
                .axis("cols", cols)
                .tile(t, true)
                .dyn_axis("rows")
                .tile(t, true)
                .rtile()
                .reduce_forward(["rows"])
                .reduce_backward(["cols"]),
        )
        .view()
        .transpose("cols", "rows")
        .unwrap(),
    };
    (view, bind)
}

/// How a rank-4 attention-score tensor `[batch, heads, q, k]` is stored: the layouts every
/// kernel over attention scores is tested under. `batch` is a run-time extent; the softmax axis
/// is `k`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Layout4 {
    /// Row-major `[batch, heads, q, k]`.
    RowMajor,
    /// R-Tile with `t × t` tiles over `q × k`, `k` the forward axis, both padded.
    RTile(u32),
    /// Row-major `[batch, q, heads, k]` read through a permutation to `[batch, heads, q, k]`.
    HeadsInner,
    /// Row-major `[batch, heads, k, q]` (keys outer) read through its transpose.
    KeysOuter,
}

impl Layout4 {
    /// Every layout above, with 4×4 and 8×8 tiles.
    pub const ALL: [Layout4; 5] = [
        Layout4::RowMajor,
        Layout4::RTile(4),
        Layout4::RTile(8),
        Layout4::HeadsInner,
        Layout4::KeysOuter,
    ];
}

/// A `[batch, heads, q, k]` view of `elem`s stored as `layout`, with `batch` a run-time extent
/// (bound to `dims[0]`).
pub fn view_4d(
    name: &str,
    layout: Layout4,
    dims: [u32; 4],
    elem: ElemType,
) -> (View, Vec<(String, u32)>) {
    let [batch, heads, q, k] = dims;
    let build = |spec: LayoutSpec| -> TensorLayout {
        spec.elem(elem)
            .build()
            .unwrap_or_else(|e| panic!("test layout {layout:?}: {e}"))
    };
    let bind = vec![("batch".to_owned(), batch)];
    let order = ["batch", "heads", "q", "k"];
    let view = match layout {
        Layout4::RowMajor => build(
            LayoutSpec::new(name)
                .dyn_axis("batch")
                .axis("heads", heads)
                .axis("q", q)
                .axis("k", k),
        )
        .view(),
        Layout4::RTile(t) => build(
            LayoutSpec::new(name)
                .dyn_axis("batch")
                .axis("heads", heads)
                .axis("q", q)
                .tile(t, true)
                .axis("k", k)
                .tile(t, true)
                .rtile()
                .reduce_forward(["k"])
                .reduce_backward(["q"]),
        )
        .view(),
        Layout4::HeadsInner => build(
            LayoutSpec::new(name)
                .dyn_axis("batch")
                .axis("q", q)
                .axis("heads", heads)
                .axis("k", k),
        )
        .view()
        .permute(&order)
        .unwrap(),
        Layout4::KeysOuter => build(
            LayoutSpec::new(name)
                .dyn_axis("batch")
                .axis("heads", heads)
                .axis("k", k)
                .axis("q", q),
        )
        .view()
        .permute(&order)
        .unwrap(),
    };
    (view, bind)
}

/// A `[n]` vector (bias, norm weights) of `elem`s, static extent.
pub fn view_1d(name: &str, axis: &str, n: u32, elem: ElemType) -> View {
    LayoutSpec::new(name)
        .axis(axis, n)
        .elem(elem)
        .build()
        .unwrap()
        .view()
}

/// A `[n]` vector of `elem`s whose extent is a run-time one (per-row statistics), bound to `n`.
pub fn view_1d_dyn(name: &str, axis: &str, n: u32, elem: ElemType) -> (View, Vec<(String, u32)>) {
    let view = LayoutSpec::new(name)
        .dyn_axis(axis)
        .elem(elem)
        .build()
        .unwrap()
        .view();
    (view, vec![(axis.to_owned(), n)])
}

impl Tensor {
    /// `view` bound to `bind`, holding `values` (row-major over the view's shape).
    pub fn new(view: View, bind: Vec<(String, u32)>, values: Vec<f64>) -> Self {
        let pairs: Vec<(&str, u32)> = bind.iter().map(|(a, n)| (a.as_str(), *n)).collect();
        let bound = view
            .bind(&pairs)
            .unwrap_or_else(|e| panic!("binding {}: {e}", view.name()));
        assert_eq!(
            values.len() as u64,
            bound.logical_len(),
            "values of {}",
            view.name()
        );
        Self {
            view,
            bind,
            bound,
            values,
        }
    }

    /// `view` bound to `bind`, with random values in `[lo, hi)`.
    pub fn random(rng: &mut Rng, view: View, bind: Vec<(String, u32)>, lo: f64, hi: f64) -> Self {
        let pairs: Vec<(&str, u32)> = bind.iter().map(|(a, n)| (a.as_str(), *n)).collect();
        let n = view
            .bind(&pairs)
            .unwrap_or_else(|e| panic!("binding {}: {e}", view.name()))
            .logical_len();
        let values = rng.values(n as usize, lo, hi);
        Self::new(view, bind, values)
    }

    /// The tensor read through `view`, another view of its tensor bound to the same extents,
    /// holding what this tensor holds there (so views whose elements repeat, broadcasts, see
    /// one value).
    pub fn through(&self, view: View) -> Self {
        let stored = self.host::<f64>();
        let pairs: Vec<(&str, u32)> = self.bind.iter().map(|(a, n)| (a.as_str(), *n)).collect();
        let bound = view
            .bind(&pairs)
            .unwrap_or_else(|e| panic!("binding {}: {e}", view.name()));
        let mut values = Vec::with_capacity(bound.logical_len() as usize);
        bound.for_each(|_, _, off| values.push(stored[off as usize]));
        Self::new(view, self.bind.clone(), values)
    }

    /// The same view and extents with other values.
    pub fn with_values(&self, values: Vec<f64>) -> Self {
        assert_eq!(values.len(), self.values.len());
        Self {
            values,
            ..self.clone()
        }
    }

    pub fn dims(&self) -> Vec<usize> {
        self.bound.shape().iter().map(|&n| n as usize).collect()
    }

    pub fn elem(&self) -> ElemType {
        self.view.layout().elem()
    }

    /// The physical buffer as `T`s: values in place, padding NaN.
    pub fn host<T: fblayout_kernels::cpu::Real>(&self) -> Vec<T> {
        let mut buf = vec![T::from_f64(f64::NAN); self.bound.len() as usize];
        self.bound
            .for_each(|i, _, off| buf[off as usize] = T::from_f64(self.values[i]));
        buf
    }

    /// A CPU argument over `data` (from [`host`](Self::host)).
    pub fn arg<'a, T: Copy>(
        &self,
        data: &'a [T],
    ) -> HostArg<'a, T, fblayout_kernels::cpu::OffsetTable> {
        HostArg::bound(data, &self.bound).unwrap()
    }

    /// A CPU output over `data`.
    pub fn arg_mut<'a, T: Copy>(
        &self,
        data: &'a mut [T],
    ) -> HostArgMut<'a, T, fblayout_kernels::cpu::OffsetTable> {
        HostArgMut::bound(data, &self.bound).unwrap()
    }

    /// The logical values of a physical CPU buffer.
    pub fn read_host<T: fblayout_kernels::cpu::Real>(&self, data: &[T]) -> Vec<f64> {
        let mut out = Vec::with_capacity(self.values.len());
        self.bound
            .for_each(|_, _, off| out.push(data[off as usize].to_f64()));
        out
    }

    /// The tensor on the GPU in its element type, padding NaN.
    pub fn upload(&self, gpu: &Gpu) -> GpuBuffer {
        match self.elem() {
            ElemType::F32 => GpuBuffer::from_slice(gpu, &self.host::<f32>()).unwrap(),
            ElemType::F16 => GpuBuffer::from_slice(gpu, &self.host::<half::f16>()).unwrap(),
            other => panic!("no test upload for {other}"),
        }
    }

    /// A GPU output buffer for this tensor, every element (padding included) NaN.
    pub fn poisoned(&self, gpu: &Gpu) -> GpuBuffer {
        let poison = Tensor {
            values: vec![f64::NAN; self.values.len()],
            ..self.clone()
        };
        poison.upload(gpu)
    }

    /// The GPU argument over `buffer`.
    pub fn gpu_arg<'a>(&'a self, buffer: &'a GpuBuffer) -> GpuArg<'a> {
        GpuArg::bound(buffer, &self.view, self.bound.clone()).unwrap()
    }

    /// The logical values of a GPU buffer of this tensor.
    pub fn download(&self, buffer: &GpuBuffer) -> Vec<f64> {
        match self.elem() {
            ElemType::F32 => {
                self.read_host(&buffer.read_back::<f32>().unwrap()[..self.bound.len() as usize])
            }
            ElemType::F16 => self
                .read_host(&buffer.read_back::<half::f16>().unwrap()[..self.bound.len() as usize]),
            other => panic!("no test download for {other}"),
        }
    }
}

/// Compares `got` with `want` elementwise: `|g − w| ≤ tol · (1 + |w|)`. NaN never passes.
#[track_caller]
pub fn assert_close(what: &str, got: &[f64], want: &[f64], tol: f64) {
    assert_eq!(got.len(), want.len(), "{what}: lengths differ");
    for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
        let err = (g - w).abs() / (1.0 + w.abs());
        if !(err <= tol) {
            panic!(
                "{what}: element {i} is {g}, expected {w} (error {err:.3e} > tolerance {tol:.1e}); \
                 {} of {} elements differ",
                got.iter()
                    .zip(want)
                    .filter(|(g, w)| !((*g - *w).abs() / (1.0 + w.abs()) <= tol))
                    .count(),
                got.len()
            );
        }
    }
}

/// The tensor as its storage holds it (f16 rounds).
pub fn stored(t: &Tensor) -> Tensor {
    match t.elem() {
        ElemType::F16 => t.with_values(t.read_host(&t.host::<half::f16>())),
        _ => t.clone(),
    }
}

/// The tolerance of a result computed in `elem`, stored in `elem`, after about `terms`
/// rounding steps of `f32` arithmetic: `k · √terms` units of f32 round-off plus one unit of the
/// storage type.
pub fn tolerance(elem: ElemType, terms: usize) -> f64 {
    let f32_unit = f64::from(f32::EPSILON);
    let storage = match elem {
        ElemType::F16 => 1.0 / 1024.0,
        ElemType::F32 => f32_unit,
        _ => f32_unit,
    };
    16.0 * f32_unit * (terms.max(1) as f64).sqrt() + 4.0 * storage
}

/// Central finite differences of `f` at `x`: `(f(x + h e_i) − f(x − h e_i)) / 2h` for each `i`.
pub fn finite_differences(x: &[f64], h: f64, f: impl Fn(&[f64]) -> f64) -> Vec<f64> {
    let mut x = x.to_vec();
    (0..x.len())
        .map(|i| {
            let v = x[i];
            x[i] = v + h;
            let up = f(&x);
            x[i] = v - h;
            let down = f(&x);
            x[i] = v;
            (up - down) / (2.0 * h)
        })
        .collect()
}

/// An attention's log-sum-exp `[batch, heads, q]`, `f32`, row-major, batch and q run-time.
pub fn lse_view(heads: u32) -> View {
    LayoutSpec::new("lse")
        .dyn_axis("batch")
        .axis("heads", heads)
        .dyn_axis("q")
        .build()
        .unwrap()
        .view()
}

/// An attention's padding mask `[batch, k]` of `u32` (nonzero: a token), batch and k run-time.
pub fn keep_view() -> View {
    LayoutSpec::new("keep")
        .elem(ElemType::U32)
        .dyn_axis("batch")
        .dyn_axis("k")
        .build()
        .unwrap()
        .view()
}

/// A fused projection `qkv` `[batch, seq, hidden]` of `elem`, row-major, batch and seq run-time.
pub fn qkv_view(hidden: u32, elem: ElemType) -> View {
    LayoutSpec::new("qkv")
        .elem(elem)
        .dyn_axis("batch")
        .dyn_axis("seq")
        .axis("hidden", hidden)
        .build()
        .unwrap()
        .view()
}

/// `[batch, seq, heads, head_dim]` of `elem`, row-major, batch and seq run-time (attention's
/// heads, RoPE's input).
pub fn heads_view(name: &str, heads: u32, head_dim: u32, elem: ElemType) -> View {
    LayoutSpec::new(name)
        .elem(elem)
        .dyn_axis("batch")
        .dyn_axis("seq")
        .axis("heads", heads)
        .axis("head_dim", head_dim)
        .build()
        .unwrap()
        .view()
}

/// The SPIR-V options wgpu's Vulkan backend uses on a device with f16, subgroups and
/// cooperative matrices (capabilities included), for SPIR-V 1.6: for the tests that pass
/// shaders a machine without those features can't run through naga's SPIR-V writer.
pub fn coop_spv_options() -> naga::back::spv::Options<'static> {
    use naga::back::spv;
    let capabilities: naga::FastHashSet<spv::Capability> = [
        spv::Capability::Shader,
        spv::Capability::Matrix,
        spv::Capability::Float16,
        spv::Capability::Int64,
        spv::Capability::GroupNonUniform,
        spv::Capability::GroupNonUniformShuffle,
        spv::Capability::CooperativeMatrixKHR,
        spv::Capability::VulkanMemoryModel,
    ]
    .into_iter()
    .collect();
    spv::Options {
        lang_version: (1, 6),
        capabilities: Some(capabilities),
        bounds_check_policies: naga::proc::BoundsCheckPolicies {
            index: naga::proc::BoundsCheckPolicy::Restrict,
            buffer: naga::proc::BoundsCheckPolicy::Restrict,
            image_load: naga::proc::BoundsCheckPolicy::Restrict,
            binding_array: naga::proc::BoundsCheckPolicy::Unchecked,
        },
        zero_initialize_workgroup_memory: spv::ZeroInitializeWorkgroupMemoryMode::Polyfill,
        force_loop_bounding: true,
        use_storage_input_output_16: true,
        ..spv::Options::default()
    }
}

/// `alpha · Σ_k A[.., i, k] · B[.., k, j] + beta · C[.., i, j]` on dense row-major values, by
/// the definition; the batch is everything before the last two axes.
pub fn matmul_reference(
    a: &Tensor,
    b: &Tensor,
    c: Option<&Tensor>,
    scale: fblayout_kernels::ops::matmul::Scale,
) -> Vec<f64> {
    let (da, db) = (a.dims(), b.dims());
    let r = da.len();
    let (m, k, n) = (da[r - 2], da[r - 1], db[r - 1]);
    let products: usize = da[..r - 2].iter().product();
    let mut out = vec![0.0; products * m * n];
    for p in 0..products {
        for i in 0..m {
            for j in 0..n {
                let mut sum = 0.0;
                for kk in 0..k {
                    sum += a.values[(p * m + i) * k + kk] * b.values[(p * k + kk) * n + j];
                }
                let at = (p * m + i) * n + j;
                let old = match c {
                    Some(c) if scale.beta != 0.0 => f64::from(scale.beta) * c.values[at],
                    _ => 0.0,
                };
                out[at] = f64::from(scale.alpha) * sum + old;
            }
        }
    }
    out
}
