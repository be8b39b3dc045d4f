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
use crate::wr::{SendOp, SendWr, Sge, WrFlags};
use std::io;
use std::mem::MaybeUninit;

use ffi::ibv_qp_create_send_ops_flags as send_ops;

/// Most work requests of a [`ChainList`] (kept in the list itself, and
/// linked on the stack when posted).
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

/// A chain to post with [`Qp::post_send_list`]: up to [`MAX_CHAIN`] work
/// requests, each with its caller's record `T` (what keeps its local memory
/// alive, what its completion reports), kept in place: a list allocates
/// nothing, and moving it copies it whole. Each request is built once, as
/// it is added, straight into its `ibv_send_wr` and SGE (a native request
/// too, in the same slots: see [`get`](Self::get)); posting only links them.
pub struct ChainList<T> {
    /// `raw`, `sges` and `recs` are initialised up to `len`, `vals` where
    /// the request is an [`ChainWr::Inline8`] or a native atomic write.
    len: usize,
    /// Whether one of the requests is native ([`ChainWr::is_native`]).
    native: bool,
    /// Bit `i`: request `i` is a [`ChainWr::Inline8`], whose SGE points at
    /// its bytes in `vals[i]` (set when posting: the list may move before).
    inline8: u16,
    /// The requests' `ibv_send_wr`s, but for `wr_id`, `next` and `sg_list`
    /// (set when posting). A native request's has the opcode
    /// `IBV_WR_DRIVER1` (refused by every provider), its kind in
    /// `imm_data` ([`NATIVE_ATOMIC_WRITE`], [`NATIVE_FLUSH`]), its remote
    /// address and key in `wr.rdma` and, for a flush, its length and
    /// placement type in its SGE's `addr` and `length` (with `num_sge` 0).
    raw: [MaybeUninit<ffi::ibv_send_wr>; MAX_CHAIN],
    /// Their SGEs (meaningful where `raw[i].num_sge` is 1).
    sges: [MaybeUninit<ffi::ibv_sge>; MAX_CHAIN],
    /// The bytes of an inline write or a native atomic write.
    vals: [MaybeUninit<[u8; 8]>; MAX_CHAIN],
    /// The records, each as `Some` (so `take_into` copies one into a slot
    /// of `Option<T>` as it is).
    recs: [MaybeUninit<Option<T>>; MAX_CHAIN],
}

/// `imm_data` of a native atomic write's `ibv_send_wr` in a [`ChainList`].
const NATIVE_ATOMIC_WRITE: u32 = 0;
/// `imm_data` of a native flush's `ibv_send_wr` in a [`ChainList`].
const NATIVE_FLUSH: u32 = 1;

// The inline bit mask has a bit for every request.
const _: () = assert!(MAX_CHAIN <= u16::BITS as usize);

impl<T> std::fmt::Debug for ChainList<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChainList").field("wrs", &self.iter().collect::<Vec<_>>()).finish_non_exhaustive()
    }
}

impl<T> Default for ChainList<T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T> ChainList<T> {
    /// An empty list.
    #[inline]
    pub const fn new() -> Self {
        ChainList {
            len: 0,
            native: false,
            inline8: 0,
            raw: [const { MaybeUninit::uninit() }; MAX_CHAIN],
            sges: [const { MaybeUninit::uninit() }; MAX_CHAIN],
            vals: [const { MaybeUninit::uninit() }; MAX_CHAIN],
            recs: [const { MaybeUninit::uninit() }; MAX_CHAIN],
        }
    }

    /// Requests in the list.
    #[inline]
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the list is empty.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Whether the list holds [`MAX_CHAIN`] requests.
    #[inline]
    pub fn is_full(&self) -> bool {
        self.len >= MAX_CHAIN
    }

    /// Whether one of the requests is native ([`ChainWr::is_native`]), so
    /// the list is posted through the extended interface.
    #[inline]
    pub fn has_native(&self) -> bool {
        self.native
    }

