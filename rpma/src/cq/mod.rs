//! Completion queues and completions; a CQ shared by many connections
//! ([`SharedCq`], in `shared.rs`).

mod completion;
mod raw;
mod shared;
mod status;
pub use completion::Completion;
use completion::{completion, note_invalidation, retire};
pub use raw::IbvWc;
pub use shared::SharedCq;
pub(crate) use shared::{ConnCq, Routes, Trackers};
pub use status::WcStatus;

use crate::error::{Error, Result};
use crate::inflight::{RecvTracker, SendTracker};
use crate::peer::Peer;
use crate::windows::Windows;
pub use crate::wrid::CompletionOp;
use rpma_sys::cq::{CompChannel, PolledWc};
use rpma_sys::gate::Bound;
use std::fmt;
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// A completion queue (librpma's `rpma_cq`): the main CQ or the receive CQ
/// of a connection, or the receive CQ of a shared receive queue.
///
/// Each CQ has a completion channel, armed at creation and after every
/// [`wait`](Cq::wait). A wait may wake up with no completion: drain with
/// [`get_wc`](Cq::get_wc) until it returns 0.
///
/// ```no_run
/// # #[allow(dead_code)]
/// # fn f(conn: &rpma::Conn) -> rpma::Result<()> {
/// let cq = conn.cq();
/// cq.wait()?;
/// let mut wc = [rpma::Cq::EMPTY; 8];
/// loop {
///     let n = cq.get_wc(&mut wc)?;
///     if n == 0 {
///         break;
///     }
///     wc[..n].iter().for_each(|c| println!("{:?} {}", c.op, c.status));
/// }
/// # Ok(()) }
/// ```
pub struct Cq {
    cq: rpma_sys::cq::Cq,
    channel: CompChannel,
    shared: bool,
    /// Neither `shared` nor `routes` nor `reaped`: `wait`, `get_wc` and
    /// `get_completion` test this one flag before going to the channel and
    /// the CQ (instead of each).
    plain: bool,
    /// Owned by an async reaper (an [`AsyncConn`](crate::aio::AsyncConn)'s
    /// or an [`AsyncSharedCq`](crate::aio::AsyncSharedCq)'s), which alone
    /// polls and waits: the public polls and waits refuse. Atomic because
    /// a shared CQ is handed over (and back) behind an `Arc`; read only off
    /// the `plain` fast path.
    reaped: AtomicBool,
    send: Option<Arc<SendTracker>>,
    recv: Option<Arc<RecvTracker>>,
    srq_recv: Option<Arc<RecvTracker>>,
    /// A shared CQ's trackers by QP number (instead of the three above).
    routes: Option<Arc<Routes>>,
    /// The peer's memory windows: a receive the device reports as having
    /// invalidated one ends that window's binding here.
    windows: Arc<Windows>,
}

impl fmt::Debug for Cq {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Cq").field("cqe", &self.cq.cqe()).field("shared_channel", &self.shared).finish()
    }
}

/// The error of a poll or wait on a CQ an async reaper owns.
#[cold]
fn reaped() -> Error {
    let text = "this CQ belongs to an async reaper (rpma::aio::AsyncConn or AsyncSharedCq), which takes its \
                completions: await the operation or AsyncConn::next_completion instead";
    Error::Inval(crate::error::Msg::detailed(crate::error::Detail::Reaped, text.into()))
}

impl Cq {
    pub(crate) fn new(
        peer: &Peer,
        size: u32,
        shared: Option<&CompChannel>,
        send: Option<Arc<SendTracker>>,
        recv: Option<Arc<RecvTracker>>,
        srq_recv: Option<Arc<RecvTracker>>,
    ) -> Result<Cq> {
        let ctx = peer.context();
        let channel = match shared {
            Some(c) => c.clone(),
            None => CompChannel::new(&ctx.0).map_err(|e| Error::provider_raw("ibv_create_comp_channel", e))?,
        };
        let cq = rpma_sys::cq::Cq::new(&ctx.0, size, Some(&channel))
            .map_err(|e| Error::provider_raw(format!("ibv_create_cq({size} entries)"), e))?;
        cq.req_notify(false).map_err(|e| Error::provider_raw("ibv_req_notify_cq", e))?;
        Ok(Cq {
            cq,
            channel,
            shared: shared.is_some(),
            plain: shared.is_none(),
            reaped: AtomicBool::new(false),
            send,
            recv,
            srq_recv,
            routes: None,
            windows: peer.windows().clone(),
        })
    }

