//! Device list, device context and the capability probe.

use crate::ffi;
use crate::{from_errno_ret, last_error};
use std::ffi::CStr;
use std::io;
use std::sync::Arc;

/// `IB_UVERBS_DEVICE_FLUSH_GLOBAL` (kernel uapi `rdma/ib_user_verbs.h`, 6.2+;
/// not in the rdma-core 44 headers that `rdma-sys` binds).
pub const IB_UVERBS_DEVICE_FLUSH_GLOBAL: u64 = 1 << 38;
/// `IB_UVERBS_DEVICE_FLUSH_PERSISTENT` (kernel uapi, 6.2+).
pub const IB_UVERBS_DEVICE_FLUSH_PERSISTENT: u64 = 1 << 39;
/// `IB_UVERBS_DEVICE_ATOMIC_WRITE` (kernel uapi, 6.2+).
pub const IB_UVERBS_DEVICE_ATOMIC_WRITE: u64 = 1 << 40;
/// `IB_UVERBS_DEVICE_MEM_WINDOW_TYPE_2B` / `IBV_DEVICE_MEM_WINDOW_TYPE_2B`.
pub const IB_UVERBS_DEVICE_MEM_WINDOW_TYPE_2B: u64 = 1 << 24;
/// `IBV_DEVICE_MEM_WINDOW` (type 1 windows).
pub const IB_UVERBS_DEVICE_MEM_WINDOW: u64 = 1 << 17;

/// The list of RDMA devices (`ibv_get_device_list`), freed on drop.
pub struct DeviceList {
    list: *mut *mut ffi::ibv_device,
    len: usize,
}

impl DeviceList {
    /// Lists the RDMA devices of this host.
    ///
    /// # Errors
    /// The errno of `ibv_get_device_list` (e.g. `ENOSYS` without kernel support).
    pub fn new() -> io::Result<Self> {
        let mut n: i32 = 0;
        // SAFETY: `n` is a valid out-pointer; the returned array is owned by us
        // until ibv_free_device_list (in Drop).
        let list = unsafe { ffi::ibv_get_device_list(&mut n) };
        if list.is_null() {
            return Err(last_error("ibv_get_device_list"));
        }
        Ok(DeviceList { list, len: n.max(0) as usize })
    }

    /// Number of devices.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the host has no device.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Kernel name of device `i` (e.g. `rxe0`), `None` when out of range.
    pub fn name(&self, i: usize) -> Option<String> {
        if i >= self.len {
            return None;
        }
        // SAFETY: i < len, so the entry is a valid ibv_device pointer of the
        // live list; ibv_get_device_name returns a NUL-terminated string owned
        // by the device.
        unsafe {
            let d = *self.list.add(i);
            let p = ffi::ibv_get_device_name(d);
            (!p.is_null()).then(|| CStr::from_ptr(p).to_string_lossy().into_owned())
        }
    }

    /// Opens device `i` (`ibv_open_device`). The context stays valid after the
    /// list is dropped.
    ///
    /// # Errors
    /// `EINVAL` for an index out of range; the errno of `ibv_open_device`.
    pub fn open(&self, i: usize) -> io::Result<Context> {
        if i >= self.len {
            return Err(io::Error::from_raw_os_error(libc::EINVAL));
        }
        // SAFETY: valid device pointer of the live list (i < len).
        let ctx = unsafe { ffi::ibv_open_device(*self.list.add(i)) };
        if ctx.is_null() {
            return Err(last_error("ibv_open_device"));
        }
        Ok(Context { inner: Arc::new(ContextInner { ctx, owner: Owner::Opened, gate: Default::default() }) })
    }
}

impl Drop for DeviceList {
    fn drop(&mut self) {
        // SAFETY: `list` came from ibv_get_device_list and is freed once.
        unsafe { ffi::ibv_free_device_list(self.list) }
    }
}

/// Transport of a device (`ibv_transport_type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transport {
    /// InfiniBand, RoCE and Soft-RoCE.
    Ib,
    /// iWARP (READ is carried out as a WRITE in the other direction).
    Iwarp,
    /// Any other transport.
    Other(i32),
}

