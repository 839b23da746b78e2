//! Views: other ways to read a tensor, with no copy.
//!
//! A [`View`] changes how a tensor is indexed, never where its bytes are. It starts as the
//! identity over a [`TensorLayout`] and composes steps, each mapping the coordinates after it
//! back to the coordinates before it:
//!
//! - **permute / transpose** reorders axes;
//! - **split** turns one axis into several (`hidden → heads × head_dim`);
//! - **merge** turns adjacent axes into one (`batch × seq → tokens`);
//! - **slice** keeps a window `start..start+len` of one axis;
//! - **broadcast** adds an axis along which every index reads the same element.
//!
//! [`View::index_fn`] substitutes the steps, last to first, into the layout's offset
//! expression: a transposed R-Tile costs an index remap, not a copy. Every step checks its
//! input and reports a [`LayoutError`] that names the view and the axis at fault.

use std::fmt;
use std::sync::Arc;

use super::error::{LayoutError, MAX_ELEMENTS};
use super::spec::Extent;
use super::tensor::TensorLayout;
use crate::expr::{Assumptions, ExprGraph, ExprId, IndexFn, ValidIndexFn, VarId, VarKind};
use crate::ident::ident_problem;

/// The extent of a view axis: `factor · Π dynamic / divisor`, exact.
///
/// `dynamic` names axes of the viewed tensor whose run-time extents multiply in; `divisor`
/// comes from splitting a run-time axis, and binding checks that it divides.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ViewExtent {
    /// The constant factor.
    pub factor: u64,
    /// Run-time extents (by axis of the viewed tensor) that multiply in.
    pub dynamic: Vec<String>,
    /// The exact divisor.
    pub divisor: u64,
}

impl ViewExtent {
    /// A static extent.
    pub fn fixed(n: u64) -> Self {
        Self {
            factor: n,
            dynamic: Vec::new(),
            divisor: 1,
        }
    }

    /// The value when static.
    pub fn as_static(&self) -> Option<u64> {
        self.dynamic.is_empty().then(|| self.factor / self.divisor)
    }

    fn of_axis(layout: &TensorLayout, i: usize) -> Self {
        let axis = &layout.axes()[i];
        match axis.extent {
            Extent::Static(n) => Self::fixed(u64::from(n)),
            Extent::Dynamic => Self {
                factor: 1,
                dynamic: vec![axis.name.clone()],
                divisor: 1,
            },
        }
    }

    /// The product of two extents; `None` when a constant part overflows `u64`.
    fn times(&self, other: &Self) -> Option<Self> {
        let mut dynamic = self.dynamic.clone();
        dynamic.extend(other.dynamic.iter().cloned());
        Some(Self {
            factor: self.factor.checked_mul(other.factor)?,
            dynamic,
            divisor: self.divisor.checked_mul(other.divisor)?,
        })
    }

    /// The extent as an expression over the run-time extent parameters.
    pub(crate) fn expr(&self, g: &mut ExprGraph) -> ExprId {
        let mut e = g.constant(self.factor);
        for axis in &self.dynamic {
            let v = g.declare(TensorLayout::extent_param(axis), VarKind::Extent);
            let ve = g.var(v);
            e = g.mul(e, ve);
        }
        if self.divisor != 1 {
            let d = g.constant(self.divisor);
            e = g.div(e, d);
        }
        e
    }

    /// Evaluates the extent given the run-time extent of each named axis; `None` when the
    /// division is not exact.
    pub fn eval(&self, value_of: impl Fn(&str) -> u64) -> Option<u64> {
        let n = self
            .dynamic
            .iter()
            .try_fold(self.factor, |acc, a| acc.checked_mul(value_of(a)))?;
        n.is_multiple_of(self.divisor).then(|| n / self.divisor)
    }
}

impl fmt::Display for ViewExtent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut parts: Vec<String> = Vec::new();
        if self.factor != 1 || self.dynamic.is_empty() {
            parts.push(self.factor.to_string());
        }
        parts.extend(self.dynamic.iter().map(|a| TensorLayout::extent_param(a)));
        write!(f, "{}", parts.join("*"))?;
        if self.divisor != 1 {
            write!(f, "/{}", self.divisor)?;
        }
        Ok(())
    }
}

