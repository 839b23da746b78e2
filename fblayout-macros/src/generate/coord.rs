//! What the tensor struct and every view struct share: a coordinate.
//!
//! For a coordinate type `C` of tensor `T` (the tensor itself or one of its views) this writes
//! the inherent `const fn`s `new`, `offset`, `in_bounds`, `shape` and `dims`, the typed shape
//! struct `<C>Shape`, the `Coord` implementation that forwards to them, and the const
//! assertions that each field's axis type is an `Axis` and is used once. Offsets, masks and
//! extents are the core's simplified expressions, lowered to tokens by [`super::index`].

use fblayout_core::__private::tokens;
use fblayout_core::layout::{TensorLayout, View};
use proc_macro2::{Literal, TokenStream};
use quote::{format_ident, quote, quote_spanned};
use syn::Ident;
use syn::spanned::Spanned as _;

use super::docs;
use super::index::{Bindings, body};

/// One coordinate type to generate.
pub(crate) struct CoordSpec<'a> {
    /// Where fblayout is (`::fblayout`).
    pub(crate) krate: &'a TokenStream,
    /// The coordinate struct.
    pub(crate) ident: &'a Ident,
    /// Its visibility.
    pub(crate) vis: &'a syn::Visibility,
    /// The tensor struct.
    pub(crate) tensor: &'a Ident,
    /// The tensor's extents struct.
    pub(crate) extents: &'a Ident,
    /// The fields of the extents struct: the tensor's run-time axes, in order.
    pub(crate) extent_axes: &'a [Ident],
    /// The fields: axis name and axis type, in coordinate order.
    pub(crate) axes: &'a [(Ident, syn::Type)],
    /// The checked view.
    pub(crate) view: &'a View,
    /// How to reach the view from the descriptor (`identity`, `views[0]`).
    pub(crate) descriptor_view: TokenStream,
}

/// `::core::primitive::usize`.
pub(crate) fn usize_ty() -> TokenStream {
    quote!(::core::primitive::usize)
}

