//! A connection's events and completion waits: the CM event channel,
//! [`ConnEvent`] with librpma's values and names, the shared completion
//! channel, disconnecting.

use super::Conn;
use crate::cq::Cq;
use crate::error::{Error, Result};
use crate::log::{rpma_log, LogLevel};
use rpma_sys::cm::event;
use std::fmt;
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
    /// message); [`Error::Provider`] when getting the event fails.
    pub fn next_event(&self) -> Result<ConnEvent> {
        let ev = self.channel.get_event().map_err(|e| match e.raw_os_error() {
            Some(libc::EAGAIN) | Some(libc::ENODATA) => Error::NoEvent,
            _ => Error::provider_raw("rdma_get_cm_event", e),
        })?;
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

    /// [`next_event`](Conn::next_event), giving up after `timeout`.
    ///
    /// # Errors
    /// As [`next_event`](Conn::next_event); [`Error::NoEvent`] when `timeout`
    /// passes first.
    pub fn next_event_timeout(&self, timeout: Duration) -> Result<ConnEvent> {
        if !rpma_sys::poll_readable(std::os::fd::AsFd::as_fd(self), Some(timeout))
            .map_err(|e| Error::provider_raw("poll", e))?
        {
            return Err(Error::NoEvent);
        }
        self.next_event()
    }

    /// The fd of the shared completion channel (`rpma_conn_get_compl_fd`).
    ///
    /// # Errors
    /// [`Error::NotSharedChnl`] when the connection has no shared channel.
    pub fn compl_fd(&self) -> Result<RawFd> {
        match &self.parts.shared {
            Some(c) => Ok(c.fd()),
            None => {
                Err(Error::NotSharedChnl("the connection was configured without a shared completion channel".into()))
            }
        }
    }

    /// [`compl_fd`](Conn::compl_fd), borrowed for as long as the connection.
    ///
    /// # Errors
    /// As [`compl_fd`](Conn::compl_fd).
    pub fn compl_as_fd(&self) -> Result<std::os::fd::BorrowedFd<'_>> {
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
        self.compl_as_fd()?;
        self.parts.cq.refuse_if_reaped()?;
        self.take_shared_event()
    }

    /// [`wait`](Conn::wait) after its checks: the event taken, its CQ
    /// re-armed.
    pub(crate) fn take_shared_event(&self) -> Result<(&Cq, bool)> {
        let (cq, is_rcq) = self.take_shared_event_unarmed()?;
        cq.rearm()?;
        Ok((cq, is_rcq))
    }

    /// The shared channel's next event taken (acknowledged) without
    /// re-arming its CQ, for the connection's async reaper, which arms it
    /// again only while a future waits: the CQ, and whether it is the RCQ.
    pub(crate) fn take_shared_event_unarmed(&self) -> Result<(&Cq, bool)> {
        let Some(ch) = &self.parts.shared else {
            return Err(Error::NotSharedChnl(
                "the connection was configured without a shared completion channel".into(),
            ));
        };
        let id = ch.get_event().map_err(|_| Error::NoCompletion)?;
        let (cq, is_rcq) = if id == self.parts.cq.sys().id() {
            (&*self.parts.cq, false)
        } else if let Some(r) = self.parts.rcq.as_ref().filter(|r| r.sys().id() == id) {
            (r, true)
        } else {
            return Err(Error::Unknown("a completion event for a CQ of no connection".into()));
        };
        Ok((cq, is_rcq))
    }

    /// [`wait`](Conn::wait), giving up after `timeout`.
    ///
    /// # Errors
    /// As [`wait`](Conn::wait); [`Error::NoCompletion`] when `timeout` passes.
    pub fn wait_timeout(&self, timeout: Duration) -> Result<(&Cq, bool)> {
        let fd = self.compl_as_fd()?;
        self.parts.cq.refuse_if_reaped()?;
        if !rpma_sys::poll_readable(fd, Some(timeout)).map_err(|e| Error::provider_raw("poll", e))? {
            return Err(Error::NoCompletion);
        }
        self.wait()
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

/// Connection events (`enum rpma_conn_event`), with librpma's values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(i32)]
#[non_exhaustive]
pub enum ConnEvent {
    /// No event yet (`RPMA_CONN_UNDEFINED`).
    Undefined = -1,
    /// The connection is up.
    Established = 0,
    /// The connection was closed by either side.
    Closed = 1,
    /// The connection was lost (connect error, device removal).
    Lost = 2,
    /// The other side rejected the connection.
    Rejected = 3,
    /// The other side could not be reached.
    Unreachable = 4,
}

/// librpma's `rpma_utils_conn_event_2str`.
///
/// ```
/// use rpma::conn::{conn_event_2str, ConnEvent};
/// assert_eq!(conn_event_2str(ConnEvent::Established), "Connection established");
/// ```
pub fn conn_event_2str(ev: ConnEvent) -> &'static str {
    match ev {
        ConnEvent::Undefined => "Undefined connection event",
        ConnEvent::Established => "Connection established",
        ConnEvent::Closed => "Connection closed",
        ConnEvent::Lost => "Connection lost",
        ConnEvent::Rejected => "Connection rejected",
        ConnEvent::Unreachable => "Connection unreachable",
    }
}

/// The string librpma gives for a raw event value, including
/// "Unsupported connection event" for values it does not know.
///
/// ```
/// use rpma::conn::{conn_event_value_2str, ConnEvent};
/// assert_eq!(conn_event_value_2str(ConnEvent::Closed as i32), "Connection closed");
/// assert_eq!(conn_event_value_2str(7), "Unsupported connection event");
/// ```
pub fn conn_event_value_2str(value: i32) -> &'static str {
    match value {
        -1 => conn_event_2str(ConnEvent::Undefined),
        0 => conn_event_2str(ConnEvent::Established),
        1 => conn_event_2str(ConnEvent::Closed),
        2 => conn_event_2str(ConnEvent::Lost),
        3 => conn_event_2str(ConnEvent::Rejected),
        4 => conn_event_2str(ConnEvent::Unreachable),
        _ => "Unsupported connection event",
    }
}

impl fmt::Display for ConnEvent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(conn_event_2str(*self))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn event_strings_match_librpma() {
        assert_eq!(conn_event_value_2str(-1), "Undefined connection event");
        assert_eq!(conn_event_value_2str(0), "Connection established");
        assert_eq!(conn_event_value_2str(1), "Connection closed");
        assert_eq!(conn_event_value_2str(2), "Connection lost");
        assert_eq!(conn_event_value_2str(3), "Connection rejected");
        assert_eq!(conn_event_value_2str(4), "Connection unreachable");
        assert_eq!(conn_event_value_2str(5), "Unsupported connection event");
        assert_eq!(ConnEvent::Lost.to_string(), "Connection lost");
        assert_eq!(ConnEvent::Unreachable as i32, 4);
    }
}
