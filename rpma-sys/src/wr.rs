//! Posting work requests: typed send/receive descriptions turned into
//! `ibv_send_wr` / `ibv_recv_wr` and posted with `ibv_post_send` /
//! `ibv_post_recv` / `ibv_post_srq_recv`.

use crate::ffi;
use crate::mr::Mr;
use crate::mw::Mw;
use crate::post::{post_outcome, queued_outcome, PostError};
use crate::qp::Qp;
use crate::qp::{FLUSH_RANGE, QP_EX_WITH_SEND};
use crate::qp::{QP_EX_WITH_ATOMIC_WRITE, QP_EX_WITH_FLUSH, QP_EX_WITH_RDMA_READ, QP_EX_WITH_RDMA_WRITE};
use crate::srq::Srq;
use ffi::ibv_qp_create_send_ops_flags as ops_flags;
use std::io;

/// One scatter/gather element: `length` bytes at `addr` of a region with `lkey`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sge {
    /// Local address.
    pub addr: u64,
    /// Length in bytes.
    pub length: u32,
    /// Local key of the region holding the bytes.
    pub lkey: u32,
}

/// The operation of a send work request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SendOp {
    /// `IBV_WR_RDMA_WRITE`.
    Write,
    /// `IBV_WR_RDMA_WRITE_WITH_IMM`, immediate data in host order.
    WriteImm(u32),
    /// `IBV_WR_RDMA_READ`.
    Read,
    /// `IBV_WR_SEND`.
    Send,
    /// `IBV_WR_SEND_WITH_IMM`, immediate data in host order.
    SendImm(u32),
    /// `IBV_WR_SEND_WITH_INV`: a send that invalidates the receiver's
    /// (type 2) memory window with this rkey.
    SendInv(u32),
    /// `IBV_WR_ATOMIC_CMP_AND_SWP`: if the 8 bytes at the remote address
    /// equal `compare`, they become `swap`; the previous value lands in the
    /// local SGE (8 bytes). Operands in host order.
    CompareSwap {
        /// The value expected at the remote address.
        compare: u64,
        /// The value written when it matches.
        swap: u64,
    },
    /// `IBV_WR_ATOMIC_FETCH_AND_ADD`: adds the operand (host order,
    /// wrapping) to the 8 bytes at the remote address; the previous value
    /// lands in the local SGE (8 bytes).
    FetchAdd(u64),
}

/// One send work request, as every way of posting takes it: a single post
/// ([`SendWr::build`], for [`Wr::Plain`]), a list through `ibv_post_send`
/// (the classic backend) or through the extended interface (which alone
/// carries the native operations): [`Qp::post_send_list`].
#[derive(Debug, Clone, Copy)]
pub enum Wr {
    /// A work request `ibv_post_send` carries.
    Plain(SendWr),
    /// An 8-byte RDMA WRITE of `value` to `remote_addr`, sent inline
    /// (librpma's emulated atomic write): the bytes are copied during the
    /// call.
    Inline8 {
        /// ID, signaled, fence.
        flags: WrFlags,
        /// Remote key.
        rkey: u32,
        /// Remote address.
        remote_addr: u64,
        /// The bytes.
        value: [u8; 8],
    },
    /// A native atomic write of `value` (`ibv_wr_atomic_write`); needs the
    /// extended interface ([`QpEx::has_atomic_write`](crate::qp::QpEx::has_atomic_write)).
    AtomicWrite {
        /// ID, signaled, fence.
        flags: WrFlags,
        /// Remote key.
        rkey: u32,
        /// Remote address.
        remote_addr: u64,
        /// The bytes, copied during the call.
        value: [u8; 8],
    },
    /// A native RDMA FLUSH of `len` bytes at `remote_addr` with placement
    /// `ptype` ([`FLUSH_GLOBAL`](crate::qp::FLUSH_GLOBAL) or
    /// [`FLUSH_PERSISTENT`](crate::qp::FLUSH_PERSISTENT)), selectivity
    /// range (`ibv_wr_flush`); needs [`QpEx::has_flush`](crate::qp::QpEx::has_flush).
    Flush {
        /// ID, signaled, fence.
        flags: WrFlags,
        /// Remote key.
        rkey: u32,
        /// Remote address.
        remote_addr: u64,
        /// Bytes.
        len: usize,
        /// Placement type.
        ptype: u8,
    },
}

