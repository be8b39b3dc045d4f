//! Receives as operations: [`Recv`] (one range, `rpma_recv`) and
//! [`RecvSg`] (a list), posted to a connection's receive queue with
//! [`Conn::post`](crate::Conn::post)
//! and to a shared one with [`Srq::post`](crate::Srq::post). A receive's
//! completion always arrives, so it has no flags; a chain refuses it (a
//! chain is the send queue's).

use super::sealed::{Encode, Hold_, Receive};
use super::{gather, Gathered, HoldBy, Meta, Operation, RecvOperation, Sg, Sink, Target};
use crate::access::Usage;
use crate::error::{Arg, Named, Result};
use crate::inflight::{Hold, Holding};
use crate::memory::RegMemory;
use crate::mr::MrLocal;
use crate::peer::Peer;
use crate::validate;
use crate::wrid::CompletionOp;
use rpma_sys::wr::Sge;

/// A receive of up to `len` bytes (0 allowed) into `dst` at `offset`
/// (`rpma_recv`, `rpma_srq_recv`, `rpma_conn_req_recv`); `dst` needs
/// [`Usage::RECV`]. Receives are not guaranteed to complete in posting
/// order; match them by [`op_context`](Recv::op_context).
///
/// ```
/// use rpma::ops::Recv;
/// # #[allow(dead_code)]
/// fn expect_two(conn: &rpma::Conn, buf: &rpma::MrLocal<rpma::AlignedBuf>) -> rpma::Result<()> {
///     conn.post(Recv::new(buf, 0, 64).op_context(1))?;
///     conn.post(Recv::new(buf, 64, 64).op_context(2))?;
///     Ok(())
/// }
/// ```
#[must_use = "an operation does nothing until it is posted"]
pub struct Recv<'a, M: RegMemory> {
    dst: &'a MrLocal<M>,
    offset: usize,
    len: usize,
    ctx: u64,
}

impl<'a, M: RegMemory> Recv<'a, M> {
    /// The receive, reporting its completion with `op_context` 0.
    #[inline(always)]
    pub fn new(dst: &'a MrLocal<M>, offset: usize, len: usize) -> Self {
        Recv { dst, offset, len, ctx: 0 }
    }

    /// The value its completion carries in
    /// [`Completion::op_context`](crate::Completion) (default 0).
    #[inline(always)]
    pub fn op_context(mut self, op_context: u64) -> Self {
        self.ctx = op_context;
        self
    }

    /// The checks (the length, the range, the usage and the peer) and the
    /// memory to post.
    #[inline]
    fn sge(&self, peer: &Peer) -> Result<Option<Sge>> {
        let len32 = validate::len32(&DST, self.len)?;
        self.dst.check_range(&DST, self.offset, self.len)?;
        validate::local(self.dst, Usage::RECV, &DST, peer)?;
        Ok((self.len > 0).then(|| self.dst.sge(self.offset, len32)))
    }
}

const DST: Named = Named::new(Arg::Dst, "recv: dst");

/// A receive scattering one message into the elements of `dst`, filled
/// one after the other; every region in `dst` is held until it completes,
/// and elements of 0 bytes are checked and skipped. At most the queue's
/// receive SGEs ([`Conn::max_recv_sge`](crate::Conn::max_recv_sge); an
/// SRQ takes one); an empty list takes a 0-byte message. As for a
/// [`Recv`], its completion always arrives.
///
/// # Errors (when posted)
/// [`Error::Inval`](crate::Error::Inval) when `dst` is longer than the
/// queue's receive SGEs, an element exceeds its region, lacks
/// [`Usage::RECV`] or is on another peer (named as `dst[i]`), the total
/// exceeds 4 GiB - 1, or the connection uses an SRQ;
/// [`Error::NoMem`](crate::Error::NoMem) when the holds cannot be
/// allocated; [`Error::Provider`](crate::Error::Provider) when posting
/// fails (`ENOMEM`: the receive queue is full).
#[must_use = "an operation does nothing until it is posted"]
pub struct RecvSg<'a, M: RegMemory> {
    dst: &'a [Sg<'a, M>],
    ctx: u64,
}

