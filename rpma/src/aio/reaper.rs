//! What an [`AsyncConn`](super::AsyncConn)'s handle, its futures and its
//! reaper share (the connection, its channels' registrations, the routing
//! table under whose lock its CQs are polled), and the reaper task (who
//! polls the CQs when: the module doc of `aio::conn`).

use super::router::{ctx_of, reaper_stopped, Router};
use crate::conn::ConnEvent;
use crate::cq::{Completion, Cq};
use crate::error::{Error, Result};
use crate::inflight::lock::SpinLock;
use crate::wake_after::WakeAfter;
use crate::Conn;
use std::future::poll_fn;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, RawFd};
use std::sync::Arc;
use std::task::{Context, Poll};
use tokio::io::unix::AsyncFd;

/// A CQ channel's fd, registered with tokio's reactor. The CQ outlives it
/// ([`Shared`]'s field order).
#[derive(Debug)]
pub(super) struct ChannelFd(RawFd);

/// `fd` made non-blocking and registered with the current runtime for
/// reading, by number: the owner of the registration keeps the fd open
/// (field order) while it lives.
pub(super) fn register_channel(fd: BorrowedFd<'_>, what: &str) -> Result<AsyncFd<ChannelFd>> {
    // SAFETY: the fd stays open and names the same channel while the
    // registration lives: its owner (`Shared`, `Hub`) drops its
    // registrations before the object that owns the fds (field order).
    unsafe { super::register_as(fd, ChannelFd(fd.as_raw_fd()), what) }
}

impl AsRawFd for ChannelFd {
    fn as_raw_fd(&self) -> RawFd {
        self.0
    }
}

/// The routing table, locked: the wakers routing collected run once the
/// lock is let go ([`WakeAfter`]).
pub(super) type RouterGuard<'a> = WakeAfter<'a, Router>;

/// What the handle and its reaper share. Field order: the registrations
/// go before the connection whose fds they name.
#[derive(Debug)]
pub(super) struct Shared {
    /// The CQ channels the connection's own reaper waits on (none when an
    /// [`AsyncSharedCq`](super::AsyncSharedCq) reaps its CQ): one per CQ,
    /// or the connection's shared completion channel alone.
    fds: Vec<AsyncFd<ChannelFd>>,
    /// How many CQs the connection's own reaper polls (0 on a hub).
    cqs: usize,
    /// `fds` is the connection's shared completion channel.
    one_channel: bool,
    events: AsyncFd<ChannelFd>,
    /// The routing table; also the lock under which the CQs are polled.
    /// A test-and-set lock: held for a poll, a route or a slot's change.
    router: SpinLock<Router>,
    /// A closing event (anything but `Established`) was taken.
    pub(super) closing_seen: std::sync::atomic::AtomicBool,
    pub(super) conn: Conn,
}

impl Shared {
    /// The state of `conn`; registers its event channel and, when its own
    /// reaper polls its CQs (`own_reaper`; else a hub's reaper does), their
    /// channels: each CQ's, or the connection's shared channel alone.
    pub(super) fn new(conn: Conn, own_reaper: bool) -> Result<Arc<Shared>> {
        let cqs = if own_reaper { 1 + usize::from(conn.rcq().is_some()) } else { 0 };
        let (fds, one_channel) = match (own_reaper, conn.compl_fd()) {
            (false, _) => (Vec::new(), false),
            (true, Ok(fd)) => (vec![register_channel(fd, "shared completion channel")?], true),
            (true, Err(_)) => {
                let mut fds = vec![register_channel(conn.cq().as_fd(), "completion channel")?];
                if let Some(r) = conn.rcq() {
                    fds.push(register_channel(r.as_fd(), "receive completion channel")?);
                }
                (fds, false)
            }
        };
        let events = register_channel(conn.as_fd(), "connection event")?;
        let router = SpinLock::new(Router::default());
        Ok(Arc::new(Shared { fds, cqs, one_channel, events, router, closing_seen: Default::default(), conn }))
    }