    /// A CQ with its own channel whose completions find their trackers by
    /// QP number in `routes` (a [`SharedCq`]).
    pub(crate) fn routed(peer: &Peer, size: u32, routes: Arc<Routes>) -> Result<Cq> {
        let mut cq = Cq::new(peer, size, None, None, None, None)?;
        cq.routes = Some(routes);
        cq.plain = false;
        Ok(cq)
    }

    /// A placeholder completion to fill arrays for [`get_wc`](Cq::get_wc).
    pub const EMPTY: Completion = Completion {
        op_context: 0,
        op: CompletionOp::Other(0),
        status: WcStatus(0),
        byte_len: 0,
        imm: None,
        invalidated_rkey: None,
        qp_num: 0,
        wc_opcode: 0,
    };

    /// Whether the CQ's channel is a connection's shared completion channel.
    #[cfg(feature = "tokio")]
    pub(crate) fn on_shared_channel(&self) -> bool {
        self.shared
    }

    pub(crate) fn sys(&self) -> &rpma_sys::cq::Cq {
        &self.cq
    }

    /// The completion channel's fd (`rpma_cq_get_fd`), for poll/epoll.
    pub fn fd(&self) -> RawFd {
        self.channel.fd()
    }

    /// Waits for a completion event, acknowledges it and re-arms the CQ
    /// (`rpma_cq_wait`). Blocks unless the fd was made non-blocking.
    ///
    /// Unlike librpma, which acknowledges every event at once, the events
    /// are acknowledged in batches of [`rpma_sys::cq::ACK_BATCH`] (as
    /// `ibv_get_cq_event(3)` advises: `ibv_ack_cq_events` takes a mutex),
    /// the rest before the CQ is destroyed.
    ///
    /// # Errors
    /// [`Error::SharedChannel`] when the channel is shared (use
    /// [`Conn::wait`](crate::Conn::wait)); [`Error::NoCompletion`] when no
    /// event is pending on a non-blocking fd; [`Error::Provider`] when
    /// re-arming fails.
    #[inline]
    pub fn wait(&self) -> Result<()> {
        self.wait_within(Bound::Never)
    }

    /// [`wait`](Cq::wait), giving up after `timeout` (`Duration::MAX`: no
    /// limit), however many threads wait on the CQ: the channel is read by
    /// one waiter at a time, each within its own bound.
    ///
    /// # Errors
    /// As [`wait`](Cq::wait); [`Error::NoCompletion`] when `timeout` passes.
    pub fn wait_timeout(&self, timeout: Duration) -> Result<()> {
        self.wait_within(Bound::after(timeout))
    }

    #[inline]
    fn wait_within(&self, bound: Bound) -> Result<()> {
        if self.ready_without_event()? {
            return Ok(());
        }
        self.take_event(bound)
    }

    /// A wait's checks, the same for a blocking and an async waiter:
    /// refused when an async reaper owns the CQ or its channel is a
    /// connection's shared one; `true` when completions set aside by a
    /// dropped connection's drain are there to take (no event to wait for).
    #[inline]
    fn ready_without_event(&self) -> Result<bool> {
        if self.plain {
            return Ok(false);
        }
        if self.is_reaped() {
            return Err(reaped());
        }
        if self.shared {
            return Err(shared_channel());
        }
        Ok(self.routes.as_ref().is_some_and(|r| r.stashed()))
    }

    /// [`wait`](Cq::wait) for an async waiter ([`crate::aio::AsyncCq`]):
    /// never sleeps; `Pending` while another thread reads the channel (`cx`
    /// is woken when it lets go), [`Error::NoCompletion`] when no event is
    /// there now.
    #[cfg(feature = "tokio")]
    pub(crate) fn poll_wait(&self, cx: &mut std::task::Context<'_>) -> std::task::Poll<Result<()>> {
        match self.ready_without_event() {
            Ok(false) => {}
            done => return std::task::Poll::Ready(done.map(|_| ())),
        }
        self.cq.poll_get_event(cx).map(|got| if event_taken(got)? { self.rearm() } else { Err(Error::NoCompletion) })
    }

    /// Re-arms the CQ (after an event was taken, or for an async reaper
    /// whose futures wait).
    #[inline]
    pub(crate) fn rearm(&self) -> Result<()> {
        self.cq.req_notify(false).map_err(|e| Error::provider_raw("ibv_req_notify_cq", e))
    }

