//! The CPU's accesses to ranges of a local region: copies in and out, and
//! references in place, each holding its range in the region's book
//! ([`crate::inflight::book`]) while it runs.

use super::*;
use crate::error::RangeUse;
use crate::inflight::book::{Book, Span, Use};

impl<M: RegMemory> MrLocal<M> {
    /// Copies `dst.len()` bytes from `offset` in the region into `dst`.
    ///
    /// A copy, so it may run while the device writes the range (an
    /// operation's destination in flight, or a remote peer's write into a
    /// region with [`Usage::WRITE_DST`]): the bytes are then those of the
    /// moment, possibly torn, never a reference into memory that changes.
    /// Read a destination after its completion; for a reference instead,
    /// which is refused while the device writes the range, see
    /// [`view_at`](Self::view_at).
    ///
    /// # Errors
    /// * [`Error::Inval`] when `offset + dst.len()` exceeds [`size`](Self::size);
    /// * [`Error::Again`] with [`Detail::RangeBusy`] while another thread
    ///   writes the range ([`write_at`](Self::write_at),
    ///   [`update_at`](Self::update_at)): retry.
    pub fn read_at(&self, offset: usize, dst: &mut [u8]) -> Result<()> {
        let what = Named::new(Arg::Range, "read_at");
        self.check_range(&what, offset, dst.len())?;
        let _span = self.use_range(&what, offset, dst.len(), Use::CpuCopies)?;
        // SAFETY: the range is inside the owned, live memory (checked above)
        // and no thread writes it (its book says so); raw copies create no
        // reference to memory the device may write.
        unsafe { std::ptr::copy_nonoverlapping(self.inner.ptr.add(offset), dst.as_mut_ptr(), dst.len()) };
        Ok(())
    }

    /// [`read_at`](Self::read_at) with volatile loads: every call reads the
    /// memory again, so a loop can poll for bytes the remote side writes into
    /// the region (an RDMA write, as in perftest's `ib_write_lat`), which a
    /// plain copy in a loop does not guarantee. The device gives no order
    /// among the bytes of one write: poll the last byte, or a flag written by
    /// a later operation, then read the rest.
    ///
    /// ```no_run
    /// # #[allow(dead_code)]
    /// # fn f(mr: &rpma::MrLocal<rpma::AlignedBuf>) -> rpma::Result<()> {
    /// let mut flag = [0u8];
    /// while flag[0] == 0 {
    ///     mr.read_volatile_at(63, &mut flag)?; // the last byte of a 64-byte record
    ///     std::hint::spin_loop();
    /// }
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// [`Error::Inval`] when `offset + dst.len()` exceeds [`size`](Self::size).
    pub fn read_volatile_at(&self, offset: usize, dst: &mut [u8]) -> Result<()> {
        self.check_range(&Named::new(Arg::Range, "read_volatile_at"), offset, dst.len())?;
        for (i, d) in dst.iter_mut().enumerate() {
            // SAFETY: inside the owned, live memory (checked above); a raw
            // volatile load creates no reference to memory the device may write.
            {
                *d = unsafe { std::ptr::read_volatile(self.inner.ptr.add(offset + i)) };
            }
        }
        Ok(())
    }

