//! `#[tensor(...)]`: the struct-level attribute.
//!
//! ```text
//! #[tensor(layout = row_major | col_major | rtile,
//!          elem = f32 | f16 | u32 | i32,
//!          reduce(forward = [axis, ..], backward = [axis, ..]),
//!          view(Name = step, Name = [step, step, ..], ..),
//!          crate = path::to::fblayout)]
//! ```
//!
//! Items may be spread over several `#[tensor]` attributes; each key may be given once.

use fblayout_core::layout::{ElemType, Order};
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
    /// `elem = ...`.
    pub(crate) elem: Option<Spanned<ElemType>>,
    /// `reduce(forward = [...])`, as written.
    pub(crate) forward: Option<Vec<Ident>>,
    /// `reduce(backward = [...])`, as written.
    pub(crate) backward: Option<Vec<Ident>>,
    /// `view(...)` entries, in order.
    pub(crate) views: Vec<ViewDecl>,
}

/// The keys `#[tensor]` accepts, for messages.
const KEYS: &str = "`layout`, `elem`, `reduce`, `view` or `crate`";

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
                let value: Ident = super::key(input)?;
                let order = match value.to_string().as_str() {
                    "row_major" => Order::RowMajor,
                    "col_major" => Order::ColMajor,
                    "rtile" => Order::RTile,
                    other => {
                        let msg = format!(
                            "unknown layout `{other}`; expected `row_major`, `col_major` or `rtile`"
                        );
                        return Err(syn::Error::new(value.span(), msg));
                    }
                };
                set_once(
                    cx,
                    &mut self.layout,
                    &key,
                    Spanned::new(order, quote!(#key = #value)),
                );
            }
            "elem" => {
                input.parse::<Token![=]>()?;
                let value: Ident = super::key(input)?;
                let elem = value
                    .to_string()
                    .parse::<ElemType>()
                    .map_err(|e| syn::Error::new(value.span(), e))?;
                set_once(cx, &mut self.elem, &key, Spanned::new(elem, value));
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
                cx.error_spanned_by(
                    &key,
                    format!("unknown tensor attribute `{key}`; expected {KEYS}"),
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
                    "unknown pass `{other}` in `reduce(...)`; expected `forward` or `backward`"
                );
                return Err(syn::Error::new(key.span(), msg));
            }
        };
        input.parse::<Token![=]>()?;
        let axes = axis_list(input)?;
        set_once(cx, slot, &key, axes);
        Ok(())
    }

    /// The path to the fblayout crate in generated code.
    pub(crate) fn krate(&self) -> TokenStream {
        match &self.krate {
            Some(path) => quote!(#path),
            None => quote!(::fblayout),
        }
    }
}

/// `[a, b, c]`, or a single axis name.
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