impl Wr {
    /// Whether it asks for a completion (`IBV_SEND_SIGNALED`).
    #[inline]
    pub fn signaled(&self) -> bool {
        match self {
            Wr::Plain(w) => w.signaled,
            Wr::Inline8 { flags, .. } | Wr::AtomicWrite { flags, .. } | Wr::Flush { flags, .. } => flags.signaled,
        }
    }

    /// Whether only the extended interface can post it.
    #[inline]
    pub fn is_native(&self) -> bool {
        matches!(self, Wr::AtomicWrite { .. } | Wr::Flush { .. })
    }

    /// The request as `ibv_post_send` carries it, `None` for a native one:
    /// a [`Wr::Inline8`] is an inline 8-byte RDMA WRITE whose SGE names the
    /// bytes inside `self` (so `self` must outlive the post).
    #[inline(always)]
    pub fn send_wr(&self) -> Option<SendWr> {
        match self {
            Wr::Plain(p) => Some(*p),
            Wr::Inline8 { flags, rkey, remote_addr, value } => Some(SendWr {
                wr_id: 0,
                op: SendOp::Write,
                sge: Some(Sge { addr: value.as_ptr() as u64, length: 8, lkey: 0 }),
                remote_addr: *remote_addr,
                rkey: *rkey,
                signaled: flags.signaled,
                fence: flags.fence,
                inline: true,
            }),
            Wr::AtomicWrite { .. } | Wr::Flush { .. } => None,
        }
    }
}

/// The send flags of a request: `IBV_SEND_SIGNALED`, `IBV_SEND_FENCE`,
/// `IBV_SEND_INLINE` (the one place that computes them).
#[inline(always)]
pub(crate) fn send_flags(signaled: bool, fence: bool, inline: bool) -> u32 {
    use ffi::ibv_send_flags as f;
    // Branch-free: the bits are 2, 1 and 8.
    const _: () = assert!(f::IBV_SEND_SIGNALED.0 == 2 && f::IBV_SEND_FENCE.0 == 1 && f::IBV_SEND_INLINE.0 == 8);
    (u32::from(signaled) << 1) | u32::from(fence) | (u32::from(inline) << 3)
}

/// The classic backend: `wr` into a zeroed `ibv_send_wr` (all but its ID,
/// `next` and `sg_list`) and its SGE (an inline write's naming its bytes
/// in `wr`); false for a native operation, which only the extended
/// interface posts ([`encode_ex`]).
#[inline(always)]
pub(crate) fn encode(wr: &Wr, w: &mut ffi::ibv_send_wr, sge: &mut ffi::ibv_sge) -> bool {
    match wr.send_wr() {
        Some(p) => {
            *sge = encode_plain(p, w);
            true
        }
        None => false,
    }
}

/// [`encode`] of a [`Wr::Plain`]: its SGE is returned.
#[inline(always)]
fn encode_plain(p: SendWr, w: &mut ffi::ibv_send_wr) -> ffi::ibv_sge {
    let (s, n) = raw_sge(&p.sge);
    w.num_sge = n;
    set_op(w, p.op, p.remote_addr, p.rkey);
    w.send_flags = send_flags(p.signaled, p.fence, p.inline);
    s
}

