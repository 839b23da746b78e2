//! `view(Name = step)` and `view(Name = [step, step, ..])`: views as types.
//!
//! ```text
//! permute(a, b, c)                                   reorder every axis
//! transpose(a, b)                                    swap two axes
//! split(a => x: X = 12, y: Y = _)                    one axis into several (`_` is inferred)
//! merge(a, b => ab: AB)                              adjacent axes into one
//! slice(a, 2..10)    or    slice(a, 2, 8)            a window (range, or start and length)
//! broadcast(x: X = 8, at = 0)                        a new axis that repeats every element
//! ```
//!
//! New axes (`split`, `merge`, `broadcast`) name their axis type, which becomes the type of the
//! view struct's field.

use fblayout_core::__private::ViewSpec;
use fblayout_core::layout::ViewStep;
use fblayout_core::typed::suggest::did_you_mean;
use proc_macro2::{Span, TokenStream};
use syn::parse::ParseStream;
use syn::{Ident, Token, bracketed, parenthesized};

use super::{key, name_of, span_to, u32_lit};
use crate::check::snake_case;
use crate::ctxt::Ctxt;

/// A name in a view declaration, as written: the view's own name, an axis it reads, or a new
/// axis with its axis type. The core's [`ViewStep`] and [`ViewSpec`] take it as their name
/// type, so the steps the core checks are the steps the user wrote, spans included.
#[derive(Debug, Clone)]
pub(crate) struct Name {
    /// The identifier the user typed.
    pub(crate) ident: Ident,
    /// The name it stands for (`r#type` is `type`; a view's name is in `snake_case`).
    pub(crate) name: String,
    /// For a new axis (split part, merged axis, broadcast axis), its axis type.
    pub(crate) ty: Option<syn::Type>,
}

impl Name {
    fn axis(ident: Ident) -> Self {
        Self {
            name: name_of(&ident),
            ident,
            ty: None,
        }
    }
}

impl AsRef<str> for Name {
    fn as_ref(&self) -> &str {
        &self.name
    }
}

/// One declared view: its name and steps, with the span of each step.
pub(crate) struct ViewDecl {
    /// The view struct's name (`ident`) and the view's name in the layout (`name`).
    pub(crate) spec: ViewSpec<Name>,
    /// For each step, the tokens `kw(...)` it was written as.
    pub(crate) step_tokens: Vec<TokenStream>,
}

impl ViewDecl {
    /// The view struct's identifier.
    pub(crate) fn ident(&self) -> &Ident {
        &self.spec.name.ident
    }
}

const STEPS: [&str; 6] = [
    "permute",
    "transpose",
    "split",
    "merge",
    "slice",
    "broadcast",
];

impl ViewDecl {
    /// Parses `Name = step` or `Name = [step, ..]`.
    pub(crate) fn parse(cx: &Ctxt, input: ParseStream<'_>) -> syn::Result<Self> {
        let ident: Ident = input.parse()?;
        input.parse::<Token![=]>().map_err(|e| {
            syn::Error::new(
                e.span(),
                format!("expected `=` after the view name: `view({ident} = permute(..))`"),
            )
        })?;
        let mut steps = Vec::new();
        let mut step_tokens = Vec::new();
        let mut one = |input: ParseStream<'_>| {
            let (step, tokens) = parse_step(input)?;
            steps.push(step);
            step_tokens.push(tokens);
            Ok(())
        };
        if input.peek(syn::token::Bracket) {
            let content;
            bracketed!(content in input);
            super::parse_list(cx, &content, one)?;
        } else {
            one(input)?;
        }
        let name = Name {
            name: snake_case(&name_of(&ident)),
            ident,
            ty: None,
        };
        Ok(Self {
            spec: ViewSpec { name, steps },
            step_tokens,
        })
    }
}

/// Parses `kw(...)`: the step, and the tokens it spans.
fn parse_step(input: ParseStream<'_>) -> syn::Result<(ViewStep<Name>, TokenStream)> {
    let kw: Ident = key(input)?;
    let content;
    let paren = parenthesized!(content in input);
    let close: Span = paren.span.close();
    let step = step_kind(&kw, &content).inspect_err(|_| {
        // Consume the rest, so that syn doesn't add "unexpected token" to the real error.
        let _ = content.parse::<TokenStream>();
    })?;
    Ok((step, span_to(&kw, close)))
}

fn axis(input: ParseStream<'_>) -> syn::Result<Name> {
    key(input).map(Name::axis)
}

