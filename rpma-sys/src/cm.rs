//! librdmacm: event channel, address info and communication identifier.

use crate::ffi;
use crate::gate::{Bound, Gate};
use crate::pd::Pd;
use crate::qp::{Qp, QpInit};
use crate::{from_minus1_ret, last_error};
use std::ffi::CString;
use std::io;
use std::os::fd::RawFd;
use std::sync::Arc;

/// `RAI_PASSIVE` (a `#define` in `rdma/rdma_cma.h`).
pub const RAI_PASSIVE: i32 = 0x0000_0001;

struct EventChannelInner {
    ch: *mut ffi::rdma_event_channel,
    gate: Gate,
}

// SAFETY: an rdma_event_channel is an fd; usable from any thread.
unsafe impl Send for EventChannelInner {}
// SAFETY: rdma_get_cm_event is a blocking read on the fd; thread-safe.
unsafe impl Sync for EventChannelInner {}

impl Drop for EventChannelInner {
    fn drop(&mut self) {
        // SAFETY: created by rdma_create_event_channel; CM IDs using it hold an Arc.
        unsafe { ffi::rdma_destroy_event_channel(self.ch) }
    }
}

/// An rdma_cm event channel (`rdma_create_event_channel`).
#[derive(Clone)]
pub struct EventChannel {
    inner: Arc<EventChannelInner>,
}

impl EventChannel {
    /// Creates an event channel.
    ///
    /// # Errors
    /// The errno of `rdma_create_event_channel` (`ENODEV` without RDMA CM support).
    pub fn new() -> io::Result<EventChannel> {
        // SAFETY: no preconditions.
        let ch = unsafe { ffi::rdma_create_event_channel() };
        if ch.is_null() {
            return Err(last_error("rdma_create_event_channel"));
        }
        Ok(EventChannel { inner: Arc::new(EventChannelInner { ch, gate: Gate::new() }) })
    }

    /// The channel's file descriptor.
    pub fn fd(&self) -> RawFd {
        // SAFETY: live channel.
        unsafe { (*self.inner.ch).fd }
    }

    /// The channel's file descriptor, borrowed for as long as the channel.
    pub fn as_fd(&self) -> std::os::fd::BorrowedFd<'_> {
        // SAFETY: the channel owns the fd and closes it only when the last
        // handle (this one among them) is dropped.
        unsafe { std::os::fd::BorrowedFd::borrow_raw(self.fd()) }
    }

    pub(crate) fn as_ptr(&self) -> *mut ffi::rdma_event_channel {
        self.inner.ch
    }

    /// Takes the next event (`rdma_get_cm_event`) within `bound`, through
    /// the channel's [`Gate`] (one reader at a time), copies what it carries
    /// and acknowledges it at once; `None` when none came in time. For
    /// `CONNECT_REQUEST` the new ID is handed over, owned, in
    /// [`CmEvent::new_id`].
    ///
    /// # Errors
    /// The errno of `poll` or `rdma_get_cm_event` (`EAGAIN` on a
    /// non-blocking channel with nothing pending, [`Bound::Never`];
    /// librdmacm reports it as `ENODATA` too).
    pub fn get_event(&self, bound: Bound) -> io::Result<Option<CmEvent>> {
        self.inner.gate.read(&self.as_fd(), bound, || self.next_event())
    }

    /// [`get_event`](Self::get_event) for an async reader: `Pending` while
    /// another reader holds the channel (`cx` is woken when it lets go),
    /// else the event if one is there now.
    ///
    /// # Errors
    /// As [`get_event`](Self::get_event).
    pub fn poll_get_event(&self, cx: &mut std::task::Context<'_>) -> std::task::Poll<io::Result<Option<CmEvent>>> {
        self.inner.gate.poll_read(&self.as_fd(), cx, || self.next_event())
    }

    fn next_event(&self) -> io::Result<CmEvent> {
        let mut ev = std::ptr::null_mut();
        // SAFETY: live channel, valid out-pointer.
        let rc = unsafe { ffi::rdma_get_cm_event(self.inner.ch, &mut ev) };
        from_minus1_ret(rc, "rdma_get_cm_event")?;
        // SAFETY: a successful call returns a valid event until it is acked;
        // everything needed is copied before the ack.
        unsafe {
            let e = &*ev;
            let kind = e.event;
            let conn = e.param.conn;
            let private_data = if !conn.private_data.is_null() && conn.private_data_len > 0 {
                std::slice::from_raw_parts(conn.private_data.cast::<u8>(), conn.private_data_len as usize).to_vec()
            } else {
                Vec::new()
            };
            let new_id = (kind == ffi::rdma_cm_event_type::RDMA_CM_EVENT_CONNECT_REQUEST).then(|| CmId {
                qp: None,
                id: e.id,
                channel: Some(self.clone()),
                passive: true,
            });
            let out = CmEvent { kind, status: e.status, id: e.id as usize, private_data, new_id };
            ffi::rdma_ack_cm_event(ev);
            Ok(out)
        }
    }
}

