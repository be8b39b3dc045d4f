//! valgrind memcheck on the examples (both sides, on a real RDMA device):
//! no invalid access and no leak attributable to rpma. The only
//! suppressions are for rdma-core internals, each explained in
//! tests/valgrind/rdma-core.supp.

use rpma_harness::{addr, device_tests, port};
use std::process::Command;

fn memcheck(name: &str, p: u16, client_args: &[&str]) {
    let exe = std::env::current_exe().unwrap();
    let ex = exe.parent().and_then(|d| d.parent()).unwrap().join("examples").join(name);
    let supp = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/valgrind/rdma-core.supp");
    let vg = |role: &str, extra: &[&str]| {
        let mut c = Command::new("valgrind");
        c.args([
            "-q",
            "--leak-check=full",
            "--show-leak-kinds=definite,possible",
            "--errors-for-leak-kinds=definite,possible",
        ])
        .arg(format!("--suppressions={supp}"))
        .arg("--error-exitcode=97")
        .arg(&ex)
        .args([role, &addr(), &port(p).to_string()])
        .args(extra);
        c
    };
    let srv = vg("server", &[]).spawn().expect("valgrind (harness/install-deps installs it)");
    std::thread::sleep(std::time::Duration::from_secs(3)); // the server starts slowly under valgrind
    let cli = vg("client", client_args).output().unwrap();
    let srv = srv.wait_with_output().unwrap();
    for (who, out) in [("client", &cli), ("server", &srv)] {
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.code() != Some(97), "{name} {who}: memcheck errors:\n{err}");
        assert!(out.status.success(), "{name} {who} failed: {}\n{err}", out.status);
    }
    println!("  {name}: server and client clean under memcheck");
}

fn memcheck_02_read_to_volatile() {
    memcheck("02-read-to-volatile", 200, &[]);
}

fn memcheck_07_atomic_write() {
    memcheck("07-atomic-write", 201, &["Hello,", "memcheck!"]);
}

fn memcheck_08_messages_ping_pong() {
    memcheck("08-messages-ping-pong", 202, &["7", "3"]);
}

fn memcheck_11_write_with_imm() {
    memcheck("11-write-with-imm", 203, &["4321"]);
}

device_tests!(
    memcheck_02_read_to_volatile,
    memcheck_07_atomic_write,
    memcheck_08_messages_ping_pong,
    memcheck_11_write_with_imm,
);
