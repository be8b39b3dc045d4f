//! What runs only once this thread holds no rpma lock: the caller's code
//! that rpma would otherwise call under one. A message logged under a lock
//! reaches the log function after it; the last hold of a region released
//! under a lock (a completion retiring the last operation of a region whose
//! `MrLocal` was dropped) drops the region, and the caller's memory value
//! with its own `Drop`, after it.
//!
//! A [`Guard`] is made before a lock under which either can happen and
//! dropped after the lock is let go; while one lives on this thread, such
//! work is kept ([`later`]), and done when the last one is dropped. (The
//! wakers a lock's holder collects are woken the same way, by
//! [`WakeAfter`](crate::wake_after), which also holds a guard.)

use std::any::Any;
use std::cell::{Cell, RefCell};

thread_local! {
    /// How many [`Guard`]s this thread holds.
    static DEPTH: Cell<u32> = const { Cell::new(0) };
    /// The work kept meanwhile, in order: each is done by its `Drop`.
    static KEPT: RefCell<Vec<Box<dyn Any>>> = const { RefCell::new(Vec::new()) };
}

/// See the module's documentation. Not `Send`: it counts this thread's locks.
#[derive(Debug)]
pub(crate) struct Guard(std::marker::PhantomData<*const ()>);

/// A [`Guard`] for this thread.
#[inline]
pub(crate) fn guard() -> Guard {
    DEPTH.with(|d| d.set(d.get().saturating_add(1)));
    Guard(std::marker::PhantomData)
}

/// Whether this thread holds a [`Guard`] (an rpma lock may be held).
#[inline]
pub(crate) fn locked() -> bool {
    DEPTH.with(|d| d.get() > 0)
}

/// Keeps `work` until this thread's last [`Guard`] is dropped; its `Drop`
/// does the work then.
#[cold]
pub(crate) fn later(work: impl Any) {
    KEPT.with(|k| k.borrow_mut().push(Box::new(work)));
}

/// Releases `hold`: dropped now, unless it is the last of its region while
/// a lock is held here, then after the lock ([`later`]).
#[inline]
pub(crate) fn release<T: ?Sized + 'static>(hold: std::sync::Arc<T>) {
    if std::sync::Arc::strong_count(&hold) == 1 && locked() {
        later(hold);
    }
}

impl Drop for Guard {
    #[inline]
    fn drop(&mut self) {
        let left = DEPTH.with(|d| {
            let n = d.get().saturating_sub(1);
            d.set(n);
            n
        });
        if left == 0 && KEPT.with(|k| !k.borrow().is_empty()) {
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
            return;
        }
        drop(kept);
    }
}
