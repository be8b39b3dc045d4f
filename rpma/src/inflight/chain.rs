//! A chain of send-queue operations before it is posted: the work
//! requests with their ring entries, in place ([`SendChain`]), and how it
//! is posted without a record (its unheld form); the recorded post is
//! [`SendTracker::post_chain`](super::SendTracker::post_chain).

use super::send::needs_hold;
use super::{Entry, Hold};
use crate::error::{Detail, Error, Msg, Result};
use crate::wrid::{self, CompletionOp};
use rpma_sys::chain::{ChainList, OwnIds, MAX_CHAIN};
use rpma_sys::wr::Wr;

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
    /// for them beside it cost every chain a larger stack frame: 9
    /// instructions for example 07's commit.)
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
        if matches!(&wr, Wr::Plain(p) if needs_hold(p)) && hold.is_none() {
            return Err(Error::Unknown("rpma bug: a chained local range nothing holds".into()));
        }
        let signaled = wr.signaled();
        self.ops.push(wr, Entry::plain(ctx, kind, signaled, hold)).map_err(|_| chain_is_full())?;
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

    /// Puts `wr`, whose completion reports `ctx` and `kind`, in place of
    /// operation `i`, with nothing holding its local memory (as
    /// [`push_unheld`](Self::push_unheld)): in a chain whose every
    /// operation was added so.
    ///
    /// # Safety
    /// As [`push_unheld`](Self::push_unheld).
    ///
    /// # Errors
    /// [`Error::Inval`]: there is no operation `i`, or one of the chain's
    /// operations was added by [`push`](Self::push).
    #[inline(always)]
    pub(crate) unsafe fn replace_unheld(&mut self, i: usize, wr: Wr, ctx: u64, kind: CompletionOp) -> Result<()> {
        let n = self.ops.len();
        if usize::from(self.unheld) != n || i >= n {
            return Err(not_replaced(i, n, self.unheld));
        }
        let signaled = wr.signaled();
        // Only an operation whose op context fits has an ID here (every
        // one was added unheld: its push or replace set it).
        let old_fit = self.ops.wr_id(i) != 0;
        self.ops.replace(i, wr, Entry::plain(ctx, kind, signaled, None)).map_err(|_| not_replaced(i, n, 0))?;
        let id = wrid::untracked_id(kind, ctx);
        self.ops.set_wr_id(i, id.unwrap_or(0));
        // At most MAX_CHAIN, and at least 1 when `old_fit`: no wrap.
        self.fit = self.fit.wrapping_sub(u8::from(old_fit)).wrapping_add(u8::from(id.is_some()));
        if i + 1 == n {
            self.last_signaled = signaled;
        }
        Ok(())
    }

    /// Operation `i`'s remote side, to read (its rkey, length and entry,
    /// whose kind it is) and move; `None` past the end or for a send.
    #[inline]
    pub(crate) fn remote_mut(&mut self, i: usize) -> Option<rpma_sys::chain::RemoteMut<'_, Entry>> {
        self.ops.remote_mut(i)
    }

    /// Gives operation `i`, an atomic write, the bytes `value`; false for
    /// another operation.
    #[inline]
    pub(crate) fn set_value(&mut self, i: usize, value: [u8; 8]) -> bool {
        self.ops.set_value(i, value)
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
        // SAFETY: this function's contract, passed on.
        let res = unsafe { self.post_untracked_kept(qp) };
        // No record holds anything (`push_unheld` gives none): forgotten
        // rather than dropped one by one.
        self.ops.forget_all();
        self.last_signaled = false;
        (self.unheld, self.fit) = (0, 0);
        res
    }

    /// Posts the chain as [`post_untracked`](Self::post_untracked) does,
    /// and keeps it: to be posted again, its operations replaced or not.
    ///
    /// # Safety
    /// As [`post_untracked`](Self::post_untracked), for this posting.
    ///
    /// # Errors
    /// As [`post_untracked`](Self::post_untracked).
    #[inline(always)]
    pub(crate) unsafe fn post_untracked_kept(&mut self, qp: &rpma_sys::qp::Qp) -> Result<()> {
        let n = self.ops.len();
        let native = self.ops.has_native();
        // SAFETY: every operation was added by `push_unheld` or
        // `replace_unheld` (whose callers keep its memory: this function's
        // contract), which gave it its ID (`is_untracked`: each op context
        // fit).
        let res = unsafe { qp.post_send(&mut self.ops, OwnIds) };
        res.map_err(|(k, e)| chain_failed(n, native, k, e))
    }

    /// Makes the empty `into` a copy of the chain, each operation with a
    /// copy of its entry (its hold cloned): posted, recorded, in place of
    /// a chain kept.
    #[inline]
    pub(crate) fn copy_into(&self, into: &mut SendChain) {
        self.ops.copy_into(&mut into.ops, |e| Entry::plain(e.ctx, e.kind, e.signaled, e.hold.clone()));
        (into.last_signaled, into.unheld, into.fit) = (self.last_signaled, self.unheld, self.fit);
    }
}

/// Why an operation was not replaced.
#[cold]
#[inline(never)]
fn not_replaced(i: usize, n: usize, unheld: u8) -> Error {
    if i >= n {
        return no_such_op(i, n);
    }
    Error::inval(format!(
        "chain operation {i}: only {unheld} of the chain's {n} operations were added by push_unheld; \
         replacing works on a chain whose every operation was (the others hold their regions until their completions)"
    ))
}

/// A chain of `n` has no operation `i`.
#[cold]
#[inline(never)]
pub(crate) fn no_such_op(i: usize, n: usize) -> Error {
    let text = format!("chain operation {i}: the chain holds {n} operations (0..{n})");
    let what = "chain operation".to_string();
    Error::Inval(Msg::detailed(Detail::OutOfRange { what, offset: i as u64, len: 1, size: n as u64 }, text))
}

/// A full chain's error.
#[cold]
#[inline(never)]
pub(crate) fn chain_is_full() -> Error {
    Error::too_long(
        "chain",
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
