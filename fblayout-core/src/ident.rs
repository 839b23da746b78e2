//! Identifiers that fblayout emits into Rust and WGSL.
//!
//! Axis, tensor and view names become function and parameter names in both languages, so a
//! name must be a plain ASCII identifier (`[A-Za-z_][A-Za-z0-9_]*`) that is reserved in
//! neither. WGSL also forbids a leading `__`.

/// Words reserved in Rust or WGSL (keywords and WGSL's reserved words and type names).
const RESERVED: &[&str] = &[
    // Rust keywords, strict and reserved.
    "as",
    "async",
    "await",
    "break",
    "const",
    "continue",
    "crate",
    "dyn",
    "else",
    "enum",
    "extern",
    "false",
    "fn",
    "for",
    "if",
    "impl",
    "in",
    "let",
    "loop",
    "match",
    "mod",
    "move",
    "mut",
    "pub",
    "ref",
    "return",
    "self",
    "Self",
    "static",
    "struct",
    "super",
    "trait",
    "true",
    "type",
    "unsafe",
    "use",
    "where",
    "while",
    "abstract",
    "become",
    "box",
    "do",
    "final",
    "gen",
    "macro",
    "override",
    "priv",
    "try",
    "typeof",
    "unsized",
    "virtual",
    "yield",
    // WGSL keywords and reserved words that Rust lacks.
    "alias",
    "bitcast",
    "bool",
    "case",
    "const_assert",
    "continuing",
    "default",
    "diagnostic",
    "discard",
    "enable",
    "f16",
    "f32",
    "f64",
    "fallthrough",
    "function",
    "i16",
    "i32",
    "i64",
    "i8",
    "let",
    "private",
    "ptr",
    "requires",
    "storage",
    "switch",
    "u16",
    "u32",
    "u64",
    "u8",
    "uniform",
    "var",
    "workgroup",
    "array",
    "atomic",
    "mat2x2",
    "mat3x3",
    "mat4x4",
    "sampler",
    "texture_2d",
    "vec2",
    "vec3",
    "vec4",
    "asm",
    "attribute",
    "auto",
    "catch",
    "class",
    "co_await",
    "co_return",
    "co_yield",
    "coherent",
    "column_major",
    "common",
    "compile",
    "compile_fragment",
    "concept",
    "const_cast",
    "consteval",
    "constexpr",
    "constinit",
    "delete",
    "demote",
    "demote_to_helper",
    "explicit",
    "export",
    "filter",
    "flat",
    "friend",
    "goto",
    "groupshared",
    "handle",
    "highp",
    "inline",
    "inout",
    "instanceof",
    "interface",
    "layout",
    "lowp",
    "meta",
    "module",
    "namespace",
    "new",
    "nil",
    "noexcept",
    "noinline",
    "nointerpolation",
    "noperspective",
    "null",
    "nullptr",
    "of",
    "operator",
    "package",
    "packoffset",
    "partition",
    "pass",
    "patch",
    "pixelfragment",
    "precise",
    "precision",
    "premerge",
    "protected",
    "public",
    "readonly",
    "reinterpret_cast",
    "resource",
    "row_major",
    "samper",
    "sample",
    "shared",
    "signed",
    "sizeof",
    "smooth",
    "snorm",
    "static_assert",
    "static_cast",
    "std",
    "subroutine",
    "target",
    "template",
    "this",
    "thread_local",
    "throw",
    "trait",
    "typedef",
    "typename",
    "union",
    "unless",
    "unorm",
    "unsigned",
    "using",
    "varying",
    "volatile",
    "wgsl",
    "writeonly",
];

/// Why a name cannot be emitted, or `None` when it can.
pub fn ident_problem(name: &str) -> Option<&'static str> {
    let mut chars = name.chars();
    let Some(first) = chars.next() else {
        return Some("it is empty");
    };
    if !(first.is_ascii_alphabetic() || first == '_') {
        return Some("it must start with an ASCII letter or `_`");
    }
    if !chars.all(|c| c.is_ascii_alphanumeric() || c == '_') {
        return Some("it may hold only ASCII letters, digits and `_`");
    }
    if name == "_" || name.starts_with("__") {
        return Some("WGSL forbids `_` and names that start with `__`");
    }
    if RESERVED.contains(&name) {
        return Some("it is a reserved word in Rust or WGSL");
    }
    None
}

#[cfg(test)]
mod tests {
    use super::ident_problem;

    #[test]
    fn accepts_plain_names() {
        for ok in ["seq", "head_dim", "x1", "_tmp", "Batch"] {
            assert_eq!(ident_problem(ok), None, "{ok}");
        }
    }

    #[test]
    fn rejects_bad_names() {
        for bad in [
            "", "1x", "a-b", "__x", "_", "fn", "u32", "vec4", "self", "var",
        ] {
            assert!(ident_problem(bad).is_some(), "{bad}");
        }
    }
}
