//! Posting work requests: typed send/receive descriptions, the one encoder
//! (`encode`) with its two backends behind one trait (`SendBackend`: the
//! classic `ibv_send_wr` of `ibv_post_send`, the extended interface's
//! `ibv_wr_*` builders), and the two unsafe post entry points:
//! [`Qp::post_send`] (what it posts: [`SendPosting`]) and [`post_recv`] (on
//! a [`RecvQueue`]: a QP's or an SRQ).

use crate::ffi;
use crate::mr::Mr;
use crate::mw::Mw;
use crate::post::{post_outcome, queued_outcome, PostError};
use crate::qp::FLUSH_RANGE;
use crate::qp::{Carried, Qp, QpEx};
use crate::srq::Srq;
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
/// ([`SendWr::build_in`], for [`Wr::Plain`]; [`QpEx::post_native`] for a
/// native one), or a [`ChainList`](crate::chain::ChainList) posted through
/// `ibv_post_send` (the classic backend) or through the extended interface
/// (which alone carries the native operations).
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

    /// Makes it report its completion (`IBV_SEND_SIGNALED`).
    pub fn set_signaled(&mut self) {
        match self {
            Wr::Plain(w) => w.signaled = true,
            Wr::Inline8 { flags, .. } | Wr::AtomicWrite { flags, .. } | Wr::Flush { flags, .. } => {
                flags.signaled = true
            }
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

/// A way of building a send work request for the device: the classic
/// [`Classic`] (an `ibv_send_wr` and its SGE, for `ibv_post_send`) or the
/// extended [`Extended`] (the provider's `ibv_wr_*` builders and setters).
/// [`encode`], the one encoder, hands it each part of a [`Wr`]: a plain
/// request's local memory, its operation, then its send flags in
/// [`finish`](Self::finish) (the order the single post was measured with);
/// a native request whole. The flags are always [`send_flags`]'.
pub(crate) trait SendBackend {
    /// The request's local memory: one element (its bytes copied during
    /// the post when `inline`), or none.
    fn local(&mut self, sge: Option<Sge>, inline: bool);

    /// Its operation and the fields the operation carries: immediate data
    /// (host order here, big-endian on the wire), the rkey to invalidate,
    /// the remote address and key of RDMA operations and atomics.
    fn op(&mut self, op: SendOp, remote_addr: u64, rkey: u32);

    /// Its send flags, the last part: the request is then complete.
    fn finish(&mut self, flags: u32);

    /// A native atomic write of `value` (copied before this returns) with
    /// send flags `flags`; false, with nothing built, when the backend has
    /// no such operation.
    fn atomic_write(&mut self, flags: u32, rkey: u32, remote_addr: u64, value: &[u8; 8]) -> bool;

    /// A native flush of `len` bytes with placement `ptype` and send flags
    /// `flags`; false, with nothing built, when the backend has no such
    /// operation.
    fn flush(&mut self, flags: u32, rkey: u32, remote_addr: u64, len: usize, ptype: u8) -> bool;
}

/// The one encoder: `wr` through the backend `b`. False (nothing built)
/// for a native request `b` has no operation for (the classic backend has
/// none).
#[inline(always)]
pub(crate) fn encode<B: SendBackend>(wr: &Wr, b: &mut B) -> bool {
    match wr.send_wr() {
        Some(p) => {
            encode_plain(&p, b);
            true
        }
        None => match *wr {
            Wr::AtomicWrite { flags: f, rkey, remote_addr, ref value } => {
                b.atomic_write(send_flags(f.signaled, f.fence, false), rkey, remote_addr, value)
            }
            Wr::Flush { flags: f, rkey, remote_addr, len, ptype } => {
                b.flush(send_flags(f.signaled, f.fence, false), rkey, remote_addr, len, ptype)
            }
            Wr::Plain(_) | Wr::Inline8 { .. } => false, // `send_wr` gave them
        },
    }
}

/// [`encode`] of a request `ibv_post_send` carries.
#[inline(always)]
fn encode_plain<B: SendBackend>(p: &SendWr, b: &mut B) {
    b.local(p.sge, p.inline);
    b.op(p.op, p.remote_addr, p.rkey);
    b.finish(send_flags(p.signaled, p.fence, p.inline));
}

/// The classic backend: one zeroed `ibv_send_wr` (its ID, `next` and
/// `sg_list` are the post's to set) and its SGE (an inline request's naming
/// the bytes to copy).
pub(crate) struct Classic<'a> {
    /// The request.
    pub(crate) w: &'a mut ffi::ibv_send_wr,
    /// Its SGE, for the caller to place where `sg_list` will point.
    pub(crate) sge: ffi::ibv_sge,
}

impl<'a> Classic<'a> {
    /// The backend writing into the zeroed `w`.
    #[inline]
    pub(crate) fn new(w: &'a mut ffi::ibv_send_wr) -> Self {
        Classic { w, sge: ffi::ibv_sge { addr: 0, length: 0, lkey: 0 } }
    }
}

impl SendBackend for Classic<'_> {
    /// The element (an inline one's bytes are copied because of the
    /// `IBV_SEND_INLINE` flag).
    #[inline]
    fn local(&mut self, sge: Option<Sge>, _inline: bool) {
        let (s, n) = raw_sge(&sge);
        self.sge = s;
        self.w.num_sge = n;
    }

    // Always inline: where the operation is known (a chain's push), its
    // arm alone remains; out of line, every push would pay the match.
    #[inline(always)]
    fn op(&mut self, op: SendOp, remote_addr: u64, rkey: u32) {
        use ffi::ibv_wr_opcode as o;
        let w = &mut *self.w;
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

    #[inline]
    fn finish(&mut self, flags: u32) {
        self.w.send_flags = flags;
    }

    /// `ibv_post_send` has no native atomic write.
    #[inline]
    fn atomic_write(&mut self, _: u32, _: u32, _: u64, _: &[u8; 8]) -> bool {
        false
    }

    /// `ibv_post_send` has no native flush.
    #[inline]
    fn flush(&mut self, _: u32, _: u32, _: u64, _: usize, _: u8) -> bool {
        false
    }
}

/// The request [`Classic`] encoded into `w` and `sge`: the inverse of its
/// encoding, reading only the fields the opcode uses (what a provider
/// reads), so a request written over an earlier one reads back as itself.
/// The ID is `w`'s. An element of 0 bytes at address 0 with key 0 reads
/// back as none (both are posted as none).
///
/// A [`ChainList`](crate::chain::ChainList) keeps a plain request only as
/// encoded, and reads it back with this when the list goes to the extended
/// interface or is inspected.
pub(crate) fn classic_decode(w: &ffi::ibv_send_wr, sge: &ffi::ibv_sge) -> SendWr {
    use ffi::ibv_send_flags as f;
    use ffi::ibv_wr_opcode as o;
    // SAFETY (every union read below): plain integer fields, each read
    // only in the arm of the opcode `Classic::op` writes it for.
    let rdma = |op| unsafe { (op, w.wr.rdma.remote_addr, w.wr.rdma.rkey) };
    let imm = || u32::from_be(unsafe { w.__bindgen_anon_1.imm_data });
    let atomic = || unsafe { w.wr.atomic };
    let (op, remote_addr, rkey) = match w.opcode {
        o::IBV_WR_RDMA_WRITE => rdma(SendOp::Write),
        o::IBV_WR_RDMA_WRITE_WITH_IMM => rdma(SendOp::WriteImm(imm())),
        o::IBV_WR_RDMA_READ => rdma(SendOp::Read),
        o::IBV_WR_SEND_WITH_IMM => (SendOp::SendImm(imm()), 0, 0),
        o::IBV_WR_SEND_WITH_INV => (SendOp::SendInv(unsafe { w.__bindgen_anon_1.invalidate_rkey }), 0, 0),
        o::IBV_WR_ATOMIC_CMP_AND_SWP => {
            let a = atomic();
            (SendOp::CompareSwap { compare: a.compare_add, swap: a.swap }, a.remote_addr, a.rkey)
        }
        o::IBV_WR_ATOMIC_FETCH_AND_ADD => {
            let a = atomic();
            (SendOp::FetchAdd(a.compare_add), a.remote_addr, a.rkey)
        }
        // IBV_WR_SEND, and (never: `Classic` writes no other) the rest.
        _ => (SendOp::Send, 0, 0),
    };
    let has = |bit: ffi::ibv_send_flags| w.send_flags & bit.0 != 0;
    let element = w.num_sge != 0 || sge.addr != 0 || sge.lkey != 0;
    SendWr {
        wr_id: w.wr_id,
        op,
        sge: element.then_some(Sge { addr: sge.addr, length: sge.length, lkey: sge.lkey }),
        remote_addr,
        rkey,
        signaled: has(f::IBV_SEND_SIGNALED),
        fence: has(f::IBV_SEND_FENCE),
        inline: has(f::IBV_SEND_INLINE),
    }
}

/// The extended backend: builds requests on a QP's extended interface
/// with the provider's `ibv_wr_*` builder and setter, between
/// `ibv_wr_start` and `ibv_wr_complete`. The interface wants the flags
/// before the builder and the setter after it, so a request's local memory
/// and operation are kept until its flags, the last part, arrive
/// ([`finish`](SendBackend::finish)).
pub(crate) struct Extended {
    q: *mut ffi::ibv_qp_ex,
    /// The request's local memory, until `finish`.
    local: (Option<Sge>, bool),
    /// Its operation, remote address and rkey, until `finish`.
    op: (SendOp, u64, u32),
}

impl Extended {
    /// The backend of `q`.
    ///
    /// # Safety
    /// `q` is a live `ibv_qp_ex` inside `ibv_wr_start` whose
    /// [`QpEx::carries`] every request built on it, each after its
    /// [`id`](Self::id); the memory a request names is the caller's to
    /// guarantee (inline bytes and an atomic value are copied before the
    /// builder or setter returns).
    #[inline]
    pub(crate) unsafe fn started(q: *mut ffi::ibv_qp_ex) -> Extended {
        Extended { q, local: (None, false), op: (SendOp::Send, 0, 0) }
    }

    /// The work request ID of the next request built.
    #[inline]
    pub(crate) fn id(&mut self, wr_id: u64) {
        // SAFETY: the live qp_ex of `Extended::started`.
        unsafe { (*self.q).wr_id = wr_id };
    }

    /// Sets the request's send flags but `IBV_SEND_INLINE` (inline bytes
    /// are given by `wr_set_inline_data`).
    #[inline]
    fn set_flags(&mut self, flags: u32) {
        const INLINE: u32 = ffi::ibv_send_flags::IBV_SEND_INLINE.0;
        // SAFETY: the live qp_ex of `Extended::started`.
        unsafe { (*self.q).wr_flags = flags & !INLINE };
    }
}

impl SendBackend for Extended {
    /// Kept until [`finish`](Self::finish).
    #[inline]
    fn local(&mut self, sge: Option<Sge>, inline: bool) {
        self.local = (sge, inline);
    }

    /// Kept until [`finish`](Self::finish).
    #[inline]
    fn op(&mut self, op: SendOp, remote_addr: u64, rkey: u32) {
        self.op = (op, remote_addr, rkey);
    }

    /// The flags, the operation's builder, then the local memory's setter.
    #[inline]
    fn finish(&mut self, flags: u32) {
        self.set_flags(flags);
        let (q, (op, remote_addr, rkey), (sge, inline)) = (self.q, self.op, self.local);
        // SAFETY: `Extended::started`'s contract; every builder and setter
        // called was checked present by `QpEx::carries` (and `call` skips a
        // missing one).
        unsafe {
            match op {
                SendOp::Write => call((*q).wr_rdma_write, |f| f(q, rkey, remote_addr)),
                SendOp::WriteImm(i) => call((*q).wr_rdma_write_imm, |f| f(q, rkey, remote_addr, i.to_be())),
                SendOp::Read => call((*q).wr_rdma_read, |f| f(q, rkey, remote_addr)),
                SendOp::Send => call((*q).wr_send, |f| f(q)),
                SendOp::SendImm(i) => call((*q).wr_send_imm, |f| f(q, i.to_be())),
                SendOp::SendInv(inv) => call((*q).wr_send_inv, |f| f(q, inv)),
                SendOp::CompareSwap { compare, swap } => {
                    call((*q).wr_atomic_cmp_swp, |f| f(q, rkey, remote_addr, compare, swap))
                }
                SendOp::FetchAdd(add) => call((*q).wr_atomic_fetch_add, |f| f(q, rkey, remote_addr, add)),
            }
            match sge {
                Some(s) if inline => {
                    call((*q).wr_set_inline_data, |f| f(q, s.addr as *mut libc::c_void, s.length as usize))
                }
                Some(s) => call((*q).wr_set_sge, |f| f(q, s.lkey, s.addr, s.length)),
                None => call((*q).wr_set_sge_list, |f| f(q, 0, std::ptr::null())),
            }
        }
    }

    #[inline]
    fn atomic_write(&mut self, flags: u32, rkey: u32, remote_addr: u64, value: &[u8; 8]) -> bool {
        self.set_flags(flags);
        let q = self.q;
        // SAFETY: as in `finish`; the value is copied before the builder
        // returns.
        unsafe { call((*q).wr_atomic_write, |f| f(q, rkey, remote_addr, value.as_ptr().cast())) };
        true
    }

    #[inline]
    fn flush(&mut self, flags: u32, rkey: u32, remote_addr: u64, len: usize, ptype: u8) -> bool {
        self.set_flags(flags);
        let q = self.q;
        // SAFETY: as in `finish`.
        unsafe { call((*q).wr_flush, |f| f(q, rkey, remote_addr, len, ptype, FLUSH_RANGE)) };
        true
    }
}

/// Calls a provider member checked present by [`QpEx::carries`].
#[inline(always)]
fn call<F>(f: Option<F>, go: impl FnOnce(F)) {
    if let Some(f) = f {
        go(f)
    }
}

impl QpEx<'_> {
    /// Posts a native request ([`Wr::is_native`]: an atomic write or a
    /// flush, which name no local memory) alone, as one `ibv_wr_start` ...
    /// `ibv_wr_complete` sequence with `wr_id`.
    ///
    /// # Errors
    /// `EOPNOTSUPP` for a request that is not native or not
    /// [`carried`](Self::carries) (nothing is posted); the errno of
    /// `ibv_wr_complete` ([`PostError::maybe_queued`]: the provider may have
    /// queued it).
    pub fn post_native(&mut self, wr_id: u64, wr: &Wr) -> Result<(), PostError> {
        if !self.carries_native(wr) {
            return Err(io::Error::from_raw_os_error(libc::EOPNOTSUPP).into());
        }
        let q = self.qpx;
        // SAFETY: live qp_ex, no other sequence open on it (`&mut self`);
        // the request is carried (checked above) and names no local memory
        // (an atomic write's value is copied before the builder returns).
        unsafe {
            ffi::ibv_wr_start(q);
            let mut b = Extended::started(q);
            b.id(wr_id);
            encode(wr, &mut b);
            queued_outcome(ffi::ibv_wr_complete(q), "ibv_wr_complete")
        }
    }

    /// Whether `wr` is native and this QP's extended interface can post
    /// it.
    #[inline]
    fn carries_native(&self, wr: &Wr) -> bool {
        wr.is_native() && self.carries(wr)
    }

    /// Whether this QP's extended interface can post `wr`: the QP was
    /// created with the operation's `IBV_QP_EX_WITH_*` flag and the
    /// provider filled in its builder (and the setter its local memory
    /// needs), as read once when the QP was created. A connection's QP
    /// carries RDMA write and read beside the native operations, not sends
    /// nor writes with immediate data.
    #[inline]
    pub fn carries(&self, wr: &Wr) -> bool {
        self.carried.covers(carried_need(wr))
    }
}