    /// The routing table, locked; the wakers it collected run (and the
    /// messages logged under it are emitted) once the lock is let go.
    #[inline]
    pub(super) fn router(&self) -> RouterGuard<'_> {
        WakeAfter::lock(&self.router)
    }

    /// The CQs: the connection's CQ, then its receive CQ.
    pub(super) fn cq(&self, i: usize) -> &Cq {
        match i {
            0 => self.conn.cq(),
            _ => self.conn.rcq().unwrap_or(self.conn.cq()),
        }
    }

    pub(super) fn poll_completion(&self, cx: &mut Context<'_>) -> Poll<Result<Completion>> {
        self.poll_routed(cx, None, |r, cx| {
            if let Some(wc) = r.user.pop_front() {
                return Poll::Ready(Ok(wc));
            }
            if let Some(why) = &r.failed {
                return Poll::Ready(Err(reaper_stopped(why)));
            }
            r.wait_user(cx);
            Poll::Pending
        })
    }

    /// Runs `check` (which registers its waker when it returns pending)
    /// under the routing lock; first, when what it waits for (the awaited
    /// operation in slot `own`, else a completion for
    /// [`AsyncConn::next_completion`]) is not routed yet, polls the CQs
    /// ([`poll_cqs`](Shared::poll_cqs)); `own`'s completion is taken at
    /// once. A waiter that would sleep arms the CQs not known armed
    /// ([`arm`](Shared::arm)) and then looks and checks once more.
    ///
    /// Cooperative with tokio's scheduler: each call spends a unit of the
    /// task's budget, so a task whose operations complete at once still
    /// yields to the others.
    #[inline]
    pub(super) fn poll_routed(
        &self,
        cx: &mut Context<'_>,
        own: Option<(usize, u64)>,
        mut check: impl FnMut(&mut Router, &mut Context<'_>) -> Poll<Result<Completion>>,
    ) -> Poll<Result<Completion>> {
        let coop = std::task::ready!(tokio::task::coop::poll_proceed(cx));
        let mut r = self.router();
        let waits = |r: &Router| own.map_or(r.user.is_empty(), |(k, _)| r.waits(k));
        let mine = own.map(|(k, gen)| ctx_of(k, gen));
        // A look, and when the waiter would sleep on CQs not known armed,
        // another after arming them: a completion that came before the
        // arming raised no event.
        for first in [true, false] {
            if waits(&r) {
                if let (Some(wc), Some((k, _))) = (self.poll_cqs(&mut r, mine, waits), own) {
                    r.release(k);
                    coop.made_progress();
                    return Poll::Ready(Ok(wc));
                }
            }
            let got = check(&mut r, cx);
            if got.is_ready() {
                coop.made_progress();
                return got;
            }
            if !first || !self.arm(&mut r) {
                break;
            }
        }
        Poll::Pending
    }

    /// Arms each CQ this connection's own reaper polls that is not known
    /// armed, under the routing lock `r`; whether it armed any (then the
    /// caller looks into the CQs again: a completion that came before the
    /// arming raised no event). An arming that fails stops the reaper:
    /// every waiter fails (and `true`, so the caller looks again and
    /// finds the failure).
    fn arm(&self, r: &mut Router) -> bool {
        if r.failed.is_some() {
            return false;
        }
        let mut armed = false;
        for i in 0..self.cqs {
            if !r.armed[i] {
                if let Err(e) = self.cq(i).rearm() {
                    r.fail(e.to_string());
                    return true;
                }
                r.armed[i] = true;
                armed = true;
            }
        }
        armed
    }

    /// When this connection's own reaper polls the CQs, polls them here,
    /// under the routing lock `r`, one completion a poll, routing each,
    /// until the one with op context `mine` comes (returned, not routed),
    /// `waits` says the caller's wait is over, or they are empty.
    ///
    /// A device that completes quickly (rxe does before the post returns)
    /// then needs no wake-up of the reaper and no second task switch. The
    /// reaper's wake-ups stay right: it re-arms a CQ before it drains it,
    /// so every completion in a CQ either came before the last arming (the
    /// reaper's drain after it takes it) or raised an event (whose drain
    /// takes it); a poll here only makes those drains find less.
    #[inline(always)]
    pub(super) fn poll_cqs(
        &self,
        r: &mut Router,
        mine: Option<u64>,
        waits: impl Fn(&Router) -> bool,
    ) -> Option<Completion> {
        if self.cqs == 0 || r.failed.is_some() {
            return None;
        }
        for i in 0..self.cqs {
            loop {
                match self.cq(i).poll_one() {
                    Ok(Some(mut wc)) => {
                        // Its own completion: its context, recorded as an
                        // awaited operation's (never a user's).
                        if mine.is_some() && Some(wc.op_context) == mine && super::router::awaited(&mut wc) {
                            return Some(wc);
                        }
                        r.route(wc);
                        if !waits(r) {
                            return None;
                        }
                    }
                    Ok(None) => break,
                    Err(e) => {
                        r.fail(e.to_string());
                        return None;
                    }
                }
            }
        }
        None
    }

    pub(super) fn poll_event(&self, cx: &mut Context<'_>) -> Poll<Result<ConnEvent>> {
        let ev = super::poll_take(&self.events, cx, |cx| self.conn.poll_event(cx), super::no_event);
        if let Poll::Ready(Ok(e)) = &ev {
            if *e != ConnEvent::Established {
                self.closing_seen.store(true, std::sync::atomic::Ordering::Relaxed);
            }
        }
        ev
    }

    /// Takes the events on channel `i`, leaving their CQs unarmed: which
    /// CQs to drain (the channel's own CQ, or on a shared channel all of
    /// them), which CQs' events were taken (bit `i`: CQ `i`, no longer
    /// armed) and whether the channel was read empty. An event left in the
    /// channel after its readiness is cleared would never wake the reaper
    /// again; a CQ's own channel holds one event per arming, a shared one
    /// an event per CQ, read until empty (or, while completions keep
    /// coming, for a bounded number of events, its readiness then kept).
    fn take_events(&self, i: usize) -> Result<(std::ops::Range<usize>, u8, bool)> {
        if !self.one_channel {
            return match self.cq(i).take_event_unarmed(rpma_sys::gate::Bound::Now) {
                Ok(()) => Ok((i..i + 1, 1 << i, true)),
                Err(Error::NoCompletion) => Ok((i..i + 1, 0, true)),
                Err(e) => Err(e),
            };
        }
        let mut taken = 0;
        for _ in 0..64 {
            match self.conn.take_shared_event_unarmed(rpma_sys::gate::Bound::Now) {
                Ok((_, is_rcq)) => taken |= 1 << u8::from(is_rcq && self.cqs > 1),
                Err(Error::NoCompletion) => return Ok((0..self.cqs, taken, true)),
                Err(e) => return Err(e),
            }
        }
        Ok((0..self.cqs, taken, false))
    }

    /// After the reaper took CQ events (`taken`: which CQs' events, no
    /// longer armed), under the routing lock: drains `cqs`, then, while
    /// anything waits ([`Router::in_use`]), arms the CQs not armed and
    /// drains them again (what came before the arming raised no event).
    /// While nothing waits they stay unarmed: an operation whose
    /// completion is there at its first look then costs no event, and
    /// the next waiter arms them ([`poll_routed`](Shared::poll_routed)).
    fn after_events(&self, cqs: std::ops::Range<usize>, taken: u8) -> Result<()> {
        let mut r = self.router();
        for i in 0..self.cqs {
            if taken & (1 << i) != 0 {
                r.armed[i] = false;
            }
        }
        for i in cqs {
            self.drain(&mut r, i)?;
        }
        if r.in_use() && self.arm(&mut r) {
            for i in 0..self.cqs {
                self.drain(&mut r, i)?;
            }
        }
        Ok(())
    }

    /// Polls CQ `i` until empty, routing what it finds, under the routing
    /// lock `r` (so completions are routed in their CQ's order, whoever
    /// polls). A poll that returns less than it asked for found it empty.
    pub(super) fn drain(&self, r: &mut Router, i: usize) -> Result<()> {
        const BATCH: usize = 16;
        while self.cq(i).poll_each(BATCH, |wc| r.route(wc))? == BATCH {}
        Ok(())
    }
}

