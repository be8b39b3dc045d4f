//! The `rpma` tool on a real RDMA device (Soft-RoCE in the harness VM when
//! the host has none): `devices` finds the test's device and address,
//! `serve` answers the README's quick start, `ping` and a short `bench` of every workload (GPSPM
//! included), several connections at once driven by several threads, and
//! bad input is refused with a message, never a hang.

use rpma_harness::{addr, device_tests, next_port, wait_listening};
use std::io::BufRead;
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};
use std::time::Duration;

/// The README's quick start (`examples/client.rs`), built into this test to
/// run against the tool.
#[allow(dead_code)]
#[path = "../../examples/client.rs"]
mod client;

const RPMA: &str = env!("CARGO_BIN_EXE_rpma");

fn rpma(args: &[&str]) -> Output {
    Command::new(RPMA).args(args).output().expect("run rpma")
}

fn text(o: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr))
}

/// `r`, a `bench --json` report of one size, checked: its provenance, and
/// figures that agree with each other (rate = operations / seconds,
/// bandwidth = rate x size, percentiles in order). Returns the row.
fn checked_report<'a>(r: &'a serde_json::Value, addr: &str, w: &str, iters: u64) -> &'a serde_json::Value {
    assert_eq!((r["tool"].as_str(), r["address"].as_str()), (Some("rpma"), Some(addr)), "{r}");
    assert!(r["version"].is_string() && r["time"].as_str().is_some_and(|t| t.ends_with('Z')), "{r}");
    assert!(r["device"].as_str().is_some_and(|d| !d.is_empty()), "{r}");
    assert_eq!(r["options"]["workload"], w, "{r}");
    let rows = r["results"].as_array().unwrap();
    assert_eq!(rows.len(), 1, "{r}");
    let row = &rows[0];
    let f = |k: &str| row[k].as_f64().unwrap_or_else(|| panic!("{k}: {row}"));
    assert_eq!(row["n_iterations"].as_u64(), Some(iters), "{row}");
    let rate = iters as f64 / f("seconds");
    assert!((f("MsgRate") * 1e6 - rate).abs() <= rate * 1e-9, "rate = operations / seconds: {row}");
    let bw = rate * f("MsgSize") / 1048576.0;
    assert!((f("BW_average") - bw).abs() <= bw * 1e-9 && f("BW_peak") >= f("BW_average"), "bandwidth: {row}");
    let order = ["t_min", "t_typical", "percentile_99", "percentile_99.9", "t_max"];
    assert!(order.windows(2).all(|p| f(p[0]) <= f(p[1])) && f("t_min") > 0.0, "percentiles: {row}");
    assert!(f("t_min") <= f("t_avg") && f("t_avg") <= f("t_max") && f("t_stdev") >= 0.0, "{row}");
    row
}

/// `tests/c/example_peer.c` (librpma's examples' contracts) built against
/// Debian's C librpma, as `name` in the temporary directory.
fn example_peer(name: &str) -> PathBuf {
    let peer = std::env::temp_dir().join(format!("rpma-tools-{name}-{}", std::process::id()));
    let src = concat!(env!("CARGO_MANIFEST_DIR"), "/../tests/c/example_peer.c");
    let st = Command::new("gcc")
        .args(["-O1", "-Wall", "-Werror", "-o"])
        .arg(&peer)
        .arg(src)
        .args(["-lrpma", "-libverbs"])
        .status()
        .expect("gcc (harness/install-deps installs it with librpma-dev)");
    assert!(st.success(), "building {src} against C librpma");
    peer
}

