//! Waiting on many fds at once ([`poll_fds`]) and making one non-blocking
//! ([`set_nonblocking`]): helpers over the fds of endpoints, connections,
//! CQs and completion channels, which no one of them owns. Both take the fds
//! borrowed ([`AsFd`]: [`Ep`](crate::Ep), [`Conn`](crate::Conn) (its event
//! fd), [`Cq`](crate::Cq), [`SharedCq`](crate::SharedCq),
//! [`IbvContext`](crate::IbvContext), and [`Conn::compl_fd`](crate::Conn::compl_fd)), so
//! they act only on fds that are open for the call.
//!
//! What librpma files under `rpma_utils_*` lives with its owner: the device
//! lookup, handle and events in [`device`](crate::device), the connection
//! events' strings in [`conn`](crate::conn).
//!
//! ```no_run
//! # #[allow(dead_code)]
//! # fn f(ep: &rpma::Ep, conn: &rpma::Conn) -> rpma::Result<()> {
//! use rpma::utils::{poll_fds, set_nonblocking};
//! use std::os::fd::AsFd;
//! set_nonblocking(conn, true)?;
//! let ready = poll_fds(&[ep.as_fd(), conn.as_fd()], Some(std::time::Duration::from_secs(1)))?;
//! if ready[1] {
//!     println!("{}", conn.next_event()?);
//! }
//! # Ok(()) }
//! ```

use crate::error::{Error, Result};
use std::os::fd::{AsFd, BorrowedFd};
use std::time::Duration;

/// Waits until at least one of `fds` (endpoint, connection event, CQ or
/// completion-channel fds) is readable, or `timeout` passes (`None`: no
/// limit); returns which are. The safe stand-in for the epoll loops of
/// librpma's examples 06 and 13.
///
/// ```no_run
/// # #[allow(dead_code)]
/// # fn f(ep: &rpma::Ep, conn: &rpma::Conn) -> rpma::Result<()> {
/// use std::os::fd::AsFd;
/// let ready = rpma::utils::poll_fds(&[ep.as_fd(), conn.as_fd(), conn.cq().as_fd()], None)?;
/// if ready[0] { /* a connection request is waiting */ }
/// # Ok(()) }
/// ```
///
/// # Errors
/// [`Error::Inval`] for no fds and no timeout (a wait for ever on
/// nothing); [`Error::Provider`] with the errno of `poll(2)`.
pub fn poll_fds(fds: &[BorrowedFd<'_>], timeout: Option<Duration>) -> Result<Vec<bool>> {
    if fds.is_empty() && timeout.is_none() {
        return Err(Error::inval("poll_fds: no fds and no timeout would wait for ever"));
    }
    rpma_sys::poll_many(fds, timeout).map_err(|e| Error::provider_raw("poll", e))
}

/// Makes `fd` non-blocking (or blocking again): an [`Ep`](crate::Ep), a
/// [`Conn`](crate::Conn) (its event fd), a [`Cq`](crate::Cq), ... or any
/// borrowed fd. Then [`Ep::next_conn_req`](crate::Ep::next_conn_req) and
/// [`Conn::next_event`](crate::Conn::next_event) report
/// [`Error::NoEvent`], and [`Cq::wait`](crate::Cq::wait) /
/// [`Conn::wait`](crate::Conn::wait) [`Error::NoCompletion`], instead of
/// blocking.
///
/// ```no_run
/// # #[allow(dead_code)]
/// # fn f(ep: &rpma::Ep) -> rpma::Result<()> {
/// rpma::utils::set_nonblocking(ep, true)?;
/// match ep.next_conn_req(None) {
///     Err(rpma::Error::NoEvent) => { /* nothing pending: poll later */ }
///     other => drop(other?),
/// }
/// # Ok(()) }
/// ```
///
/// # Errors
/// [`Error::Provider`] with the errno of `fcntl`.
pub fn set_nonblocking(fd: impl AsFd, nonblocking: bool) -> Result<()> {
    rpma_sys::set_nonblocking(fd.as_fd(), nonblocking).map_err(|e| Error::provider_raw("fcntl(O_NONBLOCK)", e))
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    /// Both helpers work on any borrowed fd (a socket pair here).
    #[test]
    fn poll_and_nonblocking_on_borrowed_fds() {
        use std::io::{ErrorKind, Read, Write};
        use std::os::fd::AsFd;
        let (mut a, mut b) = std::os::unix::net::UnixStream::pair().unwrap();
        super::set_nonblocking(&b, true).unwrap();
        assert_eq!(b.read(&mut [0u8; 1]).unwrap_err().kind(), ErrorKind::WouldBlock);
        let fds = [a.as_fd(), b.as_fd()];
        assert_eq!(super::poll_fds(&fds, Some(Duration::ZERO)).unwrap(), [false, false]);
        a.write_all(b"x").unwrap();
        assert_eq!(super::poll_fds(&[a.as_fd(), b.as_fd()], Some(Duration::MAX)).unwrap(), [false, true]);
        super::set_nonblocking(b.as_fd(), false).unwrap();
        assert_eq!(b.read(&mut [0u8; 1]).unwrap(), 1);
        assert_eq!(super::poll_fds(&[], None).unwrap_err().code(), crate::error::RPMA_E_INVAL);
    }
}
