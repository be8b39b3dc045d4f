//! A chain of send-queue operations before it is posted: the work
//! requests with their ring entries, in place ([`SendChain`]), and how it
//! is posted without a record (its unheld form); the recorded post is
//! [`SendTracker::post_chain`](super::SendTracker::post_chain).

use super::{Entry, Hold};
use crate::error::{Error, Result};
use crate::wrid::{self, CompletionOp};
use rpma_sys::chain::{ChainList, OwnIds, MAX_CHAIN};
use rpma_sys::wr::{SendWr, Wr};

/// The operations of a chain before it is posted, each work request with
/// its ring entry (context, kind, signaled, hold), in place (at most
/// [`MAX_CHAIN`]). [`push`](Self::push) and the `unsafe`
/// [`push_unheld`](Self::push_unheld) are the only ways in; `push` refuses
/// an operation whose local memory nothing holds, so
/// [`SendTracker::post_chain`] may hand all of them to the device (the
/// unheld ones' memory is their caller's to keep).
pub(crate) struct SendChain {
    pub(super) ops: ChainList<Entry>,
    /// Whether the last operation is signaled.
    pub(super) last_signaled: bool,
    /// Operations pushed unheld, and of those the ones whose op context
    /// fits the work request ID: when that is every operation,
    /// [`post_untracked`](Self::post_untracked) may post them without a
    /// record. (Counted by `push_unheld` alone, so the held `push` writes
    /// nothing more; the IDs go into the list's own requests, since room
    /// for them beside it would give every chain a larger stack frame.)
    pub(super) unheld: u8,
    pub(super) fit: u8,
}

impl SendChain {
    /// An empty chain; `native`: for a QP that may post native operations
    /// (its list keeps every request's `Wr` for the extended interface).
    #[inline]
    pub(crate) const fn new(native: bool) -> SendChain {
        let ops = if native { ChainList::keeping_all() } else { ChainList::new() };
        SendChain { ops, last_signaled: false, unheld: 0, fit: 0 }
    }

    /// Operations in the chain.
    #[inline]
    pub(crate) fn len(&self) -> usize {
        self.ops.len()
    }

    /// The index of the first operation the extended interface `ex` does
    /// not carry, if any.
    #[inline]
    pub(crate) fn first_not_carried(&self, ex: &rpma_sys::qp::QpEx<'_>) -> Option<usize> {
        self.ops.first_not_carried(ex)
    }

    /// Whether one of the operations is native (posted through `ibv_wr_*`).
    #[inline]
    pub(crate) fn has_native(&self) -> bool {
        self.ops.has_native()
    }

    /// Empties the chain, releasing what its operations held.
    #[cfg(feature = "tokio")]
    pub(crate) fn clear(&mut self) {
        self.ops.clear();
        self.last_signaled = false;
        (self.unheld, self.fit) = (0, 0);
    }

    /// Whether no more operation fits.
    #[inline]
    pub(crate) fn is_full(&self) -> bool {
        self.ops.is_full()
    }

    /// Appends `wr`, whose completion reports `ctx` and `kind`, and `hold`,
    /// which keeps its local memory alive until it completes.
    ///
    /// # Errors
    /// [`Error::Inval`] when the chain is full; [`Error::Unknown`] (a bug in
    /// rpma) for a non-inline local range `hold` does not hold.
    #[inline(always)]
    pub(crate) fn push(&mut self, wr: Wr, ctx: u64, kind: CompletionOp, hold: Option<Hold>) -> Result<()> {
        let range = match hold {
            Some(Hold::Range(range)) => Some(range),
            None => None,
            // Lists (the only operations that keep more) are not chained.
            Some(Hold::Keep(_)) => return Err(Error::Unknown("rpma bug: a chained operation keeps a list".into())),
        };
        if matches!(&wr, Wr::Plain(p) if needs_hold(p)) && range.is_none() {
            return Err(Error::Unknown("rpma bug: a chained local range nothing holds".into()));
        }
        let signaled = wr.signaled();
        self.ops.push(wr, Entry::plain(ctx, kind, signaled, range)).map_err(|_| chain_is_full())?;
        self.last_signaled = signaled;
        Ok(())
    }

