//! What a connection owns, the order it is released in, and the raw posts
//! (tracked through the trackers, or untracked for the unheld posts).

use crate::cq::{ConnCq, Cq};
use crate::error::{Error, Result};
use crate::inflight::{untracked, Hold, RecvTracker, SendTracker};
use crate::logging::{rpma_log, LogLevel};
use crate::memory::AlignedBuf;
use crate::mr::MrLocal;
use crate::peer::Peer;
use crate::srq::Srq;
use crate::wrid::{self, CompletionOp};
use rpma_sys::cm::CmId;
use rpma_sys::cq::CompChannel;
use rpma_sys::wr::{SendWr, Sge};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// Most completions reaped from one CQ when a connection is dropped.
const DRAIN_MAX: usize = 1 << 16;

/// Everything a connection owns. Released in librpma's order (`Drop`
/// below, then field order): QP, RCQ, CQ, CM ID, shared completion channel;
/// the trackers, and the regions they keep alive, only after the QP is gone
/// and the device can no longer touch them.
pub(crate) struct ConnParts {
    pub(crate) rcq: Option<Cq>,
    pub(crate) cq: ConnCq,
    pub(crate) id: CmId,
    pub(crate) shared: Option<CompChannel>,
    pub(crate) srq: Option<Srq>,
    pub(crate) send: Arc<SendTracker>,
    pub(crate) recv: Arc<RecvTracker>,
    pub(crate) flush_mr: MrLocal<AlignedBuf>,
    pub(crate) peer: Peer,
    /// Set by `disconnect` and by a closing event: posting is refused then.
    pub(crate) closed: AtomicBool,
    /// Set when an [`Unheld`](crate::ops::Unheld) post had to
    /// record its operation (an op context wider than the work request ID):
    /// its later ones are recorded too, so that a signaled one retires an
    /// unsignaled one recorded before it (an untracked completion retires
    /// nothing).
    pub(crate) unheld_recorded: AtomicBool,
    /// Applied to the QP when the connection is established.
    pub(crate) min_rnr_timer: u8,
    /// What the QP was granted, read once at set-up.
    pub(crate) limits: QpLimits,
    /// Which operations the QP carries natively, read once at set-up.
    pub(crate) native: NativeOps,
    /// What ends with the connection before its QP goes: the type 2
    /// windows bound on it (exports' and users').
    pub(crate) ends: EndsWith,
}

/// Something that ends with a connection, before its QP goes: a type 2
/// window bound on it, deallocated (an export's, or a user's `Mw`).
pub(crate) trait EndWithConn: Send + Sync {
    /// The connection whose QP is `qp_num`, on `peer`, is going.
    fn end(&self, qp_num: u32, peer: &Peer);
}

/// A connection's [`EndWithConn`]s, held weakly: each lives as long as its
/// owner keeps it, and ends with the connection if it is still there.
#[derive(Default)]
pub(crate) struct EndsWith(std::sync::Mutex<Vec<std::sync::Weak<dyn EndWithConn>>>);

impl EndsWith {
    /// Adds `w` unless it is there already (a window bound again).
    pub(crate) fn add(&self, w: std::sync::Weak<dyn EndWithConn>) {
        let mut all = crate::inflight::lock(&self.0);
        all.retain(|w| w.strong_count() > 0);
        if !all.iter().any(|x| std::sync::Weak::ptr_eq(x, &w)) {
            all.push(w);
        }
    }

    fn end_all(&self, qp_num: u32, peer: &Peer) {
        // Taken out first: each ends after the list's lock is let go.
        let all = std::mem::take(&mut *crate::inflight::lock(&self.0));
        for w in all {
            if let Some(x) = w.upgrade() {
                x.end(qp_num, peer);
            }
        }
    }
}

/// Which of librpma's emulated operations a QP carries natively through
/// its extended interface (`ibv_wr_atomic_write`, `ibv_wr_flush`): read
/// once at set-up (the interface does not change), so an operation does not
/// look it up on every post.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct NativeOps {
    pub(crate) atomic_write: bool,
    pub(crate) flush: bool,
}

