//! Connection: events, private data, completions and the data path.

use crate::cq::Cq;
use crate::error::{Error, Result};
use crate::inflight::{untracked_wr_id, Hold, OpKind, RecvTracker, SendOpRec, SendTracker, UNTRACKED_CTX_MAX};
use crate::log::{rpma_log, LogLevel};
use crate::memory::{AlignedBuf, RegMemory};
use crate::mr::{Access, MrLocal, MrRemote, Usage};
use crate::mw::{Binding, Mw, MwAccess, MwType};
use crate::peer::Peer;
use crate::peer_cfg::PeerCfg;
use crate::srq::Srq;
use crate::utils::ConnEvent;
use bitflags::bitflags;
use rpma_sys::cm::{event, CmId, EventChannel};
use rpma_sys::cq::CompChannel;
use rpma_sys::wr::{SendOp, SendWr, Sge};
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

bitflags! {
    /// When an operation reports a completion (librpma's `RPMA_F_COMPLETION_*`).
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub struct Flags: u32 {
        /// Only when it fails. Its send-queue slot (and the region it uses)
        /// is released when a later signaled operation completes.
        const COMPLETION_ON_ERROR = 1;
        /// Always (`IBV_SEND_SIGNALED`).
        const COMPLETION_ALWAYS = 3;
        /// Fence (`IBV_SEND_FENCE`): the operation starts only after earlier
        /// RDMA reads and atomics on this connection completed (rpma
        /// extension; combine with a completion flag).
        const FENCE = 1 << 2;
    }
}

/// The kind of flush (librpma's `enum rpma_flush_type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FlushType {
    /// The data is visible to the remote CPU (global visibility).
    Visibility,
    /// The data is persistent: needs the remote peer's
    /// `direct_write_to_pmem` ([`Conn::apply_remote_peer_cfg`]) and a region
    /// registered with [`Usage::FLUSH_TYPE_PERSISTENT`].
    Persistent,
}

/// Most completions reaped from one CQ when a connection is dropped.
const DRAIN_MAX: usize = 1 << 16;

/// librpma's `RPMA_ATOMIC_WRITE_ALIGNMENT`.
pub const ATOMIC_WRITE_ALIGNMENT: u64 = 8;

#[inline]
pub(crate) fn check_len(what: &str, len: usize) -> Result<u32> {
    u32::try_from(len).map_err(|_| too_long(what, len))
}

#[cold]
#[inline(never)]
fn too_long(what: &str, len: usize) -> Error {
    Error::inval(format!("{what}: length {len} exceeds 4 GiB - 1, the largest a single work request carries"))
}

#[inline]
pub(crate) fn check_local<M: RegMemory>(mr: &MrLocal<M>, need: Usage, what: &str, peer: &Peer) -> Result<()> {
    if !mr.usage().contains(need) {
        return Err(bad_usage(what, "the region", mr.usage(), need));
    }
    if !mr.peer().same_pd(peer) {
        return Err(other_peer(what));
    }
    Ok(())
}

#[cold]
#[inline(never)]
fn bad_usage(what: &str, which: &str, has: Usage, need: Usage) -> Error {
    Error::inval(format!("{what}: {which} was registered for {has:?}, not {need:?}"))
}

#[inline]
fn untracked_id(kind: OpKind, op_context: u64) -> Result<u64> {
    if op_context > UNTRACKED_CTX_MAX {
        return Err(ctx_too_big(op_context));
    }
    Ok(untracked_wr_id(kind, op_context))
}

#[cold]
#[inline(never)]
fn ctx_too_big(op_context: u64) -> Error {
    Error::inval(format!(
        "op_context {op_context:#x} of an unchecked operation exceeds {UNTRACKED_CTX_MAX:#x} (56 bits): \
         the fast path carries it in the work request ID"
    ))
}

#[cold]
#[inline(never)]
fn other_peer(what: &str) -> Error {
    Error::inval(format!("{what}: the region is registered on another peer (protection domain)"))
}

#[inline]
fn check_remote(mr: &MrRemote, need: Usage, what: &str) -> Result<()> {
    if !mr.usage().contains(need) {
        return Err(bad_usage(what, "the remote region", mr.usage(), need));
    }
    Ok(())
}

#[inline]
fn signaled(flags: Flags) -> Result<bool> {
    if !flags.intersects(Flags::COMPLETION_ON_ERROR) || !Flags::all().contains(flags) {
        return Err(bad_flags(flags));
    }
    Ok(flags.bits() & 2 != 0)
}

#[cold]
#[inline(never)]
fn bad_flags(flags: Flags) -> Error {
    if flags.is_empty() {
        Error::inval("flags are empty: pass Flags::COMPLETION_ON_ERROR or Flags::COMPLETION_ALWAYS")
    } else if !flags.intersects(Flags::COMPLETION_ON_ERROR) {
        Error::inval(
            "flags have no completion mode (FENCE alone is not enough): add Flags::COMPLETION_ON_ERROR or Flags::COMPLETION_ALWAYS",
        )
    } else {
        Error::inval(format!("flags {:#x} have undefined bits", flags.bits()))
    }
}

/// The local side of an operation: range, required usage, and the name
/// used in error messages.
struct Local<'a, M: RegMemory> {
    mr: &'a MrLocal<M>,
    offset: usize,
    need: Usage,
    what: &'static str,
}

/// The remote side of an RDMA operation.
struct Remote<'a> {
    mr: &'a MrRemote,
    offset: u64,
    need: Usage,
    what: &'static str,
}