    /// Appends `wr` with its record; both are handed back when the list is
    /// full.
    #[inline(always)]
    pub fn push(&mut self, wr: ChainWr, rec: T) -> Result<(), (ChainWr, T)> {
        let i = self.len;
        let (Some(raw), Some(sge), Some(val), Some(r)) =
            (self.raw.get_mut(i), self.sges.get_mut(i), self.vals.get_mut(i), self.recs.get_mut(i))
        else {
            return Err((wr, rec));
        };
        raw_wr(&wr, raw, sge, val);
        match wr {
            ChainWr::Inline8 { .. } => self.inline8 |= 1 << i,
            ChainWr::AtomicWrite { .. } | ChainWr::Flush { .. } => self.native = true,
            ChainWr::Plain(_) => {}
        }
        r.write(Some(rec));
        self.len = i + 1;
        Ok(())
    }

    /// Request `i` as it was added (`None` past the end).
    pub fn get(&self, i: usize) -> Option<ChainWr> {
        use ffi::ibv_wr_opcode as o;
        if i >= self.len {
            return None;
        }
        // SAFETY: i < len: raw[i] and sges[i] are initialised (sges[i]
        // only read where num_sge is 1 or the request is native, which
        // both write it), vals[i] where read (inline or native atomic
        // write, which write it); the union members read are plain
        // integers of a struct that was zeroed before it was filled.
        unsafe {
            let w = self.raw[i].assume_init_ref();
            let signaled = w.send_flags & ffi::ibv_send_flags::IBV_SEND_SIGNALED.0 != 0;
            let fence = w.send_flags & ffi::ibv_send_flags::IBV_SEND_FENCE.0 != 0;
            let flags = WrFlags { wr_id: 0, signaled, fence };
            let (rdma, atomic, imm) = (w.wr.rdma, w.wr.atomic, w.__bindgen_anon_1.imm_data);
            let (remote_addr, rkey) = (rdma.remote_addr, rdma.rkey);
            if w.opcode == o::IBV_WR_DRIVER1 {
                return Some(if imm == NATIVE_FLUSH {
                    let s = self.sges[i].assume_init_ref();
                    ChainWr::Flush { flags, rkey, remote_addr, len: s.addr as usize, ptype: s.length as u8 }
                } else {
                    ChainWr::AtomicWrite { flags, rkey, remote_addr, value: self.vals[i].assume_init() }
                });
            }
            if self.inline8 & (1 << i) != 0 {
                return Some(ChainWr::Inline8 { flags, rkey, remote_addr, value: self.vals[i].assume_init() });
            }
            let (op, remote_addr, rkey) = match w.opcode {
                o::IBV_WR_RDMA_WRITE => (SendOp::Write, remote_addr, rkey),
                o::IBV_WR_RDMA_WRITE_WITH_IMM => (SendOp::WriteImm(u32::from_be(imm)), remote_addr, rkey),
                o::IBV_WR_RDMA_READ => (SendOp::Read, remote_addr, rkey),
                o::IBV_WR_SEND => (SendOp::Send, 0, 0),
                o::IBV_WR_SEND_WITH_IMM => (SendOp::SendImm(u32::from_be(imm)), 0, 0),
                o::IBV_WR_SEND_WITH_INV => (SendOp::SendInv(w.__bindgen_anon_1.invalidate_rkey), 0, 0),
                o::IBV_WR_ATOMIC_CMP_AND_SWP => {
                    let op = SendOp::CompareSwap { compare: atomic.compare_add, swap: atomic.swap };
                    (op, atomic.remote_addr, atomic.rkey)
                }
                o::IBV_WR_ATOMIC_FETCH_AND_ADD => {
                    (SendOp::FetchAdd(atomic.compare_add), atomic.remote_addr, atomic.rkey)
                }
                _ => return None, // never written by `push`
            };
            let sge = (w.num_sge == 1).then(|| {
                let s = self.sges[i].assume_init_ref();
                Sge { addr: s.addr, length: s.length, lkey: s.lkey }
            });
            Some(ChainWr::Plain(SendWr {
                wr_id: 0,
                op,
                sge,
                remote_addr,
                rkey,
                signaled,
                fence,
                inline: w.send_flags & ffi::ibv_send_flags::IBV_SEND_INLINE.0 != 0,
            }))
        }
    }