/// A CM event, copied out of librdmacm's and already acknowledged.
#[derive(Debug)]
pub struct CmEvent {
    /// `rdma_cm_event_type` value.
    pub kind: u32,
    /// The event's status (an errno or a transport reason).
    pub status: i32,
    /// Identity of the CM ID the event is for.
    pub id: usize,
    /// The private data carried by the event (possibly padded by the CM).
    pub private_data: Vec<u8>,
    /// The new passive-side ID of a `CONNECT_REQUEST`.
    pub new_id: Option<CmId>,
}

/// `RDMA_CM_EVENT_*` values.
pub mod event {
    use super::ffi::rdma_cm_event_type as t;
    /// ADDR_RESOLVED.
    pub const ADDR_RESOLVED: u32 = t::RDMA_CM_EVENT_ADDR_RESOLVED;
    /// CONNECT_REQUEST.
    pub const CONNECT_REQUEST: u32 = t::RDMA_CM_EVENT_CONNECT_REQUEST;
    /// CONNECT_ERROR.
    pub const CONNECT_ERROR: u32 = t::RDMA_CM_EVENT_CONNECT_ERROR;
    /// UNREACHABLE.
    pub const UNREACHABLE: u32 = t::RDMA_CM_EVENT_UNREACHABLE;
    /// REJECTED.
    pub const REJECTED: u32 = t::RDMA_CM_EVENT_REJECTED;
    /// ESTABLISHED.
    pub const ESTABLISHED: u32 = t::RDMA_CM_EVENT_ESTABLISHED;
    /// DISCONNECTED.
    pub const DISCONNECTED: u32 = t::RDMA_CM_EVENT_DISCONNECTED;
    /// DEVICE_REMOVAL.
    pub const DEVICE_REMOVAL: u32 = t::RDMA_CM_EVENT_DEVICE_REMOVAL;
    /// TIMEWAIT_EXIT.
    pub const TIMEWAIT_EXIT: u32 = t::RDMA_CM_EVENT_TIMEWAIT_EXIT;
}

/// librdmacm's name of an event type (`rdma_event_str`).
pub fn event_str(kind: u32) -> String {
    // SAFETY: rdma_event_str returns a static NUL-terminated string for any value.
    unsafe {
        let p = ffi::rdma_event_str(kind);
        if p.is_null() {
            format!("event {kind}")
        } else {
            std::ffi::CStr::from_ptr(p).to_string_lossy().into_owned()
        }
    }
}

/// Result of `rdma_getaddrinfo`, freed on drop.
pub struct AddrInfo {
    ai: *mut ffi::rdma_addrinfo,
}

