//! The link between two hosts is cut in the middle of a stream of
//! write + flush operations, on two Soft-RoCE guests (or two real hosts).
//!
//! Started on a host, the binary re-executes itself on both guests of
//! `harness/rdma-run --two-hosts`: host `a` is the server (a region that
//! outlives its connections), host `b` the client, which cuts its own link
//! with `tc qdisc ... netem loss 100%` (the interface `RPMA_LINK_DEV` names:
//! required, and restored on every exit, a panic included). It checks:
//!
//! * a short cut (3 s) is absorbed by the transport's retries: the operation
//!   posted during the cut completes successfully after the link returns;
//! * during a long cut (longer than the retry budget) the client learns of it
//!   within its own bound (a bounded wait, or an error completion), nothing
//!   blocks forever, the connection is torn down in bounded time, and once the
//!   link is back a new connection works;
//! * every record whose flush completion the client saw is intact on the
//!   server afterwards, and no record there is torn.

mod common;
use common::{peer, T};
use rpma::{AlignedBuf, CommonData, Conn, ConnEvent, ConnReq, Ep, Error, Flags, FlushType, MrLocal, MrRemote, Usage};
use rpma_harness::{addr, next_port};
use std::os::fd::AsFd;
use std::sync::OnceLock;
use std::thread;
use std::time::{Duration, Instant};

const NAME: &str = "link_cut";
const REC: usize = 64;
const RECORDS: usize = 1024;
/// How long the client waits for one completion before it declares the link
/// dead.
const BOUND: Duration = Duration::from_secs(5);

/// The server's port. Each host runs this binary and takes exactly one port,
/// this one, its first: server and client agree on it.
fn link_port() -> u16 {
    static PORT: OnceLock<u16> = OnceLock::new();
    *PORT.get_or_init(next_port)
}

fn main() {
    rpma_harness::on_two_hosts(NAME, server, client);
}

fn record(i: usize) -> [u8; REC] {
    let mut r = [0u8; REC];
    r[..8].copy_from_slice(&(i as u64 + 1).to_le_bytes());
    for (k, b) in r[8..].iter_mut().enumerate() {
        *b = (i * 31 + k) as u8;
    }
    r
}

/// A record slot is empty or exactly its record.
fn slot_ok(i: usize, got: &[u8]) -> bool {
    got.iter().all(|&b| b == 0) || got == record(i)
}

fn server() {
    let p = peer();
    let usage = Usage::WRITE_DST | Usage::READ_SRC | Usage::FLUSH_TYPE_VISIBILITY;
    let mr = MrLocal::reg(&p, AlignedBuf::new(REC * RECORDS).unwrap(), usage).unwrap();
    let pdata = CommonData::encode(0, &mr, None);
    let ep = Ep::listen(&p, &addr(), link_port()).unwrap();
    // One event loop over the endpoint and every connection: a connection the
    // client abandoned during a cut may linger while the next one is served.
    let mut conns: Vec<(Conn, bool, Instant, usize)> = Vec::new();
    let mut seq = 0;
    let mut done = false;
    while !done {
        let mut fds = vec![ep.as_fd()];
        fds.extend(conns.iter().map(|(c, ..)| c.as_fd()));
        let ready = rpma::utils::poll_fds(&fds, Some(Duration::from_secs(300))).unwrap();
        assert!(ready.iter().any(|&r| r), "no event in 300 s");
        for i in (1..ready.len()).rev() {
            if !ready[i] {
                continue;
            }
            let (conn, _, since, n) = &conns[i - 1];
            let ev = conn.next_event().unwrap();
            println!("a: connection {n}: {ev} after {:.1?}", since.elapsed());
            if ev != ConnEvent::Established {
                let (conn, bye, ..) = conns.remove(i - 1);
                let _ = conn.disconnect();
                let t = Instant::now();
                drop(conn);
                println!("a: teardown took {:.1?}", t.elapsed());
                done |= bye;
            }
        }
        if ready[0] {
            let req = ep.next_conn_req(None).unwrap();
            let bye = req.private_data().starts_with(b"bye");
            seq += 1;
            conns.push((req.connect(&pdata).unwrap(), bye, Instant::now(), seq));
        }
    }
    for (conn, _, since, n) in conns {
        let t = Instant::now();
        drop(conn);
        println!("a: connection {n}, silent for {:.1?}: teardown took {:.1?}", since.elapsed(), t.elapsed());
    }
    let mut torn = 0;
    let mut present = 0;
    for i in 0..RECORDS {
        let mut got = [0u8; REC];
        mr.read_at(i * REC, &mut got).unwrap();
        if !slot_ok(i, &got) {
            torn += 1;
            println!("a: record {i} torn: {got:?}");
        } else if got.iter().any(|&b| b != 0) {
            present += 1;
        }
    }
    println!("a: {present} records present, {torn} torn");
    assert_eq!(torn, 0);
}

