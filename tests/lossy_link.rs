//! A lossy network between two hosts, for as long as it takes: writes,
//! flushes, atomic writes, reads and sends over a link that loses,
//! reorders and duplicates packets (`tc ... netem` on both guests of
//! `harness/rdma-run --two-hosts`, on the interface `RPMA_LINK_DEV` names,
//! restored on every exit), then over a link that goes down for 1-3
//! s every 5 s, every byte verified.
//!
//! Host a serves a log (a commit pointer at 0, record slots after it) and
//! receives messages; host b, the client, repeats per record: example 07's
//! commit as one chain (write, flush, atomic write of the pointer, flush),
//! a read of the record back, and a send carrying the record's number and
//! bytes, which host a checks against its own memory. Every wait is bounded
//! (the connection's retry budget plus a margin); an operation that fails
//! or times out ends the connection and the client connects again and goes
//! on from the commit pointer. At the end host a checks every record below
//! the pointer and that the pointer covers every acknowledged commit.
//!
//! Each phase runs `RPMA_LOSSY_SECS` seconds (default 8; the documented
//! soak uses 120). The client prints one line per phase: records committed
//! a second (against the clean link's), the slowest operation, errors and
//! reconnections.

mod common;
use common::{peer, Rng, T};
use rpma::{AlignedBuf, CommonData, Conn, ConnCfg, Ep, Error, Flags, FlushType, MrLocal, MrRemote, Usage};
use std::os::fd::AsFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

const NAME: &str = "lossy_link";
const REC: usize = 256;
/// Record slots: record `i` lives in slot `i % RECORDS`, after the pointer.
const RECORDS: usize = 1024;
const LEN: usize = REC * (RECORDS + 1);
/// A message: kind, value, then a record's bytes.
const MSG: usize = 16 + REC;
/// Receives host a keeps posted.
const RECVS: usize = 16;
const CHECK: u64 = 1;
const PHASE: u64 = 2;
const BYE: u64 = 3;

/// The phases: a name and the `netem` arguments both hosts apply (none: a
/// clean link; the flaps cut the client's egress on top of a clean link).
const PHASES: [(&str, &[&str]); 5] = [
    ("clean", &[]),
    ("loss 1%", &["loss", "1%"]),
    ("loss 5%", &["loss", "5%"]),
    ("reorder 25%, duplicate 2%", &["delay", "5ms", "reorder", "25%", "50%", "duplicate", "2%"]),
    ("flaps: down 1-3 s every 5 s", &[]),
];

fn main() {
    rpma_harness::on_two_hosts(NAME, server, client);
}

fn record(i: u64) -> [u8; REC] {
    let mut r = [0u8; REC];
    r[..8].copy_from_slice(&(i + 1).to_le_bytes());
    for (k, b) in r[8..].iter_mut().enumerate() {
        *b = i.wrapping_mul(29).wrapping_add(k as u64 * 3) as u8;
    }
    r
}

fn slot(i: u64) -> usize {
    REC * (i as usize % RECORDS + 1)
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().unwrap())
}

