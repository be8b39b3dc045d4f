//! Queue pair and its extended work-request interface (`ibv_qp_ex`):
//! `ibv_wr_atomic_write` and `ibv_wr_flush`, used only on a QP the installed
//! libibverbs accepted with those send ops (so a member newer than the
//! library, like `wr_flush` under rdma-core 44, is never read).

use crate::cq::Cq;
use crate::ffi;
use crate::pd::Pd;
use crate::srq::Srq;
use crate::{from_errno_ret, last_error};
use std::io;

use ffi::ibv_qp_create_send_ops_flags as send_ops;

/// `IBV_QP_EX_WITH_ATOMIC_WRITE`.
pub const QP_EX_WITH_ATOMIC_WRITE: u64 = send_ops::IBV_QP_EX_WITH_ATOMIC_WRITE.0 as u64;
/// `IBV_QP_EX_WITH_FLUSH` (rdma-core 45+; older libraries refuse it).
pub const QP_EX_WITH_FLUSH: u64 = send_ops::IBV_QP_EX_WITH_FLUSH.0 as u64;
/// `IBV_QP_EX_WITH_RDMA_WRITE`.
pub const QP_EX_WITH_RDMA_WRITE: u64 = send_ops::IBV_QP_EX_WITH_RDMA_WRITE.0 as u64;
/// `IBV_QP_EX_WITH_RDMA_READ`.
pub const QP_EX_WITH_RDMA_READ: u64 = send_ops::IBV_QP_EX_WITH_RDMA_READ.0 as u64;
/// `IBV_QP_EX_WITH_SEND`.
pub const QP_EX_WITH_SEND: u64 = send_ops::IBV_QP_EX_WITH_SEND.0 as u64;
/// `IBV_QP_EX_WITH_BIND_MW`.
pub const QP_EX_WITH_BIND_MW: u64 = send_ops::IBV_QP_EX_WITH_BIND_MW.0 as u64;
/// `IBV_QP_EX_WITH_LOCAL_INV`.
pub const QP_EX_WITH_LOCAL_INV: u64 = send_ops::IBV_QP_EX_WITH_LOCAL_INV.0 as u64;

/// `IBV_FLUSH_GLOBAL`: flush to global visibility.
pub const FLUSH_GLOBAL: u8 = 1;
/// `IBV_FLUSH_PERSISTENT`: flush to persistence.
pub const FLUSH_PERSISTENT: u8 = 2;
/// `IBV_FLUSH_RANGE`: flush the given range only.
pub const FLUSH_RANGE: u8 = 0;

/// The native IBA 1.5 operations the installed libibverbs and the device's
/// provider accept on an RC QP. The device's capability bits alone do not
/// say this: a kernel with RDMA FLUSH under an older libibverbs (e.g.
/// Debian 12's rdma-core 44 with a 6.12 kernel) reports the capability,
/// yet the library refuses a QP with `IBV_QP_EX_WITH_FLUSH`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SendOps {
    /// `ibv_wr_atomic_write` is available.
    pub atomic_write: bool,
    /// `ibv_wr_flush` is available.
    pub flush: bool,
}

