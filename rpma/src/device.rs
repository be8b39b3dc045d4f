//! An RDMA device: the host's devices, ports and addresses ([`devices`]),
//! its handle ([`IbvContext`]), finding it by IP address
//! ([`get_ibv_context`], as librpma's `rpma_utils_get_ibv_context`) or by
//! name ([`IbvContext::open`]), its capabilities ([`is_odp_capable`]) and its
//! asynchronous events ([`IbvContext::next_event`]).
//!
//! ```no_run
//! use rpma::device::{get_ibv_context_timeout, ContextType};
//! let ctx = get_ibv_context_timeout("192.0.2.1", ContextType::Remote, std::time::Duration::from_millis(500))?;
//! println!("{}", ctx.device_name());
//! # Ok::<(), rpma::Error>(())
//! ```

use crate::error::{Detail, Error, Msg, Result};
use rpma_sys::cm::{AddrInfo, CmId};
use rpma_sys::device::{Context, DeviceList};
use std::time::Duration;

mod list;
pub use list::{
    devices, AtomicCap, DeviceAttrs, DeviceInfo, GidInfo, LinkLayer, PhysState, PortAttrs, PortInfo, PortState, Rate,
};

/// ```no_run
/// let ctx = rpma::IbvContext::open(Some("rxe0"))?;
/// println!("{}: ODP {}", ctx.device_name(), rpma::device::is_odp_capable(&ctx)?);
/// # Ok::<(), rpma::Error>(())
/// ```
///
/// An RDMA device context (`struct ibv_context`), shared by reference
/// counting. Get one with [`get_ibv_context`] (by IP address, as librpma does)
/// or [`IbvContext::open`] (by device name).
#[derive(Clone, Debug)]
pub struct IbvContext(pub(crate) Context);

impl IbvContext {
    /// Opens the device called `name` (e.g. `rxe0`) directly, or the first
    /// device when `name` is `None`.
    ///
    /// A context opened this way cannot carry connections (librdmacm uses its
    /// own contexts); use [`get_ibv_context`] for peers that connect.
    ///
    /// # Errors
    /// [`Error::Provider`] with [`Detail::NoDevice`] when the host has no
    /// (such) RDMA device (`ENODEV`; `ENOSYS` without RDMA support in the
    /// kernel), its message saying what to do (load a driver or a
    /// Soft-RoCE link, install the provider library), as
    /// [`get_ibv_context`] reports an address no device has;
    /// [`Error::Provider`] when listing or opening fails otherwise.
    pub fn open(name: Option<&str>) -> Result<IbvContext> {
        crate::logging::route_sys();
        let no_device = |text: String, errno: i32| Error::Provider {
            op: Msg::detailed(Detail::NoDevice { addr: None, loopback: false }, text),
            source: std::io::Error::from_raw_os_error(errno),
        };
        let list = match DeviceList::new() {
            Ok(list) => list,
            // No RDMA support in the kernel (no uverbs class).
            Err(e) if e.raw_os_error() == Some(libc::ENOSYS) => {
                return Err(no_device(format!("ibv_get_device_list ({})", list::no_device_hint(0)), libc::ENOSYS))
            }
            Err(e) => return Err(Error::provider_raw("ibv_get_device_list", e)),
        };
        let idx = (0..list.len()).find(|&i| name.is_none() || list.name(i).as_deref() == name);
        let Some(i) = idx else {
            let have: Vec<String> = (0..list.len()).filter_map(|i| list.name(i)).collect();
            let text = match name {
                Some(n) if !have.is_empty() => format!("no RDMA device named {n:?} (devices: {have:?})"),
                Some(n) => format!("no RDMA device named {n:?}: {}", list::no_device_hint(0)),
                None => list::no_device_hint(list.len()),
            };
            return Err(no_device(text, libc::ENODEV));
        };
        let ctx = list.open(i).map_err(|e| Error::provider_raw("ibv_open_device", e))?;
        Ok(IbvContext(ctx))
    }

