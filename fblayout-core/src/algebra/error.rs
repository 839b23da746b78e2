//! Why an operation of the layout algebra was refused.
//!
//! Every public function of the algebra whose inputs can be invalid returns an
//! [`AlgebraError`] instead of panicking. The messages name the tuple, mode or value at fault so
//! that a failure in a kernel's layout declaration can be traced to the number that caused it.
//! Composition has several distinct ways of being inadmissible; they are the variants of
//! [`Inadmissible`], carried inside [`AlgebraError::CompositionNotAdmissible`].

use thiserror::Error;

use super::int_tuple::IntTuple;
use super::layout::Layout;

/// An error of the layout algebra.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum AlgebraError {
    /// A layout's shape and stride do not have the same tree.
    #[error("shape {shape} and stride {stride} are not congruent")]
    NotCongruent {
        /// The shape.
        shape: IntTuple,
        /// The stride.
        stride: IntTuple,
    },
    /// A shape has an extent of zero.
    #[error("shape {shape} has extent 0 at leaf {leaf}; every extent must be at least 1")]
    ZeroExtent {
        /// The shape.
        shape: IntTuple,
        /// The index of the offending leaf, counted left to right.
        leaf: usize,
    },
    /// A shape contains an empty tuple `()`.
    #[error("shape {shape} contains an empty tuple; every tuple needs at least one mode")]
    EmptyTuple {
        /// The shape.
        shape: IntTuple,
    },
    /// A layout was to be built from no modes at all.
    #[error("a layout needs at least one mode")]
    NoModes,
    /// An intermediate value does not fit in `usize`.
    #[error("arithmetic overflow while computing {what}")]
    Overflow {
        /// What was being computed.
        what: &'static str,
    },
    /// A mode index past the rank.
    #[error("mode {index} is out of range for a layout of rank {rank}")]
    ModeOutOfRange {
        /// The requested mode.
        index: usize,
        /// The layout's rank.
        rank: usize,
    },
    /// A coordinate or profile whose tree does not coarsen the shape's.
    #[error("{tuple} is not weakly congruent with shape {shape}")]
    NotWeaklyCongruent {
        /// The coordinate or profile.
        tuple: IntTuple,
        /// The shape it was applied to.
        shape: IntTuple,
    },
    /// A coordinate outside its mode.
    #[error("coordinate {coord} is out of bounds for a mode of size {size}")]
    CoordinateOutOfBounds {
        /// The coordinate.
        coord: usize,
        /// The size of the mode it indexes.
        size: usize,
    },
    /// A 1-D index outside a shape.
    #[error("index {index} is out of bounds for shape {shape} of size {size}")]
    IndexOutOfBounds {
        /// The index.
        index: usize,
        /// The shape.
        shape: IntTuple,
        /// The shape's size.
        size: usize,
    },
    /// A division or modulus by zero.
    #[error("{op}: division by zero")]
    ZeroDivisor {
        /// The operation.
        op: &'static str,
    },
    /// Neither of two numbers divides the other where one must.
    #[error("{op}: {divisor} and shape {extent} of leaf {leaf} do not divide one another")]
    NotDivisible {
        /// The operation.
        op: &'static str,
        /// What is left of the divisor at that leaf.
        divisor: usize,
        /// The leaf's extent.
        extent: usize,
        /// The leaf's index, counted left to right.
        leaf: usize,
    },
    /// `A ∘ B` is not a layout, or not one this algebra can build.
    #[error(
        "composition not admissible: {reason} (A coalesces to {a}; leaf {leaf} of B is {b_leaf})"
    )]
    CompositionNotAdmissible {
        /// Why, in terms of the modes of the coalesced `A`.
        reason: Inadmissible,
        /// `A`, coalesced; the modes in `reason` are its modes.
        a: Box<Layout>,
        /// The index of the leaf of `B` at fault, counted left to right.
        leaf: usize,
        /// That leaf of `B`.
        b_leaf: Box<Layout>,
    },
    /// The layout's strides do not nest, so no ordered complement exists.
    #[error(
        "complement not admissible: stride {stride} of mode {shape}:{stride} is not a multiple of \
         {covered}, the extent covered by the modes with smaller strides (the layout is not \
         injective, or its strides do not nest)"
    )]
    ComplementNotAdmissible {
        /// The offending mode's shape.
        shape: usize,
        /// The offending mode's stride.
        stride: usize,
        /// The extent spanned by the modes with smaller strides.
        covered: usize,
    },
    /// A by-mode tiler with more modes than the layout it tiles.
    #[error("tiler has {tiler_rank} modes but the layout {layout} has rank {layout_rank}")]
    TilerRank {
        /// The number of modes of the tiler.
        tiler_rank: usize,
        /// The layout.
        layout: Layout,
        /// The layout's rank.
        layout_rank: usize,
    },
    /// Text that is not CuTe notation.
    #[error("cannot parse {input:?}: {reason}")]
    Parse {
        /// The text.
        input: String,
        /// What was wrong with it.
        reason: String,
    },
}

/// Why a composition `A ∘ B` is not admissible. Modes are those of `A` after [`coalesce`]
/// (flattened, size-1 modes removed), numbered from 0.
///
/// [`coalesce`]: super::coalesce::coalesce
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum Inadmissible {
    /// The stride of a leaf of `B` (what is left of it after the modes it skips) neither divides
    /// the shape of the mode it lands in nor fits the whole leaf inside it.
    #[error("stride {stride} does not divide shape {extent} of mode {mode}")]
    Stride {
        /// What is left of the stride of `B`'s leaf at that mode.
        stride: usize,
        /// The mode's shape.
        extent: usize,
        /// The mode of `A`.
        mode: usize,
    },
    /// A leaf of `B` spans a mode of `A` only partly and continues past it.
    #[error(
        "shape {shape} is not a multiple of {extent}, the extent of mode {mode} left after \
         dividing out the stride"
    )]
    Shape {
        /// What is left of the shape of `B`'s leaf.
        shape: usize,
        /// What is left of the mode's shape after the stride is divided out.
        extent: usize,
        /// The mode of `A`.
        mode: usize,
    },
    /// A leaf of `B` reaches past the domain of `A`.
    #[error("it reaches index {reach}, past size {size} of A")]
    OutOfDomain {
        /// The largest index the leaf asks `A` for.
        reach: usize,
        /// The size of `A`.
        size: usize,
    },
    /// Leaves of `B` share a mode of `A` so that their sum can carry into the next mode; then
    /// `A` is not additive over them and `A ∘ B` is not a layout.
    #[error(
        "the leaves of B overlap in mode {mode}: their largest coordinates there sum to {digits}, \
         past its shape {extent}"
    )]
    Overlap {
        /// The mode of `A`.
        mode: usize,
        /// The sum of the largest coordinates the leaves so far place in that mode.
        digits: usize,
        /// The mode's shape.
        extent: usize,
    },
}
