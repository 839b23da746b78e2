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
//! A view keeps the steps it was made of, as [`ViewStep`]s that name axes, each with the axes
//! it was applied to. [`View::index_fn`] substitutes the steps, last to first, into the
//! layout's offset expression, resolving each step's names against those axes: a transposed
//! R-Tile costs an index remap, not a copy. Every step checks its input and reports a
//! [`LayoutError`] that names the view and the axis at fault.

use std::fmt;
use std::sync::Arc;

use super::error::{LayoutError, MAX_ELEMENTS};
use super::memo::{Compiled, Memo};
use super::spec::Extent;
use super::step::ViewStep;
use super::tensor::TensorLayout;
use crate::expr::{
    Assumptions, ExprGraph, ExprId, IndexFn, ValidIndexFn, VarId, VarKind, eval_exact,
};
use crate::ident::ident_problem;

/// The extent of a view axis: `factor · Π dynamic / divisor`, exact.
///
/// `dynamic` names axes of the viewed tensor whose run-time extents multiply in; `divisor`
/// comes from splitting a run-time axis, and binding checks that it divides.
///
/// Its value is defined once, as an index expression over the run-time extent parameters:
/// its text ([`Display`](fmt::Display), such as `12 * seq_len / 4`) is that expression
/// printed, [`eval`](Self::eval) and [`as_static`](Self::as_static) evaluate it exactly, and
/// the index code and the derive's view shapes are built from it.
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

    /// The value when static: the extent evaluated with no run-time extent known.
    pub fn as_static(&self) -> Option<u64> {
        self.value(|_| None)
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

    /// The extent as an expression over the run-time extent parameters (`<axis>_len`): the
    /// one definition of its value (see the type's docs). A factor or divisor of 1 is left out.
    pub(crate) fn expr(&self, g: &mut ExprGraph) -> ExprId {
        let mut factors = Vec::with_capacity(self.dynamic.len() + 1);
        if self.factor != 1 || self.dynamic.is_empty() {
            factors.push(g.constant(self.factor));
        }
        for axis in &self.dynamic {
            let v = g.declare(TensorLayout::extent_param(axis), VarKind::Extent);
            factors.push(g.var(v));
        }
        let product = factors
            .into_iter()
            .reduce(|a, b| g.mul(a, b))
            .expect("an extent with no run-time part keeps its constant factor");
        if self.divisor == 1 {
            product
        } else {
            let d = g.constant(self.divisor);
            g.div(product, d)
        }
    }

    /// Evaluates the extent given the run-time extent of each named axis; `None` when the
    /// division is not exact (or the product does not fit `u64`).
    pub fn eval(&self, value_of: impl Fn(&str) -> u64) -> Option<u64> {
        self.value(|axis| Some(value_of(axis)))
    }

    /// [`expr`](Self::expr) evaluated exactly, with the run-time extent of each named axis
    /// given by `value_of`.
    fn value(&self, value_of: impl Fn(&str) -> Option<u64>) -> Option<u64> {
        let mut g = ExprGraph::unshared();
        let e = self.expr(&mut g);
        eval_exact(&g, e, |var| {
            self.dynamic
                .iter()
                .find(|axis| TensorLayout::extent_param(axis) == var.name)
                .and_then(|axis| value_of(axis))
        })
    }
}

/// The extent's expression, printed (`seq_len`, `batch_len * seq_len`, `12 * seq_len / 4`).
impl fmt::Display for ViewExtent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut g = ExprGraph::unshared();
        let e = self.expr(&mut g);
        f.write_str(&g.display(e))
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

