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
/// It holds a `usize` and converts to one freely ([`get`](Self::get), `usize::from`). Turning a
/// `usize` into an `Ix` names the axis ([`of`](Self::of): `Ix::of(Seq, 3)`), so that the type
/// is never inferred from where the index goes: `X::new(Ix::of(Hidden, h), Ix::of(Seq, s))`
/// does not compile when `X::new` takes the sequence first. Loops stay typed by iterating a
/// typed extent ([`Len`], from a generated `shape`). Turning an index of one axis into an index
/// of another is explicit too ([`retag`](Self::retag)). The comparison and hashing traits are
/// implemented for every `A`, with no bounds on the marker.
pub struct Ix<A> {
    index: usize,
    axis: PhantomData<fn() -> A>,
}

impl<A: Axis> Ix<A> {
    /// The index `index` along `axis`: `Ix::of(Seq, 3)`.
    pub const fn of(axis: A, index: usize) -> Self {
        let _ = axis;
        Self::raw(index)
    }
}

impl<A> Ix<A> {
    /// The index `index` along `A`, for code that knows `A` from its own signature (the
    /// derive's generated code, [`Len`]'s iterator).
    pub(crate) const fn raw(index: usize) -> Self {
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
        Ix::raw(self.index)
    }

    /// The index after this one.
    pub const fn next(self) -> Self {
        Self::raw(self.index + 1)
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

/// The extent of axis `A`: how many indices `Ix<A>` it holds.
///
/// Generated `shape` functions return one per axis; iterating one yields its indices, typed,
/// so a loop over a tensor never goes through a bare `usize`:
///
/// ```
/// use fblayout_core::typed::{Axis, Ix, Len};
///
/// #[derive(Clone, Copy)]
/// struct Seq;
/// impl Axis for Seq {
///     const NAME: &'static str = "Seq";
/// }
///
/// let seq = Len::of(Seq, 3);
/// let all: Vec<Ix<Seq>> = seq.into_iter().collect();
/// assert_eq!(all, [Ix::of(Seq, 0), Ix::of(Seq, 1), Ix::of(Seq, 2)]);
/// assert!(seq.contains(Ix::of(Seq, 2)) && !seq.contains(Ix::of(Seq, 3)));
/// ```
pub struct Len<A> {
    len: usize,
    axis: PhantomData<fn() -> A>,
}

impl<A: Axis> Len<A> {
    /// The extent `len` of `axis`: `Len::of(Seq, 10)`.
    pub const fn of(axis: A, len: usize) -> Self {
        let _ = axis;
        Self::raw(len)
    }
}

impl<A> Len<A> {
    pub(crate) const fn raw(len: usize) -> Self {
        Self {
            len,
            axis: PhantomData,
        }
    }

    /// The extent as a plain `usize`.
    pub const fn get(self) -> usize {
        self.len
    }

    /// Whether `ix` lies below this extent.
    pub const fn contains(self, ix: Ix<A>) -> bool {
        ix.get() < self.len
    }

    /// The indices `0..len`, typed.
    pub fn iter(self) -> IxRange<A> {
        IxRange {
            next: 0,
            end: self.len,
            axis: PhantomData,
        }
    }
}

impl<A> Clone for Len<A> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<A> Copy for Len<A> {}

impl<A> PartialEq for Len<A> {
    fn eq(&self, other: &Self) -> bool {
        self.len == other.len
    }
}

impl<A> Eq for Len<A> {}

impl<A> Hash for Len<A> {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.len.hash(state);
    }
}

impl<A> fmt::Debug for Len<A> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let full = std::any::type_name::<A>();
        let short = full.rsplit("::").next().unwrap_or(full);
        write!(f, "Len::<{short}>({})", self.len)
    }
}

impl<A> From<Len<A>> for usize {
    fn from(len: Len<A>) -> usize {
        len.len
    }
}

impl<A> IntoIterator for Len<A> {
    type Item = Ix<A>;
    type IntoIter = IxRange<A>;

    fn into_iter(self) -> IxRange<A> {
        self.iter()
    }
}

/// The indices of a [`Len`], in order.
pub struct IxRange<A> {
    next: usize,
    end: usize,
    axis: PhantomData<fn() -> A>,
}

impl<A> Clone for IxRange<A> {
    fn clone(&self) -> Self {
        Self {
            next: self.next,
            end: self.end,
            axis: PhantomData,
        }
    }
}

impl<A> fmt::Debug for IxRange<A> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "IxRange({}..{})", self.next, self.end)
    }
}

impl<A> Iterator for IxRange<A> {
    type Item = Ix<A>;

    fn next(&mut self) -> Option<Ix<A>> {
        (self.next < self.end).then(|| {
            self.next += 1;
            Ix::raw(self.next - 1)
        })
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let n = self.end - self.next;
        (n, Some(n))
    }
}

impl<A> DoubleEndedIterator for IxRange<A> {
    fn next_back(&mut self) -> Option<Ix<A>> {
        (self.next < self.end).then(|| {
            self.end -= 1;
            Ix::raw(self.end)
        })
    }
}

impl<A> ExactSizeIterator for IxRange<A> {}

impl<A> std::iter::FusedIterator for IxRange<A> {}
