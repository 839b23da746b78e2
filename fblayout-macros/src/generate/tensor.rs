//! The tensor: its coordinate, extents, buffer length, named constants, tile helpers, WGSL,
//! descriptor and view types.

use fblayout_core::__private::ViewSpec;
use fblayout_core::__private::tokens;
use fblayout_core::layout::{ElemType, Extent, LayoutSpec, Order, ViewStep};
use proc_macro2::{Literal, TokenStream};
use quote::{format_ident, quote};
use syn::Ident;

use super::consts::axis_constants;
use super::coord::{CoordSpec, extent_bindings, extents_unused, usize_ty};
use super::docs;
use super::extents::extents_items;
use super::index::body;
use super::tile::tile_fns;
use crate::check::{Model, ViewModel};
use crate::parse::{Name, name_of};

/// Everything `#[derive(Tensor)]` adds for a checked declaration.
pub(crate) fn generate(model: &Model<'_>) -> syn::Result<TokenStream> {
    let input = model.input;
    let krate = input.attrs.krate();
    let ident = input.ident;
    let vis = input.vis;
    let extents = format_ident!("{}Extents", ident);
    let layout = &model.descriptor.layout;
    let extent_axes: Vec<Ident> = layout
        .dynamic_axes()
        .map(|a| {
            let span = input
                .fields
                .iter()
                .find(|f| f.name == a.name)
                .map_or_else(proc_macro2::Span::call_site, |f| f.ident.span());
            Ident::new(&a.name, span)
        })
        .collect();
    let usize = usize_ty();

    let fields: Vec<(Ident, syn::Type)> = input
        .fields
        .iter()
        .filter_map(|f| f.axis_ty.map(|ty| (f.ident.clone(), ty.clone())))
        .collect();
    let tensor_coord = CoordSpec {
        krate: &krate,
        ident,
        vis,
        tensor: ident,
        extents: &extents,
        extent_axes: &extent_axes,
        axes: &fields,
        view: &model.descriptor.identity,
        descriptor_view: quote!(identity),
    }
    .generate()?;

    let extents_items = extents_items(model, &krate, &extents, &extent_axes);
    let axis_constants = axis_constants(model);
    let tile_fns = tile_fns(model, &extents, &extent_axes)?;
    let name = layout.name();

    // The buffer length: the core's length function, simplified, as tokens.
    let len_fn = layout.len_fn().simplified();
    let len_block = tokens::block(&len_fn.graph, len_fn.offset);
    let bindings = extent_bindings(&extent_axes);
    let len_unused = extents_unused(&len_block, &bindings);
    let len_body = body(&len_block, &bindings, ident.span())?;
    let doc_len = docs(&format!(
        "The length of the buffer of `{name}` in elements, padding included."
    ));
    let len_const = layout.is_static().then(|| {
        let doc = docs(&format!("The length of the buffer of `{name}` in elements, padding included (every extent is static)."));
        quote! {
            #doc
            #vis const LEN: #usize = Self::len(#extents);
        }
    });

    let wgsl = Literal::string(model.descriptor.wgsl());
    let tile_elems = Literal::u64_unsuffixed(layout.tile_elems());
    let spec = spec_literal(&krate, &model.spec);
    let axes = axes_literal(&krate, layout.axes());
    let view_specs = model
        .views
        .iter()
        .map(|v| view_spec_literal(&krate, &v.decl.spec));

    let mut views = Vec::new();
    for (i, view) in model.views.iter().enumerate() {
        views.push(view_struct(model, view, i, &krate, &extents, &extent_axes)?);
    }

    Ok(quote! {
        #tensor_coord

        impl #ident {
            #doc_len
            #[inline]
            #vis const fn len(extents: #extents) -> #usize {
                #len_unused
                #len_body
            }

            #len_const

            #axis_constants

            #tile_fns
        }

        #extents_items

        #[automatically_derived]
        impl #krate::typed::Tensor for #ident {
            type Extents = #extents;
            const WGSL: &'static ::core::primitive::str = #wgsl;
            const TILE_ELEMS: #usize = #tile_elems;

            fn descriptor() -> &'static #krate::typed::TensorDescriptor {
                static DESCRIPTOR: ::std::sync::OnceLock<#krate::typed::TensorDescriptor> =
                    ::std::sync::OnceLock::new();
                DESCRIPTOR.get_or_init(|| {
                    #krate::__private::descriptor(
                        &#spec,
                        #axes,
                        &[#(#view_specs),*],
                        <Self as #krate::typed::Tensor>::WGSL,
                    )
                })
            }

            fn len(extents: #extents) -> #usize {
                Self::len(extents)
            }
        }

        #(#views)*
    })
}

