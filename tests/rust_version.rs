//! The workspace's `rust-version` is true: no locked package that the
//! build or the tests compile declares a newer one. Read from `Cargo.lock`
//! and the packages' own manifests in cargo's registry sources (where the
//! build unpacked them).

use std::path::PathBuf;

/// Locked packages not compiled by the build or the tests on Linux, and why.
const NOT_BUILT: &[(&str, &str)] = &[
    ("generator", "loom's, built only under --cfg loom (harness/loom)"),
    ("windows-core", "Windows only"),
    ("windows-implement", "Windows only"),
    ("windows-interface", "Windows only"),
    ("windows-result", "Windows only"),
    ("windows-strings", "Windows only"),
];

fn version(v: &str) -> Vec<u32> {
    v.split('.').map(|x| x.parse().unwrap_or(0)).collect()
}

/// The `rust-version` a manifest declares, if any.
fn declared(manifest: &str) -> Option<String> {
    manifest.lines().find_map(|l| {
        let l = l.trim();
        let rest = l.strip_prefix("rust-version")?.trim_start().strip_prefix('=')?.trim();
        Some(rest.trim_matches('"').to_string())
    })
}

#[test]
fn no_locked_package_needs_a_newer_rust_than_declared() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let ours = declared(&std::fs::read_to_string(root.join("Cargo.toml")).unwrap()).expect("rust-version");
    let lock = std::fs::read_to_string(root.join("Cargo.lock")).unwrap();
    let home = std::env::var_os("CARGO_HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(std::env::var_os("HOME").expect("HOME")).join(".cargo"));
    let registries: Vec<PathBuf> = std::fs::read_dir(home.join("registry/src"))
        .expect("cargo's registry sources (the build unpacked the packages there)")
        .map(|e| e.unwrap().path())
        .collect();
    let (mut checked, mut newer) = (0, Vec::new());
    for block in lock.split("[[package]]").skip(1) {
        let field = |k: &str| {
            block
                .lines()
                .find_map(|l| l.strip_prefix(&format!("{k} = \"")).map(|v| v.trim_end_matches('"').to_string()))
        };
        let (Some(name), Some(ver)) = (field("name"), field("version")) else { continue };
        if !field("source").is_some_and(|s| s.starts_with("registry+")) {
            continue; // the workspace's own crates share its rust-version
        }
        if NOT_BUILT.iter().any(|(n, _)| *n == name) {
            continue;
        }
        // A package the build never unpacked was never compiled here.
        let Some(manifest) = registries.iter().map(|r| r.join(format!("{name}-{ver}/Cargo.toml"))).find(|p| p.exists())
        else {
            continue;
        };
        checked += 1;
        if let Some(rv) = declared(&std::fs::read_to_string(&manifest).unwrap()) {
            if version(&rv) > version(&ours) {
                newer.push(format!("{name} {ver} declares rust-version {rv}"));
            }
        }
    }
    assert!(checked >= 50, "only {checked} locked packages found unpacked: build the workspace first");
    assert!(newer.is_empty(), "the workspace declares rust-version {ours}, but: {newer:?}");
}
