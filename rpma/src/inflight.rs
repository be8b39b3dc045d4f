//! Book-keeping of posted operations: what each one keeps alive and which
//! user context its completion returns.
//!
//! Every posted work request gets an entry holding an `Arc` of the local
//! region it uses ([`Hold`]), so the registration and its memory outlive the
//! operation even if the user drops the [`MrLocal`](crate::MrLocal). A send
//! queue completes in order: a completion for entry `s` retires every entry
//! posted before it, including unsignaled ones. Receives are retired one by
//! one. Entries still pending when the QP (or SRQ) is destroyed are released
//! after that, when the device can no longer touch the memory.

use crate::error::{Error, Result};
use crate::wrid::{self, CompletionOp, SEND_SEQ_MASK};
use rpma_sys::chain::ChainWr;
use rpma_sys::wr::{SendWr, Sge};
use std::sync::{Arc, Mutex, MutexGuard};

/// Anything kept alive by a reference.
pub(crate) trait Held: Send + Sync {}
impl<T: Send + Sync + ?Sized> Held for T {}

/// Keeps a registration and its memory alive.
pub(crate) type Hold = Arc<dyn Held>;

/// Told the outcome of the operation whose entry carries it, once its own
/// completion is translated (a memory window's invalidation).
pub(crate) trait Confirm: Send + Sync {
    fn completed(&self, success: bool);
}

pub(crate) struct Entry {
    pub(crate) ctx: u64,
    pub(crate) kind: CompletionOp,
    /// Whether the device reports this operation's own completion.
    signaled: bool,
    /// A later completion showed the device is done with it; its own
    /// completion has been polled but not translated yet (another thread).
    done: bool,
    hold: Option<Hold>,
    confirm: Option<Arc<dyn Confirm>>,
}

