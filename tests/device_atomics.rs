//! Device tests of the remote atomics: compare-and-swap and fetch-and-add
//! from several connections on one counter, the descriptor extension that
//! grants them, and their refusals, locally and (through a forged
//! descriptor) by the device.

use rpma::error::Detail;
use rpma::error::RPMA_E_INVAL;
use rpma::ops::{CompareAndSwap, FetchAndAdd};
use rpma::{AlignedBuf, CompletionOp, Conn, Flags, MrLocal, MrRemote, Peer, Usage, WcStatus};
mod common;
use common::{close, peer, Pair, T};
use rpma_harness::device_tests;
use std::sync::{Arc, Barrier};
use std::thread;

const A: Flags = Flags::COMPLETION_ALWAYS;

/// A counter region of 4 KiB on `sp`, zeroed, granting atomics (and reads,
/// so a C librpma peer sees a usable region).
fn counter(sp: &Peer, usage: Usage) -> MrLocal<AlignedBuf> {
    let mr = MrLocal::reg(sp, AlignedBuf::new(4096).unwrap(), usage).unwrap();
    mr.write_at(0, &[0u8; 4096]).unwrap();
    mr
}

fn word(mr: &MrLocal<AlignedBuf>, off: usize) -> u64 {
    let mut b = [0u8; 8];
    mr.read_at(off, &mut b).unwrap();
    u64::from_ne_bytes(b)
}

/// Posts a fetch-and-add of `add` and returns the previous value.
fn faa(c: &Conn, res: &MrLocal<AlignedBuf>, remote: &MrRemote, off: u64, add: u64, ctx: u64) -> u64 {
    c.fetch_and_add(res, 0, remote, off, add, A, ctx).unwrap();
    let wc = c.cq().next_completion(T).unwrap();
    assert_eq!((wc.status, wc.op, wc.op_context), (WcStatus::SUCCESS, CompletionOp::FetchAdd, ctx), "{wc:?}");
    word(res, 0)
}

