//! The memory windows of one protection domain, told of the invalidations
//! the device reports. A successful receive completion that the device
//! marks `IBV_WC_WITH_INV` is the device's word that the window with that
//! rkey no longer reaches its region; the completion queues of a peer's
//! connections tell the peer's [`Windows`] as they poll such a completion,
//! and the window's binding ends there. Nothing the user hands in can end a
//! binding: a [`Completion`](crate::Completion) is plain data anyone can
//! build or copy, so it is never taken as evidence.

use crate::error::{Error, Result};
use std::sync::{Arc, Weak};
// loom's mutex under `--cfg loom`, for the window model in `mw`.
#[cfg(loom)]
use loom::sync::Mutex;
#[cfg(not(loom))]
use std::sync::Mutex;

/// A window that may hold the binding an invalidation names.
pub(crate) trait Invalidate: Send + Sync {
    /// The device invalidated `rkey`, reported on QP `qp_num`: ends the
    /// binding if it is this window's, made on that QP, and hands it back
    /// (the caller drops it after its locks: it may hold a region's last
    /// reference).
    fn invalidated(&self, qp_num: u32, rkey: u32) -> Option<Box<dyn Send>>;
}

/// The windows of one protection domain (a [`Peer`](crate::Peer)).
///
/// A report can be polled long after the device made it (a receive CQ
/// nobody polls). It is matched to a binding by QP and rkey, and a type 2
/// window's rkey is reused after 256 binds, or by a new window once the
/// old one is deallocated. A binding ends only by its own invalidation's
/// successful completion (after which no report of it can succeed) or by
/// its report (one per binding), so a report still unpolled belongs to a
/// binding that has not ended, with one exception: a window deallocated
/// while bound. Its QP and rkey are kept as *stale*: a report naming them
/// is absorbed, and no binding on that QP is given that rkey while it is
/// kept ([`is_stale`](Windows::is_stale)). A report therefore never ends a
/// newer binding. Kept until absorbed, or until the QP's connection is
/// gone with its CQs drained and no SRQ that could still hold its reports.
#[derive(Default)]
pub(crate) struct Windows(Mutex<State>);

#[derive(Default)]
struct State {
    live: Vec<Weak<dyn Invalidate>>,
    /// (QP number, rkey) of type 2 windows deallocated while bound.
    stale: Vec<(u32, u32)>,
    /// A stale pair could not be kept (no memory): from then on reports end
    /// no binding (the bindings end by their own invalidation or with
    /// their window, a leak at worst).
    lost: bool,
}

impl Windows {
    fn lock(&self) -> impl std::ops::DerefMut<Target = State> + '_ {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Tracks `w` (dropped windows' entries are cleared on the way).
    ///
    /// # Errors
    /// [`Error::NoMem`] when the list cannot grow.
    pub(crate) fn add(&self, w: Arc<dyn Invalidate>) -> Result<()> {
        let mut s = self.lock();
        s.live.retain(|x| x.strong_count() > 0);
        s.live.try_reserve(1).map_err(|_| Error::nomem("cannot track another memory window"))?;
        s.live.push(Arc::downgrade(&w));
        Ok(())
    }

    /// The device reported rkey `rkey` invalidated by a received
    /// send-with-invalidate on QP `qp_num` of this protection domain: the
    /// window bound there with that rkey no longer reaches its region (a
    /// stale pair absorbs the report instead).
    #[cold]
    #[inline(never)]
    pub(crate) fn invalidated(&self, qp_num: u32, rkey: u32) {
        let ended = {
            let mut s = self.lock();
            if let Some(i) = s.stale.iter().position(|&k| k == (qp_num, rkey)) {
                s.stale.swap_remove(i);
                return;
            }
            if s.lost {
                return;
            }
            s.live.iter().filter_map(Weak::upgrade).find_map(|w| w.invalidated(qp_num, rkey))
        };
        // After the lock: the binding may hold a region's last reference.
        drop(ended);
    }

    /// A type 2 window bound on QP `qp_num` with `rkey` was deallocated
    /// while bound: a report of that binding may still be polled.
    pub(crate) fn keep_stale(&self, qp_num: u32, rkey: u32) {
        let mut s = self.lock();
        if s.stale.try_reserve(1).is_ok() {
            s.stale.push((qp_num, rkey));
        } else {
            s.lost = true;
        }
    }

    /// Whether a binding on QP `qp_num` must not take `rkey`.
    pub(crate) fn is_stale(&self, qp_num: u32, rkey: u32) -> bool {
        self.lock().stale.contains(&(qp_num, rkey))
    }

    /// QP `qp_num` is gone, its CQs drained, and none of its reports can
    /// be polled any more: its stale pairs go.
    pub(crate) fn forget_qp(&self, qp_num: u32) {
        self.lock().stale.retain(|&(q, _)| q != qp_num);
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// A window bound on QP 1 with rkey 7, counting the reports that ended it.
    struct Bound(AtomicUsize);
    impl Invalidate for Bound {
        fn invalidated(&self, qp_num: u32, rkey: u32) -> Option<Box<dyn Send>> {
            let mine = (qp_num, rkey) == (1, 7);
            if mine {
                self.0.fetch_add(1, Ordering::SeqCst);
            }
            mine.then(|| Box::new(()) as Box<dyn Send>)
        }
    }

    #[test]
    fn a_stale_report_never_ends_a_newer_binding() {
        let w = Windows::default();
        // A window bound on QP 1 with rkey 7 was deallocated while bound.
        w.keep_stale(1, 7);
        assert!(w.is_stale(1, 7) && !w.is_stale(2, 7) && !w.is_stale(1, 8));
        let b = Arc::new(Bound(AtomicUsize::new(0)));
        w.add(b.clone()).unwrap();
        // Its late report is absorbed, not taken as the new binding's.
        w.invalidated(1, 7);
        assert_eq!(b.0.load(Ordering::SeqCst), 0);
        assert!(!w.is_stale(1, 7), "absorbed once");
        // Another QP's report of the same rkey is not this binding's.
        w.invalidated(2, 7);
        assert_eq!(b.0.load(Ordering::SeqCst), 0);
        w.invalidated(1, 7);
        assert_eq!(b.0.load(Ordering::SeqCst), 1);
        w.keep_stale(3, 9);
        w.forget_qp(3);
        assert!(!w.is_stale(3, 9));
    }
}