/// The reaper: drains the CQs, then sleeps until a channel is readable,
/// takes its events and drains that channel's CQ again (a shared
/// channel's: every CQ), re-arming the CQs only while a future waits
/// ([`Shared::after_events`]).
pub(super) async fn reap(s: Arc<Shared>) {
    if let Some(e) = (0..s.cqs).find_map(|i| s.drain(&mut s.router(), i).err()) {
        s.router().fail(e.to_string());
        return;
    }
    let why = loop {
        let ready = poll_fn(|cx| {
            for (i, fd) in s.fds.iter().enumerate() {
                if let Poll::Ready(g) = fd.poll_read_ready(cx) {
                    return Poll::Ready((i, g));
                }
            }
            Poll::Pending
        })
        .await;
        let mut guard = match ready.1 {
            Ok(g) => g,
            Err(e) => break Error::provider_raw("tokio readiness", e),
        };
        // A later event ticks the reactor, which this clear does not undo:
        // tokio clears only the readiness it reported.
        let (cqs, taken) = match s.take_events(ready.0) {
            Ok((cqs, taken, true)) => {
                guard.clear_ready();
                (cqs, taken)
            }
            Ok((cqs, taken, false)) => (cqs, taken),
            Err(e) => break e,
        };
        if let Err(e) = s.after_events(cqs, taken) {
            break e;
        }
    };
    s.router().fail(why.to_string());
}
