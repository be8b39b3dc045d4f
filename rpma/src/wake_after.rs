//! A lock guard that runs the wakers collected under its lock only once
//! the lock is let go: [`AsyncConn`](crate::aio::AsyncConn)'s routing table.
//!
//! A waker is the runtime's or the user's code. Woken (or dropped: the
//! last reference to a task drops its future) while the table's lock is
//! held, it may poll or drop a future of the same connection, which takes
//! that lock: a spin for ever on the waking thread. So whatever is locked
//! through [`WakeAfter`] collects its wakers ([`Pending`]) and the guard's
//! drop lets the lock go first, then wakes and drops them; messages
//! logged under the lock are emitted after that ([`crate::unlocked`]).
//! The loom model below checks that a waker that takes the lock when
//! woken is woken, and never under the lock.

use crate::inflight::lock::{SpinGuard, SpinLock};
use std::ops::{Deref, DerefMut};
use std::task::Waker;

/// A value whose changes under the lock collect wakers.
pub(crate) trait Pending {
    /// The wakers to wake and those to drop, taken out (`None` when there
    /// are none, the common case).
    fn take_pending(&mut self) -> Option<(Vec<Waker>, Vec<Waker>)>;
}

/// The lock of a [`Pending`] value, held.
pub(crate) struct WakeAfter<'a, T: Pending> {
    g: Option<SpinGuard<'a, T>>,
    // Dropped after `Drop::drop`: messages logged under the lock are
    // emitted after the wakes.
    _logs: crate::unlocked::Guard,
}

impl<'a, T: Pending> WakeAfter<'a, T> {
    /// Takes `lock`.
    #[inline]
    pub(crate) fn lock(lock: &'a SpinLock<T>) -> WakeAfter<'a, T> {
        let logs = crate::unlocked::guard();
        WakeAfter { g: Some(lock.lock()), _logs: logs }
    }
}

impl<T: Pending> Deref for WakeAfter<'_, T> {
    type Target = T;
    #[inline(always)]
    fn deref(&self) -> &T {
        // `g` is `None` only inside `drop`.
        self.g.as_deref().unwrap_or_else(|| unreachable!())
    }
}

impl<T: Pending> DerefMut for WakeAfter<'_, T> {
    #[inline(always)]
    fn deref_mut(&mut self) -> &mut T {
        self.g.as_deref_mut().unwrap_or_else(|| unreachable!())
    }
}

impl<T: Pending> Drop for WakeAfter<'_, T> {
    #[inline]
    fn drop(&mut self) {
        let Some(mut g) = self.g.take() else { return };
        let Some((wake, dropped)) = g.take_pending() else { return };
        drop(g);
        wake.into_iter().for_each(Waker::wake);
        drop(dropped);
    }
}

impl<T: Pending + std::fmt::Debug> std::fmt::Debug for WakeAfter<'_, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.g.as_deref().fmt(f)
    }
}

/// Model checks (`harness/loom`): a future registers its waker under the
/// lock while the reaper completes it under the lock; the waker, when
/// woken, takes the lock itself (as a waker that polls a future of the
/// same connection does). Woken under the lock, it would spin for ever
/// (loom reports the model exceeding its branches).
#[cfg(all(test, loom))]
mod loom_models {
    use super::*;
    use loom::sync::atomic::{AtomicUsize, Ordering};
    use std::task::Wake;

    #[derive(Default)]
    struct Slot {
        waker: Option<Waker>,
        done: bool,
        wake: Vec<Waker>,
        dropped: Vec<Waker>,
    }

    impl Pending for Slot {
        fn take_pending(&mut self) -> Option<(Vec<Waker>, Vec<Waker>)> {
            (!self.wake.is_empty() || !self.dropped.is_empty())
                .then(|| (std::mem::take(&mut self.wake), std::mem::take(&mut self.dropped)))
        }
    }

    /// A waker that locks the slot when woken and when dropped.
    struct Relock {
        slot: loom::sync::Arc<SpinLock<Slot>>,
        woken: loom::sync::Arc<AtomicUsize>,
    }

    impl Wake for Relock {
        fn wake(self: std::sync::Arc<Self>) {
            let s = WakeAfter::lock(&self.slot);
            assert!(s.done, "woken before its completion");
            drop(s);
            self.woken.fetch_add(1, Ordering::SeqCst);
        }
    }

    impl Drop for Relock {
        fn drop(&mut self) {
            drop(WakeAfter::lock(&self.slot));
        }
    }

    #[test]
    fn loom_wakers_run_after_the_routing_lock() {
        loom::model(|| {
            let slot = loom::sync::Arc::new(SpinLock::new(Slot::default()));
            let woken = loom::sync::Arc::new(AtomicUsize::new(0));
            let s2 = slot.clone();
            // The reaper: the completion comes, its waiter is woken.
            let reaper = loom::thread::spawn(move || {
                let mut s = WakeAfter::lock(&s2);
                s.done = true;
                if let Some(w) = s.waker.take() {
                    s.wake.push(w);
                }
            });
            // The future: registers a waker unless done, twice (the second
            // registration replaces, so drops, the first waker).
            let mut registered = false;
            for _ in 0..2 {
                let mut s = WakeAfter::lock(&slot);
                if !s.done {
                    let w = Waker::from(std::sync::Arc::new(Relock { slot: slot.clone(), woken: woken.clone() }));
                    if let Some(old) = s.waker.replace(w) {
                        s.dropped.push(old);
                    }
                    registered = true;
                }
            }
            reaper.join().unwrap();
            let s = WakeAfter::lock(&slot);
            assert!(s.done);
            if registered {
                assert_eq!(woken.load(Ordering::SeqCst), 1, "the waiting future was woken once");
            }
        });
    }
}
