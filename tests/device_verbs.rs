//! Device tests of the verbs boundary (`rpma-sys` handles) on a real RDMA
//! device: every handle is created on the device and released by Drop.

use rpma_harness::{addr, device_tests, in_vm, next_port};
use rpma_sys::cm::{AddrInfo, CmId, EventChannel};
use rpma_sys::cq::{CompChannel, Cq, Wc};
use rpma_sys::device::{Context, DeviceList};
use rpma_sys::gate::Bound;
use rpma_sys::mr::Mr;
use rpma_sys::mw::{Mw, MwType};
use rpma_sys::pd::Pd;
use rpma_sys::qp::{Qp, QpInit, SendOps, QP_EX_WITH_RDMA_READ, QP_EX_WITH_RDMA_WRITE, QP_EX_WITH_SEND};
use rpma_sys::srq::Srq;
use rpma_sys::wr::{Wr, WrFlags};

/// A QP of 4 + 4 work requests of one element each on `cq`.
fn small_qp(cq: &Cq, max_inline_data: u32) -> QpInit<'_> {
    QpInit {
        send_cq: cq,
        recv_cq: cq,
        srq: None,
        max_send_wr: 4,
        max_recv_wr: 4,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data,
        send_ops_flags: 0,
    }
}

fn open() -> Context {
    let list = DeviceList::new().expect("ibv_get_device_list");
    assert!(!list.is_empty(), "no RDMA device");
    let want = std::env::var("RPMA_TEST_DEVICE").ok();
    let i = (0..list.len()).find(|&i| want.is_none() || list.name(i) == want).expect("the test device is listed");
    list.open(i).expect("ibv_open_device")
}

