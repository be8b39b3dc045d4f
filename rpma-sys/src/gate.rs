//! One reader at a time for an event channel, each within its own bound.
//!
//! A completion channel, a CM event channel and a device's async-event fd
//! each deliver one event per read, and the objects that read them are
//! shared between threads. A waiter that polls the fd and then reads can
//! lose the event to another waiter and block in the read past its bound.
//! So every read of a channel goes through its [`Gate`]: one reader at a
//! time, the others waiting (each until its own deadline) for the gate to
//! open; a reader with a deadline polls the fd for what is left of it and
//! reads only when the fd is readable, which no one else can then change.
//! A reader without a limit reads at once (blocking, unless the fd is
//! non-blocking). Async readers register a waker instead of sleeping and
//! are woken, after the gate's lock is let go, when it opens.

use std::io;
use std::os::fd::AsFd;
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

#[cfg(loom)]
use loom::sync::atomic::{AtomicU8, Ordering};
#[cfg(loom)]
use loom::sync::{Condvar, Mutex, MutexGuard};
#[cfg(not(loom))]
use std::sync::atomic::{AtomicU8, Ordering};
#[cfg(not(loom))]
use std::sync::{Condvar, Mutex, MutexGuard};

/// How long a read may wait for an event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Bound {
    /// Take an event only if one is there now; never sleep.
    Now,
    /// Wait until this instant at most.
    Until(Instant),
    /// No limit: read at once (a blocking read on a blocking fd).
    Never,
}

impl Bound {
    /// At most `timeout` from now; a timeout too long to represent as an
    /// instant (`Duration::MAX`) is no limit.
    pub fn after(timeout: Duration) -> Bound {
        Instant::now().checked_add(timeout).map_or(Bound::Never, Bound::Until)
    }
}

/// A reader holds the gate.
const READING: u8 = 1;
/// Set only with [`READING`]: someone waits (asleep on `open`, or a waker),
/// so the reader leaves through the lock to let them in.
const WAITED: u8 = 2;

/// See the module's documentation.
///
/// An uncontended reader takes and leaves the gate with one atomic
/// compare-and-swap each; the lock and the condition variable serve only
/// readers that find it taken.
#[derive(Debug, Default)]
pub struct Gate {
    /// [`READING`], and [`WAITED`] while someone waits: 0, `READING` or
    /// both. Changed from `READING` to `READING | WAITED` and back to 0
    /// from it only under `state`'s lock.
    flag: AtomicU8,
    state: Mutex<State>,
    open: Condvar,
}

#[derive(Debug, Default)]
struct State {
    /// Threads asleep on `open`.
    sleepers: usize,
    /// Async readers to wake when the gate opens.
    wakers: Vec<Waker>,
}

/// The gate, held: dropped, it opens the gate for the next reader.
#[derive(Debug)]
pub struct Reader<'a>(&'a Gate);

/// What a reader that found the gate taken does.
enum Wait<'c, 'w> {
    /// Sleep until this bound at most.
    Sleep(Bound),
    /// Leave this waker.
    Wake(&'c mut Context<'w>),
}

impl Gate {
    /// A new, open gate.
    pub fn new() -> Gate {
        Gate::default()
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Takes the open gate without waiting.
    #[inline(always)]
    fn try_take(&self) -> bool {
        self.flag.compare_exchange(0, READING, Ordering::Acquire, Ordering::Relaxed).is_ok()
    }

    /// Takes the gate, waiting for it within `bound`; `None` when the bound
    /// passed first ([`Bound::Now`]: when another reader holds it).
    #[inline]
    pub fn enter(&self, bound: Bound) -> Option<Reader<'_>> {
        if self.try_take() {
            return Some(Reader(self));
        }
        if bound == Bound::Now {
            return None;
        }
        self.enter_slow(Wait::Sleep(bound)).ok()
    }

