//! A crate's modules as the compiler reads them: from `src/lib.rs` (or
//! `src/main.rs`) through every `mod` declaration, inline or in a file
//! (`name.rs`, `name/mod.rs`, `#[path]`), each with the names it defines,
//! what its `use` trees import (globs apart), and every path of two or more
//! segments its code writes, also inside macro invocations. Test code is not
//! read: an item under `#[cfg(test)]` (or `cfg(all(test, ..))`), and a file
//! whose inner attributes say so. Comments, doc comments and string literals
//! are not code to syn, so nothing in them is read as a path.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use proc_macro2::{Span, TokenStream, TokenTree};
use syn::visit::Visit;

use crate::Error;

/// A module's path inside its crate: `["workflows", "deploy"]`; the crate's
/// root is the empty path.
pub type ModPath = Vec<String>;

/// Where something is written: the file and its line (1-based).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Location {
    /// The file, as found under the crate's `src/`.
    pub file: PathBuf,
    /// Its line, from 1.
    pub line: usize,
}

/// A path as written (`crate::a::B`, `super::c`, `store::Tree`), and where.
/// A path that starts with `::` starts with the segment `{extern}`.
#[derive(Debug, Clone)]
pub struct Written {
    /// The segments, as written.
    pub path: Vec<String>,
    /// Where.
    pub at: Location,
}

/// One module: the names it defines and what its code writes.
#[derive(Debug, Default)]
pub struct Module {
    /// The file the module is written in (an inline module's is its parent's).
    pub file: PathBuf,
    /// Its submodules by name.
    pub children: BTreeSet<String>,
    /// The other items it defines (types, functions, traits, constants,
    /// statics, `macro_rules!` names, type aliases).
    pub items: BTreeSet<String>,
    /// Its `use` imports by the name they bind (`_` for `as _`).
    pub imports: BTreeMap<String, Vec<Written>>,
    /// Its glob imports (`use a::b::*`), the path without the `*`.
    pub globs: Vec<Written>,
    /// Every path of two or more segments in its code, `use` items inside
    /// function bodies included.
    pub paths: Vec<Written>,
    /// The `impl` blocks of a type named by one segment (`impl Veem`), by
    /// that name.
    pub impls: Vec<(String, Location)>,
}

/// A crate read whole: its modules by path.
#[derive(Debug, Default)]
pub struct Crate {
    /// Every module read, the root's path empty.
    pub modules: BTreeMap<ModPath, Module>,
}

impl Crate {
    /// Reads the crate whose sources are under `src`, from `lib.rs`, or
    /// `main.rs` when there is no library. Errors: a file that cannot be
    /// read or parsed, a declared module whose file is missing.
    pub fn read(src: &Path) -> Result<Crate, Error> {
        let root = ["lib.rs", "main.rs"]
            .iter()
            .map(|f| src.join(f))
            .find(|p| p.is_file())
            .ok_or_else(|| Error::NoRoot(src.to_path_buf()))?;
        let mut krate = Crate::default();
        let file = parse(&root)?;
        if !is_test(&file.attrs) {
            krate.read_module(Vec::new(), &root, src.to_path_buf(), &file.items)?;
        }
        Ok(krate)
    }

    /// Reads `items`, module `path`'s, written in `file`; `dir` is where its
    /// submodules' files are.
    fn read_module(&mut self, path: ModPath, file: &Path, dir: PathBuf, items: &[syn::Item]) -> Result<(), Error> {
        let mut module = Module {
            file: file.to_path_buf(),
            ..Module::default()
        };
        let mut submodules = Vec::new();
        for item in items {
            if is_test(item_attrs(item)) {
                continue;
            }
            match item {
                syn::Item::Mod(m) => {
                    let name = m.ident.to_string();
                    module.children.insert(name.clone());
                    submodules.push(m);
                }
                syn::Item::Use(u) => {
                    let at = location(file, u.use_token.span);
                    let mut leaves = Vec::new();
                    use_leaves(&u.tree, &mut Vec::new(), &mut leaves);
                    for (name, path) in leaves {
                        let written = Written { path, at: at.clone() };
                        match name {
                            Some(name) => module.imports.entry(name).or_default().push(written),
                            None => module.globs.push(written),
                        }
                    }
                }
                syn::Item::ExternCrate(e) => {
                    let name = e.rename.as_ref().map_or(&e.ident, |(_, r)| r).to_string();
                    let path = vec!["{extern}".to_string(), e.ident.to_string()];
                    let at = location(file, e.extern_token.span);
                    module.imports.entry(name).or_default().push(Written { path, at });
                }
                other => {
                    if let Some(name) = item_name(other) {
                        module.items.insert(name);
                    }
                    if let syn::Item::Impl(i) = other {
                        if let syn::Type::Path(t) = &*i.self_ty {
                            if t.qself.is_none() && t.path.segments.len() == 1 {
                                let name = t.path.segments[0].ident.to_string();
                                module.impls.push((name, location(file, i.impl_token.span)));
                            }
                        }
                    }
                    let mut paths = Paths {
                        file,
                        out: &mut module.paths,
                    };
                    paths.visit_item(other);
                }
            }
        }
        self.modules.insert(path.clone(), module);
        for m in submodules {
            let name = m.ident.to_string();
            let mut sub = path.clone();
            sub.push(name.clone());
            match &m.content {
                Some((_, items)) => self.read_module(sub, file, dir.join(&name), items)?,
                None => {
                    let found = module_file(file, &dir, &name, &m.attrs).ok_or_else(|| Error::MissingModule {
                        module: sub.join("::"),
                        at: location(file, m.ident.span()),
                    })?;
                    let parsed = parse(&found)?;
                    if is_test(&parsed.attrs) {
                        // `#![cfg(test)]`: the crate has no such module
                        // outside its tests.
                        if let Some(parent) = self.modules.get_mut(&path) {
                            parent.children.remove(&name);
                        }
                        continue;
                    }
                    let is_mod_rs = found.file_name().is_some_and(|f| f == "mod.rs");
                    let sub_dir = if is_mod_rs {
                        found.parent().map(Path::to_path_buf).unwrap_or_default()
                    } else {
                        found.with_extension("")
                    };
                    self.read_module(sub, &found, sub_dir, &parsed.items)?;
                }
            }
        }
        Ok(())
    }
}