/// Where the run-time extent parameters of the core's expressions (`<axis>_len`) come from:
/// the fields of the extents struct.
pub(crate) fn extent_bindings(extent_axes: &[Ident]) -> Bindings {
    extent_axes
        .iter()
        .map(|field| {
            let name = TensorLayout::extent_param(&field.to_string());
            (name, quote!(extents.#field))
        })
        .collect()
}

/// `let _ = extents;` where a body reads no extent, so that the parameter is used.
pub(crate) fn extents_unused(block: &tokens::Block, bindings: &Bindings) -> Option<TokenStream> {
    let vars = block.vars();
    let reads = bindings
        .iter()
        .any(|(name, _)| vars.contains(&name.as_str()));
    (!reads).then(|| quote!(let _ = extents;))
}

/// `&'static [&'static str]` of `names`.
pub(crate) fn str_slice<'s>(names: impl IntoIterator<Item = &'s str>) -> TokenStream {
    let names = names.into_iter();
    quote!(&[#(#names),*])
}

impl CoordSpec<'_> {
    /// The inherent impl, the `Coord` impl and the axis-type assertions.
    pub(crate) fn generate(&self) -> syn::Result<TokenStream> {
        let Self {
            krate,
            ident,
            vis,
            tensor,
            extents,
            axes,
            ..
        } = self;
        let usize = usize_ty();
        let name = self.view.name();
        let rank = axes.len();
        let rank_lit = Literal::usize_unsuffixed(rank);
        let fields: Vec<&Ident> = axes.iter().map(|(i, _)| i).collect();
        let types: Vec<&syn::Type> = axes.iter().map(|(_, t)| t).collect();
        let axis_list = fields
            .iter()
            .map(|f| format!("`{f}`"))
            .collect::<Vec<_>>()
            .join(", ");
        let f = self.view.index_fn().simplified();
        let mut bindings: Bindings = f
            .param_names()
            .iter()
            .take(f.coord_count())
            .zip(&fields)
            .map(|(name, field)| ((*name).to_owned(), quote!(self.#field.get())))
            .collect();
        let extent_bindings = extent_bindings(self.extent_axes);
        bindings.extend(extent_bindings.iter().cloned());
        let offset_block = tokens::block(&f.graph, f.offset);
        let in_bounds_block = tokens::block(&f.graph, f.in_bounds);
        let at = ident.span();
        let offset_unused = extents_unused(&offset_block, &extent_bindings);
        let in_bounds_unused = extents_unused(&in_bounds_block, &extent_bindings);
        let offset_body = body(&offset_block, &bindings, at)?;
        let in_bounds_body = body(&in_bounds_block, &bindings, at)?;
        let mut dims = Vec::with_capacity(rank);
        let mut reads_extents = false;
        for axis in self.view.axes() {
            let block = tokens::view_extent(&axis.extent);
            reads_extents |= extents_unused(&block, &extent_bindings).is_none();
            let value = body(&block, &extent_bindings, at)?;
            let straight = block.lets.is_empty()
                && (block.vars().is_empty() || matches!(block.result, tokens::Term::Var(_)));
            dims.push(if straight { value } else { quote!({ #value }) });
        }
        let dims_local = Ident::new("dims", proc_macro2::Span::mixed_site());
        let shape_unused = (!reads_extents).then(|| quote!(let _ = extents;));
        let shape_ident = format_ident!("{}Shape", ident);
        let indices: Vec<Literal> = (0..rank).map(Literal::usize_unsuffixed).collect();
        let names = str_slice(self.view.axes().iter().map(|a| a.name.as_str()));
        let offset_fn = f.offset_fn_name();
        let in_bounds_fn = f.in_bounds_fn_name();
        let descriptor_view = &self.descriptor_view;
        let too_many = (rank > 7).then(|| {
            quote!(#[allow(clippy::too_many_arguments, reason = "one argument per axis, in axis order")])
        });

        let doc_new = docs(&format!("The coordinate ({axis_list}) of `{name}`."));
        let doc_offset = docs(&format!(
            "The offset of this coordinate in the buffer of [`{tensor}`], in elements.\n\n\
             Meaningful where [`in_bounds`](Self::in_bounds) holds. It is the simplified index \
             function of `{name}`, the same as `{offset_fn}` in the tensor's WGSL; `const`, so \
             with static extents it folds at compile time."
        ));
        let doc_in_bounds = docs(&format!(
            "Whether this coordinate lies inside `{name}`: each index below its axis's extent \
             (padding lies outside). The same as `{in_bounds_fn}` in the tensor's WGSL."
        ));
        let doc_shape = docs(&format!(
            "The extent of each axis ({axis_list}) for the run-time extents `extents`, typed: \
             iterate a field to visit its indices."
        ));
        let doc_dims = docs(&format!(
            "The extent of each axis ({axis_list}) for the run-time extents `extents`, as plain numbers."
        ));
        let doc_shape_struct = docs(&format!(
            "The extents of the axes of [`{ident}`] ({axis_list}), typed: iterating a field \
             yields its indices."
        ));
        let doc_shape_dims = docs("The extents as plain numbers, in axis order.");
        let field_docs: Vec<TokenStream> = fields
            .iter()
            .map(|f| docs(&format!("The extent of axis `{f}`.")))
            .collect();
        let private = quote!(#krate::__private);
        let methods = coord_methods(
            &private,
            &rank_lit,
            &fields,
            &types,
            &quote!(#extents),
            &quote!(#shape_ident),
        );

        let assert_axes = types
            .iter()
            .map(|ty| quote_spanned!(ty.span()=> must_be_an_axis_type::<#ty>();));
        let once_impls = types
            .iter()
            .map(|ty| quote_spanned!(ty.span()=> impl EachAxisNeedsItsOwnAxisType for #ty {}));

        Ok(quote! {
            impl #ident {
                #doc_new
                #too_many
                #[inline]
                #vis const fn new(#(#fields: #krate::typed::Ix<#types>),*) -> Self {
                    Self { #(#fields),* }
                }

                #doc_offset
                #[inline]
                #vis const fn offset(&self, extents: #extents) -> #usize {
                    #offset_unused
                    #offset_body
                }

                #doc_in_bounds
                #[inline]
                #vis const fn in_bounds(&self, extents: #extents) -> ::core::primitive::bool {
                    #in_bounds_unused
                    #in_bounds_body
                }

                #doc_shape
                #[inline]
                #vis const fn shape(extents: #extents) -> #shape_ident {
                    let #dims_local = Self::dims(extents);
                    #shape_ident {
                        #(#fields: #private::len::<#types>(#dims_local[#indices])),*
                    }
                }

                #doc_dims
                #[inline]
                #vis const fn dims(extents: #extents) -> [#usize; #rank_lit] {
                    #shape_unused
                    [#(#dims),*]
                }
            }

            #doc_shape_struct
            #[derive(::core::clone::Clone, ::core::marker::Copy, ::core::fmt::Debug, ::core::cmp::PartialEq, ::core::cmp::Eq, ::core::hash::Hash)]
            #vis struct #shape_ident {
                #(
                    #field_docs
                    #vis #fields: #krate::typed::Len<#types>,
                )*
            }

            impl #shape_ident {
                #doc_shape_dims
                #[inline]
                #vis const fn dims(self) -> [#usize; #rank_lit] {
                    [#(self.#fields.get()),*]
                }
            }

            #[automatically_derived]
            impl #krate::typed::Coord for #ident {
                type Tensor = #tensor;
                type Indices = [#usize; #rank_lit];
                type Shape = #shape_ident;
                const NAME: &'static ::core::primitive::str = #name;
                const AXES: &'static [&'static ::core::primitive::str] = #names;
                const OFFSET_FN: &'static ::core::primitive::str = #offset_fn;
                const IN_BOUNDS_FN: &'static ::core::primitive::str = #in_bounds_fn;

                #methods

                fn view() -> &'static #krate::layout::View {
                    &<#tensor as #krate::typed::Tensor>::descriptor().#descriptor_view
                }
            }

            // Each field indexes an axis type, and no axis type indexes two fields.
            const _: () = {
                const fn must_be_an_axis_type<A: #krate::typed::Axis>() {}
                trait EachAxisNeedsItsOwnAxisType {}
                #(#once_impls)*
                #(#assert_axes)*
            };
        })
    }
}

/// The methods of `Coord` that forward to a coordinate type's inherent methods (shared by
/// declared coordinates and `like` coordinates).
pub(super) fn coord_methods(
    private: &TokenStream,
    rank: &Literal,
    fields: &[&Ident],
    types: &[&syn::Type],
    extents: &TokenStream,
    shape: &TokenStream,
) -> TokenStream {
    let usize = usize_ty();
    let indices = (0..fields.len()).map(Literal::usize_unsuffixed);
    quote! {
        fn indices(&self) -> [#usize; #rank] {
            [#(self.#fields.get()),*]
        }

        fn from_indices(indices: &[#usize]) -> ::core::option::Option<Self> {
            if indices.len() == #rank {
                ::core::option::Option::Some(Self {
                    #(#fields: #private::ix::<#types>(indices[#indices])),*
                })
            } else {
                ::core::option::Option::None
            }
        }

        fn offset(&self, extents: #extents) -> #usize {
            Self::offset(self, extents)
        }

        fn in_bounds(&self, extents: #extents) -> ::core::primitive::bool {
            Self::in_bounds(self, extents)
        }

        fn shape(extents: #extents) -> #shape {
            Self::shape(extents)
        }

        fn dims(extents: #extents) -> [#usize; #rank] {
            Self::dims(extents)
        }
    }
}
