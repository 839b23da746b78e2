//! Even steps: which coordinates of an index function move the offset by the same amount
//! wherever they are stepped.
//!
//! A kernel that walks a reduction axis in blocks of `step` coordinates (a GEMM's k-loop)
//! evaluates the same offsets at every block, shifted. Where stepping the coordinate by `step`
//! always moves the offset by one amount `D` (fixed for a dispatch: it may depend on the
//! run-time extents, never on a coordinate), the kernel computes each lane's offsets once and
//! adds `q · D` at block `q`, instead of evaluating the index function per element and block.
//! [`ValidIndexFn::steps_evenly`] proves that from the offset expression, for any layout and
//! chain of views, by abstract interpretation with the stepped coordinate written
//! `step · q + r` (`0 ≤ r < step`). Each node is classified as
//!
//! - **uniform**: a function of the run-time extents and constants only, divisible by a known
//!   `d` (`0`: known to be zero);
//! - **fixed**: independent of `q` (it may depend on `r` and on the other coordinates);
//! - **stepped**: `F + q · D` with `F` fixed and `D` uniform and divisible by a known `d ≥ 1`;
//! - a **uniform** or **fixed** boolean;
//! - **other**: anything else (the proof fails).
//!
//! The rules are those of natural numbers: `(F + q·D) / t = F / t + q·(D / t)` and
//! `(F + q·D) % t = F % t` when the constant `t` divides `D`, so an R-Tile whose tile along the
//! axis divides `step` steps evenly. A product of a stepped value with anything but a uniform
//! one, a division by a run-time extent, a subtraction of a stepped value, and a select or
//! comparison whose condition depends on `q` all fail. Where the function is in bounds
//! (subtraction never goes below zero there), the answer means: for every coordinate `c` with
//! `c` and `c + step` along the axis both in bounds, `offset(c + step) − offset(c)` is the same
//! `D`. It is conservative: `false` means "not proved".

use super::func::ValidIndexFn;
use super::graph::{BinOp, ExprId, Node, VarKind};
use super::runs::gcd;

/// The class of a value (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Class {
    /// Constants and run-time extents only; divisible by the value (0: known to be 0).
    Uniform(u64),
    /// Independent of the block index `q`.
    Fixed,
    /// `F + q · D`, `D` uniform and divisible by the value (at least 1).
    Stepped(u64),
    /// A boolean of constants and run-time extents only.
    UniformBool,
    /// A boolean independent of `q`.
    FixedBool,
    /// Not proved to be any of the above.
    Other,
}

impl ValidIndexFn {
    /// Whether stepping coordinate `coord` (an index into the coordinate parameters) by `step`
    /// moves the offset by the same amount wherever the function is in bounds, for every value
    /// of the other coordinates and of the run-time extents (see the module docs).
    ///
    /// `false` for `step == 0`, for a coordinate that does not exist, and whenever the proof
    /// fails.
    ///
    /// ```
    /// use fblayout_core::layout::LayoutSpec;
    ///
    /// // Tiles of 8 along `k`: blocks of 32 move by whole tiles, blocks of 4 do not.
    /// let x = LayoutSpec::new("x")
    ///     .dyn_axis("m").tile(4, true)
    ///     .axis("k", 64).tile(8, false)
    ///     .rtile()
    ///     .build()?;
    /// let f = x.view().index_fn().simplified();
    /// assert!(f.steps_evenly(1, 32));
    /// assert!(!f.steps_evenly(1, 4));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn steps_evenly(&self, coord: usize, step: u64) -> bool {
        if step == 0 {
            return false;
        }
        let graph = &self.graph;
        let coords: Vec<_> = self
            .params
            .iter()
            .copied()
            .filter(|&p| graph.var_decl(p).kind == VarKind::Coord)
            .collect();
        let Some(&stepped) = coords.get(coord) else {
            return false;
        };
        let mut class: Vec<Option<Class>> = vec![None; graph.nodes().len()];
        for id in graph.reachable(&[self.offset]) {
            let of = |e: ExprId| class[e.index()].expect("operands come before their users");
            let literal = |e: ExprId| match graph.node(e) {
                Node::Const(k) => Some(k),
                _ => None,
            };
            let c = match graph.node(id) {
                Node::Const(k) => Class::Uniform(k),
                Node::Bool(_) => Class::UniformBool,
                Node::Var(v) if v == stepped => Class::Stepped(step),
                Node::Var(v) if graph.var_decl(v).kind == VarKind::Coord => Class::Fixed,
                Node::Var(_) => Class::Uniform(1),
                Node::Select(c, a, b) => select(of(c), of(a), of(b)),
                Node::Bin(op, a, b) => binary(op, of(a), of(b), literal(b)),
            };
            class[id.index()] = Some(c);
        }
        matches!(
            class[self.offset.index()],
            Some(Class::Uniform(_) | Class::Fixed | Class::Stepped(_))
        )
    }
}

