//! Lists of errors.
//!
//! fblayout's checks run to the end and report every problem at once, so that the macros can
//! point at each bad token in one compile. An [`ErrorList`] holds those problems (never none):
//! [`LayoutErrors`](crate::layout::LayoutErrors) for layout descriptions and
//! [`DeclareErrors`](crate::typed::DeclareErrors) for whole declarations are both one.

use std::fmt;

/// One or more errors, in the order they were found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ErrorList<E>(Vec<E>);

impl<E> ErrorList<E> {
    /// Wraps a non-empty list; `None` when it is empty.
    pub fn from_vec(errors: Vec<E>) -> Option<Self> {
        (!errors.is_empty()).then_some(Self(errors))
    }

    /// The problems, in the order they were found.
    pub fn errors(&self) -> &[E] {
        &self.0
    }

    /// The first problem.
    pub fn first(&self) -> &E {
        &self.0[0]
    }

    /// The same problems, each converted by `f` (for wrapping them in a wider error type).
    pub fn map<F>(self, f: impl FnMut(E) -> F) -> ErrorList<F> {
        ErrorList(self.0.into_iter().map(f).collect())
    }
}

impl<E> From<E> for ErrorList<E> {
    fn from(e: E) -> Self {
        Self(vec![e])
    }
}

impl<E> IntoIterator for ErrorList<E> {
    type Item = E;
    type IntoIter = std::vec::IntoIter<E>;
    fn into_iter(self) -> Self::IntoIter {
        self.0.into_iter()
    }
}

/// One problem a line.
impl<E: fmt::Display> fmt::Display for ErrorList<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, e) in self.0.iter().enumerate() {
            if i > 0 {
                writeln!(f)?;
            }
            write!(f, "{e}")?;
        }
        Ok(())
    }
}

impl<E: std::error::Error> std::error::Error for ErrorList<E> {}

#[cfg(test)]
mod tests {
    use super::ErrorList;

    #[test]
    fn never_empty_and_one_error_a_line() {
        assert!(ErrorList::<String>::from_vec(Vec::new()).is_none());
        let list = ErrorList::from_vec(vec!["a".to_owned(), "b".to_owned()]).unwrap();
        assert_eq!(list.first(), "a");
        assert_eq!(list.to_string(), "a\nb");
        assert_eq!(ErrorList::from("c".to_owned()).errors(), ["c"]);
    }
}
