//! Snapshots of the Rust and WGSL emitted for the canonical layouts.
//!
//! Each snapshot is validated before it is compared: the WGSL by naga (through
//! `emit_module`, which returns only validated modules) and the Rust by parsing it with syn. A
//! reviewer reading a changed snapshot therefore reads valid code. In CI (`CI=true`) a changed
//! snapshot fails the run instead of being written.

use fblayout_core::emit::rust::{RustFlags, to_rust};
use fblayout_core::emit::wgsl::emit_module;
use fblayout_tests::canonical_tiled_layouts;
use fblayout_tests::catalog::canonical_views;

#[test]
fn canonical_layouts_emit_valid_code() {
    for canonical in canonical_views().unwrap() {
        let name = canonical.view.name().to_owned();
        let f = canonical.view.index_fn().simplified();
        let wgsl = emit_module(&name, &[&f]).unwrap_or_else(|err| panic!("{err}"));
        let rust = to_rust(&f, RustFlags::default());
        syn::parse_file(&rust)
            .unwrap_or_else(|err| panic!("emitted Rust for {name} does not parse: {err}\n{rust}"));
        let header = format!(
            "// {}\n// ops: {} before simplification, {} after\n",
            canonical.description,
            canonical.view.index_fn().op_count(),
            f.op_count()
        );
        insta::assert_snapshot!(format!("{name}.wgsl"), format!("{header}{}", wgsl.source()));
        insta::assert_snapshot!(format!("{name}.rs"), format!("{header}{rust}"));
    }
}

#[test]
fn tile_helpers_emit_valid_code() {
    for layout in canonical_tiled_layouts() {
        let f = layout.tile_index_fn().simplified();
        let wgsl = emit_module(&f.name, &[&f]).unwrap_or_else(|err| panic!("{err}"));
        insta::assert_snapshot!(format!("{}.wgsl", f.name), wgsl.source());
    }
}
