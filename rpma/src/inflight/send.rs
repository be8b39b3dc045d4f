//! The send queue's tracker: a ring in posting order.

use super::chain::{chain_failed, needs_hold, SendChain};
use super::lock::{SpinGuard, SpinLock};
use super::{post_error, too_deep, Entry, Hold, SendOpRec, Side, Take};
use crate::error::{Detail, Error, Msg, Result};
use crate::wrid::{self, CompletionOp, SEND_SEQ_MASK};
use rpma_sys::post::PostError;
use rpma_sys::wr::{SendSgl, SendWr, Sge};

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
    q: SpinLock<Ring>,
    depth: usize,
}

struct Ring {
    /// Sequence number of the oldest entry (the next one to retire).
    head: u64,
    /// Slots from the oldest entry up to the newest.
    len: usize,
    /// `slots[seq & mask]`; the length is a power of two at least `depth`.
    slots: Box<[Option<Entry>]>,
    /// The [`Side`]s of the entries that have one, by sequence number
    /// (memory-window invalidations and binds, lists: rarely more than
    /// one).
    sides: Vec<(u64, Side)>,
}

impl Ring {
    /// The slot of sequence number `seq`, without a bounds check: the
    /// hot paths index the ring once per operation, and the check (the
    /// length could be zero as far as the compiler knows) would be paid
    /// each time.
    #[inline(always)]
    fn slot(&mut self, seq: u64) -> &mut Option<Entry> {
        let i = seq as usize & (self.slots.len() - 1);
        debug_assert!(i < self.slots.len());
        // SAFETY: `slots` has a power-of-two length of at least 1
        // (`SendTracker::new`) and is never replaced, so masking with
        // `len - 1` yields an index below `len`.
        unsafe { self.slots.get_unchecked_mut(i) }
    }

    /// Records `op` as sequence number `seq` (room in `sides` was
    /// reserved before posting).
    #[inline(always)]
    fn record(&mut self, seq: u64, op: SendOpRec) {
        let (entry, side) = Entry::send(op);
        if let Some(side) = side {
            self.sides.push((seq, side));
        }
        self.put(seq, entry);
    }

    /// Records `entry`, posted (or possibly queued), as sequence number
    /// `seq`: its slot is free, since the ring had room. Were it not (a
    /// bug in rpma), the old entry is leaked, never dropped: its hold may
    /// still cover memory the device reaches.
    #[inline(always)]
    fn put(&mut self, seq: u64, entry: Entry) {
        let slot = self.slot(seq);
        debug_assert!(slot.is_none(), "send-queue slot {seq} still taken");
        std::mem::forget(slot.replace(entry));
        self.len += 1;
    }

    /// Reserves room for `n` more sides, before posting.
    fn reserve_sides(&mut self, n: usize) -> Result<()> {
        self.sides.try_reserve(n).map_err(|_| Error::nomem("cannot record what an operation keeps"))
    }

    /// Moves the head past the retired (empty) slots at the front, if
    /// any: the check inline, the walk out of line.
    #[inline(always)]
    fn skip_retired(&mut self) {
        if self.len != 0 && self.slot(self.head).is_none() {
            self.advance();
        }
    }

    /// [`skip_retired`](Self::skip_retired)'s walk.
    #[cold]
    #[inline(never)]
    fn advance(&mut self) {
        let mask = self.slots.len() - 1;
        while self.len > 0 && self.slots[self.head as usize & mask].is_none() {
            self.head = (self.head + 1) & SEND_SEQ_MASK;
            self.len -= 1;
        }
    }

    /// Retires the `ahead` entries from sequence number `head` on, which a
    /// later completion showed the device is done with: unsignaled ones are
    /// released, signaled ones (their own completions still to be
    /// translated) marked done and their holds released. Whether none of
    /// them is left (no signaled one).
    /// A region whose last hold ends here is dropped after the lock (the
    /// caller holds an [`unlocked::guard`](crate::unlocked::guard)).
    #[inline(always)]
    fn retire_before(&mut self, head: u64, ahead: usize) -> bool {
        // The slots apart from the confirms, so the loop keeps them in
        // registers while dropping holds.
        let Ring { slots, sides, .. } = self;
        let slots = &mut slots[..];
        let mask = slots.len() - 1;
        let mut all_gone = true;
        for k in 0..ahead {
            let i = (head as usize + k) & mask;
            let Some(p) = &mut slots[i] else { continue };
            let seq = head.wrapping_add(k as u64) & SEND_SEQ_MASK;
            if p.signaled() {
                p.mark_done();
                if p.has_side() {
                    // Its confirm waits for its own completion.
                    drop(sides.iter_mut().find(|(s, _)| *s == seq).and_then(|(_, side)| side.keep.take()));
                }
                all_gone = false;
            } else {
                let had_side = p.has_side();
                slots[i] = None;
                if had_side {
                    take_side(sides, seq);
                }
            }
        }
        all_gone
    }
}