/// Everything a connection owns. Released in librpma's order (`Drop`
/// below, then field order): QP, RCQ, CQ, CM ID, shared completion channel;
/// the trackers, and the regions they keep alive, only after the QP is gone
/// and the device can no longer touch them.
pub(crate) struct ConnParts {
    pub(crate) rcq: Option<Cq>,
    pub(crate) cq: Cq,
    pub(crate) id: CmId,
    pub(crate) shared: Option<CompChannel>,
    pub(crate) srq: Option<Srq>,
    pub(crate) send: Arc<SendTracker>,
    pub(crate) recv: Arc<RecvTracker>,
    pub(crate) flush_mr: MrLocal<AlignedBuf>,
    pub(crate) peer: Peer,
    /// Set by `disconnect` and by a closing event: posting is refused then.
    pub(crate) closed: AtomicBool,
    /// Applied to the QP when the connection is established.
    pub(crate) min_rnr_timer: u8,
}

impl Drop for ConnParts {
    fn drop(&mut self) {
        // librpma's order: the QP first, then (by field order) the CQs and
        // the CM ID. Like librpma, no disconnect here: measured on rxe, an
        // implicit disconnect makes the passive side of a pair dropped at
        // once wait ~50 s in the CM's timewait; tear down with `disconnect`.
        //
        // Completions still queued are reaped first, before and after the
        // QP goes, so the entries they name (receives taken from a shared
        // receive queue among them) are retired, not kept until the SRQ goes.
        self.drain_cqs();
        match self.id.destroy_qp() {
            Ok(()) => self.drain_cqs(),
            Err(e) => {
                // The device may still process the posted work requests:
                // keep what they use (the trackers' holds) for ever.
                rpma_log!(
                    LogLevel::Error,
                    "ibv_destroy_qp: {e}; leaking the memory of {} posted send(s) and {} receive(s)",
                    self.send.pending(),
                    self.recv.pending()
                );
                std::mem::forget(self.send.clone());
                std::mem::forget(self.recv.clone());
                std::mem::forget(self.flush_mr.hold()); // APM flush reads land here
            }
        }
    }
}

impl ConnParts {
    /// Polls the connection's CQs empty (bounded), retiring what each
    /// completion names; the completions are dropped.
    fn drain_cqs(&self) {
        for cq in std::iter::once(&self.cq).chain(self.rcq.as_ref()) {
            for _ in 0..DRAIN_MAX {
                if cq.get_completion().is_err() {
                    break;
                }
            }
        }
    }

    fn qp(&self) -> Result<&rpma_sys::qp::Qp> {
        if self.closed.load(Ordering::Relaxed) {
            return Err(Error::inval(
                "the connection is closed (disconnected, lost or rejected): nothing can be posted",
            ));
        }
        self.id.qp().ok_or_else(|| Error::Unknown("the connection has no queue pair".into()))
    }

    pub(crate) fn recv<M: RegMemory + Send + Sync + 'static>(
        &self,
        dst: &MrLocal<M>,
        offset: usize,
        len: usize,
        op_context: u64,
    ) -> Result<()> {
        self.recv_inner(dst, offset, len, op_context, Some(dst.hold()))
    }

    /// A receive; with `hold` `None` (the unsafe path) the usage is not checked.
    pub(crate) fn recv_inner<M: RegMemory>(
        &self,
        dst: &MrLocal<M>,
        offset: usize,
        len: usize,
        op_context: u64,
        hold: Option<Hold>,
    ) -> Result<()> {
        let len32 = check_len("recv", len)?;
        dst.check_range("recv: dst", offset, len)?;
        if hold.is_some() {
            check_local(dst, Usage::RECV, "recv: dst", &self.peer)?;
        }
        if self.srq.is_some() {
            return Err(Error::inval("recv: the connection receives through its SRQ; post with Srq::recv"));
        }
        let qp = self.qp()?;
        let sge = (len > 0).then(|| dst.sge(offset, len32));
        if hold.is_none() {
            // The unchecked fast path: nothing recorded.
            let wr_id = untracked_id(OpKind::Recv, op_context)?;
            // SAFETY: the caller of `recv_unchecked` keeps the region alive.
            #[allow(unsafe_code)]
            return unsafe { qp.post_recv(wr_id, sge) }.map_err(|e| Error::provider_raw("ibv_post_recv", e));
        }
        self.recv.post_with(op_context, hold, |wr_id| {
            // SAFETY: the region is held by the tracker entry until the
            // receive completes or the QP is destroyed.
            #[allow(unsafe_code)]
            unsafe {
                qp.post_recv(wr_id, sge)
            }
        })
    }

    /// Posts without recording anything (the unchecked fast paths): the
    /// wr_id carries the kind and `ctx`.
    #[inline]
    fn post_untracked(&self, kind: OpKind, ctx: u64, wr: SendWr) -> Result<()> {
        let wr_id = untracked_id(kind, ctx)?;
        let qp = self.qp()?;
        // SAFETY: the caller of the `*_unchecked` operation keeps the local
        // memory in `wr` alive until the operation completes.
        #[allow(unsafe_code)]
        unsafe { qp.post_send(&SendWr { wr_id, ..wr }) }.map_err(|e| Error::provider_raw("ibv_post_send", e))
    }

    fn post(&self, kind: OpKind, ctx: u64, hold: Option<Hold>, wr: SendWr) -> Result<()> {
        let qp = self.qp()?;
        let rec = SendOpRec { ctx, kind, signaled: wr.signaled, hold, confirm: None };
        self.send.post_with(rec, |wr_id| {
            // SAFETY: any local memory in `wr` belongs to a region held by
            // the tracker entry (or to the connection's own flush region, or
            // is inline and copied during the call) until the operation
            // completes or the QP is destroyed.
            #[allow(unsafe_code)]
            unsafe {
                qp.post_send(&SendWr { wr_id, ..wr })
            }
        })
    }
}

