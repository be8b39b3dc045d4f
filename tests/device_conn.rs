//! Device tests of connections and the data path on a real RDMA device:
//! both sides run in this process (server on a thread), over rxe0 in the
//! harness VM when the host has no device.

use rpma::error::{Arg, Detail};
use rpma::error::{RPMA_E_AGAIN, RPMA_E_INVAL, RPMA_E_NOSUPP, RPMA_E_NO_EVENT, RPMA_E_SHARED_CHANNEL};
use rpma::ops::{Read, ReadSg, Recv, Sg, Write, WriteSg};
use rpma::{
    AlignedBuf, CompletionOp, ConnCfg, ConnEvent, ConnReq, Ep, Flags, FlushType, MrLocal, MrRemote, PeerCfg, Srq,
    SrqCfg, Usage, WcStatus,
};
mod common;
use common::{close, peer, server_region, Pair, T};
use rpma_harness::{addr, device_tests, next_port};
use std::thread;
use std::time::Duration;

/// RNR NAKs the device sent (its `send_rnr_err` counter: rxe and most
/// providers export it in sysfs).
fn rnr_naks_sent(dev: &str) -> u64 {
    let path = format!("/sys/class/infiniband/{dev}/ports/1/hw_counters/send_rnr_err");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e} (the device's RNR counter)"));
    text.trim().parse().unwrap_or_else(|e| panic!("{path}: {text:?}: {e}"))
}

