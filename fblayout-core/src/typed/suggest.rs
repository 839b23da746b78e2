//! "Did you mean": the closest known name to a misspelt one.
//!
//! Messages about unknown axes, steps and keys name the closest known spelling when there is a
//! close one, as rustc does: within an edit distance of a third of the name's length (at least
//! one edit), or the same name in another case.
//!
//! ```
//! use fblayout_core::typed::suggest::closest;
//!
//! assert_eq!(closest("hiden", ["tokens", "hidden"]), Some("hidden"));
//! assert_eq!(closest("Hidden", ["tokens", "hidden"]), Some("hidden"));
//! assert_eq!(closest("batch", ["tokens", "hidden"]), None);
//! ```

/// The candidate closest to `name`, if any is close enough (see the module docs).
pub fn closest<'a>(name: &str, candidates: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    let limit = (name.chars().count() / 3).max(1);
    candidates
        .into_iter()
        .filter(|c| *c != name)
        .filter_map(|c| {
            let d = if c.eq_ignore_ascii_case(name) {
                0
            } else {
                distance(name, c)
            };
            (d <= limit).then_some((d, c))
        })
        .min_by_key(|&(d, _)| d)
        .map(|(_, c)| c)
}

/// ` (did you mean `x`?)` for the closest candidate, or nothing.
pub fn did_you_mean<'a>(name: &str, candidates: impl IntoIterator<Item = &'a str>) -> String {
    closest(name, candidates).map_or_else(String::new, |c| format!("; did you mean `{c}`?"))
}

/// The Levenshtein distance between `a` and `b`, in characters.
fn distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut diagonal = row[0];
        row[0] = i + 1;
        for (j, &cb) in b.iter().enumerate() {
            let substitute = diagonal + usize::from(ca != cb);
            diagonal = row[j + 1];
            row[j + 1] = substitute.min(row[j] + 1).min(row[j + 1] + 1);
        }
    }
    row[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn distances() {
        assert_eq!(distance("kitten", "sitting"), 3);
        assert_eq!(distance("", "abc"), 3);
        assert_eq!(distance("seq", "seq"), 0);
    }

    #[test]
    fn suggests_only_close_names() {
        assert_eq!(closest("tokns", ["tokens", "hidden"]), Some("tokens"));
        assert_eq!(closest("sq", ["seq", "batch"]), Some("seq"));
        assert_eq!(closest("x", ["hidden"]), None);
        assert_eq!(
            did_you_mean("hiden", ["hidden"]),
            "; did you mean `hidden`?"
        );
        assert_eq!(did_you_mean("zzz", ["hidden"]), "");
    }
}
