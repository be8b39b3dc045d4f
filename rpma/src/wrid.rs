//! The 64-bit work-request ID and the completion kinds it names: the one
//! place that knows its bit layout.
//!
//! | bits 63 62 61 | meaning                 | low bits                     |
//! |---------------|-------------------------|------------------------------|
//! | 0  0  0       | a tracked send          | sequence number (61 bits)    |
//! | 0  0  1       | an untracked operation  | kind (56..61), op_context (0..56) |
//! | 1  0  x       | a receive of a QP       | tracker slot                 |
//! | 1  1  x       | a receive of an SRQ     | tracker slot                 |
//!
//! Tracked operations find their op_context and kind in their tracker
//! (`inflight`); untracked ones (unheld posts) carry both in
//! the ID, which limits their op_context to 56 bits.

use crate::error::{Error, Result};

/// What operation a completion is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum CompletionOp {
    /// `read`.
    Read,
    /// `write`.
    Write,
    /// `write_with_imm`.
    WriteWithImm,
    /// `atomic_write`.
    AtomicWrite,
    /// `compare_and_swap` (rpma extension).
    CompareSwap,
    /// `fetch_and_add` (rpma extension).
    FetchAdd,
    /// `flush` (also when carried out as an 8-byte RDMA READ, APM).
    Flush,
    /// `send`.
    Send,
    /// `send_with_imm`.
    SendWithImm,
    /// `send_with_inv`.
    SendWithInv,
    /// `bind_mw`.
    BindMw,
    /// `invalidate_mw`.
    LocalInv,
    /// A receive that got a send (with or without immediate data).
    Recv,
    /// A receive consumed by a `write_with_imm` from the other side
    /// (`IBV_WC_RECV_RDMA_WITH_IMM`).
    RecvRdmaWithImm,
    /// An opcode rpma did not post (raw `ibv_wc_opcode`).
    Other(u32),
}

/// The kinds an untracked ID can carry, by their 5-bit index.
const KINDS: [CompletionOp; 13] = [
    CompletionOp::Read,
    CompletionOp::Write,
    CompletionOp::WriteWithImm,
    CompletionOp::AtomicWrite,
    CompletionOp::Flush,
    CompletionOp::Send,
    CompletionOp::SendWithImm,
    CompletionOp::SendWithInv,
    CompletionOp::BindMw,
    CompletionOp::LocalInv,
    CompletionOp::Recv,
    CompletionOp::CompareSwap,
    CompletionOp::FetchAdd,
];

const RECV_BIT: u64 = 1 << 63;
const SRQ_BIT: u64 = 1 << 62;
const UNTRACKED_BIT: u64 = 1 << 61;
const KIND_SHIFT: u32 = 56;
const KIND_MASK: u64 = 0x1f;
/// The largest op_context an untracked operation can carry.
pub(crate) const UNTRACKED_CTX_MAX: u64 = (1 << KIND_SHIFT) - 1;
/// Sequence numbers of tracked sends wrap at this mask.
pub(crate) const SEND_SEQ_MASK: u64 = UNTRACKED_BIT - 1;
/// Receive tracker slots fit below this mask.
const SLOT_MASK: u64 = SRQ_BIT - 1;

/// A decoded work-request ID.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum WrId {
    /// A tracked send: its sequence number in the send tracker.
    Send(u64),
    /// A receive posted to a QP: its slot in the QP's receive tracker.
    Recv(u64),
    /// A receive posted to an SRQ: its slot in the SRQ's tracker.
    SrqRecv(u64),
    /// An untracked operation: the kind and op_context it carries, or
    /// `None` for a kind index rpma never encodes.
    Untracked(Option<(u64, CompletionOp)>),
}

impl WrId {
    /// Decodes a completion's ID.
    #[inline]
    pub(crate) fn decode(raw: u64) -> WrId {
        // Ordered by the flag bits (receive 63, SRQ 62, untracked 61): a
        // tracked send (none of them) is one comparison, an untracked
        // operation (only bit 61) two.
        if raw < UNTRACKED_BIT {
            WrId::Send(raw)
        } else if raw < SRQ_BIT {
            let kind = KINDS.get(((raw >> KIND_SHIFT) & KIND_MASK) as usize).copied();
            WrId::Untracked(kind.map(|k| (raw & UNTRACKED_CTX_MAX, k)))
        } else if raw < RECV_BIT {
            WrId::Untracked(None) // the SRQ bit without the receive bit: no ID rpma makes
        } else if raw & SRQ_BIT == 0 {
            WrId::Recv(raw & SLOT_MASK)
        } else {
            WrId::SrqRecv(raw & SLOT_MASK)
        }
    }
}