    /// Polls up to `wc.len()` completions into `wc` (`rpma_cq_get_wc`);
    /// returns how many, 0 when there is none yet.
    ///
    /// # Errors
    /// [`Error::Inval`] for an empty `wc`; [`Error::Provider`] when polling
    /// fails.
    pub fn get_wc(&self, wc: &mut [Completion]) -> Result<usize> {
        if wc.is_empty() {
            return Err(Error::inval("get_wc: the output slice is empty; pass room for at least 1 completion"));
        }
        if !self.plain && self.is_reaped() {
            return Err(reaped());
        }
        self.poll_wc(wc)
    }

    /// [`get_wc`](Cq::get_wc) without the reaper's check, for the async
    /// side (a shared CQ's reaper; the routed cases of
    /// [`poll_each`](Cq::poll_each) and [`poll_one`](Cq::poll_one)) and a
    /// connection's drop.
    #[inline]
    pub(crate) fn poll_wc(&self, wc: &mut [Completion]) -> Result<usize> {
        let got = match &self.routes {
            None => self
                .cq
                .poll_each(wc.len(), |i, w| wc[i] = self.translate(w))
                .map_err(|e| Error::provider_raw("ibv_poll_cq", e))?,
            Some(r) => r.get_wc(self, wc)?,
        };
        Ok(got)
    }

    /// Polls up to `max` completions, handing each to `f` as it comes
    /// (no buffer in between): the async reapers' poll. Returns how many.
    ///
    /// # Errors
    /// [`Error::Provider`] when polling fails (completions handed to `f`
    /// before it stay handed).
    #[cfg(feature = "tokio")]
    #[inline]
    pub(crate) fn poll_each(&self, max: usize, mut f: impl FnMut(Completion)) -> Result<usize> {
        match &self.routes {
            None => {
                self.cq.poll_each(max, |_, w| f(self.translate(w))).map_err(|e| Error::provider_raw("ibv_poll_cq", e))
            }
            // A shared CQ's completions go through its routes, one home:
            // `poll_wc` (an `AsyncConn`'s own CQs have none).
            Some(_) => {
                let mut wc = [Cq::EMPTY; 16];
                let n = self.poll_wc(&mut wc[..max.min(16)])?;
                wc[..n].iter().for_each(|w| f(*w));
                Ok(n)
            }
        }
    }

    /// Gives this CQ to an async connection: from now on only its reaper
    /// ([`poll_each`](Cq::poll_each)) and its awaited operations
    /// ([`poll_one`](Cq::poll_one)) poll it, under the connection's routing
    /// lock, and only the reaper takes its events
    /// ([`take_event`](Cq::take_event)).
    #[cfg(feature = "tokio")]
    pub(crate) fn hand_to_reaper(&mut self) {
        *self.reaped.get_mut() = true;
        self.plain = false;
    }

    /// Gives a shared CQ (never `plain`) to an async reaper, or back
    /// (`on` false); returns whether it was the reaper's before.
    #[cfg(feature = "tokio")]
    pub(crate) fn set_reaped(&self, on: bool) -> bool {
        debug_assert!(!self.plain);
        self.reaped.swap(on, Ordering::AcqRel)
    }

    /// [`Error::Inval`] when an async reaper takes this CQ's completions
    /// (and events).
    pub(crate) fn refuse_if_reaped(&self) -> Result<()> {
        if !self.plain && self.is_reaped() {
            return Err(reaped());
        }
        Ok(())
    }

    fn is_reaped(&self) -> bool {
        self.reaped.load(Ordering::Acquire)
    }

    /// Takes the channel's event within `bound` and re-arms the CQ:
    /// [`wait`](Cq::wait) after its checks.
    #[inline]
    pub(crate) fn take_event(&self, bound: Bound) -> Result<()> {
        self.take_event_unarmed(bound)?;
        self.rearm()
    }

    /// Takes the channel's event (acknowledged) within `bound`, leaving the
    /// CQ unarmed: an async reaper ([`Bound::Now`]) arms it again only
    /// while a future waits.
    ///
    /// # Errors
    /// [`Error::NoCompletion`] when no event came within `bound` (or the fd
    /// is non-blocking and has none); [`Error::Provider`] when reading the
    /// channel fails.
    #[inline]
    pub(crate) fn take_event_unarmed(&self, bound: Bound) -> Result<()> {
        match event_taken(self.cq.get_event(bound))? {
            true => Ok(()),
            false => Err(Error::NoCompletion),
        }
    }

