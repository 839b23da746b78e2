//! Walks: how a workgroup's lanes cover a block of a 2-D view, in the view's memory order (see
//! the docs of [`reduce_rows`](super)).

use fblayout_core::layout::View;

use super::value_type;

/// The run-time extent every layout axis is bound to when [`memory_order`] samples a view.
const SAMPLE_EXTENT: u32 = 64;

/// The longest run [`memory_order`] looks for.
const MAX_RUN: u64 = 1024;

/// The longest block [`memory_order`] looks for.
const MAX_BLOCK: u64 = 64;

/// How a 2-D view is laid out near its origin, along a *fast* axis.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct MemoryOrder {
    /// The largest power of two `n` such that coordinates `0..n` along the fast axis are `n`
    /// consecutive elements.
    pub(crate) run: u32,
    /// The largest power of two `h` such that `h` such runs, at coordinates `0..h` of the other
    /// axis, follow one another in memory.
    pub(crate) block: u32,
}

/// The memory order of `view` (2-D) along axis `fast`, sampled with every run-time extent
/// bound to [`SAMPLE_EXTENT`]. A view that does not bind there counts as scattered.
pub(crate) fn memory_order(view: &View, fast: usize) -> MemoryOrder {
    let scattered = MemoryOrder { run: 1, block: 1 };
    let names: Vec<String> = view
        .layout()
        .dynamic_axes()
        .map(|a| a.name.clone())
        .collect();
    let extents: Vec<(&str, u32)> = names.iter().map(|n| (n.as_str(), SAMPLE_EXTENT)).collect();
    let Ok(bound) = view.bind(&extents) else {
        return scattered;
    };
    if bound.shape().len() != 2 {
        return scattered;
    }
    let other = 1 - fast;
    let at = |f: u64, o: u64| {
        let mut c = [0, 0];
        c[fast] = f;
        c[other] = o;
        bound.offset(&c)
    };
    let Some(base) = at(0, 0) else {
        return scattered;
    };
    let mut run = 1;
    while run * 2 <= bound.shape()[fast].min(MAX_RUN)
        && (run..2 * run).all(|j| at(j, 0) == Some(base + j))
    {
        run *= 2;
    }
    let mut block = 1;
    while block * 2 <= bound.shape()[other].min(MAX_BLOCK)
        && (block..2 * block).all(|k| (0..run).all(|j| at(j, k) == Some(base + k * run + j)))
    {
        block *= 2;
    }
    MemoryOrder {
        run: run as u32,
        block: block as u32,
    }
}

/// How a workgroup's lanes cover a block of a 2-D view (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Walk {
    /// The view axis lanes step along first (contiguous in memory).
    pub(crate) fast: usize,
    /// Elements per lane along it: 4 when every operand has wide accesses along it, else 1.
    pub(crate) width: u32,
    /// Lanes along the fast axis before the other axis.
    pub(crate) inner: u32,
    /// Lanes along the other axis.
    pub(crate) across: u32,
    /// Lanes along the fast axis after the other axis.
    pub(crate) outer: u32,
}

impl Walk {
    /// The walk of a workgroup of `lanes` lanes with `along` of them on each line of the fast
    /// axis, over a view in `order`. `along` and `lanes` are powers of two, `along <= lanes`.
    pub(crate) fn new(fast: usize, width: u32, order: MemoryOrder, along: u32, lanes: u32) -> Self {
        let inner = (order.run / width).clamp(1, along);
        Self {
            fast,
            width,
            inner,
            across: lanes / along,
            outer: along / inner,
        }
    }

    /// Invocations per workgroup.
    pub(crate) fn lanes(&self) -> u32 {
        self.inner * self.across * self.outer
    }

    /// Lanes along the fast axis.
    pub(crate) fn along(&self) -> u32 {
        self.inner * self.outer
    }

    /// Elements along the fast axis that one sweep of the lanes covers.
    pub(crate) fn span(&self) -> u32 {
        self.along() * self.width
    }

    /// The WGSL type a lane holds: `vec4<f32>` or `f32`.
    pub(crate) fn value_type(&self) -> &'static str {
        value_type(self.width)
    }

    /// WGSL statements that decode `lid` into `wk_inner`, `wk_across`, `wk_outer` and
    /// `wk_fast` (the lane's first coordinate along the fast axis inside one sweep).
    pub(crate) fn decode(&self, lid: &str) -> String {
        let Self {
            width,
            inner,
            across,
            ..
        } = *self;
        format!(
            "    let wk_inner = {lid} % {inner}u;\n\
             \x20   let wk_across = ({lid} / {inner}u) % {across}u;\n\
             \x20   let wk_outer = {lid} / {}u;\n\
             \x20   let wk_fast = (wk_outer * {inner}u + wk_inner) * {width}u;\n",
            inner * across
        )
    }

    /// The lane of the same `inner` and `outer` as the current one, at `across` position `q`
    /// (a WGSL expression in `lid` and `q`).
    pub(crate) fn lane_at_across(&self, q: &str) -> String {
        format!(
            "(wk_inner + {}u * ({q} + {}u * wk_outer))",
            self.inner, self.across
        )
    }
}