fn parse(file: &Path) -> Result<syn::File, Error> {
    let text = std::fs::read_to_string(file).map_err(|e| Error::Read(file.to_path_buf(), e))?;
    syn::parse_file(&text).map_err(|e| Error::Parse {
        file: file.to_path_buf(),
        line: e.span().start().line,
        reason: e.to_string(),
    })
}

/// The file of `mod name;` declared in `file`: its `#[path]` (relative to
/// `file`'s directory), else `dir/name.rs`, else `dir/name/mod.rs`.
fn module_file(file: &Path, dir: &Path, name: &str, attrs: &[syn::Attribute]) -> Option<PathBuf> {
    for attr in attrs {
        if let syn::Meta::NameValue(nv) = &attr.meta {
            if nv.path.is_ident("path") {
                if let syn::Expr::Lit(syn::ExprLit { lit: syn::Lit::Str(s), .. }) = &nv.value {
                    return Some(file.parent()?.join(s.value())).filter(|p| p.is_file());
                }
            }
        }
    }
    let flat = dir.join(format!("{name}.rs"));
    let nested = dir.join(name).join("mod.rs");
    [flat, nested].into_iter().find(|p| p.is_file())
}

/// Whether `attrs` hold `#[cfg(test)]`, or a `cfg(all(..))` that needs
/// `test`: code the crate has only when its tests are built. A
/// `cfg(any(test, feature = ".."))` item is code a feature builds: read.
pub fn is_test(attrs: &[syn::Attribute]) -> bool {
    attrs.iter().any(|attr| {
        if !attr.path().is_ident("cfg") {
            return false;
        }
        let Ok(meta) = attr.parse_args::<syn::Meta>() else { return false };
        needs_test(&meta)
    })
}

fn needs_test(meta: &syn::Meta) -> bool {
    match meta {
        syn::Meta::Path(p) => p.is_ident("test"),
        syn::Meta::List(list) if list.path.is_ident("all") => list
            .parse_args_with(syn::punctuated::Punctuated::<syn::Meta, syn::Token![,]>::parse_terminated)
            .is_ok_and(|args| args.iter().any(needs_test)),
        _ => false,
    }
}

fn item_attrs(item: &syn::Item) -> &[syn::Attribute] {
    use syn::Item::*;
    match item {
        Const(i) => &i.attrs,
        Enum(i) => &i.attrs,
        ExternCrate(i) => &i.attrs,
        Fn(i) => &i.attrs,
        ForeignMod(i) => &i.attrs,
        Impl(i) => &i.attrs,
        Macro(i) => &i.attrs,
        Mod(i) => &i.attrs,
        Static(i) => &i.attrs,
        Struct(i) => &i.attrs,
        Trait(i) => &i.attrs,
        TraitAlias(i) => &i.attrs,
        Type(i) => &i.attrs,
        Union(i) => &i.attrs,
        Use(i) => &i.attrs,
        _ => &[],
    }
}

fn item_name(item: &syn::Item) -> Option<String> {
    use syn::Item::*;
    let ident = match item {
        Const(i) => &i.ident,
        Enum(i) => &i.ident,
        Fn(i) => &i.sig.ident,
        Macro(i) => i.ident.as_ref()?,
        Static(i) => &i.ident,
        Struct(i) => &i.ident,
        Trait(i) => &i.ident,
        TraitAlias(i) => &i.ident,
        Type(i) => &i.ident,
        Union(i) => &i.ident,
        _ => return None,
    };
    Some(ident.to_string())
}