/// Host a: serves the log to one connection at a time (a new request
/// replaces a connection the client gave up), checks every message, and
/// at the client's goodbye checks the whole log.
fn server() {
    let link = rpma_harness::Link::named();
    let port = rpma_harness::next_port();
    let p = peer();
    let usage = Usage::WRITE_DST | Usage::READ_SRC | Usage::FLUSH_TYPE_VISIBILITY;
    let log = MrLocal::reg(&p, AlignedBuf::new(LEN).unwrap(), usage).unwrap();
    let pdata = CommonData::encode(0, &log, None);
    let msgs = MrLocal::reg(&p, AlignedBuf::new(MSG * RECVS).unwrap(), Usage::RECV).unwrap();
    let ep = Ep::listen(&p, &rpma_harness::addr(), port).unwrap();
    let mut cfg = ConnCfg::new();
    cfg.set_rq_size(RECVS as u32);
    let (mut checked, mut conns) = (0u64, 0);
    loop {
        let ready = rpma::utils::poll_fds(&[ep.as_fd()], Some(Duration::from_secs(600))).unwrap();
        assert!(ready[0], "a: no connection in 600 s");
        let conn = ep.next_conn_req(Some(&cfg)).unwrap().connect(&pdata).unwrap();
        conns += 1;
        for k in 0..RECVS {
            conn.recv(&msgs, k * MSG, MSG, k as u64).unwrap();
        }
        // Until the connection fails or the client comes back on a new one.
        let bye = loop {
            let wc = match conn.cq().next_completion(Duration::from_secs(1)) {
                Ok(wc) => wc,
                Err(Error::NoCompletion) if rpma::utils::poll_fds(&[ep.as_fd()], Some(Duration::ZERO)).unwrap()[0] => {
                    break None
                }
                Err(Error::NoCompletion) => continue,
                Err(e) => panic!("a: {e}"),
            };
            if !wc.status.is_success() {
                println!("a: connection {conns} ended: {}", wc.status);
                break None;
            }
            let k = wc.op_context as usize;
            let mut m = [0u8; MSG];
            msgs.read_at(k * MSG, &mut m).unwrap();
            let (kind, value) = (u64_at(&m, 0), u64_at(&m, 8));
            if kind == BYE {
                break Some(value);
            }
            if kind == PHASE {
                let (name, args) = PHASES[value as usize];
                link.shape(args);
                println!("a: phase {name}");
            } else {
                assert_eq!(kind, CHECK, "a: message kind");
                assert_eq!(&m[16..], &record(value), "a: the bytes sent with record {value}");
                let mut got = [0u8; REC];
                log.read_at(slot(value), &mut got).unwrap();
                assert_eq!(got, record(value), "a: record {value} in memory when its message arrived");
                checked += 1;
            }
            conn.recv(&msgs, k * MSG, MSG, k as u64).unwrap();
        };
        let _ = conn.disconnect();
        drop(conn);
        if let Some(acked) = bye {
            link.shape(&[]);
            let mut c = [0u8; 8];
            log.read_at(0, &mut c).unwrap();
            let c = u64::from_le_bytes(c);
            assert!(c >= acked, "a: the commit pointer {c} covers the {acked} acknowledged commits");
            let mut got = [0u8; REC];
            for i in c.saturating_sub(RECORDS as u64)..c {
                log.read_at(slot(i), &mut got).unwrap();
                assert_eq!(got, record(i), "a: record {i} below the commit pointer {c}");
            }
            println!(
                "a: {c} records committed, the last {} intact; {checked} messages checked; {conns} connections",
                c.min(RECORDS as u64)
            );
            return;
        }
    }
}

/// Host b's connection and its buffers.
struct Client {
    conn: Conn,
    log: MrRemote,
    src: MrLocal<AlignedBuf>,
    back: MrLocal<AlignedBuf>,
    msg: MrLocal<AlignedBuf>,
    bound: Duration,
}

impl Client {
    fn connect(p: &rpma::Peer, port: u16) -> Client {
        let conn = common::connect_across(p, port, &[]);
        let log = CommonData::decode(conn.private_data()).unwrap().mr;
        let budget = conn.retry_budget().unwrap();
        // The retry budget, and a margin for a provider that reports a dead
        // peer late or never (rxe on 6.1).
        let bound = budget.transport_timeout().unwrap_or(T) + Duration::from_secs(5);
        let reg = |u| MrLocal::reg(p, AlignedBuf::new(MSG).unwrap(), u).unwrap();
        let (src, back, msg) = (reg(Usage::WRITE_SRC | Usage::READ_DST), reg(Usage::READ_DST), reg(Usage::SEND));
        Client { conn, log, src, back, msg, bound }
    }

    /// The one signaled operation just posted: its completion within the
    /// bound, successful, carrying `ctx`.
    fn wait(&self, ctx: u64) -> Result<(), String> {
        let wc = self.conn.cq().next_completion(self.bound).map_err(|e| format!("{e} (bound {:?})", self.bound))?;
        if wc.status.is_success() && wc.op_context == ctx {
            Ok(())
        } else {
            Err(format!("{wc:?}"))
        }
    }

    fn committed(&mut self) -> Result<u64, String> {
        self.conn
            .read(&self.back, 0, &self.log, 0, 8, Flags::COMPLETION_ALWAYS, u64::MAX)
            .map_err(|e| e.to_string())?;
        self.wait(u64::MAX)?;
        let mut c = [0u8; 8];
        self.back.read_at(0, &mut c).unwrap();
        Ok(u64::from_le_bytes(c))
    }

