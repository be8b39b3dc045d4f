//! Scatter-gather lists and inline data on a connection (not in librpma):
//! the limits the device granted, the receive of a list, and one-line
//! wrappers over the list and inline operations of [`crate::ops`].

use super::Conn;
use crate::error::Result;
use crate::memory::RegMemory;
use crate::mr::MrRemote;
use crate::ops::{Flags, ReadSg, RecvSg, SendInline, SendSg, Sg, WriteInline, WriteSg};
#[cfg(doc)]
use crate::{error::Error, mr::Usage};

impl Conn {
    /// The bytes an operation may carry inline on this connection: what the
    /// device granted for [`ConnCfg::set_max_inline_data`](crate::ConnCfg::set_max_inline_data)
    /// (at least that), read when the connection was set up.
    pub fn max_inline_data(&self) -> u32 {
        self.parts.limits.max_inline_data
    }

    /// The scatter/gather elements a send-queue operation may carry on this
    /// connection: what the device granted for
    /// [`ConnCfg::set_max_send_sge`](crate::ConnCfg::set_max_send_sge) (at
    /// least that), at most [`MAX_SGL`](crate::conn_cfg::MAX_SGL).
    pub fn max_send_sge(&self) -> u32 {
        self.parts.limits.max_send_sge
    }

    /// The scatter/gather elements a receive may carry on this connection:
    /// what the device granted for
    /// [`ConnCfg::set_max_recv_sge`](crate::ConnCfg::set_max_recv_sge) (at
    /// least that), at most [`MAX_SGL`](crate::conn_cfg::MAX_SGL).
    pub fn max_recv_sge(&self) -> u32 {
        self.parts.limits.max_recv_sge
    }

    /// Writes the elements of `src`, one after the other, to the remote
    /// region at `dst_offset`: a gathering RDMA WRITE (one work request,
    /// one completion). Every region in `src` is kept alive until the
    /// operation completes; elements of 0 bytes are checked and skipped,
    /// and an empty list is a 0-byte write (librpma's NULL form).
    ///
    /// ```
    /// use rpma::{AlignedBuf, Flags, MrLocal, MrRemote, Sg};
    /// # #[allow(dead_code)]
    /// fn put(conn: &rpma::Conn, hdr: &MrLocal<AlignedBuf>, body: &MrLocal<AlignedBuf>, dst: &MrRemote) -> rpma::Result<()> {
    ///     // 16 header bytes, then 100 body bytes, land at dst[0..116]
    ///     conn.write_sg(dst, 0, &[Sg::new(hdr, 0, 16), Sg::new(body, 0, 100)], Flags::COMPLETION_ALWAYS, 1)?;
    ///     let wc = conn.cq().next_completion(std::time::Duration::from_secs(1))?;
    ///     assert_eq!(wc.op_context, 1);
    ///     Ok(())
    /// }
    /// ```
    ///
    /// # Errors
    /// [`Error::Inval`] when `flags` are empty, `src` is longer than
    /// [`max_send_sge`](Conn::max_send_sge), an element exceeds its
    /// region, lacks [`Usage::WRITE_SRC`] or is on another peer (the message
    /// names it as `src[i]`), the total exceeds 4 GiB - 1 or the remote
    /// range, or `dst` lacks [`Usage::WRITE_DST`]; [`Error::Again`] when
    /// the send queue is full; [`Error::NoMem`] when the holds of the
    /// regions cannot be allocated; [`Error::Provider`] when posting fails.
    pub fn write_sg<M: RegMemory + Send + Sync + 'static>(
        &self,
        dst: &MrRemote,
        dst_offset: u64,
        src: &[Sg<'_, M>],
        flags: Flags,
        op_context: u64,
    ) -> Result<()> {
        self.post(WriteSg::new(dst, dst_offset, src).flags(flags).op_context(op_context))
    }

    /// Reads from the remote region at `src_offset` into the elements of
    /// `dst`, filled one after the other: a scattering RDMA READ. Every
    /// region in `dst` is kept alive until the operation completes; an
    /// empty list is a 0-byte read (librpma's NULL form).
    ///
    /// # Errors
    /// As [`write_sg`](Conn::write_sg), with the elements needing
    /// [`Usage::READ_DST`], `src` [`Usage::READ_SRC`], and the count also
    /// bounded by the device's `max_sge_rd`
    /// ([`Capabilities::max_sge_rd`](crate::Capabilities::max_sge_rd)).
    pub fn read_sg<M: RegMemory + Send + Sync + 'static>(
        &self,
        dst: &[Sg<'_, M>],
        src: &MrRemote,
        src_offset: u64,
        flags: Flags,
        op_context: u64,
    ) -> Result<()> {
        self.post(ReadSg::new(dst, src, src_offset).flags(flags).op_context(op_context))
    }