device_tests!({
    /// Dropping a connection that is still up returns promptly, whichever
    /// side goes first (no implicit disconnect: the CM sends its DREQ).
    fn dropping_live_connections_is_prompt() {
        for server_first in [false, true] {
            let (c, s) = Pair::new().connect();
            let t0 = std::time::Instant::now();
            if server_first {
                drop(s);
                drop(c);
            } else {
                drop(c);
                drop(s);
            }
            let took = t0.elapsed();
            println!("  a live pair dropped (server first: {server_first}) in {took:?}");
            assert!(took < Duration::from_secs(5), "{took:?}");
        }
    }

    fn connect_exchange_private_data_and_close() {
        let (c, s) = Pair::new().client_pdata(b"from-client").server_pdata(b"from-server".to_vec()).connect();
        assert!(s.private_data().starts_with(b"from-client"));
        assert!(c.private_data().starts_with(b"from-server"));
        println!(
            "  private data received: {} bytes at the server (11 sent), {} at the client (11 sent)",
            s.private_data().len(),
            c.private_data().len()
        );
        assert_ne!(c.qp_num(), 0);
        assert_ne!(c.qp_num(), s.qp_num());
        close(c, s);
    }

    fn private_data_limits() {
        let p = peer();
        let big = vec![7u8; rpma::conn_req::MAX_CONNECT_PRIVATE_DATA + 1];
        let req = ConnReq::new(&p, &addr(), next_port(), None).unwrap();
        let e = req.connect(&big).unwrap_err();
        assert_eq!(e.code(), RPMA_E_INVAL);
        assert_eq!(e.detail(), Some(&Detail::TooLong { what: Arg::PrivateData, len: 57, max: 56 }), "{e}");
        // The full 56 bytes go through and arrive intact.
        let full: Vec<u8> = (0..56u8).collect();
        let (c, s) = Pair::new().client_pdata(&full).server_pdata(vec![9u8; 196]).connect();
        assert_eq!(&s.private_data()[..56], &full[..]);
        assert_eq!(&c.private_data()[..196], &[9u8; 196][..]);
        close(c, s);
    }

    fn kernel_refuses_oversized_private_data() {
        // What the local check protects from: the CM itself refuses 57 bytes.
        use rpma_sys::cm::{AddrInfo, CmId};
        let p = peer();
        let port = next_port();
        let ep = Ep::listen(&p, &addr(), port).unwrap();
        let ai = AddrInfo::new(&addr(), Some(&port.to_string()), false).unwrap();
        let mut id = CmId::new(None).unwrap();
        id.resolve_addr(&ai, 1000).unwrap();
        id.resolve_route(1000).unwrap();
        let e = id.connect(&[0u8; 57]).unwrap_err();
        println!("  rdma_connect with 57 bytes: {e}");
        assert_eq!(e.raw_os_error(), Some(libc::EINVAL));
        drop(ep);
    }

    fn connect_to_nobody_is_rejected_in_time() {
        let p = peer();
        let port = next_port();
        let req = ConnReq::new(&p, &addr(), port, None).unwrap();
        let c = req.connect(&[]).unwrap();
        let ev = c.next_event_timeout(T).expect("an event within the timeout");
        assert!(matches!(ev, ConnEvent::Rejected | ConnEvent::Unreachable), "{ev:?}");
        println!("  no listener: {ev}");
        // Unroutable address: the kernel refuses the resolution at once
        // (ENETUNREACH) instead of letting it wait for the timeout.
        let mut cfg = ConnCfg::new();
        cfg.set_timeout(Duration::from_millis(300)).unwrap();
        let e = ConnReq::new(&p, "198.51.100.9", port, Some(&cfg)).unwrap_err();
        assert_eq!(e.errno(), Some(libc::ENETUNREACH), "{e}");
    }

    fn dropped_incoming_request_is_rejected() {
        let sp = peer();
        let port = next_port();
        let ep = Ep::listen(&sp, &addr(), port).unwrap();
        let h = thread::spawn(move || {
            let req = ep.next_conn_req_timeout(None, T).unwrap();
            drop(req);
            ep
        });
        let c = ConnReq::new(&peer(), &addr(), port, None).unwrap().connect(&[]).unwrap();
        assert_eq!(c.next_event_timeout(T).unwrap(), ConnEvent::Rejected);
        let ep = h.join().unwrap();
        // Nothing pending: a bounded wait reports NO_EVENT.
        assert_eq!(ep.next_conn_req_timeout(None, Duration::from_millis(100)).unwrap_err().code(), RPMA_E_NO_EVENT);
    }

    fn read_write_flush_atomic_write_bytes_land() {
        let usage = Usage::READ_SRC | Usage::WRITE_DST | Usage::FLUSH_TYPE_VISIBILITY;
        let sp = peer();
        let (smr, pdata) = server_region(&sp, usage);
        let (c, s) = Pair::new().server_peer(&sp).server_pdata(pdata).connect();
        let remote = MrRemote::from_descriptor(c.private_data()).unwrap();
        assert_eq!(remote.size(), 8192);
        let cp = c.cq();
        let local = MrLocal::reg(c.peer(), AlignedBuf::new(8192).unwrap(), Usage::READ_DST | Usage::WRITE_SRC).unwrap();
        // read 4 KiB from offset 100
        c.read(&local, 10, &remote, 100, 4096, Flags::COMPLETION_ALWAYS, 1).unwrap();
        let wc = cp.next_completion(T).unwrap();
        assert_eq!((wc.op_context, wc.op, wc.status), (1, CompletionOp::Read, WcStatus::SUCCESS));
        let mut got = vec![0u8; 4096];
        local.read_at(10, &mut got).unwrap();
        let want: Vec<u8> = (100..4196u32).map(|i| (i * 7 % 251) as u8).collect();
        assert_eq!(got, want, "read bytes");
        // write, then flush (APM on rxe) and wait only for the flush
        local.write_at(0, b"written by the client").unwrap();
        c.write(&remote, 4000, &local, 0, 21, Flags::COMPLETION_ON_ERROR, 2).unwrap();
        c.flush(&remote, 4000, 21, FlushType::Visibility, Flags::COMPLETION_ALWAYS, 3).unwrap();
        let wc = cp.next_completion(T).unwrap();
        assert_eq!((wc.op_context, wc.op, wc.status), (3, CompletionOp::Flush, WcStatus::SUCCESS));
        // The device's opcode proves the path: IBV_WC_FLUSH (8) or the APM's RDMA READ (2).
        let native_flush = c.peer().is_native_flush_supported();
        assert_eq!(wc.wc_opcode, if native_flush { 8 } else { 2 }, "flush path (native: {native_flush})");
        println!("  flush ran {} (wc opcode {})", if native_flush { "natively" } else { "as APM read" }, wc.wc_opcode);
        let mut at = [0u8; 21];
        smr.read_at(4000, &mut at).unwrap();
        assert_eq!(&at, b"written by the client");
        // atomic write of a commit pointer
        c.atomic_write(&remote, 8184, 0x1122_3344_5566_7788u64.to_le_bytes(), Flags::COMPLETION_ALWAYS, 4).unwrap();
        let wc = cp.next_completion(T).unwrap();
        assert_eq!((wc.op_context, wc.op, wc.status), (4, CompletionOp::AtomicWrite, WcStatus::SUCCESS));
        // IBV_WC_ATOMIC_WRITE (9) or the emulation's fenced RDMA WRITE (1).
        let native_aw = c.peer().is_native_atomic_write_supported();
        assert_eq!(wc.wc_opcode, if native_aw { 9 } else { 1 }, "atomic write path (native: {native_aw})");
        println!(
            "  atomic write ran {} (wc opcode {})",
            if native_aw { "natively" } else { "as a fenced write" },
            wc.wc_opcode
        );
        let mut v = [0u8; 8];
        smr.read_at(8184, &mut v).unwrap();
        assert_eq!(u64::from_le_bytes(v), 0x1122_3344_5566_7788);
        close(c, s);
    }

    /// `ConnCfg::set_native_ops(false)` takes the emulations (APM read, fenced
    /// write) wherever native operations exist, and their bytes land the same.
    fn native_ops_off_uses_the_emulations() {
        let sp = peer();
        let (smr, pdata) = server_region(&sp, Usage::READ_SRC | Usage::WRITE_DST | Usage::FLUSH_TYPE_VISIBILITY);
        let mut cfg = ConnCfg::new();
        cfg.set_native_ops(false);
        let (c, s) = Pair::new().server_peer(&sp).client_cfg(&cfg).server_pdata(pdata).connect();
        let remote = MrRemote::from_descriptor(c.private_data()).unwrap();
        let local = MrLocal::reg(c.peer(), AlignedBuf::new(64).unwrap(), Usage::WRITE_SRC).unwrap();
        local.write_at(0, b"emulated").unwrap();
        c.write(&remote, 64, &local, 0, 8, Flags::COMPLETION_ON_ERROR, 1).unwrap();
        c.flush(&remote, 64, 8, FlushType::Visibility, Flags::COMPLETION_ALWAYS, 2).unwrap();
        let wc = c.cq().next_completion(T).unwrap();
        assert_eq!((wc.op_context, wc.op, wc.status, wc.wc_opcode), (2, CompletionOp::Flush, WcStatus::SUCCESS, 2));
        c.atomic_write(&remote, 128, 42u64.to_le_bytes(), Flags::COMPLETION_ALWAYS, 3).unwrap();
        let wc = c.cq().next_completion(T).unwrap();
        assert_eq!((wc.op_context, wc.status, wc.wc_opcode), (3, WcStatus::SUCCESS, 1), "a fenced RDMA WRITE");
        let mut b = [0u8; 8];
        smr.read_at(64, &mut b).unwrap();
        assert_eq!(&b, b"emulated");
        smr.read_at(128, &mut b).unwrap();
        assert_eq!(u64::from_le_bytes(b), 42);
        println!(
            "  native ops available: flush {}, atomic write {}; emulations used",
            c.peer().is_native_flush_supported(),
            c.peer().is_native_atomic_write_supported()
        );
        close(c, s);
    }

    /// `flush(Persistent)` on the native path: needs native flush and memory
    /// rxe grants `FLUSH_PERSISTENT` on, which in the harness's worlds is only
    /// FS-DAX pmem registered through the ODP fallback (rxe on Linux 7.3, the
    /// trixie-backports world; docs/worlds.md). Elsewhere it says why it did
    /// not run.
    fn native_persistent_flush_on_pmem() {
        let sp = peer();
        let dir = std::env::var("RPMA_TEST_PMEM_DIR").ok();
        // Whether this world must run it comes from outside rpma: the world
        // says ODP (RPMA_EXPECT_ODP, or the measured kernel table), rdma-core
        // 45+ posts a native flush, rxe has one from Linux 6.2, and the VM
        // always provides pmem. There, rpma's own probe must agree.
        let expected = rpma_harness::expect_odp() == Some(true)
            && rpma_harness::rdma_core_release().is_some_and(|r| r >= 45)
            && (!rpma_harness::in_vm() || rpma_harness::rxe_iba15())
            && (dir.is_some() || rpma_harness::in_vm());
        let Some(dir) = dir.filter(|_| sp.is_native_flush_supported() && sp.is_odp_capable()) else {
            assert!(
                !expected,
                "this world must run it (ODP expected, rdma-core {:?}, kernel {:?}), but rpma's probe says native \
                 flush {}, ODP {}, pmem dir {:?}",
                rpma_harness::rdma_core_release(),
                rpma_harness::kernel_version(),
                sp.is_native_flush_supported(),
                sp.is_odp_capable(),
                std::env::var("RPMA_TEST_PMEM_DIR").ok()
            );
            println!(
                "  not run here (expected: no ODP in this world, or rdma-core {:?} < 45, or kernel {:?} < 6.2); it runs \
                 in the trixie-backports world",
                rpma_harness::rdma_core_release(),
                rpma_harness::kernel_version()
            );
            return;
        };
        let path = format!("{dir}/native-persistent-flush");
        // SAFETY: the test's own file on the VM's pmem, never truncated.
        #[allow(unsafe_code)]
        let f = unsafe { rpma::MappedFile::open(&path, 1 << 20) }.unwrap();
        let usage = Usage::WRITE_DST | Usage::FLUSH_TYPE_PERSISTENT | Usage::FLUSH_TYPE_VISIBILITY;
        let smr = MrLocal::reg(&sp, f, usage).unwrap();
        assert!(smr.is_odp(), "FS-DAX registers through the ODP fallback");
        let mut pcfg = PeerCfg::new();
        pcfg.set_direct_write_to_pmem(true);
        let mut pdata = smr.descriptor().to_vec();
        pdata.extend_from_slice(&pcfg.descriptor());
        let (c, s) = Pair::new().server_peer(&sp).server_pdata(pdata).connect();
        let remote = MrRemote::from_descriptor(c.private_data()).unwrap();
        c.apply_remote_peer_cfg(&PeerCfg::from_descriptor(&c.private_data()[rpma::MR_DESCRIPTOR_SIZE..]).unwrap());
        let local = MrLocal::reg(c.peer(), AlignedBuf::new(64).unwrap(), Usage::WRITE_SRC).unwrap();
        local.write_at(0, b"durable!").unwrap();
        c.write(&remote, 4096, &local, 0, 8, Flags::COMPLETION_ON_ERROR, 1).unwrap();
        c.flush(&remote, 4096, 8, FlushType::Persistent, Flags::COMPLETION_ALWAYS, 2).unwrap();
        let wc = c.cq().next_completion(T).unwrap();
        assert_eq!((wc.op_context, wc.status, wc.wc_opcode), (2, WcStatus::SUCCESS, 8), "a native persistent flush");
        let mut b = [0u8; 8];
        smr.read_at(4096, &mut b).unwrap();
        assert_eq!(&b, b"durable!");
        println!("  flush(Persistent) ran natively (wc opcode 8) on FS-DAX pmem registered with ODP");
        close(c, s);
        let _ = std::fs::remove_file(&path);
    }

    fn send_recv_and_immediates() {
        let (c, s) = Pair::new().connect();
        assert!(!c.peer().same_pd(s.peer()));
        let smr = MrLocal::reg(s.peer(), AlignedBuf::new(256).unwrap(), Usage::RECV).unwrap();
        s.recv(&smr, 0, 64, 11).unwrap();
        s.recv(&smr, 64, 64, 12).unwrap();
        let cmr = MrLocal::reg(c.peer(), AlignedBuf::new(256).unwrap(), Usage::SEND).unwrap();
        cmr.write_at(0, b"ping").unwrap();
        c.send(&cmr, 0, 4, Flags::COMPLETION_ALWAYS, 21).unwrap();
        assert_eq!(c.cq().next_completion(T).unwrap().op, CompletionOp::Send);
        let wc = s.cq().next_completion(T).unwrap();
        assert_eq!((wc.op_context, wc.op, wc.byte_len, wc.imm), (11, CompletionOp::Recv, 4, None));
        let mut b = [0u8; 4];
        smr.read_at(0, &mut b).unwrap();
        assert_eq!(&b, b"ping");
        c.send_with_imm(&cmr, 0, 0, Flags::COMPLETION_ALWAYS, 0xdead_beef, 22).unwrap();
        assert_eq!(c.cq().next_completion(T).unwrap().op, CompletionOp::SendWithImm);
        let wc = s.cq().next_completion(T).unwrap();
        assert_eq!((wc.op_context, wc.byte_len, wc.imm), (12, 0, Some(0xdead_beef)), "imm in host order");
        close(c, s);
    }

    /// A write with immediate data consumes a receive, reported as
    /// `RecvRdmaWithImm` with the immediate, tracked or untracked alike.
    fn write_with_imm_consumes_a_receive() {
        let sp = peer();
        let (smr, pdata) = server_region(&sp, Usage::WRITE_DST | Usage::RECV);
        let mut cfg = ConnCfg::new();
        cfg.set_rcq_size(8);
        let (c, s) = Pair::new().server_peer(&sp).server_cfg(cfg).server_pdata(pdata).connect();
        let remote = MrRemote::from_descriptor(c.private_data()).unwrap();
        let recv_mr = MrLocal::reg(s.peer(), AlignedBuf::new(64).unwrap(), Usage::RECV).unwrap();
        s.recv(&recv_mr, 0, 0, 31).unwrap();
        let cmr = MrLocal::reg(c.peer(), AlignedBuf::new(64).unwrap(), Usage::WRITE_SRC).unwrap();
        cmr.write_at(0, b"imm!").unwrap();
        c.write_with_imm(&remote, 16, &cmr, 0, 4, Flags::COMPLETION_ALWAYS, 42, 32).unwrap();
        assert_eq!(c.cq().next_completion(T).unwrap().op, CompletionOp::WriteWithImm);
        let rcq = s.rcq().expect("rcq");
        let wc = rcq.next_completion(T).unwrap();
        assert_eq!((wc.op_context, wc.op, wc.imm), (31, CompletionOp::RecvRdmaWithImm, Some(42)));
        // The same through an untracked (unheld) receive: its kind from the
        // device too, not the one its work request ID names.
        // SAFETY: `recv_mr` outlives the receive, reaped below.
        #[allow(unsafe_code)]
        unsafe { s.post(rpma::ops::Unheld::new(Recv::new(&recv_mr, 0, 0).op_context(33))) }.unwrap();
        c.write_with_imm(&remote, 16, &cmr, 0, 4, Flags::COMPLETION_ALWAYS, 43, 34).unwrap();
        assert_eq!(c.cq().next_completion(T).unwrap().op, CompletionOp::WriteWithImm);
        let wc = rcq.next_completion(T).unwrap();
        assert_eq!((wc.op_context, wc.op, wc.imm), (33, CompletionOp::RecvRdmaWithImm, Some(43)));
        let mut b = [0u8; 4];
        smr.read_at(16, &mut b).unwrap();
        assert_eq!(&b, b"imm!");
        assert!(s.cq().get_completion().unwrap().is_none(), "receives complete on the RCQ only");
        close(c, s);
    }

    fn operations_validate_before_posting() {
        let sp = peer();
        let (_smr, pdata) = server_region(&sp, Usage::READ_SRC | Usage::FLUSH_TYPE_VISIBILITY);
        let (c, s) = Pair::new().server_peer(&sp).server_pdata(pdata).connect();
        let remote = MrRemote::from_descriptor(c.private_data()).unwrap();
        let local = MrLocal::reg(c.peer(), AlignedBuf::new(64).unwrap(), Usage::READ_DST | Usage::SEND).unwrap();
        let refused = |r: rpma::Result<()>, want: Detail| {
            let e = r.unwrap_err();
            assert_eq!(e.code(), RPMA_E_INVAL, "{e}");
            assert_eq!(e.detail(), Some(&want), "{e}");
        };
        refused(c.read(&local, 0, &remote, 0, 8, Flags::empty(), 0), Detail::BadFlags { bits: 0 });
        refused(c.read(&local, 0, &remote, 0, 8, Flags::FENCE, 0), Detail::BadFlags { bits: Flags::FENCE.bits() });
        c.read(&local, 0, &remote, 0, 8, Flags::COMPLETION_ALWAYS | Flags::FENCE, 77).unwrap();
        let wc = c.cq().next_completion(T).unwrap();
        assert_eq!((wc.op_context, wc.status), (77, WcStatus::SUCCESS), "a fenced read");
        refused(
            c.read(&local, 60, &remote, 0, 8, Flags::COMPLETION_ALWAYS, 0),
            Detail::OutOfRange { what: Arg::Dst, offset: 60, len: 8, size: 64 },
        );
        refused(
            c.read(&local, 0, &remote, 8190, 8, Flags::COMPLETION_ALWAYS, 0),
            Detail::OutOfRange { what: Arg::Src, offset: 8190, len: 8, size: 8192 },
        );
        refused(
            c.read(&local, 0, &remote, 0, 1 << 32, Flags::COMPLETION_ALWAYS, 0),
            Detail::TooLong { what: Arg::Dst, len: 1 << 32, max: u32::MAX.into() },
        );
        refused(
            c.write(&remote, 0, &local, 0, 8, Flags::COMPLETION_ALWAYS, 0),
            Detail::UsageMissing { what: Arg::Src, missing: Usage::WRITE_SRC },
        );
        refused(
            c.atomic_write(&remote, 4, [0; 8], Flags::COMPLETION_ALWAYS, 0),
            Detail::Misaligned { what: Arg::Dst, value: 4, align: 8 },
        );
        refused(c.recv(&local, 0, 8, 0), Detail::UsageMissing { what: Arg::Dst, missing: Usage::RECV });
        let e = c.flush(&remote, 0, 8, FlushType::Persistent, Flags::COMPLETION_ALWAYS, 0).unwrap_err();
        assert_eq!(e.code(), RPMA_E_NOSUPP, "{e}");
        assert_eq!(e.detail(), Some(&Detail::PeerNotPmem), "{e}");
        let mut pcfg = PeerCfg::new();
        pcfg.set_direct_write_to_pmem(true);
        c.apply_remote_peer_cfg(&pcfg);
        let e = c.flush(&remote, 0, 8, FlushType::Persistent, Flags::COMPLETION_ALWAYS, 0).unwrap_err();
        let missing = Usage::FLUSH_TYPE_PERSISTENT;
        assert_eq!(e.detail(), Some(&Detail::UsageMissing { what: Arg::Dst, missing }), "{e}");
        let short_flush = c.flush(&remote, 8188, 4, FlushType::Visibility, Flags::COMPLETION_ALWAYS, 78);
        if c.peer().is_native_flush_supported() {
            // A native flush names its range exactly: 4 bytes at the end are fine.
            short_flush.unwrap();
            let wc = c.cq().next_completion(T).unwrap();
            assert_eq!((wc.op_context, wc.status), (78, WcStatus::SUCCESS), "a native 4-byte flush");
        } else {
            let what = Arg::Dst;
            refused(short_flush, Detail::OutOfRange { what, offset: 8188, len: 8, size: 8192 });
        }
        let e = c.compl_fd().unwrap_err();
        assert_eq!(e.code(), rpma::error::RPMA_E_NOT_SHARED_CHNL);
        assert!(c.cq().get_completion().unwrap().is_none());
        close(c, s);
    }

    fn regions_in_flight_stay_alive() {
        let sp = peer();
        let (smr, pdata) = server_region(&sp, Usage::READ_SRC);
        let (c, s) = Pair::new().server_peer(&sp).server_pdata(pdata).connect();
        let remote = MrRemote::from_descriptor(c.private_data()).unwrap();
        let local = MrLocal::reg(c.peer(), AlignedBuf::new(8192).unwrap(), Usage::READ_DST).unwrap();
        // Unsignaled reads keep the region held until a later signaled one completes.
        c.read(&local, 0, &remote, 0, 8192, Flags::COMPLETION_ON_ERROR, 1).unwrap();
        assert_eq!(local.in_flight(), 1);
        assert_eq!(local.write_at(0, b"x").unwrap_err().code(), RPMA_E_AGAIN);
        let local = match local.dereg() {
            Err(e) => {
                assert_eq!(e.error.code(), RPMA_E_AGAIN, "{}", e.error);
                e.mr
            }
            Ok(_) => panic!("deregistered a region with a read in flight"),
        };
        c.read(&local, 0, &remote, 0, 8192, Flags::COMPLETION_ALWAYS, 2).unwrap();
        drop(local); // the connection keeps the registration and buffer alive
        let wc = c.cq().next_completion(T).unwrap();
        assert_eq!((wc.op_context, wc.status), (2, WcStatus::SUCCESS));
        assert_eq!(c.pending_sends(), 0, "the unsignaled read was retired by the signaled one");
        drop(smr);
        close(c, s);
    }

    /// `Cq::wait` acknowledges completion events in batches
    /// (`rpma_sys::cq::ACK_BATCH`); the ones not acknowledged yet are
    /// acknowledged before the CQ is destroyed, which would otherwise block
    /// forever in `ibv_destroy_cq`. Waits on both sides of a batch, then
    /// the connection is dropped, within a bounded time.
    fn blocking_waits_across_the_ack_batch_then_drop() {
        let sp = peer();
        let (smr, pdata) = server_region(&sp, Usage::READ_SRC);
        let (c, s) = Pair::new().server_peer(&sp).server_pdata(pdata).connect();
        let remote = MrRemote::from_descriptor(c.private_data()).unwrap();
        let local = MrLocal::reg(c.peer(), AlignedBuf::new(8).unwrap(), Usage::READ_DST).unwrap();
        // Each read: wait for its completion event (the CQ is armed at
        // creation and re-armed by every wait), then take the completion.
        let n = u64::from(rpma_sys::cq::ACK_BATCH) + 3;
        for k in 0..n {
            c.read(&local, 0, &remote, 0, 8, Flags::COMPLETION_ALWAYS, k).unwrap();
            c.cq().wait_timeout(T).unwrap();
            let wc = c.cq().get_completion().unwrap().expect("a completion");
            assert_eq!((wc.op_context, wc.status), (k, WcStatus::SUCCESS));
        }
        println!("  {n} reads, each waited for with Cq::wait_timeout");
        // Drop everything on another thread: a hang in ibv_destroy_cq
        // (unacknowledged events) fails the test instead of stalling it.
        let (tx, rx) = std::sync::mpsc::channel();
        thread::spawn(move || {
            close(c, s);
            drop(local);
            drop(smr);
            tx.send(()).unwrap();
        });
        rx.recv_timeout(T).expect("closing and dropping the connection hung (unacknowledged CQ events?)");
    }

    /// Many threads wait with a bound on one CQ, one endpoint and one
    /// connection; one event wakes them all and one takes it. Every other
    /// waiter is back within its bound (a waiter that polled the fd and then
    /// read with a blocking call stayed blocked past it, for ever).
    fn bounded_waits_hold_with_many_waiters() {
        use std::sync::Arc;
        const WAITERS: usize = 6;
        const BOUND: Duration = Duration::from_millis(1500);
        // The bound plus scheduling slack on the VM's two vCPUs; a waiter
        // blocked in a read never comes back at all.
        const LATE: Duration = Duration::from_secs(6);
        /// Runs `wait` on `WAITERS` threads, `fire` once they wait; returns
        /// how many took the event; panics if one is late or hangs.
        fn race<T: Send + 'static>(
            what: &str,
            wait: impl Fn() -> Result<T, rpma::Error> + Send + Sync + 'static,
            fire: impl FnOnce(),
        ) -> usize {
            let wait = Arc::new(wait);
            let (tx, rx) = std::sync::mpsc::channel();
            for _ in 0..WAITERS {
                let (wait, tx) = (wait.clone(), tx.clone());
                thread::spawn(move || {
                    let t0 = std::time::Instant::now();
                    let got = wait();
                    let _ = tx.send((got.map(|_| ()), t0.elapsed()));
                });
            }
            thread::sleep(Duration::from_millis(200));
            fire();
            let mut took = 0;
            for _ in 0..WAITERS {
                let (got, waited) = rx.recv_timeout(LATE + BOUND).unwrap_or_else(|_| panic!("{what}: a waiter hung"));
                match got {
                    Ok(()) => took += 1,
                    Err(e) => assert!(matches!(e, rpma::Error::NoCompletion | rpma::Error::NoEvent), "{what}: {e}"),
                }
                assert!(waited < LATE, "{what}: a waiter came back after {waited:?} for a bound of {BOUND:?}");
            }
            took
        }
        let sp = peer();
        let (_smr, pdata) = server_region(&sp, Usage::READ_SRC);
        for round in 0..3u64 {
            let port = next_port();
            let ep = Arc::new(Ep::listen(&sp, &addr(), port).unwrap());
            // The endpoint: one connection request, many waiters.
            let e2 = ep.clone();
            let cp = peer();
            let accepted = Arc::new(std::sync::Mutex::new(Vec::new()));
            let (a2, pd) = (accepted.clone(), Arc::new(pdata.clone()));
            let mut client = None;
            // The waiter that takes the request accepts it at once.
            let took = race(
                "Ep::next_conn_req_timeout",
                move || {
                    let req = e2.next_conn_req_timeout(None, BOUND)?;
                    a2.lock().unwrap().push(req.connect(&pd)?);
                    Ok(())
                },
                || client = Some(ConnReq::new(&cp, &addr(), port, None).unwrap().connect(&[]).unwrap()),
            );
            assert_eq!(took, 1, "round {round}: the one request, taken once");
            let s = accepted.lock().unwrap().pop().unwrap();
            let c = client.unwrap();
            // The active side's event first: librdmacm sends the RTU that
            // establishes the passive side when it reads it.
            assert_eq!(c.next_event_timeout(T).unwrap(), ConnEvent::Established);
            assert_eq!(s.next_event_timeout(T).unwrap(), ConnEvent::Established);
            let (c, s) = (Arc::new(c), Arc::new(s));
            // The CQ: one signaled read, one completion event.
            let remote = MrRemote::from_descriptor(c.private_data()).unwrap();
            let local = MrLocal::reg(c.peer(), AlignedBuf::new(8).unwrap(), Usage::READ_DST).unwrap();
            let c2 = c.clone();
            let took = race(
                "Cq::wait_timeout",
                move || c2.cq().wait_timeout(BOUND),
                || {
                    c.read(&local, 0, &remote, 0, 8, Flags::COMPLETION_ALWAYS, round).unwrap();
                },
            );
            assert!(took <= 1, "round {round}: one event, taken at most once");
            assert_eq!(c.cq().next_completion(T).unwrap().op_context, round);
            // Cq::next_completion with a bound, many threads, one read.
            let c2 = c.clone();
            let took = race(
                "Cq::next_completion",
                move || c2.cq().next_completion(BOUND),
                || {
                    c.read(&local, 0, &remote, 0, 8, Flags::COMPLETION_ALWAYS, 100 + round).unwrap();
                },
            );
            assert_eq!(took, 1, "round {round}: the one completion, taken once");
            // The connection: the peer disconnects, one closing event.
            let c2 = c.clone();
            let took = race(
                "Conn::next_event_timeout",
                move || c2.next_event_timeout(BOUND),
                || {
                    s.disconnect().unwrap();
                },
            );
            assert_eq!(took, 1, "round {round}: the closing event, taken once");
            c.disconnect().unwrap();
            assert_eq!(s.next_event_timeout(T).unwrap(), ConnEvent::Closed);
            drop(local);
        }
    }

    /// RoCE v2 over an IPv6 GID: listen, connect, read, write and flush,
    /// and the teardown, on an IPv6 address of the device (the VM's
    /// fd00:2::1, or `RPMA_TEST_ADDR6`).
    fn ipv6_connection_reads_writes_flushes_and_closes() {
        let addr6 = match std::env::var("RPMA_TEST_ADDR6") {
            Ok(a) => a,
            Err(_) if rpma_harness::in_vm() => "fd00:2::1".to_string(),
            Err(_) => {
                println!("  not run here: no IPv6 address of the device is named (RPMA_TEST_ADDR6)");
                return;
            }
        };
        let ctx = rpma::device::get_ibv_context(&addr6, rpma::device::ContextType::Local).unwrap();
        let sp = rpma::Peer::new(&ctx).unwrap();
        let (smr, pdata) = server_region(&sp, Usage::READ_SRC | Usage::WRITE_DST | Usage::FLUSH_TYPE_VISIBILITY);
        let port = next_port();
        let ep = Ep::listen(&sp, &addr6, port).unwrap();
        let server = thread::spawn(move || {
            let s = ep.next_conn_req_timeout(None, T).unwrap().connect(&pdata).unwrap();
            assert_eq!(s.next_event_timeout(T).unwrap(), ConnEvent::Established);
            assert_eq!(s.next_event_timeout(T).unwrap(), ConnEvent::Closed);
            s.disconnect().unwrap();
        });
        let cctx = rpma::device::get_ibv_context(&addr6, rpma::device::ContextType::Remote).unwrap();
        let cp = rpma::Peer::new(&cctx).unwrap();
        let c = ConnReq::new(&cp, &addr6, port, None).unwrap().connect(&[]).unwrap();
        assert_eq!(c.next_event_timeout(T).unwrap(), ConnEvent::Established);
        let remote = MrRemote::from_descriptor(c.private_data()).unwrap();
        let dst = MrLocal::reg(&cp, AlignedBuf::new(64).unwrap(), Usage::READ_DST).unwrap();
        c.read(&dst, 0, &remote, 0, 64, Flags::COMPLETION_ALWAYS, 1).unwrap();
        assert!(c.cq().next_completion(T).unwrap().status.is_success());
        let mut got = [0u8; 64];
        dst.read_at(0, &mut got).unwrap();
        let want: Vec<u8> = (0..64u32).map(|i| (i * 7 % 251) as u8).collect();
        assert_eq!(got[..], want[..], "the server's pattern, over IPv6");
        let src = MrLocal::reg(&cp, AlignedBuf::new(8).unwrap(), Usage::WRITE_SRC).unwrap();
        src.write_at(0, b"over v6!").unwrap();
        c.write(&remote, 4096, &src, 0, 8, Flags::COMPLETION_ON_ERROR, 2).unwrap();
        c.flush(&remote, 4096, 8, FlushType::Visibility, Flags::COMPLETION_ALWAYS, 3).unwrap();
        let wc = c.cq().next_completion(T).unwrap();
        assert!(wc.status.is_success() && wc.op_context == 3, "{wc:?}");
        c.disconnect().unwrap();
        assert_eq!(c.next_event_timeout(T).unwrap(), ConnEvent::Closed);
        server.join().unwrap();
        let mut landed = [0u8; 8];
        smr.read_at(4096, &mut landed).unwrap();
        assert_eq!(&landed, b"over v6!");
        println!("  connected, read, wrote and flushed, closed over [{addr6}]:{port}");
    }

    /// A busy-polling loop on `get_completion`: `None` while nothing
    /// completed, then the read's completion once, with its bytes landed,
    /// then `None` again.
    fn busy_polling_sees_none_until_the_completion() {
        let sp = peer();
        let (smr, pdata) = server_region(&sp, Usage::READ_SRC);
        let (c, s) = Pair::new().server_peer(&sp).server_pdata(pdata).connect();
        let remote = MrRemote::from_descriptor(c.private_data()).unwrap();
        let local = MrLocal::reg(c.peer(), AlignedBuf::new(8).unwrap(), Usage::READ_DST).unwrap();
        assert!(c.cq().get_completion().unwrap().is_none(), "nothing posted yet");
        c.read(&local, 0, &remote, 0, 8, Flags::COMPLETION_ALWAYS, 77).unwrap();
        let t0 = std::time::Instant::now();
        let mut misses = 0u64;
        let wc = loop {
            if let Some(wc) = c.cq().get_completion().unwrap() {
                break wc;
            }
            assert!(t0.elapsed() < T, "no completion within {T:?}");
            misses += 1;
            std::hint::spin_loop();
        };
        assert_eq!((wc.op_context, wc.status), (77, WcStatus::SUCCESS));
        let mut got = [0u8; 8];
        local.read_at(0, &mut got).unwrap();
        let mut want = [0u8; 8];
        smr.read_at(0, &mut want).unwrap();
        assert_eq!(got, want, "the server's first bytes");
        assert!(c.cq().get_completion().unwrap().is_none(), "one completion, taken once");
        println!("  the read's completion after {misses} empty polls");
        close(c, s);
    }

    fn send_queue_overflow_is_reported() {
        let mut cfg = ConnCfg::new();
        cfg.set_sq_size(4);
        let sp = peer();
        let (smr, pdata) = server_region(&sp, Usage::READ_SRC);
        let (c, s) = Pair::new().server_peer(&sp).client_cfg(&cfg).server_pdata(pdata).connect();
        let remote = MrRemote::from_descriptor(c.private_data()).unwrap();
        let local = MrLocal::reg(c.peer(), AlignedBuf::new(64).unwrap(), Usage::READ_DST).unwrap();
        for i in 0..3 {
            c.read(&local, 0, &remote, 0, 8, Flags::COMPLETION_ON_ERROR, i).unwrap();
        }
        // The last slot is kept for a signaled operation, which retires the rest.
        let e = c.read(&local, 0, &remote, 0, 8, Flags::COMPLETION_ON_ERROR, 9).unwrap_err();
        assert_eq!(e.code(), RPMA_E_AGAIN, "{e}");
        assert_eq!(e.detail(), Some(&Detail::SignalNeeded), "{e}");
        c.read(&local, 0, &remote, 0, 8, Flags::COMPLETION_ALWAYS, 3).unwrap();
        let e = c.read(&local, 0, &remote, 0, 8, Flags::COMPLETION_ALWAYS, 9).unwrap_err();
        assert_eq!(e.code(), RPMA_E_AGAIN, "{e}");
        assert_eq!(e.detail(), Some(&Detail::QueueFull), "{e}");
        assert_eq!(c.cq().next_completion(T).unwrap().op_context, 3);
        assert_eq!(c.pending_sends(), 0);
        drop(smr);
        close(c, s);
    }

    /// A shared completion channel, and receives through an SRQ: checked,
    /// as operations, and under librpma's memory contract.
    fn shared_channel_and_srq() {
        let sp = peer();
        let mut scfg = SrqCfg::new();
        scfg.set_rcq_size(16);
        let srq = Srq::new(&sp, Some(&scfg)).unwrap();
        let smr = MrLocal::reg(&sp, AlignedBuf::new(64).unwrap(), Usage::RECV).unwrap();
        srq.recv(&smr, 0, 32, 51).unwrap();
        let mut srv_cfg = ConnCfg::new();
        srv_cfg.set_srq(Some(&srq));
        let mut cli_cfg = ConnCfg::new();
        cli_cfg.set_compl_channel(true);
        cli_cfg.set_rcq_size(4);
        let (c, s) = Pair::new().server_peer(&sp).client_cfg(&cli_cfg).server_cfg(srv_cfg).connect();
        assert!(s.rcq().is_none(), "the SRQ's RCQ is used");
        assert_eq!(s.recv(&smr, 0, 8, 0).unwrap_err().code(), RPMA_E_INVAL);
        assert_eq!(c.cq().wait().unwrap_err().code(), RPMA_E_SHARED_CHANNEL);
        let cmr = MrLocal::reg(c.peer(), AlignedBuf::new(64).unwrap(), Usage::SEND).unwrap();
        cmr.write_at(0, b"via srq").unwrap();
        c.send(&cmr, 0, 7, Flags::COMPLETION_ALWAYS, 52).unwrap();
        let (cq, is_rcq) = c.wait_timeout(T).unwrap();
        assert!(!is_rcq);
        assert_eq!(cq.get_completion().unwrap().expect("a completion").op_context, 52);
        let wc = srq.rcq().unwrap().next_completion(T).unwrap();
        assert_eq!((wc.op_context, wc.op, wc.byte_len), (51, CompletionOp::Recv, 7));
        // A receive as an operation: a list of one element (the SRQ takes
        // one SGE per receive; two are refused before posting).
        let two = [rpma::ops::Sg::new(&smr, 32, 16), rpma::ops::Sg::new(&smr, 48, 16)];
        assert_eq!(srq.post(rpma::ops::RecvSg::new(&two)).unwrap_err().code(), RPMA_E_INVAL);
        srq.post(rpma::ops::RecvSg::new(&two[..1]).op_context(53)).unwrap();
        c.send(&cmr, 0, 7, Flags::COMPLETION_ALWAYS, 54).unwrap();
        let (cq, _) = c.wait_timeout(T).unwrap();
        assert_eq!(cq.get_completion().unwrap().expect("a completion").op_context, 54);
        let wc = srq.rcq().unwrap().next_completion(T).unwrap();
        assert_eq!((wc.op_context, wc.op, wc.byte_len), (53, CompletionOp::Recv, 7));
        let mut b = [0u8; 7];
        smr.read_at(32, &mut b).unwrap();
        assert_eq!(&b, b"via srq");
        // Under librpma's memory contract (the C ABI's `rpma_srq_recv`):
        // nothing held, the op context back from the work request ID, a
        // wide one from the SRQ's book.
        for ctx in [55, u64::MAX] {
            // SAFETY: `smr` outlives the receive, reaped below.
            #[allow(unsafe_code)]
            unsafe { srq.post(rpma::ops::Unheld::new(rpma::ops::Recv::new(&smr, 0, 16).op_context(ctx))) }.unwrap();
            assert_eq!(smr.in_flight(), 0, "not held");
            c.send(&cmr, 0, 7, Flags::COMPLETION_ALWAYS, 56).unwrap();
            let (cq, _) = c.wait_timeout(T).unwrap();
            assert_eq!(cq.get_completion().unwrap().expect("a completion").op_context, 56);
            let wc = srq.rcq().unwrap().next_completion(T).unwrap();
            assert_eq!((wc.op_context, wc.op, wc.byte_len), (ctx, CompletionOp::Recv, 7));
        }
        close(c, s);
    }

    /// The device enforces protection domains: an rkey of a region registered
    /// on another PD than the target connection's is refused remotely, and the
    /// bytes stay as they were.
    fn rkey_of_another_protection_domain_is_refused_by_the_device() {
        let other = peer();
        let (smr, pdata) = server_region(&other, Usage::READ_SRC | Usage::WRITE_DST);
        let (c, s) = Pair::new().server_pdata(pdata).connect(); // server conn on a fresh PD
        let remote = MrRemote::from_descriptor(c.private_data()).unwrap();
        let local = MrLocal::reg(c.peer(), AlignedBuf::new(64).unwrap(), Usage::WRITE_SRC).unwrap();
        local.write_at(0, &[0xee; 64]).unwrap();
        c.write(&remote, 0, &local, 0, 64, Flags::COMPLETION_ALWAYS, 7).unwrap();
        let wc = c.cq().next_completion(T).unwrap();
        assert_eq!((wc.op_context, wc.status), (7, WcStatus::REM_ACCESS_ERR));
        let mut b = [0u8; 64];
        smr.read_at(0, &mut b).unwrap();
        let want: Vec<u8> = (0..64u32).map(|i| (i * 7 % 251) as u8).collect();
        assert_eq!(&b[..], &want[..], "the target memory is unchanged");
        // The QP is in error now: the CM still closes it cleanly.
        drop(c);
        drop(s);
    }

    fn srq_of_another_peer_is_refused() {
        let srq = Srq::new(&peer(), None).unwrap();
        let mut cfg = ConnCfg::new();
        cfg.set_srq(Some(&srq));
        let e = ConnReq::new(&peer(), &addr(), next_port(), Some(&cfg)).unwrap_err();
        assert_eq!(e.code(), RPMA_E_INVAL);
        assert_eq!(e.detail(), Some(&Detail::Foreign { what: Arg::Srq }), "{e}");
    }

    fn nonblocking_fds_report_no_event_and_no_completion() {
        let sp = peer();
        let ep = Ep::listen(&sp, &addr(), next_port()).unwrap();
        rpma::utils::set_nonblocking(&ep, true).unwrap();
        assert_eq!(ep.next_conn_req(None).unwrap_err().code(), RPMA_E_NO_EVENT);
        drop(ep);
        let (c, s) = Pair::new().connect();
        rpma::utils::set_nonblocking(&c, true).unwrap();
        assert_eq!(c.next_event().unwrap_err().code(), RPMA_E_NO_EVENT);
        rpma::utils::set_nonblocking(c.cq(), true).unwrap();
        assert_eq!(c.cq().wait().unwrap_err().code(), rpma::error::RPMA_E_NO_COMPLETION);
        rpma::utils::set_nonblocking(&c, false).unwrap();
        close(c, s);
    }

    fn unheld_read_into_borrowed_memory() {
        let sp = peer();
        let (_smr, pdata) = server_region(&sp, Usage::READ_SRC);
        let (c, s) = Pair::new().server_peer(&sp).server_pdata(pdata).connect();
        let remote = MrRemote::from_descriptor(c.private_data()).unwrap();
        let mut backing = vec![0u8; 128];
        {
            // SAFETY: `backing` outlives the region, which is deregistered (and
            // checked to succeed) below before `backing` is read or dropped.
            #[allow(unsafe_code)]
            let raw = unsafe { rpma::RawMemory::new(backing.as_mut_ptr(), backing.len()) };
            let local = MrLocal::reg(c.peer(), raw, Usage::READ_DST).unwrap();
            // SAFETY: `local` and `backing` outlive the read: its completion is
            // reaped below, before both go out of scope.
            #[allow(unsafe_code)]
            unsafe { c.post(rpma::ops::Unheld::new(Read::new(&local, 0, &remote, 64, 128).op_context(5))) }.unwrap();
            assert_eq!(local.in_flight(), 0, "an unheld read holds nothing");
            let wc = c.cq().next_completion(T).unwrap();
            assert_eq!((wc.op_context, wc.status), (5, WcStatus::SUCCESS));
            local.dereg().unwrap();
        }
        let want: Vec<u8> = (64..192u32).map(|i| (i * 7 % 251) as u8).collect();
        assert_eq!(backing, want);
        close(c, s);
    }

    /// 0-byte operations post no scatter/gather element (`num_sge` 0, as
    /// librpma's do) and complete, even at the very end of a region, held,
    /// unheld, chained and as empty lists (no region at all) alike; no
    /// byte moves.
    fn zero_byte_operations_complete() {
        let sp = peer();
        let (smr, pdata) = server_region(&sp, Usage::READ_SRC | Usage::WRITE_DST);
        let (c, s) = Pair::new().server_peer(&sp).server_pdata(pdata).connect();
        let remote = MrRemote::from_descriptor(c.private_data()).unwrap();
        let local = MrLocal::reg(c.peer(), AlignedBuf::new(64).unwrap(), Usage::READ_DST | Usage::WRITE_SRC).unwrap();
        local.write_at(0, &[0xa5; 64]).unwrap();
        let end = remote.size();
        let expect = |ctx: u64, op: CompletionOp| {
            let wc = c.cq().next_completion(T).unwrap();
            assert_eq!((wc.op_context, wc.op, wc.status, wc.byte_len), (ctx, op, WcStatus::SUCCESS, 0));
        };
        c.read(&local, 64, &remote, end, 0, Flags::COMPLETION_ALWAYS, 1).unwrap();
        expect(1, CompletionOp::Read);
        c.write(&remote, end, &local, 64, 0, Flags::COMPLETION_ALWAYS, 2).unwrap();
        expect(2, CompletionOp::Write);
        // SAFETY: `local` outlives both operations, whose completions are
        // reaped right after each.
        #[allow(unsafe_code)]
        unsafe {
            c.post(rpma::ops::Unheld::new(Read::new(&local, 0, &remote, 0, 0).op_context(3))).unwrap();
            expect(3, CompletionOp::Read);
            c.post(rpma::ops::Unheld::new(Write::new(&remote, 0, &local, 0, 0).op_context(4))).unwrap();
            expect(4, CompletionOp::Write);
        }
        // Empty lists: librpma's NULL forms, no region at all.
        let none: &[Sg<'_, AlignedBuf>] = &[];
        c.post(ReadSg::new(none, &remote, end).op_context(7)).unwrap();
        expect(7, CompletionOp::Read);
        c.post(WriteSg::new(&remote, end, none).op_context(8)).unwrap();
        expect(8, CompletionOp::Write);
        let mut ch = c.chain();
        ch.push(Write::new(&remote, 0, &local, 0, 0).flags(Flags::COMPLETION_ON_ERROR).op_context(5)).unwrap();
        ch.push(Read::new(&local, 0, &remote, 8, 0).flags(Flags::COMPLETION_ALWAYS).op_context(6)).unwrap();
        ch.post().unwrap();
        expect(6, CompletionOp::Read);
        assert_eq!(c.pending_sends(), 0);
        let mut b = [0u8; 64];
        local.read_at(0, &mut b).unwrap();
        assert_eq!(b, [0xa5; 64], "no byte read");
        let mut r = [0u8; 8];
        smr.read_at(0, &mut r).unwrap();
        let want: Vec<u8> = (0..8u32).map(|i| (i * 7 % 251) as u8).collect();
        assert_eq!(&r[..], &want[..], "no byte written");
        close(c, s);
    }

    /// Unheld posts record nothing: their op_context (up to 56 bits) and
    /// kind come back from the work request ID, interleaved with tracked
    /// operations (signaled and not), and the tracked ones still retire in
    /// order.
    fn unheld_operations_mixed_with_tracked_ones() {
        let sp = peer();
        let (_smr, pdata) = server_region(&sp, Usage::READ_SRC | Usage::WRITE_DST);
        let (c, s) = Pair::new().server_peer(&sp).server_pdata(pdata).connect();
        let remote = MrRemote::from_descriptor(c.private_data()).unwrap();
        let local = MrLocal::reg(c.peer(), AlignedBuf::new(256).unwrap(), Usage::READ_DST | Usage::WRITE_SRC).unwrap();
        let big = (1u64 << 56) - 1;
        // SAFETY: `local` is neither dropped nor touched until every completion
        // below has been reaped.
        #[allow(unsafe_code)]
        unsafe {
            c.write(&remote, 512, &local, 0, 16, Flags::COMPLETION_ON_ERROR, 1).unwrap();
            c.post(rpma::ops::Unheld::new(Read::new(&local, 64, &remote, 0, 16).op_context(big))).unwrap();
            c.post(rpma::ops::Unheld::new(
                Write::new(&remote, 600, &local, 0, 16).flags(Flags::COMPLETION_ON_ERROR).op_context(3),
            ))
            .unwrap();
            c.read(&local, 128, &remote, 16, 16, Flags::COMPLETION_ALWAYS, 4).unwrap();
            c.post(rpma::ops::Unheld::new(Write::new(&remote, 700, &local, 0, 16).op_context(0))).unwrap();
        }
        let mut got = Vec::new();
        for _ in 0..3 {
            let wc = c.cq().next_completion(T).unwrap();
            assert_eq!(wc.status, WcStatus::SUCCESS);
            got.push((wc.op_context, wc.op));
        }
        assert_eq!(got, [(big, CompletionOp::Read), (4, CompletionOp::Read), (0, CompletionOp::Write)]);
        assert_eq!(c.pending_sends(), 0, "the tracked read retired the unsignaled tracked write before it");
        assert_eq!(local.in_flight(), 0);
        assert!(c.cq().get_completion().unwrap().is_none(), "nothing else completes");
        close(c, s);
    }

    /// `ops::Unheld` posts (librpma's contract, the C ABI's): checked as
    /// held ones, nothing recorded or held while the op context fits 56 bits;
    /// a wider one is recorded (not held), and so is every later unheld post
    /// of the connection, so a signaled one retires an unsignaled wide one.
    fn unheld_posts_record_only_wide_contexts() {
        let sp = peer();
        let (_smr, pdata) = server_region(&sp, Usage::READ_SRC | Usage::WRITE_DST);
        let (c, s) = Pair::new().server_peer(&sp).server_pdata(pdata).connect();
        let remote = MrRemote::from_descriptor(c.private_data()).unwrap();
        let local = MrLocal::reg(c.peer(), AlignedBuf::new(256).unwrap(), Usage::READ_DST | Usage::WRITE_SRC).unwrap();
        let wide = 1u64 << 56;
        let quiet = Flags::COMPLETION_ON_ERROR;
        // SAFETY: `local` is neither dropped nor touched until every
        // completion below has been reaped.
        #[allow(unsafe_code)]
        unsafe {
            // Checked as `post`: the remote range is refused before posting.
            let e = c.post(rpma::ops::Unheld::new(Read::new(&local, 0, &remote, 8190, 16))).unwrap_err();
            assert_eq!(e.code(), RPMA_E_INVAL, "{e}");
            c.post(rpma::ops::Unheld::new(Write::new(&remote, 512, &local, 0, 16).flags(quiet).op_context(1))).unwrap();
            c.post(rpma::ops::Unheld::new(Read::new(&local, 64, &remote, 0, 16).op_context(wide - 1))).unwrap();
            assert_eq!((c.pending_sends(), local.in_flight()), (0, 0), "nothing recorded or held");
            assert_eq!(c.cq().next_completion(T).unwrap().op_context, wide - 1);
            c.post(rpma::ops::Unheld::new(Write::new(&remote, 600, &local, 0, 16).flags(quiet).op_context(wide)))
                .unwrap();
            assert_eq!((c.pending_sends(), local.in_flight()), (1, 0), "the wide one is recorded, not held");
            c.post(rpma::ops::Unheld::new(Read::new(&local, 128, &remote, 16, 16).op_context(7))).unwrap();
            assert_eq!(c.pending_sends(), 2, "and the ones after it");
        }
        let wc = c.cq().next_completion(T).unwrap();
        assert_eq!((wc.status, wc.op_context, wc.op), (WcStatus::SUCCESS, 7, CompletionOp::Read));
        assert_eq!(c.pending_sends(), 0, "the signaled read retired the wide write");
        assert!(c.cq().get_completion().unwrap().is_none(), "nothing else completes");
        close(c, s);
    }

    /// A send that finds no receive posted waits the receiver's RNR NAK timer
    /// before it is retried: rpma's default (0.64 ms) against rdma_cm's and
    /// librpma's 655 ms.
    fn rnr_timer_bounds_the_stall_of_a_late_receive() {
        let mut took_by_code = Vec::new();
        for code in [12u8, 0] {
            let sp = peer();
            let mut scfg = ConnCfg::new();
            scfg.set_min_rnr_timer(code).unwrap();
            let (c, s) = Pair::new().server_peer(&sp).server_cfg(scfg).connect();
            assert_eq!(s.retry_budget().unwrap().min_rnr_timer, code);
            assert_eq!(c.retry_budget().unwrap().min_rnr_timer, 12, "the client's default");
            let msg = MrLocal::reg(c.peer(), AlignedBuf::new(8).unwrap(), Usage::SEND).unwrap();
            let rcv = MrLocal::reg(&sp, AlignedBuf::new(8).unwrap(), Usage::RECV).unwrap();
            let naks = || rnr_naks_sent(&sp.device_name());
            let before = naks();
            c.send(&msg, 0, 8, Flags::COMPLETION_ALWAYS, 1).unwrap();
            // The send has met the empty receive queue once the receiver has
            // answered it with an RNR NAK (the device's own counter).
            let t = std::time::Instant::now();
            while naks() == before {
                assert!(t.elapsed() < T, "no RNR NAK was sent for the early send");
                thread::yield_now();
            }
            let t0 = std::time::Instant::now();
            s.recv(&rcv, 0, 8, 2).unwrap();
            let wc = c.cq().next_completion(T).unwrap();
            let took = t0.elapsed();
            assert_eq!(wc.status, WcStatus::SUCCESS);
            assert_eq!(s.cq().next_completion(T).unwrap().op_context, 2);
            println!("  RNR timer code {code}: the send completed {took:.1?} after the receive was posted");
            took_by_code.push(took);
            drop((msg, rcv));
            close(c, s);
        }
        // A timer's wait is a lower bound however slow the emulator is; the
        // 0.64 ms timer's run is compared with it, not with a wall clock.
        let (fast, slow) = (took_by_code[0], took_by_code[1]);
        assert!(slow >= Duration::from_millis(600), "{slow:?}: rdma_cm's 655 ms timer did not show");
        assert!(fast + Duration::from_millis(300) < slow, "code 12 took {fast:?}, code 0 {slow:?}");
    }

    /// The server polls its region with `read_volatile_at` until the client's
    /// RDMA write has landed (no message, no completion on the server side):
    /// every byte checked. A write's bytes may land in any order (measured:
    /// rxe on the 7.x kernel placed the last byte of a 64-byte write before
    /// the first half), so the poll waits for the whole record, not for its
    /// last byte.
    fn polling_for_a_remote_write() {
        let sp = peer();
        let (smr, pdata) = server_region(&sp, Usage::READ_SRC | Usage::WRITE_DST);
        let (c, s) = Pair::new().server_peer(&sp).server_pdata(pdata).connect();
        let remote = MrRemote::from_descriptor(c.private_data()).unwrap();
        let src = MrLocal::reg(c.peer(), AlignedBuf::new(64).unwrap(), Usage::WRITE_SRC).unwrap();
        for k in 1..=20u8 {
            let rec = [k; 64];
            src.write_at(0, &rec).unwrap();
            c.write(&remote, 4096, &src, 0, 64, Flags::COMPLETION_ALWAYS, k as u64).unwrap();
            let t0 = std::time::Instant::now();
            let mut got = [0u8; 64];
            loop {
                smr.read_volatile_at(4096, &mut got).unwrap();
                if got == rec {
                    break;
                }
                assert!(t0.elapsed() < T, "write {k} never landed whole: {got:?}");
            }
            assert_eq!(c.cq().next_completion(T).unwrap().status, WcStatus::SUCCESS);
        }
        assert_eq!(smr.read_volatile_at(8190, &mut [0u8; 3]).unwrap_err().code(), RPMA_E_INVAL);
        close(c, s);
    }
});