    /// Appends `wr` with nothing holding its local memory: posted without
    /// a record while every operation of the chain is such and carries an
    /// op context of at most 56 bits (the kind and `ctx` in its work
    /// request ID, as a single unheld post), else recorded like the
    /// others (with no hold).
    ///
    /// # Safety
    /// The local memory `wr` names must stay registered, allocated and
    /// untouched until the operation (or a later signaled one) completes,
    /// or the QP is destroyed.
    ///
    /// # Errors
    /// [`Error::Inval`] when the chain is full.
    #[inline(always)]
    pub(crate) unsafe fn push_unheld(&mut self, wr: Wr, ctx: u64, kind: CompletionOp) -> Result<()> {
        let i = self.ops.len();
        let signaled = wr.signaled();
        self.ops.push(wr, Entry::plain(ctx, kind, signaled, None)).map_err(|_| chain_is_full())?;
        self.last_signaled = signaled;
        self.unheld += 1;
        if let Some(id) = wrid::untracked_id(kind, ctx) {
            self.ops.set_wr_id(i, id);
            self.fit += 1;
        }
        Ok(())
    }

    /// Whether an operation was added by [`push_unheld`](Self::push_unheld).
    #[inline]
    pub(crate) fn has_unheld(&self) -> bool {
        self.unheld != 0
    }

    /// Whether the chain can be posted by
    /// [`post_untracked`](Self::post_untracked): not empty, every
    /// operation unheld with a narrow op context.
    #[inline(always)]
    pub(crate) fn is_untracked(&self) -> bool {
        usize::from(self.fit) == self.ops.len() && self.fit != 0
    }

    /// Posts the chain with one call, recording nothing: each operation's
    /// kind and op context travel in its work request ID. The send queue's
    /// room is not checked here (as for a single unheld post): a full
    /// queue is the provider's refusal. Afterwards the chain is empty;
    /// what the provider refused (and the rest after it) is dropped.
    ///
    /// # Safety
    /// The local memory of every operation must stay as
    /// [`push_unheld`](Self::push_unheld) requires; the chain
    /// [`is_untracked`](Self::is_untracked).
    ///
    /// # Errors
    /// [`Error::Provider`] naming the refused operation, as
    /// [`SendTracker::post_chain`].
    #[inline]
    pub(crate) unsafe fn post_untracked(&mut self, qp: &rpma_sys::qp::Qp) -> Result<()> {
        let n = self.ops.len();
        let native = self.ops.has_native();
        // SAFETY: every operation was added by `push_unheld` (whose callers
        // keep its memory: this function's contract), which gave it its ID
        // (`is_untracked`: each op context fit).
        let res = unsafe { qp.post_send(&mut self.ops, OwnIds) }.map_err(|(k, e)| chain_failed(n, native, k, e));
        // No record holds anything (`push_unheld` gives none): forgotten
        // rather than dropped one by one.
        self.ops.forget_all();
        self.last_signaled = false;
        (self.unheld, self.fit) = (0, 0);
        res
    }
}

/// A full chain's error.
#[cold]
#[inline(never)]
pub(crate) fn chain_is_full() -> Error {
    Error::too_long(
        crate::error::Arg::Chain,
        MAX_CHAIN as u64 + 1,
        MAX_CHAIN as u64,
        format!("a chain holds at most {MAX_CHAIN} operations"),
    )
}

/// The error of a chain of `n` whose post failed at operation `k`.
#[cold]
#[inline(never)]
pub(super) fn chain_failed(n: usize, native: bool, k: usize, e: std::io::Error) -> Error {
    let op = match (n, native) {
        (1, false) => "ibv_post_send".to_string(),
        (1, true) => "ibv_wr_complete".to_string(),
        (_, false) => format!(
            "ibv_post_send of a chain of {n}: operation {k} refused, operations 0..{k} posted (their \
             completions follow), {k}..{n} not posted"
        ),
        (_, true) => format!("ibv_wr_complete of a chain of {n}: nothing posted"),
    };
    Error::provider_raw(op, e)
}

/// Whether `wr` names local memory the device reaches after the post (not
/// inline): a tracked post of it, alone or in a chain, needs a hold on
/// that memory.
#[inline(always)]
pub(super) fn needs_hold(wr: &SendWr) -> bool {
    wr.sge.is_some() && !wr.inline
}
