//! Device tests of [`SharedCq`]: one completion queue serving many
//! connections, on a real RDMA device (rxe in the harness VM).

mod common;
use common::{close, peer, raise_fd_limit, server_region, Pair, T};
use rpma::error::{Arg, Detail, Misuse, RPMA_E_INVAL};
use rpma::{AlignedBuf, CompletionOp, Conn, ConnCfg, Flags, MrLocal, MrRemote, SharedCq, Usage};
use rpma_harness::{device_tests, next_port};
use std::collections::HashMap;
use std::time::Duration;

/// `n` connections from `cp` (on `scq` when given) to a server region on
/// `sp`; returns (client, server, the server region as the client sees it).
fn conns(cp: &rpma::Peer, sp: &rpma::Peer, n: usize, ccfg: &ConnCfg, desc: &[u8]) -> Vec<(Conn, Conn, Remote)> {
    (0..n)
        .map(|_| {
            let (c, s) =
                Pair::new().server_peer(sp).client_peer(cp).client_cfg(ccfg).server_pdata(desc.to_vec()).connect();
            let r = Remote(MrRemote::from_descriptor(c.private_data()).ok());
            (c, s, r)
        })
        .collect()
}

/// What one connection configured by `cfg` (its shared CQ set here)
/// reserves on a shared CQ: its queues as the provider granted them (rxe
/// rounds a queue of n up to a power of two less one).
fn reservation(cp: &rpma::Peer, sp: &rpma::Peer, cfg: impl Fn(&mut ConnCfg)) -> u64 {
    let probe = SharedCq::new(cp, 4096).unwrap();
    let mut c = shared_cfg(&probe);
    cfg(&mut c);
    let (cl, sv, _) = conns(cp, sp, 1, &c, &[]).pop().unwrap();
    let per = probe.reserved();
    close(cl, sv);
    per
}

/// The server's region, when it gave one.
struct Remote(Option<MrRemote>);

impl std::ops::Deref for Remote {
    type Target = MrRemote;
    fn deref(&self) -> &MrRemote {
        self.0.as_ref().expect("the server gave no region")
    }
}

fn shared_cfg(scq: &SharedCq) -> ConnCfg {
    let mut cfg = ConnCfg::new();
    cfg.set_shared_cq(Some(scq));
    cfg
}

