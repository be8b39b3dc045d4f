//! rpma's man-page generator.
//!
//! One source of truth: the doc comments of rpma's sources (what rustdoc
//! shows) and `rpma/doc/rpma.7.md` (the crate's top-level rustdoc). The
//! sources are read as the compiler reads them: from `rpma/src/lib.rs`,
//! following `mod` declarations (`x.rs`, `x/mod.rs`, and `x.rs` with its
//! children in `x/`), and what is public is taken from the declarations (see
//! [`Tree`]). Every public function and inherent method of a public type,
//! in whichever file of the tree its `impl` block is, gets a section-3 page
//! named after its librpma equivalent where one exists (`MrLocal::reg` →
//! `rpma_mr_reg`) and after the Rust item otherwise (`MrLocal::rereg` →
//! `rpma_mr_rereg`), with NAME, SYNOPSIS (the Rust signature as written),
//! DESCRIPTION, ERRORS, EXAMPLE and SEE ALSO. Markdown is turned into roff
//! by `mandown`.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fs;
use std::path::{Path, PathBuf};
use std::rc::Rc;
use syn::spanned::Spanned;

pub mod capi;

/// Where rpma's sources are, under the repository root.
pub const SRC: &str = "rpma/src";

/// One public operation found in the sources.
#[derive(Debug, Clone)]
pub struct Item {
    /// The page name (`rpma_mr_reg`).
    pub page: String,
    /// The Rust path (`MrLocal::reg`).
    pub path: String,
    /// The type, for methods.
    pub ty: Option<String>,
    /// Where a user imports the type from (`ops::Read`; the type's name
    /// when its path is not known from the impl's module).
    pub use_path: Option<String>,
    /// The module (`conn`, `conn::data`) whose file holds the item.
    pub module: String,
    /// The signature as written in the source.
    pub signature: String,
    /// The `impl` header for methods (`impl<M: RegMemory> MrLocal<M>`).
    pub impl_header: Option<String>,
    /// The doc comment, Markdown.
    pub docs: String,
    /// Whether it returns a `Result`.
    pub fallible: bool,
}

fn type_prefix(ty: &str) -> String {
    match ty {
        "MrLocal" => "rpma_mr".into(),
        "MrRemote" => "rpma_mr_remote".into(),
        "Conn" => "rpma_conn".into(),
        "ConnReq" => "rpma_conn_req".into(),
        "ConnCfg" => "rpma_conn_cfg".into(),
        "PeerCfg" => "rpma_peer_cfg".into(),
        "SrqCfg" => "rpma_srq_cfg".into(),
        "Messages" => "rpma_msgs".into(),
        other => {
            let mut s = String::from("rpma");
            for c in other.chars() {
                if c.is_uppercase() {
                    s.push('_');
                }
                s.push(c.to_ascii_lowercase());
            }
            s
        }
    }
}

/// The page name of `ty::name` (or of the free function `name` in `module`,
/// the module's path with `_` for `::`; empty for the crate root).
pub fn page_name(module: &str, ty: Option<&str>, name: &str) -> String {
    let special = match (ty, name) {
        (
            Some("Conn"),
            "read" | "write" | "write_with_imm" | "atomic_write" | "flush" | "send" | "send_with_imm" | "recv",
        ) => Some(format!("rpma_{name}")),
        (Some("Conn"), "send_with_inv") => Some(format!("rpma_{name}")),
        (Some("Conn"), "bind_mw") => Some("rpma_mw_bind".into()),
        (Some("Conn"), "invalidate_mw") => Some("rpma_mw_invalidate".into()),
        (Some("Conn"), "cq" | "rcq" | "event_fd" | "compl_fd" | "private_data" | "qp_num" | "peer") => {
            Some(format!("rpma_conn_get_{name}"))
        }
        (Some("ConnReq"), "private_data") => Some("rpma_conn_req_get_private_data".into()),
        (Some("Ep"), "fd") => Some("rpma_ep_get_fd".into()),
        (Some("Cq"), "fd") => Some("rpma_cq_get_fd".into()),
        (Some("Srq"), "rcq") => Some("rpma_srq_get_rcq".into()),
        (Some("MrLocal"), "descriptor" | "ptr" | "size" | "usage" | "access" | "lkey" | "rkey" | "peer") => {
            Some(format!("rpma_mr_get_{name}"))
        }
        (Some("MrRemote"), "size" | "flush_type" | "addr" | "rkey" | "usage") => {
            Some(format!("rpma_mr_remote_get_{name}"))
        }
        (Some("ConnCfg" | "SrqCfg" | "PeerCfg"), n)
            if !n.starts_with("set_") && !matches!(n, "new" | "from_descriptor") =>
        {
            Some(format!("{}_get_{n}", type_prefix(ty.unwrap_or_default())))
        }
        // librpma files these under `rpma_utils_`; rpma defines them with
        // their owners (`device`, `conn`).
        (None, "get_ibv_context" | "get_ibv_context_timeout") if matches!(module, "utils" | "device") => {
            Some(format!("rpma_utils_{name}"))
        }
        (None, "conn_event_2str" | "conn_event_value_2str") if matches!(module, "utils" | "conn") => {
            Some(format!("rpma_utils_{name}"))
        }
        (None, "is_odp_capable") => Some("rpma_utils_ibv_context_is_odp_capable".into()),
        (None, "threshold") if module == "log" => Some("rpma_log_get_threshold".into()),
        (None, n) if module == "log" => Some(format!("rpma_log_{n}")),
        (None, n) if module == "error" || module.is_empty() => Some(format!("rpma_{n}")),
        (None, n) => Some(format!("rpma_{module}_{n}")),
        _ => None,
    };
    special.unwrap_or_else(|| format!("{}_{name}", type_prefix(ty.unwrap_or_default())))
}

fn docs_of(attrs: &[syn::Attribute]) -> (String, bool) {
    let mut out = String::new();
    let mut hidden = false;
    for a in attrs {
        if a.path().is_ident("doc") {
            if let syn::Meta::NameValue(nv) = &a.meta {
                if let syn::Expr::Lit(syn::ExprLit { lit: syn::Lit::Str(s), .. }) = &nv.value {
                    let v = s.value();
                    out.push_str(v.strip_prefix(' ').unwrap_or(&v));
                    out.push('\n');
                }
            } else if let syn::Meta::List(l) = &a.meta {
                hidden |= l.tokens.to_string().contains("hidden");
            }
        }
    }
    (out, hidden)
}

