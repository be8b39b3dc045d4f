//! Endpoint: a listening RDMA CM ID that produces connection requests.

use crate::conn_cfg::ConnCfg;
use crate::conn_req::ConnReq;
use crate::error::{Error, Result};
use crate::peer::Peer;
use rpma_sys::cm::{event, AddrInfo, CmId, EventChannel};
use rpma_sys::gate::Bound;
use std::os::fd::RawFd;
use std::time::Duration;

/// A listening endpoint (librpma's `rpma_ep`).
///
/// ```no_run
/// use rpma::{Ep, Peer};
/// # #[allow(dead_code)]
/// # fn f(peer: &Peer) -> rpma::Result<()> {
/// let ep = Ep::listen(peer, "192.0.2.1", 7204)?;
/// let req = ep.next_conn_req(None)?;          // blocks for a client
/// let conn = req.connect(&[])?;               // accept it
/// # drop(conn); Ok(()) }
/// ```
///
/// # Thread safety
/// `Ep` is `Send + Sync`; one thread at a time should take requests from it.
pub struct Ep {
    id: CmId,
    channel: EventChannel,
    peer: Peer,
}

impl std::fmt::Debug for Ep {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ep").field("fd", &self.channel.fd()).field("peer", &self.peer).finish()
    }
}

impl Ep {
    /// Listens on `addr`:`port` (`rpma_ep_listen`).
    ///
    /// # Errors
    /// [`Error::Inval`] for an empty address; [`Error::Provider`] with the
    /// errno of the failing step (`rdma_getaddrinfo`, `rdma_bind_addr`:
    /// `EADDRINUSE` when the port is taken, `rdma_listen`).
    pub fn listen(peer: &Peer, addr: &str, port: u16) -> Result<Ep> {
        if addr.is_empty() || addr.contains('\0') {
            return Err(Error::inval(format!("address {addr:?} is empty or contains a NUL byte")));
        }
        let channel = EventChannel::new().map_err(|e| Error::provider_raw("rdma_create_event_channel", e))?;
        let mut id = CmId::new(Some(&channel)).map_err(|e| Error::provider_raw("rdma_create_id", e))?;
        let ai = AddrInfo::new(addr, Some(&port.to_string()), true)
            .map_err(|e| Error::provider_raw(format!("rdma_getaddrinfo({addr}:{port})"), e))?;
        id.bind_addr(&ai).map_err(|e| Error::provider_raw(format!("rdma_bind_addr({addr}:{port})"), e))?;
        id.listen(0).map_err(|e| Error::provider_raw(format!("rdma_listen({addr}:{port})"), e))?;
        Ok(Ep { id, channel, peer: peer.clone() })
    }

    /// The event channel's fd (`rpma_ep_get_fd`); make it non-blocking and
    /// poll it to take requests asynchronously.
    pub fn fd(&self) -> RawFd {
        self.channel.fd()
    }

    /// The next incoming connection request (`rpma_ep_next_conn_req`), with
    /// `cfg` (or the defaults). Blocks unless the fd is non-blocking.
    ///
    /// # Errors
    /// [`Error::NoEvent`] when the fd is non-blocking and nothing is pending;
    /// [`Error::Inval`] when the event is not a connection request (it is
    /// consumed); [`Error::Provider`] when getting the event or setting up the
    /// request's queues fails.
    pub fn next_conn_req(&self, cfg: Option<&ConnCfg>) -> Result<ConnReq> {
        self.conn_req_within(cfg, Bound::Never)
    }

    /// [`next_conn_req`](Ep::next_conn_req), giving up after `timeout`
    /// (`Duration::MAX`: no limit), however many threads wait on the
    /// endpoint: its channel is read by one waiter at a time, each within
    /// its own bound.
    ///
    /// # Errors
    /// As [`next_conn_req`](Ep::next_conn_req); [`Error::NoEvent`] when
    /// `timeout` passes first.
    pub fn next_conn_req_timeout(&self, cfg: Option<&ConnCfg>, timeout: Duration) -> Result<ConnReq> {
        self.conn_req_within(cfg, Bound::after(timeout))
    }

    fn conn_req_within(&self, cfg: Option<&ConnCfg>, bound: Bound) -> Result<ConnReq> {
        self.conn_req_of(cfg, crate::conn::cm_event(self.channel.get_event(bound))?)
    }

    /// The next connection request for an async waiter: never sleeps;
    /// `Pending` while another thread reads the channel (`cx` is woken when
    /// it lets go), [`Error::NoEvent`] when none is there now.
    #[cfg(feature = "tokio")]
    pub(crate) fn poll_conn_req(
        &self,
        cfg: Option<&ConnCfg>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<ConnReq>> {
        self.channel.poll_get_event(cx).map(|got| self.conn_req_of(cfg, crate::conn::cm_event(got)?))
    }

    fn conn_req_of(&self, cfg: Option<&ConnCfg>, ev: rpma_sys::cm::CmEvent) -> Result<ConnReq> {
        match ev.new_id {
            Some(id) if ev.kind == event::CONNECT_REQUEST => {
                let default = ConnCfg::default();
                ConnReq::from_request(&self.peer, id, cfg.unwrap_or(&default), ev.private_data)
            }
            _ => Err(Error::inval(format!(
                "the endpoint got {} instead of a connection request",
                rpma_sys::cm::event_str(ev.kind)
            ))),
        }
    }

    /// Stops listening (`rpma_ep_shutdown`); dropping the endpoint does the same.
    pub fn shutdown(self) {
        drop(self.id);
    }
}

/// The event channel's fd, as [`Ep::fd`]: readable when a connection
/// request is pending.
impl std::os::fd::AsFd for Ep {
    fn as_fd(&self) -> std::os::fd::BorrowedFd<'_> {
        self.channel.as_fd()
    }
}

impl std::os::fd::AsRawFd for Ep {
    fn as_raw_fd(&self) -> std::os::fd::RawFd {
        std::os::fd::AsRawFd::as_raw_fd(&std::os::fd::AsFd::as_fd(self))
    }
}
