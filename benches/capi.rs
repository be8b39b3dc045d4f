//! The C ABI, measured: the project's C benchmark program
//! (`benches/compare/librpma_bench.c`), built once against C librpma, run on
//! C librpma and on rpma's `librpma.so.0` (the same binary, switched by
//! `LD_LIBRARY_PATH`), in the same device run.
//!
//! `harness/capi-build` (release) first, then `cargo bench --bench capi`.
//! Without a device on the host it runs in the harness's Soft-RoCE VM.
//! Latency (median per case) and bandwidth are taken in rounds of
//! alternating order (C librpma first, then rpma first, ...), and each cell
//! reports the median of the per-round ratios rpma/C librpma with its
//! minimum and maximum; instructions per operation (callgrind, 2N minus N)
//! are deterministic and taken once. Knobs: `RPMA_BENCH_ITERS` (operations
//! per case, default 1000), `RPMA_BENCH_ROUNDS` (default 5; from 8 rounds each ratio also gets a
//! 95% interval of its median),
//! `RPMA_BENCH_IR_ITERS` (default 200), `RPMA_BENCH_ONLY=ir` (only the
//! instruction counts), `RPMA_BENCH_IR_CASES` (a comma-separated subset of
//! the instruction cases: read, write, write_flush, atomic_write, commit,
//! empty_poll, and read_spin and write_spin: the completion busy-polled, as
//! in the latency cases), `RPMA_BENCH_LOAD=N` (the loaded mode: N threads spinning
//! on the host beside the VM for the whole run, as in the compare bench).
//!
//! Each round's values are printed as it ends (`ROUND` lines), so runs can
//! be put together: `cargo bench --bench capi -- report OUT...` renders
//! the timing table of every round in the saved outputs `OUT` (no device).

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use rpma_harness::stats::{bootstrap_median, median, spread, INTERVAL_ROUNDS};

type Res<T> = Result<T, Box<dyn std::error::Error>>;

fn env(name: &str, default: usize) -> usize {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).filter(|a| a != "--bench").collect();
    if args.iter().any(|a| a == "--list") {
        return; // `cargo test --benches` lists tests: there are none
    }
    if args.first().map(String::as_str) == Some("report") {
        if let Err(e) = report(&args[1..]) {
            eprintln!("capi bench: report: {e}");
            std::process::exit(1);
        }
        return;
    }
    // The loaded mode's hog runs on the host, beside the VM that
    // `ensure_device` boots (or beside the measurement on a native device).
    let on_host = !rpma_harness::in_vm();
    let load = if on_host { rpma_harness::Hog::load_from_env() } else { 0 };
    let _hog = rpma_harness::Hog::start(load);
    if on_host {
        println!("mode: {}", rpma_harness::Hog::mode(load));
    }
    rpma_harness::ensure_device();
    if let Err(e) = run() {
        eprintln!("capi bench: {e}");
        std::process::exit(1);
    }
}

/// The C program, `lib` (None: C librpma) searched first.
fn cmd(cbin: &Path, lib: Option<&Path>, args: &[&str]) -> Command {
    let mut c = Command::new(cbin);
    c.env_remove("LD_LIBRARY_PATH").args(args);
    if let Some(l) = lib {
        c.env("LD_LIBRARY_PATH", l);
    }
    c
}

