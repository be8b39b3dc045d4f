//! rpma's man-page generator.
//!
//! One source of truth: the doc comments of `rpma/src/*.rs` (what rustdoc
//! shows) and `rpma/doc/rpma.7.md` (the crate's top-level rustdoc). Every
//! public function and inherent method gets a section-3 page named after
//! its librpma equivalent where one exists (`MrLocal::reg` → `rpma_mr_reg`)
//! and after the Rust item otherwise (`MrLocal::rereg` → `rpma_mr_rereg`),
//! with NAME, SYNOPSIS (the Rust signature as written), DESCRIPTION, ERRORS,
//! EXAMPLE and SEE ALSO. Markdown is turned into roff by `mandown`.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use syn::spanned::Spanned;

/// One public operation found in the sources.
#[derive(Debug, Clone)]
pub struct Item {
    /// The page name (`rpma_mr_reg`).
    pub page: String,
    /// The Rust path (`MrLocal::reg`).
    pub path: String,
    /// The type, for methods.
    pub ty: Option<String>,
    /// The signature as written in the source.
    pub signature: String,
    /// The `impl` header for methods (`impl<M: RegMemory> MrLocal<M>`).
    pub impl_header: Option<String>,
    /// The doc comment, Markdown.
    pub docs: String,
    /// Whether it returns a `Result`.
    pub fallible: bool,
}

/// Private modules: nothing public there has a page.
const PRIVATE: &[&str] = &["wire.rs", "inflight.rs"];

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

