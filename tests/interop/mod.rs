//! What the interop device tests share: the project's C peers (built here
//! with gcc against C librpma's header), librpma's example contracts, and
//! the runners that pair a Rust example, the C peer on C librpma, and the
//! same C peer on rpma's C ABI (tests/device_interop.rs,
//! tests/device_capi.rs).
// Each test binary uses part of it.
#![allow(dead_code)]

use rpma_harness::{addr, next_port};
use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

pub fn target_dir() -> PathBuf {
    std::env::current_exe().unwrap().parent().and_then(|d| d.parent()).unwrap().to_path_buf()
}

/// Builds a C peer once per run; fails loudly without gcc or librpma-dev.
pub fn build_c(name: &str, cell: &'static OnceLock<PathBuf>) -> &'static PathBuf {
    cell.get_or_init(|| build_c_linked(name, None))
}

/// Builds `tests/c/NAME.c` against C librpma's header, linked to the
/// system's C librpma (`lib` None) or to the librpma in `lib` (rpma's C ABI).
pub fn build_c_linked(name: &str, lib: Option<&Path>) -> PathBuf {
    let src = format!("{}/tests/c/{name}.c", env!("CARGO_MANIFEST_DIR"));
    build_c_source(Path::new(&src), name, lib)
}

/// Builds the C program `src` as `target_dir()/NAME` (`NAME-rpma` when
/// linked to the librpma in `lib`); fails loudly without gcc or librpma-dev.
pub fn build_c_source(src: &Path, name: &str, lib: Option<&Path>) -> PathBuf {
    let out = target_dir().join(if lib.is_some() { format!("{name}-rpma") } else { name.to_string() });
    let mut gcc = Command::new("gcc");
    gcc.args(["-O1", "-Wall", "-Werror", "-o"]).arg(&out).arg(src);
    if let Some(l) = lib {
        gcc.arg(format!("-L{}", l.display()));
    }
    let st =
        gcc.args(["-lrpma", "-libverbs"]).status().expect("gcc (harness/install-deps installs it with librpma-dev)");
    assert!(st.success(), "building {} against librpma failed", src.display());
    out
}

/// rpma's C ABI as `harness/capi-build` installs it (harness/test runs it
/// first); fails loudly when it is missing.
pub fn capi_lib_dir() -> PathBuf {
    // target_dir() is target/debug; capi-build installs into target/capi.
    let dir = target_dir().parent().unwrap().join("capi").join("lib");
    assert!(dir.join("librpma.so.0").exists(), "{} lacks librpma.so.0: run harness/capi-build", dir.display());
    dir
}

/// `cmd` with `lib` (rpma's C ABI) searched first, or the system's librpma.
pub fn with_lib(mut cmd: Command, lib: Option<&Path>) -> Command {
    cmd.env_remove("LD_LIBRARY_PATH");
    if let Some(l) = lib {
        cmd.env("LD_LIBRARY_PATH", l);
    }
    cmd
}

/// Runs one case: a server of one implementation, a client of the other
/// (retried while the server is not listening yet); returns both outputs.
pub fn case(server: &PathBuf, client: &PathBuf, case: &str) -> (String, String) {
    case_on(server, None, client, None, case)
}

/// [`case`] with each side's C librpma chosen: `None` is the system's (C
/// librpma), `Some(dir)` the one in `dir` (rpma's, through `LD_LIBRARY_PATH`).
pub fn case_on(
    server: &PathBuf,
    server_lib: Option<&Path>,
    client: &PathBuf,
    client_lib: Option<&Path>,
    case: &str,
) -> (String, String) {
    let port = next_port().to_string();
    let srv = with_lib(Command::new(server), server_lib)
        .args(["server", &addr(), &port])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut cli_out = String::new();
    for attempt in 0..20 {
        let out = with_lib(Command::new(client), client_lib)
            .args(["client", &addr(), &port, case])
            .stderr(Stdio::piped())
            .output()
            .unwrap();
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

pub fn example(name: &str) -> PathBuf {
    let p = target_dir().join("examples").join(name);
    assert!(p.exists(), "{} is not built (cargo test builds the examples)", p.display());
    p
}

pub fn c_example_peer() -> &'static PathBuf {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    build_c("example_peer", &BIN)
}

/// One row of librpma's examples: the arguments librpma's runner gives them
/// (`examples/run-all-examples.sh`, DRAM) and the lines each side prints.
/// `*` in an expected line matches any run of characters (a pid, a QP number).
pub struct Example {
    /// The peer's name for it, e.g. "06scch".
    pub peer: &'static str,
    /// The Rust example, `target/debug/examples/NAME`.
    rust: &'static str,
    server_args: &'static [&'static str],
    /// Extra server arguments that keep the test quick when the Rust server
    /// (06: how many clients to serve) or the C peer (06: idle seconds)
    /// is under test.
    rust_server_args: Option<&'static [&'static str]>,
    peer_server_args: Option<&'static [&'static str]>,
    /// One entry per client: its arguments and the lines it prints.
    clients: &'static [(&'static [&'static str], &'static [&'static str])],
    /// Clients run at the same time (13) rather than one after another.
    concurrent: bool,
    server_lines: &'static [&'static str],
}

