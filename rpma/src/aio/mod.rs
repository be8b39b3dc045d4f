//! Async RDMA on tokio (feature `tokio`).
//!
//! * [`AsyncConn`]: a connection owned by its handle (`'static`, `Send`,
//!   `Sync`), every operation awaitable (`conn.read(..).await` returns the
//!   completion; a chain with [`AsyncConn::post_chain`]), completions routed to their futures by one reaper task
//!   per connection. Dropping a future is harmless: the memory stays held
//!   by the connection until the device completes the operation.
//! * [`AsyncSharedCq`]: one reaper for every connection on a
//!   [`SharedCq`](crate::SharedCq); connections attach and leave while it
//!   runs.
//! * The borrowing adapters below it: [`AsyncEp`] (connection requests),
//!   [`AsyncConnEvents`] (connection events), [`AsyncCq`] (completions of
//!   operations posted with [`Conn`]'s own calls), [`AsyncChannel`] (a
//!   shared completion channel), [`AsyncDevice`] (device events), and
//!   [`connect`] / [`accept`].
//!
//! Everything waits on tokio's reactor ([`AsyncFd`]) over the channels the
//! blocking calls use: a task sleeps until the fd is readable, without
//! busy polling or helper threads. Each adapter makes its fd non-blocking
//! (the blocking calls on that object then return [`Error::NoEvent`] /
//! [`Error::NoCompletion`] instead of blocking) and registers it with the
//! runtime it is created in; an fd can be registered once per runtime at a
//! time, so keep one adapter per object.
//!
//! **Cancellation**: every future here is cancellation-safe. A wait
//! consumes nothing until the poll that returns its result; an awaited
//! operation dropped after its post still runs to completion, with its
//! memory held, and its completion is discarded.
//!
//! An awaited operation's future borrows its regions, so they outlive it
//! at compile time; the hold that outlives a dropped future is the
//! connection's, at run time. Dropping the region while the future lives
//! does not compile:
//!
//! ```compile_fail,E0505
//! # async fn f(conn: &rpma::aio::AsyncConn, src: &rpma::MrRemote, peer: &rpma::Peer) -> rpma::Result<()> {
//! let dst = rpma::MrLocal::reg(peer, rpma::AlignedBuf::new(8)?, rpma::Usage::READ_DST)?;
//! let read = conn.read(&dst, 0, src, 0, 8);
//! drop(dst); // error[E0505]: cannot move out of `dst` because it is borrowed
//! read.await?;
//! # Ok(()) }
//! ```
//!
//! ```no_run
//! # #[allow(dead_code)]
//! # async fn f(peer: &rpma::Peer, addr: &str, dst: rpma::MrLocal<rpma::AlignedBuf>) -> rpma::Result<()> {
//! let conn = rpma::aio::AsyncConn::connect(peer, addr, 7204, None, &[]).await?;
//! let src = rpma::MrRemote::from_descriptor(conn.conn().private_data())?;
//! let wc = conn.read(&dst, 0, &src, 0, 8).await?;
//! assert!(wc.status.is_success());
//! conn.disconnect().await
//! # }
//! ```

mod conn;
mod reaper;
mod router;
mod shared;
mod verbs;
pub use conn::{AsyncConn, Completions, Events};
pub use shared::AsyncSharedCq;

use crate::conn::ConnEvent;
use crate::conn_cfg::ConnCfg;
use crate::conn_req::ConnReq;
use crate::cq::{Completion, Cq};
use crate::device::{DeviceEvent, IbvContext};
use crate::ep::Ep;
use crate::error::{Error, Result};
use crate::peer::Peer;
use crate::utils::set_nonblocking;
use crate::Conn;
use futures_core::Stream;
use std::os::fd::{AsFd, BorrowedFd};
use std::pin::Pin;
use std::task::{Context, Poll};
use tokio::io::unix::AsyncFd;
use tokio::io::Interest;

/// `fd` made non-blocking and registered with the current runtime.
/// [`Error::Inval`] with [`Detail::NoRuntime`](crate::error::Detail::NoRuntime).
#[cold]
pub(crate) fn no_runtime(text: String) -> Error {
    Error::Inval(crate::error::Msg::detailed(crate::error::Detail::NoRuntime, text))
}

fn register<'a>(fd: BorrowedFd<'a>, what: &str) -> Result<AsyncFd<BorrowedFd<'a>>> {
    // SAFETY: a `BorrowedFd<'a>` stays open and refers to the same file
    // description for 'a, and the `AsyncFd` holding it cannot outlive 'a.
    unsafe { register_as(fd, fd, what) }
}