impl AddrInfo {
    /// Resolves `node` (and `service`, a port) for `RDMA_PS_TCP`; `passive`
    /// sets `RAI_PASSIVE` (the address to bind or listen on).
    ///
    /// # Errors
    /// `EINVAL` for strings with NUL bytes; the errno of `rdma_getaddrinfo`
    /// (`ENODEV`/`EADDRNOTAVAIL`... for addresses without an RDMA device).
    pub fn new(node: &str, service: Option<&str>, passive: bool) -> io::Result<AddrInfo> {
        let inval = |_| io::Error::from_raw_os_error(libc::EINVAL);
        let node = CString::new(node).map_err(inval)?;
        let service = service.map(CString::new).transpose().map_err(inval)?;
        // SAFETY: plain data, all-zero is valid.
        let mut hints: ffi::rdma_addrinfo = unsafe { std::mem::zeroed() };
        hints.ai_flags = if passive { RAI_PASSIVE } else { 0 };
        hints.ai_port_space = ffi::rdma_port_space::RDMA_PS_TCP as i32;
        let mut ai = std::ptr::null_mut();
        // SAFETY: NUL-terminated strings and valid hints/out-pointer.
        let rc = unsafe {
            ffi::rdma_getaddrinfo(
                node.as_ptr(),
                service.as_ref().map_or(std::ptr::null(), |s| s.as_ptr()),
                &hints,
                &mut ai,
            )
        };
        if rc != 0 || ai.is_null() {
            let e = io::Error::last_os_error();
            return Err(match e.raw_os_error() {
                Some(0) | None => io::Error::other(format!("rdma_getaddrinfo failed ({rc})")),
                _ => e,
            });
        }
        Ok(AddrInfo { ai })
    }

    fn src(&self) -> *mut libc::sockaddr {
        // SAFETY: live addrinfo.
        unsafe { (*self.ai).ai_src_addr.cast() }
    }

    fn dst(&self) -> *mut libc::sockaddr {
        // SAFETY: live addrinfo.
        unsafe { (*self.ai).ai_dst_addr.cast() }
    }
}

impl Drop for AddrInfo {
    fn drop(&mut self) {
        // SAFETY: from rdma_getaddrinfo, freed once.
        unsafe { ffi::rdma_freeaddrinfo(self.ai) }
    }
}

/// An rdma_cm communication identifier (`rdma_create_id`, `RDMA_PS_TCP`),
/// destroyed on drop together with the QP created on it.
pub struct CmId {
    // Dropped first: rdma_destroy_qp must precede rdma_destroy_id.
    qp: Option<Qp>,
    id: *mut ffi::rdma_cm_id,
    channel: Option<EventChannel>,
    passive: bool,
}

// SAFETY: a CM ID may be used from any thread; librdmacm locks internally.
unsafe impl Send for CmId {}
// SAFETY: shared access only reads fields or makes thread-safe calls.
unsafe impl Sync for CmId {}

impl CmId {
    /// Creates an ID reporting events on `channel`, or a synchronous ID
    /// (calls block until their event) when `channel` is `None`.
    ///
    /// # Errors
    /// The errno of `rdma_create_id`.
    pub fn new(channel: Option<&EventChannel>) -> io::Result<CmId> {
        let mut id = std::ptr::null_mut();
        let ch = channel.map_or(std::ptr::null_mut(), |c| c.as_ptr());
        // SAFETY: valid out-pointer; the channel (if any) is live and kept
        // alive by the clone stored below.
        let rc = unsafe { ffi::rdma_create_id(ch, &mut id, std::ptr::null_mut(), ffi::rdma_port_space::RDMA_PS_TCP) };
        from_minus1_ret(rc, "rdma_create_id")?;
        Ok(CmId { qp: None, id, channel: channel.cloned(), passive: false })
    }

    /// Binds to the (passive) source address of `ai` (`rdma_bind_addr`).
    ///
    /// # Errors
    /// The errno of `rdma_bind_addr` (`EADDRNOTAVAIL`, `EADDRINUSE`...).
    pub fn bind_addr(&mut self, ai: &AddrInfo) -> io::Result<()> {
        // SAFETY: live id; the sockaddr belongs to the live addrinfo.
        let rc = unsafe { ffi::rdma_bind_addr(self.id, ai.src().cast()) };
        from_minus1_ret(rc, "rdma_bind_addr")
    }

    /// Resolves the destination address of `ai` (`rdma_resolve_addr`),
    /// giving up after `timeout_ms`. On a synchronous ID this blocks until
    /// resolution ends.
    ///
    /// # Errors
    /// The errno of `rdma_resolve_addr` (`ETIMEDOUT`, `EADDRNOTAVAIL`, `ENODEV`...).
    pub fn resolve_addr(&mut self, ai: &AddrInfo, timeout_ms: i32) -> io::Result<()> {
        // SAFETY: live id; sockaddrs belong to the live addrinfo.
        let rc = unsafe { ffi::rdma_resolve_addr(self.id, ai.src().cast(), ai.dst().cast(), timeout_ms) };
        from_minus1_ret(rc, "rdma_resolve_addr")
    }