/// 13's client lines for a seed: three exchanges.
macro_rules! srq_client {
    ($a:literal, $b:literal, $c:literal, $d:literal) => {
        [
            concat!("[client #*] value sent: ", $a),
            concat!("[client #*] value received: ", $b),
            concat!("[client #*] value sent: ", $b),
            concat!("[client #*] value received: ", $c),
            concat!("[client #*] value sent: ", $c),
            concat!("[client #*] value received: ", $d),
        ]
    };
}
macro_rules! srq_received {
    ($v:literal) => {
        concat!("[server] value received: ", $v, " from the connection [qp#*]")
    };
}
macro_rules! srq_sent {
    ($v:literal) => {
        concat!("[server] value sent: ", $v, " from the connection [qp#*]")
    };
}

/// 06's clients, one after another: seeds 8, 9, 11, 12 pick these names
/// with glibc's `srand(seed); rand() % 13`.
const MULTI_CLIENTS: &[(&[&str], &[&str])] = &[
    (&["8"], &["My names is: Chet"]),
    (&["9"], &["My names is: Piotr"]),
    (&["11"], &["My names is: Piotr"]),
    (&["12"], &["My names is: Lukasz"]),
];
const MULTI_SERVER: &[&str] = &["Today I have got in touch with:", "- Chet", "- Piotr", "- Piotr", "- Lukasz"];
const RCQ_CLIENT: &[&str] =
    &["CLIENT: Value sent: 7", "CLIENT: Value received: 8", "CLIENT: Value sent: 8", "CLIENT: Value received: 9"];
const RCQ_SERVER: &[&str] =
    &["SERVER: Value received: 7", "SERVER: Value sent: 8", "SERVER: Value received: 8", "SERVER: Value sent: 9"];

const HELLO_CLIENT: &[&str] = &["Next value: Hello world!", "translating...", "Translation: ¡Hola Mundo!"];

