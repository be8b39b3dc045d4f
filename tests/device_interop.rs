//! Interoperability with C librpma (Debian's librpma-dev 1.2) on a real RDMA
//! device: the project's own C peer (tests/c/interop_peer.c, built here with
//! gcc) against the Rust demo and the Rust interop peer, in both directions,
//! with the bytes checked where they land.

use rpma_harness::{addr, device_tests, port};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::Duration;

fn target_dir() -> PathBuf {
    std::env::current_exe().unwrap().parent().and_then(|d| d.parent()).unwrap().to_path_buf()
}

/// Builds a C peer once per run; fails loudly without gcc or librpma-dev.
fn build_c(name: &str, cell: &'static OnceLock<PathBuf>) -> &'static PathBuf {
    cell.get_or_init(|| {
        let src = format!("{}/tests/c/{name}.c", env!("CARGO_MANIFEST_DIR"));
        let out = target_dir().join(name);
        let st = Command::new("gcc")
            .args(["-O1", "-Wall", "-Werror", "-o"])
            .arg(&out)
            .arg(&src)
            .args(["-lrpma", "-libverbs"])
            .status()
            .expect("gcc (harness/install-deps installs it with librpma-dev)");
        assert!(st.success(), "building {src} against librpma failed");
        out
    })
}

fn c_interop() -> &'static PathBuf {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    build_c("interop_peer", &BIN)
}

fn rust_interop() -> PathBuf {
    target_dir().join("examples").join("interop-peer")
}

/// Runs one case: a server of one implementation, a client of the other
/// (retried while the server is not listening yet); returns both outputs.
fn case(p: u16, server: &PathBuf, client: &PathBuf, case: &str) -> (String, String) {
    let port = port(p).to_string();
    let srv = Command::new(server).args(["server", &addr(), &port]).stdout(Stdio::piped()).spawn().unwrap();
    let mut cli_out = String::new();
    for attempt in 0..20 {
        let out = Command::new(client).args(["client", &addr(), &port, case]).stderr(Stdio::piped()).output().unwrap();
        cli_out = String::from_utf8_lossy(&out.stdout).into_owned();
        if out.status.success() {
            break;
        }
        assert!(attempt < 19, "{case}: the client failed: {}", String::from_utf8_lossy(&out.stderr));
        std::thread::sleep(Duration::from_millis(250));
    }
    let srv = srv.wait_with_output().unwrap();
    let srv_out = String::from_utf8_lossy(&srv.stdout).into_owned();
    assert!(srv.status.success(), "{case}: the server failed");
    (srv_out, cli_out)
}

/// Every case of the matrix, both ways, with the bytes checked where they land.
fn interop_matrix() {
    let (c, r) = (c_interop().clone(), rust_interop());
    let mut p = 52;
    for (srv, cli, srv_name, cli_name) in [(&c, &r, "C", "Rust"), (&r, &c, "Rust", "C")] {
        for name in ["read", "write-flush-vis", "write-flush-pers", "atomic", "send", "send-imm", "write-imm"] {
            let (s, k) = case(p, srv, cli, name);
            p += 1;
            let msg = format!("from the {cli_name} client");
            let ok = match name {
                "read" => k.contains(&format!("read: \"Hello from {srv_name} server!\"")),
                "write-flush-vis" | "write-flush-pers" => s.contains(&format!("at1024: \"{msg}\"")),
                "atomic" => s.contains("counter: 0x102030405060708"),
                "send" => s.contains(&format!("msg \"{msg}")) && !s.contains(" imm "),
                "send-imm" => s.contains(&format!("msg \"{msg}")) && s.contains(" imm 12648430"),
                "write-imm" => s.contains(&format!("at2048: \"{msg}\"")) && s.contains("\" imm 48879"),
                _ => unreachable!(),
            };
            println!("  | {srv_name} server, {cli_name} client | {name} | {} |", if ok { "ok" } else { "FAILED" });
            assert!(ok, "{srv_name} server / {cli_name} client, {name}:\nserver:\n{s}\nclient:\n{k}");
        }
    }
}

fn demo() -> PathBuf {
    target_dir().join("examples").join("demo")
}

/// The demo (Rust) as the client of the C server: reads its greeting, writes
/// a reply, atomically writes a counter, flushes.
fn c_server_rust_client() {
    let (s, k) = case(50, c_interop(), &demo(), "");
    assert!(k.contains("RDMA read: \"Hello from C server!"), "{k}");
    assert!(s.contains("at1024: \"Hello back from the rpma demo client!\""), "{s}");
    assert!(s.contains("counter: 0x2a"), "{s}");
}

/// The demo (Rust) as the server of the C client, which writes and flushes.
fn rust_server_c_client() {
    let (s, k) = case(51, &demo(), c_interop(), "write-flush-vis");
    assert!(k.contains("client: write-flush-vis done"), "{k}");
    assert!(s.contains("the client wrote \"from the C client\""), "{s}");
}

fn example(name: &str) -> PathBuf {
    target_dir().join("examples").join(name)
}

/// Runs `server_cmd server ADDR PORT server_args` and `client_cmd client
/// ADDR PORT client_args` (the client retried while the server is not
/// listening yet); returns both stdouts once both exited 0.
fn pair(
    p: u16,
    server_cmd: &PathBuf,
    server_args: &[&str],
    client_cmd: &PathBuf,
    client_args: &[&str],
) -> (String, String) {
    let port = port(p).to_string();
    let srv = Command::new(server_cmd)
        .args(["server", &addr(), &port])
        .args(server_args)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut cli_out = String::new();
    for attempt in 0..20 {
        let o = Command::new(client_cmd)
            .args(["client", &addr(), &port])
            .args(client_args)
            .stderr(Stdio::piped())
            .output()
            .unwrap();
        cli_out = String::from_utf8_lossy(&o.stdout).into_owned();
        if o.status.success() {
            break;
        }
        assert!(attempt < 19, "the client failed: {}", String::from_utf8_lossy(&o.stderr));
        std::thread::sleep(Duration::from_millis(250));
    }
    let srv = srv.wait_with_output().unwrap();
    let srv_out = String::from_utf8_lossy(&srv.stdout).into_owned();
    assert!(srv.status.success(), "the server failed:\n{srv_out}\nclient:\n{cli_out}");
    (srv_out, cli_out)
}

/// The Rust 02 example against the C peer in librpma's example 02 mode
/// (a 14-byte "Hello client!" region; the whole region read from 0), both
/// directions.
fn example_02_against_c() {
    let ex02 = example("02-read-to-volatile");
    let (s, k) = pair(70, c_interop(), &["ex02"], &ex02, &[]);
    assert!(k.contains("Read a message: Hello client!"), "server:\n{s}\nclient:\n{k}");
    let (s, k) = pair(71, &ex02, &[], c_interop(), &["ex02"]);
    assert!(k.contains("Read a message: Hello client!"), "server:\n{s}\nclient:\n{k}");
    println!("  | Rust 02 client, C server | read | ok |\n  | C client, Rust 02 server | read | ok |");
}

device_tests!(c_server_rust_client, rust_server_c_client, interop_matrix, example_02_against_c);
