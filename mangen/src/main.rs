//! `cargo run -p rpma-mangen` regenerates `man/` from rpma's doc comments.
fn main() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    match rpma_mangen::write(&root) {
        Ok(n) => println!("wrote {n} pages to man/"),
        Err(e) => {
            eprintln!("rpma-mangen: {e}");
            std::process::exit(1);
        }
    }
}