/// An axis of a view.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ViewAxis {
    /// Its name.
    pub name: String,
    /// Its extent.
    pub extent: ViewExtent,
}

/// One step of a view, mapping the coordinates after it to those before it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum Step {
    /// `after[i] = before[perm[i]]`.
    Permute(Vec<usize>),
    /// Axis `at` becomes `parts.len()` axes of these extents.
    Split { at: usize, parts: Vec<ViewExtent> },
    /// Axes `at..at + extents.len()` (of these extents) become one.
    Merge { at: usize, extents: Vec<ViewExtent> },
    /// Axis `at` starts at `start`.
    Slice { at: usize, start: u32 },
    /// Axis `at` is new and ignored.
    Broadcast { at: usize },
}

/// What a view needs of the run-time extents, checked when it is bound.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) enum Requirement {
    /// A split of a run-time extent: its divisor must divide exactly.
    Divides {
        /// What was split, for the error message.
        what: String,
        /// The extent of the inferred part.
        extent: ViewExtent,
    },
    /// A slice of a run-time extent: the extent must reach the slice's end.
    AtLeast {
        /// What was sliced, for the error message.
        what: String,
        /// The sliced extent.
        extent: ViewExtent,
        /// The slice's end.
        min: u64,
    },
}

/// A way to read a tensor (see the module docs).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct View {
    layout: Arc<TensorLayout>,
    name: String,
    axes: Vec<ViewAxis>,
    steps: Vec<Step>,
    /// Run-time requirements, checked when binding: every split of a run-time extent and
    /// every slice of one, whatever steps come after it.
    requirements: Vec<Requirement>,
}

/// A part of a split: its name and its extent, or `None` to infer it from the others.
pub type SplitPart<'a> = (&'a str, Option<u32>);

impl View {
    /// The identity view of `layout`, named after it.
    pub fn identity(layout: Arc<TensorLayout>) -> Self {
        let axes = (0..layout.rank())
            .map(|i| ViewAxis {
                name: layout.axes()[i].name.clone(),
                extent: ViewExtent::of_axis(&layout, i),
            })
            .collect();
        Self {
            name: layout.name().to_owned(),
            layout,
            axes,
            steps: Vec::new(),
            requirements: Vec::new(),
        }
    }

    /// The view's name (emitted functions start with it).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The tensor it reads.
    pub fn layout(&self) -> &TensorLayout {
        &self.layout
    }

    /// Its axes, in the order its coordinates are given.
    pub fn axes(&self) -> &[ViewAxis] {
        &self.axes
    }

    /// Whether this view reads the tensor exactly as it is declared.
    pub fn is_identity(&self) -> bool {
        self.steps.is_empty()
    }

    /// The same view under another name.
    pub fn named(mut self, name: impl Into<String>) -> Result<Self, LayoutError> {
        let name = name.into();
        if let Some(why) = ident_problem(&name) {
            let site = super::error::Site::View {
                view: name.clone(),
                axis: None,
            };
            return Err(LayoutError::BadName {
                what: "view",
                name,
                why,
                site,
            });
        }
        self.name = name;
        Ok(self)
    }

