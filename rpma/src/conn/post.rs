//! Posting one operation of [`crate::ops`] with [`Conn::post`]: the local
//! region held until the completion, or, for an [`Unheld`](crate::ops::Unheld)
//! one, kept by the caller (librpma's contract), through the [`Sink`] of a
//! single post.

use super::Conn;
use crate::error::{Error, Result};
use crate::inflight::{SendOpRec, Take, NO_HOLD};
#[allow(unused_imports)] // the sealed traits' methods
use crate::ops::sealed::{Encode, Hold_};
use crate::ops::{Gathered, HoldBy, HoldOf, KeepOf, Meta, Operation, RecvOperation, Sink, Target};
use crate::wrid::CompletionOp;
use rpma_sys::wr::{SendWr, Sge, Wr};

impl Conn {
    /// Posts one operation (not in librpma; the librpma-named methods,
    /// `read`, `write` and the others, are this with their operation),
    /// checked: its local region is
    /// held until the operation (or a later signaled one) completes, so
    /// dropping or deregistering it early is safe.
    ///
    /// ```
    /// use rpma::ops::{Read, Send as SendOp};
    /// # #[allow(dead_code)]
    /// fn ask(conn: &rpma::Conn, dst: &rpma::MrLocal<rpma::AlignedBuf>, src: &rpma::MrRemote,
    ///        msg: &rpma::MrLocal<rpma::AlignedBuf>) -> rpma::Result<()> {
    ///     conn.post(Read::new(dst, 0, src, 0, 64).op_context(1))?;
    ///     conn.post(SendOp::new(msg, 0, 16).imm(7).flags(rpma::Flags::COMPLETION_ON_ERROR))?;
    ///     Ok(())
    /// }
    /// ```
    ///
    /// # Errors
    /// The operation's checks (see its type and the librpma-named method
    /// of its verb): [`Error::Inval`] naming the broken bound or missing
    /// usage, [`Error::NoSupp`] for what the device or the remote side
    /// cannot do; [`Error::Again`] when the send queue is full, or with
    /// [`Detail::RangeBusy`](crate::error::Detail::RangeBusy) while the CPU
    /// uses the local range; [`Error::Provider`] when posting fails.
    #[inline(always)]
    pub fn post<O: Operation>(&self, op: O) -> Result<()> {
        let t = self.target();
        op.encode(&t, Single::<_, false> { conn: self, hold: HoldOf(&op, &t) })
    }

    /// Posts `op` checked, as [`post`](Conn::post), with the op context
    /// `ctx` and a completion always: an awaited operation's, whose
    /// completion the reaper of [`crate::aio::AsyncConn`] routes by `ctx`.
    /// Returns the op context the operation was given, which its
    /// completion gets back.
    #[cfg(feature = "tokio")]
    #[inline(always)]
    pub(crate) fn post_awaited<O: Operation>(&self, op: O, ctx: u64) -> Result<u64> {
        let t = self.target();
        let given = std::cell::Cell::new(0);
        let single = Single::<_, false> { conn: self, hold: HoldOf(&op, &t) };
        op.encode(&t, Awaited { inner: single, ctx, given: &given })?;
        Ok(given.get())
    }

    /// Hands the connection's CQs to an async reaper: its own ones to an
    /// [`AsyncConn`](crate::aio::AsyncConn)'s (`shared` `None`), or checks
    /// that its only CQ is `shared`, whose reaper an
    /// [`AsyncSharedCq`](crate::aio::AsyncSharedCq) runs. An SRQ's own
    /// receive CQ stays its owner's.
    #[cfg(feature = "tokio")]
    pub(crate) fn hand_to_reaper(&mut self, shared: Option<&crate::SharedCq>) -> Result<()> {
        self.events_reaped = true;
        let p = &mut self.parts;
        match (&mut p.cq, shared) {
            (crate::cq::ConnCq::Own(cq), None) => {
                cq.hand_to_reaper();
                if let Some(r) = &mut p.rcq {
                    r.hand_to_reaper();
                }
                Ok(())
            }
            (crate::cq::ConnCq::Shared(mine), Some(s))
                if std::sync::Arc::ptr_eq(mine.routes(), s.routes()) && p.rcq.is_none() =>
            {
                Ok(())
            }
            (crate::cq::ConnCq::Shared(_), None) => Err(Error::NoSupp(
                "this connection completes on a SharedCq: attach it with rpma::aio::AsyncSharedCq::attach".into(),
            )),
            _ => Err(Error::NoSupp(
                "AsyncSharedCq::attach: the connection's CQ is not this SharedCq (or it has a separate receive CQ)"
                    .into(),
            )),
        }
    }

