//! Book-keeping of posted operations: what each one keeps alive and which
//! user context its completion returns.
//!
//! Every posted work request gets an entry holding the range of the local
//! region it uses ([`Hold`], counted in the region's [`book`]), so the
//! registration and its memory outlive the operation even if the user
//! drops the [`MrLocal`](crate::MrLocal), and the CPU's conflicting uses
//! of the range are refused. A send queue completes in order: a completion for
//! entry `s` retires every entry posted before it, including unsignaled
//! ones. Receives are retired one by one. Entries still pending when the
//! QP (or SRQ) is destroyed are released after that, when the device can
//! no longer touch the memory.

use crate::error::Error;
use crate::wrid::CompletionOp;
use book::RangeHold;
use std::sync::{Arc, Mutex, MutexGuard};

pub(crate) mod book;
mod chain;
pub(crate) mod lock;
mod recv;
mod send;
pub(crate) mod untracked;
pub(crate) use chain::{chain_is_full, SendChain};
pub(crate) use recv::RecvTracker;
pub(crate) use send::SendTracker;

/// Anything kept alive by a reference.
pub(crate) trait Held: Send + Sync {}
impl<T: Send + Sync + ?Sized> Held for T {}

/// What an operation in flight keeps: a range of a region, in use as the
/// operation uses it (which keeps the region alive: [`book`]), or anything
/// else by a reference count (a list's holds, the connection's own
/// region). A leaked hold keeps its range in use for ever, refusing the
/// CPU's conflicting accesses, never allowing one.
#[allow(dead_code)] // each kept for its drop
pub(crate) enum Hold {
    Range(RangeHold),
    /// Boxed: the hold stays two words, so a [`Holding`] is returned in
    /// registers on the posting path.
    Keep(Box<Arc<dyn Held>>),
}

impl Hold {
    /// A hold on `keep` alone.
    pub(crate) fn keep(keep: Arc<dyn Held>) -> Hold {
        Hold::Keep(Box::new(keep))
    }
}

/// A hold, or why it was refused (boxed: see [`Hold::Keep`]).
pub(crate) type Holding = std::result::Result<Hold, Box<Error>>;

/// The error of a refused [`Holding`].
#[cold]
#[allow(clippy::boxed_local)] // the map_err of a Holding
pub(crate) fn unbox(e: Box<Error>) -> Error {
    *e
}

/// Takes an operation's hold, when its post needs one (before the post):
/// what the posting functions are given instead of the hold itself, so
/// that an operation whose post needs none takes none. Inlined into the
/// post (a closure's call is not), so the hold comes back in registers.
pub(crate) trait Take {
    fn take(self) -> Holding;
}

impl Take for fn() -> Holding {
    #[inline(always)]
    fn take(self) -> Holding {
        self()
    }
}

/// No hold to take (an untracked or inline post), as the `hold` argument
/// of the posting functions that take the hold late.
pub(crate) const NO_HOLD: Option<fn() -> Holding> = None;

/// Told the outcome of the operation whose entry carries it, once its own
/// completion is translated (a memory window's invalidation).
pub(crate) trait Confirm: Send + Sync {
    fn completed(&self, success: bool);
}

// `repr(C)`: the context and kind first, in the order of a `Completion`'s
// `op_context` and `op`, so a retire copies them as one 16-byte block.
// Five plain words (no enum but the kind, whose tag marks an empty slot):
// an entry is written and read word by word.
#[repr(C)]
pub(crate) struct Entry {
    pub(crate) ctx: u64,
    pub(crate) kind: CompletionOp,
    /// The range the operation holds (what most operations keep); anything
    /// else it keeps is beside the ring ([`Side`]).
    range: Option<RangeHold>,
    flags: u64,
}

/// The device reports this operation's own completion.
const SIGNALED: u64 = 1;
/// A later completion showed the device is done with it; its own
/// completion has been polled but not translated yet (another thread).
const DONE: u64 = 2;
/// The send tracker keeps a [`Side`] for it.
const SIDE: u64 = 4;

/// What a send-queue operation keeps beside the ring, by sequence number
/// (rare, so ordinary entries stay small): a memory window's [`Confirm`],
/// a hold other than a range (a list's holds, a bind's region).
pub(crate) struct Side {
    pub(crate) confirm: Option<Arc<dyn Confirm>>,
    pub(crate) keep: Option<Hold>,
}