    /// The device's kernel name (e.g. `rxe0`).
    pub fn device_name(&self) -> String {
        self.0.device_name()
    }

    /// What the device says of itself (`ibv_query_device`): firmware
    /// version, vendor and part, READs and atomics in flight, which atomics
    /// it carries out; what `ibv_devinfo` prints first.
    ///
    /// ```no_run
    /// let ctx = rpma::IbvContext::open(Some("rxe0"))?;
    /// let a = ctx.attributes()?;
    /// println!("{} fw {} ({:#06x}:{}), {}", ctx.device_name(), a.fw_ver, a.vendor_id, a.vendor_part_id, a.atomic_cap);
    /// # Ok::<(), rpma::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::Provider`] when `ibv_query_device_ex` fails.
    pub fn attributes(&self) -> Result<DeviceAttrs> {
        let c = self.0.query_caps().map_err(|e| Error::provider_raw("ibv_query_device_ex", e))?;
        Ok(DeviceAttrs {
            fw_ver: c.fw_ver,
            vendor_id: c.vendor_id,
            vendor_part_id: c.vendor_part_id,
            hw_ver: c.hw_ver,
            max_qp_rd_atom: c.max_qp_rd_atom,
            max_qp_init_rd_atom: c.max_qp_init_rd_atom,
            atomic_cap: list::AtomicCap::from_code(c.atomic_cap),
            phys_port_cnt: c.phys_port_cnt,
        })
    }

    /// What port `port` (from 1) says of itself (`ibv_query_port`): its
    /// active and largest MTU, its LID and its subnet manager's; what
    /// `ibv_devinfo` prints of a port beyond [`devices`].
    ///
    /// ```no_run
    /// let ctx = rpma::IbvContext::open(Some("rxe0"))?;
    /// let p = ctx.port_attributes(1)?;
    /// println!("port 1: MTU {:?} of {:?}, LID {}, SM LID {}", p.active_mtu, p.max_mtu, p.lid, p.sm_lid);
    /// # Ok::<(), rpma::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::Inval`] for a port number above 255 (none has one);
    /// [`Error::Provider`] when `ibv_query_port` fails (`EINVAL`: the
    /// device has no such port).
    pub fn port_attributes(&self, port: u32) -> Result<PortAttrs> {
        let n = u8::try_from(port).map_err(|_| Error::inval(format!("port {port}: ports are numbered 1 to 255")))?;
        let a = self.0.query_port(n).map_err(|e| Error::provider_raw(format!("ibv_query_port (port {port})"), e))?;
        Ok(PortAttrs { port, active_mtu: a.active_mtu, max_mtu: a.max_mtu, lid: a.lid, sm_lid: a.sm_lid })
    }

    /// The context's address, what C code knows as `struct ibv_context *`
    /// (the C ABI's `rpma_utils_get_ibv_context` hands it out).
    pub fn as_raw(&self) -> *mut std::ffi::c_void {
        self.0.as_raw()
    }

    /// A context C code lends by address (the C ABI's `rpma_peer_new`): used,
    /// never closed by rpma.
    ///
    /// # Safety
    /// `ctx` must point to an open `struct ibv_context` that stays open as
    /// long as the returned value, its clones, and every object made from it
    /// (peers, regions, connections) are alive.
    pub unsafe fn from_raw(ctx: std::ptr::NonNull<std::ffi::c_void>) -> IbvContext {
        crate::logging::route_sys();
        // SAFETY: the caller's contract is the one Context::borrowed needs.
        IbvContext(unsafe { Context::borrowed(ctx.as_ptr()) })
    }
}

/// Which side of a connection an address belongs to
/// (`RPMA_UTIL_IBV_CONTEXT_LOCAL` / `_REMOTE`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ContextType {
    /// A local address: the device it is bound to.
    Local,
    /// A remote address: the device the route to it goes through.
    Remote,
}

