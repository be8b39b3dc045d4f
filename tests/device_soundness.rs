//! Proofs of SOUNDNESS.md's rules on a real device: safe code cannot make
//! the device touch freed memory when a teardown verb fails, completions
//! keep their contexts under concurrent polling, and hostile sizes,
//! timeouts and descriptors give errors, never an abort or a panic.
//!
//! Teardown failures are injected with `rpma_sys::fault` (the verbs call is
//! skipped, so the object really stays alive, as after a real failure).

mod common;
use common::{close, peer, server_region, Pair, T};
use rpma::error::{Detail, RPMA_E_AGAIN, RPMA_E_INVAL, RPMA_E_NO_COMPLETION};
use rpma::mr::rereg::ReregError;
use rpma::ops::{Read, WriteInline, WriteSg};
use rpma::{
    AlignedBuf, CompletionOp, Conn, ConnCfg, ConnEvent, ConnReq, DeregError, Flags, FlushType, MrLocal, MrRemote, Mw,
    MwAccess, MwType, RegMemory, Srq, SrqCfg, Usage, WcStatus,
};
use rpma_harness::{addr, device_tests, next_port};
use rpma_sys::fault::{fail_next, Teardown};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// A page-aligned buffer that records when it is freed.
#[derive(Debug)]
struct Watched {
    buf: AlignedBuf,
    freed: Arc<AtomicBool>,
}

impl Watched {
    fn new(len: usize) -> (Watched, Arc<AtomicBool>) {
        let freed = Arc::new(AtomicBool::new(false));
        (Watched { buf: AlignedBuf::new(len).unwrap(), freed: freed.clone() }, freed)
    }
}

// SAFETY: delegates to AlignedBuf, whose allocation never moves.
#[allow(unsafe_code)]
unsafe impl RegMemory for Watched {
    fn as_mut_ptr_len(&mut self) -> (*mut u8, usize) {
        self.buf.as_mut_ptr_len()
    }
}

impl Drop for Watched {
    fn drop(&mut self) {
        self.freed.store(true, Ordering::SeqCst);
    }
}

/// Allocations made after a leak, to show a late device write changes none.
fn live_allocations() -> Vec<Vec<u8>> {
    (0..256).map(|_| vec![0xa5u8; 4096]).collect()
}

fn untouched(live: &[Vec<u8>]) -> bool {
    live.iter().all(|v| v.iter().all(|&b| b == 0xa5))
}

/// The remote side writes `msg` through `dst`; it lands at `ptr` (memory
/// that was leaked instead of freed), and allocations made just before do
/// not change.
fn write_lands_in_leaked_memory(c: &Conn, dst: &MrRemote, ptr: *const u8, msg: &[u8]) {
    let live = live_allocations();
    let src = MrLocal::reg(c.peer(), AlignedBuf::new(64).unwrap(), Usage::WRITE_SRC).unwrap();
    src.write_at(0, msg).unwrap();
    c.write(dst, 0, &src, 0, msg.len(), Flags::COMPLETION_ALWAYS, 1).unwrap();
    assert_eq!(c.cq().next_completion(T).unwrap().status, WcStatus::SUCCESS, "the device still reaches it");
    let mut got = vec![0u8; msg.len()];
    // SAFETY: the caller's memory was leaked: allocated for the process's life.
    #[allow(unsafe_code)]
    unsafe {
        std::ptr::copy_nonoverlapping(ptr, got.as_mut_ptr(), msg.len())
    };
    assert_eq!(got, msg, "the write landed in the leaked buffer");
    assert!(untouched(&live), "no live allocation changed");
}

/// A size of u32::MAX refused as over one of the device's limits.
fn over_the_device(e: &rpma::Error) -> bool {
    matches!(e.detail(), Some(Detail::TooLong { len, max, .. }) if *len == u64::from(u32::MAX) && max < len)
}