/// Sets `w`'s opcode and the fields its operation carries: immediate data
/// (big-endian on the wire), the rkey to invalidate, the remote address and
/// key of RDMA operations (`wr.rdma`) and atomics (`wr.atomic`).
#[inline]
pub(crate) fn set_op(w: &mut ffi::ibv_send_wr, op: SendOp, remote_addr: u64, rkey: u32) {
    use ffi::ibv_wr_opcode as o;
    let rdma = ffi::ibv_send_wr__bindgen_ty_2__bindgen_ty_1 { remote_addr, rkey };
    let atomic = |compare_add: u64, swap: u64| ffi::ibv_send_wr__bindgen_ty_2__bindgen_ty_2 {
        remote_addr,
        compare_add,
        swap,
        rkey,
    };
    match op {
        SendOp::Write => {
            w.opcode = o::IBV_WR_RDMA_WRITE;
            w.wr.rdma = rdma;
        }
        SendOp::WriteImm(i) => {
            w.opcode = o::IBV_WR_RDMA_WRITE_WITH_IMM;
            w.__bindgen_anon_1.imm_data = i.to_be();
            w.wr.rdma = rdma;
        }
        SendOp::Read => {
            w.opcode = o::IBV_WR_RDMA_READ;
            w.wr.rdma = rdma;
        }
        SendOp::Send => w.opcode = o::IBV_WR_SEND,
        SendOp::SendImm(i) => {
            w.opcode = o::IBV_WR_SEND_WITH_IMM;
            w.__bindgen_anon_1.imm_data = i.to_be();
        }
        SendOp::SendInv(inv) => {
            w.opcode = o::IBV_WR_SEND_WITH_INV;
            w.__bindgen_anon_1.invalidate_rkey = inv;
        }
        SendOp::CompareSwap { compare, swap } => {
            w.opcode = o::IBV_WR_ATOMIC_CMP_AND_SWP;
            w.wr.atomic = atomic(compare, swap);
        }
        SendOp::FetchAdd(add) => {
            w.opcode = o::IBV_WR_ATOMIC_FETCH_AND_ADD;
            w.wr.atomic = atomic(add, 0);
        }
    }
}

/// What a memory-window bind binds (`struct ibv_mw_bind_info`): `length`
/// bytes at `addr` of `mr`, with `IBV_ACCESS_*` bits `access`.
#[derive(Debug, Clone, Copy)]
pub struct MwBindInfo<'a> {
    /// The region the window opens.
    pub mr: &'a Mr,
    /// The first byte, as the device addresses it.
    pub addr: u64,
    /// Bytes (0 unbinds a type 1 window).
    pub length: u64,
    /// `IBV_ACCESS_*` bits.
    pub access: u32,
}

impl MwBindInfo<'_> {
    fn raw(&self) -> ffi::ibv_mw_bind_info {
        ffi::ibv_mw_bind_info {
            mr: self.mr.as_ptr(),
            addr: self.addr,
            length: self.length,
            mw_access_flags: self.access,
        }
    }
}

/// A work request's ID and send flags, for the posts that take no
/// [`SendWr`].
#[derive(Debug, Clone, Copy)]
pub struct WrFlags {
    /// Returned in the completion.
    pub wr_id: u64,
    /// `IBV_SEND_SIGNALED`.
    pub signaled: bool,
    /// `IBV_SEND_FENCE`.
    pub fence: bool,
}

/// A send work request on an RC QP.
#[derive(Debug, Clone, Copy)]
pub struct SendWr {
    /// Returned in the completion.
    pub wr_id: u64,
    /// The operation.
    pub op: SendOp,
    /// Local memory (none for a 0-byte operation; an element of 0 bytes
    /// is posted as none too, `num_sge` 0).
    pub sge: Option<Sge>,
    /// Remote address (RDMA operations).
    pub remote_addr: u64,
    /// Remote key (RDMA operations).
    pub rkey: u32,
    /// `IBV_SEND_SIGNALED`.
    pub signaled: bool,
    /// `IBV_SEND_FENCE`.
    pub fence: bool,
    /// `IBV_SEND_INLINE`: the bytes are copied at post time.
    pub inline: bool,
}

