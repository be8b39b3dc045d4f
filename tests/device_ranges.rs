//! Device tests of ranges in use: staging into one registered region beside
//! operations in flight on its other ranges, and the conflicting accesses
//! refused, on a real RDMA device (rxe0 in the harness VM when the host has
//! none). Every byte is checked where it lands.

use rpma::error::{Detail, Misuse, RangeUse, RPMA_E_AGAIN, RPMA_E_INVAL};
use rpma::{AlignedBuf, ConnCfg, Flags, MrLocal, MrRemote, PeerCfg, Usage};
mod common;
use common::{close, peer, server_region, Pair, T};
use rpma_harness::device_tests;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;

/// The use a refusal names (`None`: not a busy range).
fn busy<R>(r: rpma::Result<R>) -> Option<RangeUse> {
    match r {
        Err(e) => match e.detail() {
            Some(Detail::RangeBusy { by, .. }) => {
                assert_eq!(e.code(), RPMA_E_AGAIN, "{e}");
                Some(*by)
            }
            _ => panic!("not a busy range: {e}"),
        },
        Ok(_) => None,
    }
}

fn pattern(i: usize) -> u8 {
    (i * 7 % 251) as u8
}

/// A record's bytes: its number, then a fill that depends on it.
fn record(i: usize, len: usize) -> Vec<u8> {
    let mut r = vec![(i % 256) as u8 ^ 0x5a; len];
    r[..8].copy_from_slice(&(i as u64).to_le_bytes());
    r
}

