//! Interoperability with C librpma (Debian's librpma-dev 1.2) on a real RDMA
//! device: the project's own C peer (tests/c/rpma_peer.c, built here with
//! gcc) against the Rust demo, in both directions, with the bytes checked on
//! the receiving side.

use rpma_harness::{addr, device_tests, port};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::Duration;

fn target_dir() -> PathBuf {
    std::env::current_exe().unwrap().parent().and_then(|d| d.parent()).unwrap().to_path_buf()
}

/// Builds the C peer once per run; fails loudly without gcc or librpma-dev.
fn c_peer() -> &'static PathBuf {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        let src = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/c/rpma_peer.c");
        let out = target_dir().join("rpma_peer");
        let st = Command::new("gcc")
            .args(["-O1", "-Wall", "-Werror", "-o"])
            .arg(&out)
            .arg(src)
            .args(["-lrpma", "-libverbs"])
            .status()
            .expect("gcc (harness/install-deps installs it with librpma-dev)");
        assert!(st.success(), "building {src} against librpma failed");
        out
    })
}

fn demo() -> PathBuf {
    target_dir().join("examples").join("demo")
}

fn output(mut cmd: Command) -> (bool, String) {
    let out = cmd.stderr(Stdio::inherit()).output().expect("run");
    let s = String::from_utf8_lossy(&out.stdout).into_owned();
    print!("{}", s.lines().map(|l| format!("  | {l}\n")).collect::<String>());
    (out.status.success(), s)
}

fn c_server_rust_client() {
    let p = port(50).to_string();
    let srv = Command::new(c_peer()).args(["server", &addr(), &p]).stdout(Stdio::piped()).spawn().unwrap();
    let mut cli = Command::new(demo());
    cli.args(["client", &addr(), &p]);
    let (ok, out) = output(cli);
    let srv_out = srv.wait_with_output().unwrap();
    let srv_s = String::from_utf8_lossy(&srv_out.stdout);
    print!("{}", srv_s.lines().map(|l| format!("  | {l}\n")).collect::<String>());
    assert!(ok, "the Rust client failed");
    assert!(srv_out.status.success(), "the C server failed");
    assert!(out.contains("RDMA read: \"Hello from the C librpma server!\""), "{out}");
    assert!(srv_s.contains("c-server: the client wrote: Hello back from the rpma demo client!"), "{srv_s}");
}

fn rust_server_c_client() {
    let p = port(51).to_string();
    let srv = Command::new(demo()).args(["server", &addr(), &p]).stdout(Stdio::piped()).spawn().unwrap();
    let mut last = (false, String::new());
    for _ in 0..20 {
        let mut cli = Command::new(c_peer());
        cli.args(["client", &addr(), &p]);
        last = output(cli);
        if last.0 {
            break;
        }
        std::thread::sleep(Duration::from_millis(250)); // the server may not listen yet
    }
    let srv_out = srv.wait_with_output().unwrap();
    let srv_s = String::from_utf8_lossy(&srv_out.stdout);
    print!("{}", srv_s.lines().map(|l| format!("  | {l}\n")).collect::<String>());
    assert!(last.0, "the C client failed");
    assert!(srv_out.status.success(), "the Rust server failed");
    assert!(last.1.contains("c-client: read: Hello from the rpma demo server!"), "{}", last.1);
    assert!(srv_s.contains("the client wrote \"Hello back from the C librpma client!\""), "{srv_s}");
}

device_tests!(c_server_rust_client, rust_server_c_client);
