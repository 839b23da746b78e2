//! The tile helpers of an R-Tile tensor on the host: `X::tile_offset` and `X::tile_in_bounds`,
//! the core's `TensorLayout::tile_index_fn` lowered to tokens as the offsets are, so that they
//! equal `<name>_tile_offset` and `<name>_tile_in_bounds` in the tensor's WGSL.

use fblayout_core::__private::tokens;
use fblayout_core::layout::Order;
use proc_macro2::TokenStream;
use quote::quote;
use syn::Ident;

use super::coord::{extent_bindings, extents_unused, usize_ty};
use super::docs;
use super::index::{Bindings, body, param};
use crate::check::Model;

/// `tile_offset` and `tile_in_bounds` for an R-Tile tensor, in its inherent impl; nothing for
/// other orders (they have no tiles).
pub(crate) fn tile_fns(
    model: &Model<'_>,
    extents: &Ident,
    extent_axes: &[Ident],
) -> syn::Result<TokenStream> {
    let layout = &model.descriptor.layout;
    if layout.order() != Order::RTile {
        return Ok(TokenStream::new());
    }
    let input = model.input;
    let (tensor, vis) = (input.ident, input.vis);
    let usize = usize_ty();
    let f = layout.tile_index_fn().simplified();
    // One `usize` parameter per axis, named as in the WGSL (`<axis>_tile`), which the index
    // code reads directly.
    let params: Vec<Ident> = f
        .param_names()
        .iter()
        .take(f.coord_count())
        .map(|name| param(name))
        .collect();
    let extents_bound = extent_bindings(extent_axes);
    let mut bindings: Bindings = params.iter().map(|p| (p.to_string(), quote!(#p))).collect();
    bindings.extend(extents_bound.iter().cloned());
    let at = input.ident.span();
    let write = |root| -> syn::Result<TokenStream> {
        let block = tokens::block(&f.graph, root);
        let vars = block.vars();
        let unused_params = params
            .iter()
            .filter(|p| !vars.contains(&p.to_string().as_str()))
            .map(|p| quote!(let _ = #p;));
        let unused_extents = extents_unused(&block, &extents_bound);
        let value = body(&block, &bindings, at)?;
        Ok(quote!(#(#unused_params)* #unused_extents #value))
    };
    let offset_body = write(f.offset)?;
    let in_bounds_body = write(f.in_bounds)?;
    let param_list = params
        .iter()
        .map(|p| format!("`{p}`"))
        .collect::<Vec<_>>()
        .join(", ");
    let in_tile = layout.in_tile_order().join(", ");
    let doc_offset = docs(&format!(
        "The offset, in the buffer of [`{tensor}`], of the first element of the tile at \
         tile-grid coordinate ({param_list}): from there the tile holds `TILE_ELEMS` contiguous \
         elements, in in-tile order [{in_tile}].\n\n\
         Meaningful where [`tile_in_bounds`](Self::tile_in_bounds) holds. It is the simplified \
         tile function of `{name}`, the same as `{offset_fn}` in the tensor's WGSL.",
        name = layout.name(),
        offset_fn = f.offset_fn_name(),
    ));
    let doc_in_bounds = docs(&format!(
        "Whether ({param_list}) is a tile of [`{tensor}`]: each below the number of tiles along \
         its axis (the extent over the tile, rounded up). The same as `{}` in the tensor's WGSL.",
        f.in_bounds_fn_name()
    ));
    let too_many = (params.len() + 1 > 7).then(|| {
        quote!(#[allow(clippy::too_many_arguments, reason = "one argument per axis, in axis order")])
    });
    Ok(quote! {
        #doc_offset
        #too_many
        #[inline]
        #vis const fn tile_offset(#(#params: #usize,)* extents: #extents) -> #usize {
            #offset_body
        }

        #doc_in_bounds
        #too_many
        #[inline]
        #vis const fn tile_in_bounds(#(#params: #usize,)* extents: #extents) -> ::core::primitive::bool {
            #in_bounds_body
        }
    })
}
