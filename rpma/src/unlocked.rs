//! What runs only once this thread holds no rpma lock: the caller's code
//! that rpma would otherwise call under one. A message logged under a lock
//! reaches the log function after it; a region whose last hold ends under a
//! lock (a completion retiring the last operation of a region whose
//! `MrLocal` was dropped) is deregistered, and the caller's memory value
//! dropped with its own `Drop`, after it (`MrInner`'s drop).
//!
//! A [`Guard`] is made before a lock under which either can happen and
//! dropped after the lock is let go; while one lives on this thread, such
//! work is kept ([`later`]), and done when the last one is dropped. (The
//! wakers a lock's holder collects are woken the same way, by
//! [`WakeAfter`](crate::wake_after), which also holds a guard.)

use std::any::Any;
use std::cell::{Cell, RefCell};

thread_local! {
    /// How many [`Guard`]s this thread holds, and [`SOME_KEPT`] while
    /// `KEPT` holds work: one cell, read and written once per guard.
    static DEPTH: Cell<u32> = const { Cell::new(0) };
    /// The work kept meanwhile, in order: each is done by its `Drop`.
    static KEPT: RefCell<Vec<Box<dyn Any>>> = const { RefCell::new(Vec::new()) };
}

/// The bit of `DEPTH` that says work is kept.
const SOME_KEPT: u32 = 1 << 31;

/// See the module's documentation. Not `Send`: it counts this thread's locks.
#[derive(Debug)]
pub(crate) struct Guard(std::marker::PhantomData<*const ()>);

/// A [`Guard`] for this thread.
#[inline]
pub(crate) fn guard() -> Guard {
    DEPTH.with(|d| d.set(d.get().wrapping_add(1)));
    Guard(std::marker::PhantomData)
}

/// Whether this thread holds a [`Guard`] (an rpma lock may be held).
#[inline]
pub(crate) fn locked() -> bool {
    DEPTH.with(|d| d.get() & !SOME_KEPT > 0)
}

/// Keeps `work` until this thread's last [`Guard`] is dropped; its `Drop`
/// does the work then.
#[cold]
pub(crate) fn later(work: impl Any) {
    KEPT.with(|k| k.borrow_mut().push(Box::new(work)));
    DEPTH.with(|d| d.set(d.get() | SOME_KEPT));
}

impl Drop for Guard {
    #[inline]
    fn drop(&mut self) {
        // A guard counted one: at least 1 below the flag.
        let left = DEPTH.with(|d| {
            let n = d.get().wrapping_sub(1);
            d.set(n);
            n
        });
        if left == SOME_KEPT {
            run_kept();
        }
    }
}

#[cold]
fn run_kept() {
    // Taken out first: the work may log, drop or lock again.
    loop {
        let kept = KEPT.with(|k| std::mem::take(&mut *k.borrow_mut()));
        if kept.is_empty() {
            DEPTH.with(|d| d.set(d.get() & !SOME_KEPT));
            return;
        }
        drop(kept);
    }
}