/// The leaves of a `use` tree: (the name bound, or `None` for a glob; the
/// full path). `use a::{self, b as c}` binds `a` to `a` and `c` to `a::b`.
fn use_leaves(tree: &syn::UseTree, prefix: &mut Vec<String>, out: &mut Vec<(Option<String>, Vec<String>)>) {
    match tree {
        syn::UseTree::Path(p) => {
            prefix.push(p.ident.to_string());
            use_leaves(&p.tree, prefix, out);
            prefix.pop();
        }
        syn::UseTree::Name(n) if n.ident == "self" => {
            out.push((prefix.last().cloned(), prefix.clone()));
        }
        syn::UseTree::Name(n) => {
            let mut path = prefix.clone();
            path.push(n.ident.to_string());
            out.push((Some(n.ident.to_string()), path));
        }
        syn::UseTree::Rename(r) => {
            let mut path = prefix.clone();
            if r.ident != "self" {
                path.push(r.ident.to_string());
            }
            out.push((Some(r.rename.to_string()), path));
        }
        syn::UseTree::Glob(_) => out.push((None, prefix.clone())),
        syn::UseTree::Group(g) => {
            for t in &g.items {
                use_leaves(t, prefix, out);
            }
        }
    }
}

fn location(file: &Path, span: Span) -> Location {
    Location {
        file: file.to_path_buf(),
        line: span.start().line,
    }
}

/// Collects the paths of two or more segments an item's code writes, test
/// items inside it left out.
struct Paths<'a> {
    file: &'a Path,
    out: &'a mut Vec<Written>,
}

impl Paths<'_> {
    fn push(&mut self, path: Vec<String>, span: Span) {
        if path.len() >= 2 {
            self.out.push(Written {
                path,
                at: location(self.file, span),
            });
        }
    }

    /// Paths inside a macro's tokens (`format!("{}", crate::a::b())`): runs
    /// of `ident :: ident ...` (and `$crate :: ...`), groups searched too.
    fn scan(&mut self, tokens: TokenStream) {
        let tokens: Vec<TokenTree> = tokens.into_iter().collect();
        let mut i = 0;
        while i < tokens.len() {
            match &tokens[i] {
                TokenTree::Group(g) => {
                    self.scan(g.stream());
                    i += 1;
                }
                TokenTree::Ident(first) => {
                    let mut path = vec![first.to_string()];
                    let dollar = i > 0 && matches!(&tokens[i - 1], TokenTree::Punct(p) if p.as_char() == '$');
                    if dollar && path[0] == "crate" {
                        path[0] = "$crate".into();
                    }
                    let span = first.span();
                    let mut j = i + 1;
                    while is_colons(&tokens, j) {
                        match tokens.get(j + 2) {
                            Some(TokenTree::Ident(next)) => {
                                path.push(next.to_string());
                                j += 3;
                            }
                            _ => break,
                        }
                    }
                    self.push(path, span);
                    i = j.max(i + 1);
                }
                _ => i += 1,
            }
        }
    }
}

fn is_colons(tokens: &[TokenTree], at: usize) -> bool {
    matches!(
        (tokens.get(at), tokens.get(at + 1)),
        (Some(TokenTree::Punct(a)), Some(TokenTree::Punct(b)))
            if a.as_char() == ':' && b.as_char() == ':' && a.spacing() == proc_macro2::Spacing::Joint
    )
}

impl<'ast> Visit<'ast> for Paths<'_> {
    fn visit_path(&mut self, p: &'ast syn::Path) {
        let mut path: Vec<String> = p.segments.iter().map(|s| s.ident.to_string()).collect();
        if p.leading_colon.is_some() {
            path.insert(0, "{extern}".into());
        }
        let span = p.segments.first().map_or_else(Span::call_site, |s| s.ident.span());
        self.push(path, span);
        syn::visit::visit_path(self, p);
    }

    fn visit_macro(&mut self, m: &'ast syn::Macro) {
        self.visit_path(&m.path);
        self.scan(m.tokens.clone());
    }

    fn visit_item(&mut self, i: &'ast syn::Item) {
        if !is_test(item_attrs(i)) {
            syn::visit::visit_item(self, i);
        }
    }

    fn visit_item_use(&mut self, u: &'ast syn::ItemUse) {
        // A `use` inside a function body: each leaf a path of its own.
        let mut leaves = Vec::new();
        use_leaves(&u.tree, &mut Vec::new(), &mut leaves);
        for (_, path) in leaves {
            let mut path = path;
            if path.len() == 1 {
                path.push("*".into());
            }
            self.push(path, u.use_token.span);
        }
    }

    fn visit_impl_item(&mut self, i: &'ast syn::ImplItem) {
        let attrs = match i {
            syn::ImplItem::Const(c) => &c.attrs,
            syn::ImplItem::Fn(f) => &f.attrs,
            syn::ImplItem::Type(t) => &t.attrs,
            syn::ImplItem::Macro(m) => &m.attrs,
            _ => return syn::visit::visit_impl_item(self, i),
        };
        if !is_test(attrs) {
            syn::visit::visit_impl_item(self, i);
        }
    }

    fn visit_attribute(&mut self, _: &'ast syn::Attribute) {
        // `#[derive(..)]`, `#[serde(..)]`, `#[tokio::main]`: what an
        // attribute names is the macros', not a module's dependency.
    }
}
