//! The send tracker's lock (and an async connection's routing table's): a
//! test-and-set lock without poisoning.
//!
//! Every tracked post and every completion takes the send tracker's lock
//! once. `std::sync::Mutex`'s lock and unlock are a compare-exchange, two
//! panic-count checks for poisoning, a swap and its waiter check; this one's
//! are the compare-exchange and a store. The critical sections are short (a
//! ring update, and one `ibv_post_send`, which itself takes the provider's
//! spin lock on the same send queue), so a waiter spins briefly and then
//! yields the CPU. The routing table's sections are a post with the first
//! polls of its CQs, a drain of a CQ, a route (waking a waiter) or a slot's
//! change.
//!
//! No poisoning: the tracker recovered from a poisoned mutex anyway (its
//! state stays consistent at every panic point: nothing in a critical
//! section panics but slice indexing, which is in bounds by construction).

use std::ops::{Deref, DerefMut};

// Under `--cfg loom` the lock is built on loom's atomics and cell, so the
// models below (and the send tracker's, which uses this lock) explore its
// interleavings; otherwise on std's.
#[cfg(loom)]
use loom::{
    cell::UnsafeCell,
    sync::atomic::{AtomicBool, Ordering},
    thread::yield_now,
};
#[cfg(not(loom))]
use std::{
    cell::UnsafeCell,
    sync::atomic::{AtomicBool, Ordering},
    thread::yield_now,
};

/// Spins before yielding the CPU to the holder.
const SPINS: u32 = 64;

/// A value behind a test-and-set lock.
pub(crate) struct SpinLock<T> {
    locked: AtomicBool,
    value: UnsafeCell<T>,
}

// SAFETY: the value is reached only through a `SpinGuard`, and at most one
// guard exists at a time (the `Acquire` compare-exchange from `false` in
// `lock` succeeds for one thread until the guard's `Release` store), so
// sharing the lock across threads only moves `T` between them: `T: Send`
// suffices, as for `Mutex`.
unsafe impl<T: Send> Sync for SpinLock<T> {}

/// Shows no value: printing must not wait for (or race) a holder.
impl<T> std::fmt::Debug for SpinLock<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SpinLock").finish_non_exhaustive()
    }
}

impl<T> SpinLock<T> {
    pub(crate) fn new(value: T) -> SpinLock<T> {
        SpinLock { locked: AtomicBool::new(false), value: UnsafeCell::new(value) }
    }

    /// Locks, waiting for another holder to unlock.
    #[inline(always)]
    pub(crate) fn lock(&self) -> SpinGuard<'_, T> {
        if self.locked.compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed).is_err() {
            self.lock_contended();
        }
        SpinGuard {
            lock: self,
            #[cfg(loom)]
            ptr: Some(self.value.get_mut()),
            _access: std::marker::PhantomData,
        }
    }

    #[cold]
    #[inline(never)]
    fn lock_contended(&self) {
        let mut spins = 0;
        loop {
            while self.locked.load(Ordering::Relaxed) {
                if spins < SPINS && !cfg!(loom) {
                    spins += 1;
                    std::hint::spin_loop();
                } else {
                    yield_now();
                }
            }
            if self.locked.compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed).is_ok() {
                return;
            }
        }
    }
}

/// The locked value; unlocks when dropped (also when unwinding).
///
/// It is `Sync` only for `T: Sync` and `Send` only for `T: Send` (as
/// std's `MutexGuard` is `Sync`): a shared guard hands out `&T` on every
/// thread that holds a reference to it, which the lock's own bound
/// (`T: Send`) does not cover. The marker makes the compiler derive that.
pub(crate) struct SpinGuard<'a, T> {
    lock: &'a SpinLock<T>,
    /// loom's record of this access, ended before the unlock.
    #[cfg(loom)]
    ptr: Option<loom::cell::MutPtr<T>>,
    _access: std::marker::PhantomData<&'a mut T>,
}

impl<T> Deref for SpinGuard<'_, T> {
    type Target = T;
    #[inline(always)]
    fn deref(&self) -> &T {
        // SAFETY: this guard is the only one (see `Sync` above); the
        // reference lives no longer than the guard.
        #[cfg(not(loom))]
        unsafe {
            &*self.lock.value.get()
        }
        // SAFETY: as above (the pointer is set until the guard drops).
        #[cfg(loom)]
        unsafe {
            self.ptr.as_ref().map(|p| &*loom::cell::MutPtr::deref(p)).unwrap_or_else(|| unreachable!())
        }
    }
}

impl<T> DerefMut for SpinGuard<'_, T> {
    #[inline(always)]
    fn deref_mut(&mut self) -> &mut T {
        // SAFETY: as in `deref`; `&mut self` makes the reference unique.
        #[cfg(not(loom))]
        unsafe {
            &mut *self.lock.value.get()
        }
        // SAFETY: as above.
        #[cfg(loom)]
        unsafe {
            self.ptr.as_mut().map(|p| loom::cell::MutPtr::deref(p)).unwrap_or_else(|| unreachable!())
        }
    }
}

impl<T> Drop for SpinGuard<'_, T> {
    #[inline(always)]
    fn drop(&mut self) {
        #[cfg(loom)]
        drop(self.ptr.take());
        self.lock.locked.store(false, Ordering::Release);
    }
}

/// loom models (`RUSTFLAGS="--cfg loom" cargo test -p rpma --lib loom`;
/// `harness/loom` runs them): every interleaving of two threads, up to the
/// preemption bound.
#[cfg(all(test, loom))]
mod loom_models {
    use super::SpinLock;
    use loom::sync::Arc;

    /// Two threads increment under the lock: no update is lost, and loom
    /// finds no access to the value outside a guard.
    #[test]
    fn loom_lock_excludes() {
        let mut b = loom::model::Builder::new();
        b.preemption_bound = Some(3);
        b.check(|| {
            let l = Arc::new(SpinLock::new(0u32));
            let l2 = l.clone();
            let t = loom::thread::spawn(move || {
                let mut g = l2.lock();
                *g += 1;
            });
            {
                let mut g = l.lock();
                *g += 1;
            }
            t.join().unwrap();
            assert_eq!(*l.lock(), 2);
        });
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::SpinLock;
    use std::sync::Arc;

    #[test]
    fn excludes_other_threads() {
        let l = Arc::new(SpinLock::new(0u64));
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let l = l.clone();
                std::thread::spawn(move || {
                    for _ in 0..20_000 {
                        let mut g = l.lock();
                        let v = *g;
                        std::hint::black_box(&v);
                        *g = v + 1;
                    }
                })
            })
            .collect();
        threads.into_iter().for_each(|t| t.join().unwrap());
        assert_eq!(*l.lock(), 80_000);
    }

    #[test]
    fn unlocks_when_a_holder_panics() {
        let l = Arc::new(SpinLock::new(1u8));
        let l2 = l.clone();
        let r = std::thread::spawn(move || {
            let _g = l2.lock();
            panic!("inside the lock");
        })
        .join();
        assert!(r.is_err());
        assert_eq!(*l.lock(), 1);
    }
}