/// A send work request in verbs' form (`ibv_send_wr` and its SGE), built
/// ahead of its post by [`SendWr::build`]: [`Qp::post_built`] adds only the
/// ID, so a caller can convert before taking a lock, straight into the
/// memory the provider reads.
pub struct BuiltSend {
    w: ffi::ibv_send_wr,
    sge: ffi::ibv_sge,
}

impl std::fmt::Debug for BuiltSend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BuiltSend").field("opcode", &self.w.opcode).field("num_sge", &self.w.num_sge).finish()
    }
}

impl SendWr {
    /// This request in verbs' form (its `wr_id` is given when posting).
    #[inline(always)]
    pub fn build(&self) -> BuiltSend {
        // SAFETY: plain data, all-zero is valid.
        let mut w: ffi::ibv_send_wr = unsafe { std::mem::zeroed() };
        let sge = encode_plain(*self, &mut w);
        BuiltSend { w, sge }
    }
}

/// `s` in verbs' form and the `num_sge` it makes (a missing or 0-byte
/// element: none).
#[inline]
pub(crate) fn raw_sge(s: &Option<Sge>) -> (ffi::ibv_sge, i32) {
    match s {
        // A 0-byte element is no element (`num_sge` 0), without a branch.
        Some(s) => (ffi::ibv_sge { addr: s.addr, length: s.length, lkey: s.lkey }, i32::from(s.length != 0)),
        None => (ffi::ibv_sge { addr: 0, length: 0, lkey: 0 }, 0),
    }
}

impl Qp {
    /// Posts one send work request, built ahead ([`SendWr::build`]), with
    /// `wr_id` (`ibv_post_send`).
    ///
    /// # Safety
    /// Unless it is inline, the memory the request's SGE names must stay
    /// registered and allocated, and must not be accessed in a way that
    /// conflicts with the device (written while the device reads it, or
    /// accessed at all while the device writes it), until the request
    /// completes.
    ///
    /// # Errors
    /// The errno of `ibv_post_send` (`ENOMEM` when the send queue is full,
    /// `EINVAL` for a bad request).
    #[inline(always)]
    pub unsafe fn post_built(&self, b: &mut BuiltSend, wr_id: u64) -> Result<(), PostError> {
        b.w.wr_id = wr_id;
        b.w.sg_list = &mut b.sge;
        let mut bad = std::ptr::null_mut();
        // SAFETY: live QP; `b.w` and `b.sge` live across the call (inline
        // data is copied during it); the caller guarantees the referenced
        // memory.
        let rc = unsafe { self.post_send_raw(&mut b.w, &mut bad) };
        post_outcome(rc, bad, "ibv_post_send")
    }

    /// Binds a type 1 memory window as `info` says (`ibv_bind_mw`); returns
    /// the window's new rkey. The bind itself completes on the send CQ.
    ///
    /// # Errors
    /// `EOPNOTSUPP` when the provider cannot bind type 1 windows; the errno
    /// of `ibv_bind_mw` (`EINVAL` for a bad range or access). A failure of
    /// the provider's call is [`PostError::maybe_queued`]: providers post
    /// the bind on the send queue (rxe through its own `ibv_post_send`,
    /// whose failed doorbell comes after the queue was written).
    pub fn bind_mw_type1(&self, mw: &Mw, info: MwBindInfo<'_>, wr: WrFlags) -> Result<u32, PostError> {
        let mut b = ffi::ibv_mw_bind {
            wr_id: wr.wr_id,
            send_flags: send_flags(wr.signaled, wr.fence, false),
            bind_info: info.raw(),
        };
        // SAFETY: live QP, MW and MR of one context; the provider op is
        // checked before the call.
        unsafe {
            let Some(op) = (*(*mw.as_ptr()).context).ops.bind_mw else {
                return Err(io::Error::from_raw_os_error(libc::EOPNOTSUPP).into());
            };
            if (*mw.as_ptr()).type_ != ffi::ibv_mw_type::IBV_MW_TYPE_1 {
                return Err(io::Error::from_raw_os_error(libc::EINVAL).into());
            }
            queued_outcome(op(self.as_ptr(), mw.as_ptr(), &mut b), "ibv_bind_mw")?;
        }
        Ok(mw.rkey())
    }