/// The bits of [`Carried`] `wr` needs: its builder's and, naming local
/// memory, its setter's.
#[inline]
fn carried_need(wr: &Wr) -> u16 {
    type C = Carried;
    let p = match wr {
        Wr::Plain(p) => p,
        Wr::Inline8 { .. } => return C::INLINE | C::WRITE,
        Wr::AtomicWrite { .. } => return C::ATOMIC_WRITE,
        Wr::Flush { .. } => return C::FLUSH,
    };
    let setter = match p.sge {
        Some(_) if p.inline => C::INLINE,
        Some(_) => C::SGE,
        None => C::SGE_LIST,
    };
    setter
        | match p.op {
            SendOp::Write => C::WRITE,
            SendOp::WriteImm(_) => C::WRITE_IMM,
            SendOp::Read => C::READ,
            SendOp::Send => C::SEND,
            SendOp::SendImm(_) => C::SEND_IMM,
            SendOp::SendInv(_) => C::SEND_INV,
            SendOp::CompareSwap { .. } => C::CMP_SWP,
            SendOp::FetchAdd(_) => C::FETCH_ADD,
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
/// ahead of its post by [`SendWr::build_in`]: [`Qp::post_send`] adds only the
/// ID, so a caller can convert before taking a lock, straight into the
/// memory the provider reads.
pub struct BuiltSend {
    w: ffi::ibv_send_wr,
    sge: ffi::ibv_sge,
}

impl BuiltSend {
    /// An empty request, for [`SendWr::build_in`] to write over.
    // SAFETY: plain data, all-zero is valid.
    pub const ZERO: BuiltSend = unsafe { std::mem::zeroed() };
}

impl std::fmt::Debug for BuiltSend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BuiltSend").field("opcode", &self.w.opcode).field("num_sge", &self.w.num_sge).finish()
    }
}

