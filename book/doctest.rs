//! Book doc tests.
