//! `#[tensor(...)]`: the struct-level attribute.
//!
//! ```text
//! #[tensor(layout = row_major | col_major | rtile,
//!          elem = f32 | f16 | u32 | i32,
//!          reduce(forward = [axis, ..], backward = axis),
//!          view(Name = step, Name = [step, step, ..], ..),
//!          like = OtherTensor,
//!          crate = path::to::fblayout)]
//! ```
//!
//! Items may be spread over several `#[tensor]` attributes; each key may be given once.

use fblayout_core::layout::{ElemType, Order, Pass};
use fblayout_core::typed::suggest::did_you_mean;
use proc_macro2::TokenStream;
use quote::quote;
use syn::parse::ParseStream;
use syn::{Ident, Token, bracketed, parenthesized};

use super::view::ViewDecl;
use super::{Spanned, key, parse_list, skip_item};
use crate::ctxt::Ctxt;

/// The struct-level attributes of a tensor.
#[derive(Default)]
pub(crate) struct TensorAttrs {
    /// `crate = path`: where fblayout is (default `::fblayout`).
    pub(crate) krate: Option<syn::Path>,
    /// `layout = ...`.
    pub(crate) layout: Option<Spanned<Order>>,
    /// Whether a `layout = ...` was given but could not be read (reported): checks that
    /// depend on the order are then skipped rather than reported against the default.
    pub(crate) layout_unreadable: bool,
    /// `like = Path`: the tensor whose declaration this one shares.
    pub(crate) like: Option<syn::Path>,
    /// `elem = ...`.
    pub(crate) elem: Option<Spanned<ElemType>>,
    /// `reduce(forward = [...])`, as written; the tokens are `forward`.
    pub(crate) forward: Option<Spanned<Vec<Ident>>>,
    /// `reduce(backward = [...])`, as written; the tokens are `backward`.
    pub(crate) backward: Option<Spanned<Vec<Ident>>>,
    /// `view(...)` entries, in order.
    pub(crate) views: Vec<ViewDecl>,
}

/// The keys `#[tensor]` accepts.
const KEYS: [&str; 6] = ["layout", "elem", "reduce", "view", "like", "crate"];

/// The layouts `layout = ...` accepts.
const ORDERS: [Order; 3] = [Order::RowMajor, Order::ColMajor, Order::RTile];