    /// The requests, in order, as they were added.
    pub fn iter(&self) -> impl Iterator<Item = ChainWr> + Clone + '_ {
        (0..self.len).filter_map(|i| self.get(i))
    }

    /// Empties the list, handing the records of the first `posted` requests
    /// to `f` with their index, in order, and dropping the rest.
    #[inline(always)]
    pub fn take(&mut self, posted: usize, mut f: impl FnMut(usize, T)) {
        let n = self.len;
        // Emptied first: should `f` unwind, the records not yet moved leak
        // (never dropped twice).
        self.len = 0;
        self.native = false;
        self.inline8 = 0;
        let posted = posted.min(n);
        let (out, rest) = self.recs.split_at_mut(posted.min(MAX_CHAIN));
        for (i, r) in out.iter().enumerate() {
            // SAFETY: recs[..n] were initialised (each `Some`); each is
            // read out once (the list no longer counts them).
            if let Some(rec) = unsafe { r.assume_init_read() } {
                f(i, rec);
            }
        }
        if posted < n {
            drop_rest(rest, n - posted);
        }
    }

    /// Empties the list, moving the records of the first `posted` requests
    /// into `slots`, request `i`'s into `slots[at(i)]` (dropping what was
    /// there first: nothing, for a caller whose free slots are empty), and
    /// dropping the rest. Each record goes straight from the list into its
    /// slot.
    ///
    /// # Panics
    /// When `at(i)` is out of `slots`' bounds (the records not yet moved
    /// then leak, never dropped twice).
    #[inline(always)]
    pub fn take_into(&mut self, posted: usize, slots: &mut [Option<T>], at: impl Fn(usize) -> usize) {
        let n = self.len;
        // Emptied first, as in `take`.
        self.len = 0;
        self.native = false;
        self.inline8 = 0;
        let posted = posted.min(n).min(MAX_CHAIN);
        for (i, r) in self.recs.iter().enumerate().take(posted) {
            let slot = &mut slots[at(i)];
            if slot.is_some() {
                clear_slot(slot);
            }
            // SAFETY: recs[i] (i < n) is initialised, a `Option<T>` like
            // the slot, and read out once (the list no longer counts it);
            // the slot is empty (nothing to drop is overwritten), and
            // apart from the list (`slots` is borrowed mutably while the
            // list is).
            unsafe { std::ptr::copy_nonoverlapping(r.as_ptr(), slot, 1) };
        }
        if posted < n {
            drop_rest(&mut self.recs[posted..], n - posted);
        }
    }

    /// Empties the list, dropping the records.
    #[inline]
    pub fn clear(&mut self) {
        self.take(0, |_, _| {});
    }

    /// Links the `ibv_send_wr`s of the `len` (> 0) requests in order,
    /// request `i` with ID `wr_id(i)`, each to its SGE, and the SGE of an
    /// inline write to its bytes; returns the first. The pointers stay
    /// valid while the list is neither moved nor changed.
    #[inline(always)]
    fn link(&mut self, wr_id: impl Fn(usize) -> u64) -> *mut ffi::ibv_send_wr {
        let n = self.len.min(MAX_CHAIN);
        let raw: *mut ffi::ibv_send_wr = self.raw.as_mut_ptr().cast();
        let sges: *mut ffi::ibv_sge = self.sges.as_mut_ptr().cast();
        let vals: *mut [u8; 8] = self.vals.as_mut_ptr().cast();
        // SAFETY: i < n = len <= MAX_CHAIN: raw[i] and sges[i] are
        // elements of this list (raw[i] initialised), reached through
        // pointers to its arrays; `raw.add(n)` is one past the last linked
        // one at most, only stored (then overwritten by the null).
        unsafe {
            for i in 0..n {
                let w = raw.add(i);
                (*w).wr_id = wr_id(i);
                (*w).next = raw.add(i + 1);
                (*w).sg_list = sges.add(i);
            }
            if n > 0 {
                (*raw.add(n - 1)).next = std::ptr::null_mut();
            }
            // The SGE of an inline write names its bytes (sges[i] was
            // written by `push` for it, so is initialised).
            let mut m = u32::from(self.inline8) & ((1u32 << n) - 1);
            while m != 0 {
                let i = m.trailing_zeros() as usize;
                (*sges.add(i)).addr = vals.add(i) as u64;
                m &= m - 1;
            }
        }
        raw
    }
}

