//! Checking: from the parsed declaration to a checked model, or spanned errors.
//!
//! The rules of layouts and views live in fblayout-core. This module fills a [`LayoutSpec`] and
//! a [`ViewSpec`] per view from the attributes, hands them to [`TensorDescriptor::declare`] (the
//! same function that builds the descriptor at run time) and maps each [`DeclareError`] back to
//! the tokens the user wrote, using [`LayoutError::site`] and the step that failed. The few
//! rules that are about Rust rather than layouts (axis *types*) are checked here, one function
//! each.

use std::collections::HashMap;

use fblayout_core::layout::{AxisSpec, Extent, LayoutError, LayoutSpec, Order, Pass, Site};
use fblayout_core::typed::{DeclareError, TensorDescriptor, ViewSpec, ViewStep};
use proc_macro2::TokenStream;
use quote::{ToTokens, quote};
use syn::Ident;

use crate::ctxt::Ctxt;
use crate::parse::{Input, StepDecl, StepKind, ViewDecl, name_of};

/// A declaration that passed every check.
pub(crate) struct Model<'a> {
    /// What the user wrote.
    pub(crate) input: &'a Input<'a>,
    /// The layout description, as the generated descriptor rebuilds it.
    pub(crate) spec: LayoutSpec,
    /// The checked descriptor: layout, views and validated WGSL.
    pub(crate) descriptor: TensorDescriptor,
    /// One entry per declared view, in order (matching `descriptor.views`).
    pub(crate) views: Vec<ViewModel<'a>>,
}

/// A checked view.
pub(crate) struct ViewModel<'a> {
    /// What the user wrote.
    pub(crate) decl: &'a ViewDecl,
    /// The view's name in the layout and in WGSL.
    pub(crate) name: String,
    /// The steps, with names as strings.
    pub(crate) steps: Vec<OwnedStep>,
    /// The view struct's fields: axis name (spanned where the user named it) and axis type.
    pub(crate) axes: Vec<(Ident, syn::Type)>,
}

/// A view step with owned names (what the generated descriptor code spells out).
#[derive(Debug, Clone)]
pub(crate) enum OwnedStep {
    Permute(Vec<String>),
    Transpose(String, String),
    Split {
        axis: String,
        parts: Vec<(String, Option<u32>)>,
    },
    Merge {
        axes: Vec<String>,
        into: String,
    },
    Slice {
        axis: String,
        start: u32,
        len: u32,
    },
    Broadcast {
        axis: String,
        extent: u32,
        at: usize,
    },
}

/// Borrowed forms of an [`OwnedStep`]'s lists, which a [`ViewStep`] points into.
struct StepLists<'s> {
    names: Vec<&'s str>,
    parts: Vec<(&'s str, Option<u32>)>,
}

impl OwnedStep {
    fn from_decl(step: &StepDecl) -> Self {
        match &step.kind {
            StepKind::Permute(axes) => Self::Permute(axes.iter().map(name_of).collect()),
            StepKind::Transpose(a, b) => Self::Transpose(name_of(a), name_of(b)),
            StepKind::Split { axis, parts } => Self::Split {
                axis: name_of(axis),
                parts: parts
                    .iter()
                    .map(|p| (name_of(&p.ident), p.size.as_ref().map(|s| s.value)))
                    .collect(),
            },
            StepKind::Merge { axes, into } => Self::Merge {
                axes: axes.iter().map(name_of).collect(),
                into: name_of(&into.ident),
            },
            StepKind::Slice { axis, start, len } => Self::Slice {
                axis: name_of(axis),
                start: *start,
                len: *len,
            },
            StepKind::Broadcast { axis, at } => Self::Broadcast {
                axis: name_of(&axis.ident),
                extent: axis.size.as_ref().map_or(0, |s| s.value),
                at: *at,
            },
        }
    }

    fn lists(&self) -> StepLists<'_> {
        let (names, parts) = match self {
            Self::Permute(axes) | Self::Merge { axes, .. } => {
                (axes.iter().map(String::as_str).collect(), Vec::new())
            }
            Self::Split { parts, .. } => (
                Vec::new(),
                parts.iter().map(|(n, e)| (n.as_str(), *e)).collect(),
            ),
            _ => (Vec::new(), Vec::new()),
        };
        StepLists { names, parts }
    }

    fn step<'s>(&'s self, lists: &'s StepLists<'s>) -> ViewStep<'s> {
        match self {
            Self::Permute(_) => ViewStep::Permute(&lists.names),
            Self::Transpose(a, b) => ViewStep::Transpose(a, b),
            Self::Split { axis, .. } => ViewStep::Split {
                axis,
                parts: &lists.parts,
            },
            Self::Merge { into, .. } => ViewStep::Merge {
                axes: &lists.names,
                into,
            },
            Self::Slice { axis, start, len } => ViewStep::Slice {
                axis,
                start: *start,
                len: *len,
            },
            Self::Broadcast { axis, extent, at } => ViewStep::Broadcast {
                axis,
                extent: *extent,
                at: *at,
            },
        }
    }
}