impl Entry {
    pub(crate) fn recv(ctx: u64, hold: Option<Hold>) -> Entry {
        Entry { ctx, kind: CompletionOp::Recv, signaled: true, done: false, hold, confirm: None }
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// A send-queue operation to record: what its completion reports, and what
/// it keeps alive.
pub(crate) struct SendOpRec {
    pub(crate) ctx: u64,
    pub(crate) kind: CompletionOp,
    pub(crate) signaled: bool,
    pub(crate) hold: Option<Hold>,
    pub(crate) confirm: Option<Arc<dyn Confirm>>,
}

/// The send queue of one QP: a ring of `depth` slots in posting order. The
/// work request ID of an entry is its sequence number, so a completion finds
/// its entry by offset from the oldest one, without a search.
///
/// A completion retires its own entry and the entries posted before it (the
/// device completes a send queue in order). An unsignaled predecessor is
/// released then; a signaled one is only marked done, because its own
/// completion was polled first and may be translated later by another
/// thread polling the same CQ: it still finds its context and kind.
pub(crate) struct SendTracker {
    q: Mutex<Ring>,
    depth: usize,
}

struct Ring {
    /// Sequence number of the oldest entry (the next one to retire).
    head: u64,
    /// Slots from the oldest entry up to the newest.
    len: usize,
    /// `slots[seq & mask]`; the length is a power of two at least `depth`.
    slots: Box<[Option<Entry>]>,
}

impl SendTracker {
    /// A tracker for a send queue of `depth` entries.
    ///
    /// # Errors
    /// [`Error::NoMem`] when the slots cannot be allocated.
    pub(crate) fn new(depth: u32) -> Result<SendTracker> {
        let depth = depth.max(1) as usize;
        let n = depth.checked_next_power_of_two().ok_or_else(|| too_deep("send", depth))?;
        let mut slots = Vec::new();
        slots.try_reserve_exact(n).map_err(|_| too_deep("send", depth))?;
        slots.resize_with(n, || None);
        Ok(SendTracker { q: Mutex::new(Ring { head: 0, len: 0, slots: slots.into_boxed_slice() }), depth })
    }

    /// Posts an operation through `post` (given the wr_id) while holding the
    /// queue's lock, so entries are in the order the device sees them, and
    /// records it on success. The last free slot is kept for a signaled
    /// operation: a queue of unsignaled ones only could never be retired.
    #[inline(always)]
    pub(crate) fn post_with(&self, op: SendOpRec, post: impl FnOnce(u64) -> std::io::Result<()>) -> Result<()> {
        let mut g = lock(&self.q);
        if g.len + usize::from(!op.signaled) >= self.depth {
            return Err(queue_full(g.len, self.depth, op.signaled));
        }
        let seq = (g.head + g.len as u64) & SEND_SEQ_MASK;
        post(wrid::send(seq)).map_err(|e| Error::provider_raw("ibv_post_send", e))?;
        let mask = g.slots.len() - 1;
        g.slots[seq as usize & mask] = Some(Entry {
            ctx: op.ctx,
            kind: op.kind,
            signaled: op.signaled,
            done: false,
            hold: op.hold,
            confirm: op.confirm,
        });
        g.len += 1;
        Ok(())
    }

    /// Posts `wr` on `qp` and records it as `rec`: the one place a tracked
    /// send hands local memory to the device.
    ///
    /// # Errors
    /// As [`post_with`](Self::post_with); [`Error::Unknown`] (a bug in
    /// rpma) for a non-inline local range that `rec` does not hold.
    #[inline(always)]
    pub(crate) fn post_send(&self, qp: &rpma_sys::qp::Qp, rec: SendOpRec, mut wr: SendWr) -> Result<()> {
        if wr.sge.is_some() && !wr.inline && rec.hold.is_none() {
            return Err(Error::Unknown("rpma bug: a tracked send with a local range nothing holds".into()));
        }
        self.post_with(rec, |wr_id| {
            wr.wr_id = wr_id;
            // SAFETY: the local range is inline (copied during the call) or
            // lies in the region the entry's hold keeps alive until this
            // operation (or a later signaled one) completes, or until the QP
            // is destroyed (when that fails the connection leaks the
            // tracker, see `ConnParts::drop`).
            #[allow(unsafe_code)]
            unsafe {
                qp.post_send(&wr)
            }
        })
    }

    /// Posts the chain `wrs` on `qp` with one call and records `recs[i]`
    /// for `wrs[i]` under one lock, with consecutive sequence numbers: the
    /// one place a chain hands local memory to the device. It needs
    /// `wrs.len()` free slots, one more when its last operation is
    /// unsignaled. When `ibv_post_send` refuses operation `k`, `0..k` are
    /// posted (verbs semantics) and recorded; the rest are dropped.
    ///
    /// # Errors
    /// [`Error::Inval`] when the chain can never fit `depth`; [`Error::Again`]
    /// when it does not fit now; [`Error::Provider`] naming the refused
    /// operation; [`Error::Unknown`] (a bug in rpma) for an empty chain, a
    /// missing record or a non-inline local range its record does not hold.
    pub(crate) fn post_chain(
        &self,
        qp: &rpma_sys::qp::Qp,
        recs: &mut [Option<SendOpRec>],
        wrs: &mut [ChainWr],
    ) -> Result<()> {
        let n = wrs.len();
        let unheld = |(w, r): (&ChainWr, &Option<SendOpRec>)| match (w, r) {
            (_, None) => true,
            (ChainWr::Plain(p), Some(r)) => p.sge.is_some() && !p.inline && r.hold.is_none(),
            _ => false,
        };
        let (Some(last), true) = (wrs.last(), recs.len() == n && !wrs.iter().zip(recs.iter()).any(unheld)) else {
            return Err(Error::Unknown("rpma bug: an empty chain, or a chained local range nothing holds".into()));
        };
        let need = n + usize::from(!last.signaled());
        if need > self.depth {
            return Err(Error::inval(format!(
                "a chain of {n} operation(s) whose last one is {} needs {need} send-queue slots: more than the \
                 connection's sq_size {} (ConnCfg::set_sq_size)",
                if last.signaled() { "signaled" } else { "unsignaled (one slot is kept for a signaled one)" },
                self.depth
            )));
        }
        let mut g = lock(&self.q);
        if g.len + need > self.depth {
            return Err(Error::Again(
                format!(
                    "the send queue has {} of its {} slots taken and the chain needs {need}: reap completions \
                     (Cq::get_wc, Cq::next_completion) and post again",
                    g.len, self.depth
                )
                .into(),
            ));
        }
        let base = g.head.wrapping_add(g.len as u64);
        for (i, w) in wrs.iter_mut().enumerate() {
            w.set_wr_id(wrid::send(base.wrapping_add(i as u64) & SEND_SEQ_MASK));
        }
        // SAFETY: every local range is inline (copied during the call) or
        // lies in the region its entry's hold keeps alive until the
        // operation (or a later signaled one) completes, or until the QP is
        // destroyed (checked above, as in `post_send`).
        #[allow(unsafe_code)]
        let res = unsafe { qp.post_send_list(wrs) };
        let posted = match &res {
            Ok(()) => n,
            Err((k, _)) => (*k).min(n),
        };
        let mask = g.slots.len() - 1;
        for (i, r) in recs.iter_mut().take(posted).enumerate() {
            if let Some(op) = r.take() {
                let seq = base.wrapping_add(i as u64) & SEND_SEQ_MASK;
                g.slots[seq as usize & mask] = Some(Entry {
                    ctx: op.ctx,
                    kind: op.kind,
                    signaled: op.signaled,
                    done: false,
                    hold: op.hold,
                    confirm: op.confirm,
                });
            }
        }
        g.len += posted;
        drop(g);
        res.map_err(|(k, e)| {
            let op = match (n, wrs.iter().any(ChainWr::is_native)) {
                (1, false) => "ibv_post_send".to_string(),
                (1, true) => "ibv_wr_complete".to_string(),
                (_, false) => format!(
                    "ibv_post_send of a chain of {n}: operation {k} refused, operations 0..{k} posted (their \
                     completions follow), {k}..{n} not posted"
                ),
                (_, true) => format!("ibv_wr_complete of a chain of {n}: nothing posted"),
            };
            Error::provider_raw(op, e)
        })
    }

    /// [`post_send`](Self::post_send) with the local memory as a list
    /// (`wr.sge` unset): every entry of `sgl` must lie in a region `rec`
    /// holds (scatter-gather operations hold all of them).
    ///
    /// # Errors
    /// As [`post_send`](Self::post_send).
    pub(crate) fn post_send_sgl(&self, qp: &rpma_sys::qp::Qp, rec: SendOpRec, wr: SendWr, sgl: &[Sge]) -> Result<()> {
        if wr.sge.is_some() || (!sgl.is_empty() && !wr.inline && rec.hold.is_none()) {
            return Err(Error::Unknown("rpma bug: a tracked list send with local ranges nothing holds".into()));
        }
        self.post_with(rec, |wr_id| {
            // SAFETY: as in `post_send`: every entry lies in a region the
            // entry's hold keeps alive until this operation (or a later
            // signaled one) completes or the QP is destroyed.
            #[allow(unsafe_code)]
            unsafe {
                qp.post_send_sgl(&SendWr { wr_id, ..wr }, sgl)
            }
        })
    }

    /// The send with sequence number `wr_id` completed (`success`: its status): retire it
    /// and everything before it (unsignaled operations complete with the
    /// next signaled one).
    #[inline]
    pub(crate) fn complete(&self, wr_id: u64, success: bool) -> Option<(u64, CompletionOp)> {
        let mut g = lock(&self.q);
        let ahead = (wr_id.wrapping_sub(g.head) & SEND_SEQ_MASK) as usize;
        if ahead >= g.len {
            return None; // not posted here, or already retired
        }
        let mask = g.slots.len() - 1;
        let head = g.head as usize;
        let e = g.slots[(head + ahead) & mask].take()?;
        for k in 0..ahead {
            if let Some(p) = &mut g.slots[(head + k) & mask] {
                if p.signaled {
                    p.done = true;
                    p.hold = None;
                } else {
                    g.slots[(head + k) & mask] = None;
                }
            }
        }
        // Advance past the retired slots at the front.
        while g.len > 0 && g.slots[g.head as usize & mask].is_none() {
            g.head = (g.head + 1) & SEND_SEQ_MASK;
            g.len -= 1;
        }
        drop(g);
        if let Some(c) = &e.confirm {
            c.completed(success);
        }
        Some((e.ctx, e.kind))
    }

    /// Operations posted and not yet retired.
    pub(crate) fn pending(&self) -> usize {
        let g = lock(&self.q);
        let mask = g.slots.len() - 1;
        (0..g.len).filter(|k| g.slots[(g.head as usize + k) & mask].as_ref().is_some_and(|e| !e.done)).count()
    }
}

#[cold]
#[inline(never)]
fn too_deep(which: &str, depth: usize) -> Error {
    Error::NoMem(format!("cannot allocate book-keeping for a {which} queue of {depth} entries").into())
}

#[cold]
#[inline(never)]
fn queue_full(len: usize, depth: usize, signaled: bool) -> Error {
    let msg = if signaled || len >= depth {
        format!(
            "the send queue is full: {len} operation(s) posted and not yet retired (sq_size {depth}); \
             reap completions (Cq::get_wc, Cq::next_completion) and post again"
        )
    } else {
        format!(
            "the send queue has {len} of its {depth} slots taken (sq_size {depth}) and the last one is kept for a \
             signaled operation: post one with Flags::COMPLETION_ALWAYS and reap its completion, which retires the \
             unsignaled ones before it"
        )
    };
    Error::Again(msg.into())
}

/// Receives posted to a QP or an SRQ.
pub(crate) struct RecvTracker {
    m: Mutex<Slots>,
    srq: bool,
}

/// Posted receives by slot: the slot index is the work request ID (with the
/// tag bits), so retiring one is an index, not a hash lookup.
#[derive(Default)]
struct Slots {
    entries: Vec<Option<Entry>>,
    free: Vec<usize>,
}

impl RecvTracker {
    /// A tracker for a receive queue of `depth` entries (slots are
    /// allocated up front, so posting does not reallocate).
    ///
    /// # Errors
    /// [`Error::NoMem`] when the slots cannot be allocated.
    pub(crate) fn new(srq: bool, depth: u32) -> Result<RecvTracker> {
        let n = depth as usize;
        let mut slots = Slots::default();
        slots.entries.try_reserve_exact(n).map_err(|_| too_deep("receive", n))?;
        slots.free.try_reserve_exact(n).map_err(|_| too_deep("receive", n))?;
        Ok(RecvTracker { m: Mutex::new(slots), srq })
    }

    /// Posts a receive through `post` (given the wr_id) and records it.
    fn post_with(&self, ctx: u64, hold: Option<Hold>, post: impl FnOnce(u64) -> std::io::Result<()>) -> Result<()> {
        let mut g = lock(&self.m);
        let idx = g.free.pop().unwrap_or(g.entries.len());
        if let Err(e) = post(wrid::recv(idx as u64, self.srq)) {
            if idx < g.entries.len() {
                g.free.push(idx);
            }
            return Err(Error::provider_raw("ibv_post_recv", e));
        }
        let entry = Some(Entry::recv(ctx, hold));
        match g.entries.get_mut(idx) {
            Some(slot) => *slot = entry,
            None => g.entries.push(entry),
        }
        Ok(())
    }

    /// Posts a receive into `sge` on `qp` and records it: the region `hold`
    /// keeps alive holds `sge`.
    ///
    /// # Errors
    /// [`Error::Provider`] when posting fails (`ENOMEM`: the queue is full).
    pub(crate) fn post_recv(&self, qp: &rpma_sys::qp::Qp, ctx: u64, hold: Hold, sge: Option<Sge>) -> Result<()> {
        self.post_with(ctx, Some(hold), |wr_id| {
            // SAFETY: `sge` lies in the region the entry's hold keeps alive
            // until the receive completes or the QP is destroyed (a failed
            // destroy leaks the tracker, see `ConnParts::drop`).
            #[allow(unsafe_code)]
            unsafe {
                qp.post_recv(wr_id, sge)
            }
        })
    }

    /// [`post_recv`](Self::post_recv) scattering into the list `sgl`: every
    /// entry lies in a region `hold` keeps alive.
    ///
    /// # Errors
    /// As [`post_recv`](Self::post_recv).
    pub(crate) fn post_recv_sgl(&self, qp: &rpma_sys::qp::Qp, ctx: u64, hold: Hold, sgl: &[Sge]) -> Result<()> {
        self.post_with(ctx, Some(hold), |wr_id| {
            // SAFETY: as in `post_recv`, for every entry of `sgl`.
            #[allow(unsafe_code)]
            unsafe {
                qp.post_recv_sgl(wr_id, sgl)
            }
        })
    }

    /// [`post_recv`](Self::post_recv) on a shared receive queue.
    ///
    /// # Errors
    /// As [`post_recv`](Self::post_recv).
    pub(crate) fn post_srq_recv(&self, srq: &rpma_sys::srq::Srq, ctx: u64, hold: Hold, sge: Option<Sge>) -> Result<()> {
        self.post_with(ctx, Some(hold), |wr_id| {
            // SAFETY: as in `post_recv`; a failed SRQ destroy leaks the
            // tracker (see `SrqInner::drop`).
            #[allow(unsafe_code)]
            unsafe {
                srq.post_recv(wr_id, sge)
            }
        })
    }

    /// The receive in `slot` (from its decoded wr_id) completed: retire it.
    pub(crate) fn complete(&self, slot: u64) -> Option<(u64, CompletionOp)> {
        let mut g = lock(&self.m);
        let idx = usize::try_from(slot).ok()?;
        let e = g.entries.get_mut(idx)?.take()?;
        g.free.push(idx);
        Some((e.ctx, e.kind))
    }

    pub(crate) fn pending(&self) -> usize {
        let g = lock(&self.m);
        g.entries.len() - g.free.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wrid::WrId;

    fn rec(ctx: u64, kind: CompletionOp, signaled: bool, hold: Option<Hold>) -> SendOpRec {
        SendOpRec { ctx, kind, signaled, hold, confirm: None }
    }

    fn ok(_: u64) -> std::io::Result<()> {
        Ok(())
    }

    #[test]
    fn send_ring_wraps_and_ignores_unknown_ids() {
        let t = SendTracker::new(4).unwrap(); // 4 slots
        let mut ids = Vec::new();
        for round in 0..10u64 {
            // two unsignaled, one signaled: the signaled completion retires all three
            for k in 0..3 {
                t.post_with(rec(round * 10 + k, CompletionOp::Write, k == 2, None), |id| {
                    ids.push(id);
                    Ok(())
                })
                .unwrap();
            }
            let last = *ids.last().unwrap();
            assert_eq!(t.complete(last + 1, true), None, "not posted yet");
            assert_eq!(t.complete(last, true), Some((round * 10 + 2, CompletionOp::Write)));
            assert_eq!(t.pending(), 0);
            assert_eq!(t.complete(last, true), None, "already retired");
        }
        assert_eq!(ids, (0..30).collect::<Vec<u64>>());
    }

    #[test]
    fn the_last_slot_is_kept_for_a_signaled_operation() {
        let t = SendTracker::new(3).unwrap();
        t.post_with(rec(1, CompletionOp::Write, false, None), ok).unwrap();
        t.post_with(rec(2, CompletionOp::Write, false, None), ok).unwrap();
        let e = t.post_with(rec(3, CompletionOp::Write, false, None), ok).unwrap_err();
        assert_eq!(e.code(), crate::error::RPMA_E_AGAIN);
        assert!(e.to_string().contains("kept for a signaled operation"), "{e}");
        // ... which can be posted, and whose completion retires the rest.
        let mut id = 0;
        t.post_with(rec(4, CompletionOp::Flush, true, None), |i| {
            id = i;
            Ok(())
        })
        .unwrap();
        let e = t.post_with(rec(5, CompletionOp::Write, true, None), ok).unwrap_err();
        assert!(e.to_string().contains("the send queue is full"), "{e}");
        assert_eq!(t.complete(id, true), Some((4, CompletionOp::Flush)));
        assert_eq!(t.pending(), 0);
        // A queue of 1 takes signaled operations only.
        let t = SendTracker::new(1).unwrap();
        assert!(t.post_with(rec(1, CompletionOp::Write, false, None), ok).is_err());
        t.post_with(rec(1, CompletionOp::Write, true, None), ok).unwrap();
    }

    #[test]
    fn send_queue_retires_in_order_and_releases_holds() {
        let t = SendTracker::new(4).unwrap();
        let hold: Arc<u8> = Arc::new(7);
        let mut ids = Vec::new();
        for (ctx, kind, h) in [
            (10, CompletionOp::Write, Some(hold.clone() as Hold)),
            (11, CompletionOp::Write, Some(hold.clone() as Hold)),
            (12, CompletionOp::Flush, None),
        ] {
            t.post_with(rec(ctx, kind, ctx == 12, h), |id| {
                ids.push(id);
                Ok(())
            })
            .unwrap();
        }
        assert_eq!(Arc::strong_count(&hold), 3);
        assert_eq!(t.complete(ids[2], true), Some((12, CompletionOp::Flush)));
        assert_eq!(Arc::strong_count(&hold), 1, "unsignaled predecessors are retired too");
        assert_eq!(t.complete(ids[0], true), None);
        assert_eq!(t.pending(), 0);
    }

    /// Two threads polling one CQ: thread A polled the completion of a
    /// signaled operation, thread B the one of a later operation, and B
    /// translates first. A still gets its own context and kind.
    #[test]
    fn a_signaled_predecessor_keeps_its_context_for_a_slower_poller() {
        let t = SendTracker::new(8).unwrap();
        let hold: Arc<u8> = Arc::new(7);
        let mut ids = Vec::new();
        for (ctx, kind) in [(1, CompletionOp::Read), (2, CompletionOp::Write), (3, CompletionOp::Send)] {
            t.post_with(rec(ctx, kind, ctx != 2, Some(hold.clone() as Hold)), |id| {
                ids.push(id);
                Ok(())
            })
            .unwrap();
        }
        assert_eq!(t.complete(ids[2], true), Some((3, CompletionOp::Send)), "B first");
        assert_eq!(Arc::strong_count(&hold), 1, "the device is done with all three");
        assert_eq!(t.pending(), 0);
        assert_eq!(t.complete(ids[0], true), Some((1, CompletionOp::Read)), "A still finds its own");
        assert_eq!(t.complete(ids[0], true), None);
        assert_eq!(t.complete(ids[1], true), None, "the unsignaled one was retired by B");
        // The ring moved on: it is empty and takes new entries.
        t.post_with(rec(4, CompletionOp::Read, true, None), |id| {
            assert_eq!(id, ids[2] + 1);
            Ok(())
        })
        .unwrap();
    }

    struct Count(std::sync::Mutex<Vec<bool>>);
    impl Confirm for Count {
        fn completed(&self, success: bool) {
            self.0.lock().unwrap().push(success);
        }
    }

    #[test]
    fn confirm_gets_the_operations_own_status() {
        let t = SendTracker::new(4).unwrap();
        let c = Arc::new(Count(Default::default()));
        let mut ids = Vec::new();
        for ok_ in [false, true] {
            let r = SendOpRec {
                ctx: 0,
                kind: CompletionOp::LocalInv,
                signaled: true,
                hold: None,
                confirm: Some(c.clone()),
            };
            t.post_with(r, |id| {
                ids.push(id);
                Ok(())
            })
            .unwrap();
            t.complete(*ids.last().unwrap(), ok_).unwrap();
        }
        assert_eq!(*c.0.lock().unwrap(), vec![false, true]);
    }

    #[test]
    fn send_queue_refuses_when_full_and_forgets_failed_posts() {
        let t = SendTracker::new(3).unwrap();
        t.post_with(rec(1, CompletionOp::Write, true, None), ok).unwrap();
        let e = t
            .post_with(rec(2, CompletionOp::Write, true, None), |_| {
                Err(std::io::Error::from_raw_os_error(libc::ENOMEM))
            })
            .unwrap_err();
        assert_eq!(e.errno(), Some(libc::ENOMEM));
        assert_eq!(t.pending(), 1, "a failed post leaves no entry");
        t.post_with(rec(3, CompletionOp::Write, true, None), ok).unwrap();
        t.post_with(rec(4, CompletionOp::Write, true, None), ok).unwrap();
        let e = t.post_with(rec(5, CompletionOp::Write, true, None), ok).unwrap_err();
        assert_eq!(e.code(), crate::error::RPMA_E_AGAIN);
        assert!(e.to_string().contains("sq_size 3"), "{e}");
    }

    #[test]
    fn huge_queues_are_an_error_not_an_abort() {
        assert_eq!(SendTracker::new(u32::MAX).err().map(|e| e.code()), Some(crate::error::RPMA_E_NOMEM));
        assert_eq!(RecvTracker::new(false, u32::MAX).err().map(|e| e.code()), Some(crate::error::RPMA_E_NOMEM));
    }

    #[test]
    fn receives_complete_in_any_order() {
        let t = RecvTracker::new(true, 4).unwrap();
        let mut ids = Vec::new();
        for ctx in [1, 2] {
            t.post_with(ctx, None, |id| {
                ids.push(id);
                Ok(())
            })
            .unwrap();
        }
        let slot = |id| match WrId::decode(id) {
            WrId::SrqRecv(s) => s,
            other => panic!("{other:?}"),
        };
        assert_eq!(t.pending(), 2);
        assert_eq!(t.complete(slot(ids[1])), Some((2, CompletionOp::Recv)));
        assert_eq!(t.complete(slot(ids[0])), Some((1, CompletionOp::Recv)));
        assert_eq!(t.complete(slot(ids[0])), None);
        assert_eq!(t.pending(), 0, "a repeated completion retires nothing twice");
        let e = t.post_with(4, None, |_| Err(std::io::Error::from_raw_os_error(libc::ENOMEM))).unwrap_err();
        assert_eq!(e.errno(), Some(libc::ENOMEM));
        assert_eq!(t.pending(), 0, "a failed post leaves no entry");
        let q = RecvTracker::new(false, 4).unwrap();
        let mut id = 0;
        q.post_with(3, None, |i| {
            id = i;
            Ok(())
        })
        .unwrap();
        assert!(matches!(WrId::decode(id), WrId::Recv(_)));
    }
}
