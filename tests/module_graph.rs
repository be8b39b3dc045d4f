//! The module graph of `rpma` and `rpma-sys` has no cycle, and no file of
//! `rpma/src` is longer than 600 lines without saying why.
//!
//! Host-only and fast: the sources are parsed with `syn` as rpma-mangen
//! reads them for the man pages ([`rpma_mangen::Tree`]: the modules found
//! from `lib.rs` along the `mod` declarations, inline ones included,
//! `#[cfg(test)]` ones left out), and the references between modules taken
//! from `use crate::...`, `use super::...`, `use child::...` (in function
//! bodies too) and `crate::x::...` / `super::x::...` paths anywhere in the
//! code: types, expressions, patterns, and the tokens of macro calls,
//! `macro_rules!` bodies and attributes. Comments, doc comments and string
//! literals are no code; items marked `#[cfg(test)]` are left out.
//!
//! The rules, and why:
//!
//! * A node is a module, and a module is a file; inline modules belong to
//!   their file. Test code (`#[cfg(test)]` items such as `mod tests`) is left
//!   out: a test may use whatever it needs without making the library's
//!   modules depend on each other.
//! * A folder module and everything below it are one node (`conn/mod.rs`,
//!   `conn/data.rs`, `conn/events.rs` are `conn`). The files of a folder
//!   module are one unit split for reading: they share private items through
//!   `use super::*` (child to parent) and the parent declares and re-exports
//!   its children (parent to child), with `impl Conn` spread over them, so
//!   references inside the folder are that unit's own business. Treating only
//!   "child -> parent via `super`" as allowed would not do: it hides nothing
//!   between the children and the parent, but it would also not see a cycle
//!   through the outside (`conn::data -> srq -> conn`), which collapsing does:
//!   `conn -> srq -> conn`.
//! * The crate root is the node `crate`. Its `pub use` lines are the crate's
//!   table of re-exports, not code of the root that depends on the modules:
//!   they are no edges, and they are looked through instead (`use
//!   crate::Conn` is an edge to `conn`, where `lib.rs` re-exports it from).
//!   A reference to an item defined in `lib.rs` (rpma-sys' `last_error`) is
//!   an edge to `crate`; other code in `lib.rs` has edges like any module.
//!
//! The checker's own test on a scratch crate runs beside the two checks.

use rpma_mangen::Tree;
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use syn::visit::{self, Visit};

/// The longest a file of `rpma/src` may be without a reason.
const MAX_LINES: usize = 600;
/// Where the reason must be: "long because: ..." in the first lines.
const REASON_WITHIN: usize = 15;

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

// ---------------------------------------------------------------- reading

/// `#[cfg(test)]` among `attrs`: test code, no part of the graph.
fn is_cfg_test(attrs: &[syn::Attribute]) -> bool {
    attrs
        .iter()
        .any(|a| a.path().is_ident("cfg") && matches!(&a.meta, syn::Meta::List(l) if l.tokens.to_string() == "test"))
}

/// The attributes of an item.
fn item_attrs(it: &syn::Item) -> &[syn::Attribute] {
    use syn::Item as I;
    match it {
        I::Const(x) => &x.attrs,
        I::Enum(x) => &x.attrs,
        I::ExternCrate(x) => &x.attrs,
        I::Fn(x) => &x.attrs,
        I::ForeignMod(x) => &x.attrs,
        I::Impl(x) => &x.attrs,
        I::Macro(x) => &x.attrs,
        I::Mod(x) => &x.attrs,
        I::Static(x) => &x.attrs,
        I::Struct(x) => &x.attrs,
        I::Trait(x) => &x.attrs,
        I::TraitAlias(x) => &x.attrs,
        I::Type(x) => &x.attrs,
        I::Union(x) => &x.attrs,
        I::Use(x) => &x.attrs,
        _ => &[],
    }
}