pub const EXAMPLES: &[Example] = &[
    Example {
        peer: "01",
        rust: "01-connection",
        server_args: &[],
        rust_server_args: None,
        peer_server_args: None,
        clients: &[(&[], &["Received a message: Hello client!"])],
        concurrent: false,
        server_lines: &["Received a message: Hello server!"],
    },
    Example {
        peer: "02",
        rust: "02-read-to-volatile",
        server_args: &[],
        rust_server_args: None,
        peer_server_args: None,
        clients: &[(&[], &["Read a message: Hello client!"])],
        concurrent: false,
        server_lines: &[],
    },
    Example {
        peer: "03",
        rust: "03-read-to-persistent",
        server_args: &[],
        rust_server_args: None,
        peer_server_args: None,
        clients: &[(&[], HELLO_CLIENT)],
        concurrent: false,
        server_lines: &["New value: Hello world!"],
    },
    Example {
        peer: "04",
        rust: "04-write-to-persistent",
        server_args: &[],
        rust_server_args: None,
        peer_server_args: None,
        clients: &[(&[], HELLO_CLIENT)],
        concurrent: false,
        server_lines: &["New value: Hello world!"],
    },
    Example {
        peer: "05",
        rust: "05-flush-to-persistent",
        server_args: &[],
        rust_server_args: None,
        peer_server_args: None,
        clients: &[(
            &[],
            &[
                "Next value: Hello world!",
                "RPMA_FLUSH_TYPE_PERSISTENT is NOT supported, RPMA_FLUSH_TYPE_VISIBILITY is used instead",
                "translating...",
                "Translation: ¡Hola Mundo!",
            ],
        )],
        concurrent: false,
        server_lines: &["New value: Hello world!"],
    },
    Example {
        peer: "06",
        rust: "06-multiple-connections",
        server_args: &[],
        rust_server_args: Some(&["4"]),
        peer_server_args: Some(&["5"]),
        clients: MULTI_CLIENTS,
        concurrent: false,
        server_lines: MULTI_SERVER,
    },
    Example {
        peer: "06scch",
        rust: "06scch-multiple-connections",
        server_args: &[],
        rust_server_args: Some(&["4"]),
        peer_server_args: Some(&["5"]),
        clients: MULTI_CLIENTS,
        concurrent: false,
        server_lines: MULTI_SERVER,
    },
    Example {
        peer: "07",
        rust: "07-atomic-write",
        server_args: &[],
        rust_server_args: None,
        peer_server_args: None,
        clients: &[(&["1st_word", "2nd_word", "3rd_word"], &["used value: 16"])],
        concurrent: false,
        server_lines: &["1st_word", "2nd_word", "3rd_word"],
    },
    Example {
        peer: "08",
        rust: "08-messages-ping-pong",
        server_args: &[],
        rust_server_args: None,
        peer_server_args: None,
        clients: &[(&["7", "3"], &["Value sent: 7", "Value received: 8", "Value sent: 8", "Value received: 9"])],
        concurrent: false,
        server_lines: &["Value received: 7", "Value sent: 8", "Value received: 8", "Value sent: 9"],
    },
    Example {
        peer: "08srq",
        rust: "08srq-simple-messages-ping-pong-with-srq",
        server_args: &[],
        rust_server_args: None,
        peer_server_args: None,
        clients: &[(
            &["7", "3"],
            &[
                "Value sent: 7",
                "Value received: 8",
                "Value sent: 8",
                "Value received: 9",
                "Value sent: 9",
                "Value received: 10",
            ],
        )],
        concurrent: false,
        server_lines: &[
            "Value received: 7",
            "Value sent: 8",
            "Value received: 8",
            "Value sent: 9",
            "Value received: 9",
            "Value sent: 10",
        ],
    },
    Example {
        peer: "09",
        rust: "09-flush-to-persistent-GPSPM",
        server_args: &[],
        rust_server_args: None,
        peer_server_args: None,
        clients: &[(&[], HELLO_CLIENT)],
        concurrent: false,
        server_lines: &[
            "Flush request received: {offset: 0x0, length: 0x400, op_context: 0xF01D}",
            "At this point, persist function should be called if persistent memory will be in use",
            "New value: Hello world!",
        ],
    },
    Example {
        peer: "09scch",
        rust: "09scch-flush-to-persistent-GPSPM",
        server_args: &[],
        rust_server_args: None,
        peer_server_args: None,
        clients: &[(&[], HELLO_CLIENT)],
        concurrent: false,
        server_lines: &[
            "Flush request received: {offset: 0x0, length: 0x400, op_context: 0xF01D}",
            "At this point, persistent function should be called if persistent memory will be in use",
            "New value: Hello world!",
        ],
    },
    Example {
        peer: "10",
        rust: "10-send-with-imm",
        server_args: &[],
        rust_server_args: None,
        peer_server_args: None,
        clients: &[(&["1234", "1st_word"], &["Sending value '1st_word' with immediate data '1234'"])],
        concurrent: false,
        server_lines: &["Received value '1st_word' with immediate data '1234'"],
    },
    Example {
        peer: "11",
        rust: "11-write-with-imm",
        server_args: &[],
        rust_server_args: None,
        peer_server_args: None,
        clients: &[(&["1234"], &["Writing value '1234' with immediate data '1234'"])],
        concurrent: false,
        server_lines: &["The value '1234' was written together with immediate data '1234'"],
    },
    Example {
        peer: "12",
        rust: "12-receive-completion-queue",
        server_args: &[],
        rust_server_args: None,
        peer_server_args: None,
        clients: &[(&["7", "3"], RCQ_CLIENT)],
        concurrent: false,
        server_lines: RCQ_SERVER,
    },
    Example {
        peer: "12scch",
        rust: "12scch-receive-completion-queue",
        server_args: &[],
        rust_server_args: None,
        peer_server_args: None,
        clients: &[(&["7", "3"], RCQ_CLIENT)],
        concurrent: false,
        server_lines: RCQ_SERVER,
    },
    Example {
        peer: "13",
        rust: "13-messages-ping-pong-with-srq",
        server_args: &["3"],
        rust_server_args: None,
        peer_server_args: None,
        clients: &[
            (&["1", "3"], &srq_client!(1, 2, 3, 4)),
            (&["5", "3"], &srq_client!(5, 6, 7, 8)),
            (&["10", "3"], &srq_client!(10, 11, 12, 13)),
        ],
        concurrent: true,
        server_lines: &[
            "The client #1 has been connected.",
            "The client #2 has been connected.",
            "The client #3 has been connected.",
            "Server ended listening.",
            srq_received!(1),
            srq_sent!(2),
            srq_received!(2),
            srq_sent!(3),
            srq_received!(3),
            srq_sent!(4),
            srq_received!(5),
            srq_sent!(6),
            srq_received!(6),
            srq_sent!(7),
            srq_received!(7),
            srq_sent!(8),
            srq_received!(10),
            srq_sent!(11),
            srq_received!(11),
            srq_sent!(12),
            srq_received!(12),
            srq_sent!(13),
        ],
    },
];

