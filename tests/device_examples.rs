//! Runs every example, both sides, on a real RDMA device (one VM boot for
//! all of them when the host has none) and checks what they print.

use rpma_harness::device_tests;
use std::path::PathBuf;
use std::process::Command;

fn example(name: &str) -> PathBuf {
    // target/debug/deps/device_examples-HASH -> target/debug/examples/NAME
    let exe = std::env::current_exe().unwrap();
    let dir = exe.parent().and_then(|d| d.parent()).unwrap().join("examples").join(name);
    assert!(dir.exists(), "{} is not built (cargo test builds the examples)", dir.display());
    dir
}

/// Runs `name` with `args` (a librpma twin: `both ADDR PORT`, its two
/// sides as two processes) and checks what it prints.
fn run_with(name: &str, args: &[&str], expect: &[&str]) {
    let out = Command::new(example(name)).args(args).env("RUST_LOG", "warn").output().expect("run example");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    print!("{}", stdout.lines().map(|l| format!("  | {l}\n")).collect::<String>());
    assert!(out.status.success(), "{name} failed ({}):\n{stdout}\n{stderr}", out.status);
    for e in expect {
        assert!(stdout.contains(e), "{name}: output lacks {e:?}:\n{stdout}\n{stderr}");
    }
}

/// [`run_with`] both sides of a librpma twin on the test's device.
fn run(name: &str, expect: &[&str]) {
    let (addr, port) = (rpma_harness::addr(), rpma_harness::next_port().to_string());
    run_with(name, &["both", &addr, &port], expect);
}

/// What 06 and 06scch print: the server's header, each client's name (seeds
/// as librpma's runner, glibc's rand) and the server's list.
/// Runs `name`'s server (with `server_args` after ADDR PORT) and, once it
/// listens, its client (`client_args`); both must succeed and the outputs
/// together hold every `expect`.
fn run_pair(name: &str, server_args: &[&str], client_args: &[&str], expect: &[&str]) {
    let (addr, port) = (rpma_harness::addr(), rpma_harness::next_port().to_string());
    let spawn = |side: &str, args: &[&str]| {
        Command::new(example(name))
            .env("RUST_LOG", "warn")
            .args([side, addr.as_str(), port.as_str()])
            .args(args)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("run example")
    };
    let server = spawn("server", server_args);
    // The client retries while the server is not listening yet.
    let client = spawn("client", client_args).wait_with_output().unwrap();
    let server = server.wait_with_output().unwrap();
    both_succeed(name, &server, &client, expect);
}

/// Prints a server's and a client's output; both must have succeeded, and
/// their outputs together hold every `expect`.
fn both_succeed(name: &str, server: &std::process::Output, client: &std::process::Output, expect: &[&str]) {
    let mut all = String::new();
    for (side, out) in [("server", server), ("client", client)] {
        let (so, se) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        print!("{}", so.lines().map(|l| format!("  {side} | {l}\n")).collect::<String>());
        assert!(out.status.success(), "{name} {side} failed ({}):\n{so}\n{se}", out.status);
        all.push_str(&so);
    }
    for e in expect {
        assert!(all.contains(e), "{name}: output lacks {e:?}:\n{all}");
    }
}

const MULTI: &[&str] = &[
    "Today I have got in touch with:",
    "My names is: Chet",
    "My names is: Piotr",
    "My names is: Lukasz",
    "- Chet\n",
    "- Piotr\n",
    "- Lukasz\n",
];

