//! [`AsyncConn`]'s librpma-named operations: each builds its operation of
//! [`crate::ops`] and returns [`AsyncConn::post`]'s future (the atomics
//! read the old value after it): nothing is posted before the first poll,
//! and the future is the post's, so it costs no more.

use super::AsyncConn;
use crate::cq::Completion;
use crate::error::Result;
use crate::memory::RegMemory;
use crate::mr::{MrLocal, MrRemote};
use crate::ops;
#[cfg(doc)]
use crate::Conn;
use std::future::Future;

impl AsyncConn {
    /// Reads `len` bytes of `src` at `src_offset` into `dst` at
    /// `dst_offset` ([`Conn::read`], awaited).
    ///
    /// # Errors
    /// As [`post`](AsyncConn::post) and [`Conn::read`].
    pub fn read<'a, M: RegMemory + Send + Sync + 'static>(
        &'a self,
        dst: &'a MrLocal<M>,
        dst_offset: usize,
        src: &'a MrRemote,
        src_offset: u64,
        len: usize,
    ) -> impl Future<Output = Result<Completion>> + use<'a, M> {
        self.post(ops::Read::new(dst, dst_offset, src, src_offset, len))
    }

    /// Writes `len` bytes of `src` at `src_offset` to `dst` at
    /// `dst_offset` ([`Conn::write`], awaited).
    ///
    /// # Errors
    /// As [`post`](AsyncConn::post) and [`Conn::write`].
    pub fn write<'a, M: RegMemory + Send + Sync + 'static>(
        &'a self,
        dst: &'a MrRemote,
        dst_offset: u64,
        src: &'a MrLocal<M>,
        src_offset: usize,
        len: usize,
    ) -> impl Future<Output = Result<Completion>> + use<'a, M> {
        self.post(ops::Write::new(dst, dst_offset, src, src_offset, len))
    }

    /// [`write`](AsyncConn::write) with immediate data, which the other
    /// side gets in the completion of a posted receive, in host order
    /// ([`Conn::write_with_imm`], awaited).
    ///
    /// # Errors
    /// As [`post`](AsyncConn::post) and [`Conn::write_with_imm`].
    pub fn write_with_imm<'a, M: RegMemory + Send + Sync + 'static>(
        &'a self,
        dst: &'a MrRemote,
        dst_offset: u64,
        src: &'a MrLocal<M>,
        src_offset: usize,
        len: usize,
        imm: u32,
    ) -> impl Future<Output = Result<Completion>> + use<'a, M> {
        self.post(ops::Write::new(dst, dst_offset, src, src_offset, len).imm(imm))
    }

    /// Flushes `len` bytes of `dst` at `dst_offset` to visibility or
    /// persistence ([`Conn::flush`], awaited).
    ///
    /// # Errors
    /// As [`post`](AsyncConn::post) and [`Conn::flush`].
    pub fn flush<'a>(
        &'a self,
        dst: &'a MrRemote,
        dst_offset: u64,
        len: u64,
        ty: crate::FlushType,
    ) -> impl Future<Output = Result<Completion>> + use<'a> {
        self.post(ops::Flush::new(dst, dst_offset, len, ty))
    }

    /// Writes 8 bytes atomically at `dst_offset` of `dst`
    /// ([`Conn::atomic_write`], awaited).
    ///
    /// # Errors
    /// As [`post`](AsyncConn::post) and [`Conn::atomic_write`].
    pub fn atomic_write<'a>(
        &'a self,
        dst: &'a MrRemote,
        dst_offset: u64,
        value: [u8; 8],
    ) -> impl Future<Output = Result<Completion>> + use<'a> {
        self.post(ops::AtomicWrite::new(dst, dst_offset, value))
    }

    /// Compares the 8 bytes at `src_offset` of `src` with `compare` and, if
    /// equal, swaps in `swap` ([`Conn::compare_and_swap`], awaited); returns
    /// the value found there (also in `dst` at `dst_offset`).
    ///
    /// # Errors
    /// As [`post`](AsyncConn::post) and [`Conn::compare_and_swap`].
    pub fn compare_and_swap<'a, M: RegMemory + Send + Sync + 'static>(
        &'a self,
        dst: &'a MrLocal<M>,
        dst_offset: usize,
        src: &'a MrRemote,
        src_offset: u64,
        compare: u64,
        swap: u64,
    ) -> impl Future<Output = Result<u64>> + use<'a, M> {
        let done = self.post(ops::CompareAndSwap::new(dst, dst_offset, src, src_offset, compare, swap));
        async move {
            done.await?;
            old_value(dst, dst_offset)
        }
    }

    /// Adds `add` to the 8 bytes at `src_offset` of `src`
    /// ([`Conn::fetch_and_add`], awaited); returns the value found there
    /// (also in `dst` at `dst_offset`).
    ///
    /// # Errors
    /// As [`post`](AsyncConn::post) and [`Conn::fetch_and_add`].
    pub fn fetch_and_add<'a, M: RegMemory + Send + Sync + 'static>(
        &'a self,
        dst: &'a MrLocal<M>,
        dst_offset: usize,
        src: &'a MrRemote,
        src_offset: u64,
        add: u64,
    ) -> impl Future<Output = Result<u64>> + use<'a, M> {
        let done = self.post(ops::FetchAndAdd::new(dst, dst_offset, src, src_offset, add));
        async move {
            done.await?;
            old_value(dst, dst_offset)
        }
    }

    /// Sends `len` bytes of `src` at `offset` ([`Conn::send`], awaited).
    ///
    /// # Errors
    /// As [`post`](AsyncConn::post) and [`Conn::send`].
    pub fn send<'a, M: RegMemory + Send + Sync + 'static>(
        &'a self,
        src: &'a MrLocal<M>,
        offset: usize,
        len: usize,
    ) -> impl Future<Output = Result<Completion>> + use<'a, M> {
        self.post(ops::Send::new(src, offset, len))
    }

    /// [`send`](AsyncConn::send) with immediate data, delivered in host
    /// order ([`Conn::send_with_imm`], awaited).
    ///
    /// # Errors
    /// As [`post`](AsyncConn::post) and [`Conn::send_with_imm`].
    pub fn send_with_imm<'a, M: RegMemory + Send + Sync + 'static>(
        &'a self,
        src: &'a MrLocal<M>,
        offset: usize,
        len: usize,
        imm: u32,
    ) -> impl Future<Output = Result<Completion>> + use<'a, M> {
        self.post(ops::Send::new(src, offset, len).imm(imm))
    }

    /// Receives a message into `dst` at `offset`, up to `len` bytes
    /// ([`Conn::recv`], awaited): the completion's `byte_len` says how
    /// many arrived (and `imm` any immediate data).
    ///
    /// # Errors
    /// As [`post`](AsyncConn::post) and [`Conn::recv`].
    pub fn recv<'a, M: RegMemory + Send + Sync + 'static>(
        &'a self,
        dst: &'a MrLocal<M>,
        offset: usize,
        len: usize,
    ) -> impl Future<Output = Result<Completion>> + use<'a, M> {
        self.post(ops::Recv::new(dst, offset, len))
    }
}

/// The 8 bytes an atomic left at `offset` of `dst`, little-endian as the
/// device wrote them.
fn old_value<M: RegMemory>(dst: &MrLocal<M>, offset: usize) -> Result<u64> {
    let mut b = [0u8; 8];
    dst.read_at(offset, &mut b)?;
    Ok(u64::from_le_bytes(b))
}
