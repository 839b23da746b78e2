//! The run-time extents of a tensor: the `<X>Extents` struct the offset functions take, and its
//! GPU twin `<X>GpuExtents` with the checked conversion `X::gpu_extents`.
//!
//! The twin has the byte layout of the WGSL struct `<name>_extents` in `X::WGSL` (one `u32`
//! per run-time axis, in axis order, four-byte aligned, no padding), so it is a plain
//! `[u32; N]`: `bytemuck::Pod` through bytemuck's own implementation for arrays, with no
//! `unsafe` in the expansion (users may `#![forbid(unsafe_code)]`). A tensor without run-time
//! axes has no WGSL struct (WGSL has no empty structs); its twin is `[u32; 0]`, so generic host
//! code needs no special case.

use proc_macro2::{Literal, TokenStream};
use quote::{format_ident, quote};
use syn::Ident;

use super::coord::{str_slice, usize_ty};
use super::docs;
use crate::check::Model;

/// The extents struct and its GPU twin.
pub(crate) fn extents_items(
    model: &Model<'_>,
    krate: &TokenStream,
    extents: &Ident,
    fields: &[Ident],
) -> TokenStream {
    let host = extents_struct(model, krate, extents, fields);
    let twin = gpu_twin(model, krate, extents, fields);
    quote!(#host #twin)
}

/// The extents struct: a field per run-time axis, or a unit struct.
fn extents_struct(
    model: &Model<'_>,
    krate: &TokenStream,
    extents: &Ident,
    fields: &[Ident],
) -> TokenStream {
    let (ident, vis) = (model.input.ident, model.input.vis);
    let usize = usize_ty();
    let derives = quote!(
        ::core::clone::Clone,
        ::core::marker::Copy,
        ::core::fmt::Debug,
        ::core::cmp::PartialEq,
        ::core::cmp::Eq,
        ::core::hash::Hash
    );
    let axes: Vec<String> = fields.iter().map(ToString::to_string).collect();
    let names = str_slice(axes.iter().map(String::as_str));
    if axes.is_empty() {
        let doc = docs(&format!(
            "The run-time extents of [`{ident}`]: none, every extent is static."
        ));
        return quote! {
            #doc
            #[derive(#derives, ::core::default::Default)]
            #vis struct #extents;

            #[automatically_derived]
            impl #krate::typed::Extents for #extents {
                const AXES: &'static [&'static ::core::primitive::str] = #names;

                fn values(&self) -> ::std::vec::Vec<#usize> {
                    ::std::vec::Vec::new()
                }
            }
        };
    }
    let doc = docs(&format!(
        "The run-time extents of [`{ident}`]: one per axis declared `dyn`."
    ));
    let field_docs = axes
        .iter()
        .map(|a| docs(&format!("The extent of axis `{a}`.")));
    quote! {
        #doc
        #[derive(#derives)]
        #vis struct #extents {
            #(
                #field_docs
                #vis #fields: #usize,
            )*
        }

        #[automatically_derived]
        impl #krate::typed::Extents for #extents {
            const AXES: &'static [&'static ::core::primitive::str] = #names;

            fn values(&self) -> ::std::vec::Vec<#usize> {
                ::std::vec![#(self.#fields),*]
            }
        }
    }
}

/// `<X>GpuExtents` and `X::gpu_extents`.
fn gpu_twin(
    model: &Model<'_>,
    krate: &TokenStream,
    extents: &Ident,
    fields: &[Ident],
) -> TokenStream {
    let (ident, vis) = (model.input.ident, model.input.vis);
    let twin = format_ident!("{}GpuExtents", ident);
    let n = Literal::usize_unsuffixed(fields.len());
    let u32 = quote!(::core::primitive::u32);
    let name = model.descriptor.layout.name();
    let doc = match model.descriptor.extents_struct_name() {
        Some(wgsl) => {
            let axes: Vec<String> = fields.iter().map(|f| format!("`{f}`")).collect();
            format!(
                "The run-time extents of [`{ident}`] as the GPU reads them: the WGSL struct \
                 `{wgsl}` of `{ident}::WGSL`, one `u32` per run-time axis ({}), in axis order.\n\n\
                 It has that struct's byte layout (four-byte words, no padding), and an array of \
                 `u32` is `bytemuck::Pod`: upload it as it is. Make one with \
                 [`{ident}::gpu_extents`], which checks the extents.",
                axes.join(", ")
            )
        }
        None => format!(
            "The run-time extents of [`{ident}`] as the GPU reads them: none. Every extent of \
             `{name}` is static, so its WGSL has no extents struct (WGSL has no empty structs) \
             and this is the empty array, zero bytes, `bytemuck::Pod` like every `u32` array."
        ),
    };
    let doc = docs(&doc);
    let words = if fields.is_empty() {
        "no words: every extent is static"
    } else {
        "the words of the WGSL struct the shader reads"
    };
    let doc_fn = docs(&format!(
        "`extents` as [`{twin}`], {words}.\n\n\
         Fails as `check_extents` does (`fblayout::Tensor::check_extents`): an extent that \
         does not fit a `u32` (WGSL indexes with `u32`), a zero extent, one that its tile does \
         not divide without `pad`, or a buffer past the `u32` index space."
    ));
    quote! {
        #doc
        #vis type #twin = [#u32; #n];

        impl #ident {
            #doc_fn
            #vis fn gpu_extents(
                extents: #extents,
            ) -> ::core::result::Result<#twin, #krate::layout::LayoutError> {
                #krate::__private::gpu_extents::<Self, #n>(extents)
            }
        }
    }
}
