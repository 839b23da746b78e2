//! Parsing: from syn's `DeriveInput` to the declaration as the user wrote it.
//!
//! The AST mirrors the attribute grammar (see the `Tensor` derive's documentation in the
//! `fblayout` crate) and keeps the user's tokens: every name is the `Ident` the user typed and
//! every number remembers its literal, so the checks can point at them. Nothing here knows
//! layout rules; unknown, misplaced, duplicated or malformed attribute items are reported into
//! the [`Ctxt`] and parsing carries on with the next item.

mod axis;
mod tensor;
mod view;

use proc_macro2::{Span, TokenStream, TokenTree};
use quote::ToTokens;
use syn::ext::IdentExt;
use syn::parse::ParseStream;
use syn::{Ident, Token};

pub(crate) use axis::AxisField;
pub(crate) use tensor::TensorAttrs;
pub(crate) use view::{Name, ViewDecl};

use crate::ctxt::Ctxt;

/// A value parsed from an attribute, with the tokens it was written as.
#[derive(Debug, Clone)]
pub(crate) struct Spanned<T> {
    /// The value.
    pub(crate) value: T,
    /// What the user wrote (for error spans).
    pub(crate) tokens: TokenStream,
}

impl<T> Spanned<T> {
    pub(crate) fn new(value: T, tokens: impl ToTokens) -> Self {
        Self {
            value,
            tokens: tokens.into_token_stream(),
        }
    }
}

/// A `#[derive(Tensor)]` input: the struct, its `#[tensor(...)]` attributes and its axes.
pub(crate) struct Input<'a> {
    /// The whole input.
    pub(crate) original: &'a syn::DeriveInput,
    /// The struct's name.
    pub(crate) ident: &'a Ident,
    /// The struct's visibility (generated types and functions share it).
    pub(crate) vis: &'a syn::Visibility,
    /// The struct-level attributes.
    pub(crate) attrs: TensorAttrs,
    /// One axis per field, in declaration order.
    pub(crate) fields: Vec<AxisField<'a>>,
}

impl<'a> Input<'a> {
    /// Parses `input`; returns `None` when it is not a struct with named fields (reported).
    pub(crate) fn parse(cx: &Ctxt, input: &'a syn::DeriveInput) -> Option<Self> {
        let attrs = TensorAttrs::parse(cx, &input.attrs);
        if !input.generics.params.is_empty() || input.generics.where_clause.is_some() {
            cx.error_spanned_by(
                &input.generics,
                "a tensor can't be generic: its layout is fixed when #[derive(Tensor)] expands",
            );
        }
        let fields = match &input.data {
            syn::Data::Struct(syn::DataStruct {
                fields: syn::Fields::Named(named),
                ..
            }) => named,
            syn::Data::Struct(_) => {
                cx.error_spanned_by(
                    &input.ident,
                    "#[derive(Tensor)] needs named fields, one per axis: `struct X { seq: Ix<Seq>, hidden: Ix<Hidden> }`",
                );
                return None;
            }
            syn::Data::Enum(e) => {
                cx.error_spanned_by(
                    e.enum_token,
                    "#[derive(Tensor)] goes on a struct whose fields are the axes, not on an enum",
                );
                return None;
            }
            syn::Data::Union(u) => {
                cx.error_spanned_by(
                    u.union_token,
                    "#[derive(Tensor)] goes on a struct whose fields are the axes, not on a union",
                );
                return None;
            }
        };
        let fields = fields
            .named
            .iter()
            .filter_map(|f| AxisField::parse(cx, f, attrs.like.as_ref()))
            .collect();
        Some(Self {
            original: input,
            ident: &input.ident,
            vis: &input.vis,
            attrs,
            fields,
        })
    }
}

/// The name an identifier stands for (`r#type` is `type`).
pub(crate) fn name_of(ident: &Ident) -> String {
    ident.unraw().to_string()
}

/// Parses comma-separated items with `item`, reporting a failed item and skipping to the next
/// comma, so one bad item does not hide the others.
pub(crate) fn parse_list(
    cx: &Ctxt,
    input: ParseStream<'_>,
    mut item: impl FnMut(ParseStream<'_>) -> syn::Result<()>,
) -> syn::Result<()> {
    while !input.is_empty() {
        if let Err(e) = item(input) {
            cx.syn_error(e);
            skip_item(input);
        }
        if input.is_empty() {
            break;
        }
        input.parse::<Token![,]>()?;
    }
    Ok(())
}

/// Skips tokens up to the next top-level comma (or the end).
pub(crate) fn skip_item(input: ParseStream<'_>) {
    while !input.is_empty() && !input.peek(Token![,]) {
        if input.parse::<TokenTree>().is_err() {
            break;
        }
    }
}

/// Parses an attribute key: any identifier, keywords included (`dyn`, `crate`).
pub(crate) fn key(input: ParseStream<'_>) -> syn::Result<Ident> {
    Ident::parse_any(input)
}

/// Parses an integer literal that fits `u32`.
pub(crate) fn u32_lit(input: ParseStream<'_>, what: &str) -> syn::Result<Spanned<u32>> {
    let lit: syn::LitInt = input
        .parse()
        .map_err(|e| syn::Error::new(e.span(), format!("expected {what}: an integer")))?;
    let value = lit.base10_parse::<u32>().map_err(|_| {
        syn::Error::new(
            lit.span(),
            format!("{what} must be an integer from 0 to {}", u32::MAX),
        )
    })?;
    Ok(Spanned::new(value, lit))
}

/// Tokens that span from `first` to a closing delimiter at `close`, for an error that covers a
/// whole `name(...)` item.
pub(crate) fn span_to(first: &Ident, close: Span) -> TokenStream {
    // Only the spans of the first and last tokens matter to `syn::Error::new_spanned`.
    let end = Ident::new("end", close);
    let mut tokens = first.to_token_stream();
    tokens.extend([TokenTree::Ident(end)]);
    tokens
}