/// The op context of an untracked operation's ID, `None` for any other
/// ID: [`WrId::decode`]'s untracked arm without the kind, for a caller
/// that reports only the context (librpma's `rpma_cq_get_wc`; a receive's
/// context is the same).
#[inline(always)]
pub(crate) fn untracked_ctx(raw: u64) -> Option<u64> {
    // The top byte: the flag bits (only the untracked one set) over a
    // kind below `KINDS.len()`, i.e. one range, one comparison.
    let top = raw >> KIND_SHIFT;
    (top.wrapping_sub(UNTRACKED_BIT >> KIND_SHIFT) < KINDS.len() as u64).then_some(raw & UNTRACKED_CTX_MAX)
}

/// The ID of a tracked send with sequence number `seq`.
#[inline]
pub(crate) fn send(seq: u64) -> u64 {
    seq & SEND_SEQ_MASK
}

/// The ID of a receive in slot `slot` of a QP's (or with `srq`, an SRQ's)
/// tracker.
#[inline]
pub(crate) fn recv(slot: u64, srq: bool) -> u64 {
    (slot & SLOT_MASK) | RECV_BIT | if srq { SRQ_BIT } else { 0 }
}

/// The ID of an untracked operation of kind `op` carrying `ctx`.
///
/// # Errors
/// [`Error::Inval`] when `ctx` exceeds 56 bits.
#[inline]
pub(crate) fn untracked(op: CompletionOp, ctx: u64) -> Result<u64> {
    if ctx > UNTRACKED_CTX_MAX {
        return Err(ctx_too_big(ctx));
    }
    // An early return, not `untracked_id(..).ok_or_else(..)`: that form
    // keeps the error's closure on the posting path.
    Ok(id_of(op, ctx))
}

/// The index of `op` in [`KINDS`] (a kind never posted untracked gets an
/// index past its end, which decodes to no kind).
/// [`untracked`]'s ID, `None` when `ctx` exceeds 56 bits.
#[inline(always)]
pub(crate) fn untracked_id(op: CompletionOp, ctx: u64) -> Option<u64> {
    (ctx <= UNTRACKED_CTX_MAX).then(|| id_of(op, ctx))
}

/// The ID of kind `op` and `ctx` (at most 56 bits).
#[inline(always)]
const fn id_of(op: CompletionOp, ctx: u64) -> u64 {
    UNTRACKED_BIT | kind_index(op) << KIND_SHIFT | ctx
}

#[inline]
const fn kind_index(op: CompletionOp) -> u64 {
    match op {
        CompletionOp::Read => 0,
        CompletionOp::Write => 1,
        CompletionOp::WriteWithImm => 2,
        CompletionOp::AtomicWrite => 3,
        CompletionOp::Flush => 4,
        CompletionOp::Send => 5,
        CompletionOp::SendWithImm => 6,
        CompletionOp::SendWithInv => 7,
        CompletionOp::BindMw => 8,
        CompletionOp::LocalInv => 9,
        CompletionOp::Recv => 10,
        CompletionOp::CompareSwap => 11,
        CompletionOp::FetchAdd => 12,
        CompletionOp::RecvRdmaWithImm | CompletionOp::Other(_) => KIND_MASK,
    }
}

#[cold]
#[inline(never)]
fn ctx_too_big(op_context: u64) -> Error {
    Error::inval(format!(
        "op_context {op_context:#x} of an unrecorded operation exceeds {UNTRACKED_CTX_MAX:#x} (56 bits): \
         the fast path carries it in the work request ID"
    ))
}

/// The completion kind of a receive, from the device's opcode.
#[inline]
pub(crate) fn recv_kind(wc_opcode: u32) -> CompletionOp {
    if wc_opcode == rpma_sys::cq::WC_RECV_RDMA_WITH_IMM {
        CompletionOp::RecvRdmaWithImm
    } else {
        CompletionOp::Recv
    }
}

/// The kind an awaited operation (`rpma::aio`) is recorded with:
/// [`CompletionOp::Other`] with this bit over its real kind's index. Only
/// the async router's own posts record it (a verb's kind comes from the
/// verb, and the opcodes [`CompletionOp::Other`] carries otherwise are the
/// device's, all below it), so a completion reporting it is an awaited
/// operation's, whatever op context or immediate data a user passes.
#[cfg(feature = "tokio")]
const AWAITED: u32 = 1 << 31;

/// `op` recorded as an awaited operation's kind.
#[cfg(feature = "tokio")]
#[inline(always)]
pub(crate) const fn awaited(op: CompletionOp) -> CompletionOp {
    CompletionOp::Other(AWAITED | kind_index(op) as u32)
}

