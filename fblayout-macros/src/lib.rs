//! Derive macros that declare fblayout tensors on Rust structs.
//!
//! Use them through the `fblayout` crate, whose documentation of `Tensor` describes the
//! attribute grammar and the generated API. This crate is thin: it parses the attributes
//! (`parse`), checks them with fblayout-core's own rules (`check`) and writes the typed index
//! API (`generate`); layout algebra, checks, emitters and naga validation all live in the
//! core.

mod check;
mod ctxt;
mod generate;
mod parse;
#[cfg(test)]
mod tests;

use proc_macro::TokenStream;
use syn::parse_macro_input;

/// Implemented by `fblayout-macros`; use it through `fblayout`, whose re-export documents the
/// attribute grammar and the generated API.
#[proc_macro_derive(Tensor, attributes(tensor, axis))]
pub fn derive_tensor(input: TokenStream) -> TokenStream {
    let input = parse_macro_input!(input as syn::DeriveInput);
    generate::expand_tensor(&input).into()
}

/// Implemented by `fblayout-macros`; use it through `fblayout`.
#[proc_macro_derive(Axis, attributes(axis))]
pub fn derive_axis(input: TokenStream) -> TokenStream {
    let input = parse_macro_input!(input as syn::DeriveInput);
    generate::expand_axis(&input).into()
}