impl TensorAttrs {
    /// Parses every `#[tensor(...)]` in `attrs` and reports misplaced `#[axis]`.
    pub(crate) fn parse(cx: &Ctxt, attrs: &[syn::Attribute]) -> Self {
        let mut out = Self::default();
        for attr in attrs {
            if attr.path().is_ident("axis") {
                cx.error_spanned_by(
                    attr,
                    "#[axis(...)] describes one axis and belongs on a field; the struct takes #[tensor(...)]",
                );
            }
            if !attr.path().is_ident("tensor") {
                continue;
            }
            let parsed = attr.parse_args_with(|input: ParseStream<'_>| {
                parse_list(cx, input, |input| out.item(cx, input))
            });
            if let Err(e) = parsed {
                cx.syn_error(e);
            }
        }
        out
    }

    fn item(&mut self, cx: &Ctxt, input: ParseStream<'_>) -> syn::Result<()> {
        let key = key(input)?;
        match key.to_string().as_str() {
            "layout" => {
                input.parse::<Token![=]>()?;
                let order = value(cx, input, "layout").and_then(|value| {
                    let order = ORDERS.into_iter().find(|o| value.value == o.name());
                    let tokens = &value.tokens;
                    order.map(|o| Spanned::new(o, quote!(#key = #tokens))).ok_or_else(|| {
                        let names = ORDERS.map(Order::name);
                        let msg = format!(
                            "unknown layout `{}`; expected `row_major`, `col_major` or `rtile`{}",
                            value.value,
                            did_you_mean(&value.value, names)
                        );
                        syn::Error::new_spanned(&value.tokens, msg)
                    })
                });
                match order {
                    Ok(order) => set_once(cx, &mut self.layout, &key, order),
                    Err(e) => {
                        self.layout_unreadable = true;
                        return Err(e);
                    }
                }
            }
            "elem" => {
                input.parse::<Token![=]>()?;
                let value = value(cx, input, "elem")?;
                let elem = value.value.parse::<ElemType>().map_err(|e| {
                    let names = ["f32", "f16", "u32", "i32"];
                    let hint = did_you_mean(&value.value, names);
                    syn::Error::new_spanned(&value.tokens, format!("{e}{hint}"))
                })?;
                set_once(cx, &mut self.elem, &key, Spanned::new(elem, value.tokens));
            }
            "like" => {
                input.parse::<Token![=]>()?;
                let path = syn::Path::parse_mod_style(input)?;
                set_once(cx, &mut self.like, &key, path);
            }
            "reduce" => {
                let content;
                parenthesized!(content in input);
                parse_list(cx, &content, |input| self.reduce_item(cx, input))?;
            }
            "view" => {
                let content;
                parenthesized!(content in input);
                parse_list(cx, &content, |input| {
                    self.views.push(ViewDecl::parse(cx, input)?);
                    Ok(())
                })?;
            }
            "crate" => {
                input.parse::<Token![=]>()?;
                let path = syn::Path::parse_mod_style(input)?;
                set_once(cx, &mut self.krate, &key, path);
            }
            "tile" | "pad" | "dyn" | "extent" => {
                cx.error_spanned_by(
                    &key,
                    format!(
                        "`{key}` belongs on an axis: put it in the field's attribute, e.g. `#[axis(768, tile = 4, pad)]`"
                    ),
                );
                skip_item(input);
            }
            "forward" | "backward" => {
                cx.error_spanned_by(
                    &key,
                    format!("`{key}` belongs inside `reduce(...)`: `#[tensor(reduce({key} = [axis, ..]))]`"),
                );
                skip_item(input);
            }
            _ => {
                let list = KEYS.map(|k| format!("`{k}`")).join(", ");
                let hint = did_you_mean(&key.to_string(), KEYS);
                cx.error_spanned_by(
                    &key,
                    format!("unknown tensor attribute `{key}`; expected one of {list}{hint}"),
                );
                skip_item(input);
            }
        }
        Ok(())
    }

    fn reduce_item(&mut self, cx: &Ctxt, input: ParseStream<'_>) -> syn::Result<()> {
        let key = key(input)?;
        let slot = match key.to_string().as_str() {
            "forward" => &mut self.forward,
            "backward" => &mut self.backward,
            other => {
                let msg = format!(
                    "unknown pass `{other}` in `reduce(...)`; expected `forward` or `backward`{}",
                    did_you_mean(other, ["forward", "backward"])
                );
                return Err(syn::Error::new(key.span(), msg));
            }
        };
        input.parse::<Token![=]>()?;
        let axes = axis_list(input)?;
        set_once(cx, slot, &key, Spanned::new(axes, &key));
        Ok(())
    }

    /// The axes named for `pass`, as written.
    pub(crate) fn reduced(&self, pass: Pass) -> &[Ident] {
        let list = match pass {
            Pass::Forward => &self.forward,
            Pass::Backward => &self.backward,
        };
        list.as_ref().map_or(&[], |l| l.value.as_slice())
    }

    /// The path to the fblayout crate in generated code.
    pub(crate) fn krate(&self) -> TokenStream {
        match &self.krate {
            Some(path) => quote!(#path),
            None => quote!(::fblayout),
        }
    }
}

/// A value written as a bare word (`rtile`) or, by mistake, a string (`"rtile"`), which is
/// reported with the fix and read anyway so that nothing else is reported about it.
fn value(cx: &Ctxt, input: ParseStream<'_>, key: &str) -> syn::Result<Spanned<String>> {
    if input.peek(syn::LitStr) {
        let lit: syn::LitStr = input.parse()?;
        let word = lit.value();
        cx.error_spanned_by(
            &lit,
            format!("write `{key} = {word}` without quotes: the value is a word, not a string"),
        );
        return Ok(Spanned::new(word, lit));
    }
    let word: Ident = super::key(input)?;
    Ok(Spanned::new(word.to_string(), word))
}

/// `[a, b, c]`, or a single axis name (`forward = hidden` is `forward = [hidden]`).
pub(crate) fn axis_list(input: ParseStream<'_>) -> syn::Result<Vec<Ident>> {
    if input.peek(syn::token::Bracket) {
        let content;
        bracketed!(content in input);
        let list = content.parse_terminated(key, Token![,])?;
        Ok(list.into_iter().collect())
    } else {
        Ok(vec![key(input)?])
    }
}

/// Stores `value` unless the key was given before, which is reported at the second key.
fn set_once<T>(cx: &Ctxt, slot: &mut Option<T>, key: &Ident, value: T) {
    if slot.is_some() {
        cx.error_spanned_by(
            key,
            format!("`{key}` is given twice; a tensor takes one `{key}`"),
        );
    } else {
        *slot = Some(value);
    }
}