/// The capabilities librpma probes through `ibv_query_device_ex`, plus the
/// limits rpma validates against and the identity `ibv_devinfo` prints.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct DeviceCaps {
    /// On-demand paging usable for RC RDMA read and write
    /// (`IBV_ODP_SUPPORT` and RC caps with both `WRITE` and `READ`).
    pub odp: bool,
    /// Native `IBV_WR_ATOMIC_WRITE` (`IB_UVERBS_DEVICE_ATOMIC_WRITE`).
    pub native_atomic_write: bool,
    /// Native RDMA FLUSH to both global visibility and persistence.
    pub native_flush: bool,
    /// `device_cap_flags_ex` as reported.
    pub device_cap_flags: u64,
    /// `max_mr_size`.
    pub max_mr_size: u64,
    /// `max_mr`.
    pub max_mr: u32,
    /// `max_mw`.
    pub max_mw: u32,
    /// `max_qp_wr`.
    pub max_qp_wr: u32,
    /// `max_cqe`.
    pub max_cqe: u32,
    /// `max_srq_wr`.
    pub max_srq_wr: u32,
    /// `max_sge`.
    pub max_sge: u32,
    /// `max_sge_rd`: SGEs of an RDMA READ.
    pub max_sge_rd: u32,
    /// `atomic_cap` (`IBV_ATOMIC_NONE` 0, `IBV_ATOMIC_HCA` 1,
    /// `IBV_ATOMIC_GLOB` 2): 8-byte compare-and-swap and fetch-and-add
    /// are supported unless it is `IBV_ATOMIC_NONE`.
    pub atomic_cap: u32,
    /// `fw_ver`: the firmware version, as the provider writes it.
    pub fw_ver: String,
    /// `vendor_id` (the IEEE OUI).
    pub vendor_id: u32,
    /// `vendor_part_id`.
    pub vendor_part_id: u32,
    /// `hw_ver`.
    pub hw_ver: u32,
    /// `max_qp_rd_atom`: RDMA READs and atomics one QP answers at once.
    pub max_qp_rd_atom: u32,
    /// `max_qp_init_rd_atom`: RDMA READs and atomics one QP issues at once.
    pub max_qp_init_rd_atom: u32,
    /// `phys_port_cnt`: the ports, numbered from 1.
    pub phys_port_cnt: u8,
}

/// What `ibv_query_port` reports of one port, beyond what sysfs lists.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PortAttrs {
    /// `active_mtu` in bytes (`None`: a code rdma-core does not name).
    pub active_mtu: Option<u32>,
    /// `max_mtu` in bytes (`None`: a code rdma-core does not name).
    pub max_mtu: Option<u32>,
    /// `lid`: the port's local identifier (0 on RoCE and iWARP).
    pub lid: u16,
    /// `sm_lid`: the LID of the subnet manager (0 on RoCE and iWARP).
    pub sm_lid: u16,
}

/// The bytes of an `enum ibv_mtu` code (`IBV_MTU_256` .. `IBV_MTU_4096`).
// bindgen's enum representations differ between rdma-core versions.
#[allow(clippy::unnecessary_cast)]
pub fn mtu_bytes(code: u32) -> Option<u32> {
    [ffi::IBV_MTU_256, ffi::IBV_MTU_512, ffi::IBV_MTU_1024, ffi::IBV_MTU_2048, ffi::IBV_MTU_4096]
        .iter()
        .position(|&c| c as u32 == code)
        .map(|i| 256 << i)
}

impl DeviceCaps {
    /// Whether type 1 memory windows are supported.
    pub fn mw_type1(&self) -> bool {
        self.device_cap_flags & IB_UVERBS_DEVICE_MEM_WINDOW != 0
    }
    /// Whether type 2 (2B) memory windows are supported.
    pub fn mw_type2(&self) -> bool {
        self.device_cap_flags & IB_UVERBS_DEVICE_MEM_WINDOW_TYPE_2B != 0
    }
}