device_tests!({
    fn device_list_and_context() {
        let list = DeviceList::new().unwrap();
        let names: Vec<String> = (0..list.len()).filter_map(|i| list.name(i)).collect();
        println!("  devices: {names:?}");
        assert!(list.name(list.len()).is_none());
        assert_eq!(list.open(list.len()).unwrap_err().raw_os_error(), Some(libc::EINVAL));
        let ctx = list.open(0).unwrap();
        drop(list); // the context outlives the list
        assert!(!ctx.device_name().is_empty());
        let caps = ctx.query_caps().unwrap();
        assert!(caps.max_mr > 0 && caps.max_qp_wr > 0 && caps.max_cqe > 0);
        if in_vm() {
            assert_eq!(
                caps.device_cap_flags & 0xffff_ffff,
                0x0122_3c76,
                "rxe device_cap_flags: {:#x}",
                caps.device_cap_flags
            );
            // rxe: IBA 1.5 flush and atomic write from Linux 6.2 on; ODP as measured.
            let iba15 = rpma_harness::rxe_iba15();
            assert_eq!((caps.native_flush, caps.native_atomic_write), (iba15, iba15), "{caps:?}");
            match rpma_harness::expect_odp() {
                Some(odp) => assert_eq!(caps.odp, odp, "{caps:?}"),
                None => println!("  ODP not asserted: kernel {:?} was not measured", rpma_harness::kernel_version()),
            }
        }
    }

    fn pd_and_mr_with_iova() {
        let ctx = open();
        let pd = Pd::alloc(&ctx).unwrap();
        let page = rpma_sys::page_size();
        let mut backing = vec![0u8; 8192 + page];
        let skip = backing.as_ptr().align_offset(page);
        let buf = &mut backing[skip..skip + 8192];
        // SAFETY: `buf` outlives the region (dropped after it) and is not moved.
        let mr = unsafe { Mr::reg(&pd, buf.as_mut_ptr(), buf.len(), 0x7) }.unwrap();
        assert_eq!(mr.addr(), buf.as_ptr() as u64);
        assert_eq!(mr.length(), 8192);
        assert_eq!(mr.access(), 0x7);
        assert_ne!(mr.rkey(), 0);
        mr.dereg().map_err(|(_, e)| e).unwrap();
        // Zero-based addressing: the device sees iova 0 as the start. The iova
        // must have the same offset within a page as the address (uverbs rule).
        // SAFETY: as above.
        let z = unsafe { Mr::reg_iova(&pd, buf.as_mut_ptr(), buf.len(), 0, 0x7) }.unwrap();
        assert_eq!((z.device_addr(), z.addr(), z.length()), (0, buf.as_ptr() as u64, 8192));
        drop(z);
        // SAFETY: as above.
        let e = unsafe { Mr::reg_iova(&pd, buf.as_mut_ptr(), buf.len(), 8, 0x7) }.unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EINVAL), "iova 8 vs page-aligned address: {e}");
        // Registering with an invalid access combination fails with the errno.
        // SAFETY: as above.
        let e = unsafe { Mr::reg(&pd, buf.as_mut_ptr(), buf.len(), 0x2) }.unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EINVAL), "REMOTE_WRITE without LOCAL_WRITE: {e}");
    }

    fn comp_channel_and_cq() {
        let ctx = open();
        let ch = CompChannel::new(&ctx).unwrap();
        assert!(ch.fd() >= 0);
        let cq = Cq::new(&ctx, 10, Some(&ch)).unwrap();
        assert!(cq.cqe() >= 10);
        cq.req_notify(false).unwrap();
        let mut wc = [Wc::default(); 4];
        assert_eq!(cq.poll(&mut wc).unwrap(), 0);
        // Non-blocking channel with nothing pending: EAGAIN, no hang.
        // SAFETY: fcntl on an fd we own through `ch`.
        unsafe {
            let fl = libc::fcntl(ch.fd(), libc::F_GETFL);
            libc::fcntl(ch.fd(), libc::F_SETFL, fl | libc::O_NONBLOCK);
        }
        assert_eq!(ch.get_event(Bound::Never).unwrap_err().raw_os_error(), Some(libc::EAGAIN));
        // A bounded read of a quiet channel: nothing, in time.
        let t0 = std::time::Instant::now();
        assert!(ch.get_event(Bound::after(std::time::Duration::from_millis(50))).unwrap().is_none());
        assert!(t0.elapsed() < std::time::Duration::from_secs(5));
        let e = Cq::new(&ctx, u32::MAX, None).unwrap_err();
        assert!(e.raw_os_error().is_some(), "{e}");
    }

    fn extended_cq() {
        let ctx = open();
        match Cq::new_ex(&ctx, 16, None, 0) {
            Ok(cq) => {
                assert!(cq.is_ex());
                let mut wc = [Wc::default(); 2];
                assert_eq!(cq.poll(&mut wc).unwrap(), 0);
            }
            Err(e) => panic!("ibv_create_cq_ex: {e}"),
        }
    }

    fn qp_srq_and_qp_ex() {
        let ctx = open();
        let pd = Pd::alloc(&ctx).unwrap();
        let cq = Cq::new(&ctx, 16, None).unwrap();
        let srq = Srq::new(&pd, 16, 1).unwrap();
        let init = QpInit {
            send_cq: &cq,
            recv_cq: &cq,
            srq: None,
            max_send_wr: 10,
            max_recv_wr: 10,
            max_send_sge: 1,
            max_recv_sge: 1,
            max_inline_data: 8,
            send_ops_flags: 0,
        };
        let qp = Qp::new(&pd, &init).unwrap();
        assert_ne!(qp.qp_num(), 0);
        let granted = qp.query_caps().unwrap();
        assert!(granted.max_send_wr >= 10 && granted.max_recv_wr >= 10 && granted.max_inline_data >= 8, "{granted:?}");
        assert!(qp.ex().is_none(), "no send ops requested");
        let with_srq = Qp::new(&pd, &QpInit { srq: Some(&srq), ..init.clone() }).unwrap();
        assert_ne!(with_srq.qp_num(), qp.qp_num());
        let ops = QP_EX_WITH_RDMA_WRITE | QP_EX_WITH_RDMA_READ | QP_EX_WITH_SEND;
        let qpx = Qp::new(&pd, &QpInit { send_ops_flags: ops, ..init.clone() }).unwrap();
        let mut ex = qpx.ex().expect("qp_ex");
        let caps = ctx.query_caps().unwrap();
        assert!(!ex.has_atomic_write(), "not requested at creation");
        assert!(!ex.has_flush());
        // The shims refuse instead of calling a missing provider op.
        let flags = WrFlags { wr_id: 1, signaled: true, fence: false };
        let e = ex.post_native(1, &Wr::AtomicWrite { flags, rkey: 0, remote_addr: 0, value: [0; 8] }).unwrap_err();
        assert_eq!((e.error.raw_os_error(), e.maybe_queued), (Some(libc::EOPNOTSUPP), false));
        let flush = Wr::Flush { flags, rkey: 0, remote_addr: 0, len: 8, ptype: rpma_sys::qp::FLUSH_GLOBAL };
        let e = ex.post_native(1, &flush).unwrap_err();
        assert_eq!((e.error.raw_os_error(), e.maybe_queued), (Some(libc::EOPNOTSUPP), false));
        println!("  native atomic write {}, native flush {}", caps.native_atomic_write, caps.native_flush);
        // Too deep a queue is refused with the errno.
        let e = Qp::new(&pd, &QpInit { max_send_wr: u32::MAX, ..init }).unwrap_err();
        assert!(e.raw_os_error().is_some(), "{e}");
    }

    /// A post the provider refuses without naming the request may still
    /// have been queued: rxe's provider writes the request into the queue it
    /// shares with the kernel, then rings the doorbell; on a QP that is not
    /// ready to send (RESET here) the kernel refuses the doorbell and the
    /// post fails with `bad_wr` NULL. rpma-sys reports that as
    /// `maybe_queued`, so the layers above keep the request's memory held.
    fn a_refused_doorbell_is_reported_as_maybe_queued() {
        let ctx = open();
        let pd = Pd::alloc(&ctx).unwrap();
        let cq = Cq::new(&ctx, 16, None).unwrap();
        let qp = Qp::new(&pd, &small_qp(&cq, 0)).unwrap(); // in RESET: never connected
        let wr = rpma_sys::wr::SendWr {
            wr_id: 1,
            op: rpma_sys::wr::SendOp::Write,
            sge: None, // 0 bytes: no memory for the device to reach
            remote_addr: 0,
            rkey: 0,
            signaled: true,
            fence: false,
            inline: false,
        };
        // SAFETY: the request names no local memory.
        #[allow(unsafe_code)]
        let mut built = rpma_sys::wr::BuiltSend::ZERO;
        wr.build_in(&mut built);
        let r = unsafe { qp.post_send(&mut built, wr.wr_id) };
        println!("  post_send on a RESET QP: {:?}", r.as_ref().map_err(|e| (e.error.raw_os_error(), e.maybe_queued)));
        if in_vm() {
            let e = r.expect_err("rxe refuses the doorbell of a QP that is not ready to send");
            assert_eq!(e.error.raw_os_error(), Some(libc::EINVAL));
            assert!(e.maybe_queued, "rxe wrote the queue before the doorbell and named no refused request");
        }
    }

    /// The send-op probe asks the library, whatever the device says: rdma-core
    /// before 45 has no IBV_QP_EX_WITH_FLUSH and must refuse it (the case of a
    /// 6.12 kernel under Debian 12's userland), and a probed op is one a QP
    /// created with it really has.
    fn send_op_probe_asks_the_library() {
        let ctx = open();
        let pd = Pd::alloc(&ctx).unwrap();
        let lib = SendOps::probe(&pd, true, true);
        let release = rpma_harness::rdma_core_release();
        println!(
            "  rdma-core {release:?}: libibverbs + provider accept atomic write {}, flush {}",
            lib.atomic_write, lib.flush
        );
        if release.is_some_and(|r| r < 45) {
            assert!(!lib.flush, "libibverbs before rdma-core 45 cannot post RDMA FLUSH");
        }
        assert_eq!(SendOps::probe(&pd, false, false), SendOps::default(), "nothing asked, nothing probed");
        let cq = Cq::new(&ctx, 4, None).unwrap();
        let init = QpInit {
            send_cq: &cq,
            recv_cq: &cq,
            srq: None,
            max_send_wr: 2,
            max_recv_wr: 2,
            max_send_sge: 1,
            max_recv_sge: 1,
            max_inline_data: 8,
            send_ops_flags: lib.qp_flags(),
        };
        if lib.qp_flags() != 0 {
            let qp = Qp::new(&pd, &init).expect("a probed op creates");
            let ex = qp.ex().expect("qp_ex");
            assert_eq!((ex.has_atomic_write(), ex.has_flush()), (lib.atomic_write, lib.flush));
        }
        // The flag the library refused makes the QP fail, as the probe said.
        if !lib.flush {
            let e = Qp::new(
                &pd,
                &QpInit { send_ops_flags: SendOps { atomic_write: false, flush: true }.qp_flags(), ..init },
            );
            assert!(e.is_err() || !e.unwrap().ex().is_some_and(|x| x.has_flush()));
        }
    }

    fn memory_windows() {
        let ctx = open();
        let caps = ctx.query_caps().unwrap();
        let pd = Pd::alloc(&ctx).unwrap();
        for (ty, supported) in [(MwType::Type1, caps.mw_type1()), (MwType::Type2, caps.mw_type2())] {
            match Mw::alloc(&pd, ty) {
                Ok(mw) => {
                    assert!(supported, "{ty:?} allocated though not advertised");
                    assert_eq!(mw.mw_type(), ty);
                    println!("  {ty:?} rkey {:#x}", mw.rkey());
                }
                Err(e) => assert!(!supported, "{ty:?} advertised but failed: {e}"),
            }
        }
    }

    fn cm_id_listen_and_qp_on_id() {
        let ch = EventChannel::new().unwrap();
        assert!(ch.fd() >= 0);
        let p = next_port().to_string();
        let ai = AddrInfo::new(&addr(), Some(&p), true).unwrap();
        let mut listener = CmId::new(Some(&ch)).unwrap();
        listener.bind_addr(&ai).unwrap();
        listener.listen(0).unwrap();
        // A second listener on the same port is refused with the errno.
        let mut other = CmId::new(None).unwrap();
        assert_eq!(other.bind_addr(&ai).unwrap_err().raw_os_error(), Some(libc::EADDRINUSE));

        // An active-side ID resolved to the listener gets a device and a QP.
        let dst = AddrInfo::new(&addr(), Some(&p), false).unwrap();
        let mut id = CmId::new(None).unwrap();
        id.resolve_addr(&dst, 1000).unwrap();
        id.resolve_route(1000).unwrap();
        let ctx = CmId::new(None)
            .and_then(|mut l| {
                l.bind_addr(&AddrInfo::new(&addr(), None, true)?)?;
                l.into_context()
            })
            .unwrap();
        assert!(id.is_on(&ctx), "the resolved ID is on the address's device");
        let pd = Pd::alloc(&ctx).unwrap();
        let cq = Cq::new(&ctx, 8, None).unwrap();
        let init = small_qp(&cq, 8);
        let n = id.create_qp(&pd, &init).unwrap().qp_num();
        assert_ne!(n, 0);
        assert_eq!(id.create_qp(&pd, &init).unwrap_err().raw_os_error(), Some(libc::EEXIST));
        drop(id); // QP destroyed before the ID
    }

    fn addr_info_rejects_bad_input() {
        assert_eq!(AddrInfo::new("a\0b", None, true).err().and_then(|e| e.raw_os_error()), Some(libc::EINVAL));
        assert!(AddrInfo::new("not-an-address.invalid", None, true).is_err());
    }
});