/// `fd` made non-blocking and registered for reading with the current
/// runtime, as `inner` (what the `AsyncFd` holds).
///
/// # Safety
/// `inner` names `fd`, which stays open and names the same file
/// description while the registration lives.
unsafe fn register_as<T: std::os::fd::AsRawFd>(fd: BorrowedFd<'_>, inner: T, what: &str) -> Result<AsyncFd<T>> {
    if tokio::runtime::Handle::try_current().is_err() {
        return Err(no_runtime(format!("rpma::aio: the {what} fd can be awaited only inside a tokio runtime")));
    }
    set_nonblocking(fd, true)?;
    // SAFETY: this function's contract.
    let registered = unsafe { AsyncFd::register_with_interest(inner, Interest::READABLE) };
    registered.map_err(|e| {
        Error::provider_raw(format!("registering the {what} fd with tokio's reactor"), std::io::Error::from(e))
    })
}

/// Runs `take` (which never sleeps: `Pending` while another thread reads
/// the channel, its waker woken when that thread lets go); when it reports
/// `empty`, polls `fd`'s readiness and, once readable, takes again (`empty`
/// then means the readiness was stale: it is cleared and waited for again).
fn poll_take<T>(
    fd: &AsyncFd<impl std::os::fd::AsRawFd>,
    cx: &mut Context<'_>,
    mut take: impl FnMut(&mut Context<'_>) -> Poll<Result<T>>,
    empty: fn(&Error) -> bool,
) -> Poll<Result<T>> {
    loop {
        match std::task::ready!(take(cx)) {
            Err(e) if empty(&e) => {}
            other => return Poll::Ready(other),
        }
        let mut guard = match fd.poll_read_ready(cx) {
            Poll::Ready(Ok(g)) => g,
            Poll::Ready(Err(e)) => return Poll::Ready(Err(Error::provider_raw("tokio readiness", e))),
            Poll::Pending => return Poll::Pending,
        };
        match std::task::ready!(take(cx)) {
            Err(e) if empty(&e) => guard.clear_ready(),
            other => return Poll::Ready(other),
        }
    }
}

/// [`poll_take`], awaited.
async fn when_readable<T>(
    fd: &AsyncFd<impl std::os::fd::AsRawFd>,
    mut take: impl FnMut(&mut Context<'_>) -> Poll<Result<T>>,
    empty: fn(&Error) -> bool,
) -> Result<T> {
    std::future::poll_fn(|cx| poll_take(fd, cx, &mut take, empty)).await
}

fn no_event(e: &Error) -> bool {
    matches!(e, Error::NoEvent)
}

fn no_completion(e: &Error) -> bool {
    matches!(e, Error::NoCompletion)
}

/// An [`Ep`] whose connection requests are awaited.
#[derive(Debug)]
pub struct AsyncEp<'a> {
    ep: &'a Ep,
    fd: AsyncFd<BorrowedFd<'a>>,
}

impl<'a> AsyncEp<'a> {
    /// Registers `ep`'s event fd with the current tokio runtime.
    ///
    /// # Errors
    /// [`Error::Inval`] outside a tokio runtime; [`Error::Provider`] when
    /// the fd cannot be made non-blocking or registered.
    pub fn new(ep: &'a Ep) -> Result<AsyncEp<'a>> {
        Ok(AsyncEp { ep, fd: register(ep.as_fd(), "endpoint")? })
    }

    /// The next incoming connection request ([`Ep::next_conn_req`]).
    /// Cancellation-safe.
    ///
    /// # Errors
    /// As [`Ep::next_conn_req`], never [`Error::NoEvent`].
    pub async fn next_conn_req(&self, cfg: Option<&ConnCfg>) -> Result<ConnReq> {
        when_readable(&self.fd, |cx| self.ep.poll_conn_req(cfg, cx), no_event).await
    }
}

/// The connection requests, as a stream (with the default
/// configuration; [`next_conn_req`](AsyncEp::next_conn_req) takes one). It
/// never ends.
impl Stream for AsyncEp<'_> {
    type Item = Result<ConnReq>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let ep = self.ep;
        poll_take(&self.fd, cx, |cx| ep.poll_conn_req(None, cx), no_event).map(Some)
    }
}

/// A [`Conn`] whose connection events are awaited.
#[derive(Debug)]
pub struct AsyncConnEvents<'a> {
    conn: &'a Conn,
    fd: AsyncFd<BorrowedFd<'a>>,
}