    /// What an operation is checked against on this connection.
    #[inline(always)]
    pub(super) fn target(&self) -> Target<'_> {
        let p = &self.parts;
        Target {
            peer: &p.peer,
            native_atomic_write: p.native.atomic_write,
            native_flush: p.native.flush,
            max_inline_data: p.limits.max_inline_data,
            max_send_sge: p.limits.max_send_sge,
            max_recv_sge: p.limits.max_recv_sge,
            pmem: &self.direct_write_to_pmem,
            flush_mr: &p.flush_mr,
        }
    }

    /// Posts a native atomic write or flush alone, through its own
    /// `ibv_wr_*` sequence (which ignores [`Flags::FENCE`]): out of line,
    /// so the other posts stay small.
    /// `untracked`: the kind and `ctx` in the work request ID, nothing
    /// recorded (the requests name no local memory).
    #[inline(never)]
    fn post_native(&self, kind: CompletionOp, ctx: u64, wr: Wr, untracked: bool) -> Result<()> {
        let mut ex = self.parts.qp()?.ex().ok_or_else(|| Error::Unknown("no extended interface".into()))?;
        if untracked {
            let id = crate::wrid::untracked(kind, ctx)?;
            return ex.post_native(id, &wr).map_err(|e| crate::inflight::post_error("ibv_post_send", e));
        }
        let rec = SendOpRec { ctx, kind, signaled: wr.signaled(), hold: None, confirm: None };
        self.parts.send.post_with(rec, |id| ex.post_native(id, &wr))
    }
}

impl crate::Srq {
    /// Posts a receive ([`Recv`](crate::ops::Recv), or [`RecvSg`](crate::ops::RecvSg) of one
    /// element: the SRQ takes one SGE per receive), checked as on a
    /// connection (not in librpma). Its regions stay alive until it
    /// completes. Only receives: an operation of the send queue does not
    /// compile here.
    ///
    /// ```compile_fail,E0277
    /// # fn f(srq: &rpma::Srq, dst: &rpma::MrLocal<rpma::AlignedBuf>, src: &rpma::MrRemote) -> rpma::Result<()> {
    /// srq.post(rpma::ops::Read::new(dst, 0, src, 0, 8))?; // a read is no receive
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// As [`recv`](crate::Srq::recv); [`Error::Inval`] for a list longer than one.
    pub fn post<O: RecvOperation>(&self, op: O) -> Result<()> {
        op.post_checked(self.peer(), (crate::srq::SRQ_SGE, "the SRQ's max_sge"), |ctx, sgl, hold| {
            let (srq, tracker) = (self.sys()?, self.tracker());
            if O::UNHELD {
                // SAFETY: an `Unheld` receive, whose regions `Unheld::new`'s
                // caller keeps.
                return unsafe { tracker.post_unheld(srq, ctx, sgl) };
            }
            tracker.post(srq, crate::CompletionOp::Recv, ctx, hold, sgl)
        })
    }
}

/// The sink of a single post: tracked with the operation's `hold`; under
/// `UNHELD` (an [`Unheld`](crate::ops::Unheld) operation) untracked whenever the op context fits
/// the ID and no list is posted, else recorded without holding the
/// caller's region (a list: tracked with its holds).
struct Single<'c, H: Take, const UNHELD: bool> {
    conn: &'c Conn,
    hold: H,
}

impl<H: Take, const UNHELD: bool> Single<'_, H, UNHELD> {
    /// Whether this post goes untracked although a hold was given: under
    /// `UNHELD`, when the op context fits the ID and no earlier post of the
    /// connection had to be recorded for a wider one
    /// ([`ConnParts::unheld_recorded`](super::parts::ConnParts)).
    #[inline(always)]
    fn untracked(&self, m: &Meta) -> bool {
        if !UNHELD {
            return false;
        }
        let recorded = &self.conn.parts.unheld_recorded;
        if m.ctx > crate::wrid::UNTRACKED_CTX_MAX {
            recorded.store(true, std::sync::atomic::Ordering::Relaxed);
            return false;
        }
        !recorded.load(std::sync::atomic::Ordering::Relaxed)
    }
}

