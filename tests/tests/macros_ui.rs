//! Compile-time diagnostics of `#[derive(Tensor)]` and `#[derive(Axis)]`.
//!
//! `ui/<category>/<case>.rs` must fail to compile with exactly the diagnostics in the `.stderr`
//! beside it (one targeted diagnostic per case), except `ui/pass/`, whose cases must compile
//! and run. Paths are relative to this crate's manifest directory, which is where trybuild
//! resolves them. Regenerate the `.stderr` files with `TRYBUILD=overwrite`, then read each one.

use std::path::Path;

#[test]
fn ui() {
    let t = trybuild::TestCases::new();
    t.pass("ui/pass/*.rs");
    let ui = Path::new(env!("CARGO_MANIFEST_DIR")).join("ui");
    let mut categories: Vec<String> = std::fs::read_dir(&ui)
        .expect("tests/ui exists")
        .filter_map(Result::ok)
        .filter(|e| e.path().is_dir())
        .filter_map(|e| e.file_name().into_string().ok())
        .filter(|name| name != "pass")
        .collect();
    categories.sort();
    assert!(
        categories.len() >= 7,
        "compile-fail categories: {categories:?}"
    );
    for category in categories {
        t.compile_fail(format!("ui/{category}/*.rs"));
    }
}