/// The paths a use tree names: `a::{b, c::d as e, f::*}` gives `a::b`,
/// `a::c::d` and `a::f` (a glob names its module), each with the name it
/// binds (`b`, `e`; none for a glob).
fn use_paths(tree: &syn::UseTree, prefix: &mut Vec<String>, out: &mut Vec<(Vec<String>, Option<String>)>) {
    use syn::ext::IdentExt;
    let leaf = |prefix: &[String], name: &syn::Ident, rename: Option<&syn::Ident>| {
        let mut segs = prefix.to_vec();
        let name = name.unraw().to_string();
        if name != "self" {
            segs.push(name);
        }
        let bound = rename.map(|r| r.unraw().to_string()).or_else(|| segs.last().cloned());
        (segs, bound)
    };
    match tree {
        syn::UseTree::Path(p) => {
            prefix.push(p.ident.unraw().to_string());
            use_paths(&p.tree, prefix, out);
            prefix.pop();
        }
        syn::UseTree::Name(n) => out.push(leaf(prefix, &n.ident, None)),
        syn::UseTree::Rename(r) => out.push(leaf(prefix, &r.ident, Some(&r.rename))),
        syn::UseTree::Glob(_) => out.push((prefix.clone(), None)),
        syn::UseTree::Group(g) => {
            for t in &g.items {
                use_paths(t, prefix, out);
            }
        }
    }
}

/// What makes a reference, in the order a node's evidence lists them.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Kind {
    Use,
    Crate,
    Super,
}

/// One path written in a module that may lead to another module.
struct Ref {
    kind: Kind,
    /// Byte offset in the file, and line (from 1).
    offset: usize,
    line: usize,
    /// The module it is written in.
    module: Vec<String>,
    segs: Vec<String>,
}

/// Collects the references of one module's code: its `use` items (in
/// function bodies too) and every `crate::...` / `super::...` path
/// (types, expressions, patterns, macro paths, and the tokens of macro
/// calls, `macro_rules!` bodies and attributes), leaving out items marked
/// `#[cfg(test)]`.
struct Refs {
    module: Vec<String>,
    out: Vec<Ref>,
}

impl Refs {
    fn push(&mut self, kind: Kind, at: proc_macro2::Span, segs: Vec<String>) {
        let (offset, line) = (at.byte_range().start, at.start().line);
        self.out.push(Ref { kind, offset, line, module: self.module.clone(), segs });
    }

    /// `crate::a::b` / `super::a` (also `$crate::a`) in unparsed tokens.
    fn tokens(&mut self, ts: proc_macro2::TokenStream) {
        use proc_macro2::{Spacing, TokenTree as T};
        use syn::ext::IdentExt;
        let colons = |a: Option<&T>, b: Option<&T>| {
            matches!((a, b), (Some(T::Punct(a)), Some(T::Punct(b)))
                if a.as_char() == ':' && a.spacing() == Spacing::Joint && b.as_char() == ':')
        };
        let toks: Vec<T> = ts.into_iter().collect();
        for (k, t) in toks.iter().enumerate() {
            match t {
                T::Group(g) => self.tokens(g.stream()),
                T::Ident(id) if id == "crate" || id == "super" => {
                    if k >= 2 && colons(toks.get(k - 2), toks.get(k - 1)) {
                        continue; // `super::super`: part of the path before
                    }
                    let mut segs = vec![id.to_string()];
                    let mut j = k + 1;
                    while colons(toks.get(j), toks.get(j + 1)) {
                        let Some(T::Ident(next)) = toks.get(j + 2) else { break };
                        segs.push(next.unraw().to_string());
                        j += 3;
                    }
                    if segs.len() > 1 {
                        let kind = if id == "crate" { Kind::Crate } else { Kind::Super };
                        self.push(kind, id.span(), segs);
                    }
                }
                _ => {}
            }
        }
    }
}

impl<'ast> Visit<'ast> for Refs {
    fn visit_item(&mut self, it: &'ast syn::Item) {
        if is_cfg_test(item_attrs(it)) {
            return;
        }
        if let syn::Item::Use(u) = it {
            let mut paths = Vec::new();
            use_paths(&u.tree, &mut Vec::new(), &mut paths);
            for (segs, _) in paths {
                self.push(Kind::Use, u.use_token.span, segs);
            }
            return;
        }
        visit::visit_item(self, it);
    }

    fn visit_impl_item(&mut self, it: &'ast syn::ImplItem) {
        let attrs = match it {
            syn::ImplItem::Const(x) => &x.attrs,
            syn::ImplItem::Fn(x) => &x.attrs,
            syn::ImplItem::Type(x) => &x.attrs,
            syn::ImplItem::Macro(x) => &x.attrs,
            _ => &Vec::new(),
        };
        if !is_cfg_test(attrs) {
            visit::visit_impl_item(self, it);
        }
    }