fn link(link: &rpma_harness::Link, cut: bool) {
    link.shape(if cut { &["loss", "100%"] } else { &[] });
    println!("b: link {}", if cut { "cut" } else { "restored" });
}

struct Client {
    conn: Conn,
    remote: MrRemote,
    src: MrLocal<AlignedBuf>,
    acked: Vec<usize>,
}

impl Client {
    fn new(p: &rpma::Peer) -> Client {
        let conn = common::connect_across(p, link_port(), &[]);
        let remote = CommonData::decode(conn.private_data()).unwrap().mr;
        let src = MrLocal::reg(p, AlignedBuf::new(REC * RECORDS).unwrap(), Usage::WRITE_SRC | Usage::READ_DST).unwrap();
        Client { conn, remote, src, acked: Vec::new() }
    }

    /// Posts record `i` as write + flush (visibility); the flush reports.
    fn post(&mut self, i: usize) {
        self.src.write_at(i * REC, &record(i)).unwrap();
        let off = (i * REC) as u64;
        self.conn.write(&self.remote, off, &self.src, i * REC, REC, Flags::COMPLETION_ON_ERROR, i as u64).unwrap();
        self.conn
            .flush(&self.remote, off, REC as u64, FlushType::Visibility, Flags::COMPLETION_ALWAYS, i as u64)
            .unwrap();
    }

    /// Waits up to `bound` for the completion of record `i`.
    fn wait(&mut self, i: usize, bound: Duration) -> Result<(), String> {
        let t0 = Instant::now();
        loop {
            let left = bound.checked_sub(t0.elapsed()).unwrap_or_default();
            match self.conn.cq().next_completion(left) {
                Ok(wc) if wc.status.is_success() && wc.op_context == i as u64 => {
                    self.acked.push(i);
                    return Ok(());
                }
                Ok(wc) if wc.status.is_success() => continue,
                Ok(wc) => return Err(format!("completion of record {}: {}", wc.op_context, wc.status)),
                Err(Error::NoCompletion) => return Err(format!("no completion within {bound:?}")),
                Err(e) => return Err(e.to_string()),
            }
        }
    }

    fn stream(&mut self, range: std::ops::Range<usize>) {
        for i in range {
            self.post(i);
            self.wait(i, T).unwrap();
        }
    }

    /// Gives up on the connection: disconnect, a bounded wait for the event,
    /// and a teardown that must take less than a minute. Returns the
    /// acknowledged records.
    fn abandon(self, when: &str) -> Vec<usize> {
        let t1 = Instant::now();
        self.conn.disconnect().unwrap();
        let ev = self.conn.next_event_timeout(T);
        println!("b: disconnect{when} -> {ev:?} after {:.1?}", t1.elapsed());
        let Client { conn, acked, .. } = self;
        let t2 = Instant::now();
        drop(conn);
        let td = t2.elapsed();
        println!("b: teardown{when} took {td:.1?}");
        assert!(td < Duration::from_secs(60), "teardown took {td:?}");
        acked
    }

    /// Reads every acknowledged record back from the server and compares.
    fn verify(&mut self) {
        let dst = MrLocal::reg(self.conn.peer(), AlignedBuf::new(REC * RECORDS).unwrap(), Usage::READ_DST).unwrap();
        self.conn.read(&dst, 0, &self.remote, 0, REC * RECORDS, Flags::COMPLETION_ALWAYS, u64::MAX).unwrap();
        let wc = self.conn.cq().next_completion(T).unwrap();
        assert!(wc.status.is_success(), "read back: {}", wc.status);
        let mut all = vec![0u8; REC * RECORDS];
        dst.read_at(0, &mut all).unwrap();
        for &i in &self.acked {
            assert_eq!(&all[i * REC..(i + 1) * REC], &record(i), "acknowledged record {i} lost or changed");
        }
        for i in 0..RECORDS {
            assert!(slot_ok(i, &all[i * REC..(i + 1) * REC]), "record {i} torn");
        }
        drop(dst.dereg());
        println!("b: {} acknowledged records verified on the server", self.acked.len());
    }
}