/// Whether a value (not a boolean) is independent of `q`.
fn fixed(c: Class) -> bool {
    matches!(c, Class::Uniform(_) | Class::Fixed)
}

fn select(cond: Class, a: Class, b: Class) -> Class {
    use Class::{Fixed, FixedBool, Other, Stepped, Uniform, UniformBool};
    match (cond, a, b) {
        (UniformBool, Uniform(x), Uniform(y)) => Uniform(gcd(x, y)),
        (UniformBool | FixedBool, x, y) if fixed(x) && fixed(y) => Fixed,
        // One step for the whole dispatch, whichever branch it takes.
        (UniformBool, Stepped(x), Stepped(y)) => Stepped(gcd(x, y)),
        _ => Other,
    }
}

/// `x / t` (or `x >> log2 t`) for a literal divisor `t`.
fn divide(x: Class, t: Option<u64>) -> Class {
    use Class::{Fixed, Other, Stepped, Uniform};
    match (x, t) {
        (Uniform(_), _) => Uniform(1),
        (Fixed, _) => Fixed,
        (Stepped(d), Some(t)) if t != 0 && d.is_multiple_of(t) => Stepped(d / t),
        _ => Other,
    }
}

/// `x % t` (or `x & (t − 1)`) for a literal divisor `t`.
fn remainder(x: Class, t: Option<u64>) -> Class {
    use Class::{Fixed, Other, Stepped, Uniform};
    match (x, t) {
        (Uniform(d), Some(t)) => Uniform(gcd(d, t)),
        (Uniform(_), None) => Uniform(1),
        (Fixed, _) => Fixed,
        (Stepped(d), Some(t)) if t != 0 && d.is_multiple_of(t) => Fixed,
        _ => Other,
    }
}