device_tests!({
    /// The standalone pair the README points to first: the server, then the
    /// client once the server listens; each checks what it must and prints
    /// what the other wrote.
    fn ex_server_and_client() {
        let (addr, port) = (rpma_harness::addr(), rpma_harness::next_port().to_string());
        let side = |name: &str| {
            Command::new(example(name))
                .args([addr.as_str(), port.as_str()])
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .expect("run example")
        };
        let mut server = side("server");
        rpma_harness::wait_listening(&port, &mut server, std::time::Duration::from_secs(30));
        let client = side("client").wait_with_output().unwrap();
        let server = server.wait_with_output().unwrap();
        both_succeed(
            "server and client",
            &server,
            &client,
            &[
                "client: the server says \"Hello from the rpma server!\"",
                "server: the client wrote \"Hello back from the rpma client!\"",
            ],
        );
    }

    fn ex_demo() {
        // The server checks what the client wrote and fails otherwise.
        run("demo", &["demo: ok", "counter = 42", "client: RDMA read: \"Hello from the rpma demo server!\""]);
    }

    fn ex_async_log() {
        // 16 connections on one tokio thread, 8 fetch-and-add reserved
        // appends each; the server checks every slot
        run(
            "async-log",
            &[
                "exported to each connection alone",
                "log: 128 records from 16 clients, each in its own slot; tail 128",
                "client: 16 connections on one thread",
            ],
        );
    }

    fn ex_async_log_shared_the_librpma_way() {
        run_pair(
            "async-log",
            &["4", "4", "--shared"],
            &["4", "4"],
            &[
                "shared by every connection (librpma's way)",
                "log: 16 records from 4 clients, each in its own slot; tail 16",
                "client: 4 connections on one thread",
            ],
        );
    }

    fn ex_01_connection() {
        run("01-connection", &["Received a message: Hello server!", "Received a message: Hello client!"]);
    }

    fn ex_02_read_to_volatile() {
        run("02-read-to-volatile", &["Read a message: Hello client!"]);
    }

    fn ex_03_read_to_persistent() {
        run(
            "03-read-to-persistent",
            &["Next value: Hello world!", "New value: Hello world!", "translating...", "Translation: ¡Hola Mundo!"],
        );
    }

    fn ex_04_write_to_persistent() {
        run(
            "04-write-to-persistent",
            &["Next value: Hello world!", "translating...", "Translation: ¡Hola Mundo!", "New value: Hello world!"],
        );
    }

    fn ex_05_flush_to_persistent() {
        run(
            "05-flush-to-persistent",
            &[
                "Next value: Hello world!",
                "RPMA_FLUSH_TYPE_PERSISTENT is NOT supported, RPMA_FLUSH_TYPE_VISIBILITY is used instead",
                "translating...",
                "Translation: ¡Hola Mundo!",
                "New value: Hello world!",
            ],
        );
    }

    fn ex_07_atomic_write() {
        run("07-atomic-write", &["used value: 16", "1st_word\n2nd_word\n3rd_word\n"]);
    }

    fn ex_ring_log() {
        // 1024 records built in place in a 16-slot ring while the writes of
        // the others are in flight; the server checks every byte.
        run(
            "ring-log",
            &["log: 1024 records of 256 bytes, every byte as staged", "client: 1024 records from one 16-slot ring"],
        );
    }

    fn ex_08_messages_ping_pong() {
        run("08-messages-ping-pong", &["Value sent: 7", "Value received: 8", "Value sent: 8", "Value received: 9"]);
    }

    fn ex_08srq_simple_messages_ping_pong_with_srq() {
        run("08srq-simple-messages-ping-pong-with-srq", &["Value sent: 9", "Value received: 10"]);
    }

    fn ex_10_send_with_imm() {
        run(
            "10-send-with-imm",
            &[
                "Sending value '1st_word' with immediate data '1234'",
                "Received value '1st_word' with immediate data '1234'",
            ],
        );
    }

    fn ex_11_write_with_imm() {
        run(
            "11-write-with-imm",
            &[
                "Writing value '1234' with immediate data '1234'",
                "The value '1234' was written together with immediate data '1234'",
            ],
        );
    }

    fn ex_12_receive_completion_queue() {
        run(
            "12-receive-completion-queue",
            &["CLIENT: Value sent: 8", "SERVER: Value received: 8", "CLIENT: Value received: 9"],
        );
    }

    fn ex_12scch_receive_completion_queue() {
        run(
            "12scch-receive-completion-queue",
            &["CLIENT: Value sent: 8", "SERVER: Value sent: 9", "CLIENT: Value received: 9"],
        );
    }

    fn ex_06_multiple_connections() {
        run("06-multiple-connections", MULTI);
    }

    fn ex_06scch_multiple_connections() {
        run("06scch-multiple-connections", MULTI);
    }

    fn ex_09_flush_to_persistent_gpspm() {
        run(
            "09-flush-to-persistent-GPSPM",
            &[
                "Next value: Hello world!",
                "Flush request received: {offset: 0x0, length: 0x400, op_context: 0xF01D}",
                "At this point, persist function should be called if persistent memory will be in use",
                "translating...",
                "Translation: ¡Hola Mundo!",
                "New value: Hello world!",
            ],
        );
    }

    fn ex_09scch_flush_to_persistent_gpspm() {
        run(
            "09scch-flush-to-persistent-GPSPM",
            &[
                "Next value: Hello world!",
                "Flush request received: {offset: 0x0, length: 0x400, op_context: 0xF01D}",
                "At this point, persistent function should be called if persistent memory will be in use",
                "translating...",
                "Translation: ¡Hola Mundo!",
                "New value: Hello world!",
            ],
        );
    }

    fn ex_13_messages_ping_pong_with_srq() {
        run(
            "13-messages-ping-pong-with-srq",
            &[
                "The client #3 has been connected.",
                "Server ended listening.",
                "] value sent: 1\n",
                "] value received: 2\n",
                "] value sent: 3\n",
                "] value received: 4\n",
                "] value sent: 10\n",
                "] value received: 13\n",
                "[server] value received: 12 from the connection [qp#",
                "[server] value sent: 13 from the connection [qp#",
            ],
        );
    }

    fn ex_log() {
        run_with("log", &[], &["custom log function: [Error]", "some info"]);
    }
});
