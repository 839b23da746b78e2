//! A view's compiled index code, made once and shared by its clones.
//!
//! Simplifying a view's index function and compiling it for the CPU takes tens of
//! microseconds; kernels bind the same views at every dispatch. A [`View`](super::View) is
//! immutable — every step and every rename makes a new view with an empty memo — so what is
//! computed for it stays right, and clones (which kernels and arguments hold) share it.

use std::sync::{Arc, OnceLock};

use crate::expr::{CpuIndexFn, ValidIndexFn};

/// The compiled forms of one view.
pub(crate) struct Compiled {
    /// The simplified index function.
    pub(crate) simplified: ValidIndexFn,
    /// It, compiled for the CPU.
    pub(crate) cpu: Arc<CpuIndexFn>,
}

/// An empty or filled memo. It takes no part in comparing or hashing views: it is derived
/// from what does.
#[derive(Clone, Default)]
pub(crate) struct Memo(Arc<OnceLock<Compiled>>);

impl Memo {
    /// The compiled forms, made by `make` the first time.
    pub(crate) fn get_or_init(&self, make: impl FnOnce() -> ValidIndexFn) -> &Compiled {
        self.0.get_or_init(|| {
            let simplified = make();
            let cpu = Arc::new(CpuIndexFn::new(&simplified));
            Compiled { simplified, cpu }
        })
    }
}

impl PartialEq for Memo {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

impl Eq for Memo {}

impl std::hash::Hash for Memo {
    fn hash<H: std::hash::Hasher>(&self, _: &mut H) {}
}

impl std::fmt::Debug for Memo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.get().is_some() {
            "Memo(compiled)"
        } else {
            "Memo(empty)"
        })
    }
}
