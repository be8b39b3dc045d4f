//! The routing table of [`AsyncConn`](super::AsyncConn)'s reaper: which
//! awaited operation each completion belongs to, by its op context.

use crate::cq::Completion;
use crate::error::{Error, Result};
use std::collections::VecDeque;
use std::task::{Context, Poll, Waker};

/// The op contexts of awaited operations: this bit, a generation and a
/// slot. They are recorded with an awaited kind ([`wrid::awaited`]), which
/// no operation posted the librpma way on [`AsyncConn::conn`] can have, so
/// only their completions reach the slots, whatever op context a user
/// gives (every other completion goes to [`AsyncConn::next_completion`]).
const MARK: u64 = 1 << 63;
const SLOT_BITS: u32 = 20;
const SLOT_MASK: u64 = (1 << SLOT_BITS) - 1;
const GEN_MASK: u64 = (1 << (63 - SLOT_BITS)) - 1;

pub(super) fn ctx_of(k: usize, gen: u64) -> u64 {
    MARK | (gen & GEN_MASK) << SLOT_BITS | k as u64
}

fn slot_of(ctx: u64) -> Option<(usize, u64)> {
    (ctx & MARK != 0).then_some(((ctx & SLOT_MASK) as usize, (ctx >> SLOT_BITS) & GEN_MASK))
}

/// Where an awaited operation is.
#[derive(Debug)]
pub(super) enum Slot {
    Free,
    /// Posted; its future waits (with its waker once polled).
    Waiting {
        gen: u64,
        waker: Option<Waker>,
    },
    /// Completed; its future has not taken it yet.
    Done {
        gen: u64,
        wc: Completion,
    },
    /// Its future was dropped: the completion is discarded when it comes.
    Abandoned {
        gen: u64,
    },
}

/// The reaper's routing table: slots of awaited operations, and the
/// completions of the others.
#[derive(Debug, Default)]
pub(super) struct Router {
    pub(super) slots: Vec<Slot>,
    free: Vec<usize>,
    next_gen: u64,
    pub(super) user: VecDeque<Completion>,
    pub(super) user_waker: Option<Waker>,
    /// Why the reaper stopped, when it did: every wait fails with it.
    pub(super) failed: Option<String>,
    /// Whether CQ `i` (the connection's CQ, then its receive CQ) is known
    /// armed: set by whoever arms it under the lock, cleared by the reaper
    /// under the lock once it took the CQ's event. False when unknown (an
    /// arming too many costs a call, one too few a lost wake-up).
    pub(super) armed: [bool; 2],
    /// Wakers to wake, and wakers to drop, once the routing lock is let go
    /// (a waker is the runtime's or the user's code: it may poll or drop
    /// a future of this connection, which takes the lock).
    pub(super) wake: Vec<Waker>,
    pub(super) dropped: Vec<Waker>,
    /// Awaited completions that matched no slot (none should).
    pub(super) stray: u64,
}

impl Router {
    /// The slot and generation of the next awaited operation, made sure
    /// of room before it is posted; [`take`](Router::take) takes the slot
    /// only when the operation has to wait. The generation is spent either
    /// way, so no two operations carry one context.
    #[inline(always)]
    pub(super) fn next(&mut self) -> Result<(usize, u64)> {
        if let Some(why) = &self.failed {
            return Err(reaper_stopped(why));
        }
        let gen = self.next_gen & GEN_MASK;
        self.next_gen = self.next_gen.wrapping_add(1);
        let k = match self.free.last() {
            Some(&k) => k,
            None if self.slots.len() <= SLOT_MASK as usize => {
                self.slots.try_reserve(1).map_err(|_| Error::nomem("no room for another awaited operation"))?;
                self.slots.len()
            }
            None => return Err(Error::nomem("2^20 awaited operations in flight on one connection")),
        };
        Ok((k, gen))
    }

    /// Takes slot `k`, the last [`next`](Router::next) gave, for the
    /// operation of generation `gen`, which waits for its completion.
    /// Completions routed since may have freed other slots (pushed on the
    /// free list after `k`), never taken one.
    #[inline]
    pub(super) fn take(&mut self, k: usize, gen: u64) {
        let waiting = Slot::Waiting { gen, waker: None };
        if k == self.slots.len() {
            self.slots.push(waiting); // room made by `next`
            return;
        }
        match self.free.last() {
            Some(&f) if f == k => {
                self.free.pop();
            }
            _ => {
                if let Some(i) = self.free.iter().rposition(|&f| f == k) {
                    self.free.swap_remove(i);
                }
            }
        }
        self.slots[k] = waiting;
    }

