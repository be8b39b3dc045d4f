//! Connection request: a connection being set up, on either side.

use crate::conn::{Conn, ConnParts, NativeOps, QpLimits};
use crate::conn_cfg::ConnCfg;
use crate::cq::{ConnCq, Cq, Trackers};
use crate::error::{Arg, Error, Misuse, Named, Result};
use crate::inflight::{RecvTracker, SendTracker};
use crate::logging::{rpma_log, LogLevel};
use crate::memory::RegMemory;
use crate::mr::{MrLocal, Usage};
#[allow(unused_imports)] // the sealed trait's method
use crate::ops::sealed::Receive;
use crate::ops::{Recv, RecvOperation};
use crate::peer::{Capabilities, Peer};
use rpma_sys::cm::{AddrInfo, CmId, EventChannel};
use rpma_sys::cq::CompChannel;
use rpma_sys::qp::{QpInit, SendOps};
use std::sync::Arc;

/// Largest private data `rdma_connect` carries over IB/RoCE (IB CM REQ: 92
/// bytes minus the 36-byte RDMA CM header), checked before connecting.
pub const MAX_CONNECT_PRIVATE_DATA: usize = 56;
/// Largest private data `rdma_accept` carries over IB/RoCE (IB CM REP).
pub const MAX_ACCEPT_PRIVATE_DATA: usize = 196;

/// A connection request (librpma's `rpma_conn_req`): made by
/// [`ConnReq::new`] on the active side, or taken from an [`Ep`](crate::Ep)
/// on the passive side. [`connect`](ConnReq::connect) turns it into a
/// [`Conn`]; dropping an incoming request rejects it.
///
/// ```no_run
/// use rpma::{ConnEvent, ConnReq};
/// # #[allow(dead_code)]
/// # fn f(peer: &rpma::Peer) -> rpma::Result<()> {
/// let conn = ConnReq::new(peer, "192.0.2.1", 7204, None)?.connect(b"hello")?;
/// assert_eq!(conn.next_event_timeout(std::time::Duration::from_secs(5))?, ConnEvent::Established);
/// # Ok(()) }
/// ```
pub struct ConnReq {
    parts: Option<ConnParts>,
    incoming: Vec<u8>,
}

impl std::fmt::Debug for ConnReq {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConnReq").field("passive", &self.is_incoming()).field("private_data", &self.incoming).finish()
    }
}

impl ConnReq {
    /// Starts a connection to `addr`:`port` (`rpma_conn_req_new`): resolves
    /// the address and the route (each within `cfg`'s timeout) and creates
    /// the queues. Receives can be posted before connecting.
    ///
    /// # Errors
    /// [`Error::Inval`] for an empty address; [`Error::Provider`] with the
    /// errno of the failing step (`rdma_resolve_addr`: `ETIMEDOUT`,
    /// `EADDRNOTAVAIL`, `ENODEV`...; `rdma_resolve_route`; CQ or QP creation);
    /// when no device reaches `addr` (a loopback address, say), with
    /// [`Detail::NoDevice`](crate::error::Detail::NoDevice) and a message
    /// naming the addresses devices have.
    pub fn new(peer: &Peer, addr: &str, port: u16, cfg: Option<&ConnCfg>) -> Result<ConnReq> {
        if addr.is_empty() || addr.contains('\0') {
            return Err(Error::inval(format!("address {addr:?} is empty or contains a NUL byte")));
        }
        let default = ConnCfg::default();
        let cfg = cfg.unwrap_or(&default);
        let ai = AddrInfo::new(addr, Some(&port.to_string()), false)
            .map_err(|e| crate::device::addr_failed(format!("rdma_getaddrinfo({addr}:{port})"), addr, e, false))?;
        let mut id = CmId::new(None).map_err(|e| Error::provider_raw("rdma_create_id", e))?;
        let ms = cfg.timeout_ms();
        id.resolve_addr(&ai, ms).map_err(|e| {
            crate::device::addr_failed(format!("rdma_resolve_addr({addr}:{port}, {ms} ms)"), addr, e, false)
        })?;
        id.resolve_route(ms).map_err(|e| {
            crate::device::addr_failed(format!("rdma_resolve_route({addr}:{port}, {ms} ms)"), addr, e, false)
        })?;
        Ok(ConnReq { parts: Some(setup(peer, id, cfg)?), incoming: Vec::new() })
    }