pub(crate) fn slice(src: &str, from: proc_macro2::Span, to: proc_macro2::Span) -> String {
    let text = &src[from.byte_range().start..to.byte_range().start];
    text.trim().lines().map(str::trim_end).collect::<Vec<_>>().join("\n")
}

fn is_pub(v: &syn::Visibility) -> bool {
    matches!(v, syn::Visibility::Public(_))
}

fn returns_result(sig: &syn::Signature) -> bool {
    match &sig.output {
        syn::ReturnType::Type(_, t) => {
            let s = quote_type(t);
            s.contains("Result")
        }
        _ => false,
    }
}

fn quote_type(t: &syn::Type) -> String {
    match t {
        syn::Type::Path(p) => p.path.segments.iter().map(|s| s.ident.to_string()).collect::<Vec<_>>().join("::"),
        _ => String::new(),
    }
}

/// The inner (`//!`) docs among `attrs`.
fn inner_docs(attrs: &[syn::Attribute]) -> String {
    docs_of(&attrs.iter().filter(|a| matches!(a.style, syn::AttrStyle::Inner(_))).cloned().collect::<Vec<_>>()).0
}

/// `#[cfg(test)]`: the module is no part of the library.
fn is_cfg_test(attrs: &[syn::Attribute]) -> bool {
    attrs
        .iter()
        .any(|a| a.path().is_ident("cfg") && matches!(&a.meta, syn::Meta::List(l) if l.tokens.to_string() == "test"))
}

/// The file named by `#[path = "..."]`.
fn path_attr(attrs: &[syn::Attribute]) -> Option<String> {
    attrs.iter().find_map(|a| match &a.meta {
        syn::Meta::NameValue(nv) if a.path().is_ident("path") => match &nv.value {
            syn::Expr::Lit(syn::ExprLit { lit: syn::Lit::Str(s), .. }) => Some(s.value()),
            _ => None,
        },
        _ => None,
    })
}

/// The name an item defines in its module's namespace, if any.
fn item_name(it: &syn::Item) -> Option<String> {
    use syn::ext::IdentExt;
    let id = match it {
        syn::Item::Fn(x) => &x.sig.ident,
        syn::Item::Struct(x) => &x.ident,
        syn::Item::Enum(x) => &x.ident,
        syn::Item::Union(x) => &x.ident,
        syn::Item::Type(x) => &x.ident,
        syn::Item::Trait(x) => &x.ident,
        syn::Item::Const(x) => &x.ident,
        syn::Item::Static(x) => &x.ident,
        _ => return None,
    };
    Some(id.unraw().to_string())
}

/// Whether an item is declared `pub`.
fn item_is_pub(it: &syn::Item) -> bool {
    match it {
        syn::Item::Fn(x) => is_pub(&x.vis),
        syn::Item::Struct(x) => is_pub(&x.vis),
        syn::Item::Enum(x) => is_pub(&x.vis),
        syn::Item::Union(x) => is_pub(&x.vis),
        syn::Item::Type(x) => is_pub(&x.vis),
        syn::Item::Trait(x) => is_pub(&x.vis),
        syn::Item::Const(x) => is_pub(&x.vis),
        syn::Item::Static(x) => is_pub(&x.vis),
        _ => false,
    }
}

/// One module of the crate, as the compiler finds it from `lib.rs`.
pub struct Module {
    /// Its path from the crate root: empty for `lib.rs`, `["conn", "data"]`
    /// for `conn/data.rs`.
    pub path: Vec<String>,
    /// The file holding it (for an inline `mod x { ... }`, its parent's).
    pub file: PathBuf,
    /// Declared `pub mod` on the whole way from `lib.rs`.
    pub declared_public: bool,
    /// Its own declaration is `pub mod`.
    pub_decl: bool,
    parent: Option<usize>,
    /// The text of `file`: the items' spans index into it.
    src: Rc<str>,
    /// The module's docs (`//!` in its file, or the docs of an inline `mod`).
    docs: String,
    items: Vec<syn::Item>,
}

impl Module {
    /// `conn::data`; empty for the crate root.
    pub fn name(&self) -> String {
        self.path.join("::")
    }

    /// Its items as parsed, `#[cfg(test)]` ones included (the tree leaves
    /// out only `#[cfg(test)]` modules); an inline module's are those inside
    /// its braces (its parent's items hold them too, as a `mod` item with
    /// content). For tools that walk the code (tests/module_graph.rs).
    pub fn items(&self) -> &[syn::Item] {
        &self.items
    }

    /// The text of [`Module::file`]: the items' spans index into it.
    pub fn source(&self) -> &str {
        &self.src
    }
}

/// What a `use` path names.
enum Target {
    Module(usize),
    /// An item (or a name brought in by a `use`) in a module.
    Item(usize, String),
}

/// One name a `use` brings in: its path (`conn::Conn`) and the name it is
/// bound to (`Conn`, or the `as` name; `None` for a glob, `conn::*`).
struct UseLeaf {
    segs: Vec<String>,
    bound: Option<String>,
}

fn use_leaves(tree: &syn::UseTree, prefix: &mut Vec<String>, out: &mut Vec<UseLeaf>) {
    use syn::ext::IdentExt;
    let leaf = |prefix: &[String], name: String, bound: String| {
        let mut segs = prefix.to_vec();
        if name != "self" {
            segs.push(name);
        }
        UseLeaf { segs, bound: Some(bound) }
    };
    match tree {
        syn::UseTree::Path(p) => {
            prefix.push(p.ident.unraw().to_string());
            use_leaves(&p.tree, prefix, out);
            prefix.pop();
        }
        syn::UseTree::Name(n) => {
            let name = n.ident.unraw().to_string();
            let bound = if name == "self" { prefix.last().cloned().unwrap_or_default() } else { name.clone() };
            out.push(leaf(prefix, name, bound));
        }
        syn::UseTree::Rename(r) => out.push(leaf(prefix, r.ident.unraw().to_string(), r.rename.unraw().to_string())),
        syn::UseTree::Glob(_) => out.push(UseLeaf { segs: prefix.clone(), bound: None }),
        syn::UseTree::Group(g) => {
            for t in &g.items {
                use_leaves(t, prefix, out);
            }
        }
    }
}