device_tests!({
    /// A failed `ibv_dereg_mr`: `dereg` hands the region back usable; a drop
    /// leaks the memory, which the remote side can still write (the
    /// registration is alive), and no allocation made afterwards changes.
    /// A drop that freed the buffer would let the write below land in
    /// whatever reused it.
    fn failed_dereg_leaks_the_memory() {
        let sp = peer();
        let (mem, freed) = Watched::new(4096);
        let mr = MrLocal::reg(&sp, mem, Usage::WRITE_DST).unwrap();
        fail_next(Teardown::DeregMr);
        let failed = mr.dereg().unwrap_err();
        // Display or source, never both: the cause is the source.
        let source = std::error::Error::source(&failed).expect("the cause").to_string();
        assert!(!failed.to_string().contains(&source), "{failed} repeats {source}");
        let DeregError { mr, error, .. } = failed;
        assert_eq!(error.errno(), Some(libc::EBUSY), "{error}");
        assert!(!freed.load(Ordering::SeqCst), "dereg failed: the memory comes back inside the region");
        let desc = mr.descriptor();
        let ptr = mr.ptr();
        fail_next(Teardown::DeregMr);
        drop(mr);
        assert!(!freed.load(Ordering::SeqCst), "a failed deregistration on drop must leak, not free");
        let (c, s) = Pair::new().server_peer(&sp).server_pdata(desc.to_vec()).connect();
        let remote = MrRemote::from_descriptor(c.private_data()).unwrap();
        write_lands_in_leaked_memory(&c, &remote, ptr, b"still reachable");
        close(c, s);
    }

    /// A log function that panics, called while a failed deregistration
    /// reports itself: the panic stops in rpma, which still leaks the
    /// memory (an unwind through the drop would have freed it).
    fn a_panicking_log_function_cannot_make_a_failed_teardown_free() {
        use rpma::logging::{self, LogLevel, LogThreshold};
        let sp = peer();
        let (mem, freed) = Watched::new(4096);
        let mr = MrLocal::reg(&sp, mem, Usage::WRITE_DST).unwrap();
        let called = Arc::new(AtomicUsize::new(0));
        let c2 = called.clone();
        logging::set_threshold(LogThreshold::Main, LogLevel::Error);
        logging::set_function(Some(Box::new(move |r: &logging::LogRecord<'_>| {
            c2.fetch_add(1, Ordering::SeqCst);
            panic!("a log function that panics: {}", r.args);
        })));
        fail_next(Teardown::DeregMr);
        let dropped = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| drop(mr)));
        logging::set_function(None);
        logging::reset_threshold(LogThreshold::Main);
        assert!(dropped.is_ok(), "the log function's panic unwound through rpma");
        assert!(called.load(Ordering::SeqCst) >= 1, "the failure was logged");
        assert!(!freed.load(Ordering::SeqCst), "a failed deregistration must leak, not free");
    }

    /// A region dropped while its operations are in flight is dropped, with
    /// the caller's memory value, by the completion that retires its last
    /// operation: after the tracker's lock. Here the value's `Drop` posts
    /// on the same connection (taking that lock); under the lock it would
    /// spin for ever.
    fn a_regions_last_drop_runs_after_the_trackers_lock() {
        struct Calls(AlignedBuf, Arc<Mutex<Option<Arc<Conn>>>>, Arc<AtomicBool>);
        // SAFETY: delegates to AlignedBuf, whose allocation never moves.
        #[allow(unsafe_code)]
        unsafe impl RegMemory for Calls {
            fn as_mut_ptr_len(&mut self) -> (*mut u8, usize) {
                self.0.as_mut_ptr_len()
            }
        }
        impl Drop for Calls {
            fn drop(&mut self) {
                if let Some(c) = self.1.lock().unwrap().take() {
                    // Takes the send tracker's lock: a post and a poll.
                    let _ = c.cq().get_completion();
                    let _ = c.pending_sends();
                }
                self.2.store(true, Ordering::SeqCst);
            }
        }
        let sp = peer();
        let (_smr, pdata) = server_region(&sp, Usage::READ_SRC | Usage::WRITE_DST);
        let (c, s) = Pair::new().server_peer(&sp).server_pdata(pdata).connect();
        let c = Arc::new(c);
        let remote = MrRemote::from_descriptor(c.private_data()).unwrap();
        let slot = Arc::new(Mutex::new(Some(c.clone())));
        let dropped = Arc::new(AtomicBool::new(false));
        let src = MrLocal::reg(
            c.peer(),
            Calls(AlignedBuf::new(64).unwrap(), slot.clone(), dropped.clone()),
            Usage::WRITE_SRC,
        )
        .unwrap();
        let dst = MrLocal::reg(c.peer(), AlignedBuf::new(64).unwrap(), Usage::READ_DST).unwrap();
        let (done, finished) = std::sync::mpsc::channel();
        let c2 = c.clone();
        let t = std::thread::spawn(move || {
            // Two unsignaled writes from the region, then a signaled read:
            // its completion retires the writes (the region's last holds).
            c2.write(&remote, 0, &src, 0, 8, Flags::COMPLETION_ON_ERROR, 1).unwrap();
            c2.write(&remote, 8, &src, 8, 8, Flags::COMPLETION_ON_ERROR, 2).unwrap();
            c2.read(&dst, 0, &remote, 0, 8, Flags::COMPLETION_ALWAYS, 3).unwrap();
            drop(src);
            let wc = c2.cq().next_completion(T).unwrap();
            done.send(wc.op_context).unwrap();
        });
        assert_eq!(finished.recv_timeout(T).expect("the poll hung: the region was dropped under a lock"), 3);
        assert!(dropped.load(Ordering::SeqCst), "the region and its memory were dropped with the last hold");
        t.join().unwrap();
        drop(slot);
        let c = Arc::into_inner(c).expect("the thread is done");
        close(c, s);
    }

    /// A failed `ibv_dealloc_mw`: the window stays bound, so its region stays
    /// held (never freed), and the remote side can still write through it.
    fn failed_mw_dealloc_keeps_the_region() {
        let sp = peer();
        let (mem, freed) = Watched::new(4096);
        let mr = MrLocal::reg(&sp, mem, Usage::MW_BIND | Usage::WRITE_DST).unwrap();
        let (c, s) = Pair::new().server_peer(&sp).connect();
        let mut mw = Mw::alloc(&sp, MwType::Type2).unwrap();
        s.bind_mw(&mut mw, &mr, 0, 64, MwAccess::REMOTE_WRITE, Flags::COMPLETION_ALWAYS, 1).unwrap();
        assert_eq!(s.cq().next_completion(T).unwrap().status, WcStatus::SUCCESS);
        let window = MrRemote::from_descriptor(&mw.descriptor().unwrap()).unwrap();
        fail_next(Teardown::DeallocMw);
        drop(mw);
        assert_eq!(mr.bound_windows(), 1, "the leaked window still holds the region");
        let DeregError { mr, error, .. } = mr.dereg().unwrap_err();
        assert_eq!(error.code(), RPMA_E_AGAIN);
        assert!(matches!(error.detail(), Some(Detail::RegionBusy { windows: 1, .. })), "{error}");
        let ptr = mr.ptr();
        drop(mr);
        assert!(!freed.load(Ordering::SeqCst), "the region under a live window must not be freed");
        write_lands_in_leaked_memory(&c, &window, ptr, b"via the window");
        // The window is still bound to the server's QP; rxe's CM teardown then
        // stalls for ~50 s, so the pair is left to the process's exit.
        std::mem::forget((c, s));
    }

    /// A failed `ibv_destroy_qp`: the receive posted on the QP may still land,
    /// so its region stays held (never freed) after the connection is dropped.
    fn failed_qp_destroy_keeps_posted_regions() {
        let sp = peer();
        let (mem, freed) = Watched::new(64);
        let r = MrLocal::reg(&sp, mem, Usage::RECV).unwrap();
        let (c, s) = Pair::new().server_peer(&sp).connect();
        s.recv(&r, 0, 8, 1).unwrap();
        assert_eq!(r.in_flight(), 1);
        fail_next(Teardown::DestroyQp);
        drop(s);
        assert_eq!(r.in_flight(), 1, "the leaked QP's receive still holds the region");
        drop(r);
        assert!(!freed.load(Ordering::SeqCst), "memory of a receive on a live QP must not be freed");
        assert_eq!(c.next_event_timeout(T).unwrap(), ConnEvent::Closed);
        c.disconnect().unwrap();
    }

    /// A failed `ibv_destroy_srq`: its posted receives keep their regions.
    fn failed_srq_destroy_keeps_posted_regions() {
        let sp = peer();
        let (mem, freed) = Watched::new(64);
        let r = MrLocal::reg(&sp, mem, Usage::RECV).unwrap();
        let srq = Srq::new(&sp, None).unwrap();
        srq.recv(&r, 0, 8, 1).unwrap();
        fail_next(Teardown::DestroySrq);
        drop(srq);
        assert_eq!(r.in_flight(), 1);
        drop(r);
        assert!(!freed.load(Ordering::SeqCst), "memory of a receive on a live SRQ must not be freed");
        // And without a failure, all is released.
        let (mem, freed) = Watched::new(64);
        let r = MrLocal::reg(&sp, mem, Usage::RECV).unwrap();
        let srq = Srq::new(&sp, None).unwrap();
        srq.recv(&r, 0, 8, 1).unwrap();
        drop(srq);
        assert_eq!(r.in_flight(), 0);
        drop(r);
        assert!(freed.load(Ordering::SeqCst));
    }

    /// Re-registration emulated (rxe has no native `ibv_rereg_mr`): when the
    /// old registration cannot be deregistered, the new one is dropped and the
    /// region comes back unchanged; when that fails too, the memory is leaked.
    fn failed_dereg_during_emulated_rereg() {
        let sp = peer();
        let (mem, freed) = Watched::new(4096);
        let mr = MrLocal::reg(&sp, mem, Usage::READ_SRC).unwrap();
        let rkey = mr.rkey();
        fail_next(Teardown::DeregMr);
        let mr = match mr.rereg(None, Some(Usage::READ_SRC | Usage::WRITE_DST)) {
            Err(ReregError::Unchanged { mr, error, .. }) => {
                // The old registration's deregistration is what failed.
                assert_eq!(error.errno(), Some(libc::EBUSY), "{error}");
                mr
            }
            Err(e) => panic!("expected Unchanged, got {e}"),
            Ok(r) => panic!("expected a failure, got {:?}", r.how),
        };
        assert_eq!((mr.rkey(), mr.usage()), (rkey, Usage::READ_SRC), "the old registration, unchanged");
        fail_next(Teardown::DeregMr);
        fail_next(Teardown::DeregMr);
        match mr.rereg(None, Some(Usage::READ_SRC | Usage::WRITE_DST)) {
            Err(ReregError::Leaked { error, dereg_error }) => {
                assert_eq!(error.errno(), Some(libc::EBUSY));
                assert_eq!(dereg_error.errno(), Some(libc::EBUSY));
            }
            Err(e) => panic!("expected Leaked, got {e}"),
            Ok(r) => panic!("expected a failure, got {:?}", r.how),
        }
        assert!(!freed.load(Ordering::SeqCst), "both registrations may be alive: the memory is leaked");
    }

    /// Item 8: an SRQ receive that completed on a connection's CQ is retired
    /// when the connection goes, not kept until the SRQ goes.
    fn srq_receive_completed_on_a_dropped_connection_is_retired() {
        let sp = peer();
        let mut scfg = SrqCfg::new();
        scfg.set_rcq_size(0);
        let srq = Srq::new(&sp, Some(&scfg)).unwrap();
        let r = MrLocal::reg(&sp, AlignedBuf::new(64).unwrap(), Usage::RECV).unwrap();
        srq.recv(&r, 0, 8, 1).unwrap();
        srq.recv(&r, 8, 8, 2).unwrap();
        assert_eq!(r.in_flight(), 2);
        let mut cfg = ConnCfg::new();
        cfg.set_srq(Some(&srq));
        let (c, s) = Pair::new().server_peer(&sp).server_cfg(cfg).connect();
        let m = MrLocal::reg(c.peer(), AlignedBuf::new(8).unwrap(), Usage::SEND).unwrap();
        c.send(&m, 0, 8, Flags::COMPLETION_ALWAYS, 3).unwrap();
        assert_eq!(c.cq().next_completion(T).unwrap().status, WcStatus::SUCCESS);
        close(c, s); // the server never polled its CQ
        assert_eq!(r.in_flight(), 1, "the completed receive was retired with the connection; one is still posted");
        drop(srq);
        assert_eq!(r.in_flight(), 0);
    }

    /// Item 7: two threads polling one CQ get every completion with its own
    /// context and kind, also when a later completion (retiring an earlier
    /// signaled one) is translated first.
    fn concurrent_pollers_get_every_context() {
        let sp = peer();
        let (_smr, pdata) = server_region(&sp, Usage::READ_SRC | Usage::WRITE_DST);
        let mut cfg = ConnCfg::new();
        cfg.set_sq_size(64);
        cfg.set_cq_size(64);
        let (c, s) = Pair::new().server_peer(&sp).client_cfg(&cfg).server_pdata(pdata).connect();
        let remote = MrRemote::from_descriptor(c.private_data()).unwrap();
        let local = MrLocal::reg(c.peer(), AlignedBuf::new(4096).unwrap(), Usage::READ_DST | Usage::WRITE_SRC).unwrap();
        let got = Mutex::new(Vec::new());
        let mut want = Vec::new();
        const PER_ROUND: u64 = 40; // 20 signaled reads, 20 unsignaled writes
        for round in 0..50u64 {
            let left = AtomicUsize::new((PER_ROUND / 2) as usize);
            for i in 0..PER_ROUND {
                let ctx = round * 1000 + i;
                if i % 2 == 1 {
                    c.read(&local, 0, &remote, 0, 8, Flags::COMPLETION_ALWAYS, ctx).unwrap();
                    want.push((ctx, CompletionOp::Read));
                } else {
                    c.write(&remote, 64, &local, 64, 8, Flags::COMPLETION_ON_ERROR, ctx).unwrap();
                }
            }
            std::thread::scope(|sc| {
                for _ in 0..2 {
                    sc.spawn(|| {
                        let t0 = std::time::Instant::now();
                        while left.load(Ordering::SeqCst) > 0 {
                            match c.cq().get_completion() {
                                Ok(Some(wc)) => {
                                    assert_eq!(wc.status, WcStatus::SUCCESS);
                                    got.lock().unwrap().push((wc.op_context, wc.op));
                                    left.fetch_sub(1, Ordering::SeqCst);
                                }
                                Ok(None) => {}
                                Err(e) => panic!("{e}"),
                            }
                            assert!(t0.elapsed() < T, "completions missing");
                        }
                    });
                }
            });
        }
        let mut got = got.into_inner().unwrap();
        got.sort_by_key(|g| g.0);
        want.sort_by_key(|g| g.0);
        assert_eq!(got.len(), want.len());
        assert_eq!(got, want, "every completion with its own context and kind");
        assert_eq!(c.pending_sends(), 0);
        assert_eq!(local.in_flight(), 0);
        close(c, s);
    }

    /// Item 10: unsignaled operations cannot fill the send queue; the error
    /// says so, and the signaled operation it asks for is accepted.
    fn unsignaled_operations_leave_a_slot_for_a_signaled_one() {
        let sp = peer();
        let (_smr, pdata) = server_region(&sp, Usage::WRITE_DST);
        let mut cfg = ConnCfg::new();
        cfg.set_sq_size(8);
        let (c, s) = Pair::new().server_peer(&sp).client_cfg(&cfg).server_pdata(pdata).connect();
        let remote = MrRemote::from_descriptor(c.private_data()).unwrap();
        let local = MrLocal::reg(c.peer(), AlignedBuf::new(64).unwrap(), Usage::WRITE_SRC).unwrap();
        let mut n = 0;
        let e = loop {
            match c.write(&remote, 0, &local, 0, 8, Flags::COMPLETION_ON_ERROR, n) {
                Ok(()) => n += 1,
                Err(e) => break e,
            }
            assert!(n < 100);
        };
        assert_eq!(n, 7, "sq_size 8: seven unsignaled, the last slot kept");
        assert_eq!(e.code(), RPMA_E_AGAIN);
        assert_eq!(e.detail(), Some(&Detail::SignalNeeded), "{e}");
        c.write(&remote, 0, &local, 0, 8, Flags::COMPLETION_ALWAYS, 99).unwrap();
        let wc = c.cq().next_completion(T).unwrap();
        assert_eq!((wc.op_context, wc.status), (99, WcStatus::SUCCESS));
        assert_eq!((c.pending_sends(), local.in_flight()), (0, 0));
        close(c, s);
    }

    /// Items 4 and 5: queue sizes 0, 1 and u32::MAX give a connection or an
    /// error (never an abort), timeouts 0 and Duration::MAX behave.
    /// Every public call that takes a size, count, length or offset, given
    /// hostile values (0, around the region's size, 2^32, 2^42, isize::MAX,
    /// usize::MAX, and random ones): an `Ok` or an rpma error, never a panic
    /// (which fails this test), an abort (which kills the binary) or a hang
    /// (the harness's timeout). An out-of-range local access is `Inval`.
    fn every_size_taking_call_takes_hostile_sizes() {
        let sp = peer();
        let (_smr, pdata) = server_region(&sp, Usage::READ_SRC | Usage::WRITE_DST);
        let (c, s) = Pair::new().server_peer(&sp).server_pdata(pdata).connect();
        let remote = MrRemote::from_descriptor(c.private_data()).unwrap();
        let all = Usage::READ_DST | Usage::WRITE_SRC | Usage::SEND | Usage::RECV | Usage::MW_BIND;
        let mr = MrLocal::reg(c.peer(), AlignedBuf::new(4096).unwrap(), all).unwrap();
        let mut rng = common::Rng(0x0dd_5123);
        let mut hostile: Vec<usize> = vec![
            0,
            1,
            7,
            8,
            4088,
            4095,
            4096,
            4097,
            8192,
            u32::MAX as usize,
            u32::MAX as usize + 1,
            1 << 42,
            isize::MAX as usize,
            usize::MAX - 7,
            usize::MAX,
        ];
        hostile.extend((0..8).map(|_| rng.next() as usize));
        hostile.extend((0..8).map(|_| (rng.next() % 9000) as usize));
        let mut calls = 0usize;
        let mut seen = |what: &str, r: rpma::Result<()>| {
            calls += 1;
            if let Err(e) = r {
                assert!(e.code() < 0, "{what}: {e} has no librpma code");
                assert!(!e.to_string().is_empty());
            }
        };
        let inval = |what: &str, r: rpma::Result<()>, off: usize, len: usize, size: usize| {
            if off.checked_add(len).is_none_or(|end| end > size) {
                let e = r.expect_err(what);
                assert_eq!(e.code(), RPMA_E_INVAL, "{what}({off}, {len}): {e}");
            }
        };
        // Drains what a successful post produced (successes and errors alike).
        let drain = |c: &Conn| while c.cq().next_completion(Duration::from_millis(200)).is_ok() {};
        let small = |n: usize| n <= 8192;
        for &a in &hostile {
            // Allocations of a user-given size (only those that cannot commit
            // gigabytes when they succeed).
            if a <= 1 << 20 || a >= 1 << 42 {
                seen("AlignedBuf::new", AlignedBuf::new(a).map(drop));
                seen("MappedFile::sealed", rpma::MappedFile::sealed("hostile", a).map(drop));
            }
            seen(
                "Messages::new(slot)",
                rpma::messages::Messages::new(c.peer(), a, 1, 1, rpma::messages::MsgAccess::Msgs).map(drop),
            );
            for count in [0usize, 2, u32::MAX as usize + 1, usize::MAX] {
                if count <= 2 && a > 1 << 20 {
                    continue; // would register real memory of that size
                }
                seen(
                    "Messages::new(count)",
                    rpma::messages::Messages::new(c.peer(), 64, count, a.min(2), rpma::messages::MsgAccess::Msgs)
                        .map(drop),
                );
            }
            for &b in &hostile {
                if small(b) {
                    let mut buf = vec![0u8; b];
                    inval("read_at", mr.read_at(a, &mut buf), a, b, 4096);
                    inval("read_volatile_at", mr.read_volatile_at(a, &mut buf), a, b, 4096);
                    inval("write_at", mr.write_at(a, &buf), a, b, 4096);
                    seen(
                        "write_inline",
                        c.post(WriteInline::new(&remote, a as u64, &buf).op_context(1)).map(|()| drain(&c)),
                    );
                }
                inval("advise", mr.advise(a, b, rpma::Advice::Prefetch, rpma::AdviseFlags::empty()), a, b, 4096);
                let r = c.read(&mr, a, &remote, b as u64, 8, Flags::COMPLETION_ALWAYS, 2).map(|()| drain(&c));
                inval("read(dst_offset)", r, a, 8, 4096);
                let r = c.read(&mr, 0, &remote, a as u64, b, Flags::COMPLETION_ALWAYS, 3).map(|()| drain(&c));
                inval("read(len)", r, 0, b, 4096);
                let r = c.write(&remote, a as u64, &mr, b, 8, Flags::COMPLETION_ALWAYS, 4).map(|()| drain(&c));
                inval("write(src_offset)", r, b, 8, 4096);
                seen(
                    "write_with_imm",
                    c.write_with_imm(&remote, b as u64, &mr, 0, a, Flags::COMPLETION_ALWAYS, 5, 6).map(|()| drain(&c)),
                );
                let r = c
                    .compare_and_swap(&mr, a, &remote, b as u64, 0, 1, Flags::COMPLETION_ALWAYS, 7)
                    .map(|()| drain(&c));
                inval("compare_and_swap", r, a, 8, 4096);
                let r = c.fetch_and_add(&mr, a, &remote, b as u64, 1, Flags::COMPLETION_ALWAYS, 8).map(|()| drain(&c));
                inval("fetch_and_add", r, a, 8, 4096);
                seen(
                    "atomic_write",
                    c.atomic_write(&remote, a as u64, [1; 8], Flags::COMPLETION_ALWAYS, 9).map(|()| drain(&c)),
                );
                seen(
                    "flush",
                    c.flush(&remote, a as u64, b as u64, FlushType::Visibility, Flags::COMPLETION_ALWAYS, 10)
                        .map(|()| drain(&c)),
                );
                inval("send", c.send(&mr, a, b, Flags::COMPLETION_ALWAYS, 11), a, b, 4096);
                seen("send_with_imm", c.send_with_imm(&mr, a, b, Flags::COMPLETION_ALWAYS, 1, 12));
                inval("recv", c.recv(&mr, a, b, 13), a, b, 4096);
                let r = c
                    .post(WriteSg::new(&remote, 0, &[rpma::ops::Sg::new(&mr, a, b)]).op_context(14))
                    .map(|()| drain(&c));
                inval("write_sg", r, a, b, 4096);
                let r = c
                    .chain()
                    .push(Read::new(&mr, a, &remote, 0, b).flags(Flags::COMPLETION_ALWAYS).op_context(15))
                    .map(drop);
                inval("Chain::read", r, a, b, 4096);
            }
            let mut msgs = rpma::messages::Messages::new(c.peer(), 64, 1, 1, rpma::messages::MsgAccess::Msgs).unwrap();
            seen("Messages::received", msgs.received(a, a).map(drop));
            seen("Messages::received(len)", msgs.received(0, a).map(drop));
            if small(a) {
                seen("Messages::send", msgs.send(&c, a, &vec![0u8; a], Flags::COMPLETION_ALWAYS));
            }
            seen("Messages::post_recv", msgs.post_recv(&c, a));
            drain(&c);
        }
        // Descriptors and private data of every length, random bytes.
        for len in 0..=64 {
            for _ in 0..8 {
                let bytes: Vec<u8> = (0..len).map(|_| rng.next() as u8).collect();
                seen("MrRemote::from_descriptor", MrRemote::from_descriptor(&bytes).map(drop));
                seen("PeerCfg::from_descriptor", rpma::PeerCfg::from_descriptor(&bytes).map(drop));
                seen("CommonData::decode", rpma::CommonData::decode(&bytes).map(drop));
            }
        }
        // Output slices and waits on nothing.
        assert_eq!(c.cq().get_wc(&mut []).unwrap_err().code(), RPMA_E_INVAL);
        assert_eq!(rpma::utils::poll_fds(&[], None).unwrap_err().code(), RPMA_E_INVAL, "no wait for ever");
        assert_eq!(rpma::utils::poll_fds(&[], Some(Duration::ZERO)).unwrap(), Vec::<bool>::new());
        println!("  {calls} calls with hostile sizes: no panic, no abort");
        drop(mr);
        close(c, s);
    }

    fn extreme_sizes_and_timeouts() {
        let cp = peer();
        let port = next_port(); // connection requests only: nobody listens
        let caps = cp.capabilities();
        let sizes = [0u32, 1, u32::MAX];
        let mut outcomes = [0usize; 2];
        for sq in sizes {
            for rq in sizes {
                for cq in sizes {
                    for rcq in sizes {
                        let mut cfg = ConnCfg::new();
                        cfg.set_sq_size(sq);
                        cfg.set_rq_size(rq);
                        cfg.set_cq_size(cq);
                        cfg.set_rcq_size(rcq);
                        match ConnReq::new(&cp, &addr(), port, Some(&cfg)) {
                            // The device reports its limits (max_qp_wr,
                            // max_cqe): u32::MAX is above every one.
                            Ok(_) if [sq, rq, cq, rcq].contains(&u32::MAX) && caps.max_qp_wr != 0 => {
                                panic!("sizes {sq} {rq} {cq} {rcq} accepted over the device's limits {caps:?}")
                            }
                            Ok(_) => outcomes[0] += 1,
                            Err(e) => {
                                outcomes[1] += 1;
                                if [sq, rq, cq, rcq].contains(&u32::MAX) {
                                    assert_eq!(e.code(), RPMA_E_INVAL, "{e}");
                                    assert!(over_the_device(&e), "{e}");
                                }
                            }
                        }
                    }
                }
            }
        }
        // And random sizes, around the device's limits and anywhere.
        let mut rng = common::Rng(0x5eed_1234);
        for _ in 0..40 {
            let mut pick = |max: u32| match rng.next() % 3 {
                0 => max.saturating_add((rng.next() % 3) as u32).saturating_sub(1),
                1 => (rng.next() % 64) as u32,
                _ => rng.next() as u32,
            };
            let mut cfg = ConnCfg::new();
            cfg.set_sq_size(pick(caps.max_qp_wr));
            cfg.set_rq_size(pick(caps.max_qp_wr));
            cfg.set_cq_size(pick(caps.max_cqe));
            cfg.set_rcq_size(pick(caps.max_cqe));
            match ConnReq::new(&cp, &addr(), port, Some(&cfg)) {
                Ok(_) => outcomes[0] += 1,
                Err(e) => {
                    outcomes[1] += 1;
                    assert!(
                        [RPMA_E_INVAL, rpma::error::RPMA_E_PROVIDER, rpma::error::RPMA_E_NOMEM].contains(&e.code()),
                        "{e}"
                    );
                }
            }
        }
        println!("  121 size combinations: {} connection requests, {} errors", outcomes[0], outcomes[1]);
        assert!(outcomes[0] > 0);
        for (rq, rcq) in [(0, 0), (1, 1), (u32::MAX, 1), (1, u32::MAX), (caps.max_srq_wr, 0)] {
            let mut scfg = SrqCfg::new();
            scfg.set_rq_size(rq);
            scfg.set_rcq_size(rcq);
            match Srq::new(&cp, Some(&scfg)) {
                Err(e) if rq == u32::MAX || rcq == u32::MAX => assert!(over_the_device(&e), "{e}"),
                Ok(_) if rq == u32::MAX || rcq == u32::MAX => {
                    panic!("SRQ sizes {rq} {rcq} accepted over the device's limits {caps:?}")
                }
                _ => {}
            }
        }
        // Timeouts.
        let sp = peer();
        let (_smr, pdata) = server_region(&sp, Usage::READ_SRC);
        let (c, s) = Pair::new().server_peer(&sp).server_pdata(pdata).connect();
        let remote = MrRemote::from_descriptor(c.private_data()).unwrap();
        let local = MrLocal::reg(c.peer(), AlignedBuf::new(64).unwrap(), Usage::READ_DST).unwrap();
        assert_eq!(c.cq().next_completion(Duration::ZERO).unwrap_err().code(), RPMA_E_NO_COMPLETION);
        assert_eq!(c.next_event_timeout(Duration::ZERO).unwrap_err().code(), rpma::error::RPMA_E_NO_EVENT);
        c.read(&local, 0, &remote, 0, 8, Flags::COMPLETION_ALWAYS, 1).unwrap();
        assert_eq!(c.cq().next_completion(Duration::MAX).unwrap().op_context, 1, "Duration::MAX: no limit");
        c.read(&local, 0, &remote, 0, 8, Flags::COMPLETION_ALWAYS, 2).unwrap();
        assert_eq!(
            rpma::utils::poll_fds(&[std::os::fd::AsFd::as_fd(c.cq())], Some(Duration::MAX)).unwrap(),
            vec![true]
        );
        c.cq().wait_timeout(Duration::MAX).unwrap();
        assert_eq!(c.cq().get_completion().unwrap().expect("a completion").op_context, 2);
        c.disconnect().unwrap();
        assert_eq!(s.next_event_timeout(Duration::MAX).unwrap(), ConnEvent::Closed);
        s.disconnect().unwrap();
        assert_eq!(c.next_event_timeout(T).unwrap(), ConnEvent::Closed);
    }

    /// Item 6: a hostile descriptor near the top of the address space makes
    /// atomic_write and flush post (the device refuses the access), never
    /// panic on the address arithmetic.
    fn hostile_descriptor_addresses_do_not_panic() {
        let sp = peer();
        let (c, s) = Pair::new().server_peer(&sp).connect();
        let mut d = [0u8; 21];
        d[..8].copy_from_slice(&(u64::MAX - 3).to_le_bytes());
        d[8..16].copy_from_slice(&64u64.to_le_bytes());
        d[16..20].copy_from_slice(&0x1234u32.to_le_bytes());
        d[20] = (Usage::WRITE_DST | Usage::READ_SRC | Usage::FLUSH_TYPE_VISIBILITY).bits() as u8;
        let bad = MrRemote::from_descriptor(&d).unwrap();
        c.atomic_write(&bad, 56, [1; 8], Flags::COMPLETION_ALWAYS, 1).unwrap();
        c.flush(&bad, 56, 8, FlushType::Visibility, Flags::COMPLETION_ALWAYS, 2).unwrap();
        for _ in 0..2 {
            assert!(!c.cq().next_completion(T).unwrap().status.is_success());
        }
        assert_eq!(
            c.atomic_write(&bad, 60, [1; 8], Flags::COMPLETION_ALWAYS, 3).unwrap_err().code(),
            RPMA_E_INVAL,
            "misaligned"
        );
        close(c, s);
    }
});
