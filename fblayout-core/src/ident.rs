//! Identifiers that fblayout emits into Rust and WGSL.
//!
//! Axis, tensor and view names become function and parameter names in both languages, so a
//! name must be a plain ASCII identifier (`[A-Za-z_][A-Za-z0-9_]*`) that is reserved in
//! neither: not one of naga's WGSL reserved words, not a Rust keyword, and not one of the few
//! predeclared WGSL names that the emitted code itself uses. WGSL also forbids a leading `__`.

/// Rust's keywords, strict and reserved for the future (edition 2024). WGSL's reserved words come
/// from naga itself ([`naga::keywords::wgsl::RESERVED`]), so fblayout refuses exactly what naga's
/// parser refuses.
const RUST_KEYWORDS: &[&str] = &[
    "as", "async", "await", "break", "const", "continue", "crate", "dyn", "else", "enum", "extern",
    "false", "fn", "for", "if", "impl", "in", "let", "loop", "match", "mod", "move", "mut", "pub",
    "ref", "return", "self", "Self", "static", "struct", "super", "trait", "true", "type",
    "unsafe", "use", "where", "while", "abstract", "become", "box", "do", "final", "gen", "macro",
    "override", "priv", "try", "typeof", "unsized", "virtual", "yield",
];

/// WGSL's predeclared names that emitted code refers to. WGSL lets a declaration shadow a
/// predeclared name, so a parameter called `u32` would hide the type of the parameters after it;
/// these are refused. Every other predeclared name (built-in functions such as `length` or
/// `max`) is a legal axis name.
pub(crate) const EMITTED_PREDECLARED: &[&str] = &[
    "bool", "u32", "i32", "f32", "f16", "vec2", "vec3", "vec4", "array", "atomic", "ptr", "select",
];

/// Why a name is reserved, or `None`.
fn reserved(name: &str) -> Option<&'static str> {
    if naga::keywords::wgsl::RESERVED.contains(&name) {
        Some("it is a reserved word in WGSL")
    } else if RUST_KEYWORDS.contains(&name) {
        Some("it is a keyword in Rust")
    } else if EMITTED_PREDECLARED.contains(&name) {
        Some("it is a WGSL type or built-in that the emitted code uses, and a name would shadow it")
    } else {
        None
    }
}

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
    reserved(name)
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
    fn refuses_every_word_naga_reserves() {
        for &word in naga::keywords::wgsl::RESERVED {
            assert!(
                ident_problem(word).is_some(),
                "`{word}` is reserved in WGSL"
            );
        }
    }

    #[test]
    fn built_in_function_names_stay_legal() {
        for ok in ["length", "max", "min", "dot", "clamp", "exp"] {
            assert_eq!(ident_problem(ok), None, "{ok}");
        }
    }

    #[test]
    fn emitted_predeclared_names_are_naga_builtins() {
        for &name in super::EMITTED_PREDECLARED {
            assert!(
                naga::keywords::wgsl::BUILTIN_IDENTIFIERS.contains(&name),
                "`{name}` is not predeclared in WGSL, so it needs no refusal"
            );
        }
    }

    #[test]
    fn rejects_bad_names() {
        for bad in [
            "", "1x", "a-b", "__x", "_", "fn", "u32", "vec4", "self", "var", "NULL", "active",
            "cast", "alignas", "gen", "select",
        ] {
            assert!(ident_problem(bad).is_some(), "{bad}");
        }
    }
}