    /// Copies `src` into the region at `offset`: staging the next record
    /// while operations on other ranges of the region are in flight.
    ///
    /// ```no_run
    /// # #[allow(dead_code)]
    /// # fn f(conn: &rpma::Conn, ring: &rpma::MrLocal<rpma::AlignedBuf>, dst: &rpma::MrRemote) -> rpma::Result<()> {
    /// ring.write_at(0, b"record 0")?;
    /// conn.write(dst, 0, ring, 0, 8, rpma::Flags::COMPLETION_ALWAYS, 0)?;
    /// ring.write_at(4096, b"record 1")?; // while record 0 is in flight
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// * [`Error::Inval`] when `offset + src.len()` exceeds [`size`](Self::size);
    /// * [`Error::Again`] with [`Detail::RangeBusy`] while an operation in
    ///   flight reads or writes the range (the device may be reading or
    ///   writing it), or another thread reads or writes it: reap the
    ///   completion, or retry.
    pub fn write_at(&self, offset: usize, src: &[u8]) -> Result<()> {
        let what = Named::new(Arg::Range, "write_at");
        self.check_range(&what, offset, src.len())?;
        let _span = self.use_range(&what, offset, src.len(), Use::CpuWrites)?;
        // SAFETY: inside the owned, live memory (checked above), and no
        // operation or thread uses the range (its book says so).
        unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), self.inner.ptr.add(offset), src.len()) };
        Ok(())
    }

    /// Calls `f` with the `len` bytes at `offset` to fill in place (a
    /// record built where it is sent from, with no copy), and returns what
    /// it returns. While `f` runs no operation can use the range (a post
    /// naming it is refused with [`Detail::RangeBusy`]); other ranges stay
    /// free for posts and for other threads.
    ///
    /// ```no_run
    /// # #[allow(dead_code)]
    /// # fn f(ring: &rpma::MrLocal<rpma::AlignedBuf>) -> rpma::Result<()> {
    /// ring.update_at(64, 16, |rec| {
    ///     rec[..8].copy_from_slice(&7u64.to_le_bytes());
    ///     rec[8..].fill(0xab);
    /// })?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// * [`Error::Inval`] when the range exceeds [`size`](Self::size); with
    ///   [`Misuse::RemotelyWritable`] for a region a remote peer may write
    ///   ([`Usage::WRITE_DST`], [`Usage::REMOTE_ATOMIC`]) and
    ///   [`Misuse::SharedMemory`] for memory another mapping may write
    ///   ([`RegMemory::is_exclusive`]): a reference there could change
    ///   under `f`, so use [`write_at`](Self::write_at);
    /// * [`Error::Again`] with [`Detail::RangeBusy`] as for
    ///   [`write_at`](Self::write_at).
    pub fn update_at<R>(&self, offset: usize, len: usize, f: impl FnOnce(&mut [u8]) -> R) -> Result<R> {
        let what = Named::new(Arg::Range, "update_at");
        self.check_in_place(&what, offset, len)?;
        let _span = self.use_range(&what, offset, len, Use::CpuWrites)?;
        // SAFETY: inside the owned, live memory (checked above); no
        // operation, thread or remote peer writes or reads the range while
        // the span is held (its book, the region's access flags and the
        // memory's `is_exclusive`), so this is the only reference to it.
        let bytes = unsafe { std::slice::from_raw_parts_mut(self.inner.ptr.add(offset), len) };
        Ok(f(bytes))
    }

    /// Calls `f` with the `len` bytes at `offset` to read in place (a
    /// received message parsed where it landed), and returns what it
    /// returns. While `f` runs no operation can write the range.
    ///
    /// # Errors
    /// * [`Error::Inval`] as for [`update_at`](Self::update_at);
    /// * [`Error::Again`] with [`Detail::RangeBusy`] as for
    ///   [`read_at`](Self::read_at).
    pub fn view_at<R>(&self, offset: usize, len: usize, f: impl FnOnce(&[u8]) -> R) -> Result<R> {
        let what = Named::new(Arg::Range, "view_at");
        self.check_in_place(&what, offset, len)?;
        let _span = self.use_range(&what, offset, len, Use::CpuReads)?;
        // SAFETY: inside the owned, live memory (checked above); no
        // operation, thread or remote peer writes the range while the span
        // is held (as in `update_at`).
        let bytes = unsafe { std::slice::from_raw_parts(self.inner.ptr.add(offset), len) };
        Ok(f(bytes))
    }

    /// The range check of the in-place accessors, and whether a reference
    /// into the region can be handed out at all.
    fn check_in_place(&self, what: &Named, offset: usize, len: usize) -> Result<()> {
        self.check_range(what, offset, len)?;
        if self.access().intersects(Access::REMOTE_WRITE | Access::REMOTE_ATOMIC) {
            return Err(Error::misuse(
                Misuse::RemotelyWritable,
                format!(
                    "{what}: the region grants remote write access ({:?}): copy with read_at/write_at",
                    self.usage()
                ),
            ));
        }
        if !self.inner.mem.is_exclusive() {
            return Err(Error::misuse(
                Misuse::SharedMemory,
                format!("{what}: another mapping may write the region's memory: copy with read_at/write_at"),
            ));
        }
        Ok(())
    }

    /// The stripes of a range (`how` the CPU uses it), released when the
    /// value is dropped.
    #[inline]
    fn use_range(&self, what: &Named, offset: usize, len: usize, how: Use) -> Result<CpuSpan<'_>> {
        match self.inner.book.take_cpu(offset, len, how) {
            Ok(span) => Ok(CpuSpan { book: &self.inner.book, span }),
            Err(by) => Err(range_busy(what, offset, len, by)),
        }
    }

    /// The stripe size of the region's book of ranges in use: ranges
    /// closer than this count as overlapping ([`Detail::RangeBusy`]), so
    /// records staged beside operations in flight start on a multiple of
    /// it. A power of two, at least 64 bytes, at least
    /// [`size`](Self::size) / 64 (the book has 64 stripes).
    pub fn granule(&self) -> usize {
        self.inner.book.granule()
    }
}

/// A range the CPU uses, released when dropped.
struct CpuSpan<'a> {
    book: &'a Book,
    span: Span,
}

impl Drop for CpuSpan<'_> {
    fn drop(&mut self) {
        self.book.release_cpu(self.span);
    }
}

/// [`Error::Again`] naming the call's range and the use it conflicts with.
#[cold]
#[inline(never)]
pub(super) fn range_busy(what: &Named, offset: usize, len: usize, by: RangeUse) -> Error {
    Error::range_busy(offset, len, by, format!("{what}: {len} byte(s) at offset {offset} are in use: {by}"))
}