    /// Posts a bind of a type 2 memory window (`IBV_WR_BIND_MW`) as `info`
    /// says, giving it `rkey` (see [`next_rkey`]).
    ///
    /// # Errors
    /// The errno of `ibv_post_send`.
    pub fn post_bind_mw(&self, mw: &Mw, rkey: u32, info: MwBindInfo<'_>, wr: WrFlags) -> Result<(), PostError> {
        // SAFETY: plain data, all-zero is valid.
        let mut w: ffi::ibv_send_wr = unsafe { std::mem::zeroed() };
        w.wr_id = wr.wr_id;
        w.opcode = ffi::ibv_wr_opcode::IBV_WR_BIND_MW;
        w.send_flags = send_flags(wr.signaled, wr.fence, false);
        w.__bindgen_anon_2.bind_mw =
            ffi::ibv_send_wr__bindgen_ty_4__bindgen_ty_1 { mw: mw.as_ptr(), rkey, bind_info: info.raw() };
        let mut bad = std::ptr::null_mut();
        // SAFETY: live QP, MW and MR; the WR references no local data memory.
        let rc = unsafe { self.post_send_raw(&mut w, &mut bad) };
        post_outcome(rc, bad, "ibv_post_send(BIND_MW)")
    }

    /// Posts a local invalidate of the (type 2) window or region with `rkey`
    /// (`IBV_WR_LOCAL_INV`).
    ///
    /// # Errors
    /// The errno of `ibv_post_send`.
    pub fn post_local_inv(&self, wr_id: u64, signaled: bool, fence: bool, rkey: u32) -> Result<(), PostError> {
        // SAFETY: plain data, all-zero is valid.
        let mut w: ffi::ibv_send_wr = unsafe { std::mem::zeroed() };
        w.wr_id = wr_id;
        w.opcode = ffi::ibv_wr_opcode::IBV_WR_LOCAL_INV;
        w.send_flags = send_flags(signaled, fence, false);
        w.__bindgen_anon_1.invalidate_rkey = rkey;
        let mut bad = std::ptr::null_mut();
        // SAFETY: live QP; the WR references no memory.
        let rc = unsafe { self.post_send_raw(&mut w, &mut bad) };
        post_outcome(rc, bad, "ibv_post_send(LOCAL_INV)")
    }
}

/// Most SGEs one work request carries through [`Qp::post_send_sgl`],
/// [`Qp::post_recv`] and [`Srq::post_recv`]: their `ibv_sge` array is built
/// on the stack.
pub const MAX_SGL: usize = 64;

/// `sgl` as `ibv_sge`s in `out`; the number of entries.
fn raw_sgl(sgl: &[Sge], out: &mut [std::mem::MaybeUninit<ffi::ibv_sge>; MAX_SGL]) -> io::Result<i32> {
    if sgl.len() > MAX_SGL {
        return Err(io::Error::from_raw_os_error(libc::EINVAL));
    }
    for (o, s) in out.iter_mut().zip(sgl) {
        o.write(ffi::ibv_sge { addr: s.addr, length: s.length, lkey: s.lkey });
    }
    Ok(sgl.len() as i32)
}

