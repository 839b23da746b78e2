//! Index code: the core's Rust emitter output, as the body of a method.
//!
//! [`fblayout_core::emit::rust`] writes a simplified index function as two `const fn`s over
//! `usize` parameters (the view's coordinates, then the tensor's run-time extents). The derive
//! parses that text with syn and keeps only the statements: the generated methods take
//! `&self` and the extents struct, and bind each parameter the body uses to a field
//! (`self.seq.get()`, `extents.seq`). A parameter the body doesn't use is written by the
//! emitter with a leading `_` and is not bound.

use fblayout_core::emit::rust::{RustFlags, to_rust};
use fblayout_core::expr::ValidIndexFn;
use proc_macro2::TokenStream;
use quote::{format_ident, quote};

/// The bodies of `offset` and `in_bounds` for one view.
pub(crate) struct IndexBodies {
    /// `let`s binding the parameters, then the emitted statements.
    pub(crate) offset: TokenStream,
    /// The same for the bounds mask.
    pub(crate) in_bounds: TokenStream,
}

/// Lowers `f` (its parameters: `coords` coordinates named after the axes, then one run-time
/// extent per entry of `extent_axes`) to method bodies.
pub(crate) fn bodies(f: &ValidIndexFn, extent_axes: &[String]) -> syn::Result<IndexBodies> {
    let source = to_rust(
        f,
        RustFlags {
            const_fn: true,
            visibility: String::new(),
        },
    );
    let file: syn::File = syn::parse_str(&source).map_err(|e| {
        syn::Error::new(
            proc_macro2::Span::call_site(),
            format!("the Rust emitted for `{}` does not parse (a bug in fblayout; please report it): {e}\n{source}", f.name),
        )
    })?;
    let mut fns = file.items.into_iter().filter_map(|item| match item {
        syn::Item::Fn(f) => Some(f),
        _ => None,
    });
    let (Some(offset), Some(in_bounds)) = (fns.next(), fns.next()) else {
        return Err(syn::Error::new(
            proc_macro2::Span::call_site(),
            format!(
                "the Rust emitted for `{}` is not two functions (a bug in fblayout):\n{source}",
                f.name
            ),
        ));
    };
    let coords = f.coord_count();
    Ok(IndexBodies {
        offset: body(&offset, coords, extent_axes),
        in_bounds: body(&in_bounds, coords, extent_axes),
    })
}

fn body(item: &syn::ItemFn, coords: usize, extent_axes: &[String]) -> TokenStream {
    let mut lets = Vec::new();
    let mut uses_extents = false;
    for (i, input) in item.sig.inputs.iter().enumerate() {
        let syn::FnArg::Typed(arg) = input else {
            continue;
        };
        let syn::Pat::Ident(pat) = &*arg.pat else {
            continue;
        };
        let name = pat.ident.to_string();
        if name.starts_with('_') {
            continue;
        }
        let param = &pat.ident;
        if i < coords {
            let field = format_ident!("{}", name);
            lets.push(quote!(let #param = self.#field.get();));
        } else if let Some(axis) = extent_axes.get(i - coords) {
            let field = format_ident!("{}", axis);
            uses_extents = true;
            lets.push(quote!(let #param = extents.#field;));
        }
    }
    if !uses_extents {
        lets.push(quote!(let _ = extents;));
    }
    let stmts = &item.block.stmts;
    quote!(#(#lets)* #(#stmts)*)
}
