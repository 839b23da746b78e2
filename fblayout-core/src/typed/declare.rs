//! Declarations: a layout and its views, checked into a runtime descriptor.

use std::borrow::Cow;
use std::fmt::Write as _;
use std::hash::Hash;
use std::sync::OnceLock;

use super::constants::{
    AxisConstKind, axis_consts, const_clash, extents_struct_name, tile_elems_name,
};
use crate::emit::wgsl::WgslWriter;
use crate::expr::ValidIndexFn;
use crate::layout::{LayoutAxis, LayoutError, LayoutSpec, Order, TensorLayout, View, ViewStep};
use crate::shader::{WgslError, WgslModule};

/// A declared view: a name and the steps that lead to it from the tensor.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ViewSpec<S> {
    /// The view's name (its WGSL functions start with it).
    pub name: S,
    /// The steps, applied in order.
    pub steps: Vec<ViewStep<S>>,
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
    /// Two axes give one named constant (`SEQ_EXTENT` for `seq` and `Seq`): their names differ
    /// only in case.
    #[error(
        "axis `{second}` gives the constant `{name}`, as axis `{first}` does; axis names must differ in more than case"
    )]
    ConstName {
        /// The constant's name (the Rust one; the WGSL one has the tensor's name before it).
        name: String,
        /// The axis that gives it first.
        first: String,
        /// The axis that gives it again.
        second: String,
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
    /// The WGSL of the tensor, its views and its tile helpers, validated by naga (once: when
    /// [`declare`](Self::declare) ran, which for a derived tensor was while the derive
    /// expanded).
    wgsl: Cow<'static, str>,
    /// naga's module of `wgsl`: made by `declare`, or on the first call of
    /// [`wgsl_module`](Self::wgsl_module) for a derived tensor.
    module: OnceLock<WgslModule>,
}

