//! `#[tensor(like = X)]`: a tensor that shares another tensor's declaration.
//!
//! Y, dX and dY are laid out as X is; Q, K and V share one declaration. The tensor declared
//! `like = X` is its own coordinate type (a coordinate of Y is not one of X), but everything
//! else is X's: the extents type (`YExtents` is an alias of `XExtents`), the typed shape, the
//! offsets, masks and length (X's `const fn`s), the WGSL and the descriptor. The fields must
//! be X's axes in X's order; the compiler checks them against `X::new`.

use proc_macro2::{Literal, TokenStream};
use quote::{format_ident, quote, quote_spanned};
use syn::spanned::Spanned as _;

use super::coord::usize_ty;
use super::docs;
use crate::parse::Input;

/// Everything `#[derive(Tensor)]` adds for a tensor declared `like = path`.
pub(crate) fn generate(input: &Input<'_>, like: &syn::Path) -> TokenStream {
    let krate = input.attrs.krate();
    let ident = input.ident;
    let vis = input.vis;
    let usize = usize_ty();
    let fields: Vec<&syn::Ident> = input.fields.iter().map(|f| f.ident).collect();
    let types: Vec<&syn::Type> = input.fields.iter().filter_map(|f| f.axis_ty).collect();
    let rank = Literal::usize_unsuffixed(fields.len());
    let extents = format_ident!("{}Extents", ident);
    let shape = format_ident!("{}Shape", ident);
    let like_name = quote!(#like).to_string().replace(' ', "");
    let tensor = quote!(<#like as #krate::typed::Tensor>);
    let coord = quote!(<#like as #krate::typed::Coord>);
    let private = quote!(#krate::__private);
    let methods = super::coord::coord_methods(
        &private,
        &rank,
        &fields,
        &types,
        &quote!(#extents),
        &quote!(#shape),
    );
    // `X::new(self.a, self.b)`, each argument spanned at the field it comes from, so that a
    // field that is not X's axis at that position is reported there.
    let as_like = {
        let args = fields.iter().map(|f| quote_spanned!(f.span()=> self.#f));
        quote!(#like::new(#(#args),*))
    };
    let axis_list = fields
        .iter()
        .map(|f| format!("`{f}`"))
        .collect::<Vec<_>>()
        .join(", ");
    let doc_extents = docs(&format!(
        "The run-time extents of [`{ident}`]: those of [`{like_name}`], whose declaration it shares."
    ));
    let doc_shape = docs(&format!(
        "The typed extents of [`{ident}`]: those of [`{like_name}`]."
    ));
    let doc_new = docs(&format!("The coordinate ({axis_list}) of [`{ident}`]."));
    let doc_as = docs(&format!(
        "The same coordinate in [`{like_name}`], whose layout [`{ident}`] shares."
    ));
    let doc_offset = docs(&format!(
        "The offset of this coordinate in the buffer of [`{ident}`]: that of the same coordinate in [`{like_name}`]."
    ));
    let doc_in_bounds = docs(&format!(
        "Whether this coordinate lies inside [`{ident}`] (padding does not)."
    ));
    let doc_shape_fn = docs(&format!(
        "The extent of each axis ({axis_list}), typed, for the run-time extents `extents`."
    ));
    let doc_dims = docs(&format!(
        "The extent of each axis ({axis_list}) as plain numbers."
    ));
    let doc_len = docs(&format!(
        "The length of the buffer of [`{ident}`] in elements, padding included: that of [`{like_name}`]."
    ));
    let too_many = (fields.len() > 7).then(|| {
        quote!(#[allow(clippy::too_many_arguments, reason = "one argument per axis, in axis order")])
    });
    let assert_axes = types
        .iter()
        .map(|ty| quote_spanned!(ty.span()=> must_be_an_axis_type::<#ty>();));
    let once_impls = types
        .iter()
        .map(|ty| quote_spanned!(ty.span()=> impl EachAxisNeedsItsOwnAxisType for #ty {}));

    quote! {
        #doc_extents
        #vis type #extents = #tensor::Extents;

        #doc_shape
        #vis type #shape = #coord::Shape;

        impl #ident {
            #doc_new
            #too_many
            #[inline]
            #vis const fn new(#(#fields: #krate::typed::Ix<#types>),*) -> Self {
                Self { #(#fields),* }
            }

            #doc_as
            #[inline]
            #vis const fn as_like(&self) -> #like {
                #as_like
            }

            #doc_offset
            #[inline]
            #vis const fn offset(&self, extents: #extents) -> #usize {
                self.as_like().offset(extents)
            }

            #doc_in_bounds
            #[inline]
            #vis const fn in_bounds(&self, extents: #extents) -> ::core::primitive::bool {
                self.as_like().in_bounds(extents)
            }

            #doc_shape_fn
            #[inline]
            #vis const fn shape(extents: #extents) -> #shape {
                #like::shape(extents)
            }

            #doc_dims
            #[inline]
            #vis const fn dims(extents: #extents) -> [#usize; #rank] {
                #like::dims(extents)
            }

            #doc_len
            #[inline]
            #vis const fn len(extents: #extents) -> #usize {
                #like::len(extents)
            }
        }

        #[automatically_derived]
        impl #krate::typed::Coord for #ident {
            type Tensor = #ident;
            type Indices = [#usize; #rank];
            type Shape = #shape;
            const NAME: &'static ::core::primitive::str = #coord::NAME;
            const AXES: &'static [&'static ::core::primitive::str] = #coord::AXES;
            const OFFSET_FN: &'static ::core::primitive::str = #coord::OFFSET_FN;
            const IN_BOUNDS_FN: &'static ::core::primitive::str = #coord::IN_BOUNDS_FN;

            #methods

            fn view() -> &'static #krate::layout::View {
                #coord::view()
            }
        }

        #[automatically_derived]
        impl #krate::typed::Tensor for #ident {
            type Extents = #extents;
            const WGSL: &'static ::core::primitive::str = #tensor::WGSL;
            const TILE_ELEMS: #usize = #tensor::TILE_ELEMS;

            fn descriptor() -> &'static #krate::typed::TensorDescriptor {
                #tensor::descriptor()
            }

            fn len(extents: #extents) -> #usize {
                Self::len(extents)
            }
        }

        // Each field indexes an axis type, and no axis type indexes two fields.
        const _: () = {
            const fn must_be_an_axis_type<A: #krate::typed::Axis>() {}
            trait EachAxisNeedsItsOwnAxisType {}
            #(#once_impls)*
            #(#assert_axes)*
        };
    }
}
