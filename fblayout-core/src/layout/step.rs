//! View steps: what a view does to the axes it reads, by name.
//!
//! A [`ViewStep`] names the axes of the view it applies to. The derive parses its attributes
//! into steps and checks them with
//! [`TensorDescriptor::declare`](crate::typed::TensorDescriptor::declare), which applies them;
//! a [`View`] keeps the steps it was made of and resolves their names against the axes each
//! one was applied to when it lowers to index code.

use std::fmt;

use super::error::LayoutError;
use super::view::{SplitPart, View};

/// One step of a view (see [`View`] for what each does), naming the axes it reads and makes.
///
/// Names are anything that reads as a `&str`: `&'static str` in code the derive generates,
/// `String` in a declaration read from a file and in a [`View`]'s own history, or the derive's
/// own spanned names, so that the one step type serves the parser, the checks, the generated
/// code and the view alike.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum ViewStep<S> {
    /// Reorders the axes; names every axis once.
    Permute(Vec<S>),
    /// Swaps two axes.
    Transpose(S, S),
    /// Splits an axis into parts, outermost first; one part may be inferred (`None`).
    Split {
        /// The axis split.
        axis: S,
        /// The parts: a name and an extent, or `None` for the one inferred.
        parts: Vec<(S, Option<u32>)>,
    },
    /// Merges adjacent axes into one.
    Merge {
        /// The axes merged, in view order.
        axes: Vec<S>,
        /// The merged axis.
        into: S,
    },
    /// Keeps `start..start + len` of an axis.
    Slice {
        /// The axis.
        axis: S,
        /// The first index kept.
        start: u32,
        /// How many indices are kept.
        len: u32,
    },
    /// Adds an axis along which every index reads the same element.
    Broadcast {
        /// The new axis.
        axis: S,
        /// Its extent.
        extent: u32,
        /// Its position.
        at: usize,
    },
}

impl<S: AsRef<str>> ViewStep<S> {
    /// Applies this step to `view`.
    pub fn apply(&self, view: &View) -> Result<View, LayoutError> {
        fn names<S: AsRef<str>>(list: &[S]) -> Vec<&str> {
            list.iter().map(AsRef::as_ref).collect()
        }
        match self {
            Self::Permute(order) => view.permute(&names(order)),
            Self::Transpose(a, b) => view.transpose(a.as_ref(), b.as_ref()),
            Self::Split { axis, parts } => {
                let parts: Vec<SplitPart<'_>> =
                    parts.iter().map(|(n, e)| (n.as_ref(), *e)).collect();
                view.split(axis.as_ref(), &parts)
            }
            Self::Merge { axes, into } => view.merge(&names(axes), into.as_ref()),
            Self::Slice { axis, start, len } => view.slice(axis.as_ref(), *start, *len),
            Self::Broadcast { axis, extent, at } => view.broadcast(axis.as_ref(), *extent, *at),
        }
    }

    /// Every name the step mentions, in the order written: the axes it reads, then the axes it
    /// creates.
    pub fn names(&self) -> Vec<&S> {
        match self {
            Self::Permute(axes) => axes.iter().collect(),
            Self::Transpose(a, b) => vec![a, b],
            Self::Split { axis, parts } => std::iter::once(axis)
                .chain(parts.iter().map(|(n, _)| n))
                .collect(),
            Self::Merge { axes, into } => axes.iter().chain([into]).collect(),
            Self::Slice { axis, .. } => vec![axis],
            Self::Broadcast { axis, .. } => vec![axis],
        }
    }

    /// The axes the step creates (split parts, the merged axis, a broadcast axis).
    pub fn new_axes(&self) -> Vec<&S> {
        match self {
            Self::Split { parts, .. } => parts.iter().map(|(n, _)| n).collect(),
            Self::Merge { into, .. } => vec![into],
            Self::Broadcast { axis, .. } => vec![axis],
            Self::Permute(_) | Self::Transpose(..) | Self::Slice { .. } => Vec::new(),
        }
    }

    /// The same step with every name mapped by `f`.
    pub fn map<T>(&self, mut f: impl FnMut(&S) -> T) -> ViewStep<T> {
        match self {
            Self::Permute(axes) => ViewStep::Permute(axes.iter().map(&mut f).collect()),
            Self::Transpose(a, b) => ViewStep::Transpose(f(a), f(b)),
            Self::Split { axis, parts } => ViewStep::Split {
                axis: f(axis),
                parts: parts.iter().map(|(n, e)| (f(n), *e)).collect(),
            },
            Self::Merge { axes, into } => ViewStep::Merge {
                axes: axes.iter().map(&mut f).collect(),
                into: f(into),
            },
            Self::Slice { axis, start, len } => ViewStep::Slice {
                axis: f(axis),
                start: *start,
                len: *len,
            },
            Self::Broadcast { axis, extent, at } => ViewStep::Broadcast {
                axis: f(axis),
                extent: *extent,
                at: *at,
            },
        }
    }
}

impl<S: AsRef<str>> fmt::Display for ViewStep<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let join = |list: &[S]| {
            list.iter()
                .map(AsRef::as_ref)
                .collect::<Vec<&str>>()
                .join(", ")
        };
        match self {
            Self::Permute(order) => write!(f, "permute({})", join(order)),
            Self::Transpose(a, b) => write!(f, "transpose({}, {})", a.as_ref(), b.as_ref()),
            Self::Split { axis, parts } => {
                let parts: Vec<String> = parts
                    .iter()
                    .map(|(n, e)| {
                        let e = e.map_or("_".to_owned(), |e| e.to_string());
                        format!("{} = {e}", n.as_ref())
                    })
                    .collect();
                write!(f, "split({} => {})", axis.as_ref(), parts.join(", "))
            }
            Self::Merge { axes, into } => {
                write!(f, "merge({} => {})", join(axes), into.as_ref())
            }
            Self::Slice { axis, start, len } => {
                write!(
                    f,
                    "slice({}, {start}..{})",
                    axis.as_ref(),
                    u64::from(*start) + u64::from(*len)
                )
            }
            Self::Broadcast { axis, extent, at } => {
                write!(f, "broadcast({} = {extent}, at = {at})", axis.as_ref())
            }
        }
    }
}
