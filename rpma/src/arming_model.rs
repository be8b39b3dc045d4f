//! A loom model of how an [`AsyncConn`](crate::aio::AsyncConn)'s CQs are
//! armed (`aio::reaper`): the reaper takes a CQ's event without re-arming
//! it and arms it again only while a future waits; a future about to sleep
//! arms the CQs not known armed and looks into them once more. The code
//! itself needs a device (and tokio, which loom cannot build), so the
//! model runs the protocol over a CQ the model keeps: its completions, the
//! one-shot notification `ibv_req_notify_cq` arms, and the channel's
//! events. A lost wake-up leaves the waiter asleep with every other thread
//! done or asleep too, which loom reports as a deadlock.

use loom::sync::{Arc, Condvar, Mutex};
use std::collections::VecDeque;

/// The device's and kernel's side of one CQ.
#[derive(Default)]
struct Kernel {
    wcs: VecDeque<u64>,
    /// Armed: the next completion raises an event (and disarms).
    notify: bool,
    events: usize,
    stop: bool,
}

/// The routing table's part: whether the CQ is known armed, whether an
/// operation waits (its slot taken), and what was routed to it.
#[derive(Default)]
struct Table {
    armed: bool,
    waiting: bool,
    got: Option<u64>,
}

struct Model {
    k: Mutex<Kernel>,
    event: Condvar,
    t: Mutex<Table>,
    routed: Condvar,
    /// The waiter's look after arming (the protocol's; `false` to see the
    /// model find the lost wake-up without it).
    look_after_arming: bool,
}

impl Model {
    fn new(kernel_armed: bool, look_after_arming: bool) -> Model {
        Model {
            k: Mutex::new(Kernel { notify: kernel_armed, ..Kernel::default() }),
            event: Condvar::new(),
            t: Mutex::new(Table::default()),
            routed: Condvar::new(),
            look_after_arming,
        }
    }

    /// The device completes operation `ctx`.
    fn complete(&self, ctx: u64) {
        let mut k = self.k.lock().unwrap();
        k.wcs.push_back(ctx);
        if k.notify {
            k.notify = false;
            k.events += 1;
            self.event.notify_one();
        }
    }

    fn poll(&self) -> Option<u64> {
        self.k.lock().unwrap().wcs.pop_front()
    }

    fn arm(&self) {
        self.k.lock().unwrap().notify = true;
    }

    /// Routes every completion in the CQ to the waiting operation (a
    /// completion with nothing waiting for it would be lost).
    fn drain(&self, t: &mut Table) {
        while let Some(wc) = self.poll() {
            assert!(t.waiting && t.got.is_none(), "completion {wc} routed with no operation waiting");
            t.got = Some(wc);
            t.waiting = false;
            self.routed.notify_one();
        }
    }

    /// An awaited operation: posted and looked for under one hold of the
    /// table's lock (`AsyncConn::awaited`); if not there, its slot taken,
    /// the lock let go, then `Shared::poll_routed`: a look, the check,
    /// the arming and the second look, then sleep until routed.
    fn awaited(this: &Arc<Self>, ctx: u64) -> (u64, loom::thread::JoinHandle<()>) {
        let (s, m) = (&**this, this.clone());
        let mut t = s.t.lock().unwrap();
        let device = loom::thread::spawn(move || m.complete(ctx));
        if let Some(wc) = s.poll() {
            return (wc, device);
        }
        t.waiting = true;
        drop(t);
        let mut t = s.t.lock().unwrap();
        for first in [true, false] {
            if t.waiting {
                if let Some(wc) = s.poll() {
                    t.waiting = false;
                    return (wc, device);
                }
            }
            if let Some(wc) = t.got.take() {
                return (wc, device);
            }
            if !first || t.armed {
                break;
            }
            s.arm();
            t.armed = true;
            if !s.look_after_arming {
                break;
            }
        }
        while t.got.is_none() {
            t = s.routed.wait(t).unwrap();
        }
        (t.got.take().unwrap(), device)
    }

    /// The reaper: sleeps until an event, takes it (the CQ no longer
    /// armed), drains, and while an operation waits arms and drains again
    /// (`Shared::after_events`).
    fn reap(&self) {
        loop {
            {
                let mut k = self.k.lock().unwrap();
                while k.events == 0 && !k.stop {
                    k = self.event.wait(k).unwrap();
                }
                if k.events == 0 {
                    return;
                }
                k.events -= 1;
            }
            let mut t = self.t.lock().unwrap();
            t.armed = false;
            self.drain(&mut t);
            if t.waiting && !t.armed {
                self.arm();
                t.armed = true;
                self.drain(&mut t);
            }
        }
    }
}

/// Two operations awaited one after the other, the device completing each
/// at any point after its post, the reaper running beside them; the CQ
/// armed at creation or not (the table does not know).
fn run(kernel_armed: bool, look_after_arming: bool) {
    loom::model(move || {
        let m = Arc::new(Model::new(kernel_armed, look_after_arming));
        let r = m.clone();
        let reaper = loom::thread::spawn(move || r.reap());
        for ctx in [1, 2] {
            let (wc, device) = Model::awaited(&m, ctx);
            assert_eq!(wc, ctx);
            device.join().unwrap();
        }
        {
            let mut k = m.k.lock().unwrap();
            k.stop = true;
            m.event.notify_one();
        }
        reaper.join().unwrap();
        assert!(m.k.lock().unwrap().wcs.is_empty());
    });
}

/// Without the waiter's look after arming (`run(false, false)`) loom
/// reports the lost wake-up, a deadlock: the waiter asleep, the reaper
/// waiting for an event the completion never raised (checked by hand; a
/// deadlock aborts loom's process, so it is no `should_panic` test).
#[test]
fn loom_async_cq_arming_never_loses_a_wakeup() {
    run(false, true);
    run(true, true);
}