impl TensorDescriptor {
    /// Checks a declaration and builds its descriptor, or reports every problem found.
    ///
    /// Layout problems come first (views are not checked against an invalid layout); each view
    /// reports its first failing step. The WGSL is emitted and validated by naga.
    pub fn declare<S: AsRef<str>>(
        spec: &LayoutSpec,
        views: &[ViewSpec<S>],
    ) -> Result<Self, DeclareErrors> {
        let layout = spec
            .build()
            .map_err(|errors| errors.map(DeclareError::Layout))?;
        let identity = layout.view();
        let mut errors = Vec::new();
        if let Some((first, second)) = const_clash(&layout) {
            errors.push(DeclareError::ConstName {
                name: second.rust_name(),
                first: first.axis,
                second: second.axis,
            });
        }
        let mut built = Vec::with_capacity(views.len());
        for (i, spec) in views.iter().enumerate() {
            let name = spec.name.as_ref();
            if let Some(taken_by) = Self::name_taken(&layout, &views[..i], name) {
                errors.push(DeclareError::ViewName {
                    view: i,
                    name: name.to_owned(),
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
        let module = Self::emit_wgsl(&layout, &identity, &built)
            .map_err(|e| DeclareErrors::from(DeclareError::Wgsl(e)))?;
        Ok(Self {
            layout,
            identity,
            views: built,
            wgsl: Cow::Owned(module.source().to_owned()),
            module: OnceLock::from(module),
        })
    }

    /// The descriptor of a declaration that [`declare`](Self::declare) accepted already (while
    /// `#[derive(Tensor)]` expanded): the layout from its checked axes, the views from their
    /// steps, and the WGSL that was validated then. Nothing is checked, emitted or validated
    /// again; [`wgsl_module`](Self::wgsl_module) runs naga only when asked.
    ///
    /// # Panics
    /// When a view step does not apply, which `declare` rules out for the declarations the
    /// derive passes here.
    pub(crate) fn from_validated(
        spec: &LayoutSpec,
        axes: Vec<LayoutAxis>,
        views: &[ViewSpec<&str>],
        wgsl: &'static str,
    ) -> Self {
        let layout = TensorLayout::from_checked(spec, axes);
        let identity = layout.view();
        let views = views
            .iter()
            .map(|v| {
                let start = identity.clone().named(v.name);
                v.steps
                    .iter()
                    .try_fold(start?, |view, step| step.apply(&view))
            })
            .collect::<Result<Vec<View>, LayoutError>>()
            .unwrap_or_else(|e| {
                panic!(
                    "tensor `{}` was checked when it was derived, yet: {e}",
                    spec.name
                )
            });
        Self {
            layout,
            identity,
            views,
            wgsl: Cow::Borrowed(wgsl),
            module: OnceLock::new(),
        }
    }

    /// The WGSL of the tensor, its views and its tile helpers (see [`Tensor::WGSL`](super::Tensor::WGSL)).
    pub fn wgsl(&self) -> &str {
        &self.wgsl
    }

    /// [`wgsl`](Self::wgsl) as naga's validated module, to splice into kernels. For a derived
    /// tensor, the first call runs naga (the derive validated the same source while it
    /// expanded).
    ///
    /// # Panics
    /// When naga rejects the source, which the validation at declaration rules out.
    pub fn wgsl_module(&self) -> &WgslModule {
        self.module.get_or_init(|| {
            WgslModule::validate(self.layout.name(), self.wgsl.as_ref()).unwrap_or_else(|e| {
                panic!(
                    "the WGSL of tensor `{}` was validated when it was declared, yet: {e}",
                    self.layout.name()
                )
            })
        })
    }

    /// What already holds `name`, if anything.
    fn name_taken<S: AsRef<str>>(
        layout: &TensorLayout,
        earlier: &[ViewSpec<S>],
        name: &str,
    ) -> Option<String> {
        if name == layout.name() {
            return Some("the tensor itself".into());
        }
        if layout.order() == Order::RTile && name == Self::tile_name(layout) {
            return Some("the tile helpers of the tensor".into());
        }
        earlier
            .iter()
            .position(|v| v.name.as_ref() == name)
            .map(|i| format!("view #{}", i + 1))
    }

    /// Builds view `index`, or reports its first problem into `errors`.
    fn build_view<S: AsRef<str>>(
        identity: &View,
        index: usize,
        spec: &ViewSpec<S>,
        errors: &mut Vec<DeclareError>,
    ) -> Option<View> {
        let mut view = match identity.clone().named(spec.name.as_ref()) {
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
        tile_elems_name(self.layout.name())
    }

    /// The name of the WGSL struct of the run-time extents, `<name>_extents`, when the tensor
    /// has run-time axes (WGSL has no empty structs).
    pub fn extents_struct_name(&self) -> Option<String> {
        let name = extents_struct_name(self.layout.name());
        (self.layout.dynamic_axes().count() > 0).then_some(name)
    }

    /// Writes the WGSL of the tensor (its extents struct and named constants, its index
    /// functions), its tile helpers (R-Tile only) and its views, and validates it with naga.
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
        let _ = w.write_raw(&header);
        let extents = layout.extents_struct(&extents_struct_name(layout.name()));
        if !extents.is_empty() {
            let _ = w.write_raw("// Its run-time extents, in axis order.");
            let _ = w.write_raw(extents.trim_end());
        }
        let consts = axis_consts(layout);
        let _ = w.write_raw(if consts.iter().any(|c| c.kind == AxisConstKind::Extent) {
            "// Its static extents, then its tiles (1 along an axis that is not tiled)."
        } else {
            "// Its tiles (1 along an axis that is not tiled)."
        });
        for c in consts {
            let _ = w.write_raw(&format!(
                "const {}: u32 = {}u;",
                c.wgsl_name(layout.name()),
                c.value
            ));
        }
        let _ = w.write_raw("");
        let comment = "// The offset of a coordinate, and whether it lies inside the tensor.";
        write(&mut w, comment, &identity.index_fn().simplified());
        if layout.order() == Order::RTile {
            let elems = layout.tile_elems();
            let konst = tile_elems_name(layout.name());
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