    #[cfg(test)]
    pub(super) fn alloc(&mut self) -> Result<(usize, u64)> {
        let (k, gen) = self.next()?;
        self.take(k, gen);
        Ok((k, gen))
    }

    #[inline]
    pub(super) fn release(&mut self, k: usize) {
        self.set(k, Slot::Free);
        self.free.push(k);
    }

    /// Puts `slot` in place `k`; a waker it held is dropped once the lock
    /// is let go.
    #[inline]
    fn set(&mut self, k: usize, slot: Slot) {
        if let Slot::Waiting { waker: Some(w), .. } = std::mem::replace(&mut self.slots[k], slot) {
            self.dropped.push(w);
        }
    }

    /// Hands `wc` to its future, discards it (its future is gone), or
    /// queues it for [`AsyncConn::next_completion`] (an operation posted
    /// the librpma way).
    #[inline]
    pub(super) fn route(&mut self, mut wc: Completion) {
        if !awaited(&mut wc) {
            self.user.push_back(wc);
            if let Some(w) = self.user_waker.take() {
                self.wake.push(w);
            }
            return;
        }
        if let Some((k, gen)) = slot_of(wc.op_context) {
            match self.slots.get_mut(k) {
                Some(Slot::Waiting { gen: g, waker }) if *g == gen => {
                    let waker = waker.take();
                    self.slots[k] = Slot::Done { gen, wc };
                    self.wake.extend(waker);
                    return;
                }
                Some(Slot::Abandoned { gen: g }) if *g == gen => {
                    self.release(k);
                    return;
                }
                _ => {}
            }
        }
        // An awaited operation's slot stays taken until its completion
        // comes: no other slot can match. Never handed to the user.
        self.stray += 1;
    }

    /// The future of slot `k` (generation `gen`) is dropped before it took
    /// the completion: a waiting slot is abandoned (the reaper frees it when
    /// the completion comes), a done one freed.
    pub(super) fn abandon(&mut self, k: usize, gen: u64) {
        match self.slots[k] {
            Slot::Waiting { gen: g, .. } if g == gen => self.set(k, Slot::Abandoned { gen }),
            Slot::Done { gen: g, .. } if g == gen => self.release(k),
            _ => {}
        }
    }

    /// Keeps `cx`'s waker for [`AsyncConn::next_completion`]'s waiter (an
    /// old one is dropped once the lock is let go).
    pub(super) fn wait_user(&mut self, cx: &Context<'_>) {
        match &self.user_waker {
            Some(w) if w.will_wake(cx.waker()) => {}
            _ => self.dropped.extend(self.user_waker.replace(cx.waker().clone())),
        }
    }

    /// The reaper stopped: wakes every waiter (once the lock is let go),
    /// which then fails.
    pub(super) fn fail(&mut self, why: String) {
        self.failed = Some(why);
        for s in &mut self.slots {
            if let Slot::Waiting { waker: Some(w), .. } = s {
                self.wake.push(w.clone());
            }
        }
        self.wake.extend(self.user_waker.take());
    }

    /// Whether anything waits for a completion from the CQs: a slot in
    /// use (waiting, abandoned, or done and not yet taken) or a waiter of
    /// [`AsyncConn::next_completion`]. While nothing does, the reaper
    /// leaves the CQs unarmed, and the next waiter arms them.
    #[inline]
    pub(super) fn in_use(&self) -> bool {
        self.slots.len() > self.free.len() || self.user_waker.is_some()
    }

    /// Whether slot `k` still waits for its completion.
    #[inline]
    pub(super) fn waits(&self, k: usize) -> bool {
        matches!(self.slots.get(k), Some(Slot::Waiting { .. }))
    }

