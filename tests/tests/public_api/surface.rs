//! The public surface of a crate, read from its source with syn.
//!
//! Starting at `lib.rs`, the walker follows `mod` declarations through the usual file layout
//! (`x.rs` or `x/mod.rs`; `#[path]` is not supported) and lists one line per public item:
//! public items of public modules, `pub use` re-exports as written, public fields of public
//! structs, enum variants, trait items, and public methods of inherent impls of public types.
//! Members of an item re-exported from a private module are listed under the re-exported
//! path, the one users write.
//! Items marked `#[doc(hidden)]` and `#[cfg(test)]` are left out; items under
//! `#[cfg(feature = "…")]` are listed with the feature.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

use syn::{Attribute, Fields, ImplItem, Item, TraitItem, UseTree, Visibility};

/// The sorted public items of the crate `krate` whose `lib.rs` is in `src`, one per line.
pub(crate) fn public_items(krate: &str, src: &Path) -> String {
    let mut walker = Walker::default();
    walker.file(&src.join("lib.rs"), src.to_path_buf(), krate, "", true);
    let Walker {
        mut lines,
        types,
        mut members,
        methods,
        exposed,
    } = walker;
    for (ty, member) in methods {
        // Methods count on public types only; a name declared twice gets the methods twice.
        for path in types.get(&ty).into_iter().flatten() {
            members
                .entry(path.clone())
                .or_default()
                .push(member.clone());
        }
    }
    for (shown, real, features) in exposed {
        for (kind, name, own) in members.get(&real).into_iter().flatten() {
            lines.push(format!("{kind} {shown}::{name}{features}{own}"));
        }
    }
    lines.sort();
    lines.join("\n")
}