    /// Record `i`: committed, read back and compared, sent and checked by
    /// host a. Returns the slowest wait.
    fn step(&mut self, i: u64) -> Result<Duration, String> {
        let err = |e: Error| e.to_string();
        let mut slowest = Duration::ZERO;
        let at = slot(i) as u64;
        self.src.write_at(0, &record(i)).map_err(err)?;
        let t = Instant::now();
        common::post_commit(&self.conn, &self.log, at, &self.src, REC, i + 1, FlushType::Visibility, i).map_err(err)?;
        self.wait(i)?;
        slowest = slowest.max(t.elapsed());
        let t = Instant::now();
        self.conn.read(&self.back, 0, &self.log, at, REC, Flags::COMPLETION_ALWAYS, i).map_err(err)?;
        self.wait(i)?;
        slowest = slowest.max(t.elapsed());
        let mut got = [0u8; REC];
        self.back.read_at(0, &mut got).unwrap();
        assert_eq!(got, record(i), "b: record {i} read back");
        let t = Instant::now();
        self.message(CHECK, i)?;
        Ok(slowest.max(t.elapsed()))
    }

    fn message(&mut self, kind: u64, value: u64) -> Result<(), String> {
        let mut m = [0u8; MSG];
        m[..8].copy_from_slice(&kind.to_le_bytes());
        m[8..16].copy_from_slice(&value.to_le_bytes());
        m[16..].copy_from_slice(&record(value));
        self.msg.write_at(0, &m).map_err(|e| e.to_string())?;
        self.conn.send(&self.msg, 0, MSG, Flags::COMPLETION_ALWAYS, u64::MAX - 1).map_err(|e| e.to_string())?;
        self.wait(u64::MAX - 1)
    }
}

fn client() {
    let link = Arc::new(rpma_harness::Link::named());
    let secs: u64 = std::env::var("RPMA_LOSSY_SECS").ok().and_then(|v| v.parse().ok()).unwrap_or(8);
    let port = rpma_harness::next_port();
    let p = peer();
    let mut c = Client::connect(&p, port);
    let budget = c.conn.retry_budget().unwrap();
    println!("b: {budget:?}; every wait bounded by {:?}", c.bound);
    let mut rng = Rng(0x5eed_1055 ^ u64::from(std::process::id()));
    let (mut i, mut acked, mut clean_rate) = (0u64, 0u64, 0.0f64);
    for (n, (name, args)) in PHASES.iter().enumerate() {
        c.message(PHASE, n as u64).expect("b: the phase message on a clean link");
        link.shape(args);
        let stop = Arc::new(AtomicBool::new(false));
        let flaps = name.starts_with("flaps").then(|| {
            let (stop, mut rng, link) = (stop.clone(), Rng(rng.next()), link.clone());
            thread::spawn(move || {
                let mut cuts = 0;
                while !stop.load(Ordering::Relaxed) {
                    thread::sleep(Duration::from_secs(5));
                    link.shape(&["loss", "100%"]);
                    thread::sleep(Duration::from_millis(1000 + rng.next() % 2000));
                    link.shape(&[]);
                    cuts += 1;
                }
                cuts
            })
        });
        let (t0, first) = (Instant::now(), acked);
        let (mut slowest, mut errors, mut reconnects) = (Duration::ZERO, 0, 0);
        while t0.elapsed() < Duration::from_secs(secs) {
            match c.step(i) {
                Ok(s) => {
                    slowest = slowest.max(s);
                    i += 1;
                    acked = acked.max(i);
                }
                Err(e) => {
                    errors += 1;
                    let t = Instant::now();
                    println!("b: record {i}: {e}; connecting again");
                    let _ = c.conn.disconnect();
                    drop(c);
                    // After a cut, the link is back within 3 s.
                    c = Client::connect(&p, port);
                    reconnects += 1;
                    i = c.committed().expect("b: the commit pointer, on a new connection");
                    assert!(i >= acked, "b: the commit pointer {i} fell below the {acked} acknowledged");
                    println!("b: connected again after {:.1?}, from record {i}", t.elapsed());
                }
            }
        }
        stop.store(true, Ordering::Relaxed);
        let cuts = flaps.map(|h| h.join().unwrap());
        link.shape(&[]);
        let rate = (acked - first) as f64 / t0.elapsed().as_secs_f64();
        if n == 0 {
            clean_rate = rate;
        }
        let cuts = cuts.map(|k| format!(", {k} cuts")).unwrap_or_default();
        println!(
            "b: phase {name}: {} records in {:.0?} ({rate:.1}/s, {:.2}x the clean link), slowest wait {slowest:.1?}, {errors} errors, {reconnects} reconnections{cuts}",
            acked - first,
            t0.elapsed(),
            rate / clean_rate.max(f64::MIN_POSITIVE)
        );
    }
    c.message(BYE, acked).expect("b: goodbye");
    let _ = c.conn.disconnect();
    let _ = c.conn.next_event_timeout(T);
    println!("b: {acked} records acknowledged");
}
