//! [`AsyncSharedCq`]: one reaper task for every connection on a
//! [`SharedCq`], routing each completion to its connection's awaited
//! operation by QP number and op context.

use super::reaper::{register_channel, ChannelFd, Shared};
use crate::cq::{Completion, Cq};
use crate::error::{Error, Result};
use crate::inflight::lock;
use crate::logging::{rpma_log, LogLevel};
use crate::nudge::Nudge;
use crate::{Conn, SharedCq};
use std::collections::HashMap;
use std::future::poll_fn;
use std::os::fd::AsFd;
use std::sync::{Arc, Mutex, Weak};
use std::task::{Context, Poll};
use tokio::io::unix::{AsyncFd, AsyncFdReadyGuard};
use tokio::task::AbortHandle;

/// A [`SharedCq`] whose completions one reaper task (spawned on the
/// runtime the handle is made in) routes to the [`AsyncConn`]s attached
/// to it: connections may come and go while it runs, each awaiting its
/// own operations as on a connection with its own CQ.
///
/// The CQ belongs to the reaper while any handle or attached connection
/// lives: its public polls and waits refuse ([`Error::Inval`]), so every
/// connection on it should be attached. A completion of a QP no attached
/// connection has (one that was never attached, or is gone) is discarded
/// and logged; its operation's memory was released when the CQ retired
/// it, as for every completion.
///
/// ```no_run
/// # #[allow(dead_code)]
/// # async fn f(peer: &rpma::Peer, addr: &str) -> rpma::Result<()> {
/// use rpma::aio::AsyncSharedCq;
/// let scq = rpma::SharedCq::new(peer, 1024)?;
/// let hub = AsyncSharedCq::new(&scq)?;
/// let mut cfg = rpma::ConnCfg::new();
/// cfg.set_shared_cq(Some(&scq));
/// for _ in 0..4 {
///     let conn = hub.attach(rpma::aio::connect(peer, addr, 7204, Some(&cfg), &[]).await?)?;
///     tokio::spawn(async move {
///         let src = rpma::MrRemote::from_descriptor(conn.conn().private_data())?;
///         let dst = rpma::MrLocal::reg(conn.conn().peer(), rpma::AlignedBuf::new(64)?, rpma::Usage::READ_DST)?;
///         conn.read(&dst, 0, &src, 0, 64).await?;
///         conn.disconnect().await
///     });
/// }
/// # Ok(()) }
/// ```
///
/// [`AsyncConn`]: super::AsyncConn
#[derive(Clone, Debug)]
pub struct AsyncSharedCq {
    handle: Arc<Handle>,
}

/// The last handle (or attached connection) stops the reaper.
#[derive(Debug)]
struct Handle {
    hub: Arc<Hub>,
    reaper: AbortHandle,
}

impl Drop for Handle {
    fn drop(&mut self) {
        self.reaper.abort();
    }
}

/// What the handles, the attached connections and the reaper share.
/// Field order: the registration goes before the CQ whose fd it names.
#[derive(Debug)]
struct Hub {
    fd: AsyncFd<ChannelFd>,
    conns: Mutex<HashMap<u32, Weak<Shared>>>,
    /// A connection left (attached or not: the CQ's routes nudge it when
    /// a drain sets completions aside, which raise no event); the reaper
    /// drains once more.
    nudge: Arc<Nudge>,
    /// Why the reaper stopped, when it did.
    failed: Mutex<Option<String>>,
    scq: SharedCq,
}

impl Drop for Hub {
    fn drop(&mut self) {
        // The CQ is the blocking calls' again.
        self.scq.routes().on_stash(std::sync::Weak::new());
        self.scq.cq().set_reaped(false);
        let _ = crate::utils::set_nonblocking(self.scq.as_fd(), false);
    }
}

/// An attached connection's place in its hub: dropped (after the
/// connection), it leaves the routing table and wakes the reaper.
#[derive(Debug)]
pub(super) struct HubLink {
    handle: Arc<Handle>,
    qp: u32,
    me: Weak<Shared>,
}

impl Drop for HubLink {
    fn drop(&mut self) {
        let hub = &self.handle.hub;
        {
            let mut conns = lock(&hub.conns);
            // A newer connection may have the same QP number by now.
            if conns.get(&self.qp).is_some_and(|w| w.ptr_eq(&self.me)) {
                conns.remove(&self.qp);
            }
        }
        hub.nudge.nudge();
    }
}

/// What woke the reaper.
enum Woken<'a> {
    Nudged,
    Readable(std::io::Result<AsyncFdReadyGuard<'a, ChannelFd>>),
}

