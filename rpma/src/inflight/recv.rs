//! The receive queue's tracker (a QP's or an SRQ's): slots by index.

use super::{lock, post_error, too_deep, Hold};
use crate::error::Result;
use crate::wrid::{self, CompletionOp};
use rpma_sys::wr::{RecvQueue, Sge};
use std::sync::Mutex;

/// Receives posted to a QP or an SRQ.
pub(crate) struct RecvTracker {
    m: Mutex<Slots>,
    srq: bool,
}

/// Posted receives by slot: the slot index is the work request ID (with the
/// tag bits), so retiring one is an index, not a hash lookup.
#[derive(Default)]
struct Slots {
    entries: Vec<Option<Entry>>,
    free: Vec<usize>,
}

/// A posted receive: what its completion reports, what it keeps alive.
struct Entry {
    ctx: u64,
    kind: CompletionOp,
    #[allow(dead_code)] // kept for its drop
    hold: Option<Hold>,
}

impl RecvTracker {
    /// A tracker for a receive queue of `depth` entries (slots are
    /// allocated up front, so posting does not reallocate).
    ///
    /// # Errors
    /// [`Error::NoMem`] when the slots cannot be allocated.
    pub(crate) fn new(srq: bool, depth: u32) -> Result<RecvTracker> {
        let n = depth as usize;
        let mut slots = Slots::default();
        slots.entries.try_reserve_exact(n).map_err(|_| too_deep("receive", n))?;
        slots.free.try_reserve_exact(n).map_err(|_| too_deep("receive", n))?;
        Ok(RecvTracker { m: Mutex::new(slots), srq })
    }

    /// Posts a receive through `post` (given the wr_id) and records it;
    /// also when the post failed but the provider may have queued it
    /// ([`PostError::maybe_queued`](rpma_sys::post::PostError)): then its hold
    /// stays until it completes or the queue is destroyed, and the error is
    /// returned.
    pub(super) fn post_with(
        &self,
        kind: CompletionOp,
        ctx: u64,
        hold: Option<Hold>,
        post: impl FnOnce(u64) -> std::result::Result<(), rpma_sys::post::PostError>,
    ) -> Result<()> {
        let mut g = lock(&self.m);
        let idx = g.free.pop().unwrap_or(g.entries.len());
        let res = post(wrid::recv(idx as u64, self.srq));
        match &res {
            Err(e) if !e.maybe_queued => {
                if idx < g.entries.len() {
                    g.free.push(idx);
                }
            }
            // Posted, or maybe queued: recorded with its hold either way.
            _ => {
                let entry = Some(Entry { ctx, kind, hold });
                match g.entries.get_mut(idx) {
                    Some(slot) => *slot = entry,
                    None => g.entries.push(entry),
                }
            }
        }
        res.map_err(|e| post_error("ibv_post_recv", e))
    }

    /// Posts a receive scattering into `sgl` on `queue` (a connection's QP
    /// or a shared receive queue) and records it: the regions `hold` keeps
    /// alive hold `sgl` (`None`: `sgl` names no memory). `kind` is what its
    /// completion reports: [`CompletionOp::Recv`] (the device's opcode
    /// decides), or an awaited receive's kind.
    ///
    /// # Errors
    /// [`Error::Provider`](crate::Error::Provider) when posting fails
    /// (`ENOMEM`: the queue is full).
    pub(crate) fn post<Q: RecvQueue>(
        &self,
        queue: &Q,
        kind: CompletionOp,
        ctx: u64,
        hold: Option<Hold>,
        sgl: &[Sge],
    ) -> Result<()> {
        self.post_with(kind, ctx, hold, |wr_id| {
            // SAFETY: `sgl` lies in the regions the entry's hold keeps alive
            // until the receive completes or the queue is destroyed (a
            // failed destroy leaks the tracker, see `ConnParts::drop` and
            // `SrqInner::drop`); without a hold, the list is empty or the
            // receive is an `ops::Unheld` one (`ConnReq::post`), whose
            // creator keeps the regions (`Unheld::new`'s contract).
            unsafe { rpma_sys::wr::post_recv(queue, wr_id, sgl) }
        })
    }

    /// Posts a receive scattering into `sgl` on `queue` under librpma's
    /// memory contract (an `ops::Unheld` receive): untracked, `ctx` in the
    /// work request ID, when it fits there (56 bits); else recorded for
    /// its op context only, without a hold. Receives complete one by one,
    /// so an untracked one never leaves a recorded one behind.
    ///
    /// # Safety
    /// The memory of `sgl` stays registered and untouched until the receive
    /// completes or the queue is destroyed.
    ///
    /// # Errors
    /// As [`post`](Self::post).
    #[inline]
    pub(crate) unsafe fn post_unheld<Q: RecvQueue>(&self, queue: &Q, ctx: u64, sgl: &[Sge]) -> Result<()> {
        if ctx <= wrid::UNTRACKED_CTX_MAX {
            let wr_id = wrid::untracked(CompletionOp::Recv, ctx)?;
            // SAFETY: this function's contract.
            return unsafe { super::untracked::post_recv(queue, wr_id, sgl) };
        }
        // SAFETY: this function's contract.
        self.post_with(CompletionOp::Recv, ctx, None, |wr_id| unsafe { rpma_sys::wr::post_recv(queue, wr_id, sgl) })
    }

    /// The receive in `slot` (from its decoded wr_id) completed: retire it.
    pub(crate) fn complete(&self, slot: u64) -> Option<(u64, CompletionOp)> {
        let mut g = lock(&self.m);
        let idx = usize::try_from(slot).ok()?;
        let e = g.entries.get_mut(idx)?.take()?;
        g.free.push(idx);
        drop(g); // `e`'s hold is released after the lock
        Some((e.ctx, e.kind))
    }

    pub(crate) fn pending(&self) -> usize {
        let g = lock(&self.m);
        g.entries.len() - g.free.len()
    }
}
