//! Shared receive queue and its configuration.

use crate::cq::Cq;
use crate::error::{Arg, Error, Result};
use crate::inflight::RecvTracker;
use crate::logging::{rpma_log, LogLevel};
use crate::memory::RegMemory;
use crate::mr::MrLocal;
#[cfg(doc)]
use crate::mr::Usage;
#[allow(unused_imports)] // the sealed trait's method
use crate::ops::sealed::Receive;
use crate::ops::Recv;
use crate::peer::{Capabilities, Peer};
use std::sync::Arc;

/// Scatter/gather elements per receive of an SRQ.
pub(crate) const SRQ_SGE: u32 = 1;

/// librpma's SRQ default size (its code uses 20; its documentation says 100).
pub const DEFAULT_SRQ_SIZE: u32 = 20;

/// Configuration of a shared receive queue (librpma's `rpma_srq_cfg`).
///
/// ```
/// let mut cfg = rpma::SrqCfg::new();
/// cfg.set_rq_size(100).set_rcq_size(0); // receives complete on each connection's CQ
/// assert_eq!((cfg.rq_size(), cfg.rcq_size()), (100, 0));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SrqCfg {
    rq_size: u32,
    rcq_size: u32,
}

impl Default for SrqCfg {
    fn default() -> Self {
        SrqCfg { rq_size: DEFAULT_SRQ_SIZE, rcq_size: DEFAULT_SRQ_SIZE }
    }
}

impl SrqCfg {
    /// Defaults: 20 receives, a receive CQ of 20.
    pub fn new() -> SrqCfg {
        SrqCfg::default()
    }
    /// Sets the number of receives the SRQ holds.
    pub fn set_rq_size(&mut self, n: u32) -> &mut Self {
        self.rq_size = n;
        self
    }
    /// The number of receives the SRQ holds.
    pub fn rq_size(&self) -> u32 {
        self.rq_size
    }
    /// Sets the size of the SRQ's own receive CQ (0: none; receives then
    /// complete on each connection's RCQ or main CQ).
    pub fn set_rcq_size(&mut self, n: u32) -> &mut Self {
        self.rcq_size = n;
        self
    }
    /// The size of the SRQ's receive CQ.
    pub fn rcq_size(&self) -> u32 {
        self.rcq_size
    }
}

struct SrqInner {
    // Drop order: the SRQ (once no QP uses it), its CQ, then the receives'
    // holds, when the device can no longer write into them.
    /// `Some` until dropped (taken by `Drop` to destroy it).
    srq: Option<rpma_sys::srq::Srq>,
    rcq: Option<Cq>,
    tracker: Arc<RecvTracker>,
    peer: Peer,
    /// The receive queue size it was created with.
    rq_size: u32,
}

impl Drop for SrqInner {
    fn drop(&mut self) {
        let Some(srq) = self.srq.take() else { return };
        if let Err((srq, e)) = srq.destroy() {
            // Still alive (or still used by a queue pair whose destruction
            // failed): the device may write into the posted receives, so
            // their regions are kept for ever.
            rpma_log!(
                LogLevel::Error,
                "ibv_destroy_srq: {e}; leaking the SRQ and the regions of its {} posted receive(s)",
                self.tracker.pending()
            );
            std::mem::forget(srq);
            std::mem::forget(self.tracker.clone());
        }
    }
}

/// A shared receive queue (librpma's `rpma_srq`): receives posted here are
/// consumed by any connection configured with it
/// ([`ConnCfg::set_srq`](crate::ConnCfg::set_srq)).
///
/// `Srq` is a cheap handle (`Clone` shares it); connections using it keep it
/// alive.
///
/// ```no_run
/// use rpma::{AlignedBuf, ConnCfg, MrLocal, Srq, SrqCfg, Usage};
/// # #[allow(dead_code)]
/// # fn f(peer: &rpma::Peer) -> rpma::Result<()> {
/// let mut scfg = SrqCfg::new();
/// scfg.set_rq_size(64);
/// let srq = Srq::new(peer, Some(&scfg))?;
/// let buf = MrLocal::reg(peer, AlignedBuf::new(64 * 64)?, Usage::RECV)?;
/// for i in 0..64 {
///     srq.recv(&buf, i * 64, 64, i as u64)?;
/// }
/// let mut cfg = ConnCfg::new();
/// cfg.set_srq(Some(&srq)); // connections made with `cfg` receive through it
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Srq {
    inner: Arc<SrqInner>,
}

