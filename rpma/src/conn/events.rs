//! A connection's events and completion waits: the CM event channel,
//! [`ConnEvent`] with librpma's values and names, the shared completion
//! channel, disconnecting.

use super::Conn;
use crate::conn_event::ConnEvent;
use crate::cq::Cq;
use crate::error::{Error, Result};
use crate::logging::{rpma_log, LogLevel};
use rpma_sys::cm::event;
use rpma_sys::gate::Bound;
use std::os::fd::RawFd;
use std::sync::atomic::Ordering;
use std::time::Duration;

impl Conn {
    /// The connection's CM event fd (`rpma_conn_get_event_fd`).
    pub fn event_fd(&self) -> RawFd {
        self.channel.fd()
    }

    /// The next connection event (`rpma_conn_next_event`), with librpma's
    /// mapping: ESTABLISHED → `Established`; DISCONNECTED, TIMEWAIT_EXIT →
    /// `Closed`; CONNECT_ERROR, DEVICE_REMOVAL → `Lost`; REJECTED →
    /// `Rejected`; UNREACHABLE → `Unreachable`. Blocks unless the event fd is
    /// non-blocking. On `Established` the configured RNR NAK timer
    /// ([`ConnCfg::set_min_rnr_timer`](crate::ConnCfg::set_min_rnr_timer)) is
    /// applied to the QP; a provider that refuses it keeps its own, with a
    /// warning in the log.
    ///
    /// # Errors
    /// [`Error::NoEvent`] when nothing is pending on a non-blocking fd;
    /// [`Error::Unknown`] for an event librpma does not map (named in the
    /// message); [`Error::Provider`] when getting the event fails;
    /// [`Error::Inval`] when an `rpma::aio::AsyncConn` (feature `tokio`) owns
    /// the connection (await its `next_event`).
    pub fn next_event(&self) -> Result<ConnEvent> {
        self.refuse_events_if_reaped()?;
        self.event_within(Bound::Never)
    }

    /// [`next_event`](Conn::next_event), giving up after `timeout`
    /// (`Duration::MAX`: no limit), however many threads wait for the
    /// connection's events: the channel is read by one waiter at a time,
    /// each within its own bound.
    ///
    /// # Errors
    /// As [`next_event`](Conn::next_event); [`Error::NoEvent`] when `timeout`
    /// passes first.
    pub fn next_event_timeout(&self, timeout: Duration) -> Result<ConnEvent> {
        self.refuse_events_if_reaped()?;
        self.event_within(Bound::after(timeout))
    }

    /// [`Error::Inval`] when an `rpma::aio::AsyncConn` (feature `tokio`) owns
    /// the connection: its events are awaited there, where
    /// [`disconnect`](crate::aio::AsyncConn::disconnect) waits for the
    /// closing one.
    fn refuse_events_if_reaped(&self) -> Result<()> {
        if self.events_reaped {
            return Err(Error::inval(
                "this connection belongs to an rpma::aio::AsyncConn, which takes its events: await \
                 AsyncConn::next_event instead",
            ));
        }
        Ok(())
    }

    /// The next event within `bound`, mapped as [`next_event`](Conn::next_event).
    pub(crate) fn event_within(&self, bound: Bound) -> Result<ConnEvent> {
        self.on_event(cm_event(self.channel.get_event(bound))?)
    }

    /// The next event for an async waiter: never sleeps; `Pending` while
    /// another thread reads the channel (`cx` is woken when it lets go),
    /// [`Error::NoEvent`] when none is there now.
    #[cfg(feature = "tokio")]
    pub(crate) fn poll_event(&self, cx: &mut std::task::Context<'_>) -> std::task::Poll<Result<ConnEvent>> {
        self.channel.poll_get_event(cx).map(|got| self.on_event(cm_event(got)?))
    }