impl<'a, M: RegMemory> RecvSg<'a, M> {
    /// The receive, reporting its completion with `op_context` 0.
    pub fn new(dst: &'a [Sg<'a, M>]) -> Self {
        RecvSg { dst, ctx: 0 }
    }

    /// The value its completion carries in
    /// [`Completion::op_context`](crate::Completion) (default 0).
    pub fn op_context(mut self, op_context: u64) -> Self {
        self.ctx = op_context;
        self
    }
}

impl<M: RegMemory + Send + Sync + 'static> RecvSg<'_, M> {
    /// The checks (count, every element's range, usage and peer, the total)
    /// and the list with its holds.
    fn gather(&self, peer: &Peer, max: u32, limit: &str) -> Result<Gathered> {
        gather(self.dst, Usage::RECV, &Named::new(Arg::Dst, "recv_sg: dst"), max, limit, peer)
    }
}

impl<M: RegMemory + Send + Sync + 'static> Recv<'_, M> {
    /// The hold of the region and the range the device writes.
    #[inline(always)]
    fn dst_hold(&self) -> Holding {
        self.dst.hold_range(&DST, self.offset, self.len, crate::error::RangeUse::DeviceWrites)
    }
}

impl<M: RegMemory> Encode for Recv<'_, M> {
    #[inline]
    fn encode<S: Sink>(&self, t: &Target<'_>, sink: S) -> Result<()> {
        let sge = self.sge(t.peer)?;
        sink.recv(Meta { kind: CompletionOp::Recv, ctx: self.ctx, hold: HoldBy::Op }, sge)
    }
}

impl<M: RegMemory + Send + Sync + 'static> Encode for RecvSg<'_, M> {
    fn encode<S: Sink>(&self, t: &Target<'_>, sink: S) -> Result<()> {
        let g = self.gather(t.peer, t.max_recv_sge, "the connection's max_recv_sge")?;
        sink.recv_list(Meta { kind: CompletionOp::Recv, ctx: self.ctx, hold: HoldBy::List }, g)
    }
}

impl<M: RegMemory + Send + Sync + 'static> Hold_ for Recv<'_, M> {
    #[inline]
    fn hold(&self, _: &Target<'_>) -> Holding {
        self.dst_hold()
    }
}

impl<M: RegMemory + Send + Sync + 'static> Hold_ for RecvSg<'_, M> {
    fn hold(&self, t: &Target<'_>) -> Holding {
        t.flush_mr.keep()
    }
}

impl<M: RegMemory + Send + Sync + 'static> Receive for Recv<'_, M> {
    #[inline]
    fn post_checked(
        &self,
        peer: &Peer,
        _max_sge: (u32, &str),
        post: impl FnOnce(u64, &[Sge], Option<Hold>) -> Result<()>,
    ) -> Result<()> {
        let sge = self.sge(peer)?;
        post(self.ctx, sge.as_slice(), Some(self.dst_hold().map_err(crate::inflight::unbox)?))
    }
}

impl<M: RegMemory + Send + Sync + 'static> Receive for RecvSg<'_, M> {
    fn post_checked(
        &self,
        peer: &Peer,
        (max, limit): (u32, &str),
        post: impl FnOnce(u64, &[Sge], Option<Hold>) -> Result<()>,
    ) -> Result<()> {
        let mut g = self.gather(peer, max, limit)?;
        let hold = g.hold.take();
        post(self.ctx, g.list(), hold)
    }
}

impl<M: RegMemory + Send + Sync + 'static> Operation for Recv<'_, M> {}
impl<M: RegMemory + Send + Sync + 'static> RecvOperation for Recv<'_, M> {}
impl<M: RegMemory + Send + Sync + 'static> Operation for RecvSg<'_, M> {}
impl<M: RegMemory + Send + Sync + 'static> RecvOperation for RecvSg<'_, M> {}

impl<M: RegMemory> Clone for Recv<'_, M> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<M: RegMemory> Copy for Recv<'_, M> {}
impl<M: RegMemory> Clone for RecvSg<'_, M> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<M: RegMemory> Copy for RecvSg<'_, M> {}

impl<M: RegMemory> std::fmt::Debug for Recv<'_, M> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Recv")
            .field("offset", &self.offset)
            .field("len", &self.len)
            .field("op_context", &self.ctx)
            .finish_non_exhaustive()
    }
}

impl<M: RegMemory> std::fmt::Debug for RecvSg<'_, M> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RecvSg").field("len", &self.dst.len()).field("op_context", &self.ctx).finish()
    }
}
