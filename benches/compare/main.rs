//! rpma side by side with raw verbs (perftest) and C librpma, on the same
//! device in the same run.
//!
//! `cargo bench --bench compare` (or `harness/bench`, which installs what it
//! needs first). Without an RDMA device on the host, the measuring part runs
//! in the harness's Soft-RoCE VM. The report (markdown tables with the ratios
//! rpma/verbs and rpma/librpma, and an SVG plot of latency against size) is
//! printed and written to `target/bench/` (`RPMA_BENCH_OUT` to change).
//!
//! Knobs: `RPMA_BENCH_ITERS` (operations per case, default 1000),
//! `RPMA_BENCH_IR_ITERS` (operations counted by callgrind, default 200),
//! `RPMA_BENCH_ONLY=ir` (only the instruction counts), `RPMA_BENCH_ONLY=main`
//! (only the main latency and bandwidth rounds), `RPMA_BENCH_ROUNDS=N` (that
//! many main rounds, default 6; from 8 rounds the report adds a 95% interval
//! of each ratio's median), `RPMA_BENCH_VERBS=0` (no perftest in the main
//! rounds: rpma and C librpma alternate),
//! `RPMA_BENCH_LOAD=N` (the loaded mode: N threads spinning on the host,
//! at the default priority, beside the VM for the whole run, the same for
//! every library; the report says so),
//! `RPMA_BENCH_PIN=0` (leave the guest's scheduler to place each pair's
//! two processes; by default the server runs on vCPU 0 and the client on
//! vCPU 1, every program alike: placed by the scheduler, the two ends of a
//! pair in one 2-vCPU guest were often woken onto the same vCPU, each then
//! waiting out the other's turn),
//! `RPMA_BENCH_BASELINE=PATH` (this bench built from another revision, e.g.
//! `git worktree add /tmp/base REV && cd /tmp/base && cargo bench --bench
//! compare --no-run`: its rpma rows are counted beside this build's, in the
//! same run, and reported as rpma/baseline; the path must be visible in the
//! VM, so keep it under the repository, e.g. in `target/`).
//!
//! Every side prints `RESULT` lines (see `stats.rs`); the C program
//! `librpma_bench.c` is compiled with gcc against Debian's librpma at run time.
//! `one ADDR PORT CASE SIZE QD ITERS` measures one case alone (latency at
//! depth 1, else streaming), for comparing with the `rpma` tool
//! (`harness/tools-agree`); `xserver` / `xclient` (export.rs) the cost of
//! per-connection exports against librpma's shared region.
//! The bench binary's `report FILE` writes the report again from a saved
//! output (the lines it printed); `rounds FILE [BASE]` sums up a rounds
//! script's output (`scale-rounds.sh`: median rates, per-round ratios to
//! BASE and how far their median is settled).

mod export;
mod report;
mod rpma_side;
mod stats;

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

type Res<T> = std::result::Result<T, Box<dyn std::error::Error>>;

