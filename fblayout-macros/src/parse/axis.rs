//! `#[axis(...)]`: one field, one axis.
//!
//! ```text
//! #[axis(768)]                 a static extent
//! #[axis(dyn)]                 a run-time extent
//! #[axis(768, tile = 4)]       a tile (R-Tile layouts)
//! #[axis(770, tile = 4, pad)]  consent to pad a static extent the tile doesn't divide
//! ```
//!
//! The field's type is `Ix<A>` for an axis marker type `A`.

use fblayout_core::layout::Extent;
use fblayout_core::typed::suggest::did_you_mean;
use quote::quote;
use syn::parse::ParseStream;
use syn::{Ident, Token};

use super::{Spanned, key, name_of, parse_list, skip_item, u32_lit};
use crate::ctxt::Ctxt;

/// One field of a tensor struct: an axis.
pub(crate) struct AxisField<'a> {
    /// Its name: the axis name.
    pub(crate) ident: &'a Ident,
    /// The axis name as a string.
    pub(crate) name: String,
    /// `A` in the field's type `Ix<A>`; `None` when the type is something else (reported).
    pub(crate) axis_ty: Option<&'a syn::Type>,
    /// `768` or `dyn`.
    pub(crate) extent: Option<Spanned<Extent>>,
    /// `tile = n`.
    pub(crate) tile: Option<Spanned<u32>>,
    /// `pad`.
    pub(crate) pad: Option<Ident>,
    /// Whether an extent was written but could not be read (reported already).
    extent_unreadable: bool,
}