    /// Resolves the route to the resolved address (`rdma_resolve_route`).
    ///
    /// # Errors
    /// The errno of `rdma_resolve_route`.
    pub fn resolve_route(&mut self, timeout_ms: i32) -> io::Result<()> {
        // SAFETY: live id.
        let rc = unsafe { ffi::rdma_resolve_route(self.id, timeout_ms) };
        from_minus1_ret(rc, "rdma_resolve_route")
    }

    /// Starts listening (`rdma_listen`).
    ///
    /// # Errors
    /// The errno of `rdma_listen`.
    pub fn listen(&mut self, backlog: i32) -> io::Result<()> {
        // SAFETY: live, bound id.
        let rc = unsafe { ffi::rdma_listen(self.id, backlog) };
        from_minus1_ret(rc, "rdma_listen")
    }

    /// Creates the ID's RC QP on `pd` (`rdma_create_qp_ex`); it is destroyed
    /// with the ID.
    ///
    /// # Errors
    /// `EEXIST` when the ID already has a QP; the errno of `rdma_create_qp_ex`
    /// (`EINVAL` when `pd` is of another device).
    pub fn create_qp(&mut self, pd: &Pd, init: &QpInit<'_>) -> io::Result<&Qp> {
        if self.qp.is_some() {
            return Err(io::Error::from_raw_os_error(libc::EEXIST));
        }
        let qp = Qp::on_cm_id(self.id, pd, init)?;
        Ok(self.qp.insert(qp))
    }

    /// Moves the ID to another event channel (`rdma_migrate_id`).
    ///
    /// # Errors
    /// The errno of `rdma_migrate_id`.
    pub fn migrate(&mut self, channel: &EventChannel) -> io::Result<()> {
        // SAFETY: live id and channel; events of the old channel are acked
        // as soon as they are read (EventChannel::get_event), so this cannot block.
        let rc = unsafe { ffi::rdma_migrate_id(self.id, channel.as_ptr()) };
        from_minus1_ret(rc, "rdma_migrate_id")?;
        self.channel = Some(channel.clone());
        Ok(())
    }

    /// Whether the ID came from a connection request (passive side).
    pub fn is_passive(&self) -> bool {
        self.passive
    }

    fn conn_param(private_data: &[u8]) -> io::Result<ffi::rdma_conn_param> {
        let len = u8::try_from(private_data.len()).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
        Ok(ffi::rdma_conn_param {
            private_data: if len == 0 { std::ptr::null() } else { private_data.as_ptr().cast() },
            private_data_len: len,
            responder_resources: u8::MAX, // RDMA_MAX_RESP_RES
            initiator_depth: u8::MAX,     // RDMA_MAX_INIT_DEPTH
            flow_control: 1,
            retry_count: 7,
            rnr_retry_count: 7,
            srq: 0,
            qp_num: 0,
        })
    }

    /// Connects (`rdma_connect`) with librpma's parameters (max responder
    /// resources and initiator depth, flow control, retry 7, RNR retry 7).
    ///
    /// # Errors
    /// `EINVAL` for more than 255 bytes of private data; the errno of `rdma_connect`.
    pub fn connect(&mut self, private_data: &[u8]) -> io::Result<()> {
        let mut p = Self::conn_param(private_data)?;
        // SAFETY: live id; `p` and the private data live across the call
        // (librdmacm copies the private data).
        let rc = unsafe { ffi::rdma_connect(self.id, &mut p) };
        from_minus1_ret(rc, "rdma_connect")
    }

    /// Accepts a connection request (`rdma_accept`), with librpma's parameters.
    ///
    /// # Errors
    /// As [`CmId::connect`], for `rdma_accept`.
    pub fn accept(&mut self, private_data: &[u8]) -> io::Result<()> {
        let mut p = Self::conn_param(private_data)?;
        // SAFETY: as in connect.
        let rc = unsafe { ffi::rdma_accept(self.id, &mut p) };
        from_minus1_ret(rc, "rdma_accept")
    }