fn step_kind(kw: &Ident, content: ParseStream<'_>) -> syn::Result<ViewStep<Name>> {
    let step = match kw.to_string().as_str() {
        "permute" => ViewStep::Permute(
            content
                .parse_terminated(axis, Token![,])?
                .into_iter()
                .collect(),
        ),
        "transpose" => {
            let a = axis(content)?;
            content.parse::<Token![,]>()?;
            let b = axis(content)?;
            content.parse::<Option<Token![,]>>()?;
            ViewStep::Transpose(a, b)
        }
        "split" => {
            let whole = axis(content)?;
            content.parse::<Token![=>]>()?;
            let parts = content.parse_terminated(|s| new_axis(s, Size::Inferable), Token![,])?;
            ViewStep::Split {
                axis: whole,
                parts: parts.into_iter().collect(),
            }
        }
        "merge" => {
            let mut axes = vec![axis(content)?];
            while content.peek(Token![,]) {
                content.parse::<Token![,]>()?;
                axes.push(axis(content)?);
            }
            content.parse::<Token![=>]>()?;
            let (into, _) = new_axis(content, Size::None)?;
            ViewStep::Merge { axes, into }
        }
        "slice" => {
            let sliced = axis(content)?;
            content.parse::<Token![,]>()?;
            let start = u32_lit(content, "the slice start")?;
            let len = if content.peek(Token![..]) {
                content.parse::<Token![..]>()?;
                let end = u32_lit(content, "the slice end")?;
                if end.value <= start.value {
                    return Err(syn::Error::new_spanned(
                        &end.tokens,
                        format!(
                            "the slice `{}..{}` is empty; write `start..end` with end > start",
                            start.value, end.value
                        ),
                    ));
                }
                end.value - start.value
            } else {
                content.parse::<Token![,]>()?;
                u32_lit(content, "the slice length")?.value
            };
            ViewStep::Slice {
                axis: sliced,
                start: start.value,
                len,
            }
        }
        "broadcast" => {
            let (new, extent) = new_axis(content, Size::Required)?;
            let mut at = 0;
            if content.peek(Token![,]) {
                content.parse::<Token![,]>()?;
                let at_key = key(content)?;
                if at_key != "at" {
                    return Err(syn::Error::new(
                        at_key.span(),
                        "expected `at = n`, the position of the new axis",
                    ));
                }
                content.parse::<Token![=]>()?;
                at = u32_lit(content, "the position of the new axis")?.value as usize;
            }
            ViewStep::Broadcast {
                axis: new,
                extent: extent.unwrap_or(0),
                at,
            }
        }
        other => {
            let list = STEPS.map(|s| format!("`{s}`")).join(", ");
            return Err(syn::Error::new(
                kw.span(),
                format!(
                    "unknown view step `{other}`; expected one of {list}{}",
                    did_you_mean(other, STEPS)
                ),
            ));
        }
    };
    content.parse::<Option<Token![,]>>()?;
    if !content.is_empty() {
        return Err(content.error(format!("unexpected tokens at the end of `{kw}(...)`")));
    }
    Ok(step)
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Size {
    /// `= n` or `= _`.
    Inferable,
    /// `= n`.
    Required,
    /// Nothing (merges).
    None,
}

/// `name: Type`, then `= n` (or `= _` where `size` allows it): the new axis and its extent.
fn new_axis(input: ParseStream<'_>, size: Size) -> syn::Result<(Name, Option<u32>)> {
    let ident: Ident = key(input)?;
    input.parse::<Token![:]>().map_err(|e| {
        syn::Error::new(
            e.span(),
            format!("expected `: AxisType` after the new axis `{ident}`: each new axis of a view names its axis type"),
        )
    })?;
    let ty: syn::Type = input.parse()?;
    let extent = match size {
        Size::None => None,
        Size::Inferable | Size::Required => {
            input.parse::<Token![=]>().map_err(|e| {
                let expected = if size == Size::Inferable {
                    "`= n` or `= _`"
                } else {
                    "`= n`"
                };
                syn::Error::new(
                    e.span(),
                    format!("expected {expected} after `{ident}: ..`, the extent of the new axis"),
                )
            })?;
            if size == Size::Inferable && input.peek(Token![_]) {
                input.parse::<Token![_]>()?;
                None
            } else {
                Some(u32_lit(input, "the extent of the new axis")?.value)
            }
        }
    };
    let name = Name {
        name: name_of(&ident),
        ident,
        ty: Some(ty),
    };
    Ok((name, extent))
}