impl Entry {
    /// The entry of a posted send-queue operation, and what it keeps
    /// beside the ring.
    #[inline(always)]
    pub(crate) fn send(op: SendOpRec) -> (Entry, Option<Side>) {
        let has_side = op.has_side();
        let (range, keep) = match op.hold {
            Some(Hold::Range(range)) => (Some(range), None),
            keep => (None, keep),
        };
        let side = has_side.then(|| Side { confirm: op.confirm, keep });
        let flags = u64::from(op.signaled) | if has_side { SIDE } else { 0 };
        (Entry { ctx: op.ctx, kind: op.kind, range, flags }, side)
    }

    /// The entry of a send-queue operation that keeps a range at most.
    #[inline(always)]
    pub(crate) fn plain(ctx: u64, kind: CompletionOp, signaled: bool, range: Option<RangeHold>) -> Entry {
        Entry { ctx, kind, range, flags: u64::from(signaled) }
    }

    /// Whether the device reports this operation's own completion.
    #[inline(always)]
    pub(crate) fn signaled(&self) -> bool {
        self.flags & SIGNALED != 0
    }

    /// Whether a later completion retired it (its own still to come).
    #[inline(always)]
    pub(crate) fn done(&self) -> bool {
        self.flags & DONE != 0
    }

    /// Whether the send tracker keeps a [`Side`] for it.
    #[inline(always)]
    pub(crate) fn has_side(&self) -> bool {
        self.flags & SIDE != 0
    }

    /// Marks it retired by a later completion, releasing its range (the
    /// device is done with it); its own completion still finds it.
    #[inline(always)]
    pub(crate) fn mark_done(&mut self) {
        self.flags |= DONE;
        self.range = None;
    }

    /// Empties the entry (retired): what it reports, and its range, for
    /// the caller to release (after the tracker's lock).
    #[inline(always)]
    pub(crate) fn retire(self) -> (u64, CompletionOp, Option<RangeHold>) {
        (self.ctx, self.kind, self.range)
    }
}

/// Locks `m`, also after a panic elsewhere poisoned it: every table the
/// crate keeps under a `Mutex` is changed by single assignments, so a
/// panicking holder leaves it consistent.
#[inline]
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// A send-queue operation to record: what its completion reports, and what
/// it keeps alive.
pub(crate) struct SendOpRec {
    pub(crate) ctx: u64,
    pub(crate) kind: CompletionOp,
    pub(crate) signaled: bool,
    pub(crate) hold: Option<Hold>,
    pub(crate) confirm: Option<Arc<dyn Confirm>>,
}

impl SendOpRec {
    /// Whether its entry needs a [`Side`]: a confirm, or a hold other
    /// than a range.
    #[inline(always)]
    pub(crate) fn has_side(&self) -> bool {
        self.confirm.is_some() || matches!(self.hold, Some(Hold::Keep(_)))
    }
}

/// The error of a post the provider refused. When it may have queued the
/// request anyway ([`PostError::maybe_queued`](rpma_sys::post::PostError)),
/// the tracker has recorded it with its hold, like a posted one: the hold
/// ends with its completion, a later one's, or the QP's destruction.
#[cold]
#[inline(never)]
pub(crate) fn post_error(op: &'static str, e: rpma_sys::post::PostError) -> Error {
    if e.maybe_queued {
        let text = format!(
            "{op} (the provider named no refused request, so it may have queued it: it may still run, and its \
             memory stays held until it or a later operation completes, or the connection is dropped)"
        );
        Error::provider_raw(crate::error::Msg::detailed(crate::error::Detail::MaybeQueued, text), e.error)
    } else {
        Error::provider_raw(op, e.error)
    }
}

#[cold]
#[inline(never)]
pub(super) fn too_deep(which: &str, depth: usize) -> Error {
    Error::nomem(format!("cannot allocate book-keeping for a {which} queue of {depth} entries"))
}

/// loom models of the send tracker (`harness/loom`): its ring under the
/// test-and-set lock, explored over every interleaving up to the
/// preemption bound.
#[cfg(all(test, loom))]
mod loom_models {
    use super::*;

    fn ok(_: u64) -> std::result::Result<(), rpma_sys::post::PostError> {
        Ok(())
    }

