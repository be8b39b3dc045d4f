//! Device tests of chained posting (`Conn::chain`): several operations
//! posted with one call, on a real RDMA device. In the host's world (rxe,
//! rdma-core 44) chains go through one `ibv_post_send` of a linked list; in
//! Debian 13 (`harness/world trixie`) a chain with a native flush or atomic
//! write goes through one `ibv_wr_start` ... `ibv_wr_complete` sequence.

use rpma::conn::CHAIN_MAX;
use rpma::error::{Arg, Detail, RPMA_E_AGAIN, RPMA_E_INVAL, RPMA_E_NOSUPP};
use rpma::ops::{AtomicWrite, Flush, Read, Write};
use rpma::{AlignedBuf, Completion, CompletionOp, Conn, ConnCfg, Flags, FlushType, MrLocal, MrRemote, Usage, WcStatus};
mod common;
use common::{close, peer, server_region, Pair, T};
use rpma_harness::device_tests;
use std::time::Duration;

const QUIET: Flags = Flags::COMPLETION_ON_ERROR;
const LOUD: Flags = Flags::COMPLETION_ALWAYS;

/// The completions that arrive within `wait` (after the first within `T`).
fn drain(c: &Conn, want: usize, wait: Duration) -> Vec<Completion> {
    let mut v = Vec::new();
    while v.len() < want {
        match c.cq().next_completion(if v.is_empty() { T } else { wait }) {
            Ok(wc) => v.push(wc),
            Err(_) => break,
        }
    }
    v
}

fn remote_of(c: &Conn) -> MrRemote {
    MrRemote::from_descriptor(c.private_data()).unwrap()
}

/// The client's remote view of the server region with its rkey changed:
/// the device refuses every access through it.
fn forged_rkey(c: &Conn) -> MrRemote {
    let mut d = c.private_data()[..rpma::MR_DESCRIPTOR_SIZE].to_vec();
    d[16] ^= 0x5a; // the key byte of the rkey (LE u32 at 16..20)
    MrRemote::from_descriptor(&d).unwrap()
}

fn paths(c: &Conn) -> &'static str {
    match (c.peer().is_native_flush_supported(), c.peer().is_native_atomic_write_supported()) {
        (true, true) => "native flush and atomic write: one ibv_wr_start..ibv_wr_complete",
        (false, true) => "APM flush, native atomic write: one ibv_wr_start..ibv_wr_complete",
        (true, false) => "native flush, emulated atomic write: one ibv_wr_start..ibv_wr_complete",
        (false, false) => "APM flush, emulated atomic write: one ibv_post_send",
    }
}

