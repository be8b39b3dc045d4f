//! [`Unheld`]: an operation under librpma's memory contract, the one
//! `unsafe` way to post.

use super::sealed::{Encode, Hold_, Receive};
use super::{Operation, RecvOperation, Sink, Target};
use crate::error::Result;
use crate::inflight::{Hold, Holding};
use crate::peer::Peer;

/// An operation whose local regions the caller keeps alive until its
/// completion, as in librpma, instead of the library holding them: posted
/// with [`Conn::post`](crate::Conn::post), [`Chain::push`](crate::Chain::push)
/// or [`Srq::post`](crate::Srq::post) like any other operation. For code
/// that already keeps its buffers for as long as the device uses them (a
/// ring of buffers, a C caller of rpma's `librpma.so.0`, which posts this
/// way) and so need not pay for a hold per operation; otherwise post the
/// operation itself.
///
/// The checks are those of the operation. An op context of at most 56
/// bits travels in the work request ID and nothing is recorded: the
/// operation is not counted in [`Conn::pending_sends`](crate::Conn::pending_sends)
/// and a full queue is the provider's `ENOMEM` ([`Error::Provider`](crate::Error::Provider))
/// rather than [`Error::Again`](crate::Error::Again). A wider op context is
/// recorded (the region still not held), and so are the connection's later
/// unheld posts. Sends of a list of regions ([`WriteSg`](super::WriteSg),
/// ...) are held whatever the wrapper says, as are operations awaited on an
/// `rpma::aio::AsyncConn`. A chain takes unheld and held
/// operations alike; one with a held operation or a wide op context is
/// recorded as a whole.
///
/// ```
/// use rpma::ops::{Read, Unheld};
/// # #[allow(dead_code)]
/// fn fetch(conn: &rpma::Conn, dst: &rpma::MrLocal<rpma::AlignedBuf>, src: &rpma::MrRemote) -> rpma::Result<()> {
///     // SAFETY: `dst` is neither dropped nor touched until the completion is reaped below.
///     conn.post(unsafe { Unheld::new(Read::new(dst, 0, src, 0, 8).op_context(7)) })?;
///     let wc = conn.cq().next_completion(std::time::Duration::from_secs(1))?;
///     assert_eq!(wc.op_context, 7);
///     Ok(())
/// }
/// ```
///
/// Building one is the `unsafe` step; posting it is not:
///
/// ```compile_fail,E0133
/// # fn f(conn: &rpma::Conn, dst: &rpma::MrLocal<rpma::AlignedBuf>, src: &rpma::MrRemote) -> rpma::Result<()> {
/// conn.post(rpma::ops::Unheld::new(rpma::ops::Read::new(dst, 0, src, 0, 8)))?; // needs `unsafe`
/// # Ok(()) }
/// ```
#[must_use = "an operation does nothing until it is posted"]
#[derive(Debug)]
pub struct Unheld<O>(O);

impl<O: Operation> Unheld<O> {
    /// Marks `op` as kept alive by the caller.
    ///
    /// # Safety
    /// For each post of the value returned, the operation's local regions
    /// (their registrations and memory) must not be dropped or
    /// deregistered, nor accessed (a read's, an atomic's or a receive's
    /// destination) or written (a write's or a send's source), until that
    /// operation's completion, or that of a later signaled operation on
    /// the same connection, has been reaped, or the connection (the SRQ,
    /// for a receive posted there) is dropped. A chain dropped unposted
    /// ends this at once.
    #[inline(always)]
    pub unsafe fn new(op: O) -> Unheld<O> {
        Unheld(op)
    }
}

impl<O: Operation> Encode for Unheld<O> {
    #[inline(always)]
    fn encode<S: Sink>(&self, t: &Target<'_>, sink: S) -> Result<()> {
        self.0.encode(t, sink.unheld())
    }
}

impl<O: Operation> Hold_ for Unheld<O> {
    #[inline(always)]
    fn hold(&self, t: &Target<'_>) -> Holding {
        self.0.hold(t)
    }
}

impl<O: RecvOperation> Receive for Unheld<O> {
    const UNHELD: bool = true;

    #[inline(always)]
    fn post_checked(
        &self,
        peer: &Peer,
        max_sge: (u32, &str),
        post: impl FnOnce(u64, &[rpma_sys::wr::Sge], Option<Hold>) -> Result<()>,
    ) -> Result<()> {
        self.0.post_checked(peer, max_sge, |ctx, sgl, _| post(ctx, sgl, None))
    }
}

impl<O: Operation> Operation for Unheld<O> {}
impl<O: RecvOperation> RecvOperation for Unheld<O> {}