impl std::fmt::Debug for Srq {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Srq")
            .field("rcq", &self.inner.rcq)
            .field("pending_recvs", &self.inner.tracker.pending())
            .finish()
    }
}

impl Srq {
    /// Creates an SRQ on `peer` (`rpma_srq_new`).
    ///
    /// # Errors
    /// [`Error::Provider`] when `ibv_create_srq` or the RCQ creation fails.
    pub fn new(peer: &Peer, cfg: Option<&SrqCfg>) -> Result<Srq> {
        let cfg = cfg.copied().unwrap_or_default();
        let caps = peer.capabilities();
        let named = crate::error::Named::new;
        Capabilities::check_size(&named(Arg::RqSize, "SrqCfg rq_size"), cfg.rq_size, caps.max_srq_wr, "max_srq_wr")?;
        Capabilities::check_size(&named(Arg::RcqSize, "SrqCfg rcq_size"), cfg.rcq_size, caps.max_cqe, "max_cqe")?;
        let srq = rpma_sys::srq::Srq::new(peer.pd(), cfg.rq_size, SRQ_SGE)
            .map_err(|e| Error::provider_raw(format!("ibv_create_srq({} receives)", cfg.rq_size), e))?;
        let tracker = Arc::new(RecvTracker::new(true, cfg.rq_size)?);
        let rcq = if cfg.rcq_size > 0 {
            Some(Cq::new(peer, cfg.rcq_size, None, None, None, Some(tracker.clone()))?)
        } else {
            None
        };
        Ok(Srq { inner: Arc::new(SrqInner { srq: Some(srq), rcq, tracker, peer: peer.clone(), rq_size: cfg.rq_size }) })
    }

    /// How many receives the SRQ can hold: the provider may grant more
    /// than the configured [`SrqCfg::rq_size`] (what a shared CQ reserves for them).
    pub(crate) fn granted_wr(&self) -> Result<u32> {
        Ok(self.sys()?.max_wr().max(self.inner.rq_size))
    }

    /// The SRQ's receive CQ, if it has one (`rpma_srq_get_rcq`).
    pub fn rcq(&self) -> Option<&Cq> {
        self.inner.rcq.as_ref()
    }

    /// Posts a receive of up to `len` bytes into `dst` at `offset`
    /// (`rpma_srq_recv`). The region stays alive until the receive completes.
    ///
    /// # Errors
    /// [`Error::Inval`] when the range exceeds `dst`, `len` exceeds 4 GiB - 1,
    /// or `dst` was not registered with [`Usage::RECV`] or is on another
    /// peer; [`Error::Provider`] when posting fails.
    pub fn recv<M: RegMemory + Send + Sync + 'static>(
        &self,
        dst: &MrLocal<M>,
        offset: usize,
        len: usize,
        op_context: u64,
    ) -> Result<()> {
        self.post(Recv::new(dst, offset, len).op_context(op_context))
    }

    /// The peer the SRQ was created on: receives posted to it take only
    /// regions of that peer, and connections using it must be on it.
    pub fn peer(&self) -> &Peer {
        &self.inner.peer
    }

    /// The verbs SRQ (present until the last handle is dropped).
    pub(crate) fn sys(&self) -> Result<&rpma_sys::srq::Srq> {
        self.inner.srq.as_ref().ok_or_else(|| Error::Unknown("rpma bug: an SRQ used after its drop".into()))
    }

    pub(crate) fn tracker(&self) -> &Arc<RecvTracker> {
        &self.inner.tracker
    }
}
