//! Compiling a whole model's autotune candidates at once.
//!
//! The autotune of one product measures about a dozen configurations, each a pipeline the
//! driver compiles first (most of a second each for a tensor-core kernel on NVIDIA's driver).
//! Compiled one product at a time, a dozen pipelines keep a host of many cores only partly
//! busy. [`compile_ahead`] runs a model's tuning once as a listing pass, in which the first
//! autotune of each problem not tuned yet lists its candidates' pipelines instead of
//! measuring, and compiles them all at once; the tuning that follows measures with every
//! pipeline ready.

use std::cell::RefCell;
use std::collections::HashSet;
use std::sync::Arc;

use super::super::compiled::Compiled;
use super::shader;
use crate::runtime::{Gpu, GpuError};

/// What a listing pass has listed so far.
#[derive(Default)]
struct Listed {
    kernels: Vec<Arc<Compiled>>,
    /// The autotune keys of the problems listed: the operations of several layers share a
    /// problem, which the first of them measures (the others read its choice back).
    problems: HashSet<String>,
}

thread_local! {
    /// What this thread's autotunes listed while a listing pass runs.
    static LISTED: RefCell<Option<Listed>> = const { RefCell::new(None) };
}

/// Ends a listing pass when dropped, even where the pass returned early or panicked.
struct Listing;

impl Drop for Listing {
    fn drop(&mut self) {
        LISTED.with(|listed| listed.borrow_mut().take());
    }
}

/// Runs `f` as a listing pass: every tensor-core autotune on this thread
/// ([`CoopMatmulOp::tune_among`](super::CoopMatmulOp::tune_among) and what calls it) of a
/// problem not tuned yet measures nothing and chooses nothing; the first for each problem
/// builds its candidates' kernels and lists them. Then every listed pipeline is compiled at
/// once, on the host's cores.
/// Returns what `f` returned, or the first compilation's error. Run the tuning again after
/// it to measure.
pub fn compile_ahead<R>(gpu: &Gpu, f: impl FnOnce() -> R) -> Result<R, GpuError> {
    let (result, listed) = {
        let _listing = Listing;
        LISTED.with(|listed| *listed.borrow_mut() = Some(Listed::default()));
        let result = f();
        let listed = LISTED.with(|listed| listed.borrow_mut().take().unwrap_or_default());
        (result, listed.kernels)
    };
    // Kernels of the same code (listed by products of several problems) compile once.
    let entries: Vec<_> = listed
        .iter()
        .map(|kernel| (kernel.module().module(), shader::ENTRY))
        .collect();
    gpu.prepare_pipelines(&entries)?;
    Ok(result)
}

/// Whether a listing pass runs on this thread.
pub(super) fn listing() -> bool {
    LISTED.with(|listed| listed.borrow().is_some())
}

/// In this thread's listing pass, lists the kernels `kernels` builds for `problem` (an
/// autotune key), unless that problem was listed already; nothing outside a listing pass.
pub(super) fn list<E>(
    problem: &str,
    kernels: impl FnOnce() -> Result<Vec<Arc<Compiled>>, E>,
) -> Result<(), E> {
    let new = LISTED.with(|listed| {
        listed
            .borrow_mut()
            .as_mut()
            .is_some_and(|l| l.problems.insert(problem.to_owned()))
    });
    if new {
        let built = kernels()?;
        LISTED.with(|listed| {
            if let Some(l) = listed.borrow_mut().as_mut() {
                l.kernels.extend(built);
            }
        });
    }
    Ok(())
}