impl SendOps {
    /// Asks the library: for each operation wanted, creates a throw-away RC
    /// QP (one-entry CQ and queues) on `pd` with that send op and checks
    /// the provider filled in the operation. An operation not wanted, or
    /// refused (any error), is reported unavailable.
    pub fn probe(pd: &Pd, atomic_write: bool, flush: bool) -> SendOps {
        let accepts = |op: u64, has: for<'a, 'q> fn(&'a QpEx<'q>) -> bool| -> bool {
            let cq = match Cq::new(pd.context(), 1, None) {
                Ok(cq) => cq,
                Err(e) => {
                    crate::log_hook::sys_log!(Debug, "send-op probe: ibv_create_cq: {e}");
                    return false;
                }
            };
            let init = QpInit {
                send_cq: &cq,
                recv_cq: &cq,
                srq: None,
                max_send_wr: 1,
                max_recv_wr: 1,
                max_send_sge: 1,
                max_recv_sge: 1,
                max_inline_data: 0,
                send_ops_flags: op | QP_EX_WITH_RDMA_WRITE | QP_EX_WITH_RDMA_READ,
            };
            match Qp::new(pd, &init) {
                Ok(qp) => qp.ex().is_some_and(|ex| has(&ex)),
                Err(e) => {
                    crate::log_hook::sys_log!(Debug, "send-op probe: ibv_create_qp_ex(send_ops_flags {op:#x}): {e}");
                    false
                }
            }
        };
        SendOps {
            atomic_write: atomic_write && accepts(QP_EX_WITH_ATOMIC_WRITE, |ex: &QpEx<'_>| ex.has_atomic_write()),
            flush: flush && accepts(QP_EX_WITH_FLUSH, |ex: &QpEx<'_>| ex.has_flush()),
        }
    }

    /// The `send_ops_flags` a connection's QP asks for: the native
    /// operations plus the RDMA write and read the extended interface then
    /// also carries; 0 (the plain interface) when there is none.
    pub fn qp_flags(self) -> u64 {
        let mut ops = 0;
        if self.atomic_write {
            ops |= QP_EX_WITH_ATOMIC_WRITE;
        }
        if self.flush {
            ops |= QP_EX_WITH_FLUSH;
        }
        if ops != 0 {
            ops |= QP_EX_WITH_RDMA_WRITE | QP_EX_WITH_RDMA_READ;
        }
        ops
    }
}

/// What a QP's extended interface carries, one bit per builder and setter:
/// an operation is carried when the QP was created with its
/// `IBV_QP_EX_WITH_*` flag and the provider filled in its builder, and the
/// setter its local memory needs. Read from the provider's members once,
/// when the QP is created (where providers fill them in, never to change
/// them), so asking about a request costs a few instructions.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Carried(pub(crate) u16);

impl Carried {
    pub(crate) const SGE: u16 = 1 << 0;
    pub(crate) const INLINE: u16 = 1 << 1;
    pub(crate) const SGE_LIST: u16 = 1 << 2;
    pub(crate) const WRITE: u16 = 1 << 3;
    pub(crate) const WRITE_IMM: u16 = 1 << 4;
    pub(crate) const READ: u16 = 1 << 5;
    pub(crate) const SEND: u16 = 1 << 6;
    pub(crate) const SEND_IMM: u16 = 1 << 7;
    pub(crate) const SEND_INV: u16 = 1 << 8;
    pub(crate) const CMP_SWP: u16 = 1 << 9;
    pub(crate) const FETCH_ADD: u16 = 1 << 10;
    pub(crate) const ATOMIC_WRITE: u16 = 1 << 11;
    pub(crate) const FLUSH: u16 = 1 << 12;

    /// What the extended interface `q`, of a QP created with the
    /// `send_ops_flags` `ops`, carries.
    ///
    /// # Safety
    /// `q` is the live `ibv_qp_ex` of a QP created with `ops` (the
    /// library then has the members of those operations).
    pub(crate) unsafe fn of(q: *const ffi::ibv_qp_ex, ops: u64) -> Carried {
        let has = |flag: u64| ops & flag != 0;
        // SAFETY: the caller's live qp_ex; a builder is read only for an
        // operation the QP was created with.
        let q = unsafe { &*q };
        let bits = [
            (q.wr_set_sge.is_some(), Self::SGE),
            (q.wr_set_inline_data.is_some(), Self::INLINE),
            (q.wr_set_sge_list.is_some(), Self::SGE_LIST),
            (has(QP_EX_WITH_RDMA_WRITE) && q.wr_rdma_write.is_some(), Self::WRITE),
            (has(WRITE_WITH_IMM) && q.wr_rdma_write_imm.is_some(), Self::WRITE_IMM),
            (has(QP_EX_WITH_RDMA_READ) && q.wr_rdma_read.is_some(), Self::READ),
            (has(QP_EX_WITH_SEND) && q.wr_send.is_some(), Self::SEND),
            (has(SEND_WITH_IMM) && q.wr_send_imm.is_some(), Self::SEND_IMM),
            (has(SEND_WITH_INV) && q.wr_send_inv.is_some(), Self::SEND_INV),
            (has(ATOMIC_CMP_AND_SWP) && q.wr_atomic_cmp_swp.is_some(), Self::CMP_SWP),
            (has(ATOMIC_FETCH_AND_ADD) && q.wr_atomic_fetch_add.is_some(), Self::FETCH_ADD),
            (has(QP_EX_WITH_ATOMIC_WRITE) && q.wr_atomic_write.is_some(), Self::ATOMIC_WRITE),
            (has(QP_EX_WITH_FLUSH) && q.wr_flush.is_some(), Self::FLUSH),
        ];
        Carried(bits.iter().filter(|(yes, _)| *yes).fold(0, |m, (_, bit)| m | bit))
    }

    /// Whether every bit of `need` is here.
    #[inline]
    pub(crate) fn covers(self, need: u16) -> bool {
        need & !self.0 == 0
    }

    /// Whether the bit `bit` (one of the operations') is here.
    #[inline]
    pub(crate) fn has(self, bit: u16) -> bool {
        self.0 & bit != 0
    }
}

const WRITE_WITH_IMM: u64 = send_ops::IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM.0 as u64;
const SEND_WITH_IMM: u64 = send_ops::IBV_QP_EX_WITH_SEND_WITH_IMM.0 as u64;
const SEND_WITH_INV: u64 = send_ops::IBV_QP_EX_WITH_SEND_WITH_INV.0 as u64;
const ATOMIC_CMP_AND_SWP: u64 = send_ops::IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP.0 as u64;
const ATOMIC_FETCH_AND_ADD: u64 = send_ops::IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD.0 as u64;

/// What a reliable-connected QP is created with.
#[derive(Clone, Debug)]
pub struct QpInit<'a> {
    /// CQ for send completions.
    pub send_cq: &'a Cq,
    /// CQ for receive completions.
    pub recv_cq: &'a Cq,
    /// Shared receive queue, if any.
    pub srq: Option<&'a Srq>,
    /// Send queue depth.
    pub max_send_wr: u32,
    /// Receive queue depth.
    pub max_recv_wr: u32,
    /// SGEs per send WR.
    pub max_send_sge: u32,
    /// SGEs per receive WR.
    pub max_recv_sge: u32,
    /// Inline data limit.
    pub max_inline_data: u32,
    /// `IBV_QP_EX_WITH_*` operations for the extended interface (0: none).
    pub send_ops_flags: u64,
}

/// A QP's granted capacities (`struct ibv_qp_cap`), from [`Qp::query_caps`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct QpCaps {
    /// Send queue depth.
    pub max_send_wr: u32,
    /// Receive queue depth.
    pub max_recv_wr: u32,
    /// SGEs per send work request.
    pub max_send_sge: u32,
    /// SGEs per receive work request.
    pub max_recv_sge: u32,
    /// Bytes a send work request may carry inline.
    pub max_inline_data: u32,
}