    fn rec(ctx: u64, signaled: bool, hold: Option<Hold>) -> SendOpRec {
        SendOpRec { ctx, kind: CompletionOp::Write, signaled, hold, confirm: None }
    }

    fn model(f: impl Fn() + Sync + Send + 'static) {
        let mut b = loom::model::Builder::new();
        b.preemption_bound = Some(3);
        b.check(f);
    }

    /// A completion is retired while another thread posts: the completer
    /// either finds the operation not posted yet (and a later poll does),
    /// or retires it and the unsignaled one before it, whose hold ends then
    /// and not before.
    #[test]
    fn loom_retire_races_a_post() {
        model(|| {
            let t = loom::sync::Arc::new(SendTracker::new(4).unwrap());
            let hold = Arc::new(0u8);
            t.post_with(rec(10, false, Some(Hold::keep(hold.clone()))), ok).unwrap();
            let t2 = t.clone();
            let poster = loom::thread::spawn(move || t2.post_with(rec(11, true, None), ok).unwrap());
            let got = t.complete(1, true);
            poster.join().unwrap();
            if got.is_none() {
                assert_eq!(Arc::strong_count(&hold), 2, "held until the device is done with it");
                assert_eq!(t.pending(), 2);
                assert_eq!(t.complete(1, true), Some((11, CompletionOp::Write)));
            } else {
                assert_eq!(got, Some((11, CompletionOp::Write)));
            }
            assert_eq!((t.pending(), Arc::strong_count(&hold)), (0, 1));
        });
    }

