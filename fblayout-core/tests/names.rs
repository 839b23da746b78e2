//! Names are refused exactly when naga would refuse the WGSL they end up in: every name the
//! check accepts — WGSL built-in function names and the other predeclared names included —
//! yields WGSL that naga validates, as a tensor name, an axis name (with its run-time extent
//! parameter) and a view name.

use fblayout_core::emit::wgsl::emit_views;
use fblayout_core::ident_problem;
use fblayout_core::layout::LayoutSpec;
use proptest::prelude::*;

/// Builds a tensor, an axis and a view all named after `name`, and emits their WGSL.
fn emits(name: &str) -> Result<(), String> {
    let tensor = LayoutSpec::new(name)
        .dyn_axis(name)
        .tile(4, true)
        .axis("other", 8)
        .rtile()
        .reduce_forward(["other"])
        .reduce_backward([name])
        .build()
        .map_err(|e| e.to_string())?;
    let view = tensor
        .view()
        .named(format!("{name}_v"))
        .and_then(|v| v.transpose(name, "other"))
        .map_err(|e| e.to_string())?;
    emit_views("names", &[&tensor.view(), &view])
        .map(drop)
        .map_err(|e| e.to_string())
}

#[test]
fn every_accepted_predeclared_name_gives_valid_wgsl() {
    let mut accepted = 0;
    for &name in naga::keywords::wgsl::BUILTIN_IDENTIFIERS {
        if ident_problem(name).is_none() && name != "other" {
            accepted += 1;
            emits(name).unwrap_or_else(|e| panic!("`{name}` was accepted, yet: {e}"));
        }
    }
    assert!(
        accepted > 100,
        "built-in function names stay legal ({accepted} accepted)"
    );
}

#[test]
fn every_reserved_word_is_refused_when_building() {
    for &word in naga::keywords::wgsl::RESERVED {
        let err = LayoutSpec::new("x").axis(word, 4).build().unwrap_err();
        assert!(err.to_string().contains(&format!("`{word}`")), "{err}");
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn accepted_random_names_give_valid_wgsl(name in "[A-Za-z_][A-Za-z0-9_]{0,8}") {
        if ident_problem(&name).is_none() && name != "other" {
            prop_assert!(emits(&name).is_ok(), "`{}`: {:?}", name, emits(&name));
        }
    }
}
