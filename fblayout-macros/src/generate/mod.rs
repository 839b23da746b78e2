//! Generation: the code a checked declaration expands to, and the fallback when it has errors.
//!
//! Generated code names everything by absolute path (`::fblayout::typed::Ix`,
//! `::core::primitive::usize`, `::std::sync::OnceLock`), so it compiles under
//! `#![no_implicit_prelude]` and next to user types called `usize` or modules called `core`.
//! What only generated code may call is reached through `::fblayout::__private`.

mod axis;
mod consts;
mod coord;
mod extents;
mod index;
mod like;
mod tensor;
mod tile;

use fblayout_core::__private::{AxisConst, AxisConstKind};
use proc_macro2::TokenStream;
use quote::quote;

pub(crate) use axis::expand_axis;

use crate::check::{check, check_like};
use crate::ctxt::Ctxt;
use crate::parse::{Input, ViewDecl};

/// `#[doc]` attributes for `text`, one per line, each starting with a space (as `///` would).
pub(crate) fn docs(text: &str) -> TokenStream {
    let lines = text.lines().map(|line| {
        if line.is_empty() {
            String::new()
        } else {
            format!(" {line}")
        }
    });
    quote!(#(#[doc = #lines])*)
}

/// Expands `#[derive(Tensor)]`: parse, check, generate.
pub(crate) fn expand_tensor(input: &syn::DeriveInput) -> TokenStream {
    let cx = Ctxt::new();
    let parsed = Input::parse(&cx, input);
    if let Some(like) = parsed.as_ref().and_then(|p| p.attrs.like.as_ref()) {
        let parsed = parsed.as_ref();
        let checked = parsed.is_some_and(|p| check_like(&cx, p, like));
        return match (cx.check(), parsed) {
            (Ok(()), Some(p)) if checked => like::generate(p, like),
            (Err(errors), p) => fallback(p, errors),
            (Ok(()), p) => fallback(
                p,
                syn::Error::new_spanned(&input.ident, "fblayout could not check this tensor"),
            ),
        };
    }
    let model = parsed.as_ref().and_then(|p| check(&cx, p));
    let generated = model.as_ref().map(tensor::generate);
    match (cx.check(), generated) {
        (Ok(()), Some(Ok(tokens))) => tokens,
        (Err(errors), _) | (Ok(()), Some(Err(errors))) => fallback(parsed.as_ref(), errors),
        // No model and no error cannot happen: `check` returns `None` only after reporting.
        (Ok(()), None) => fallback(
            parsed.as_ref(),
            syn::Error::new_spanned(&input.ident, "fblayout could not check this tensor"),
        ),
    }
}

/// The errors, plus stub implementations so that uses of the tensor elsewhere do not add
/// follow-on errors (the stubs are never run: the crate does not compile).
fn fallback(input: Option<&Input<'_>>, errors: syn::Error) -> TokenStream {
    let errors = errors.to_compile_error();
    let Some(input) = input else { return errors };
    if !input.original.generics.params.is_empty() {
        return errors;
    }
    let krate = input.attrs.krate();
    let ident = input.ident;
    let vis = input.vis;
    let rank = proc_macro2::Literal::usize_unsuffixed(input.fields.len());
    let usize = quote!(::core::primitive::usize);
    let unreachable = quote!(::core::unreachable!("the tensor's declaration has errors"));
    let constructor = input
        .fields
        .iter()
        .map(|f| f.axis_ty.map(|ty| (f.ident, ty)))
        .collect::<Option<Vec<_>>>()
        .map(|fields| {
            let (names, types): (Vec<_>, Vec<_>) = fields.into_iter().unzip();
            quote! {
                impl #ident {
                    #[allow(missing_docs, clippy::too_many_arguments, reason = "a stub beside compile errors; the crate does not build")]
                    #vis const fn new(#(#names: #krate::typed::Ix<#types>),*) -> Self {
                        Self { #(#names),* }
                    }
                }
            }
        });
    // The extents and view types exist too, so that code naming them reports nothing more.
    let extents = quote::format_ident!("{}Extents", ident);
    let dynamic = input.fields.iter().filter(|f| {
        f.extent
            .as_ref()
            .is_some_and(|e| e.value == fblayout_core::layout::Extent::Dynamic)
    });
    let dynamic = dynamic.map(|f| f.ident);
    let views: Vec<&syn::Ident> = input.attrs.views.iter().map(ViewDecl::ident).collect();
    let shapes = std::iter::once(ident)
        .chain(views.iter().copied())
        .map(|i| quote::format_ident!("{}Shape", i));
    let extents_stub = match &input.attrs.like {
        Some(like) => quote! {
            #[allow(missing_docs, reason = "a stub beside compile errors; the crate does not build")]
            #vis type #extents = <#like as #krate::typed::Tensor>::Extents;
        },
        None => {
            let dynamic: Vec<&syn::Ident> = dynamic.collect();
            let surface = surface_stub(input, &extents, dynamic.len());
            quote! {
                #[allow(missing_docs, reason = "a stub beside compile errors; the crate does not build")]
                #vis struct #extents { #(pub #dynamic: #usize),* }
                #surface
            }
        }
    };
    quote! {
        #errors
        #constructor

        #extents_stub
        #(
            #[allow(missing_docs, reason = "a stub beside compile errors; the crate does not build")]
            #vis struct #views;
        )*
        #(
            #[allow(missing_docs, reason = "a stub beside compile errors; the crate does not build")]
            #vis struct #shapes;
        )*

        impl #krate::typed::Coord for #ident {
            type Tensor = Self;
            type Indices = [#usize; #rank];
            type Shape = ();
            const NAME: &'static ::core::primitive::str = "";
            const AXES: &'static [&'static ::core::primitive::str] = &[];
            const OFFSET_FN: &'static ::core::primitive::str = "";
            const IN_BOUNDS_FN: &'static ::core::primitive::str = "";
            fn indices(&self) -> [#usize; #rank] { #unreachable }
            fn from_indices(_: &[#usize]) -> ::core::option::Option<Self> { #unreachable }
            fn offset(&self, _: ()) -> #usize { #unreachable }
            fn in_bounds(&self, _: ()) -> ::core::primitive::bool { #unreachable }
            fn shape(_: ()) {}
            fn dims(_: ()) -> [#usize; #rank] { #unreachable }
            fn view() -> &'static #krate::layout::View { #unreachable }
        }

        impl #krate::typed::Tensor for #ident {
            type Extents = ();
            const WGSL: &'static ::core::primitive::str = "";
            const TILE_ELEMS: #usize = 1;
            fn descriptor() -> &'static #krate::typed::TensorDescriptor { #unreachable }
            fn len(_: ()) -> #usize { #unreachable }
        }
    }
}

/// Stubs of the kernel author's surface of a declared (not `like`) tensor: the GPU twin of the
/// extents, `gpu_extents`, the axis constants and, for an R-Tile declaration, the tile helpers.
fn surface_stub(input: &Input<'_>, extents: &syn::Ident, dynamic: usize) -> TokenStream {
    let krate = input.attrs.krate();
    let ident = input.ident;
    let vis = input.vis;
    let usize = quote!(::core::primitive::usize);
    let unreachable = quote!(::core::unreachable!("the tensor's declaration has errors"));
    let twin = quote::format_ident!("{}GpuExtents", ident);
    let n = proc_macro2::Literal::usize_unsuffixed(dynamic);
    // Each name once: axes whose names differ only in case are among the errors reported.
    let mut consts: Vec<syn::Ident> = Vec::new();
    for f in &input.fields {
        let extent = f.extent.as_ref().map(|e| e.value);
        let is_static = matches!(extent, Some(fblayout_core::layout::Extent::Static(_)));
        let kinds = [
            is_static.then_some(AxisConstKind::Extent),
            Some(AxisConstKind::Tile),
        ];
        for kind in kinds.into_iter().flatten() {
            let name = AxisConst {
                axis: f.name.clone(),
                kind,
                value: 0,
            }
            .rust_name();
            if !consts.iter().any(|c| *c == name) {
                consts.push(syn::Ident::new(&name, f.ident.span()));
            }
        }
    }
    let rtile = input
        .attrs
        .layout
        .as_ref()
        .is_some_and(|l| l.value == fblayout_core::layout::Order::RTile);
    // `panic!` with a literal is allowed in a `const fn`; `unreachable!` with one is not.
    let stub_panic = quote!(::core::panic!("the tensor's declaration has errors"));
    let tile_fns = rtile.then(|| {
        let params = input.fields.iter().map(|_| quote!(_: #usize));
        let params: Vec<TokenStream> = params.collect();
        quote! {
            #[allow(missing_docs, clippy::too_many_arguments, reason = "a stub beside compile errors; the crate does not build")]
            #vis const fn tile_offset(#(#params,)* _: #extents) -> #usize { #stub_panic }
            #[allow(missing_docs, clippy::too_many_arguments, reason = "a stub beside compile errors; the crate does not build")]
            #vis const fn tile_in_bounds(#(#params,)* _: #extents) -> ::core::primitive::bool { #stub_panic }
        }
    });
    quote! {
        #[allow(missing_docs, reason = "a stub beside compile errors; the crate does not build")]
        #vis type #twin = [::core::primitive::u32; #n];

        #[allow(missing_docs, reason = "a stub beside compile errors; the crate does not build")]
        impl #ident {
            #(#vis const #consts: #usize = 0;)*
            #vis fn gpu_extents(_: #extents) -> ::core::result::Result<#twin, #krate::layout::LayoutError> {
                #unreachable
            }
            #tile_fns
        }
    }
}
