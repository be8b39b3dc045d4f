//! rpma's C ABI (crate rpma-capi, `librpma.so.0` from `harness/capi-build`)
//! on a real RDMA device. The project's C programs are built once, against
//! C librpma's header and library (Debian's librpma-dev), and each run is
//! switched to rpma's library by `LD_LIBRARY_PATH` alone:
//! * tests/c/example_peer.c, librpma's 17 example contracts: on rpma against
//!   itself on C librpma (both directions), against itself on rpma, and
//!   against the Rust examples (both directions);
//! * tests/c/interop_peer.c's seven cases (read, write + flush both types,
//!   atomic write, send, send with immediate, write with immediate): built a
//!   second time, linked to rpma's library, against the Rust interop peer,
//!   and the C librpma build switched to rpma against itself on C librpma,
//!   both directions, bytes checked where they land; and its contexts
//!   case (op contexts of every width, an early deregistration) on both
//!   libraries alike;
//! * the C benchmark program built against C librpma and linked to rpma's
//!   library, each build as the other's server;
//! * both C programs on rpma's library under valgrind memcheck.
//!
//! tests/capi_abi.rs checks the exports and signatures without a device.

mod interop;

use interop::{
    build_c, build_c_linked, build_c_source, c_example_peer, capi_lib_dir, case_on, interop_case_ok, run_pair,
    target_dir, with_lib, Side, EXAMPLES, INTEROP_CASES,
};
use rpma_harness::{addr, device_tests, next_port, wait_listening};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::Duration;

fn c_interop() -> &'static PathBuf {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    build_c("interop_peer", &BIN)
}

/// Runs every example for each (server, client) pair; prints the table and
/// fails when a cell failed.
fn examples_matrix(pairs: &[(Side, Side)]) {
    let mut table = String::from("\n  | example |");
    for (s, c) in pairs {
        table += &format!(" {} server, {} client |", s.label(), c.label());
    }
    table += &format!("\n  |---|{}\n", "---|".repeat(pairs.len()));
    let mut failed = Vec::new();
    for ex in EXAMPLES {
        table += &format!("  | {} |", ex.peer);
        for &(server, client) in pairs {
            let (problems, transcript) = run_pair(ex, server, client);
            if problems.is_empty() {
                table += " ok |";
            } else {
                table += " FAIL |";
                let what = format!("{} ({} server, {} client)", ex.peer, server.label(), client.label());
                println!("\n  {what} FAILED: {}\n{transcript}", problems.join("; "));
                failed.push(what);
            }
        }
        table += "\n";
    }
    println!("{table}");
    assert!(failed.is_empty(), "pairs failed: {}", failed.join(", "));
}

const SUPP: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/valgrind/rdma-core.supp");

