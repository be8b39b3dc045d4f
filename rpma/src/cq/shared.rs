//! One completion queue for many connections (not in librpma, which can
//! share only the completion channel): each connection's completions find
//! its trackers by QP number.

use super::Completion;
use super::{retire, Cq};
use crate::error::{Error, Result};
use crate::inflight::{RecvTracker, SendTracker};
use crate::logging::{rpma_log, LogLevel};
use crate::peer::Peer;
use crate::windows::Windows;
use crate::wrid::CompletionOp;
use rpma_sys::cq::PolledWc;
use std::collections::{HashMap, VecDeque};
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::Arc;
// loom's locks under `--cfg loom`, for the model of the routes below.
#[cfg(loom)]
use loom::sync::{Mutex, MutexGuard, RwLock, RwLockReadGuard, RwLockWriteGuard};
#[cfg(not(loom))]
use std::sync::{Mutex, MutexGuard, RwLock, RwLockReadGuard, RwLockWriteGuard};

/// A completion queue shared by many connections
/// ([`ConnCfg::set_shared_cq`](crate::ConnCfg::set_shared_cq)): their send
/// and receive completions arrive here, each with its connection's
/// [`qp_num`](crate::Completion::qp_num) and its `op_context`, so one
/// thread (one `poll`/epoll fd, [`Cq::fd`]) serves all of them without a
/// wake-up per connection. Not in librpma, which shares only the
/// completion channel ([`ConnCfg::set_compl_channel`](crate::ConnCfg::set_compl_channel)).
///
/// Reap through the shared CQ ([`Cq::get_wc`], [`Cq::next_completion`],
/// [`Cq::wait`]; `SharedCq` dereferences to [`Cq`]) and route each
/// completion by its `qp_num` ([`Conn::qp_num`](crate::Conn::qp_num)):
/// [`Conn::cq`](crate::Conn::cq) of a connection on a shared CQ is this CQ,
/// so it returns other connections' completions too.
///
/// Each connection reserves `sq_size + rq_size` of the CQ's entries while
/// it exists, so the CQ cannot overflow (an overflowing CQ moves every QP
/// on it to the error state); a connection that does not fit is refused.
/// Dropping a connection polls the CQ empty: its own completions are
/// retired (its regions released), the others' are set aside and returned
/// first by the next [`Cq::get_wc`] / [`Cq::get_completion`] ([`Cq::wait`]
/// returns at once while any are set aside; a poll loop on [`Cq::fd`]
/// should, as always, drain with `get_wc` after each wake-up).
///
/// ```no_run
/// # #[allow(dead_code)]
/// # fn f(peer: &rpma::Peer, addr: &str) -> rpma::Result<()> {
/// let scq = rpma::SharedCq::new(peer, 1024)?;
/// let mut cfg = rpma::ConnCfg::new();
/// cfg.set_shared_cq(Some(&scq));
/// let conns: Vec<rpma::Conn> = (0..4)
///     .map(|_| rpma::ConnReq::new(peer, addr, 7204, Some(&cfg))?.connect(&[]))
///     .collect::<rpma::Result<_>>()?;
/// // ... post on any of them, then:
/// let wc = scq.next_completion(std::time::Duration::from_secs(5))?;
/// let conn = conns.iter().find(|c| c.qp_num() == wc.qp_num);
/// # let _ = conn; Ok(()) }
/// ```
#[derive(Clone)]
pub struct SharedCq {
    inner: Arc<Inner>,
}

struct Inner {
    cq: Cq,
    routes: Arc<Routes>,
    peer: Peer,
}