/// An RDMA connection (librpma's `rpma_conn`).
///
/// Operations post work requests and return at once; their completions
/// arrive on [`cq`](Conn::cq) (and receives on [`rcq`](Conn::rcq) when
/// configured). Every local region an operation uses is kept alive until the
/// operation completes, so dropping or deregistering it early is safe:
/// [`MrLocal::dereg`] reports [`Error::Again`] instead of freeing it.
///
/// ```no_run
/// use rpma::{AlignedBuf, CommonData, Flags, MrLocal, Usage};
/// # #[allow(dead_code)]
/// # fn f(conn: &rpma::Conn) -> rpma::Result<()> {
/// let remote = CommonData::decode(conn.private_data())?.mr;
/// let mut src = MrLocal::reg(conn.peer(), AlignedBuf::new(4096)?, Usage::WRITE_SRC)?;
/// src.write_at(0, b"log record")?;
/// conn.write(&remote, 0, &src, 0, 10, Flags::COMPLETION_ON_ERROR, 1)?;
/// conn.flush(&remote, 0, 10, rpma::FlushType::Visibility, Flags::COMPLETION_ALWAYS, 2)?;
/// let wc = conn.cq().next_completion(std::time::Duration::from_secs(5))?;
/// assert_eq!(wc.op_context, 2);
/// # Ok(()) }
/// ```
///
/// # Teardown
/// Client: [`disconnect`](Conn::disconnect), wait for
/// [`ConnEvent::Closed`], drop. Server: wait for `Closed`, `disconnect`, drop.
/// Over IB/RoCE the side that disconnects first sees `Closed` only after the
/// other side has called `disconnect` too (the CM's DREP answers its DREQ).
/// Follow this order: dropping connections that are still up can make the
/// kernel's CM wait out its timeouts in `rdma_destroy_id` (measured on rxe:
/// up to about 50 s, depending on which side goes first).
///
/// # Thread safety
/// `Conn` is `Send + Sync`: the data path may be used from several threads;
/// posting is serialised per send queue.
pub struct Conn {
    parts: ConnParts,
    channel: EventChannel,
    private_data: OnceLock<Vec<u8>>,
    direct_write_to_pmem: AtomicBool,
}

impl std::fmt::Debug for Conn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Conn")
            .field("qp_num", &self.qp_num())
            .field("pending_sends", &self.parts.send.pending())
            .field("pending_recvs", &self.parts.recv.pending())
            .finish()
    }
}