/// A line no pair may print (on either output, either side).
fn suspicious(line: &str) -> bool {
    let l = line.to_lowercase();
    ["error", "failed", "unexpected", "too big", "too small", "unable"].iter().any(|w| l.contains(w))
        || l.trim_end().strip_prefix("received a message:").is_some_and(|rest| rest.trim().is_empty())
}

/// `*` matches any run of characters; everything else literally.
fn glob(pattern: &str, line: &str) -> bool {
    let mut parts = pattern.split('*');
    let first = parts.next().unwrap_or("");
    let Some(mut rest) = line.strip_prefix(first) else { return false };
    let parts: Vec<&str> = parts.collect();
    for (i, p) in parts.iter().enumerate() {
        if i == parts.len() - 1 {
            return rest.len() >= p.len() && rest.ends_with(p);
        }
        match rest.find(p) {
            Some(at) => rest = &rest[at + p.len()..],
            None => return false,
        }
    }
    rest.is_empty()
}

/// The expected lines missing from `out` (each expected line needs its own
/// output line).
fn missing(expected: &[&str], out: &str) -> Vec<String> {
    let mut used = vec![false; out.lines().count()];
    let lines: Vec<&str> = out.lines().collect();
    let mut miss = Vec::new();
    for e in expected {
        match (0..lines.len()).find(|&i| !used[i] && glob(e, lines[i])) {
            Some(i) => used[i] = true,
            None => miss.push(e.to_string()),
        }
    }
    miss
}