impl SharedCq {
    /// A CQ of `size` entries with its own completion channel, on `peer`'s
    /// device.
    ///
    /// # Errors
    /// [`Error::Inval`] when `size` is 0 or exceeds the device's `max_cqe`;
    /// [`Error::Provider`] when the channel or the CQ cannot be created.
    pub fn new(peer: &Peer, size: u32) -> Result<SharedCq> {
        let max = peer.capabilities().max_cqe;
        if size == 0 {
            return Err(Error::inval("SharedCq::new: size 0; give at least the sq_size + rq_size of one connection"));
        }
        let what = &crate::error::Named::new(crate::error::Arg::CqSize, "SharedCq size");
        crate::peer::Capabilities::check_size(what, size, max, "max_cqe")?;
        let routes = Arc::new(Routes::new(size)?);
        let cq = Cq::routed(peer, size, routes.clone())?;
        Ok(SharedCq { inner: Arc::new(Inner { cq, routes, peer: peer.clone() }) })
    }

    /// The completion queue, to poll and wait on (a `SharedCq` also
    /// dereferences to it).
    pub fn cq(&self) -> &Cq {
        &self.inner.cq
    }

    /// Connections on this CQ now: with [`reserved`](Self::reserved), how
    /// much room is left before another connection is refused.
    pub fn connections(&self) -> usize {
        self.inner.routes.read().len()
    }

    /// Entries reserved by the connections on this CQ (their `sq_size +
    /// rq_size`), out of [`size`](Self::size).
    pub fn reserved(&self) -> u64 {
        *lock(&self.inner.routes.reserved)
    }

    /// The CQ's size as requested: what [`reserved`](Self::reserved) is
    /// counted against.
    pub fn size(&self) -> u32 {
        self.inner.routes.size
    }

    pub(crate) fn peer(&self) -> &Peer {
        &self.inner.peer
    }

    pub(crate) fn routes(&self) -> &Arc<Routes> {
        &self.inner.routes
    }
}

impl std::ops::Deref for SharedCq {
    type Target = Cq;
    fn deref(&self) -> &Cq {
        &self.inner.cq
    }
}

impl std::fmt::Debug for SharedCq {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedCq")
            .field("size", &self.size())
            .field("connections", &self.connections())
            .field("reserved", &self.reserved())
            .finish()
    }
}

/// The trackers of one connection's QP.
pub(crate) struct Trackers {
    pub(crate) send: Arc<SendTracker>,
    pub(crate) recv: Arc<RecvTracker>,
    pub(crate) srq_recv: Option<Arc<RecvTracker>>,
    /// CQ entries the connection reserved (its send queue, and its
    /// receive queue when its receives complete here).
    pub(crate) entries: u64,
    /// The receive queue size of its SRQ when the SRQ's receives complete
    /// here (0 otherwise): reserved once per SRQ, by its first connection
    /// on this CQ, and released with its last.
    pub(crate) srq_entries: u64,
}

impl Trackers {
    /// The SRQ whose receives complete here, as a key.
    fn srq_key(&self) -> Option<usize> {
        self.srq_recv.as_ref().filter(|_| self.srq_entries > 0).map(|s| Arc::as_ptr(s) as usize)
    }
}

/// QP numbers are small local integers the device hands out: a
/// multiplicative hash spreads them well enough, without SipHash's cost
/// on every completion (the keys never come from a peer).
#[derive(Default)]
pub(crate) struct QpHasher(u64);

impl Hasher for QpHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 << 8 | u64::from(b)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        }
    }
    fn write_u32(&mut self, n: u32) {
        self.0 = u64::from(n).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }
}