/// A crate's module tree, read from its `lib.rs` along the `mod`
/// declarations, and what of it is public.
///
/// Privacy comes from the declarations. A module is public when it is
/// declared `pub mod` on the whole way from `lib.rs`, or when a public
/// module re-exports it (`pub use`). A function or type is public when it
/// is `pub` in a public module, or `pub` and re-exported by a `pub use` of a
/// public module (`pub use conn::Conn` in `lib.rs` makes `Conn` public even
/// when `conn` is private; chains of `use` and globs are followed). The
/// `pub` methods of a public type are public wherever their `impl` block
/// is, as rustc has it: a folder module may spread `impl Conn` over
/// `conn/*.rs`, private files included. `#[cfg(test)]` modules are left out.
pub struct Tree {
    /// The modules, `lib.rs` first, each before the ones it declares, in
    /// declaration order.
    pub modules: Vec<Module>,
    index: HashMap<Vec<String>, usize>,
    /// Modules made public by a `pub use` of the module itself.
    reexported: Vec<bool>,
    /// `(module, name)` of the items re-exported from elsewhere, and the
    /// public path they are re-exported as (the first one found).
    exported: BTreeMap<(usize, String), String>,
}

impl Tree {
    /// Reads the crate whose sources are in `src` (`src/lib.rs` first).
    ///
    /// # Errors
    /// A file that does not parse, a declared module without a file or with
    /// two (`x.rs` and `x/mod.rs`).
    pub fn load(src: &Path) -> Result<Tree, String> {
        let mut modules = Vec::new();
        let (text, file) = read_source(&src.join("lib.rs"))?;
        let root = Module {
            path: Vec::new(),
            file: src.join("lib.rs"),
            declared_public: true,
            pub_decl: true,
            parent: None,
            src: text,
            docs: inner_docs(&file.attrs),
            items: file.items,
        };
        add_module(root, src.to_path_buf(), &mut modules)?;
        let index = modules.iter().enumerate().map(|(i, m)| (m.path.clone(), i)).collect();
        let reexported = vec![false; modules.len()];
        let mut t = Tree { modules, index, reexported, exported: BTreeMap::new() };
        t.find_exports();
        Ok(t)
    }

    /// Whether module `m`'s public items are reachable from outside.
    pub fn is_public(&self, m: usize) -> bool {
        let md = &self.modules[m];
        self.reexported[m] || md.parent.is_none_or(|p| md.pub_decl && self.is_public(p))
    }

    /// The public path (`conn::Conn`, `Conn`) of the `pub` item `name` of
    /// module `m`, if it is reachable from outside the crate.
    pub fn public_path(&self, m: usize, name: &str) -> Option<String> {
        if self.is_public(m) {
            let mut p = self.modules[m].path.clone();
            p.push(name.to_string());
            return Some(p.join("::"));
        }
        self.exported.get(&(m, name.to_string())).cloned()
    }

    /// The public path of the type `name` declared in any module (for an
    /// `impl` block in a private module other than the type's own).
    pub fn type_path(&self, name: &str) -> Option<String> {
        // Re-exported at the crate root: the short path.
        let root = self.index.get(&Vec::new()).copied();
        if root.is_some_and(|r| self.uses(r, true).iter().any(|u| u.bound.as_deref() == Some(name))) {
            return Some(name.to_string());
        }
        self.modules.iter().enumerate().find_map(|(mi, m)| {
            let declared = m.items.iter().any(|it| {
                matches!(it, syn::Item::Struct(_) | syn::Item::Enum(_) | syn::Item::Union(_) | syn::Item::Type(_))
                    && item_is_pub(it)
                    && item_name(it).as_deref() == Some(name)
            });
            if declared {
                self.public_path(mi, name)
            } else {
                None
            }
        })
    }

    /// The names of the public types (structs, enums, unions, aliases).
    pub fn public_types(&self) -> BTreeSet<String> {
        let mut out = BTreeSet::new();
        for (mi, m) in self.modules.iter().enumerate() {
            for it in &m.items {
                let is_type =
                    matches!(it, syn::Item::Struct(_) | syn::Item::Enum(_) | syn::Item::Union(_) | syn::Item::Type(_));
                if let (true, true, Some(n)) = (is_type, item_is_pub(it), item_name(it)) {
                    if self.public_path(mi, &n).is_some() {
                        out.insert(n);
                    }
                }
            }
        }
        out
    }

    fn child(&self, m: usize, name: &str) -> Option<usize> {
        let mut p = self.modules[m].path.clone();
        p.push(name.to_string());
        self.index.get(&p).copied()
    }

    /// The `use` leaves of module `m` (only the `pub use` ones if `only_pub`);
    /// paths from outside the crate (`::x`) are left out.
    fn uses(&self, m: usize, only_pub: bool) -> Vec<UseLeaf> {
        let mut out = Vec::new();
        for it in &self.modules[m].items {
            if let syn::Item::Use(u) = it {
                if u.leading_colon.is_none() && (!only_pub || is_pub(&u.vis)) {
                    use_leaves(&u.tree, &mut Vec::new(), &mut out);
                }
            }
        }
        out
    }

    /// What the `use` path `segs`, written in module `from`, names inside
    /// the crate (`None` for other crates).
    fn resolve(&self, from: usize, segs: &[String]) -> Option<Target> {
        let (mut at, rest) = match segs.first()?.as_str() {
            "crate" => (0, &segs[1..]),
            "self" => (from, &segs[1..]),
            "super" => {
                let mut at = from;
                let n = segs.iter().take_while(|s| *s == "super").count();
                for _ in 0..n {
                    at = self.modules[at].parent?;
                }
                (at, &segs[n..])
            }
            _ => (from, segs),
        };
        let Some((last, mods)) = rest.split_last() else { return Some(Target::Module(at)) };
        for s in mods {
            at = self.child(at, s)?;
        }
        Some(match self.child(at, last) {
            Some(c) => Target::Module(c),
            None => Target::Item(at, last.clone()),
        })
    }

