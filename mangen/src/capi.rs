//! The C ABI's part of the pages: every function rpma-capi exports
//! (`librpma.so.0`) gets a "C ABI" section on the page of its librpma name,
//! or a page of its own where the Rust API has no such function (the
//! `*_delete` calls are `Drop` in Rust).

use std::collections::BTreeMap;
use std::fs;
use std::path::Path;
use syn::spanned::Spanned;

/// One exported C function.
#[derive(Debug, Clone)]
pub struct CFn {
    /// Its Rust declaration (`pub unsafe extern "C" fn ...`), as written, or
    /// as its generating macro call reads.
    pub signature: String,
    /// Its doc comment.
    pub docs: String,
}

fn docs_of(attrs: &[syn::Attribute]) -> String {
    let mut out = Vec::new();
    for a in attrs {
        if let syn::Meta::NameValue(nv) = &a.meta {
            if nv.path.is_ident("doc") {
                if let syn::Expr::Lit(syn::ExprLit { lit: syn::Lit::Str(s), .. }) = &nv.value {
                    out.push(s.value().strip_prefix(' ').map(String::from).unwrap_or_else(|| s.value()));
                }
            }
        }
    }
    out.join("\n")
}

/// The functions rpma-capi exports, by name, from the sources in `src`
/// (`rpma-capi/src`): `extern "C"` functions named `rpma_*`, and those the
/// crate's `cfg_field!` (a setter and a getter) and `conn_get!` (a getter)
/// macros define.
///
/// # Errors
/// Unreadable or unparsable sources.
pub fn functions(src: &Path) -> Result<BTreeMap<String, CFn>, String> {
    let mut out = BTreeMap::new();
    let mut files: Vec<_> = fs::read_dir(src).map_err(|e| format!("{}: {e}", src.display()))?.flatten().collect();
    files.sort_by_key(|e| e.path());
    for f in files {
        let path = f.path();
        let text = fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
        let file = syn::parse_file(&text).map_err(|e| format!("{}: {e}", path.display()))?;
        for item in &file.items {
            match item {
                syn::Item::Fn(f) if f.sig.abi.is_some() && f.sig.ident.to_string().starts_with("rpma_") => {
                    let signature = crate::slice(&text, f.vis.span(), f.block.brace_token.span.open());
                    out.insert(f.sig.ident.to_string(), CFn { signature, docs: docs_of(&f.attrs) });
                }
                syn::Item::Macro(m) => {
                    let name = m.mac.path.segments.last().map(|s| s.ident.to_string()).unwrap_or_default();
                    let args: Vec<String> = split_args(&m.mac.tokens.to_string());
                    let call = format!("{name}!({});", args.join(", "));
                    let mut add = |f: &str, what: &str| {
                        let docs = format!("`{f}`: {what}. Defined by `{call}` in rpma-capi.");
                        out.insert(f.to_string(), CFn { signature: call.clone(), docs });
                    };
                    match (name.as_str(), args.as_slice()) {
                        ("cfg_field", [ty, set, get, vt, ..]) => {
                            add(set, &format!("sets a value ({vt}) of a {ty} under its lock"));
                            add(get, &format!("gets that value ({vt}) into a non-NULL output"));
                        }
                        ("conn_get", [f, vt, ..]) => add(f, &format!("gets a value ({vt}) of a connection")),
                        _ => {}
                    }
                }
                _ => {}
            }
        }
    }
    Ok(out)
}

/// The top-level comma-separated arguments of a macro call, as text.
fn split_args(tokens: &str) -> Vec<String> {
    let (mut out, mut cur, mut depth) = (Vec::new(), String::new(), 0i32);
    for c in tokens.chars() {
        match c {
            '(' | '[' | '{' | '<' => depth += 1,
            ')' | ']' | '}' | '>' => depth -= 1,
            ',' if depth == 0 => {
                out.push(cur.trim().to_string());
                cur.clear();
                continue;
            }
            _ => {}
        }
        cur.push(c);
    }
    if !cur.trim().is_empty() {
        out.push(cur.trim().to_string());
    }
    out
}

/// The "C ABI" section for `name`.
pub fn section(name: &str, f: &CFn) -> String {
    format!(
        "# C ABI\n\n`librpma.so.0` built from rpma-capi (`harness/capi-build`) exports `{name}` with the \
         prototype of librpma 1.3's `librpma.h` (symbol version `LIBRPMA_1.0`): C code compiled against \
         C librpma runs on it unchanged. It returns 0 or a negative `RPMA_E_*` code, never panics into C, \
         and leaves the failing call's `errno` on `RPMA_E_PROVIDER`. Implemented as:\n\n```rust\n{}\n```\n\n{}\n\n\
         Differences from C librpma and installation: docs/capi.md in the rpma repository.\n\n",
        f.signature,
        f.docs.trim()
    )
}

/// A page for a C function the Rust API has no page for.
pub fn page(name: &str, f: &CFn) -> String {
    let first = f.docs.split("\n\n").next().unwrap_or("").split_whitespace().collect::<Vec<_>>().join(" ");
    let own = format!("`{name}`");
    let rest = first.strip_prefix(&own).unwrap_or(&first).trim_start_matches([':', '.', ' ']);
    let first = if rest.is_empty() { format!("{name}, in rpma's C ABI") } else { rest.to_string() };
    format!(
        "# NAME\n\n{name} - {}\n\n# SYNOPSIS\n\n```c\n#include <librpma.h>\n```\n\nSee `{name}` in librpma.h.\n\n{}# SEE ALSO\n\nrpma(7)\n",
        first.replace('`', "").trim_end_matches('.'),
        section(name, f)
    )
}