/// A member of an item: its kind, name and feature marker.
type Member = (&'static str, String, String);

/// What the walk has found so far.
#[derive(Default)]
struct Walker {
    /// The listed lines of modules, items, re-exports and macros.
    lines: Vec<String>,
    /// Public type names and the paths they are declared at.
    types: BTreeMap<String, Vec<String>>,
    /// The members of public items (fields, variants, trait items, methods), by declared path.
    members: BTreeMap<String, Vec<Member>>,
    /// Inherent methods, by the name of their self type.
    methods: Vec<(String, Member)>,
    /// Items reachable from outside: the path users see, the declared path, the features.
    exposed: Vec<(String, String, String)>,
}

impl Walker {
    /// Walks the module `path` in `file`, whose child modules live in `dir`; `public` says
    /// whether users can name the module.
    fn file(&mut self, file: &Path, dir: PathBuf, path: &str, features: &str, public: bool) {
        let text = fs::read_to_string(file)
            .unwrap_or_else(|err| panic!("reading {}: {err}", file.display()));
        let parsed = syn::parse_file(&text)
            .unwrap_or_else(|err| panic!("parsing {}: {err}", file.display()));
        for item in &parsed.items {
            self.item(item, &dir, path, features, public);
        }
    }

    /// Records `item` of the module `path` (a public one when `in_public`).
    fn item(&mut self, item: &Item, dir: &Path, path: &str, inherited: &str, in_public: bool) {
        let (attrs, vis) = attrs_and_vis(item);
        let Some(features) = marker(attrs, inherited) else {
            return;
        };
        let public = matches!(vis, Some(Visibility::Public(_)));
        let name = match item {
            Item::Impl(i) if i.trait_.is_none() => return self.inherent(i),
            Item::Mod(m) => {
                let name = m.ident.to_string();
                let child = format!("{path}::{name}");
                let reachable = in_public && public;
                match &m.content {
                    Some((_, items)) => {
                        for item in items {
                            let dir = dir.join(&name);
                            self.item(item, &dir, &child, &features, reachable);
                        }
                    }
                    None => {
                        let flat = dir.join(format!("{name}.rs"));
                        let file = if flat.exists() {
                            flat
                        } else {
                            dir.join(&name).join("mod.rs")
                        };
                        self.file(&file, dir.join(&name), &child, &features, reachable);
                    }
                }
                name
            }
            Item::Use(u) if public && in_public => {
                let mut uses = Vec::new();
                flatten_use(&u.tree, String::new(), &mut uses);
                for (name, source) in uses {
                    let line = format!("use {path}::{name} = {source}{features}");
                    self.lines.push(line);
                    let real = resolve(path, &source);
                    let shown = format!("{path}::{name}");
                    self.exposed.push((shown, real, features.clone()));
                }
                return;
            }
            Item::Struct(s) => {
                let fields: Vec<_> = match &s.fields {
                    Fields::Named(f) => f.named.iter().collect(),
                    Fields::Unnamed(f) => f.unnamed.iter().collect(),
                    Fields::Unit => Vec::new(),
                };
                for (i, field) in fields.into_iter().enumerate() {
                    let public = matches!(field.vis, Visibility::Public(_));
                    if let (true, Some(own)) = (public, marker(&field.attrs, "")) {
                        let name = field
                            .ident
                            .as_ref()
                            .map_or(i.to_string(), |n| n.to_string());
                        self.member(path, &s.ident, ("field", name, own));
                    }
                }
                self.pub_type(&s.ident, path);
                s.ident.to_string()
            }
            Item::Enum(e) => {
                for v in &e.variants {
                    if let Some(own) = marker(&v.attrs, "") {
                        self.member(path, &e.ident, ("variant", v.ident.to_string(), own));
                    }
                }
                self.pub_type(&e.ident, path);
                e.ident.to_string()
            }
            Item::Trait(t) => {
                for ti in &t.items {
                    let (kind, name, attrs) = match ti {
                        TraitItem::Fn(f) => ("fn", &f.sig.ident, &f.attrs),
                        TraitItem::Const(c) => ("const", &c.ident, &c.attrs),
                        TraitItem::Type(ty) => ("type", &ty.ident, &ty.attrs),
                        _ => continue,
                    };
                    if let Some(own) = marker(attrs, "") {
                        self.member(path, &t.ident, (kind, name.to_string(), own));
                    }
                }
                t.ident.to_string()
            }
            Item::Type(t) => {
                self.pub_type(&t.ident, path);
                t.ident.to_string()
            }
            Item::Fn(f) => f.sig.ident.to_string(),
            Item::Const(c) => c.ident.to_string(),
            Item::Static(s) => s.ident.to_string(),
            Item::Union(u) => u.ident.to_string(),
            Item::Macro(m) if m.attrs.iter().any(|a| a.path().is_ident("macro_export")) => {
                if let Some(name) = &m.ident {
                    self.lines.push(format!("macro {path}::{name}{features}"));
                }
                return;
            }
            _ => return,
        };
        if public && in_public {
            let kind = kind(item);
            let full = format!("{path}::{name}");
            self.lines.push(format!("{kind} {full}{features}"));
            self.exposed.push((full.clone(), full, features));
        }
    }

    /// Records the public methods of an inherent impl.
    fn inherent(&mut self, i: &syn::ItemImpl) {
        let syn::Type::Path(ty) = &*i.self_ty else {
            return;
        };
        let Some(ty) = ty.path.segments.last() else {
            return;
        };
        let Some(outer) = marker(&i.attrs, "") else {
            return;
        };
        for ii in &i.items {
            let ImplItem::Fn(f) = ii else { continue };
            let public = matches!(f.vis, Visibility::Public(_));
            if let (true, Some(own)) = (public, marker(&f.attrs, &outer)) {
                let member = ("fn", f.sig.ident.to_string(), own);
                self.methods.push((ty.ident.to_string(), member));
            }
        }
    }

    /// Records a member of the item `item` declared in the module `path`.
    fn member(&mut self, path: &str, item: &syn::Ident, member: Member) {
        let key = format!("{path}::{item}");
        self.members.entry(key).or_default().push(member);
    }

    /// Records that the public type `name` is declared in the module `path`.
    fn pub_type(&mut self, name: &syn::Ident, path: &str) {
        let paths = self.types.entry(name.to_string()).or_default();
        paths.push(format!("{path}::{name}"));
    }
}

/// The declared path that `source`, written in a `use` in the module `module`, names: paths
/// from `crate`, `self` and `super` resolve in this crate, the rest against `module` (paths
/// into other crates resolve to nothing here, so their members are not listed again).
fn resolve(module: &str, source: &str) -> String {
    let krate = module.split("::").next().unwrap_or_default();
    let mut base: Vec<&str> = module.split("::").collect();
    let mut rest = source.split("::").peekable();
    match rest.peek() {
        Some(&"crate") => {
            base = vec![krate];
            rest.next();
        }
        Some(&"self") => {
            rest.next();
        }
        _ => {}
    }
    while rest.peek() == Some(&"super") {
        base.pop();
        rest.next();
    }
    base.extend(rest);
    base.join("::")
}

/// The keyword of an item.
fn kind(item: &Item) -> &'static str {
    match item {
        Item::Const(_) => "const",
        Item::Enum(_) => "enum",
        Item::Fn(_) => "fn",
        Item::Mod(_) => "mod",
        Item::Static(_) => "static",
        Item::Struct(_) => "struct",
        Item::Trait(_) => "trait",
        Item::Type(_) => "type",
        Item::Union(_) => "union",
        _ => "item",
    }
}