    fn visit_trait_item(&mut self, it: &'ast syn::TraitItem) {
        let attrs = match it {
            syn::TraitItem::Const(x) => &x.attrs,
            syn::TraitItem::Fn(x) => &x.attrs,
            syn::TraitItem::Type(x) => &x.attrs,
            syn::TraitItem::Macro(x) => &x.attrs,
            _ => &Vec::new(),
        };
        if !is_cfg_test(attrs) {
            visit::visit_trait_item(self, it);
        }
    }

    fn visit_local(&mut self, l: &'ast syn::Local) {
        if !is_cfg_test(&l.attrs) {
            visit::visit_local(self, l);
        }
    }

    fn visit_stmt_macro(&mut self, m: &'ast syn::StmtMacro) {
        if !is_cfg_test(&m.attrs) {
            visit::visit_stmt_macro(self, m);
        }
    }

    fn visit_field(&mut self, f: &'ast syn::Field) {
        if !is_cfg_test(&f.attrs) {
            visit::visit_field(self, f);
        }
    }

    fn visit_variant(&mut self, v: &'ast syn::Variant) {
        if !is_cfg_test(&v.attrs) {
            visit::visit_variant(self, v);
        }
    }

    fn visit_arm(&mut self, a: &'ast syn::Arm) {
        if !is_cfg_test(&a.attrs) {
            visit::visit_arm(self, a);
        }
    }

    fn visit_path(&mut self, p: &'ast syn::Path) {
        let first = p.segments.first().map(|s| s.ident.to_string());
        if let (None, Some(kind)) = (
            p.leading_colon,
            first.as_deref().and_then(|f| match f {
                "crate" => Some(Kind::Crate),
                "super" => Some(Kind::Super),
                _ => None,
            }),
        ) {
            // Up to the first segment with arguments (`crate::a::B::<T>`):
            // what follows is inside a type, not a module.
            let mut segs = Vec::new();
            for s in &p.segments {
                segs.push(syn::ext::IdentExt::unraw(&s.ident).to_string());
                if !s.arguments.is_none() {
                    break;
                }
            }
            if segs.len() > 1 {
                self.push(kind, p.segments[0].ident.span(), segs);
            }
        }
        visit::visit_path(self, p);
    }

    fn visit_macro(&mut self, m: &'ast syn::Macro) {
        visit::visit_macro(self, m);
        self.tokens(m.tokens.clone());
    }

    fn visit_meta_list(&mut self, m: &'ast syn::MetaList) {
        visit::visit_meta_list(self, m);
        self.tokens(m.tokens.clone());
    }
}

// ---------------------------------------------------------------- the crate

/// One reference from a file to a module: where, and the line.
#[derive(Clone)]
struct Evidence {
    rel: String,
    line: usize,
    text: String,
}

type Graph = BTreeMap<String, BTreeMap<String, Vec<Evidence>>>;

struct Crate {
    /// The modules as rustc finds them (rpma-mangen's reading: `mod`
    /// declarations from `lib.rs`, inline modules, `#[cfg(test)]` modules
    /// left out).
    tree: Tree,
    /// Where the crate's files are, and how to show that in messages.
    src: PathBuf,
    shown: String,
    /// Every module path (file and inline modules) -> its node.
    nodes: BTreeMap<Vec<String>, String>,
    /// The root's `use` bindings: name -> the absolute path it stands for.
    root_uses: BTreeMap<String, Vec<String>>,
}

