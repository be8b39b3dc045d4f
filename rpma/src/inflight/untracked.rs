//! The posts of [`Unheld`](crate::ops::Unheld) operations (by
//! [`Conn::post`](crate::Conn::post) and [`Chain::post`](crate::Chain::post)): nothing recorded, the kind and op
//! context in the work request ID; the caller's `unsafe` contract keeps the
//! memory alive instead of a hold.

use super::post_error;
use crate::error::Result;
use rpma_sys::qp::Qp;
use rpma_sys::wr::{RecvQueue, SendWr, Sge};

/// Posts `wr` with `wr_id` on `qp`, recording nothing.
///
/// # Safety
/// The local memory `wr` names must stay registered, allocated and
/// untouched until the operation (or a later signaled one) completes, or
/// the QP is destroyed: the contract of the `unsafe` caller.
///
/// # Errors
/// [`Error::Provider`](crate::Error::Provider) when posting fails.
#[inline(always)]
pub(crate) unsafe fn post_send(qp: &Qp, wr_id: u64, wr: SendWr) -> Result<()> {
    let mut built = rpma_sys::wr::BuiltSend::ZERO;
    wr.build_in(&mut built);
    // SAFETY: the caller's contract.
    unsafe { qp.post_send(&mut built, wr_id) }.map_err(|e| post_error("ibv_post_send", e))
}

/// Posts a receive into `sgl` with `wr_id` on `queue` (a QP or an SRQ),
/// recording nothing.
///
/// # Safety
/// As [`post_send`], for the memory of `sgl` until the receive completes.
///
/// # Errors
/// [`Error::Provider`](crate::Error::Provider) when posting fails.
pub(crate) unsafe fn post_recv<Q: RecvQueue>(queue: &Q, wr_id: u64, sgl: &[Sge]) -> Result<()> {
    // SAFETY: the caller's contract.
    unsafe { rpma_sys::wr::post_recv(queue, wr_id, sgl) }.map_err(|e| post_error("ibv_post_recv", e))
}
