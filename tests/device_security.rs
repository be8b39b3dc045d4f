//! Access enforcement and API misuse, on a real RDMA device.
//!
//! Enforcement: for each usage a target region is registered with, and each
//! remote operation, the descriptor is forged to claim every usage so that
//! rpma's local checks let the operation through and the *device* decides;
//! it must allow exactly what librpma's usage → access table grants, and a
//! refused operation must leave the target's bytes unchanged.

mod common;
use common::{close, peer, Pair, T};
use rpma::error::Detail;
use rpma::error::*;
use rpma::{AlignedBuf, ConnCfg, Flags, FlushType, MrLocal, MrRemote, PeerCfg, Usage, WcStatus};
use rpma_harness::{addr, device_tests, next_port};

const SIZE: usize = 4096;

fn pattern() -> Vec<u8> {
    (0..SIZE as u32).map(|i| (i * 13 % 251) as u8).collect()
}

/// A descriptor claiming every librpma usage, so local checks pass.
fn claim_all(desc: &[u8]) -> MrRemote {
    let mut d = desc.to_vec();
    d[20] = 0xff;
    MrRemote::from_descriptor(&d).unwrap()
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Op {
    Read,
    Write,
    AtomicWrite,
    Flush,
    SendToRecv,
}

/// librpma's table (rxe: IB transport, no native flush): what each remote
/// operation needs of the target region.
fn allowed(u: Usage, op: Op) -> bool {
    let remote_read = u.intersects(Usage::READ_SRC | Usage::FLUSH_TYPE_VISIBILITY | Usage::FLUSH_TYPE_PERSISTENT);
    let remote_write = u.contains(Usage::WRITE_DST);
    let local_write = u.intersects(Usage::READ_DST | Usage::WRITE_SRC | Usage::WRITE_DST | Usage::RECV);
    match op {
        Op::Read | Op::Flush => remote_read,
        Op::Write | Op::AtomicWrite => remote_write,
        Op::SendToRecv => local_write,
    }
}

/// Runs `op` against a target region registered with `u`; returns whether
/// the device let it through, after checking the bytes.
fn run(u: Usage, op: Op) -> bool {
    let sp = peer();
    let target = MrLocal::reg(&sp, AlignedBuf::new(SIZE).unwrap(), u).unwrap();
    target.write_at(0, &pattern()).unwrap();
    let (c, s) = Pair::new().server_peer(&sp).connect();
    let remote = claim_all(&target.descriptor());
    let local =
        MrLocal::reg(c.peer(), AlignedBuf::new(SIZE).unwrap(), Usage::READ_DST | Usage::WRITE_SRC | Usage::SEND)
            .unwrap();
    local.write_at(0, &[0xee; 64]).unwrap();
    let f = Flags::COMPLETION_ALWAYS;
    match op {
        Op::Read => c.read(&local, 0, &remote, 64, 64, f, 1).unwrap(),
        Op::Write => c.write(&remote, 64, &local, 0, 64, f, 1).unwrap(),
        Op::AtomicWrite => c.atomic_write(&remote, 64, [0xee; 8], f, 1).unwrap(),
        Op::Flush => c.flush(&remote, 64, 8, FlushType::Visibility, f, 1).unwrap(),
        Op::SendToRecv => {
            // Usage checks off (librpma's behaviour): the device decides.
            sp.set_usage_checks(false);
            s.recv(&target, 64, 64, 2).unwrap();
            c.send(&local, 0, 64, f, 1).unwrap()
        }
    }
    let wc = c.cq().next_completion(T).unwrap();
    let passed = wc.status == WcStatus::SUCCESS;
    if op == Op::SendToRecv {
        let rwc = s.cq().next_completion(T).unwrap();
        assert_eq!(rwc.status == WcStatus::SUCCESS, passed, "{u:?}: the receive's and the send's outcome agree");
    }
    let mut now = vec![0u8; SIZE];
    drop((c, s)); // the QPs are gone: the target can be read safely
    target.read_at(0, &mut now).unwrap();
    let changed = now != pattern();
    match (op, passed) {
        (Op::Write | Op::AtomicWrite | Op::SendToRecv, true) => {
            assert!(changed, "{u:?} {op:?}: allowed but nothing landed")
        }
        (_, false) | (Op::Read | Op::Flush, _) => assert!(!changed, "{u:?} {op:?}: the target changed"),
    }
    if !passed {
        assert!(
            matches!(wc.status, WcStatus::REM_ACCESS_ERR) || op == Op::SendToRecv,
            "{u:?} {op:?}: refused with {}",
            wc.status
        );
    }
    passed
}

/// One row of the misuse matrix: the case, the expected code, the result.
fn row(case: &str, expected: i32, r: rpma::Result<()>) {
    let observed = match &r {
        Ok(()) => 0,
        Err(e) => e.code(),
    };
    println!(
        "  | {case} | {} | {} |",
        err_2str(expected),
        match &r {
            Ok(()) => "Success".to_string(),
            Err(e) => format!("{}: {e}", err_2str(e.code())),
        }
    );
    assert_eq!(observed, expected, "{case}: {r:?}");
}

device_tests!({
    /// A region's usages are intentions: by default an operation on a
    /// region registered for another use is refused, naming the usage to
    /// add, although the device would do it (READ_DST | WRITE_SRC has the
    /// local write a receive needs). With the checks off (C librpma's
    /// behaviour, and rpma's C ABI's) it is posted and the device decides:
    /// that send and receive complete, and a receive into a region without
    /// local write access fails in its completion, nothing written.
    fn usages_are_intentions_the_device_decides_without_checks() {
        let sp = peer();
        let (c, s) = Pair::new().server_peer(&sp).connect();
        let cli = MrLocal::reg(c.peer(), AlignedBuf::new(8).unwrap(), Usage::READ_DST | Usage::WRITE_SRC).unwrap();
        let srv = MrLocal::reg(&sp, AlignedBuf::new(8).unwrap(), Usage::READ_SRC | Usage::WRITE_DST).unwrap();
        let e = s.recv(&srv, 0, 8, 1).unwrap_err();
        assert_eq!(e.code(), RPMA_E_INVAL);
        assert!(matches!(e.detail(), Some(Detail::UsageMissing { missing, .. }) if *missing == Usage::RECV), "{e}");
        let e = c.send(&cli, 0, 8, Flags::COMPLETION_ALWAYS, 2).unwrap_err();
        assert!(matches!(e.detail(), Some(Detail::UsageMissing { missing, .. }) if *missing == Usage::SEND), "{e}");
        assert!(sp.usage_checks());
        sp.set_usage_checks(false);
        c.peer().set_usage_checks(false);
        s.recv(&srv, 0, 8, 1).unwrap();
        c.send(&cli, 0, 8, Flags::COMPLETION_ALWAYS, 2).unwrap();
        assert_eq!(c.cq().next_completion(T).unwrap().status, WcStatus::SUCCESS, "the device sends from it");
        let wc = s.cq().next_completion(T).unwrap();
        assert_eq!((wc.op_context, wc.status), (1, WcStatus::SUCCESS), "the device receives into it");
        // No local write access at all (SEND alone): the device refuses.
        let ro = MrLocal::reg(&sp, AlignedBuf::new(8).unwrap(), Usage::SEND).unwrap();
        assert!(!ro.access().contains(rpma::Access::LOCAL_WRITE));
        s.recv(&ro, 0, 8, 3).unwrap();
        srv.write_at(0, &[0; 8]).unwrap();
        c.send(&cli, 0, 8, Flags::COMPLETION_ALWAYS, 4).unwrap();
        let wc = s.cq().next_completion(T).unwrap();
        assert_eq!(wc.op_context, 3);
        assert!(!wc.status.is_success(), "a receive into memory without local write access: {}", wc.status);
        let mut got = [1u8; 8];
        ro.read_at(0, &mut got).unwrap();
        assert_eq!(got, [0; 8], "nothing was written");
        let _ = c.cq().next_completion(T);
        drop(c);
        drop(s);
    }

    fn enforcement_matrix() {
        let usages = [
            Usage::READ_SRC,
            Usage::WRITE_DST,
            Usage::READ_SRC | Usage::WRITE_DST,
            Usage::FLUSH_TYPE_VISIBILITY,
            Usage::FLUSH_TYPE_PERSISTENT,
            Usage::READ_DST,
            Usage::WRITE_SRC,
            Usage::RECV,
            Usage::SEND,
        ];
        let ops = [Op::Read, Op::Write, Op::AtomicWrite, Op::Flush, Op::SendToRecv];
        println!("  | target usage | operation | table | device |");
        for u in usages {
            for op in ops {
                let want = allowed(u, op);
                let got = run(u, op);
                println!(
                    "  | {u:?} | {op:?} | {} | {} |",
                    if want { "allowed" } else { "denied" },
                    if got { "allowed" } else { "denied" }
                );
                assert_eq!(got, want, "{u:?} {op:?}");
            }
        }
    }

    fn out_of_range_refused_locally_and_by_the_device() {
        let sp = peer();
        let target = MrLocal::reg(&sp, AlignedBuf::new(SIZE).unwrap(), Usage::READ_SRC).unwrap();
        let (c, s) = Pair::new().server_peer(&sp).connect();
        let remote = MrRemote::from_descriptor(&target.descriptor()).unwrap();
        let local = MrLocal::reg(c.peer(), AlignedBuf::new(SIZE).unwrap(), Usage::READ_DST).unwrap();
        let e = c.read(&local, 0, &remote, SIZE as u64 - 8, 16, Flags::COMPLETION_ALWAYS, 1).unwrap_err();
        assert_eq!(e.code(), RPMA_E_INVAL);
        assert!(matches!(e.detail(), Some(Detail::OutOfRange { size: 4096, .. })), "{e}");
        // Through a descriptor forged to claim twice the length: the
        // device refuses.
        let mut forged = target.descriptor().to_vec();
        forged[8..16].copy_from_slice(&(2 * SIZE as u64).to_le_bytes());
        let forged = MrRemote::from_descriptor(&forged).unwrap();
        c.read(&local, 0, &forged, SIZE as u64 - 8, 16, Flags::COMPLETION_ALWAYS, 2).unwrap();
        assert_eq!(c.cq().next_completion(T).unwrap().status, WcStatus::REM_ACCESS_ERR);
        drop((c, s));
    }

    fn rkey_of_a_deregistered_region_stops_working() {
        let sp = peer();
        let target = MrLocal::reg(&sp, AlignedBuf::new(SIZE).unwrap(), Usage::READ_SRC).unwrap();
        let (c, s) = Pair::new().server_peer(&sp).connect();
        let remote = MrRemote::from_descriptor(&target.descriptor()).unwrap();
        let local = MrLocal::reg(c.peer(), AlignedBuf::new(64).unwrap(), Usage::READ_DST).unwrap();
        c.read(&local, 0, &remote, 0, 8, Flags::COMPLETION_ALWAYS, 1).unwrap();
        assert_eq!(c.cq().next_completion(T).unwrap().status, WcStatus::SUCCESS);
        let _memory = target.dereg().unwrap();
        c.read(&local, 0, &remote, 0, 8, Flags::COMPLETION_ALWAYS, 2).unwrap();
        assert_eq!(c.cq().next_completion(T).unwrap().status, WcStatus::REM_ACCESS_ERR, "rkey after dereg");
        drop((c, s));
    }

    fn misuse_matrix() {
        let sp = peer();
        let target = MrLocal::reg(
            &sp,
            AlignedBuf::new(SIZE).unwrap(),
            Usage::READ_SRC | Usage::WRITE_DST | Usage::FLUSH_TYPE_VISIBILITY,
        )
        .unwrap();
        let (c, s) = Pair::new().server_peer(&sp).connect();
        let remote = MrRemote::from_descriptor(&target.descriptor()).unwrap();
        let local =
            MrLocal::reg(c.peer(), AlignedBuf::new(SIZE).unwrap(), Usage::READ_DST | Usage::WRITE_SRC | Usage::SEND)
                .unwrap();
        let a = Flags::COMPLETION_ALWAYS;
        println!("  | case | expected | observed |");
        row("read of 0 bytes (allowed, as in librpma)", 0, c.read(&local, 0, &remote, 0, 0, a, 1));
        let _ = c.cq().next_completion(T);
        row("length over 4 GiB - 1", RPMA_E_INVAL, c.read(&local, 0, &remote, 0, 1 << 32, a, 0));
        row("local offset + length overflows", RPMA_E_INVAL, c.read(&local, usize::MAX, &remote, 0, 8, a, 0));
        row("remote offset + length overflows", RPMA_E_INVAL, c.read(&local, 0, &remote, u64::MAX, 8, a, 0));
        row("remote range beyond the region", RPMA_E_INVAL, c.write(&remote, SIZE as u64 - 4, &local, 0, 8, a, 0));
        row("atomic write at a misaligned offset", RPMA_E_INVAL, c.atomic_write(&remote, 12, [0; 8], a, 0));
        row(
            "flush PERSISTENT without the peer's direct_write_to_pmem",
            RPMA_E_NOSUPP,
            c.flush(&remote, 0, 8, FlushType::Persistent, a, 0),
        );
        let mut pcfg = PeerCfg::new();
        pcfg.set_direct_write_to_pmem(true);
        c.apply_remote_peer_cfg(&pcfg);
        row(
            "flush type not granted by the region (PERSISTENT)",
            RPMA_E_NOSUPP,
            c.flush(&remote, 0, 8, FlushType::Persistent, a, 0),
        );
        row("completion flags 0", RPMA_E_INVAL, c.read(&local, 0, &remote, 0, 8, Flags::empty(), 0));
        row("receive into a region without RECV usage", RPMA_E_INVAL, c.recv(&local, 0, 8, 0));
        let other = MrLocal::reg(&peer(), AlignedBuf::new(64).unwrap(), Usage::READ_DST).unwrap();
        row("local region of another peer", RPMA_E_INVAL, c.read(&other, 0, &remote, 0, 8, a, 0));
        row(
            "Cq::wait on a connection without shared channel: fine; Conn::wait",
            RPMA_E_NOT_SHARED_CHNL,
            c.wait().map(|_| ()),
        );
        let big = vec![0u8; 57];
        row(
            "private data over 56 bytes (connect)",
            RPMA_E_INVAL,
            rpma::ConnReq::new(c.peer(), &addr(), next_port(), None).unwrap().connect(&big).map(|_| ()),
        );
        close(c, s);
        row("operation on a closed connection", RPMA_E_INVAL, {
            let (c2, s2) = Pair::new().server_peer(&sp).connect();
            c2.disconnect().unwrap();
            let r = c2.read(
                &MrLocal::reg(c2.peer(), AlignedBuf::new(64).unwrap(), Usage::READ_DST).unwrap(),
                0,
                &remote,
                0,
                8,
                a,
                0,
            );
            drop((c2, s2));
            r
        });
        let mut cfg = ConnCfg::new();
        cfg.set_compl_channel(true);
        let (c3, s3) = Pair::new().server_peer(&sp).client_cfg(&cfg).connect();
        row("Cq::wait on a shared completion channel", RPMA_E_SHARED_CHANNEL, c3.cq().wait());
        row("next event on a non-blocking fd, none pending", RPMA_E_NO_EVENT, {
            rpma::utils::set_nonblocking(&c3, true).unwrap();
            c3.next_event().map(|_| ())
        });
        rpma::utils::set_nonblocking(&c3, false).unwrap();
        close(c3, s3);
    }
});
