//! Checking: from the parsed declaration to a checked model, or spanned errors.
//!
//! The rules of layouts and views live in fblayout-core. This module fills a [`LayoutSpec`]
//! from the attributes and hands it, with the views exactly as parsed (the core's
//! [`ViewSpec`] over the derive's spanned [`Name`]s), to [`TensorDescriptor::declare`], the
//! same function that builds a descriptor at run time. Each [`DeclareError`] is mapped back to
//! the tokens the user wrote with [`LayoutError::site`] and the step that failed. Only the
//! rules about Rust rather than layouts (axis *types*) are checked here, one function each.

use std::collections::HashMap;

use fblayout_core::__private::ViewSpec;
use fblayout_core::layout::{
    AxisSpec, ElemType, Extent, LayoutError, LayoutSpec, Order, Site, ViewStep,
};
use fblayout_core::typed::suggest::did_you_mean;
use fblayout_core::typed::{DeclareError, TensorDescriptor};
use proc_macro2::TokenStream;
use quote::{ToTokens, quote};
use syn::Ident;

use crate::ctxt::Ctxt;
use crate::parse::{Input, Name, ViewDecl, name_of};

/// A declaration that passed every check.
pub(crate) struct Model<'a> {
    /// What the user wrote.
    pub(crate) input: &'a Input<'a>,
    /// The layout description.
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
    /// The view struct's fields: axis name (spanned where the user named it) and axis type.
    pub(crate) axes: Vec<(Ident, syn::Type)>,
}

impl ViewModel<'_> {
    /// The view's name in the layout and in WGSL.
    pub(crate) fn name(&self) -> &str {
        &self.decl.spec.name.name
    }
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
    axis_types_distinct(cx, input);
    let specs: Vec<ViewSpec<Name>> = input.attrs.views.iter().map(|v| v.spec.clone()).collect();
    match TensorDescriptor::declare(&spec, &specs) {
        Ok(descriptor) => {
            let mut views = Vec::new();
            for (decl, built) in input.attrs.views.iter().zip(&descriptor.views) {
                let types = axis_types(input, decl);
                let view = ViewModel {
                    decl,
                    axes: built
                        .axes()
                        .iter()
                        .filter_map(|a| types.get(&a.name).cloned())
                        .collect(),
                };
                view_axis_types_distinct(cx, &view);
                views.push(view);
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

/// Checks a tensor declared `like = Other`: it takes the other tensor's whole declaration, so
/// it may not describe a layout of its own; its fields are checked against the other tensor's
/// constructor by the compiler. `false` when something was reported.
pub(crate) fn check_like(cx: &Ctxt, input: &Input<'_>, like: &syn::Path) -> bool {
    let attrs = &input.attrs;
    let own: [(&str, Option<TokenStream>); 4] = [
        ("layout", attrs.layout.as_ref().map(|l| l.tokens.clone())),
        ("elem", attrs.elem.as_ref().map(|e| e.tokens.clone())),
        (
            "reduce",
            attrs
                .forward
                .as_ref()
                .or(attrs.backward.as_ref())
                .map(|r| r.tokens.clone()),
        ),
        (
            "view",
            attrs.views.first().map(|v| v.ident().to_token_stream()),
        ),
    ];
    for (key, tokens) in own {
        if let Some(tokens) = tokens {
            cx.error_spanned_by(
                tokens,
                format!(
                    "`like = {}` shares that tensor's layout, element type, reductions and views; remove `{key}` here, or declare this tensor in full",
                    quote!(#like)
                ),
            );
        }
    }
    axis_types_distinct(cx, input);
    !cx.has_errors()
}

/// The [`LayoutSpec`] the attributes describe. A missing extent (already reported) is taken
/// as run-time, which adds no error of its own.
fn layout_spec(input: &Input<'_>) -> LayoutSpec {
    let attrs = &input.attrs;
    let names = |list: &[Ident]| list.iter().map(name_of).collect();
    LayoutSpec::from_parts(
        snake_case(&name_of(input.ident)),
        attrs.elem.as_ref().map_or(ElemType::F32, |e| e.value),
        input
            .fields
            .iter()
            .map(|f| AxisSpec {
                name: f.name.clone(),
                extent: f.extent.as_ref().map_or(Extent::Dynamic, |e| e.value),
                tile: f.tile.as_ref().map(|t| t.value),
                pad: f.pad.is_some(),
            })
            .collect(),
        attrs.layout.as_ref().map_or(Order::RowMajor, |l| l.value),
        names(attrs.reduced(fblayout_core::layout::Pass::Forward)),
        names(attrs.reduced(fblayout_core::layout::Pass::Backward)),
    )
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
                    view.decl.ident()
                ),
            );
        } else {
            seen.insert(type_key(ty), name);
        }
    }
}

