//! Declarations: a layout and its views, checked into a runtime descriptor.

use std::fmt::{self, Write as _};
use std::hash::Hash;

use crate::emit::wgsl::WgslWriter;
use crate::expr::ValidIndexFn;
use crate::layout::{LayoutError, LayoutSpec, Order, SplitPart, TensorLayout, View};
use crate::wgsl::{WgslError, WgslModule};

/// One step of a declared view (see [`View`] for what each does).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ViewStep<'a> {
    /// Reorders the axes; names every axis once.
    Permute(&'a [&'a str]),
    /// Swaps two axes.
    Transpose(&'a str, &'a str),
    /// Splits an axis into parts, outermost first; one part may be inferred (`None`).
    Split {
        /// The axis split.
        axis: &'a str,
        /// The parts.
        parts: &'a [SplitPart<'a>],
    },
    /// Merges adjacent axes into one.
    Merge {
        /// The axes merged, in view order.
        axes: &'a [&'a str],
        /// The merged axis.
        into: &'a str,
    },
    /// Keeps `start..start + len` of an axis.
    Slice {
        /// The axis.
        axis: &'a str,
        /// The first index kept.
        start: u32,
        /// How many indices are kept.
        len: u32,
    },
    /// Adds an axis along which every index reads the same element.
    Broadcast {
        /// The new axis.
        axis: &'a str,
        /// Its extent.
        extent: u32,
        /// Its position.
        at: usize,
    },
}

impl ViewStep<'_> {
    /// Applies this step to `view`.
    pub fn apply(&self, view: &View) -> Result<View, LayoutError> {
        match *self {
            Self::Permute(order) => view.permute(order),
            Self::Transpose(a, b) => view.transpose(a, b),
            Self::Split { axis, parts } => view.split(axis, parts),
            Self::Merge { axes, into } => view.merge(axes, into),
            Self::Slice { axis, start, len } => view.slice(axis, start, len),
            Self::Broadcast { axis, extent, at } => view.broadcast(axis, extent, at),
        }
    }
}

impl fmt::Display for ViewStep<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Permute(order) => write!(f, "permute({})", order.join(", ")),
            Self::Transpose(a, b) => write!(f, "transpose({a}, {b})"),
            Self::Split { axis, parts } => {
                let parts: Vec<String> = parts
                    .iter()
                    .map(|(n, e)| format!("{n} = {}", e.map_or("_".to_owned(), |e| e.to_string())))
                    .collect();
                write!(f, "split({axis} => {})", parts.join(", "))
            }
            Self::Merge { axes, into } => write!(f, "merge({} => {into})", axes.join(", ")),
            Self::Slice { axis, start, len } => {
                write!(
                    f,
                    "slice({axis}, {start}..{})",
                    u64::from(*start) + u64::from(*len)
                )
            }
            Self::Broadcast { axis, extent, at } => {
                write!(f, "broadcast({axis} = {extent}, at = {at})")
            }
        }
    }
}

/// A declared view: a name and the steps that lead to it from the tensor.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ViewSpec<'a> {
    /// The view's name (its WGSL functions start with it).
    pub name: &'a str,
    /// The steps, applied in order.
    pub steps: &'a [ViewStep<'a>],
}

/// One problem with a tensor declaration.
#[derive(Debug, Clone, thiserror::Error)]
pub enum DeclareError {
    /// The layout description is invalid.
    #[error(transparent)]
    Layout(LayoutError),
    /// A view step (or, when `step` is `None`, the view's name) is invalid.
    #[error("{error}")]
    View {
        /// The index of the view in the declaration.
        view: usize,
        /// The index of the failing step; `None` when the name is at fault.
        step: Option<usize>,
        /// What is wrong.
        error: LayoutError,
    },
    /// A view's name is taken.
    #[error("view name `{name}` is already used by {taken_by}; each view needs its own name")]
    ViewName {
        /// The index of the view in the declaration.
        view: usize,
        /// The name.
        name: String,
        /// What holds the name already.
        taken_by: String,
    },
    /// The emitted WGSL failed naga validation (a bug in the emitter, reported rather than
    /// hidden).
    #[error(transparent)]
    Wgsl(WgslError),
}

/// Every problem found in one declaration (never empty).
pub type DeclareErrors = crate::ErrorList<DeclareError>;

/// What the kernel crate and the planner read about a declared tensor.
#[derive(Debug, Clone)]
pub struct TensorDescriptor {
    /// The checked layout: axes and extents, tiles, order, reductions.
    pub layout: TensorLayout,
    /// The tensor read as declared (the identity view, named after the tensor).
    pub identity: View,
    /// The declared views, in declaration order.
    pub views: Vec<View>,
    /// The WGSL of the tensor, its views and its tile helpers, validated by naga.
    pub wgsl: WgslModule,
}

