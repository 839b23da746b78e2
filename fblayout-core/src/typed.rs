//! Typed coordinates: the vocabulary that `#[derive(Tensor)]` generates code against.
//!
//! A layout ([`TensorLayout`]) knows its axes by name. Kernel code should know them by *type*,
//! so that a coordinate of the wrong tensor, or one given in the wrong axis order, does not
//! compile. This module supplies that vocabulary; the derive macros in `fblayout-macros` fill
//! it in for each declared tensor.
//!
//! - An **axis** is a zero-sized marker type implementing [`Axis`] (`struct Seq;`). Its only
//!   job is to be distinct from every other axis type.
//! - An [`Ix<A>`] is an index along axis `A`: a `usize` that remembers which axis it belongs
//!   to. `Ix<Seq>` and `Ix<Hidden>` are different types, so a sequence index cannot be passed
//!   where a hidden index is expected. [`Ix::retag`] converts explicitly when a kernel really
//!   means it (a query position used as a key position).
//! - A **coordinate** is a struct whose fields are `Ix`s, one per axis, implementing [`Coord`].
//!   The struct a tensor is declared on is the coordinate of the tensor itself; each declared
//!   view (a permutation, a split, a merge...) gets its own coordinate struct, whose offsets
//!   address the *same* buffer. A kernel that reads `Xᵀ` names the view type in its signature.
//! - A **tensor** ([`Tensor`]) is the coordinate of a declared layout, with its run-time
//!   extents ([`Extents`]), its naga-validated WGSL ([`Tensor::WGSL`]) and its runtime
//!   [`TensorDescriptor`]: the layout, its views and their WGSL, which the kernel crate and the
//!   planner read.
//!
//! Views are declared as data ([`ViewSpec`], a list of [`ViewStep`]s) so that the derive can
//! check them while it expands, with exactly the code that later builds the descriptor at run
//! time: [`TensorDescriptor::declare`] is the one place where a declaration becomes a
//! descriptor, and it reports every problem at once ([`DeclareErrors`]).
//!
//! ```
//! use fblayout_core::layout::LayoutSpec;
//! use fblayout_core::typed::{TensorDescriptor, ViewSpec, ViewStep};
//!
//! let spec = LayoutSpec::new("x").dyn_axis("tokens").axis("hidden", 8).rtile().reduce_forward(["hidden"]);
//! let views = [ViewSpec { name: "xt", steps: &[ViewStep::Transpose("tokens", "hidden")] }];
//! let x = TensorDescriptor::declare(&spec, &views)?;
//! assert_eq!(x.view("xt").map(|v| v.axes().len()), Some(2));
//! assert!(x.wgsl.source().contains("fn xt_offset("));
//! # Ok::<(), fblayout_core::typed::DeclareErrors>(())
//! ```

use std::cmp::Ordering;
use std::fmt::{self, Write as _};
use std::hash::{Hash, Hasher};
use std::marker::PhantomData;

use crate::emit::wgsl::WgslWriter;
use crate::expr::ValidIndexFn;
use crate::layout::{BoundView, LayoutError, LayoutSpec, Order, SplitPart, TensorLayout, View};
use crate::wgsl::{WgslError, WgslModule};

/// A marker type naming an axis (derive it with `#[derive(Axis)]`).
///
/// Axis types are never instantiated for their value; they tag [`Ix`] so that indices along
/// different axes are different types.
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not an axis type",
    label = "not an axis type",
    note = "declare axis types with `#[derive(Clone, Copy, Axis)]`"
)]
pub trait Axis: Copy + 'static {
    /// The axis type's name, for messages and `Display`.
    const NAME: &'static str;
}

/// An index along axis `A`.
///
/// It holds a `usize` and converts to one freely ([`get`](Self::get), `usize::from`); turning a
/// `usize` into an `Ix` is explicit ([`new`](Self::new)), and turning an index of one axis into
/// an index of another is explicit too ([`retag`](Self::retag)). The comparison and hashing
/// traits are implemented for every `A`, with no bounds on the marker.
pub struct Ix<A> {
    index: usize,
    axis: PhantomData<fn() -> A>,
}

impl<A> Ix<A> {
    /// The index `index` along axis `A`.
    pub const fn new(index: usize) -> Self {
        Self {
            index,
            axis: PhantomData,
        }
    }

    /// The index as a plain `usize`.
    pub const fn get(self) -> usize {
        self.index
    }

    /// The same number as an index along another axis `B`.
    ///
    /// Use it where a kernel means it, e.g. when a query position is compared with a key
    /// position; everywhere else the type keeps the axes apart.
    pub const fn retag<B>(self) -> Ix<B> {
        Ix::new(self.index)
    }
}