    /// Where the item `name`, as seen in module `m`, is defined: `m` itself,
    /// or where the `use`s of `m` lead.
    fn definition(&self, m: usize, name: &str, depth: usize) -> Option<(usize, String)> {
        if depth > 16 {
            return None;
        }
        if self.modules[m].items.iter().any(|i| item_name(i).as_deref() == Some(name)) {
            return Some((m, name.to_string()));
        }
        for leaf in self.uses(m, false) {
            let found = match (&leaf.bound, self.resolve(m, &leaf.segs)) {
                (Some(b), Some(Target::Item(m2, n2))) if b == name => self.definition(m2, &n2, depth + 1),
                (None, Some(Target::Module(q))) => self.definition(q, name, depth + 1),
                _ => None,
            };
            if found.is_some() {
                return found;
            }
        }
        None
    }

    /// Follows the `pub use`s of the public modules until nothing changes.
    fn find_exports(&mut self) {
        loop {
            let mut changed = false;
            for m in 0..self.modules.len() {
                if !self.is_public(m) {
                    continue;
                }
                for leaf in self.uses(m, true) {
                    let names: Vec<(usize, String, String)> = match (self.resolve(m, &leaf.segs), &leaf.bound) {
                        (Some(Target::Module(q)), Some(_)) => {
                            changed |= !self.reexported[q];
                            self.reexported[q] = true;
                            continue;
                        }
                        (Some(Target::Module(q)), None) => {
                            // A glob: the public items of q and q's own `pub use`s.
                            let mut names: Vec<String> =
                                self.modules[q].items.iter().filter(|i| item_is_pub(i)).filter_map(item_name).collect();
                            names.extend(self.uses(q, true).into_iter().filter_map(|l| l.bound));
                            names.into_iter().map(|n| (q, n.clone(), n)).collect()
                        }
                        (Some(Target::Item(m2, n2)), Some(b)) => vec![(m2, n2, b.clone())],
                        _ => continue,
                    };
                    for (from, name, bound) in names {
                        let Some(def) = self.definition(from, &name, 0) else { continue };
                        let mut p = self.modules[m].path.clone();
                        p.push(bound);
                        if let std::collections::btree_map::Entry::Vacant(e) = self.exported.entry(def) {
                            e.insert(p.join("::"));
                            changed = true;
                        }
                    }
                }
            }
            if !changed {
                break;
            }
        }
    }
}

fn read_source(file: &Path) -> Result<(Rc<str>, syn::File), String> {
    let text: Rc<str> = fs::read_to_string(file).map_err(|e| format!("{}: {e}", file.display()))?.into();
    let parsed = syn::parse_file(&text).map_err(|e| format!("{}: {e}", file.display()))?;
    Ok((text, parsed))
}

/// Adds `m` and, recursively, the modules it declares; `dir` is where the
/// files of its child modules are (`src/conn/` for `src/conn.rs` as for
/// `src/conn/mod.rs`, `src/` for `lib.rs`).
fn add_module(m: Module, dir: PathBuf, out: &mut Vec<Module>) -> Result<(), String> {
    use syn::ext::IdentExt;
    let me = out.len();
    let decls: Vec<syn::ItemMod> = m
        .items
        .iter()
        .filter_map(|i| match i {
            syn::Item::Mod(x) if !is_cfg_test(&x.attrs) => Some(x.clone()),
            _ => None,
        })
        .collect();
    let (file, path, public, src) = (m.file.clone(), m.path.clone(), m.declared_public, m.src.clone());
    out.push(m);
    for decl in decls {
        let name = decl.ident.unraw().to_string();
        let mut child = path.clone();
        child.push(name.clone());
        let pub_decl = is_pub(&decl.vis);
        if let Some((_, items)) = decl.content {
            let m = Module {
                path: child,
                file: file.clone(),
                declared_public: public && pub_decl,
                pub_decl,
                parent: Some(me),
                src: src.clone(),
                docs: docs_of(&decl.attrs).0,
                items,
            };
            add_module(m, dir.join(&name), out)?;
            continue;
        }
        let (f, child_dir) = match path_attr(&decl.attrs) {
            Some(p) => {
                let f = file.parent().unwrap_or(Path::new(".")).join(p);
                let d = f.parent().unwrap_or(Path::new(".")).to_path_buf();
                (f, d)
            }
            None => {
                let flat = dir.join(format!("{name}.rs"));
                let folder = dir.join(&name).join("mod.rs");
                let f = match (flat.is_file(), folder.is_file()) {
                    (true, false) => flat,
                    (false, true) => folder,
                    (true, true) => {
                        return Err(format!(
                            "{}: module {name} is both {} and {}",
                            file.display(),
                            flat.display(),
                            folder.display()
                        ))
                    }
                    (false, false) => {
                        return Err(format!(
                            "{}: module {name}: neither {} nor {} exists",
                            file.display(),
                            flat.display(),
                            folder.display()
                        ))
                    }
                };
                (f, dir.join(&name))
            }
        };
        let (text, parsed) = read_source(&f)?;
        let m = Module {
            path: child,
            file: f,
            declared_public: public && pub_decl,
            pub_decl,
            parent: Some(me),
            src: text,
            docs: inner_docs(&parsed.attrs),
            items: parsed.items,
        };
        add_module(m, child_dir, out)?;
    }
    Ok(())
}

/// The first doc example of each public type (and `mod NAME` of each
/// module), for operations without one.
///
/// # Errors
/// As [`Tree::load`].
pub fn type_examples(root: &Path) -> Result<BTreeMap<String, String>, String> {
    type_examples_in(&root.join(SRC))
}

/// [`type_examples`] of the sources in `src` (the directory of `lib.rs`).
///
/// # Errors
/// As [`Tree::load`].
pub fn type_examples_in(src: &Path) -> Result<BTreeMap<String, String>, String> {
    let tree = Tree::load(src)?;
    let mut out = BTreeMap::new();
    for m in &tree.modules {
        let (_, blocks) = split_code(&clean(&m.docs));
        if let Some(b) = blocks.into_iter().next() {
            out.insert(format!("mod {}", m.name()), b);
        }
        for it in &m.items {
            let (name, attrs) = match it {
                syn::Item::Struct(x) if is_pub(&x.vis) => (x.ident.to_string(), &x.attrs),
                syn::Item::Enum(x) if is_pub(&x.vis) => (x.ident.to_string(), &x.attrs),
                _ => continue,
            };
            let (_, blocks) = split_code(&clean(&docs_of(attrs).0));
            if let Some(b) = blocks.into_iter().next() {
                out.entry(name).or_insert(b);
            }
        }
    }
    Ok(out)
}