/// Empties a slot `ChainList::take_into` fills.
#[cold]
#[inline(never)]
fn clear_slot<T>(slot: &mut Option<T>) {
    *slot = None;
}

/// Drops the first `k` records of `rest`.
#[cold]
#[inline(never)]
fn drop_rest<T>(rest: &mut [MaybeUninit<T>], k: usize) {
    for r in rest.iter_mut().take(k) {
        // SAFETY: the caller's records not handed out (initialised, no
        // longer counted by the list), dropped once.
        unsafe { r.assume_init_drop() };
    }
}

impl<T> Drop for ChainList<T> {
    #[inline]
    fn drop(&mut self) {
        if self.len != 0 {
            self.clear();
        }
    }
}

#[inline(always)]
fn send_flags(signaled: bool, fence: bool, inline: bool) -> u32 {
    use ffi::ibv_send_flags as f;
    // Branch-free: the bits are 2, 1 and 8.
    const _: () = assert!(f::IBV_SEND_SIGNALED.0 == 2 && f::IBV_SEND_FENCE.0 == 1 && f::IBV_SEND_INLINE.0 == 8);
    (u32::from(signaled) << 1) | u32::from(fence) | (u32::from(inline) << 3)
}

/// Writes the `ibv_send_wr` of `wr` into `raw`, unlinked (no ID, `next`
/// nor `sg_list`: see [`ChainList::link`]), its one SGE into `sge` (zeros
/// and `num_sge` 0 when it has none; the SGE of an [`ChainWr::Inline8`]
/// without its address) and the
/// bytes of an inline or native atomic write into `val`; see
/// [`ChainList`] for a native request's.
#[inline(always)]
fn raw_wr(
    wr: &ChainWr,
    raw: &mut MaybeUninit<ffi::ibv_send_wr>,
    sge: &mut MaybeUninit<ffi::ibv_sge>,
    val: &mut MaybeUninit<[u8; 8]>,
) {
    use ffi::ibv_wr_opcode as op;
    // SAFETY: plain data, all-zero is valid.
    let w = raw.write(unsafe { std::mem::zeroed() });
    match *wr {
        ChainWr::Plain(p) => {
            let (s, n) = crate::wr::raw_sge(&p.sge);
            sge.write(s);
            w.num_sge = n;
            crate::wr::set_op(w, p.op, p.remote_addr, p.rkey);
            w.send_flags = send_flags(p.signaled, p.fence, p.inline);
        }
        ChainWr::Inline8 { flags, rkey, remote_addr, value } => {
            sge.write(ffi::ibv_sge { addr: 0, length: 8, lkey: 0 });
            val.write(value);
            w.num_sge = 1;
            crate::wr::set_op(w, SendOp::Write, remote_addr, rkey);
            w.send_flags = send_flags(flags.signaled, flags.fence, true);
        }
        // Never posted through ibv_post_send (a list holding one goes to
        // the extended interface), and refused by every provider should
        // it be.
        ChainWr::AtomicWrite { flags, rkey, remote_addr, value } => {
            w.opcode = op::IBV_WR_DRIVER1;
            w.__bindgen_anon_1.imm_data = NATIVE_ATOMIC_WRITE;
            w.wr.rdma = ffi::ibv_send_wr__bindgen_ty_2__bindgen_ty_1 { remote_addr, rkey };
            w.send_flags = send_flags(flags.signaled, flags.fence, false);
            val.write(value);
        }
        ChainWr::Flush { flags, rkey, remote_addr, len, ptype } => {
            w.opcode = op::IBV_WR_DRIVER1;
            w.__bindgen_anon_1.imm_data = NATIVE_FLUSH;
            w.wr.rdma = ffi::ibv_send_wr__bindgen_ty_2__bindgen_ty_1 { remote_addr, rkey };
            w.send_flags = send_flags(flags.signaled, flags.fence, false);
            sge.write(ffi::ibv_sge { addr: len as u64, length: u32::from(ptype), lkey: 0 });
        }
    }
}