impl SendWr {
    /// This request in verbs' form (its `wr_id` is given when posting),
    /// written over `b` (whatever it held before: every field is written,
    /// the ones this opcode does not use zeroed): built where it is posted
    /// from, without the copy a returned value may cost.
    #[inline(always)]
    pub fn build_in(&self, b: &mut BuiltSend) {
        *b = BuiltSend::ZERO;
        let mut c = Classic::new(&mut b.w);
        encode_plain(self, &mut c);
        b.sge = c.sge;
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

/// The seal of [`SendPosting`] and [`RecvQueue`]: their methods take a
/// [`Token`](private::Token), which no other crate can name, so no other
/// crate calls or implements them: [`Qp::post_send`] and [`post_recv`] are
/// the only ways in.
mod private {
    /// Proof that the caller is this crate.
    #[derive(Debug, Clone, Copy)]
    pub struct Token(pub(super) ());
}
pub(crate) use private::Token;

/// What one [`Qp::post_send`] posts, with the work request ID (or IDs)
/// `Id`:
/// * `&mut` [`BuiltSend`], `Id = u64`: one request built ahead
///   ([`SendWr::build_in`]);
/// * [`SendSgl`], `Id = u64`: one request whose local memory is a list;
/// * `&mut` [`ChainList`](crate::chain::ChainList),
///   `Id = impl Fn(usize) -> u64` (request `i`'s ID): a list of requests
///   with one call.
///
/// Each is its own monomorphised post: a single request goes straight to
/// the provider, without a branch on what it is. Sealed: only this crate
/// implements it.
pub trait SendPosting<Id> {
    /// What a refused post reports.
    type Error;

    /// Posts `self` on `qp` with `wr_id`: [`Qp::post_send`]'s body.
    ///
    /// # Safety
    /// As [`Qp::post_send`].
    #[doc(hidden)]
    unsafe fn post(self, qp: &Qp, wr_id: Id, _: Token) -> Result<(), Self::Error>;
}

impl Qp {
    /// Posts send work requests: `p` (see [`SendPosting`] for what it may
    /// be) with the work request ID, or IDs, `wr_id` (the `wr_id` of a
    /// [`SendWr`] is not used).
    ///
    /// # Safety
    /// Unless a request is inline, the memory its SGEs name must stay
    /// registered and allocated, and must not be accessed in a way that
    /// conflicts with the device (written while the device reads it, or
    /// accessed at all while the device writes it), until the request
    /// completes. (Inline bytes, those of a [`Wr::Inline8`] and a native
    /// atomic write's value are copied during the call.)
    ///
    /// # Errors
    /// What `p`'s post reports: for one request a [`PostError`] (the errno
    /// of `ibv_post_send`: `ENOMEM` when the send queue is full, `EINVAL`
    /// for a bad request), for a list which of its requests were posted
    /// (see each implementation).
    #[inline(always)]
    pub unsafe fn post_send<Id, P: SendPosting<Id>>(&self, p: P, wr_id: Id) -> Result<(), P::Error> {
        // SAFETY: the caller's guarantee, passed on.
        unsafe { p.post(self, wr_id, Token(())) }
    }
}

/// One request built ahead, posted with `ibv_post_send`.
impl SendPosting<u64> for &mut BuiltSend {
    type Error = PostError;

    #[inline(always)]
    unsafe fn post(self, qp: &Qp, wr_id: u64, _: Token) -> Result<(), PostError> {
        self.w.wr_id = wr_id;
        self.w.sg_list = &mut self.sge;
        let mut bad = std::ptr::null_mut();
        // SAFETY: live QP; `self.w` and `self.sge` live across the call
        // (inline data is copied during it); the caller guarantees the
        // referenced memory.
        let rc = unsafe { qp.post_send_raw(&mut self.w, &mut bad) };
        post_outcome(rc, bad, "ibv_post_send")
    }
}

impl Qp {
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

/// Most SGEs one work request carries through a [`SendSgl`] or
/// [`post_recv`]: their `ibv_sge` array is built on the stack.
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

/// One send work request whose local memory is the list `sgl` (gathered
/// in order; empty: a 0-byte operation), for [`Qp::post_send`]; `wr.sge`
/// must be `None`.
#[derive(Debug, Clone, Copy)]
pub struct SendSgl<'a> {
    /// The request (its `wr_id` is the post's).
    pub wr: &'a SendWr,
    /// Its local memory.
    pub sgl: &'a [Sge],
}

/// One request with a list of SGEs, posted with `ibv_post_send`
/// (`num_sge` = `sgl.len()`).
///
/// Errors: `EINVAL` when `wr.sge` is set or `sgl` is longer than
/// [`MAX_SGL`] (nothing is posted); the errno of `ibv_post_send` (`EINVAL`
/// also for more entries than the QP's `max_send_sge`, or inline data over
/// its `max_inline_data`).
impl SendPosting<u64> for SendSgl<'_> {
    type Error = PostError;

    unsafe fn post(self, qp: &Qp, wr_id: u64, _: Token) -> Result<(), PostError> {
        let SendSgl { wr, sgl } = self;
        if wr.sge.is_some() {
            return Err(io::Error::from_raw_os_error(libc::EINVAL).into());
        }
        let mut sges = [std::mem::MaybeUninit::<ffi::ibv_sge>::uninit(); MAX_SGL];
        let n = raw_sgl(sgl, &mut sges)?;
        // SAFETY: plain data, all-zero is valid.
        let mut w: ffi::ibv_send_wr = unsafe { std::mem::zeroed() };
        encode_plain(wr, &mut Classic::new(&mut w));
        w.wr_id = wr_id;
        w.sg_list = sges.as_mut_ptr().cast();
        w.num_sge = n;
        let mut bad = std::ptr::null_mut();
        // SAFETY: live QP; `w` and the first `n` entries of `sges` (written
        // by `raw_sgl`; the provider reads no more) live across the call;
        // the caller guarantees the referenced memory.
        let rc = unsafe { qp.post_send_raw(&mut w, &mut bad) };
        post_outcome(rc, bad, "ibv_post_send")
    }
}

/// A receive queue [`post_recv`] posts to: a [`Qp`]'s own, or an [`Srq`].
/// Sealed: only this crate implements it.
pub trait RecvQueue {
    /// Posts one receive work request with `wr_id` scattering into `sgl`:
    /// [`post_recv`]'s body.
    ///
    /// # Safety
    /// As [`post_recv`].
    #[doc(hidden)]
    unsafe fn post_one(&self, wr_id: u64, sgl: &[Sge], _: Token) -> Result<(), PostError>;
}

/// Posts one receive work request with `wr_id` scattering into `sgl`, in
/// order (an empty list is a 0-byte receive), on `queue`: `ibv_post_recv`
/// on a [`Qp`], `ibv_post_srq_recv` on an [`Srq`].
///
/// # Safety
/// The memory every entry of `sgl` names must stay registered and
/// allocated, and must not be accessed, until the receive completes.
///
/// # Errors
/// `EINVAL` when `sgl` is longer than [`MAX_SGL`] (nothing is posted); the
/// errno of `ibv_post_recv` / `ibv_post_srq_recv` (`EINVAL` also for more
/// entries than the queue's `max_recv_sge` / `max_sge`, `ENOMEM` when it is
/// full).
pub unsafe fn post_recv<Q: RecvQueue>(queue: &Q, wr_id: u64, sgl: &[Sge]) -> Result<(), PostError> {
    // SAFETY: the caller's guarantee, passed on.
    unsafe { queue.post_one(wr_id, sgl, Token(())) }
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

impl RecvQueue for Qp {
    unsafe fn post_one(&self, wr_id: u64, sgl: &[Sge], _: Token) -> Result<(), PostError> {
        // SAFETY: live QP; `post_recv_wr` passes a request valid for the
        // call; the caller guarantees the referenced memory.
        post_recv_wr(wr_id, sgl, "ibv_post_recv", |w, bad| unsafe { self.post_recv_raw(w, bad) })
    }
}

impl RecvQueue for Srq {
    unsafe fn post_one(&self, wr_id: u64, sgl: &[Sge], _: Token) -> Result<(), PostError> {
        // SAFETY: live SRQ; as for a QP.
        post_recv_wr(wr_id, sgl, "ibv_post_srq_recv", |w, bad| unsafe { self.post_recv_raw(w, bad) })
    }
}

/// The next rkey for a type 2 bind: same index, next 8-bit key
/// (`ibv_inc_rkey`).
pub fn next_rkey(rkey: u32) -> u32 {
    (rkey & 0xffff_ff00) | (rkey.wrapping_add(1) & 0xff)
}

#[cfg(test)]
mod tests {
    /// A request needs its builder and, naming local memory, its setter;
    /// a QP without the extended interface's members carries nothing.
    #[test]
    fn a_request_is_carried_when_its_builder_and_setter_are() {
        use super::{carried_need, Carried, SendOp, SendWr, Sge, Wr, WrFlags};
        let carries = |c: Carried, w: &Wr| c.covers(carried_need(w));
        let plain = |op, sge: Option<Sge>, inline| {
            Wr::Plain(SendWr { wr_id: 0, op, sge, remote_addr: 0, rkey: 0, signaled: true, fence: false, inline })
        };
        let sge = Some(Sge { addr: 1, length: 8, lkey: 2 });
        let flags = WrFlags { wr_id: 0, signaled: true, fence: false };
        let (write, read) = (plain(SendOp::Write, sge, false), plain(SendOp::Read, sge, false));
        let native = [
            Wr::AtomicWrite { flags, rkey: 1, remote_addr: 8, value: [0; 8] },
            Wr::Flush { flags, rkey: 1, remote_addr: 8, len: 8, ptype: 0 },
        ];
        // A connection's QP: write and read beside the native operations.
        let conn = Carried(
            Carried::SGE
                | Carried::INLINE
                | Carried::SGE_LIST
                | Carried::WRITE
                | Carried::READ
                | Carried::ATOMIC_WRITE
                | Carried::FLUSH,
        );
        for w in [write, read, plain(SendOp::Write, None, false), plain(SendOp::Write, sge, true)] {
            assert!(carries(conn, &w), "{w:?}");
        }
        assert!(carries(conn, &Wr::Inline8 { flags, rkey: 1, remote_addr: 8, value: [1; 8] }));
        assert!(native.iter().all(|w| carries(conn, w)));
        for op in [
            SendOp::WriteImm(1),
            SendOp::Send,
            SendOp::SendImm(1),
            SendOp::SendInv(1),
            SendOp::CompareSwap { compare: 1, swap: 2 },
            SendOp::FetchAdd(1),
        ] {
            assert!(!carries(conn, &plain(op, sge, false)), "{op:?}");
        }
        // A builder without the setter its memory needs is not enough.
        let no_sge = Carried(conn.0 & !Carried::SGE);
        assert!(!carries(no_sge, &write) && carries(no_sge, &plain(SendOp::Write, sge, true)));
        assert!(!carries(Carried(conn.0 & !Carried::FLUSH), &native[1]));
        // SAFETY: all-zero is a valid qp_ex: no member filled in.
        let none: super::ffi::ibv_qp_ex = unsafe { std::mem::zeroed() };
        // SAFETY: a qp_ex to read, every member None.
        let empty = unsafe { Carried::of(&none, u64::MAX) };
        assert_eq!(empty, Carried::default());
        assert!(!carries(empty, &write) && !native.iter().any(|w| carries(empty, w)));
    }

    #[test]
    fn sgl_longer_than_the_stack_array_is_refused() {
        let mut out = [std::mem::MaybeUninit::uninit(); super::MAX_SGL];
        let one = super::Sge { addr: 1, length: 2, lkey: 3 };
        assert_eq!(super::raw_sgl(&[one; super::MAX_SGL], &mut out).unwrap(), super::MAX_SGL as i32);
        let e = super::raw_sgl(&[one; super::MAX_SGL + 1], &mut out).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EINVAL));
    }