    #[inline]
    pub(super) fn poll_slot(&mut self, k: usize, gen: u64, cx: &mut Context<'_>) -> Poll<Result<Completion>> {
        match &mut self.slots[k] {
            Slot::Done { gen: g, wc } if *g == gen => {
                let wc = *wc;
                self.release(k);
                Poll::Ready(Ok(wc))
            }
            Slot::Waiting { gen: g, waker } if *g == gen => {
                if let Some(why) = &self.failed {
                    // Its completion may never be routed: the slot stays
                    // taken, so no later operation reuses its context.
                    let why = reaper_stopped(why);
                    self.set(k, Slot::Abandoned { gen });
                    return Poll::Ready(Err(why));
                }
                match waker {
                    Some(w) if w.will_wake(cx.waker()) => {}
                    _ => {
                        if let Some(old) = waker.replace(cx.waker().clone()) {
                            self.dropped.push(old);
                        }
                    }
                }
                Poll::Pending
            }
            other => Poll::Ready(Err(Error::Unknown(format!("rpma::aio: awaited slot {k} is {other:?}").into()))),
        }
    }
}

impl crate::wake_after::Pending for Router {
    #[inline]
    fn take_pending(&mut self) -> Option<(Vec<Waker>, Vec<Waker>)> {
        if self.wake.is_empty() && self.dropped.is_empty() {
            return None;
        }
        Some((std::mem::take(&mut self.wake), std::mem::take(&mut self.dropped)))
    }
}

/// Whether `wc` is an awaited operation's completion (recorded with an
/// awaited kind); if so its real kind is put back.
#[inline]
pub(super) fn awaited(wc: &mut Completion) -> bool {
    match crate::wrid::awaited_kind(wc.op, wc.wc_opcode) {
        Some(kind) => {
            wc.op = kind;
            true
        }
        None => false,
    }
}

