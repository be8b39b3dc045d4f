// Detects verbs the installed rdma-core headers declare but rdma-sys 0.3 may
// not wrap, so the shims in src/qp.rs compile only where the bindings have the
// fields they use.
use std::path::PathBuf;
use std::process::Command;

fn main() {
    println!("cargo::rustc-check-cfg=cfg(rpma_has_wr_flush)");
    println!("cargo:rerun-if-changed=build.rs");
    let inc = Command::new("pkg-config")
        .args(["--variable=includedir", "libibverbs"])
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .map(|s| PathBuf::from(s.trim()))
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or_else(|| PathBuf::from("/usr/include"));
    let verbs_h = inc.join("infiniband/verbs.h");
    println!("cargo:rerun-if-changed={}", verbs_h.display());
    let text = std::fs::read_to_string(&verbs_h).unwrap_or_default();
    if text.contains("ibv_wr_flush(") && text.contains("IBV_ACCESS_FLUSH_GLOBAL") {
        println!("cargo:rustc-cfg=rpma_has_wr_flush");
    }
}