/// Takes the side of sequence number `seq` from `sides`.
#[cold]
#[inline(never)]
fn take_side(sides: &mut Vec<(u64, Side)>, seq: u64) -> Option<Side> {
    let i = sides.iter().position(|(s, _)| *s == seq)?;
    Some(sides.swap_remove(i).1)
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
        let ring = Ring { head: 0, len: 0, slots: slots.into_boxed_slice(), sides: Vec::new() };
        Ok(SendTracker { q: SpinLock::new(ring), depth })
    }

    /// Locks the ring for posting `op`: its sequence number, if a slot is
    /// free. The last free slot is kept for a signaled operation: a queue
    /// of unsignaled ones only could never be retired.
    #[inline(always)]
    fn reserve(&self, signaled: bool, side: bool) -> Result<(SpinGuard<'_, Ring>, u64)> {
        let mut g = self.q.lock();
        if g.len + usize::from(!signaled) >= self.depth {
            return Err(queue_full(g.len, self.depth, signaled));
        }
        let seq = (g.head + g.len as u64) & SEND_SEQ_MASK;
        if side {
            g.reserve_sides(1)?;
        }
        Ok((g, seq))
    }

    /// Posts an operation through `post` (given the wr_id) while holding the
    /// queue's lock, so entries are in the order the device sees them, and
    /// records it on success.
    ///
    /// A refused post that the provider may have queued anyway
    /// ([`PostError::maybe_queued`]) is recorded too (its hold kept), and
    /// reported as an error.
    #[inline(always)]
    pub(crate) fn post_with(&self, op: SendOpRec, post: impl FnOnce(u64) -> Result<(), PostError>) -> Result<()> {
        let (mut g, seq) = self.reserve(op.signaled, op.has_side())?;
        let res = post(wrid::send(seq));
        if !matches!(&res, Err(e) if !e.maybe_queued) {
            g.record(seq, op);
        }
        res.map_err(|e| post_error("ibv_post_send", e))
    }

    /// Posts `wr` on `qp` and records it (its completion reports `ctx` and
    /// `kind`; what `hold` gives keeps its local range alive): the one
    /// place a tracked send hands local memory to the device. As
    /// [`post_with`](Self::post_with), without a closure or a record in
    /// between (the whole post is inlined into each operation, and the
    /// entry written into its slot from registers).
    ///
    /// `hold` is called before the post: the operation's range is in use
    /// from before the device can reach it (a refused post drops the hold
    /// again), and the hold keeps the region alive from then on.
    ///
    /// # Errors
    /// As [`post_with`](Self::post_with); [`Error::Unknown`] (a bug in
    /// rpma) for a non-inline local range without a `hold`.
    #[inline(always)]
    pub(crate) fn post_send(
        &self,
        qp: &rpma_sys::qp::Qp,
        ctx: u64,
        kind: CompletionOp,
        hold: Option<impl Take>,
        wr: SendWr,
    ) -> Result<()> {
        if needs_hold(&wr) && hold.is_none() {
            return Err(Error::Unknown("rpma bug: a tracked send with a local range nothing holds".into()));
        }
        let signaled = wr.signaled;
        // Taken before the post: the range is in use from before the device
        // can reach it (a refused post drops it again).
        let range = match hold.map(Take::take) {
            Some(Ok(Hold::Range(range))) => Some(range),
            None => None,
            Some(Ok(keep)) => return self.post_kept(qp, ctx, kind, keep, wr),
            Some(Err(e)) => return Err(super::unbox(e)),
        };
        // Converted before the lock, straight into what the provider reads.
        let mut built = rpma_sys::wr::BuiltSend::ZERO;
        wr.build_in(&mut built);
        let (mut g, seq) = self.reserve(signaled, false)?;
        // SAFETY: the local range is inline (copied during the call) or
        // lies in the region the caller borrows until this returns, and
        // that the entry's hold keeps alive from before this returns until
        // this operation (or a later signaled one) completes, or until the
        // QP is destroyed (when that fails the connection leaks the
        // tracker, see `ConnParts::drop`).
        let posted = unsafe { qp.post_send(&mut built, wrid::send(seq)) };
        if let Err(e) = posted {
            return Err(refused_or_queued(&mut g, seq, e, Entry::plain(ctx, kind, signaled, range)));
        }
        g.put(seq, Entry::plain(ctx, kind, signaled, range));
        Ok(())
    }

    /// [`post_send`](Self::post_send) of an operation that keeps something
    /// other than a range: its local range as a list of one.
    #[cold]
    #[inline(never)]
    fn post_kept(&self, qp: &rpma_sys::qp::Qp, ctx: u64, kind: CompletionOp, keep: Hold, wr: SendWr) -> Result<()> {
        let rec = SendOpRec { ctx, kind, signaled: wr.signaled, hold: Some(keep), confirm: None };
        self.post_send_sgl(qp, rec, SendWr { sge: None, ..wr }, wr.sge.as_slice())
    }

    /// Posts `chain` on `qp` with one call and records its entries under
    /// one lock, with consecutive sequence numbers: the one place a chain
    /// hands local memory to the device. It needs `chain.len()` free
    /// slots, one more when its last operation is unsignaled. When
    /// `ibv_post_send` refuses operation `k`, `0..k` are posted (verbs
    /// semantics) and recorded; the rest are dropped. When the provider
    /// names no refused operation, or `ibv_wr_complete` fails, all of them
    /// may have been queued and all are recorded (their holds kept). Afterwards `chain` is
    /// empty, unless it was refused before posting ([`Error::Inval`],
    /// [`Error::Again`], [`Error::Unknown`] for an empty chain): then it is
    /// as it was.
    ///
    /// # Errors
    /// [`Error::Inval`] when the chain can never fit `depth`; [`Error::Again`]
    /// when it does not fit now; [`Error::Provider`] naming the refused
    /// operation; [`Error::Unknown`] (a bug in rpma) for an empty chain.
    #[inline(always)]
    pub(crate) fn post_chain(&self, qp: &rpma_sys::qp::Qp, chain: &mut SendChain) -> Result<()> {
        let n = chain.ops.len();
        if n == 0 {
            return Err(empty_chain());
        }
        let need = n + usize::from(!chain.last_signaled);
        if need > self.depth {
            return Err(chain_too_long(n, chain.last_signaled, self.depth));
        }
        let mut g = self.q.lock();
        if g.len + need > self.depth {
            return Err(chain_full(g.len, self.depth, need));
        }
        let base = g.head.wrapping_add(g.len as u64);
        // SAFETY: every local range is inline (copied during the call) or
        // lies in the region its entry's hold keeps alive until the
        // operation (or a later signaled one) completes, or until the QP is
        // destroyed (`SendChain::push` refuses a chained operation whose
        // local range nothing holds, as `post_send` does).
        let res = unsafe { qp.post_send(&mut chain.ops, |i| wrid::send(base.wrapping_add(i as u64))) };
        let posted = match &res {
            Ok(()) => n,
            Err((k, _)) => (*k).min(n),
        };
        let native = chain.ops.has_native();
        let mask = g.slots.len() - 1;
        // Into free slots (`len + need <= depth`), masked into range.
        chain.ops.take_into(posted, &mut g.slots, |i| wrid::send(base.wrapping_add(i as u64)) as usize & mask);
        g.len += posted;
        drop(g);
        (chain.unheld, chain.fit) = (0, 0);
        match res {
            Ok(()) => Ok(()),
            Err((k, e)) => Err(chain_failed(n, native, k, e)),
        }
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
            unsafe { qp.post_send(SendSgl { wr: &wr, sgl }, wr_id) }
        })
    }

    /// The send with sequence number `wr_id` completed (`success`: its status): retire it
    /// and everything before it (unsignaled operations complete with the
    /// next signaled one).
    #[inline]
    pub(crate) fn complete(&self, wr_id: u64, success: bool) -> Option<(u64, CompletionOp)> {
        let mut g = self.q.lock();
        let ahead = (wr_id.wrapping_sub(g.head) & SEND_SEQ_MASK) as usize;
        if ahead >= g.len {
            return None; // not posted here, or already retired
        }
        let head = g.head;
        // The common case (every operation signaled): the oldest one, with
        // no confirm, and the next one (if any) still waiting.
        if ahead == 0 {
            if let Some(e) = g.slot(head).take_if(|e| !e.has_side()) {
                g.head = (head + 1) & SEND_SEQ_MASK;
                g.len -= 1;
                g.skip_retired();
                drop(g);
                let (ctx, kind, range) = e.retire();
                drop(range); // unlocked
                return Some((ctx, kind));
            }
        }
        // The persistence idiom (a write, then the signaled flush that
        // completes it): one unsignaled predecessor, neither with a
        // confirm; both released unlocked. (A loop over any number of
        // predecessors here cost more than `complete_slow`.)
        if ahead == 1 {
            let next = (head + 1) & SEND_SEQ_MASK;
            let plain = |e: &Option<Entry>| e.as_ref().is_some_and(|e| !e.has_side());
            if plain(g.slot(next)) && g.slot(head).as_ref().is_some_and(|p| !p.signaled() && !p.has_side()) {
                let before = g.slot(head).take();
                let e = g.slot(next).take();
                g.head = (head + 2) & SEND_SEQ_MASK;
                g.len -= 2;
                g.skip_retired();
                drop(g);
                drop(before.and_then(|b| b.retire().2));
                let (ctx, kind, range) = e?.retire();
                drop(range);
                return Some((ctx, kind));
            }
        }
        Self::complete_slow(g, ahead, success)
    }

    /// [`complete`](Self::complete) of an entry with predecessors or with a
    /// confirm (a chain's completion comes here).
    #[inline(never)]
    fn complete_slow(mut g: SpinGuard<'_, Ring>, ahead: usize, success: bool) -> Option<(u64, CompletionOp)> {
        let head = g.head;
        let e = g.slot(head.wrapping_add(ahead as u64)).take()?;
        // A region whose last hold the retire drops goes after the lock.
        let unlocked = crate::unlocked::guard();
        if ahead == 0 {
            g.head = (head + 1) & SEND_SEQ_MASK;
            g.len -= 1;
        } else if g.retire_before(head, ahead) {
            // Every predecessor is gone: so is the whole front up to here.
            g.head = head.wrapping_add(ahead as u64 + 1) & SEND_SEQ_MASK;
            g.len -= ahead + 1;
        }
        g.skip_retired();
        let side =
            if e.has_side() { take_side(&mut g.sides, head.wrapping_add(ahead as u64) & SEND_SEQ_MASK) } else { None };
        drop(g);
        let (ctx, kind, range) = e.retire();
        drop(range);
        drop(unlocked);
        if let Some(c) = side.and_then(|s| s.confirm) {
            c.completed(success);
        }
        Some((ctx, kind))
    }

    /// Operations posted and not yet retired.
    pub(crate) fn pending(&self) -> usize {
        let g = self.q.lock();
        let mask = g.slots.len() - 1;
        (0..g.len).filter(|k| g.slots[(g.head as usize + k) & mask].as_ref().is_some_and(|e| !e.done())).count()
    }
}