    /// The fields of `b` a provider may read, by name (never a padding
    /// byte: `compare_add` overlaps the RDMA variant's padding, read only
    /// for the atomic opcodes that write it).
    #[allow(clippy::type_complexity)]
    fn fields(
        b: &super::BuiltSend,
    ) -> (u64, bool, i32, u32, u32, u32, u64, u32, u64, u32, Option<u64>, (u64, u32, u32)) {
        use super::ffi::ibv_wr_opcode as o;
        let w = &b.w;
        // SAFETY: integer fields of unions, each never padding in any of
        // their variants (all-zero from `ZERO`, then written whole).
        unsafe {
            let atomic = w.opcode == o::IBV_WR_ATOMIC_CMP_AND_SWP || w.opcode == o::IBV_WR_ATOMIC_FETCH_AND_ADD;
            (
                w.wr_id,
                w.next.is_null(),
                w.num_sge,
                w.opcode,
                w.send_flags,
                w.__bindgen_anon_1.imm_data,
                w.wr.atomic.remote_addr,
                w.wr.rdma.rkey,
                w.wr.atomic.swap,
                w.wr.atomic.rkey,
                atomic.then_some(w.wr.atomic.compare_add),
                (b.sge.addr, b.sge.length, b.sge.lkey),
            )
        }
    }