/// `bin args` under memcheck on rpma's library; the other side runs plainly
/// on C librpma. Asserts both exit 0 and memcheck found nothing.
fn memcheck_pair(bin: &Path, example: Option<&str>, memcheck_server: bool, client_args: &[&str]) {
    let port = next_port().to_string();
    let lib = capi_lib_dir();
    let cmd = |role: &str, checked: bool| {
        let mut c = if checked {
            let mut v = with_lib(Command::new("valgrind"), Some(&lib));
            v.args(["-q", "--leak-check=full", "--show-leak-kinds=definite,possible"])
                .args(["--errors-for-leak-kinds=definite,possible", "--error-exitcode=97"])
                .arg(format!("--suppressions={SUPP}"))
                .arg(bin);
            v
        } else {
            with_lib(Command::new(bin), None)
        };
        // memcheck on a loaded TCG guest can take half a minute to start a
        // program: the plain side waits longer than its default 30 s.
        c.env("EXAMPLE_PEER_WAIT_MS", "150000").env("EXAMPLE_PEER_TIMEOUT", "400");
        c.args(example).args([role, &addr(), &port]);
        if role == "client" {
            c.args(client_args);
        }
        c
    };
    let mut srv = cmd("server", memcheck_server)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("valgrind (harness/install-deps installs it)");
    // A server under memcheck takes a while to listen.
    wait_listening(&port, &mut srv, Duration::from_secs(90));
    let cli = cmd("client", !memcheck_server).output().unwrap();
    let srv = srv.wait_with_output().unwrap();
    let name = format!("{} {}", bin.file_name().unwrap().to_string_lossy(), example.unwrap_or(""));
    let checked = if memcheck_server { "server" } else { "client" };
    let text = |o: &std::process::Output| {
        format!("stdout:\n{}\nstderr:\n{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr))
    };
    let both = format!("client {}:\n{}\nserver {}:\n{}", cli.status, text(&cli), srv.status, text(&srv));
    for (who, out) in [("client", &cli), ("server", &srv)] {
        assert!(out.status.code() != Some(97), "{name} {who}: memcheck errors on rpma's library:\n{both}");
        assert!(out.status.success(), "{name} {who} failed: {}\n{both}", out.status);
    }
    println!("  {name}: the {checked} on rpma's library is clean under memcheck");
}

// Two at a time (the harness VM has two CPUs); every test takes its own
// ports.
device_tests!(jobs = 2, {
    /// librpma's example contracts: the C peer on rpma's library against the
    /// same binary on C librpma, both directions, and against itself.
    fn c_examples_on_rpma_against_c_librpma() {
        examples_matrix(&[(Side::CRpma, Side::C), (Side::C, Side::CRpma), (Side::CRpma, Side::CRpma)]);
    }

    /// The same contracts: the C peer on rpma's library against the Rust
    /// examples, both directions.
    fn c_examples_on_rpma_against_rust() {
        examples_matrix(&[(Side::CRpma, Side::Rust), (Side::Rust, Side::CRpma)]);
    }

    /// Every usage of the local and of the remote region against every
    /// operation (tests/c/usage_table.c: return code, completion status),
    /// the same binary on C librpma and on rpma's library: the same lines.
    /// C librpma checks no usage when posting and the device refuses what a
    /// region's access does not grant; rpma's C ABI does the same.
    fn usage_table_same_on_both_libraries() {
        static BIN: OnceLock<PathBuf> = OnceLock::new();
        let bin = build_c("usage_table", &BIN);
        let lib = capi_lib_dir();
        let run = |l: Option<&Path>| {
            let out = with_lib(Command::new(bin), l).args([&addr(), &next_port().to_string()]).output().unwrap();
            let text = String::from_utf8_lossy(&out.stdout).into_owned();
            assert!(out.status.success(), "usage_table on {l:?}: {}\n{text}", String::from_utf8_lossy(&out.stderr));
            text
        };
        let (c, r) = (run(None), run(Some(&lib)));
        println!("{c}");
        assert_eq!(c.lines().count(), 80, "5 operations x 16 cases");
        let differ: Vec<(&str, &str)> = c.lines().zip(r.lines()).filter(|(a, b)| a != b).collect();
        assert!(differ.is_empty(), "C librpma | rpma's library:\n{differ:#?}");
        assert!(c.contains("status 4"), "some case is refused by the device (LOC_PROT_ERR)");
    }

    /// interop_peer.c on rpma's library against the Rust interop peer and
    /// against itself on C librpma, both directions.
    fn interop_peer_on_rpma() {
        let c = c_interop().clone();
        let rust = target_dir().join("examples").join("interop-peer");
        let lib = capi_lib_dir();
        let rpma = Some(lib.as_path());
        // The same source built once more, linked to rpma's library.
        let c_rpma = build_c_linked("interop_peer", rpma);
        #[allow(clippy::type_complexity)]
        let pairs: [(&PathBuf, Option<&Path>, &PathBuf, Option<&Path>, &str, &str, &str); 4] = [
            (&c_rpma, rpma, &rust, None, "C", "Rust", "C linked to rpma server, Rust client"),
            (&rust, None, &c_rpma, rpma, "Rust", "C", "Rust server, C linked to rpma client"),
            (&c, rpma, &c, None, "C", "C", "C on rpma server, C on C librpma client"),
            (&c, None, &c, rpma, "C", "C", "C on C librpma server, C on rpma client"),
        ];
        let mut failed = Vec::new();
        for (srv, srv_lib, cli, cli_lib, srv_name, cli_name, label) in pairs {
            for name in INTEROP_CASES {
                let (s, k) = case_on(srv, srv_lib, cli, cli_lib, name);
                let ok = interop_case_ok(name, &s, &k, srv_name, cli_name);
                println!("  | {label} | {name} | {} |", if ok { "ok" } else { "FAILED" });
                if !ok {
                    println!("server:\n{s}\nclient:\n{k}");
                    failed.push(format!("{label}: {name}"));
                }
            }
        }
        assert!(failed.is_empty(), "failed: {failed:?}");
    }

    /// interop_peer.c's contexts case, its client on C librpma and switched
    /// to rpma's library, against its server on C librpma: every op context
    /// comes back whole (56 bits and wider, unsignaled writes between
    /// signaled reads for 280 rounds, the 0-byte read and write), and a region
    /// deregistered right after its read is deregistered (0) on both.
    fn op_contexts_and_early_dereg_as_on_librpma() {
        let c = c_interop().clone();
        let lib = capi_lib_dir();
        let (_, on_c) = case_on(&c, None, &c, None, "contexts");
        let (_, on_rpma) = case_on(&c, None, &c, Some(lib.as_path()), "contexts");
        let lines = |s: &str| s.lines().filter(|l| l.starts_with("contexts:")).map(String::from).collect::<Vec<_>>();
        println!("C librpma:\n{on_c}\nrpma's library:\n{on_rpma}");
        assert_eq!(lines(&on_c).len(), 4, "C librpma's client:\n{on_c}");
        assert!(on_c.contains("right after its read: 0"), "{on_c}");
        assert_eq!(lines(&on_c), lines(&on_rpma));
    }

    /// The C benchmark program (benches/compare/librpma_bench.c), built once
    /// against C librpma and once linked to rpma's library, each build as
    /// the server of the other: every case of its client (latency, streams,
    /// ping-pongs, sends) completes and reports.
    fn c_bench_program_built_both_ways() {
        let lib = capi_lib_dir();
        let src = Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/benches/compare/librpma_bench.c"));
        let (on_c, on_rpma) =
            (build_c_source(src, "librpma_bench", None), build_c_source(src, "librpma_bench", Some(&lib)));
        for (server, server_lib, client, client_lib, label) in [
            (&on_rpma, Some(lib.as_path()), &on_c, None, "linked to rpma (server), on C librpma (client)"),
            (&on_c, None, &on_rpma, Some(lib.as_path()), "on C librpma (server), linked to rpma (client)"),
        ] {
            let port = next_port().to_string();
            let mut srv = with_lib(Command::new(server), server_lib)
                .args(["server", &addr(), &port, "1"])
                .stdout(Stdio::piped())
                .spawn()
                .unwrap();
            wait_listening(&port, &mut srv, Duration::from_secs(60));
            let out =
                with_lib(Command::new(client), client_lib).args(["client", &addr(), &port, "20"]).output().unwrap();
            let srv = srv.wait_with_output().unwrap();
            let text = String::from_utf8_lossy(&out.stdout);
            let results = text.lines().filter(|l| l.starts_with("RESULT ")).count();
            assert!(
                out.status.success() && srv.status.success() && results > 20,
                "{label}: client {} ({results} RESULT lines), server {}:\n{text}\n{}",
                out.status,
                srv.status,
                String::from_utf8_lossy(&out.stderr)
            );
            println!("  librpma_bench {label}: {results} cases measured");
        }
    }

    /// Both C programs on rpma's library under valgrind memcheck, as
    /// clients, against servers on C librpma: the interop program. (The
    /// memcheck runs are split four ways, each test well inside the
    /// per-test timeout when two run at once on a loaded guest.)
    fn c_interop_clients_on_rpma_under_memcheck() {
        memcheck_pair(c_interop(), None, false, &["write-flush-vis"]);
        memcheck_pair(c_interop(), None, false, &["send-imm"]);
    }

    /// The same with librpma's examples as clients.
    fn c_example_clients_on_rpma_under_memcheck() {
        let peer = c_example_peer().clone();
        memcheck_pair(&peer, Some("02"), false, &[]);
        memcheck_pair(&peer, Some("08"), false, &["7", "3"]);
        memcheck_pair(&peer, Some("12"), false, &["7", "3"]);
    }

    /// The interop program as a server, against a client on C librpma.
    fn c_interop_server_on_rpma_under_memcheck() {
        memcheck_pair(c_interop(), None, true, &["write-flush-vis"]);
    }

    /// librpma's examples as servers, against clients on C librpma.
    fn c_example_servers_on_rpma_under_memcheck() {
        let peer = c_example_peer().clone();
        memcheck_pair(&peer, Some("08"), true, &["7", "3"]);
        memcheck_pair(&peer, Some("12"), true, &["7", "3"]);
    }
});