    pub(crate) fn from_request(peer: &Peer, id: CmId, cfg: &ConnCfg, private_data: Vec<u8>) -> Result<ConnReq> {
        // On failure `id` was dropped inside setup: the request is destroyed.
        Ok(ConnReq { parts: Some(setup(peer, id, cfg)?), incoming: private_data })
    }

    fn is_incoming(&self) -> bool {
        self.parts.as_ref().is_some_and(|p| p.id.is_passive())
    }

    /// The private data of an incoming request (`rpma_conn_req_get_private_data`);
    /// empty on the active side. Over IB/RoCE the CM pads it with zeros to
    /// 56 bytes: carry explicit lengths inside it.
    pub fn private_data(&self) -> &[u8] {
        &self.incoming
    }

    /// Posts a receive before the connection is up (`rpma_conn_req_recv`);
    /// see [`Conn::recv`].
    ///
    /// # Errors
    /// As [`Conn::recv`].
    pub fn recv<M: RegMemory + Send + Sync + 'static>(
        &self,
        dst: &MrLocal<M>,
        offset: usize,
        len: usize,
        op_context: u64,
    ) -> Result<()> {
        self.post(Recv::new(dst, offset, len).op_context(op_context))
    }

    /// Posts a receive ([`Recv`] or [`RecvSg`](crate::ops::RecvSg)) before
    /// the connection is up (not in librpma), as [`Conn::post`] does once
    /// it is.
    ///
    /// # Errors
    /// The receive's checks, as for [`Conn::post`]; [`Error::Inval`] when
    /// the request was already consumed or the connection receives through
    /// an SRQ; [`Error::Provider`] when posting fails.
    pub fn post<O: RecvOperation>(&self, op: O) -> Result<()> {
        let Some(p) = &self.parts else {
            return Err(Error::inval("the connection request was already consumed"));
        };
        op.post_checked(&p.peer, (p.limits.max_recv_sge, "the connection's max_recv_sge"), |ctx, sgl, hold| {
            p.post_recv(crate::CompletionOp::Recv, ctx, sgl, hold)
        })
    }

    /// Connects (active side) or accepts (passive side), sending
    /// `private_data` (may be empty), and returns the connection
    /// (`rpma_conn_req_connect`). The request is consumed either way; wait for
    /// [`ConnEvent::Established`](crate::ConnEvent::Established) with
    /// [`Conn::next_event`].
    ///
    /// # Errors
    /// [`Error::Inval`] when `private_data` is longer than
    /// [`MAX_CONNECT_PRIVATE_DATA`] (active) or [`MAX_ACCEPT_PRIVATE_DATA`]
    /// (passive); [`Error::Provider`] when `rdma_connect` / `rdma_accept`
    /// fails (an incoming request is then rejected).
    pub fn connect(mut self, private_data: &[u8]) -> Result<Conn> {
        let Some(mut parts) = self.parts.take() else {
            return Err(Error::inval("the connection request was already consumed"));
        };
        let passive = parts.id.is_passive();
        let (limit, verb) =
            if passive { (MAX_ACCEPT_PRIVATE_DATA, "rdma_accept") } else { (MAX_CONNECT_PRIVATE_DATA, "rdma_connect") };
        let fail = |mut parts: ConnParts, e: Error| {
            if parts.id.is_passive() {
                let _ = parts.id.reject(&[]);
            }
            drop(parts);
            Err(e)
        };
        if private_data.len() > limit {
            let e = Error::too_long(
                Arg::PrivateData,
                private_data.len() as u64,
                limit as u64,
                format!(
                    "private data is {} bytes; {verb} carries at most {limit} bytes over IB/RoCE",
                    private_data.len()
                ),
            );
            return fail(parts, e);
        }
        let channel = match EventChannel::new() {
            Ok(c) => c,
            Err(e) => return fail(parts, Error::provider_raw("rdma_create_event_channel", e)),
        };
        if let Err(e) = parts.id.migrate(&channel) {
            return fail(parts, Error::provider_raw("rdma_migrate_id", e));
        }
        let r = if passive { parts.id.accept(private_data) } else { parts.id.connect(private_data) };
        if let Err(e) = r {
            return fail(parts, Error::provider_raw(verb, e));
        }
        rpma_log!(LogLevel::Debug, "{verb} with {} bytes of private data", private_data.len());
        Ok(Conn::new(parts, channel, std::mem::take(&mut self.incoming)))
    }
}

