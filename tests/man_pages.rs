//! The man pages in `man/` are generated from the doc comments (rpma-mangen)
//! and must match them; every page must render without groff warnings.

use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn on_disk() -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for sub in ["man3", "man7"] {
        for e in std::fs::read_dir(root().join("man").join(sub)).expect("man/ exists") {
            out.insert(format!("{sub}/{}", e.unwrap().file_name().to_string_lossy()));
        }
    }
    out
}

#[test]
fn man_pages_are_up_to_date() {
    let pages = rpma_mangen::pages(root()).expect("generate");
    let disk = on_disk();
    let want: BTreeSet<String> = pages.keys().cloned().collect();
    let missing: Vec<_> = want.difference(&disk).collect();
    let extra: Vec<_> = disk.difference(&want).collect();
    let mut stale = Vec::new();
    for (rel, text) in &pages {
        if let Ok(old) = std::fs::read_to_string(root().join("man").join(rel)) {
            if &old != text {
                stale.push(rel);
            }
        }
    }
    assert!(
        missing.is_empty() && extra.is_empty() && stale.is_empty(),
        "man/ is stale; run `cargo run -p rpma-mangen`.\nmissing: {missing:?}\nextra: {extra:?}\nstale: {stale:?}"
    );
}

#[test]
fn every_public_operation_has_a_page() {
    let items = rpma_mangen::items(root()).expect("every public item is documented");
    assert!(items.len() > 100, "only {} operations found", items.len());
    for (page, item) in &items {
        assert!(root().join("man/man3").join(format!("{page}.3")).exists(), "{} has no page {page}", item.path);
    }
    for (name, path) in [
        ("rpma_mr_reg", "MrLocal::reg"),
        ("rpma_flush", "Conn::flush"),
        ("rpma_mr_rereg", "MrLocal::rereg"),
        ("rpma_mw_bind", "Conn::bind_mw"),
    ] {
        assert_eq!(items.get(name).map(|i| i.path.as_str()), Some(path));
    }
}

#[test]
fn pages_render_without_warnings() {
    let groff = Command::new("groff").arg("--version").output();
    assert!(groff.is_ok(), "groff is needed to lint the man pages (harness/install-deps installs groff-base)");
    for rel in on_disk() {
        let out = Command::new("groff")
            .args(["-ww", "-man", "-z", "-I"])
            .arg(root().join("man"))
            .arg(root().join("man").join(&rel))
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success() && err.is_empty(), "{rel}: {err}");
    }
}

/// The methods `bitflags!` generates on every flags type.
const BITFLAGS_API: &[&str] = &[
    "all",
    "bits",
    "complement",
    "contains",
    "difference",
    "empty",
    "from_bits",
    "from_bits_retain",
    "from_bits_truncate",
    "from_name",
    "insert",
    "intersection",
    "intersects",
    "is_all",
    "is_empty",
    "iter",
    "iter_names",
    "remove",
    "set",
    "symmetric_difference",
    "toggle",
    "union",
];

/// The list of public operations comes from rustdoc's output too, not only
/// from the generator under test: every inherent method of every public type
/// and every public free function rustdoc documents has a page. (`harness/test`
/// runs `cargo doc` before the tests.)
#[test]
fn rustdoc_lists_no_operation_without_a_page() {
    let target = std::env::var_os("CARGO_TARGET_DIR").map_or_else(|| root().join("target"), Into::into);
    let doc = std::path::Path::new(&target).join("doc/rpma");
    assert!(doc.is_dir(), "{} is missing: run `cargo doc --no-deps -p rpma` first", doc.display());
    let items = rpma_mangen::items(root()).expect("every public item is documented");
    let paths: std::collections::BTreeSet<&str> = items.values().map(|i| i.path.as_str()).collect();
    let mut from_rustdoc = std::collections::BTreeSet::new();
    let mut dirs = vec![doc.clone()];
    while let Some(d) = dirs.pop() {
        for e in std::fs::read_dir(&d).unwrap().filter_map(|e| e.ok()) {
            let p = e.path();
            let name = e.file_name().to_string_lossy().into_owned();
            if p.is_dir() {
                dirs.push(p);
                continue;
            }
            let Some(stem) = name.strip_suffix(".html") else { continue };
            if let Some(f) = stem.strip_prefix("fn.") {
                from_rustdoc.insert(f.to_string());
            } else if let Some(ty) = stem.strip_prefix("struct.").or_else(|| stem.strip_prefix("enum.")) {
                let html = std::fs::read_to_string(&p).unwrap();
                // Inherent methods only: stop where the trait, Deref and
                // auto-trait implementations start.
                let end = ["id=\"deref-methods", "id=\"trait-implementations\"", "id=\"synthetic-implementations\""]
                    .iter()
                    .filter_map(|m| html.find(m))
                    .min()
                    .unwrap_or(html.len());
                // The API the bitflags macro generates for a flags type is
                // bitflags' own (documented there), not an operation of rpma.
                let flags_type = html[..end].contains("id=\"method.from_bits_retain\"");
                for (i, _) in html[..end].match_indices("id=\"method.") {
                    let rest = &html[i + 11..end];
                    let m: String = rest.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
                    if !(flags_type && BITFLAGS_API.contains(&m.as_str())) {
                        from_rustdoc.insert(format!("{ty}::{m}"));
                    }
                }
            }
        }
    }
    assert!(from_rustdoc.len() > 100, "rustdoc listed only {from_rustdoc:?}");
    let missing: Vec<&String> = from_rustdoc
        .iter()
        .filter(|p| !paths.contains(p.as_str()) && !paths.iter().any(|q| q.ends_with(&format!("::{p}"))))
        .collect();
    assert!(missing.is_empty(), "public operations rustdoc documents without a man page: {missing:?}");
}