/// A QP's reliable-connection retry settings (the `struct ibv_qp_attr`
/// fields of the same names), from [`Qp::retry`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QpRetry {
    /// The local ACK timeout exponent: 4.096 us x 2^timeout; 0 means wait
    /// forever.
    pub timeout: u8,
    /// How many times the transport retries an unacknowledged operation.
    pub retry_cnt: u8,
    /// How many times a receiver-not-ready NAK is retried; 7 means forever.
    pub rnr_retry: u8,
    /// The RNR NAK timer code this QP sends (IBA table 45).
    pub min_rnr_timer: u8,
}

pub(crate) enum QpOwner {
    Verbs,
    Cm(*mut ffi::rdma_cm_id),
}

/// A reliable-connected queue pair, destroyed on drop (with `ibv_destroy_qp`,
/// or `rdma_destroy_qp` when it was created on a CM ID).
pub struct Qp {
    qp: *mut ffi::ibv_qp,
    /// The provider's `post_send` and `post_recv`, resolved once.
    post_send: ffi::PostSendFn,
    post_recv: ffi::PostRecvFn,
    owner: QpOwner,
    /// Set once `ibv_destroy_qp` succeeded (Drop then has nothing to do).
    destroyed: bool,
    /// The extended interface, when the QP was created with
    /// `send_ops_flags` (null otherwise), and what it carries: both read
    /// once, when the QP is created.
    qpx: *mut ffi::ibv_qp_ex,
    carried: Carried,
    _pd: Pd,
    _send_cq: Cq,
    _recv_cq: Cq,
    _srq: Option<Srq>,
}

// SAFETY: ibv_qp is usable from any thread; posting is serialised by the
// provider's per-queue locks; only Drop destroys it.
unsafe impl Send for Qp {}
// SAFETY: as above.
unsafe impl Sync for Qp {}