impl<A> Clone for Ix<A> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<A> Copy for Ix<A> {}

impl<A> PartialEq for Ix<A> {
    fn eq(&self, other: &Self) -> bool {
        self.index == other.index
    }
}

impl<A> Eq for Ix<A> {}

impl<A> PartialOrd for Ix<A> {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl<A> Ord for Ix<A> {
    fn cmp(&self, other: &Self) -> Ordering {
        self.index.cmp(&other.index)
    }
}

impl<A> Hash for Ix<A> {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.index.hash(state);
    }
}

impl<A> fmt::Debug for Ix<A> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let full = std::any::type_name::<A>();
        let short = full.rsplit("::").next().unwrap_or(full);
        write!(f, "Ix::<{short}>({})", self.index)
    }
}

impl<A: Axis> fmt::Display for Ix<A> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}={}", A::NAME, self.index)
    }
}

impl<A> From<Ix<A>> for usize {
    fn from(ix: Ix<A>) -> usize {
        ix.index
    }
}

/// The run-time extents of a tensor: one `usize` per axis declared `dyn`.
///
/// The derive generates a struct with one field per run-time axis (or a unit struct when every
/// extent is static); the offset functions of the tensor and all its views take it.
pub trait Extents: Copy + fmt::Debug + 'static {
    /// The run-time axes, in the tensor's axis order.
    const AXES: &'static [&'static str];

    /// Their values, in the same order.
    fn values(&self) -> Vec<usize>;
}

/// The `(axis, extent)` pairs that [`View::bind`] takes, for the extents of tensor `T`.
///
/// Fails when an extent does not fit a `u32` (WGSL indexes with `u32`).
pub fn bindings<T: Tensor>(extents: T::Extents) -> Result<Vec<(&'static str, u32)>, LayoutError> {
    <T::Extents as Extents>::AXES
        .iter()
        .zip(extents.values())
        .map(|(&axis, value)| {
            u32::try_from(value)
                .map(|v| (axis, v))
                .map_err(|_| LayoutError::Bind {
                    tensor: T::NAME.to_owned(),
                    detail: format!("run-time extent {value} of axis `{axis}` does not fit a u32"),
                })
        })
        .collect()
}

/// No run-time extents.
impl Extents for () {
    const AXES: &'static [&'static str] = &[];

    fn values(&self) -> Vec<usize> {
        Vec::new()
    }
}

/// A typed coordinate of a tensor or of one of its views.
///
/// The derive implements it for the tensor's struct and for each view struct. The generated
/// types also have inherent `const fn`s of the same names (`offset`, `in_bounds`, `shape`),
/// which work in `const` contexts; these trait methods call them, for generic code.
pub trait Coord: Copy + 'static {
    /// The tensor whose buffer this coordinate addresses.
    type Tensor: Tensor;
    /// One `usize` per axis (`[usize; RANK]`).
    type Indices: Copy + fmt::Debug + Eq + AsRef<[usize]>;

    /// The view's name (the tensor's own name for the tensor itself); the WGSL functions are
    /// `<NAME>_offset` and `<NAME>_in_bounds`.
    const NAME: &'static str;
    /// The axis names, in coordinate order.
    const AXES: &'static [&'static str];
    /// The number of axes.
    const RANK: usize = Self::AXES.len();
    /// The name of the WGSL offset function in [`Tensor::WGSL`].
    const OFFSET_FN: &'static str;
    /// The name of the WGSL bounds-mask function in [`Tensor::WGSL`].
    const IN_BOUNDS_FN: &'static str;

    /// The coordinate as plain indices, in axis order.
    fn indices(&self) -> Self::Indices;

    /// The coordinate with these indices, or `None` when there are not exactly `RANK`.
    fn from_indices(indices: &[usize]) -> Option<Self>;

    /// The offset of this coordinate in the tensor's buffer (meaningful when it is in bounds).
    fn offset(&self, extents: <Self::Tensor as Tensor>::Extents) -> usize;

    /// Whether this coordinate lies inside the view (padding does not).
    fn in_bounds(&self, extents: <Self::Tensor as Tensor>::Extents) -> bool;

    /// The extent of each axis, given the run-time extents.
    fn shape(extents: <Self::Tensor as Tensor>::Extents) -> Self::Indices;

    /// The view this coordinate indexes, from the tensor's descriptor.
    fn view() -> &'static View;

    /// Binds the run-time extents: the untyped CPU path over the same view.
    fn bind(extents: <Self::Tensor as Tensor>::Extents) -> Result<BoundView, LayoutError> {
        Self::view().bind(&bindings::<Self::Tensor>(extents)?)
    }
}