/// The page name of `ty::name` (or of the free function `name` in `module`).
pub fn page_name(module: &str, ty: Option<&str>, name: &str) -> String {
    let special = match (ty, name) {
        (
            Some("Conn"),
            "read" | "write" | "write_with_imm" | "atomic_write" | "flush" | "send" | "send_with_imm" | "recv",
        ) => Some(format!("rpma_{name}")),
        (Some("Conn"), "read_unchecked" | "write_unchecked" | "send_with_inv") => Some(format!("rpma_{name}")),
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
            if !n.starts_with("set_") && !matches!(n, "new" | "from_descriptor" | "timeout_duration") =>
        {
            Some(format!("{}_get_{n}", type_prefix(ty.unwrap_or_default())))
        }
        (None, "get_ibv_context" | "get_ibv_context_timeout" | "conn_event_2str" | "conn_event_value_2str")
            if module == "utils" =>
        {
            Some(format!("rpma_utils_{name}"))
        }
        (None, "is_odp_capable") => Some("rpma_utils_ibv_context_is_odp_capable".into()),
        (None, "threshold") if module == "log" => Some("rpma_log_get_threshold".into()),
        (None, n) if module == "log" => Some(format!("rpma_log_{n}")),
        (None, n) if module == "error" => Some(format!("rpma_{n}")),
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

fn slice(src: &str, from: proc_macro2::Span, to: proc_macro2::Span) -> String {
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

/// The crate-level (`//!`) docs of a file.
fn inner_docs(attrs: &[syn::Attribute]) -> String {
    docs_of(&attrs.iter().filter(|a| matches!(a.style, syn::AttrStyle::Inner(_))).cloned().collect::<Vec<_>>()).0
}

/// The first doc example of each public type (and `mod NAME` of each
/// module), for operations without one.
pub fn type_examples(root: &Path) -> Result<BTreeMap<String, String>, String> {
    let dir = root.join("rpma/src");
    let mut out = BTreeMap::new();
    for e in fs::read_dir(&dir).map_err(|e| format!("{}: {e}", dir.display()))? {
        let f = e.map_err(|e| e.to_string())?.path();
        if f.extension().is_none_or(|x| x != "rs") {
            continue;
        }
        let src = fs::read_to_string(&f).map_err(|e| format!("{}: {e}", f.display()))?;
        let file = syn::parse_file(&src).map_err(|e| format!("{}: {e}", f.display()))?;
        let module = f.file_stem().unwrap_or_default().to_string_lossy().to_string();
        let (_, blocks) = split_code(&clean(&inner_docs(&file.attrs)));
        if let Some(b) = blocks.into_iter().next() {
            out.insert(format!("mod {module}"), b);
        }
        for it in &file.items {
            let (name, attrs) = match it {
                syn::Item::Struct(x) if is_pub(&x.vis) => (x.ident.to_string(), &x.attrs),
                syn::Item::Enum(x) if is_pub(&x.vis) => (x.ident.to_string(), &x.attrs),
                _ => continue,
            };
            let (_, blocks) = split_code(&clean(&docs_of(attrs).0));
            if let Some(b) = blocks.into_iter().next() {
                out.insert(name, b);
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
    let dir = root.join("rpma/src");
    let mut files: Vec<PathBuf> = fs::read_dir(&dir)
        .map_err(|e| format!("{}: {e}", dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "rs"))
        .collect();
    files.sort();
    let mut out = BTreeMap::new();
    for f in files {
        let fname = f.file_name().unwrap_or_default().to_string_lossy().to_string();
        if PRIVATE.contains(&fname.as_str()) || fname == "lib.rs" {
            continue;
        }
        let module = fname.trim_end_matches(".rs").to_string();
        let src = fs::read_to_string(&f).map_err(|e| format!("{}: {e}", f.display()))?;
        let file = syn::parse_file(&src).map_err(|e| format!("{}: {e}", f.display()))?;
        for it in &file.items {
            match it {
                syn::Item::Fn(func) if is_pub(&func.vis) => {
                    let (docs, hidden) = docs_of(&func.attrs);
                    if hidden {
                        continue;
                    }
                    let name = func.sig.ident.to_string();
                    let page = page_name(&module, None, &name);
                    let signature = slice(&src, func.vis.span(), func.block.brace_token.span.open());
                    add(
                        &mut out,
                        Item {
                            page,
                            path: format!("{module}::{name}"),
                            ty: None,
                            signature,
                            impl_header: None,
                            docs,
                            fallible: returns_result(&func.sig),
                        },
                        &f,
                    )?;
                }
                syn::Item::Impl(imp) if imp.trait_.is_none() => {
                    let syn::Type::Path(tp) = &*imp.self_ty else { continue };
                    let Some(last) = tp.path.segments.last() else { continue };
                    let ty = last.ident.to_string();
                    let header = slice(&src, imp.impl_token.span, imp.brace_token.span.open());
                    for ii in &imp.items {
                        let syn::ImplItem::Fn(m) = ii else { continue };
                        if !is_pub(&m.vis) {
                            continue;
                        }
                        let (docs, hidden) = docs_of(&m.attrs);
                        if hidden {
                            continue;
                        }
                        let name = m.sig.ident.to_string();
                        let page = page_name(&module, Some(&ty), &name);
                        let signature = slice(&src, m.vis.span(), m.block.brace_token.span.open());
                        add(
                            &mut out,
                            Item {
                                page,
                                path: format!("{ty}::{name}"),
                                ty: Some(ty.clone()),
                                signature,
                                impl_header: Some(header.clone()),
                                docs,
                                fallible: returns_result(&m.sig),
                            },
                            &f,
                        )?;
                    }
                }
                _ => {}
            }
        }
    }
    Ok(out)
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
    let module = item.path.split("::").next().unwrap_or("");
    let fallback = match &item.ty {
        Some(t) => type_examples.get(t),
        None => type_examples.get(&format!("mod {module}")),
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

/// All pages, by path under `man/`.
///
/// # Errors
/// As [`items`]; a missing `rpma/doc/rpma.7.md`.
pub fn pages(root: &Path) -> Result<BTreeMap<String, String>, String> {
    let all = items(root)?;
    let examples = type_examples(root)?;
    let mut out = BTreeMap::new();
    for (name, item) in &all {
        let md = page_markdown(item, &all, &examples);
        out.insert(format!("man3/{name}.3"), mandown::convert(&md, &name.to_uppercase(), 3));
    }
    let overview = root.join("rpma/doc/rpma.7.md");
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
    let pages = pages(root)?;
    let man = root.join("man");
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
        assert_eq!(page_name("error", None, "err_2str"), "rpma_err_2str");
        assert_eq!(page_name("log", None, "threshold"), "rpma_log_get_threshold");
        assert_eq!(page_name("memory", Some("AlignedBuf"), "new"), "rpma_aligned_buf_new");
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