/// Every public operation of the library, by page name.
///
/// # Errors
/// A message naming a file that does not parse, or a public item without
/// documentation.
pub fn items(root: &Path) -> Result<BTreeMap<String, Item>, String> {
    items_in(&root.join(SRC))
}

/// [`items`] of the sources in `src` (the directory of `lib.rs`).
///
/// # Errors
/// As [`items`].
pub fn items_in(src: &Path) -> Result<BTreeMap<String, Item>, String> {
    let tree = Tree::load(src)?;
    let types = tree.public_types();
    // Item macros are read from any module (a `macro_rules!` is textually
    // scoped to the modules after it).
    let macros: Vec<(&syn::ItemMacro, &str)> = tree
        .modules
        .iter()
        .flat_map(|m| {
            m.items.iter().filter_map(move |it| match it {
                syn::Item::Macro(d) if d.ident.is_some() => Some((d, &*m.src)),
                _ => None,
            })
        })
        .collect();
    let mut out = BTreeMap::new();
    for (mi, m) in tree.modules.iter().enumerate() {
        let (module, text) = (m.name(), &*m.src);
        for it in &m.items {
            match it {
                syn::Item::Fn(func) if is_pub(&func.vis) => {
                    let name = func.sig.ident.to_string();
                    let Some(path) = tree.public_path(mi, &name) else { continue };
                    let (docs, hidden) = docs_of(&func.attrs);
                    if hidden {
                        continue;
                    }
                    let page_module = path.rsplit_once("::").map_or(String::new(), |(p, _)| p.replace("::", "_"));
                    let page = page_name(&page_module, None, &name);
                    let signature = slice(text, func.vis.span(), func.block.brace_token.span.open());
                    add(
                        &mut out,
                        Item {
                            page,
                            path,
                            ty: None,
                            use_path: None,
                            module: module.clone(),
                            signature,
                            impl_header: None,
                            docs,
                            fallible: returns_result(&func.sig),
                        },
                        &m.file,
                    )?;
                }
                syn::Item::Impl(imp) if imp.trait_.is_none() => {
                    let syn::Type::Path(tp) = &*imp.self_ty else { continue };
                    let Some(last) = tp.path.segments.last() else { continue };
                    let ty = last.ident.to_string();
                    if !types.contains(&ty) {
                        continue;
                    }
                    // `impl super::Conn` (in conn/data.rs) is `impl Conn` to the reader.
                    let header = slice(text, imp.impl_token.span, imp.brace_token.span.open());
                    let header = match tp.path.segments.len() {
                        1 if tp.path.leading_colon.is_none() => header,
                        n => {
                            let prefix: Vec<String> =
                                tp.path.segments.iter().take(n - 1).map(|s| s.ident.to_string()).collect();
                            let lead = if tp.path.leading_colon.is_some() { "::" } else { "" };
                            header.replacen(&format!("{lead}{}::{ty}", prefix.join("::")), &ty, 1)
                        }
                    };
                    let expanded = expand_item_macros(&macros, &imp.items);
                    let own = imp.items.iter().map(|ii| (ii, text));
                    for (ii, text) in own.chain(expanded.iter().map(|(ii, t)| (ii, *t))) {
                        let syn::ImplItem::Fn(f) = ii else { continue };
                        if !is_pub(&f.vis) {
                            continue;
                        }
                        let (docs, hidden) = docs_of(&f.attrs);
                        if hidden {
                            continue;
                        }
                        let name = f.sig.ident.to_string();
                        let page = page_name(&module.replace("::", "_"), Some(&ty), &name);
                        let signature = slice(text, f.vis.span(), f.block.brace_token.span.open());
                        add(
                            &mut out,
                            Item {
                                page,
                                path: format!("{ty}::{name}"),
                                ty: Some(ty.clone()),
                                use_path: Some(
                                    tree.public_path(mi, &ty)
                                        .or_else(|| tree.type_path(&ty))
                                        .unwrap_or_else(|| ty.clone()),
                                ),
                                module: module.clone(),
                                signature,
                                impl_header: Some(header.clone()),
                                docs,
                                fallible: returns_result(&f.sig),
                            },
                            &m.file,
                        )?;
                    }
                }
                _ => {}
            }
        }
    }
    Ok(out)
}