    /// Takes the gate if it is open; else `cx`'s waker is woken when it
    /// opens.
    pub fn poll_enter(&self, cx: &mut Context<'_>) -> Poll<Reader<'_>> {
        if self.try_take() {
            return Poll::Ready(Reader(self));
        }
        match self.enter_slow(Wait::Wake(cx)) {
            Ok(r) => Poll::Ready(r),
            Err(()) => Poll::Pending,
        }
    }

    /// The gate was taken: under the lock, takes it once it is open, or
    /// marks it [`WAITED`] and sleeps (each time within the bound) or
    /// leaves the waker. `Err` when the bound passed or a waker was left.
    #[cold]
    #[inline(never)]
    fn enter_slow(&self, mut how: Wait<'_, '_>) -> Result<Reader<'_>, ()> {
        let mut s = self.lock();
        loop {
            let cur = self.flag.load(Ordering::Relaxed);
            if cur & READING == 0 {
                // Open: taken, still marked when others wait.
                let others = s.sleepers > 0 || !s.wakers.is_empty();
                let new = if others { READING | WAITED } else { READING };
                if self.flag.compare_exchange(cur, new, Ordering::Acquire, Ordering::Relaxed).is_ok() {
                    return Ok(Reader(self));
                }
                continue;
            }
            if cur & WAITED == 0
                && self.flag.compare_exchange(cur, cur | WAITED, Ordering::Relaxed, Ordering::Relaxed).is_err()
            {
                // Opened (or marked) meanwhile: look again.
                continue;
            }
            let bound = match &mut how {
                Wait::Wake(cx) => {
                    if !s.wakers.iter().any(|w| w.will_wake(cx.waker())) {
                        s.wakers.push(cx.waker().clone());
                    }
                    return Err(());
                }
                Wait::Sleep(bound) => *bound,
            };
            let left = match bound {
                Bound::Now => return Err(()),
                Bound::Never => None,
                Bound::Until(d) => match d.saturating_duration_since(Instant::now()) {
                    left if left.is_zero() => return Err(()),
                    left => Some(left),
                },
            };
            s.sleepers += 1;
            s = match left {
                None => self.open.wait(s).unwrap_or_else(|p| p.into_inner()),
                Some(left) => self.open.wait_timeout(s, left).unwrap_or_else(|p| p.into_inner()).0,
            };
            s.sleepers -= 1;
        }
    }

    /// Opens the gate: one compare-and-swap when nobody waits, else through
    /// the lock, waking the sleepers and (after the lock) the wakers.
    #[inline(always)]
    fn leave(&self) {
        if self.flag.compare_exchange(READING, 0, Ordering::Release, Ordering::Relaxed).is_err() {
            self.leave_slow();
        }
    }

    #[cold]
    #[inline(never)]
    fn leave_slow(&self) {
        let mut s = self.lock();
        self.flag.store(0, Ordering::Release);
        let wake = std::mem::take(&mut s.wakers);
        let sleepers = s.sleepers > 0;
        drop(s);
        if sleepers {
            self.open.notify_all();
        }
        // Outside the lock: a waker is the caller's code.
        wake.into_iter().for_each(Waker::wake);
    }

    /// Reads one event with `read` as the only reader, within `bound`:
    /// `Ok(None)` when none came in time. With a deadline (or
    /// [`Bound::Now`]) `read` runs only once `fd` is readable.
    ///
    /// # Errors
    /// The errno of `poll`, or `read`'s error.
    #[inline(always)]
    pub fn read<R>(&self, fd: &impl AsFd, bound: Bound, read: impl FnOnce() -> io::Result<R>) -> io::Result<Option<R>> {
        let Some(_reader) = self.enter(bound) else { return Ok(None) };
        read_within(fd, bound, read)
    }

    /// [`read`](Gate::read) for an async reader, without sleeping:
    /// `Pending` while another reader holds the gate (`cx` is woken when it
    /// opens), else the event if `fd` is readable now, `Ok(None)` if not.
    ///
    /// # Errors
    /// As [`read`](Gate::read).
    pub fn poll_read<R>(
        &self,
        fd: &impl AsFd,
        cx: &mut Context<'_>,
        read: impl FnOnce() -> io::Result<R>,
    ) -> Poll<io::Result<Option<R>>> {
        let _reader = std::task::ready!(self.poll_enter(cx));
        Poll::Ready(read_within(fd, Bound::Now, read))
    }
}

/// `read` once `fd` is readable within `bound` (at once without a limit,
/// where `fd` is not even looked at).
#[inline(always)]
fn read_within<R>(fd: &impl AsFd, bound: Bound, read: impl FnOnce() -> io::Result<R>) -> io::Result<Option<R>> {
    let left = match bound {
        Bound::Never => return read().map(Some),
        Bound::Now => Duration::ZERO,
        Bound::Until(d) => d.saturating_duration_since(Instant::now()),
    };
    if !crate::poll_readable(fd.as_fd(), Some(left))? {
        return Ok(None);
    }
    read().map(Some)
}

