//! Posting several send work requests with one call: a linked list of
//! `ibv_send_wr` through one `ibv_post_send` (one doorbell), or, when the
//! chain holds a native atomic write or flush, one `ibv_wr_start` ...
//! `ibv_wr_complete` sequence on the QP's extended interface.
//!
//! The two paths fail differently, as the verbs do: `ibv_post_send` stops
//! at the first request it cannot post and reports it in `bad_wr`, the
//! requests before it *are* posted (ibv_post_send(3)); `ibv_wr_complete`
//! posts nothing when it fails ("No work is executed to the queue until
//! ibv_wr_complete() returns success", ibv_wr_post(3)).

use crate::ffi;
use crate::qp::{Qp, FLUSH_RANGE};
use crate::qp::{QpEx, QP_EX_WITH_RDMA_READ, QP_EX_WITH_RDMA_WRITE, QP_EX_WITH_SEND};
use crate::wr::{SendOp, SendWr, WrFlags};
use std::io;
use std::mem::MaybeUninit;

use ffi::ibv_qp_create_send_ops_flags as send_ops;

/// Most work requests one [`Qp::post_send_list`] call takes (the list is
/// built on the stack).
pub const MAX_CHAIN: usize = 16;

/// One work request of a chain ([`Qp::post_send_list`]).
#[derive(Debug, Clone, Copy)]
pub enum ChainWr {
    /// A work request of [`Qp::post_send`].
    Plain(SendWr),
    /// An 8-byte RDMA WRITE of `value` to `remote_addr`, sent inline
    /// (librpma's emulated atomic write): the bytes are copied from the
    /// chain during the call.
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
    /// extended interface ([`QpEx::has_atomic_write`]).
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
    /// range (`ibv_wr_flush`); needs [`QpEx::has_flush`].
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

impl ChainWr {
    /// Sets the work request ID.
    #[inline]
    pub fn set_wr_id(&mut self, wr_id: u64) {
        match self {
            ChainWr::Plain(w) => w.wr_id = wr_id,
            ChainWr::Inline8 { flags, .. } | ChainWr::AtomicWrite { flags, .. } | ChainWr::Flush { flags, .. } => {
                flags.wr_id = wr_id
            }
        }
    }

    /// Whether it asks for a completion (`IBV_SEND_SIGNALED`).
    #[inline]
    pub fn signaled(&self) -> bool {
        match self {
            ChainWr::Plain(w) => w.signaled,
            ChainWr::Inline8 { flags, .. } | ChainWr::AtomicWrite { flags, .. } | ChainWr::Flush { flags, .. } => {
                flags.signaled
            }
        }
    }