fn env(name: &str, default: usize) -> usize {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

fn arg<T: std::str::FromStr>(a: &[String], i: usize) -> T {
    a.get(i).and_then(|s| s.parse().ok()).unwrap_or_else(|| {
        eprintln!("compare: missing or bad argument {i} in {a:?}");
        std::process::exit(2)
    })
}

fn main() {
    let a: Vec<String> = std::env::args().skip(1).collect();
    let role = a.first().map(String::as_str).unwrap_or("");
    let res = match role {
        "--list" => return, // `cargo test --benches` lists tests: there are none
        "server" => rpma_side::server(&a[1], arg(&a, 2), arg(&a, 3)),
        "client" => rpma_side::client(&a[1], arg(&a, 2), arg(&a, 3)),
        "emulated" => rpma_side::client_emulated(&a[1], arg(&a, 2), arg(&a, 3)),
        "inline" => rpma_side::client_inline(&a[1], arg(&a, 2), arg(&a, 3)),
        "ir" => rpma_side::client_ir(&a[1], arg(&a, 2), &a[3], arg(&a, 4)),
        "one" => rpma_side::client_one(&a[1], arg(&a, 2), &a[3], arg(&a, 4), arg(&a, 5), arg(&a, 6)),
        "commit" => rpma_side::client_commit(&a[1], arg(&a, 2), arg(&a, 3)),
        "conns" => rpma_side::client_conns(&a[1], arg(&a, 2), arg(&a, 3)),
        "mserver" => rpma_side::server_multi(&a[1], arg(&a, 2), arg(&a, 3)),
        "scch" => rpma_side::client_scch(&a[1], arg(&a, 2), arg(&a, 3), arg(&a, 4)),
        "scrr" => rpma_side::client_scrr(&a[1], arg(&a, 2), arg(&a, 3), arg(&a, 4)),
        "scq" => rpma_side::client_scq(&a[1], arg(&a, 2), arg(&a, 3), arg(&a, 4)),
        "aio" => rpma_side::client_aio(&a[1], arg(&a, 2), arg(&a, 3), arg(&a, 4)),
        "aiob" => rpma_side::client_aio_bare(&a[1], arg(&a, 2), arg(&a, 3), arg(&a, 4)),
        "sendrate" => rpma_side::client_sendrate(&a[1], arg(&a, 2), arg(&a, 3), arg(&a, 4)),
        "reg" => rpma_side::registration(&a[1]),
        "xserver" => export::server(&a[1], arg(&a, 2), arg(&a, 3), &a[4]),
        "xclient" => export::client(&a[1], arg(&a, 2), arg(&a, 3), arg(&a, 4), &a[5]),
        "--measure" => measure(),
        // Writes the report again from a saved output (its `RESULT` lines).
        "report" => std::fs::read_to_string(&a[1]).map_err(Into::into).and_then(|t| {
            let lines: Vec<String> = t.lines().map(str::to_string).collect();
            report::write(&lines, std::path::Path::new(&out_dir()), Duration::ZERO)
        }),
        // Sums up a rounds script's saved output (scale-rounds.sh).
        "rounds" => std::fs::read_to_string(&a[1])
            .map_err(Into::into)
            .and_then(|t| report::rounds(&t, a.get(2).map_or("rpma", String::as_str))),
        _ => orchestrate(),
    };
    if let Err(e) = res {
        eprintln!("compare {role}: error: {e}");
        std::process::exit(1);
    }
}

/// Runs the measurements (in the VM when the host has no device), then
/// writes the report from their `RESULT` lines.
fn orchestrate() -> Res<()> {
    let exe = std::env::current_exe()?;
    let mut cmd = if std::env::var_os("RPMA_TEST_ADDR").is_some() {
        Command::new(&exe)
    } else {
        let mut c = Command::new(rpma_harness::RDMA_RUN);
        c.arg("--").arg(&exe);
        c
    };
    let load = rpma_harness::Hog::load_from_env();
    let _hog = rpma_harness::Hog::start(load);
    let started = Instant::now();
    let mut child = cmd.arg("--measure").stdout(Stdio::piped()).spawn()?;
    let mut lines = Vec::new();
    for line in BufReader::new(child.stdout.take().ok_or("no stdout")?).lines() {
        let line = line?;
        println!("{line}");
        lines.push(line);
    }
    let status = child.wait()?;
    if !status.success() {
        return Err(format!("measuring failed ({status}); see the output above").into());
    }
    lines.push(format!("INFO-NOTE mode: {}", rpma_harness::Hog::mode(load)));
    report::write(&lines, std::path::Path::new(&out_dir()), started.elapsed())
}

/// Where the report goes: `RPMA_BENCH_OUT`, else `target/bench/`.
fn out_dir() -> String {
    std::env::var("RPMA_BENCH_OUT").unwrap_or_else(|_| concat!(env!("CARGO_MANIFEST_DIR"), "/target/bench").to_string())
}

/// Kills a child on every path out (a failed client must not leave its
/// server holding the port).
struct Reaped(Child);
impl Drop for Reaped {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Pins the process `c` starts to vCPU `cpu` (see `RPMA_BENCH_PIN`), when
/// the guest has two or more and pinning is on.
fn pin(c: &mut Command, cpu: usize) {
    if !pinning() {
        return;
    }
    use std::os::unix::process::CommandExt;
    // SAFETY: the closure runs in the forked child before exec and makes
    // one system call on a set built on its own stack (async-signal-safe).
    unsafe {
        c.pre_exec(move || {
            let mut set: libc::cpu_set_t = std::mem::zeroed();
            libc::CPU_SET(cpu, &mut set);
            if libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

/// Whether `pin` pins: two or more vCPUs and `RPMA_BENCH_PIN` not `0`
/// (also the report's note).
fn pinning() -> bool {
    std::thread::available_parallelism().map_or(1, |n| n.get()) >= 2
        && std::env::var("RPMA_BENCH_PIN").as_deref() != Ok("0")
}

fn start_server(mut server: Command, ready: Option<&str>) -> Res<Reaped> {
    pin(&mut server, 0);
    let mut s = Reaped(server.stdout(Stdio::piped()).stderr(Stdio::inherit()).spawn()?);
    match ready {
        Some(word) => {
            let mut out = BufReader::new(s.0.stdout.take().ok_or("no stdout")?);
            let mut line = String::new();
            while !line.contains(word) {
                line.clear();
                if out.read_line(&mut line)? == 0 {
                    return Err(format!("server exited before printing {word}").into());
                }
            }
            // keep draining so the server never blocks on a full pipe
            std::thread::spawn(move || std::io::copy(&mut out, &mut std::io::sink()));
        }
        // perftest prints nothing when it listens: give it time
        None => std::thread::sleep(Duration::from_millis(1500)),
    }
    Ok(s)
}

/// Runs `client` against a started `server`; returns the client's stdout.
fn pair(server: Command, ready: Option<&str>, mut client: Command) -> Res<String> {
    let mut s = start_server(server, ready)?;
    pin(&mut client, 1);
    let c = client.stderr(Stdio::inherit()).output()?;
    let out = String::from_utf8_lossy(&c.stdout).into_owned();
    if !c.status.success() {
        return Err(format!("{client:?} failed ({}):\n{out}", c.status).into());
    }
    let t0 = Instant::now();
    while s.0.try_wait()?.is_none() {
        if t0.elapsed() > Duration::from_secs(60) {
            return Err(format!("server of {client:?} did not exit").into());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok(out)
}

fn forward(out: &str) {
    // INFO-THP: the registration's huge-page backing, for the log only.
    for l in out.lines().filter(|l| l.starts_with("RESULT ") || l.starts_with("INFO-THP ")) {
        println!("{l}");
    }
    let _ = std::io::stdout().flush();
}

fn cmd(prog: &std::path::Path, args: &[&str]) -> Command {
    let mut c = Command::new(prog);
    c.args(args);
    c
}

/// Everything, on the device at `RPMA_TEST_ADDR`.
fn measure() -> Res<()> {
    let addr = rpma_harness::addr();
    let dev = std::env::var("RPMA_TEST_DEVICE").unwrap_or_else(|_| "rxe0".into());
    let iters = env("RPMA_BENCH_ITERS", 1000).max(20);
    let ir_iters = env("RPMA_BENCH_IR_ITERS", 200).max(10);
    let exe = std::env::current_exe()?;
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|c| {
            c.lines()
                .find(|l| l.starts_with("model name"))
                .map(|l| l.split(':').nth(1).unwrap_or("").trim().to_string())
        })
        .unwrap_or_default();
    if pinning() {
        println!("INFO-NOTE placement: each pair's server pinned to vCPU 0, its client to vCPU 1 (RPMA_BENCH_PIN=0 leaves them to the scheduler)");
    } else {
        println!("INFO-NOTE placement: the guest's scheduler placed each pair's two processes (not pinned)");
    }
    println!(
        "INFO device {dev} env {} kernel {} cpu {cpu} iters {iters} ir_iters {ir_iters}",
        std::env::var("RPMA_TEST_ENV").unwrap_or_else(|_| "native".into()),
        kernel.trim()
    );

    let tmp = std::env::temp_dir().join(format!("rpma-bench-{}", std::process::id()));
    std::fs::create_dir_all(&tmp)?;
    let cbin = tmp.join("librpma_bench");
    let gcc = Command::new("gcc")
        .args(["-O2", "-o"])
        .arg(&cbin)
        .arg(concat!(env!("CARGO_MANIFEST_DIR"), "/benches/compare/librpma_bench.c"))
        .args(["-lrpma", "-libverbs"])
        .status()?;
    if !gcc.success() {
        return Err("gcc could not build librpma_bench.c (needs librpma-dev: harness/install-deps)".into());
    }
    let only = std::env::var("RPMA_BENCH_ONLY").unwrap_or_default();
    let baseline = std::env::var_os("RPMA_BENCH_BASELINE").map(std::path::PathBuf::from);
    if let Some(b) = &baseline {
        println!("INFO baseline {}", b.display());
    }
    if only == "main" {
        return main_rounds(&exe, &cbin, &addr, &dev, iters);
    }
    if only != "ir" {
        timings(&exe, &cbin, &addr, &dev, iters)?;
    }

    eprintln!("compare: instructions per operation (callgrind)");
    // read and write: rpma, rpma's unheld posts and librpma; flush and
    // atomic write: rpma (native where the device and libibverbs have them),
    // rpma with the native operations off, and librpma.
    for (case, variant, suffix) in [
        ("read", "rpma-unheld", "unheld"),
        ("write", "rpma-unheld", "unheld"),
        ("write_flush", "rpma-emulated", "emulated"),
        ("atomic_write", "rpma-emulated", "emulated"),
        // librpma example 07's commit: rpma's four posts, rpma's chain, librpma's four calls
        ("commit", "rpma-chain", "chain"),
    ] {
        let other = format!("{case}_{suffix}");
        let mut progs = vec![("rpma".to_string(), &exe, case), (variant.to_string(), &exe, other.as_str())];
        if let Some(b) = baseline.as_ref().filter(|_| case != "commit") {
            progs.push(("baseline".into(), b, case));
            progs.push((format!("baseline-{suffix}"), b, other.as_str()));
        }
        progs.push(("librpma".into(), &cbin, case));
        for (imp, prog, arg) in progs {
            let ir = |n: usize| -> Res<f64> {
                let p = rpma_harness::next_port().to_string();
                let f = tmp.join(format!("cg.{imp}.{case}.{n}"));
                let mut c = callgrind(&f);
                c.arg(prog).args(["ir", &addr, &p, arg, &n.to_string()]);
                pair(cmd(prog, &["server", &addr, &p, "1"]), Some("READY"), c)?;
                callgrind_total(&f)
            };
            println!("RESULT ir {imp} {case} {:.1}", per_op(ir_iters, ir)?);
        }
    }
    // An 8-byte inline write (rpma only: C librpma has no inline write; its
    // baseline is the `write` rows above).
    let ir = |n: usize| -> Res<f64> {
        let p = rpma_harness::next_port().to_string();
        let f = tmp.join(format!("cg.rpma-inline.{n}"));
        let mut c = callgrind(&f);
        c.arg(&exe).args(["ir", &addr, &p, "write_inline", &n.to_string()]);
        pair(cmd(&exe, &["server", &addr, &p, "1"]), Some("READY"), c)?;
        callgrind_total(&f)
    };
    println!("RESULT ir rpma-inline write_inline {:.1}", per_op(ir_iters, ir)?);
    // perftest's event mode (-e) exists for ib_read_lat, not for write tests
    let ir = |n: usize| -> Res<f64> {
        let p = rpma_harness::next_port().to_string();
        let f = tmp.join(format!("cg.verbs.read.{n}"));
        let base = ["-R", "-d", &dev, "-s", "8", "-n", &n.to_string(), "-F", "-e", "-p", &p];
        let mut c = callgrind(&f);
        c.arg("ib_read_lat").args(base).arg(&addr);
        let mut s = Command::new("ib_read_lat");
        s.args(base);
        pair(s, None, c)?;
        callgrind_total(&f)
    };
    println!("RESULT ir verbs read {:.1}", per_op(ir_iters, ir)?);

    let _ = std::fs::remove_dir_all(&tmp);
    Ok(())
}

/// Rounds of the main latency and bandwidth cases (rpma's client, C
/// librpma's and perftest in each, in every order once); the report gives
/// the median of each side's rounds and the median of the per-round ratios
/// (min-max). `RPMA_BENCH_ROUNDS` changes it.
const MAIN_ROUNDS: usize = 6;

/// Rounds of the commit latency (rpma, then C librpma, then the other way
/// round ...); the report gives the median of the per-round ratios.
const COMMIT_ROUNDS: usize = 4;

/// Rounds of the registration measurement (alternating which side goes
/// first); the report gives the median of the per-round ratios.
const REG_ROUNDS: usize = 4;

/// Runs client `args` (its `PORT` replaced by a fresh port, `args[1]` the
/// address) against its own server, rpma's program and C's in turn, for
/// `rounds` rounds of alternating order (rpma, C; C, rpma; ...).
fn alternate(exe: &std::path::Path, cbin: &std::path::Path, rounds: usize, args: &[&str]) -> Res<()> {
    for round in 0..rounds {
        let order = if round % 2 == 0 { [exe, cbin] } else { [cbin, exe] };
        for prog in order {
            run_client(prog, args)?;
        }
    }
    Ok(())
}

/// Runs client `args` of `prog` against its own server on a fresh port.
fn run_client(prog: &std::path::Path, args: &[&str]) -> Res<()> {
    let p = rpma_harness::next_port().to_string();
    let client: Vec<&str> = args.iter().map(|a| if *a == "PORT" { p.as_str() } else { a }).collect();
    forward(&pair(cmd(prog, &["server", args[1], &p, "1"]), Some("READY"), cmd(prog, &client))?);
    Ok(())
}

/// The main cases in `MAIN_ROUNDS` (or `RPMA_BENCH_ROUNDS`) rounds, each round running rpma's
/// client, C's and perftest's (the same cases on raw verbs), the three in
/// a rotating order (every order once in six rounds), so the report pairs
/// each library's round with the raw-verbs round beside it. A perftest
/// round that fails leaves its cells to the other rounds (a note says so).
fn main_rounds(exe: &std::path::Path, cbin: &std::path::Path, addr: &str, dev: &str, iters: usize) -> Res<()> {
    const ORDERS: [[usize; 3]; 6] = [[0, 1, 2], [1, 0, 2], [2, 0, 1], [0, 2, 1], [1, 2, 0], [2, 1, 0]];
    let rounds = env("RPMA_BENCH_ROUNDS", MAIN_ROUNDS).max(1);
    let verbs = std::env::var("RPMA_BENCH_VERBS").as_deref() != Ok("0");
    let with = if verbs { "librpma and perftest" } else { "librpma (no perftest)" };
    eprintln!("compare: rpma, {with}, every case, {rounds} rounds of rotating order");
    let it = iters.to_string();
    let args = ["client", addr, "PORT", &it];
    for (round, order) in ORDERS.iter().cycle().take(rounds).enumerate() {
        for &who in order {
            match who {
                0 => run_client(exe, &args)?,
                1 => run_client(cbin, &args)?,
                _ if !verbs => {}
                // perftest's own connection set-up fails now and then on a
                // loaded TCG guest ("Unexpected CM event"): the round's
                // verbs cells are then missing, the rest stands.
                _ => {
                    if let Err(e) = perftest(addr, dev, iters) {
                        eprintln!("compare: perftest failed in round {}: {e}", round + 1);
                        let first = e.to_string().lines().next().unwrap_or("").to_string();
                        println!(
                            "INFO-NOTE perftest failed in round {} (its cells from the other rounds): {first}",
                            round + 1
                        );
                    }
                }
            }
        }
    }
    Ok(())
}

/// The timed measurements: latency, bandwidth, rates, set-up and
/// registration, shared channels (everything but the instruction counts).
fn timings(exe: &std::path::Path, cbin: &std::path::Path, addr: &str, dev: &str, iters: usize) -> Res<()> {
    let it = iters.to_string();
    main_rounds(exe, cbin, addr, dev, iters)?;

    eprintln!("compare: rpma with native operations off (APM flush, fenced-write atomic write)");
    let p = rpma_harness::next_port().to_string();
    forward(&pair(cmd(exe, &["server", addr, &p, "1"]), Some("READY"), cmd(exe, &["emulated", addr, &p, &it]))?);

    eprintln!("compare: rpma small writes, inline against not");
    let p = rpma_harness::next_port().to_string();
    forward(&pair(cmd(exe, &["server", addr, &p, "1"]), Some("READY"), cmd(exe, &["inline", addr, &p, &it]))?);
    eprintln!("compare: librpma example 07's commit, {COMMIT_ROUNDS} rounds of alternating order");
    alternate(exe, cbin, COMMIT_ROUNDS, &["commit", addr, "PORT", &it])?;

    eprintln!("compare: connection set-up and tear-down, registration");
    for prog in [&exe, &cbin] {
        let p = rpma_harness::next_port().to_string();
        forward(&pair(cmd(prog, &["server", addr, &p, "200"]), Some("READY"), cmd(prog, &["conns", addr, &p, "200"]))?);
    }
    // Registration in rounds of alternating order (rpma, C; C, rpma; ...):
    // measured on the TCG guest, the program that runs right after another
    // one's 1 GiB was unmapped registers up to 2x slower, whichever it is.
    for round in 0..REG_ROUNDS {
        let order = if round % 2 == 0 { [&exe, &cbin] } else { [&cbin, &exe] };
        for prog in order {
            let r = cmd(prog, &["reg", addr]).stderr(Stdio::inherit()).output()?;
            if !r.status.success() {
                return Err(format!("{} reg failed", prog.display()).into());
            }
            forward(&String::from_utf8_lossy(&r.stdout));
        }
    }
    eprintln!("compare: many connections: per-connection CQs on shared channels (epoll), one SharedCq");
    for n in [1usize, 16, 64, 256] {
        let each = (iters * 4 / n).max(1).to_string();
        for (prog, client) in [(&exe, "scch"), (&cbin, "scch"), (&exe, "scq"), (&exe, "aio")] {
            let p = rpma_harness::next_port().to_string();
            let ns = n.to_string();
            forward(&pair(
                cmd(prog, &["mserver", addr, &p, &ns]),
                Some("READY"),
                cmd(prog, &[client, addr, &p, &ns, &each]),
            )?);
        }
    }
    Ok(())
}

/// Instructions per operation: the count for `2n` operations minus the count
/// for `n`, over `n`, so that start-up and tear-down cancel out. A result
/// that is not positive (a program whose fixed cost is not fixed, as
/// perftest's event mode at small `n`) is reported as NaN, not as a number.
fn per_op(n: usize, count: impl Fn(usize) -> Res<f64>) -> Res<f64> {
    let x = (count(2 * n)? - count(n)?) / n as f64;
    if x > 0.0 {
        Ok(x)
    } else {
        eprintln!("compare: instructions per operation came out {x:.1} at n = {n}: not linear, reported as n/a");
        Ok(f64::NAN)
    }
}

fn callgrind(out: &std::path::Path) -> Command {
    let mut c = Command::new("valgrind");
    c.args(["--tool=callgrind", "-q"]).arg(format!("--callgrind-out-file={}", out.display()));
    c
}

/// The total instruction count (`Ir`) of a callgrind output file.
fn callgrind_total(f: &std::path::Path) -> Res<f64> {
    let text = std::fs::read_to_string(f)?;
    let line = text
        .lines()
        .find(|l| l.starts_with("totals:") || l.starts_with("summary:"))
        .ok_or_else(|| format!("no totals in {}", f.display()))?;
    Ok(line.split_whitespace().nth(1).ok_or("empty totals line")?.parse()?)
}

/// The last data row of a perftest report (the line after the header that
/// starts with `#bytes`).
fn perftest_row(out: &str) -> Res<Vec<f64>> {
    let mut lines = out.lines().skip_while(|l| !l.trim_start().starts_with("#bytes")).skip(1);
    let row = lines.next().ok_or_else(|| format!("no result row in perftest output:\n{out}"))?;
    Ok(row.split_whitespace().filter_map(|x| x.parse().ok()).collect())
}

fn perftest_pair(bin: &str, args: &[String], addr: &str) -> Res<Vec<f64>> {
    let attempt = || {
        let p = rpma_harness::next_port().to_string();
        let mut s = Command::new(bin);
        s.args(args).args(["-p", &p]);
        let mut c = Command::new(bin);
        c.args(args).args(["-p", &p, addr]);
        pair(s, None, c)
    };
    // perftest's server is started blind; one retry covers a slow start
    let out = attempt().or_else(|_| attempt())?;
    perftest_row(&out)
}

/// perftest's raw-verbs numbers for the same cases, as `RESULT` lines.
fn perftest(addr: &str, dev: &str, iters: usize) -> Res<()> {
    let base = |size: usize, n: usize, extra: &[&str]| -> Vec<String> {
        let mut v: Vec<String> = ["-R", "-d", dev, "-F", "-s", &size.to_string(), "-n", &n.to_string()]
            .iter()
            .map(|s| s.to_string())
            .collect();
        v.extend(extra.iter().map(|s| s.to_string()));
        v
    };
    // #bytes #iterations t_min t_max t_typical t_avg t_stdev p99 p99.9
    let lat = |case: &str, size: usize, r: &[f64]| {
        println!(
            "RESULT lat verbs {case} {size} {} {:.3} {:.3} {:.3} {:.3} {:.3} {:.3}",
            r[1], r[2], r[4], r[5], r[7], r[8], r[3]
        );
    };
    for size in rpma_side::LAT_SIZES {
        lat("read", size, &perftest_pair("ib_read_lat", &base(size, iters, &[]), addr)?);
        // ib_write_lat is a ping-pong of writes: not the same work as a write
        // and its completion. ib_write_bw at depth 1, every write signaled,
        // is; it reports only a rate, so only t_avg is known.
        let r = perftest_pair("ib_write_bw", &base(size, iters, &["-t", "1", "-Q", "1"]), addr)?;
        let avg = 1.0 / r[4];
        println!("RESULT lat verbs write {size} {iters} NaN NaN {avg:.3} NaN NaN NaN");
        // ib_write_lat: the write ping-pong, which both library programs
        // also run (their `write_pingpong` case).
        lat("write_pingpong", size, &perftest_pair("ib_write_lat", &base(size, iters, &[]), addr)?);
    }
    lat("pingpong", 8, &perftest_pair("ib_send_lat", &base(8, iters, &[]), addr)?);
    for (case, bin) in [("read", "ib_read_bw"), ("write", "ib_write_bw")] {
        for size in rpma_side::BW_SIZES {
            for qd in rpma_side::QDS {
                // #bytes #iterations BW_peak BW_average MsgRate[Mpps]
                let r = perftest_pair(bin, &base(size, iters, &["-t", &qd.to_string(), "-Q", "1"]), addr)?;
                println!("RESULT bw verbs {case} {size} {qd} {iters} {:.6}", r[4]);
            }
        }
    }
    let r = perftest_pair("ib_send_bw", &base(8, iters * 4, &["-t", "16", "-Q", "1"]), addr)?;
    println!("RESULT bw verbs send 8 16 {} {:.6}", iters * 4, r[4]);
    Ok(())
}