fn binary(op: BinOp, a: Class, b: Class, b_literal: Option<u64>) -> Class {
    use Class::{Fixed, FixedBool, Other, Stepped, Uniform, UniformBool};
    let uniform_divisor = |c: Class| match c {
        Uniform(_) => b_literal,
        _ => None,
    };
    match op {
        BinOp::Lt | BinOp::And => match (a, b) {
            (Uniform(_) | UniformBool, Uniform(_) | UniformBool) => UniformBool,
            (x, y)
                if matches!(x, Uniform(_) | Fixed | UniformBool | FixedBool)
                    && matches!(y, Uniform(_) | Fixed | UniformBool | FixedBool) =>
            {
                FixedBool
            }
            _ => Other,
        },
        _ if matches!(a, Other | UniformBool | FixedBool)
            || matches!(b, Other | UniformBool | FixedBool) =>
        {
            Other
        }
        BinOp::Add => match (a, b) {
            (Uniform(x), Uniform(y)) => Uniform(gcd(x, y)),
            (x, y) if fixed(x) && fixed(y) => Fixed,
            (Stepped(d), x) | (x, Stepped(d)) if fixed(x) => Stepped(d),
            (Stepped(x), Stepped(y)) => Stepped(gcd(x, y)),
            _ => Other,
        },
        BinOp::Sub => match (a, b) {
            (Uniform(x), Uniform(y)) => Uniform(gcd(x, y)),
            (x, y) if fixed(x) && fixed(y) => Fixed,
            (Stepped(d), x) if fixed(x) => Stepped(d),
            _ => Other,
        },
        BinOp::Mul => match (a, b) {
            (Uniform(0), _) | (_, Uniform(0)) => Uniform(0),
            (Uniform(x), Uniform(y)) => Uniform(x.saturating_mul(y)),
            (x, y) if fixed(x) && fixed(y) => Fixed,
            (Stepped(d), Uniform(u)) | (Uniform(u), Stepped(d)) => Stepped(d.saturating_mul(u)),
            _ => Other,
        },
        BinOp::Shl => match (a, b_literal) {
            (Uniform(x), Some(s)) if s < 64 => Uniform(x.checked_shl(s as u32).unwrap_or(x)),
            (Uniform(x), _) if matches!(b, Uniform(_)) => Uniform(x),
            (Fixed, _) if fixed(b) => Fixed,
            (Uniform(_), _) if b == Fixed => Fixed,
            (Stepped(d), Some(s)) if s < 64 => Stepped(d.checked_shl(s as u32).unwrap_or(d)),
            (Stepped(d), None) if matches!(b, Uniform(_)) => Stepped(d),
            _ => Other,
        },
        BinOp::Div => match b {
            Uniform(_) => divide(a, uniform_divisor(b)),
            Fixed if fixed(a) => Fixed,
            _ => Other,
        },
        BinOp::Shr => match b {
            Uniform(_) => divide(a, b_literal.filter(|&s| s < 64).map(|s| 1u64 << s)),
            Fixed if fixed(a) => Fixed,
            _ => Other,
        },
        BinOp::Rem => match b {
            Uniform(_) => remainder(a, uniform_divisor(b)),
            Fixed if fixed(a) => Fixed,
            _ => Other,
        },
        BinOp::BitAnd => {
            // `x & (2^j − 1)` is `x % 2^j`; other masks keep only what is independent of `q`.
            let modulus = b_literal
                .filter(|&m| m != u64::MAX && (m + 1).is_power_of_two())
                .map(|m| m + 1);
            match (a, b) {
                (Stepped(_), Uniform(_)) => remainder(a, modulus),
                (x, y) if fixed(x) && fixed(y) => {
                    if matches!((x, y), (Uniform(_), Uniform(_))) {
                        Uniform(1)
                    } else {
                        Fixed
                    }
                }
                _ => Other,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::layout::LayoutSpec;

    #[test]
    fn row_major_steps_evenly_along_every_axis() {
        let x = LayoutSpec::new("x")
            .dyn_axis("t")
            .axis("h", 12)
            .build()
            .unwrap();
        let f = x.view().index_fn().simplified();
        for step in [1, 3, 16, 64] {
            assert!(f.steps_evenly(0, step));
            assert!(f.steps_evenly(1, step));
        }
        assert!(!f.steps_evenly(2, 16), "no third coordinate");
        assert!(!f.steps_evenly(0, 0));
    }

    #[test]
    fn tiles_step_evenly_only_by_whole_tiles() {
        let x = LayoutSpec::new("x")
            .dyn_axis("t")
            .tile(4, true)
            .axis("h", 64)
            .tile(16, false)
            .rtile()
            .build()
            .unwrap();
        let f = x.view().index_fn().simplified();
        assert!(f.steps_evenly(1, 16));
        assert!(f.steps_evenly(1, 64));
        assert!(
            !f.steps_evenly(1, 8),
            "half a tile moves by 8 or by a tile row"
        );
        assert!(f.steps_evenly(0, 4));
        assert!(f.steps_evenly(0, 32));
        assert!(!f.steps_evenly(0, 2));
    }
}