/// A declared tensor: the coordinate of its layout, with extents, WGSL and a descriptor.
pub trait Tensor: Coord<Tensor = Self> {
    /// The run-time extents.
    type Extents: Extents;

    /// The WGSL of the tensor and all its views, validated by naga when the derive expanded:
    /// `<name>_offset`/`<name>_in_bounds` for the tensor and each view, and for R-Tile layouts
    /// the tile helpers `<name>_tile_offset`/`<name>_tile_in_bounds` and the constant
    /// `<NAME>_TILE_ELEMS`.
    const WGSL: &'static str;

    /// The number of elements in one tile (1 unless R-Tile); a tile is contiguous.
    const TILE_ELEMS: usize;

    /// The runtime descriptor: layout, views and validated WGSL.
    fn descriptor() -> &'static TensorDescriptor;

    /// The buffer length in elements, padding included.
    fn len(extents: Self::Extents) -> usize;

    /// [`WGSL`](Self::WGSL) as a validated module, to splice into kernels.
    fn wgsl_module() -> &'static WgslModule {
        &Self::descriptor().wgsl
    }
}

/// Iterates over every coordinate of `C`'s shape, row-major (last axis fastest).
pub fn each<C: Coord>(extents: <C::Tensor as Tensor>::Extents) -> Each<C> {
    let shape: Vec<usize> = C::shape(extents).as_ref().to_vec();
    let done = shape.contains(&0);
    Each {
        current: vec![0; shape.len()],
        shape,
        done,
        coord: PhantomData,
    }
}

/// The iterator of [`each`].
#[derive(Debug, Clone)]
pub struct Each<C> {
    shape: Vec<usize>,
    current: Vec<usize>,
    done: bool,
    coord: PhantomData<fn() -> C>,
}

impl<C: Coord> Iterator for Each<C> {
    type Item = C;

    fn next(&mut self) -> Option<C> {
        if self.done {
            return None;
        }
        let item = C::from_indices(&self.current);
        self.done = true;
        for d in (0..self.shape.len()).rev() {
            self.current[d] += 1;
            if self.current[d] < self.shape[d] {
                self.done = false;
                break;
            }
            self.current[d] = 0;
        }
        item
    }
}

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
#[derive(Debug, Clone)]
pub struct DeclareErrors(Vec<DeclareError>);

impl DeclareErrors {
    /// The problems, in the order they were found.
    pub fn errors(&self) -> &[DeclareError] {
        &self.0
    }
}

impl IntoIterator for DeclareErrors {
    type Item = DeclareError;
    type IntoIter = std::vec::IntoIter<DeclareError>;
    fn into_iter(self) -> Self::IntoIter {
        self.0.into_iter()
    }
}

impl fmt::Display for DeclareErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, e) in self.0.iter().enumerate() {
            if i > 0 {
                writeln!(f)?;
            }
            write!(f, "{e}")?;
        }
        Ok(())
    }
}