pub(super) fn reaper_stopped(why: &str) -> Error {
    Error::Unknown(format!("the connection's completion reaper stopped: {why}").into())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cq::Cq;

    /// A completion of an operation posted the librpma way, with `ctx`.
    fn wc(ctx: u64) -> Completion {
        Completion { op_context: ctx, ..Cq::EMPTY }
    }

    /// A completion of an awaited operation (recorded with an awaited kind).
    fn aw(ctx: u64) -> Completion {
        Completion { op_context: ctx, op: crate::wrid::awaited(crate::CompletionOp::Read), ..Cq::EMPTY }
    }

    #[test]
    fn contexts_round_trip_and_user_contexts_pass_through() {
        assert_eq!(slot_of(ctx_of(5, 77)), Some((5, 77)));
        assert_eq!(slot_of(ctx_of(SLOT_MASK as usize, GEN_MASK)), Some((SLOT_MASK as usize, GEN_MASK)));
        assert_eq!(slot_of(42), None);
        let mut r = Router::default();
        r.route(wc(42));
        assert_eq!(r.user.len(), 1);
    }

    /// A user's completion whose op context is exactly an awaited slot's
    /// (as the first awaited operation's is predictable) goes to the user,
    /// never to the slot; the slot still gets its own, with its real kind.
    #[test]
    fn a_user_context_shaped_as_a_slot_never_reaches_it() {
        let mut r = Router::default();
        let (k, gen) = r.alloc().unwrap();
        r.route(wc(ctx_of(k, gen)));
        assert!(r.waits(k), "the slot still waits");
        assert_eq!(r.user.len(), 1, "the user's completion is the user's");
        r.abandon(k, gen);
        r.route(wc(ctx_of(k, gen)));
        assert_eq!(r.user.len(), 2, "an abandoned slot eats no user completion");
        assert!(matches!(r.slots[k], Slot::Abandoned { .. }));
        r.route(aw(ctx_of(k, gen)));
        assert!(matches!(r.slots[k], Slot::Free), "its own completion frees it");
        let (k, gen) = r.alloc().unwrap();
        r.route(aw(ctx_of(k, gen)));
        match r.slots[k] {
            Slot::Done { wc, .. } => assert_eq!(wc.op, crate::CompletionOp::Read, "the real kind back"),
            ref other => panic!("{other:?}"),
        }
    }

    /// Routing never wakes or drops a waker itself: the guard does, after
    /// the lock (they are the caller's code).
    #[test]
    fn routing_collects_wakers_for_after_the_lock() {
        let mut r = Router::default();
        let (k, gen) = r.alloc().unwrap();
        let waker = std::task::Waker::noop();
        let mut cx = Context::from_waker(waker);
        assert!(r.poll_slot(k, gen, &mut cx).is_pending());
        r.route(aw(ctx_of(k, gen)));
        assert_eq!(r.wake.len(), 1, "woken after the lock");
        r.wait_user(&cx);
        r.route(wc(1));
        assert_eq!(r.wake.len(), 2);
        let (k2, gen2) = r.alloc().unwrap();
        assert!(r.poll_slot(k2, gen2, &mut cx).is_pending());
        r.abandon(k2, gen2);
        assert_eq!(r.dropped.len(), 1, "the abandoned slot's waker dropped after the lock");
    }

    #[test]
    fn a_completion_reaches_its_slot_or_is_discarded_once_abandoned() {
        let mut r = Router::default();
        let (a, ga) = r.alloc().unwrap();
        let (b, gb) = r.alloc().unwrap();
        r.route(aw(ctx_of(a, ga)));
        assert!(matches!(r.slots[a], Slot::Done { .. }));
        // b's future was dropped: its completion is discarded, the slot freed.
        r.slots[b] = Slot::Abandoned { gen: gb };
        r.route(aw(ctx_of(b, gb)));
        assert!(matches!(r.slots[b], Slot::Free) && r.free == vec![b] && r.user.is_empty());
        // A stale generation is not the slot's, nor the user's.
        let (b2, gb2) = r.alloc().unwrap();
        assert_eq!(b2, b);
        r.route(aw(ctx_of(b, gb)));
        assert!(matches!(r.slots[b], Slot::Waiting { gen, .. } if gen == gb2));
        assert!(r.user.is_empty());
        assert_eq!(r.stray, 1);
    }

    #[test]
    fn a_dropped_future_frees_its_slot_once_whichever_comes_first() {
        for completion_first in [false, true] {
            let mut r = Router::default();
            let (k, gen) = r.alloc().unwrap();
            if completion_first {
                r.route(aw(ctx_of(k, gen)));
                r.abandon(k, gen);
            } else {
                r.abandon(k, gen);
                r.route(aw(ctx_of(k, gen)));
            }
            assert!(matches!(r.slots[k], Slot::Free), "{:?}", r.slots[k]);
            assert_eq!(r.free, vec![k], "freed once");
            assert!(r.user.is_empty(), "the completion went nowhere else");
            // A late duplicate of that context is not the next user's.
            let (k2, gen2) = r.alloc().unwrap();
            r.route(aw(ctx_of(k, gen)));
            assert!(matches!(r.slots[k2], Slot::Waiting { gen: g, .. } if g == gen2));
        }
    }

    #[test]
    fn a_slot_taken_after_other_completions_freed_slots_is_the_one_given() {
        let mut r = Router::default();
        let (a, ga) = r.alloc().unwrap();
        let (b, gb) = r.alloc().unwrap();
        r.release(a);
        r.abandon(b, gb);
        // The next operation is given slot `a`; before it takes it, b's
        // completion comes and frees b.
        let (k, gen) = r.next().unwrap();
        assert_eq!(k, a);
        assert_ne!(gen, ga, "a new generation");
        r.route(aw(ctx_of(b, gb)));
        assert_eq!(r.free, vec![a, b]);
        r.take(k, gen);
        assert_eq!(r.free, vec![b], "a taken, b still free");
        assert!(matches!(r.slots[a], Slot::Waiting { gen: g, .. } if g == gen));
        // A new slot when none is free, its room made before the post.
        let (c, gc) = r.alloc().unwrap();
        assert_eq!(c, b);
        let (d, gd) = r.next().unwrap();
        assert_eq!(d, 2);
        r.take(d, gd);
        assert!(matches!(r.slots[d], Slot::Waiting { gen: g, .. } if g == gd));
        assert!(r.waits(c) && gc != gd);
    }

    #[test]
    fn a_stopped_reaper_fails_new_and_waiting_operations() {
        let mut r = Router::default();
        let (k, gen) = r.alloc().unwrap();
        r.fail("test".into());
        assert!(r.alloc().is_err());
        let waker = std::task::Waker::noop();
        let mut cx = Context::from_waker(waker);
        assert!(matches!(r.poll_slot(k, gen, &mut cx), Poll::Ready(Err(_))));
        assert!(matches!(r.slots[k], Slot::Abandoned { .. }), "the slot stays taken");
    }
}
