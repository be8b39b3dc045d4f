//! Chained posting: several operations checked one by one, then posted with
//! one call (one doorbell) and recorded under one lock. Also the one home of
//! the work requests of atomic write and flush (native or librpma's
//! emulation), which the single operations (`data.rs`) post too.

use super::Conn;
use crate::error::{Error, Result};
use crate::inflight::{chain_is_full, Hold, SendChain, SendOpRec};
use crate::memory::RegMemory;
use crate::mr::{MrLocal, MrRemote, Usage};
use crate::op::{Flags, FlushType, Op, ATOMIC_WRITE_ALIGNMENT};
use crate::validate;
use crate::wrid::CompletionOp;
use rpma_sys::chain::{ChainWr, MAX_CHAIN};
use rpma_sys::wr::{SendOp, SendWr, WrFlags};
use std::sync::atomic::Ordering;

/// Most operations in one [`Chain`].
pub const CHAIN_MAX: usize = MAX_CHAIN;

/// Operations to post on one connection with one call (one
/// `ibv_post_send`, one doorbell), from [`Conn::chain`].
///
/// Each method takes the arguments of the [`Conn`] method of its name and
/// runs its checks at once: an operation that fails them is not added, and
/// the error is returned by that method. [`post`](Chain::post) posts the
/// operations in the order they were added, with each one's semantics
/// (librpma's): its own completion flags (so only the last one may be
/// signaled), [`Flags::FENCE`], the native or emulated atomic write and
/// flush, its `op_context` in its completion. Each local region is held
/// from the moment its operation is added until the operation completes
/// (or the chain is dropped unposted); the bytes of an atomic write are
/// kept in the chain until it is posted.
///
/// Dropping a chain without posting it posts nothing (and releases the
/// regions its operations held).
///
/// See [`Conn::chain`] for an example.
pub struct Chain<'c> {
    conn: &'c Conn,
    /// The work requests, in posting order, each with what its completion
    /// reports and keeps alive: in the chain itself (no allocation).
    ops: SendChain,
}

impl std::fmt::Debug for Chain<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Chain").field("len", &self.len()).finish()
    }
}

