//! The docs against the code: the README's quick start is
//! `examples/client.rs`'s `run`, line for line (the example is built with
//! the suite, and `rpma-tools`' device test runs it against `rpma serve` in
//! its default mode); CONTRIBUTING.md's add-a-verb list names every file
//! the last verb added touches; no example calls the test harness.

/// The text of the README's first ```` ```rust ```` block.
fn quick_start(readme: &str) -> Option<&str> {
    let start = readme.find("```rust")?;
    let body = start + readme[start..].find('\n')? + 1;
    let end = body + readme[body..].find("```")?;
    Some(&readme[body..end])
}

#[test]
fn the_quick_start_is_the_client_example() {
    let root = env!("CARGO_MANIFEST_DIR");
    let readme = std::fs::read_to_string(format!("{root}/README.md")).unwrap();
    let client = std::fs::read_to_string(format!("{root}/examples/client.rs")).unwrap();
    let block = quick_start(&readme).expect("README.md has a ```rust block: the quick start");
    assert!(block.contains("pub fn run("), "the quick start is the client's `run`:\n{block}");
    assert!(
        client.contains(block),
        "README.md's quick start differs from examples/client.rs: copy the example's lines from \
         `use rpma::` to the end of `run` into the README"
    );
}

/// The source files (`rpma*/src/**.rs`) a Markdown section names.
fn named_sources(section: &str) -> std::collections::BTreeSet<String> {
    section
        .split('`')
        .skip(1)
        .step_by(2)
        .filter(|s| s.starts_with("rpma") && s.contains("/src/") && s.ends_with(".rs"))
        .map(str::to_string)
        .collect()
}

/// The files under `dir` (recursively) whose code, outside comments, names
/// one of `words`.
fn files_naming(root: &str, dir: &str, words: &[&str], out: &mut std::collections::BTreeSet<String>) {
    for e in std::fs::read_dir(format!("{root}/{dir}")).unwrap() {
        let e = e.unwrap();
        let rel = format!("{dir}/{}", e.file_name().to_string_lossy());
        if e.file_type().unwrap().is_dir() {
            files_naming(root, &rel, words, out);
        } else if rel.ends_with(".rs") {
            let text = std::fs::read_to_string(e.path()).unwrap();
            let code = text.lines().filter(|l| !l.trim_start().starts_with("//"));
            if code.into_iter().any(|l| words.iter().any(|w| l.contains(w))) {
                out.insert(rel);
            }
        }
    }
}

#[test]
fn the_add_a_verb_list_names_every_file_a_verb_touches() {
    let root = env!("CARGO_MANIFEST_DIR");
    let text = std::fs::read_to_string(format!("{root}/CONTRIBUTING.md")).unwrap();
    let start = text.find("## Adding a verb").expect("CONTRIBUTING.md has \"## Adding a verb\"");
    let end = text[start + 3..].find("\n## ").map_or(text.len(), |e| start + 3 + e);
    let listed = named_sources(&text[start..end]);
    for f in &listed {
        assert!(std::path::Path::new(&format!("{root}/{f}")).exists(), "CONTRIBUTING.md names {f}, which is gone");
    }
    let mut touched = std::collections::BTreeSet::new();
    for dir in ["rpma/src", "rpma-sys/src", "rpma-capi/src"] {
        files_naming(root, dir, &["FetchAdd", "FetchAndAdd", "fetch_and_add"], &mut touched);
    }
    let missing: Vec<_> = touched.difference(&listed).collect();
    assert!(
        missing.is_empty(),
        "files that name FetchAndAdd but CONTRIBUTING.md's add-a-verb list does not: {missing:?}"
    );
}

/// The examples are what a user copies: none calls the test harness.
#[test]
fn no_example_uses_the_test_harness() {
    let root = env!("CARGO_MANIFEST_DIR");
    let mut found = std::collections::BTreeSet::new();
    files_naming(root, "examples", &["rpma_harness"], &mut found);
    assert!(found.is_empty(), "examples calling the test harness: {found:?}");
}
