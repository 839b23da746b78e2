//! Axis marker types and typed indices.

use std::cmp::Ordering;
use std::fmt;
use std::hash::{Hash, Hasher};
use std::marker::PhantomData;

/// A marker type naming an axis (derive it with `#[derive(Axis)]`).
///
/// Axis types are never instantiated for their value; they tag [`Ix`] so that indices along
/// different axes are different types.
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not an axis type",
    label = "not an axis type",
    note = "declare axis types with `#[derive(Clone, Copy, Axis)]`"
)]
pub trait Axis: Copy + 'static {
    /// The axis type's name, for messages and `Display`.
    const NAME: &'static str;
}

/// An index along axis `A`.
///
/// It holds a `usize` and converts to one freely ([`get`](Self::get), `usize::from`); turning a
/// `usize` into an `Ix` is explicit ([`new`](Self::new)), and turning an index of one axis into
/// an index of another is explicit too ([`retag`](Self::retag)). The comparison and hashing
/// traits are implemented for every `A`, with no bounds on the marker.
pub struct Ix<A> {
    index: usize,
    axis: PhantomData<fn() -> A>,
}

impl<A> Ix<A> {
    /// The index `index` along axis `A`.
    pub const fn new(index: usize) -> Self {
        Self {
            index,
            axis: PhantomData,
        }
    }

    /// The index as a plain `usize`.
    pub const fn get(self) -> usize {
        self.index
    }

    /// The same number as an index along another axis `B`.
    ///
    /// Use it where a kernel means it, e.g. when a query position is compared with a key
    /// position; everywhere else the type keeps the axes apart.
    pub const fn retag<B>(self) -> Ix<B> {
        Ix::new(self.index)
    }
}

impl<A> Clone for Ix<A> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<A> Copy for Ix<A> {}

impl<A> PartialEq for Ix<A> {
    fn eq(&self, other: &Self) -> bool {
        self.index == other.index
    }
}

impl<A> Eq for Ix<A> {}

impl<A> PartialOrd for Ix<A> {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl<A> Ord for Ix<A> {
    fn cmp(&self, other: &Self) -> Ordering {
        self.index.cmp(&other.index)
    }
}

impl<A> Hash for Ix<A> {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.index.hash(state);
    }
}

impl<A> fmt::Debug for Ix<A> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let full = std::any::type_name::<A>();
        let short = full.rsplit("::").next().unwrap_or(full);
        write!(f, "Ix::<{short}>({})", self.index)
    }
}

impl<A: Axis> fmt::Display for Ix<A> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}={}", A::NAME, self.index)
    }
}

impl<A> From<Ix<A>> for usize {
    fn from(ix: Ix<A>) -> usize {
        ix.index
    }
}