    /// Sends the elements of `src`, one after the other, as one message to
    /// a receive posted by the other side: a gathering send. Every region in
    /// `src` is kept alive until the operation completes; an empty list
    /// sends a 0-byte message.
    ///
    /// # Errors
    /// As [`write_sg`](Conn::write_sg), with the elements needing
    /// [`Usage::SEND`] and no remote range.
    pub fn send_sg<M: RegMemory + Send + Sync + 'static>(
        &self,
        src: &[Sg<'_, M>],
        flags: Flags,
        op_context: u64,
    ) -> Result<()> {
        self.post(SendSg::new(src).flags(flags).op_context(op_context))
    }

    /// Posts a receive that scatters an incoming message into the elements
    /// of `dst`, filled one after the other (an empty list takes a 0-byte
    /// message). Every region in `dst` is kept
    /// alive until the receive completes; as for [`recv`](Conn::recv), its
    /// completion always arrives.
    ///
    /// # Errors
    /// [`Error::Inval`] when `dst` is longer than
    /// [`max_recv_sge`](Conn::max_recv_sge), an element exceeds its region,
    /// lacks [`Usage::RECV`] or is on another peer (named as `dst[i]`), the
    /// total exceeds 4 GiB - 1, or the connection uses an SRQ;
    /// [`Error::NoMem`] when the holds cannot be allocated;
    /// [`Error::Provider`] when posting fails (`ENOMEM`: the receive queue
    /// is full).
    pub fn recv_sg<M: RegMemory + Send + Sync + 'static>(&self, dst: &[Sg<'_, M>], op_context: u64) -> Result<()> {
        self.post(RecvSg::new(dst).op_context(op_context))
    }

    /// Writes `data` to the remote region at `dst_offset` as inline data
    /// (`IBV_SEND_INLINE`): the device copies the bytes during the post, so
    /// they may come from any slice, need no registration, and may be
    /// changed as soon as this returns. At most
    /// [`max_inline_data`](Conn::max_inline_data) bytes.
    ///
    /// ```
    /// # #[allow(dead_code)]
    /// fn note(conn: &rpma::Conn, dst: &rpma::MrRemote) -> rpma::Result<()> {
    ///     let mut record = [0u8; 8];
    ///     record.copy_from_slice(&42u64.to_le_bytes());
    ///     conn.write_inline(dst, 64, &record, rpma::Flags::COMPLETION_ALWAYS, 9)?;
    ///     record.fill(0); // copied already
    ///     let wc = conn.cq().next_completion(std::time::Duration::from_secs(1))?;
    ///     assert_eq!(wc.op_context, 9);
    ///     Ok(())
    /// }
    /// ```
    ///
    /// # Errors
    /// [`Error::Inval`] when `flags` are empty, `data` is longer than
    /// [`max_inline_data`](Conn::max_inline_data) (the message names both),
    /// the range exceeds the remote region or it lacks
    /// [`Usage::WRITE_DST`]; [`Error::Again`] when the send queue is full;
    /// [`Error::Provider`] when posting fails.
    pub fn write_inline(
        &self,
        dst: &MrRemote,
        dst_offset: u64,
        data: &[u8],
        flags: Flags,
        op_context: u64,
    ) -> Result<()> {
        self.post(WriteInline::new(dst, dst_offset, data).flags(flags).op_context(op_context))
    }

    /// [`write_inline`](Conn::write_inline) with immediate data, which the
    /// other side gets in the completion of a posted receive, in host order.
    ///
    /// # Errors
    /// As [`write_inline`](Conn::write_inline).
    pub fn write_inline_with_imm(
        &self,
        dst: &MrRemote,
        dst_offset: u64,
        data: &[u8],
        flags: Flags,
        imm: u32,
        op_context: u64,
    ) -> Result<()> {
        self.post(WriteInline::new(dst, dst_offset, data).imm(imm).flags(flags).op_context(op_context))
    }

    /// Sends `data` as inline data to a receive posted by the other side:
    /// copied by the device during the post, from any slice, at most
    /// [`max_inline_data`](Conn::max_inline_data) bytes; `data` may be
    /// empty.
    ///
    /// # Errors
    /// [`Error::Inval`] when `flags` are empty or `data` is longer than
    /// [`max_inline_data`](Conn::max_inline_data); [`Error::Again`],
    /// [`Error::Provider`] as [`write_inline`](Conn::write_inline).
    pub fn send_inline(&self, data: &[u8], flags: Flags, op_context: u64) -> Result<()> {
        self.post(SendInline::new(data).flags(flags).op_context(op_context))
    }

    /// [`send_inline`](Conn::send_inline) with immediate data, delivered in
    /// host order.
    ///
    /// # Errors
    /// As [`send_inline`](Conn::send_inline).
    pub fn send_inline_with_imm(&self, data: &[u8], flags: Flags, imm: u32, op_context: u64) -> Result<()> {
        self.post(SendInline::new(data).imm(imm).flags(flags).op_context(op_context))
    }
}