device_tests!({
    /// librpma example 07's commit as one chain: write -> flush ->
    /// atomic_write -> flush, only the last signaled; the bytes are checked
    /// at the server.
    fn commit_chain_write_flush_atomic_write_flush() {
        let usage = Usage::READ_SRC | Usage::WRITE_DST | Usage::FLUSH_TYPE_VISIBILITY;
        let sp = peer();
        let (smr, pdata) = server_region(&sp, usage);
        let (c, s) = Pair::new().server_peer(&sp).server_pdata(pdata).connect();
        let remote = remote_of(&c);
        let src = MrLocal::reg(c.peer(), AlignedBuf::new(4096).unwrap(), Usage::WRITE_SRC).unwrap();
        println!("  path: {}", paths(&c));
        for round in 0..3u64 {
            let data = (0x1111_1111_0000_0000u64 + round).to_le_bytes();
            src.write_at(0, &data).unwrap();
            let at = 1024 + 64 * round;
            let mut ch = c.chain();
            ch.push(Write::new(&remote, at, &src, 0, 8).flags(QUIET).op_context(1))
                .unwrap()
                .push(Flush::new(&remote, at, 8, FlushType::Visibility).flags(QUIET).op_context(2))
                .unwrap()
                .push(AtomicWrite::new(&remote, 0, at.to_le_bytes()).flags(QUIET).op_context(3))
                .unwrap()
                .push(Flush::new(&remote, 0, 8, FlushType::Visibility).flags(LOUD).op_context(4))
                .unwrap();
            assert_eq!(ch.len(), 4);
            ch.post().unwrap();
            assert_eq!(c.pending_sends(), 4, "four entries recorded, with consecutive sequence numbers");
            let wc = c.cq().next_completion(T).unwrap();
            assert_eq!((wc.op_context, wc.op, wc.status), (4, CompletionOp::Flush, WcStatus::SUCCESS));
            let native_flush = c.peer().is_native_flush_supported();
            assert_eq!(wc.wc_opcode, if native_flush { 8 } else { 2 }, "flush path");
            assert_eq!(c.pending_sends(), 0, "the last completion retired the whole chain");
            assert!(c.cq().next_completion(Duration::from_millis(200)).is_err(), "only the last one is signaled");
            let (mut got, mut ptr) = ([0u8; 8], [0u8; 8]);
            smr.read_at(at as usize, &mut got).unwrap();
            smr.read_at(0, &mut ptr).unwrap();
            assert_eq!(got, data, "the data");
            assert_eq!(u64::from_le_bytes(ptr), at, "the pointer to it");
        }
        println!("  3 commits of 4 chained operations: one completion each, data and pointer at the server");
        close(c, s);
    }

    /// Reads, writes and sends in one chain, every one signaled: their
    /// completions arrive in order with their own contexts; the sends land
    /// in receives posted by the other side.
    fn mixed_read_write_send_chain() {
        let usage = Usage::READ_SRC | Usage::WRITE_DST | Usage::RECV;
        let sp = peer();
        let (smr, pdata) = server_region(&sp, usage);
        let (c, s) = Pair::new().server_peer(&sp).server_pdata(pdata).connect();
        let remote = remote_of(&c);
        s.recv(&smr, 6000, 64, 71).unwrap();
        s.recv(&smr, 6100, 64, 72).unwrap();
        s.recv(&smr, 6200, 64, 73).unwrap();
        let local =
            MrLocal::reg(c.peer(), AlignedBuf::new(4096).unwrap(), Usage::READ_DST | Usage::WRITE_SRC | Usage::SEND)
                .unwrap();
        local.write_at(0, b"chained write").unwrap();
        local.write_at(100, b"hello").unwrap();
        let mut ch = c.chain();
        ch.push(Read::new(&local, 2000, &remote, 100, 32).flags(LOUD).op_context(1)).unwrap();
        ch.push(Write::new(&remote, 3000, &local, 0, 13).flags(LOUD).op_context(2)).unwrap();
        ch.push(rpma::ops::Send::new(&local, 100, 5).flags(LOUD).op_context(3)).unwrap();
        ch.push(Write::new(&remote, 3100, &local, 0, 7).imm(0xfeed).flags(LOUD).op_context(4)).unwrap();
        ch.push(rpma::ops::Send::new(&local, 100, 2).imm(0xbeef).flags(LOUD).op_context(5)).unwrap();
        ch.push(Read::new(&local, 2100, &remote, 3000, 13).flags(LOUD).op_context(6)).unwrap();
        // No native operation in this chain: one ibv_post_send in every world.
        ch.post().unwrap();
        let wcs = drain(&c, 6, T);
        let got: Vec<(u64, CompletionOp, WcStatus)> = wcs.iter().map(|w| (w.op_context, w.op, w.status)).collect();
        let ok = WcStatus::SUCCESS;
        assert_eq!(
            got,
            vec![
                (1, CompletionOp::Read, ok),
                (2, CompletionOp::Write, ok),
                (3, CompletionOp::Send, ok),
                (4, CompletionOp::WriteWithImm, ok),
                (5, CompletionOp::SendWithImm, ok),
                (6, CompletionOp::Read, ok),
            ]
        );
        let mut b = [0u8; 32];
        local.read_at(2000, &mut b).unwrap();
        let want: Vec<u8> = (100..132u32).map(|i| (i * 7 % 251) as u8).collect();
        assert_eq!(&b[..], &want[..], "the first read");
        let mut b = [0u8; 13];
        local.read_at(2100, &mut b).unwrap();
        assert_eq!(&b, b"chained write", "the last read sees the write before it");
        // The server: the send, the write_with_imm's immediate, the send
        // with immediate, each in the next receive.
        let swcs: Vec<(u64, CompletionOp, u32, Option<u32>)> =
            drain(&s, 3, T).iter().map(|w| (w.op_context, w.op, w.byte_len, w.imm)).collect();
        assert_eq!(
            swcs,
            vec![
                (71, CompletionOp::Recv, 5, None),
                (72, CompletionOp::RecvRdmaWithImm, 7, Some(0xfeed)),
                (73, CompletionOp::Recv, 2, Some(0xbeef)),
            ]
        );
        let mut b = [0u8; 5];
        smr.read_at(6000, &mut b).unwrap();
        assert_eq!(&b, b"hello");
        let mut b = [0u8; 13];
        smr.read_at(3000, &mut b).unwrap();
        assert_eq!(&b, b"chained write");
        println!("  6 chained read/write/send operations, completions in order; 3 receives at the server");
        close(c, s);
    }

    /// A check failing on the 3rd operation: that call returns the error,
    /// nothing is posted (the chain is dropped), the memory is untouched.
    fn a_bad_third_operation_posts_nothing() {
        let sp = peer();
        let (smr, pdata) = server_region(&sp, Usage::READ_SRC | Usage::WRITE_DST | Usage::FLUSH_TYPE_VISIBILITY);
        let (c, s) = Pair::new().server_peer(&sp).server_pdata(pdata).connect();
        let remote = remote_of(&c);
        let src = MrLocal::reg(c.peer(), AlignedBuf::new(64).unwrap(), Usage::WRITE_SRC).unwrap();
        src.write_at(0, b"NOT HERE").unwrap();
        let mut before = vec![0u8; 8192];
        smr.read_at(0, &mut before).unwrap();
        let mut ch = c.chain();
        ch.push(Write::new(&remote, 0, &src, 0, 8).flags(QUIET).op_context(1)).unwrap();
        ch.push(Flush::new(&remote, 0, 8, FlushType::Visibility).flags(QUIET).op_context(2)).unwrap();
        let e = ch.push(AtomicWrite::new(&remote, 4, [1; 8]).flags(LOUD).op_context(3)).unwrap_err();
        assert_eq!(e.code(), RPMA_E_INVAL, "misaligned atomic write: {e}");
        let e = ch.push(Write::new(&remote, 8190, &src, 0, 8).flags(LOUD).op_context(3)).unwrap_err();
        assert_eq!(e.code(), RPMA_E_INVAL, "beyond the region: {e}");
        let e = ch.push(Flush::new(&remote, 0, 8, FlushType::Persistent).flags(LOUD).op_context(3)).unwrap_err();
        assert_eq!(e.code(), RPMA_E_NOSUPP, "persistent flush without the peer's cfg: {e}");
        let e = ch.push(Write::new(&remote, 0, &src, 0, 8).flags(Flags::empty()).op_context(3)).unwrap_err();
        assert_eq!(e.code(), RPMA_E_INVAL, "no completion flags: {e}");
        // Bytes lent for one call and lists of ranges are posted alone.
        let e = ch.push(rpma::ops::WriteInline::new(&remote, 0, b"lent")).unwrap_err();
        assert_eq!(e.code(), RPMA_E_NOSUPP, "inline bytes in a chain: {e}");
        let list = [rpma::ops::Sg::new(&src, 0, 4)];
        let e = ch.push(rpma::ops::WriteSg::new(&remote, 0, &list)).unwrap_err();
        assert_eq!(e.code(), RPMA_E_NOSUPP, "a list in a chain: {e}");
        assert_eq!(ch.len(), 2, "failed operations are not added");
        assert_eq!(c.pending_sends(), 0, "nothing posted while building");
        drop(ch);
        assert_eq!(c.pending_sends(), 0, "a dropped chain posts nothing");
        // A sentinel (a 0-byte write, which moves nothing) completes first:
        // on an RC queue anything posted before it would complete before it.
        c.write(&remote, 0, &src, 0, 0, LOUD, 99).unwrap();
        assert_eq!(c.cq().next_completion(T).unwrap().op_context, 99, "no completion before the sentinel's");
        let mut after = vec![0u8; 8192];
        smr.read_at(0, &mut after).unwrap();
        assert!(before == after, "the server's memory is untouched");
        // The held region was released with the chain: it deregisters.
        src.dereg().unwrap();
        // Empty and over-long chains.
        assert_eq!(c.chain().post().unwrap_err().code(), RPMA_E_INVAL, "empty chain");
        let dst = MrLocal::reg(c.peer(), AlignedBuf::new(64).unwrap(), Usage::READ_DST).unwrap();
        let mut ch = c.chain();
        for i in 0..CHAIN_MAX as u64 {
            ch.push(Read::new(&dst, 0, &remote, 0, 8).flags(QUIET).op_context(i)).unwrap();
        }
        let e = ch.push(Read::new(&dst, 0, &remote, 0, 8).flags(LOUD).op_context(99)).unwrap_err();
        assert_eq!(e.code(), RPMA_E_INVAL, "{e}");
        let max = CHAIN_MAX as u64;
        assert_eq!(e.detail(), Some(&Detail::TooLong { what: Arg::Chain, len: max + 1, max }), "{e}");
        println!("  {e}");
        drop(ch);
        assert_eq!(c.pending_sends(), 0);
        close(c, s);
    }

    /// The device refuses the 2nd operation (its rkey forged): the first
    /// completes, the 2nd completes with its error, the rest are flushed.
    fn a_device_failure_in_the_middle() {
        let usage = Usage::READ_SRC | Usage::WRITE_DST | Usage::FLUSH_TYPE_VISIBILITY;
        for only_last_signaled in [false, true] {
            let sp = peer();
            let (smr, pdata) = server_region(&sp, usage);
            let (c, s) = Pair::new().server_peer(&sp).server_pdata(pdata).connect();
            let remote = remote_of(&c);
            let forged = forged_rkey(&c);
            let src = MrLocal::reg(c.peer(), AlignedBuf::new(64).unwrap(), Usage::WRITE_SRC).unwrap();
            src.write_at(0, b"first!!!second!!third!!!").unwrap();
            let f = |last: bool| if last || !only_last_signaled { LOUD } else { QUIET };
            let mut ch = c.chain();
            ch.push(Write::new(&remote, 100, &src, 0, 8).flags(f(false)).op_context(1)).unwrap();
            ch.push(Write::new(&forged, 200, &src, 8, 8).flags(f(false)).op_context(2)).unwrap();
            ch.push(Write::new(&remote, 300, &src, 16, 8).flags(f(false)).op_context(3)).unwrap();
            ch.push(Flush::new(&remote, 100, 8, FlushType::Visibility).flags(f(true)).op_context(4)).unwrap();
            ch.post().expect("the chain is posted; the failure comes from the device");
            let wcs = drain(&c, 4, Duration::from_secs(2));
            let got: Vec<(u64, CompletionOp, WcStatus)> = wcs.iter().map(|w| (w.op_context, w.op, w.status)).collect();
            println!(
                "  {}: {}",
                if only_last_signaled { "only the last signaled" } else { "all signaled" },
                got.iter().map(|(x, _, st)| format!("op {x}: {st}")).collect::<Vec<_>>().join(", ")
            );
            let flushed = WcStatus::WR_FLUSH_ERR;
            if only_last_signaled {
                // The successful unsignaled write reports nothing; the
                // failure reports whatever its flags; flushed ones report.
                assert_eq!(got.first().map(|g| (g.0, g.2)), Some((2, WcStatus::REM_ACCESS_ERR)), "{got:?}");
                assert!(got.iter().all(|g| g.0 != 1), "the first succeeded silently: {got:?}");
                assert!(got.iter().skip(1).all(|g| g.2 == flushed), "{got:?}");
                assert_eq!(got.last().map(|g| g.0), Some(4), "{got:?}");
            } else {
                assert_eq!(
                    got,
                    vec![
                        (1, CompletionOp::Write, WcStatus::SUCCESS),
                        (2, CompletionOp::Write, WcStatus::REM_ACCESS_ERR),
                        (3, CompletionOp::Write, flushed),
                        (4, CompletionOp::Flush, flushed),
                    ]
                );
            }
            assert_eq!(c.pending_sends(), 0, "every entry retired");
            let mut b = [0u8; 8];
            smr.read_at(100, &mut b).unwrap();
            assert_eq!(&b, b"first!!!", "the first write landed");
            smr.read_at(300, &mut b).unwrap();
            let want: Vec<u8> = (300..308u32).map(|i| (i * 7 % 251) as u8).collect();
            assert_eq!(&b[..], &want[..], "the third write never ran");
            // The QP is in the error state now: a new post is accepted by
            // the provider but only flushes.
            c.write(&remote, 100, &src, 0, 8, LOUD, 5).unwrap();
            let wc = c.cq().next_completion(T).unwrap();
            assert_eq!((wc.op_context, wc.status), (5, flushed));
            drop(src);
            let _ = c.disconnect();
            drop((c, s));
        }
    }

    /// The unsafe push: a chain of unheld operations only is
    /// posted without a record (nothing pending, each op context in its
    /// work request ID), every byte checked at the other side; example
    /// 07's commit so (native `ibv_wr_*` where the world has it); then a
    /// chain with a 64-bit op context is recorded, and so are the
    /// connection's later unheld chains.
    fn unheld_chains() {
        let usage = Usage::READ_SRC | Usage::WRITE_DST | Usage::FLUSH_TYPE_VISIBILITY;
        let sp = peer();
        let (smr, pdata) = server_region(&sp, usage);
        let mut cfg = ConnCfg::new();
        cfg.set_sq_size(2 * CHAIN_MAX as u32); // room for a whole chain
        let (c, s) = Pair::new().server_peer(&sp).client_cfg(&cfg).server_pdata(pdata).connect();
        let remote = remote_of(&c);
        let local = MrLocal::reg(c.peer(), AlignedBuf::new(4096).unwrap(), Usage::READ_DST | Usage::WRITE_SRC).unwrap();
        let pattern = |at: usize, n: usize| -> Vec<u8> { (at..at + n).map(|i| (i * 7 % 251) as u8).collect() };
        // 16 reads, only the last signaled, unheld.
        let mut ch = c.chain();
        for i in 0..CHAIN_MAX as u64 {
            let f = if i + 1 == CHAIN_MAX as u64 { LOUD } else { QUIET };
            // SAFETY: `local` is neither dropped nor touched until the
            // completion below.
            unsafe {
                ch.push(rpma::ops::Unheld::new(
                    Read::new(&local, 64 * i as usize, &remote, 100 + 16 * i, 16).flags(f).op_context(100 + i),
                ))
            }
            .unwrap();
        }
        ch.post().unwrap();
        assert_eq!(c.pending_sends(), 0, "nothing recorded");
        let wc = c.cq().next_completion(T).unwrap();
        assert_eq!((wc.op_context, wc.op, wc.status), (115, CompletionOp::Read, WcStatus::SUCCESS));
        assert!(c.cq().next_completion(Duration::from_millis(200)).is_err(), "only the last one is signaled");
        for i in 0..CHAIN_MAX {
            let mut b = [0u8; 16];
            local.read_at(64 * i, &mut b).unwrap();
            assert_eq!(&b[..], &pattern(100 + 16 * i, 16)[..], "read {i}");
        }
        println!("  16 unheld reads, one completion, nothing recorded, every byte as at the server");
        // 8 writes, all signaled; the same chain filled again.
        for i in 0..8u8 {
            local.write_at(2048 + 32 * i as usize, &[0xa0 + i; 32]).unwrap();
        }
        for i in 0..8u64 {
            // SAFETY: as above.
            unsafe {
                ch.push(rpma::ops::Unheld::new(
                    Write::new(&remote, 4096 + 32 * i, &local, 2048 + 32 * i as usize, 32)
                        .flags(LOUD)
                        .op_context(200 + i),
                ))
            }
            .unwrap();
        }
        ch.post().unwrap();
        let got: Vec<(u64, CompletionOp)> = drain(&c, 8, T).iter().map(|w| (w.op_context, w.op)).collect();
        assert_eq!(got, (200..208).map(|k| (k, CompletionOp::Write)).collect::<Vec<_>>(), "in order, each its own");
        for i in 0..8u8 {
            let mut b = [0u8; 32];
            smr.read_at(4096 + 32 * i as usize, &mut b).unwrap();
            assert_eq!(b, [0xa0 + i; 32], "write {i} at the server");
        }
        println!("  8 unheld writes, 8 completions in order, every byte at the server");
        // Example 07's commit, unheld.
        println!("  path: {}", paths(&c));
        local.write_at(0, &0x5151_0000_0000_0007u64.to_le_bytes()).unwrap();
        let at = 1024u64;
        // SAFETY: as above.
        unsafe {
            ch.push(rpma::ops::Unheld::new(Write::new(&remote, at, &local, 0, 8).flags(QUIET).op_context(1)))
                .unwrap()
                .push(rpma::ops::Unheld::new(
                    Flush::new(&remote, at, 8, FlushType::Visibility).flags(QUIET).op_context(2),
                ))
                .unwrap()
                .push(rpma::ops::Unheld::new(AtomicWrite::new(&remote, 0, at.to_le_bytes()).flags(QUIET).op_context(3)))
                .unwrap()
                .push(rpma::ops::Unheld::new(
                    Flush::new(&remote, 0, 8, FlushType::Visibility).flags(LOUD).op_context(4),
                ))
                .unwrap();
        }
        ch.post().unwrap();
        assert_eq!(c.pending_sends(), 0, "nothing recorded");
        let wc = c.cq().next_completion(T).unwrap();
        assert_eq!((wc.op_context, wc.op, wc.status), (4, CompletionOp::Flush, WcStatus::SUCCESS));
        let (mut got, mut ptr) = ([0u8; 8], [0u8; 8]);
        smr.read_at(at as usize, &mut got).unwrap();
        smr.read_at(0, &mut ptr).unwrap();
        assert_eq!(u64::from_le_bytes(got), 0x5151_0000_0000_0007, "the data");
        assert_eq!(u64::from_le_bytes(ptr), at, "the pointer to it");
        println!("  example 07's commit unheld: one completion, data and pointer at the server");
        // A 64-bit op context does not fit the work request ID: recorded.
        let wide = 1u64 << 60 | 9;
        // SAFETY: as above.
        unsafe { ch.push(rpma::ops::Unheld::new(Read::new(&local, 0, &remote, 0, 8).flags(QUIET).op_context(1))) }
            .unwrap();
        unsafe { ch.push(rpma::ops::Unheld::new(Read::new(&local, 8, &remote, 8, 8).flags(LOUD).op_context(wide))) }
            .unwrap();
        ch.post().unwrap();
        assert_eq!(c.pending_sends(), 2, "recorded as a whole");
        let wc = c.cq().next_completion(T).unwrap();
        assert_eq!((wc.op_context, wc.status), (wide, WcStatus::SUCCESS));
        assert_eq!(c.pending_sends(), 0, "its completion retired both");
        // SAFETY: as above.
        unsafe { ch.push(rpma::ops::Unheld::new(Read::new(&local, 0, &remote, 0, 8).flags(LOUD).op_context(3))) }
            .unwrap();
        ch.post().unwrap();
        assert_eq!(c.pending_sends(), 1, "the connection's later unheld chains are recorded too");
        assert_eq!(c.cq().next_completion(T).unwrap().op_context, 3);
        assert_eq!(c.pending_sends(), 0);
        println!("  a 64-bit op context: the chain recorded, and the later unheld ones");
        drop(ch);
        close(c, s);
    }

    /// Chains against the send queue's size: one that can never fit is
    /// refused (Inval) and one that does not fit now is refused with Again,
    /// both before anything is posted.
    fn chain_against_the_send_queue() {
        let mut cfg = ConnCfg::new();
        cfg.set_sq_size(4);
        let sp = peer();
        let (_smr, pdata) = server_region(&sp, Usage::READ_SRC);
        let (c, s) = Pair::new().server_peer(&sp).client_cfg(&cfg).server_pdata(pdata).connect();
        let remote = remote_of(&c);
        let local = MrLocal::reg(c.peer(), AlignedBuf::new(64).unwrap(), Usage::READ_DST).unwrap();
        let chain_of = |n: u64, last: Flags| {
            let mut ch = c.chain();
            for i in 0..n {
                ch.push(Read::new(&local, 0, &remote, 0, 8).flags(if i + 1 == n { last } else { QUIET }).op_context(i))
                    .unwrap();
            }
            ch
        };
        let e = chain_of(5, LOUD).post().unwrap_err();
        assert_eq!(e.code(), RPMA_E_INVAL, "{e}");
        println!("  5 > sq_size 4: {e}");
        let e = chain_of(4, QUIET).post().unwrap_err();
        assert_eq!(e.code(), RPMA_E_INVAL, "4 unsignaled need a 5th slot: {e}");
        assert_eq!(c.pending_sends(), 0);
        c.read(&local, 0, &remote, 0, 8, QUIET, 50).unwrap();
        let mut kept = chain_of(4, LOUD);
        let e = kept.post().unwrap_err();
        assert_eq!(e.code(), RPMA_E_AGAIN, "{e}");
        assert_eq!(kept.len(), 4, "a chain refused before posting is kept");
        println!("  4 with 1 pending: {e}");
        assert_eq!(c.pending_sends(), 1, "nothing of the refused chain was posted");
        chain_of(3, LOUD).post().unwrap();
        assert_eq!(c.pending_sends(), 4, "the queue is full");
        let wc = c.cq().next_completion(T).unwrap();
        assert_eq!((wc.op_context, wc.status), (2, WcStatus::SUCCESS));
        assert_eq!(c.pending_sends(), 0);
        kept.post().unwrap();
        assert!(kept.is_empty(), "a posted chain is empty, ready to be filled again");
        assert_eq!(c.cq().next_completion(T).unwrap().op_context, 3);
        close(c, s);
    }

    /// With a native flush or atomic write the chain goes through ibv_wr_*,
    /// where the connection's QP carries write and read only: a send in such
    /// a chain is refused before anything is posted. Elsewhere it is posted.
    fn a_send_after_a_flush() {
        let sp = peer();
        let (smr, pdata) = server_region(&sp, Usage::WRITE_DST | Usage::FLUSH_TYPE_VISIBILITY | Usage::RECV);
        let (c, s) = Pair::new().server_peer(&sp).server_pdata(pdata).connect();
        let remote = remote_of(&c);
        s.recv(&smr, 7000, 64, 81).unwrap();
        let src = MrLocal::reg(c.peer(), AlignedBuf::new(64).unwrap(), Usage::WRITE_SRC | Usage::SEND).unwrap();
        src.write_at(0, b"record!!").unwrap();
        let mut ch = c.chain();
        ch.push(Write::new(&remote, 500, &src, 0, 8).flags(QUIET).op_context(1)).unwrap();
        ch.push(Flush::new(&remote, 500, 8, FlushType::Visibility).flags(QUIET).op_context(2)).unwrap();
        ch.push(rpma::ops::Send::new(&src, 0, 8).flags(LOUD).op_context(3)).unwrap();
        let r = ch.post();
        if c.peer().is_native_flush_supported() {
            let e = r.unwrap_err();
            assert_eq!(e.code(), RPMA_E_NOSUPP, "{e}");
            // The operation to post on its own, by its place in the chain.
            assert_eq!(e.detail(), Some(&Detail::NotInChain { index: 2 }), "{e}");
            assert_eq!(c.pending_sends(), 0, "nothing posted");
            println!("  native flush: {e}");
        } else {
            r.unwrap();
            let wc = c.cq().next_completion(T).unwrap();
            assert_eq!((wc.op_context, wc.op, wc.status), (3, CompletionOp::Send, WcStatus::SUCCESS));
            let wc = s.cq().next_completion(T).unwrap();
            assert_eq!((wc.op_context, wc.byte_len), (81, 8));
            let mut b = [0u8; 8];
            smr.read_at(500, &mut b).unwrap();
            assert_eq!(&b, b"record!!");
            println!("  APM flush: write, flush and send in one ibv_post_send");
        }
        close(c, s);
    }
});
