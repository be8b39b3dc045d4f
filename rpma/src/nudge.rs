//! A flag and a waker slot that wake one sleeping task for an event that
//! raises nothing on its fd: [`AsyncSharedCq`](crate::aio::AsyncSharedCq)'s
//! reaper is nudged when a connection leaves (its drain may have set
//! completions aside, which no channel event announces).
//!
//! Flag and waker share one lock, so a nudge either finds the sleeper's
//! waker or leaves the flag its next poll sees. (A lock-free flag beside
//! the locked waker is correct in C11 too, but loom 0.7 lets a swap read a
//! value older than a store that happens before it, so its model of that
//! form reports a lost wake-up; nudges are rare and the reaper already
//! took a lock per sleep.) The loom model below checks it.

#[cfg(loom)]
use loom::sync::Mutex;
#[cfg(not(loom))]
use std::sync::Mutex;
use std::task::{Context, Poll, Waker};

/// See the module's documentation.
#[derive(Debug, Default)]
pub(crate) struct Nudge {
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    nudged: bool,
    waker: Option<Waker>,
}

impl Nudge {
    /// Wakes the sleeper, or makes its next [`poll`](Nudge::poll) ready.
    pub(crate) fn nudge(&self) {
        let waker = {
            let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
            s.nudged = true;
            s.waker.take()
        };
        if let Some(w) = waker {
            w.wake();
        }
    }

    /// Ready (once) when nudged since the last ready poll; otherwise keeps
    /// `cx`'s waker for the next nudge.
    pub(crate) fn poll(&self, cx: &mut Context<'_>) -> Poll<()> {
        let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        if std::mem::take(&mut s.nudged) {
            return Poll::Ready(());
        }
        match &s.waker {
            Some(w) if w.will_wake(cx.waker()) => {}
            _ => s.waker = Some(cx.waker().clone()),
        }
        Poll::Pending
    }
}

/// Model checks (`harness/loom`): connections leave on other threads while
/// the reaper drains and sleeps; it must wake after the last leaver's
/// nudge (a lost wake-up leaves `block_on` parked, which loom reports as a
/// deadlock).
#[cfg(all(test, loom))]
mod loom_models {
    use super::Nudge;
    use loom::sync::atomic::{AtomicUsize, Ordering};
    use loom::sync::Arc;
    use std::future::poll_fn;

    #[test]
    fn loom_a_nudge_is_never_lost_to_a_sleeping_reaper() {
        loom::model(|| {
            let nudge = Arc::new(Nudge::default());
            let left = Arc::new(AtomicUsize::new(0));
            let leavers: Vec<_> = (0..2)
                .map(|_| {
                    let (nudge, left) = (nudge.clone(), left.clone());
                    loom::thread::spawn(move || {
                        // A connection leaves: what its drain set aside is
                        // there before the nudge.
                        left.fetch_add(1, Ordering::Release);
                        nudge.nudge();
                    })
                })
                .collect();
            // The reaper: drain (here, count who left), then sleep until nudged.
            while left.load(Ordering::Acquire) < 2 {
                loom::future::block_on(poll_fn(|cx| nudge.poll(cx)));
            }
            for t in leavers {
                t.join().unwrap();
            }
        });
    }
}
