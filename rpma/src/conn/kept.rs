//! A kept chain: a [`Chain`] posted again by [`Chain::post_keep`], its
//! operations changed in place between posts (moved within their remote
//! regions, an atomic write's value, an operation replaced).

use super::chain::At;
use super::Chain;
use crate::error::{Error, Result};
use crate::inflight::no_such_op;
use crate::mr::MrRemote;
use crate::ops::Operation;

impl Chain<'_> {
    /// Checks `op` (as [`push_unheld`](Chain::push_unheld) does) and puts
    /// it in place of operation `i` (counted from 0 in the order they were
    /// added), without holding its local region: a chain kept by
    /// [`post_keep`](Chain::post_keep) and posted again with some of its
    /// operations changed, the others as they were. Only in a chain whose
    /// every operation was added by [`push_unheld`](Chain::push_unheld).
    /// An operation of the same
    /// kind as the one it replaces (the same verb) is written over it,
    /// another is encoded afresh; either costs about what a push does (the
    /// operation described, checked and encoded): to move an operation
    /// within its remote region, [`set_remote`](Chain::set_remote) costs
    /// less.
    ///
    /// ```
    /// use rpma::ops::{AtomicWrite, Flush, Write};
    /// use rpma::{Flags, FlushType::Visibility};
    /// # #[allow(dead_code)]
    /// // librpma example 07's commit, kept: the record at `at`, its flush,
    /// // the pointer (at 0) to it and the pointer's flush, one doorbell.
    /// fn append(
    ///     conn: &rpma::Conn,
    ///     log: &rpma::MrRemote,
    ///     src: &rpma::MrLocal<rpma::AlignedBuf>,
    ///     records: &[u64],
    /// ) -> rpma::Result<()> {
    ///     let quiet = Flags::COMPLETION_ON_ERROR;
    ///     let mut chain = conn.chain();
    ///     for (n, &at) in records.iter().enumerate() {
    ///         let ops = (
    ///             Write::new(log, at, src, 0, 8).flags(quiet),
    ///             Flush::new(log, at, 8, Visibility).flags(quiet),
    ///             AtomicWrite::new(log, 0, at.to_le_bytes()).flags(quiet),
    ///         );
    ///         // SAFETY: `src` is neither dropped nor written until the
    ///         // commit's completion is reaped below.
    ///         unsafe {
    ///             if n == 0 {
    ///                 chain.push_unheld(ops.0)?.push_unheld(ops.1)?.push_unheld(ops.2)?;
    ///                 chain.push_unheld(Flush::new(log, 0, 8, Visibility).op_context(7))?;
    ///             } else {
    ///                 chain.replace_unheld(0, ops.0)?.replace_unheld(1, ops.1)?.replace_unheld(2, ops.2)?;
    ///             }
    ///             chain.post_keep()?;
    ///         }
    ///         let wc = conn.cq().next_completion(std::time::Duration::from_secs(1))?;
    ///         assert_eq!(wc.op_context, 7);
    ///     }
    ///     Ok(())
    /// }
    /// ```
    ///
    /// # Safety
    /// As [`push_unheld`](Chain::push_unheld), for each posting of the
    /// chain from now on.
    ///
    /// # Errors
    /// As [`push_unheld`](Chain::push_unheld) (the chain unchanged);
    /// [`Error::Inval`] when there is no operation `i`
    /// ([`Detail::OutOfRange`](crate::error::Detail::OutOfRange)) or one of the
    /// chain's operations was added by [`push`](Chain::push).
    #[inline(always)]
    pub unsafe fn replace_unheld<O: Operation>(&mut self, i: usize, op: O) -> Result<&mut Self> {
        self.put_unheld(op, At(i))?;
        Ok(self)
    }

    /// Moves operation `i`'s remote range to `offset` of `remote`, the
    /// region (or window) it names, its length as it was: with the checks
    /// its push made of the remote side (the range, an atomic's alignment)
    /// and nothing else of it changed. The way to post a kept chain again
    /// at another place ([`post_keep`](Chain::post_keep)) at a few
    /// instructions a change: for an RDMA write or read the range is its
    /// length at the new offset, for an atomic its 8 bytes, for a flush
    /// the bytes its request touches (its length natively, the 8 bytes it
    /// reads as APM).
    ///
    /// ```
    /// use rpma::ops::{AtomicWrite, Flush, Write};
    /// use rpma::{Flags, FlushType::Visibility};
    /// # #[allow(dead_code)]
    /// // librpma example 07's commit, kept: 8 bytes appended at `at`, its
    /// // flush, the pointer (at 0) set to `at` and the pointer's flush.
    /// fn append(
    ///     conn: &rpma::Conn,
    ///     log: &rpma::MrRemote,
    ///     src: &rpma::MrLocal<rpma::AlignedBuf>,
    ///     records: std::ops::Range<u64>,
    /// ) -> rpma::Result<()> {
    ///     let quiet = Flags::COMPLETION_ON_ERROR;
    ///     let mut chain = conn.chain();
    ///     chain
    ///         .push(Write::new(log, 8, src, 0, 8).flags(quiet))?
    ///         .push(Flush::new(log, 8, 8, Visibility).flags(quiet))?
    ///         .push(AtomicWrite::new(log, 0, [0; 8]).flags(quiet))?
    ///         .push(Flush::new(log, 0, 8, Visibility).op_context(7))?;
    ///     for n in records {
    ///         let at = 8 * (n + 1);
    ///         chain.set_remote(0, log, at)?.set_remote(1, log, at)?.set_atomic_value(2, at.to_le_bytes())?;
    ///         // SAFETY: every operation was added by `push` (nothing to keep).
    ///         unsafe { chain.post_keep()? };
    ///         let wc = conn.cq().next_completion(std::time::Duration::from_secs(1))?;
    ///         assert_eq!(wc.op_context, 7);
    ///     }
    ///     Ok(())
    /// }
    /// ```
    ///
    /// # Errors
    /// [`Error::Inval`]: there is no operation `i`
    /// ([`Detail::OutOfRange`](crate::error::Detail::OutOfRange)); it is a
    /// send (no remote side); `remote` is not the region it names (another
    /// rkey, [`Detail::Foreign`](crate::error::Detail::Foreign)); the range
    /// leaves the region ([`Detail::OutOfRange`](crate::error::Detail::OutOfRange));
    /// a misaligned atomic ([`Detail::Misaligned`](crate::error::Detail::Misaligned)).
    /// The chain is unchanged then.
    #[inline(always)]
    pub fn set_remote(&mut self, i: usize, remote: &MrRemote, offset: u64) -> Result<&mut Self> {
        let n = self.ops.len();
        let Some(r) = self.ops.remote_mut(i) else {
            return Err(not_that_op(i, n, "set_remote", "is a send: it has no remote range"));
        };
        if r.rkey != remote.rkey() {
            return Err(other_region(i));
        }
        let addr = crate::ops::moved_remote(r.rec.kind, remote, offset, r.len)?;
        r.set(addr);
        Ok(self)
    }

    /// Gives operation `i`, an [`AtomicWrite`](crate::ops::AtomicWrite),
    /// the bytes `value` (copied when the chain is posted): the pointer of
    /// a kept commit ([`set_remote`](Chain::set_remote) has an example).
    ///
    /// # Errors
    /// [`Error::Inval`]: there is no operation `i`, or it is not an atomic
    /// write (the chain is unchanged then).
    #[inline(always)]
    pub fn set_atomic_value(&mut self, i: usize, value: [u8; 8]) -> Result<&mut Self> {
        if !self.ops.set_value(i, value) {
            return Err(not_that_op(i, self.ops.len(), "set_atomic_value", "is not an atomic write"));
        }
        Ok(self)
    }

    /// Posts the operations as [`post`](Chain::post) does, and keeps them:
    /// the chain can be posted again as it is, with operations moved
    /// ([`set_remote`](Chain::set_remote)), given a new value
    /// ([`set_atomic_value`](Chain::set_atomic_value)) or replaced
    /// ([`replace_unheld`](Chain::replace_unheld)). A chain of unheld
    /// operations only is posted without a record, as by `post`, and costs
    /// less than filling it again; another is posted through a copy of its
    /// records (each [`push`](Chain::push)ed operation's region then held
    /// for this posting too), which costs more. Each posting completes as
    /// a chain posted by `post` does; posting again before the earlier
    /// posting's completions are reaped needs room in the send queue for
    /// both.
    ///
    /// See [`set_remote`](Chain::set_remote) and
    /// [`replace_unheld`](Chain::replace_unheld) for examples.
    ///
    /// # Safety
    /// As [`push_unheld`](Chain::push_unheld) for this posting, for each
    /// operation added or put in place by an `unsafe` method: its local
    /// region must not be dropped, deregistered or accessed (written, for a
    /// source) until this posting's operation, or a later signaled
    /// operation on this connection, has completed and been reaped, or the
    /// connection is dropped.
    ///
    /// # Errors
    /// As [`post`](Chain::post); the chain stays as it was whatever the
    /// outcome.
    pub unsafe fn post_keep(&mut self) -> Result<()> {
        // SAFETY: this function's contract, passed on.
        unsafe { self.post_as::<true>() }
    }
}

/// Why `call` refused operation `i` of a chain of `n`: there is none, or
/// it `is` not of the kind `call` changes.
#[cold]
#[inline(never)]
fn not_that_op(i: usize, n: usize, call: &str, is: &str) -> Error {
    if i >= n {
        return no_such_op(i, n);
    }
    Error::inval(format!("{call}: chain operation {i} {is}"))
}

/// `set_remote` with a region other than the one the operation names.
#[cold]
#[inline(never)]
fn other_region(i: usize) -> Error {
    Error::foreign(
        "set_remote: remote",
        format!(
            "set_remote: chain operation {i} names another remote region (rkey): an operation moves within its \
             region; replace it to change the region"
        ),
    )
}
