//! What holding costs: `Conn::read` / `Conn::write` (each keeps its local
//! region alive until completion) against the same operations posted by
//! `Conn::post` of an `unsafe` `ops::Unheld` (librpma's contract, no hold), side by
//! side in one run on a real RDMA
//! device (Soft-RoCE in the harness VM when the host has none).
//!
//! Two measures, interleaved over rounds:
//! * post: CPU time inside the post call alone, per operation (batches of
//!   unsignaled operations closed by one signaled one);
//! * latency: post + wait for the completion of one 8-byte operation.
//!
//! `cargo bench --bench data_path` (RPMA_BENCH_ITERS, RPMA_BENCH_ROUNDS).

use rpma::device::{get_ibv_context, ContextType};
use rpma::ops::{Read, Unheld, Write};
use rpma::{AlignedBuf, CommonData, Conn, ConnCfg, ConnEvent, ConnReq, Ep, Flags, MrLocal, MrRemote, Peer, Usage};
use rpma_harness::stats::median;
use std::time::{Duration, Instant};

const T: Duration = Duration::from_secs(30);
const BATCH: usize = 32;

fn env(name: &str, default: usize) -> usize {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

#[derive(Clone, Copy, PartialEq)]
enum Op {
    Read,
    Write,
}

fn post(conn: &Conn, local: &MrLocal<AlignedBuf>, remote: &MrRemote, op: Op, safe: bool, flags: Flags) {
    let r = match (op, safe) {
        (Op::Read, true) => conn.read(local, 0, remote, 0, 8, flags, 0),
        (Op::Write, true) => conn.write(remote, 64, local, 64, 8, flags, 0),
        // SAFETY: `local` outlives every operation: each batch is reaped
        // before the next and the region is dropped after the connection.
        #[allow(unsafe_code)]
        (Op::Read, false) => conn.post(unsafe { Unheld::new(Read::new(local, 0, remote, 0, 8).flags(flags)) }),
        #[allow(unsafe_code)]
        (Op::Write, false) => conn.post(unsafe { Unheld::new(Write::new(remote, 64, local, 64, 8).flags(flags)) }),
    };
    r.expect("post");
}

/// Nanoseconds per post call, over `iters` operations in batches.
fn post_cost(conn: &Conn, local: &MrLocal<AlignedBuf>, remote: &MrRemote, op: Op, safe: bool, iters: usize) -> f64 {
    let mut in_post = Duration::ZERO;
    for _ in 0..iters / BATCH {
        for i in 0..BATCH {
            let f = if i + 1 == BATCH { Flags::COMPLETION_ALWAYS } else { Flags::COMPLETION_ON_ERROR };
            let t0 = Instant::now();
            post(conn, local, remote, op, safe, f);
            in_post += t0.elapsed();
        }
        let wc = conn.cq().next_completion(T).expect("completion");
        assert!(wc.status.is_success(), "{:?}", wc.status);
    }
    in_post.as_nanos() as f64 / (iters / BATCH * BATCH) as f64
}

/// Microseconds per post + completed operation.
fn latency(conn: &Conn, local: &MrLocal<AlignedBuf>, remote: &MrRemote, op: Op, safe: bool, iters: usize) -> f64 {
    let t0 = Instant::now();
    for _ in 0..iters {
        post(conn, local, remote, op, safe, Flags::COMPLETION_ALWAYS);
        let wc = conn.cq().next_completion(T).expect("completion");
        assert!(wc.status.is_success(), "{:?}", wc.status);
    }
    t0.elapsed().as_secs_f64() * 1e6 / iters as f64
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return; // cargo test --benches lists; nothing to list
    }
    rpma_harness::ensure_device();
    let addr = rpma_harness::addr();
    let port = rpma_harness::next_port();
    let iters = env("RPMA_BENCH_ITERS", 4096).max(BATCH);
    let rounds = env("RPMA_BENCH_ROUNDS", 5).max(1);

    let sp = Peer::new(&get_ibv_context(&addr, ContextType::Local).unwrap()).unwrap();
    let smr = MrLocal::reg(&sp, AlignedBuf::new(4096).unwrap(), Usage::READ_SRC | Usage::WRITE_DST).unwrap();
    let pdata = CommonData::encode(0, &smr, None).to_vec();
    let ep = Ep::listen(&sp, &addr, port).unwrap();
    let server = std::thread::spawn(move || {
        let mut cfg = ConnCfg::new();
        cfg.set_sq_size(BATCH as u32);
        cfg.set_cq_size(BATCH as u32);
        let conn = ep.next_conn_req_timeout(Some(&cfg), T).unwrap().connect(&pdata).unwrap();
        assert_eq!(conn.next_event_timeout(T).unwrap(), ConnEvent::Established);
        assert_eq!(conn.next_event_timeout(Duration::from_secs(3600)).unwrap(), ConnEvent::Closed);
        conn.disconnect().unwrap();
        drop(smr);
    });
    let cp = Peer::new(&get_ibv_context(&addr, ContextType::Remote).unwrap()).unwrap();
    let mut cfg = ConnCfg::new();
    cfg.set_sq_size(BATCH as u32);
    cfg.set_cq_size(BATCH as u32);
    let conn = ConnReq::new(&cp, &addr, port, Some(&cfg)).unwrap().connect(&[]).unwrap();
    assert_eq!(conn.next_event_timeout(T).unwrap(), ConnEvent::Established);
    let remote = CommonData::decode(conn.private_data()).unwrap().mr;
    let local = MrLocal::reg(&cp, AlignedBuf::new(4096).unwrap(), Usage::READ_DST | Usage::WRITE_SRC).unwrap();

    println!(
        "\nrpma data path on {} ({}), {iters} ops x {rounds} rounds, medians",
        std::env::var("RPMA_TEST_DEVICE").unwrap_or_default(),
        std::env::var("RPMA_TEST_ENV").unwrap_or_default()
    );
    println!("| op | measure | safe (holds region) | unsafe Unheld | safe / unheld |");
    println!("|---|---|---|---|---|");
    for (op, name) in [(Op::Read, "read 8 B"), (Op::Write, "write 8 B")] {
        let (mut ps, mut pu, mut ls, mut lu) = (vec![], vec![], vec![], vec![]);
        post_cost(&conn, &local, &remote, op, true, BATCH * 4); // warm-up
        for _ in 0..rounds {
            ps.push(post_cost(&conn, &local, &remote, op, true, iters));
            pu.push(post_cost(&conn, &local, &remote, op, false, iters));
            ls.push(latency(&conn, &local, &remote, op, true, iters / 8));
            lu.push(latency(&conn, &local, &remote, op, false, iters / 8));
        }
        let (ps, pu, ls, lu) = (median(ps), median(pu), median(ls), median(lu));
        println!("| {name} | post, ns/op | {ps:.0} | {pu:.0} | {:.2} |", ps / pu);
        println!("| {name} | post + completion, us/op | {ls:.1} | {lu:.1} | {:.2} |", ls / lu);
    }
    conn.disconnect().unwrap();
    let _ = conn.next_event_timeout(T);
    server.join().unwrap();
}
