//! Persistent memory survives a machine crash: a circular log in a
//! `MappedFile` on an emulated NVDIMM (a qemu `nvdimm` backed by a host
//! file, `RPMA_HARNESS_NVDIMM`: once as FS-DAX ext4, once as device DAX
//! `/dev/dax0.0`) is appended to record by record, each record
//! persisted (`persist_range`: a CPU cache flush on the `MAP_SYNC` mapping)
//! before the commit pointer that covers it is written and persisted, and
//! acknowledged (printed) after. At a seeded moment the guest kernel panics
//! (no sync, no unmount; qemu exits). The guest is booted again on the same
//! file: the commit pointer covers every acknowledged record, and every
//! record below it is intact (a record written before its pointer is caught
//! when the crash falls between the two).
//!
//! The same log is also written from another machine, the way a client
//! of remote persistent memory writes it: on `harness/rdma-run
//! --two-hosts`, host a serves the log on its device DAX NVDIMM and host b
//! appends over RDMA with example 07's commit as one chain (write the
//! record, flush it `Persistent`, atomically write the commit pointer,
//! flush that), printing what it saw acknowledged. At a seeded moment host
//! b says so and the harness kills host a's qemu (SIGKILL: no shutdown, no
//! sync); host a is booted again alone on the same file and verified as
//! above.
//!
//! Started on the host, the binary re-executes itself in the harness VMs
//! (`RPMA_PMEM_PHASE=write`, `remote` or `verify`; on device DAX a verify
//! boot also registers the memory and writes, flushes (`Persistent`) and
//! reads it over RDMA, and the last one runs librpma's examples that take a
//! pmem path (03, 04, 05, 07, 09, 09scch) with it). The suite runs
//! `RPMA_PMEM_CRASHES` crashes (default 1) in each of `RPMA_PMEM_MODES`
//! (default `fsdax,devdax,remote`).
//!
//! Under TCG there are no CPU caches or ADR to model: the test proves the
//! library's path (the mapping, the flushes, the order) and the file's
//! durability across a killed machine, not a hardware persistence domain.

mod common;
use common::{peer, Rng, T};
use rpma::{AlignedBuf, CommonData, Ep, Error, Flags, FlushType, MappedFile, MrLocal, MrRemote, PeerCfg, Usage};
use rpma_harness::RDMA_RUN;
use std::io::Write;
use std::process::Command;
use std::time::{Duration, Instant};

const NAME: &str = "acknowledged_records_survive_a_machine_crash";
const REC: usize = 64;
/// Slots of the circular log: record `i` lives in slot `i % RECORDS`.
const RECORDS: usize = 4096;
/// The commit pointer (records committed, ever) at 0, the slots from `REC`.
const LEN: usize = REC * (RECORDS + 1);
/// The mapping: the log, then room for the RDMA check; a multiple of a
/// device DAX's 2 MiB alignment.
const MAP_LEN: usize = 2 << 20;
/// Where the RDMA check writes, past the log.
const RDMA_AT: usize = 1 << 20;
const _: () = assert!(LEN <= RDMA_AT && RDMA_AT + 4096 <= MAP_LEN);

fn slot(i: usize) -> usize {
    REC * (i % RECORDS + 1)
}

fn main() {
    rpma_harness::one_test_args(NAME);
    match (std::env::var("RPMA_PMEM_PHASE").as_deref(), std::env::var("RPMA_HOST").as_deref()) {
        (Ok("write"), _) => write_phase(),
        (Ok("verify"), _) => verify_phase(),
        (Ok("remote"), Ok("a")) => remote_server(),
        (Ok("remote"), Ok("b")) => remote_writer(),
        _ => host(),
    }
}

fn record(i: usize) -> [u8; REC] {
    let mut r = [0u8; REC];
    r[..8].copy_from_slice(&(i as u64 + 1).to_le_bytes());
    for (k, b) in r[8..].iter_mut().enumerate() {
        *b = i.wrapping_mul(131).wrapping_add(k * 7) as u8;
    }
    r
}

fn env_u64(name: &str) -> u64 {
    std::env::var(name).unwrap_or_else(|_| panic!("{name} unset")).parse().unwrap_or_else(|_| panic!("{name}"))
}