/// `ping --json`'s statistics: perftest's keys, ordered as they must be,
/// with the provenance `meta` gives every report.
fn check_ping_json(o: &Output, count: u64, size: u64) -> serde_json::Value {
    assert!(o.status.success(), "{}", text(o));
    let r: serde_json::Value = serde_json::from_slice(&o.stdout).expect("JSON");
    assert_eq!((r["n_iterations"].as_u64(), r["MsgSize"].as_u64()), (Some(count), Some(size)), "{r}");
    let f = |k: &str| r[k].as_f64().unwrap_or_else(|| panic!("{k}: {r}"));
    let (min, max, typ, avg) = (f("t_min"), f("t_max"), f("t_typical"), f("t_avg"));
    assert!(0.0 < min && min <= typ && typ <= max && min <= avg && avg <= max, "{r}");
    assert!(f("t_stdev") >= 0.0 && typ <= f("percentile_99") && f("percentile_99") <= f("percentile_99.9"), "{r}");
    assert!(f("percentile_99.9") <= max, "{r}");
    assert_eq!(r["validated"], true, "{r}");
    assert_eq!((r["tool"].as_str(), r["address"].as_str()), (Some("rpma"), Some(addr().as_str())), "{r}");
    assert!(r["device"].is_string() && r["port"].is_u64() && r["time"].is_string(), "{r}");
    assert_eq!(r["options"]["count"].as_u64(), Some(count), "{r}");
    r
}

