//! Chained posting: several operations of [`crate::ops`] checked one by
//! one as they are pushed, then posted with one call (one doorbell) and
//! recorded under one lock.

use super::Conn;
use crate::error::Result as R;
use crate::error::{Error, Result};
use crate::inflight::Take;
use crate::inflight::{chain_is_full, SendChain};
#[allow(unused_imports)] // the sealed traits' methods
use crate::ops::sealed::{Encode, Hold_};
#[cfg(doc)]
use crate::ops::Flags;
use crate::ops::{Gathered, HoldBy, HoldOf, Meta, Operation, Sink};
use rpma_sys::chain::MAX_CHAIN;
use rpma_sys::wr::SendWr;
use rpma_sys::wr::Wr;
use std::sync::atomic::Ordering::Relaxed;

/// Most operations in one [`Chain`].
pub const CHAIN_MAX: usize = MAX_CHAIN;

/// Operations to post on one connection with one call (one
/// `ibv_post_send`, one doorbell), from [`Conn::chain`].
///
/// [`push`](Chain::push) takes an operation of [`crate::ops`] and runs
/// its checks at once (those of [`Conn::post`]): an operation that fails
/// them is not added, and `push` returns the error. [`post`](Chain::post) posts the
/// operations in the order they were added, with each one's semantics
/// (librpma's): its own completion flags (so only the last one may be
/// signaled), [`Flags::FENCE`], the native or emulated atomic write and
/// flush, its `op_context` in its completion. Each local region is held
/// from the moment its operation is added until the operation completes
/// (or the chain is dropped unposted); the bytes of an atomic write are
/// kept in the chain until it is posted.
///
/// Dropping a chain without posting it posts nothing (and releases the
/// regions its operations held). A chain borrows its connection, which
/// cannot go while the chain holds operations for it:
///
/// ```compile_fail,E0505
/// # fn f(conn: rpma::Conn, remote: &rpma::MrRemote, src: &rpma::MrLocal<rpma::AlignedBuf>) -> rpma::Result<()> {
/// let mut chain = conn.chain();
/// chain.push(rpma::ops::Write::new(remote, 0, src, 0, 8))?;
/// drop(conn); // the chain still borrows it
/// chain.post()?;
/// # Ok(()) }
/// ```
///
/// See [`Conn::chain`] for an example.
#[must_use = "a chain posts nothing until Chain::post"]
pub struct Chain<'c> {
    pub(super) conn: &'c Conn,
    /// The work requests, in posting order, each with what its completion
    /// reports and keeps alive: in the chain itself (no allocation).
    pub(super) ops: SendChain,
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
    /// about 4 KiB: filling and posting it allocates nothing, and each
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
    ///     use rpma::ops::{AtomicWrite, Flush, Write};
    ///     use rpma::{Flags, FlushType::Visibility};
    ///     let quiet = Flags::COMPLETION_ON_ERROR;
    ///     let mut chain = conn.chain();
    ///     chain
    ///         .push(Write::new(log, 0, src, 0, 8).flags(quiet).op_context(1))?
    ///         .push(Flush::new(log, 0, 8, Visibility).flags(quiet).op_context(2))?
    ///         .push(AtomicWrite::new(log, ptr_offset, 8u64.to_le_bytes()).flags(quiet).op_context(3))?
    ///         .push(Flush::new(log, ptr_offset, 8, Visibility).op_context(4))?;
    ///     chain.post()?;
    ///     let wc = conn.cq().next_completion(std::time::Duration::from_secs(1))?;
    ///     assert_eq!(wc.op_context, 4);
    ///     Ok(())
    /// }
    /// ```
    pub fn chain(&self) -> Chain<'_> {
        let native = self.parts.native;
        Chain { conn: self, ops: SendChain::new(native.flush || native.atomic_write) }
    }
}

impl<'c> Chain<'c> {
    /// Checks `op` (as [`Conn::post`] does) and appends it; its local
    /// region is held from now until the operation completes, or the chain
    /// is dropped unposted. A chain holding a native atomic write or flush
    /// carries only RDMA writes and reads beside them
    /// ([`Error::NoSupp`] from [`post`](Chain::post) otherwise).
    ///
    /// # Errors
    /// The operation's checks, as [`Conn::post`]; [`Error::Inval`] when the
    /// chain already holds [`CHAIN_MAX`] operations.
    #[inline(always)]
    pub fn push<O: Operation>(&mut self, op: O) -> Result<&mut Self> {
        if self.ops.is_full() {
            return Err(chain_is_full());
        }
        let conn = self.conn;
        let t = conn.target();
        op.encode(&t, Push::<_, false> { ops: &mut self.ops, conn, hold: HoldOf(&op, &t) })?;
        Ok(self)
    }

    /// Appends `op` as the chain's last operation, awaited: signaled, with
    /// the op context `ctx` (as [`Conn::post_awaited`]); returns the op
    /// context it carried.
    #[cfg(feature = "tokio")]
    pub(crate) fn push_awaited<O: Operation>(&mut self, op: O, ctx: u64) -> Result<u64> {
        if self.ops.is_full() {
            return Err(chain_is_full());
        }
        let conn = self.conn;
        let t = conn.target();
        let given = std::cell::Cell::new(0);
        let push = Push::<_, false> { ops: &mut self.ops, conn, hold: HoldOf(&op, &t) };
        op.encode(&t, super::post::Awaited { inner: push, ctx, given: &given })?;
        Ok(given.get())
    }

    /// Whether the chain posts on `conn`.
    #[cfg(feature = "tokio")]
    pub(crate) fn is_on(&self, conn: &Conn) -> bool {
        std::ptr::eq(self.conn, conn)
    }

