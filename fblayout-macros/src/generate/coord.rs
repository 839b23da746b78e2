//! What the tensor struct and every view struct share: a coordinate.
//!
//! For a coordinate type `C` of tensor `T` (the tensor itself or one of its views) this writes
//! the inherent `const fn`s `new`, `offset`, `in_bounds` and `shape`, the `Coord`
//! implementation that forwards to them, and the const assertions that each field's axis type
//! is an `Axis` and is used once.

use fblayout_core::layout::{View, ViewExtent};
use proc_macro2::{Literal, TokenStream};
use quote::{format_ident, quote, quote_spanned};
use syn::Ident;
use syn::spanned::Spanned as _;

use super::docs;
use super::index::bodies;

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
    /// The tensor's run-time axes, in order.
    pub(crate) extent_axes: &'a [String],
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
        let body = bodies(&f, self.extent_axes).map_err(|e| syn::Error::new(ident.span(), e))?;
        let (offset_body, in_bounds_body) = (&body.offset, &body.in_bounds);
        let (shape_body, shape_uses_extents) = shape(self.view);
        let shape_unused = (!shape_uses_extents).then(|| quote!(let _ = extents;));
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
            "The extent of each axis ({axis_list}) for the run-time extents `extents`."
        ));

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
                    #offset_body
                }

                #doc_in_bounds
                #[inline]
                #vis const fn in_bounds(&self, extents: #extents) -> ::core::primitive::bool {
                    #in_bounds_body
                }

                #doc_shape
                #[inline]
                #vis const fn shape(extents: #extents) -> [#usize; #rank_lit] {
                    #shape_unused
                    #shape_body
                }
            }

            #[automatically_derived]
            impl #krate::typed::Coord for #ident {
                type Tensor = #tensor;
                type Indices = [#usize; #rank_lit];
                const NAME: &'static ::core::primitive::str = #name;
                const AXES: &'static [&'static ::core::primitive::str] = #names;
                const OFFSET_FN: &'static ::core::primitive::str = #offset_fn;
                const IN_BOUNDS_FN: &'static ::core::primitive::str = #in_bounds_fn;

                fn indices(&self) -> [#usize; #rank_lit] {
                    [#(self.#fields.get()),*]
                }

                fn from_indices(indices: &[#usize]) -> ::core::option::Option<Self> {
                    if indices.len() == #rank_lit {
                        ::core::option::Option::Some(Self {
                            #(#fields: #krate::typed::Ix::new(indices[#indices])),*
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

                fn shape(extents: #extents) -> [#usize; #rank_lit] {
                    Self::shape(extents)
                }

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

/// The array of axis extents (`[768, extents.seq, extents.seq / 4]`) and whether it reads the
/// run-time extents.
fn shape(view: &View) -> (TokenStream, bool) {
    let mut uses = false;
    let items: Vec<TokenStream> = view
        .axes()
        .iter()
        .map(|a| {
            uses |= !a.extent.dynamic.is_empty();
            extent_expr(&a.extent)
        })
        .collect();
    (quote!([#(#items),*]), uses)
}

/// `factor · Π extents.<axis> / divisor`, written plainly.
fn extent_expr(e: &ViewExtent) -> TokenStream {
    if let Some(n) = e.as_static() {
        let n = Literal::u64_unsuffixed(n);
        return quote!(#n);
    }
    let mut terms: Vec<TokenStream> = Vec::new();
    if e.factor != 1 {
        let f = Literal::u64_unsuffixed(e.factor);
        terms.push(quote!(#f));
    }
    for axis in &e.dynamic {
        let field = format_ident!("{}", axis);
        terms.push(quote!(extents.#field));
    }
    let mut terms = terms.into_iter();
    let first = terms.next().unwrap_or_else(|| quote!(1));
    let product = terms.fold(first, |acc, t| quote!(#acc * #t));
    if e.divisor == 1 {
        product
    } else {
        let d = Literal::u64_unsuffixed(e.divisor);
        quote!((#product) / #d)
    }
}