/// The device DAX (RPMA_TEST_DAX_DEV) or a file on the FS-DAX.
fn log_path() -> String {
    if let Ok(dev) = std::env::var("RPMA_TEST_DAX_DEV") {
        return dev;
    }
    let dir = std::env::var("RPMA_TEST_PMEM_DIR").expect("the harness VM provides RPMA_TEST_PMEM_DIR");
    format!("{dir}/pmem-crash.log")
}

fn open_log() -> MappedFile {
    // SAFETY: the test's own file (or device) on the VM's pmem, never
    // truncated or reconfigured while mapped.
    let f = unsafe { MappedFile::open(log_path(), MAP_LEN) }.expect("map the log");
    assert!(f.is_pmem(), "{} on the NVDIMM is persistent memory (MAP_SYNC)", f.path().display());
    f
}

/// The commit pointer: records committed, ever (bounded: a log that is not
/// the test's fails here, not in the arithmetic after).
fn committed(f: &MappedFile) -> usize {
    let mut c = [0u8; 8];
    f.read_at(0, &mut c).unwrap();
    let c = u64::from_le_bytes(c);
    assert!(c < 1 << 40, "the commit pointer {c} is not this test's: {} holds another log", f.path().display());
    c as usize
}

/// In the VM: append records after those already committed, acknowledging
/// each once its commit pointer is persistent, until the kernel is panicked
/// at a seeded moment (`RPMA_PMEM_DELAY_US` after the start) or the log is
/// full (then with one more record half written).
fn write_phase() {
    let mut f = open_log();
    let start = committed(&f);
    let delay = std::time::Duration::from_micros(env_u64("RPMA_PMEM_DELAY_US"));
    std::thread::spawn(move || {
        std::thread::sleep(delay);
        crash();
    });
    let mut out = std::io::stdout();
    writeln!(out, "start {start}").unwrap();
    // Until the crash (a bound, should the timer fail).
    for i in start..start + 100 * RECORDS {
        f.write_at(slot(i), &record(i)).unwrap();
        f.persist_range(slot(i), REC).unwrap();
        f.write_at(0, &(i as u64 + 1).to_le_bytes()).unwrap();
        f.persist_range(0, 8).unwrap();
        // Acknowledged in batches: a console write costs far more than an
        // append under TCG, and would leave the crash little chance to fall
        // inside one.
        if (i + 1) % 256 == 0 {
            writeln!(out, "acked {}", i + 1).unwrap();
        }
    }
    crash();
}

/// Panics the guest kernel: no sync, no unmount; qemu exits.
fn crash() -> ! {
    let _ = std::io::stdout().flush();
    std::fs::write("/proc/sysrq-trigger", "c").expect("panic the guest kernel");
    std::thread::sleep(std::time::Duration::from_secs(60));
    panic!("the guest survived its kernel panic");
}

/// In the VM, booted again: the commit pointer covers at least the
/// acknowledged records (an acknowledgement may be lost with the machine),
/// and every record below it is intact.
fn verify_phase() {
    let f = open_log();
    let acked = env_u64("RPMA_PMEM_ACKED") as usize;
    let c = committed(&f);
    assert!(c >= acked, "the commit pointer {c} after the crash covers the {acked} acknowledged");
    let mut got = [0u8; REC];
    // The records still in the log: all but the one whose slot the next
    // append reuses.
    for i in c.saturating_sub(RECORDS - 1)..c {
        f.read_at(slot(i), &mut got).unwrap();
        assert_eq!(got, record(i), "record {i} below the commit pointer {c} is intact");
    }
    println!("verified {c} records after the crash ({acked} acknowledged)");
    if let Ok(dev) = std::env::var("RPMA_TEST_DAX_DEV") {
        rdma_into(f);
        // They lay out their own data over the log: the series' last boot.
        if std::env::var_os("RPMA_PMEM_EXAMPLES").is_some() {
            examples_on(&dev);
        }
    }
}