impl Hub {
    fn poll_woken(&self, cx: &mut Context<'_>) -> Poll<Woken<'_>> {
        if self.nudge.poll(cx).is_ready() {
            return Poll::Ready(Woken::Nudged);
        }
        self.fd.poll_read_ready(cx).map(Woken::Readable)
    }

    /// Polls the CQ until empty, routing what it finds.
    fn drain(&self, wcs: &mut [Completion]) -> Result<()> {
        loop {
            match self.scq.cq().poll_wc(wcs) {
                Ok(n) => {
                    self.route(&wcs[..n]);
                    if n < wcs.len() {
                        return Ok(());
                    }
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// Hands each completion to its connection's router. The table's lock
    /// is let go first: routing wakes futures (the caller's code), and a
    /// message is logged.
    fn route(&self, wcs: &[Completion]) {
        let mut to = Vec::with_capacity(wcs.len());
        {
            let conns = lock(&self.conns);
            to.extend(wcs.iter().map(|wc| (conns.get(&wc.qp_num).and_then(Weak::upgrade), wc)));
        }
        // The connections are kept alive until every completion is routed:
        // the last reference dropped drops a connection, whose drain polls
        // this CQ.
        for (s, wc) in &to {
            match s {
                Some(s) => s.router().route(**wc),
                None => rpma_log!(
                    LogLevel::Info,
                    "AsyncSharedCq: a completion of QP {}, which no attached connection has: {:?}",
                    wc.qp_num,
                    wc.op
                ),
            }
        }
        drop(to);
    }

    /// The reaper stopped: every attached connection's waits fail.
    fn fail(&self, why: String) {
        let conns: Vec<_> = lock(&self.conns).values().filter_map(Weak::upgrade).collect();
        for s in &conns {
            s.router().fail(why.clone());
        }
        *lock(&self.failed) = Some(why);
    }
}

/// The reaper: drains the CQ, then sleeps until its channel is readable
/// (takes the event, re-arming the CQ) or a connection left.
async fn reap(h: Arc<Hub>) {
    let mut wcs = [Cq::EMPTY; 32];
    let why = loop {
        if let Err(e) = h.drain(&mut wcs) {
            break e;
        }
        match poll_fn(|cx| h.poll_woken(cx)).await {
            Woken::Nudged => {}
            Woken::Readable(Ok(mut guard)) => match h.scq.cq().take_event(rpma_sys::gate::Bound::Now) {
                // One event per arming: the channel is read empty either
                // way. (A later event ticks the reactor, which this clear
                // does not undo: tokio clears only the readiness it reported.)
                Ok(()) | Err(Error::NoCompletion) => guard.clear_ready(),
                Err(e) => break e,
            },
            Woken::Readable(Err(e)) => break Error::provider_raw("tokio readiness", e),
        }
    };
    h.fail(why.to_string());
}

impl AsyncSharedCq {
    /// Takes `scq`'s completions over and starts its reaper on the current
    /// tokio runtime.
    ///
    /// # Errors
    /// [`Error::Inval`] outside a tokio runtime, or when another
    /// `AsyncSharedCq` has `scq` already; [`Error::Provider`] when its fd
    /// cannot be registered.
    pub fn new(scq: &SharedCq) -> Result<AsyncSharedCq> {
        let Ok(rt) = tokio::runtime::Handle::try_current() else {
            return Err(super::no_runtime("rpma::aio::AsyncSharedCq: made only inside a tokio runtime".to_string()));
        };
        if scq.cq().set_reaped(true) {
            return Err(Error::inval("AsyncSharedCq::new: this SharedCq already has an AsyncSharedCq"));
        }
        let fd = match register_channel(scq.as_fd(), "shared CQ's completion channel") {
            Ok(fd) => fd,
            Err(e) => {
                scq.cq().set_reaped(false);
                return Err(e);
            }
        };
        let hub = Arc::new(Hub {
            fd,
            conns: Mutex::new(HashMap::new()),
            nudge: Arc::new(Nudge::default()),
            failed: Mutex::new(None),
            scq: scq.clone(),
        });
        scq.routes().on_stash(Arc::downgrade(&hub.nudge));
        let reaper = rt.spawn(reap(hub.clone())).abort_handle();
        Ok(AsyncSharedCq { handle: Arc::new(Handle { hub, reaper }) })
    }

    /// Takes `conn`, a connection on this shared CQ (made with
    /// [`ConnCfg::set_shared_cq`](crate::ConnCfg::set_shared_cq)), whose
    /// completions this handle's reaper routes from now on.
    ///
    /// # Errors
    /// [`Error::Inval`] outside a tokio runtime; [`Error::NoSupp`] when
    /// `conn`'s CQ is not this shared CQ, or it has a separate receive CQ
    /// (an SRQ's own receive CQ stays the SRQ's); [`Error::Unknown`] when the
    /// reaper stopped; [`Error::Provider`] when its event fd cannot be
    /// registered.
    pub fn attach(&self, conn: Conn) -> Result<super::AsyncConn> {
        super::AsyncConn::on_hub(conn, self)
    }

    /// The shared CQ the hub reaps: its room
    /// ([`SharedCq::reserved`]) and connections, and the connection
    /// configuration to create further connections on it.
    pub fn shared_cq(&self) -> &SharedCq {
        &self.handle.hub.scq
    }

    /// Adds the connection `s` (QP `qp`) to the routing table.
    pub(super) fn join(&self, qp: u32, s: &Arc<Shared>) -> Result<HubLink> {
        let hub = &self.handle.hub;
        if let Some(why) = &*lock(&hub.failed) {
            return Err(super::router::reaper_stopped(why));
        }
        lock(&hub.conns).insert(qp, Arc::downgrade(s));
        Ok(HubLink { handle: self.handle.clone(), qp, me: Arc::downgrade(s) })
    }
}