impl Conn {
    pub(crate) fn new(parts: ConnParts, channel: EventChannel, incoming: Vec<u8>) -> Conn {
        let private_data = OnceLock::new();
        if parts.id.is_passive() {
            let _ = private_data.set(incoming);
        }
        Conn { parts, channel, private_data, direct_write_to_pmem: AtomicBool::new(false) }
    }

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
        if !rpma_sys::poll_readable(self.event_fd(), Some(timeout)).map_err(|e| Error::provider_raw("poll", e))? {
            return Err(Error::NoEvent);
        }
        self.next_event()
    }

    /// The private data the other side sent (`rpma_conn_get_private_data`):
    /// with its connection request (passive side) or its accept (active side,
    /// available once [`ConnEvent::Established`] was seen). Over IB/RoCE the
    /// CM pads it with zeros, so it can be longer than what was sent.
    pub fn private_data(&self) -> &[u8] {
        self.private_data.get().map(Vec::as_slice).unwrap_or(&[])
    }

    /// Applies the remote peer's configuration (`rpma_conn_apply_remote_peer_cfg`):
    /// whether it supports direct write to persistent memory.
    pub fn apply_remote_peer_cfg(&self, cfg: &PeerCfg) {
        self.direct_write_to_pmem.store(cfg.direct_write_to_pmem(), Ordering::Relaxed);
    }

    /// The peer the connection was made on; register the regions it uses
    /// there.
    pub fn peer(&self) -> &Peer {
        &self.parts.peer
    }

    /// The QP number (`rpma_conn_get_qp_num`).
    pub fn qp_num(&self) -> u32 {
        self.parts.id.qp().map_or(0, |q| q.qp_num())
    }

    /// The transport's retry settings for this connection, as the connection
    /// manager set them on the QP (not in librpma): how long an unacknowledged
    /// operation is retried before it completes with
    /// [`WcStatus::RETRY_EXC_ERR`](crate::WcStatus::RETRY_EXC_ERR).
    ///
    /// # Errors
    /// [`Error::Inval`] when the connection has no QP; [`Error::Provider`]
    /// when `ibv_query_qp` fails.
    pub fn retry_budget(&self) -> Result<RetryBudget> {
        let qp = self.parts.id.qp().ok_or_else(|| Error::Inval("the connection has no QP".into()))?;
        let (ack_timeout, retry_cnt, rnr_retry, min_rnr_timer) =
            qp.retry().map_err(|e| Error::provider("ibv_query_qp", e))?;
        Ok(RetryBudget { ack_timeout, retry_cnt, rnr_retry, min_rnr_timer })
    }

    /// The main completion queue (`rpma_conn_get_cq`).
    pub fn cq(&self) -> &Cq {
        &self.parts.cq
    }

    /// The receive completion queue (`rpma_conn_get_rcq`): `None` when
    /// `rcq_size` is 0, or when the SRQ has its own (see [`Srq::rcq`]).
    pub fn rcq(&self) -> Option<&Cq> {
        self.parts.rcq.as_ref()
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

    /// Waits on the shared completion channel (`rpma_conn_wait`): returns the
    /// CQ with a completion event (re-armed) and whether it is the RCQ.
    ///
    /// # Errors
    /// [`Error::NotSharedChnl`] without a shared channel; [`Error::NoCompletion`]
    /// when nothing is pending on a non-blocking fd; [`Error::Unknown`] for
    /// an event of another CQ.
    pub fn wait(&self) -> Result<(&Cq, bool)> {
        let Some(ch) = &self.parts.shared else {
            return Err(Error::NotSharedChnl(
                "the connection was configured without a shared completion channel".into(),
            ));
        };
        let id = ch.get_event().map_err(|_| Error::NoCompletion)?;
        let (cq, is_rcq) = if id == self.parts.cq.sys().id() {
            (&self.parts.cq, false)
        } else if let Some(r) = self.parts.rcq.as_ref().filter(|r| r.sys().id() == id) {
            (r, true)
        } else {
            return Err(Error::Unknown("a completion event for a CQ of no connection".into()));
        };
        cq.rearm()?;
        Ok((cq, is_rcq))
    }

    /// [`wait`](Conn::wait), giving up after `timeout`.
    ///
    /// # Errors
    /// As [`wait`](Conn::wait); [`Error::NoCompletion`] when `timeout` passes.
    pub fn wait_timeout(&self, timeout: Duration) -> Result<(&Cq, bool)> {
        let fd = self.compl_fd()?;
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

    /// Reads `len` bytes at `src_offset` of the remote region into `dst` at
    /// `dst_offset` (`rpma_read`).
    ///
    /// # Errors
    /// [`Error::Inval`] when `flags` are empty, `len` exceeds 4 GiB - 1, a
    /// range exceeds its region (the message names which), `dst` lacks
    /// [`Usage::READ_DST`] or is on another peer, or `src` lacks
    /// [`Usage::READ_SRC`]; [`Error::Again`] when the send queue is full;
    /// [`Error::Provider`] when posting fails.
    #[allow(clippy::too_many_arguments)]
    pub fn read<M: RegMemory + Send + Sync + 'static>(
        &self,
        dst: &MrLocal<M>,
        dst_offset: usize,
        src: &MrRemote,
        src_offset: u64,
        len: usize,
        flags: Flags,
        op_context: u64,
    ) -> Result<()> {
        self.read_inner(dst, dst_offset, src, src_offset, len, flags, op_context, Some(dst.hold()))
    }

    /// [`read`](Conn::read) without keeping `dst` alive: the fast path for
    /// callers that track their buffers themselves (it also accepts borrowed
    /// memory, `MrLocal<&mut [u8]>`). Only the local range is checked: the
    /// usages and the remote range are left to the devices, which refuse
    /// what the registrations do not allow.
    ///
    /// Nothing is recorded, as in librpma: `op_context` travels in the work
    /// request ID and comes back in the completion. The operation is not
    /// counted in [`pending_sends`](Conn::pending_sends), so posting beyond
    /// the send queue's size fails with the provider's `ENOMEM`
    /// ([`Error::Provider`]) rather than [`Error::Again`]. Measured cost: see
    /// "Instructions per operation" in BENCHMARKS.md.
    ///
    /// ```
    /// # #[allow(dead_code)]
    /// fn fetch(conn: &rpma::Conn, dst: &rpma::MrLocal<rpma::AlignedBuf>, src: &rpma::MrRemote) -> rpma::Result<()> {
    ///     // SAFETY: `dst` is neither dropped nor touched until the completion is reaped below.
    ///     unsafe { conn.read_unchecked(dst, 0, src, 0, 8, rpma::Flags::COMPLETION_ALWAYS, 7)? };
    ///     let wc = conn.cq().next_completion(std::time::Duration::from_secs(1))?;
    ///     assert_eq!(wc.op_context, 7);
    ///     Ok(())
    /// }
    /// ```
    ///
    /// # Safety
    /// `dst` (its registration and memory) must not be dropped, deregistered
    /// or accessed until this operation's completion (or that of a later
    /// signaled operation on this connection) has been reaped, or the
    /// connection is dropped.
    ///
    /// # Errors
    /// As [`read`](Conn::read), and [`Error::Inval`] when `op_context`
    /// exceeds 56 bits.
    #[allow(clippy::too_many_arguments, unsafe_code)]
    pub unsafe fn read_unchecked<M: RegMemory>(
        &self,
        dst: &MrLocal<M>,
        dst_offset: usize,
        src: &MrRemote,
        src_offset: u64,
        len: usize,
        flags: Flags,
        op_context: u64,
    ) -> Result<()> {
        self.read_inner(dst, dst_offset, src, src_offset, len, flags, op_context, None)
    }

    #[allow(clippy::too_many_arguments)]
    fn read_inner<M: RegMemory>(
        &self,
        dst: &MrLocal<M>,
        dst_offset: usize,
        src: &MrRemote,
        src_offset: u64,
        len: usize,
        flags: Flags,
        op_context: u64,
        hold: Option<Hold>,
    ) -> Result<()> {
        let remote = Remote { mr: src, offset: src_offset, need: Usage::READ_SRC, what: "read: src" };
        let local = Local { mr: dst, offset: dst_offset, need: Usage::READ_DST, what: "read: dst" };
        self.post_one(OpKind::Read, SendOp::Read, local, Some(remote), len, flags, op_context, hold)
    }

    /// Writes `len` bytes of `src` at `src_offset` to the remote region at
    /// `dst_offset` (`rpma_write`).
    ///
    /// # Errors
    /// As [`read`](Conn::read), with `src` needing [`Usage::WRITE_SRC`] and
    /// `dst` [`Usage::WRITE_DST`].
    #[allow(clippy::too_many_arguments)]
    pub fn write<M: RegMemory + Send + Sync + 'static>(
        &self,
        dst: &MrRemote,
        dst_offset: u64,
        src: &MrLocal<M>,
        src_offset: usize,
        len: usize,
        flags: Flags,
        op_context: u64,
    ) -> Result<()> {
        self.write_imm(dst, dst_offset, src, src_offset, len, flags, None, op_context, Some(src.hold()))
    }

    /// [`write`](Conn::write) without keeping `src` alive, with only the
    /// local range checked and nothing recorded (see
    /// [`read_unchecked`](Conn::read_unchecked)).
    ///
    /// # Safety
    /// `src` must not be dropped, deregistered or written until this
    /// operation's completion (or that of a later signaled operation on this
    /// connection) has been reaped, or the connection is dropped.
    ///
    /// # Errors
    /// As [`write`](Conn::write), and [`Error::Inval`] when `op_context`
    /// exceeds 56 bits.
    #[allow(clippy::too_many_arguments, unsafe_code)]
    pub unsafe fn write_unchecked<M: RegMemory>(
        &self,
        dst: &MrRemote,
        dst_offset: u64,
        src: &MrLocal<M>,
        src_offset: usize,
        len: usize,
        flags: Flags,
        op_context: u64,
    ) -> Result<()> {
        self.write_imm(dst, dst_offset, src, src_offset, len, flags, None, op_context, None)
    }

    /// [`write`](Conn::write) with immediate data, which the other side gets
    /// in the completion of a posted receive, in host order
    /// (`rpma_write_with_imm`).
    ///
    /// # Errors
    /// As [`write`](Conn::write).
    #[allow(clippy::too_many_arguments)]
    pub fn write_with_imm<M: RegMemory + Send + Sync + 'static>(
        &self,
        dst: &MrRemote,
        dst_offset: u64,
        src: &MrLocal<M>,
        src_offset: usize,
        len: usize,
        flags: Flags,
        imm: u32,
        op_context: u64,
    ) -> Result<()> {
        self.write_imm(dst, dst_offset, src, src_offset, len, flags, Some(imm), op_context, Some(src.hold()))
    }

    #[allow(clippy::too_many_arguments)]
    fn write_imm<M: RegMemory>(
        &self,
        dst: &MrRemote,
        dst_offset: u64,
        src: &MrLocal<M>,
        src_offset: usize,
        len: usize,
        flags: Flags,
        imm: Option<u32>,
        op_context: u64,
        hold: Option<Hold>,
    ) -> Result<()> {
        let (kind, op) = match imm {
            Some(i) => (OpKind::WriteImm, SendOp::WriteImm(i)),
            None => (OpKind::Write, SendOp::Write),
        };
        let remote = Remote { mr: dst, offset: dst_offset, need: Usage::WRITE_DST, what: "write: dst" };
        let local = Local { mr: src, offset: src_offset, need: Usage::WRITE_SRC, what: "write: src" };
        self.post_one(kind, op, local, Some(remote), len, flags, op_context, hold)
    }

    /// Writes 8 bytes atomically at `dst_offset` (`rpma_atomic_write`):
    /// natively (`IBV_WR_ATOMIC_WRITE`) when the device supports it, else as
    /// an inline 8-byte RDMA WRITE fenced behind earlier reads (and so behind
    /// an APM flush), as librpma does. `value` is copied when posting.
    ///
    /// # Errors
    /// [`Error::Inval`] when `flags` are empty, `dst_offset` is not a
    /// multiple of 8, the 8 bytes exceed the region, or it lacks
    /// [`Usage::WRITE_DST`]; as [`write`](Conn::write) otherwise.
    pub fn atomic_write(
        &self,
        dst: &MrRemote,
        dst_offset: u64,
        value: [u8; 8],
        flags: Flags,
        op_context: u64,
    ) -> Result<()> {
        let signaled = signaled(flags)?;
        if !dst_offset.is_multiple_of(ATOMIC_WRITE_ALIGNMENT) {
            return Err(Error::inval(format!(
                "atomic_write: dst_offset {dst_offset} is not a multiple of {ATOMIC_WRITE_ALIGNMENT}"
            )));
        }
        dst.check_range("atomic_write: dst", dst_offset, 8)?;
        check_remote(dst, Usage::WRITE_DST, "atomic_write: dst")?;
        let qp = self.parts.qp()?;
        if let Some(mut ex) = qp.ex().filter(|ex| ex.has_atomic_write()) {
            let rec = SendOpRec { ctx: op_context, kind: OpKind::AtomicWrite, signaled, hold: None, confirm: None };
            return self.parts.send.post_with(rec, |wr_id| {
                ex.post_atomic_write(wr_id, signaled, dst.rkey(), dst.addr().wrapping_add(dst_offset), &value)
            });
        }
        let wr = SendWr {
            wr_id: 0,
            op: SendOp::Write,
            sge: Some(Sge { addr: value.as_ptr() as u64, length: 8, lkey: 0 }),
            remote_addr: dst.addr().wrapping_add(dst_offset),
            rkey: dst.rkey(),
            signaled,
            fence: true,
            inline: true,
        };
        self.parts.post(OpKind::AtomicWrite, op_context, None, wr)
    }

    /// Makes earlier writes to the remote region durable or visible
    /// (`rpma_flush`): natively (`IBV_WR_FLUSH`) when the device supports it,
    /// else (APM) as an 8-byte RDMA READ at `dst_offset`, which completes
    /// only after the earlier writes on this connection.
    ///
    /// # Errors
    /// * [`Error::Inval`]: `flags` empty; `dst_offset + len` exceeds the
    ///   region; for the APM read, fewer than 8 bytes at `dst_offset`.
    /// * [`Error::NoSupp`]: [`FlushType::Persistent`] without the remote
    ///   peer's `direct_write_to_pmem`, or a region not registered for the
    ///   requested flush type.
    /// * [`Error::Again`], [`Error::Provider`]: as [`write`](Conn::write).
    #[allow(clippy::too_many_arguments)]
    pub fn flush(
        &self,
        dst: &MrRemote,
        dst_offset: u64,
        len: u64,
        ty: FlushType,
        flags: Flags,
        op_context: u64,
    ) -> Result<()> {
        let signaled = signaled(flags)?;
        match ty {
            FlushType::Persistent if !self.direct_write_to_pmem.load(Ordering::Relaxed) => {
                return Err(Error::nosupp(
                    "flush(Persistent): the remote peer does not support direct write to persistent memory \
                     (apply its PeerCfg with Conn::apply_remote_peer_cfg)",
                ))
            }
            FlushType::Persistent if !dst.usage().contains(Usage::FLUSH_TYPE_PERSISTENT) => {
                return Err(Error::nosupp(
                    "flush(Persistent): the remote region was not registered with FLUSH_TYPE_PERSISTENT",
                ))
            }
            FlushType::Visibility if !dst.usage().contains(Usage::FLUSH_TYPE_VISIBILITY) => {
                return Err(Error::nosupp(
                    "flush(Visibility): the remote region was not registered with FLUSH_TYPE_VISIBILITY",
                ))
            }
            _ => {}
        }
        dst.check_range("flush: dst", dst_offset, len)?;
        let qp = self.parts.qp()?;
        if let Some(mut ex) = qp.ex().filter(|ex| ex.has_flush()) {
            let t = match ty {
                FlushType::Visibility => rpma_sys::qp::FLUSH_GLOBAL,
                FlushType::Persistent => rpma_sys::qp::FLUSH_PERSISTENT,
            };
            let len = usize::try_from(len).map_err(|_| Error::inval(format!("flush: length {len} exceeds usize")))?;
            let rec = SendOpRec { ctx: op_context, kind: OpKind::Flush, signaled, hold: None, confirm: None };
            return self.parts.send.post_with(rec, |wr_id| {
                ex.post_flush(wr_id, signaled, dst.rkey(), dst.addr().wrapping_add(dst_offset), len, t)
            });
        }
        dst.check_range("flush (APM reads 8 bytes at dst_offset)", dst_offset, 8)?;
        let wr = SendWr {
            wr_id: 0,
            op: SendOp::Read,
            sge: Some(self.parts.flush_mr.sge(0, 8)),
            remote_addr: dst.addr().wrapping_add(dst_offset),
            rkey: dst.rkey(),
            signaled,
            fence: flags.contains(Flags::FENCE),
            inline: false,
        };
        self.parts.post(OpKind::Flush, op_context, None, wr)
    }

    /// Sends `len` bytes of `src` at `offset` to a receive posted by the
    /// other side (`rpma_send`); `len` may be 0.
    ///
    /// # Errors
    /// As [`write`](Conn::write), with `src` needing [`Usage::SEND`].
    pub fn send<M: RegMemory + Send + Sync + 'static>(
        &self,
        src: &MrLocal<M>,
        offset: usize,
        len: usize,
        flags: Flags,
        op_context: u64,
    ) -> Result<()> {
        self.send_imm(src, offset, len, flags, None, op_context)
    }

    /// [`send`](Conn::send) with immediate data, delivered in host order
    /// (`rpma_send_with_imm`).
    ///
    /// # Errors
    /// As [`send`](Conn::send).
    pub fn send_with_imm<M: RegMemory + Send + Sync + 'static>(
        &self,
        src: &MrLocal<M>,
        offset: usize,
        len: usize,
        flags: Flags,
        imm: u32,
        op_context: u64,
    ) -> Result<()> {
        self.send_imm(src, offset, len, flags, Some(imm), op_context)
    }

    fn send_imm<M: RegMemory + Send + Sync + 'static>(
        &self,
        src: &MrLocal<M>,
        offset: usize,
        len: usize,
        flags: Flags,
        imm: Option<u32>,
        op_context: u64,
    ) -> Result<()> {
        let (kind, op) = match imm {
            Some(i) => (OpKind::SendImm, SendOp::SendImm(i)),
            None => (OpKind::Send, SendOp::Send),
        };
        let local = Local { mr: src, offset, need: Usage::SEND, what: "send: src" };
        self.post_one(kind, op, local, None, len, flags, op_context, Some(src.hold()))
    }

    /// Posts a receive of up to `len` bytes into `dst` at `offset`
    /// (`rpma_recv`); its completion always arrives (on the RCQ when there is
    /// one). Receives are not guaranteed to complete in posting order.
    ///
    /// # Errors
    /// [`Error::Inval`] when the range exceeds `dst`, `len` exceeds 4 GiB - 1,
    /// `dst` lacks [`Usage::RECV`] or is on another peer, or the connection
    /// uses an SRQ; [`Error::Provider`] when posting fails (`ENOMEM`: the
    /// receive queue is full).
    pub fn recv<M: RegMemory + Send + Sync + 'static>(
        &self,
        dst: &MrLocal<M>,
        offset: usize,
        len: usize,
        op_context: u64,
    ) -> Result<()> {
        self.parts.recv(dst, offset, len, op_context)
    }

    /// Binds `mw` over `len` bytes at `offset` of `mr` with `access`
    /// (`ibv_bind_mw` for type 1, a posted bind work request for type 2,
    /// which ties the window to this connection). The window is usable, and
    /// its [`descriptor`](Mw::descriptor) valid, once the bind's completion
    /// has been reaped (with [`Flags::COMPLETION_ON_ERROR`], after a later
    /// signaled operation's). The window keeps `mr` alive until it is
    /// invalidated or dropped.
    ///
    /// # Errors
    /// * [`Error::Inval`]: `flags` empty; the window is already bound; the
    ///   range exceeds `mr`; `mr` was not registered with
    ///   [`Usage::MW_BIND`]; remote write or atomic access over a region
    ///   without local write access (the seed's rule); zero-based addressing
    ///   on a type 1 window; window or region on another peer.
    /// * [`Error::NoSupp`]: the provider cannot bind type 1 windows.
    /// * [`Error::Again`], [`Error::Provider`]: as [`write`](Conn::write).
    #[allow(clippy::too_many_arguments)]
    pub fn bind_mw<M: RegMemory + Send + Sync + 'static>(
        &self,
        mw: &mut Mw,
        mr: &MrLocal<M>,
        offset: usize,
        len: usize,
        access: MwAccess,
        flags: Flags,
        op_context: u64,
    ) -> Result<()> {
        let signaled = signaled(flags)?;
        let fence = flags.contains(Flags::FENCE);
        if mw.is_bound() {
            return Err(Error::inval("bind_mw: the window is already bound; invalidate it first"));
        }
        mr.check_range("bind_mw: mr", offset, len)?;
        check_local(mr, Usage::MW_BIND, "bind_mw: mr", &self.parts.peer)?;
        if !mw.peer().same_pd(&self.parts.peer) {
            return Err(Error::inval("bind_mw: the window was allocated on another peer (protection domain)"));
        }
        if access.intersects(MwAccess::REMOTE_WRITE | MwAccess::REMOTE_ATOMIC)
            && !mr.access().contains(Access::LOCAL_WRITE)
        {
            return Err(Error::inval(format!(
                "bind_mw: remote write or atomic access needs local write access on the region, which has {:?}",
                mr.access()
            )));
        }
        if access.contains(MwAccess::ZERO_BASED) && mw.mw_type() == MwType::Type1 {
            return Err(Error::inval("bind_mw: zero-based addressing needs a type 2 window"));
        }
        let qp = self.parts.qp()?;
        let addr = mr.sys().device_addr() + offset as u64;
        let mut new_rkey = mw.rkey();
        let rec = SendOpRec { ctx: op_context, kind: OpKind::BindMw, signaled, hold: Some(mr.hold()), confirm: None };
        self.parts
            .send
            .post_with(rec, |wr_id| match mw.mw_type() {
                MwType::Type1 => {
                    new_rkey =
                        qp.bind_mw_type1(mw.sys(), mr.sys(), addr, len as u64, access.bits(), wr_id, signaled, fence)?;
                    Ok(())
                }
                MwType::Type2 => {
                    new_rkey = rpma_sys::wr::next_rkey(mw.rkey());
                    qp.post_bind_mw(
                        wr_id,
                        signaled,
                        fence,
                        mw.sys(),
                        new_rkey,
                        mr.sys(),
                        addr,
                        len as u64,
                        access.bits(),
                    )
                }
            })
            .map_err(|e| match e.errno() {
                Some(libc::EOPNOTSUPP) => Error::nosupp("bind_mw: the provider cannot bind type 1 memory windows"),
                _ => e,
            })?;
        // The window holds the region from the post on, whether or not the
        // bind succeeds on the device: only a confirmed invalidation or a
        // successful deallocation ends the hold.
        let mut st = mw.shared().lock();
        st.rkey = new_rkey;
        st.binding = Some(Binding::new(addr, len as u64, access, new_rkey, qp.qp_num(), mr.region_hold()));
        Ok(())
    }

    /// Revokes `mw`'s binding: a local invalidate (`IBV_WR_LOCAL_INV`) for a
    /// type 2 window, a zero-length bind for type 1. Once its completion has
    /// been reaped, remote access through the old rkey fails; if that
    /// completion is successful the window releases its region then (a
    /// failed one leaves the window bound, holding the region).
    ///
    /// # Errors
    /// [`Error::Inval`] when `flags` lack [`Flags::COMPLETION_ALWAYS`] (the
    /// release needs the invalidation's own completion), the window is not
    /// bound, an invalidation of it is already posted, a type 2 window was
    /// bound on another connection, or the connection is closed (the window
    /// stays bound in every case); [`Error::Again`], [`Error::Provider`]: as
    /// [`write`](Conn::write).
    pub fn invalidate_mw(&self, mw: &mut Mw, flags: Flags, op_context: u64) -> Result<()> {
        if !signaled(flags)? {
            return Err(Error::inval(
                "invalidate_mw: flags need Flags::COMPLETION_ALWAYS: the window releases its region only when \
                 the invalidation's own completion confirms it",
            ));
        }
        let fence = flags.contains(Flags::FENCE);
        let qp = self.parts.qp()?;
        let ty = mw.mw_type();
        let shared = mw.shared().clone();
        let (rkey, region) = {
            let mut st = shared.lock();
            let Some(b) = st.binding.as_ref() else {
                return Err(Error::inval("invalidate_mw: the window is not bound"));
            };
            if st.invalidating.is_some() {
                return Err(Error::inval(
                    "invalidate_mw: an invalidation of this window is already posted; reap its completion",
                ));
            }
            if ty == MwType::Type2 && b.qp_num != qp.qp_num() {
                return Err(Error::inval(format!(
                    "invalidate_mw: the type 2 window was bound on another connection (QP {}), not this one (QP {}); \
                     invalidate it there",
                    b.qp_num,
                    qp.qp_num()
                )));
            }
            let r = (b.rkey, b.region.clone());
            // Set before posting: the completion may be translated (by a
            // thread polling the CQ) as soon as the post returns.
            st.invalidating = Some(r.0);
            r
        };
        let hold: Hold = Arc::new(region.clone());
        let rec = SendOpRec {
            ctx: op_context,
            kind: OpKind::LocalInv,
            signaled: true,
            hold: Some(hold),
            confirm: Some(shared.clone()),
        };
        let r = self.parts.send.post_with(rec, |wr_id| match ty {
            MwType::Type2 => qp.post_local_inv(wr_id, true, fence, rkey),
            MwType::Type1 => {
                // A zero-length bind over its region unbinds a type 1 window.
                let mr = region.mr();
                qp.bind_mw_type1(mw.sys(), mr, mr.device_addr(), 0, 0, wr_id, true, fence).map(|_| ())
            }
        });
        let mut st = shared.lock();
        match r {
            Ok(()) => {
                if ty == MwType::Type1 {
                    st.rkey = mw.sys().rkey();
                }
                Ok(())
            }
            Err(e) => {
                st.invalidating = None;
                Err(e)
            }
        }
    }

    /// [`send`](Conn::send) that also invalidates the other side's type 2
    /// window with `rkey` (`IBV_WR_SEND_WITH_INV`); the receiver's completion
    /// reports it in [`Completion::invalidated_rkey`](crate::Completion).
    ///
    /// # Errors
    /// As [`send`](Conn::send).
    pub fn send_with_inv<M: RegMemory + Send + Sync + 'static>(
        &self,
        src: &MrLocal<M>,
        offset: usize,
        len: usize,
        flags: Flags,
        rkey: u32,
        op_context: u64,
    ) -> Result<()> {
        let local = Local { mr: src, offset, need: Usage::SEND, what: "send_with_inv: src" };
        self.post_one(OpKind::SendInv, SendOp::SendInv(rkey), local, None, len, flags, op_context, Some(src.hold()))
    }

    /// Validates and posts one operation with a local range (and for RDMA
    /// operations a remote one): the checks every data-path call shares.
    #[allow(clippy::too_many_arguments)]
    fn post_one<M: RegMemory>(
        &self,
        kind: OpKind,
        op: SendOp,
        local: Local<'_, M>,
        remote: Option<Remote<'_>>,
        len: usize,
        flags: Flags,
        op_context: u64,
        hold: Option<Hold>,
    ) -> Result<()> {
        let signaled = signaled(flags)?;
        let len32 = check_len(local.what, len)?;
        local.mr.check_range(local.what, local.offset, len)?;
        let checked = hold.is_some();
        if checked {
            check_local(local.mr, local.need, local.what, &self.parts.peer)?;
        }
        let (remote_addr, rkey) = match remote {
            Some(r) => {
                if checked {
                    r.mr.check_range(r.what, r.offset, len as u64)?;
                    check_remote(r.mr, r.need, r.what)?;
                }
                (r.mr.addr().wrapping_add(r.offset), r.mr.rkey())
            }
            None => (0, 0),
        };
        let wr = SendWr {
            wr_id: 0,
            op,
            sge: (len > 0).then(|| local.mr.sge(local.offset, len32)),
            remote_addr,
            rkey,
            signaled,
            fence: flags.contains(Flags::FENCE),
            inline: false,
        };
        if checked {
            self.parts.post(kind, op_context, hold, wr)
        } else {
            self.parts.post_untracked(kind, op_context, wr)
        }
    }

    /// [`recv`](Conn::recv) without keeping `dst` alive, without the usage
    /// check (the device refuses a receive into memory without local write
    /// access) and with nothing recorded (`op_context` travels in the work
    /// request ID; see [`read_unchecked`](Conn::read_unchecked)); the local
    /// range is checked.
    ///
    /// # Safety
    /// `dst` must not be dropped, deregistered or accessed until the
    /// receive's completion has been reaped, or the connection is dropped.
    ///
    /// # Errors
    /// As [`recv`](Conn::recv), without the usage check, and
    /// [`Error::Inval`] when `op_context` exceeds 56 bits.
    #[allow(unsafe_code)]
    pub unsafe fn recv_unchecked<M: RegMemory>(
        &self,
        dst: &MrLocal<M>,
        offset: usize,
        len: usize,
        op_context: u64,
    ) -> Result<()> {
        self.parts.recv_inner(dst, offset, len, op_context, None)
    }

    /// Operations posted on the send queue whose completion (or a later
    /// signaled one's) has not been reaped yet; unchecked operations are
    /// not counted.
    pub fn pending_sends(&self) -> usize {
        self.parts.send.pending()
    }
}