    /// librpma's mapping of a CM event; a closing one closes the connection.
    fn on_event(&self, ev: rpma_sys::cm::CmEvent) -> Result<ConnEvent> {
        let ev = Ok(match ev.kind {
            event::ESTABLISHED => {
                let _ = self.private_data.set(ev.private_data);
                if let Some(qp) = self.parts.id.qp() {
                    // A tuning attribute: a provider that refuses it keeps
                    // rdma_cm's value, and the connection is still good.
                    if let Err(e) = qp.set_min_rnr_timer(self.parts.min_rnr_timer) {
                        rpma_log!(
                            LogLevel::Warning,
                            "ibv_modify_qp(min_rnr_timer {}) failed ({e}): the provider's RNR timer stays",
                            self.parts.min_rnr_timer
                        );
                    }
                }
                ConnEvent::Established
            }
            event::CONNECT_ERROR | event::DEVICE_REMOVAL => ConnEvent::Lost,
            event::DISCONNECTED | event::TIMEWAIT_EXIT => ConnEvent::Closed,
            event::REJECTED => ConnEvent::Rejected,
            event::UNREACHABLE => ConnEvent::Unreachable,
            other => {
                return Err(Error::Unknown(
                    format!("unexpected connection event {}", rpma_sys::cm::event_str(other)).into(),
                ))
            }
        });
        if !matches!(ev, Ok(ConnEvent::Established)) {
            self.parts.closed.store(true, Ordering::Relaxed);
        }
        ev
    }

    /// The fd of the shared completion channel (`rpma_conn_get_compl_fd`),
    /// borrowed for as long as the connection: poll it, or register it
    /// with epoll, mio or tokio (`as_raw_fd()` for the number).
    ///
    /// # Errors
    /// [`Error::NotSharedChnl`] when the connection has no shared channel.
    pub fn compl_fd(&self) -> Result<std::os::fd::BorrowedFd<'_>> {
        match &self.parts.shared {
            Some(c) => Ok(std::os::fd::AsFd::as_fd(c)),
            None => {
                Err(Error::NotSharedChnl("the connection was configured without a shared completion channel".into()))
            }
        }
    }

    /// Waits on the shared completion channel (`rpma_conn_wait`): returns the
    /// CQ with a completion event (re-armed) and whether it is the RCQ.
    ///
    /// # Errors
    /// [`Error::NotSharedChnl`] without a shared channel; [`Error::NoCompletion`]
    /// when nothing is pending on a non-blocking fd; [`Error::Unknown`] for
    /// an event of another CQ; [`Error::Inval`] when an async reaper
    /// (`rpma::aio::AsyncConn`, feature `tokio`) serves the connection.
    pub fn wait(&self) -> Result<(&Cq, bool)> {
        self.wait_within(Bound::Never)
    }

    /// [`wait`](Conn::wait), giving up after `timeout` (`Duration::MAX`: no
    /// limit), however many threads wait on the channel.
    ///
    /// # Errors
    /// As [`wait`](Conn::wait); [`Error::NoCompletion`] when `timeout` passes.
    pub fn wait_timeout(&self, timeout: Duration) -> Result<(&Cq, bool)> {
        self.wait_within(Bound::after(timeout))
    }

    fn wait_within(&self, bound: Bound) -> Result<(&Cq, bool)> {
        let ch = self.waitable_channel()?;
        let (cq, is_rcq) = self.cq_of_event(ch.get_event(bound))?;
        cq.rearm()?;
        Ok((cq, is_rcq))
    }

    /// The shared completion channel, for a wait's own reading: refused
    /// without one, or when an async reaper serves the connection.
    fn waitable_channel(&self) -> Result<&rpma_sys::cq::CompChannel> {
        let Some(ch) = &self.parts.shared else { return Err(not_shared()) };
        self.parts.cq.refuse_if_reaped()?;
        Ok(ch)
    }

    /// [`wait`](Conn::wait) for an async waiter: never sleeps; `Pending`
    /// while another thread reads the channel (`cx` is woken when it lets
    /// go), [`Error::NoCompletion`] when no event is there now.
    #[cfg(feature = "tokio")]
    pub(crate) fn poll_wait(&self, cx: &mut std::task::Context<'_>) -> std::task::Poll<Result<(&Cq, bool)>> {
        let ch = match self.waitable_channel() {
            Ok(ch) => ch,
            Err(e) => return std::task::Poll::Ready(Err(e)),
        };
        ch.poll_get_event(cx).map(|got| {
            let (cq, is_rcq) = self.cq_of_event(got)?;
            cq.rearm()?;
            Ok((cq, is_rcq))
        })
    }

    /// The shared channel's next event taken (acknowledged) within `bound`
    /// without re-arming its CQ, for the connection's async reaper
    /// ([`Bound::Now`]), which arms it again only while a future waits:
    /// the CQ, and whether it is the RCQ.
    #[cfg(feature = "tokio")]
    pub(crate) fn take_shared_event_unarmed(&self, bound: Bound) -> Result<(&Cq, bool)> {
        let Some(ch) = &self.parts.shared else { return Err(not_shared()) };
        self.cq_of_event(ch.get_event(bound))
    }

    /// The CQ a shared channel's event was for, and whether it is the RCQ.
    fn cq_of_event(&self, got: std::io::Result<Option<usize>>) -> Result<(&Cq, bool)> {
        let id = match got {
            Ok(Some(id)) => id,
            Ok(None) => return Err(Error::NoCompletion),
            Err(e) if e.raw_os_error() == Some(libc::EAGAIN) => return Err(Error::NoCompletion),
            Err(e) => return Err(Error::provider_raw("ibv_get_cq_event", e)),
        };
        if id == self.parts.cq.sys().id() {
            Ok((&*self.parts.cq, false))
        } else if let Some(r) = self.parts.rcq.as_ref().filter(|r| r.sys().id() == id) {
            Ok((r, true))
        } else {
            Err(Error::Unknown("a completion event for a CQ of no connection".into()))
        }
    }

    /// Starts closing the connection (`rpma_conn_disconnect`). From then on
    /// (and once [`next_event`](Conn::next_event) reported anything but
    /// `Established`) operations are refused with [`Error::Inval`].
    ///
    /// # Errors
    /// [`Error::Provider`] when `rdma_disconnect` fails.
    pub fn disconnect(&self) -> Result<()> {
        self.parts.closed.store(true, Ordering::Relaxed);
        self.parts.id.disconnect().map_err(|e| Error::provider_raw("rdma_disconnect", e))
    }
}

