//! Index code: the core's structured emitter ([`fblayout_core::__private::tokens`]) lowered to
//! tokens.
//!
//! The core lowers a simplified expression to a [`Block`] of terms; this module writes each
//! term as Rust tokens, binding each variable the block reads to where its value lives
//! (`self.seq.get()` for a coordinate, `extents.seq` for a run-time extent). Nothing is
//! printed and parsed back. Locals are written with mixed-site hygiene, so they can't clash
//! with anything the user names.

use fblayout_core::__private::tokens::{Block, Term};
use fblayout_core::expr::BinOp;
use proc_macro2::{Literal, Span, TokenStream, TokenTree};
use quote::quote;
use syn::Ident;

/// Where each variable's value comes from: (name in the IR, expression).
pub(crate) type Bindings = Vec<(String, TokenStream)>;

/// The body of a function computing `block`: `let`s for the variables it reads (each bound
/// from `bindings`), `let`s for its shared subexpressions, then its value.
///
/// A variable bound to [`param`]`(name)` is a parameter of the function and needs no `let`. A
/// variable without a binding is a bug in fblayout, reported at the tensor.
pub(crate) fn body(block: &Block, bindings: &Bindings, at: Span) -> syn::Result<TokenStream> {
    if let (true, Term::Var(var)) = (block.lets.is_empty(), &block.result) {
        if let Some((_, value)) = bindings.iter().find(|(name, _)| name == var) {
            return Ok(value.clone());
        }
    }
    let mut lets = Vec::new();
    for var in block.vars() {
        let Some((_, value)) = bindings.iter().find(|(name, _)| name == var) else {
            return Err(syn::Error::new(
                at,
                format!(
                    "fblayout's index code reads `{var}`, which the derive can't bind (a bug in fblayout; please report it)"
                ),
            ));
        };
        let mut tokens = value.clone().into_iter();
        let is_param = matches!(
            (tokens.next(), tokens.next()),
            (Some(TokenTree::Ident(ident)), None) if ident == var
        );
        if !is_param {
            let local = local(var);
            lets.push(quote!(let #local = #value;));
        }
    }
    for (i, term) in block.lets.iter().enumerate() {
        let temp = temp(i);
        let value = tokens(term);
        lets.push(quote!(let #temp = #value;));
    }
    let result = tokens(&block.result);
    Ok(quote!(#(#lets)* #result))
}

/// A parameter of a generated function that the index code reads as the variable `name`: the
/// same mixed-site identifier as the code's own locals, so the code reads it directly.
pub(crate) fn param(name: &str) -> Ident {
    local(name)
}

fn local(name: &str) -> Ident {
    Ident::new(name, Span::mixed_site())
}

fn temp(i: usize) -> Ident {
    Ident::new(&format!("t{i}"), Span::mixed_site())
}

/// One term, parenthesised where it is an operand.
fn tokens(term: &Term) -> TokenStream {
    match term {
        Term::Int(n) => {
            let n = Literal::u64_unsuffixed(*n);
            quote!(#n)
        }
        Term::Bool(b) => quote!(#b),
        Term::Var(name) => {
            let local = local(name);
            quote!(#local)
        }
        Term::Let(i) => {
            let temp = temp(*i);
            quote!(#temp)
        }
        Term::Bin(op, a, b) => {
            let (a, b) = (operand(a), operand(b));
            let op = match op {
                BinOp::Add => quote!(+),
                BinOp::Sub => quote!(-),
                BinOp::Mul => quote!(*),
                BinOp::Div => quote!(/),
                BinOp::Rem => quote!(%),
                BinOp::Shl => quote!(<<),
                BinOp::Shr => quote!(>>),
                BinOp::BitAnd => quote!(&),
                BinOp::Lt => quote!(<),
                BinOp::And => quote!(&&),
            };
            quote!(#a #op #b)
        }
        Term::Select(c, a, b) => {
            let (c, a, b) = (tokens(c), tokens(a), tokens(b));
            quote!(if #c { #a } else { #b })
        }
    }
}

fn operand(term: &Term) -> TokenStream {
    let t = tokens(term);
    match term {
        Term::Bin(..) | Term::Select(..) => quote!((#t)),
        Term::Int(_) | Term::Bool(_) | Term::Var(_) | Term::Let(_) => t,
    }
}