impl std::error::Error for DeclareErrors {}

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
        let layout = spec.build().map_err(|errors| {
            DeclareErrors(errors.into_iter().map(DeclareError::Layout).collect())
        })?;
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
        if !errors.is_empty() {
            return Err(DeclareErrors(errors));
        }
        let wgsl = Self::emit_wgsl(&layout, &identity, &built)
            .map_err(|e| DeclareErrors(vec![DeclareError::Wgsl(e)]))?;
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

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use super::*;
    use crate::layout::{ElemType, Pass, Site};

    #[derive(Clone, Copy)]
    struct Seq;
    impl Axis for Seq {
        const NAME: &'static str = "Seq";
    }

    #[derive(Clone, Copy)]
    struct Hidden;
    impl Axis for Hidden {
        const NAME: &'static str = "Hidden";
    }

    /// A hand-written coordinate of `x` [seq (dyn), hidden = 8], what the derive generates.
    #[derive(Clone, Copy, Debug, PartialEq)]
    struct X {
        seq: Ix<Seq>,
        hidden: Ix<Hidden>,
    }

    #[derive(Clone, Copy, Debug)]
    struct XExtents {
        seq: usize,
    }

    impl Extents for XExtents {
        const AXES: &'static [&'static str] = &["seq"];
        fn values(&self) -> Vec<usize> {
            vec![self.seq]
        }
    }

    fn x_spec() -> LayoutSpec {
        LayoutSpec::new("x")
            .dyn_axis("seq")
            .axis("hidden", 8)
            .tile(4, false)
            .rtile()
            .reduce_forward(["hidden"])
    }

    impl Coord for X {
        type Tensor = X;
        type Indices = [usize; 2];
        const NAME: &'static str = "x";
        const AXES: &'static [&'static str] = &["seq", "hidden"];
        const OFFSET_FN: &'static str = "x_offset";
        const IN_BOUNDS_FN: &'static str = "x_in_bounds";
        fn indices(&self) -> [usize; 2] {
            [self.seq.get(), self.hidden.get()]
        }
        fn from_indices(i: &[usize]) -> Option<Self> {
            match *i {
                [s, h] => Some(Self {
                    seq: Ix::new(s),
                    hidden: Ix::new(h),
                }),
                _ => None,
            }
        }
        fn offset(&self, _: XExtents) -> usize {
            (self.seq.get() * 2 + self.hidden.get() / 4) * 4 + self.hidden.get() % 4
        }
        fn in_bounds(&self, e: XExtents) -> bool {
            self.seq.get() < e.seq && self.hidden.get() < 8
        }
        fn shape(e: XExtents) -> [usize; 2] {
            [e.seq, 8]
        }
        fn view() -> &'static View {
            &Self::descriptor().identity
        }
    }

    impl Tensor for X {
        type Extents = XExtents;
        const WGSL: &'static str = "";
        const TILE_ELEMS: usize = 4;
        fn descriptor() -> &'static TensorDescriptor {
            static D: std::sync::OnceLock<TensorDescriptor> = std::sync::OnceLock::new();
            D.get_or_init(|| TensorDescriptor::declared(&x_spec(), &[]))
        }
        fn len(e: XExtents) -> usize {
            e.seq * 8
        }
    }

    #[test]
    fn ix_is_a_tagged_usize() {
        let a: Ix<Seq> = Ix::new(3);
        const B: Ix<Seq> = Ix::new(5);
        const FIVE: usize = B.get();
        assert_eq!(FIVE, 5);
        assert!(a < B && a == Ix::new(3) && a != B);
        assert_eq!(a.max(B), B);
        assert_eq!(usize::from(a), 3);
        assert_eq!(format!("{a}"), "Seq=3");
        assert_eq!(format!("{a:?}"), "Ix::<Seq>(3)");
        let h: Ix<Hidden> = a.retag();
        assert_eq!(format!("{h}"), "Hidden=3");
        let set: HashSet<Ix<Seq>> = [a, a, B].into_iter().collect();
        assert_eq!(set.len(), 2);
        // No bounds on the marker: a type that is not an axis works as a tag too.
        struct NotAnAxis;
        assert_eq!(Ix::<NotAnAxis>::new(1), Ix::new(1));
    }

    #[test]
    fn each_enumerates_row_major() {
        let all: Vec<[usize; 2]> = each::<X>(XExtents { seq: 2 })
            .map(|x| x.indices())
            .collect();
        assert_eq!(all.len(), 16);
        assert_eq!(all[0], [0, 0]);
        assert_eq!(all[1], [0, 1]);
        assert_eq!(all[8], [1, 0]);
        assert_eq!(all[15], [1, 7]);
        assert_eq!(each::<X>(XExtents { seq: 0 }).count(), 0);
    }

    #[test]
    fn typed_and_bound_offsets_agree() {
        let ext = XExtents { seq: 3 };
        let bound = X::bind(ext).unwrap();
        assert_eq!(bound.len() as usize, X::len(ext));
        let mut seen = HashSet::new();
        for x in each::<X>(ext) {
            assert!(x.in_bounds(ext));
            let coords: Vec<u64> = x.indices().iter().map(|&i| i as u64).collect();
            assert_eq!(bound.offset(&coords), Some(x.offset(ext) as u64), "{x:?}");
            assert!(seen.insert(x.offset(ext)));
        }
        assert!(!X::from_indices(&[3, 0]).unwrap().in_bounds(ext));
        assert_eq!(X::from_indices(&[1]), None);
    }

    #[test]
    fn extents_bind_by_name_and_reject_huge_values() {
        assert_eq!(bindings::<X>(XExtents { seq: 7 }).unwrap(), [("seq", 7)]);
        if let Ok(huge) = usize::try_from(u64::from(u32::MAX) + 1) {
            let err = bindings::<X>(XExtents { seq: huge }).unwrap_err();
            assert!(err.to_string().contains("tensor `x`"), "{err}");
        }
        assert!(().values().is_empty());
    }

    #[test]
    fn declare_builds_views_and_validated_wgsl() {
        let spec = LayoutSpec::new("act")
            .dyn_axis("tokens")
            .axis("hidden", 16)
            .rtile()
            .reduce_forward(["hidden"])
            .reduce_backward(["tokens"]);
        let steps = [ViewStep::Split {
            axis: "hidden",
            parts: &[("heads", Some(4)), ("head_dim", None)],
        }];
        let views = [
            ViewSpec {
                name: "act_t",
                steps: &[ViewStep::Transpose("tokens", "hidden")],
            },
            ViewSpec {
                name: "heads",
                steps: &steps,
            },
        ];
        let d = TensorDescriptor::declare(&spec, &views).unwrap();
        assert_eq!(d.views.len(), 2);
        assert_eq!(d.identity.name(), "act");
        let heads = d.view("heads").unwrap();
        let names: Vec<&str> = heads.axes().iter().map(|a| a.name.as_str()).collect();
        assert_eq!(names, ["tokens", "heads", "head_dim"]);
        let src = d.wgsl.source();
        for f in [
            "act_offset",
            "act_in_bounds",
            "act_tile_offset",
            "act_t_offset",
            "heads_in_bounds",
        ] {
            assert!(src.contains(&format!("fn {f}(")), "{f} missing:\n{src}");
        }
        assert!(src.contains("const ACT_TILE_ELEMS: u32 = 16u;"), "{src}");
        assert_eq!(d.tile_elems_const(), "ACT_TILE_ELEMS");
        assert!(
            d.summary()
                .starts_with("act f32 rtile [tokens=dyn/4, hidden=16/4]"),
            "{}",
            d.summary()
        );
        // Re-validating the text gives the same module.
        assert!(WgslModule::validate("again", src).is_ok());
    }

    #[test]
    fn row_major_has_no_tile_helpers() {
        let spec = LayoutSpec::new("m").axis("r", 3).axis("c", 5);
        let d = TensorDescriptor::declare(&spec, &[]).unwrap();
        assert!(!d.wgsl.source().contains("tile"), "{}", d.wgsl.source());
    }

    #[test]
    fn declare_reports_every_problem_with_its_place() {
        let mut spec = x_spec().reduce_backward(["batch"]);
        spec.elem = ElemType::F64;
        let errs = TensorDescriptor::declare(&spec, &[]).unwrap_err();
        let sites: Vec<Site> = errs
            .errors()
            .iter()
            .map(|e| match e {
                DeclareError::Layout(e) => e.site(),
                other => panic!("unexpected {other}"),
            })
            .collect();
        assert!(
            sites.contains(&Site::Reduction(Pass::Backward, "batch".into())),
            "{sites:?}"
        );
        assert!(sites.contains(&Site::Elem), "{sites:?}");

        let spec = x_spec();
        let views = [
            ViewSpec {
                name: "a",
                steps: &[ViewStep::Permute(&["hidden", "hidden"])],
            },
            ViewSpec {
                name: "b",
                steps: &[
                    ViewStep::Transpose("seq", "hidden"),
                    ViewStep::Transpose("seq", "heads"),
                ],
            },
            ViewSpec {
                name: "a",
                steps: &[],
            },
            ViewSpec {
                name: "x_tile",
                steps: &[],
            },
            ViewSpec {
                name: "fn",
                steps: &[],
            },
        ];
        let errs = TensorDescriptor::declare(&spec, &views).unwrap_err();
        let found: Vec<(usize, Option<usize>)> = errs
            .errors()
            .iter()
            .filter_map(|e| match e {
                DeclareError::View { view, step, .. } => Some((*view, *step)),
                _ => None,
            })
            .collect();
        assert_eq!(found, [(0, Some(0)), (1, Some(1)), (4, None)]);
        let names: Vec<usize> = errs
            .errors()
            .iter()
            .filter_map(|e| match e {
                DeclareError::ViewName { view, .. } => Some(*view),
                _ => None,
            })
            .collect();
        assert_eq!(names, [2, 3]);
        assert!(
            errs.to_string()
                .contains("view name `a` is already used by view #1"),
            "{errs}"
        );
    }

    #[test]
    fn step_display_reads_like_the_attribute() {
        let split = ViewStep::Split {
            axis: "hidden",
            parts: &[("heads", Some(4)), ("head_dim", None)],
        };
        assert_eq!(
            split.to_string(),
            "split(hidden => heads = 4, head_dim = _)"
        );
        assert_eq!(
            ViewStep::Slice {
                axis: "seq",
                start: 2,
                len: 3
            }
            .to_string(),
            "slice(seq, 2..5)"
        );
        assert_eq!(
            ViewStep::Merge {
                axes: &["a", "b"],
                into: "ab"
            }
            .to_string(),
            "merge(a, b => ab)"
        );
    }
}
