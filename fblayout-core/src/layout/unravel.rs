//! Row-major coordinates of a linear index.
//!
//! Every dense array fblayout hands to a user (the logical side of [`BoundView::pack`],
//! pictures, test oracles) is row-major over a view's shape: the last axis varies fastest.
//! [`unravel`] is the one place that turns a position in such an array back into its
//! coordinate.
//!
//! [`BoundView::pack`]: super::BoundView::pack

/// Writes into `coords` the row-major coordinate of the `linear`-th element of an array of
/// `shape`, and returns what is left of `linear` past the array (0 when `linear` lies inside).
///
/// ```
/// use fblayout_core::__private::unravel;
///
/// let mut c = [0; 3];
/// assert_eq!(unravel(17, &[2, 3, 4], &mut c), 0);
/// assert_eq!(c, [1, 1, 1]); // 17 = 1·12 + 1·4 + 1
/// ```
///
/// # Panics
/// When `coords` and `shape` differ in length, or an extent of `shape` is 0.
pub fn unravel(linear: u64, shape: &[u64], coords: &mut [u64]) -> u64 {
    assert_eq!(
        coords.len(),
        shape.len(),
        "a coordinate needs one entry per axis"
    );
    let mut rest = linear;
    for (c, &n) in coords.iter_mut().zip(shape).rev() {
        *c = rest % n;
        rest /= n;
    }
    rest
}

#[cfg(test)]
mod tests {
    use super::unravel;

    #[test]
    fn walks_every_coordinate_in_row_major_order() {
        let shape = [3u64, 1, 2];
        let mut expected = Vec::new();
        for a in 0..3 {
            for c in 0..2 {
                expected.push([a, 0, c]);
            }
        }
        for (linear, want) in expected.iter().enumerate() {
            let mut got = [9; 3];
            assert_eq!(unravel(linear as u64, &shape, &mut got), 0);
            assert_eq!(&got, want);
        }
        let mut past = [0; 3];
        assert_eq!(unravel(13, &shape, &mut past), 2, "13 = 2·6 + 1");
        assert_eq!(past, [0, 0, 1]);
    }
}