/// One view struct and its coordinate code.
fn view_struct(
    model: &Model<'_>,
    view: &ViewModel<'_>,
    index: usize,
    krate: &TokenStream,
    extents: &Ident,
    extent_axes: &[Ident],
) -> syn::Result<TokenStream> {
    let input = model.input;
    let tensor = input.ident;
    let vis = input.vis;
    let ident = view.decl.ident();
    let Some(built) = model.descriptor.views.get(index) else {
        return Err(syn::Error::new(
            ident.span(),
            "view missing from the descriptor (a bug in fblayout)",
        ));
    };
    let index_lit = Literal::usize_unsuffixed(index);
    let coord = CoordSpec {
        krate,
        ident,
        vis,
        tensor,
        extents,
        extent_axes,
        axes: &view.axes,
        view: built,
        descriptor_view: quote!(views[#index_lit]),
    }
    .generate()?;
    let steps: Vec<String> = view
        .decl
        .spec
        .steps
        .iter()
        .map(ToString::to_string)
        .collect();
    let steps = steps.join(", then ");
    let doc = docs(&format!(
        "A coordinate of view `{}` of [`{tensor}`]: `{steps}`.\n\n\
         Its offsets address the buffer of [`{tensor}`]; reading through it costs an index \
         remap, not a copy.",
        view.name()
    ));
    let fields = view.axes.iter().map(|(i, _)| i);
    let types = view.axes.iter().map(|(_, t)| t);
    let field_docs = view
        .axes
        .iter()
        .map(|(i, _)| docs(&format!("The index along axis `{}`.", name_of(i))));
    Ok(quote! {
        #doc
        #[derive(::core::clone::Clone, ::core::marker::Copy, ::core::fmt::Debug, ::core::cmp::PartialEq, ::core::cmp::Eq, ::core::hash::Hash)]
        #vis struct #ident {
            #(
                #field_docs
                #vis #fields: #krate::typed::Ix<#types>,
            )*
        }

        #coord
    })
}