impl Qp {
    /// Posts one send work request whose local memory is the list `sgl`
    /// (`ibv_post_send` with `num_sge` = `sgl.len()`, gathered in order);
    /// `wr.sge` must be `None`. An empty list is a 0-byte operation.
    ///
    /// # Safety
    /// As [`post_built`](Qp::post_built), for every entry of `sgl`.
    ///
    /// # Errors
    /// `EINVAL` when `wr.sge` is set or `sgl` is longer than [`MAX_SGL`]
    /// (nothing is posted); the errno of `ibv_post_send` (`EINVAL` also for
    /// more entries than the QP's `max_send_sge`, or inline data over its
    /// `max_inline_data`).
    pub unsafe fn post_send_sgl(&self, wr: &SendWr, sgl: &[Sge]) -> Result<(), PostError> {
        if wr.sge.is_some() {
            return Err(io::Error::from_raw_os_error(libc::EINVAL).into());
        }
        let mut sges = [std::mem::MaybeUninit::<ffi::ibv_sge>::uninit(); MAX_SGL];
        let n = raw_sgl(sgl, &mut sges)?;
        // SAFETY: plain data, all-zero is valid.
        let mut w: ffi::ibv_send_wr = unsafe { std::mem::zeroed() };
        w.wr_id = wr.wr_id;
        w.sg_list = sges.as_mut_ptr().cast();
        w.num_sge = n;
        set_op(&mut w, wr.op, wr.remote_addr, wr.rkey);
        w.send_flags = send_flags(wr.signaled, wr.fence, wr.inline);
        let mut bad = std::ptr::null_mut();
        // SAFETY: live QP; `w` and the first `n` entries of `sges` (written
        // by `raw_sgl`; the provider reads no more) live across the call;
        // the caller guarantees the referenced memory.
        let rc = unsafe { self.post_send_raw(&mut w, &mut bad) };
        post_outcome(rc, bad, "ibv_post_send")
    }
}

/// One receive work request scattering into `sgl` in order (empty: a
/// 0-byte receive), posted by `post` (the queue's provider entry point).
///
/// # Errors
/// `EINVAL` when `sgl` is longer than [`MAX_SGL`] (nothing is posted); what
/// `post` returns.
#[inline(always)]
fn post_recv_wr(
    wr_id: u64,
    sgl: &[Sge],
    verb: &'static str,
    post: impl FnOnce(*mut ffi::ibv_recv_wr, *mut *mut ffi::ibv_recv_wr) -> std::os::raw::c_int,
) -> Result<(), PostError> {
    let mut sges = [std::mem::MaybeUninit::<ffi::ibv_sge>::uninit(); MAX_SGL];
    let n = raw_sgl(sgl, &mut sges)?;
    let mut w = ffi::ibv_recv_wr { wr_id, next: std::ptr::null_mut(), sg_list: sges.as_mut_ptr().cast(), num_sge: n };
    let mut bad = std::ptr::null_mut();
    // `w` and the `n` written entries (the provider reads no more) live
    // across the call.
    let rc = post(&mut w, &mut bad);
    post_outcome(rc, bad, verb)
}

impl Qp {
    /// Posts one receive work request scattering into `sgl`, in order
    /// (`ibv_post_recv`; an empty list is a 0-byte receive).
    ///
    /// # Safety
    /// The memory every entry of `sgl` names must stay registered and
    /// allocated, and must not be accessed, until the receive completes.
    ///
    /// # Errors
    /// `EINVAL` when `sgl` is longer than [`MAX_SGL`] (nothing is posted);
    /// the errno of `ibv_post_recv` (`EINVAL` also for more entries than
    /// the QP's `max_recv_sge`, `ENOMEM` when the receive queue is full).
    pub unsafe fn post_recv(&self, wr_id: u64, sgl: &[Sge]) -> Result<(), PostError> {
        // SAFETY: live QP; `post_recv_wr` passes a request valid for the
        // call; the caller guarantees the referenced memory.
        post_recv_wr(wr_id, sgl, "ibv_post_recv", |w, bad| unsafe { self.post_recv_raw(w, bad) })
    }
}

impl Srq {
    /// As [`Qp::post_recv`], to the SRQ (`ibv_post_srq_recv`).
    ///
    /// # Safety
    /// As [`Qp::post_recv`].
    ///
    /// # Errors
    /// As [`Qp::post_recv`], for `ibv_post_srq_recv` and the SRQ's
    /// `max_sge`.
    pub unsafe fn post_recv(&self, wr_id: u64, sgl: &[Sge]) -> Result<(), PostError> {
        // SAFETY: live SRQ; as in `Qp::post_recv`.
        post_recv_wr(wr_id, sgl, "ibv_post_srq_recv", |w, bad| unsafe { self.post_recv_raw(w, bad) })
    }
}

