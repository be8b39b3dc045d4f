//! Peer: a protection domain on a device, with the device's probed capabilities.

use crate::access::{Access, AccessTable, Usage};
use crate::device::IbvContext;
use crate::error::{Error, Result};
use crate::logging::{rpma_log, LogLevel};
use rpma_sys::device::{DeviceCaps, Transport};
use rpma_sys::pd::Pd;
use rpma_sys::qp::SendOps;
use std::sync::Arc;

/// What a peer's device can do, as probed by [`Peer::new`] through
/// `ibv_query_device_ex` (librpma's probe, plus the limits rpma validates
/// against), with the native operations confirmed by the installed
/// libibverbs (see [`native_flush`](Self::native_flush)).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[non_exhaustive]
pub struct Capabilities {
    /// On-Demand Paging for RC RDMA read and write.
    pub odp: bool,
    /// Native 8-byte RDMA ATOMIC WRITE (IBA 1.5): the device reports it and
    /// the installed libibverbs accepts a QP with `IBV_QP_EX_WITH_ATOMIC_WRITE`.
    pub native_atomic_write: bool,
    /// Native RDMA FLUSH, both global visibility and persistence (IBA 1.5):
    /// the device reports both and the installed libibverbs accepts a QP with
    /// `IBV_QP_EX_WITH_FLUSH` (rdma-core 45+). When the kernel has it and the
    /// library does not, rpma uses the emulated path, as it does on a device
    /// without it, and registers memory the same way (see
    /// [`Peer::usage_to_access`]).
    pub native_flush: bool,
    /// Type 1 memory windows.
    pub mw_type1: bool,
    /// Type 2 memory windows.
    pub mw_type2: bool,
    /// Whether the transport is iWARP (READ_DST regions then also need
    /// remote write access).
    pub iwarp: bool,
    /// Largest memory region the device registers, in bytes.
    pub max_mr_size: u64,
    /// Most memory regions the device registers (`max_mr`; 0: not
    /// reported).
    pub max_mr: u32,
    /// Deepest send or receive queue of a queue pair (`max_qp_wr`).
    pub max_qp_wr: u32,
    /// Most entries in a completion queue (`max_cqe`).
    pub max_cqe: u32,
    /// Deepest shared receive queue (`max_srq_wr`).
    pub max_srq_wr: u32,
    /// Most scatter/gather elements in a work request (`max_sge`; 0:
    /// not reported).
    pub max_sge: u32,
    /// Most scatter/gather elements in an RDMA READ (`max_sge_rd`; 0: not
    /// reported).
    pub max_sge_rd: u32,
    /// Remote atomics, 8-byte compare-and-swap and fetch-and-add
    /// ([`Conn::compare_and_swap`](crate::Conn::compare_and_swap),
    /// [`Conn::fetch_and_add`](crate::Conn::fetch_and_add)): the device's
    /// `atomic_cap` is not `IBV_ATOMIC_NONE`.
    pub atomics: bool,
}

impl Capabilities {
    /// `size` of `what` must not exceed the device's `max` (0: unknown, not
    /// checked), so sizes are refused before anything is allocated for them.
    pub(crate) fn check_size(what: &crate::error::Named, size: u32, max: u32, limit: &str) -> crate::Result<()> {
        if max != 0 && size > max {
            return Err(crate::Error::too_long(
                what.arg,
                size.into(),
                max.into(),
                format!("{what} {size} exceeds the device's {limit} {max}"),
            ));
        }
        Ok(())
    }

    /// The decision: a native operation is used only when the device
    /// reports it *and* the library accepts it (`lib`, probed only for what
    /// the device reports).
    fn from_device(c: &DeviceCaps, t: Transport, lib: SendOps) -> Capabilities {
        Capabilities {
            odp: c.odp,
            native_atomic_write: c.native_atomic_write && lib.atomic_write,
            native_flush: c.native_flush && lib.flush,
            mw_type1: c.mw_type1(),
            mw_type2: c.mw_type2(),
            iwarp: t == Transport::Iwarp,
            max_mr_size: c.max_mr_size,
            max_mr: c.max_mr,
            max_qp_wr: c.max_qp_wr,
            max_cqe: c.max_cqe,
            max_srq_wr: c.max_srq_wr,
            max_sge: c.max_sge,
            max_sge_rd: c.max_sge_rd,
            atomics: crate::device::AtomicCap::from_code(c.atomic_cap) != crate::device::AtomicCap::Unsupported,
        }
    }
}