    /// One completion, `None` when there is none yet (a convenience over
    /// [`get_wc`](Cq::get_wc)); for busy-polling loops too:
    ///
    /// ```no_run
    /// # #[allow(dead_code)]
    /// # fn f(conn: &rpma::Conn) -> rpma::Result<()> {
    /// let cq = conn.cq();
    /// let done = loop {
    ///     if let Some(c) = cq.get_completion()? {
    ///         break c;
    ///     }
    ///     std::hint::spin_loop();
    /// };
    /// println!("{:?} {}", done.op, done.status);
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// As [`get_wc`](Cq::get_wc).
    #[inline]
    pub fn get_completion(&self) -> Result<Option<Completion>> {
        if !self.plain {
            if self.is_reaped() {
                return Err(reaped());
            }
            if let Some(r) = &self.routes {
                return r.get_completion(self);
            }
        }
        self.poll_own()
    }

    /// One completion of this CQ's own (no routes, no reaper check):
    /// [`get_completion`](Cq::get_completion)'s poll, one entry into a
    /// stack slot, retired inline.
    #[inline(always)]
    fn poll_own(&self) -> Result<Option<Completion>> {
        let mut slot = std::mem::MaybeUninit::uninit();
        match self.cq.poll_in(&mut slot) {
            Ok(Some(w)) => Ok(Some(self.translate(w))),
            Ok(None) => Ok(None),
            Err(e) => Err(Error::provider_raw("ibv_poll_cq", e)),
        }
    }

    /// One completion for an async reaper or an awaiting future, if any
    /// ([`Error::NoCompletion`] when empty): the one-entry form of
    /// [`poll_each`](Cq::poll_each), at [`get_completion`](Cq::get_completion)'s
    /// cost.
    ///
    /// # Errors
    /// [`Error::Provider`] when polling fails.
    #[cfg(feature = "tokio")]
    #[inline]
    pub(crate) fn poll_one(&self) -> Result<Option<Completion>> {
        match &self.routes {
            None => self.poll_own(),
            Some(_) => {
                let mut wc = [Cq::EMPTY; 1];
                self.poll_wc(&mut wc).map(|n| (n > 0).then_some(wc[0]))
            }
        }
    }

    /// Waits (up to `timeout` in all) until a completion arrives and returns
    /// it: get, else wait for an event and get again.
    ///
    /// # Errors
    /// [`Error::NoCompletion`] when `timeout` passes first; as
    /// [`wait`](Cq::wait) and [`get_wc`](Cq::get_wc) otherwise.
    pub fn next_completion(&self, timeout: Duration) -> Result<Completion> {
        let bound = Bound::after(timeout);
        loop {
            if let Some(c) = self.get_completion()? {
                return Ok(c);
            }
            if let Bound::Until(d) = bound {
                if d <= std::time::Instant::now() {
                    return Err(Error::NoCompletion);
                }
            }
            if self.shared {
                // The shared channel belongs to the connection; poll instead.
                let left = match bound {
                    Bound::Until(d) => d.saturating_duration_since(std::time::Instant::now()),
                    _ => Duration::MAX,
                };
                std::thread::sleep(left.min(Duration::from_micros(200)));
                continue;
            }
            match self.wait_within(bound) {
                Ok(()) | Err(Error::NoCompletion) => {}
                Err(e) => return Err(e),
            }
        }
    }

    #[inline]
    fn translate(&self, w: &PolledWc) -> Completion {
        completion::translate(w, self.send.as_deref(), self.recv.as_deref(), self.srq_recv.as_deref(), &self.windows)
    }
}

/// Whether a channel read took an event: `false` for none within the
/// bound or none on a non-blocking fd (`EAGAIN`).
#[inline]
fn event_taken(got: std::io::Result<bool>) -> Result<bool> {
    match got {
        Ok(taken) => Ok(taken),
        Err(e) if e.raw_os_error() == Some(libc::EAGAIN) => Ok(false),
        Err(e) => Err(Error::provider_raw("ibv_get_cq_event", e)),
    }
}

#[cold]
#[inline(never)]
fn shared_channel() -> Error {
    Error::SharedChannel("this CQ's completion channel is shared; wait on the connection with Conn::wait".into())
}

/// The completion channel's fd, as [`Cq::fd`]: readable when a completion
/// event is pending (poll it, or register it with epoll, mio or tokio).
impl std::os::fd::AsFd for Cq {
    fn as_fd(&self) -> std::os::fd::BorrowedFd<'_> {
        std::os::fd::AsFd::as_fd(&self.channel)
    }
}

impl std::os::fd::AsRawFd for Cq {
    fn as_raw_fd(&self) -> std::os::fd::RawFd {
        std::os::fd::AsRawFd::as_raw_fd(&std::os::fd::AsFd::as_fd(self))
    }
}