    /// Rejects a connection request (`rdma_reject`).
    ///
    /// # Errors
    /// The errno of `rdma_reject`.
    pub fn reject(&mut self, private_data: &[u8]) -> io::Result<()> {
        let len = u8::try_from(private_data.len()).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
        let ptr = if len == 0 { std::ptr::null() } else { private_data.as_ptr().cast() };
        // SAFETY: live id; the data lives across the call.
        let rc = unsafe { ffi::rdma_reject(self.id, ptr, len) };
        from_minus1_ret(rc, "rdma_reject")
    }

    /// Disconnects (`rdma_disconnect`).
    ///
    /// # Errors
    /// The errno of `rdma_disconnect`.
    pub fn disconnect(&self) -> io::Result<()> {
        // SAFETY: live id.
        let rc = unsafe { ffi::rdma_disconnect(self.id) };
        from_minus1_ret(rc, "rdma_disconnect")
    }

    /// Identity of the ID, as in [`CmEvent::id`].
    pub fn ident(&self) -> usize {
        self.id as usize
    }

    /// Destroys the ID's QP now (as `rdma_destroy_qp` does, reporting the
    /// result); dropping the ID does it too, logging a failure.
    ///
    /// # Errors
    /// The errno of `ibv_destroy_qp`. The QP is then leaked, never
    /// destroyed nor freed (with its CQs and SRQ): the device may still
    /// process the work requests posted on it, so the caller must keep the
    /// memory they use for ever.
    pub fn destroy_qp(&mut self) -> io::Result<()> {
        match self.qp.take().map(Qp::destroy) {
            None | Some(Ok(())) => Ok(()),
            Some(Err((qp, e))) => {
                std::mem::forget(qp);
                Err(e)
            }
        }
    }

    /// The QP created on this ID.
    #[inline]
    pub fn qp(&self) -> Option<&Qp> {
        self.qp.as_ref()
    }

    /// The event channel the ID reports on (`None` for a synchronous ID).
    pub fn channel(&self) -> Option<&EventChannel> {
        self.channel.as_ref()
    }

    /// Whether the ID is bound to a device whose context is `ctx`.
    pub fn is_on(&self, ctx: &crate::device::Context) -> bool {
        ctx.is(self.verbs_ptr())
    }

    pub(crate) fn verbs_ptr(&self) -> *mut ffi::ibv_context {
        // SAFETY: live id.
        unsafe { (*self.id).verbs }
    }

    /// The device context librdmacm opened for this ID's device; the context
    /// keeps this ID (and so librdmacm's reference on the device) alive.
    ///
    /// # Errors
    /// `NotFound` when the ID is not bound to a device yet.
    pub fn into_context(self) -> io::Result<crate::device::Context> {
        let ctx = self.verbs_ptr();
        if ctx.is_null() {
            return Err(io::Error::new(io::ErrorKind::NotFound, "the CM ID is bound to no RDMA device"));
        }
        // SAFETY: librdmacm keeps the device context of a bound ID open
        // until the ID is destroyed; the context keeps the ID alive.
        Ok(unsafe { crate::device::Context::kept_by(ctx, Box::new(self)) })
    }
}

impl Drop for CmId {
    fn drop(&mut self) {
        drop(self.qp.take());
        // SAFETY: live id, destroyed once, after its QP.
        let rc = unsafe { ffi::rdma_destroy_id(self.id) };
        if rc != 0 {
            crate::log_hook::sys_log!(Error, "rdma_destroy_id: {}", io::Error::last_os_error());
        }
    }
}

impl std::fmt::Debug for EventChannel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EventChannel").field("fd", &self.fd()).finish()
    }
}

impl std::fmt::Debug for AddrInfo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AddrInfo").finish_non_exhaustive()
    }
}

impl std::fmt::Debug for CmId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CmId").field("qp", &self.qp).field("has_channel", &self.channel.is_some()).finish()
    }
}