/// One process of a pair, its outputs in files under `dir`.
struct Proc {
    name: String,
    child: std::process::Child,
    out: PathBuf,
    err: PathBuf,
    status: Option<std::process::ExitStatus>,
}

fn spawn(dir: &Path, name: &str, cmd: &Path, lib: Option<&Path>, args: &[&str]) -> Proc {
    let (out, err) = (dir.join(format!("{name}.out")), dir.join(format!("{name}.err")));
    let child = with_lib(Command::new(cmd), lib)
        .args(args)
        .env_remove("RUST_LOG")
        .stdout(File::create(&out).unwrap())
        .stderr(File::create(&err).unwrap())
        .spawn()
        .unwrap_or_else(|e| panic!("{}: {e}", cmd.display()));
    Proc { name: name.into(), child, out, err, status: None }
}

/// Waits for p until `deadline`, then kills it (a hung peer fails the pair).
fn finish(p: &mut Proc, deadline: Instant) {
    loop {
        if let Some(st) = p.child.try_wait().unwrap() {
            p.status = Some(st);
            return;
        }
        if Instant::now() >= deadline {
            let _ = p.child.kill();
            let _ = p.child.wait();
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Who runs one side of an example pair.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    /// The Rust example.
    Rust,
    /// The C peer on C librpma.
    C,
    /// The same C peer binary on rpma's C ABI (`LD_LIBRARY_PATH`).
    CRpma,
}

impl Side {
    fn tag(self) -> &'static str {
        match self {
            Side::Rust => "rs",
            Side::C => "c",
            Side::CRpma => "crpma",
        }
    }

    /// How a table names it.
    pub fn label(self) -> &'static str {
        match self {
            Side::Rust => "Rust",
            Side::C => "C on C librpma",
            Side::CRpma => "C on rpma",
        }
    }

    fn lib(self) -> Option<PathBuf> {
        (self == Side::CRpma).then(capi_lib_dir)
    }
}