    /// Empties the chain (its operations are not posted).
    #[cfg(feature = "tokio")]
    pub(crate) fn clear(&mut self) {
        self.ops.clear();
    }

    /// Operations added so far.
    pub fn len(&self) -> usize {
        self.ops.len()
    }

    /// Whether no operation was added.
    pub fn is_empty(&self) -> bool {
        self.ops.len() == 0
    }

    /// Posts the operations in the order they were added, with one call:
    /// one `ibv_post_send` of a linked list, or, when the chain holds a
    /// native atomic write or flush, one `ibv_wr_start` ...
    /// `ibv_wr_complete` sequence. They take consecutive send-queue slots;
    /// a chain whose last operation is unsignaled needs one more free slot
    /// (kept for a signaled operation, as for single operations). A chain
    /// of [`Unheld`](crate::ops::Unheld) operations only is posted without
    /// a record.
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
        let parts = &self.conn.parts;
        let qp = parts.qp()?;
        if self.ops.has_native() {
            check_carried(qp, &self.ops)?;
        }
        if self.ops.has_unheld() {
            if self.ops.is_untracked() && !parts.unheld_recorded.load(Relaxed) {
                // SAFETY: every operation was an `Unheld` one, whose
                // creators keep its memory.
                return unsafe { self.ops.post_untracked(qp) };
            }
            // Recorded: so must the connection's later unheld posts be
            // (their completions could not retire this chain's entries).
            parts.unheld_recorded.store(true, Relaxed);
        }
        // Refuses an empty chain (Error::Inval).
        parts.send.post_chain(qp, &mut self.ops)
    }
}

/// Whether the QP's extended interface carries every operation of a chain
/// holding a native one.
#[inline(never)]
fn check_carried(qp: &rpma_sys::qp::Qp, ops: &SendChain) -> Result<()> {
    let ex = qp.ex().ok_or_else(|| Error::Unknown("a native operation without extended interface".into()))?;
    match ops.first_not_carried(&ex) {
        Some(i) => Err(not_carried(i)),
        None => Ok(()),
    }
}

#[cold]
#[inline(never)]
fn not_carried(i: usize) -> Error {
    let detail = crate::error::Detail::NotInChain { index: i as u64 };
    Error::NoSupp(crate::error::Msg::detailed(
        detail,
        format!(
        "chain operation {i}: the chain holds a native atomic write or flush, so it is posted through ibv_wr_*, and \
         this connection's QP carries only RDMA write and read there besides them (no sends, writes with \
         immediate data, compare-and-swap or fetch-and-add): post operation {i} on its own"
    ),
    ))
}

/// The sink of [`Chain::push`]: the request appended with what holds it;
/// `UNHELD` (an [`Unheld`](crate::ops::Unheld) operation): with nothing
/// holding it.
struct Push<'a, 'c, H: Take, const UNHELD: bool> {
    ops: &'a mut SendChain,
    conn: &'c Conn,
    hold: H,
}

impl<H: Take, const UNHELD: bool> Push<'_, '_, H, UNHELD> {
    #[inline(always)]
    fn push(self, m: Meta, wr: Wr) -> R<()> {
        if UNHELD {
            return match m.hold {
                // SAFETY: the callers of `Unheld::new` keep the
                // operation's region (`HoldBy::Op`); the flush region is
                // the connection's own and outlives its QP; `Nothing` names
                // no local memory.
                HoldBy::Op | HoldBy::FlushRegion | HoldBy::Nothing => unsafe {
                    self.ops.push_unheld(wr, m.ctx, m.kind)
                },
                HoldBy::LentBytes | HoldBy::List => Err(not_chained(m.hold)),
            };
        }
        let hold = match m.hold {
            HoldBy::Op => Some(self.hold.take().map_err(crate::inflight::unbox)?),
            HoldBy::FlushRegion => Some(self.conn.parts.flush_mr.keep().map_err(crate::inflight::unbox)?),
            HoldBy::Nothing => None,
            HoldBy::LentBytes | HoldBy::List => return Err(not_chained(m.hold)),
        };
        self.ops.push(wr, m.ctx, m.kind, hold)
    }
}

impl<H: Take, const UNHELD: bool> Sink for Push<'_, '_, H, UNHELD> {
    #[inline(always)]
    fn plain(self, m: Meta, wr: SendWr) -> R<()> {
        self.push(m, Wr::Plain(wr))
    }

    #[inline(always)]
    fn other(self, m: Meta, wr: Wr) -> R<()> {
        self.push(m, wr)
    }

    fn list(self, _: Meta, _: SendWr, _: Gathered) -> R<()> {
        Err(not_chained(HoldBy::List))
    }

    fn recv(self, _: Meta, _: Option<rpma_sys::wr::Sge>) -> R<()> {
        Err(not_a_send())
    }

    fn recv_list(self, _: Meta, _: Gathered) -> R<()> {
        Err(not_a_send())
    }

    #[inline(always)]
    fn unheld(self) -> impl Sink {
        Push::<_, true> { ops: self.ops, conn: self.conn, hold: self.hold }
    }
}

#[cold]
#[inline(never)]
fn not_a_send() -> Error {
    Error::unsupported("a chain posts to the send queue: post a receive with Conn::post")
}

/// Why a chain refuses an operation.
#[cold]
#[inline(never)]
fn not_chained(by: HoldBy) -> Error {
    Error::unsupported(if by == HoldBy::List {
        "a chain carries one local range per operation: post a scatter/gather operation on its own"
    } else {
        "a chain posts later than it is filled, and inline bytes are lent for one call: post an inline \
         operation on its own"
    })
}