/// A shared CQ's connections by QP number, and the completions a dropped
/// connection's drain set aside for the others.
///
/// Polling and translating happen under the map's read lock, adding and
/// removing a route under its write lock: a completion is always translated
/// with the routes of the moment it was polled. A connection's route goes
/// only after its QP was destroyed and the CQ was drained of that QP's
/// completions, so a later connection that gets the same QP number never
/// receives a completion of the gone one (which would retire its entries,
/// and release its regions, early).
pub(crate) struct Routes {
    map: RwLock<HashMap<u32, Trackers, BuildHasherDefault<QpHasher>>>,
    /// Completions of other connections polled by a drain, returned first.
    stash: Mutex<VecDeque<PolledWc>>,
    reserved: Mutex<u64>,
    /// The SRQs whose receives complete here: connections using each, and
    /// the entries reserved for it.
    srqs: Mutex<HashMap<usize, (usize, u64)>>,
    size: u32,
    /// The async reaper of the CQ ([`AsyncSharedCq`](crate::aio::AsyncSharedCq)),
    /// nudged when a drain sets completions aside: any connection's drop
    /// drains, attached to the reaper or not, and a stash raises no event.
    #[cfg(any(feature = "tokio", all(test, loom)))]
    on_stash: Mutex<std::sync::Weak<crate::nudge::Nudge>>,
}

