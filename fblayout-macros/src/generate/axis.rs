//! `#[derive(Axis)]`: a marker type names an axis.

use proc_macro2::TokenStream;
use quote::quote;
use syn::Token;
use syn::parse::ParseStream;

use crate::ctxt::Ctxt;
use crate::parse::{key, name_of, parse_list};

/// Expands `#[derive(Axis)]`.
pub(crate) fn expand_axis(input: &syn::DeriveInput) -> TokenStream {
    let cx = Ctxt::new();
    let mut krate = None;
    for attr in input.attrs.iter().filter(|a| a.path().is_ident("axis")) {
        let parsed = attr.parse_args_with(|s: ParseStream<'_>| {
            parse_list(&cx, s, |s| {
                let k = key(s)?;
                if k != "crate" {
                    return Err(syn::Error::new(
                        k.span(),
                        format!(
                            "unknown attribute `{k}` for an axis type; it takes only `crate = path`"
                        ),
                    ));
                }
                s.parse::<Token![=]>()?;
                krate = Some(syn::Path::parse_mod_style(s)?);
                Ok(())
            })
        });
        if let Err(e) = parsed {
            cx.syn_error(e);
        }
    }
    if !input.generics.params.is_empty() {
        cx.error_spanned_by(
            &input.generics,
            "an axis type can't be generic: it names one axis",
        );
    }
    if let Err(errors) = cx.check() {
        return errors.to_compile_error();
    }
    let krate = krate.map_or_else(|| quote!(::fblayout), |p| quote!(#p));
    let ident = &input.ident;
    let name = name_of(ident);
    quote! {
        #[automatically_derived]
        impl #krate::typed::Axis for #ident {
            const NAME: &'static ::core::primitive::str = #name;
        }
    }
}