device_tests!({
    fn devices_lists_the_test_device() {
        let o = rpma(&["devices", "--json"]);
        assert!(o.status.success(), "{}", text(&o));
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("JSON");
        let has_addr = |p: &serde_json::Value| {
            p["gids"].as_array().unwrap().iter().any(|g| g["ip"].as_str() == Some(addr().as_str()))
        };
        assert_eq!((v["tool"].as_str(), v["options"]["json"].as_bool()), (Some("rpma"), Some(true)), "{v}");
        let dev = v["devices"]
            .as_array()
            .unwrap()
            .iter()
            .find(|d| d["ports"].as_array().unwrap().iter().any(has_addr))
            .unwrap_or_else(|| panic!("no device with {} in {v}", addr()));
        let name = dev["name"].as_str().unwrap().to_string();
        // Probed without error, every capability there.
        assert!(dev["error"].is_null(), "{dev}");
        let caps = &dev["rpma"];
        assert!(caps["max_qp_wr"].as_u64().unwrap() > 0, "{dev}");
        for k in ["atomics", "native_flush", "native_atomic_write", "odp", "mw_type1", "mw_type2", "iwarp"] {
            assert!(caps[k].is_boolean(), "{k}: {dev}");
        }
        for k in ["max_mr_size", "max_mr", "max_cqe", "max_srq_wr", "max_sge", "max_sge_rd"] {
            assert!(caps[k].is_u64(), "{k}: {dev}");
        }
        // ibv_devinfo's fields.
        assert!(dev["fw_ver"].is_string(), "{dev}");
        for k in ["vendor_id", "vendor_part_id", "hw_ver", "max_qp_init_rd_atom"] {
            assert!(dev[k].is_u64(), "{k}: {dev}");
        }
        assert!(dev["max_qp_rd_atom"].as_u64().unwrap() > 0, "{dev}");
        let ac = dev["atomic_cap"].as_str().unwrap();
        assert!(["ATOMIC_NONE", "ATOMIC_HCA", "ATOMIC_GLOB"].contains(&ac), "{dev}");
        assert_eq!(caps["atomics"].as_bool(), Some(ac != "ATOMIC_NONE"), "{dev}");
        let port = dev["ports"].as_array().unwrap().iter().find(|p| has_addr(p)).unwrap();
        let mtus = [256, 512, 1024, 2048, 4096];
        let (active, max) = (port["active_mtu"].as_u64().unwrap(), port["max_mtu"].as_u64().unwrap());
        assert!(mtus.contains(&active) && mtus.contains(&max) && active <= max, "{port}");
        assert!(port["lid"].is_u64() && port["sm_lid"].is_u64() && port["error"].is_null(), "{port}");

        let o = rpma(&["devices"]);
        let t = text(&o);
        for want in [addr().as_str(), "rpma: flush", "fw_ver", "atomic_cap", "active_mtu", "sm_lid"] {
            assert!(o.status.success() && t.contains(want), "{want}: {t}");
        }
        println!("{t}");

        // -d: that device alone; -i: that port alone.
        let o = rpma(&["devices", "-d", &name, "-i", "1", "--json"]);
        assert!(o.status.success(), "{}", text(&o));
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("JSON");
        let devs = v["devices"].as_array().unwrap();
        assert!(devs.len() == 1 && devs[0]["name"] == name.as_str(), "{v}");
        let ports = devs[0]["ports"].as_array().unwrap();
        assert!(ports.len() == 1 && ports[0]["port"] == 1, "{v}");
        // An unknown device: a message and exit status 1, in both forms.
        for json in [false, true] {
            let mut args = vec!["devices", "-d", "nosuchdev"];
            if json {
                args.push("--json");
            }
            let o = rpma(&args);
            let t = String::from_utf8_lossy(&o.stderr);
            assert!(o.status.code() == Some(1) && t.contains("nosuchdev") && t.contains(&name), "{}", text(&o));
        }
        // -l: names only.
        let o = rpma(&["devices", "-l"]);
        let t = text(&o);
        assert!(o.status.success() && t.contains("found") && t.lines().any(|l| l.trim() == name), "{t}");
        assert!(!t.contains("GID"), "{t}");
    }

    fn serve_ping_and_bench_every_workload() {
        let port = next_port().to_string();
        let a = addr();
        let mut srv = Command::new(RPMA).args(["serve", &a, &port, "--count", "14"]).spawn().unwrap();
        wait_listening(&port, &mut srv, Duration::from_secs(20));
        let o = rpma(&["ping", &a, &port, "-c", "5"]);
        let t = text(&o);
        assert!(o.status.success() && t.contains("seq=4") && t.contains("5 reads"), "{t}");
        println!("{}", t.lines().last().unwrap());
        // -V: a pattern written, then read back, each round.
        let o = rpma(&["ping", &a, &port, "-c", "4", "-S", "100", "-V"]);
        let t = text(&o);
        assert!(o.status.success() && t.contains("4 reads, every one validated"), "{t}");
        assert!(t.contains("avg") && t.contains("stdev") && !t.contains("no remote writes"), "{t}");
        let r = check_ping_json(&rpma(&["ping", &a, &port, "-c", "20", "-V", "--json"]), 20, 64);
        println!(
            "  ping -V --json: t_typical {} us, t_avg {} us, t_stdev {} us",
            r["t_typical"], r["t_avg"], r["t_stdev"]
        );
        // Every workload, busy-polled (the default) and on events (-e).
        for (w, events) in [
            ("read", false),
            ("write", false),
            ("write-flush", false),
            ("atomic-write", false),
            ("gpspm", false),
            ("read", true),
            ("gpspm", true),
            ("read-write", false),
        ] {
            let mut args = vec!["bench", &a, &port, "-w", w, "-t", "4", "-n", "200", "--json"];
            if w != "atomic-write" {
                args.extend(["-s", "512"]);
            }
            if events {
                args.push("-e");
            }
            if w == "read-write" {
                args.extend(["--rwmixread", "70", "--random"]);
            }
            let o = rpma(&args);
            assert!(o.status.success(), "{w}: {}", text(&o));
            let r: serde_json::Value = serde_json::from_slice(&o.stdout).expect("JSON");
            let row = checked_report(&r, &a, w, 200);
            println!(
                "  {w}{}: {:.0} op/s, t_typical {:.1} us, t_avg {:.1} us, 99.9% {:.1} us",
                if events { " (events)" } else { "" },
                row["MsgRate"].as_f64().unwrap() * 1e6,
                row["t_typical"].as_f64().unwrap(),
                row["t_avg"].as_f64().unwrap(),
                row["percentile_99.9"].as_f64().unwrap()
            );
        }
        // The sweep (-a): every size the 1 MiB region holds, 2 B up.
        let o = rpma(&["bench", &a, &port, "-a", "-n", "10", "--warmup", "1", "--json"]);
        assert!(o.status.success(), "{}", text(&o));
        let r: serde_json::Value = serde_json::from_slice(&o.stdout).expect("JSON");
        let sizes: Vec<u64> = r["results"].as_array().unwrap().iter().map(|x| x["MsgSize"].as_u64().unwrap()).collect();
        assert_eq!(sizes, (1..=20).map(|k| 1u64 << k).collect::<Vec<_>>(), "{r}");
        // The text report: perftest's headers, a row per size with the
        // iterations asked; a timed run (-D, and --count's old name for
        // -n is refused beside it) prints a progress line a second.
        let o = rpma(&["bench", &a, &port, "-s", "64", "-D", "4"]);
        let (out, err) = (String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
        assert!(o.status.success(), "{}", text(&o));
        for want in ["#bytes", "BW peak[MiB/sec]", "MsgRate[Mpps]", "t_typical[usec]", "99.9% percentile[usec]"] {
            assert!(out.contains(want), "{want}: {out}");
        }
        assert!(err.lines().filter(|l| l.contains("operations/s")).count() >= 2, "progress: {err}");
        print!("{out}");
        let o = rpma(&["bench", &a, &port, "--count", "5", "-D", "1"]);
        assert!(o.status.code() == Some(2) && text(&o).contains("cannot be used with"), "{}", text(&o));
        // A DRAM target offers no persistent flush: said, not attempted.
        let o = rpma(&["bench", &a, &port, "--workload", "write-persist", "-n", "10"]);
        assert!(!o.status.success() && text(&o).contains("serve a --pmem path"), "{}", text(&o));
        let st = srv.wait().unwrap();
        assert!(st.success(), "the target served its 14 connections and exited: {st}");
    }

    /// `serve --pmem` on a plain file offers the persistent flush (GPSPM
    /// persists it with `msync`) but no direct write to persistent memory,
    /// so a `bench -w write-persist` client refuses the run, saying why. On
    /// emulated persistent memory as device DAX (the VM booted with
    /// `RPMA_HARNESS_NVDIMM=FILE RPMA_HARNESS_NVDIMM_MODE=devdax`, which sets
    /// `RPMA_TEST_DAX_DEV`) the run goes through. (On rxe a region on FS-DAX
    /// cannot be registered: no ODP.)
    fn bench_write_persist_against_pmem_targets() {
        let a = addr();
        let plain = std::env::temp_dir().join(format!("rpma-tools-pmem-{}", std::process::id()));
        let dax = std::env::var("RPMA_TEST_DAX_DEV").ok();
        for (path, direct) in [(plain.to_str().unwrap().to_string(), false)].into_iter().chain(dax.map(|d| (d, true))) {
            let port = next_port().to_string();
            // A device DAX mapping is a multiple of its 2 MiB alignment.
            let size = if direct { "2097152" } else { "65536" };
            let mut srv = Command::new(RPMA)
                .args(["serve", &a, &port, "--pmem", &path, "--size", size, "--count", "1"])
                .spawn()
                .unwrap();
            wait_listening(&port, &mut srv, Duration::from_secs(20));
            let o = rpma(&["bench", &a, &port, "-w", "write-persist", "-s", "512", "-t", "2", "-n", "100", "--json"]);
            let st = srv.wait();
            if !direct {
                let _ = std::fs::remove_file(&path);
                assert!(!o.status.success() && text(&o).contains("direct write to persistent memory"), "{}", text(&o));
                assert!(st.is_ok_and(|s| s.success()), "the target served its connection and exited");
                println!("  write-persist against a plain file: refused, the client says why");
                continue;
            }
            assert!(o.status.success(), "{}", text(&o));
            let r: serde_json::Value = serde_json::from_slice(&o.stdout).expect("JSON");
            let row = checked_report(&r, &a, "write-persist", 100);
            assert!(st.is_ok_and(|s| s.success()), "the device DAX target served its connection and exited");
            println!("  write-persist on device DAX {path}: t_typical {:.1} us", row["t_typical"].as_f64().unwrap());
        }
    }

    /// The README's quick start, as written, against `rpma serve` in its
    /// default mode.
    fn quick_start_against_serve() {
        let port = next_port().to_string();
        let a = addr();
        let mut srv = Command::new(RPMA).args(["serve", &a, &port, "--count", "1"]).spawn().unwrap();
        wait_listening(&port, &mut srv, Duration::from_secs(20));
        if let Err(e) = client::run(&a, port.parse().unwrap()) {
            let _ = srv.kill();
            panic!("the quick start against rpma serve: {e}");
        }
        let st = srv.wait().unwrap();
        assert!(st.success(), "the target served the quick start and exited: {st}");
        println!("  the README's quick start against rpma serve {a} {port}: ok");
    }

    /// With `--isolate`: each connection reads, writes and flushes through
    /// an export of its own.
    fn bench_several_connections_from_several_threads() {
        let port = next_port().to_string();
        let a = addr();
        // A ping, then three runs of 4 connections, each run's served at
        // once.
        let mut srv = Command::new(RPMA).args(["serve", &a, &port, "--count", "13", "--isolate"]).spawn().unwrap();
        wait_listening(&port, &mut srv, Duration::from_secs(20));
        let o = rpma(&["ping", &a, &port, "-c", "2", "-V"]);
        assert!(o.status.success() && text(&o).contains("2 reads, every one validated"), "{}", text(&o));
        for w in ["read", "write", "gpspm"] {
            let mut args = vec!["bench", &a, &port, "--workload", w, "--json"];
            args.extend("-s 512 -t 4 -q 4 --threads 2 -n 400".split(' '));
            let o = rpma(&args);
            assert!(o.status.success(), "{w}: {}", text(&o));
            let r: serde_json::Value = serde_json::from_slice(&o.stdout).expect("JSON");
            let row = checked_report(&r, &a, w, 400);
            assert_eq!((r["options"]["qp"].as_u64(), r["options"]["threads"].as_u64()), (Some(4), Some(2)), "{r}");
            println!(
                "  {w}, 4 connections, 2 threads: {:.0} op/s, t_typical {:.1} us, 99.9% {:.1} us",
                row["MsgRate"].as_f64().unwrap() * 1e6,
                row["t_typical"].as_f64().unwrap(),
                row["percentile_99.9"].as_f64().unwrap()
            );
        }
        let st = srv.wait().unwrap();
        assert!(st.success(), "the target served its 13 connections and exited: {st}");
    }

    /// C librpma's example clients where they overlap with `serve`: 04
    /// (write), 05 (write, then flush) and 09 (write, then a GPSPM flush
    /// request) from `tests/c/example_peer.c` (librpma's examples'
    /// contracts) on Debian's C librpma.
    fn serves_librpma_example_clients() {
        let peer = example_peer("example-peer");
        let port = next_port().to_string();
        let a = addr();
        // librpma's clients find the region in the private data: the
        // default.
        let mut srv = Command::new(RPMA).args(["serve", &a, &port, "--count", "3"]).spawn().unwrap();
        wait_listening(&port, &mut srv, Duration::from_secs(20));
        for (ex, says) in [("04", "Translation:"), ("05", "Translation:"), ("09", "Translation:")] {
            let o = Command::new(&peer).args([ex, "client", &a, &port]).output().unwrap();
            assert!(o.status.success() && text(&o).contains(says), "C librpma's example {ex}: {}", text(&o));
            println!("  C librpma's example {ex} client against rpma serve: ok");
        }
        let st = srv.wait().unwrap();
        assert!(st.success(), "the target served the 3 example clients: {st}");
        // With --isolate each connection gets an export of its own, its
        // descriptor as a message: a librpma client is refused, and told.
        let port = next_port().to_string();
        let mut srv = Command::new(RPMA)
            .args(["serve", &a, &port, "--count", "1", "--isolate"])
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        wait_listening(&port, &mut srv, Duration::from_secs(20));
        let o = Command::new(&peer).args(["04", "client", &a, &port]).output().unwrap();
        assert!(!o.status.success(), "a librpma client of an exporting target: {}", text(&o));
        // The failed connection does not count: the target serves a ping,
        // then exits.
        let o = rpma(&["ping", &a, &port, "-c", "1"]);
        assert!(o.status.success(), "{}", text(&o));
        let so = srv.wait_with_output().unwrap();
        assert!(!so.status.success(), "the refused connection counts as failed");
        assert!(text(&so).contains("connection requests failed (1 served, 0 refused)"), "{}", text(&so));
        assert!(text(&so).contains("serve without --isolate"), "{}", text(&so));
        assert!(text(&so).contains("exported to each connection alone"), "{}", text(&so));
        println!("  C librpma's example 04 client against rpma serve --isolate: refused, the target says why");
        let _ = std::fs::remove_file(&peer);
    }

    /// `ping` against C librpma's example servers, whose descriptor travels
    /// in the private data: 02's region (14 bytes) takes no remote writes,
    /// so `-V` checks every read against a first one; 04's (1024 bytes)
    /// does, and the server prints the last pattern written. 03's server
    /// sends no descriptor at all: an error says what was expected.
    fn ping_a_librpma_server() {
        let peer = example_peer("ping-peer");
        let a = addr();
        let port = next_port().to_string();
        let mut srv = Command::new(&peer).args(["02", "server", &a, &port]).spawn().unwrap();
        wait_listening(&port, &mut srv, Duration::from_secs(20));
        let o = rpma(&["ping", &a, &port, "-c", "3", "-S", "14", "-V"]);
        let t = text(&o);
        assert!(
            o.status.success() && t.contains("no remote writes") && t.contains("3 reads, every one validated"),
            "{t}"
        );
        assert!(srv.wait().unwrap().success(), "C librpma's example 02 server");
        let last = String::from_utf8_lossy(&o.stdout).lines().last().unwrap_or_default().to_string();
        println!("  ping -V against C librpma's example 02 server: {last}");

        let port = next_port().to_string();
        let mut srv = Command::new(&peer).args(["04", "server", &a, &port]).stdout(Stdio::piped()).spawn().unwrap();
        wait_listening(&port, &mut srv, Duration::from_secs(20));
        let r = check_ping_json(&rpma(&["ping", &a, &port, "-c", "3", "-V", "--json"]), 3, 64);
        let so = srv.wait_with_output().unwrap();
        // Round 2's pattern: printable ASCII from '!' + 2.
        let last: String = (0..64u8).map(|i| char::from(b'!' + (2 + i) % 94)).collect();
        assert!(so.status.success() && text(&so).contains(&format!("New value: {last}")), "{}", text(&so));
        println!("  ping -V --json against C librpma's example 04 server: t_typical {} us", r["t_typical"]);

        // 03's server sends no descriptor (it reads the client's): said so.
        let port = next_port().to_string();
        let mut srv = Command::new(&peer)
            .args(["03", "server", &a, &port])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        wait_listening(&port, &mut srv, Duration::from_secs(20));
        let o = rpma(&["ping", &a, &port, "-c", "1"]);
        let t = String::from_utf8_lossy(&o.stderr).into_owned();
        assert!(o.status.code() == Some(1) && t.contains("sent no region descriptor (private data: "), "{t}");
        assert!(t.contains("or a librpma server that puts its region's descriptor in the private data?"), "{t}");
        let _ = srv.wait();
        println!("  ping against C librpma's example 03 server: {}", t.lines().last().unwrap_or_default());
        let _ = std::fs::remove_file(&peer);
    }

    /// Sends streamed, and perftest's latency ping-pongs (`--pingpong`):
    /// the target answers each send with a send and each write with a write
    /// into the client's memory, every answer checked (a send's length, a
    /// write's last byte); the sweep goes through a write ping-pong's size
    /// changes; `serve --json` counts what each connection got.
    fn bench_sends_and_pingpongs() {
        let a = addr();
        let port = next_port().to_string();
        let srv = Command::new(RPMA)
            .args(["serve", &a, &port, "--count", "4", "--json"])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut srv = srv;
        let mut lines = std::io::BufReader::new(srv.stdout.take().unwrap()).lines();
        let mut next = || -> serde_json::Value {
            let l = lines.next().expect("a JSON line").unwrap();
            serde_json::from_str(&l).unwrap_or_else(|e| panic!("{e}: {l}"))
        };
        assert_eq!(next()["event"], "serving");
        wait_listening(&port, &mut srv, Duration::from_secs(20));
        for (args, latency) in [
            (&["-w", "send", "-t", "4", "-s", "4096"][..], "operation to completion"),
            (&["-w", "send", "--pingpong", "-s", "64"], "half a ping-pong"),
            (&["-w", "write", "--pingpong", "-s", "64"], "half a ping-pong"),
        ] {
            let o = rpma(&[&["bench", &a, &port, "-n", "200", "--json"][..], args].concat());
            assert!(o.status.success(), "{args:?}: {}", text(&o));
            let r: serde_json::Value = serde_json::from_slice(&o.stdout).expect("JSON");
            let row = checked_report(&r, &a, args[1], 200);
            assert_eq!(r["latency"], latency, "{r}");
            println!("  {args:?}: t_typical {:.1} us, t_avg {:.1} us", row["t_typical"], row["t_avg"]);
            let c = next();
            assert_eq!((c["outcome"].as_str(), c["closed"].as_str()), (Some("served"), Some("Connection closed")));
            // 200 measured and 100 warm-up operations.
            let (received, echoed) = (c["sends_received"].as_u64(), c["echoed"].as_u64());
            match (args[1], args[2]) {
                ("send", "--pingpong") => assert_eq!((received, echoed), (Some(300), Some(300)), "{c}"),
                ("send", _) => assert_eq!((received, echoed), (Some(300), Some(0)), "{c}"),
                _ => assert_eq!((received, echoed), (Some(0), Some(300)), "{c}"),
            }
        }
        // The sweep: 2 B to 8 MiB, the target told each size.
        let o = rpma(&["bench", &a, &port, "-w", "write", "--pingpong", "-a", "-n", "4", "--warmup", "1", "--json"]);
        assert!(o.status.success(), "{}", text(&o));
        let r: serde_json::Value = serde_json::from_slice(&o.stdout).expect("JSON");
        let sizes: Vec<u64> = r["results"].as_array().unwrap().iter().map(|x| x["MsgSize"].as_u64().unwrap()).collect();
        assert_eq!(sizes, (1..=23).map(|k| 1u64 << k).collect::<Vec<_>>(), "{r}");
        assert_eq!(next()["echoed"].as_u64(), Some(23 * 5));
        let o = srv.wait_with_output().unwrap();
        assert!(o.status.success(), "{}", text(&o));
        // What a ping-pong cannot be: refused before connecting.
        for (bad, why) in [
            (&["-w", "read", "--pingpong"][..], "write and send workloads'"),
            (&["-w", "write", "--pingpong", "-t", "2"], "--tx-depth 1"),
            (&["-w", "send", "--pingpong", "-e"], "busy-polled"),
            (&["-w", "send", "-s", "67108864", "-t", "2"], "at most 67108864 bytes"),
        ] {
            let o = rpma(&[&["bench", &a, &port][..], bad].concat());
            assert!(o.status.code() == Some(1) && text(&o).contains(why), "{bad:?}: {}", text(&o));
        }
    }

    /// `--max-conns 1`: a second client while one is served is refused,
    /// and does not count towards `--count`; `--json` says so, line by line.
    fn serve_caps_its_connections() {
        let a = addr();
        let port = next_port().to_string();
        let mut srv = Command::new(RPMA)
            .args(["serve", &a, &port, "--count", "2", "--max-conns", "1", "--timeout", "5", "--json"])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut lines = std::io::BufReader::new(srv.stdout.take().unwrap()).lines();
        let mut next = || -> serde_json::Value {
            let l = lines.next().expect("a JSON line").unwrap();
            serde_json::from_str(&l).unwrap_or_else(|e| panic!("{e}: {l}"))
        };
        let start = next();
        wait_listening(&port, &mut srv, Duration::from_secs(20));
        // A client that keeps its connection about 3 s.
        let mut first = Command::new(RPMA)
            .args(["ping", &a, &port, "-c", "60", "-i", "0.05"])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut line = String::new();
        std::io::BufReader::new(first.stdout.as_mut().unwrap()).read_line(&mut line).unwrap();
        assert!(line.contains("seq=0"), "{line}");
        let o = rpma(&["ping", &a, &port, "-c", "1"]);
        assert!(!o.status.success() && text(&o).contains("refused the connection"), "{}", text(&o));
        let refused = next();
        let f = first.wait_with_output().unwrap();
        assert!(f.status.success(), "{}", text(&f));
        // Once the target is done with the first, a third is served.
        let served = next();
        let o = rpma(&["ping", &a, &port, "-c", "1"]);
        assert!(o.status.success(), "{}", text(&o));
        let (third, end) = (next(), next());
        let so = srv.wait_with_output().unwrap();
        assert!(so.status.success(), "served 2, refused 1: {}", text(&so));
        let err = String::from_utf8_lossy(&so.stderr);
        assert!(err.contains("refused: 1 connections served at once already (--max-conns 1)"), "{err}");
        assert_eq!((start["event"].as_str(), end["event"].as_str()), (Some("serving"), Some("summary")));
        for r in [&start, &end] {
            assert_eq!((r["tool"].as_str(), r["address"].as_str()), (Some("rpma"), Some(a.as_str())), "{r}");
            assert!(r["device"].is_string() && r["options"]["max_conns"] == 1, "{r}");
            assert_eq!(r["options"]["timeout"].as_f64(), Some(5.0), "{r}");
        }
        fn outcome(c: &serde_json::Value) -> (Option<&str>, Option<u64>, Option<&str>) {
            (c["event"].as_str(), c["conn"].as_u64(), c["outcome"].as_str())
        }
        assert_eq!(outcome(&refused), (Some("connection"), Some(2), Some("refused")), "{refused}");
        assert_eq!(outcome(&served), (Some("connection"), Some(1), Some("served")), "{served}");
        assert_eq!(outcome(&third), (Some("connection"), Some(3), Some("served")), "{third}");
        assert_eq!(served["closed"], "Connection closed", "{served}");
        let n = |k: &str| end[k].as_u64();
        assert_eq!(
            (n("requests"), n("served"), n("failed"), n("refused")),
            (Some(3), Some(2), Some(0), Some(1)),
            "{end}"
        );
        println!("  serve --max-conns 1 --count 2 --json: a second client refused, then 2 served");
    }

    fn bad_input_is_refused_with_a_message() {
        let a = addr();
        for (args, says) in [
            (vec!["bench", &a, "1", "-t", "0"], "--tx-depth"),
            (vec!["bench", &a, "1", "-D=-1"], "--duration"),
            (vec!["bench", &a, "1", "-q", "0"], "--qp 0"),
            (vec!["bench", &a, "1", "--threads", "0"], "--threads 0"),
            (vec!["bench", &a, "1", "-q", "2", "--threads", "3"], "--threads 3 exceeds --qp 2"),
            (vec!["bench", &a, "1", "-n", "5", "-D", "1"], "cannot be used with"),
            (vec!["bench", &a, "1", "-w", "read", "--rwmixread", "50"], "read-write workload"),
            (vec!["bench", &a, "1", "--workload", "nope"], "nope"),
            (vec!["ping", "127.0.0.1", "1"], "loopback"),
            (vec!["serve", "192.0.2.77", "1"], "no RDMA device has the address 192.0.2.77"),
            (vec!["serve", &a, "1", "--timeout", "0"], "--timeout 0"),
            (vec!["serve", &a, "1", "--max-conns", "0"], "--max-conns"),
            (vec!["ping", &a, "1", "-c", "0"], "--count"),
            (vec!["ping", &a, "1", "--interval=-1"], "--interval -1"),
        ] {
            let o = rpma(&args);
            assert!(!o.status.success() && text(&o).contains(says), "{args:?}: {}", text(&o));
        }
        // Nothing listening: an error within the bounded waits, not a hang.
        let port = next_port().to_string();
        let t = std::time::Instant::now();
        let o = rpma(&["ping", &a, &port, "-c", "1"]);
        assert!(!o.status.success(), "{}", text(&o));
        assert!(t.elapsed() < Duration::from_secs(30), "took {:?}", t.elapsed());
        println!("  nothing listening: {}", text(&o).trim());
    }
});