/// The feature marker of an item with `attrs` inside items marked `inherited`, or `None` for an
/// item left out (`#[cfg(test)]`, `#[doc(hidden)]`).
fn marker(attrs: &[Attribute], inherited: &str) -> Option<String> {
    let mut features = inherited.to_owned();
    for attr in attrs {
        let Ok(tokens) = attr.meta.require_list().map(|l| l.tokens.to_string()) else {
            continue;
        };
        if attr.path().is_ident("doc") && tokens == "hidden" {
            return None;
        }
        if attr.path().is_ident("cfg") {
            if tokens == "test" {
                return None;
            }
            features.push_str(&format!(" [cfg({tokens})]"));
        }
    }
    Some(features)
}

/// Every `(visible name, source path)` a use tree brings into scope.
fn flatten_use(tree: &UseTree, prefix: String, out: &mut Vec<(String, String)>) {
    let join = |name: &dyn std::fmt::Display| {
        if prefix.is_empty() {
            name.to_string()
        } else {
            format!("{prefix}::{name}")
        }
    };
    match tree {
        UseTree::Path(p) => flatten_use(&p.tree, join(&p.ident), out),
        UseTree::Name(n) if n.ident == "self" => {
            let name = prefix.rsplit("::").next().unwrap_or_default().to_owned();
            out.push((name, prefix.clone()));
        }
        UseTree::Name(n) => out.push((n.ident.to_string(), join(&n.ident))),
        UseTree::Rename(r) => out.push((r.rename.to_string(), join(&r.ident))),
        UseTree::Glob(_) => out.push(("*".to_owned(), join(&"*"))),
        UseTree::Group(g) => {
            for t in &g.items {
                flatten_use(t, prefix.clone(), out);
            }
        }
    }
}

/// The attributes and visibility of an item (`None` for impls and macros).
fn attrs_and_vis(item: &Item) -> (&[Attribute], Option<&Visibility>) {
    match item {
        Item::Const(i) => (&i.attrs, Some(&i.vis)),
        Item::Enum(i) => (&i.attrs, Some(&i.vis)),
        Item::Fn(i) => (&i.attrs, Some(&i.vis)),
        Item::Mod(i) => (&i.attrs, Some(&i.vis)),
        Item::Static(i) => (&i.attrs, Some(&i.vis)),
        Item::Struct(i) => (&i.attrs, Some(&i.vis)),
        Item::Trait(i) => (&i.attrs, Some(&i.vis)),
        Item::Type(i) => (&i.attrs, Some(&i.vis)),
        Item::Union(i) => (&i.attrs, Some(&i.vis)),
        Item::Use(i) => (&i.attrs, Some(&i.vis)),
        Item::Impl(i) => (&i.attrs, None),
        Item::Macro(i) => (&i.attrs, None),
        _ => (&[], None),
    }
}