impl Conn {
    /// An empty chain of operations on this connection, posted together
    /// by [`Chain::post`] (not in librpma).
    ///
    /// A chain keeps its operations (at most [`CHAIN_MAX`]) in itself,
    /// about 3 KiB: filling and posting it allocates nothing, and each
    /// operation's work request is built as it is added. It is ready to be
    /// filled again after [`Chain::post`].
    ///
    /// ```
    /// # #[allow(dead_code)]
    /// // librpma example 07's commit: the data, its flush, the pointer to it
    /// // and the pointer's flush, one doorbell, one completion.
    /// fn commit(
    ///     conn: &rpma::Conn,
    ///     log: &rpma::MrRemote,
    ///     src: &rpma::MrLocal<rpma::AlignedBuf>,
    ///     ptr_offset: u64,
    /// ) -> rpma::Result<()> {
    ///     use rpma::{Flags, FlushType};
    ///     let (quiet, loud) = (Flags::COMPLETION_ON_ERROR, Flags::COMPLETION_ALWAYS);
    ///     let mut chain = conn.chain();
    ///     chain
    ///         .write(log, 0, src, 0, 8, quiet, 1)?
    ///         .flush(log, 0, 8, FlushType::Visibility, quiet, 2)?
    ///         .atomic_write(log, ptr_offset, 8u64.to_le_bytes(), quiet, 3)?
    ///         .flush(log, ptr_offset, 8, FlushType::Visibility, loud, 4)?;
    ///     chain.post()?;
    ///     let wc = conn.cq().next_completion(std::time::Duration::from_secs(1))?;
    ///     assert_eq!(wc.op_context, 4);
    ///     Ok(())
    /// }
    /// ```
    pub fn chain(&self) -> Chain<'_> {
        Chain { conn: self, ops: SendChain::new() }
    }

    /// `atomic_write`'s checks: its flags (ID 0; the emulation's fenced) and
    /// whether it is native.
    #[inline(always)]
    pub(super) fn atomic_write_checks(&self, dst: &MrRemote, dst_offset: u64, flags: Flags) -> Result<(WrFlags, bool)> {
        let signaled = flags.signaled()?;
        if !dst_offset.is_multiple_of(ATOMIC_WRITE_ALIGNMENT) {
            return Err(misaligned_atomic_write(dst_offset));
        }
        dst.check_range("atomic_write: dst", dst_offset, 8)?;
        validate::remote(dst, Usage::WRITE_DST, "atomic_write: dst", &self.parts.peer)?;
        let native = self.parts.native.atomic_write;
        if native {
            return Ok((WrFlags { wr_id: 0, signaled, fence: flags.fence() }, true));
        }
        if self.parts.limits.max_inline_data < 8 {
            return Err(no_inline8(self.parts.limits.max_inline_data));
        }
        Ok((WrFlags { wr_id: 0, signaled, fence: true }, false))
    }

    /// `flush`'s checks: its flags (ID 0) and whether it is native (else
    /// the APM read's range is checked too).
    #[inline(always)]
    pub(super) fn flush_checks(
        &self,
        dst: &MrRemote,
        dst_offset: u64,
        len: u64,
        ty: FlushType,
        flags: Flags,
    ) -> Result<(WrFlags, bool)> {
        let signaled = flags.signaled()?;
        let pmem = || self.direct_write_to_pmem.load(Ordering::Relaxed);
        let supported = match ty {
            FlushType::Persistent => pmem() && dst.usage().contains(Usage::FLUSH_TYPE_PERSISTENT),
            FlushType::Visibility => dst.usage().contains(Usage::FLUSH_TYPE_VISIBILITY),
        };
        if !supported {
            return Err(unsupported_flush(ty, pmem()));
        }
        dst.check_range("flush: dst", dst_offset, len)?;
        let native = self.parts.native.flush;
        if !native {
            dst.check_range("flush (APM reads 8 bytes at dst_offset)", dst_offset, 8)?;
        }
        Ok((WrFlags { wr_id: 0, signaled, fence: flags.fence() }, native))
    }

    /// The APM flush's read (after `flush_checks`): 8 bytes at
    /// `dst_offset` into the connection's flush region, which its post
    /// holds like any local region until the read completes
    /// (`self.parts.flush_mr.hold()`).
    #[inline(always)]
    pub(super) fn apm_flush(&self, dst: &MrRemote, dst_offset: u64, flags: WrFlags) -> SendWr {
        SendWr {
            wr_id: 0,
            op: SendOp::Read,
            sge: Some(self.parts.flush_mr.sge(0, 8)),
            remote_addr: dst.addr().wrapping_add(dst_offset),
            rkey: dst.rkey(),
            signaled: flags.signaled,
            fence: flags.fence,
            inline: false,
        }
    }

    /// Posts a native atomic write or flush alone, through its own
    /// `ibv_wr_*` sequence (which ignores [`Flags::FENCE`]), as the single
    /// operations always have: out of line, so the emulations' posts stay
    /// small.
    #[inline(never)]
    pub(super) fn post_native(&self, kind: CompletionOp, ctx: u64, wr: ChainWr) -> Result<()> {
        let mut ex = self.parts.qp()?.ex().ok_or_else(|| Error::Unknown("no extended interface".into()))?;
        let rec = |signaled| SendOpRec { ctx, kind, signaled, hold: None, confirm: None };
        match wr {
            ChainWr::AtomicWrite { flags, rkey, remote_addr, value } => {
                let s = flags.signaled;
                self.parts.send.post_with(rec(s), |id| ex.post_atomic_write(id, s, rkey, remote_addr, &value))
            }
            ChainWr::Flush { flags, rkey, remote_addr, len, ptype } => {
                let s = flags.signaled;
                self.parts.send.post_with(rec(s), |id| ex.post_flush(id, s, rkey, remote_addr, len, ptype))
            }
            _ => Err(Error::Unknown("rpma bug: post_native with an emulated request".into())),
        }
    }
}

impl<'c> Chain<'c> {
    /// Appends a checked operation.
    #[inline(always)]
    fn push(&mut self, wr: ChainWr, kind: CompletionOp, ctx: u64, hold: Option<Hold>) -> Result<&mut Self> {
        self.ops.push(wr, ctx, kind, hold)?;
        Ok(self)
    }

    /// Appends a checked native operation (nothing held): apart, so that
    /// the emulations' pushes are built for their one kind of request.
    #[inline(never)]
    fn push_native(&mut self, wr: ChainWr, kind: CompletionOp, ctx: u64) -> Result<&mut Self> {
        self.push(wr, kind, ctx, None)
    }