impl TensorDescriptor {
    /// Checks a declaration and builds its descriptor, or reports every problem found.
    ///
    /// Layout problems come first (views are not checked against an invalid layout); each view
    /// reports its first failing step.
    pub fn declare(spec: &LayoutSpec, views: &[ViewSpec<'_>]) -> Result<Self, DeclareErrors> {
        let layout = spec
            .build()
            .map_err(|errors| errors.map(DeclareError::Layout))?;
        let identity = layout.view();
        let mut errors = Vec::new();
        let mut built = Vec::with_capacity(views.len());
        for (i, spec) in views.iter().enumerate() {
            if let Some(taken_by) = Self::name_taken(&layout, &views[..i], spec.name) {
                errors.push(DeclareError::ViewName {
                    view: i,
                    name: spec.name.to_owned(),
                    taken_by,
                });
            }
            if let Some(view) = Self::build_view(&identity, i, spec, &mut errors) {
                built.push(view);
            }
        }
        if let Some(errors) = DeclareErrors::from_vec(errors) {
            return Err(errors);
        }
        let wgsl = Self::emit_wgsl(&layout, &identity, &built)
            .map_err(|e| DeclareErrors::from(DeclareError::Wgsl(e)))?;
        Ok(Self {
            layout,
            identity,
            views: built,
            wgsl,
        })
    }

    /// Like [`declare`](Self::declare), for declarations already checked by the derive.
    ///
    /// # Panics
    /// When the declaration is invalid. `#[derive(Tensor)]` calls this only with declarations
    /// that passed [`declare`](Self::declare) while it expanded, so it does not panic there.
    pub fn declared(spec: &LayoutSpec, views: &[ViewSpec<'_>]) -> Self {
        match Self::declare(spec, views) {
            Ok(descriptor) => descriptor,
            Err(errors) => panic!(
                "tensor `{}` was checked when it was derived, yet: {errors}",
                spec.name
            ),
        }
    }

    /// What already holds `name`, if anything.
    fn name_taken(layout: &TensorLayout, earlier: &[ViewSpec<'_>], name: &str) -> Option<String> {
        if name == layout.name() {
            return Some("the tensor itself".into());
        }
        if layout.order() == Order::RTile && name == Self::tile_name(layout) {
            return Some("the tile helpers of the tensor".into());
        }
        earlier
            .iter()
            .position(|v| v.name == name)
            .map(|i| format!("view #{}", i + 1))
    }

    /// Builds view `index`, or reports its first problem into `errors`.
    fn build_view(
        identity: &View,
        index: usize,
        spec: &ViewSpec<'_>,
        errors: &mut Vec<DeclareError>,
    ) -> Option<View> {
        let mut view = match identity.clone().named(spec.name) {
            Ok(view) => view,
            Err(error) => {
                errors.push(DeclareError::View {
                    view: index,
                    step: None,
                    error,
                });
                return None;
            }
        };
        for (k, step) in spec.steps.iter().enumerate() {
            match step.apply(&view) {
                Ok(next) => view = next,
                Err(error) => {
                    errors.push(DeclareError::View {
                        view: index,
                        step: Some(k),
                        error,
                    });
                    return None;
                }
            }
        }
        Some(view)
    }

    fn tile_name(layout: &TensorLayout) -> String {
        format!("{}_tile", layout.name())
    }

    /// The name of the WGSL constant holding the tile size, `<NAME>_TILE_ELEMS`.
    pub fn tile_elems_const(&self) -> String {
        format!("{}_TILE_ELEMS", self.layout.name().to_uppercase())
    }

    /// Writes the WGSL of the tensor, its tile helpers (R-Tile only) and its views, and
    /// validates it with naga.
    fn emit_wgsl(
        layout: &TensorLayout,
        identity: &View,
        views: &[View],
    ) -> Result<WgslModule, WgslError> {
        let mut w = WgslWriter::new(String::new());
        let describe = |v: &View| {
            v.axes()
                .iter()
                .map(|a| format!("{} ({})", a.name, a.extent))
                .collect::<Vec<_>>()
                .join(", ")
        };
        let write = |w: &mut WgslWriter<String>, comment: &str, f: &ValidIndexFn| {
            // Writing into a String cannot fail.
            let _ = w.write_raw(comment);
            let _ = w.write(f);
            let _ = w.write_raw("");
        };
        let header = format!(
            "// Tensor `{}` ({}, {}): [{}]",
            layout.name(),
            layout.elem(),
            layout.order().name(),
            describe(identity)
        );
        write(&mut w, &header, &identity.index_fn().simplified());
        if layout.order() == Order::RTile {
            let elems = layout.tile_elems();
            let konst = format!("{}_TILE_ELEMS", layout.name().to_uppercase());
            let _ = w.write_raw(&format!(
                "// One R-Tile: {elems} contiguous elements, in-tile order [{}].",
                layout.in_tile_order().join(", ")
            ));
            let _ = w.write_raw(&format!("const {konst}: u32 = {elems}u;"));
            let comment = "// The first element of the tile at a tile-grid coordinate.";
            write(&mut w, comment, &layout.tile_index_fn().simplified());
        }
        for view in views {
            let comment = format!(
                "// View `{}` of `{}`: [{}]",
                view.name(),
                layout.name(),
                describe(view)
            );
            write(&mut w, &comment, &view.index_fn().simplified());
        }
        let mut source = w.finish();
        while source.ends_with("\n\n") {
            source.pop();
        }
        WgslModule::validate(layout.name(), source)
    }

    /// The view called `name`: the tensor itself or a declared view.
    pub fn view(&self, name: &str) -> Option<&View> {
        std::iter::once(&self.identity)
            .chain(&self.views)
            .find(|v| v.name() == name)
    }

    /// A one-line summary: name, order, axes with extents and tiles, reductions, views.
    pub fn summary(&self) -> String {
        let l = &self.layout;
        let mut s = format!("{} {} {} [", l.name(), l.elem(), l.order().name());
        for (i, a) in l.axes().iter().enumerate() {
            let sep = if i > 0 { ", " } else { "" };
            let _ = write!(s, "{sep}{}={}", a.name, a.extent);
            if a.tile > 1 {
                let _ = write!(s, "/{}", a.tile);
            }
        }
        let _ = write!(
            s,
            "] forward [{}] backward [{}]",
            l.forward().join(", "),
            l.backward().join(", ")
        );
        for v in &self.views {
            let axes: Vec<&str> = v.axes().iter().map(|a| a.name.as_str()).collect();
            let _ = write!(s, " {}({})", v.name(), axes.join(", "));
        }
        s
    }
}
