//! The error context: every problem found while parsing and checking one derive.
//!
//! As in serde_derive, nothing stops at the first error. Parsers and checks report into a
//! [`Ctxt`] and carry on; [`Ctxt::check`] combines everything (with `syn::Error::combine`) into
//! one error whose `compile_error!`s each point at the user's offending tokens.

use std::cell::RefCell;
use std::fmt::Display;

use quote::ToTokens;

/// Collects the errors of one derive.
#[derive(Debug, Default)]
#[must_use = "call `check` to report the errors collected"]
pub(crate) struct Ctxt {
    errors: RefCell<Vec<syn::Error>>,
}

impl Ctxt {
    /// An empty context.
    pub(crate) fn new() -> Self {
        Self::default()
    }

    /// Reports `msg` at the span of `tokens` (first to last token).
    pub(crate) fn error_spanned_by(&self, tokens: impl ToTokens, msg: impl Display) {
        self.errors
            .borrow_mut()
            .push(syn::Error::new_spanned(tokens.into_token_stream(), msg));
    }

    /// Reports an error that syn produced.
    pub(crate) fn syn_error(&self, err: syn::Error) {
        self.errors.borrow_mut().push(err);
    }

    /// Whether anything has been reported so far.
    pub(crate) fn has_errors(&self) -> bool {
        !self.errors.borrow().is_empty()
    }

    /// All errors reported, combined, or `Ok` when there were none.
    pub(crate) fn check(self) -> Result<(), syn::Error> {
        let mut errors = self.errors.into_inner().into_iter();
        let Some(mut combined) = errors.next() else {
            return Ok(());
        };
        for e in errors {
            combined.combine(e);
        }
        Err(combined)
    }
}