device_tests!({
    fn capability_and_descriptor_extension() {
        let sp = peer();
        let caps = sp.capabilities();
        println!("  {}: atomics={}", sp.device_name(), caps.atomics);
        assert!(caps.atomics, "rxe reports atomic_cap IBV_ATOMIC_HCA");
        let mr = counter(&sp, Usage::READ_SRC | Usage::REMOTE_ATOMIC);
        assert!(mr.access().contains(rpma::Access::REMOTE_ATOMIC | rpma::Access::LOCAL_WRITE), "{:?}", mr.access());
        let plain = mr.descriptor();
        let ext = mr.descriptor_ext();
        assert_eq!(ext.len(), rpma::MR_DESCRIPTOR_EXT_SIZE);
        assert_eq!(&ext[..21], &plain[..], "librpma's 21 bytes unchanged");
        assert_eq!(&ext[21..], &[rpma::MR_EXT_TAG, 0x02]);
        assert_eq!(plain[20], Usage::READ_SRC.bits() as u8);
        let r = MrRemote::from_descriptor(&ext).unwrap();
        assert_eq!(r.usage(), Usage::READ_SRC | Usage::REMOTE_ATOMIC);
        assert_eq!(MrRemote::from_descriptor(&plain).unwrap().usage(), Usage::READ_SRC);
        // A librpma-compatible region: the extended form is the plain one.
        let old = counter(&sp, Usage::READ_SRC | Usage::WRITE_DST);
        assert_eq!(old.descriptor_ext(), old.descriptor().to_vec());
        println!("  descriptor_ext: {:02x?}", ext);
    }

    fn fetch_and_add_from_n_connections_ends_at_n_times_m() {
        const N: usize = 4;
        const M: u64 = 250;
        let sp = peer();
        let target = counter(&sp, Usage::READ_SRC | Usage::REMOTE_ATOMIC);
        let desc = target.descriptor_ext();
        let pairs: Vec<(Conn, Conn)> =
            (0..N).map(|_| Pair::new().server_peer(&sp).client_pdata(&desc).connect()).collect();
        let start = Arc::new(Barrier::new(N));
        let seen: Vec<Vec<u64>> = thread::scope(|sc| {
            let hs: Vec<_> = pairs
                .iter()
                .enumerate()
                .map(|(i, (c, s))| {
                    let start = start.clone();
                    sc.spawn(move || {
                        // The descriptor came with the connection request.
                        let remote = MrRemote::from_descriptor(s.private_data()).unwrap();
                        assert!(remote.usage().contains(Usage::REMOTE_ATOMIC));
                        let res = MrLocal::reg(c.peer(), AlignedBuf::new(64).unwrap(), Usage::READ_DST).unwrap();
                        start.wait();
                        (0..M).map(|k| faa(c, &res, &remote, 8, 1, (i as u64) << 32 | k)).collect::<Vec<u64>>()
                    })
                })
                .collect();
            hs.into_iter().map(|h| h.join().unwrap()).collect()
        });
        let total = N as u64 * M;
        assert_eq!(word(&target, 8), total, "the counter");
        assert_eq!(word(&target, 0), 0, "the word before it is untouched");
        assert_eq!(word(&target, 16), 0, "the word after it is untouched");
        let mut all: Vec<u64> = seen.iter().flatten().copied().collect();
        all.sort_unstable();
        assert_eq!(all, (0..total).collect::<Vec<u64>>(), "every previous value exactly once");
        for s in &seen {
            assert!(s.windows(2).all(|w| w[0] < w[1]), "one connection's values increase");
        }
        // Byte order: the counter is a little-endian u64 in memory (host order on x86-64).
        let mut raw = [0u8; 8];
        target.read_at(8, &mut raw).unwrap();
        assert_eq!(raw, total.to_le_bytes());
        println!("  {N} connections x {M} fetch-and-adds: counter {total}, previous values 0..{total} each once");
        for (c, s) in pairs {
            close(c, s);
        }
    }

    fn compare_and_swap_contention_one_winner_per_round() {
        const K: usize = 4;
        const R: u64 = 50;
        let sp = peer();
        let target = counter(&sp, Usage::READ_SRC | Usage::REMOTE_ATOMIC);
        let desc = target.descriptor_ext();
        let pairs: Vec<(Conn, Conn)> =
            (0..K).map(|_| Pair::new().server_peer(&sp).server_pdata(desc.clone()).connect()).collect();
        let round = Arc::new(Barrier::new(K));
        let wins: Vec<Vec<bool>> = thread::scope(|sc| {
            let hs: Vec<_> = pairs
                .iter()
                .enumerate()
                .map(|(i, (c, _s))| {
                    let round = round.clone();
                    sc.spawn(move || {
                        // The descriptor came with the accept.
                        let remote = MrRemote::from_descriptor(c.private_data()).unwrap();
                        let res = MrLocal::reg(c.peer(), AlignedBuf::new(64).unwrap(), Usage::READ_DST).unwrap();
                        (0..R)
                            .map(|r| {
                                round.wait();
                                // Everyone tries to move the word from r to r + 1.
                                c.compare_and_swap(&res, 8, &remote, 0, r, r + 1, A, r).unwrap();
                                let wc = c.cq().next_completion(T).unwrap();
                                assert_eq!((wc.status, wc.op), (WcStatus::SUCCESS, CompletionOp::CompareSwap));
                                let prev = word(&res, 8);
                                // A loser saw the winner's r + 1; nobody sees anything else.
                                assert!(prev == r || prev == r + 1, "racer {i} round {r}: previous {prev}");
                                round.wait();
                                prev == r
                            })
                            .collect::<Vec<bool>>()
                    })
                })
                .collect();
            hs.into_iter().map(|h| h.join().unwrap()).collect()
        });
        let mut per_racer = [0usize; K];
        for r in 0..R as usize {
            let winners: Vec<usize> = wins.iter().enumerate().filter(|(_, w)| w[r]).map(|(i, _)| i).collect();
            assert_eq!(winners.len(), 1, "round {r}: winners {winners:?}");
            per_racer[winners[0]] += 1;
        }
        assert_eq!(word(&target, 0), R);
        println!("  {K} racers x {R} rounds: exactly one winner each round; wins per racer {per_racer:?}");
        for (c, s) in pairs {
            close(c, s);
        }
    }

    fn misaligned_refused_locally_and_by_the_device() {
        let sp = peer();
        let m = counter(&sp, Usage::READ_SRC | Usage::REMOTE_ATOMIC);
        m.write_at(0, &0x1111_2222_3333_4444u64.to_ne_bytes()).unwrap();
        m.write_at(8, &0x5555_6666_7777_8888u64.to_ne_bytes()).unwrap();
        let target = m;
        let (c, s) = Pair::new().server_peer(&sp).connect();
        let remote = MrRemote::from_descriptor(&target.descriptor_ext()).unwrap();
        let res = MrLocal::reg(c.peer(), AlignedBuf::new(64).unwrap(), Usage::READ_DST).unwrap();
        for off in [1u64, 4, 7, 12] {
            let e = c.fetch_and_add(&res, 0, &remote, off, 1, A, 0).unwrap_err();
            assert_eq!(e.code(), RPMA_E_INVAL);
            assert!(matches!(e.detail(), Some(Detail::Misaligned { value, align: 8, .. }) if value % 8 != 0), "{e}");
            let e = c.compare_and_swap(&res, 0, &remote, off, 0, 1, A, 0).unwrap_err();
            assert_eq!(e.code(), RPMA_E_INVAL);
        }
        println!("  locally: {}", c.fetch_and_add(&res, 0, &remote, 4, 1, A, 0).unwrap_err());
        // A region whose start is misaligned (a forged descriptor): the remote
        // address is what must be aligned, not the offset.
        let mut forged = target.descriptor_ext();
        let addr = u64::from_le_bytes(forged[..8].try_into().unwrap()) + 4;
        forged[..8].copy_from_slice(&addr.to_le_bytes());
        let shifted = MrRemote::from_descriptor(&forged).unwrap();
        let e = c.fetch_and_add(&res, 0, &shifted, 0, 1, A, 0).unwrap_err();
        assert_eq!(e.code(), RPMA_E_INVAL, "{e}");
        // The connection still works: an aligned one succeeds, and its
        // completion is the next one (nothing of the refused ones was
        // posted: `faa` checks the context).
        assert_eq!(faa(&c, &res, &remote, 8, 1, 79), 0x5555_6666_7777_8888);
        let m = target;
        m.write_at(8, &0x5555_6666_7777_8888u64.to_ne_bytes()).unwrap();
        let target = m;
        assert_eq!(word(&target, 0), 0x1111_2222_3333_4444, "memory unchanged");
        assert_eq!(word(&target, 8), 0x5555_6666_7777_8888, "memory unchanged");
        drop((c, s));
    }

    fn region_without_the_grant_refused_locally_and_by_the_device() {
        let sp = peer();
        let target = counter(&sp, Usage::READ_SRC | Usage::WRITE_DST);
        target.write_at(0, &41u64.to_ne_bytes()).unwrap();
        assert!(!target.access().contains(rpma::Access::REMOTE_ATOMIC));
        let (c, s) = Pair::new().server_peer(&sp).connect();
        let res = MrLocal::reg(c.peer(), AlignedBuf::new(64).unwrap(), Usage::READ_DST).unwrap();
        let remote = MrRemote::from_descriptor(&target.descriptor_ext()).unwrap();
        let e = c.fetch_and_add(&res, 0, &remote, 0, 1, A, 0).unwrap_err();
        assert_eq!(e.code(), RPMA_E_INVAL);
        assert!(
            matches!(e.detail(), Some(Detail::UsageMissing { missing, .. }) if *missing == Usage::REMOTE_ATOMIC),
            "{e}"
        );
        println!("  locally: {e}");
        let e = c.compare_and_swap(&res, 0, &remote, 0, 41, 42, A, 0).unwrap_err();
        assert_eq!(e.code(), RPMA_E_INVAL);
        // An atomic region described by the plain 21 bytes: no grant either.
        let atomic = counter(&sp, Usage::READ_SRC | Usage::REMOTE_ATOMIC);
        let r = MrRemote::from_descriptor(&atomic.descriptor()).unwrap();
        assert_eq!(c.fetch_and_add(&res, 0, &r, 0, 1, A, 0).unwrap_err().code(), RPMA_E_INVAL);
        // Forced: a forged extension claims the grant; the device refuses.
        let mut forged = target.descriptor().to_vec();
        forged.extend_from_slice(&[rpma::MR_EXT_TAG, 0x02]);
        let lie = MrRemote::from_descriptor(&forged).unwrap();
        for (i, cas) in [false, true].into_iter().enumerate() {
            let (c, s) = Pair::new().server_peer(&sp).connect();
            let res = MrLocal::reg(c.peer(), AlignedBuf::new(64).unwrap(), Usage::READ_DST).unwrap();
            if cas {
                c.compare_and_swap(&res, 0, &lie, 0, 41, 42, A, 5).unwrap();
            } else {
                c.fetch_and_add(&res, 0, &lie, 0, 1, A, 5).unwrap();
            }
            let wc = c.cq().next_completion(T).unwrap();
            println!("  forced {}: {:?}", ["fetch-and-add", "compare-and-swap"][i], wc.status);
            assert_eq!(wc.status, WcStatus::REM_ACCESS_ERR, "{wc:?}");
            assert_eq!(word(&target, 0), 41, "memory unchanged");
            drop((c, s));
        }
        // Local side: a result region without local write (READ_DST) is refused.
        let ro = MrLocal::reg(c.peer(), AlignedBuf::new(64).unwrap(), Usage::READ_SRC).unwrap();
        let good = MrRemote::from_descriptor(&atomic.descriptor_ext()).unwrap();
        let e = c.fetch_and_add(&ro, 0, &good, 0, 1, A, 0).unwrap_err();
        assert_eq!(e.code(), RPMA_E_INVAL);
        assert!(matches!(e.detail(), Some(Detail::UsageMissing { missing, .. }) if *missing == Usage::READ_DST), "{e}");
        let e = c.fetch_and_add(&res, 60, &good, 0, 1, A, 0).unwrap_err();
        assert!(matches!(e.detail(), Some(Detail::OutOfRange { offset: 60, len: 8, size: 64, .. })), "{e}");
        let e = c.fetch_and_add(&res, 0, &good, 4092, 1, A, 0).unwrap_err();
        assert!(matches!(e.detail(), Some(Detail::OutOfRange { offset: 4092, len: 8, .. })), "{e}");
        drop((c, s));
    }

    fn result_region_is_held_until_the_completion() {
        let sp = peer();
        let target = counter(&sp, Usage::READ_SRC | Usage::REMOTE_ATOMIC);
        let (c, s) = Pair::new().server_peer(&sp).connect();
        let remote = MrRemote::from_descriptor(&target.descriptor_ext()).unwrap();
        let res = MrLocal::reg(c.peer(), AlignedBuf::new(64).unwrap(), Usage::READ_DST).unwrap();
        c.fetch_and_add(&res, 0, &remote, 0, 5, A, 1).unwrap();
        assert_eq!(res.in_flight(), 1);
        let res = res.dereg().unwrap_err().mr; // held: Again
        let wc = c.cq().next_completion(T).unwrap();
        assert_eq!(wc.status, WcStatus::SUCCESS);
        assert_eq!(res.in_flight(), 0);
        assert_eq!(word(&res, 0), 0);
        // A chain carries atomics too.
        let mut ch = c.chain();
        ch.push(FetchAndAdd::new(&res, 0, &remote, 0, 1).flags(Flags::COMPLETION_ON_ERROR).op_context(2))
            .unwrap()
            .push(CompareAndSwap::new(&res, 8, &remote, 0, 6, 100).flags(A).op_context(3))
            .unwrap();
        ch.post().unwrap();
        let wc = c.cq().next_completion(T).unwrap();
        assert_eq!((wc.status, wc.op, wc.op_context), (WcStatus::SUCCESS, CompletionOp::CompareSwap, 3));
        assert_eq!((word(&res, 0), word(&res, 8)), (5, 6));
        assert_eq!(word(&target, 0), 100);
        res.dereg().unwrap();
        drop((c, s));
    }
});