/// The methods an `impl` block gets from its invocations of a
/// `macro_rules!` of the crate (one arm of `$name:tt` parameters, as
/// rpma's `ops` setters): the arm's body with the invocation's tokens put in,
/// read as methods, each with the text of the file defining the macro (their
/// spans are the macro's, so signatures come from that text).
fn expand_item_macros<'t>(
    macros: &[(&syn::ItemMacro, &'t str)],
    impl_items: &[syn::ImplItem],
) -> Vec<(syn::ImplItem, &'t str)> {
    use proc_macro2::{Delimiter, Group, TokenStream, TokenTree};
    fn subst(ts: TokenStream, params: &[(String, Vec<TokenTree>)]) -> TokenStream {
        let mut out = Vec::new();
        let mut it = ts.into_iter().peekable();
        while let Some(t) = it.next() {
            match t {
                TokenTree::Punct(p) if p.as_char() == '$' => {
                    let arg = match it.peek() {
                        Some(TokenTree::Ident(i)) => params.iter().find(|(n, _)| i == n).map(|(_, a)| a),
                        _ => None,
                    };
                    match arg {
                        Some(arg) => {
                            out.extend(arg.iter().cloned());
                            it.next();
                        }
                        None => out.push(TokenTree::Punct(p)),
                    }
                }
                TokenTree::Group(g) => {
                    let mut ng = Group::new(g.delimiter(), subst(g.stream(), params));
                    ng.set_span(g.span());
                    out.push(TokenTree::Group(ng));
                }
                t => out.push(t),
            }
        }
        out.into_iter().collect()
    }
    let mut out = Vec::new();
    for ii in impl_items {
        let syn::ImplItem::Macro(call) = ii else { continue };
        let Some(name) = call.mac.path.get_ident() else { continue };
        let Some(&(def, def_text)) = macros.iter().find(|(d, _)| d.ident.as_ref() == Some(name)) else { continue };
        let arm: Vec<TokenTree> = def.mac.tokens.clone().into_iter().collect();
        let (Some(TokenTree::Group(matcher)), Some(TokenTree::Group(body))) = (arm.first(), arm.get(3)) else {
            continue;
        };
        // `$a:tt, $b:tt`: the names, each bound to one argument.
        let names: Vec<String> = matcher
            .stream()
            .into_iter()
            .collect::<Vec<_>>()
            .windows(2)
            .filter_map(|w| match w {
                [TokenTree::Punct(p), TokenTree::Ident(i)] if p.as_char() == '$' => Some(i.to_string()),
                _ => None,
            })
            .collect();
        let args: Vec<Vec<TokenTree>> = call
            .mac
            .tokens
            .clone()
            .into_iter()
            .collect::<Vec<_>>()
            .split(|t| matches!(t, TokenTree::Punct(p) if p.as_char() == ','))
            .map(<[TokenTree]>::to_vec)
            .collect();
        let params: Vec<(String, Vec<TokenTree>)> = names.into_iter().zip(args).collect();
        let items = subst(body.stream(), &params);
        let mut imp = TokenStream::new();
        imp.extend(["impl", "X"].map(|w| TokenTree::Ident(proc_macro2::Ident::new(w, body.span()))));
        imp.extend([TokenTree::Group(Group::new(Delimiter::Brace, items))]);
        if let Ok(parsed) = syn::parse2::<syn::ItemImpl>(imp) {
            out.extend(parsed.items.into_iter().map(|ii| (ii, def_text)));
        }
    }
    out
}

fn add(out: &mut BTreeMap<String, Item>, item: Item, f: &Path) -> Result<(), String> {
    if item.docs.trim().is_empty() {
        return Err(format!("{}: public item {} has no documentation", f.display(), item.path));
    }
    if let Some(prev) = out.get(&item.page) {
        return Err(format!("page {} would document both {} and {}", item.page, prev.path, item.path));
    }
    out.insert(item.page.clone(), item);
    Ok(())
}

/// Rustdoc Markdown to man-page Markdown: intra-doc links become their
/// text, hidden doctest lines (`# ...`) and doctest attributes go.
pub fn clean(md: &str) -> String {
    let mut out = String::new();
    let mut in_code = false;
    for line in md.lines() {
        let t = line.trim_start();
        if t.starts_with("```") {
            in_code = !in_code;
            out.push_str(if in_code { "```rust\n" } else { "```\n" });
            continue;
        }
        if in_code {
            if t == "#" || t.starts_with("# ") {
                continue;
            }
            out.push_str(line);
            out.push('\n');
            continue;
        }
        if t.starts_with('|') {
            let cells: Vec<String> = t.trim_matches('|').split('|').map(|c| unlink(c.trim())).collect();
            if cells.iter().all(|c| c.chars().all(|ch| ch == '-' || ch == ':')) {
                continue; // the separator row
            }
            if !table_header_done(&out) {
                out.push_str("<!-- table -->\n");
                continue; // the header row: its words are in the text around
            }
            let rest: Vec<&str> = cells[1..].iter().map(String::as_str).filter(|c| !c.is_empty()).collect();
            out.push_str(&format!("- {}: {}\n", cells[0], rest.join("; ")));
            continue;
        }
        out.push_str(&unlink(line));
        out.push('\n');
    }
    out.replace("<!-- table -->\n", "")
}

/// Whether the table being read already had its header row.
fn table_header_done(out: &str) -> bool {
    let last = out.trim_end_matches('\n').rsplit('\n').next().unwrap_or("");
    last.starts_with("- ") || last == "<!-- table -->"
}

/// `[text](target)` → `text`; `[text]` → `text`.
fn unlink(line: &str) -> String {
    let b = line.as_bytes();
    let mut out = String::new();
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'[' {
            if let Some(close) = line[i + 1..].find(']') {
                let text = &line[i + 1..i + 1 + close];
                let after = i + 1 + close + 1;
                if line[after..].starts_with('(') {
                    if let Some(end) = line[after..].find(')') {
                        out.push_str(text);
                        i = after + end + 1;
                        continue;
                    }
                }
                out.push_str(text);
                i = after;
                continue;
            }
        }
        let ch = line[i..].chars().next().unwrap_or(' ');
        out.push(ch);
        i += ch.len_utf8();
    }
    out
}

/// Splits Markdown into the text before the first `# ` heading and the
/// headed sections.
fn sections(md: &str) -> (String, Vec<(String, String)>) {
    let mut intro = String::new();
    let mut secs: Vec<(String, String)> = Vec::new();
    let mut in_code = false;
    for line in md.lines() {
        if line.trim_start().starts_with("```") {
            in_code = !in_code;
        }
        if !in_code && line.starts_with("# ") {
            secs.push((line[2..].trim().to_string(), String::new()));
            continue;
        }
        match secs.last_mut() {
            Some((_, body)) => {
                body.push_str(line);
                body.push('\n');
            }
            None => {
                intro.push_str(line);
                intro.push('\n');
            }
        }
    }
    (intro, secs)
}

/// Takes the code blocks out of `md`.
fn split_code(md: &str) -> (String, Vec<String>) {
    let mut text = String::new();
    let mut blocks = Vec::new();
    let mut cur: Option<String> = None;
    for line in md.lines() {
        if line.trim_start().starts_with("```") {
            match cur.take() {
                Some(mut b) => {
                    b.push_str("```\n");
                    blocks.push(b);
                }
                None => cur = Some("```rust\n".into()),
            }
            continue;
        }
        match &mut cur {
            Some(b) => {
                b.push_str(line);
                b.push('\n');
            }
            None => {
                text.push_str(line);
                text.push('\n');
            }
        }
    }
    (text, blocks)
}

fn first_sentence(md: &str) -> String {
    let para: String = md.split("\n\n").next().unwrap_or("").split_whitespace().collect::<Vec<_>>().join(" ");
    let end = para.find(". ").map(|i| i + 1).unwrap_or(para.len());
    para[..end].trim_end_matches('.').replace('`', "")
}