impl Drop for Reader<'_> {
    #[inline(always)]
    fn drop(&mut self) {
        self.0.leave();
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn a_waiter_gives_up_at_its_deadline_while_another_reads() {
        let g = Arc::new(Gate::new());
        let held = g.enter(Bound::Never).unwrap();
        assert!(g.enter(Bound::Now).is_none(), "taken: no wait");
        let t0 = Instant::now();
        assert!(g.enter(Bound::after(Duration::from_millis(50))).is_none());
        let waited = t0.elapsed();
        assert!(waited >= Duration::from_millis(50) && waited < Duration::from_secs(5), "{waited:?}");
        // An unbounded waiter gets the gate once it opens.
        let g2 = g.clone();
        let t = std::thread::spawn(move || g2.enter(Bound::Never).is_some());
        std::thread::sleep(Duration::from_millis(20));
        drop(held);
        assert!(t.join().unwrap());
        assert!(g.enter(Bound::Now).is_some(), "open again");
    }

    #[test]
    fn an_async_reader_is_woken_when_the_gate_opens() {
        struct Flag(std::sync::atomic::AtomicBool);
        impl std::task::Wake for Flag {
            fn wake(self: Arc<Self>) {
                self.0.store(true, std::sync::atomic::Ordering::SeqCst);
            }
        }
        let g = Gate::new();
        let flag = Arc::new(Flag(false.into()));
        let waker = Waker::from(flag.clone());
        let mut cx = Context::from_waker(&waker);
        let held = g.enter(Bound::Never).unwrap();
        assert!(g.poll_enter(&mut cx).is_pending());
        assert!(g.poll_enter(&mut cx).is_pending(), "registered once");
        assert!(!flag.0.load(std::sync::atomic::Ordering::SeqCst));
        drop(held);
        assert!(flag.0.load(std::sync::atomic::Ordering::SeqCst), "woken");
        assert!(g.poll_enter(&mut cx).is_ready());
    }

    #[test]
    fn a_bounded_read_of_a_quiet_fd_returns_in_time() {
        let (a, _b) = std::os::unix::net::UnixStream::pair().unwrap();
        let g = Gate::new();
        let t0 = Instant::now();
        let got = g.read(&a, Bound::after(Duration::from_millis(30)), || -> io::Result<()> {
            panic!("read without an event")
        });
        assert!(matches!(got, Ok(None)));
        assert!(t0.elapsed() < Duration::from_secs(5));
    }
}

/// Model checks (`harness/loom`): readers of one channel, some sleeping and
/// some async, never read together and are never left waiting on an open
/// gate (a lost wake-up shows as a deadlock or a waker never called).
#[cfg(all(test, loom))]
mod loom_models {
    use super::*;
    use loom::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    use loom::sync::Arc;

    /// A waker that records that it was woken.
    struct Flag(AtomicBool);
    impl std::task::Wake for Flag {
        fn wake(self: std::sync::Arc<Self>) {
            self.0.store(true, Ordering::SeqCst);
        }
    }

    #[test]
    fn loom_gate_one_reader_at_a_time_and_no_lost_wakeup() {
        loom::model(|| {
            let g = Arc::new(Gate::new());
            let inside = Arc::new(AtomicUsize::new(0));
            let threads: Vec<_> = (0..2)
                .map(|_| {
                    let (g, inside) = (g.clone(), inside.clone());
                    loom::thread::spawn(move || {
                        let r = g.enter(Bound::Never).expect("no bound");
                        assert_eq!(inside.fetch_add(1, Ordering::SeqCst), 0, "two readers");
                        inside.fetch_sub(1, Ordering::SeqCst);
                        drop(r);
                    })
                })
                .collect();
            // A reader that does not wait: it reads or it does not.
            if let Some(r) = g.enter(Bound::Now) {
                assert_eq!(inside.fetch_add(1, Ordering::SeqCst), 0, "two readers");
                inside.fetch_sub(1, Ordering::SeqCst);
                drop(r);
            }
            threads.into_iter().for_each(|t| t.join().unwrap());
        });
    }

    #[test]
    fn loom_gate_lets_in_a_sleeper_and_an_async_reader_after_its_holder() {
        loom::model(|| {
            let g = Arc::new(Gate::new());
            let held = g.enter(Bound::Never).expect("open");
            let g2 = g.clone();
            let sleeper = loom::thread::spawn(move || drop(g2.enter(Bound::Never).expect("no bound")));
            let flag = std::sync::Arc::new(Flag(AtomicBool::new(false)));
            let waker = Waker::from(flag.clone());
            let mut cx = Context::from_waker(&waker);
            let pending = g.poll_enter(&mut cx).is_pending();
            assert!(pending, "held: the async reader waits");
            drop(held);
            sleeper.join().unwrap();
            assert!(flag.0.load(Ordering::SeqCst), "the async reader was not woken");
            assert!(g.poll_enter(&mut cx).is_ready(), "open again after both");
        });
    }

    #[test]
    fn loom_gate_wakes_an_async_reader_that_found_it_taken() {
        loom::model(|| {
            let g = Arc::new(Gate::new());
            let g2 = g.clone();
            let holder = loom::thread::spawn(move || drop(g2.enter(Bound::Never)));
            let flag = std::sync::Arc::new(Flag(AtomicBool::new(false)));
            let waker = Waker::from(flag.clone());
            let mut cx = Context::from_waker(&waker);
            match g.poll_enter(&mut cx) {
                Poll::Ready(r) => drop(r),
                Poll::Pending => {
                    holder.join().unwrap();
                    assert!(flag.0.load(Ordering::SeqCst), "the gate opened without waking the async reader");
                    assert!(g.poll_enter(&mut cx).is_ready());
                    return;
                }
            }
            holder.join().unwrap();
        });
    }
}