impl Crate {
    /// Reads the crate whose `lib.rs` is in `src`; `shown` prefixes the
    /// file names in messages.
    fn load(src: &Path, shown: &str) -> Crate {
        let tree = Tree::load(src).unwrap_or_else(|e| panic!("reading {shown}: {e}"));
        let lib = tree.modules[0].file.clone();
        // A folder module and everything below it are one node; inline
        // modules belong to their file, so those of lib.rs are `crate`.
        let nodes = tree
            .modules
            .iter()
            .map(|m| {
                let node = if m.file == lib { "crate".to_string() } else { m.path[0].clone() };
                (m.path.clone(), node)
            })
            .collect();
        let mut c = Crate { tree, src: src.to_path_buf(), shown: shown.to_string(), nodes, root_uses: BTreeMap::new() };
        let mut leaves = Vec::new();
        for it in c.tree.modules[0].items() {
            if let syn::Item::Use(u) = it {
                if !is_cfg_test(&u.attrs) {
                    use_paths(&u.tree, &mut Vec::new(), &mut leaves);
                }
            }
        }
        for (segs, bound) in leaves {
            if let (Some(abs), Some(name)) = (c.absolute(&[], &segs), bound) {
                c.root_uses.insert(name, abs);
            }
        }
        c
    }

    fn is_module(&self, path: &[String]) -> bool {
        self.nodes.contains_key(path)
    }

    /// `segs` (a path written in module `at`) from the crate root, when it
    /// is inside the crate.
    fn absolute(&self, at: &[String], segs: &[String]) -> Option<Vec<String>> {
        let first = segs.first()?;
        Some(match first.as_str() {
            "crate" => segs[1..].to_vec(),
            "self" => [at, &segs[1..]].concat(),
            "super" => {
                let n = segs.iter().take_while(|s| *s == "super").count();
                [at.get(..at.len().checked_sub(n)?)?, &segs[n..]].concat()
            }
            _ => {
                let mut child = at.to_vec();
                child.push(first.clone());
                if !self.is_module(&child) {
                    return None; // another crate (std, libc, rpma_sys), or a local name
                }
                [at, segs].concat()
            }
        })
    }

    /// The module an absolute path leads to: its longest module prefix; a
    /// name the root re-exports is looked through.
    fn module_of(&self, abs: &[String], depth: usize) -> Option<Vec<String>> {
        let mut at: Vec<String> = Vec::new();
        for s in abs {
            let mut next = at.clone();
            next.push(s.clone());
            if self.is_module(&next) {
                at = next;
                continue;
            }
            if at.is_empty() && depth < 8 {
                if let Some(target) = self.root_uses.get(s) {
                    return self.module_of(target, depth + 1);
                }
            }
            break;
        }
        Some(at)
    }

    /// The graph: node -> node -> where the references are (per file, its
    /// `use`s first, then its `crate::` paths, then its `super::` paths).
    fn graph(&self) -> Graph {
        let mut g: Graph = BTreeMap::new();
        // The references of each file (a file holds its inline modules), in
        // the order the files are found.
        let mut files: Vec<(usize, Vec<Ref>)> = Vec::new();
        for (i, m) in self.tree.modules.iter().enumerate() {
            g.entry(self.nodes[&m.path].clone()).or_default();
            let mut refs = Refs { module: m.path.clone(), out: Vec::new() };
            for it in m.items() {
                match it {
                    // An inline module is a module of its own in the tree
                    // (or test code, left out).
                    syn::Item::Mod(x) if x.content.is_some() => {}
                    // The root's re-exports (see the module docs).
                    syn::Item::Use(u) if m.path.is_empty() && !matches!(u.vis, syn::Visibility::Inherited) => {}
                    _ => refs.visit_item(it),
                }
            }
            match files.iter_mut().find(|(f, _)| self.tree.modules[*f].file == m.file) {
                Some((_, out)) => out.extend(refs.out),
                None => files.push((i, refs.out)),
            }
        }
        for (f, mut refs) in files {
            let m = &self.tree.modules[f];
            let rel = format!("{}/{}", self.shown, m.file.strip_prefix(&self.src).unwrap().display());
            refs.sort_by_key(|r| (r.kind, r.offset));
            for r in refs {
                let Some(target) = self.absolute(&r.module, &r.segs).and_then(|abs| self.module_of(&abs, 0)) else {
                    continue;
                };
                let (from, to) = (&self.nodes[&r.module], &self.nodes[&target]);
                if from == to {
                    continue;
                }
                let text = m.source().lines().nth(r.line - 1).unwrap_or("").trim();
                g.entry(from.clone()).or_default().entry(to.clone()).or_default().push(Evidence {
                    rel: rel.clone(),
                    line: r.line,
                    text: text.to_string(),
                });
            }
        }
        g
    }
}

// ---------------------------------------------------------------- cycles