enum Owner {
    /// Opened with `ibv_open_device`: closed on drop.
    Opened,
    /// Opened by someone else (librdmacm); the keeper (a CM ID) holds that
    /// owner's reference on the device until this context is gone. Typed
    /// as `Any` so the device layer does not name the layers above it.
    Kept(#[allow(dead_code)] Box<dyn std::any::Any + Send + Sync>),
    /// Lent by a C caller (the C ABI's `rpma_peer_new`): never closed here.
    Borrowed,
}

struct ContextInner {
    ctx: *mut ffi::ibv_context,
    owner: Owner,
    /// One reader at a time for the async-event fd.
    gate: crate::gate::Gate,
}

// SAFETY: ibv_context is safe to use from any thread (libibverbs serialises
// internally); the pointer is only destroyed in Drop.
unsafe impl Send for ContextInner {}
// SAFETY: as above, the verbs calls made through a shared context are thread-safe.
unsafe impl Sync for ContextInner {}

impl Drop for ContextInner {
    fn drop(&mut self) {
        if let Owner::Opened = self.owner {
            // SAFETY: opened by ibv_open_device, closed once; every child
            // handle holds an Arc of this context, so none is left.
            let rc = unsafe { ffi::ibv_close_device(self.ctx) };
            if rc != 0 {
                crate::log_hook::sys_log!(Error, "ibv_close_device: {}", io::Error::last_os_error());
            }
        }
    }
}

/// An asynchronous event of a device, as [`Context::get_async_event`]
/// read it (and acknowledged it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AsyncEvent {
    /// The `enum ibv_event_type` value.
    pub kind: u32,
    /// What it is about.
    pub element: AsyncElement,
}

/// What an asynchronous event is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AsyncElement {
    /// A QP, by number.
    Qp(u32),
    /// A port, by number.
    Port(u8),
    /// A CQ, by its address (compare with [`crate::cq::Cq::id`]).
    Cq(usize),
    /// An SRQ, by its address.
    Srq(usize),
    /// The device itself.
    Device,
}

/// A device context (`struct ibv_context`), shared by reference counting.
#[derive(Clone)]
pub struct Context {
    inner: Arc<ContextInner>,
}

impl std::fmt::Debug for Context {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Context").field("device", &self.device_name()).finish()
    }
}

impl Context {
    /// A context opened by another owner (librdmacm for a CM ID), kept open
    /// by `keeper`, which lives as long as this context and its clones.
    ///
    /// # Safety
    /// `ctx` must be a valid `ibv_context` that stays open at least as long
    /// as `keeper` is alive, and must not be closed by anyone else meanwhile.
    pub(crate) unsafe fn kept_by(ctx: *mut ffi::ibv_context, keeper: Box<dyn std::any::Any + Send + Sync>) -> Self {
        Context { inner: Arc::new(ContextInner { ctx, owner: Owner::Kept(keeper), gate: Default::default() }) }
    }

    /// A context a C caller lends (`struct ibv_context *` given to the C
    /// ABI's `rpma_peer_new`): used, never closed.
    ///
    /// # Safety
    /// `ctx` must point to an open `ibv_context` that stays open as long as
    /// the returned context or any handle created from it (a PD, a CQ, ...)
    /// is alive: librpma's own contract for the context it is given.
    pub unsafe fn borrowed(ctx: *mut std::ffi::c_void) -> Self {
        Context { inner: Arc::new(ContextInner { ctx: ctx.cast(), owner: Owner::Borrowed, gate: Default::default() }) }
    }

    /// The context's address (what C code knows as `struct ibv_context *`).
    pub fn as_raw(&self) -> *mut std::ffi::c_void {
        self.inner.ctx.cast()
    }

    /// The raw pointer, for the other handles of this crate.
    pub(crate) fn as_ptr(&self) -> *mut ffi::ibv_context {
        self.inner.ctx
    }