    /// Whether only the extended interface can post it.
    #[inline]
    pub fn is_native(&self) -> bool {
        matches!(self, ChainWr::AtomicWrite { .. } | ChainWr::Flush { .. })
    }
}

fn send_flags(signaled: bool, fence: bool, inline: bool) -> u32 {
    use ffi::ibv_send_flags as f;
    let mut x = 0;
    if signaled {
        x |= f::IBV_SEND_SIGNALED.0;
    }
    if fence {
        x |= f::IBV_SEND_FENCE.0;
    }
    if inline {
        x |= f::IBV_SEND_INLINE.0;
    }
    x
}

/// The `ibv_send_wr` of `wr` (not linked), its one SGE at `sge`.
fn raw_wr(wr: &ChainWr, sge: &mut MaybeUninit<ffi::ibv_sge>) -> ffi::ibv_send_wr {
    use ffi::ibv_wr_opcode as op;
    // SAFETY: plain data, all-zero is valid.
    let mut w: ffi::ibv_send_wr = unsafe { std::mem::zeroed() };
    let rdma = |addr: u64, rkey: u32| ffi::ibv_send_wr__bindgen_ty_2__bindgen_ty_1 { remote_addr: addr, rkey };
    match wr {
        ChainWr::Plain(p) => {
            w.wr_id = p.wr_id;
            if let Some(s) = p.sge {
                w.sg_list = sge.write(ffi::ibv_sge { addr: s.addr, length: s.length, lkey: s.lkey });
                w.num_sge = 1;
            }
            crate::wr::set_op(&mut w, p.op, p.remote_addr, p.rkey);
            w.send_flags = send_flags(p.signaled, p.fence, p.inline);
        }
        ChainWr::Inline8 { flags, rkey, remote_addr, value } => {
            w.wr_id = flags.wr_id;
            w.sg_list = sge.write(ffi::ibv_sge { addr: value.as_ptr() as u64, length: 8, lkey: 0 });
            w.num_sge = 1;
            w.opcode = op::IBV_WR_RDMA_WRITE;
            w.wr.rdma = rdma(*remote_addr, *rkey);
            w.send_flags = send_flags(flags.signaled, flags.fence, true);
        }
        // Never reached: post_send_list sends these to the extended path.
        ChainWr::AtomicWrite { flags, .. } | ChainWr::Flush { flags, .. } => {
            w.wr_id = flags.wr_id;
            w.opcode = op::IBV_WR_DRIVER1; // refused by every provider (EINVAL)
        }
    }
    w
}

impl Qp {
    /// Posts `wrs` in order with one call: as one linked list through
    /// `ibv_post_send` (one doorbell), or, when one of them is native
    /// ([`ChainWr::is_native`]), as one `ibv_wr_start` ... `ibv_wr_complete`
    /// sequence on the extended interface.
    ///
    /// # Safety
    /// As [`Qp::post_send`], for every request in `wrs` (the bytes of an
    /// [`ChainWr::Inline8`] and of a native atomic write are copied during
    /// the call).
    ///
    /// # Errors
    /// `(k, errno)`: requests `0..k` were posted, `k..` were not.
    /// * through `ibv_post_send`, `k` is the index of the request the
    ///   provider refused (`bad_wr`; `ENOMEM` when the send queue is full,
    ///   `EINVAL` for a bad request): the ones before it are posted and will
    ///   complete;
    /// * through the extended interface `k` is always 0: `ibv_wr_complete`
    ///   posts all or nothing; `EOPNOTSUPP` (before anything is built) when
    ///   the QP's extended interface does not carry one of the requests (see
    ///   [`QpEx::carries`]);
    /// * `(0, EINVAL)` for more than [`MAX_CHAIN`] requests.
    pub unsafe fn post_send_list(&self, wrs: &[ChainWr]) -> Result<(), (usize, io::Error)> {
        let n = wrs.len();
        if n == 0 {
            return Ok(());
        }
        if n > MAX_CHAIN {
            return Err((0, io::Error::from_raw_os_error(libc::EINVAL)));
        }
        if wrs.iter().any(ChainWr::is_native) {
            let Some(mut ex) = self.ex() else {
                return Err((0, io::Error::from_raw_os_error(libc::EOPNOTSUPP)));
            };
            // SAFETY: the caller's guarantee, passed on.
            return unsafe { ex.post_list(wrs) }.map_err(|e| (0, e));
        }
        let mut raw = [const { MaybeUninit::<ffi::ibv_send_wr>::uninit() }; MAX_CHAIN];
        let mut sges = [const { MaybeUninit::<ffi::ibv_sge>::uninit() }; MAX_CHAIN];
        let base: *mut ffi::ibv_send_wr = raw.as_mut_ptr().cast();
        for (i, (wr, sge)) in wrs.iter().zip(sges.iter_mut()).enumerate() {
            let mut w = raw_wr(wr, sge);
            // The next element of `raw`, written in the next round (its
            // address is fixed: `raw` does not move).
            w.next = if i + 1 < n { base.wrapping_add(i + 1) } else { std::ptr::null_mut() };
            // SAFETY: i < n <= MAX_CHAIN: inside `raw`, written through the
            // one pointer the list is built on.
            unsafe { base.add(i).write(w) };
        }
        let mut bad: *mut ffi::ibv_send_wr = std::ptr::null_mut();
        // SAFETY: live QP; raw[0..n] are initialised and linked in order,
        // their SGEs in `sges` and the inline bytes in `wrs` live across the
        // call; the caller guarantees the memory the SGEs name.
        let rc = unsafe { ffi::ibv_post_send(self.as_ptr(), base, &mut bad) };
        if rc == 0 {
            return Ok(());
        }
        let k = if bad.is_null() {
            0
        } else {
            ((bad as usize).wrapping_sub(base as usize) / std::mem::size_of::<ffi::ibv_send_wr>()).min(n)
        };
        Err((k, crate::from_errno_ret(rc, "ibv_post_send").err().unwrap_or_else(|| io::Error::other("ibv_post_send"))))
    }
}

const WRITE_WITH_IMM: u64 = send_ops::IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM.0 as u64;
const SEND_WITH_IMM: u64 = send_ops::IBV_QP_EX_WITH_SEND_WITH_IMM.0 as u64;
const SEND_WITH_INV: u64 = send_ops::IBV_QP_EX_WITH_SEND_WITH_INV.0 as u64;
const ATOMIC_CMP_AND_SWP: u64 = send_ops::IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP.0 as u64;
const ATOMIC_FETCH_AND_ADD: u64 = send_ops::IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD.0 as u64;

impl QpEx<'_> {
    /// Whether this QP's extended interface can post `wr`: the QP was
    /// created with the operation's `IBV_QP_EX_WITH_*` flag and the
    /// provider filled in its builder (and the setter it needs). A
    /// connection's QP carries RDMA write and read beside the native
    /// operations, not sends nor writes with immediate data.
    pub fn carries(&self, wr: &ChainWr) -> bool {
        let q = self.qpx;
        let has = |flag: u64| self.send_ops & flag != 0;
        // SAFETY: live qp_ex; members are read only for operations the QP
        // was created with, which the library then has.
        unsafe {
            match wr {
                ChainWr::Plain(p) => {
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
                ChainWr::Inline8 { .. } => {
                    has(QP_EX_WITH_RDMA_WRITE) && (*q).wr_rdma_write.is_some() && (*q).wr_set_inline_data.is_some()
                }
                ChainWr::AtomicWrite { .. } => self.has_atomic_write(),
                ChainWr::Flush { .. } => self.has_flush(),
            }
        }
    }

    /// Posts `wrs` as one `ibv_wr_start` ... `ibv_wr_complete` sequence:
    /// all of them or, when `ibv_wr_complete` fails, none.
    ///
    /// # Safety
    /// As [`Qp::post_send`], for every request in `wrs`.
    ///
    /// # Errors
    /// `EOPNOTSUPP` (before anything is built) when a request is not
    /// [`carried`](Self::carries); the errno of `ibv_wr_complete`.
    pub unsafe fn post_list(&mut self, wrs: &[ChainWr]) -> io::Result<()> {
        if !wrs.iter().all(|w| self.carries(w)) {
            return Err(io::Error::from_raw_os_error(libc::EOPNOTSUPP));
        }
        let q = self.qpx;
        // SAFETY: live qp_ex; every builder and setter called below was
        // checked present by `carries`; the caller guarantees the local
        // memory; inline bytes and the atomic value are copied by the
        // provider before the builder or setter returns.
        unsafe {
            ffi::ibv_wr_start(q);
            for wr in wrs {
                match *wr {
                    ChainWr::Plain(p) => {
                        (*q).wr_id = p.wr_id;
                        (*q).wr_flags = send_flags(p.signaled, p.fence, false);
                        match p.op {
                            SendOp::Write => call((*q).wr_rdma_write, |f| f(q, p.rkey, p.remote_addr)),
                            SendOp::WriteImm(i) => {
                                call((*q).wr_rdma_write_imm, |f| f(q, p.rkey, p.remote_addr, i.to_be()))
                            }
                            SendOp::Read => call((*q).wr_rdma_read, |f| f(q, p.rkey, p.remote_addr)),
                            SendOp::Send => call((*q).wr_send, |f| f(q)),
                            SendOp::SendImm(i) => call((*q).wr_send_imm, |f| f(q, i.to_be())),
                            SendOp::SendInv(rkey) => call((*q).wr_send_inv, |f| f(q, rkey)),
                            SendOp::CompareSwap { compare, swap } => {
                                call((*q).wr_atomic_cmp_swp, |f| f(q, p.rkey, p.remote_addr, compare, swap))
                            }
                            SendOp::FetchAdd(add) => {
                                call((*q).wr_atomic_fetch_add, |f| f(q, p.rkey, p.remote_addr, add))
                            }
                        }
                        match p.sge {
                            Some(s) if p.inline => {
                                call((*q).wr_set_inline_data, |f| f(q, s.addr as *mut libc::c_void, s.length as usize))
                            }
                            Some(s) => call((*q).wr_set_sge, |f| f(q, s.lkey, s.addr, s.length)),
                            None => call((*q).wr_set_sge_list, |f| f(q, 0, std::ptr::null())),
                        }
                    }
                    ChainWr::Inline8 { flags, rkey, remote_addr, ref value } => {
                        (*q).wr_id = flags.wr_id;
                        (*q).wr_flags = send_flags(flags.signaled, flags.fence, false);
                        call((*q).wr_rdma_write, |f| f(q, rkey, remote_addr));
                        call((*q).wr_set_inline_data, |f| f(q, value.as_ptr() as *mut libc::c_void, 8));
                    }
                    ChainWr::AtomicWrite { flags, rkey, remote_addr, ref value } => {
                        (*q).wr_id = flags.wr_id;
                        (*q).wr_flags = send_flags(flags.signaled, flags.fence, false);
                        call((*q).wr_atomic_write, |f| f(q, rkey, remote_addr, value.as_ptr().cast()));
                    }
                    ChainWr::Flush { flags, rkey, remote_addr, len, ptype } => {
                        (*q).wr_id = flags.wr_id;
                        (*q).wr_flags = send_flags(flags.signaled, flags.fence, false);
                        call((*q).wr_flush, |f| f(q, rkey, remote_addr, len, ptype, FLUSH_RANGE));
                    }
                }
            }
            crate::from_errno_ret(ffi::ibv_wr_complete(q), "ibv_wr_complete")
        }
    }
}

/// Calls a provider member checked present by [`QpEx::carries`].
#[inline(always)]
fn call<F>(f: Option<F>, go: impl FnOnce(F)) {
    if let Some(f) = f {
        go(f)
    }
}