    /// Checks an operation with a local range (held) and appends it.
    #[inline(always)]
    fn push_op<M: RegMemory + Send + Sync + 'static>(&mut self, op: Op<'_, M>, mr: &MrLocal<M>) -> Result<&mut Self> {
        if self.ops.is_full() {
            return Err(chain_is_full());
        }
        let wr = op.work_request(&self.conn.parts.peer, true)?;
        self.push(ChainWr::Plain(wr), op.kind(), op.ctx, Some(mr.hold()))
    }

    /// Operations added so far.
    pub fn len(&self) -> usize {
        self.ops.len()
    }

    /// Whether no operation was added.
    pub fn is_empty(&self) -> bool {
        self.ops.len() == 0
    }

    /// Appends [`Conn::read`].
    ///
    /// # Errors
    /// As [`Conn::read`] for its checks; [`Error::Inval`] when the chain
    /// already holds [`CHAIN_MAX`] operations.
    #[inline]
    pub fn read<M: RegMemory + Send + Sync + 'static>(
        &mut self,
        dst: &MrLocal<M>,
        dst_offset: usize,
        src: &MrRemote,
        src_offset: u64,
        len: usize,
        flags: Flags,
        op_context: u64,
    ) -> Result<&mut Self> {
        self.push_op(Op::read(dst, dst_offset, src, src_offset, len).with(flags, op_context), dst)
    }

    /// Appends [`Conn::write`].
    ///
    /// # Errors
    /// As [`Conn::write`] for its checks; [`Error::Inval`] when the chain
    /// is full.
    #[inline]
    pub fn write<M: RegMemory + Send + Sync + 'static>(
        &mut self,
        dst: &MrRemote,
        dst_offset: u64,
        src: &MrLocal<M>,
        src_offset: usize,
        len: usize,
        flags: Flags,
        op_context: u64,
    ) -> Result<&mut Self> {
        self.push_op(Op::write(dst, dst_offset, src, src_offset, len, None).with(flags, op_context), src)
    }

    /// Appends [`Conn::write_with_imm`].
    ///
    /// # Errors
    /// As [`Conn::write_with_imm`] for its checks; [`Error::Inval`] when
    /// the chain is full.
    #[inline]
    pub fn write_with_imm<M: RegMemory + Send + Sync + 'static>(
        &mut self,
        dst: &MrRemote,
        dst_offset: u64,
        src: &MrLocal<M>,
        src_offset: usize,
        len: usize,
        flags: Flags,
        imm: u32,
        op_context: u64,
    ) -> Result<&mut Self> {
        self.push_op(Op::write(dst, dst_offset, src, src_offset, len, Some(imm)).with(flags, op_context), src)
    }

    /// Appends [`Conn::atomic_write`]; `value` is kept in the chain and
    /// copied when it is posted.
    ///
    /// # Errors
    /// As [`Conn::atomic_write`] for its checks; [`Error::Inval`] when the
    /// chain is full or the connection closed.
    #[inline]
    pub fn atomic_write(
        &mut self,
        dst: &MrRemote,
        dst_offset: u64,
        value: [u8; 8],
        flags: Flags,
        op_context: u64,
    ) -> Result<&mut Self> {
        let (flags, native) = self.conn.atomic_write_checks(dst, dst_offset, flags)?;
        let (rkey, remote_addr) = (dst.rkey(), dst.addr().wrapping_add(dst_offset));
        if native {
            return self.push_native(
                ChainWr::AtomicWrite { flags, rkey, remote_addr, value },
                CompletionOp::AtomicWrite,
                op_context,
            );
        }
        self.push(ChainWr::Inline8 { flags, rkey, remote_addr, value }, CompletionOp::AtomicWrite, op_context, None)
    }

    /// Appends [`Conn::compare_and_swap`]; `dst` is held from now until
    /// the operation completes. A chain that also holds a native atomic
    /// write or flush cannot carry it ([`Error::NoSupp`] from
    /// [`post`](Chain::post)).
    ///
    /// # Errors
    /// As [`Conn::compare_and_swap`] for its checks; [`Error::Inval`] when
    /// the chain is full.
    #[inline]
    pub fn compare_and_swap<M: RegMemory + Send + Sync + 'static>(
        &mut self,
        dst: &MrLocal<M>,
        dst_offset: usize,
        src: &MrRemote,
        src_offset: u64,
        compare: u64,
        swap: u64,
        flags: Flags,
        op_context: u64,
    ) -> Result<&mut Self> {
        let verb = SendOp::CompareSwap { compare, swap };
        self.push_op(Op::atomic(verb, dst, dst_offset, src, src_offset).with(flags, op_context), dst)
    }

    /// Appends [`Conn::fetch_and_add`], as
    /// [`compare_and_swap`](Chain::compare_and_swap).
    ///
    /// # Errors
    /// As [`Conn::fetch_and_add`] for its checks; [`Error::Inval`] when the
    /// chain is full.
    #[inline]
    pub fn fetch_and_add<M: RegMemory + Send + Sync + 'static>(
        &mut self,
        dst: &MrLocal<M>,
        dst_offset: usize,
        src: &MrRemote,
        src_offset: u64,
        add: u64,
        flags: Flags,
        op_context: u64,
    ) -> Result<&mut Self> {
        let verb = SendOp::FetchAdd(add);
        self.push_op(Op::atomic(verb, dst, dst_offset, src, src_offset).with(flags, op_context), dst)
    }

    /// Appends [`Conn::flush`]. A native flush honours [`Flags::FENCE`] in
    /// a chain.
    ///
    /// # Errors
    /// As [`Conn::flush`] for its checks; [`Error::Inval`] when the chain
    /// is full or the connection closed.
    #[inline(always)]
    pub fn flush(
        &mut self,
        dst: &MrRemote,
        dst_offset: u64,
        len: u64,
        ty: FlushType,
        flags: Flags,
        op_context: u64,
    ) -> Result<&mut Self> {
        let (flags, native) = self.conn.flush_checks(dst, dst_offset, len, ty, flags)?;
        if native {
            return self.push_native(native_flush(dst, dst_offset, len, ty, flags)?, CompletionOp::Flush, op_context);
        }
        let wr = self.conn.apm_flush(dst, dst_offset, flags);
        self.push(ChainWr::Plain(wr), CompletionOp::Flush, op_context, Some(self.conn.parts.flush_mr.hold()))
    }

    /// Appends [`Conn::send`].
    ///
    /// # Errors
    /// As [`Conn::send`] for its checks; [`Error::Inval`] when the chain is
    /// full.
    #[inline]
    pub fn send<M: RegMemory + Send + Sync + 'static>(
        &mut self,
        src: &MrLocal<M>,
        offset: usize,
        len: usize,
        flags: Flags,
        op_context: u64,
    ) -> Result<&mut Self> {
        self.push_op(Op::send(src, offset, len, SendOp::Send).with(flags, op_context), src)
    }

    /// Appends [`Conn::send_with_imm`].
    ///
    /// # Errors
    /// As [`Conn::send_with_imm`] for its checks; [`Error::Inval`] when the
    /// chain is full.
    #[inline]
    pub fn send_with_imm<M: RegMemory + Send + Sync + 'static>(
        &mut self,
        src: &MrLocal<M>,
        offset: usize,
        len: usize,
        flags: Flags,
        imm: u32,
        op_context: u64,
    ) -> Result<&mut Self> {
        self.push_op(Op::send(src, offset, len, SendOp::SendImm(imm)).with(flags, op_context), src)
    }

    /// Appends [`Conn::send_with_inv`].
    ///
    /// # Errors
    /// As [`Conn::send_with_inv`] for its checks; [`Error::Inval`] when the
    /// chain is full.
    #[inline]
    pub fn send_with_inv<M: RegMemory + Send + Sync + 'static>(
        &mut self,
        src: &MrLocal<M>,
        offset: usize,
        len: usize,
        flags: Flags,
        rkey: u32,
        op_context: u64,
    ) -> Result<&mut Self> {
        self.push_op(Op::send(src, offset, len, SendOp::SendInv(rkey)).with(flags, op_context), src)
    }

    /// Posts the operations in the order they were added, with one call:
    /// one `ibv_post_send` of a linked list, or, when the chain holds a
    /// native atomic write or flush, one `ibv_wr_start` ...
    /// `ibv_wr_complete` sequence. They take consecutive send-queue slots;
    /// a chain whose last operation is unsignaled needs one more free slot
    /// (kept for a signaled operation, as for single operations).
    ///
    /// Afterwards the chain is empty, ready to be filled again. When it is
    /// refused before anything is posted ([`Error::Inval`],
    /// [`Error::NoSupp`], [`Error::Again`]) it is kept as it was: reap
    /// completions and post it again.
    ///
    /// What the caller sees when posting fails part-way: through
    /// `ibv_post_send` the provider stops at the first operation it refuses;
    /// the ones before it **are** posted (their completions arrive as
    /// usual, they count in [`Conn::pending_sends`] and hold their regions
    /// until they complete) and the error names the refused operation's
    /// index; the rest are dropped. Through the extended interface nothing
    /// is posted on failure. Failures of the device after posting (an
    /// operation the remote side refuses) arrive as completions: the failed
    /// operation's with its status (whatever its flags), the ones after it
    /// with [`WcStatus::WR_FLUSH_ERR`](crate::WcStatus::WR_FLUSH_ERR) if
    /// signaled, and the connection's QP is then in the error state.
    ///
    /// # Errors
    /// * [`Error::Inval`]: the chain is empty; it can never fit the send
    ///   queue (more operations than `sq_size`, counting the slot kept when
    ///   the last one is unsignaled); the connection is closed.
    /// * [`Error::NoSupp`]: the chain holds a native atomic write or flush
    ///   and an operation the QP's extended interface does not carry (a
    ///   send, or a write with immediate data): nothing is posted; post it
    ///   on its own.
    /// * [`Error::Again`]: the send queue has not enough free slots now.
    /// * [`Error::Provider`]: posting failed, see above.
    pub fn post(&mut self) -> Result<()> {
        let qp = self.conn.parts.qp()?;
        if self.ops.has_native() {
            check_carried(qp, &self.ops)?;
        }
        // Refuses an empty chain (Error::Inval).
        self.conn.parts.send.post_chain(qp, &mut self.ops)
    }
}