    /// The context's asynchronous-event file descriptor (`async_fd`):
    /// readable when `ibv_get_async_event` has an event.
    pub fn async_fd(&self) -> std::os::fd::BorrowedFd<'_> {
        // SAFETY: live context; the fd is the context's and closes with it,
        // which this handle keeps open.
        unsafe { std::os::fd::BorrowedFd::borrow_raw((*self.inner.ctx).async_fd) }
    }

    /// Takes the next asynchronous event of the device
    /// (`ibv_get_async_event`) within `bound`, through the fd's
    /// [`Gate`](crate::gate::Gate) (one reader at a time), acknowledged at
    /// once (`ibv_ack_async_event`) after what it names is read; `None` when
    /// none came in time.
    ///
    /// # Errors
    /// The errno of `poll` or `ibv_get_async_event` (`EAGAIN` when nothing
    /// is pending on a non-blocking fd, [`Bound::Never`](crate::gate::Bound)).
    pub fn get_async_event(&self, bound: crate::gate::Bound) -> io::Result<Option<AsyncEvent>> {
        self.inner.gate.read(&self.async_fd(), bound, || self.next_async_event())
    }

    /// [`get_async_event`](Self::get_async_event) for an async reader:
    /// `Pending` while another reader holds the fd (`cx` is woken when it
    /// lets go), else the event if one is there now.
    ///
    /// # Errors
    /// As [`get_async_event`](Self::get_async_event).
    pub fn poll_async_event(&self, cx: &mut std::task::Context<'_>) -> std::task::Poll<io::Result<Option<AsyncEvent>>> {
        self.inner.gate.poll_read(&self.async_fd(), cx, || self.next_async_event())
    }

    fn next_async_event(&self) -> io::Result<AsyncEvent> {
        use ffi::ibv_event_type as t;
        let mut ev = std::mem::MaybeUninit::<ffi::ibv_async_event>::uninit();
        // SAFETY: live context; `ev` is written on success.
        let rc = unsafe { ffi::ibv_get_async_event(self.inner.ctx, ev.as_mut_ptr()) };
        if rc != 0 {
            return Err(last_error("ibv_get_async_event"));
        }
        // SAFETY: initialised by the successful call above.
        let mut ev = unsafe { ev.assume_init() };
        let kind = ev.event_type;
        // The element is live until the event is acknowledged (a destroy of
        // its QP/SRQ/CQ waits for that), so it is read first.
        // SAFETY: the union member that `event_type` selects (verbs.h).
        let element = unsafe {
            match kind {
                t::IBV_EVENT_QP_FATAL
                | t::IBV_EVENT_QP_REQ_ERR
                | t::IBV_EVENT_QP_ACCESS_ERR
                | t::IBV_EVENT_COMM_EST
                | t::IBV_EVENT_SQ_DRAINED
                | t::IBV_EVENT_PATH_MIG
                | t::IBV_EVENT_PATH_MIG_ERR
                | t::IBV_EVENT_QP_LAST_WQE_REACHED => {
                    let qp = ev.element.qp;
                    AsyncElement::Qp(if qp.is_null() { 0 } else { (*qp).qp_num })
                }
                t::IBV_EVENT_PORT_ACTIVE
                | t::IBV_EVENT_PORT_ERR
                | t::IBV_EVENT_LID_CHANGE
                | t::IBV_EVENT_PKEY_CHANGE
                | t::IBV_EVENT_SM_CHANGE
                | t::IBV_EVENT_CLIENT_REREGISTER
                | t::IBV_EVENT_GID_CHANGE => AsyncElement::Port(u8::try_from(ev.element.port_num).unwrap_or(0)),
                t::IBV_EVENT_CQ_ERR => AsyncElement::Cq(ev.element.cq as usize),
                t::IBV_EVENT_SRQ_ERR | t::IBV_EVENT_SRQ_LIMIT_REACHED => AsyncElement::Srq(ev.element.srq as usize),
                _ => AsyncElement::Device,
            }
        };
        // SAFETY: the event got above, acknowledged once.
        unsafe { ffi::ibv_ack_async_event(&mut ev) };
        Ok(AsyncEvent { kind, element })
    }

    /// Whether two handles refer to the same `ibv_context`.
    pub fn same_as(&self, other: &Context) -> bool {
        self.inner.ctx == other.inner.ctx
    }

    /// Whether this context is the one `ctx` points to.
    pub(crate) fn is(&self, ctx: *mut ffi::ibv_context) -> bool {
        self.inner.ctx == ctx
    }

    /// The device's kernel name (e.g. `rxe0`).
    pub fn device_name(&self) -> String {
        // SAFETY: a live context has a valid device pointer whose name is a
        // NUL-terminated string owned by libibverbs.
        unsafe {
            let p = ffi::ibv_get_device_name((*self.inner.ctx).device);
            if p.is_null() {
                String::new()
            } else {
                CStr::from_ptr(p).to_string_lossy().into_owned()
            }
        }
    }

    /// The device's transport.
    pub fn transport(&self) -> Transport {
        // SAFETY: a live context has a valid device pointer.
        let t = unsafe { (*(*self.inner.ctx).device).transport_type };
        match t {
            ffi::ibv_transport_type::IBV_TRANSPORT_IB => Transport::Ib,
            ffi::ibv_transport_type::IBV_TRANSPORT_IWARP => Transport::Iwarp,
            other => Transport::Other(other),
        }
    }

    /// Probes the device with `ibv_query_device_ex`, as librpma's
    /// `rpma_peer_new` does.
    ///
    /// # Errors
    /// The errno of `ibv_query_device_ex`.
    pub fn query_caps(&self) -> io::Result<DeviceCaps> {
        // SAFETY: ibv_device_attr_ex is plain data for which all-zero is valid.
        let mut attr: ffi::ibv_device_attr_ex = unsafe { std::mem::zeroed() };
        // SAFETY: live context, valid out-pointer, NULL input is allowed.
        let rc = unsafe { ffi::ibv_query_device_ex(self.inner.ctx, &mut attr) };
        from_errno_ret(rc, "ibv_query_device_ex")?;
        Ok(caps_from_attr(&attr))
    }

    /// Queries port `port` (from 1) with `ibv_query_port`.
    ///
    /// # Errors
    /// The errno of `ibv_query_port` (`EINVAL` for a port the device lacks).
    pub fn query_port(&self, port: u8) -> io::Result<PortAttrs> {
        // SAFETY: ibv_port_attr is plain data for which all-zero is valid.
        let mut attr: ffi::ibv_port_attr = unsafe { std::mem::zeroed() };
        // SAFETY: live context, valid out-pointer.
        let rc = unsafe { ffi::ibv_query_port(self.inner.ctx, port, &mut attr) };
        from_errno_ret(rc, "ibv_query_port")?;
        Ok(port_from_attr(&attr))
    }
}