/// A CM channel read as an event: none within the bound, or none on a
/// non-blocking fd, is [`Error::NoEvent`].
pub(crate) fn cm_event(got: std::io::Result<Option<rpma_sys::cm::CmEvent>>) -> Result<rpma_sys::cm::CmEvent> {
    match got {
        Ok(Some(ev)) => Ok(ev),
        Ok(None) => Err(Error::NoEvent),
        Err(e) if matches!(e.raw_os_error(), Some(libc::EAGAIN) | Some(libc::ENODATA)) => Err(Error::NoEvent),
        Err(e) => Err(Error::provider_raw("rdma_get_cm_event", e)),
    }
}

#[cold]
fn not_shared() -> Error {
    Error::NotSharedChnl("the connection was configured without a shared completion channel".into())
}

/// The connection's CM event fd, as [`Conn::event_fd`]: readable when a
/// connection event is pending. Completions have their own fds
/// ([`Cq`]'s, or [`Conn::compl_fd`] with a shared completion channel).
impl std::os::fd::AsFd for Conn {
    fn as_fd(&self) -> std::os::fd::BorrowedFd<'_> {
        self.channel.as_fd()
    }
}

impl std::os::fd::AsRawFd for Conn {
    fn as_raw_fd(&self) -> std::os::fd::RawFd {
        std::os::fd::AsRawFd::as_raw_fd(&std::os::fd::AsFd::as_fd(self))
    }
}