    #[test]
    fn a_request_built_over_another_keeps_nothing_of_it() {
        use super::{BuiltSend, SendOp, SendWr, Sge};
        let wr = |op, remote_addr, rkey| SendWr {
            wr_id: 0,
            op,
            sge: Some(Sge { addr: 0x1000, length: 8, lkey: 7 }),
            remote_addr,
            rkey,
            signaled: true,
            fence: false,
            inline: false,
        };
        let first = [
            wr(SendOp::CompareSwap { compare: 1, swap: 2 }, 0x2000, 9),
            wr(SendOp::WriteImm(5), 0x3000, 10),
            wr(SendOp::SendInv(11), 0, 0),
        ];
        let then = [wr(SendOp::Send, 0, 0), wr(SendOp::Read, 0x4000, 12), wr(SendOp::FetchAdd(3), 0x5000, 13)];
        for a in &first {
            for b in &then {
                let mut reused = BuiltSend::ZERO;
                a.build_in(&mut reused);
                b.build_in(&mut reused);
                let mut fresh = BuiltSend::ZERO;
                b.build_in(&mut fresh);
                assert_eq!(fields(&reused), fields(&fresh), "{:?} built over {:?}", b.op, a.op);
            }
        }
    }

    #[test]
    fn next_rkey_wraps_the_key_byte() {
        assert_eq!(super::next_rkey(0x0800_01ff), 0x0800_0100);
        assert_eq!(super::next_rkey(0x0800_0112), 0x0800_0113);
    }
}
