//! Runs rpma's device tests and examples on a real RDMA device.
//!
//! A device test binary (`harness = false`) defines its tests inside
//! [`device_tests!`]`({ fn test_a() { ... } ... })`. When started on a host without
//! `RPMA_TEST_ADDR` it re-executes itself through `harness/rdma-run`, which
//! uses a native RDMA device or boots a throw-away Soft-RoCE VM: one VM boot
//! per test binary. Inside, every selected test runs with a timeout. A test
//! that needs a device and has none fails; nothing is skipped silently.
//!
//! Examples call [`ensure_device`] first for the same re-execution.

pub mod stats;

use std::io::Write;
use std::panic::{self, AssertUnwindSafe};
use std::process::{exit, Command};
use std::sync::atomic::{AtomicU16, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// The harness script that provides a device.
pub const RDMA_RUN: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/rdma-run");

/// One device test.
pub struct Test {
    /// Name, as printed and matched by filters.
    pub name: &'static str,
    /// The test body; a panic fails it.
    pub run: fn(),
}

/// Defines the tests of a device test binary and its `main`: every `fn`
/// inside is a test, registered once, where it is defined, under its name;
/// they run in the order they are written. Helpers stay outside.
///
/// ```ignore
/// device_tests!({
///     /// Registers and deregisters a region.
///     fn reg_and_dereg() {
///         // ...
///     }
///
///     fn connect_and_disconnect() {
///         // ...
///     }
/// });
/// ```
///
/// `device_tests!(jobs = 2, { ... })` runs up to two of them at a time
/// ([`run_jobs`]).
///
/// The block in parentheses, `({ ... })`, is there for rustfmt: it formats
/// a macro call whose argument parses as an expression (a block of items
/// does) and leaves `device_tests! { ... }` untouched.
#[macro_export]
macro_rules! device_tests {
    ({ $($tests:tt)* }) => {
        $crate::device_tests!(jobs = 1, { $($tests)* });
    };
    (jobs = $jobs:expr, { $($(#[$meta:meta])* fn $name:ident() $body:block)* }) => {
        $($(#[$meta])* fn $name() $body)*

        fn main() {
            $crate::run_jobs(&[$($crate::Test { name: stringify!($name), run: $name }),*], $jobs)
        }
    };
}

/// The IPv4 address of the RDMA device to test on (`RPMA_TEST_ADDR`).
///
/// # Panics
/// When the variable is not set: the caller needs a device and must fail
/// loudly without one.
pub fn addr() -> String {
    std::env::var("RPMA_TEST_ADDR")
        .unwrap_or_else(|_| panic!("RPMA_TEST_ADDR is not set: this needs an RDMA device; run it through {RDMA_RUN}"))
}

/// Whether the device is the harness's Soft-RoCE VM (rxe on a Debian
/// kernel), whose capabilities are known exactly (see [`rxe_iba15`]).
pub fn in_vm() -> bool {
    std::env::var("RPMA_TEST_ENV").as_deref() == Ok("vm")
}

/// The running kernel's `(major, minor)` version, from `uname -r`.
pub fn kernel_version() -> (u32, u32) {
    let r = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    let mut it = r.trim().split(['.', '-', '+']).map(|x| x.parse().unwrap_or(0));
    (it.next().unwrap_or(0), it.next().unwrap_or(0))
}

/// Whether the harness VM's rxe implements IBA 1.5's RDMA FLUSH and ATOMIC
/// WRITE (Linux 6.2 and newer: the bookworm-backports and trixie kernels;
/// not Debian 12's 6.1).
pub fn rxe_iba15() -> bool {
    kernel_version() >= (6, 2)
}

/// Whether the harness VM's rxe has On-Demand Paging, as measured: not on
/// Linux 6.1 or 6.12, yes on 7.3 (trixie-backports); `None` for kernels in
/// between, which were not measured.
pub fn rxe_odp() -> Option<bool> {
    match kernel_version() {
        v if v <= (6, 12) => Some(false),
        v if v >= (7, 3) => Some(true),
        _ => None,
    }
}

/// Whether the device must have On-Demand Paging here, as the world says:
/// `RPMA_EXPECT_ODP=1` (or `0`), set by `harness/test` for the world that
/// exists to test it, else the measured rxe table ([`rxe_odp`]) in the VM.
/// `None`: nobody knows, so nothing may be asserted.
///
/// # Panics
/// On another value of `RPMA_EXPECT_ODP` (a typo must not silently turn the
/// expectation off).
pub fn expect_odp() -> Option<bool> {
    match std::env::var("RPMA_EXPECT_ODP").as_deref() {
        Ok("1") => Some(true),
        Ok("0") => Some(false),
        Ok(v) => panic!("RPMA_EXPECT_ODP={v:?}: use 1 or 0"),
        Err(_) if in_vm() => rxe_odp(),
        Err(_) => None,
    }
}

/// Waits until `server` listens on `port` (an RDMA CM ID in LISTEN on it,
/// as `rdma resource show cm_id` lists), has exited (its output then says
/// why), or `limit` has passed: then a client may start. A device event,
/// not a sleep, under an emulator whose speed varies.
pub fn wait_listening(port: &str, server: &mut std::process::Child, limit: Duration) {
    let t0 = Instant::now();
    while !listening(port) && server.try_wait().ok().flatten().is_none() && t0.elapsed() < limit {
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Whether an RDMA CM ID listens on `port` (`rdma resource show cm_id`).
pub fn listening(port: &str) -> bool {
    let out = Command::new("rdma").args(["resource", "show", "cm_id"]).output();
    let text = out.map(|o| String::from_utf8_lossy(&o.stdout).into_owned()).unwrap_or_default();
    text.lines().any(|l| l.contains("LISTEN") && l.contains(&format!(":{port} ")))
}

/// rdma-core's release (44 in libibverbs' "1.14.44.0") from its pkg-config
/// file, `None` when it cannot be read.
pub fn rdma_core_release() -> Option<u32> {
    let dirs = ["/usr/lib/x86_64-linux-gnu/pkgconfig", "/usr/lib64/pkgconfig", "/usr/lib/pkgconfig"];
    let text = dirs.iter().find_map(|d| std::fs::read_to_string(format!("{d}/libibverbs.pc")).ok())?;
    let v = text.lines().find_map(|l| l.strip_prefix("Version: "))?;
    v.trim().split('.').nth(2)?.parse().ok()
}

/// A fresh TCP port: `RPMA_TEST_PORT` (default 7204) plus a counter, so each
/// call in a process gets a port no other call in it got, and no test picks
/// numbers by hand. Ask once and pass the number on (to the other side of a
/// connection, to a child process, or to reuse it); ask twice for two ports.
///
/// Another process starts its own count from the same base: a child process
/// that takes ports itself while its parent holds some may collide with
/// them, so the parent passes its port on instead.
///
/// # Panics
/// When the count passes 65535.
pub fn next_port() -> u16 {
    static NEXT: AtomicU16 = AtomicU16::new(0);
    let base = std::env::var("RPMA_TEST_PORT").ok().and_then(|p| p.parse().ok()).unwrap_or(7204u16);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    base.checked_add(n).unwrap_or_else(|| panic!("next_port: RPMA_TEST_PORT {base} + {n} is past 65535"))
}

/// The benchmarks' loaded mode (`RPMA_BENCH_LOAD=N`): `n` threads spinning
/// beside the measurement, the same for every library measured, until the
/// hog is dropped or the process exits. Started on the host, never inside
/// the harness's VM (there it would load the guest, not the host).
pub struct Hog {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

impl Hog {
    /// Starts `n` spinning threads (none for 0).
    pub fn start(n: usize) -> Hog {
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let threads = (0..n)
            .map(|_| {
                let stop = stop.clone();
                std::thread::spawn(move || {
                    let mut x = 0u64;
                    while !stop.load(Ordering::Relaxed) {
                        x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
                    }
                })
            })
            .collect();
        Hog { stop, threads }
    }

    /// `RPMA_BENCH_LOAD` (0 when unset or not a number).
    pub fn load_from_env() -> usize {
        std::env::var("RPMA_BENCH_LOAD").ok().and_then(|v| v.parse().ok()).unwrap_or(0)
    }

    /// The report's line for the mode of a run with `n` spinning threads.
    pub fn mode(n: usize) -> String {
        match n {
            0 => "quiet (nothing else run by the bench; keep the host idle)".to_string(),
            n => format!("loaded: {n} threads spinning on the host beside the VM (RPMA_BENCH_LOAD={n})"),
        }
    }
}

impl Drop for Hog {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

/// Makes sure a device is there: when `RPMA_TEST_ADDR` is unset, re-runs
/// the current executable with the same arguments through `rdma-run` and
/// exits with its status. Returns only when a device is available.
pub fn ensure_device() {
    if std::env::var_os("RPMA_TEST_ADDR").is_some() {
        return;
    }
    let exe = std::env::current_exe().expect("current executable path");
    let _ = std::io::stdout().flush();
    let status = Command::new(RDMA_RUN)
        .arg("--")
        .arg(&exe)
        .args(std::env::args_os().skip(1))
        .status()
        .unwrap_or_else(|e| panic!("cannot start {RDMA_RUN}: {e}"));
    exit(status.code().unwrap_or(125));
}

fn selected<'a>(tests: &'a [Test], filters: &[String], skips: &[String], exact: bool) -> Vec<&'a Test> {
    let hit = |f: &String, name: &str| if exact { name == f } else { name.contains(f.as_str()) };
    tests
        .iter()
        .filter(|t| filters.is_empty() || filters.iter().any(|f| hit(f, t.name)))
        .filter(|t| !skips.iter().any(|f| hit(f, t.name)))
        .collect()
}

/// Runs one test on its own thread with `timeout`: `Some(passed)`, or
/// `None` when it did not end in time (its thread is left running).
fn run_one(t: &Test, timeout: Duration) -> Option<bool> {
    let (tx, rx) = mpsc::channel();
    let f = t.run;
    let h = std::thread::Builder::new()
        .name(t.name.to_string())
        .spawn(move || {
            let r = panic::catch_unwind(AssertUnwindSafe(f));
            let _ = tx.send(r.is_ok());
        })
        .expect("spawn test thread");
    match rx.recv_timeout(timeout) {
        Ok(passed) => {
            let _ = h.join(); // it has finished; joining frees its stack (memcheck)
            Some(passed)
        }
        Err(mpsc::RecvTimeoutError::Disconnected) => Some(false),
        Err(mpsc::RecvTimeoutError::Timeout) => None,
    }
}

/// Runs the tests that match the command line (libtest-style filters,
/// `--exact`, `--list`, `--ignored`); exits 0 when all pass, 101 otherwise.
/// Up to `jobs` run at a time (in the order written, each started when an
/// earlier one ends): more than one for binaries whose tests are long,
/// CPU-bound and independent (each on its own ports), such as the memcheck
/// runs, on a device with a CPU to spare (the harness VM has two).
pub fn run_jobs(tests: &[Test], jobs: usize) -> ! {
    let jobs = jobs.max(1);
    let mut filters = Vec::new();
    let mut skips = Vec::new();
    let (mut list, mut exact, mut ignored) = (false, false, false);
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--list" => list = true,
            "--exact" => exact = true,
            "--ignored" => ignored = true,
            "--skip" => skips.extend(args.next()),
            "--format" | "--color" | "--test-threads" | "-Z" | "--logfile" => {
                args.next();
            }
            s if s.starts_with('-') => {}
            s => filters.push(s.to_string()),
        }
    }
    // No test is #[ignore]d: `--ignored` selects none.
    let chosen = if ignored { Vec::new() } else { selected(tests, &filters, &skips, exact) };
    if list {
        for t in &chosen {
            println!("{}: test", t.name);
        }
        exit(0);
    }
    if chosen.is_empty() {
        // As libtest: a binary whose filters match none of its tests ran
        // nothing and passes, so `cargo test NAME` works across the
        // workspace. A world whose whole run executed no test fails instead
        // (harness/results), so a typo in a CI script cannot turn green.
        println!(
            "\nrunning 0 tests\n\ntest result: ok. 0 passed; 0 failed; 0 ignored; 0 measured; {} filtered out\n",
            tests.len()
        );
        exit(0);
    }
    ensure_device();
    let _ = env_logger::builder().try_init();
    println!(
        "\nrpma device tests on {} ({}), RPMA_TEST_ADDR={}",
        std::env::var("RPMA_TEST_DEVICE").unwrap_or_else(|_| "?".into()),
        std::env::var("RPMA_TEST_ENV").unwrap_or_else(|_| "?".into()),
        addr()
    );
    println!("running {} tests", chosen.len());
    let timeout =
        Duration::from_secs(std::env::var("RPMA_TEST_TIMEOUT").ok().and_then(|s| s.parse().ok()).unwrap_or(300));
    let start = Instant::now();
    let failed = std::sync::Mutex::new(Vec::new());
    let ran = std::sync::atomic::AtomicUsize::new(0);
    let timed_out = std::sync::atomic::AtomicBool::new(false);
    // Each worker takes the next test until none is left or one has hung
    // (a hung test may hold resources the next ones need).
    let worker = || loop {
        if timed_out.load(Ordering::SeqCst) {
            break;
        }
        let i = ran.fetch_add(1, Ordering::SeqCst);
        let Some(t) = chosen.get(i) else {
            ran.fetch_sub(1, Ordering::SeqCst);
            break;
        };
        if jobs == 1 {
            print!("test {} ... ", t.name);
            let _ = std::io::stdout().flush();
        }
        let t0 = Instant::now();
        let outcome = run_one(t, timeout);
        // Several at a time, a test's whole line is printed when it ends.
        let head = if jobs == 1 { String::new() } else { format!("test {} ... ", t.name) };
        match outcome {
            Some(true) => println!("{head}ok ({:.2}s)", t0.elapsed().as_secs_f64()),
            Some(false) => {
                println!("{head}FAILED");
                failed.lock().unwrap_or_else(|e| e.into_inner()).push(t.name);
            }
            None => {
                println!("{head}FAILED (timed out after {timeout:?}; RPMA_TEST_TIMEOUT)");
                failed.lock().unwrap_or_else(|e| e.into_inner()).push(t.name);
                timed_out.store(true, Ordering::SeqCst);
            }
        }
    };
    std::thread::scope(|s| {
        for _ in 1..jobs {
            s.spawn(worker);
        }
        worker();
    });
    let failed = failed.into_inner().unwrap_or_else(|e| e.into_inner());
    let ran = ran.into_inner();
    let not_run = chosen.len() - ran;
    let passed = ran - failed.len();
    if !failed.is_empty() {
        println!("\nfailures:");
        for f in &failed {
            println!("    {f}");
        }
    }
    if not_run > 0 {
        println!("\nnot run after the timeout: {not_run} test(s)");
    }
    println!(
        "\ntest result: {}. {passed} passed; {} failed; 0 ignored; 0 measured; {} filtered out; finished in {:.2}s\n",
        if failed.is_empty() { "ok" } else { "FAILED" },
        failed.len() + not_run,
        tests.len() - chosen.len(),
        start.elapsed().as_secs_f64()
    );
    let _ = std::io::stdout().flush();
    exit(if failed.is_empty() { 0 } else { 101 })
}

/// For a test binary with its own `main` and one test, `name`
/// (`harness = false`, run by `cargo test` beside libtest binaries): answers
/// `--list`, `--ignored` and filters that match nothing (0 tests run, a
/// pass, as libtest), exiting; otherwise returns the arguments, to pass on
/// when the binary re-executes itself.
pub fn one_test_args(name: &str) -> Vec<String> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let filters: Vec<&String> = args.iter().filter(|a| !a.starts_with('-')).collect();
    if args.iter().any(|a| a == "--list") {
        println!("{name}: test");
        exit(0);
    }
    if args.iter().any(|a| a == "--ignored") {
        println!("\nrunning 0 tests\n\ntest result: ok. 0 passed; 0 failed; 0 ignored; 0 measured; 1 filtered out\n");
        exit(0);
    }
    if !(filters.is_empty() || filters.iter().any(|f| name.contains(f.as_str()))) {
        println!("\nrunning 0 tests\n\ntest result: ok. 0 passed; 0 failed; 0 ignored; 0 measured; 1 filtered out\n");
        exit(0);
    }
    args
}

/// The `main` of a [`one_test_args`] binary whose one test, `name`, runs
/// on two hosts: on host a (`RPMA_HOST=a`) it runs `a`, on host b `b`;
/// started anywhere else it re-runs itself on the two guests of
/// `rdma-run --two-hosts` and reports, exiting.
pub fn on_two_hosts(name: &str, a: fn(), b: fn()) {
    let args = one_test_args(name);
    match std::env::var("RPMA_HOST").as_deref() {
        Ok("a") => a(),
        Ok("b") => b(),
        _ => {
            let exe = std::env::current_exe().expect("current executable");
            let _ = std::io::stdout().flush();
            let st = Command::new(RDMA_RUN)
                .arg("--two-hosts")
                .arg("--")
                .arg(&exe)
                .args(&args)
                .status()
                .unwrap_or_else(|e| panic!("cannot start {RDMA_RUN}: {e}"));
            report_one(name, st.success());
        }
    }
}

/// Reports the one test `name` of a [`one_test_args`] binary as libtest
/// does, and exits with its status.
pub fn report_one(name: &str, ok: bool) -> ! {
    println!("\ntest {name} ... {}", if ok { "ok" } else { "FAILED" });
    println!("\ntest result: {}. {} passed; {} failed\n", if ok { "ok" } else { "FAILED" }, ok as u8, !ok as u8);
    exit(if ok { 0 } else { 101 });
}

/// The link the two-host tests shape with `tc ... netem`: the interface
/// `RPMA_LINK_DEV` names (no default: on a real host it may be the one the
/// operator is logged in through), refused when it has a root qdisc someone
/// configured (which the tests would replace). Dropped, also while a test
/// panics, it deletes the root qdisc it set, back to the kernel's default.
#[derive(Debug)]
pub struct Link {
    dev: String,
}

impl Link {
    /// The link named by `RPMA_LINK_DEV`.
    ///
    /// # Panics
    /// When `RPMA_LINK_DEV` is unset, or its root qdisc is not the
    /// kernel's default (a handle other than `0:`).
    pub fn named() -> Link {
        let dev = std::env::var("RPMA_LINK_DEV").unwrap_or_else(|_| {
            panic!(
                "RPMA_LINK_DEV is not set: name the interface these tests may cut, delay and drop packets on \
                 (never the one you are logged in through); harness/rdma-run --two-hosts sets it in its guests"
            )
        });
        let out = Command::new("tc").args(["qdisc", "show", "dev", &dev, "root"]).output().expect("tc (iproute2)");
        let shown = String::from_utf8_lossy(&out.stdout).into_owned();
        let handle = shown.split_whitespace().nth(2).unwrap_or("0:");
        assert!(
            out.status.success() && (handle == "0:" || shown.contains("netem")),
            "{dev}'s root qdisc is configured ({}): these tests would replace it; use an interface without one",
            shown.trim()
        );
        Link { dev }
    }

    /// Shapes the link: `netem` with `args` as its root qdisc, or (no
    /// `args`) the kernel's default again.
    ///
    /// # Panics
    /// When `tc` fails to set the qdisc.
    pub fn shape(&self, args: &[&str]) {
        if args.is_empty() {
            self.restore();
            return;
        }
        let st = Command::new("tc")
            .args(["qdisc", "replace", "dev", &self.dev, "root", "netem"])
            .args(args)
            .status()
            .expect("tc (iproute2)");
        assert!(st.success(), "tc netem {args:?} on {} failed: {st}", self.dev);
    }

    /// Deletes the root qdisc this link set (nothing set: not an error).
    fn restore(&self) {
        let _ = Command::new("tc")
            .args(["qdisc", "del", "dev", &self.dev, "root"])
            .stderr(std::process::Stdio::null())
            .status();
    }
}

impl Drop for Link {
    fn drop(&mut self) {
        self.restore();
    }
}
