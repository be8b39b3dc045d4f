//! `cargo run -p rpma-mangen` regenerates `man/` from rpma's doc comments.
//!
//! `cargo run -p rpma-mangen -- [--src DIR] [--out DIR]` reads the sources
//! from `DIR` (the directory of `lib.rs`; default `rpma/src`) and writes the
//! pages to `DIR` (default `man/`), e.g. to compare the pages of a copy of
//! the sources with the committed ones.
use std::path::{Path, PathBuf};

fn main() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let (mut src, mut out) = (root.join(rpma_mangen::SRC), root.join("man"));
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let slot = match a.as_str() {
            "--src" => &mut src,
            "--out" => &mut out,
            _ => usage(&format!("unknown argument {a:?}")),
        };
        *slot = args.next().map(PathBuf::from).unwrap_or_else(|| usage(&format!("{a} needs a directory")));
    }
    match rpma_mangen::write_to(&src, &out) {
        Ok(n) => println!(
            "wrote {n} pages to {}",
            if out == root.join("man") { "man/".into() } else { out.display().to_string() }
        ),
        Err(e) => {
            eprintln!("rpma-mangen: {e}");
            std::process::exit(1);
        }
    }
}

fn usage(msg: &str) -> ! {
    eprintln!("rpma-mangen: {msg}\nusage: rpma-mangen [--src DIR] [--out DIR]");
    std::process::exit(2);
}