/// Server and client of one run; returns the client's stdout.
fn pair(server: Command, mut client: Command) -> Res<String> {
    let mut server = server;
    let mut s = server.stdout(Stdio::piped()).stderr(Stdio::inherit()).spawn()?;
    let mut out = BufReader::new(s.stdout.take().ok_or("no stdout")?);
    let mut line = String::new();
    while !line.contains("READY") {
        line.clear();
        if out.read_line(&mut line)? == 0 {
            return Err("the server exited before READY".into());
        }
    }
    std::thread::spawn(move || std::io::copy(&mut out, &mut std::io::sink()));
    let c = client.stderr(Stdio::inherit()).output()?;
    let t0 = Instant::now();
    while s.try_wait()?.is_none() {
        if t0.elapsed() > Duration::from_secs(60) {
            let _ = s.kill();
            return Err("the server did not exit".into());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    if !c.status.success() {
        return Err(format!("the client failed: {}", c.status).into());
    }
    Ok(String::from_utf8_lossy(&c.stdout).into_owned())
}

/// `RESULT lat librpma CASE SIZE ITERS min typical ...` -> ("lat CASE SIZE", typical µs);
/// `RESULT bw librpma CASE SIZE QD ITERS Mops` -> ("bw CASE SIZE qdQD", Mops).
fn results(out: &str) -> BTreeMap<String, f64> {
    let mut m = BTreeMap::new();
    for l in out.lines() {
        let f: Vec<&str> = l.split_whitespace().collect();
        match f.as_slice() {
            ["RESULT", "lat", _, case, size, _, _, typical, ..] => {
                m.insert(format!("lat {case} {size}"), typical.parse().unwrap_or(f64::NAN));
            }
            ["RESULT", "bw", _, case, size, qd, _, mops] => {
                m.insert(format!("bw {case} {size} qd{qd}"), mops.parse().unwrap_or(f64::NAN));
            }
            _ => {}
        }
    }
    m
}

fn callgrind_total(f: &Path) -> Res<f64> {
    let text = std::fs::read_to_string(f)?;
    let line = text
        .lines()
        .find(|l| l.starts_with("totals:") || l.starts_with("summary:"))
        .ok_or_else(|| format!("no totals in {}", f.display()))?;
    Ok(line.split_whitespace().nth(1).ok_or("empty totals")?.parse()?)
}

/// One case's values: C librpma's, rpma's, and the per-round ratios.
type Cell = (Vec<f64>, Vec<f64>, Vec<f64>);

/// Adds one round's values of `case` to its cell.
fn add_round(cells: &mut BTreeMap<String, Cell>, case: String, c: f64, r: f64) {
    let e = cells.entry(case).or_default();
    e.0.push(c);
    e.1.push(r);
    e.2.push(r / c);
}

/// A round's values of one case, as printed (`ROUND round case c_librpma rpma`;
/// the case's words joined by `/`) and read back by [`report`].
fn round_line(round: usize, case: &str, c: f64, r: f64) -> String {
    format!("ROUND {round} {} {c} {r}", case.replace(' ', "/"))
}

/// The timing table of every `ROUND` line in the saved outputs `files`.
fn report(files: &[String]) -> Res<()> {
    if files.is_empty() {
        return Err("usage: cargo bench --bench capi -- report OUT...".into());
    }
    let mut cells: BTreeMap<String, Cell> = BTreeMap::new();
    let mut rounds = 0;
    for f in files {
        let text = std::fs::read_to_string(f).map_err(|e| format!("{f}: {e}"))?;
        for l in text.lines() {
            if let ["ROUND", _, case, c, r] = l.split_whitespace().collect::<Vec<_>>().as_slice() {
                let case = case.replace('/', " ");
                add_round(&mut cells, case.clone(), c.parse()?, r.parse()?);
                rounds = rounds.max(cells[&case].2.len());
            }
        }
    }
    if cells.is_empty() {
        return Err("no ROUND lines in the files".into());
    }
    print_table(&cells, rounds);
    Ok(())
}

/// The timing table: each case's medians and the median (min-max, and from
/// [`INTERVAL_ROUNDS`] a 95% interval) of its per-round ratios.
fn print_table(cells: &BTreeMap<String, Cell>, rounds: usize) {
    // From INTERVAL_ROUNDS rounds, also a 95% interval of the ratios' median (the rounds resampled).
    let interval = if rounds >= INTERVAL_ROUNDS { "; 95% interval of the median" } else { "" };
    println!("\n| case | C librpma (median) | rpma's C ABI (median) | rpma / C librpma: median (min-max{interval}) of {rounds} rounds |");
    println!("|---|---|---|---|");
    for (k, (c, r, ratio)) in cells {
        // Latency in µs; bandwidth in thousand operations per second.
        let (unit, scale) = if k.starts_with("lat") { ("µs", 1.0) } else { ("kops/s", 1000.0) };
        let (mid, lo, hi) = spread(ratio.clone()).unwrap_or((f64::NAN, f64::NAN, f64::NAN));
        let settled = if ratio.len() >= INTERVAL_ROUNDS {
            let (blo, bhi) = bootstrap_median(ratio);
            format!("; {blo:.2}-{bhi:.2}")
        } else {
            String::new()
        };
        println!(
            "| {k} | {:.2} {unit} | {:.2} {unit} | {mid:.2} ({lo:.2}-{hi:.2}{settled}) |",
            median(c.clone()) * scale,
            median(r.clone()) * scale,
        );
    }
}

fn run() -> Res<()> {
    let addr = rpma_harness::addr();
    let iters = env("RPMA_BENCH_ITERS", 1000).max(20);
    let rounds = env("RPMA_BENCH_ROUNDS", 5).max(1);
    let ir_iters = env("RPMA_BENCH_IR_ITERS", 200).max(10);
    let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
    let target = std::env::var_os("CARGO_TARGET_DIR").map(PathBuf::from).unwrap_or_else(|| repo.join("target"));
    let lib = target.join("capi").join("lib");
    if !lib.join("librpma.so.0").exists() {
        return Err(format!("{} lacks librpma.so.0: run harness/capi-build first", lib.display()).into());
    }
    let tmp = std::env::temp_dir().join(format!("rpma-capi-bench-{}", std::process::id()));
    std::fs::create_dir_all(&tmp)?;
    let cbin = tmp.join("librpma_bench");
    let st = Command::new("gcc")
        .args(["-O2", "-o"])
        .arg(&cbin)
        .arg(repo.join("benches/compare/librpma_bench.c"))
        .args(["-lrpma", "-libverbs"])
        .status()?;
    if !st.success() {
        return Err("gcc could not build librpma_bench.c (needs librpma-dev)".into());
    }
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    println!(
        "device run: {} kernel {}, {iters} operations per case, {rounds} rounds, C program {}",
        std::env::var("RPMA_TEST_ENV").unwrap_or_else(|_| "native".into()),
        kernel.trim(),
        cbin.display()
    );
    let it = iters.to_string();
    let mut cells: BTreeMap<String, Cell> = BTreeMap::new();
    let only_ir = std::env::var("RPMA_BENCH_ONLY").as_deref() == Ok("ir");
    for round in (0..rounds).filter(|_| !only_ir) {
        let order: [Option<&Path>; 2] = if round % 2 == 0 { [None, Some(&lib)] } else { [Some(&lib), None] };
        let mut got: [BTreeMap<String, f64>; 2] = Default::default();
        for l in order {
            let port = rpma_harness::next_port().to_string();
            let out =
                pair(cmd(&cbin, l, &["server", &addr, &port, "1"]), cmd(&cbin, l, &["client", &addr, &port, &it]))?;
            got[usize::from(l.is_some())] = results(&out);
        }
        for (k, c) in &got[0] {
            if let Some(r) = got[1].get(k) {
                println!("{}", round_line(round, k, *c, *r));
                add_round(&mut cells, k.clone(), *c, *r);
            }
        }
        eprintln!("capi bench: round {} of {rounds} done", round + 1);
    }
    if !only_ir {
        print_table(&cells, rounds);
    }
    println!("\n| instructions per operation (callgrind, 2N-N, N = {ir_iters}) | C librpma | rpma's C ABI | ratio |");
    println!("|---|---|---|---|");
    let wanted = std::env::var("RPMA_BENCH_IR_CASES").ok();
    let cases = ["read", "write", "write_flush", "atomic_write", "commit", "empty_poll", "read_spin", "write_spin"];
    for case in cases.into_iter().filter(|c| wanted.as_deref().is_none_or(|w| w.split(',').any(|x| x == *c))) {
        let mut per = [0.0f64; 2];
        for (i, l) in [None, Some(lib.as_path())].into_iter().enumerate() {
            let count = |n: usize| -> Res<f64> {
                let port = rpma_harness::next_port().to_string();
                let f = tmp.join(format!("cg.{i}.{case}.{n}"));
                let mut c = Command::new("valgrind");
                c.args(["--tool=callgrind", "-q"]).arg(format!("--callgrind-out-file={}", f.display()));
                c.arg(&cbin).args(["ir", &addr, &port, case, &n.to_string()]).env_remove("LD_LIBRARY_PATH");
                if let Some(l) = l {
                    c.env("LD_LIBRARY_PATH", l);
                }
                pair(cmd(&cbin, l, &["server", &addr, &port, "1"]), c)?;
                callgrind_total(&f)
            };
            per[i] = (count(2 * ir_iters)? - count(ir_iters)?) / ir_iters as f64;
        }
        println!("| {case} | {:.0} | {:.0} | {:.2} |", per[0], per[1], per[1] / per[0]);
    }
    let _ = std::fs::remove_dir_all(&tmp);
    Ok(())
}