/// The strongly connected components with more than one node (Tarjan).
fn components(g: &Graph) -> Vec<Vec<String>> {
    struct St<'a> {
        g: &'a Graph,
        index: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        stack: Vec<&'a str>,
        on: BTreeSet<&'a str>,
        out: Vec<Vec<String>>,
    }
    fn visit<'a>(st: &mut St<'a>, v: &'a str) {
        let i = st.index.len();
        st.index.insert(v, i);
        st.low.insert(v, i);
        st.stack.push(v);
        st.on.insert(v);
        for w in st.g.get(v).into_iter().flat_map(|m| m.keys()) {
            let w = w.as_str();
            if !st.index.contains_key(w) {
                visit(st, w);
                let lw = st.low[w];
                let lv = st.low.get_mut(v).unwrap();
                *lv = (*lv).min(lw);
            } else if st.on.contains(w) {
                let iw = st.index[w];
                let lv = st.low.get_mut(v).unwrap();
                *lv = (*lv).min(iw);
            }
        }
        if st.low[v] == st.index[v] {
            let mut comp = Vec::new();
            loop {
                let w = st.stack.pop().unwrap();
                st.on.remove(w);
                comp.push(w.to_string());
                if w == v {
                    break;
                }
            }
            if comp.len() > 1 {
                comp.sort();
                st.out.push(comp);
            }
        }
    }
    let mut st =
        St { g, index: BTreeMap::new(), low: BTreeMap::new(), stack: Vec::new(), on: BTreeSet::new(), out: Vec::new() };
    for v in g.keys() {
        if !st.index.contains_key(v.as_str()) {
            visit(&mut st, v);
        }
    }
    st.out.sort();
    st.out
}

/// A shortest cycle through `start` inside `comp`: `[start, ..., start]`.
fn shortest_cycle(g: &Graph, comp: &[String], start: &str) -> Vec<String> {
    let mut prev: BTreeMap<&str, &str> = BTreeMap::new();
    let mut queue = VecDeque::from([start]);
    while let Some(v) = queue.pop_front() {
        for w in g[v].keys().filter(|w| comp.contains(w)) {
            if w == start {
                let mut path = vec![start.to_string()];
                let mut at = v;
                while at != start {
                    path.push(at.to_string());
                    at = prev[at];
                }
                path.push(start.to_string());
                path.reverse();
                return path;
            }
            if !prev.contains_key(w.as_str()) {
                prev.insert(w, v);
                queue.push_back(w);
            }
        }
    }
    unreachable!("{start} is in a strongly connected component")
}

/// The cycles of the crate, one report per component: its members, and a
/// shortest cycle through each member (the same cycle once), each edge with
/// the first place that makes it. Empty when there is none.
fn cycle_report(c: &Crate, name: &str) -> String {
    let g = c.graph();
    let mut out = String::new();
    for comp in components(&g) {
        let _ = writeln!(out, "{name}: modules {} depend on each other:", comp.join(", "));
        let mut seen: BTreeSet<Vec<String>> = BTreeSet::new();
        for start in &comp {
            let cycle = shortest_cycle(&g, &comp, start);
            let mut key = cycle[..cycle.len() - 1].to_vec();
            let min = key.iter().enumerate().min_by_key(|(_, n)| n.as_str()).map_or(0, |(i, _)| i);
            key.rotate_left(min);
            if !seen.insert(key) {
                continue;
            }
            let _ = writeln!(out, "  cycle: {}", cycle.join(" -> "));
            for w in cycle.windows(2) {
                let ev = &g[&w[0]][&w[1]];
                let more = if ev.len() > 1 { format!(" (and {} more)", ev.len() - 1) } else { String::new() };
                let _ = writeln!(out, "    {} -> {}: {}:{}: {}{more}", w[0], w[1], ev[0].rel, ev[0].line, ev[0].text);
            }
        }
    }
    out
}