/// librpma's fixed timeout for [`get_ibv_context`] with [`ContextType::Remote`].
pub const DEFAULT_RESOLVE_TIMEOUT: Duration = Duration::from_millis(1000);

/// The device context for an IP address (`rpma_utils_get_ibv_context`): the
/// device a local address is bound to, or the device that reaches a remote
/// address (resolved within [`DEFAULT_RESOLVE_TIMEOUT`]).
///
/// ```no_run
/// use rpma::device::{get_ibv_context, ContextType};
/// let ctx = get_ibv_context("192.0.2.1", ContextType::Local)?;
/// println!("device {}", ctx.device_name());
/// # Ok::<(), rpma::Error>(())
/// ```
///
/// # Errors
/// [`Error::Inval`] for an empty address or one with a NUL byte;
/// [`Error::Provider`] with the errno of the failing librdmacm step
/// (`rdma_getaddrinfo`, `rdma_bind_addr`, `rdma_resolve_addr`); for an
/// address no RDMA device has (`ENODEV`, `EADDRNOTAVAIL`, `ENOENT`) with
/// [`Detail::NoDevice`], its message naming the addresses devices have
/// (and saying when the address was a loopback one).
pub fn get_ibv_context(addr: &str, kind: ContextType) -> Result<IbvContext> {
    get_ibv_context_timeout(addr, kind, DEFAULT_RESOLVE_TIMEOUT)
}

/// [`get_ibv_context`] with a chosen timeout for remote resolution.
///
/// # Errors
/// As [`get_ibv_context`]; [`Error::Inval`] for a timeout over `i32::MAX` ms.
pub fn get_ibv_context_timeout(addr: &str, kind: ContextType, timeout: Duration) -> Result<IbvContext> {
    crate::logging::route_sys();
    if addr.is_empty() || addr.contains('\0') {
        return Err(Error::inval(format!("address {addr:?} is empty or contains a NUL byte")));
    }
    let timeout_ms = crate::error::timeout_ms(
        &crate::error::Named::new(crate::error::Arg::Timeout, "get_ibv_context_timeout: timeout"),
        timeout,
    )?;
    let passive = kind == ContextType::Local;
    let failed = |step: String, e: std::io::Error, always: bool| addr_failed(step, addr, e, always);
    let ai = AddrInfo::new(addr, None, passive).map_err(|e| failed(format!("rdma_getaddrinfo({addr})"), e, false))?;
    let mut id = CmId::new(None).map_err(|e| Error::provider_raw("rdma_create_id", e))?;
    match kind {
        ContextType::Local => id.bind_addr(&ai).map_err(|e| failed(format!("rdma_bind_addr({addr})"), e, false))?,
        ContextType::Remote => id
            .resolve_addr(&ai, timeout_ms)
            .map_err(|e| failed(format!("rdma_resolve_addr({addr}, {timeout_ms} ms)"), e, false))?,
    }
    // Bound (loopback binds), but to no device.
    let ctx = id.into_context().map_err(|e| failed(format!("no RDMA device behind {addr}"), e, true))?;
    Ok(IbvContext(ctx))
}

/// A librdmacm step on `addr` failed: when no device has the address
/// (`always`, or `ENODEV`, `EADDRNOTAVAIL`, `ENOENT`) the error says so and
/// what to do, with [`Detail::NoDevice`]; else the plain provider error.
pub(crate) fn addr_failed(step: String, addr: &str, e: std::io::Error, always: bool) -> Error {
    let no_device = always || matches!(e.raw_os_error(), Some(libc::ENODEV | libc::EADDRNOTAVAIL | libc::ENOENT));
    if !no_device {
        return Error::provider_raw(step, e);
    }
    let (loopback, hint) = list::no_device_for(addr);
    let op = Msg::detailed(Detail::NoDevice { addr: Some(addr.to_string()), loopback }, format!("{step} ({hint})"));
    Error::Provider { op, source: e }
}