/// The identifier and type of every axis name a view can reach: the tensor's fields, then each
/// new axis in step order.
fn axis_types(input: &Input<'_>, decl: &ViewDecl) -> HashMap<String, (Ident, syn::Type)> {
    let mut map: HashMap<String, (Ident, syn::Type)> = HashMap::new();
    for field in &input.fields {
        if let Some(ty) = field.axis_ty {
            map.insert(field.name.clone(), (field.ident.clone(), ty.clone()));
        }
    }
    for step in &decl.spec.steps {
        for axis in step.new_axes() {
            if let Some(ty) = &axis.ty {
                map.insert(axis.name.clone(), (axis.ident.clone(), ty.clone()));
            }
        }
    }
    map
}

/// Whether `error` is about the storage order, which is unknown when `layout = ...` could not
/// be read (that is reported; judging tiles and reductions against the default order would
/// only add errors that are not there).
fn depends_on_order(error: &LayoutError) -> bool {
    matches!(
        error,
        LayoutError::TileWithoutRTile { .. }
            | LayoutError::ReductionWithoutRTile { .. }
            | LayoutError::RTileWithoutReduction { .. }
    )
}

/// Reports `error` at the tokens it is about.
fn report(cx: &Ctxt, input: &Input<'_>, error: &DeclareError) {
    match error {
        DeclareError::Layout(e) if input.attrs.layout_unreadable && depends_on_order(e) => {}
        DeclareError::Layout(e) => report_layout(cx, input, e),
        DeclareError::View { view, step, error } => {
            let decl = input.attrs.views.get(*view);
            match (decl, step) {
                (Some(decl), Some(k)) => report_step(cx, input, decl, *k, error),
                (Some(decl), None) => cx.error_spanned_by(decl.ident(), error),
                (None, _) => cx.error_spanned_by(input.ident, error),
            }
        }
        DeclareError::ViewName { view, .. } => match input.attrs.views.get(*view) {
            Some(decl) => cx.error_spanned_by(decl.ident(), error),
            None => cx.error_spanned_by(input.ident, error),
        },
        DeclareError::ConstName { second, .. } => {
            match input.fields.iter().find(|f| f.name == *second) {
                Some(field) => cx.error_spanned_by(field.ident, error),
                None => cx.error_spanned_by(input.ident, error),
            }
        }
        DeclareError::Wgsl(e) => cx.error_spanned_by(
            input.ident,
            format!("the WGSL generated for this tensor fails naga validation (a bug in fblayout; please report it): {e}"),
        ),
    }
}

/// What to write instead of an element type WGSL can't store.
fn elem_hint(elem: ElemType) -> &'static str {
    match elem {
        ElemType::F64 => "; use `elem = f32` (or `f16` where the adapter supports it)",
        ElemType::I64 => "; use `elem = i32`",
        ElemType::U64 => "; use `elem = u32`",
        // The core's message already says how to store narrow integers.
        ElemType::I8 | ElemType::I16 | ElemType::U8 | ElemType::U16 => "",
        ElemType::F32 | ElemType::F16 | ElemType::U32 | ElemType::I32 => "",
    }
}