/// librpma's examples that take a pmem path, their server on the device
/// DAX (cleared first: each lays out its own data), the client beside it:
/// the lines they print as with DRAM, and 05's flush persistent.
fn examples_on(dev: &str) {
    let dir = std::env::current_exe().unwrap().parent().and_then(|d| d.parent()).unwrap().join("examples");
    let cases: [(&str, &[&str], &[&str]); 6] = [
        ("03-read-to-persistent", &[], &["New value: Hello world!"]),
        ("04-write-to-persistent", &[], &["New value: Hello world!"]),
        ("05-flush-to-persistent", &["on"], &["New value: Hello world!"]),
        ("07-atomic-write", &[], &["1st_word\n2nd_word\n3rd_word\n"]),
        ("09-flush-to-persistent-GPSPM", &[], &["New value: Hello world!"]),
        ("09scch-flush-to-persistent-GPSPM", &[], &["New value: Hello world!"]),
    ];
    for (name, extra, expect) in cases {
        {
            // SAFETY: as in open_log.
            let mut m = unsafe { MappedFile::open(dev, MAP_LEN) }.unwrap();
            m.write_at(0, &vec![0u8; MAP_LEN]).unwrap();
            m.persist().unwrap();
        }
        let exe = dir.join(name);
        assert!(exe.exists(), "{} is not built (cargo test builds the examples)", exe.display());
        let (addr, port) = (rpma_harness::addr(), rpma_harness::next_port().to_string());
        let srv = Command::new(&exe).args(["server", &addr, &port, dev]).args(extra).output_async();
        let cli = Command::new(&exe).args(["client", &addr, &port]).output().expect("client");
        let srv = srv.join().unwrap();
        let text = format!("{}{}", String::from_utf8_lossy(&srv.stdout), String::from_utf8_lossy(&cli.stdout));
        let errs = format!("{}{}", String::from_utf8_lossy(&srv.stderr), String::from_utf8_lossy(&cli.stderr));
        assert!(srv.status.success() && cli.status.success(), "{name} on {dev}:\n{text}\n{errs}");
        for e in expect {
            assert!(text.contains(e), "{name} on {dev} lacks {e:?}:\n{text}\n{errs}");
        }
        assert!(!text.contains("NOT supported"), "{name} on {dev}: the persistent flush is offered:\n{text}");
        println!("device DAX: example {name} ran with its pmem on {dev}");
    }
}

/// Runs a command in a thread, for a server beside its client.
trait OutputAsync {
    fn output_async(&mut self) -> std::thread::JoinHandle<std::process::Output>;
}

impl OutputAsync for Command {
    fn output_async(&mut self) -> std::thread::JoinHandle<std::process::Output> {
        let child = self.stdout(std::process::Stdio::piped()).stderr(std::process::Stdio::piped()).spawn();
        std::thread::spawn(move || child.expect("server").wait_with_output().expect("server output"))
    }
}

/// The device DAX memory registered (it can be pinned, unlike FS-DAX
/// without On-Demand Paging) and written over RDMA with a persistent
/// flush, the peer configuration saying what [`MappedFile::is_pmem`] says;
/// the bytes read back by the CPU and over RDMA.
fn rdma_into(f: MappedFile) {
    let sp = peer();
    let usage = Usage::WRITE_DST | Usage::READ_SRC | Usage::FLUSH_TYPE_PERSISTENT;
    let mr = MrLocal::reg(&sp, f, usage).expect("device DAX memory registers");
    common::persist_over_rdma(&sp, &mr, RDMA_AT, 4096, mr.is_pmem());
    println!("device DAX: registered, written and flushed (Persistent) over RDMA, read back");
}

/// What host b prints for the harness to kill host a
/// (`RPMA_HARNESS_KILL_A_ON`).
const CRASH_NOW: &str = "crash host a now";

/// Host a of two, on its device DAX NVDIMM: the log registered and offered
/// to one writer, until the machine is killed under it.
fn remote_server() {
    let port = rpma_harness::next_port();
    let f = open_log();
    let start = committed(&f);
    let sp = peer();
    let mut pcfg = PeerCfg::new();
    pcfg.set_direct_write_to_pmem(f.is_pmem());
    let usage = Usage::WRITE_DST | Usage::READ_SRC | Usage::FLUSH_TYPE_PERSISTENT;
    let mr = MrLocal::reg(&sp, f, usage).expect("device DAX memory registers");
    let pdata = CommonData::encode(0, &mr, Some(&pcfg));
    let ep = Ep::listen(&sp, &rpma_harness::addr(), port).unwrap();
    println!("serving the log, {start} records committed");
    let ready = rpma::utils::poll_fds(&[std::os::fd::AsFd::as_fd(&ep)], Some(Duration::from_secs(300))).unwrap();
    assert!(ready[0], "no writer in 300 s");
    let conn = ep.next_conn_req(None).unwrap().connect(&pdata).unwrap();
    println!("writer: {:?}", conn.next_event_timeout(T));
    // The machine crash ends this wait; an event first means the writer
    // left before it.
    let ev = conn.next_event_timeout(Duration::from_secs(600));
    panic!("the writer left before this machine crashed: {ev:?}");
}