impl<'a> AsyncConnEvents<'a> {
    /// Registers `conn`'s CM event fd with the current tokio runtime.
    ///
    /// # Errors
    /// As [`AsyncEp::new`].
    pub fn new(conn: &'a Conn) -> Result<AsyncConnEvents<'a>> {
        Ok(AsyncConnEvents { conn, fd: register(conn.as_fd(), "connection event")? })
    }

    /// The next connection event ([`Conn::next_event`]). Cancellation-safe.
    ///
    /// # Errors
    /// As [`Conn::next_event`], never [`Error::NoEvent`].
    pub async fn next_event(&self) -> Result<ConnEvent> {
        when_readable(&self.fd, |cx| self.conn.poll_event(cx), no_event).await
    }
}

/// The connection's events, as a stream. It never ends (a closed
/// connection has no more events: stop at the closing one).
impl Stream for AsyncConnEvents<'_> {
    type Item = Result<ConnEvent>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let conn = self.conn;
        poll_take(&self.fd, cx, |cx| conn.poll_event(cx), no_event).map(Some)
    }
}

/// A connection's shared completion channel
/// ([`ConnCfg::set_compl_channel`]), awaited as [`Conn::wait`] waits on it.
#[derive(Debug)]
pub struct AsyncChannel<'a> {
    conn: &'a Conn,
    fd: AsyncFd<BorrowedFd<'a>>,
}

impl<'a> AsyncChannel<'a> {
    /// Registers `conn`'s shared completion channel fd with the current
    /// tokio runtime.
    ///
    /// # Errors
    /// [`Error::NotSharedChnl`] without a shared channel; as
    /// [`AsyncEp::new`] otherwise.
    pub fn new(conn: &'a Conn) -> Result<AsyncChannel<'a>> {
        Ok(AsyncChannel { conn, fd: register(conn.compl_fd()?, "shared completion channel")? })
    }

    /// Waits for a completion event on the channel ([`Conn::wait`]): the CQ
    /// with an event (re-armed) and whether it is the receive CQ; drain it
    /// with [`Cq::get_wc`] / [`Cq::get_completion`] next. Cancellation-safe
    /// (nothing is consumed while waiting).
    ///
    /// # Errors
    /// As [`Conn::wait`], never [`Error::NoCompletion`].
    pub async fn wait(&self) -> Result<(&'a Cq, bool)> {
        let conn = self.conn;
        when_readable(&self.fd, |cx| conn.poll_wait(cx), no_completion).await
    }
}

/// A [`Cq`] (a connection's, an SRQ's or a [`SharedCq`](crate::SharedCq))
/// whose completions are awaited.
#[derive(Debug)]
pub struct AsyncCq<'a> {
    cq: &'a Cq,
    fd: AsyncFd<BorrowedFd<'a>>,
}

impl<'a> AsyncCq<'a> {
    /// Registers `cq`'s completion channel fd with the current tokio runtime.
    ///
    /// # Errors
    /// [`Error::SharedChannel`] for a CQ on a connection's shared completion
    /// channel (await its connection's CQs one by one instead, or use a
    /// [`SharedCq`](crate::SharedCq)); as [`AsyncEp::new`] otherwise.
    pub fn new(cq: &'a Cq) -> Result<AsyncCq<'a>> {
        if cq.on_shared_channel() {
            return Err(Error::SharedChannel(
                "this CQ's completion channel is shared by a connection's CQs: AsyncCq needs a CQ with its own channel"
                    .into(),
            ));
        }
        Ok(AsyncCq { cq, fd: register(cq.as_fd(), "completion channel")? })
    }

    /// The next completion ([`Cq::get_completion`], waiting on the channel
    /// when there is none; [`Cq::wait`] re-arms the CQ). Cancellation-safe.
    ///
    /// # Errors
    /// As [`Cq::get_completion`] and [`Cq::wait`].
    pub async fn next_completion(&self) -> Result<Completion> {
        std::future::poll_fn(|cx| self.poll_cq(cx, || self.cq.get_completion())).await
    }

    /// At least one and up to `wc.len()` completions ([`Cq::get_wc`]), waiting
    /// as [`next_completion`](Self::next_completion) does. Cancellation-safe.
    ///
    /// # Errors
    /// As [`Cq::get_wc`].
    pub async fn get_wc(&self, wc: &mut [Completion]) -> Result<usize> {
        std::future::poll_fn(|cx| self.poll_cq(cx, || self.cq.get_wc(wc).map(|n| (n > 0).then_some(n)))).await
    }

    /// Runs `take` until it finds completions; while it finds none, takes
    /// the channel's event and re-arms the CQ ([`Cq::wait`]), then takes
    /// again (a completion that arrived before the re-arm is found then).
    fn poll_cq<T>(&self, cx: &mut Context<'_>, mut take: impl FnMut() -> Result<Option<T>>) -> Poll<Result<T>> {
        loop {
            match take() {
                Ok(None) => {}
                Ok(Some(t)) => return Poll::Ready(Ok(t)),
                Err(e) => return Poll::Ready(Err(e)),
            }
            match poll_take(&self.fd, cx, |cx| self.cq.poll_wait(cx), no_completion) {
                Poll::Ready(Ok(())) => {}
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                Poll::Pending => return Poll::Pending,
            }
        }
    }
}

/// The CQ's completions, as a stream (one at a time, as
/// [`next_completion`](AsyncCq::next_completion)). It never ends.
impl Stream for AsyncCq<'_> {
    type Item = Result<Completion>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let cq = self.cq;
        self.poll_cq(cx, || cq.get_completion()).map(Some)
    }
}