type Map = HashMap<u32, Trackers, BuildHasherDefault<QpHasher>>;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Routes {
    /// No routes yet; room to stash `size` completions.
    ///
    /// # Errors
    /// [`Error::NoMem`] when the stash cannot be allocated.
    fn new(size: u32) -> Result<Routes> {
        let mut stash = VecDeque::new();
        stash
            .try_reserve_exact(size as usize)
            .map_err(|_| Error::nomem(format!("cannot allocate a shared CQ of {size} entries")))?;
        Ok(Routes {
            map: RwLock::default(),
            stash: Mutex::new(stash),
            reserved: Mutex::new(0),
            srqs: Default::default(),
            size,
            #[cfg(any(feature = "tokio", all(test, loom)))]
            on_stash: Mutex::new(std::sync::Weak::new()),
        })
    }

    fn read(&self) -> RwLockReadGuard<'_, Map> {
        self.map.read().unwrap_or_else(|p| p.into_inner())
    }

    fn write(&self) -> RwLockWriteGuard<'_, Map> {
        self.map.write().unwrap_or_else(|p| p.into_inner())
    }

    /// Adds QP `qp_num`'s trackers, reserving `t.entries` of the CQ.
    ///
    /// # Errors
    /// [`Error::Inval`] when the CQ has fewer free entries than that;
    /// [`Error::NoMem`] when the map cannot grow.
    pub(crate) fn add(&self, qp_num: u32, t: Trackers) -> Result<()> {
        let mut map = self.write();
        let mut reserved = lock(&self.reserved);
        let mut srqs = lock(&self.srqs);
        let srq = t.srq_key();
        let srq_new = srq.is_some_and(|k| !srqs.contains_key(&k));
        let need = t.entries + if srq_new { t.srq_entries } else { 0 };
        let want = *reserved + need;
        if want > u64::from(self.size) {
            return Err(Error::cq_full(
                *reserved,
                self.size.into(),
                need,
                format!(
                    "the shared CQ has {} of its {} entries reserved; this connection needs {need} more (its send \
                     and receive queues as the provider granted them, which may round sq_size and rq_size up, or \
                     its SRQ's once per SRQ): create the SharedCq larger or give the connection smaller queues",
                    *reserved, self.size
                ),
            ));
        }
        map.try_reserve(1).map_err(|_| Error::nomem("cannot grow the shared CQ's connection table"))?;
        if let Some(k) = srq {
            srqs.try_reserve(1).map_err(|_| Error::nomem("cannot grow the shared CQ's SRQ table"))?;
            srqs.entry(k).or_insert((0, t.srq_entries)).0 += 1;
        }
        map.insert(qp_num, t);
        *reserved = want;
        Ok(())
    }

    /// Takes QP `qp_num` off the CQ once its QP is gone (destroyed, or
    /// failed to be and leaked with its trackers): polls the CQ empty,
    /// retiring that QP's completions and stashing the others' for their
    /// owners, then removes the route.
    pub(crate) fn remove<S: Source>(&self, cq: &S, qp_num: u32) {
        // Messages logged under the locks below are emitted after them.
        let _logs = crate::unlocked::guard();
        let mut stashed = false;
        {
            let map = self.read();
            // Bounded: the CQ holds at most `size` entries plus what
            // arrives meanwhile, which the stash's first reservation covers
            // in the common case and `try_reserve` beyond it.
            for _ in 0..2 * self.size as usize + 16 {
                let w = match cq.poll_one() {
                    Ok(Some(w)) => w,
                    Ok(None) => break,
                    Err(e) => {
                        rpma_log!(LogLevel::Error, "shared CQ: ibv_poll_cq while removing QP {qp_num}: {e}");
                        break;
                    }
                };
                if qp_of(&w) == qp_num {
                    let _ = translate(&map, &w, cq);
                    continue;
                }
                let mut stash = lock(&self.stash);
                if stash.try_reserve(1).is_ok() {
                    stash.push_back(w);
                    stashed = true;
                } else {
                    // Its tracker entry is retired, so its region is not
                    // held for ever; only the report is lost.
                    let c = translate(&map, &w, cq);
                    rpma_log!(LogLevel::Error, "shared CQ: no memory to keep a completion, dropped: {c:?}");
                }
            }
        }
        let mut map = self.write();
        // What an earlier drain (another connection's removal) set aside for
        // this QP is retired here too, under the write lock, before the
        // route goes: left in the stash it would be handed out later as a
        // completion of a gone QP, and routed to whichever connection gets
        // the same QP number next (retiring that one's entries early).
        lock(&self.stash).retain(|w| {
            if qp_of(w) != qp_num {
                return true;
            }
            let _ = translate(&map, w, cq);
            false
        });
        if let Some(t) = map.remove(&qp_num) {
            let mut reserved = lock(&self.reserved);
            *reserved = reserved.saturating_sub(t.entries);
            if let Some(k) = t.srq_key() {
                let mut srqs = lock(&self.srqs);
                if let Some((conns, entries)) = srqs.get_mut(&k) {
                    *conns -= 1;
                    if *conns == 0 {
                        *reserved = reserved.saturating_sub(*entries);
                        srqs.remove(&k);
                    }
                }
            }
        }
        drop(map);
        #[cfg(not(any(feature = "tokio", all(test, loom))))]
        let _ = stashed;
        #[cfg(any(feature = "tokio", all(test, loom)))]
        if stashed {
            // After the locks: the reaper's waker is the runtime's code.
            let nudge = lock(&self.on_stash).upgrade();
            if let Some(n) = nudge {
                n.nudge();
            }
        }
    }

    /// Whom to nudge when a drain sets completions aside (an async
    /// reaper's, or nobody).
    #[cfg(any(feature = "tokio", all(test, loom)))]
    pub(crate) fn on_stash(&self, reaper: std::sync::Weak<crate::nudge::Nudge>) {
        *lock(&self.on_stash) = reaper;
    }

    /// Whether completions are stashed (a wait must not block then).
    pub(crate) fn stashed(&self) -> bool {
        !lock(&self.stash).is_empty()
    }

    /// One completion: a stashed one first, else polled.
    pub(crate) fn get_completion<S: Source>(&self, cq: &S) -> Result<Option<Completion>> {
        let _logs = crate::unlocked::guard(); // emitted after the locks
        let map = self.read();
        if let Some(w) = lock(&self.stash).pop_front() {
            return Ok(Some(translate(&map, &w, cq)));
        }
        match cq.poll_one() {
            Ok(Some(w)) => Ok(Some(translate(&map, &w, cq))),
            Ok(None) => Ok(None),
            Err(e) => Err(Error::provider_raw("ibv_poll_cq", e)),
        }
    }

    /// Up to `wc.len()` completions, stashed ones first; how many.
    pub(crate) fn get_wc<S: Source>(&self, cq: &S, wc: &mut [Completion]) -> Result<usize> {
        let _logs = crate::unlocked::guard(); // emitted after the locks
        let map = self.read();
        let mut got = 0;
        {
            let mut stash = lock(&self.stash);
            while got < wc.len() {
                let Some(w) = stash.pop_front() else { break };
                wc[got] = translate(&map, &w, cq);
                got += 1;
            }
        }
        let rest = &mut wc[got..];
        let polled = cq
            .poll_each(rest.len(), |i, w| rest[i] = translate(&map, w, cq))
            .map_err(|e| Error::provider_raw("ibv_poll_cq", e));
        match polled {
            Ok(n) => Ok(got + n),
            Err(_) if got > 0 => Ok(got),
            Err(e) => Err(e),
        }
    }
}

