//! Interoperability with C librpma (Debian's librpma-dev 1.2) on a real RDMA
//! device, with the project's own C peers built here with gcc:
//! * tests/c/interop_peer.c against the Rust demo and the Rust interop peer,
//!   in both directions, with the bytes checked where they land;
//! * tests/c/example_peer.c, the contracts of librpma 1.3.0's examples
//!   (01 .. 13; 1.2's are the same), against each Rust example in both
//!   directions, with the C examples' lines checked on both sides.
mod interop;

use interop::{build_c, case, interop_case_ok, run_pair, target_dir, Side, EXAMPLES, INTEROP_CASES};
use rpma_harness::device_tests;
use std::path::PathBuf;
use std::sync::OnceLock;

fn c_interop() -> &'static PathBuf {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    build_c("interop_peer", &BIN)
}

fn rust_interop() -> PathBuf {
    target_dir().join("examples").join("interop-peer")
}

fn demo() -> PathBuf {
    target_dir().join("examples").join("demo")
}

/// Every example's pair with `server` and `client`, as a table.
fn contracts(server: Side, client: Side) {
    let dir = format!("{} server, {} client", server.label(), client.label());
    let mut table = format!("\n  | example | {dir} |\n  |---|---|\n");
    let mut failed = Vec::new();
    for ex in EXAMPLES {
        let (problems, transcript) = run_pair(ex, server, client);
        if problems.is_empty() {
            table += &format!("  | {} | ok |\n", ex.peer);
        } else {
            table += &format!("  | {} | FAIL |\n", ex.peer);
            println!("\n  {} ({dir}) FAILED: {}\n{transcript}", ex.peer, problems.join("; "));
            failed.push(ex.peer);
        }
    }
    println!("{table}");
    assert!(failed.is_empty(), "pairs failed ({dir}): {}", failed.join(", "));
}

// Two at a time (the harness VM has two CPUs); every pair takes its own
// port and directory.
device_tests!(jobs = 2, {
    /// The demo (Rust) as the client of the C server: reads its greeting, writes
    /// a reply, atomically writes a counter, flushes.
    fn c_server_rust_client() {
        let (s, k) = case(c_interop(), &demo(), "");
        assert!(k.contains("RDMA read: \"Hello from C server!"), "{k}");
        assert!(s.contains("at1024: \"Hello back from the rpma demo client!\""), "{s}");
        assert!(s.contains("counter: 0x2a"), "{s}");
    }

    /// The demo (Rust) as the server of the C client, which writes and flushes.
    fn rust_server_c_client() {
        let (s, k) = case(&demo(), c_interop(), "write-flush-vis");
        assert!(k.contains("client: write-flush-vis done"), "{k}");
        assert!(s.contains("the client wrote \"from the C client\""), "{s}");
    }

    /// Every case of the matrix, both ways, with the bytes checked where they land.
    fn interop_matrix() {
        let (c, r) = (c_interop().clone(), rust_interop());
        for (srv, cli, srv_name, cli_name) in [(&c, &r, "C", "Rust"), (&r, &c, "Rust", "C")] {
            for name in INTEROP_CASES {
                let (s, k) = case(srv, cli, name);
                let ok = interop_case_ok(name, &s, &k, srv_name, cli_name);
                let how = if !ok {
                    "FAILED"
                } else if k.contains("refused (NOSUPP)") {
                    "ok (refused: this world has no persistent-flush DRAM, docs/worlds.md)"
                } else {
                    "ok"
                };
                println!("  | {srv_name} server, {cli_name} client | {name} | {how} |");
                assert!(ok, "{srv_name} server / {cli_name} client, {name}:\nserver:\n{s}\nclient:\n{k}");
            }
        }
    }

    /// Every Rust example as the client of the C peer that follows
    /// librpma's example: a pair passes when every process exits 0, each
    /// side prints its expected lines, and neither prints a suspicious line.
    fn examples_against_librpma_contracts_c_server() {
        contracts(Side::C, Side::Rust);
    }

    /// The same with the Rust examples as servers.
    fn examples_against_librpma_contracts_rust_server() {
        contracts(Side::Rust, Side::C);
    }
});