/// Whether the QP's extended interface carries every operation of a chain
/// holding a native one.
#[inline(never)]
fn check_carried(qp: &rpma_sys::qp::Qp, ops: &SendChain) -> Result<()> {
    let ex = qp.ex().ok_or_else(|| Error::Unknown("a native operation without extended interface".into()))?;
    match ops.iter().position(|w| !ex.carries(&w)) {
        Some(i) => Err(not_carried(i)),
        None => Ok(()),
    }
}

/// A native flush's request (after `flush_checks`).
#[inline(always)]
pub(super) fn native_flush(
    dst: &MrRemote,
    dst_offset: u64,
    len: u64,
    ty: FlushType,
    flags: WrFlags,
) -> Result<ChainWr> {
    let ptype = match ty {
        FlushType::Visibility => rpma_sys::qp::FLUSH_GLOBAL,
        FlushType::Persistent => rpma_sys::qp::FLUSH_PERSISTENT,
    };
    let len = usize::try_from(len).map_err(|_| Error::inval(format!("flush: length {len} exceeds usize")))?;
    Ok(ChainWr::Flush { flags, rkey: dst.rkey(), remote_addr: dst.addr().wrapping_add(dst_offset), len, ptype })
}

/// Why a flush of type `ty` is not supported (`pmem`: the peer's direct
/// write to persistent memory).
#[cold]
#[inline(never)]
fn unsupported_flush(ty: FlushType, pmem: bool) -> Error {
    Error::nosupp(match ty {
        FlushType::Persistent if !pmem => {
            "flush(Persistent): the remote peer does not support direct write to persistent memory \
             (apply its PeerCfg with Conn::apply_remote_peer_cfg)"
        }
        FlushType::Persistent => "flush(Persistent): the remote region was not registered with FLUSH_TYPE_PERSISTENT",
        FlushType::Visibility => "flush(Visibility): the remote region was not registered with FLUSH_TYPE_VISIBILITY",
    })
}

#[cold]
#[inline(never)]
fn misaligned_atomic_write(dst_offset: u64) -> Error {
    Error::inval(format!("atomic_write: dst_offset {dst_offset} is not a multiple of {ATOMIC_WRITE_ALIGNMENT}"))
}

#[cold]
#[inline(never)]
fn no_inline8(max_inline_data: u32) -> Error {
    Error::inval(format!(
        "atomic_write: the emulation is an inline 8-byte write and the connection's max_inline_data is \
         {max_inline_data} (ConnCfg::set_max_inline_data)"
    ))
}

#[cold]
#[inline(never)]
fn not_carried(i: usize) -> Error {
    Error::nosupp(format!(
        "chain operation {i}: the chain holds a native atomic write or flush, so it is posted through ibv_wr_*, and \
         this connection's QP carries only RDMA write and read there besides them (no sends, writes with \
         immediate data, compare-and-swap or fetch-and-add): post operation {i} on its own"
    ))
}