/// The real kind of an awaited operation's completion (a receive's from
/// the device's opcode), `None` for any other completion.
#[cfg(feature = "tokio")]
#[inline]
pub(crate) fn awaited_kind(op: CompletionOp, wc_opcode: u32) -> Option<CompletionOp> {
    match op {
        CompletionOp::Other(x) if x & AWAITED != 0 => match KINDS.get((x & !AWAITED) as usize).copied()? {
            CompletionOp::Recv => Some(recv_kind(wc_opcode)),
            kind => Some(kind),
        },
        _ => None,
    }
}

/// The kind of a retired receive recorded as `recorded`: from the device's
/// opcode, unless it was recorded as an awaited operation's (kept for the
/// async router, which reads it back with [`awaited_kind`]).
#[inline(always)]
pub(crate) fn received_kind(recorded: CompletionOp, wc_opcode: u32) -> CompletionOp {
    match recorded {
        CompletionOp::Other(_) => recorded,
        _ => recv_kind(wc_opcode),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips() {
        assert_eq!(WrId::decode(send(5)), WrId::Send(5));
        assert_eq!(WrId::decode(send(SEND_SEQ_MASK)), WrId::Send(SEND_SEQ_MASK));
        assert_eq!(WrId::decode(recv(7, false)), WrId::Recv(7));
        assert_eq!(WrId::decode(recv(7, true)), WrId::SrqRecv(7));
        for k in KINDS {
            for ctx in [0, 1, UNTRACKED_CTX_MAX] {
                assert_eq!(WrId::decode(untracked(k, ctx).unwrap()), WrId::Untracked(Some((ctx, k))));
            }
        }
    }

    #[test]
    fn kind_indexes_match_the_table() {
        for (i, k) in KINDS.iter().enumerate() {
            assert_eq!(kind_index(*k), i as u64, "{k:?}");
        }
    }

    #[test]
    fn untracked_ctx_agrees_with_decode() {
        let ids =
            [0, 5, SEND_SEQ_MASK, recv(3, false), recv(4, true), SRQ_BIT | 7, UNTRACKED_BIT | 0x1f << KIND_SHIFT | 3]
                .into_iter()
                .chain(KINDS.iter().flat_map(|&k| [0, 1, UNTRACKED_CTX_MAX].map(|c| id_of(k, c))));
        for raw in ids {
            let want = match WrId::decode(raw) {
                WrId::Untracked(Some((ctx, _))) => Some(ctx),
                _ => None,
            };
            assert_eq!(untracked_ctx(raw), want, "{raw:#x}");
        }
    }

    #[test]
    fn untracked_limits() {
        assert!(matches!(untracked(CompletionOp::Read, UNTRACKED_CTX_MAX + 1), Err(Error::Inval(_))));
        // A kind index rpma never writes decodes to no kind.
        assert_eq!(WrId::decode(UNTRACKED_BIT | 0x1f << KIND_SHIFT | 3), WrId::Untracked(None));
        // Neither is an ID with the SRQ bit alone (no tracker's).
        assert_eq!(WrId::decode(SRQ_BIT | 5), WrId::Untracked(None));
        assert_eq!(WrId::decode(SRQ_BIT | UNTRACKED_BIT | 5), WrId::Untracked(None));
    }

    #[test]
    fn recv_opcode() {
        assert_eq!(recv_kind(128), CompletionOp::Recv);
        assert_eq!(recv_kind(129), CompletionOp::RecvRdmaWithImm);
    }

    #[cfg(feature = "tokio")]
    #[test]
    fn awaited_kinds_round_trip_and_no_other_kind_reads_as_one() {
        for &k in KINDS.iter() {
            let rec = awaited(k);
            let want = if k == CompletionOp::Recv { recv_kind(rpma_sys::cq::WC_RECV_RDMA_WITH_IMM) } else { k };
            assert_eq!(awaited_kind(rec, rpma_sys::cq::WC_RECV_RDMA_WITH_IMM), Some(want));
            assert_eq!(awaited_kind(k, 0), None, "{k:?}");
            assert_eq!(received_kind(rec, 0), rec, "kept for the router");
        }
        for opcode in [0, 1, 2, 8, 9, 128, 129, 255, u32::MAX >> 1] {
            assert_eq!(awaited_kind(CompletionOp::Other(opcode), 0), None, "the device's opcode {opcode}");
        }
        assert_eq!(
            received_kind(CompletionOp::Recv, rpma_sys::cq::WC_RECV_RDMA_WITH_IMM),
            CompletionOp::RecvRdmaWithImm
        );
    }
}