/// A step of a view with the axes it was applied to, against which its names resolve.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Applied {
    /// The axes before the step (those after it are the next step's, or the view's own).
    before: Vec<ViewAxis>,
    /// The step.
    step: ViewStep<String>,
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
    /// The steps that made the view from the identity, first to last.
    steps: Vec<Applied>,
    /// Run-time requirements, checked when binding: every split of a run-time extent and
    /// every slice of one, whatever steps come after it.
    requirements: Vec<Requirement>,
    /// The simplified and compiled index code, made on first use (see [`Memo`]).
    memo: Memo,
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
            memo: Memo::default(),
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
        // The index functions are named after the view.
        self.memo = Memo::default();
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

    fn with_step(&self, axes: Vec<ViewAxis>, step: ViewStep<String>) -> Self {
        let mut steps = self.steps.clone();
        steps.push(Applied {
            before: self.axes.clone(),
            step,
        });
        Self {
            layout: Arc::clone(&self.layout),
            name: self.name.clone(),
            axes,
            steps,
            requirements: self.requirements.clone(),
            memo: Memo::default(),
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
        let step = ViewStep::Permute(order.iter().map(|&n| n.to_owned()).collect());
        Ok(self.with_step(axes, step))
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
        let step = ViewStep::Split {
            axis: axis.to_owned(),
            parts: parts.iter().map(|&(n, e)| (n.to_owned(), e)).collect(),
        };
        let mut view = self.with_step(axes, step);
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
        let extents: Vec<&ViewExtent> = positions.iter().map(|&p| &self.axes[p].extent).collect();
        let merged = extents
            .iter()
            .skip(1)
            .try_fold(extents[0].clone(), |acc, e| acc.times(e))
            .ok_or_else(|| LayoutError::ViewAxisTooLong {
                view: self.name.clone(),
                axis: into.into(),
                extent: extents
                    .iter()
                    .filter_map(|e| e.as_static())
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
        let step = ViewStep::Merge {
            axes: axes.iter().map(|&a| a.to_owned()).collect(),
            into: into.to_owned(),
        };
        Ok(self.with_step(new_axes, step))
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
        let step = ViewStep::Slice {
            axis: axis.to_owned(),
            start,
            len,
        };
        let mut view = self.with_step(axes, step);
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
        let step = ViewStep::Broadcast {
            axis: name.to_owned(),
            extent,
            at,
        };
        Ok(self.with_step(axes, step))
    }

    /// What binding checks of the run-time extents.
    pub(crate) fn requirements(&self) -> &[Requirement] {
        &self.requirements
    }

    /// The steps that made this view from the identity, first to last.
    pub(crate) fn steps(&self) -> impl Iterator<Item = &ViewStep<String>> {
        self.steps.iter().map(|a| &a.step)
    }

    /// Maps view coordinates back to the tensor's logical coordinates, step by step from the
    /// last, each step's names resolved against the axes before and after it.
    fn pull_back(&self, g: &mut ExprGraph, mut cur: Vec<ExprId>) -> Vec<ExprId> {
        let after = self
            .steps
            .iter()
            .skip(1)
            .map(|a| a.before.as_slice())
            .chain([self.axes.as_slice()]);
        let steps: Vec<(&Applied, &[ViewAxis])> = self.steps.iter().zip(after).collect();
        for (Applied { before, step }, after) in steps.into_iter().rev() {
            let at = |axes: &[ViewAxis], name: &str| {
                axes.iter()
                    .position(|a| a.name == name)
                    .expect("a step names the axes it was applied to and made")
            };
            cur = match step {
                ViewStep::Permute(_) | ViewStep::Transpose(..) => {
                    before.iter().map(|a| cur[at(after, &a.name)]).collect()
                }
                ViewStep::Split { axis, parts } => {
                    let at = at(before, axis);
                    let n = parts.len();
                    let extents = &after[at..at + n];
                    let mut sum = None;
                    for j in 0..n {
                        let mut stride = g.constant(1);
                        for part in &extents[j + 1..] {
                            let e = part.extent.expr(g);
                            stride = g.mul(stride, e);
                        }
                        let term = g.mul(cur[at + j], stride);
                        sum = Some(match sum {
                            None => term,
                            Some(s) => g.add(s, term),
                        });
                    }
                    let mut before = cur[..at].to_vec();
                    before.push(sum.unwrap_or_else(|| g.constant(0)));
                    before.extend_from_slice(&cur[at + n..]);
                    before
                }
                ViewStep::Merge { axes, .. } => {
                    let at = at(before, &axes[0]);
                    let extents = &before[at..at + axes.len()];
                    // Unravel the merged coordinate, innermost part first: part `j` is
                    // `rest % extent_j`, and `rest / extent_j` goes on outwards. Wherever the
                    // view is in bounds the merged coordinate is below the product of the
                    // extents, so what reaches the outermost part is already below its extent
                    // and needs no `%` (offsets are defined where `in_bounds` holds, and every
                    // reader guards them with it).
                    let mut rest = cur[at];
                    let mut parts = vec![rest; extents.len()];
                    for j in (1..extents.len()).rev() {
                        let ej = extents[j].extent.expr(g);
                        parts[j] = g.rem(rest, ej);
                        rest = g.div(rest, ej);
                    }
                    parts[0] = rest;
                    let mut before = cur[..at].to_vec();
                    before.extend(parts);
                    before.extend_from_slice(&cur[at + 1..]);
                    before
                }
                ViewStep::Slice { axis, start, .. } => {
                    let at = at(before, axis);
                    let s = g.constant(u64::from(*start));
                    let mut before = cur.clone();
                    before[at] = g.add(cur[at], s);
                    before
                }
                ViewStep::Broadcast { axis, .. } => {
                    let mut before = cur.clone();
                    before.remove(at(after, axis));
                    before
                }
            };
        }
        cur
    }

    /// [`index_fn`](Self::index_fn) simplified: what every emitter and kernel uses. Computed
    /// once per view and shared by its clones.
    pub fn simplified_fn(&self) -> &ValidIndexFn {
        &self.compiled().simplified
    }

    /// The simplified index function and its CPU form, made on first use.
    pub(crate) fn compiled(&self) -> &Compiled {
        self.memo.get_or_init(|| self.index_fn().simplified())
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

#[cfg(test)]
mod tests {
    use super::*;

    fn extent(factor: u64, dynamic: &[&str], divisor: u64) -> ViewExtent {
        ViewExtent {
            factor,
            dynamic: dynamic.iter().map(|&a| a.to_owned()).collect(),
            divisor,
        }
    }

    #[test]
    fn an_extent_reads_as_its_formula() {
        assert_eq!(ViewExtent::fixed(6).to_string(), "6");
        assert_eq!(extent(1, &["seq"], 1).to_string(), "seq_len");
        assert_eq!(
            extent(1, &["batch", "seq"], 1).to_string(),
            "batch_len * seq_len"
        );
        assert_eq!(extent(1, &["seq"], 16).to_string(), "seq_len / 16");
        assert_eq!(extent(12, &["seq"], 4).to_string(), "12 * seq_len / 4");
    }

    /// Steps name axes; a name that an earlier step gave to another axis resolves to the axis
    /// that held it when the step was applied. Here `b` is split into a new `b` and `c`, then
    /// `a` and the new `b` are merged into a new `a`: row-major `x[a, b]` (offset `6a + b`) read
    /// as `(c, r, a')` is element `3a' + c`, whatever `r`.
    #[test]
    fn names_resolve_against_the_axes_at_each_step() {
        let x = super::super::LayoutSpec::new("x")
            .axis("a", 4)
            .axis("b", 6)
            .build()
            .expect("valid");
        let v = x
            .view()
            .split("b", &[("b", Some(2)), ("c", Some(3))])
            .and_then(|v| v.merge(&["a", "b"], "a"))
            .and_then(|v| v.transpose("a", "c"))
            .and_then(|v| v.broadcast("r", 2, 1))
            .expect("valid steps");
        let bound = v.bind(&[]).expect("static");
        assert_eq!(bound.shape(), [3, 2, 8]);
        for c in 0..3 {
            for r in 0..2 {
                for a in 0..8 {
                    assert_eq!(bound.offset(&[c, r, a]), Some(3 * a + c), "({c}, {r}, {a})");
                }
            }
        }
    }

    /// `eval` against `factor · Π dynamic / divisor` worked out in `u128`: the value when the
    /// division is exact and the product fits `u64`, else `None`.
    #[test]
    fn an_extent_evaluates_exactly() {
        let values = [1u64, 2, 3, 5, 8, 12, 1 << 31, u64::from(u32::MAX)];
        for factor in [1u64, 2, 3, 12, 1 << 32] {
            for divisor in [1u64, 2, 4, 6, 16] {
                for &a in &values {
                    for &b in &values {
                        let e = extent(factor, &["a", "b"], divisor);
                        let product = u128::from(factor) * u128::from(a) * u128::from(b);
                        let want = (product % u128::from(divisor) == 0)
                            .then(|| product / u128::from(divisor))
                            .filter(|_| product <= u128::from(u64::MAX))
                            .map(|v| v as u64);
                        let got = e.eval(|axis| if axis == "a" { a } else { b });
                        assert_eq!(got, want, "{e} with a = {a}, b = {b}");
                    }
                }
            }
        }
        assert_eq!(extent(12, &[], 4).as_static(), Some(3));
        assert_eq!(extent(12, &["a"], 4).as_static(), None);
    }

    /// A row-major `act[batch, seq, 768]` read as `[tokens, hidden]` is one stride: the
    /// unravel of `tokens` into `(tokens / seq_len, tokens % seq_len)` folds back into
    /// `tokens`, so no kernel pays a run-time division for it. The offsets are those of the
    /// definition, `768 · (seq_len · b + s) + hidden` at `tokens = seq_len · b + s`.
    #[test]
    fn a_merge_of_run_time_axes_reads_one_stride() {
        let act = super::super::LayoutSpec::new("act")
            .dyn_axis("batch")
            .dyn_axis("seq")
            .axis("hidden", 768)
            .build()
            .expect("valid");
        let v = act
            .view()
            .merge(&["batch", "seq"], "tokens")
            .expect("adjacent axes");
        let f = v.simplified_fn();
        assert_eq!(f.graph.display(f.offset), "hidden + (tokens * 768)");
        let wgsl = crate::emit::wgsl::emit_views("x", &[&v]).expect("valid WGSL");
        let src = wgsl.source();
        let start = src
            .find("fn act_offset(tokens: u32, hidden: u32, batch_len: u32, seq_len: u32) -> u32")
            .expect("the offset function is emitted");
        let body = &src[start..start + src[start..].find('}').expect("a body")];
        assert!(body.contains("return hidden + (tokens * 768u);"), "{body}");
        let (batch, seq) = (3u64, 5u64);
        let bound = v
            .bind(&[("batch", batch as u32), ("seq", seq as u32)])
            .expect("binds");
        for b in 0..batch {
            for s in 0..seq {
                for hidden in [0, 1, 767] {
                    let want = 768 * (seq * b + s) + hidden;
                    assert_eq!(bound.offset(&[seq * b + s, hidden]), Some(want));
                }
            }
        }
        assert_eq!(bound.offset(&[batch * seq, 0]), None);
    }

    /// An R-Tile merge still unravels `tokens` (its tiles are per sequence), but once: the
    /// outermost part needs no `% batch_len` where the view is in bounds. The index function
    /// (offset and mask) costs 20 operations; with the `%` it cost 21. A merge of a static,
    /// a run-time and a static axis of a row-major tensor costs only its mask (2), down from
    /// 12 operations.
    #[test]
    fn a_merge_unravels_once() {
        let rt = super::super::LayoutSpec::new("rt")
            .dyn_axis("batch")
            .dyn_axis("seq")
            .axis("hidden", 768)
            .rtile()
            .reduce_forward(["hidden"])
            .reduce_backward(["seq"])
            .build()
            .expect("valid");
        let v = rt
            .view()
            .merge(&["batch", "seq"], "tokens")
            .expect("adjacent");
        let f = v.simplified_fn();
        let offset = f.graph.display(f.offset);
        assert_eq!(offset.matches("tokens / seq_len").count(), 1, "{offset}");
        assert!(!offset.contains("batch_len"), "{offset}");
        assert_eq!(f.op_count(), 20, "{offset}");
        let s3 = super::super::LayoutSpec::new("s3")
            .axis("a", 3)
            .dyn_axis("b")
            .axis("c", 5)
            .build()
            .expect("valid");
        let v = s3.view().merge(&["a", "b", "c"], "m").expect("adjacent");
        let f = v.simplified_fn();
        assert_eq!(f.graph.display(f.offset), "m");
        assert_eq!(f.op_count(), 2);
    }
}