fn init_attr(pd: &Pd, init: &QpInit<'_>) -> ffi::ibv_qp_init_attr_ex {
    // SAFETY: plain data, all-zero is valid.
    let mut a: ffi::ibv_qp_init_attr_ex = unsafe { std::mem::zeroed() };
    a.send_cq = init.send_cq.as_ptr();
    a.recv_cq = init.recv_cq.as_ptr();
    a.srq = init.srq.map_or(std::ptr::null_mut(), |s| s.as_ptr());
    a.cap.max_send_wr = init.max_send_wr;
    a.cap.max_recv_wr = init.max_recv_wr;
    a.cap.max_send_sge = init.max_send_sge;
    a.cap.max_recv_sge = init.max_recv_sge;
    a.cap.max_inline_data = init.max_inline_data;
    a.qp_type = ffi::ibv_qp_type::IBV_QPT_RC;
    a.sq_sig_all = 0;
    a.pd = pd.as_ptr();
    a.comp_mask = ffi::ibv_qp_init_attr_mask::IBV_QP_INIT_ATTR_PD.0;
    if init.send_ops_flags != 0 {
        a.comp_mask |= ffi::ibv_qp_init_attr_mask::IBV_QP_INIT_ATTR_SEND_OPS_FLAGS.0;
        a.send_ops_flags = init.send_ops_flags;
    }
    a
}

impl Qp {
    /// Creates an RC QP on `pd` (`ibv_create_qp_ex`), not connected to anything.
    ///
    /// # Errors
    /// The errno of `ibv_create_qp_ex` (`EINVAL` over the device limits,
    /// `EOPNOTSUPP` for send ops the provider lacks).
    pub fn new(pd: &Pd, init: &QpInit<'_>) -> io::Result<Qp> {
        let mut attr = init_attr(pd, init);
        // SAFETY: live context/PD/CQs/SRQ referenced by `attr`.
        let qp = unsafe { ffi::ibv_create_qp_ex(pd.context().as_ptr(), &mut attr) };
        if qp.is_null() {
            return Err(last_error("ibv_create_qp_ex"));
        }
        Ok(Self::wrap(qp, QpOwner::Verbs, pd, init))
    }

    /// Creates the QP of a CM ID (`rdma_create_qp_ex`).
    pub(crate) fn on_cm_id(id: *mut ffi::rdma_cm_id, pd: &Pd, init: &QpInit<'_>) -> io::Result<Qp> {
        let mut attr = init_attr(pd, init);
        // SAFETY: `id` is a live CM ID bound to pd's device (checked by
        // librdmacm: EINVAL otherwise); the objects in `attr` are live.
        let rc = unsafe { ffi::rdma_create_qp_ex(id, &mut attr) };
        crate::from_minus1_ret(rc, "rdma_create_qp_ex")?;
        // SAFETY: on success librdmacm stored the QP in the live id.
        let qp = unsafe { (*id).qp };
        Ok(Self::wrap(qp, QpOwner::Cm(id), pd, init))
    }

    fn wrap(qp: *mut ffi::ibv_qp, owner: QpOwner, pd: &Pd, init: &QpInit<'_>) -> Qp {
        // SAFETY: `qp` is live (just created).
        crate::fault::qp_created(unsafe { (*qp).qp_num });
        let (qpx, carried) = match init.send_ops_flags {
            0 => (std::ptr::null_mut(), Carried::default()),
            ops => {
                // SAFETY: live QP created with IBV_QP_INIT_ATTR_SEND_OPS_FLAGS.
                let qpx = unsafe { ffi::ibv_qp_to_qp_ex(qp) };
                // SAFETY: a live qp_ex of a QP created with `ops`; its
                // provider filled in its members while creating it.
                let carried = if qpx.is_null() { Carried::default() } else { unsafe { Carried::of(qpx, ops) } };
                (qpx, carried)
            }
        };
        Qp {
            qp,
            // SAFETY: `qp` is live (just created).
            post_send: unsafe { ffi::post_send_fn(qp) },
            // SAFETY: as above.
            post_recv: unsafe { ffi::post_recv_fn(qp) },
            owner,
            destroyed: false,
            qpx,
            carried,
            _pd: pd.clone(),
            _send_cq: init.send_cq.clone(),
            _recv_cq: init.recv_cq.clone(),
            _srq: init.srq.cloned(),
        }
    }

    /// `ibv_post_send` through the provider's entry point resolved when the
    /// QP was created.
    ///
    /// # Safety
    /// `wr` is a valid chain of requests whose memory stays as
    /// `ibv_post_send` requires; `bad` is valid for writes.
    #[inline(always)]
    pub(crate) unsafe fn post_send_raw(
        &self,
        wr: *mut ffi::ibv_send_wr,
        bad: *mut *mut ffi::ibv_send_wr,
    ) -> std::os::raw::c_int {
        // SAFETY: live QP; the rest per the function contract.
        unsafe { (self.post_send)(self.qp, wr, bad) }
    }

