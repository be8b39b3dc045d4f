//! A [`Completion`] and how one is made from a polled work completion:
//! retiring what the operation's tracker recorded, reading the immediate
//! data and a received invalidation.

use super::WcStatus;
use crate::inflight::{RecvTracker, SendTracker};
use crate::logging::{rpma_log, LogLevel};
use crate::windows::Windows;
use crate::wrid::{self, CompletionOp, WrId};
use rpma_sys::cq::{PolledWc, WC_WITH_IMM, WC_WITH_INV};

/// One work completion (librpma exposes `struct ibv_wc`): read from a CQ,
/// never built by hand outside rpma (it may gain fields), and never taken
/// by rpma as evidence of what the device did.
///
/// ```compile_fail,E0639
/// let forged = rpma::Completion { op_context: 7, ..rpma::Cq::EMPTY };
/// ```
// `repr(C)`, with `status` and `wc_opcode` next to each other as in
// `ibv_wc`: the translation copies them as one 8-byte word.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(C)]
#[non_exhaustive]
pub struct Completion {
    /// The `op_context` given when the operation was posted.
    pub op_context: u64,
    /// The operation.
    pub op: CompletionOp,
    /// Success or the error.
    pub status: WcStatus,
    /// The device's own `ibv_wc_opcode`, which tells how an operation was
    /// carried out: a `flush` completes as `IBV_WC_FLUSH` (8) when native
    /// and as `IBV_WC_RDMA_READ` (2) when emulated (APM); an `atomic_write`
    /// as `IBV_WC_ATOMIC_WRITE` (9) or `IBV_WC_RDMA_WRITE` (1). Meaningful
    /// only when `status` is a success.
    pub wc_opcode: u32,
    /// Bytes received (receives).
    pub byte_len: u32,
    /// The local QP number.
    pub qp_num: u32,
    /// Immediate data in host order, when the completion carries it.
    pub imm: Option<u32>,
    /// The rkey a received send-with-invalidate invalidated.
    pub invalidated_rkey: Option<u32>,
}

/// The completion of `w`, its entry retired from the tracker its ID
/// points to ([`retire`]); a tracked send's built in its own branch (the
/// common case: what the entry reported stays in registers), the others
/// through [`retire`].
#[inline(always)]
pub(super) fn translate(
    w: &PolledWc,
    send: Option<&SendTracker>,
    recv: Option<&RecvTracker>,
    srq_recv: Option<&RecvTracker>,
    windows: &Windows,
) -> Completion {
    if let WrId::Send(seq) = WrId::decode(w.wr_id()) {
        return match send.and_then(|t| t.complete(seq, w.status() == 0)) {
            Some(found) => completion(w, found, windows),
            None => completion(w, unknown(w), windows),
        };
    }
    translate_other(w, recv, srq_recv, windows)
}

/// [`translate`] of a receive's or an untracked operation's completion.
#[inline]
fn translate_other(
    w: &PolledWc,
    recv: Option<&RecvTracker>,
    srq_recv: Option<&RecvTracker>,
    windows: &Windows,
) -> Completion {
    completion(w, retire(w, None, recv, srq_recv), windows)
}

/// The completion of `w`, given what its tracker recorded (`found`); a
/// successful receive that invalidated a window of the peer's (`windows`)
/// ends that window's binding.
#[inline]
pub(super) fn completion(w: &PolledWc, (op_context, op): (u64, CompletionOp), windows: &Windows) -> Completion {
    let mut c = Completion {
        op_context,
        op,
        status: WcStatus(w.status()),
        byte_len: w.byte_len(),
        imm: None,
        invalidated_rkey: None,
        qp_num: w.qp_num(),
        wc_opcode: w.opcode(),
    };
    // Most completions carry neither: one test for both.
    if w.wc_flags() & (WC_WITH_IMM | WC_WITH_INV) != 0 {
        c.imm = (w.wc_flags() & WC_WITH_IMM != 0).then_some(w.imm_data());
        c.invalidated_rkey = (w.wc_flags() & WC_WITH_INV != 0).then_some(w.imm_data());
        note_invalidation(w, windows);
    }
    c
}

/// A successful receive that invalidated a window of the peer's ends that
/// window's binding here.
#[inline]
pub(super) fn note_invalidation(w: &PolledWc, windows: &Windows) {
    if w.wc_flags() & WC_WITH_INV != 0 && w.status() == 0 {
        windows.invalidated(w.qp_num(), w.imm_data());
    }
}

/// What a completion for an ID nothing posted here reports (logged).
#[cold]
#[inline(never)]
fn unknown(w: &PolledWc) -> (u64, CompletionOp) {
    rpma_log!(LogLevel::Error, "completion for an unknown work request {:#x}", w.wr_id());
    (w.wr_id(), CompletionOp::Other(w.opcode()))
}

/// Retires the entry a completion names in the tracker its ID points to;
/// returns the operation's context and kind, a receive's from the device's
/// opcode ([`unknown`]'s for an ID nothing posted here has). Every arm
/// ends in its own value, so the common ones reach the completion in
/// registers, not through an `Option` in memory.
#[inline]
pub(super) fn retire(
    w: &PolledWc,
    send: Option<&SendTracker>,
    recv: Option<&RecvTracker>,
    srq_recv: Option<&RecvTracker>,
) -> (u64, CompletionOp) {
    // A receive's kind comes from the device's opcode.
    let received = |t: Option<&RecvTracker>, slot| match t.and_then(|t| t.complete(slot)) {
        Some((ctx, kind)) => (ctx, wrid::received_kind(kind, w.opcode())),
        None => unknown(w),
    };
    match WrId::decode(w.wr_id()) {
        WrId::Send(seq) => match send.and_then(|t| t.complete(seq, w.status() == 0)) {
            Some(found) => found,
            None => unknown(w),
        },
        WrId::Recv(slot) => received(recv, slot),
        WrId::SrqRecv(slot) => received(srq_recv, slot),
        // An untracked receive's kind too comes from the device's opcode.
        WrId::Untracked(Some((ctx, CompletionOp::Recv))) => (ctx, wrid::recv_kind(w.opcode())),
        WrId::Untracked(Some(found)) => found,
        WrId::Untracked(None) => unknown(w),
    }
}