/// A connection's reliable-connection retry settings, from
/// [`Conn::retry_budget`].
///
/// When the peer stops acknowledging (it died, or the link is cut) the
/// requester retransmits after the local ACK timeout, `retry_cnt` times,
/// then fails the operation with `RETRY_EXC_ERR`.
/// [`transport_timeout`](RetryBudget::transport_timeout) is that bound as the
/// standard defines it. A provider may take longer, or never report the
/// failure at all (Soft-RoCE on Linux 6.1 does not: see "Faults" in the
/// repository's docs/testing.md), so wait for completions with a bound, such as
/// [`Cq::next_completion`], and tear the connection down on a timeout.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct RetryBudget {
    /// The local ACK timeout exponent: 4.096 us x 2^`ack_timeout`; 0 means
    /// the transport never times out.
    pub ack_timeout: u8,
    /// Transport retries after a timeout (0..=7).
    pub retry_cnt: u8,
    /// Retries after a receiver-not-ready NAK; 7 means forever.
    pub rnr_retry: u8,
    /// The RNR NAK timer code this side sends (see
    /// [`ConnCfg::set_min_rnr_timer`](crate::ConnCfg::set_min_rnr_timer)).
    pub min_rnr_timer: u8,
}

impl RetryBudget {
    /// The local ACK timeout, or `None` when it is infinite.
    pub fn ack_timeout_duration(&self) -> Option<Duration> {
        (self.ack_timeout != 0).then(|| Duration::from_nanos(4096u64 << self.ack_timeout.min(31)))
    }

    /// How long an unacknowledged operation is retried before it fails:
    /// the ACK timeout times (1 + `retry_cnt`), or `None` when infinite.
    pub fn transport_timeout(&self) -> Option<Duration> {
        self.ack_timeout_duration().map(|t| t * (1 + u32::from(self.retry_cnt)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_budget_durations() {
        let b = RetryBudget { ack_timeout: 14, retry_cnt: 7, rnr_retry: 7, min_rnr_timer: 12 };
        assert_eq!(b.ack_timeout_duration(), Some(Duration::from_nanos(4096 << 14)));
        assert_eq!(b.transport_timeout(), Some(Duration::from_nanos((4096 << 14) * 8)));
        let never = RetryBudget { ack_timeout: 0, ..b };
        assert_eq!(never.transport_timeout(), None);
    }
}