/// A device context whose asynchronous events are awaited.
#[derive(Debug)]
pub struct AsyncDevice<'a> {
    ctx: &'a IbvContext,
    fd: AsyncFd<BorrowedFd<'a>>,
}

impl<'a> AsyncDevice<'a> {
    /// Registers the device's async-event fd with the current tokio runtime.
    ///
    /// # Errors
    /// As [`AsyncEp::new`].
    pub fn new(ctx: &'a IbvContext) -> Result<AsyncDevice<'a>> {
        Ok(AsyncDevice { ctx, fd: register(ctx.as_fd(), "device async-event")? })
    }

    /// The device's next asynchronous event ([`IbvContext::next_event`]).
    /// Cancellation-safe.
    ///
    /// # Errors
    /// As [`IbvContext::next_event`], never [`Error::NoEvent`].
    pub async fn next_event(&self) -> Result<DeviceEvent> {
        when_readable(&self.fd, |cx| self.ctx.poll_event(cx), no_event).await
    }
}

/// The device's asynchronous events, as a stream. It never ends.
impl Stream for AsyncDevice<'_> {
    type Item = Result<DeviceEvent>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let ctx = self.ctx;
        poll_take(&self.fd, cx, |cx| ctx.poll_event(cx), no_event).map(Some)
    }
}

/// Connects to `addr:port` and awaits the connection's establishment.
/// Address and route resolution ([`ConnReq::new`], which blocks for up to
/// `cfg`'s timeout) run on tokio's blocking pool, never on the runtime's
/// own threads. Cancellation-safe: dropped before it returns, the request
/// or connection is dropped.
///
/// # Errors
/// As [`ConnReq::new`] and [`ConnReq::connect`]; [`Error::Unknown`] with
/// [`Detail::NotEstablished`](crate::error::Detail::NotEstablished) naming
/// the first event when it is not `Established` (`Rejected` when nothing
/// listens there, `Unreachable`, ...).
pub async fn connect(peer: &Peer, addr: &str, port: u16, cfg: Option<&ConnCfg>, pdata: &[u8]) -> Result<Conn> {
    let conn = resolved(peer, addr, port, cfg).await?.connect(pdata)?;
    established(conn, || format!("connecting to {addr}:{port}")).await
}

/// [`ConnReq::new`] on tokio's blocking pool: its resolution steps wait in
/// librdmacm's calls.
async fn resolved(peer: &Peer, addr: &str, port: u16, cfg: Option<&ConnCfg>) -> Result<ConnReq> {
    let Ok(rt) = tokio::runtime::Handle::try_current() else {
        return Err(no_runtime("rpma::aio::connect: awaited only inside a tokio runtime".to_string()));
    };
    let (peer, addr, cfg) = (peer.clone(), addr.to_string(), cfg.cloned());
    match rt.spawn_blocking(move || ConnReq::new(&peer, &addr, port, cfg.as_ref())).await {
        Ok(req) => req,
        Err(e) => Err(Error::Unknown(format!("rpma::aio::connect: the resolution task failed: {e}").into())),
    }
}

/// Accepts the next connection request on `ep` with `pdata`, and awaits its
/// establishment. Cancellation-safe.
///
/// # Errors
/// As [`AsyncEp::next_conn_req`] and [`ConnReq::connect`];
/// [`Error::Unknown`] with
/// [`Detail::NotEstablished`](crate::error::Detail::NotEstablished) when the
/// first event is not `Established`.
pub async fn accept(ep: &AsyncEp<'_>, cfg: Option<&ConnCfg>, pdata: &[u8]) -> Result<Conn> {
    let conn = ep.next_conn_req(cfg).await?.connect(pdata)?;
    established(conn, || "accepting a connection".to_string()).await
}

/// Awaits `conn`'s first event, which must be `Established` (`what` names
/// the attempt in the error otherwise), and leaves its event fd blocking
/// again, as a connection made without `aio` has it.
async fn established(conn: Conn, what: impl FnOnce() -> String) -> Result<Conn> {
    let ev = AsyncConnEvents::new(&conn)?.next_event().await?;
    if ev != ConnEvent::Established {
        let detail = crate::error::Detail::NotEstablished { event: ev };
        return Err(Error::Unknown(crate::error::Msg::detailed(
            detail,
            format!("{}: the connection was {ev}", what()),
        )));
    }
    set_nonblocking(&conn, false)?;
    Ok(conn)
}