impl<H: Take, const UNHELD: bool> Sink for Single<'_, H, UNHELD> {
    #[inline(always)]
    fn plain(self, m: Meta, wr: SendWr) -> Result<()> {
        let parts = &self.conn.parts;
        if UNHELD && !matches!(m.hold, HoldBy::List) {
            if self.untracked(&m) {
                // SAFETY: `Unheld::new`'s caller keeps the operation's
                // region (`HoldBy::Op`); the flush region is the
                // connection's own and outlives its QP; the other kinds name
                // no local memory or bytes copied during the post.
                return unsafe { parts.post_untracked(m.kind, m.ctx, wr) };
            }
            // Recorded for its op context only: the caller keeps the region,
            // the entry holds the connection's flush region (harmless).
            return parts.post(m.kind, m.ctx, Some(KeepOf(&parts.flush_mr)), wr);
        }
        match m.hold {
            HoldBy::Op => parts.post(m.kind, m.ctx, Some(self.hold), wr),
            HoldBy::FlushRegion => parts.post(m.kind, m.ctx, Some(KeepOf(&parts.flush_mr)), wr),
            HoldBy::Nothing | HoldBy::LentBytes | HoldBy::List => parts.post(m.kind, m.ctx, NO_HOLD, wr),
        }
    }

    #[inline(always)]
    fn other(self, m: Meta, wr: Wr) -> Result<()> {
        // The emulated atomic write is an inline write of bytes in `wr`,
        // on this stack, copied during the post.
        let unheld = self.untracked(&m);
        match wr.send_wr() {
            // SAFETY: inline bytes, copied during the post: no local memory.
            Some(p) if unheld => unsafe { self.conn.parts.post_untracked(m.kind, m.ctx, p) },
            Some(p) => self.conn.parts.post(m.kind, m.ctx, NO_HOLD, p),
            None => self.conn.post_native(m.kind, m.ctx, wr, unheld),
        }
    }

    #[inline]
    fn list(self, m: Meta, wr: SendWr, mut g: Gathered) -> Result<()> {
        let parts = &self.conn.parts;
        if self.untracked(&m) && g.list().is_empty() {
            // SAFETY: an empty list (librpma's 0-byte form) names no memory.
            return unsafe { parts.post_untracked(m.kind, m.ctx, wr) };
        }
        let qp = parts.qp()?;
        let rec = SendOpRec { ctx: m.ctx, kind: m.kind, signaled: wr.signaled, hold: g.hold.take(), confirm: None };
        parts.send.post_send_sgl(qp, rec, wr, g.list())
    }

    #[inline]
    fn recv(self, m: Meta, sge: Option<Sge>) -> Result<()> {
        let parts = &self.conn.parts;
        let sgl = sge.as_slice();
        if UNHELD {
            // SAFETY: `Unheld::new`'s caller keeps the receive's region.
            return unsafe { parts.recv.post_unheld(parts.recv_qp()?, m.ctx, sgl) };
        }
        parts.post_recv(m.kind, m.ctx, sgl, Some(self.hold.take().map_err(crate::inflight::unbox)?))
    }

    /// A list is tracked with its holds; under `UNHELD` it is posted as a
    /// single receive is there.
    fn recv_list(self, m: Meta, mut g: Gathered) -> Result<()> {
        if UNHELD {
            let parts = &self.conn.parts;
            // SAFETY: `Unheld::new`'s caller keeps the list's regions.
            return unsafe { parts.recv.post_unheld(parts.recv_qp()?, m.ctx, g.list()) };
        }
        let hold = g.hold.take();
        self.conn.parts.post_recv(m.kind, m.ctx, g.list(), hold)
    }

    #[inline(always)]
    fn unheld(self) -> impl Sink {
        Single::<_, true> { conn: self.conn, hold: self.hold }
    }
}

/// The sink of an awaited post ([`Conn::post_awaited`]): `inner` with the
/// op context `ctx` and a completion always; the op context the operation
/// carried is kept in `given`.
#[cfg(feature = "tokio")]
pub(super) struct Awaited<'g, S: Sink> {
    pub(super) inner: S,
    pub(super) ctx: u64,
    pub(super) given: &'g std::cell::Cell<u64>,
}

#[cfg(feature = "tokio")]
impl<S: Sink> Awaited<'_, S> {
    #[inline(always)]
    fn meta(&self, mut m: Meta) -> Meta {
        self.given.set(m.ctx);
        m.ctx = self.ctx;
        // Recorded as an awaited kind, which no post of the user's records:
        // the router takes only such completions for its futures.
        m.kind = crate::wrid::awaited(m.kind);
        m
    }
}

#[cfg(feature = "tokio")]
impl<S: Sink> Sink for Awaited<'_, S> {
    // As the sinks it wraps: inlined into the operation's encoding, so the
    // work request is built in place rather than passed by memory.
    #[inline(always)]
    fn plain(self, m: Meta, mut wr: SendWr) -> Result<()> {
        wr.signaled = true;
        let m = self.meta(m);
        self.inner.plain(m, wr)
    }

    #[inline(always)]
    fn other(self, m: Meta, mut wr: Wr) -> Result<()> {
        wr.set_signaled();
        let m = self.meta(m);
        self.inner.other(m, wr)
    }

    fn list(self, m: Meta, mut wr: SendWr, g: Gathered) -> Result<()> {
        wr.signaled = true;
        let m = self.meta(m);
        self.inner.list(m, wr, g)
    }

    fn recv(self, m: Meta, sge: Option<Sge>) -> Result<()> {
        let m = self.meta(m);
        self.inner.recv(m, sge)
    }

    fn recv_list(self, m: Meta, g: Gathered) -> Result<()> {
        let m = self.meta(m);
        self.inner.recv_list(m, g)
    }

    /// An awaited operation is held whatever it says: its future, not its
    /// caller, decides when the completion is reaped.
    #[inline(always)]
    fn unheld(self) -> impl Sink {
        self
    }
}
