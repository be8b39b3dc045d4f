//! The module graph of `rpma` and `rpma-sys` has no cycle, and no file of
//! `rpma/src` is longer than 600 lines without saying why (issue 17).
//!
//! Host-only, std-only and fast: the sources are read as text (comments,
//! strings and `#[cfg(test)]` items blanked out), the modules found from
//! `lib.rs` along the `mod` declarations, and the references between them
//! taken from `use crate::...`, `use super::...`, `use child::...` and
//! `crate::x::...` / `super::x::...` paths anywhere in the code.
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

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// The longest a file of `rpma/src` may be without a reason.
const MAX_LINES: usize = 600;
/// Where the reason must be: "long because: ..." in the first lines.
const REASON_WITHIN: usize = 15;

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

// ---------------------------------------------------------------- lexing

fn is_ident(c: u8) -> bool {
    c.is_ascii_alphanumeric() || c == b'_'
}

/// `src` with comments (doc comments too), string, byte-string, raw-string
/// and char literals replaced by spaces; newlines kept, so offsets and line
/// numbers stay those of the file.
fn strip(src: &str) -> String {
    let b = src.as_bytes();
    let mut out = b.to_vec();
    let blank = |out: &mut Vec<u8>, from: usize, to: usize| {
        for c in &mut out[from..to.min(b.len())] {
            if *c != b'\n' {
                *c = b' ';
            }
        }
    };
    let mut i = 0;
    while i < b.len() {
        let prev_ident = i > 0 && is_ident(b[i - 1]);
        match b[i] {
            b'/' if b.get(i + 1) == Some(&b'/') => {
                let end = src[i..].find('\n').map_or(b.len(), |n| i + n);
                blank(&mut out, i, end);
                i = end;
            }
            b'/' if b.get(i + 1) == Some(&b'*') => {
                let (mut depth, mut j) = (0usize, i);
                while j < b.len() {
                    if b[j..].starts_with(b"/*") {
                        depth += 1;
                        j += 2;
                    } else if b[j..].starts_with(b"*/") {
                        depth -= 1;
                        j += 2;
                        if depth == 0 {
                            break;
                        }
                    } else {
                        j += 1;
                    }
                }
                blank(&mut out, i, j);
                i = j;
            }
            // r"..", r#".."#, br"..": no escapes, closed by " and the hashes.
            b'r' if (!prev_ident || (b[i - 1] == b'b' && (i < 2 || !is_ident(b[i - 2]))))
                && matches!(b.get(i + 1), Some(b'"' | b'#')) =>
            {
                let hashes = b[i + 1..].iter().take_while(|&&c| c == b'#').count();
                if b.get(i + 1 + hashes) != Some(&b'"') {
                    i += 1; // r#ident
                    continue;
                }
                let close = format!("\"{}", "#".repeat(hashes));
                let start = i + 2 + hashes;
                let end = src[start..].find(&close).map_or(b.len(), |n| start + n + close.len());
                blank(&mut out, i, end);
                i = end;
            }
            b'"' => {
                let mut j = i + 1;
                while j < b.len() && b[j] != b'"' {
                    j += if b[j] == b'\\' { 2 } else { 1 };
                }
                blank(&mut out, i, j + 1);
                i = j + 1;
            }
            b'\'' => {
                // A char literal ('x', '\n', '\u{..}', 'é') or a lifetime ('a).
                let end = if b.get(i + 1) == Some(&b'\\') {
                    src[i + 2..].find('\'').map(|n| i + 2 + n + 1)
                } else {
                    let len = src[i + 1..].chars().next().map_or(1, char::len_utf8);
                    (b.get(i + 1 + len) == Some(&b'\'')).then_some(i + 2 + len)
                };
                match end {
                    Some(e) => {
                        blank(&mut out, i, e);
                        i = e;
                    }
                    None => i += 1,
                }
            }
            _ => i += 1,
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The offset of the bracket closing the one at `open` (`{`, `(` or `[`).
fn closing(s: &[u8], open: usize) -> usize {
    let mut depth = 0i32;
    for (k, &c) in s.iter().enumerate().skip(open) {
        match c {
            b'{' | b'(' | b'[' => depth += 1,
            b'}' | b')' | b']' => {
                depth -= 1;
                if depth == 0 {
                    return k;
                }
            }
            _ => {}
        }
    }
    s.len()
}

/// Blanks out every item marked `#[cfg(test)]` (up to its `;` or its
/// closing brace).
fn drop_test_items(s: &mut String) {
    let mut from = 0;
    while let Some(n) = s[from..].find("#[cfg(test)]") {
        let at = from + n;
        let b = s.as_bytes();
        let mut k = at + "#[cfg(test)]".len();
        while k < b.len() && b[k] != b'{' && b[k] != b';' {
            k += if b[k] == b'[' { closing(b, k) - k + 1 } else { 1 }; // other attributes
        }
        let end = if k < b.len() && b[k] == b'{' { closing(b, k) + 1 } else { k + 1 }.min(b.len());
        let blanked: String = s[at..end].chars().map(|c| if c == '\n' { '\n' } else { ' ' }).collect();
        s.replace_range(at..end, &blanked);
        from = end;
    }
}

/// Offsets of the keyword `word` in `s` (not part of a longer identifier).
fn keyword(s: &str, word: &str) -> Vec<usize> {
    let b = s.as_bytes();
    let mut out = Vec::new();
    let mut from = 0;
    while let Some(n) = s[from..].find(word) {
        let at = from + n;
        let end = at + word.len();
        if (at == 0 || !is_ident(b[at - 1])) && (end >= b.len() || !is_ident(b[end])) {
            out.push(at);
        }
        from = end;
    }
    out
}

#[derive(Debug, PartialEq)]
enum Tok {
    Ident(String),
    Colons,
    Open,
    Close,
    Comma,
    Star,
}

fn tokens(s: &str) -> Vec<Tok> {
    let b = s.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            c if is_ident(c) || c == b'$' => {
                let start = i;
                i += 1;
                while i < b.len() && is_ident(b[i]) {
                    i += 1;
                }
                out.push(Tok::Ident(s[start..i].trim_start_matches('$').trim_start_matches("r#").to_string()));
            }
            b':' if b.get(i + 1) == Some(&b':') => {
                out.push(Tok::Colons);
                i += 2;
            }
            b'{' => (out.push(Tok::Open), i += 1).1,
            b'}' => (out.push(Tok::Close), i += 1).1,
            b',' => (out.push(Tok::Comma), i += 1).1,
            b'*' => (out.push(Tok::Star), i += 1).1,
            _ => i += 1,
        }
    }
    out
}

/// The paths a use tree names: `a::{b, c::d as e, f::*}` gives `a::b`,
/// `a::c::d` and `a::f` (a glob names its module), each with the name it
/// binds (`b`, `e`; none for a glob).
fn use_paths(toks: &[Tok]) -> Vec<(Vec<String>, Option<String>)> {
    fn walk(toks: &[Tok], i: &mut usize, prefix: &mut Vec<String>, out: &mut Vec<(Vec<String>, Option<String>)>) {
        let depth = prefix.len();
        loop {
            match toks.get(*i) {
                Some(Tok::Ident(id)) if id == "as" => {
                    *i += 1;
                    if let Some(Tok::Ident(alias)) = toks.get(*i) {
                        if let Some(last) = out.last_mut() {
                            last.1 = Some(alias.clone());
                        }
                        *i += 1;
                    }
                }
                Some(Tok::Ident(id)) => {
                    prefix.push(id.clone());
                    *i += 1;
                    if toks.get(*i) == Some(&Tok::Colons) {
                        *i += 1;
                        continue;
                    }
                    let mut p = prefix.clone();
                    if p.last().map(String::as_str) == Some("self") {
                        p.pop();
                    }
                    let bound = p.last().cloned();
                    out.push((p, bound));
                    prefix.truncate(depth);
                }
                Some(Tok::Star) => {
                    out.push((prefix.clone(), None));
                    prefix.truncate(depth);
                    *i += 1;
                }
                Some(Tok::Open) => {
                    *i += 1;
                    walk(toks, i, prefix, out);
                    prefix.truncate(depth);
                }
                Some(Tok::Comma) => *i += 1,
                Some(Tok::Close) => {
                    *i += 1;
                    return;
                }
                Some(Tok::Colons) => *i += 1, // a leading `::`
                None => return,
            }
        }
    }
    let mut out = Vec::new();
    walk(toks, &mut 0, &mut Vec::new(), &mut out);
    out
}

// ---------------------------------------------------------------- the crate

struct File {
    /// Shown in messages: relative to the repository.
    rel: String,
    /// The module path of the file (empty for `lib.rs`).
    path: Vec<String>,
    text: String,
    stripped: String,
    /// Inline modules: (name, open brace, close brace).
    inline: Vec<(String, usize, usize)>,
}

impl File {
    /// The module path at `offset`: the file's, plus the inline modules
    /// around it.
    fn module_at(&self, offset: usize) -> Vec<String> {
        let mut p = self.path.clone();
        let mut around: Vec<&(String, usize, usize)> =
            self.inline.iter().filter(|(_, o, c)| *o < offset && offset < *c).collect();
        around.sort_by_key(|(_, o, _)| *o);
        p.extend(around.into_iter().map(|(n, ..)| n.clone()));
        p
    }

    fn line(&self, offset: usize) -> (usize, &str) {
        let n = self.text[..offset].matches('\n').count();
        (n + 1, self.text.lines().nth(n).unwrap_or("").trim())
    }
}

/// One reference from a file to a module: where, and the line.
#[derive(Clone)]
struct Evidence {
    rel: String,
    line: usize,
    text: String,
}

struct Crate {
    files: Vec<File>,
    /// Every module path (file and inline modules).
    modules: BTreeSet<Vec<String>>,
    /// The root's `use` bindings: name -> the absolute path it stands for.
    root_uses: BTreeMap<String, Vec<String>>,
}

impl Crate {
    /// Reads the crate whose `lib.rs` is in `src`; `shown` prefixes the
    /// file names in messages.
    fn load(src: &Path, shown: &str) -> Crate {
        let mut c = Crate { files: Vec::new(), modules: BTreeSet::new(), root_uses: BTreeMap::new() };
        c.add(src.join("lib.rs"), format!("{shown}/lib.rs"), Vec::new(), src.to_path_buf(), src, shown);
        let root = &c.files[0];
        for at in keyword(&root.stripped, "use") {
            if !root.module_at(at).is_empty() {
                continue;
            }
            let end = root.stripped[at..].find(';').map_or(root.stripped.len(), |n| at + n);
            for (segs, bound) in use_paths(&tokens(&root.stripped[at + 3..end])) {
                if let (Some(abs), Some(name)) = (c.absolute(&[], &segs), bound) {
                    c.root_uses.insert(name, abs);
                }
            }
        }
        c
    }

    fn add(&mut self, file: PathBuf, rel: String, path: Vec<String>, dir: PathBuf, src: &Path, shown: &str) {
        let text = std::fs::read_to_string(&file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        let mut stripped = strip(&text);
        drop_test_items(&mut stripped);
        let b = stripped.as_bytes();
        let mut inline = Vec::new();
        let mut decls = Vec::new();
        for at in keyword(&stripped, "mod") {
            let rest = &stripped[at + 3..];
            let name: String = rest.trim_start().bytes().take_while(|&c| is_ident(c)).map(char::from).collect();
            let after = at + 3 + (rest.len() - rest.trim_start().len()) + name.len();
            let next = stripped[after..].trim_start();
            if name.is_empty() {
                continue;
            }
            let open = stripped.len() - next.len();
            if next.starts_with('{') {
                inline.push((name, open, closing(b, open)));
            } else if next.starts_with(';') {
                decls.push((name, at));
            }
        }
        self.modules.insert(path.clone());
        let me = File { rel, path: path.clone(), text, stripped, inline };
        let inline_paths: Vec<Vec<String>> = me.inline.iter().map(|(_, o, _)| me.module_at(*o + 1)).collect();
        let decls: Vec<(Vec<String>, String)> = decls.into_iter().map(|(n, at)| (me.module_at(at), n)).collect();
        self.files.push(me);
        self.modules.extend(inline_paths);
        for (at_module, name) in decls {
            // The directory of the declaring module's children: `dir` for
            // the file's own, plus one folder per inline module around.
            let mut d = dir.clone();
            for seg in &at_module[path.len()..] {
                d.push(seg);
            }
            let flat = d.join(format!("{name}.rs"));
            let folder = d.join(&name).join("mod.rs");
            let f = match (flat.is_file(), folder.is_file()) {
                (true, false) => flat,
                (false, true) => folder,
                _ => panic!(
                    "module {name} in {}: need exactly one of {} and {}",
                    dir.display(),
                    flat.display(),
                    folder.display()
                ),
            };
            let rel = format!("{shown}/{}", f.strip_prefix(src).unwrap().display());
            let mut child = at_module.clone();
            child.push(name.clone());
            self.add(f, rel, child, d.join(&name), src, shown);
        }
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
                if !self.modules.contains(&child) {
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
            if self.modules.contains(&next) {
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

    /// The graph: node -> node -> where the references are.
    fn graph(&self) -> BTreeMap<String, BTreeMap<String, Vec<Evidence>>> {
        let node = |p: &[String]| p.first().cloned().unwrap_or_else(|| "crate".into());
        let mut g: BTreeMap<String, BTreeMap<String, Vec<Evidence>>> = BTreeMap::new();
        for f in &self.files {
            g.entry(node(&f.path)).or_default();
            let mut refs: Vec<(usize, Vec<String>)> = Vec::new();
            let mut in_use = Vec::new();
            for at in keyword(&f.stripped, "use") {
                let end = f.stripped[at..].find(';').map_or(f.stripped.len(), |n| at + n);
                in_use.push((at, end));
                let before = f.stripped[..at].trim_end();
                let public = before.ends_with("pub")
                    || (before.ends_with(')') && before.rfind("pub(").is_some_and(|p| before.len() - p < 16));
                if f.path.is_empty() && public && f.module_at(at).is_empty() {
                    continue; // the root's re-exports (see the module docs)
                }
                for (segs, _) in use_paths(&tokens(&f.stripped[at + 3..end])) {
                    refs.push((at, segs));
                }
            }
            for word in ["crate", "super"] {
                for at in keyword(&f.stripped, word) {
                    if in_use.iter().any(|&(s, e)| s < at && at < e) {
                        continue;
                    }
                    let mut segs = Vec::new();
                    let mut k = at;
                    let b = f.stripped.as_bytes();
                    loop {
                        let id: String = f.stripped[k..].bytes().take_while(|&c| is_ident(c)).map(char::from).collect();
                        if id.is_empty() {
                            break;
                        }
                        segs.push(id.clone());
                        k += id.len();
                        if !f.stripped[k..].starts_with("::") {
                            break;
                        }
                        k += 2;
                        if b.get(k) == Some(&b'{') || b.get(k) == Some(&b'<') {
                            break;
                        }
                    }
                    if segs.len() > 1 {
                        refs.push((at, segs));
                    }
                }
            }
            for (at, segs) in refs {
                let here = f.module_at(at);
                let Some(target) = self.absolute(&here, &segs).and_then(|abs| self.module_of(&abs, 0)) else {
                    continue;
                };
                let (from, to) = (node(&f.path), node(&target));
                if from == to {
                    continue;
                }
                let (line, text) = f.line(at);
                g.entry(from).or_default().entry(to).or_default().push(Evidence {
                    rel: f.rel.clone(),
                    line,
                    text: text.to_string(),
                });
            }
        }
        g
    }
}

// ---------------------------------------------------------------- cycles

/// The strongly connected components with more than one node (Tarjan).
fn components(g: &BTreeMap<String, BTreeMap<String, Vec<Evidence>>>) -> Vec<Vec<String>> {
    struct St<'a> {
        g: &'a BTreeMap<String, BTreeMap<String, Vec<Evidence>>>,
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
fn shortest_cycle(g: &BTreeMap<String, BTreeMap<String, Vec<Evidence>>>, comp: &[String], start: &str) -> Vec<String> {
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
/// and a root re-export is found and printed as a path; comments, strings,
/// test code, the root's re-exports and references inside a folder are no
/// edges; a long file needs its reason.
#[test]
fn the_checker_finds_cycles_and_long_files() {
    let dir = std::env::temp_dir().join(format!("rpma-module-graph-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let files: &[(&str, &str)] = &[
        ("lib.rs", "mod a;\nmod b;\npub mod c;\npub use c::Thing;\npub(crate) fn helper() {}\n"),
        ("a.rs", "use crate::b::B;\npub struct A;\n"),
        ("b/mod.rs", "mod inner;\npub struct B;\n"),
        ("b/inner.rs", "use super::*;\nfn f() -> crate::Thing {\n    todo!()\n}\n"),
        (
            "c.rs",
            "use crate::{a::A, helper};\n/// [`crate::b::B`]\nfn s() -> char {\n    let _ = \"crate::b::B\";\n    '\"'\n}\n\
             #[cfg(test)]\nmod tests {\n    use crate::b::B;\n}\npub struct Thing;\n",
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
    assert_eq!(edges, ["a -> b", "b -> c", "c -> a", "c -> crate"]);
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