struct PeerInner {
    pd: Pd,
    ctx: IbvContext,
    caps: Capabilities,
    /// `usage_to_access` for this device, as lookups.
    access: AccessTable,
    /// The largest length a registration may have: `max_mr_size`, or
    /// `u64::MAX` when the device reports none (0).
    mr_len_limit: u64,
    /// Set once `ibv_rereg_mr` answered EOPNOTSUPP: emulate from then on.
    no_native_rereg: std::sync::atomic::AtomicBool,
    /// Cleared by `set_usage_checks(false)`: operations then leave the
    /// regions' usages to the device, as C librpma does.
    usage_checks: std::sync::atomic::AtomicBool,
    /// The memory windows allocated on this protection domain, which the
    /// completion queues of this peer's connections tell of an invalidation
    /// the device reports (a receive's `IBV_WC_WITH_INV`).
    windows: Arc<crate::windows::Windows>,
}

/// A local RDMA peer (librpma's `rpma_peer`): a protection domain on one
/// device. Memory regions, endpoints and connections are created from it.
///
/// `Peer` is a cheap handle (`Clone` shares it); the protection domain lives
/// until the last handle and the last object made from it are gone, so it can
/// never be freed under a registered region.
///
/// ```no_run
/// use rpma::{device, Peer};
/// let ctx = device::get_ibv_context("192.0.2.1", device::ContextType::Local)?;
/// let peer = Peer::new(&ctx)?;
/// println!("{}: {:?}", peer.device_name(), peer.capabilities());
/// # Ok::<(), rpma::Error>(())
/// ```
///
/// # Thread safety
/// `Peer` is `Send + Sync`; registering memory from several threads at once
/// is safe (libibverbs serialises on the PD).
#[derive(Clone)]
pub struct Peer {
    inner: Arc<PeerInner>,
}

impl std::fmt::Debug for Peer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Peer").field("device", &self.device_name()).field("caps", &self.inner.caps).finish()
    }
}

impl Peer {
    /// Probes the device and allocates a protection domain on it
    /// (`rpma_peer_new`). When the device reports native atomic write or
    /// flush, a throw-away queue pair per operation asks the installed
    /// libibverbs whether it can post it.
    ///
    /// # Errors
    /// [`Error::Provider`] when the probe (`ibv_query_device_ex`) or
    /// `ibv_alloc_pd` fails; [`Error::NoMem`] when `ibv_alloc_pd` reports
    /// `ENOMEM`; [`Error::Unknown`] when it fails without errno.
    pub fn new(ctx: &IbvContext) -> Result<Peer> {
        let dev = ctx.0.query_caps().map_err(|e| Error::provider_raw("ibv_query_device_ex", e))?;
        let pd = Pd::alloc(&ctx.0).map_err(|e| Error::provider("ibv_alloc_pd", e))?;
        let lib = SendOps::probe(&pd, dev.native_atomic_write, dev.native_flush);
        let caps = Capabilities::from_device(&dev, ctx.0.transport(), lib);
        rpma_log!(
            LogLevel::Info,
            "peer on {}: odp={} native_atomic_write={} native_flush={} (device: {}/{}, libibverbs: {}/{})",
            ctx.device_name(),
            caps.odp,
            caps.native_atomic_write,
            caps.native_flush,
            dev.native_atomic_write,
            dev.native_flush,
            lib.atomic_write,
            lib.flush
        );
        let access = AccessTable::new(caps.iwarp, caps.native_flush);
        Ok(Peer {
            inner: Arc::new(PeerInner {
                pd,
                ctx: ctx.clone(),
                caps,
                access,
                mr_len_limit: if caps.max_mr_size == 0 { u64::MAX } else { caps.max_mr_size },
                no_native_rereg: Default::default(),
                usage_checks: std::sync::atomic::AtomicBool::new(true),
                windows: Default::default(),
            }),
        })
    }

    /// What the device can do, probed once when the peer was created
    /// (native atomic write and flush, On-Demand Paging, queue and
    /// registration limits): to choose a configuration or explain a
    /// refusal before posting.
    pub fn capabilities(&self) -> Capabilities {
        self.inner.caps
    }

    /// The largest length a registration may have (`max_mr_size`; no limit
    /// when the device reports none).
    #[inline]
    pub(crate) fn mr_len_limit(&self) -> u64 {
        self.inner.mr_len_limit
    }

    /// Whether operations on this peer's connections check that each region
    /// was registered for its use (on by default).
    ///
    /// The check is of intentions, not of safety: a region registered for
    /// `READ_DST | WRITE_SRC` has the local-write access a receive needs,
    /// and the device would complete a receive into it. rpma refuses it
    /// anyway ([`Error::Inval`] naming the usage to
    /// add), so a region's usages say what it is for. Turned off, an
    /// operation is posted whatever the usages say, as C librpma does, and
    /// the device refuses what the regions' access does not grant (the
    /// completion fails: `LOC_PROT_ERR`, `REM_ACCESS_ERR`); bounds, flags
    /// and the flush-type checks librpma makes still apply. rpma's C ABI
    /// turns it off on every peer it creates.
    ///
    /// ```no_run
    /// # #[allow(dead_code)]
    /// # fn f(peer: &rpma::Peer) {
    /// peer.set_usage_checks(false); // librpma's behaviour
    /// assert!(!peer.usage_checks());
    /// # }
    /// ```
    pub fn set_usage_checks(&self, on: bool) {
        self.inner.usage_checks.store(on, std::sync::atomic::Ordering::Relaxed)
    }