/// Whether the device supports On-Demand Paging for RC read and write
/// (`rpma_utils_ibv_context_is_odp_capable`).
///
/// # Errors
/// [`Error::Provider`] when `ibv_query_device_ex` fails.
pub fn is_odp_capable(ctx: &IbvContext) -> Result<bool> {
    let caps = ctx.0.query_caps().map_err(|e| Error::provider_raw("ibv_query_device_ex", e))?;
    Ok(caps.odp)
}

/// What kind of asynchronous event a device reported (`enum ibv_event_type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum DeviceEventKind {
    /// `IBV_EVENT_CQ_ERR`: a CQ overran; its QPs are in the error state.
    CqError,
    /// `IBV_EVENT_QP_FATAL`: a QP went to the error state.
    QpFatal,
    /// `IBV_EVENT_QP_REQ_ERR`: a QP got an invalid request from its peer.
    QpRequestError,
    /// `IBV_EVENT_QP_ACCESS_ERR`: a QP's peer broke an access rule.
    QpAccessError,
    /// `IBV_EVENT_COMM_EST`: the first message arrived on a QP.
    CommEstablished,
    /// `IBV_EVENT_SQ_DRAINED`: a send queue drained.
    SqDrained,
    /// `IBV_EVENT_PATH_MIG`: a QP migrated to its alternate path.
    PathMigrated,
    /// `IBV_EVENT_PATH_MIG_ERR`: a path migration failed.
    PathMigrationError,
    /// `IBV_EVENT_DEVICE_FATAL`: the device failed; close it.
    DeviceFatal,
    /// `IBV_EVENT_PORT_ACTIVE`: a port came up.
    PortActive,
    /// `IBV_EVENT_PORT_ERR`: a port went down.
    PortError,
    /// `IBV_EVENT_LID_CHANGE`.
    LidChange,
    /// `IBV_EVENT_PKEY_CHANGE`.
    PkeyChange,
    /// `IBV_EVENT_SM_CHANGE`.
    SmChange,
    /// `IBV_EVENT_SRQ_ERR`: an SRQ failed.
    SrqError,
    /// `IBV_EVENT_SRQ_LIMIT_REACHED`: an SRQ's receives fell below its limit.
    SrqLimitReached,
    /// `IBV_EVENT_QP_LAST_WQE_REACHED`: the last receive of a QP on an SRQ.
    QpLastWqeReached,
    /// `IBV_EVENT_CLIENT_REREGISTER`.
    ClientReregister,
    /// `IBV_EVENT_GID_CHANGE`: a port's GID table changed (an address came
    /// or went on a RoCE netdev).
    GidChange,
    /// `IBV_EVENT_WQ_FATAL`.
    WqFatal,
    /// A value this version of rpma does not know.
    Other(u32),
}

/// An asynchronous event of a device ([`IbvContext::next_event`]), already
/// acknowledged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct DeviceEvent {
    /// What happened.
    pub kind: DeviceEventKind,
    /// The QP it is about (compare with [`Conn::qp_num`](crate::Conn::qp_num)).
    pub qp_num: Option<u32>,
    /// The port it is about.
    pub port: Option<u8>,
}

impl DeviceEvent {
    fn from_sys(e: rpma_sys::device::AsyncEvent) -> DeviceEvent {
        use rpma_sys::device::AsyncElement as El;
        use DeviceEventKind as K;
        const KINDS: [DeviceEventKind; 20] = [
            K::CqError,
            K::QpFatal,
            K::QpRequestError,
            K::QpAccessError,
            K::CommEstablished,
            K::SqDrained,
            K::PathMigrated,
            K::PathMigrationError,
            K::DeviceFatal,
            K::PortActive,
            K::PortError,
            K::LidChange,
            K::PkeyChange,
            K::SmChange,
            K::SrqError,
            K::SrqLimitReached,
            K::QpLastWqeReached,
            K::ClientReregister,
            K::GidChange,
            K::WqFatal,
        ];
        let kind = KINDS.get(e.kind as usize).copied().unwrap_or(K::Other(e.kind));
        let (qp_num, port) = match e.element {
            El::Qp(n) => (Some(n), None),
            El::Port(p) => (None, Some(p)),
            _ => (None, None),
        };
        DeviceEvent { kind, qp_num, port }
    }
}

