//! The named numbers of a tensor: `X::<AXIS>_EXTENT` for each static extent and
//! `X::<AXIS>_TILE` for each axis, from the core's list ([`axis_consts`]), which also gives
//! the WGSL constants of `X::WGSL` their names and values.

use fblayout_core::__private::{AxisConstKind, axis_consts};
use proc_macro2::{Literal, Span, TokenStream};
use quote::quote;
use syn::Ident;

use super::coord::usize_ty;
use super::docs;
use crate::check::Model;

/// The associated constants, for the tensor's inherent impl.
pub(crate) fn axis_constants(model: &Model<'_>) -> TokenStream {
    let input = model.input;
    let vis = input.vis;
    let usize = usize_ty();
    let tensor = input.ident;
    let name = model.descriptor.layout.name();
    let consts = axis_consts(&model.descriptor.layout).into_iter().map(|c| {
        let span = input
            .fields
            .iter()
            .find(|f| f.name == c.axis)
            .map_or_else(Span::call_site, |f| f.ident.span());
        let ident = Ident::new(&c.rust_name(), span);
        let value = Literal::u32_unsuffixed(c.value);
        let wgsl = c.wgsl_name(name);
        let doc = docs(&match c.kind {
            AxisConstKind::Extent => format!(
                "The extent of axis `{}` of [`{tensor}`] (static): `{wgsl}` in the tensor's WGSL.",
                c.axis
            ),
            AxisConstKind::Tile => format!(
                "The tile of axis `{}` of [`{tensor}`], 1 when the axis is not tiled: `{wgsl}` in \
                 the tensor's WGSL.",
                c.axis
            ),
        });
        quote! {
            #doc
            #vis const #ident: #usize = #value;
        }
    });
    quote!(#(#consts)*)
}