device_tests!({
    fn staging_beside_an_in_flight_write_and_read() {
        let sp = peer();
        let (smr, pdata) = server_region(&sp, Usage::WRITE_DST | Usage::READ_SRC);
        let (c, s) = Pair::new().server_peer(&sp).server_pdata(pdata).connect();
        let remote = MrRemote::from_descriptor(c.private_data()).unwrap();
        let ring = MrLocal::reg(c.peer(), AlignedBuf::new(8192).unwrap(), Usage::WRITE_SRC | Usage::READ_DST).unwrap();
        assert_eq!(ring.granule(), 8192 / 64);

        // A 4 KiB write from ring[0..4096] in flight: stage beside it.
        ring.write_at(0, &[0xa1; 4096]).unwrap();
        c.write(&remote, 0, &ring, 0, 4096, Flags::COMPLETION_ALWAYS, 1).unwrap();
        ring.write_at(4096, &[0xb2; 64]).unwrap();
        // Its range: the CPU may read it, not write it.
        assert_eq!(busy(ring.write_at(100, &[0; 8])), Some(RangeUse::DeviceReads));
        assert_eq!(busy(ring.update_at(4032, 128, |_| ())), Some(RangeUse::DeviceReads));
        let mut got = [0u8; 8];
        ring.read_at(100, &mut got).unwrap();
        assert_eq!(got, [0xa1; 8]);
        assert!(ring.view_at(0, 4096, |b| b.iter().all(|&x| x == 0xa1)).unwrap());

        // A 2 KiB read into ring[6144..8192] in flight: stage beside both.
        c.read(&ring, 6144, &remote, 4096, 2048, Flags::COMPLETION_ALWAYS, 2).unwrap();
        ring.write_at(4160, &[0xc3; 64]).unwrap();
        // Its range: the CPU may do neither (a copy may run: its bytes are
        // those of the moment).
        ring.read_at(6144, &mut got).unwrap();
        assert_eq!(busy(ring.write_at(8000, &[0; 8])), Some(RangeUse::DeviceWrites));
        assert_eq!(busy(ring.view_at(7000, 1, |_| ())), Some(RangeUse::DeviceWrites));

        // While the CPU fills a range in place, a post naming it is refused
        // (and posts of other ranges go on).
        ring.update_at(4224, 64, |rec| {
            rec.fill(0xd4);
            let e = c.write(&remote, 4096, &ring, 4096, 192, Flags::COMPLETION_ALWAYS, 9);
            assert_eq!(busy(e), Some(RangeUse::CpuWrites));
            assert_eq!(busy(ring.read_at(4224, &mut [0u8; 4])), Some(RangeUse::CpuWrites));
        })
        .unwrap();

        let mut ctxs: Vec<u64> = (0..2).map(|_| c.cq().next_completion(T).unwrap()).map(|wc| wc.op_context).collect();
        ctxs.sort();
        assert_eq!(ctxs, [1, 2]);
        // Everything is free again: the staged records go out.
        c.write(&remote, 4096, &ring, 4096, 192, Flags::COMPLETION_ALWAYS, 3).unwrap();
        assert!(c.cq().next_completion(T).unwrap().status.is_success());
        let mut at_server = vec![0u8; 4096 + 192];
        smr.read_at(0, &mut at_server).unwrap();
        let want: Vec<u8> = [[0xa1; 4096].as_slice(), &[0xb2; 64], &[0xc3; 64], &[0xd4; 64]].concat();
        assert_eq!(at_server, want, "every byte of the write and of the three staged records");
        let mut read = vec![0u8; 2048];
        ring.read_at(6144, &mut read).unwrap();
        assert!(read.iter().enumerate().all(|(i, &b)| b == pattern(4096 + i)), "the read landed whole");
        assert_eq!(ring.in_flight(), 0);
        println!("  staged 3 records beside a write and a read in flight; conflicting accesses refused by kind");
        close(c, s);
    }

    fn concurrent_stagers_on_disjoint_ranges_while_posting() {
        const SLOT: usize = 256;
        const SLOTS: usize = 16;
        const RECORDS: usize = 512;
        let sp = peer();
        let smr = MrLocal::reg(&sp, AlignedBuf::new(RECORDS * SLOT).unwrap(), Usage::WRITE_DST).unwrap();
        let pdata = [smr.descriptor().as_slice(), &PeerCfg::new().descriptor()].concat();
        let mut cfg = ConnCfg::new();
        cfg.set_sq_size(SLOTS as u32).set_cq_size(SLOTS as u32);
        let (c, s) = Pair::new().server_peer(&sp).server_pdata(pdata).client_cfg(&cfg).connect();
        let remote = MrRemote::from_descriptor(c.private_data()).unwrap();
        let ring = MrLocal::reg(c.peer(), AlignedBuf::new(SLOTS * SLOT).unwrap(), Usage::WRITE_SRC).unwrap();
        let (tx, rx) = mpsc::channel::<usize>();
        // The record last posted from each slot (the application's own
        // book: a slot staged but not posted yet is no operation's).
        let posted: Vec<AtomicUsize> = (0..SLOTS).map(|_| AtomicUsize::new(usize::MAX)).collect();
        let refusals = std::thread::scope(|scope| {
            // Two stagers, each filling its own records in place, in the
            // slot of the record 16 before it once that one is posted
            // (refused while its write is in flight).
            let stagers: Vec<_> = (0..2)
                .map(|t| {
                    let (ring, tx, posted) = (&ring, tx.clone(), &posted);
                    scope.spawn(move || {
                        let mut refused = 0u64;
                        for i in (t..RECORDS).step_by(2) {
                            let slot = (i % SLOTS) * SLOT;
                            while i >= SLOTS && posted[i % SLOTS].load(Ordering::Acquire) != i - SLOTS {
                                std::thread::yield_now();
                            }
                            loop {
                                match ring.update_at(slot, SLOT, |rec| rec.copy_from_slice(&record(i, SLOT))) {
                                    Ok(()) => break,
                                    Err(e) => {
                                        assert!(matches!(e.detail(), Some(Detail::RangeBusy { .. })), "{e}");
                                        refused += 1;
                                        std::thread::yield_now();
                                    }
                                }
                            }
                            tx.send(i).unwrap();
                        }
                        refused
                    })
                })
                .collect();
            drop(tx);
            // This thread posts every staged record, and reaps when the
            // queue is full or no record is staged (a stager waits for a
            // slot whose write is in flight).
            let mut in_flight = 0;
            let reap = |n: &mut usize| {
                assert!(c.cq().next_completion(T).unwrap().status.is_success());
                *n -= 1;
            };
            loop {
                match rx.recv_timeout(std::time::Duration::from_millis(1)) {
                    Ok(i) => {
                        if in_flight == SLOTS {
                            reap(&mut in_flight);
                        }
                        let slot = (i % SLOTS) * SLOT;
                        let (at, ctx) = ((i * SLOT) as u64, i as u64);
                        c.write(&remote, at, &ring, slot, SLOT, Flags::COMPLETION_ALWAYS, ctx).unwrap();
                        posted[i % SLOTS].store(i, Ordering::Release);
                        in_flight += 1;
                    }
                    Err(mpsc::RecvTimeoutError::Timeout) if in_flight > 0 => reap(&mut in_flight),
                    Err(mpsc::RecvTimeoutError::Timeout) => {}
                    Err(mpsc::RecvTimeoutError::Disconnected) => break,
                }
            }
            for _ in 0..in_flight {
                assert!(c.cq().next_completion(T).unwrap().status.is_success());
            }
            stagers.into_iter().map(|h| h.join().unwrap()).sum::<u64>()
        });
        let mut at_server = vec![0u8; RECORDS * SLOT];
        smr.read_at(0, &mut at_server).unwrap();
        let wrong: Vec<(usize, u64)> = at_server
            .chunks(SLOT)
            .enumerate()
            .filter(|(i, got)| *got != record(*i, SLOT))
            .map(|(i, got)| (i, u64::from_le_bytes(got[..8].try_into().unwrap())))
            .collect();
        assert!(wrong.is_empty(), "records with another's bytes (at, whose): {wrong:?}");
        assert!(refusals > 0, "no staging met a write in flight: the test did not test it");
        println!(
            "  {RECORDS} records of {SLOT} bytes staged in place by 2 threads into one {}-slot region, \
             posted at depth {SLOTS} by a third, every byte checked ({refusals} stagings refused while a slot's write was in flight)",
            SLOTS
        );
        close(c, s);
    }

    fn in_place_access_only_where_no_one_else_writes() {
        let p = peer();
        // A region a remote peer may write: copies only.
        let open = MrLocal::reg(&p, AlignedBuf::new(4096).unwrap(), Usage::WRITE_DST).unwrap();
        let e = open.update_at(0, 8, |_| ()).unwrap_err();
        assert_eq!((e.code(), e.detail()), (RPMA_E_INVAL, Some(&Detail::Misuse(Misuse::RemotelyWritable))), "{e}");
        let e = open.view_at(0, 8, |_| ()).unwrap_err();
        assert_eq!(e.detail(), Some(&Detail::Misuse(Misuse::RemotelyWritable)), "{e}");
        open.write_at(0, b"copies").unwrap();
        // A file mapping another process may write: copies only.
        let file = rpma::MappedFile::sealed("ranges", 4096).unwrap();
        let mapped = MrLocal::reg(&p, file, Usage::WRITE_SRC).unwrap();
        let e = mapped.update_at(0, 8, |_| ()).unwrap_err();
        assert_eq!(e.detail(), Some(&Detail::Misuse(Misuse::SharedMemory)), "{e}");
        // Private memory without remote write: in place, bounds checked,
        // and a panic in the closure gives the range back.
        let own = MrLocal::reg(&p, AlignedBuf::new(4096).unwrap(), Usage::WRITE_SRC | Usage::RECV).unwrap();
        assert_eq!(own.update_at(8, 4, |b| b.copy_from_slice(b"abcd")).unwrap(), ());
        assert_eq!(own.view_at(8, 4, |b| b.to_vec()).unwrap(), b"abcd");
        let e = own.update_at(4090, 8, |_| ()).unwrap_err();
        assert!(matches!(e.detail(), Some(Detail::OutOfRange { offset: 4090, len: 8, size: 4096, .. })), "{e}");
        println!("  (a panic in the closure, on purpose:)");
        let unwound = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| own.update_at(0, 64, |_| panic!("x"))));
        assert!(unwound.is_err());
        own.write_at(0, b"free again").unwrap();
        println!("  references only into private memory no remote peer writes; a panic releases the range");
    }

    fn a_receive_and_a_bound_window_hold_their_ranges() {
        let (c, s) = Pair::new().connect();
        let buf = MrLocal::reg(s.peer(), AlignedBuf::new(4096).unwrap(), Usage::RECV | Usage::MW_BIND).unwrap();
        s.recv(&buf, 1024, 64, 7).unwrap();
        assert_eq!(busy(buf.view_at(1024, 8, |_| ())), Some(RangeUse::DeviceWrites));
        buf.write_at(0, b"outside the receive").unwrap();
        // A window with remote write access: its range is written by the
        // device while bound.
        let mut mw = rpma::Mw::alloc(s.peer(), rpma::MwType::Type2).unwrap();
        let access = rpma::MwAccess::REMOTE_WRITE | rpma::MwAccess::REMOTE_READ;
        s.bind_mw(&mut mw, &buf, 2048, 512, access, Flags::COMPLETION_ALWAYS, 8).unwrap();
        assert_eq!(s.cq().next_completion(T).unwrap().op_context, 8);
        assert_eq!(busy(buf.update_at(2048 + 256, 8, |_| ())), Some(RangeUse::DeviceWrites));
        buf.update_at(0, 64, |b| b.fill(1)).unwrap();
        s.invalidate_mw(&mut mw, Flags::COMPLETION_ALWAYS, 9).unwrap();
        assert_eq!(s.cq().next_completion(T).unwrap().op_context, 9);
        buf.update_at(2048, 512, |b| b.fill(2)).unwrap();
        // The message arrives; its range is free once reaped.
        let msg = MrLocal::reg(c.peer(), AlignedBuf::new(64).unwrap(), Usage::SEND).unwrap();
        msg.write_at(0, &[0x77; 64]).unwrap();
        c.send(&msg, 0, 64, Flags::COMPLETION_ALWAYS, 1).unwrap();
        assert!(c.cq().next_completion(T).unwrap().status.is_success());
        let wc = s.cq().next_completion(T).unwrap();
        assert_eq!((wc.op_context, wc.byte_len), (7, 64));
        assert!(buf.view_at(1024, 64, |b| b.iter().all(|&x| x == 0x77)).unwrap());
        println!("  a posted receive and a bound window held their ranges, and only those");
        close(c, s);
    }
});