    /// `ibv_post_recv` through the provider's entry point resolved when the
    /// QP was created.
    ///
    /// # Safety
    /// `wr` is a valid chain of requests whose memory stays as
    /// `ibv_post_recv` requires; `bad` is valid for writes.
    #[inline(always)]
    pub(crate) unsafe fn post_recv_raw(
        &self,
        wr: *mut ffi::ibv_recv_wr,
        bad: *mut *mut ffi::ibv_recv_wr,
    ) -> std::os::raw::c_int {
        // SAFETY: live QP; the rest per the function contract.
        unsafe { (self.post_recv)(self.qp, wr, bad) }
    }

    /// The QP number.
    pub fn qp_num(&self) -> u32 {
        // SAFETY: live QP.
        crate::fault::qp_num(unsafe { (*self.qp).qp_num })
    }

    /// The capacities the provider granted, read back with `ibv_query_qp`
    /// (a provider may round the requested ones up: on Soft-RoCE the send
    /// SGEs and the inline data share one WQE size).
    ///
    /// # Errors
    /// The errno of `ibv_query_qp`.
    pub fn query_caps(&self) -> io::Result<QpCaps> {
        // SAFETY: plain data, all-zero is valid.
        let mut attr: ffi::ibv_qp_attr = unsafe { std::mem::zeroed() };
        // SAFETY: as above.
        let mut init: ffi::ibv_qp_init_attr = unsafe { std::mem::zeroed() };
        // SAFETY: live QP, valid out-pointers.
        let rc =
            unsafe { ffi::ibv_query_qp(self.qp, &mut attr, ffi::ibv_qp_attr_mask::IBV_QP_CAP.0 as i32, &mut init) };
        from_errno_ret(rc, "ibv_query_qp")?;
        let c = init.cap;
        Ok(QpCaps {
            max_send_wr: c.max_send_wr,
            max_recv_wr: c.max_recv_wr,
            max_send_sge: c.max_send_sge,
            max_recv_sge: c.max_recv_sge,
            max_inline_data: c.max_inline_data,
        })
    }

    /// The reliable-connection retry settings of this QP, read back with
    /// `ibv_query_qp`.
    ///
    /// # Errors
    /// The errno of `ibv_query_qp`.
    pub fn retry(&self) -> io::Result<QpRetry> {
        // SAFETY: plain data, all-zero is valid.
        let mut attr: ffi::ibv_qp_attr = unsafe { std::mem::zeroed() };
        // SAFETY: as above.
        let mut init: ffi::ibv_qp_init_attr = unsafe { std::mem::zeroed() };
        let mask = ffi::ibv_qp_attr_mask::IBV_QP_TIMEOUT.0
            | ffi::ibv_qp_attr_mask::IBV_QP_RETRY_CNT.0
            | ffi::ibv_qp_attr_mask::IBV_QP_RNR_RETRY.0
            | ffi::ibv_qp_attr_mask::IBV_QP_MIN_RNR_TIMER.0;
        // SAFETY: live QP, valid out-pointers.
        let rc = unsafe { ffi::ibv_query_qp(self.qp, &mut attr, mask as i32, &mut init) };
        from_errno_ret(rc, "ibv_query_qp")?;
        Ok(QpRetry {
            timeout: attr.timeout,
            retry_cnt: attr.retry_cnt,
            rnr_retry: attr.rnr_retry,
            min_rnr_timer: attr.min_rnr_timer,
        })
    }

    /// Sets the RNR NAK timer code (0..=31, IBA table 45: 0 = 655.36 ms,
    /// 1 = 0.01 ms ... 12 = 0.64 ms ... 31 = 491.52 ms) this QP asks a sender
    /// to wait when a message finds no receive posted (`ibv_modify_qp` with
    /// `IBV_QP_MIN_RNR_TIMER`, allowed in RTR and RTS).
    ///
    /// # Errors
    /// The errno of `ibv_modify_qp` (`EINVAL` in another state).
    pub fn set_min_rnr_timer(&self, code: u8) -> io::Result<()> {
        // SAFETY: plain data, all-zero is valid.
        let mut attr: ffi::ibv_qp_attr = unsafe { std::mem::zeroed() };
        attr.min_rnr_timer = code;
        let mask = ffi::ibv_qp_attr_mask::IBV_QP_MIN_RNR_TIMER.0;
        // SAFETY: live QP, valid attribute struct.
        let rc = unsafe { ffi::ibv_modify_qp(self.qp, &mut attr, mask as i32) };
        from_errno_ret(rc, "ibv_modify_qp")
    }