const WRITE_WITH_IMM: u64 = ops_flags::IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM.0 as u64;
const SEND_WITH_IMM: u64 = ops_flags::IBV_QP_EX_WITH_SEND_WITH_IMM.0 as u64;
const SEND_WITH_INV: u64 = ops_flags::IBV_QP_EX_WITH_SEND_WITH_INV.0 as u64;
const ATOMIC_CMP_AND_SWP: u64 = ops_flags::IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP.0 as u64;
const ATOMIC_FETCH_AND_ADD: u64 = ops_flags::IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD.0 as u64;

/// The extended backend's check: whether the QP's extended interface `q`,
/// created with the `IBV_QP_EX_WITH_*` flags `send_ops`, can post `wr` (the
/// flag given and the provider's builder and setter present).
///
/// # Safety
/// `q` is a live `ibv_qp_ex` created with `send_ops`.
#[inline]
pub(crate) unsafe fn carries_ex(q: *mut ffi::ibv_qp_ex, send_ops: u64, wr: &Wr) -> bool {
    let has = |flag: u64| send_ops & flag != 0;
    // SAFETY: the caller's live qp_ex; members are read only for
    // operations the QP was created with, which the library then has.
    unsafe {
        match wr {
            Wr::Plain(p) => {
                let setter = match p.sge {
                    Some(_) => (*q).wr_set_sge.is_some(),
                    None => (*q).wr_set_sge_list.is_some(),
                };
                setter
                    && match p.op {
                        SendOp::Write => has(QP_EX_WITH_RDMA_WRITE) && (*q).wr_rdma_write.is_some(),
                        SendOp::WriteImm(_) => has(WRITE_WITH_IMM) && (*q).wr_rdma_write_imm.is_some(),
                        SendOp::Read => has(QP_EX_WITH_RDMA_READ) && (*q).wr_rdma_read.is_some(),
                        SendOp::Send => has(QP_EX_WITH_SEND) && (*q).wr_send.is_some(),
                        SendOp::SendImm(_) => has(SEND_WITH_IMM) && (*q).wr_send_imm.is_some(),
                        SendOp::SendInv(_) => has(SEND_WITH_INV) && (*q).wr_send_inv.is_some(),
                        SendOp::CompareSwap { .. } => has(ATOMIC_CMP_AND_SWP) && (*q).wr_atomic_cmp_swp.is_some(),
                        SendOp::FetchAdd(_) => has(ATOMIC_FETCH_AND_ADD) && (*q).wr_atomic_fetch_add.is_some(),
                    }
            }
            Wr::Inline8 { .. } => {
                has(QP_EX_WITH_RDMA_WRITE) && (*q).wr_rdma_write.is_some() && (*q).wr_set_inline_data.is_some()
            }
            Wr::AtomicWrite { .. } => has(QP_EX_WITH_ATOMIC_WRITE) && (*q).wr_atomic_write.is_some(),
            Wr::Flush { .. } => has(QP_EX_WITH_FLUSH) && (*q).wr_flush.is_some(),
        }
    }
}