/// Calls `f` with the [`ViewSpec`]s of `views`.
pub(crate) fn with_view_specs<R>(
    views: &[(String, Vec<OwnedStep>)],
    f: impl FnOnce(&[ViewSpec<'_>]) -> R,
) -> R {
    let lists: Vec<Vec<StepLists<'_>>> = views
        .iter()
        .map(|(_, steps)| steps.iter().map(OwnedStep::lists).collect())
        .collect();
    let steps: Vec<Vec<ViewStep<'_>>> = views
        .iter()
        .zip(&lists)
        .map(|((_, steps), lists)| steps.iter().zip(lists).map(|(s, l)| s.step(l)).collect())
        .collect();
    let specs: Vec<ViewSpec<'_>> = views
        .iter()
        .zip(&steps)
        .map(|((name, _), steps)| ViewSpec { name, steps })
        .collect();
    f(&specs)
}

/// `snake_case` of a type name: `XT` → `xt`, `AttnScores` → `attn_scores`, `QKv` → `q_kv`.
pub(crate) fn snake_case(name: &str) -> String {
    let chars: Vec<char> = name.chars().collect();
    let mut out = String::new();
    for (i, &c) in chars.iter().enumerate() {
        if c.is_uppercase() {
            let prev_lower =
                i > 0 && (chars[i - 1].is_lowercase() || chars[i - 1].is_ascii_digit());
            let next_lower = chars.get(i + 1).is_some_and(|n| n.is_lowercase());
            let prev_upper = i > 0 && chars[i - 1].is_uppercase();
            if prev_lower || (prev_upper && next_lower) {
                out.push('_');
            }
            out.extend(c.to_lowercase());
        } else {
            out.push(c);
        }
    }
    out
}

/// `UpperCamelCase` of an axis name, for suggested type names: `head_dim` → `HeadDim`.
fn camel_case(name: &str) -> String {
    name.split('_')
        .filter(|part| !part.is_empty())
        .map(|part| {
            let mut chars = part.chars();
            chars
                .next()
                .map(|c| c.to_uppercase().chain(chars).collect::<String>())
                .unwrap_or_default()
        })
        .collect()
}

/// Checks `input`; `None` when something was reported.
pub(crate) fn check<'a>(cx: &Ctxt, input: &'a Input<'a>) -> Option<Model<'a>> {
    let spec = layout_spec(input);
    pad_needs_tile(cx, input);
    axis_types_distinct(cx, input);
    let mut types: Vec<HashMap<String, (Ident, syn::Type)>> = Vec::new();
    let mut views: Vec<ViewModel<'a>> = Vec::new();
    for decl in &input.attrs.views {
        let (model, map) = view_model(input, decl);
        views.push(model);
        types.push(map);
    }
    let owned: Vec<(String, Vec<OwnedStep>)> = views
        .iter()
        .map(|v| (v.name.clone(), v.steps.clone()))
        .collect();
    match with_view_specs(&owned, |specs| TensorDescriptor::declare(&spec, specs)) {
        Ok(descriptor) => {
            for ((view, built), map) in views.iter_mut().zip(&descriptor.views).zip(&types) {
                view.axes = built
                    .axes()
                    .iter()
                    .filter_map(|a| map.get(&a.name).cloned())
                    .collect();
                view_axis_types_distinct(cx, view);
            }
            if cx.has_errors() {
                return None;
            }
            Some(Model {
                input,
                spec,
                descriptor,
                views,
            })
        }
        Err(errors) => {
            for error in errors {
                report(cx, input, &error);
            }
            None
        }
    }
}

/// The [`LayoutSpec`] the attributes describe. A missing extent (already reported) is taken
/// as run-time, which adds no error of its own.
fn layout_spec(input: &Input<'_>) -> LayoutSpec {
    let attrs = &input.attrs;
    let names = |list: &Option<Vec<Ident>>| list.iter().flatten().map(name_of).collect();
    LayoutSpec {
        name: snake_case(&name_of(input.ident)),
        elem: attrs
            .elem
            .as_ref()
            .map_or(fblayout_core::layout::ElemType::F32, |e| e.value),
        axes: input
            .fields
            .iter()
            .map(|f| AxisSpec {
                name: f.name.clone(),
                extent: f.extent.as_ref().map_or(Extent::Dynamic, |e| e.value),
                tile: f.tile.as_ref().map(|t| t.value),
                pad: f.pad.is_some(),
            })
            .collect(),
        order: attrs.layout.as_ref().map_or(Order::RowMajor, |l| l.value),
        forward: names(&attrs.forward),
        backward: names(&attrs.backward),
    }
}

/// `pad` consents to padding a tile; without a tile it means nothing, which is most likely a
/// forgotten `tile = n`.
fn pad_needs_tile(cx: &Ctxt, input: &Input<'_>) {
    for field in &input.fields {
        if let (Some(pad), None) = (&field.pad, &field.tile) {
            cx.error_spanned_by(
                pad,
                format!(
                    "`pad` accepts the padding of a tile, but axis `{}` has no tile; add `tile = n` or remove `pad`",
                    field.name
                ),
            );
        }
    }
}

fn type_key(ty: &syn::Type) -> String {
    ty.to_token_stream().to_string()
}

/// Each axis of a tensor needs its own axis type: the type is what tells a `Ix<Seq>` from a
/// `Ix<Hidden>`, so two fields of one type could be swapped without a compile error. Types
/// spelled alike are caught here; the expansion also implements a private trait once per axis
/// type, which catches aliases.
fn axis_types_distinct(cx: &Ctxt, input: &Input<'_>) {
    let mut seen: HashMap<String, &Ident> = HashMap::new();
    for field in &input.fields {
        let Some(ty) = field.axis_ty else { continue };
        if let Some(first) = seen.get(&type_key(ty)) {
            cx.error_spanned_by(
                ty,
                format!(
                    "axis type `{}` is already the type of field `{}`; each axis of a tensor needs its own axis type: declare one for `{}` (`#[derive(Clone, Copy, Axis)] struct {};`) and use `Ix<{}>`",
                    quote!(#ty),
                    name_of(first),
                    field.name,
                    camel_case(&field.name),
                    camel_case(&field.name),
                ),
            );
        } else {
            seen.insert(type_key(ty), field.ident);
        }
    }
}

/// The same rule for the axes of a view.
fn view_axis_types_distinct(cx: &Ctxt, view: &ViewModel<'_>) {
    let mut seen: HashMap<String, &Ident> = HashMap::new();
    for (name, ty) in &view.axes {
        if let Some(first) = seen.get(&type_key(ty)) {
            cx.error_spanned_by(
                ty,
                format!(
                    "axis type `{}` is already the type of axis `{}` in view `{}`; each axis of a view needs its own axis type",
                    quote!(#ty),
                    name_of(first),
                    view.decl.ident
                ),
            );
        } else {
            seen.insert(type_key(ty), name);
        }
    }
}

/// A view's model (axes filled in once the view is built) and the type of every axis name it
/// can reach: the tensor's fields, then each new axis in step order.
fn view_model<'a>(
    input: &Input<'_>,
    decl: &'a ViewDecl,
) -> (ViewModel<'a>, HashMap<String, (Ident, syn::Type)>) {
    let mut map: HashMap<String, (Ident, syn::Type)> = HashMap::new();
    for field in &input.fields {
        if let Some(ty) = field.axis_ty {
            map.insert(field.name.clone(), (field.ident.clone(), ty.clone()));
        }
    }
    for step in &decl.steps {
        for axis in step.new_axes() {
            map.insert(name_of(&axis.ident), (axis.ident.clone(), axis.ty.clone()));
        }
    }
    let model = ViewModel {
        decl,
        name: snake_case(&name_of(&decl.ident)),
        steps: decl.steps.iter().map(OwnedStep::from_decl).collect(),
        axes: Vec::new(),
    };
    (model, map)
}

/// Reports `error` at the tokens it is about.
fn report(cx: &Ctxt, input: &Input<'_>, error: &DeclareError) {
    match error {
        DeclareError::Layout(e) => report_layout(cx, input, e),
        DeclareError::View { view, step, error } => {
            let decl = input.attrs.views.get(*view);
            match (decl, step.and_then(|k| decl.and_then(|d| d.steps.get(k)))) {
                (_, Some(step)) => report_step(cx, step, error),
                (Some(decl), None) => cx.error_spanned_by(&decl.ident, error),
                (None, None) => cx.error_spanned_by(input.ident, error),
            }
        }
        DeclareError::ViewName { view, .. } => match input.attrs.views.get(*view) {
            Some(decl) => cx.error_spanned_by(&decl.ident, error),
            None => cx.error_spanned_by(input.ident, error),
        },
        DeclareError::Wgsl(e) => cx.error_spanned_by(
            input.ident,
            format!("the WGSL generated for this tensor fails naga validation (a bug in fblayout; please report it): {e}"),
        ),
    }
}

fn report_layout(cx: &Ctxt, input: &Input<'_>, error: &LayoutError) {
    let attrs = &input.attrs;
    let field = |name: &str| input.fields.iter().find(|f| f.name == name);
    let tokens: TokenStream = match (error.site(), error) {
        (Site::Tensor, LayoutError::RTileWithoutReduction { .. }) => match &attrs.layout {
            Some(layout) => layout.tokens.clone(),
            None => input.ident.to_token_stream(),
        },
        (Site::Elem, _) => match &attrs.elem {
            Some(elem) => elem.tokens.clone(),
            None => input.ident.to_token_stream(),
        },
        (Site::Axis(name), LayoutError::ZeroExtent { .. } | LayoutError::Overflow { .. }) => {
            match field(&name).and_then(|f| f.extent.as_ref()) {
                Some(extent) => extent.tokens.clone(),
                None => input.ident.to_token_stream(),
            }
        }
        (Site::Axis(name), _) => field(&name).map_or_else(
            || input.ident.to_token_stream(),
            |f| f.ident.to_token_stream(),
        ),
        (Site::Tile(name), _) => match field(&name) {
            Some(f) => f
                .tile
                .as_ref()
                .map_or_else(|| f.ident.to_token_stream(), |t| t.tokens.clone()),
            None => input.ident.to_token_stream(),
        },
        (Site::Reduction(pass, name), e) => {
            let list = match pass {
                Pass::Forward => &attrs.forward,
                Pass::Backward => &attrs.backward,
            };
            let hits: Vec<&Ident> = list
                .iter()
                .flatten()
                .filter(|i| name_of(i) == name)
                .collect();
            let pick = if matches!(e, LayoutError::DuplicateReductionAxis { .. }) {
                hits.get(1)
            } else {
                hits.first()
            };
            pick.map_or_else(|| input.ident.to_token_stream(), |i| i.to_token_stream())
        }
        _ => input.ident.to_token_stream(),
    };
    cx.error_spanned_by(tokens, error);
}

fn report_step(cx: &Ctxt, step: &StepDecl, error: &LayoutError) {
    let idents = step.idents();
    let named = |name: &str| -> Vec<&Ident> {
        idents
            .iter()
            .copied()
            .filter(|i| name_of(i) == name)
            .collect()
    };
    let axis = match error.site() {
        Site::View { axis, .. } => axis,
        Site::Axis(name) => Some(name),
        _ => None,
    };
    if let Some(name) = axis {
        let hits = named(&name);
        let later = matches!(
            error,
            LayoutError::DuplicateViewAxis { .. }
                | LayoutError::BadName { .. }
                | LayoutError::ZeroExtent { .. }
        );
        let pick = if later { hits.last() } else { hits.first() };
        match pick {
            Some(ident) => cx.error_spanned_by(ident, error),
            None => cx.error_spanned_by(step.tokens(), error),
        }
        return;
    }
    if let (LayoutError::NotAPermutation { .. }, StepKind::Permute(axes)) = (error, &step.kind) {
        let mut seen = Vec::new();
        for ident in axes {
            let name = name_of(ident);
            if seen.contains(&name) {
                cx.error_spanned_by(ident, format!("{error}: `{name}` is named twice"));
                return;
            }
            seen.push(name);
        }
    }
    cx.error_spanned_by(step.tokens(), error);
}

#[cfg(test)]
mod tests {
    use super::{camel_case, snake_case};

    #[test]
    fn camel_case_of_axis_names() {
        assert_eq!(camel_case("head_dim"), "HeadDim");
        assert_eq!(camel_case("key"), "Key");
    }

    #[test]
    fn snake_case_of_type_names() {
        for (from, to) in [
            ("X", "x"),
            ("XT", "xt"),
            ("AttnScores", "attn_scores"),
            ("HTTPServer", "http_server"),
            ("Q2Heads", "q2_heads"),
            ("already_snake", "already_snake"),
        ] {
            assert_eq!(snake_case(from), to, "{from}");
        }
    }
}