impl Qp {
    /// Posts the requests of `list` in order with one call, request `i`
    /// with the work request ID `wr_id(i)` (the IDs in the requests are not
    /// used): as one linked list through `ibv_post_send` (one doorbell),
    /// or, when one of them is native ([`ChainList::has_native`]), as one
    /// `ibv_wr_start` ... `ibv_wr_complete` sequence on the extended
    /// interface.
    ///
    /// # Safety
    /// As [`Qp::post_send`], for every request in `list` (the bytes of an
    /// [`ChainWr::Inline8`] and of a native atomic write are copied during
    /// the call).
    ///
    /// # Errors
    /// `(k, errno)`: requests `0..k` were posted, or may have been (their
    /// memory must stay held), `k..` were not.
    /// * through `ibv_post_send`, `k` is the index of the request the
    ///   provider refused (`bad_wr`; `ENOMEM` when the send queue is full,
    ///   `EINVAL` for a bad request): the ones before it are posted and will
    ///   complete; when the provider names none (rxe's failed doorbell, after
    ///   the queue was written: see [`PostError`](crate::post::PostError)),
    ///   `k` is the whole list;
    /// * through the extended interface `k` is 0 for `EOPNOTSUPP` (before
    ///   anything is built) when the QP's extended interface does not carry
    ///   one of the requests (see [`QpEx::carries`]), and the whole list
    ///   when `ibv_wr_complete` fails (mlx5 then posts nothing, rxe may have
    ///   queued all of them).
    #[inline]
    pub unsafe fn post_send_list<T>(
        &self,
        list: &mut ChainList<T>,
        wr_id: impl Fn(usize) -> u64,
    ) -> Result<(), (usize, io::Error)> {
        let n = list.len();
        if n == 0 {
            return Ok(());
        }
        if list.has_native() {
            let Some(mut ex) = self.ex() else {
                return Err((0, io::Error::from_raw_os_error(libc::EOPNOTSUPP)));
            };
            // SAFETY: the caller's guarantee, passed on.
            return unsafe { ex.post_list(list.iter(), wr_id) }
                .map_err(|e| (if e.maybe_queued { n } else { 0 }, e.error));
        }
        let first = list.link(wr_id);
        let mut bad: *mut ffi::ibv_send_wr = std::ptr::null_mut();
        // SAFETY: live QP; the list's n requests are initialised and linked
        // in order, their SGEs and inline bytes in the list, which is
        // borrowed (neither moved nor changed) across the call; the caller
        // guarantees the memory the SGEs name.
        let rc = unsafe { self.post_send_raw(first, &mut bad) };
        if rc == 0 {
            return Ok(());
        }
        let k = if bad.is_null() {
            n // none named: all may be queued (rxe's failed doorbell)
        } else {
            ((bad as usize).wrapping_sub(first as usize) / std::mem::size_of::<ffi::ibv_send_wr>()).min(n)
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

    /// Posts `wrs` as one `ibv_wr_start` ... `ibv_wr_complete` sequence,
    /// request `i` with the work request ID `wr_id(i)`: all of them or,
    /// when `ibv_wr_complete` fails, none on mlx5 and efa (which roll back),
    /// possibly all on rxe (a failed doorbell after the queue was written):
    /// [`PostError::maybe_queued`](crate::post::PostError::maybe_queued).
    ///
    /// # Safety
    /// As [`Qp::post_send`], for every request in `wrs`.
    ///
    /// # Errors
    /// `EOPNOTSUPP` (before anything is built) when a request is not
    /// [`carried`](Self::carries); the errno of `ibv_wr_complete`.
    #[inline]
    pub unsafe fn post_list(
        &mut self,
        wrs: impl Iterator<Item = ChainWr> + Clone,
        wr_id: impl Fn(usize) -> u64,
    ) -> Result<(), crate::post::PostError> {
        if !wrs.clone().all(|w| self.carries(&w)) {
            return Err(io::Error::from_raw_os_error(libc::EOPNOTSUPP).into());
        }
        let q = self.qpx;
        // SAFETY: live qp_ex; every builder and setter called below was
        // checked present by `carries`; the caller guarantees the local
        // memory; inline bytes and the atomic value are copied by the
        // provider before the builder or setter returns.
        unsafe {
            ffi::ibv_wr_start(q);
            for (i, wr) in wrs.enumerate() {
                (*q).wr_id = wr_id(i);
                match wr {
                    ChainWr::Plain(p) => {
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
                        (*q).wr_flags = send_flags(flags.signaled, flags.fence, false);
                        call((*q).wr_rdma_write, |f| f(q, rkey, remote_addr));
                        call((*q).wr_set_inline_data, |f| f(q, value.as_ptr() as *mut libc::c_void, 8));
                    }
                    ChainWr::AtomicWrite { flags, rkey, remote_addr, ref value } => {
                        (*q).wr_flags = send_flags(flags.signaled, flags.fence, false);
                        call((*q).wr_atomic_write, |f| f(q, rkey, remote_addr, value.as_ptr().cast()));
                    }
                    ChainWr::Flush { flags, rkey, remote_addr, len, ptype } => {
                        (*q).wr_flags = send_flags(flags.signaled, flags.fence, false);
                        call((*q).wr_flush, |f| f(q, rkey, remote_addr, len, ptype, FLUSH_RANGE));
                    }
                }
            }
            crate::post::queued_outcome(ffi::ibv_wr_complete(q), "ibv_wr_complete")
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wr::Sge;
    use std::rc::Rc;

    fn write(signaled: bool) -> ChainWr {
        ChainWr::Plain(SendWr {
            wr_id: 0,
            op: SendOp::Write,
            sge: Some(Sge { addr: 0x1000, length: 8, lkey: 7 }),
            remote_addr: 0x2000,
            rkey: 9,
            signaled,
            fence: false,
            inline: false,
        })
    }

    fn inline8(value: [u8; 8]) -> ChainWr {
        let flags = WrFlags { wr_id: 0, signaled: false, fence: true };
        ChainWr::Inline8 { flags, rkey: 3, remote_addr: 0x3000, value }
    }

    #[test]
    fn a_list_holds_max_chain_and_hands_back_the_rest() {
        let mut l = ChainList::new();
        for i in 0..MAX_CHAIN {
            assert!(l.push(write(false), i).is_ok());
        }
        assert!(l.is_full());
        let (_, rec) = l.push(write(true), 99).unwrap_err();
        assert_eq!(rec, 99);
        assert_eq!(l.len(), MAX_CHAIN);
    }

    #[test]
    fn take_hands_out_the_posted_records_in_order_and_drops_the_rest() {
        let held = Rc::new(());
        let mut l = ChainList::new();
        for i in 0..5 {
            l.push(write(i == 4), (i, held.clone())).unwrap();
        }
        assert_eq!(Rc::strong_count(&held), 6);
        let mut out = Vec::new();
        l.take(3, |i, (k, h)| out.push((i, k, h)));
        assert!(l.is_empty());
        assert_eq!(out.iter().map(|(i, k, _)| (*i, *k)).collect::<Vec<_>>(), [(0, 0), (1, 1), (2, 2)]);
        assert_eq!(Rc::strong_count(&held), 4, "the two not posted are dropped");
        drop(out);
        // Posting more than the list holds hands out what it holds.
        l.push(write(true), (0, held.clone())).unwrap();
        let mut n = 0;
        l.take(usize::MAX, |_, _| n += 1);
        assert_eq!(n, 1);
        // A list dropped with records drops them.
        l.push(write(true), (0, held.clone())).unwrap();
        l.push(write(true), (1, held.clone())).unwrap();
        drop(l);
        assert_eq!(Rc::strong_count(&held), 1);
    }

    #[test]
    fn link_builds_the_verbs_list_in_order() {
        let mut l = ChainList::new();
        l.push(write(false), ()).unwrap();
        l.push(inline8(*b"pointer!"), ()).unwrap();
        l.push(write(true), ()).unwrap();
        assert!(!l.has_native());
        let first = l.link(|i| 100 + i as u64);
        let mut seen = Vec::new();
        let mut w = first;
        // SAFETY: the list is linked and neither moved nor changed.
        unsafe {
            while !w.is_null() {
                let s = &*(*w).sg_list;
                seen.push(((*w).wr_id, (*w).opcode, (*w).send_flags, (*w).num_sge, s.length, (*w).wr.rdma.rkey));
                if (*w).send_flags & ffi::ibv_send_flags::IBV_SEND_INLINE.0 != 0 {
                    let bytes = std::slice::from_raw_parts(s.addr as *const u8, s.length as usize);
                    assert_eq!(bytes, b"pointer!");
                } else {
                    assert_eq!((s.addr, s.lkey, (*w).wr.rdma.remote_addr), (0x1000, 7, 0x2000));
                }
                w = (*w).next;
            }
        }
        use ffi::ibv_send_flags as f;
        let write_op = ffi::ibv_wr_opcode::IBV_WR_RDMA_WRITE;
        assert_eq!(
            seen,
            [
                (100, write_op, 0, 1, 8, 9),
                (101, write_op, f::IBV_SEND_FENCE.0 | f::IBV_SEND_INLINE.0, 1, 8, 3),
                (102, write_op, f::IBV_SEND_SIGNALED.0, 1, 8, 9),
            ]
        );
    }

    #[test]
    fn get_gives_back_every_request_as_added() {
        let flags = WrFlags { wr_id: 0, signaled: true, fence: true };
        let sge = Some(Sge { addr: 0x1000, length: 8, lkey: 7 });
        let plain = |op, sge, remote_addr, rkey, inline| {
            ChainWr::Plain(SendWr { wr_id: 0, op, sge, remote_addr, rkey, signaled: false, fence: true, inline })
        };
        let wrs = [
            plain(SendOp::Write, sge, 0x2000, 9, false),
            plain(SendOp::Write, sge, 0x2000, 9, true),
            plain(SendOp::WriteImm(0x01020304), None, 0x2000, 9, false),
            plain(SendOp::Read, sge, 0x2008, 10, false),
            plain(SendOp::Send, sge, 0, 0, false),
            plain(SendOp::SendImm(5), sge, 0, 0, false),
            plain(SendOp::SendInv(77), None, 0, 0, false),
            plain(SendOp::CompareSwap { compare: 1, swap: 2 }, sge, 0x3000, 11, false),
            plain(SendOp::FetchAdd(3), sge, 0x3008, 12, false),
            inline8(*b"pointer!"),
            ChainWr::AtomicWrite { flags, rkey: 1, remote_addr: 8, value: *b"12345678" },
            ChainWr::Flush { flags, rkey: 2, remote_addr: 16, len: 1 << 40, ptype: 1 },
        ];
        let mut l = ChainList::new();
        for w in wrs {
            l.push(w, ()).unwrap();
        }
        let back: Vec<String> = l.iter().map(|w| format!("{w:?}")).collect();
        let want: Vec<String> = wrs.iter().map(|w| format!("{w:?}")).collect();
        assert_eq!(back, want);
        assert!(l.get(wrs.len()).is_none());
    }

    #[test]
    fn a_list_of_40_byte_records_is_about_3_kib() {
        // rpma's `Conn::chain` documents the size (its ring entries have a niche, as this record).
        let size = std::mem::size_of::<ChainList<(std::num::NonZeroU64, [u64; 4])>>();
        assert!((3 * 1024..3 * 1024 + 64).contains(&size), "{size}");
    }

    #[test]
    fn a_native_request_marks_the_list() {
        let mut l = ChainList::new();
        l.push(write(false), ()).unwrap();
        let flags = WrFlags { wr_id: 0, signaled: true, fence: false };
        l.push(ChainWr::AtomicWrite { flags, rkey: 1, remote_addr: 8, value: [0; 8] }, ()).unwrap();
        assert!(l.has_native());
        l.clear();
        assert!(!l.has_native() && l.is_empty());
    }
}