/// The extended backend: builds `wr` on `q` (after `ibv_wr_start`, with
/// `wr_id` set), its builder and its local memory's setter.
///
/// # Safety
/// `q` is a live `ibv_qp_ex` inside `ibv_wr_start`, which
/// [`carries_ex`] `wr`; the memory `wr` names is the caller's to guarantee
/// (inline bytes and an atomic value are copied before this returns).
#[inline(always)]
pub(crate) unsafe fn encode_ex(q: *mut ffi::ibv_qp_ex, wr: &Wr) {
    // SAFETY: the caller's guarantees; every builder and setter called was
    // checked present by `carries_ex`.
    unsafe {
        match *wr {
            Wr::Plain(p) => {
                (*q).wr_flags = send_flags(p.signaled, p.fence, false);
                match p.op {
                    SendOp::Write => call((*q).wr_rdma_write, |f| f(q, p.rkey, p.remote_addr)),
                    SendOp::WriteImm(i) => call((*q).wr_rdma_write_imm, |f| f(q, p.rkey, p.remote_addr, i.to_be())),
                    SendOp::Read => call((*q).wr_rdma_read, |f| f(q, p.rkey, p.remote_addr)),
                    SendOp::Send => call((*q).wr_send, |f| f(q)),
                    SendOp::SendImm(i) => call((*q).wr_send_imm, |f| f(q, i.to_be())),
                    SendOp::SendInv(rkey) => call((*q).wr_send_inv, |f| f(q, rkey)),
                    SendOp::CompareSwap { compare, swap } => {
                        call((*q).wr_atomic_cmp_swp, |f| f(q, p.rkey, p.remote_addr, compare, swap))
                    }
                    SendOp::FetchAdd(add) => call((*q).wr_atomic_fetch_add, |f| f(q, p.rkey, p.remote_addr, add)),
                }
                match p.sge {
                    Some(s) if p.inline => {
                        call((*q).wr_set_inline_data, |f| f(q, s.addr as *mut libc::c_void, s.length as usize))
                    }
                    Some(s) => call((*q).wr_set_sge, |f| f(q, s.lkey, s.addr, s.length)),
                    None => call((*q).wr_set_sge_list, |f| f(q, 0, std::ptr::null())),
                }
            }
            Wr::Inline8 { flags, rkey, remote_addr, ref value } => {
                (*q).wr_flags = send_flags(flags.signaled, flags.fence, false);
                call((*q).wr_rdma_write, |f| f(q, rkey, remote_addr));
                call((*q).wr_set_inline_data, |f| f(q, value.as_ptr() as *mut libc::c_void, 8));
            }
            Wr::AtomicWrite { flags, rkey, remote_addr, ref value } => {
                (*q).wr_flags = send_flags(flags.signaled, flags.fence, false);
                call((*q).wr_atomic_write, |f| f(q, rkey, remote_addr, value.as_ptr().cast()));
            }
            Wr::Flush { flags, rkey, remote_addr, len, ptype } => {
                (*q).wr_flags = send_flags(flags.signaled, flags.fence, false);
                call((*q).wr_flush, |f| f(q, rkey, remote_addr, len, ptype, FLUSH_RANGE));
            }
        }
    }
}

/// Calls a provider member checked present by [`carries_ex`].
#[inline(always)]
fn call<F>(f: Option<F>, go: impl FnOnce(F)) {
    if let Some(f) = f {
        go(f)
    }
}

/// The next rkey for a type 2 bind: same index, next 8-bit key
/// (`ibv_inc_rkey`).
pub fn next_rkey(rkey: u32) -> u32 {
    (rkey & 0xffff_ff00) | (rkey.wrapping_add(1) & 0xff)
}

#[cfg(test)]
mod tests {
    #[test]
    fn sgl_longer_than_the_stack_array_is_refused() {
        let mut out = [std::mem::MaybeUninit::uninit(); super::MAX_SGL];
        let one = super::Sge { addr: 1, length: 2, lkey: 3 };
        assert_eq!(super::raw_sgl(&[one; super::MAX_SGL], &mut out).unwrap(), super::MAX_SGL as i32);
        let e = super::raw_sgl(&[one; super::MAX_SGL + 1], &mut out).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EINVAL));
    }

    #[test]
    fn next_rkey_wraps_the_key_byte() {
        assert_eq!(super::next_rkey(0x0800_01ff), 0x0800_0100);
        assert_eq!(super::next_rkey(0x0800_0112), 0x0800_0113);
    }
}