/// The `.rs` files under `dir` longer than `MAX_LINES` without a line
/// "long because:" in their first `REASON_WITHIN` lines.
fn long_files(dir: &Path, shown: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        let mut entries: Vec<PathBuf> = std::fs::read_dir(&d).unwrap().map(|e| e.unwrap().path()).collect();
        entries.sort();
        for p in entries {
            if p.is_dir() {
                todo.push(p);
            } else if p.extension().is_some_and(|x| x == "rs") {
                let text = std::fs::read_to_string(&p).unwrap();
                let n = text.lines().count();
                if n > MAX_LINES && !text.lines().take(REASON_WITHIN).any(|l| l.contains("long because:")) {
                    out.push(format!("{shown}/{}: {n} lines", p.strip_prefix(dir).unwrap().display()));
                }
            }
        }
    }
    out.sort();
    out
}

// ---------------------------------------------------------------- the tests

#[test]
fn no_module_cycles() {
    let mut report = String::new();
    for (dir, name) in [("rpma-sys/src", "rpma-sys"), ("rpma/src", "rpma")] {
        report.push_str(&cycle_report(&Crate::load(&root().join(dir), dir), name));
    }
    assert!(report.is_empty(), "the module graph has cycles (rules: tests/module_graph.rs):\n{report}");
}

#[test]
fn no_long_files_without_a_reason() {
    let long = long_files(&root().join("rpma/src"), "rpma/src");
    assert!(
        long.is_empty(),
        "files over {MAX_LINES} lines: split them, or say in their first {REASON_WITHIN} lines why not \
         (a line with \"long because: ...\"):\n  {}",
        long.join("\n  ")
    );
}

/// The checker itself, on a scratch crate: a cycle through a folder module
/// and a root re-export is found and printed as a path; a path in a macro
/// call is an edge; comments, strings, test code (a module, a method), the
/// root's re-exports and references inside a folder are no edges; a long
/// file needs its reason.
#[test]
fn the_checker_finds_cycles_and_long_files() {
    let dir = std::env::temp_dir().join(format!("rpma-module-graph-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let files: &[(&str, &str)] = &[
        ("lib.rs", "mod a;\nmod b;\npub mod c;\nmod d;\npub use c::Thing;\npub(crate) fn helper() {}\n"),
        ("a.rs", "use crate::b::B;\npub struct A;\n"),
        ("b/mod.rs", "mod inner;\npub struct B;\n"),
        ("b/inner.rs", "use super::*;\nfn f() -> crate::Thing {\n    todo!()\n}\n"),
        (
            "c.rs",
            "use crate::{a::A, helper};\n/// [`crate::b::B`]\nfn s() -> char {\n    let _ = \"crate::b::B\";\n    '\"'\n}\n\
             #[cfg(test)]\nmod tests {\n    use crate::b::B;\n}\npub struct Thing;\n",
        ),
        (
            "d.rs",
            "struct D;\nimpl D {\n    #[cfg(test)]\n    fn t() -> crate::b::B {\n        todo!()\n    }\n    \
             fn f() {\n        println!(\"{}\", std::any::type_name::<crate::a::A>());\n    }\n}\n",
        ),
    ];
    for (rel, text) in files {
        let f = dir.join(rel);
        std::fs::create_dir_all(f.parent().unwrap()).unwrap();
        std::fs::write(f, text).unwrap();
    }
    let c = Crate::load(&dir, "x");
    let g = c.graph();
    let edges: Vec<String> = g.iter().flat_map(|(a, to)| to.keys().map(move |b| format!("{a} -> {b}"))).collect();
    assert_eq!(edges, ["a -> b", "b -> c", "c -> a", "c -> crate", "d -> a"]);
    let report = cycle_report(&c, "x");
    assert!(report.contains("  cycle: a -> b -> c -> a\n"), "{report}");
    assert!(report.contains("    b -> c: x/b/inner.rs:2: fn f() -> crate::Thing {\n"), "{report}");
    assert_eq!(report.matches("cycle:").count(), 1, "{report}");

    assert!(long_files(&dir, "x").is_empty());
    std::fs::write(dir.join("b/long.rs"), "fn f() {}\n".repeat(MAX_LINES + 1)).unwrap();
    assert_eq!(long_files(&dir, "x"), [format!("x/b/long.rs: {} lines", MAX_LINES + 1)]);
    let reason = format!("//! long because: generated\n{}", "fn f() {}\n".repeat(MAX_LINES));
    std::fs::write(dir.join("b/long.rs"), reason).unwrap();
    assert!(long_files(&dir, "x").is_empty());
    let _ = std::fs::remove_dir_all(&dir);
}