/// A single post refused with `e`: when the provider may have queued it
/// anyway, its `entry` (with the hold) is recorded as sequence number `seq`
/// of the locked ring `g`, as a posted one.
#[cold]
#[inline(never)]
fn refused_or_queued(g: &mut Ring, seq: u64, e: PostError, entry: Entry) -> Error {
    if e.maybe_queued {
        g.put(seq, entry);
    }
    post_error("ibv_post_send", e)
}

#[cold]
#[inline(never)]
fn empty_chain() -> Error {
    Error::inval("an empty chain: add operations before posting it")
}

#[cold]
#[inline(never)]
fn chain_too_long(n: usize, signaled: bool, depth: usize) -> Error {
    let need = n + usize::from(!signaled);
    Error::inval(format!(
        "a chain of {n} operation(s) whose last one is {} needs {need} send-queue slots: more than the \
         connection's sq_size {depth} (ConnCfg::set_sq_size)",
        if signaled { "signaled" } else { "unsignaled (one slot is kept for a signaled one)" },
    ))
}

#[cold]
#[inline(never)]
fn chain_full(len: usize, depth: usize, need: usize) -> Error {
    Error::Again(Msg::detailed(
        Detail::QueueFull,
        format!(
            "the send queue has {len} of its {depth} slots taken and the chain needs {need}: reap completions \
             (Cq::get_wc, Cq::next_completion) and post again"
        ),
    ))
}

#[cold]
#[inline(never)]
fn queue_full(len: usize, depth: usize, signaled: bool) -> Error {
    let (detail, msg) = if signaled || len >= depth {
        (
            Detail::QueueFull,
            format!(
                "the send queue is full: {len} operation(s) posted and not yet retired (sq_size {depth}); \
             reap completions (Cq::get_wc, Cq::next_completion) and post again"
            ),
        )
    } else {
        (
            Detail::SignalNeeded,
            format!(
                "the send queue has {len} of its {depth} slots taken (sq_size {depth}) and the last one is kept for a \
             signaled operation: post one with Flags::COMPLETION_ALWAYS and reap its completion, which retires the \
             unsignaled ones before it"
            ),
        )
    };
    Error::Again(Msg::detailed(detail, msg))
}