    /// The extended work-request interface, when the QP was created with
    /// `send_ops_flags`.
    #[inline]
    pub fn ex(&self) -> Option<QpEx<'_>> {
        (!self.qpx.is_null()).then_some(QpEx { qpx: self.qpx, carried: self.carried, _qp: self })
    }

    pub(crate) fn as_ptr(&self) -> *mut ffi::ibv_qp {
        self.qp
    }
}

impl Qp {
    /// `ibv_destroy_qp`, once. For a QP made on a CM ID this is what
    /// `rdma_destroy_qp` does (the CQs are the caller's), but with the
    /// result, which `rdma_destroy_qp` drops.
    fn destroy_once(&mut self) -> io::Result<()> {
        if self.destroyed {
            return Ok(());
        }
        if crate::fault::take(crate::fault::Teardown::DestroyQp) {
            return Err(crate::fault::injected("ibv_destroy_qp"));
        }
        // SAFETY: live QP (not destroyed yet); the owning CmId destroys its
        // Qp before rdma_destroy_id, so for QpOwner::Cm the id is live too.
        let rc = unsafe { ffi::ibv_destroy_qp(self.qp) };
        from_errno_ret(rc, "ibv_destroy_qp")?;
        self.destroyed = true;
        if let QpOwner::Cm(id) = self.owner {
            // SAFETY: live id; librdmacm must not see the destroyed QP again.
            unsafe { (*id).qp = std::ptr::null_mut() };
        }
        Ok(())
    }

    /// Destroys the QP now, reporting failure. On failure the QP is handed
    /// back, still alive: the device may still process its posted work
    /// requests, so the memory they use must be kept (leak the `Qp` with
    /// `std::mem::forget`, which also keeps its CQs and SRQ alive).
    ///
    /// # Errors
    /// The errno of `ibv_destroy_qp`, with the untouched QP.
    pub fn destroy(mut self) -> Result<(), (Qp, io::Error)> {
        match self.destroy_once() {
            Ok(()) => Ok(()),
            Err(e) => Err((self, e)),
        }
    }
}

/// Dropping destroys and can only log a failure: owners of memory posted
/// on the QP call [`Qp::destroy`] and keep that memory when it fails.
impl Drop for Qp {
    fn drop(&mut self) {
        if let Err(e) = self.destroy_once() {
            crate::log_hook::sys_log!(Error, "ibv_destroy_qp: {e}; memory its work requests use must not be freed");
        }
    }
}

/// The extended work-request interface of a [`Qp`] (`struct ibv_qp_ex`).
#[derive(Debug)]
pub struct QpEx<'a> {
    pub(crate) qpx: *mut ffi::ibv_qp_ex,
    /// What it carries (read when the QP was created).
    pub(crate) carried: Carried,
    _qp: &'a Qp,
}

impl QpEx<'_> {
    /// Whether the provider implements `ibv_wr_atomic_write` for this QP
    /// (it was created with [`QP_EX_WITH_ATOMIC_WRITE`] on a capable device).
    #[inline]
    pub fn has_atomic_write(&self) -> bool {
        self.carried.has(Carried::ATOMIC_WRITE)
    }

    /// Whether the provider implements `ibv_wr_flush` for this QP.
    #[inline]
    pub fn has_flush(&self) -> bool {
        self.carried.has(Carried::FLUSH)
    }
}

impl std::fmt::Debug for Qp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Qp").field("qp_num", &self.qp_num()).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn qp_flags_carry_exactly_the_native_ops() {
        assert_eq!(SendOps::default().qp_flags(), 0, "no native op: the plain interface");
        let both = SendOps { atomic_write: true, flush: true }.qp_flags();
        assert_eq!(both, QP_EX_WITH_ATOMIC_WRITE | QP_EX_WITH_FLUSH | QP_EX_WITH_RDMA_WRITE | QP_EX_WITH_RDMA_READ);
        assert_eq!(SendOps { atomic_write: false, flush: true }.qp_flags() & QP_EX_WITH_ATOMIC_WRITE, 0);
        assert_eq!(SendOps { atomic_write: true, flush: false }.qp_flags() & QP_EX_WITH_FLUSH, 0);
    }
}