// bindgen's enum representations differ between rdma-core versions.
#[allow(clippy::unnecessary_cast)]
fn port_from_attr(attr: &ffi::ibv_port_attr) -> PortAttrs {
    PortAttrs {
        active_mtu: mtu_bytes(attr.active_mtu as u32),
        max_mtu: mtu_bytes(attr.max_mtu as u32),
        lid: attr.lid,
        sm_lid: attr.sm_lid,
    }
}

/// `fw_ver`: the text up to its NUL (all of it when there is none).
fn fw_text(raw: &[std::os::raw::c_char]) -> String {
    let bytes: Vec<u8> = raw.iter().map(|&c| c as u8).take_while(|&b| b != 0).collect();
    String::from_utf8_lossy(&bytes).into_owned()
}

// bindgen's enum representations differ between rdma-core versions.
#[allow(clippy::unnecessary_cast)]
fn caps_from_attr(attr: &ffi::ibv_device_attr_ex) -> DeviceCaps {
    let general = ffi::ibv_odp_general_caps::IBV_ODP_SUPPORT.0 as u64;
    let rc_rw = (ffi::ibv_odp_transport_cap_bits::IBV_ODP_SUPPORT_WRITE.0
        | ffi::ibv_odp_transport_cap_bits::IBV_ODP_SUPPORT_READ.0) as u32;
    let odp =
        attr.odp_caps.general_caps & general != 0 && attr.odp_caps.per_transport_caps.rc_odp_caps & rc_rw == rc_rw;
    let flags = attr.device_cap_flags_ex | attr.orig_attr.device_cap_flags as u64;
    let o = &attr.orig_attr;
    DeviceCaps {
        odp,
        native_atomic_write: flags & IB_UVERBS_DEVICE_ATOMIC_WRITE != 0,
        native_flush: flags & IB_UVERBS_DEVICE_FLUSH_GLOBAL != 0 && flags & IB_UVERBS_DEVICE_FLUSH_PERSISTENT != 0,
        device_cap_flags: flags,
        max_mr_size: o.max_mr_size,
        max_mr: o.max_mr.max(0) as u32,
        max_mw: o.max_mw.max(0) as u32,
        max_qp_wr: o.max_qp_wr.max(0) as u32,
        max_cqe: o.max_cqe.max(0) as u32,
        max_srq_wr: o.max_srq_wr.max(0) as u32,
        max_sge: o.max_sge.max(0) as u32,
        max_sge_rd: o.max_sge_rd.max(0) as u32,
        atomic_cap: o.atomic_cap as u32,
        fw_ver: fw_text(&o.fw_ver),
        vendor_id: o.vendor_id,
        vendor_part_id: o.vendor_part_id,
        hw_ver: o.hw_ver,
        max_qp_rd_atom: o.max_qp_rd_atom.max(0) as u32,
        max_qp_init_rd_atom: o.max_qp_init_rd_atom.max(0) as u32,
        phys_port_cnt: o.phys_port_cnt,
    }
}