/// The Markdown of one section-3 page.
pub fn page_markdown(item: &Item, all: &BTreeMap<String, Item>, type_examples: &BTreeMap<String, String>) -> String {
    let docs = clean(&item.docs);
    let (intro, secs) = sections(&docs);
    let (intro_text, mut examples) = split_code(&intro);
    let mut md = String::new();
    md.push_str(&format!("# NAME\n\n{} - {}\n\n", item.page, first_sentence(&intro_text)));
    md.push_str("# SYNOPSIS\n\n```rust\n");
    match (&item.ty, &item.impl_header) {
        (Some(ty), Some(h)) => {
            let ty = item.use_path.as_deref().unwrap_or(ty);
            md.push_str(&format!("use rpma::{ty};\n\n{h} {{\n    {};\n}}\n", item.signature.replace('\n', "\n    ")))
        }
        _ => md.push_str(&format!("// rpma::{}\n{};\n", item.path, item.signature)),
    }
    md.push_str("```\n\n# DESCRIPTION\n\n");
    md.push_str(intro_text.trim());
    md.push_str("\n\n");
    let mut errors = None;
    for (title, body) in &secs {
        let (body_text, blocks) = split_code(body);
        examples.extend(blocks);
        match title.as_str() {
            "Errors" => errors = Some(body_text.trim().to_string()),
            "Examples" | "Example" => {}
            other => md.push_str(&format!("# {}\n\n{}\n\n", other.to_uppercase(), body_text.trim())),
        }
    }
    md.push_str("# ERRORS\n\n");
    match (errors, item.fallible) {
        (Some(e), _) => md.push_str(&e),
        (None, true) => md.push_str("See the error variants in rpma(7)."),
        (None, false) => md.push_str("None: the call does not fail."),
    }
    md.push_str("\n\n# EXAMPLE\n\n");
    let fallback = match &item.ty {
        Some(t) => type_examples.get(t),
        None => type_examples.get(&format!("mod {}", item.module)),
    };
    match examples.first().or(fallback) {
        Some(e) => md.push_str(e),
        None => md.push_str("See rpma(7) and the examples in the rpma repository."),
    }
    md.push_str("\n\n# SEE ALSO\n\n");
    let mut see: Vec<String> = all
        .values()
        .filter(|o| o.ty.is_some() && o.ty == item.ty && o.page != item.page)
        .map(|o| format!("{}(3)", o.page))
        .take(12)
        .collect();
    see.insert(0, "rpma(7)".into());
    md.push_str(&see.join(", "));
    md.push('\n');
    md
}

/// The SETTINGS section of a configuration's page: each setter and getter
/// with its signature and description.
fn settings_section(settings: &[&Item]) -> String {
    let mut md = String::from("# SETTINGS\n\n");
    for i in settings {
        let (intro, _) = sections(&clean(&i.docs));
        let (text, _) = split_code(&intro);
        md.push_str(&format!("**{}**: {}\n\n{}\n\n", i.page, i.signature.replace('\n', " "), text.trim()));
    }
    md
}

/// All pages, by path under `man/`.
///
/// # Errors
/// As [`items`]; a missing `rpma/doc/rpma.7.md`.
pub fn pages(root: &Path) -> Result<BTreeMap<String, String>, String> {
    pages_in(&root.join(SRC))
}

/// [`pages`] of the sources in `src` (the directory of `lib.rs`), with the
/// overview from `src/../doc/rpma.7.md`, where `lib.rs` includes it from.
///
/// # Errors
/// As [`pages`].
pub fn pages_in(src: &Path) -> Result<BTreeMap<String, String>, String> {
    let all = items_in(src)?;
    let examples = type_examples_in(src)?;
    // rpma-capi's exports, next to rpma/src (none when that is not there,
    // e.g. a copy of rpma/src alone).
    let capi_src = src.join("../../rpma-capi/src");
    let capi = if capi_src.exists() { capi::functions(&capi_src)? } else { BTreeMap::new() };
    let mut out = BTreeMap::new();
    // A configuration's setters and getters are documented on its type's
    // page (its constructor's): theirs refers there (`.so`).
    let setting = |i: &Item| {
        matches!(i.ty.as_deref(), Some("ConnCfg" | "SrqCfg" | "PeerCfg"))
            && !matches!(i.path.rsplit("::").next(), Some("new" | "from_descriptor" | "descriptor"))
    };
    for (name, item) in all.iter().filter(|(_, i)| setting(i)) {
        let home = page_name(&item.module, item.ty.as_deref(), "new");
        out.insert(format!("man3/{name}.3"), format!(".so man3/{home}.3\n"));
    }
    for (name, item) in all.iter().filter(|(_, i)| !setting(i)) {
        let mut md = page_markdown(item, &all, &examples);
        if item.path.ends_with("::new") {
            let settings: Vec<&Item> = all.values().filter(|o| setting(o) && o.ty == item.ty).collect();
            if !settings.is_empty() {
                let at = md.find("# ERRORS").unwrap_or(md.len());
                md.insert_str(at, &settings_section(&settings));
            }
        }
        if let Some(f) = capi.get(name) {
            let at = md.rfind("# SEE ALSO").unwrap_or(md.len());
            md.insert_str(at, &capi::section(name, f));
        }
        out.insert(format!("man3/{name}.3"), mandown::convert(&md, &name.to_uppercase(), 3));
    }
    for (name, f) in capi.iter().filter(|(n, _)| !all.contains_key(*n)) {
        out.insert(format!("man3/{name}.3"), mandown::convert(&capi::page(name, f), &name.to_uppercase(), 3));
    }
    let overview = src.join("../doc/rpma.7.md");
    let md = fs::read_to_string(&overview).map_err(|e| format!("{}: {e}", overview.display()))?;
    let mut page = String::from("# NAME\n\nrpma - remote persistent memory access over RDMA, in Rust\n\n");
    page.push_str(&clean(&md).replace("\n## ", "\n# "));
    page.push_str("\n# SEE ALSO\n\n");
    page.push_str(&all.keys().map(|k| format!("{k}(3)")).collect::<Vec<_>>().join(", "));
    page.push('\n');
    out.insert("man7/rpma.7".into(), mandown::convert(&page, "RPMA", 7));
    Ok(out)
}

/// Writes `man/` afresh; returns the number of pages.
///
/// # Errors
/// As [`pages`]; I/O errors writing the files.
pub fn write(root: &Path) -> Result<usize, String> {
    write_to(&root.join(SRC), &root.join("man"))
}