    fn known(&self) -> String {
        self.axes
            .iter()
            .map(|a| a.name.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    }

    fn position(&self, axis: &str) -> Result<usize, LayoutError> {
        self.axes
            .iter()
            .position(|a| a.name == axis)
            .ok_or_else(|| LayoutError::UnknownViewAxis {
                view: self.name.clone(),
                axis: axis.to_owned(),
                known: self.known(),
            })
    }

    fn check_new_name(&self, axes: &[ViewAxis], name: &str) -> Result<(), LayoutError> {
        if let Some(why) = ident_problem(name) {
            let site = super::error::Site::View {
                view: self.name.clone(),
                axis: Some(name.into()),
            };
            return Err(LayoutError::BadName {
                what: "axis",
                name: name.into(),
                why,
                site,
            });
        }
        if let Some(dynamic) = self
            .layout
            .dynamic_axes()
            .find(|a| TensorLayout::extent_param(&a.name) == name)
        {
            return Err(LayoutError::ViewNameClash {
                view: self.name.clone(),
                axis: name.into(),
                extent_of: dynamic.name.clone(),
            });
        }
        if axes.iter().filter(|a| a.name == name).count() > 1 {
            return Err(LayoutError::DuplicateViewAxis {
                view: self.name.clone(),
                axis: name.into(),
            });
        }
        Ok(())
    }

    /// Refuses a static view extent that a `u32` coordinate can't run over (run-time ones are
    /// checked when the view is bound).
    fn check_index_space(&self, axis: &str, extent: &ViewExtent) -> Result<(), LayoutError> {
        match extent.as_static() {
            Some(n) if n > MAX_ELEMENTS => Err(LayoutError::ViewAxisTooLong {
                view: self.name.clone(),
                axis: axis.into(),
                extent: u128::from(n),
            }),
            _ => Ok(()),
        }
    }

    fn with_step(&self, axes: Vec<ViewAxis>, step: Step) -> Self {
        let mut steps = self.steps.clone();
        steps.push(step);
        Self {
            layout: Arc::clone(&self.layout),
            name: self.name.clone(),
            axes,
            steps,
            requirements: self.requirements.clone(),
        }
    }

    /// Reorders the axes to `order`, which must name each axis exactly once.
    pub fn permute(&self, order: &[&str]) -> Result<Self, LayoutError> {
        let mut perm = Vec::with_capacity(order.len());
        for name in order {
            perm.push(self.position(name)?);
        }
        let mut sorted = perm.clone();
        sorted.sort_unstable();
        sorted.dedup();
        if sorted.len() != self.axes.len() || perm.len() != self.axes.len() {
            return Err(LayoutError::NotAPermutation {
                view: self.name.clone(),
                given: order.join(", "),
                expected: self.known(),
            });
        }
        let axes = perm.iter().map(|&i| self.axes[i].clone()).collect();
        Ok(self.with_step(axes, Step::Permute(perm)))
    }

    /// Swaps two axes.
    pub fn transpose(&self, a: &str, b: &str) -> Result<Self, LayoutError> {
        let (i, j) = (self.position(a)?, self.position(b)?);
        let mut order: Vec<&str> = self.axes.iter().map(|x| x.name.as_str()).collect();
        order.swap(i, j);
        self.permute(&order)
    }

    /// Splits `axis` into `parts`, outermost first. At most one part may leave its extent to
    /// be inferred (`None`); a run-time axis must leave exactly one.
    pub fn split(&self, axis: &str, parts: &[SplitPart<'_>]) -> Result<Self, LayoutError> {
        let at = self.position(axis)?;
        let whole = self.axes[at].extent.clone();
        let describe = || {
            let into: Vec<String> = parts
                .iter()
                .map(|(n, e)| format!("{n}={}", e.map_or("_".to_owned(), |e| e.to_string())))
                .collect();
            (
                format!("`{axis}` ({whole})"),
                format!("({})", into.join(", ")),
            )
        };
        let mismatch = |detail: String| {
            let (from, into) = describe();
            LayoutError::ReshapeMismatch {
                view: self.name.clone(),
                from,
                into,
                detail,
            }
        };
        let Some(known) = parts
            .iter()
            .filter_map(|(_, e)| e.map(u64::from))
            .try_fold(1u64, u64::checked_mul)
        else {
            return Err(mismatch("the parts multiply past 2^64".into()));
        };
        let inferred = parts.iter().filter(|(_, e)| e.is_none()).count();
        if parts.iter().any(|(_, e)| *e == Some(0)) {
            return Err(mismatch("a part has extent 0".into()));
        }
        let rest = match (whole.as_static(), inferred) {
            (_, n) if n > 1 => {
                return Err(mismatch("at most one part may be inferred (`_`)".into()));
            }
            (Some(e), 0) if e != known => {
                return Err(mismatch(format!("the parts multiply to {known}, not {e}")));
            }
            (Some(_), 0) => None,
            (Some(e), _) if !e.is_multiple_of(known) => {
                return Err(mismatch(format!("{e} is not a multiple of {known}")));
            }
            (Some(e), _) => Some(ViewExtent::fixed(e / known)),
            (None, 0) => {
                return Err(mismatch(format!(
                    "`{axis}` has a run-time extent, so one part must be inferred (`_`)"
                )));
            }
            (None, _) => Some(ViewExtent {
                factor: whole.factor,
                dynamic: whole.dynamic.clone(),
                divisor: whole
                    .divisor
                    .checked_mul(known)
                    .ok_or_else(|| mismatch("the divisors multiply past 2^64".into()))?,
            }),
        };
        let extents: Vec<ViewExtent> = parts
            .iter()
            .map(|(_, e)| match e {
                Some(n) => ViewExtent::fixed(u64::from(*n)),
                None => rest
                    .clone()
                    .expect("a part left to infer has its extent inferred above"),
            })
            .collect();
        let mut axes = self.axes.clone();
        axes.splice(
            at..=at,
            parts.iter().zip(&extents).map(|((n, _), e)| ViewAxis {
                name: (*n).into(),
                extent: e.clone(),
            }),
        );
        for ((name, _), extent) in parts.iter().zip(&extents) {
            self.check_new_name(&axes, name)?;
            self.check_index_space(name, extent)?;
        }
        let mut view = self.with_step(axes, Step::Split { at, parts: extents });
        if let Some(extent) = rest.filter(|r| r.as_static().is_none()) {
            // Whatever steps follow (a merge multiplies the divisor back out), the run-time
            // extent must split exactly.
            view.requirements.push(Requirement::Divides {
                what: format!(
                    "view `{}` splits `{axis}` ({whole}) into {known} parts",
                    self.name
                ),
                extent,
            });
        }
        Ok(view)
    }

    /// Merges `axes`, which must be adjacent and in view order, into one axis `into`.
    pub fn merge(&self, axes: &[&str], into: &str) -> Result<Self, LayoutError> {
        let positions: Vec<usize> = axes
            .iter()
            .map(|a| self.position(a))
            .collect::<Result<_, _>>()?;
        let at = *positions
            .first()
            .ok_or_else(|| LayoutError::MergeNotAdjacent {
                view: self.name.clone(),
                axes: String::new(),
            })?;
        if positions.iter().enumerate().any(|(k, &p)| p != at + k) {
            return Err(LayoutError::MergeNotAdjacent {
                view: self.name.clone(),
                axes: axes.join(", "),
            });
        }
        let extents: Vec<ViewExtent> = positions
            .iter()
            .map(|&p| self.axes[p].extent.clone())
            .collect();
        let merged = extents
            .iter()
            .skip(1)
            .try_fold(extents[0].clone(), |acc, e| acc.times(e))
            .ok_or_else(|| LayoutError::ViewAxisTooLong {
                view: self.name.clone(),
                axis: into.into(),
                extent: extents
                    .iter()
                    .filter_map(ViewExtent::as_static)
                    .fold(1u128, |acc, n| acc.saturating_mul(u128::from(n))),
            })?;
        self.check_index_space(into, &merged)?;
        let mut new_axes = self.axes.clone();
        new_axes.splice(
            at..at + positions.len(),
            [ViewAxis {
                name: into.into(),
                extent: merged,
            }],
        );
        self.check_new_name(&new_axes, into)?;
        Ok(self.with_step(new_axes, Step::Merge { at, extents }))
    }

    /// Keeps `start..start + len` of `axis`, renumbered from 0.
    pub fn slice(&self, axis: &str, start: u32, len: u32) -> Result<Self, LayoutError> {
        let at = self.position(axis)?;
        let whole = self.axes[at].extent.clone();
        let end = u64::from(start) + u64::from(len);
        let out_of_range = || LayoutError::SliceOutOfRange {
            view: self.name.clone(),
            axis: axis.into(),
            start,
            end,
            extent: whole.to_string(),
        };
        if len == 0 {
            return Err(LayoutError::EmptySlice {
                view: self.name.clone(),
                axis: axis.into(),
            });
        }
        let mut requirements = self.requirements.clone();
        match whole.as_static() {
            Some(e) if end > e => return Err(out_of_range()),
            Some(_) => {}
            None => requirements.push(Requirement::AtLeast {
                what: format!("view `{}` slices `{axis}` up to {end}", self.name),
                extent: whole,
                min: end,
            }),
        }
        let mut axes = self.axes.clone();
        axes[at].extent = ViewExtent::fixed(u64::from(len));
        let mut view = self.with_step(axes, Step::Slice { at, start });
        view.requirements = requirements;
        Ok(view)
    }

    /// Adds an axis `name` of extent `extent` at position `at`; every index along it reads the
    /// same element.
    pub fn broadcast(&self, name: &str, extent: u32, at: usize) -> Result<Self, LayoutError> {
        if at > self.axes.len() {
            return Err(LayoutError::BroadcastPosition {
                view: self.name.clone(),
                axis: name.into(),
                at,
                rank: self.axes.len(),
            });
        }
        if extent == 0 {
            return Err(LayoutError::ZeroExtent {
                tensor: self.name.clone(),
                axis: name.into(),
            });
        }
        let mut axes = self.axes.clone();
        axes.insert(
            at,
            ViewAxis {
                name: name.into(),
                extent: ViewExtent::fixed(u64::from(extent)),
            },
        );
        self.check_new_name(&axes, name)?;
        Ok(self.with_step(axes, Step::Broadcast { at }))
    }

    /// What binding checks of the run-time extents.
    pub(crate) fn requirements(&self) -> &[Requirement] {
        &self.requirements
    }

    /// Maps view coordinates back to the tensor's logical coordinates.
    fn pull_back(&self, g: &mut ExprGraph, mut cur: Vec<ExprId>) -> Vec<ExprId> {
        for step in self.steps.iter().rev() {
            cur = match step {
                Step::Permute(perm) => {
                    let mut before = cur.clone();
                    for (i, &p) in perm.iter().enumerate() {
                        before[p] = cur[i];
                    }
                    before
                }
                Step::Split { at, parts } => {
                    let n = parts.len();
                    let mut sum = None;
                    for j in 0..n {
                        let mut stride = g.constant(1);
                        for part in &parts[j + 1..] {
                            let e = part.expr(g);
                            stride = g.mul(stride, e);
                        }
                        let term = g.mul(cur[at + j], stride);
                        sum = Some(match sum {
                            None => term,
                            Some(s) => g.add(s, term),
                        });
                    }
                    let mut before = cur[..*at].to_vec();
                    before.push(sum.unwrap_or_else(|| g.constant(0)));
                    before.extend_from_slice(&cur[at + n..]);
                    before
                }
                Step::Merge { at, extents } => {
                    let m = cur[*at];
                    let mut parts = Vec::new();
                    for j in 0..extents.len() {
                        let mut inner = g.constant(1);
                        for e in &extents[j + 1..] {
                            let ee = e.expr(g);
                            inner = g.mul(inner, ee);
                        }
                        let q = g.div(m, inner);
                        let ej = extents[j].expr(g);
                        parts.push(g.rem(q, ej));
                    }
                    let mut before = cur[..*at].to_vec();
                    before.extend(parts);
                    before.extend_from_slice(&cur[at + 1..]);
                    before
                }
                Step::Slice { at, start } => {
                    let s = g.constant(u64::from(*start));
                    let mut before = cur.clone();
                    before[*at] = g.add(cur[*at], s);
                    before
                }
                Step::Broadcast { at } => {
                    let mut before = cur.clone();
                    before.remove(*at);
                    before
                }
            };
        }
        cur
    }

    /// The offset and bounds mask of this view, as written before simplification.
    ///
    /// Parameters: one coordinate per view axis (named after it, in view order), then the
    /// run-time extents of the tensor (`<axis>_len`, in the tensor's axis order).
    pub fn index_fn(&self) -> ValidIndexFn {
        let mut g = ExprGraph::unshared();
        let mut params: Vec<VarId> = self
            .axes
            .iter()
            .map(|a| g.declare(a.name.clone(), VarKind::Coord))
            .collect();
        let coords: Vec<ExprId> = params.iter().map(|&p| g.var(p)).collect();
        params.extend(self.layout.declare_extents(&mut g));
        let base = self.pull_back(&mut g, coords.clone());
        let offset = self.layout.offset_expr(&mut g, &base);
        let mut checks = Vec::new();
        let mut assume = Assumptions::default();
        for (axis, (&c, &p)) in self.axes.iter().zip(coords.iter().zip(&params)) {
            let e = axis.extent.expr(&mut g);
            checks.push(g.lt(c, e));
            if let Some(n) = axis.extent.as_static() {
                assume.upper.insert(p, n.saturating_sub(1));
            }
        }
        let in_bounds = TensorLayout::conjunction(&mut g, checks);
        let f = IndexFn {
            name: self.name.clone(),
            graph: g,
            params,
            offset,
            in_bounds,
            assume,
        };
        f.validate()
            .expect("views check their names when they are built")
    }
}
