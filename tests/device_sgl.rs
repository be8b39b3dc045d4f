//! Device tests of scatter-gather lists and inline data on a real RDMA
//! device: both sides in this process, over rxe0 in the harness VM when the
//! host has no device.

use rpma::error::{Arg, Detail, RPMA_E_INVAL};
use rpma::ops::Sg;
use rpma::ops::{ReadSg, RecvSg, SendInline, SendSg, WriteInline, WriteSg};
use rpma::{AlignedBuf, CompletionOp, ConnCfg, Flags, MrLocal, MrRemote, Usage, WcStatus};
mod common;
use common::{close, peer, server_region, Pair, T};
use rpma_harness::device_tests;

/// The typed cause of an `RPMA_E_INVAL` refusal.
fn refused(r: rpma::Result<()>) -> Detail {
    let e = r.unwrap_err();
    assert_eq!(e.code(), RPMA_E_INVAL, "{e}");
    e.detail().cloned().unwrap_or_else(|| panic!("no typed detail: {e}"))
}

fn region(p: &rpma::Peer, len: usize, usage: Usage, fill: u8) -> MrLocal<AlignedBuf> {
    let mr = MrLocal::reg(p, AlignedBuf::new(len).unwrap(), usage).unwrap();
    mr.write_at(0, &vec![fill; len]).unwrap();
    mr
}

fn sg_cfg(send: u32, recv: u32) -> ConnCfg {
    let mut cfg = ConnCfg::new();
    cfg.set_max_send_sge(send).unwrap();
    cfg.set_max_recv_sge(recv).unwrap();
    cfg
}