impl NativeOps {
    /// What `qp` carries (nothing without a QP or an extended interface).
    pub(crate) fn of(qp: Option<&rpma_sys::qp::Qp>) -> NativeOps {
        match qp.and_then(|q| q.ex()) {
            Some(ex) => NativeOps { atomic_write: ex.has_atomic_write(), flush: ex.has_flush() },
            None => NativeOps::default(),
        }
    }
}

/// A connection's granted QP capacities, as rpma uses them: the SGE counts
/// capped at the stack list rpma-sys builds ([`rpma_sys::wr::MAX_SGL`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct QpLimits {
    pub(crate) max_send_sge: u32,
    pub(crate) max_recv_sge: u32,
    pub(crate) max_inline_data: u32,
}

impl QpLimits {
    /// From the granted capacities (`granted`) or, when they could not be
    /// read, the requested ones (a created QP has at least those).
    pub(crate) fn new(granted: Option<rpma_sys::qp::QpCaps>, send_sge: u32, recv_sge: u32, inline: u32) -> QpLimits {
        let cap = rpma_sys::wr::MAX_SGL as u32;
        let (s, r, i) = match granted {
            Some(c) => (c.max_send_sge.max(send_sge), c.max_recv_sge.max(recv_sge), c.max_inline_data.max(inline)),
            None => (send_sge, recv_sge, inline),
        };
        QpLimits { max_send_sge: s.min(cap), max_recv_sge: r.min(cap), max_inline_data: i }
    }
}

impl Drop for ConnParts {
    fn drop(&mut self) {
        // librpma's order: the QP first, then (by field order) the CQs and
        // the CM ID. Like librpma, no disconnect here: an implicit
        // disconnect makes the passive side of a pair dropped at once wait
        // out the CM's timewait (docs/devices.md).
        //
        // Completions still queued are reaped first, before and after the
        // QP goes, so the entries they name (receives taken from a shared
        // receive queue among them) are retired, not kept until the SRQ goes.
        self.drain_cqs();
        // Type 2 windows bound on the QP end with the connection, before
        // it (rxe tears down a QP with a window bound to it slowly).
        let qp_num = self.id.qp().map(|q| q.qp_num());
        if let Some(n) = qp_num {
            self.ends.end_all(n, &self.peer);
        }
        let destroyed = self.id.destroy_qp();
        if let (ConnCq::Shared(scq), Some(n)) = (&self.cq, qp_num) {
            // The QP's completions still in the CQ are retired, the other
            // connections' set aside; then the route goes. The trackers are
            // released below (or leaked with them); the CQ lives on.
            scq.routes().remove(scq.cq(), n);
        }
        match destroyed {
            Ok(()) => {
                self.drain_cqs();
                // Its invalidation reports were all polled above, unless
                // an SRQ's own receive CQ holds some: stale window keys of
                // this QP can go (see `Windows`).
                if let (Some(n), true) = (qp_num, self.srq.as_ref().is_none_or(|s| s.rcq().is_none())) {
                    self.peer.windows().forget_qp(n);
                }
            }
            Err(e) => {
                // The device may still process the posted work requests:
                // keep what they use (the trackers' holds) for ever.
                rpma_log!(
                    LogLevel::Error,
                    "ibv_destroy_qp: {e}; leaking the memory of {} posted send(s) and {} receive(s)",
                    self.send.pending(),
                    self.recv.pending()
                );
                std::mem::forget(self.send.clone());
                std::mem::forget(self.recv.clone());
                std::mem::forget(self.flush_mr.region_hold()); // APM flush reads land here
            }
        }
    }
}

#[cold]
#[inline(never)]
fn closed() -> Error {
    let text = "the connection is closed (disconnected, lost or rejected): nothing can be posted";
    Error::closed(text)
}

#[cold]
#[inline(never)]
fn no_qp() -> Error {
    Error::Unknown("the connection has no queue pair".into())
}