impl<'a> AxisField<'a> {
    /// Parses a named field; `None` for an unnamed one (the caller rejects tuple structs).
    ///
    /// `like` is the tensor named by `#[tensor(like = ..)]`, whose declaration gives the axes
    /// their extents: the field then takes no `#[axis(...)]`.
    pub(crate) fn parse(
        cx: &Ctxt,
        field: &'a syn::Field,
        like: Option<&syn::Path>,
    ) -> Option<Self> {
        let ident = field.ident.as_ref()?;
        let mut axis = Self {
            ident,
            name: name_of(ident),
            axis_ty: axis_type(&field.ty),
            extent: None,
            tile: None,
            pad: None,
            extent_unreadable: false,
        };
        if axis.axis_ty.is_none() {
            let ty = &field.ty;
            cx.error_spanned_by(
                ty,
                format!(
                    "field `{}` must be an index along an axis, `Ix<AxisType>` (e.g. `{}: Ix<Seq>`), not `{}`",
                    axis.name,
                    axis.name,
                    quote!(#ty)
                ),
            );
        }
        let mut seen = false;
        for attr in &field.attrs {
            if attr.path().is_ident("tensor") {
                cx.error_spanned_by(
                    attr,
                    "#[tensor(...)] describes the whole tensor and belongs on the struct; a field takes #[axis(...)]",
                );
            }
            if !attr.path().is_ident("axis") {
                continue;
            }
            seen = true;
            if let Some(like) = like {
                cx.error_spanned_by(
                    attr,
                    format!(
                        "`like = {}` takes the axes' extents and tiles from that tensor's declaration; remove #[axis(...)] here",
                        quote!(#like)
                    ),
                );
                continue;
            }
            let parsed = attr.parse_args_with(|input: ParseStream<'_>| {
                parse_list(cx, input, |input| axis.item(cx, input))
            });
            if let Err(e) = parsed {
                cx.syn_error(e);
            } else if axis.extent.is_none() && !axis.extent_unreadable {
                cx.error_spanned_by(
                    attr,
                    format!(
                        "axis `{}` has no extent: add a number or `dyn`, e.g. `#[axis(768)]` or `#[axis(dyn)]`",
                        axis.name
                    ),
                );
            }
        }
        if !seen && like.is_none() {
            cx.error_spanned_by(
                ident,
                format!(
                    "field `{}` has no #[axis(...)]; every field of a tensor is an axis: give its extent, e.g. `#[axis(768)]` or `#[axis(dyn)]`",
                    axis.name
                ),
            );
        }
        Some(axis)
    }

    fn item(&mut self, cx: &Ctxt, input: ParseStream<'_>) -> syn::Result<()> {
        if input.peek(syn::LitInt) {
            let n = u32_lit(input, "an axis extent")?;
            let tokens = n.tokens.clone();
            self.set_extent(cx, Spanned::new(Extent::Static(n.value), tokens));
            return Ok(());
        }
        let key = key(input)?;
        match key.to_string().as_str() {
            "dyn" => self.set_extent(cx, Spanned::new(Extent::Dynamic, &key)),
            "tile" => {
                input.parse::<Token![=]>()?;
                let n = u32_lit(input, "a tile")?;
                if self.tile.is_some() {
                    cx.error_spanned_by(
                        &key,
                        format!("axis `{}` is given two tiles; give one", self.name),
                    );
                } else {
                    let tokens = &n.tokens;
                    self.tile = Some(Spanned::new(n.value, quote!(#key = #tokens)));
                }
            }
            "pad" => {
                if self.pad.is_some() {
                    cx.error_spanned_by(&key, "`pad` is given twice");
                }
                self.pad = Some(key);
            }
            "extent" => {
                cx.error_spanned_by(
                    &key,
                    "write the extent on its own, without a key: `#[axis(768)]` or `#[axis(dyn)]`",
                );
                skip_item(input);
            }
            "layout" | "elem" | "view" | "reduce" | "forward" | "backward" | "crate" => {
                cx.error_spanned_by(
                    &key,
                    format!(
                        "`{key}` describes the whole tensor and belongs on the struct: `#[tensor({key} ...)]`"
                    ),
                );
                skip_item(input);
            }
            name if is_constant_name(name) => {
                self.extent_unreadable = true;
                cx.error_spanned_by(
                    &key,
                    format!(
                        "`{key}` looks like a constant, but an extent must be a number written here: #[derive(Tensor)] lays the tensor out, checks it and writes its WGSL while it expands, before constants have values; write the number (`#[axis(768)]`), or `#[axis(dyn)]` and pass `{key}` in the extents at run time"
                    ),
                );
                skip_item(input);
            }
            other => {
                let hint = did_you_mean(other, ["dyn", "tile", "pad"]);
                cx.error_spanned_by(
                    &key,
                    format!(
                        "unknown axis attribute `{key}`; expected an extent (a number or `dyn`), `tile = n` or `pad`{hint}"
                    ),
                );
                skip_item(input);
            }
        }
        Ok(())
    }

    fn set_extent(&mut self, cx: &Ctxt, extent: Spanned<Extent>) {
        if let Some(first) = &self.extent {
            cx.error_spanned_by(
                &extent.tokens,
                format!(
                    "axis `{}` already has extent `{}`; an axis is either static (a number) or run-time (`dyn`), not both",
                    self.name, first.value
                ),
            );
        } else {
            self.extent = Some(extent);
        }
    }
}

/// `HIDDEN`, `MAX_LEN`: how constants are named.
fn is_constant_name(name: &str) -> bool {
    name.chars().any(|c| c.is_ascii_uppercase())
        && name
            .chars()
            .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_')
}

/// `A` in `Ix<A>` (any path ending in `Ix`).
fn axis_type(ty: &syn::Type) -> Option<&syn::Type> {
    let syn::Type::Path(path) = ty else {
        return None;
    };
    if path.qself.is_some() {
        return None;
    }
    let last = path.path.segments.last()?;
    if last.ident != "Ix" {
        return None;
    }
    let syn::PathArguments::AngleBracketed(args) = &last.arguments else {
        return None;
    };
    match args.args.iter().collect::<Vec<_>>().as_slice() {
        [syn::GenericArgument::Type(t)] => Some(t),
        _ => None,
    }
}