/// The QP number `w` is routed by: the device's (a QP number reuse faked
/// in tests with `rpma_sys::fault::reuse_qp_num` applies here).
#[inline(always)]
fn qp_of(w: &PolledWc) -> u32 {
    rpma_sys::fault::qp_num(w.qp_num())
}

/// Where a shared CQ's completions come from: its CQ (the device), or, in
/// the loom model below, a queue the model fills.
pub(crate) trait Source {
    /// One completion, if any (`ibv_poll_cq` for one).
    fn poll_one(&self) -> std::io::Result<Option<PolledWc>>;
    /// Up to `max` completions, each handed to `f` with its index.
    fn poll_each(&self, max: usize, f: impl FnMut(usize, &PolledWc)) -> std::io::Result<usize>;
    /// The peer's windows, told of the invalidations completions report.
    fn windows(&self) -> &Windows;
}

impl Source for Cq {
    #[inline]
    fn poll_one(&self) -> std::io::Result<Option<PolledWc>> {
        self.cq.poll_one()
    }
    #[inline]
    fn poll_each(&self, max: usize, f: impl FnMut(usize, &PolledWc)) -> std::io::Result<usize> {
        self.cq.poll_each(max, f)
    }
    #[inline]
    fn windows(&self) -> &Windows {
        &self.windows
    }
}

/// The completion of `w`, its QP's tracker entries retired (and a window
/// invalidation it reports noted).
#[inline]
fn translate<S: Source>(map: &Map, w: &PolledWc, cq: &S) -> Completion {
    super::completion(w, route(map, w), cq.windows())
}

/// Retires what `w` names in its QP's trackers.
#[inline]
fn route(map: &Map, w: &PolledWc) -> (u64, CompletionOp) {
    match map.get(&qp_of(w)) {
        Some(t) => retire(w, Some(&t.send), Some(&t.recv), t.srq_recv.as_deref()),
        None => {
            rpma_log!(
                LogLevel::Info,
                "shared CQ: a completion of QP {}, which is on no connection (wr_id {:#x})",
                w.qp_num(),
                w.wr_id()
            );
            (w.wr_id(), CompletionOp::Other(w.opcode()))
        }
    }
}

/// A connection's main CQ: its own, or a shared one it has a route in.
pub(crate) enum ConnCq {
    Own(Cq),
    Shared(SharedCq),
}

impl std::ops::Deref for ConnCq {
    type Target = Cq;
    fn deref(&self) -> &Cq {
        match self {
            ConnCq::Own(c) => c,
            ConnCq::Shared(s) => s.cq(),
        }
    }
}

/// The shared CQ's completion channel fd ([`Cq::fd`]).
impl std::os::fd::AsFd for SharedCq {
    fn as_fd(&self) -> std::os::fd::BorrowedFd<'_> {
        std::os::fd::AsFd::as_fd(self.cq())
    }
}

impl std::os::fd::AsRawFd for SharedCq {
    fn as_raw_fd(&self) -> std::os::fd::RawFd {
        std::os::fd::AsRawFd::as_raw_fd(&std::os::fd::AsFd::as_fd(self))
    }
}

/// The routes' loom models (`harness/loom`).
#[cfg(all(test, loom))]
mod loom_models;