/// Runs one pair of one example; returns the problems found (none: ok)
/// and a transcript of both sides.
pub fn run_pair(ex: &Example, server: Side, client: Side) -> (Vec<String>, String) {
    let (rust, peer) = (example(ex.rust), c_example_peer().clone());
    let port = next_port().to_string();
    let dir = target_dir().join("example-pairs").join(format!("{}-{}-{}", ex.peer, server.tag(), client.tag()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let a = addr();
    // Rust: NAME server|client ADDR PORT ARGS; the peer: EXAMPLE server|client ADDR PORT ARGS.
    let cmd = |side: Side, role: &'static str, args: &[&'static str]| -> (PathBuf, Vec<String>) {
        let rust_side = side == Side::Rust;
        let mut v: Vec<String> = Vec::new();
        if !rust_side {
            v.push(ex.peer.into());
        }
        v.extend([role.to_string(), a.clone(), port.clone()]);
        v.extend(args.iter().map(|s| s.to_string()));
        (if rust_side { rust.clone() } else { peer.clone() }, v)
    };
    let mut sargs: Vec<&'static str> = ex.server_args.to_vec();
    sargs.extend(if server == Side::Rust { ex.rust_server_args } else { ex.peer_server_args }.unwrap_or(&[]));
    let (scmd, sv) = cmd(server, "server", &sargs);
    let sv: Vec<&str> = sv.iter().map(String::as_str).collect();
    let (server_lib, client_lib) = (server.lib(), client.lib());
    let mut server = spawn(&dir, "server", &scmd, server_lib.as_deref(), &sv);
    // Both kinds of client retry a rejected connection for 10 s; a head start
    // keeps that the exception.
    std::thread::sleep(Duration::from_millis(300));
    let mut clients = Vec::new();
    for (i, (args, _)) in ex.clients.iter().enumerate() {
        let (ccmd, cv) = cmd(client, "client", args);
        let cv: Vec<&str> = cv.iter().map(String::as_str).collect();
        let mut c = spawn(&dir, &format!("client{}", i + 1), &ccmd, client_lib.as_deref(), &cv);
        if !ex.concurrent {
            finish(&mut c, Instant::now() + Duration::from_secs(40));
        }
        clients.push(c);
    }
    let deadline = Instant::now() + Duration::from_secs(40);
    for c in clients.iter_mut() {
        finish(c, deadline);
    }
    // The server's own waits end within its timeouts once the clients are gone.
    finish(&mut server, Instant::now() + Duration::from_secs(20));

    let mut problems = Vec::new();
    let mut transcript = String::new();
    let sides =
        std::iter::once((&server, ex.server_lines)).chain(clients.iter().zip(ex.clients).map(|(c, (_, l))| (c, *l)));
    for (proc_, expected) in sides {
        let out = std::fs::read_to_string(&proc_.out).unwrap_or_default();
        let err = std::fs::read_to_string(&proc_.err).unwrap_or_default();
        match proc_.status {
            None => problems.push(format!("{} hung (killed)", proc_.name)),
            Some(st) if !st.success() => problems.push(format!("{} exited with {st}", proc_.name)),
            _ => {}
        }
        let miss = missing(expected, &out);
        if !miss.is_empty() {
            problems.push(format!("{} lacks {miss:?}", proc_.name));
        }
        let sus: Vec<&str> = out.lines().chain(err.lines()).filter(|l| suspicious(l)).collect();
        if !sus.is_empty() {
            problems.push(format!("{} printed {sus:?}", proc_.name));
        }
        transcript += &format!("    {} stdout:\n", proc_.name);
        transcript += &out.lines().map(|l| format!("      | {l}\n")).collect::<String>();
        transcript += &format!("    {} stderr:\n", proc_.name);
        transcript += &err.lines().map(|l| format!("      | {l}\n")).collect::<String>();
    }
    (problems, transcript)
}

/// The cases of tests/c/interop_peer.c and tests/interop-peer.rs.
pub const INTEROP_CASES: [&str; 7] =
    ["read", "write-flush-vis", "write-flush-pers", "atomic", "send", "send-imm", "write-imm"];

/// Whether an interop case left its bytes where they belong: `s` and `k` are
/// the server's and client's outputs, `srv_name` / `cli_name` the
/// implementations ("C" or "Rust") as the peers print them.
pub fn interop_case_ok(name: &str, s: &str, k: &str, srv_name: &str, cli_name: &str) -> bool {
    let msg = format!("from the {cli_name} client");
    match name {
        "read" => k.contains(&format!("read: \"Hello from {srv_name} server!\"")),
        "write-flush-vis" => s.contains(&format!("at1024: \"{msg}\"")),
        // Where the server cannot offer persistent flush (native flush on
        // DRAM, docs/worlds.md), the client must be refused, not flush.
        // Native flush is the world's: rxe has it from Linux 6.2, and only
        // rdma-core 45+ posts it (Debian 12's 44 on the 6.12 kernel
        // emulates flush, so a persistent one must land there).
        "write-flush-pers" => {
            let native_flush = rpma_harness::rxe_iba15() && rpma_harness::rdma_core_release().is_some_and(|r| r >= 45);
            let landed = s.contains(&format!("at1024: \"{msg}\""));
            let refused =
                s.contains("persistent flush refused on DRAM") && k.contains("write-flush-pers refused (NOSUPP)");
            landed || (native_flush && refused)
        }
        "atomic" => s.contains("counter: 0x102030405060708"),
        "send" => s.contains(&format!("msg \"{msg}")) && !s.contains(" imm "),
        "send-imm" => s.contains(&format!("msg \"{msg}")) && s.contains(" imm 12648430"),
        "write-imm" => s.contains(&format!("at2048: \"{msg}\"")) && s.contains("\" imm 48879"),
        _ => unreachable!(),
    }
}