device_tests!({
    fn completions_of_many_connections_arrive_on_one_cq_routed_by_qp_num() {
        let (sp, cp) = (peer(), peer());
        let (region, desc) = server_region(&sp, Usage::READ_SRC | Usage::WRITE_DST);
        let n = 8;
        let scq = SharedCq::new(&cp, 256).unwrap();
        let pairs = conns(&cp, &sp, n, &shared_cfg(&scq), &desc);
        assert_eq!(scq.connections(), n);
        let per = scq.reserved() / n as u64;
        assert_eq!(scq.reserved(), n as u64 * per);
        assert!(per >= 20, "at least sq_size + rq_size (10 + 10): {per}");
        let by_qp: HashMap<u32, usize> = pairs.iter().enumerate().map(|(i, (c, _, _))| (c.qp_num(), i)).collect();
        assert_eq!(by_qp.len(), n, "distinct QP numbers");
        // every connection writes its own 64 bytes and reads 64 others
        let src = MrLocal::reg(&cp, AlignedBuf::new(64 * n).unwrap(), Usage::WRITE_SRC).unwrap();
        let dst = MrLocal::reg(&cp, AlignedBuf::new(64 * n).unwrap(), Usage::READ_DST).unwrap();
        for i in 0..n {
            src.write_at(64 * i, &[i as u8 + 1; 64]).unwrap();
        }
        for (i, (c, _, r)) in pairs.iter().enumerate() {
            c.write(r, 64 * i as u64, &src, 64 * i, 64, Flags::COMPLETION_ALWAYS, 1000 + i as u64).unwrap();
            c.read(&dst, 64 * i, r, 4096 + 64 * i as u64, 64, Flags::COMPLETION_ALWAYS, 2000 + i as u64).unwrap();
        }
        let mut seen = vec![(false, false); n];
        for _ in 0..2 * n {
            let wc = scq.next_completion(T).unwrap();
            assert!(wc.status.is_success(), "{wc:?}");
            let i = by_qp[&wc.qp_num];
            match wc.op {
                CompletionOp::Write => {
                    assert_eq!(wc.op_context, 1000 + i as u64);
                    seen[i].0 = true
                }
                CompletionOp::Read => {
                    assert_eq!(wc.op_context, 2000 + i as u64);
                    seen[i].1 = true
                }
                other => panic!("unexpected {other:?}"),
            }
        }
        assert!(seen.iter().all(|&(w, r)| w && r), "{seen:?}");
        assert!(matches!(scq.get_completion(), Ok(None)));
        for (i, (c, _, _)) in pairs.iter().enumerate() {
            assert_eq!(c.pending_sends(), 0, "connection {i}");
            let mut got = [0u8; 64];
            dst.read_at(64 * i, &mut got).unwrap();
            let want: Vec<u8> = (0..64u32).map(|k| ((4096 + 64 * i as u32 + k) * 7 % 251) as u8).collect();
            assert_eq!(&got[..], &want[..], "read of connection {i}");
        }
        let mut landed = vec![0u8; 64 * n];
        region.read_at(0, &mut landed).unwrap();
        for i in 0..n {
            assert!(landed[64 * i..64 * (i + 1)].iter().all(|&b| b == i as u8 + 1), "write of connection {i}");
        }
        for (c, s, _) in pairs {
            close(c, s);
        }
        assert_eq!((scq.connections(), scq.reserved()), (0, 0));
    }

    fn batched_completions_every_context_once_in_order_per_connection() {
        // 8 connections post 16 signaled writes each as one chain (depth
        // 16), 10 rounds; completions are reaped up to 16 per poll, from
        // the shared CQ and from per-connection CQs, as `Completion`s and
        // in libibverbs' layout: every op context arrives once, in posting
        // order per connection.
        const N: usize = 8;
        const DEPTH: usize = 16;
        const ROUNDS: usize = 10;
        let (sp, cp) = (peer(), peer());
        let (_region, desc) = server_region(&sp, Usage::WRITE_DST);
        let src = MrLocal::reg(&cp, AlignedBuf::new(64).unwrap(), Usage::WRITE_SRC).unwrap();
        let scq = SharedCq::new(&cp, 512).unwrap();
        let mut shared = shared_cfg(&scq);
        shared.set_sq_size(DEPTH as u32 + 1);
        let mut own = ConnCfg::new();
        own.set_sq_size(DEPTH as u32 + 1);
        own.set_cq_size(DEPTH as u32 + 1);
        for (what, cfg) in [("a shared CQ", &shared), ("per-connection CQs", &own)] {
            let pairs = conns(&cp, &sp, N, cfg, &desc);
            let index: HashMap<u32, usize> = pairs.iter().enumerate().map(|(i, (c, _, _))| (c.qp_num(), i)).collect();
            let mut next = vec![0u64; N];
            let mut polls = 0usize;
            let mut largest = 0usize;
            for round in 0..ROUNDS {
                for (i, (c, _, r)) in pairs.iter().enumerate() {
                    let mut chain = c.chain();
                    for k in 0..DEPTH {
                        let ctx = ((i as u64) << 32) | (round * DEPTH + k) as u64;
                        let w = rpma::ops::Write::new(r, 64 * i as u64, &src, 0, 64).op_context(ctx);
                        chain.push(w.flags(Flags::COMPLETION_ALWAYS)).unwrap();
                    }
                    chain.post().unwrap();
                }
                let mut got = 0;
                let mut turn = 0;
                let mut wc = [rpma::Cq::EMPTY; DEPTH];
                while got < N * DEPTH {
                    turn += 1;
                    let cq = match cfg.shared_cq() {
                        Some(_) => scq.cq(),
                        None => pairs[turn % N].0.cq(),
                    };
                    // Even rounds reap as `Completion`s, odd rounds in
                    // libibverbs' layout (librpma's rpma_cq_get_wc).
                    let polled = if round % 2 == 0 {
                        cq.get_wc(&mut wc).map(|n| {
                            wc[..n].iter().map(|c| (c.status.is_success(), c.qp_num, c.op_context)).collect::<Vec<_>>()
                        })
                    } else {
                        let mut raw = [std::mem::MaybeUninit::uninit(); DEPTH];
                        cq.get_ibv_wc(&mut raw).map(|n| {
                            raw[..n]
                                .iter()
                                // SAFETY: get_ibv_wc wrote the first n entries.
                                .map(|w| unsafe { w.assume_init() })
                                .map(|w| (w.status == 0, w.qp_num, w.wr_id))
                                .collect()
                        })
                    };
                    let polled = match polled {
                        Ok(p) if !p.is_empty() => p,
                        Ok(_) => {
                            if cfg.shared_cq().is_some() {
                                match scq.wait_timeout(T) {
                                    Ok(()) | Err(rpma::Error::NoCompletion) => {}
                                    Err(e) => panic!("{what}: {e}"),
                                }
                            }
                            continue;
                        }
                        Err(e) => panic!("{what}: {e}"),
                    };
                    let n = polled.len();
                    polls += 1;
                    largest = largest.max(n);
                    for (ok, qp, ctx) in polled {
                        assert!(ok, "{what}: a failed completion, op context {ctx:#x}");
                        let i = index[&qp];
                        assert_eq!(ctx >> 32, i as u64, "{what}: context of another connection");
                        assert_eq!(ctx & 0xffff_ffff, next[i], "{what}: connection {i} out of order or twice");
                        next[i] += 1;
                    }
                    got += n;
                }
            }
            assert!(next.iter().all(|&k| k == (ROUNDS * DEPTH) as u64), "{what}: {next:?}");
            assert!(largest > 1, "{what}: no poll returned more than one completion");
            println!("  {what}: {} completions in {polls} polls (at most {largest} per poll)", N * DEPTH * ROUNDS);
            for (c, s, _) in pairs {
                close(c, s);
            }
        }
    }

    fn receives_of_many_connections_arrive_on_the_shared_cq() {
        let (sp, cp) = (peer(), peer());
        let scq = SharedCq::new(&cp, 128).unwrap();
        let pairs = conns(&cp, &sp, 3, &shared_cfg(&scq), &[]);
        let rbuf = MrLocal::reg(&cp, AlignedBuf::new(3 * 8).unwrap(), Usage::RECV).unwrap();
        let msg = MrLocal::reg(&sp, AlignedBuf::new(8).unwrap(), Usage::SEND).unwrap();
        for (i, (c, _, _)) in pairs.iter().enumerate() {
            c.recv(&rbuf, 8 * i, 8, 70 + i as u64).unwrap();
        }
        for (i, (_, s, _)) in pairs.iter().enumerate().rev() {
            msg.write_at(0, &[0x40 + i as u8; 8]).unwrap();
            s.send_with_imm(&msg, 0, 8, Flags::COMPLETION_ALWAYS, 9 + i as u32, 0).unwrap();
            s.cq().next_completion(T).unwrap();
        }
        for _ in 0..3 {
            let wc = scq.next_completion(T).unwrap();
            let i = pairs.iter().position(|(c, _, _)| c.qp_num() == wc.qp_num).expect("a connection's QP");
            assert_eq!(
                (wc.op, wc.op_context, wc.imm, wc.byte_len),
                (CompletionOp::Recv, 70 + i as u64, Some(9 + i as u32), 8)
            );
            let mut got = [0u8; 8];
            rbuf.read_at(8 * i, &mut got).unwrap();
            assert_eq!(got, [0x40 + i as u8; 8]);
        }
        for (c, s, _) in pairs {
            close(c, s);
        }
    }

    fn the_cq_is_never_overcommitted() {
        let (sp, cp) = (peer(), peer());
        let small = |c: &mut ConnCfg| {
            c.set_sq_size(5);
            c.set_rq_size(5);
        };
        let (d, sm) = (reservation(&cp, &sp, |_| {}), reservation(&cp, &sp, small));
        assert!(d >= 20 && sm >= 10 && d > sm, "default {d}, small {sm}");
        // Room for one default connection and a small one.
        let size = (d + sm) as u32;
        let scq = SharedCq::new(&cp, size).unwrap();
        let mut first = conns(&cp, &sp, 1, &shared_cfg(&scq), &[]);
        let mut cfg = shared_cfg(&scq);
        let e = rpma::ConnReq::new(&cp, &rpma_harness::addr(), next_port(), Some(&cfg)).unwrap_err();
        assert_eq!(e.code(), RPMA_E_INVAL, "{e}");
        assert!(
            matches!(e.detail(), Some(&Detail::CqFull { reserved, size: sz, need }) if reserved == d && sz == u64::from(size) && need == d),
            "{e}"
        );
        // smaller queues fit
        small(&mut cfg);
        let second = conns(&cp, &sp, 1, &cfg, &[]);
        assert_eq!(scq.reserved(), d + sm);
        let (c, s, _) = first.pop().unwrap();
        close(c, s);
        assert_eq!(scq.reserved(), sm);
        for (c, s, _) in second {
            close(c, s);
        }
    }

    /// Receives fill what the provider granted the receive queue, which
    /// can be more than `rq_size` (rxe: 15 for 8): the CQ reserves that,
    /// so a connection whose reservation fits the CQ exactly posts every
    /// receive its queue holds, and a signaled write's completion is still
    /// there after them (a reservation of rq_size overflowed the CQ and
    /// lost it). The same with an SRQ's receives.
    fn receives_up_to_the_granted_queue_never_overflow_the_cq() {
        let (sp, cp) = (peer(), peer());
        let (region, desc) = server_region(&sp, Usage::READ_SRC | Usage::WRITE_DST);
        for with_srq in [false, true] {
            let mut scfg = rpma::SrqCfg::new();
            scfg.set_rq_size(8);
            scfg.set_rcq_size(0);
            let srq = rpma::Srq::new(&cp, Some(&scfg)).unwrap();
            let setup = |c: &mut ConnCfg| {
                c.set_sq_size(2);
                c.set_rq_size(8);
                if with_srq {
                    c.set_srq(Some(&srq));
                }
            };
            let per = reservation(&cp, &sp, setup);
            let scq = SharedCq::new(&cp, per as u32).unwrap();
            let mut cfg = shared_cfg(&scq);
            setup(&mut cfg);
            let (c, s, r) = conns(&cp, &sp, 1, &cfg, &desc).pop().unwrap();
            assert_eq!(scq.reserved(), per, "the CQ is reserved exactly");
            let rbuf = MrLocal::reg(&cp, AlignedBuf::new(8).unwrap(), Usage::RECV).unwrap();
            // As many receives as the queue takes.
            let mut posted = 0u64;
            loop {
                let got = if with_srq { srq.recv(&rbuf, 0, 8, posted) } else { c.recv(&rbuf, 0, 8, posted) };
                match got {
                    Ok(()) => posted += 1,
                    Err(_) => break,
                }
                assert!(posted <= per, "more receives posted ({posted}) than the CQ reserved ({per})");
            }
            assert!(posted >= 8, "rq_size receives fit: {posted}");
            // The peer sends one per receive; each completes here.
            let msg = MrLocal::reg(&sp, AlignedBuf::new(8).unwrap(), Usage::SEND).unwrap();
            msg.write_at(0, &[7u8; 8]).unwrap();
            for _ in 0..posted {
                s.send(&msg, 0, 8, Flags::COMPLETION_ALWAYS, 0).unwrap();
                s.cq().next_completion(T).unwrap();
            }
            // And a signaled write on top: its completion is not lost.
            let src = MrLocal::reg(&cp, AlignedBuf::new(8).unwrap(), Usage::WRITE_SRC).unwrap();
            c.write(&r, 64, &src, 0, 8, Flags::COMPLETION_ALWAYS, 4242).unwrap();
            let mut seen = Vec::new();
            while let Ok(wc) = scq.next_completion(Duration::from_secs(3)) {
                assert!(wc.status.is_success(), "srq {with_srq}: {wc:?}");
                seen.push((wc.op, wc.op_context));
            }
            assert_eq!(seen.iter().filter(|w| w.0 == CompletionOp::Recv).count() as u64, posted, "srq {with_srq}");
            assert!(seen.contains(&(CompletionOp::Write, 4242)), "srq {with_srq}: the write's completion: {seen:?}");
            assert_eq!(src.in_flight(), 0, "the write's source is not held");
            close(c, s);
        }
        drop(region);
    }

    fn configurations_that_cannot_share_are_refused() {
        let (sp, cp) = (peer(), peer());
        let scq = SharedCq::new(&cp, 64).unwrap();
        let addr = rpma_harness::addr();
        let mut cfg = shared_cfg(&scq);
        cfg.set_rcq_size(10);
        let e = rpma::ConnReq::new(&cp, &addr, next_port(), Some(&cfg)).unwrap_err();
        assert_eq!(e.detail(), Some(&Detail::Misuse(Misuse::SharedCqSettings)), "{e}");
        let mut cfg = shared_cfg(&scq);
        cfg.set_compl_channel(true);
        let e = rpma::ConnReq::new(&cp, &addr, next_port(), Some(&cfg)).unwrap_err();
        assert_eq!((e.code(), e.detail()), (RPMA_E_INVAL, Some(&Detail::Misuse(Misuse::SharedCqSettings))), "{e}");
        let e = rpma::ConnReq::new(&sp, &addr, next_port(), Some(&shared_cfg(&scq))).unwrap_err();
        assert_eq!(e.detail(), Some(&Detail::Foreign { what: Arg::SharedCq }), "{e}");
        assert_eq!(SharedCq::new(&cp, 0).unwrap_err().code(), RPMA_E_INVAL);
        assert_eq!(SharedCq::new(&cp, u32::MAX).unwrap_err().code(), RPMA_E_INVAL);
        assert_eq!(scq.connections(), 0);
    }

    fn a_dropped_connection_leaves_the_others_working() {
        let (sp, cp) = (peer(), peer());
        let (_region, desc) = server_region(&sp, Usage::READ_SRC);
        let scq = SharedCq::new(&cp, 64).unwrap();
        let mut pairs = conns(&cp, &sp, 2, &shared_cfg(&scq), &desc);
        let dst = MrLocal::reg(&cp, AlignedBuf::new(16).unwrap(), Usage::READ_DST).unwrap();
        let (c0, s0, r0) = pairs.remove(0);
        let (c1, s1, r1) = pairs.remove(0);
        // both post; connection 0 goes before either completion is reaped.
        // Each CQ event (consumed and re-armed by wait_timeout) says the
        // completion posted before it is in the CQ: no sleep.
        c0.read(&dst, 0, &r0, 0, 8, Flags::COMPLETION_ALWAYS, 5).unwrap();
        scq.wait_timeout(T).expect("connection 0's completion arrives");
        c1.read(&dst, 8, &r1, 8, 8, Flags::COMPLETION_ALWAYS, 6).unwrap();
        scq.wait_timeout(T).expect("connection 1's completion arrives");
        let (q0, q1) = (c0.qp_num(), c1.qp_num());
        close(c0, s0);
        assert_eq!(scq.connections(), 1);
        // the drop retired connection 0's completion and set connection 1's
        // aside: a wait returns at once, and the completion is there
        scq.wait_timeout(std::time::Duration::from_millis(1)).expect("a set-aside completion");
        let wc = scq.get_completion().unwrap().expect("a set-aside completion");
        assert_eq!((wc.op, wc.op_context, wc.qp_num), (CompletionOp::Read, 6, q1));
        assert!(matches!(scq.get_completion(), Ok(None)), "nothing of QP {q0} left");
        assert_eq!(c1.pending_sends(), 0);
        // the region both used is free again (tracker entries released)
        let dst = dst.dereg().expect("nothing holds the region any more");
        drop(dst);
        // connection 1 keeps working
        let dst = MrLocal::reg(&cp, AlignedBuf::new(8).unwrap(), Usage::READ_DST).unwrap();
        c1.read(&dst, 0, &r1, 0, 8, Flags::COMPLETION_ALWAYS, 7).unwrap();
        let wc = scq.next_completion(T).unwrap();
        assert_eq!((wc.op_context, wc.qp_num, wc.status.is_success()), (7, q1, true));
        close(c1, s1);
    }

    /// A completion set aside for connection X by connection Y's drop must
    /// not outlive X's route: dropping X retires it too. Otherwise the CQ
    /// hands out a completion of a gone QP, and a later connection that gets
    /// X's QP number (forced here with `fault::reuse_qp_num`) has its own
    /// in-flight operation retired by it, releasing its region early.
    fn a_set_aside_completion_goes_with_its_connection() {
        let (sp, cp) = (peer(), peer());
        let (_region, desc) = server_region(&sp, Usage::READ_SRC);
        let scq = SharedCq::new(&cp, 64).unwrap();
        let mut pairs = conns(&cp, &sp, 2, &shared_cfg(&scq), &desc);
        let dst = MrLocal::reg(&cp, AlignedBuf::new(16).unwrap(), Usage::READ_DST).unwrap();
        let (x, xs, xr) = pairs.remove(0);
        let (y, ys, _) = pairs.remove(0);
        x.read(&dst, 0, &xr, 0, 8, Flags::COMPLETION_ALWAYS, 5).unwrap();
        // The CQ's event says a completion is in it (X's, the only post),
        // without reaping it.
        scq.wait_timeout(T).expect("X's completion arrives");
        let qx = x.qp_num();
        close(y, ys); // its drain sets X's completion aside
        close(x, xs);
        assert!(matches!(scq.get_completion(), Ok(None)), "nothing of the dropped QP {qx} is handed out");
        // A new connection Z whose QP reports X's number: the client's QP is
        // created by ConnReq::new, before the server sees the request.
        let port = next_port();
        let ep = rpma::Ep::listen(&sp, &rpma_harness::addr(), port).unwrap();
        let server = std::thread::spawn(move || {
            let s = ep.next_conn_req_timeout(None, T).unwrap().connect(&desc).unwrap();
            assert_eq!(s.next_event_timeout(T).unwrap(), rpma::ConnEvent::Established);
            s
        });
        rpma_sys::fault::reuse_qp_num(qx);
        let req = rpma::ConnReq::new(&cp, &rpma_harness::addr(), port, Some(&shared_cfg(&scq))).unwrap();
        let z = req.connect(&[]).unwrap();
        assert_eq!(z.next_event_timeout(T).unwrap(), rpma::ConnEvent::Established);
        let zs = server.join().unwrap();
        let zr = MrRemote::from_descriptor(z.private_data()).unwrap();
        assert_eq!(z.qp_num(), qx, "the fault makes Z report X's number");
        z.read(&dst, 8, &zr, 0, 8, Flags::COMPLETION_ALWAYS, 9).unwrap();
        let wc = scq.next_completion(T).unwrap();
        assert_eq!((wc.op_context, wc.status.is_success()), (9, true), "Z's own completion first");
        close(z, zs);
        rpma_sys::fault::reuse_qp_num(0);
        drop(dst.dereg().expect("nothing holds the region"));
    }

    /// An SRQ whose receives complete on the shared CQ is reserved there,
    /// once for all its connections (its rq_size), beside each connection's
    /// send queue: the CQ can never overflow (which would put every QP on it
    /// in the error state). Before, each connection reserved its own
    /// rq_size, which the SRQ's receives do not use, and the SRQ nothing.
    fn an_srq_on_the_shared_cq_is_reserved_once() {
        let (sp, cp) = (peer(), peer());
        let mut scfg = rpma::SrqCfg::new();
        scfg.set_rq_size(32);
        scfg.set_rcq_size(0);
        let srq = rpma::Srq::new(&cp, Some(&scfg)).unwrap();
        let setup = |cfg: &mut ConnCfg| {
            cfg.set_srq(Some(&srq));
            cfg.set_sq_size(4);
            cfg.set_rq_size(4);
        };
        // The send queue and the SRQ as granted: one connection alone
        // reserves both, its own receive queue nothing.
        let first_alone = reservation(&cp, &sp, setup);
        let sq = reservation(&cp, &sp, |c| {
            c.set_sq_size(4);
            c.set_rq_size(0);
        });
        let srq_entries = first_alone - sq;
        assert!(sq >= 4 && srq_entries >= 32, "sq {sq}, SRQ {srq_entries}");
        let size = first_alone + sq;
        let scq = SharedCq::new(&cp, size as u32).unwrap();
        let mut cfg = shared_cfg(&scq);
        setup(&mut cfg);
        let mut pairs = conns(&cp, &sp, 1, &cfg, &[]);
        assert_eq!(scq.reserved(), sq + srq_entries, "the first connection reserves its send queue and the SRQ");
        pairs.extend(conns(&cp, &sp, 1, &cfg, &[]));
        assert_eq!(scq.reserved(), sq + sq + srq_entries, "the second only its send queue");
        let e = rpma::ConnReq::new(&cp, &rpma_harness::addr(), next_port(), Some(&cfg)).unwrap_err();
        assert_eq!(e.code(), RPMA_E_INVAL, "{e}");
        assert!(
            matches!(e.detail(), Some(&Detail::CqFull { reserved, size: sz, .. }) if reserved == size && sz == size),
            "{e}"
        );
        let (c, s, _) = pairs.pop().unwrap();
        close(c, s);
        assert_eq!(scq.reserved(), sq + srq_entries, "the SRQ stays reserved while a connection uses it");
        let (c, s, _) = pairs.pop().unwrap();
        close(c, s);
        assert_eq!((scq.connections(), scq.reserved()), (0, 0));
    }

    fn many_connections_come_and_go_while_another_thread_reaps() {
        // connections are dropped while a poller thread reaps the CQ: every
        // operation of a live connection is reported once, to its own QP
        let (sp, cp) = (peer(), peer());
        let (_region, desc) = server_region(&sp, Usage::READ_SRC);
        let scq = SharedCq::new(&cp, 512).unwrap();
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let poller = {
            let (scq, stop, seen) = (scq.clone(), stop.clone(), seen.clone());
            std::thread::spawn(move || {
                let mut wc = [rpma::Cq::EMPTY; 16];
                while !stop.load(std::sync::atomic::Ordering::Relaxed) || matches!(scq.get_wc(&mut wc[..1]), Ok(1)) {
                    if let Ok(n) = scq.get_wc(&mut wc) {
                        seen.lock().unwrap().extend(wc[..n].iter().map(|w| (w.qp_num, w.op_context, w.op)));
                    }
                }
            })
        };
        let dst = MrLocal::reg(&cp, AlignedBuf::new(8 * 64).unwrap(), Usage::READ_DST).unwrap();
        let mut kept = Vec::new();
        for round in 0..6u64 {
            let mut batch = conns(&cp, &sp, 4, &shared_cfg(&scq), &desc);
            for (k, (c, _, r)) in batch.iter().enumerate() {
                for j in 0..3u64 {
                    let ctx = round << 16 | (k as u64) << 8 | j;
                    c.read(&dst, 8 * (k * 3 + j as usize), r, 0, 8, Flags::COMPLETION_ALWAYS, ctx).unwrap();
                }
            }
            // two of the four go at once, two stay to the end
            for _ in 0..2 {
                let (c, s, _) = batch.pop().unwrap();
                close(c, s);
            }
            kept.extend(batch.into_iter().map(|(c, s, _)| (c.qp_num(), round, c, s)));
        }
        let live: Vec<(u32, u64)> = kept.iter().map(|(q, r, _, _)| (*q, *r)).collect();
        // The kept connections close once the reaper has seen all their
        // operations (3 each), not after a fixed sleep.
        let t0 = std::time::Instant::now();
        let all_seen = || {
            let seen = seen.lock().unwrap();
            live.iter().all(|(q, round)| seen.iter().filter(|(sq, ctx, _)| sq == q && ctx >> 16 == *round).count() >= 3)
        };
        while !all_seen() {
            assert!(t0.elapsed() < T, "the reaper did not see every operation of the kept connections");
            std::thread::yield_now();
        }
        for (_, _, c, s) in kept {
            close(c, s);
        }
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        poller.join().unwrap();
        let seen = seen.lock().unwrap();
        for (k, (q, round)) in live.iter().enumerate() {
            let mut mine: Vec<u64> =
                seen.iter().filter(|(sq, ctx, _)| sq == q && ctx >> 16 == *round).map(|(_, ctx, _)| *ctx).collect();
            mine.sort();
            let idx = (k % 2) as u64; // the first two of each batch were kept
            let want: Vec<u64> = (0..3).map(|j| round << 16 | idx << 8 | j).collect();
            assert_eq!(mine, want, "QP {q} of round {round}");
        }
        assert!(seen.iter().all(|(_, _, op)| *op == CompletionOp::Read || matches!(op, CompletionOp::Other(_))));
        assert_eq!((scq.connections(), scq.reserved()), (0, 0));
        drop(dst.dereg().expect("nothing holds the region"));
    }

    fn a_thousand_connections_share_one_cq_each_byte_checked() {
        // 1024 connections (RPMA_SCQ_CONNS for another count) on one shared
        // CQ, their server sides on another: each writes its own 8 bytes and
        // reads them back; every completion arrives once, the write's before
        // the read's on each connection, and both sides hold every byte.
        let n: usize = std::env::var("RPMA_SCQ_CONNS").ok().and_then(|v| v.parse().ok()).unwrap_or(1024);
        let fds = raise_fd_limit(4 * n as u64);
        assert!(fds >= 3 * n as u64, "{n} connections need about {} file descriptors; the limit is {fds}", 2 * n);
        let (sp, cp) = (peer(), peer());
        let region = MrLocal::reg(&sp, AlignedBuf::new(8 * n).unwrap(), Usage::READ_SRC | Usage::WRITE_DST).unwrap();
        region.write_at(0, &vec![0u8; 8 * n]).unwrap();
        let mut desc = region.descriptor().to_vec();
        desc.extend_from_slice(&rpma::PeerCfg::new().descriptor());
        let mut ccfg = ConnCfg::new();
        ccfg.set_sq_size(4);
        ccfg.set_rq_size(1);
        // Each connection's queues as granted (at least 4 + 1).
        let per = reservation(&cp, &sp, |c| {
            c.set_sq_size(4);
            c.set_rq_size(1);
        }) as u32;
        let (cq_c, cq_s) = (SharedCq::new(&cp, per * n as u32).unwrap(), SharedCq::new(&sp, per * n as u32).unwrap());
        ccfg.set_shared_cq(Some(&cq_c));
        let mut scfg = ConnCfg::new();
        scfg.set_sq_size(4);
        scfg.set_rq_size(1);
        scfg.set_shared_cq(Some(&cq_s));
        let t0 = std::time::Instant::now();
        let pairs: Vec<(Conn, Conn)> = (0..n)
            .map(|_| {
                Pair::new()
                    .server_peer(&sp)
                    .client_peer(&cp)
                    .client_cfg(&ccfg)
                    .server_cfg(scfg.clone())
                    .server_pdata(desc.clone())
                    .connect()
            })
            .collect();
        let set_up = t0.elapsed();
        let open = std::fs::read_dir("/proc/self/fd").map(|d| d.count()).unwrap_or(0);
        assert_eq!((cq_c.connections(), cq_s.connections()), (n, n));
        let remotes: Vec<MrRemote> =
            pairs.iter().map(|(c, _)| MrRemote::from_descriptor(c.private_data()).unwrap()).collect();
        let src = MrLocal::reg(&cp, AlignedBuf::new(8 * n).unwrap(), Usage::WRITE_SRC).unwrap();
        let dst = MrLocal::reg(&cp, AlignedBuf::new(8 * n).unwrap(), Usage::READ_DST).unwrap();
        for i in 0..n {
            src.write_at(8 * i, &(i as u64 + 1).to_le_bytes()).unwrap();
        }
        for (i, ((c, _), r)) in pairs.iter().zip(&remotes).enumerate() {
            c.write(r, 8 * i as u64, &src, 8 * i, 8, Flags::COMPLETION_ALWAYS, 2 * i as u64).unwrap();
            c.read(&dst, 8 * i, r, 8 * i as u64, 8, Flags::COMPLETION_ALWAYS, 2 * i as u64 + 1).unwrap();
        }
        let mut next = vec![0u64; n]; // per connection: the context expected next
        let mut wc = [rpma::Cq::EMPTY; 64];
        let mut got = 0;
        while got < 2 * n {
            let k = match cq_c.get_wc(&mut wc) {
                Ok(k) if k > 0 => k,
                Ok(_) => {
                    cq_c.wait_timeout(T).expect("the shared CQ's completions stopped coming");
                    continue;
                }
                Err(e) => panic!("{e}"),
            };
            for w in &wc[..k] {
                assert!(w.status.is_success(), "{w:?}");
                let i = (w.op_context / 2) as usize;
                assert_eq!(w.qp_num, pairs[i].0.qp_num(), "context {} on the wrong QP", w.op_context);
                assert_eq!(w.op_context, 2 * i as u64 + next[i], "connection {i}: out of order or twice");
                next[i] += 1;
            }
            got += k;
        }
        assert!(next.iter().all(|&x| x == 2));
        let mut landed = vec![0u8; 8 * n];
        region.read_at(0, &mut landed).unwrap();
        let mut back = vec![0u8; 8 * n];
        dst.read_at(0, &mut back).unwrap();
        for i in 0..n {
            let want = (i as u64 + 1).to_le_bytes();
            assert_eq!(landed[8 * i..8 * i + 8], want, "server side of connection {i}");
            assert_eq!(back[8 * i..8 * i + 8], want, "read back by connection {i}");
        }
        let t1 = std::time::Instant::now();
        for (c, s) in pairs {
            close(c, s);
        }
        eprintln!(
            "{n} connections on one shared CQ: set up in {set_up:.1?} ({open} descriptors open, both sides), closed in {:.1?}",
            t1.elapsed()
        );
        assert_eq!((cq_c.connections(), cq_c.reserved(), cq_s.connections()), (0, 0, 0));
    }
});