fn report_layout(cx: &Ctxt, input: &Input<'_>, error: &LayoutError) {
    let attrs = &input.attrs;
    let field = |name: &str| input.fields.iter().find(|f| f.name == name);
    let whole = || input.ident.to_token_stream();
    let mut message = error.to_string();
    let tokens: TokenStream = match (error.site(), error) {
        (Site::Tensor, LayoutError::RTileWithoutReduction { .. }) => attrs
            .layout
            .as_ref()
            .map_or_else(whole, |l| l.tokens.clone()),
        (Site::Elem, e) => {
            if let LayoutError::UnsupportedElem { elem, .. } = e {
                message.push_str(elem_hint(*elem));
            }
            attrs.elem.as_ref().map_or_else(whole, |e| e.tokens.clone())
        }
        (Site::Axis(name), LayoutError::ZeroExtent { .. } | LayoutError::Overflow { .. }) => {
            match field(&name).and_then(|f| f.extent.as_ref()) {
                Some(extent) => extent.tokens.clone(),
                None => whole(),
            }
        }
        (Site::Axis(name), _) => field(&name).map_or_else(whole, |f| f.ident.to_token_stream()),
        (Site::Tile(name), _) => match field(&name) {
            Some(f) => f
                .tile
                .as_ref()
                .map_or_else(|| f.ident.to_token_stream(), |t| t.tokens.clone()),
            None => whole(),
        },
        (Site::Pad(name), _) => match field(&name) {
            Some(f) => f
                .pad
                .as_ref()
                .map_or_else(|| f.ident.to_token_stream(), ToTokens::to_token_stream),
            None => whole(),
        },
        (Site::Pass(pass), _) => {
            let list = match pass {
                fblayout_core::layout::Pass::Forward => &attrs.forward,
                fblayout_core::layout::Pass::Backward => &attrs.backward,
            };
            list.as_ref().map_or_else(whole, |l| l.tokens.clone())
        }
        (Site::Reduction(pass, name), e) => {
            let hits: Vec<&Ident> = attrs
                .reduced(pass)
                .iter()
                .filter(|i| name_of(i) == name)
                .collect();
            let pick = if matches!(e, LayoutError::DuplicateReductionAxis { .. }) {
                hits.get(1)
            } else {
                if let LayoutError::UnknownReductionAxis { axis, .. } = e {
                    let fields = input.fields.iter().map(|f| f.name.as_str());
                    message.push_str(&did_you_mean(axis, fields));
                }
                hits.first()
            };
            pick.map_or_else(whole, |i| i.to_token_stream())
        }
        _ => whole(),
    };
    cx.error_spanned_by(tokens, message);
}

/// The view and step (written out) that create the axis `name`, if any declared view does.
fn creator<'v>(views: &'v [ViewDecl], name: &str) -> Option<(&'v ViewDecl, &'v ViewStep<Name>)> {
    views.iter().find_map(|v| {
        v.spec
            .steps
            .iter()
            .find(|s| s.new_axes().iter().any(|a| a.name == name))
            .map(|s| (v, s))
    })
}

/// A step as the attribute spells it, new axes with their types (`heads: Heads = 12`).
fn as_written(step: &ViewStep<Name>) -> String {
    step.map(|n| match &n.ty {
        Some(ty) => format!("{}: {}", n.name, quote!(#ty)),
        None => n.name.clone(),
    })
    .to_string()
}

fn report_step(cx: &Ctxt, input: &Input<'_>, decl: &ViewDecl, k: usize, error: &LayoutError) {
    let (Some(step), Some(step_tokens)) = (decl.spec.steps.get(k), decl.step_tokens.get(k)) else {
        cx.error_spanned_by(decl.ident(), error);
        return;
    };
    let names = step.names();
    let mut message = error.to_string();
    if let LayoutError::UnknownViewAxis { axis, known, .. } = error {
        let hint = did_you_mean(axis, known.split(", "));
        if hint.is_empty() {
            if let Some((view, made_by)) = creator(&input.attrs.views, axis) {
                let (made_by, step) = (as_written(made_by), as_written(step));
                message.push_str(&format!(
                    "; `{axis}` is made by `{made_by}` (in view `{}`): split first, e.g. `{} = [{made_by}, {step}]`",
                    view.ident(),
                    decl.ident()
                ));
            }
        } else {
            message.push_str(&hint);
        }
    }
    let axis = match error.site() {
        Site::View { axis, .. } => axis,
        Site::Axis(name) => Some(name),
        _ => None,
    };
    if let Some(name) = axis {
        let hits: Vec<&&Name> = names.iter().filter(|n| n.name == name).collect();
        let later = matches!(
            error,
            LayoutError::DuplicateViewAxis { .. }
                | LayoutError::BadName { .. }
                | LayoutError::ZeroExtent { .. }
        );
        let pick = if later { hits.last() } else { hits.first() };
        match pick {
            Some(n) => cx.error_spanned_by(&n.ident, message),
            None => cx.error_spanned_by(step_tokens, message),
        }
        return;
    }
    if let (LayoutError::NotAPermutation { .. }, ViewStep::Permute(axes)) = (error, step) {
        let mut seen = Vec::new();
        for n in axes {
            if seen.contains(&&n.name) {
                cx.error_spanned_by(&n.ident, format!("{message}: `{}` is named twice", n.name));
                return;
            }
            seen.push(&n.name);
        }
    }
    cx.error_spanned_by(step_tokens, message);
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
