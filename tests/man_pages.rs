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
        let out =
            Command::new("groff").args(["-ww", "-man", "-z"]).arg(root().join("man").join(&rel)).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success() && err.is_empty(), "{rel}: {err}");
    }
}