/// Host b of two: appends to host a's log over RDMA, acknowledging (in
/// batches) what is committed, until host a's machine is gone; at the
/// seeded moment (`RPMA_PMEM_DELAY_US` after the first commit) it asks for
/// the crash and keeps appending.
fn remote_writer() {
    let delay = Duration::from_micros(env_u64("RPMA_PMEM_DELAY_US"));
    let p = peer();
    let conn = common::connect_across(&p, rpma_harness::next_port(), &[]);
    let cd = CommonData::decode(conn.private_data()).unwrap();
    conn.apply_remote_peer_cfg(&cd.peer_cfg.expect("the server sends its peer configuration"));
    let log = cd.mr;
    assert!(log.flush_type().contains(Usage::FLUSH_TYPE_PERSISTENT), "the log offers a persistent flush");
    let mut src = MrLocal::reg(&p, AlignedBuf::new(REC).unwrap(), Usage::WRITE_SRC | Usage::READ_DST).unwrap();
    conn.read(&src, 0, &log, 0, 8, Flags::COMPLETION_ALWAYS, u64::MAX).unwrap();
    assert!(conn.cq().next_completion(T).unwrap().status.is_success(), "the commit pointer read");
    let mut c = [0u8; 8];
    src.read_at(0, &mut c).unwrap();
    let start = u64::from_le_bytes(c);
    assert!(start < 1 << 40, "the commit pointer {start} is not this test's");
    println!("start {start}");
    let t0 = Instant::now();
    let mut crash: Option<Instant> = None;
    for i in start as usize.. {
        // Each acknowledged (a commit costs more than the console line).
        // After asking for the crash, a shorter wait: rxe reports no error
        // for a dead peer within its retry budget's first seconds.
        let bound = Duration::from_secs(if crash.is_some() { 5 } else { 30 });
        match commit(&conn, &log, &mut src, i, bound) {
            Ok(()) => println!("acked {}", i + 1),
            Err(e) => match crash {
                Some(t) => {
                    println!("the writer stopped {:.1?} after asking for the crash: {e}", t.elapsed());
                    return;
                }
                None => panic!("record {i} failed before the crash: {e}"),
            },
        }
        match crash {
            None if t0.elapsed() >= delay => {
                println!("{CRASH_NOW} ({} committed)", i + 1);
                crash = Some(Instant::now());
            }
            Some(t) => assert!(t.elapsed() < Duration::from_secs(120), "host a still answers 120 s after its crash"),
            None => {}
        }
    }
}

/// Commits record `i` as example 07 commits a word, in one chain: the
/// record written and flushed, the commit pointer atomically written and
/// flushed; only the last flush reports, and its completion (within
/// `bound`) is the acknowledgement.
fn commit(
    conn: &rpma::Conn,
    log: &MrRemote,
    src: &mut MrLocal<AlignedBuf>,
    i: usize,
    bound: Duration,
) -> Result<(), Error> {
    src.write_at(0, &record(i))?;
    common::post_commit(conn, log, slot(i) as u64, src, REC, i as u64 + 1, FlushType::Persistent, i as u64)?;
    let wc = conn.cq().next_completion(bound)?;
    if wc.status.is_success() && wc.op_context == i as u64 {
        Ok(())
    } else {
        Err(Error::Inval(format!("record {i}: {wc:?}").into()))
    }
}

/// On the host: the crash series of each mode, each crash a boot that
/// crashes and a verify boot on the same NVDIMM file.
fn host() {
    let crashes = std::env::var("RPMA_PMEM_CRASHES").ok().and_then(|v| v.parse().ok()).unwrap_or(1u32);
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15u64 ^ u64::from(std::process::id()));
    let modes = std::env::var("RPMA_PMEM_MODES").unwrap_or_else(|_| "fsdax,devdax,remote".into());
    let ok = modes.split(',').all(|mode| {
        assert!(
            ["fsdax", "devdax", "remote"].contains(&mode),
            "RPMA_PMEM_MODES: {mode} is not fsdax, devdax or remote"
        );
        series(mode, crashes, &mut rng)
    });
    rpma_harness::report_one(NAME, ok);
}

