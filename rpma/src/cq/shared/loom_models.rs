//! The routes' loom models (`harness/loom`). The first: a connection's route is removed (its
//! drain, its purge of what was set aside for it) while another thread
//! reaps the shared CQ. Whatever the interleaving, each completion is
//! handed out once, a completion of the removed QP only while its route
//! still existed (routed to its own tracker, never as a stranger's), and
//! nothing of it is left behind.

use super::*;
use crate::inflight::SendOpRec;
use std::collections::VecDeque;

/// A CQ the model fills.
struct Fake {
    q: loom::sync::Mutex<VecDeque<PolledWc>>,
    windows: Windows,
}

impl Source for Fake {
    fn poll_one(&self) -> std::io::Result<Option<PolledWc>> {
        Ok(self.q.lock().unwrap().pop_front())
    }
    fn poll_each(&self, max: usize, mut f: impl FnMut(usize, &PolledWc)) -> std::io::Result<usize> {
        let mut n = 0;
        while n < max {
            let Some(w) = self.q.lock().unwrap().pop_front() else { break };
            f(n, &w);
            n += 1;
        }
        Ok(n)
    }
    fn windows(&self) -> &Windows {
        &self.windows
    }
}

/// Trackers with one signaled write posted (context `ctx`, sequence 0).
fn posted(ctx: u64) -> Trackers {
    let send = Arc::new(SendTracker::new(4).unwrap());
    let rec = SendOpRec { ctx, kind: CompletionOp::Write, signaled: true, hold: None, confirm: None };
    send.post_with(rec, |_| Ok(())).unwrap();
    Trackers { send, recv: Arc::new(RecvTracker::new(false, 1).unwrap()), srq_recv: None, entries: 1, srq_entries: 0 }
}

const X: u32 = 1;
const Y: u32 = 2;

/// Runs `model` under loom, up to 3 preemptions, with the routes of
/// QPs X (context 10) and Y (context 20), one write posted on each.
fn check(model: impl Fn(Arc<Routes>) + Sync + Send + 'static) {
    let mut b = loom::model::Builder::new();
    b.preemption_bound = Some(3);
    b.check(move || {
        let routes = Arc::new(Routes::new(8).unwrap());
        routes.add(X, posted(10)).unwrap();
        routes.add(Y, posted(20)).unwrap();
        model(routes)
    });
}

/// A write's completion on QP `qp`.
fn wc(qp: u32) -> PolledWc {
    PolledWc::new(crate::wrid::send(0), qp, 0, 1)
}

#[test]
fn loom_route_removed_while_another_thread_reaps() {
    check(|routes| {
        // X's completion was set aside by an earlier drain; Y's is in
        // the CQ.
        lock(&routes.stash).push_back(wc(X));
        let cq = Arc::new(Fake { q: loom::sync::Mutex::new(VecDeque::from([wc(Y)])), windows: Windows::default() });
        let (r2, cq2) = (routes.clone(), cq.clone());
        let dropper = loom::thread::spawn(move || r2.remove(&*cq2, X));
        let mut got = Vec::new();
        if let Ok(Some(c)) = routes.get_completion(&*cq) {
            got.push(c);
        }
        dropper.join().unwrap();
        while let Ok(Some(c)) = routes.get_completion(&*cq) {
            got.push(c);
        }
        let of = |q| got.iter().filter(|c| c.qp_num == q).collect::<Vec<_>>();
        assert!(of(X).len() <= 1 && of(X).iter().all(|c| c.op == CompletionOp::Write && c.op_context == 10));
        assert_eq!(of(Y).iter().map(|c| (c.op, c.op_context)).collect::<Vec<_>>(), [(CompletionOp::Write, 20)]);
        assert!(lock(&routes.stash).is_empty(), "nothing of X left set aside");
        assert_eq!(routes.read().len(), 1);
    });
}

/// An async reaper drains the CQ and sleeps while a connection it does
/// not route (never attached to it) is dropped, whose drain sets the
/// reaper's connection's completion aside: the reaper gets it, or is
/// nudged to drain again. Without the nudge it slept with the
/// completion set aside and nothing to wake it.
#[test]
fn loom_a_drain_that_sets_aside_wakes_the_reaper() {
    use std::task::{Context, Poll, Waker};
    check(|routes| {
        let nudge = std::sync::Arc::new(crate::nudge::Nudge::default());
        routes.on_stash(std::sync::Arc::downgrade(&nudge));
        // X's completion is in the CQ, and Y (not the reaper's) leaves.
        let cq = Arc::new(Fake { q: loom::sync::Mutex::new(VecDeque::from([wc(X)])), windows: Windows::default() });
        let (r2, cq2) = (routes.clone(), cq.clone());
        let dropper = loom::thread::spawn(move || r2.remove(&*cq2, Y));
        // The reaper: drain, then sleep unless nudged.
        let mut got = 0;
        let mut cx = Context::from_waker(Waker::noop());
        loop {
            while let Ok(Some(_)) = routes.get_completion(&*cq) {
                got += 1;
            }
            if nudge.poll(&mut cx) == Poll::Pending {
                break; // asleep
            }
        }
        dropper.join().unwrap();
        // Asleep with X's completion set aside: only a nudge wakes it.
        if got == 0 {
            assert!(nudge.poll(&mut cx).is_ready(), "the reaper sleeps with a completion set aside");
            assert!(matches!(routes.get_completion(&*cq), Ok(Some(_))));
        }
    });
}
