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

use proc_macro2::{Span, TokenStream};
use syn::parse::ParseStream;
use syn::{Ident, Token, bracketed, parenthesized};

use super::{Spanned, key, span_to, u32_lit};
use crate::ctxt::Ctxt;

/// One declared view.
pub(crate) struct ViewDecl {
    /// The view struct's name.
    pub(crate) ident: Ident,
    /// Its steps, in order.
    pub(crate) steps: Vec<StepDecl>,
}

/// One step of a view, as written.
pub(crate) struct StepDecl {
    /// `permute`, `split`, ...
    pub(crate) kw: Ident,
    /// The span of the closing parenthesis.
    pub(crate) close: Span,
    /// What the step does.
    pub(crate) kind: StepKind,
}

/// A new axis: `name: Type` with, for splits and broadcasts, `= n` (or `= _` in a split).
pub(crate) struct NewAxis {
    /// Its name.
    pub(crate) ident: Ident,
    /// Its axis type.
    pub(crate) ty: syn::Type,
    /// Its extent; `None` for `_` (inferred) and in merges.
    pub(crate) size: Option<Spanned<u32>>,
}

/// The steps a view can take.
pub(crate) enum StepKind {
    Permute(Vec<Ident>),
    Transpose(Ident, Ident),
    Split { axis: Ident, parts: Vec<NewAxis> },
    Merge { axes: Vec<Ident>, into: NewAxis },
    Slice { axis: Ident, start: u32, len: u32 },
    Broadcast { axis: NewAxis, at: usize },
}

const STEPS: &str = "`permute`, `transpose`, `split`, `merge`, `slice` or `broadcast`";

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
        if input.peek(syn::token::Bracket) {
            let content;
            bracketed!(content in input);
            super::parse_list(cx, &content, |input| {
                steps.push(StepDecl::parse(input)?);
                Ok(())
            })?;
        } else {
            steps.push(StepDecl::parse(input)?);
        }
        Ok(Self { ident, steps })
    }
}

impl StepDecl {
    fn parse(input: ParseStream<'_>) -> syn::Result<Self> {
        let kw: Ident = key(input)?;
        let content;
        let paren = parenthesized!(content in input);
        let close = paren.span.close();
        let kind = Self::parse_kind(&kw, &content).inspect_err(|_| {
            // Consume the rest, so that syn doesn't add "unexpected token" to the real error.
            let _ = content.parse::<TokenStream>();
        })?;
        Ok(Self { kw, close, kind })
    }

    fn parse_kind(kw: &Ident, content: ParseStream<'_>) -> syn::Result<StepKind> {
        let kind = match kw.to_string().as_str() {
            "permute" => StepKind::Permute(
                content
                    .parse_terminated(key, Token![,])?
                    .into_iter()
                    .collect(),
            ),
            "transpose" => {
                let a = key(content)?;
                content.parse::<Token![,]>()?;
                let b = key(content)?;
                content.parse::<Option<Token![,]>>()?;
                StepKind::Transpose(a, b)
            }
            "split" => {
                let axis = key(content)?;
                content.parse::<Token![=>]>()?;
                let parts =
                    content.parse_terminated(|s| NewAxis::parse(s, Size::Inferable), Token![,])?;
                StepKind::Split {
                    axis,
                    parts: parts.into_iter().collect(),
                }
            }
            "merge" => {
                let mut axes = vec![key(content)?];
                while content.peek(Token![,]) {
                    content.parse::<Token![,]>()?;
                    axes.push(key(content)?);
                }
                content.parse::<Token![=>]>()?;
                let into = NewAxis::parse(content, Size::None)?;
                StepKind::Merge { axes, into }
            }
            "slice" => {
                let axis = key(content)?;
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
                StepKind::Slice {
                    axis,
                    start: start.value,
                    len,
                }
            }
            "broadcast" => {
                let axis = NewAxis::parse(content, Size::Required)?;
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
                StepKind::Broadcast { axis, at }
            }
            other => {
                return Err(syn::Error::new(
                    kw.span(),
                    format!("unknown view step `{other}`; expected {STEPS}"),
                ));
            }
        };
        content.parse::<Option<Token![,]>>()?;
        if !content.is_empty() {
            return Err(content.error(format!("unexpected tokens at the end of `{kw}(...)`")));
        }
        Ok(kind)
    }

    /// Tokens covering the whole step, `kw(...)`.
    pub(crate) fn tokens(&self) -> TokenStream {
        span_to(&self.kw, self.close)
    }

    /// The identifiers the step names, in order: existing axes, then new ones.
    pub(crate) fn idents(&self) -> Vec<&Ident> {
        match &self.kind {
            StepKind::Permute(axes) => axes.iter().collect(),
            StepKind::Transpose(a, b) => vec![a, b],
            StepKind::Split { axis, parts } => std::iter::once(axis)
                .chain(parts.iter().map(|p| &p.ident))
                .collect(),
            StepKind::Merge { axes, into } => axes.iter().chain([&into.ident]).collect(),
            StepKind::Slice { axis, .. } => vec![axis],
            StepKind::Broadcast { axis, .. } => vec![&axis.ident],
        }
    }

    /// The new axes the step introduces.
    pub(crate) fn new_axes(&self) -> Vec<&NewAxis> {
        match &self.kind {
            StepKind::Split { parts, .. } => parts.iter().collect(),
            StepKind::Merge { into, .. } => vec![into],
            StepKind::Broadcast { axis, .. } => vec![axis],
            _ => Vec::new(),
        }
    }
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

impl NewAxis {
    fn parse(input: ParseStream<'_>, size: Size) -> syn::Result<Self> {
        let ident: Ident = key(input)?;
        input.parse::<Token![:]>().map_err(|e| {
            syn::Error::new(
                e.span(),
                format!("expected `: AxisType` after the new axis `{ident}`: each new axis of a view names its axis type"),
            )
        })?;
        let ty: syn::Type = input.parse()?;
        let parsed = match size {
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
                        format!(
                            "expected {expected} after `{ident}: ..`, the extent of the new axis"
                        ),
                    )
                })?;
                if size == Size::Inferable && input.peek(Token![_]) {
                    input.parse::<Token![_]>()?;
                    None
                } else {
                    Some(u32_lit(input, "the extent of the new axis")?)
                }
            }
        };
        Ok(Self {
            ident,
            ty,
            size: parsed,
        })
    }
}
