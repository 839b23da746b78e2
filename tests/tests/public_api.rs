//! The public surface of every library crate (the core, the kernels, the planner, the Hugging
//! Face loader) and of the `fblayout` facade, as snapshots.
//!
//! Each test lists every public item of a crate (see [`surface`]) and compares the sorted list
//! with its snapshot, so that adding, removing or renaming a public item fails here until the
//! change is accepted (`cargo insta review`, or `INSTA_UPDATE=always`). In CI (`CI=true`) a
//! changed snapshot fails the run instead of being written.

#[path = "public_api/surface.rs"]
mod surface;

use std::path::Path;

/// The `src` folder of the workspace member `member`.
fn src(member: &str) -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join(member)
        .join("src")
}

#[test]
fn fblayout_core_public_surface() {
    let items = surface::public_items("fblayout_core", &src("fblayout-core"));
    insta::assert_snapshot!(items);
}

#[test]
fn fblayout_public_surface() {
    let items = surface::public_items("fblayout", &src("fblayout"));
    insta::assert_snapshot!(items);
}

#[test]
fn fblayout_kernels_public_surface() {
    let items = surface::public_items("fblayout_kernels", &src("fblayout-kernels"));
    insta::assert_snapshot!(items);
}

#[test]
fn fblayout_plan_public_surface() {
    let items = surface::public_items("fblayout_plan", &src("fblayout-plan"));
    insta::assert_snapshot!(items);
}

#[test]
fn fblayout_hf_public_surface() {
    let items = surface::public_items("fblayout_hf", &src("fblayout-hf"));
    insta::assert_snapshot!(items);
}
