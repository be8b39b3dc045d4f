//! librdmacm: event channel, address info and communication identifier.

use crate::ffi;
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
        Ok(EventChannel {
            inner: Arc::new(EventChannelInner { ch }),
        })
    }

    /// The channel's file descriptor.
    pub fn fd(&self) -> RawFd {
        // SAFETY: live channel.
        unsafe { (*self.inner.ch).fd }
    }

    pub(crate) fn as_ptr(&self) -> *mut ffi::rdma_event_channel {
        self.inner.ch
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
        let rc = unsafe {
            ffi::rdma_create_id(
                ch,
                &mut id,
                std::ptr::null_mut(),
                ffi::rdma_port_space::RDMA_PS_TCP,
            )
        };
        from_minus1_ret(rc, "rdma_create_id")?;
        Ok(CmId {
            qp: None,
            id,
            channel: channel.cloned(),
        })
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
        let rc = unsafe {
            ffi::rdma_resolve_addr(self.id, ai.src().cast(), ai.dst().cast(), timeout_ms)
        };
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

    /// The QP created on this ID.
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
        crate::device::Context::from_cm_id(self)
    }
}

impl Drop for CmId {
    fn drop(&mut self) {
        drop(self.qp.take());
        // SAFETY: live id, destroyed once, after its QP.
        let rc = unsafe { ffi::rdma_destroy_id(self.id) };
        if rc != 0 {
            log::error!("rdma_destroy_id: {}", io::Error::last_os_error());
        }
    }
}

impl std::fmt::Debug for EventChannel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EventChannel")
            .field("fd", &self.fd())
            .finish()
    }
}

impl std::fmt::Debug for AddrInfo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AddrInfo").finish_non_exhaustive()
    }
}

impl std::fmt::Debug for CmId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CmId")
            .field("qp", &self.qp)
            .field("has_channel", &self.channel.is_some())
            .finish()
    }
}