impl Drop for ConnReq {
    fn drop(&mut self) {
        if let Some(mut p) = self.parts.take() {
            if p.id.is_passive() {
                if let Err(e) = p.id.reject(&[]) {
                    rpma_log!(LogLevel::Warning, "rdma_reject of a dropped request: {e}");
                }
            }
        }
    }
}

/// Creates the CQs and the QP of a connection on `id` (librpma's
/// `rpma_conn_req_new_from_id`).
fn setup(peer: &Peer, mut id: CmId, cfg: &ConnCfg) -> Result<ConnParts> {
    if !id.is_on(&peer.context().0) {
        return Err(Error::inval(format!(
            "the address is not on the peer's device {}; get the peer's context for this address",
            peer.device_name()
        )));
    }
    let srq = cfg.srq().cloned();
    if let Some(s) = &srq {
        if !s.peer().same_pd(peer) {
            return Err(Error::foreign(
                Arg::Srq,
                "the SRQ was created on another peer (protection domain) than the connection's",
            ));
        }
    }
    if cfg.compl_channel() && srq.as_ref().is_some_and(|s| s.rcq().is_some()) {
        return Err(Error::misuse(
            Misuse::SrqChannel,
            "a shared completion channel cannot be combined with an SRQ that has its own receive CQ",
        ));
    }
    if let Some(scq) = cfg.shared_cq() {
        if !scq.peer().same_pd(peer) {
            return Err(Error::foreign(
                Arg::SharedCq,
                "the shared CQ was created on another peer than the connection's",
            ));
        }
        if cfg.rcq_size() > 0 || cfg.compl_channel() {
            return Err(Error::misuse(
                Misuse::SharedCqSettings,
                "a shared CQ takes the connection's receives too: set rcq_size 0 and no shared completion channel",
            ));
        }
    }
    let caps = peer.capabilities();
    let check = |arg, text, size, max, limit| Capabilities::check_size(&Named::new(arg, text), size, max, limit);
    check(Arg::SqSize, "ConnCfg sq_size", cfg.sq_size(), caps.max_qp_wr, "max_qp_wr")?;
    check(Arg::RqSize, "ConnCfg rq_size", cfg.rq_size(), caps.max_qp_wr, "max_qp_wr")?;
    check(Arg::CqSize, "ConnCfg cq_size", cfg.cq_size(), caps.max_cqe, "max_cqe")?;
    check(Arg::RcqSize, "ConnCfg rcq_size", cfg.rcq_size(), caps.max_cqe, "max_cqe")?;
    check(Arg::MaxSendSge, "ConnCfg max_send_sge", cfg.max_send_sge(), caps.max_sge, "max_sge")?;
    check(Arg::MaxRecvSge, "ConnCfg max_recv_sge", cfg.max_recv_sge(), caps.max_sge, "max_sge")?;
    let ctx = peer.context();
    let shared = if cfg.compl_channel() {
        Some(CompChannel::new(&ctx.0).map_err(|e| Error::provider_raw("ibv_create_comp_channel", e))?)
    } else {
        None
    };
    let send = Arc::new(SendTracker::new(cfg.sq_size())?);
    let recv = Arc::new(RecvTracker::new(false, cfg.rq_size())?);
    let srq_recv = srq.as_ref().map(|s| s.tracker().clone());
    let cq = match cfg.shared_cq() {
        Some(scq) => ConnCq::Shared(scq.clone()),
        None => ConnCq::Own(Cq::new(
            peer,
            cfg.cq_size(),
            shared.as_ref(),
            Some(send.clone()),
            Some(recv.clone()),
            srq_recv.clone(),
        )?),
    };
    let rcq = if cfg.rcq_size() > 0 && srq.as_ref().is_none_or(|s| s.rcq().is_none()) {
        Some(Cq::new(peer, cfg.rcq_size(), shared.as_ref(), None, Some(recv.clone()), srq_recv.clone())?)
    } else {
        None
    };
    let ops = if cfg.native_ops() {
        SendOps { atomic_write: caps.native_atomic_write, flush: caps.native_flush }.qp_flags()
    } else {
        0
    };
    let recv_cq = match (srq.as_ref().and_then(|s| s.rcq()), &rcq) {
        (Some(c), _) => c.sys(),
        (None, Some(c)) => c.sys(),
        (None, None) => cq.sys(),
    };
    let init = QpInit {
        send_cq: cq.sys(),
        recv_cq,
        srq: srq.as_ref().map(|s| s.sys()).transpose()?,
        max_send_wr: cfg.sq_size(),
        max_recv_wr: cfg.rq_size(),
        max_send_sge: cfg.max_send_sge(),
        max_recv_sge: cfg.max_recv_sge(),
        max_inline_data: cfg.max_inline_data(),
        send_ops_flags: ops,
    };
    let created = match id.create_qp(peer.pd(), &init) {
        // The peer's probe accepted these ops; should the library refuse
        // them here all the same, connect with the plain interface: the
        // data path then emulates (its post path checks the QP, not the
        // peer).
        Err(e) if ops != 0 && matches!(e.raw_os_error(), Some(libc::EOPNOTSUPP) | Some(libc::EINVAL)) => {
            rpma_log!(
                LogLevel::Warning,
                "rdma_create_qp_ex with native send ops {ops:#x} failed ({e}); using emulated atomic write and flush"
            );
            id.create_qp(peer.pd(), &QpInit { send_ops_flags: 0, ..init })
        }
        r => r,
    };
    created.map_err(|e| {
        Error::provider_raw(
            format!(
                "rdma_create_qp_ex(sq {}, rq {}, max_send_sge {}, max_recv_sge {}, max_inline_data {})",
                cfg.sq_size(),
                cfg.rq_size(),
                cfg.max_send_sge(),
                cfg.max_recv_sge(),
                cfg.max_inline_data()
            ),
            e,
        )
    })?;
    let granted = match id.qp().map(|q| q.query_caps()) {
        Some(Ok(c)) => Some(c),
        Some(Err(e)) => {
            rpma_log!(LogLevel::Warning, "ibv_query_qp: {e}; assuming the requested SGE and inline limits");
            None
        }
        None => None,
    };
    let limits = QpLimits::new(granted, cfg.max_send_sge(), cfg.max_recv_sge(), cfg.max_inline_data());
    let native = NativeOps::of(id.qp());
    rpma_log!(LogLevel::Debug, "QP limits {limits:?}, native {native:?}");
    let flush_mr = MrLocal::reg(peer, crate::AlignedBuf::new(8)?, Usage::READ_DST)?;
    if let ConnCq::Shared(scq) = &cq {
        // Last, so that a failure before leaves no route behind; on
        // failure here the CM ID's drop destroys the QP.
        let qp_num = id.qp().map_or(0, |q| q.qp_num());
        // Receives land here unless a receive CQ takes them; an SRQ's are
        // reserved once for all its connections on this CQ (`srq_entries`).
        // Reserved as the provider granted the queues, which may hold more
        // than asked for (rxe rounds them up): every request they can hold
        // can complete here, so the CQ cannot overflow.
        let Some(caps) = granted else {
            return Err(Error::NoSupp(
                "a connection on a SharedCq needs its QP's granted queue sizes (ibv_query_qp failed, see the log)"
                    .into(),
            ));
        };
        let lands_here = cfg.rcq_size() == 0;
        let sq = caps.max_send_wr.max(cfg.sq_size());
        let (rq, srq_entries) = match &srq {
            None => (if lands_here { caps.max_recv_wr.max(cfg.rq_size()) } else { 0 }, 0),
            Some(s) if lands_here && s.rcq().is_none() => (0, u64::from(s.granted_wr()?)),
            Some(_) => (0, 0),
        };
        let entries = u64::from(sq) + u64::from(rq);
        scq.routes()
            .add(qp_num, Trackers { send: send.clone(), recv: recv.clone(), srq_recv, entries, srq_entries })?;
    }
    Ok(ConnParts {
        rcq,
        cq,
        id,
        shared,
        srq,
        send,
        recv,
        flush_mr,
        peer: peer.clone(),
        closed: Default::default(),
        unheld_recorded: Default::default(),
        min_rnr_timer: cfg.min_rnr_timer(),
        limits,
        native,
        ends: Default::default(),
    })
}
