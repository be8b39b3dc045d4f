//! valgrind memcheck on the examples (both sides) and on the device test
//! binaries themselves, on a real RDMA device: no invalid access and no leak
//! attributable to rpma. The only suppressions are for rdma-core internals
//! (tests/valgrind/rdma-core.supp) and one Rust standard library block the
//! test binaries leave at `process::exit`
//! (tests/valgrind/rust-test-binaries.supp), each explained there.

use rpma_harness::{addr, device_tests, next_port};
use std::process::Command;

const SUPP: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/valgrind/rdma-core.supp");
/// The Rust runtime's main-thread handle, left at `process::exit` by the
/// test binaries themselves (not by the examples, nor by C programs).
const SUPP_TESTS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/valgrind/rust-test-binaries.supp");

fn valgrind() -> Command {
    let mut c = Command::new("valgrind");
    c.args([
        "-q",
        "--leak-check=full",
        "--show-leak-kinds=definite,possible",
        "--errors-for-leak-kinds=definite,possible",
    ])
    .arg(format!("--suppressions={SUPP}"))
    .arg(format!("--suppressions={SUPP_TESTS}"))
    .arg("--error-exitcode=97");
    c
}

fn memcheck(name: &str, client_args: &[&str]) {
    let exe = std::env::current_exe().unwrap();
    let ex = exe.parent().and_then(|d| d.parent()).unwrap().join("examples").join(name);
    let port = next_port().to_string();
    let vg = |role: &str, extra: &[&str]| {
        let mut c = valgrind();
        // Both sides run slowly under memcheck (more so on a loaded host):
        // the examples wait longer than their default 10 s for each other.
        c.env("RPMA_EXAMPLE_TIMEOUT", "120");
        c.arg(&ex).args([role, &addr(), &port]).args(extra);
        c
    };
    let mut srv = vg("server", &[]).spawn().expect("valgrind (harness/install-deps installs it)");
    // The server starts slowly under valgrind: wait until it listens.
    rpma_harness::wait_listening(&port, &mut srv, std::time::Duration::from_secs(90));
    let cli = vg("client", client_args).output().unwrap();
    let srv = srv.wait_with_output().unwrap();
    for (who, out) in [("client", &cli), ("server", &srv)] {
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.code() != Some(97), "{name} {who}: memcheck errors:\n{err}");
        assert!(out.status.success(), "{name} {who} failed: {}\n{err}", out.status);
    }
    println!("  {name}: server and client clean under memcheck");
}

/// Runs the newest build of the device test binary `name` (a sibling of
/// this one in target/.../deps) under memcheck, in this process's device
/// environment, restricted to the tests matching `filters` (all when empty).
fn memcheck_test_binary(name: &str, filters: &[&str]) {
    let deps = std::env::current_exe().unwrap().parent().unwrap().to_path_buf();
    let prefix = format!("{name}-");
    let bin = std::fs::read_dir(&deps)
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| {
            let n = e.file_name().to_string_lossy().into_owned();
            n.starts_with(&prefix) && !n.contains('.')
        })
        .max_by_key(|e| e.metadata().and_then(|m| m.modified()).ok())
        .unwrap_or_else(|| panic!("no {name}-* test binary in {}: build the tests first", deps.display()))
        .path();
    // Its own block of ports: another test of this binary runs beside it.
    static BLOCK: std::sync::atomic::AtomicU16 = std::sync::atomic::AtomicU16::new(1);
    let block = BLOCK.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let port = 10_000 + 1_000 * block;
    let out = valgrind().arg(&bin).args(filters).env("RPMA_TEST_PORT", port.to_string()).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.code() != Some(97), "{name}: memcheck errors:\n{err}");
    assert!(
        out.status.success(),
        "{name} failed under memcheck: {}\n{}\n{err}",
        out.status,
        String::from_utf8_lossy(&out.stdout)
    );
    let summary =
        String::from_utf8_lossy(&out.stdout).lines().filter(|l| l.starts_with("test result")).collect::<String>();
    // The binary must have run its tests, all of them passing: a green
    // exit of a run that selected nothing would check nothing.
    let passed: usize = summary
        .strip_prefix("test result: ok. ")
        .and_then(|r| r.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{name} {filters:?}: no passing test result under memcheck: {summary:?}"));
    assert!(passed > 0 && summary.contains(" 0 failed"), "{name} {filters:?}: {summary}");
    println!("  {name} {filters:?} clean under memcheck: {summary}");
}

// Two at a time: memcheck is CPU-bound and mostly one process at a time,
// and the harness VM has two CPUs.
device_tests!(jobs = 2, {
    fn memcheck_02_read_to_volatile() {
        memcheck("02-read-to-volatile", &[]);
    }

    fn memcheck_07_atomic_write() {
        memcheck("07-atomic-write", &["Hello,", "memcheck!"]);
    }

    fn memcheck_08_messages_ping_pong() {
        memcheck("08-messages-ping-pong", &["7", "3"]);
    }

    fn memcheck_11_write_with_imm() {
        memcheck("11-write-with-imm", &["4321"]);
    }

    fn memcheck_device_conn() {
        memcheck_test_binary("device_conn", &[]);
    }

    fn memcheck_device_mr() {
        memcheck_test_binary("device_mr", &[]);
    }

    fn memcheck_device_beyond() {
        memcheck_test_binary("device_beyond", &[]);
    }

    fn memcheck_device_security() {
        memcheck_test_binary("device_security", &[]);
    }

    /// The concurrency and killed-peer tests; the 10,000- and 1,000-cycle ones
    /// are left out (hours under memcheck on TCG).
    fn memcheck_device_faults() {
        memcheck_test_binary("device_faults", &["threads", "connections_on_shared", "peer_killed"]);
    }
});
