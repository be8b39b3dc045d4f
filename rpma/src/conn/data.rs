//! librpma's operations on a connection, each a one-line wrapper over
//! [`Conn::post`] (`post.rs`) with its
//! operation of [`crate::ops`].

use super::Conn;
use crate::error::Result;
use crate::memory::RegMemory;
use crate::mr::{MrLocal, MrRemote};
use crate::ops;
use crate::ops::{AtomicWrite, CompareAndSwap, FetchAndAdd, Flags, Flush, FlushType, Read, Write};
#[cfg(doc)] // the links of the doc comments
use crate::{error::Error, mr::Usage};

impl Conn {
    /// Reads `len` bytes at `src_offset` of the remote region into `dst` at
    /// `dst_offset` (`rpma_read`).
    ///
    /// # Errors
    /// [`Error::Inval`] when `flags` are empty, `len` exceeds 4 GiB - 1, a
    /// range exceeds its region (the message names which), `dst` lacks
    /// [`Usage::READ_DST`] or is on another peer, or `src` lacks
    /// [`Usage::READ_SRC`]; [`Error::Again`] when the send queue is full,
    /// or with [`Detail::RangeBusy`](crate::error::Detail::RangeBusy)
    /// while the CPU uses the local range
    /// ([`MrLocal::write_at`](crate::MrLocal::write_at) on another thread);
    /// [`Error::Provider`] when posting fails.
    #[inline(always)]
    pub fn read<M: RegMemory + Send + Sync + 'static>(
        &self,
        dst: &MrLocal<M>,
        dst_offset: usize,
        src: &MrRemote,
        src_offset: u64,
        len: usize,
        flags: Flags,
        op_context: u64,
    ) -> Result<()> {
        self.post(Read::new(dst, dst_offset, src, src_offset, len).flags(flags).op_context(op_context))
    }

    /// Writes `len` bytes of `src` at `src_offset` to the remote region at
    /// `dst_offset` (`rpma_write`).
    ///
    /// # Errors
    /// As [`read`](Conn::read), with `src` needing [`Usage::WRITE_SRC`] and
    /// `dst` [`Usage::WRITE_DST`].
    #[inline(always)]
    pub fn write<M: RegMemory + Send + Sync + 'static>(
        &self,
        dst: &MrRemote,
        dst_offset: u64,
        src: &MrLocal<M>,
        src_offset: usize,
        len: usize,
        flags: Flags,
        op_context: u64,
    ) -> Result<()> {
        self.post(Write::new(dst, dst_offset, src, src_offset, len).flags(flags).op_context(op_context))
    }

    /// [`write`](Conn::write) with immediate data, which the other side gets
    /// in the completion of a posted receive, in host order
    /// (`rpma_write_with_imm`).
    ///
    /// # Errors
    /// As [`write`](Conn::write).
    pub fn write_with_imm<M: RegMemory + Send + Sync + 'static>(
        &self,
        dst: &MrRemote,
        dst_offset: u64,
        src: &MrLocal<M>,
        src_offset: usize,
        len: usize,
        flags: Flags,
        imm: u32,
        op_context: u64,
    ) -> Result<()> {
        self.post(Write::new(dst, dst_offset, src, src_offset, len).imm(imm).flags(flags).op_context(op_context))
    }

    /// Writes 8 bytes atomically at `dst_offset` (`rpma_atomic_write`):
    /// natively (`IBV_WR_ATOMIC_WRITE`) when the device supports it, else as
    /// an inline 8-byte RDMA WRITE fenced behind earlier reads (and so behind
    /// an APM flush), as librpma does. `value` is copied when posting.
    ///
    /// # Errors
    /// [`Error::Inval`] when `flags` are empty, `dst_offset` is not a
    /// multiple of 8, the 8 bytes exceed the region, or it lacks
    /// [`Usage::WRITE_DST`], or, for the emulation, the connection's
    /// [`max_inline_data`](Conn::max_inline_data) is below 8; as
    /// [`write`](Conn::write) otherwise.
    #[inline]
    pub fn atomic_write(
        &self,
        dst: &MrRemote,
        dst_offset: u64,
        value: [u8; 8],
        flags: Flags,
        op_context: u64,
    ) -> Result<()> {
        self.post(AtomicWrite::new(dst, dst_offset, value).flags(flags).op_context(op_context))
    }

    /// Compares the 8 bytes at `src_offset` of the remote region with
    /// `compare` and, if equal, replaces them with `swap`, atomically; the
    /// previous value lands in the 8 bytes at `dst_offset` of `dst`
    /// (`IBV_WR_ATOMIC_CMP_AND_SWP`, not in librpma). The swap happened
    /// exactly when that previous value equals `compare`.
    ///
    /// Values are `u64` in host order; the result lands in `dst` in host
    /// order too, so read it with `u64::from_ne_bytes` (measured on rxe,
    /// little-endian x86-64: the remote counter is a little-endian `u64` in
    /// memory). The remote region must have been registered with
    /// [`Usage::REMOTE_ATOMIC`] and described with
    /// [`MrLocal::descriptor_ext`], which carries that grant; `dst` needs
    /// [`Usage::READ_DST`] (the device writes the result into it: local
    /// write access) and is kept alive until the operation completes, as
    /// for [`read`](Conn::read). The result is valid once the completion
    /// (or that of a later signaled operation) has been reaped.
    ///
    /// Atomicity holds among the atomics of all connections to the region
    /// through one device; RDMA writes and the remote CPU are not ordered
    /// with it (`atomic_cap` `IBV_ATOMIC_HCA`).
    ///
    /// ```
    /// # #[allow(dead_code)]
    /// // A lock word: take it if it is free (0), as 1.
    /// fn try_lock(
    ///     conn: &rpma::Conn,
    ///     result: &rpma::MrLocal<rpma::AlignedBuf>,
    ///     lock: &rpma::MrRemote,
    /// ) -> rpma::Result<bool> {
    ///     conn.compare_and_swap(result, 0, lock, 0, 0, 1, rpma::Flags::COMPLETION_ALWAYS, 9)?;
    ///     let wc = conn.cq().next_completion(std::time::Duration::from_secs(1))?;
    ///     assert_eq!(wc.op, rpma::CompletionOp::CompareSwap);
    ///     let mut previous = [0u8; 8];
    ///     result.read_at(0, &mut previous)?;
    ///     Ok(u64::from_ne_bytes(previous) == 0)
    /// }
    /// ```
    ///
    /// # Errors
    /// * [`Error::Inval`]: `flags` empty; a range exceeds its region; the
    ///   remote address (region start + `src_offset`) is not a multiple of
    ///   [`ATOMIC_ALIGNMENT`](crate::ops::ATOMIC_ALIGNMENT) (8); the remote
    ///   region does not grant [`Usage::REMOTE_ATOMIC`] (its descriptor
    ///   lacks rpma's extension); `dst` lacks [`Usage::READ_DST`] or is on
    ///   another peer.
    /// * [`Error::NoSupp`]: the device does not support remote atomics
    ///   (`atomic_cap` is `IBV_ATOMIC_NONE`).
    /// * [`Error::Again`], [`Error::Provider`]: as [`write`](Conn::write).
    ///
    /// A device that refuses the operation (the rkey grants no atomics, a
    /// misaligned address) reports it in the completion's status
    /// (`REM_ACCESS_ERR`, `REM_INV_REQ_ERR`) and leaves the remote memory
    /// unchanged.
    pub fn compare_and_swap<M: RegMemory + Send + Sync + 'static>(
        &self,
        dst: &MrLocal<M>,
        dst_offset: usize,
        src: &MrRemote,
        src_offset: u64,
        compare: u64,
        swap: u64,
        flags: Flags,
        op_context: u64,
    ) -> Result<()> {
        self.post(
            CompareAndSwap::new(dst, dst_offset, src, src_offset, compare, swap).flags(flags).op_context(op_context),
        )
    }

    /// Adds `add` (wrapping) to the 8 bytes at `src_offset` of the remote
    /// region, atomically; the previous value lands in the 8 bytes at
    /// `dst_offset` of `dst` (`IBV_WR_ATOMIC_FETCH_AND_ADD`, not in
    /// librpma). Byte order, grants, holds and atomicity: as
    /// [`compare_and_swap`](Conn::compare_and_swap).
    ///
    /// ```
    /// # #[allow(dead_code)]
    /// // A ticket: the counter's value before this side's increment.
    /// fn ticket(
    ///     conn: &rpma::Conn,
    ///     result: &rpma::MrLocal<rpma::AlignedBuf>,
    ///     counter: &rpma::MrRemote,
    /// ) -> rpma::Result<u64> {
    ///     conn.fetch_and_add(result, 0, counter, 0, 1, rpma::Flags::COMPLETION_ALWAYS, 3)?;
    ///     conn.cq().next_completion(std::time::Duration::from_secs(1))?;
    ///     let mut previous = [0u8; 8];
    ///     result.read_at(0, &mut previous)?;
    ///     Ok(u64::from_ne_bytes(previous))
    /// }
    /// ```
    ///
    /// # Errors
    /// As [`compare_and_swap`](Conn::compare_and_swap).
    pub fn fetch_and_add<M: RegMemory + Send + Sync + 'static>(
        &self,
        dst: &MrLocal<M>,
        dst_offset: usize,
        src: &MrRemote,
        src_offset: u64,
        add: u64,
        flags: Flags,
        op_context: u64,
    ) -> Result<()> {
        self.post(FetchAndAdd::new(dst, dst_offset, src, src_offset, add).flags(flags).op_context(op_context))
    }

    /// Makes earlier writes to the remote region durable or visible
    /// (`rpma_flush`): natively (`IBV_WR_FLUSH`) when the device supports it,
    /// else (APM) as an 8-byte RDMA READ at `dst_offset`, which completes
    /// only after the earlier writes on this connection.
    ///
    /// # Errors
    /// * [`Error::Inval`]: `flags` empty; `dst_offset + len` exceeds the
    ///   region; for the APM read, fewer than 8 bytes at `dst_offset`.
    /// * [`Error::NoSupp`]: [`FlushType::Persistent`] without the remote
    ///   peer's `direct_write_to_pmem`, or a region not registered for the
    ///   requested flush type.
    /// * [`Error::Again`], [`Error::Provider`]: as [`write`](Conn::write).
    #[inline]
    pub fn flush(
        &self,
        dst: &MrRemote,
        dst_offset: u64,
        len: u64,
        ty: FlushType,
        flags: Flags,
        op_context: u64,
    ) -> Result<()> {
        self.post(Flush::new(dst, dst_offset, len, ty).flags(flags).op_context(op_context))
    }

    /// Sends `len` bytes of `src` at `offset` to a receive posted by the
    /// other side (`rpma_send`); `len` may be 0.
    ///
    /// # Errors
    /// As [`write`](Conn::write), with `src` needing [`Usage::SEND`].
    pub fn send<M: RegMemory + Send + Sync + 'static>(
        &self,
        src: &MrLocal<M>,
        offset: usize,
        len: usize,
        flags: Flags,
        op_context: u64,
    ) -> Result<()> {
        self.post(ops::Send::new(src, offset, len).flags(flags).op_context(op_context))
    }

    /// [`send`](Conn::send) with immediate data, delivered in host order
    /// (`rpma_send_with_imm`).
    ///
    /// # Errors
    /// As [`send`](Conn::send).
    pub fn send_with_imm<M: RegMemory + Send + Sync + 'static>(
        &self,
        src: &MrLocal<M>,
        offset: usize,
        len: usize,
        flags: Flags,
        imm: u32,
        op_context: u64,
    ) -> Result<()> {
        self.post(ops::Send::new(src, offset, len).imm(imm).flags(flags).op_context(op_context))
    }

    /// [`send`](Conn::send) that also invalidates the other side's type 2
    /// window with `rkey` (`IBV_WR_SEND_WITH_INV`); the receiver's completion
    /// reports it in [`Completion::invalidated_rkey`](crate::Completion).
    ///
    /// # Errors
    /// As [`send`](Conn::send).
    pub fn send_with_inv<M: RegMemory + Send + Sync + 'static>(
        &self,
        src: &MrLocal<M>,
        offset: usize,
        len: usize,
        flags: Flags,
        rkey: u32,
        op_context: u64,
    ) -> Result<()> {
        self.post(ops::Send::new(src, offset, len).invalidate(rkey).flags(flags).op_context(op_context))
    }

    /// Posts a receive of up to `len` bytes into `dst` at `offset`
    /// (`rpma_recv`); its completion always arrives (on the RCQ when there is
    /// one). Receives are not guaranteed to complete in posting order.
    ///
    /// # Errors
    /// [`Error::Inval`] when the range exceeds `dst`, `len` exceeds 4 GiB - 1,
    /// `dst` lacks [`Usage::RECV`] or is on another peer, or the connection
    /// uses an SRQ; [`Error::Again`] with
    /// [`Detail::RangeBusy`](crate::error::Detail::RangeBusy) while the CPU
    /// uses the range; [`Error::Provider`] when posting fails (`ENOMEM`:
    /// the receive queue is full).
    pub fn recv<M: RegMemory + Send + Sync + 'static>(
        &self,
        dst: &MrLocal<M>,
        offset: usize,
        len: usize,
        op_context: u64,
    ) -> Result<()> {
        self.post(ops::Recv::new(dst, offset, len).op_context(op_context))
    }

    /// Operations posted on the send queue whose completion (or a later
    /// signaled one's) has not been reaped yet; operations posted by
    /// [`Unheld`](crate::ops::Unheld) without a record are not counted.
    pub fn pending_sends(&self) -> usize {
        self.parts.send.pending()
    }
}