impl IbvContext {
    /// The device's next asynchronous event (`ibv_get_async_event`, then
    /// `ibv_ack_async_event`): port state changes, a QP or SRQ failing, the
    /// device failing. Blocks unless the fd ([`AsFd`](std::os::fd::AsFd))
    /// was made non-blocking. Every consumer of one device's contexts
    /// shares its events: read them in one place.
    ///
    /// # Errors
    /// [`Error::NoEvent`] when nothing is pending on a non-blocking fd;
    /// [`Error::Provider`] when `ibv_get_async_event` fails.
    pub fn next_event(&self) -> Result<DeviceEvent> {
        device_event(self.0.get_async_event(rpma_sys::gate::Bound::Never))
    }

    /// [`next_event`](Self::next_event), giving up after `timeout`
    /// (`Duration::MAX`: no limit), however many threads wait on the
    /// device: its fd is read by one waiter at a time, each within its own
    /// bound.
    ///
    /// # Errors
    /// As [`next_event`](Self::next_event); [`Error::NoEvent`] when
    /// `timeout` passes first.
    pub fn next_event_timeout(&self, timeout: std::time::Duration) -> Result<DeviceEvent> {
        device_event(self.0.get_async_event(rpma_sys::gate::Bound::after(timeout)))
    }

    /// The next event for an async waiter: never sleeps; `Pending` while
    /// another thread reads the fd (`cx` is woken when it lets go),
    /// [`Error::NoEvent`] when none is there now.
    #[cfg(feature = "tokio")]
    pub(crate) fn poll_event(&self, cx: &mut std::task::Context<'_>) -> std::task::Poll<Result<DeviceEvent>> {
        self.0.poll_async_event(cx).map(device_event)
    }
}

/// A device's async-event read as an event: none within the bound, or none
/// on a non-blocking fd, is [`Error::NoEvent`].
fn device_event(got: std::io::Result<Option<rpma_sys::device::AsyncEvent>>) -> Result<DeviceEvent> {
    match got {
        Ok(Some(e)) => Ok(DeviceEvent::from_sys(e)),
        Ok(None) => Err(Error::NoEvent),
        Err(e) if e.raw_os_error() == Some(libc::EAGAIN) => Err(Error::NoEvent),
        Err(e) => Err(Error::provider_raw("ibv_get_async_event", e)),
    }
}

/// The device context's asynchronous-event fd (`ibv_context.async_fd`):
/// readable when the device has an asynchronous event (port state, a QP or
/// SRQ error, device fatal).
impl std::os::fd::AsFd for IbvContext {
    fn as_fd(&self) -> std::os::fd::BorrowedFd<'_> {
        self.0.async_fd()
    }
}

impl std::os::fd::AsRawFd for IbvContext {
    fn as_raw_fd(&self) -> std::os::fd::RawFd {
        std::os::fd::AsRawFd::as_raw_fd(&std::os::fd::AsFd::as_fd(self))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_addresses_are_inval() {
        for a in ["", "1.2.3.4\0"] {
            assert_eq!(get_ibv_context(a, ContextType::Local).unwrap_err().code(), crate::error::RPMA_E_INVAL);
        }
        let e = get_ibv_context_timeout("1.2.3.4", ContextType::Remote, Duration::from_secs(1 << 40)).unwrap_err();
        assert!(matches!(e.detail(), Some(crate::error::Detail::TooLong { max, .. }) if *max == i32::MAX as u64));
    }
}