fn string(s: &str) -> TokenStream {
    quote!(::std::borrow::ToOwned::to_owned(#s))
}

fn strings(list: &[String]) -> TokenStream {
    if list.is_empty() {
        return quote!(::std::vec::Vec::new());
    }
    let items = list.iter().map(|s| string(s));
    quote!(::std::vec![#(#items),*])
}

/// The `LayoutSpec` literal the descriptor is built from.
fn spec_literal(krate: &TokenStream, spec: &LayoutSpec) -> TokenStream {
    let name = string(&spec.name);
    let elem = format_ident!("{}", elem_variant(spec.elem));
    let order = format_ident!(
        "{}",
        match spec.order {
            Order::RowMajor => "RowMajor",
            Order::ColMajor => "ColMajor",
            Order::RTile => "RTile",
        }
    );
    let axes = spec.axes.iter().map(|a| {
        let name = string(&a.name);
        let extent = extent_literal(krate, a.extent);
        let tile = match a.tile {
            Some(t) => {
                let t = Literal::u32_unsuffixed(t);
                quote!(::core::option::Option::Some(#t))
            }
            None => quote!(::core::option::Option::None),
        };
        let pad = a.pad;
        quote!(#krate::layout::AxisSpec { name: #name, extent: #extent, tile: #tile, pad: #pad })
    });
    let forward = strings(&spec.forward);
    let backward = strings(&spec.backward);
    quote! {
        #krate::layout::LayoutSpec::from_parts(
            #name,
            #krate::layout::ElemType::#elem,
            ::std::vec![#(#axes),*],
            #krate::layout::Order::#order,
            #forward,
            #backward,
        )
    }
}

fn elem_variant(elem: ElemType) -> &'static str {
    match elem {
        ElemType::F32 => "F32",
        ElemType::F16 => "F16",
        ElemType::U32 => "U32",
        ElemType::I32 => "I32",
        ElemType::F64 => "F64",
        ElemType::I8 => "I8",
        ElemType::I16 => "I16",
        ElemType::U8 => "U8",
        ElemType::U16 => "U16",
        ElemType::I64 => "I64",
        ElemType::U64 => "U64",
    }
}

/// The checked axes (tiles chosen), for the descriptor.
fn axes_literal(krate: &TokenStream, axes: &[fblayout_core::layout::LayoutAxis]) -> TokenStream {
    let axes = axes.iter().map(|a| {
        let name = string(&a.name);
        let extent = extent_literal(krate, a.extent);
        let tile = Literal::u32_unsuffixed(a.tile);
        let pad = a.pad;
        quote!(#krate::layout::LayoutAxis { name: #name, extent: #extent, tile: #tile, pad: #pad })
    });
    quote!(::std::vec![#(#axes),*])
}

fn extent_literal(krate: &TokenStream, extent: Extent) -> TokenStream {
    match extent {
        Extent::Static(n) => {
            let n = Literal::u32_unsuffixed(n);
            quote!(#krate::layout::Extent::Static(#n))
        }
        Extent::Dynamic => quote!(#krate::layout::Extent::Dynamic),
    }
}

/// The `ViewSpec` literal of one view, names as `&'static str`.
fn view_spec_literal(krate: &TokenStream, view: &ViewSpec<Name>) -> TokenStream {
    let name = &view.name.name;
    let step = quote!(#krate::layout::ViewStep);
    let vec = |items: Vec<TokenStream>| quote!(::std::vec![#(#items),*]);
    let steps = view.steps.iter().map(|s| match s.map(|n| n.name.clone()) {
        ViewStep::Permute(axes) => {
            let axes = vec(axes.iter().map(|a| quote!(#a)).collect());
            quote!(#step::Permute(#axes))
        }
        ViewStep::Transpose(a, b) => quote!(#step::Transpose(#a, #b)),
        ViewStep::Split { axis, parts } => {
            let parts = vec(parts
                .iter()
                .map(|(n, e)| match e {
                    Some(e) => {
                        let e = Literal::u32_unsuffixed(*e);
                        quote!((#n, ::core::option::Option::Some(#e)))
                    }
                    None => quote!((#n, ::core::option::Option::None)),
                })
                .collect());
            quote!(#step::Split { axis: #axis, parts: #parts })
        }
        ViewStep::Merge { axes, into } => {
            let axes = vec(axes.iter().map(|a| quote!(#a)).collect());
            quote!(#step::Merge { axes: #axes, into: #into })
        }
        ViewStep::Slice { axis, start, len } => {
            let (start, len) = (Literal::u32_unsuffixed(start), Literal::u32_unsuffixed(len));
            quote!(#step::Slice { axis: #axis, start: #start, len: #len })
        }
        ViewStep::Broadcast { axis, extent, at } => {
            let (extent, at) = (
                Literal::u32_unsuffixed(extent),
                Literal::usize_unsuffixed(at),
            );
            quote!(#step::Broadcast { axis: #axis, extent: #extent, at: #at })
        }
    });
    quote!(#krate::__private::ViewSpec { name: #name, steps: ::std::vec![#(#steps),*] })
}
