//! Scratch: the buffers kernels take while they run, how many bytes they take, and a
//! workspace that lends them.
//!
//! A kernel that needs room beyond its operands (the attention's scores, the partial sums of a
//! row reduction or of a split product) takes it with [`Batch::scratch`] when it is recorded,
//! and says beforehand how much it takes for given operands: a [`Scratch`], the buffers it
//! holds at once, each counted as the pool allocates it ([`granular`]). The kernel computes the
//! report and the allocation from one function, so the two cannot drift apart; where the size
//! depends on the device (how a product is split), the report is a bound that holds on any
//! device, and the kernel's docs say which.
//!
//! Without a workspace, [`Batch::scratch`] takes a buffer from the device's pool, held as long
//! as the recorded work holds it: a [`Recording`](super::Recording) that is submitted every
//! step keeps all of them. With one ([`Batch::use_workspace`]), every piece of work of the
//! batch takes its scratch from the same few buffers: [`Batch::release_scratch`] ends a piece
//! of work (an operation of a training step), after which its buffers serve the next one, and
//! says what it took. The buffers a workspace needs to serve a list of pieces of work, one at
//! a time, are [`Scratch::covering`] their scratch.

use super::buffer::GpuBuffer;
use super::error::GpuError;
use super::gpu::Gpu;
use super::pool::granular;

#[cfg(doc)]
use super::Batch;

/// The buffers a piece of GPU work takes from the pool while it runs, all held at once: each
/// one's bytes as the pool allocates it (rounded up to whole [`GRANULE`](super::GRANULE)s),
/// largest first.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct Scratch {
    buffers: Vec<u64>,
}

impl Scratch {
    /// No scratch.
    pub const fn none() -> Self {
        Self {
            buffers: Vec::new(),
        }
    }

    /// One buffer of `bytes` bytes (counted as the pool allocates it).
    pub fn buffer(bytes: u64) -> Self {
        Self {
            buffers: vec![granular(bytes)],
        }
    }

    /// `self` and `other` held at once.
    #[must_use]
    pub fn and(mut self, other: Scratch) -> Self {
        self.buffers.extend(other.buffers);
        self.buffers.sort_unstable_by(|a, b| b.cmp(a));
        self
    }

    /// The fewest, smallest buffers that serve each of `each` in turn (one at a time, every
    /// buffer to at most one of its buffers): the `k`-th largest is the largest `k`-th largest
    /// buffer of any of them. Also a bound on work that takes either of several scratches.
    pub fn covering<'a>(each: impl IntoIterator<Item = &'a Scratch>) -> Self {
        let mut buffers: Vec<u64> = Vec::new();
        for s in each {
            for (k, &b) in s.buffers.iter().enumerate() {
                match buffers.get_mut(k) {
                    Some(have) => *have = (*have).max(b),
                    None => buffers.push(b),
                }
            }
        }
        Self { buffers }
    }

    /// Whether buffers of these sizes can lend `other`'s, each of its buffers its own buffer
    /// at least as large.
    pub fn covers(&self, other: &Scratch) -> bool {
        other.buffers.len() <= self.buffers.len()
            && self.buffers.iter().zip(&other.buffers).all(|(a, b)| a >= b)
    }

    /// Each buffer's bytes, largest first.
    pub fn buffers(&self) -> &[u64] {
        &self.buffers
    }

    /// The bytes of every buffer together.
    pub fn bytes(&self) -> u64 {
        self.buffers.iter().sum()
    }

    /// Whether it takes nothing.
    pub fn is_empty(&self) -> bool {
        self.buffers.is_empty()
    }
}

impl std::fmt::Display for Scratch {
    /// `1024 + 64 bytes`, or `none`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.buffers.is_empty() {
            return f.write_str("none");
        }
        for (k, b) in self.buffers.iter().enumerate() {
            if k > 0 {
                f.write_str(" + ")?;
            }
            write!(f, "{b}")?;
        }
        f.write_str(" bytes")
    }
}

/// Buffers from the device's pool that lend every piece of work of a batch its scratch (see
/// the module docs). Cloning it clones the handles: both share the buffers.
#[derive(Debug, Clone)]
pub struct Workspace {
    buffers: Vec<GpuBuffer>,
}

impl Workspace {
    /// Buffers of the sizes of `scratch` from `gpu`'s pool.
    pub fn new(gpu: &Gpu, scratch: &Scratch) -> Result<Self, GpuError> {
        let buffers = scratch
            .buffers()
            .iter()
            .map(|&bytes| GpuBuffer::scratch::<u8>(gpu, bytes as usize))
            .collect::<Result<_, _>>()?;
        Ok(Self { buffers })
    }

    /// Its buffers, largest first.
    pub(crate) fn buffers(&self) -> &[GpuBuffer] {
        &self.buffers
    }

    /// The bytes of its buffers together, as the pool allocated them.
    pub fn bytes(&self) -> u64 {
        self.buffers.iter().map(GpuBuffer::capacity_bytes).sum()
    }
}

/// A batch's use of a workspace: which of its buffers the piece of work being recorded holds.
#[derive(Debug, Clone)]
pub(crate) struct Lending {
    workspace: Workspace,
    taken: Vec<bool>,
}

impl Lending {
    pub(crate) fn new(workspace: &Workspace) -> Self {
        Self {
            taken: vec![false; workspace.buffers().len()],
            workspace: workspace.clone(),
        }
    }

    /// The smallest free buffer of at least `bytes` bytes, as a buffer of `bytes` bytes, now
    /// taken.
    pub(crate) fn take(&mut self, bytes: u64) -> Result<GpuBuffer, GpuError> {
        let buffers = self.workspace.buffers();
        let found = (0..buffers.len())
            .filter(|&k| !self.taken[k] && buffers[k].len_bytes() >= bytes)
            .min_by_key(|&k| buffers[k].len_bytes());
        let Some(k) = found else {
            let sizes = |taken: bool| {
                (0..buffers.len())
                    .filter(|&k| self.taken[k] == taken)
                    .map(|k| buffers[k].len_bytes())
                    .collect()
            };
            return Err(GpuError::WorkspaceTooSmall {
                bytes,
                free: sizes(false),
                taken: sizes(true),
            });
        };
        self.taken[k] = true;
        Ok(buffers[k].prefix(bytes))
    }

    /// Frees every buffer.
    pub(crate) fn release(&mut self) {
        self.taken.fill(false);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_covering_serves_each_scratch_and_no_smaller_one_does() {
        let a = Scratch::buffer(100).and(Scratch::buffer(300));
        let b = Scratch::buffer(200);
        let c = Scratch::buffer(50)
            .and(Scratch::buffer(50))
            .and(Scratch::buffer(50));
        let all = Scratch::covering([&a, &b, &c]);
        assert_eq!(all.buffers(), &[304, 112, 64]);
        for s in [&a, &b, &c] {
            assert!(all.covers(s), "{all} lends {s}");
        }
        assert!(!b.covers(&a));
        assert!(Scratch::none().covers(&Scratch::none()));
        assert_eq!(format!("{a}"), "304 + 112 bytes");
    }
}