/// Writes the pages of the sources in `src` to `man` (its `man3/` and
/// `man7/` afresh); returns the number of pages.
///
/// # Errors
/// As [`pages`]; I/O errors writing the files.
pub fn write_to(src: &Path, man: &Path) -> Result<usize, String> {
    let pages = pages_in(src)?;
    for sub in ["man3", "man7"] {
        let d = man.join(sub);
        let _ = fs::remove_dir_all(&d);
        fs::create_dir_all(&d).map_err(|e| format!("{}: {e}", d.display()))?;
    }
    for (rel, text) in &pages {
        fs::write(man.join(rel), text).map_err(|e| format!("{rel}: {e}"))?;
    }
    Ok(pages.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_follow_librpma() {
        assert_eq!(page_name("mr", Some("MrLocal"), "reg"), "rpma_mr_reg");
        assert_eq!(page_name("mr", Some("MrLocal"), "descriptor"), "rpma_mr_get_descriptor");
        assert_eq!(page_name("rereg", Some("MrLocal"), "rereg"), "rpma_mr_rereg");
        assert_eq!(page_name("conn", Some("Conn"), "flush"), "rpma_flush");
        assert_eq!(page_name("conn", Some("Conn"), "bind_mw"), "rpma_mw_bind");
        assert_eq!(page_name("conn_cfg", Some("ConnCfg"), "sq_size"), "rpma_conn_cfg_get_sq_size");
        assert_eq!(page_name("conn_cfg", Some("ConnCfg"), "set_sq_size"), "rpma_conn_cfg_set_sq_size");
        assert_eq!(page_name("utils", None, "get_ibv_context"), "rpma_utils_get_ibv_context");
        assert_eq!(page_name("device", None, "get_ibv_context"), "rpma_utils_get_ibv_context");
        assert_eq!(page_name("conn", None, "conn_event_2str"), "rpma_utils_conn_event_2str");
        assert_eq!(page_name("utils", None, "poll_fds"), "rpma_utils_poll_fds");
        assert_eq!(page_name("error", None, "err_2str"), "rpma_err_2str");
        assert_eq!(page_name("log", None, "threshold"), "rpma_log_get_threshold");
        assert_eq!(page_name("memory", Some("AlignedBuf"), "new"), "rpma_aligned_buf_new");
    }

    /// A scratch source tree: `(path, text)` pairs under a fresh directory.
    fn scratch(files: &[(&str, &str)]) -> PathBuf {
        static N: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("rpma-mangen-{}-{n}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        for (rel, text) in files {
            let f = dir.join(rel);
            fs::create_dir_all(f.parent().unwrap()).unwrap();
            fs::write(f, text).unwrap();
        }
        dir
    }

    #[test]
    fn the_tree_is_followed_from_lib_rs() {
        let dir = scratch(&[
            ("lib.rs", "mod conn;\npub mod util;\nmod hidden;\npub use conn::Conn;\npub use hidden::shown;\n"),
            (
                "conn/mod.rs",
                "mod data;\nmod lifecycle;\n/// A connection.\npub struct Conn;\n\
                 impl Conn {\n    /// Makes one.\n    pub fn new() -> Conn {\n        Conn\n    }\n}\n",
            ),
            ("conn/data.rs", "use super::Conn;\nimpl Conn {\n    /// Reads.\n    pub fn read(&self) {}\n    fn helper(&self) {}\n}\n"),
            (
                "conn/lifecycle.rs",
                "impl super::Conn {\n    /// Disconnects.\n    pub fn disconnect(&self) {}\n}\n\
                 /// In a private module, not re-exported.\npub fn internal() {}\n",
            ),
            ("util.rs", "mod inner;\npub mod deep;\n/// Polls.\npub fn poll_fds() {}\n"),
            ("util/inner.rs", "/// Not public.\npub fn secret() {}\n"),
            ("util/deep.rs", "/// Deep.\npub fn probe() {}\n"),
            (
                "hidden.rs",
                "/// Re-exported.\npub fn shown() {}\n/// Not re-exported.\npub fn unseen() {}\n\
                 pub(crate) struct Priv;\nimpl Priv {\n    /// A private type's.\n    pub fn get(&self) {}\n}\n\
                 #[cfg(test)]\nmod tests;\n",
            ),
        ]);
        let items = items_in(&dir).unwrap();
        let got: Vec<(&str, &str)> = items.values().map(|i| (i.page.as_str(), i.path.as_str())).collect();
        assert_eq!(
            got,
            [
                ("rpma_conn_disconnect", "Conn::disconnect"),
                ("rpma_conn_new", "Conn::new"),
                ("rpma_read", "Conn::read"),
                ("rpma_shown", "shown"),
                ("rpma_util_deep_probe", "util::deep::probe"),
                ("rpma_util_poll_fds", "util::poll_fds"),
            ]
        );
        assert_eq!(items["rpma_conn_disconnect"].impl_header.as_deref(), Some("impl Conn"));
        assert_eq!(items["rpma_conn_disconnect"].module, "conn::lifecycle");
        let tree = Tree::load(&dir).unwrap();
        let names: Vec<String> = tree.modules.iter().map(Module::name).collect();
        assert_eq!(names, ["", "conn", "conn::data", "conn::lifecycle", "util", "util::inner", "util::deep", "hidden"]);
        fs::create_dir_all(dir.join("util/deep")).unwrap();
        fs::write(dir.join("util/deep/mod.rs"), "").unwrap();
        let e = items_in(&dir).err().unwrap();
        assert!(e.contains("module deep is both"), "{e}");
        fs::remove_file(dir.join("util/inner.rs")).unwrap();
        fs::remove_dir_all(dir.join("util/deep")).unwrap();
        let e = items_in(&dir).err().unwrap();
        assert!(e.contains("module inner: neither"), "{e}");
        let _ = fs::remove_dir_all(&dir);
    }

    #[test]
    fn links_and_hidden_lines_go() {
        assert_eq!(
            unlink("see [`Conn::read`](crate::Conn::read) and [`Error::Inval`]."),
            "see `Conn::read` and `Error::Inval`."
        );
        let c = clean("text\n```no_run\n# fn x() {}\nlet a = 1;\n```\n");
        assert_eq!(c, "text\n```rust\nlet a = 1;\n```\n");
        let t = clean("| a | b | c |\n|---|---|---|\n| `x` | y | z |\n");
        assert_eq!(t, "- `x`: y; z\n");
    }
}