impl ConnParts {
    /// Polls the connection's own CQs empty (bounded), retiring what each
    /// completion names; the completions are dropped. A shared CQ is left
    /// alone: its completions belong to other connections too.
    fn drain_cqs(&self) {
        let own = match &self.cq {
            ConnCq::Own(c) => Some(c),
            ConnCq::Shared(_) => None,
        };
        let mut wcs = [Cq::EMPTY; 16];
        for cq in own.into_iter().chain(self.rcq.as_ref()) {
            // `poll_wc`: also a CQ an async reaper owned.
            for _ in 0..DRAIN_MAX / wcs.len() {
                if !matches!(cq.poll_wc(&mut wcs), Ok(n) if n > 0) {
                    break;
                }
            }
        }
    }

    /// The QP, unless the connection is closed.
    ///
    /// # Errors
    /// [`Error::Inval`] once closed.
    #[inline]
    pub(crate) fn qp(&self) -> Result<&rpma_sys::qp::Qp> {
        if self.closed.load(Ordering::Relaxed) {
            return Err(closed());
        }
        self.id.qp().ok_or_else(no_qp)
    }

    /// Posts a checked receive into `sgl`, tracked: `hold` (`None`: `sgl`
    /// names no memory) is kept until its completion.
    pub(crate) fn post_recv(&self, kind: CompletionOp, ctx: u64, sgl: &[Sge], hold: Option<Hold>) -> Result<()> {
        let qp = self.recv_qp()?;
        self.recv.post(qp, kind, ctx, hold, sgl)
    }

    /// The QP to post receives on.
    ///
    /// # Errors
    /// [`Error::Inval`] when the connection receives through an SRQ, or is
    /// closed.
    pub(crate) fn recv_qp(&self) -> Result<&rpma_sys::qp::Qp> {
        if self.srq.is_some() {
            return Err(Error::inval("recv: the connection receives through its SRQ; post with Srq::post"));
        }
        self.qp()
    }

    /// Posts without recording anything (the unheld posts): the
    /// wr_id carries the kind and `ctx`.
    ///
    /// # Safety
    /// The local memory of `wr` must stay alive and untouched until the
    /// operation (or a later signaled one) completes or the connection is
    /// dropped (the contract of [`Unheld::new`](crate::ops::Unheld::new)).
    #[inline(always)]
    pub(crate) unsafe fn post_untracked(&self, kind: CompletionOp, ctx: u64, wr: SendWr) -> Result<()> {
        let wr_id = wrid::untracked(kind, ctx)?;
        let qp = self.qp()?;
        // SAFETY: this function's contract.
        unsafe { untracked::post_send(qp, wr_id, wr) }
    }

    /// Posts `wr` through the send tracker, which keeps what `hold` gives
    /// (a hold on the region of `wr`'s local range) until the operation
    /// completes.
    #[inline(always)]
    pub(crate) fn post(
        &self,
        kind: CompletionOp,
        ctx: u64,
        hold: Option<impl crate::inflight::Take>,
        wr: SendWr,
    ) -> Result<()> {
        let qp = self.qp()?;
        self.send.post_send(qp, ctx, kind, hold, wr)
    }
}

#[cfg(test)]
mod tests {
    use super::QpLimits;
    use rpma_sys::qp::QpCaps;

    #[test]
    fn limits_are_the_granted_ones_capped_at_the_stack_list() {
        let granted = QpCaps { max_send_sge: 100, max_recv_sge: 2, max_inline_data: 16, ..QpCaps::default() };
        let l = QpLimits::new(Some(granted), 1, 1, 8);
        assert_eq!((l.max_send_sge, l.max_recv_sge, l.max_inline_data), (64, 2, 16));
        // Nothing read back (or a 0 reported, as for receives with an SRQ): what was asked.
        let l = QpLimits::new(None, 3, 4, 8);
        assert_eq!((l.max_send_sge, l.max_recv_sge, l.max_inline_data), (3, 4, 8));
        let l = QpLimits::new(Some(QpCaps::default()), 3, 4, 8);
        assert_eq!((l.max_send_sge, l.max_recv_sge, l.max_inline_data), (3, 4, 8));
    }
}