    /// Whether operations check the regions' usages
    /// ([`set_usage_checks`](Self::set_usage_checks)).
    pub fn usage_checks(&self) -> bool {
        self.inner.usage_checks.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Whether the device supports On-Demand Paging (then registrations that
    /// the device cannot pin are retried with ODP).
    pub fn is_odp_capable(&self) -> bool {
        self.inner.caps.odp
    }

    /// Whether native atomic write is used for `atomic_write`.
    pub fn is_native_atomic_write_supported(&self) -> bool {
        self.inner.caps.native_atomic_write
    }

    /// Whether native flush is used for `flush` and in the access translation.
    pub fn is_native_flush_supported(&self) -> bool {
        self.inner.caps.native_flush
    }

    /// The device's kernel name (`rxe0`, `mlx5_0`): which device an
    /// address resolved to, for logs and reports.
    pub fn device_name(&self) -> String {
        self.inner.ctx.device_name()
    }

    /// The device context: to wait for the device's asynchronous events
    /// ([`IbvContext::next_event`], `aio::AsyncDevice`), or to hand to raw
    /// verbs code.
    pub fn context(&self) -> &IbvContext {
        &self.inner.ctx
    }

    /// The windows allocated on this peer.
    pub(crate) fn windows(&self) -> &Arc<crate::windows::Windows> {
        &self.inner.windows
    }

    /// The `IBV_ACCESS_*` flags a region with `usage` is registered with on
    /// this peer (librpma's `rpma_peer_usage2access`): the iWARP and
    /// native-flush variants depend on the device.
    pub fn usage_to_access(&self, usage: Usage) -> Access {
        self.inner.access.get(usage)
    }

    /// Whether `other` is this peer or a clone of it (same protection domain).
    #[inline]
    pub fn same_pd(&self, other: &Peer) -> bool {
        // The same peer (a clone) is the common case: one compare.
        Arc::ptr_eq(&self.inner, &other.inner) || self.inner.pd.same_as(&other.inner.pd)
    }

    pub(crate) fn native_rereg_missing(&self) -> bool {
        self.inner.no_native_rereg.load(std::sync::atomic::Ordering::Relaxed)
    }

    pub(crate) fn set_native_rereg_missing(&self) {
        self.inner.no_native_rereg.store(true, std::sync::atomic::Ordering::Relaxed)
    }

    pub(crate) fn pd(&self) -> &Pd {
        &self.inner.pd
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::access::usage_to_access;
    use rpma_sys::qp::QP_EX_WITH_FLUSH;

    /// {old/new libibverbs} x {device with/without native flush and atomic
    /// write}: the capability, the access translation and the QP's send ops
    /// agree in every combination.
    #[test]
    fn native_ops_need_the_device_and_the_library() {
        for bits in 0..16u8 {
            let (dev_aw, dev_fl, lib_aw, lib_fl) = (bits & 1 != 0, bits & 2 != 0, bits & 4 != 0, bits & 8 != 0);
            let dev = DeviceCaps { native_atomic_write: dev_aw, native_flush: dev_fl, ..Default::default() };
            let lib = SendOps { atomic_write: lib_aw, flush: lib_fl };
            let caps = Capabilities::from_device(&dev, Transport::Ib, lib);
            let case = format!("device aw={dev_aw} flush={dev_fl}, libibverbs aw={lib_aw} flush={lib_fl}");
            assert_eq!(caps.native_atomic_write, dev_aw && lib_aw, "{case}");
            assert_eq!(caps.native_flush, dev_fl && lib_fl, "{case}");
            let access = usage_to_access(Usage::FLUSH_TYPE_VISIBILITY, caps.iwarp, caps.native_flush);
            if caps.native_flush {
                assert_eq!(access, Access::FLUSH_GLOBAL, "{case}: native flush needs FLUSH_GLOBAL");
            } else {
                assert_eq!(access, Access::REMOTE_READ, "{case}: the emulated flush reads");
            }
            let ops = SendOps { atomic_write: caps.native_atomic_write, flush: caps.native_flush }.qp_flags();
            assert_eq!(ops & QP_EX_WITH_FLUSH != 0, caps.native_flush, "{case}: the QP asks for what is used");
        }
    }
}