    /// Two pollers translate the completions of two signaled operations
    /// in either order: each gets its own context, once.
    #[test]
    fn loom_concurrent_pollers_get_their_contexts() {
        model(|| {
            let t = loom::sync::Arc::new(SendTracker::new(4).unwrap());
            t.post_with(rec(20, true, None), ok).unwrap();
            t.post_with(rec(21, true, None), ok).unwrap();
            let t2 = t.clone();
            let other = loom::thread::spawn(move || t2.complete(1, true));
            let first = t.complete(0, true);
            let second = other.join().unwrap();
            assert_eq!(first, Some((20, CompletionOp::Write)));
            assert_eq!(second, Some((21, CompletionOp::Write)));
            assert_eq!(t.pending(), 0);
        });
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::wrid::WrId;

    fn rec(ctx: u64, kind: CompletionOp, signaled: bool, hold: Option<Hold>) -> SendOpRec {
        SendOpRec { ctx, kind, signaled, hold, confirm: None }
    }

    fn ok(_: u64) -> std::result::Result<(), rpma_sys::post::PostError> {
        Ok(())
    }

    /// A post the provider refused without naming the request (rxe's
    /// failed doorbell, after the queue was written) may still run: its
    /// entry and hold stay, on the send and the receive side.
    #[test]
    fn a_post_that_may_have_been_queued_keeps_its_hold() {
        use rpma_sys::post::PostError;
        let queued = |_| Err(PostError { error: std::io::Error::from_raw_os_error(libc::EINVAL), maybe_queued: true });
        let hold = Arc::new(Tag);
        let t = SendTracker::new(4).unwrap();
        let e = t.post_with(rec(1, CompletionOp::Write, true, Some(Hold::keep(hold.clone()))), queued).unwrap_err();
        assert_eq!(e.detail(), Some(&crate::error::Detail::MaybeQueued), "{e}");
        assert_eq!(t.pending(), 1, "recorded as posted");
        assert_eq!(Arc::strong_count(&hold), 2, "the hold is kept");
        let refused = |_| Err(PostError::refused(std::io::Error::from_raw_os_error(libc::ENOMEM)));
        t.post_with(rec(2, CompletionOp::Write, true, Some(Hold::keep(hold.clone()))), refused).unwrap_err();
        assert_eq!((t.pending(), Arc::strong_count(&hold)), (1, 2), "a refused one is not");
        // Its completion (or a later one's) releases it as any other.
        assert_eq!(t.complete(0, true), Some((1, CompletionOp::Write)));
        assert_eq!(Arc::strong_count(&hold), 1);

        let r = RecvTracker::new(false, 4).unwrap();
        r.post_with(CompletionOp::Recv, 7, Some(Hold::keep(hold.clone())), queued).unwrap_err();
        assert_eq!((r.pending(), Arc::strong_count(&hold)), (1, 2));
        r.post_with(CompletionOp::Recv, 8, Some(Hold::keep(hold.clone())), refused).unwrap_err();
        assert_eq!((r.pending(), Arc::strong_count(&hold)), (1, 2));
        assert_eq!(r.complete(0).map(|c| c.0), Some(7));
        assert_eq!(Arc::strong_count(&hold), 1);
    }

    struct Tag;

    #[test]
    fn send_ring_wraps_and_ignores_unknown_ids() {
        let t = SendTracker::new(4).unwrap(); // 4 slots
        let mut ids = Vec::new();
        for round in 0..10u64 {
            // two unsignaled, one signaled: the signaled completion retires all three
            for k in 0..3 {
                t.post_with(rec(round * 10 + k, CompletionOp::Write, k == 2, None), |id| {
                    ids.push(id);
                    Ok(())
                })
                .unwrap();
            }
            let last = *ids.last().unwrap();
            assert_eq!(t.complete(last + 1, true), None, "not posted yet");
            assert_eq!(t.complete(last, true), Some((round * 10 + 2, CompletionOp::Write)));
            assert_eq!(t.pending(), 0);
            assert_eq!(t.complete(last, true), None, "already retired");
        }
        assert_eq!(ids, (0..30).collect::<Vec<u64>>());
    }

    /// A write and the signaled flush after it (the persistence idiom's
    /// own path in `complete`): both leave at the flush's completion, holds
    /// released, across the ring's wrap; a signaled predecessor is not
    /// taken by it (its own completion still finds it).
    #[test]
    fn one_unsignaled_predecessor_retires_with_its_successor() {
        let t = SendTracker::new(4).unwrap();
        let hold = Arc::new(Tag);
        for round in 0..10u64 {
            let mut ids = Vec::new();
            for (k, signaled) in [(0, false), (1, true)] {
                t.post_with(rec(round * 10 + k, CompletionOp::Write, signaled, Some(Hold::keep(hold.clone()))), |id| {
                    ids.push(id);
                    Ok(())
                })
                .unwrap();
            }
            assert_eq!(Arc::strong_count(&hold), 3);
            assert_eq!(t.complete(ids[1], true), Some((round * 10 + 1, CompletionOp::Write)));
            assert_eq!((t.pending(), Arc::strong_count(&hold)), (0, 1), "round {round}");
            assert_eq!(t.complete(ids[0], true), None, "retired with its successor");
        }
        let mut ids = Vec::new();
        for ctx in [1, 2] {
            t.post_with(rec(ctx, CompletionOp::Read, true, Some(Hold::keep(hold.clone()))), |id| {
                ids.push(id);
                Ok(())
            })
            .unwrap();
        }
        assert_eq!(t.complete(ids[1], true), Some((2, CompletionOp::Read)));
        assert_eq!(t.complete(ids[0], true), Some((1, CompletionOp::Read)), "a signaled one keeps its context");
        assert_eq!((t.pending(), Arc::strong_count(&hold)), (0, 1));
    }

    #[test]
    fn the_last_slot_is_kept_for_a_signaled_operation() {
        let t = SendTracker::new(3).unwrap();
        t.post_with(rec(1, CompletionOp::Write, false, None), ok).unwrap();
        t.post_with(rec(2, CompletionOp::Write, false, None), ok).unwrap();
        let e = t.post_with(rec(3, CompletionOp::Write, false, None), ok).unwrap_err();
        assert_eq!(e.code(), crate::error::RPMA_E_AGAIN);
        assert_eq!(e.detail(), Some(&crate::error::Detail::SignalNeeded), "{e}");
        // ... which can be posted, and whose completion retires the rest.
        let mut id = 0;
        t.post_with(rec(4, CompletionOp::Flush, true, None), |i| {
            id = i;
            Ok(())
        })
        .unwrap();
        let e = t.post_with(rec(5, CompletionOp::Write, true, None), ok).unwrap_err();
        assert_eq!(e.detail(), Some(&crate::error::Detail::QueueFull), "{e}");
        assert_eq!(t.complete(id, true), Some((4, CompletionOp::Flush)));
        assert_eq!(t.pending(), 0);
        // A queue of 1 takes signaled operations only.
        let t = SendTracker::new(1).unwrap();
        assert!(t.post_with(rec(1, CompletionOp::Write, false, None), ok).is_err());
        t.post_with(rec(1, CompletionOp::Write, true, None), ok).unwrap();
    }

    #[test]
    fn send_queue_retires_in_order_and_releases_holds() {
        let t = SendTracker::new(4).unwrap();
        let hold: Arc<u8> = Arc::new(7);
        let mut ids = Vec::new();
        for (ctx, kind, h) in [
            (10, CompletionOp::Write, Some(Hold::keep(hold.clone()))),
            (11, CompletionOp::Write, Some(Hold::keep(hold.clone()))),
            (12, CompletionOp::Flush, None),
        ] {
            t.post_with(rec(ctx, kind, ctx == 12, h), |id| {
                ids.push(id);
                Ok(())
            })
            .unwrap();
        }
        assert_eq!(Arc::strong_count(&hold), 3);
        assert_eq!(t.complete(ids[2], true), Some((12, CompletionOp::Flush)));
        assert_eq!(Arc::strong_count(&hold), 1, "unsignaled predecessors are retired too");
        assert_eq!(t.complete(ids[0], true), None);
        assert_eq!(t.pending(), 0);
    }

    /// Two threads polling one CQ: thread A polled the completion of a
    /// signaled operation, thread B the one of a later operation, and B
    /// translates first. A still gets its own context and kind.
    #[test]
    fn a_signaled_predecessor_keeps_its_context_for_a_slower_poller() {
        let t = SendTracker::new(8).unwrap();
        let hold: Arc<u8> = Arc::new(7);
        let mut ids = Vec::new();
        for (ctx, kind) in [(1, CompletionOp::Read), (2, CompletionOp::Write), (3, CompletionOp::Send)] {
            t.post_with(rec(ctx, kind, ctx != 2, Some(Hold::keep(hold.clone()))), |id| {
                ids.push(id);
                Ok(())
            })
            .unwrap();
        }
        assert_eq!(t.complete(ids[2], true), Some((3, CompletionOp::Send)), "B first");
        assert_eq!(Arc::strong_count(&hold), 1, "the device is done with all three");
        assert_eq!(t.pending(), 0);
        assert_eq!(t.complete(ids[0], true), Some((1, CompletionOp::Read)), "A still finds its own");
        assert_eq!(t.complete(ids[0], true), None);
        assert_eq!(t.complete(ids[1], true), None, "the unsignaled one was retired by B");
        // The ring moved on: it is empty and takes new entries.
        t.post_with(rec(4, CompletionOp::Read, true, None), |id| {
            assert_eq!(id, ids[2] + 1);
            Ok(())
        })
        .unwrap();
    }

    struct Count(std::sync::Mutex<Vec<bool>>);
    impl Confirm for Count {
        fn completed(&self, success: bool) {
            self.0.lock().unwrap().push(success);
        }
    }

    #[test]
    fn confirm_gets_the_operations_own_status() {
        let t = SendTracker::new(4).unwrap();
        let c = Arc::new(Count(Default::default()));
        let mut ids = Vec::new();
        for ok_ in [false, true] {
            let r = SendOpRec {
                ctx: 0,
                kind: CompletionOp::LocalInv,
                signaled: true,
                hold: None,
                confirm: Some(c.clone()),
            };
            t.post_with(r, |id| {
                ids.push(id);
                Ok(())
            })
            .unwrap();
            t.complete(*ids.last().unwrap(), ok_).unwrap();
        }
        assert_eq!(*c.0.lock().unwrap(), vec![false, true]);
    }

    #[test]
    fn send_queue_refuses_when_full_and_forgets_failed_posts() {
        let t = SendTracker::new(3).unwrap();
        t.post_with(rec(1, CompletionOp::Write, true, None), ok).unwrap();
        let e = t
            .post_with(rec(2, CompletionOp::Write, true, None), |_| {
                Err(std::io::Error::from_raw_os_error(libc::ENOMEM).into())
            })
            .unwrap_err();
        assert_eq!(e.errno(), Some(libc::ENOMEM));
        assert_eq!(t.pending(), 1, "a failed post leaves no entry");
        t.post_with(rec(3, CompletionOp::Write, true, None), ok).unwrap();
        t.post_with(rec(4, CompletionOp::Write, true, None), ok).unwrap();
        let e = t.post_with(rec(5, CompletionOp::Write, true, None), ok).unwrap_err();
        assert_eq!(e.code(), crate::error::RPMA_E_AGAIN);
        assert_eq!(e.detail(), Some(&crate::error::Detail::QueueFull), "{e}");
    }

    /// A chain takes an operation with a non-inline local range only with
    /// a hold on it, and at most `MAX_CHAIN` of them.
    #[test]
    fn a_chain_refuses_an_unheld_range_and_a_full_chain() {
        use rpma_sys::chain::MAX_CHAIN;
        use rpma_sys::wr::Wr;
        use rpma_sys::wr::{SendOp, SendWr, Sge};
        let wr = |inline| {
            Wr::Plain(SendWr {
                wr_id: 0,
                op: SendOp::Write,
                sge: Some(Sge { addr: 64, length: 8, lkey: 1 }),
                remote_addr: 0,
                rkey: 2,
                signaled: false,
                fence: false,
                inline,
            })
        };
        let book = book::test_book(4096);
        let range = || {
            // SAFETY: the book outlives the chain and its holds.
            let r = unsafe { book::Book::hold(std::ptr::NonNull::from(&book), 0, 8, book::Use::DeviceReads) };
            Some(Hold::Range(r.unwrap()))
        };
        let mut c = SendChain::new(false);
        let e = c.push(wr(false), 1, CompletionOp::Write, None).unwrap_err();
        assert!(matches!(e, Error::Unknown(_)), "{e}");
        let e = c.push(wr(false), 1, CompletionOp::Write, Some(Hold::keep(Arc::new(7u8)))).unwrap_err();
        assert!(matches!(e, Error::Unknown(_)), "a list is not chained: {e}");
        assert_eq!(c.len(), 0, "nothing added");
        c.push(wr(true), 1, CompletionOp::Write, None).unwrap(); // inline: copied when posted
        for k in 1..MAX_CHAIN {
            c.push(wr(false), k as u64, CompletionOp::Write, range()).unwrap();
        }
        assert!(c.is_full());
        let e = c.push(wr(false), 99, CompletionOp::Write, range()).unwrap_err();
        assert_eq!(e.code(), crate::error::RPMA_E_INVAL);
        assert_eq!(book.ops(), MAX_CHAIN - 1, "the refused operation's hold is released");
        drop(c);
        assert_eq!(book.ops(), 0, "a chain dropped unposted releases its holds");
    }

    #[test]
    fn huge_queues_are_an_error_not_an_abort() {
        assert_eq!(SendTracker::new(u32::MAX).err().map(|e| e.code()), Some(crate::error::RPMA_E_NOMEM));
        assert_eq!(RecvTracker::new(false, u32::MAX).err().map(|e| e.code()), Some(crate::error::RPMA_E_NOMEM));
    }

    #[test]
    fn receives_complete_in_any_order() {
        let t = RecvTracker::new(true, 4).unwrap();
        let mut ids = Vec::new();
        for ctx in [1, 2] {
            t.post_with(CompletionOp::Recv, ctx, None, |id| {
                ids.push(id);
                Ok(())
            })
            .unwrap();
        }
        let slot = |id| match WrId::decode(id) {
            WrId::SrqRecv(s) => s,
            other => panic!("{other:?}"),
        };
        assert_eq!(t.pending(), 2);
        assert_eq!(t.complete(slot(ids[1])), Some((2, CompletionOp::Recv)));
        assert_eq!(t.complete(slot(ids[0])), Some((1, CompletionOp::Recv)));
        assert_eq!(t.complete(slot(ids[0])), None);
        assert_eq!(t.pending(), 0, "a repeated completion retires nothing twice");
        let e = t
            .post_with(CompletionOp::Recv, 4, None, |_| Err(std::io::Error::from_raw_os_error(libc::ENOMEM).into()))
            .unwrap_err();
        assert_eq!(e.errno(), Some(libc::ENOMEM));
        assert_eq!(t.pending(), 0, "a failed post leaves no entry");
        let q = RecvTracker::new(false, 4).unwrap();
        let mut id = 0;
        q.post_with(CompletionOp::Recv, 3, None, |i| {
            id = i;
            Ok(())
        })
        .unwrap();
        assert!(matches!(WrId::decode(id), WrId::Recv(_)));
    }
}