device_tests!({
    fn granted_caps_are_reported() {
        let (c, s) = Pair::new().connect();
        println!(
            "  default ConnCfg (sge 1/1, inline 8): granted max_inline_data {}, max_send_sge {}, max_recv_sge {}",
            c.max_inline_data(),
            c.max_send_sge(),
            c.max_recv_sge()
        );
        assert!(c.max_inline_data() >= 8 && c.max_send_sge() >= 1 && c.max_recv_sge() >= 1);
        close(c, s);
        let mut cfg = sg_cfg(4, 3);
        cfg.set_max_inline_data(64);
        let (c, s) = Pair::new().client_cfg(&cfg).connect();
        println!(
            "  ConnCfg sge 4/3, inline 64: granted max_inline_data {}, max_send_sge {}, max_recv_sge {}",
            c.max_inline_data(),
            c.max_send_sge(),
            c.max_recv_sge()
        );
        assert!(c.max_inline_data() >= 64 && c.max_send_sge() >= 4 && c.max_recv_sge() >= 3);
        println!(
            "  device max_sge {}, max_sge_rd {}",
            c.peer().capabilities().max_sge,
            c.peer().capabilities().max_sge_rd
        );
        close(c, s);
        // Rounded up: inline 64 with 1 SGE asked; the granted SGEs are usable.
        let sp = peer();
        let (smr, pdata) = server_region(&sp, Usage::WRITE_DST);
        let mut cfg = ConnCfg::new();
        cfg.set_max_inline_data(64);
        let (c, s) = Pair::new().server_peer(&sp).client_cfg(&cfg).server_pdata(pdata).connect();
        let n = c.max_send_sge() as usize;
        println!("  ConnCfg sge 1/1, inline 64: granted max_send_sge {n}, max_inline_data {}", c.max_inline_data());
        let remote = MrRemote::from_descriptor(c.private_data()).unwrap();
        let src = region(c.peer(), 64, Usage::WRITE_SRC, 9);
        c.post(WriteSg::new(&remote, 0, &vec![Sg::new(&src, 0, 2); n]).op_context(1)).unwrap();
        assert_eq!(c.cq().next_completion(T).unwrap().status, WcStatus::SUCCESS, "{n} SGEs");
        let mut got = vec![0u8; 2 * n];
        smr.read_at(0, &mut got).unwrap();
        assert_eq!(got, vec![9u8; 2 * n]);
        close(c, s);
        // More SGEs than the device has are refused before a QP is made.
        let max = peer().capabilities().max_sge;
        if max < rpma::conn_cfg::MAX_SGL {
            let cfg = sg_cfg(max + 1, 1);
            let e =
                rpma::ConnReq::new(&peer(), &rpma_harness::addr(), rpma_harness::next_port(), Some(&cfg)).unwrap_err();
            assert_eq!(e.code(), RPMA_E_INVAL, "{e}");
            let want = Detail::TooLong { what: Arg::MaxSendSge, len: u64::from(max) + 1, max: max.into() };
            assert_eq!(e.detail(), Some(&want), "{e}");
        }
        // A configured inline size the device cannot give fails at set-up.
        let mut huge = ConnCfg::new();
        huge.set_max_inline_data(1 << 20);
        // No RDMA device copies 1 MiB into a work request (rxe's limit is
        // far below: docs/devices.md); granting it would be a bug.
        let e = rpma::ConnReq::new(&peer(), &rpma_harness::addr(), rpma_harness::next_port(), Some(&huge))
            .expect_err("max_inline_data 1 MiB must be refused at set-up");
        assert!([RPMA_E_INVAL, rpma::error::RPMA_E_PROVIDER].contains(&e.code()), "{e}");
        println!("  max_inline_data 1 MiB refused at set-up: {e}");
    }

    fn write_sg_lands_three_regions_contiguously() {
        let sp = peer();
        let (smr, pdata) = server_region(&sp, Usage::WRITE_DST);
        let cfg = sg_cfg(4, 1);
        let (c, s) = Pair::new().server_peer(&sp).client_cfg(&cfg).server_pdata(pdata).connect();
        let remote = MrRemote::from_descriptor(c.private_data()).unwrap();
        let a = region(c.peer(), 64, Usage::WRITE_SRC, b'a');
        let b = region(c.peer(), 4096, Usage::WRITE_SRC, b'b');
        let x = region(c.peer(), 16, Usage::WRITE_SRC, b'c');
        let list = [Sg::new(&a, 3, 10), Sg::new(&b, 100, 1000), Sg::new(&x, 0, 16)];
        c.post(WriteSg::new(&remote, 100, &list).op_context(5)).unwrap();
        // Every region is held until the completion is reaped.
        assert_eq!((a.in_flight(), b.in_flight(), x.in_flight()), (1, 1, 1));
        assert_eq!(a.write_at(0, b"z").unwrap_err().code(), rpma::error::RPMA_E_AGAIN);
        let wc = c.cq().next_completion(T).unwrap();
        assert_eq!((wc.op_context, wc.op, wc.status), (5, CompletionOp::Write, WcStatus::SUCCESS));
        assert_eq!((a.in_flight(), b.in_flight(), x.in_flight()), (0, 0, 0));
        let mut got = vec![0u8; 1026 + 2];
        smr.read_at(99, &mut got).unwrap();
        let mut want = vec![(99 * 7 % 251) as u8];
        want.extend([b'a'; 10].iter().chain(&[b'b'; 1000]).chain(&[b'c'; 16]));
        want.push((1126 * 7 % 251) as u8);
        assert_eq!(got, want, "the three ranges, one after the other, and nothing around them");
        // The same region twice (a hold per element, each on its range), and
        // a 0-byte element (skipped).
        a.write_at(0, b"0123456789").unwrap();
        let list = [Sg::new(&a, 5, 5), Sg::new(&a, 0, 0), Sg::new(&a, 0, 5)];
        c.post(WriteSg::new(&remote, 0, &list).op_context(6)).unwrap();
        assert_eq!(a.in_flight(), 2);
        assert_eq!(c.cq().next_completion(T).unwrap().status, WcStatus::SUCCESS);
        let mut got = [0u8; 10];
        smr.read_at(0, &mut got).unwrap();
        assert_eq!(&got, b"5678901234");
        println!("  write_sg of 3 regions (10 + 1000 + 16 bytes) landed contiguously; regions held until reaped");
        close(c, s);
    }

    fn read_sg_scatters_into_three_regions() {
        let sp = peer();
        let (_smr, pdata) = server_region(&sp, Usage::READ_SRC);
        let cfg = sg_cfg(3, 1);
        let (c, s) = Pair::new().server_peer(&sp).client_cfg(&cfg).server_pdata(pdata).connect();
        let remote = MrRemote::from_descriptor(c.private_data()).unwrap();
        let a = region(c.peer(), 64, Usage::READ_DST, 0);
        let b = region(c.peer(), 8192, Usage::READ_DST, 0);
        let x = region(c.peer(), 64, Usage::READ_DST, 0);
        let list = [Sg::new(&a, 60, 4), Sg::new(&b, 0, 5000), Sg::new(&x, 1, 7)];
        c.post(ReadSg::new(&list, &remote, 1000).op_context(8)).unwrap();
        let wc = c.cq().next_completion(T).unwrap();
        assert_eq!((wc.op_context, wc.op, wc.status), (8, CompletionOp::Read, WcStatus::SUCCESS));
        let pat = |from: u32, n: u32| -> Vec<u8> { (from..from + n).map(|i| (i * 7 % 251) as u8).collect() };
        let mut g = vec![0u8; 4];
        a.read_at(60, &mut g).unwrap();
        assert_eq!(g, pat(1000, 4));
        let mut g = vec![0u8; 5000];
        b.read_at(0, &mut g).unwrap();
        assert_eq!(g, pat(1004, 5000));
        let mut g = vec![0u8; 9];
        x.read_at(0, &mut g).unwrap();
        assert_eq!(g[0], 0, "before the element");
        assert_eq!(&g[1..8], &pat(6004, 7)[..]);
        assert_eq!(g[8], 0, "after the element");
        println!("  read_sg of 5011 bytes scattered into 3 regions (4 + 5000 + 7)");
        close(c, s);
    }

    fn send_sg_into_recv_sg() {
        let cfg = sg_cfg(3, 1);
        let scfg = sg_cfg(1, 3);
        let (c, s) = Pair::new().client_cfg(&cfg).server_cfg(scfg).connect();
        println!("  server max_recv_sge granted {}", s.max_recv_sge());
        let r1 = region(s.peer(), 8, Usage::RECV, 0);
        let r2 = region(s.peer(), 64, Usage::RECV, 0);
        s.post(RecvSg::new(&[Sg::new(&r1, 4, 4), Sg::new(&r2, 0, 4), Sg::new(&r2, 32, 32)]).op_context(40)).unwrap();
        assert_eq!((r1.in_flight(), r2.in_flight()), (1, 2), "one hold per posted element of different regions");
        let h = MrLocal::reg(c.peer(), AlignedBuf::new(16).unwrap(), Usage::SEND).unwrap();
        h.write_at(0, b"HEAD").unwrap();
        let body = MrLocal::reg(c.peer(), AlignedBuf::new(64).unwrap(), Usage::SEND).unwrap();
        body.write_at(0, b"body-of-the-message").unwrap();
        c.post(SendSg::new(&[Sg::new(&h, 0, 4), Sg::new(&body, 0, 19)]).op_context(41)).unwrap();
        let wc = c.cq().next_completion(T).unwrap();
        assert_eq!((wc.op_context, wc.op, wc.status), (41, CompletionOp::Send, WcStatus::SUCCESS));
        let wc = s.cq().next_completion(T).unwrap();
        assert_eq!((wc.op_context, wc.op, wc.byte_len, wc.status), (40, CompletionOp::Recv, 23, WcStatus::SUCCESS));
        assert_eq!((r1.in_flight(), r2.in_flight()), (0, 0));
        let mut g = [0u8; 8];
        r1.read_at(0, &mut g).unwrap();
        assert_eq!(&g, b"\0\0\0\0HEAD");
        let mut g = [0u8; 64];
        r2.read_at(0, &mut g).unwrap();
        assert_eq!(&g[..4], b"body");
        assert_eq!(&g[4..32], &[0u8; 28][..]);
        assert_eq!(&g[32..47], b"-of-the-message");
        println!("  send_sg of 2 elements (23 bytes) scattered by recv_sg into 3 (4 + 4 + 15 of 32)");
        // A receive list longer than the connection's max_recv_sge.
        let big = vec![Sg::new(&r2, 0, 1); s.max_recv_sge() as usize + 1];
        let d = refused(s.post(RecvSg::new(&big)));
        assert!(
            matches!(&d, Detail::TooLong { what, len, max } if *what == Arg::Dst && *len == big.len() as u64 && len > max),
            "{d:?}"
        );
        close(c, s);
    }

    /// Receives are operations: one range or a list, held or unheld,
    /// on an accepted connection or on a request not yet connected; a chain
    /// refuses them.
    fn receives_are_operations() {
        use rpma::ops::{Recv, RecvSg};
        use rpma::{ConnEvent, ConnReq, Ep};
        let (sp, cp) = (peer(), peer());
        let port = rpma_harness::next_port();
        let ep = Ep::listen(&sp, &rpma_harness::addr(), port).unwrap();
        let early = region(&sp, 16, Usage::RECV, 0);
        let one = region(&sp, 64, Usage::RECV, 0);
        let two = region(&sp, 64, Usage::RECV, 0);
        let scfg = sg_cfg(1, 2);
        let client = std::thread::spawn(move || {
            let req = ConnReq::new(&cp, &rpma_harness::addr(), port, None).unwrap();
            let c = req.connect(&[]).unwrap();
            assert_eq!(c.next_event_timeout(T).unwrap(), ConnEvent::Established);
            c
        });
        let req = ep.next_conn_req_timeout(Some(&scfg), T).unwrap();
        // Before the connection is up: a list of one element through ConnReq::post.
        req.post(RecvSg::new(&[Sg::new(&early, 8, 8)]).op_context(60)).unwrap();
        let s = req.connect(&[]).unwrap();
        assert_eq!(s.next_event_timeout(T).unwrap(), ConnEvent::Established);
        let c = client.join().unwrap();
        s.post(Recv::new(&one, 0, 16).op_context(61)).unwrap();
        // SAFETY: `one` outlives the receive's completion, reaped below.
        unsafe { s.post(rpma::ops::Unheld::new(Recv::new(&one, 16, 16).op_context(62))) }.unwrap();
        s.post(RecvSg::new(&[Sg::new(&two, 0, 4), Sg::new(&two, 32, 8)]).op_context(63)).unwrap();
        // The unheld one holds nothing; a list holds each element's range.
        assert_eq!((early.in_flight(), one.in_flight(), two.in_flight()), (1, 1, 2));
        let e = s.chain().push(Recv::new(&one, 0, 8)).map(|_| ()).unwrap_err();
        assert_eq!(e.detail(), Some(&rpma::error::Detail::Unsupported), "{e}");
        let e = s.post(Recv::new(&one, 60, 8)).unwrap_err();
        assert!(
            matches!(e.detail(), Some(rpma::error::Detail::OutOfRange { offset: 60, len: 8, size: 64, .. })),
            "{e}"
        );
        let m = MrLocal::reg(c.peer(), AlignedBuf::new(64).unwrap(), Usage::SEND).unwrap();
        m.write_at(0, b"early-msfirst---second--ab......cdefghij").unwrap();
        for (off, len, ctx) in [(0usize, 8usize, 1u64), (8, 8, 2), (16, 8, 3), (24, 10, 4)] {
            c.send(&m, off, len, Flags::COMPLETION_ALWAYS, ctx).unwrap();
            assert_eq!(c.cq().next_completion(T).unwrap().op_context, ctx);
        }
        let mut got = Vec::new();
        for _ in 0..4 {
            let wc = s.cq().next_completion(T).unwrap();
            assert_eq!((wc.op, wc.status), (CompletionOp::Recv, WcStatus::SUCCESS));
            got.push((wc.op_context, wc.byte_len));
        }
        assert_eq!(got, [(60, 8), (61, 8), (62, 8), (63, 10)], "a receive queue is consumed in order");
        assert_eq!((early.in_flight(), one.in_flight(), two.in_flight()), (0, 0, 0));
        let mut g = [0u8; 16];
        early.read_at(0, &mut g).unwrap();
        assert_eq!(&g[8..], b"early-ms");
        let mut g = [0u8; 64];
        one.read_at(0, &mut g).unwrap();
        assert_eq!((&g[..8], &g[16..24]), (&b"first---"[..], &b"second--"[..]));
        two.read_at(0, &mut g).unwrap();
        assert_eq!((&g[..4], &g[32..38]), (&b"ab.."[..], &b"....cd"[..]));
        close(c, s);
    }

    fn sg_lists_are_checked_before_posting() {
        let sp = peer();
        let (_smr, pdata) = server_region(&sp, Usage::WRITE_DST | Usage::READ_SRC);
        let cfg = sg_cfg(2, 1);
        let (c, s) = Pair::new().server_peer(&sp).client_cfg(&cfg).server_pdata(pdata).connect();
        let remote = MrRemote::from_descriptor(c.private_data()).unwrap();
        let w = region(c.peer(), 64, Usage::WRITE_SRC, 1);
        let r = region(c.peer(), 64, Usage::READ_DST, 1);
        let f = Flags::COMPLETION_ALWAYS;
        let max = c.max_send_sge() as usize;
        let many = vec![Sg::new(&w, 0, 1); max + 1];
        assert_eq!(
            refused(c.post(WriteSg::new(&remote, 0, &many).flags(f))),
            Detail::TooLong { what: Arg::Src, len: max as u64 + 1, max: max as u64 }
        );
        assert_eq!(
            refused(c.post(WriteSg::new(&remote, 0, &[Sg::new(&w, 0, 8), Sg::new(&w, 60, 8)]).flags(f))),
            Detail::OutOfRange { what: Arg::SrcElement(1), offset: 60, len: 8, size: 64 }
        );
        assert_eq!(
            refused(c.post(WriteSg::new(&remote, 0, &[Sg::new(&w, 0, 8), Sg::new(&r, 0, 8)]).flags(f))),
            Detail::UsageMissing { what: Arg::SrcElement(1), missing: Usage::WRITE_SRC }
        );
        assert_eq!(
            refused(c.post(WriteSg::new(&remote, 8190, &[Sg::new(&w, 0, 4)]).flags(f))),
            Detail::OutOfRange { what: Arg::Dst, offset: 8190, len: 4, size: 8192 }
        );
        let e = c.post(WriteSg::new(&remote, 0, &[Sg::new(&w, 0, 4)]).flags(Flags::empty())).unwrap_err();
        assert_eq!(e.code(), RPMA_E_INVAL, "{e}");
        assert_eq!(e.detail(), Some(&Detail::BadFlags { bits: 0 }), "{e}");
        assert_eq!(
            refused(c.post(ReadSg::new(&[Sg::new(&r, 0, 8), Sg::new(&w, 0, 8)], &remote, 0).flags(f))),
            Detail::UsageMissing { what: Arg::DstElement(1), missing: Usage::READ_DST }
        );
        assert_eq!(
            refused(c.post(SendSg::new(&[Sg::new(&w, 0, 8)]).flags(f))),
            Detail::UsageMissing { what: Arg::SrcElement(0), missing: Usage::SEND }
        );
        let other = region(s.peer(), 64, Usage::WRITE_SRC, 1);
        assert_eq!(
            refused(c.post(WriteSg::new(&remote, 0, &[Sg::new(&w, 0, 1), Sg::new(&other, 0, 1)]).flags(f))),
            Detail::Foreign { what: Arg::SrcElement(1) }
        );
        assert_eq!(
            refused(c.post(RecvSg::new(&[Sg::new(&w, 0, 8)]))),
            Detail::UsageMissing { what: Arg::DstElement(0), missing: Usage::RECV }
        );
        assert_eq!(c.pending_sends(), 0, "nothing was posted");
        assert_eq!((w.in_flight(), r.in_flight()), (0, 0), "nothing is held");
        assert!(c.cq().get_completion().unwrap().is_none(), "no completion");
        println!("  refused locally: {} elements (max {max}), out-of-range src[1], wrong usage", max + 1);
        close(c, s);
    }

    fn inline_write_up_to_the_granted_limit() {
        let sp = peer();
        let (smr, pdata) = server_region(&sp, Usage::WRITE_DST | Usage::RECV);
        let mut cfg = ConnCfg::new();
        cfg.set_max_inline_data(64);
        let (c, s) = Pair::new().server_peer(&sp).client_cfg(&cfg).server_pdata(pdata).connect();
        let remote = MrRemote::from_descriptor(c.private_data()).unwrap();
        let max = c.max_inline_data() as usize;
        let data: Vec<u8> = (0..max + 1).map(|i| (i % 200) as u8 + 1).collect();
        c.post(WriteInline::new(&remote, 0, &data[..max]).op_context(3)).unwrap();
        let wc = c.cq().next_completion(T).unwrap();
        assert_eq!((wc.op_context, wc.op, wc.status), (3, CompletionOp::Write, WcStatus::SUCCESS));
        let mut got = vec![0u8; max];
        smr.read_at(0, &mut got).unwrap();
        assert_eq!(got, data[..max], "the inline bytes landed");
        assert_eq!(
            refused(c.post(WriteInline::new(&remote, 0, &data))),
            Detail::TooLong { what: Arg::Data, len: max as u64 + 1, max: max as u64 }
        );
        assert_eq!(
            refused(c.post(WriteInline::new(&remote, 8190, &data[..4]))),
            Detail::OutOfRange { what: Arg::Dst, offset: 8190, len: 4, size: 8192 }
        );
        assert_eq!(c.pending_sends(), 0);
        // With immediate data: consumes a receive on the other side.
        let rmr = MrLocal::reg(s.peer(), AlignedBuf::new(8).unwrap(), Usage::RECV).unwrap();
        s.recv(&rmr, 0, 0, 77).unwrap();
        c.post(WriteInline::new(&remote, 200, b"imm").imm(0xabcd).op_context(4)).unwrap();
        assert_eq!(c.cq().next_completion(T).unwrap().op, CompletionOp::WriteWithImm);
        let wc = s.cq().next_completion(T).unwrap();
        assert_eq!((wc.op_context, wc.op, wc.imm), (77, CompletionOp::RecvRdmaWithImm, Some(0xabcd)));
        let mut got = [0u8; 3];
        smr.read_at(200, &mut got).unwrap();
        assert_eq!(&got, b"imm");
        println!("  write_inline of {max} bytes (the granted max for 64 asked) landed; {} refused", max + 1);
        close(c, s);
    }

    fn inline_data_is_copied_at_post() {
        let sp = peer();
        let (smr, pdata) = server_region(&sp, Usage::WRITE_DST);
        let (c, s) = Pair::new().server_peer(&sp).server_pdata(pdata).connect();
        let remote = MrRemote::from_descriptor(c.private_data()).unwrap();
        let rmr = region(s.peer(), 64, Usage::RECV, 0);
        s.recv(&rmr, 0, 64, 1).unwrap();
        s.recv(&rmr, 32, 32, 2).unwrap();
        let n = c.max_inline_data().min(32) as usize;
        // A heap buffer, overwritten and freed right after each post.
        let mut buf = vec![b'x'; n];
        c.post(SendInline::new(&buf).flags(Flags::COMPLETION_ON_ERROR).op_context(10)).unwrap();
        buf.fill(b'y');
        c.post(WriteInline::new(&remote, 500, &buf).flags(Flags::COMPLETION_ON_ERROR).op_context(11)).unwrap();
        buf.fill(b'z');
        drop(buf);
        c.post(SendInline::new(&[]).imm(5).op_context(12)).unwrap();
        let wc = c.cq().next_completion(T).unwrap();
        assert_eq!((wc.op_context, wc.op, wc.status), (12, CompletionOp::SendWithImm, WcStatus::SUCCESS));
        let wc = s.cq().next_completion(T).unwrap();
        assert_eq!((wc.op_context, wc.byte_len, wc.status), (1, n as u32, WcStatus::SUCCESS));
        let wc = s.cq().next_completion(T).unwrap();
        assert_eq!((wc.op_context, wc.byte_len, wc.imm), (2, 0, Some(5)));
        let mut got = vec![0u8; n];
        rmr.read_at(0, &mut got).unwrap();
        assert_eq!(got, vec![b'x'; n], "the send carried the bytes of the post");
        smr.read_at(500, &mut got).unwrap();
        assert_eq!(got, vec![b'y'; n], "the write carried the bytes of the post");
        println!("  inline send and write of {n} bytes arrived as posted; the source was overwritten and freed after");
        close(c, s);
    }

    fn inline_asked_for_zero() {
        let sp = peer();
        let (_smr, pdata) = server_region(&sp, Usage::WRITE_DST);
        let mut cfg = ConnCfg::new();
        cfg.set_max_inline_data(0);
        cfg.set_native_ops(false);
        let (c, s) = Pair::new().server_peer(&sp).client_cfg(&cfg).server_pdata(pdata).connect();
        let remote = MrRemote::from_descriptor(c.private_data()).unwrap();
        let max = c.max_inline_data() as usize;
        println!("  ConnCfg max_inline_data 0: granted {max}");
        assert_eq!(
            refused(c.post(WriteInline::new(&remote, 0, &vec![1u8; max + 1]))),
            Detail::TooLong { what: Arg::Data, len: max as u64 + 1, max: max as u64 }
        );
        assert!(matches!(
            refused(c.post(SendInline::new(&vec![1u8; max + 1]))),
            Detail::TooLong { what, .. } if what == Arg::Data
        ));
        let aw = c.atomic_write(&remote, 0, [1; 8], Flags::COMPLETION_ALWAYS, 1);
        if max < 8 {
            let d = refused(aw);
            assert!(matches!(&d, Detail::TooLong { what: Arg::Data, len: 8, .. }), "{d:?}");
        } else {
            aw.unwrap();
            assert_eq!(c.cq().next_completion(T).unwrap().status, WcStatus::SUCCESS);
            println!("  the device rounded 0 up to {max}: the emulated atomic write still works");
        }
        // A 0-byte inline write needs no inline room at all.
        c.post(WriteInline::new(&remote, 0, &[]).op_context(2)).unwrap();
        assert_eq!(c.cq().next_completion(T).unwrap().status, WcStatus::SUCCESS);
        close(c, s);
    }
});