fn client() {
    let shaper = rpma_harness::Link::named();
    let p = peer();
    let mut c = Client::new(&p);
    let budget = c.conn.retry_budget().unwrap();
    println!("b: {budget:?}, transport timeout {:?}", budget.transport_timeout());
    c.stream(0..50);

    // A short cut: the transport retransmits until the link returns.
    link(&shaper, true);
    c.post(50);
    // the fault itself: the link stays cut for 3 s (not a synchronization)
    thread::sleep(Duration::from_secs(3));
    link(&shaper, false);
    let t0 = Instant::now();
    let r = c.wait(50, Duration::from_secs(60));
    println!("b: record 50, posted during a 3 s cut: {r:?} {:.1?} after the link returned", t0.elapsed());
    r.expect("the operation posted during a short cut completes after the link returns");
    c.stream(51..100);
    c.verify();

    // A long cut: longer than the retry budget.
    let min_cut = std::env::var("RPMA_CUT_SECS").ok().and_then(|s| s.parse().ok()).unwrap_or(40);
    let cut =
        budget.transport_timeout().map_or(Duration::from_secs(min_cut), |t| (t * 2).max(Duration::from_secs(min_cut)));
    link(&shaper, true);
    let cut_at = Instant::now();
    c.post(100);
    let r = c.wait(100, BOUND);
    let detected = cut_at.elapsed();
    println!("b: during the long cut: {r:?} after {detected:.1?}");
    assert!(r.is_err(), "record 100 completed with the link cut");
    assert!(detected < BOUND + Duration::from_secs(2), "detection took {detected:?}");
    // Keep the link down beyond the retry budget. A provider that honours
    // the budget fails the operation (RETRY_EXC_ERR) in time; Soft-RoCE on
    // Linux 6.1 keeps retrying instead, and the operation completes once the
    // link is back.
    let mut failed = None;
    while cut_at.elapsed() < cut {
        match c.conn.cq().next_completion(Duration::from_secs(1)) {
            Ok(wc) => {
                println!("b: completion after {:.1?}: record {} {}", cut_at.elapsed(), wc.op_context, wc.status);
                assert!(!wc.status.is_success(), "record {} completed with the link cut", wc.op_context);
                failed.get_or_insert((wc.status, cut_at.elapsed()));
            }
            Err(Error::NoCompletion) => {}
            Err(e) => panic!("waiting during the cut: {e}"),
        }
    }
    link(&shaper, false);
    match (failed, budget.transport_timeout()) {
        (Some((st, at)), Some(t)) => {
            println!("b: the transport failed record 100 ({st}) after {at:.1?}, budget {t:.1?}");
            assert!(at <= t * 2 + Duration::from_secs(1), "the transport took {at:?}, budget {t:?}");
        }
        (Some((st, at)), None) => println!("b: the transport failed record 100 ({st}) after {at:.1?}"),
        (None, _) => {
            println!(
                "b: the transport reported nothing during a {cut:.0?} cut (budget {:?})",
                budget.transport_timeout()
            );
            let r = c.wait(100, Duration::from_secs(10));
            println!("b: record 100 after the link returned: {r:?}");
        }
    }
    // What the device reported through the cuts: its asynchronous events,
    // read without blocking.
    rpma::utils::set_nonblocking(p.context(), true).unwrap();
    let mut events = Vec::new();
    loop {
        match p.context().next_event() {
            Ok(e) => events.push(e),
            Err(Error::NoEvent) => break,
            Err(e) => panic!("reading device events: {e}"),
        }
    }
    println!("b: device events through both cuts: {events:?}");
    // Either way the application gives up on this connection: bounded teardown.
    let acked = c.abandon("");

    // A new connection over the restored link: the acknowledged records are
    // all there, and the stream goes on.
    let t3 = Instant::now();
    let mut c = Client::new(&p);
    println!("b: reconnected after {:.1?}", t3.elapsed());
    c.acked = acked;
    c.verify();
    c.stream(101..200);
    c.verify();

    // The client gives up during a cut: bounded detection, bounded teardown,
    // a reconnect attempt that fails in bounded time while the link is down,
    // and one that works once it is back.
    link(&shaper, true);
    let cut_at = Instant::now();
    c.post(200);
    let r = c.wait(200, BOUND);
    println!("b: giving up on the connection after {:.1?}: {r:?}", cut_at.elapsed());
    assert!(r.is_err(), "record 200 completed with the link cut");
    let acked = c.abandon(" during the cut");
    let t3 = Instant::now();
    let peer_addr = std::env::var("RPMA_PEER_ADDR").unwrap();
    match ConnReq::new(&p, &peer_addr, link_port(), None) {
        Err(e) => println!("b: a connection request during the cut: {e} after {:.1?}", t3.elapsed()),
        Ok(req) => {
            let conn = req.connect(&[]).unwrap();
            let ev = conn.next_event_timeout(T);
            println!("b: connecting during the cut -> {ev:?} after {:.1?}", t3.elapsed());
            assert!(!matches!(ev, Ok(ConnEvent::Established)), "connected with the link cut");
            let t = Instant::now();
            drop(conn);
            println!("b: dropping the failed attempt took {:.1?}", t.elapsed());
        }
    }
    assert!(t3.elapsed() < Duration::from_secs(60), "the failed attempt took {:?}", t3.elapsed());
    link(&shaper, false);
    let t4 = Instant::now();
    let mut c = Client::new(&p);
    println!("b: reconnected {:.1?} after the link returned", t4.elapsed());
    c.acked = acked;
    c.stream(201..300);
    c.verify();
    c.conn.disconnect().unwrap();
    let _ = c.conn.next_event_timeout(T);
    drop(c);
    let last = common::connect_across(&p, link_port(), b"bye");
    last.disconnect().unwrap();
    let _ = last.next_event_timeout(T);
    println!("b: done");
}