impl std::fmt::Debug for DeviceList {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries((0..self.len).filter_map(|i| self.name(i))).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attr(general: u64, rc: u32, flags_ex: u64) -> ffi::ibv_device_attr_ex {
        // SAFETY: plain data, all-zero is valid.
        let mut a: ffi::ibv_device_attr_ex = unsafe { std::mem::zeroed() };
        a.odp_caps.general_caps = general;
        a.odp_caps.per_transport_caps.rc_odp_caps = rc;
        a.device_cap_flags_ex = flags_ex;
        a
    }

    #[test]
    fn probe_mirrors_librpma() {
        assert_eq!(caps_from_attr(&attr(0, 0, 0)), DeviceCaps::default());
        assert!(caps_from_attr(&attr(1, 4 | 8, 0)).odp);
        assert!(!caps_from_attr(&attr(1, 4, 0)).odp, "RC read is required too");
        assert!(!caps_from_attr(&attr(0, 4 | 8, 0)).odp, "IBV_ODP_SUPPORT is required");
        assert!(caps_from_attr(&attr(0, 0, 1 << 40)).native_atomic_write);
        assert!(!caps_from_attr(&attr(0, 0, 1 << 38)).native_flush, "both flush types are required");
        assert!(caps_from_attr(&attr(0, 0, (1 << 38) | (1 << 39))).native_flush);
    }

    #[test]
    fn identity_and_port_attributes_convert() {
        let mut a = attr(0, 0, 0);
        for (d, s) in a.orig_attr.fw_ver.iter_mut().zip(b"20.31.1014\0junk") {
            *d = *s as std::os::raw::c_char;
        }
        a.orig_attr.max_qp_rd_atom = -1;
        a.orig_attr.max_qp_init_rd_atom = 16;
        let c = caps_from_attr(&a);
        assert_eq!((c.fw_ver.as_str(), c.max_qp_rd_atom, c.max_qp_init_rd_atom), ("20.31.1014", 0, 16));
        // A firmware text that fills the array has no NUL: all of it is kept.
        a.orig_attr.fw_ver = [b'9' as std::os::raw::c_char; 64];
        assert_eq!(caps_from_attr(&a).fw_ver.len(), 64);
        let mtus: Vec<_> = (0..7).map(mtu_bytes).collect();
        assert_eq!(mtus, [None, Some(256), Some(512), Some(1024), Some(2048), Some(4096), None]);
        // SAFETY: plain data, all-zero is valid.
        let mut p: ffi::ibv_port_attr = unsafe { std::mem::zeroed() };
        p.active_mtu = ffi::IBV_MTU_1024;
        p.max_mtu = ffi::IBV_MTU_4096;
        p.lid = 7;
        p.sm_lid = 1;
        let want = PortAttrs { active_mtu: Some(1024), max_mtu: Some(4096), lid: 7, sm_lid: 1 };
        assert_eq!(port_from_attr(&p), want);
    }
}
