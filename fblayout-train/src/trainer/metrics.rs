//! Classification accuracy from a batch's logits.

/// The name of the classification head's output, kept to the end of an evaluation so that
/// its rows can be read: the bias's output (on the GPU the product's own output is never
/// written where the product adds the bias itself).
pub(super) const LOGITS: &str = "logits";

/// How many of the first `labels.len()` sequences of a batch the classifier gets right:
/// `logits` is `[batch, seq, classes]` (the head applied to every row; `batch` at least
/// `labels.len()`, the rest padding), and a sequence's
/// prediction is the class of the largest logit at its first (`[CLS]`) row, the lowest class
/// on a tie, as `argmax` takes it.
pub(super) fn correct(logits: &[f64], seq: usize, classes: usize, labels: &[u32]) -> u64 {
    labels
        .iter()
        .enumerate()
        .filter(|&(r, &label)| {
            let start = r * seq * classes;
            let cls = logits.get(start..start + classes).unwrap_or_default();
            let best = cls
                .iter()
                .enumerate()
                .fold(None, |best: Option<(usize, f64)>, (k, &x)| match best {
                    Some((_, b)) if b >= x => best,
                    _ => Some((k, x)),
                });
            best.is_some_and(|(k, _)| k == label as usize)
        })
        .count() as u64
}

#[cfg(test)]
mod tests {
    use super::correct;

    #[test]
    fn the_cls_rows_argmax_is_compared_with_each_label() {
        // Two sequences of three rows, two classes; only row 0 of each counts.
        let logits = [
            0.1, 0.9, /* ignored: */ 5.0, 0.0, 5.0, 0.0, // sequence 0 predicts 1
            2.0, -1.0, /* ignored: */ 0.0, 5.0, 0.0, 5.0, // sequence 1 predicts 0
        ];
        assert_eq!(correct(&logits, 3, 2, &[1, 0]), 2);
        assert_eq!(correct(&logits, 3, 2, &[0, 0]), 1);
        assert_eq!(correct(&logits, 3, 2, &[0, 1]), 0);
        // The padding sequence after the first counts for nothing.
        assert_eq!(correct(&logits, 3, 2, &[1]), 1);
        // A tie goes to the lower class.
        assert_eq!(correct(&[0.5, 0.5], 1, 2, &[0]), 1);
        assert_eq!(correct(&[0.5, 0.5], 1, 2, &[1]), 0);
    }
}