/// `crashes` crashes in `mode`: `fsdax` and `devdax` panic the writer's own
/// kernel, `remote` kills host a's qemu under host b's writes (device DAX).
fn series(mode: &str, crashes: u32, rng: &mut Rng) -> bool {
    let target =
        std::env::var("CARGO_TARGET_DIR").unwrap_or_else(|_| concat!(env!("CARGO_MANIFEST_DIR"), "/target").into());
    let exe = std::env::current_exe().expect("current executable");
    let img = format!("{target}/pmem-crash-{mode}-{}.img", std::process::id());
    let _ = std::fs::remove_file(&img);
    let remote = mode == "remote";
    // A boot of this binary on the mode's NVDIMM, in `phase`; a hang is a
    // failure, not a stuck suite.
    let boot = |phase: &str| {
        let mut c = Command::new(RDMA_RUN);
        c.arg(if phase == "remote" { "--two-hosts" } else { "--vm" }).arg("--").arg(&exe);
        c.env("RPMA_HARNESS_NVDIMM", &img)
            .env("RPMA_HARNESS_NVDIMM_MODE", if mode == "fsdax" { "fsdax" } else { "devdax" })
            .env("RPMA_HARNESS_TIMEOUT", "900")
            .env("RPMA_PMEM_PHASE", phase);
        c
    };
    let mut acked = 0usize;
    let mut ok = true;
    for n in 0..crashes {
        // Local appends run at tens of thousands a second under TCG, remote
        // commits far slower: the crash lands 5 ms to 1 s into the first,
        // 0.5 to 5 s into the second.
        let delay_us = if remote { 500_000 + rng.next() % 4_500_000 } else { 5_000 + rng.next() % 995_000 };
        let mut crashing = boot(if remote { "remote" } else { "write" });
        crashing.env("RPMA_PMEM_DELAY_US", delay_us.to_string());
        if remote {
            crashing.env("RPMA_HARNESS_KILL_A_ON", CRASH_NOW);
        }
        let _ = std::io::stdout().flush();
        let out = crashing.output().unwrap_or_else(|e| panic!("cannot start {RDMA_RUN}: {e}"));
        let text = String::from_utf8_lossy(&out.stdout);
        // the writer's lines (host b's, prefixed by the harness, when remote)
        let writer: Vec<&str> =
            text.lines().filter_map(|l| if remote { l.strip_prefix("[b] ") } else { Some(l) }).collect();
        let started = writer.iter().any(|l| l.starts_with("start "));
        let crashed = if remote { out.status.success() && text.contains(CRASH_NOW) } else { !out.status.success() };
        if !started || !crashed {
            eprintln!("pmem_crash: {mode} crash {n}: the writer did not run into a crash:\n{text}");
            eprintln!("{}", String::from_utf8_lossy(&out.stderr));
            ok = false;
            break;
        }
        if let Some(k) = writer.iter().filter_map(|l| l.strip_prefix("acked ")).next_back() {
            acked = k.parse().unwrap();
        }
        for l in writer.iter().filter(|l| l.starts_with(CRASH_NOW) || l.starts_with("the writer stopped")) {
            println!("  {mode} crash {n}: {l}");
        }
        let mut verify = boot("verify");
        verify.env("RPMA_PMEM_ACKED", acked.to_string());
        if mode == "devdax" && n + 1 == crashes {
            verify.env("RPMA_PMEM_EXAMPLES", "1");
        }
        let st = verify.status().unwrap_or_else(|e| panic!("cannot start {RDMA_RUN}: {e}"));
        println!("  {mode} crash {n} after {delay_us} us: {acked} acknowledged in all, verified: {}", st.success());
        if !st.success() {
            ok = false;
            break;
        }
    }
    let _ = std::fs::remove_file(&img);
    if ok {
        // Each verify boot checked every acknowledged record: none lost.
        println!("  {mode}: {crashes} crashes, {acked} records acknowledged in all, 0 lost or torn");
    }
    ok
}
