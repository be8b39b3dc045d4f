//! The docs against the code: the README's quick start is
//! `examples/client.rs`'s `run`, line for line (the example is built with
//! the suite, and `rpma-tools`' device test runs it against `rpma serve` in
//! its default mode); CONTRIBUTING.md's add-a-verb list names every file
//! the last verb added touches; no example calls the test harness; every
//! file path and Rust item the docs name in a code span exists.

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
    let mut files = Vec::new();
    rust_files(&format!("{root}/{dir}"), &mut files);
    for f in files {
        let text = std::fs::read_to_string(&f).unwrap();
        let mut code = text.lines().filter(|l| !l.trim_start().starts_with("//"));
        if code.any(|l| words.iter().any(|w| l.contains(w))) {
            out.insert(f.strip_prefix(root).unwrap().to_string_lossy().trim_start_matches('/').to_string());
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

/// Identifiers defined or used in the workspace's code (comments left out):
/// the Rust items the docs may name.
fn code_words(root: &str) -> (std::collections::BTreeSet<String>, std::collections::BTreeSet<String>) {
    let mut defined = std::collections::BTreeSet::new();
    let mut words = std::collections::BTreeSet::new();
    let mut files = Vec::new();
    for dir in [
        "rpma/src",
        "rpma-sys/src",
        "rpma-capi/src",
        "rpma-tools/src",
        "harness/src",
        "mangen/src",
        "tests",
        "benches",
        "examples",
    ] {
        rust_files(&format!("{root}/{dir}"), &mut files);
    }
    for f in files {
        let text = std::fs::read_to_string(&f).unwrap();
        let tokens: Vec<&str> = text
            .lines()
            .filter(|l| !l.trim_start().starts_with("//"))
            .flat_map(|l| l.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_')))
            .filter(|w| !w.is_empty())
            .collect();
        for (i, w) in tokens.iter().enumerate() {
            let keyword = ["fn", "struct", "enum", "trait", "type", "mod", "const", "static", "macro_rules"];
            if i > 0 && keyword.contains(&tokens[i - 1]) {
                defined.insert(w.to_string());
            }
            words.insert(w.to_string());
        }
    }
    (defined, words)
}

fn rust_files(dir: &str, out: &mut Vec<std::path::PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            rust_files(p.to_str().unwrap(), out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// The Markdown files whose code spans must name what exists.
fn checked_docs(root: &str) -> Vec<String> {
    let mut docs =
        vec!["README.md".to_string(), "CONTRIBUTING.md".into(), "SOUNDNESS.md".into(), "BENCHMARKS.md".into()];
    for dir in ["docs", "rpma/doc"] {
        let mut more: Vec<String> = std::fs::read_dir(format!("{root}/{dir}"))
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n.ends_with(".md"))
            .map(|n| format!("{dir}/{n}"))
            .collect();
        more.sort();
        docs.extend(more);
    }
    docs
}

/// Every file path (a span with a `/`, or a `.rs` file) and every Rust item
/// (`Type::member`, `rpma::module::Item`) that README.md, CONTRIBUTING.md,
/// SOUNDNESS.md, BENCHMARKS.md, docs/ and rpma(7) name in a code span exists: a path as a
/// file or directory of the workspace (or of one of its crates or test
/// folders), an item's type as a definition and its members in the code.
/// Fenced blocks, spans with spaces, absolute paths, `target/` and the
/// items of other crates are not checked.
#[test]
fn every_path_and_item_the_docs_name_exists() {
    let root = env!("CARGO_MANIFEST_DIR");
    let (defined, words) = code_words(root);
    let bases = [
        "",
        "rpma/src/",
        "rpma-sys/src/",
        "rpma-capi/src/",
        "rpma-tools/src/",
        "tests/",
        "benches/",
        "examples/",
        "harness/",
        "rpma/",
        "rpma-sys/",
        "rpma-capi/",
        "rpma-tools/",
    ];
    let external = [
        "std",
        "core",
        "alloc",
        "io",
        "libc",
        "log",
        "tokio",
        "env_logger",
        "serde",
        "bincode",
        "memmap2",
        "loom",
        "futures_core",
        "rdma_sys",
        "Arc",
        "Mmap",
        "AsyncFd",
        "ManuallyDrop",
        "Duration",
        "Box",
        "Vec",
        "Option",
        "Result",
        "String",
        "Mutex",
        "Weak",
    ];
    let mut stale = Vec::new();
    for doc in checked_docs(root) {
        let text = std::fs::read_to_string(format!("{root}/{doc}")).unwrap();
        // Fenced blocks left out: every other fence opens one.
        let prose: String = text.split("```").step_by(2).collect::<Vec<_>>().join("\n");
        for span in prose.split('`').skip(1).step_by(2).filter(|s| !s.contains([' ', '\n', '*'])) {
            let path_like = span.chars().all(|c| c.is_ascii_alphanumeric() || "_.-/".contains(c))
                && (span.contains('/') || span.ends_with(".rs"))
                && !span.starts_with(['/', '.', '-'])
                && !span.starts_with(|c: char| c.is_ascii_digit())
                && !span.starts_with("target/");
            if path_like {
                let p = span.trim_end_matches('/');
                if !bases.iter().any(|b| std::path::Path::new(&format!("{root}/{b}{p}")).exists()) {
                    stale.push(format!("{doc}: path `{span}`"));
                }
                continue;
            }
            let item = span.trim_end_matches("()");
            let is_path = item.contains("::")
                && item.split("::").all(|s| {
                    !s.is_empty()
                        && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
                        && !s.starts_with(char::is_numeric)
                });
            if !is_path {
                continue;
            }
            let parts: Vec<&str> =
                item.split("::").filter(|s| !matches!(*s, "rpma" | "rpma_sys" | "rpma_capi" | "crate")).collect();
            let Some(first) = parts.first() else { continue };
            if external.contains(first) {
                continue;
            }
            let first_ok =
                if first.starts_with(char::is_uppercase) { defined.contains(*first) } else { words.contains(*first) };
            if !first_ok || !parts[1..].iter().all(|p| words.contains(*p)) {
                stale.push(format!("{doc}: item `{span}`"));
            }
        }
    }
    assert!(
        stale.is_empty(),
        "the docs name what does not exist (rename or remove the reference):\n{}",
        stale.join("\n")
    );
}

/// Tables a person can read: no cell of the checked docs runs over 200
/// characters (what needs more is prose under
/// the table).
#[test]
fn table_cells_stay_readable() {
    let root = env!("CARGO_MANIFEST_DIR");
    let mut long = Vec::new();
    for doc in checked_docs(root) {
        let text = std::fs::read_to_string(format!("{root}/{doc}")).unwrap();
        for (i, line) in text.lines().enumerate().filter(|(_, l)| l.starts_with('|')) {
            let widest = line.trim().trim_matches('|').split('|').map(|c| c.trim().chars().count()).max();
            if let Some(n) = widest.filter(|n| *n > 200) {
                long.push(format!("{doc}:{}: a cell of {n} characters", i + 1));
            }
        }
    }
    assert!(long.is_empty(), "table cells over 200 characters (write prose instead):\n{}", long.join("\n"));
}

/// BENCHMARKS.md is a report of what holds now (history lives in
/// `benches/results/` and git): at most 200 lines.
#[test]
fn the_benchmark_report_stays_short() {
    let text = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/BENCHMARKS.md")).unwrap();
    let n = text.lines().count();
    assert!(n <= 200, "BENCHMARKS.md has {n} lines (at most 200: move history to benches/results/)");
}

/// Code comments keep a decision and its reason, not its measurement: an
/// instruction count in a comment goes stale with the next compiler, and
/// the figures live in BENCHMARKS.md.
#[test]
fn code_comments_carry_no_instruction_counts() {
    let root = env!("CARGO_MANIFEST_DIR");
    let mut files = Vec::new();
    for dir in ["rpma/src", "rpma-sys/src", "rpma-capi/src", "rpma-tools/src", "examples", "benches", "tests"] {
        rust_files(&format!("{root}/{dir}"), &mut files);
    }
    let mut found = Vec::new();
    for f in files {
        let text = std::fs::read_to_string(&f).unwrap();
        for (i, line) in text.lines().enumerate() {
            let Some(comment) = line.trim_start().strip_prefix("//") else { continue };
            let words: Vec<&str> = comment.split_whitespace().collect();
            let counted = words.windows(2).any(|w| {
                w[1].starts_with("instruction")
                    && w[0].chars().any(|c| c.is_ascii_digit())
                    && w[0].chars().all(|c| c.is_ascii_digit() || c == '.' || c == ',')
            });
            if counted {
                found.push(format!("{}:{}: {}", f.display(), i + 1, line.trim()));
            }
        }
    }
    assert!(
        found.is_empty(),
        "instruction counts in code comments (link to BENCHMARKS.md instead):\n{}",
        found.join("\n")
    );
}
