//! What the README shows a new user is code the suite builds and runs: its
//! quick start is `examples/client.rs`'s `run`, line for line (the example
//! is built with the suite, and `rpma-tools`' device test runs it against
//! `rpma serve` in its default mode).

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
