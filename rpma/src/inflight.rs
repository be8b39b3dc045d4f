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
use std::sync::{Arc, Mutex, MutexGuard};

/// Anything kept alive by a reference.
pub(crate) trait Held: Send + Sync {}
impl<T: Send + Sync + ?Sized> Held for T {}

/// Keeps a registration and its memory alive.
pub(crate) type Hold = Arc<dyn Held>;

/// What kind of operation an entry is, reported in its completion.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub(crate) enum OpKind {
    Read,
    Write,
    WriteImm,
    AtomicWrite,
    Flush,
    Send,
    SendImm,
    SendInv,
    BindMw,
    LocalInv,
    Recv,
}

const RECV_BIT: u64 = 1 << 63;
const SRQ_BIT: u64 = 1 << 62;
/// An untracked operation (the `*_unchecked` fast paths): the wr_id carries
/// the kind in bits 56..61 and the user's op_context below them.
const UNTRACKED_BIT: u64 = 1 << 61;
const KIND_SHIFT: u32 = 56;
/// The largest op_context an untracked operation can carry.
pub(crate) const UNTRACKED_CTX_MAX: u64 = (1 << KIND_SHIFT) - 1;

const KINDS: [OpKind; 11] = [
    OpKind::Read,
    OpKind::Write,
    OpKind::WriteImm,
    OpKind::AtomicWrite,
    OpKind::Flush,
    OpKind::Send,
    OpKind::SendImm,
    OpKind::SendInv,
    OpKind::BindMw,
    OpKind::LocalInv,
    OpKind::Recv,
];

/// The wr_id of an untracked operation; `ctx` must be at most
/// [`UNTRACKED_CTX_MAX`].
#[inline]
pub(crate) fn untracked_wr_id(kind: OpKind, ctx: u64) -> u64 {
    debug_assert!(ctx <= UNTRACKED_CTX_MAX);
    UNTRACKED_BIT | (kind as u64) << KIND_SHIFT | ctx
}

/// The op_context and kind an untracked operation's wr_id carries.
#[inline]
pub(crate) fn untracked(wr_id: u64) -> Option<(u64, OpKind)> {
    let kind = *KINDS.get(((wr_id >> KIND_SHIFT) & 0x1f) as usize)?;
    Some((wr_id & UNTRACKED_CTX_MAX, kind))
}

/// Told the outcome of the operation whose entry carries it, once its own
/// completion is translated (a memory window's invalidation).
pub(crate) trait Confirm: Send + Sync {
    fn completed(&self, success: bool);
}

pub(crate) struct Entry {
    pub(crate) ctx: u64,
    pub(crate) kind: OpKind,
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
        Entry { ctx, kind: OpKind::Recv, signaled: true, done: false, hold, confirm: None }
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// A send-queue operation to record: what its completion reports, and what
/// it keeps alive.
pub(crate) struct SendOpRec {
    pub(crate) ctx: u64,
    pub(crate) kind: OpKind,
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

const SEQ_MASK: u64 = UNTRACKED_BIT - 1;

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
    #[inline]
    pub(crate) fn post_with(&self, op: SendOpRec, post: impl FnOnce(u64) -> std::io::Result<()>) -> Result<()> {
        let mut g = lock(&self.q);
        if g.len + usize::from(!op.signaled) >= self.depth {
            return Err(queue_full(g.len, self.depth, op.signaled));
        }
        let seq = (g.head + g.len as u64) & SEQ_MASK;
        post(seq).map_err(|e| Error::provider_raw("ibv_post_send", e))?;
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

    /// A completion for `wr_id` arrived (`success`: its status): retire it
    /// and everything before it (unsignaled operations complete with the
    /// next signaled one).
    #[inline]
    pub(crate) fn complete(&self, wr_id: u64, success: bool) -> Option<(u64, OpKind)> {
        let mut g = lock(&self.q);
        let ahead = (wr_id.wrapping_sub(g.head) & SEQ_MASK) as usize;
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
            g.head = (g.head + 1) & SEQ_MASK;
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
    tag: u64,
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
        Ok(RecvTracker { m: Mutex::new(slots), tag: RECV_BIT | if srq { SRQ_BIT } else { 0 } })
    }

    /// Posts a receive through `post` (given the wr_id) and records it.
    pub(crate) fn post_with(
        &self,
        ctx: u64,
        hold: Option<Hold>,
        post: impl FnOnce(u64) -> std::io::Result<()>,
    ) -> Result<()> {
        let mut g = lock(&self.m);
        let idx = g.free.pop().unwrap_or(g.entries.len());
        if let Err(e) = post(idx as u64 | self.tag) {
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

    pub(crate) fn complete(&self, wr_id: u64) -> Option<(u64, OpKind)> {
        let mut g = lock(&self.m);
        let idx = usize::try_from(wr_id & (SRQ_BIT - 1)).ok()?;
        let e = g.entries.get_mut(idx)?.take()?;
        g.free.push(idx);
        Some((e.ctx, e.kind))
    }

    pub(crate) fn pending(&self) -> usize {
        let g = lock(&self.m);
        g.entries.len() - g.free.len()
    }
}

/// Which tracker a completion's wr_id belongs to.
pub(crate) enum Source {
    Send,
    Recv,
    SrqRecv,
    Untracked,
}

#[inline]
pub(crate) fn source(wr_id: u64) -> Source {
    match (wr_id & RECV_BIT != 0, wr_id & SRQ_BIT != 0) {
        (false, false) if wr_id & UNTRACKED_BIT != 0 => Source::Untracked,
        (false, _) => Source::Send,
        (true, false) => Source::Recv,
        (true, true) => Source::SrqRecv,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(ctx: u64, kind: OpKind, signaled: bool, hold: Option<Hold>) -> SendOpRec {
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
                t.post_with(rec(round * 10 + k, OpKind::Write, k == 2, None), |id| {
                    ids.push(id);
                    Ok(())
                })
                .unwrap();
            }
            let last = *ids.last().unwrap();
            assert_eq!(t.complete(last + 1, true), None, "not posted yet");
            assert_eq!(t.complete(last, true), Some((round * 10 + 2, OpKind::Write)));
            assert_eq!(t.pending(), 0);
            assert_eq!(t.complete(last, true), None, "already retired");
        }
        assert_eq!(ids, (0..30).collect::<Vec<u64>>());
    }

    #[test]
    fn the_last_slot_is_kept_for_a_signaled_operation() {
        let t = SendTracker::new(3).unwrap();
        t.post_with(rec(1, OpKind::Write, false, None), ok).unwrap();
        t.post_with(rec(2, OpKind::Write, false, None), ok).unwrap();
        let e = t.post_with(rec(3, OpKind::Write, false, None), ok).unwrap_err();
        assert_eq!(e.code(), crate::error::RPMA_E_AGAIN);
        assert!(e.to_string().contains("kept for a signaled operation"), "{e}");
        // ... which can be posted, and whose completion retires the rest.
        let mut id = 0;
        t.post_with(rec(4, OpKind::Flush, true, None), |i| {
            id = i;
            Ok(())
        })
        .unwrap();
        let e = t.post_with(rec(5, OpKind::Write, true, None), ok).unwrap_err();
        assert!(e.to_string().contains("the send queue is full"), "{e}");
        assert_eq!(t.complete(id, true), Some((4, OpKind::Flush)));
        assert_eq!(t.pending(), 0);
        // A queue of 1 takes signaled operations only.
        let t = SendTracker::new(1).unwrap();
        assert!(t.post_with(rec(1, OpKind::Write, false, None), ok).is_err());
        t.post_with(rec(1, OpKind::Write, true, None), ok).unwrap();
    }

    #[test]
    fn untracked_wr_ids_carry_kind_and_context() {
        for kind in KINDS {
            for ctx in [0, 1, 0xdead_beef, UNTRACKED_CTX_MAX] {
                let id = untracked_wr_id(kind, ctx);
                assert!(matches!(source(id), Source::Untracked));
                assert_eq!(untracked(id), Some((ctx, kind)));
            }
        }
        // Tracked wr_ids never look untracked.
        assert!(matches!(source(5), Source::Send));
        assert!(matches!(source(RECV_BIT | 5), Source::Recv));
        assert!(matches!(source(RECV_BIT | SRQ_BIT | 5), Source::SrqRecv));
        assert_eq!(untracked(UNTRACKED_BIT | 31 << KIND_SHIFT), None);
    }

    #[test]
    fn send_queue_retires_in_order_and_releases_holds() {
        let t = SendTracker::new(4).unwrap();
        let hold: Arc<u8> = Arc::new(7);
        let mut ids = Vec::new();
        for (ctx, kind, h) in [
            (10, OpKind::Write, Some(hold.clone() as Hold)),
            (11, OpKind::Write, Some(hold.clone() as Hold)),
            (12, OpKind::Flush, None),
        ] {
            t.post_with(rec(ctx, kind, ctx == 12, h), |id| {
                ids.push(id);
                Ok(())
            })
            .unwrap();
        }
        assert_eq!(Arc::strong_count(&hold), 3);
        assert_eq!(t.complete(ids[2], true), Some((12, OpKind::Flush)));
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
        for (ctx, kind) in [(1, OpKind::Read), (2, OpKind::Write), (3, OpKind::Send)] {
            t.post_with(rec(ctx, kind, ctx != 2, Some(hold.clone() as Hold)), |id| {
                ids.push(id);
                Ok(())
            })
            .unwrap();
        }
        assert_eq!(t.complete(ids[2], true), Some((3, OpKind::Send)), "B first");
        assert_eq!(Arc::strong_count(&hold), 1, "the device is done with all three");
        assert_eq!(t.pending(), 0);
        assert_eq!(t.complete(ids[0], true), Some((1, OpKind::Read)), "A still finds its own");
        assert_eq!(t.complete(ids[0], true), None);
        assert_eq!(t.complete(ids[1], true), None, "the unsignaled one was retired by B");
        // The ring moved on: it is empty and takes new entries.
        t.post_with(rec(4, OpKind::Read, true, None), |id| {
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
            let r = SendOpRec { ctx: 0, kind: OpKind::LocalInv, signaled: true, hold: None, confirm: Some(c.clone()) };
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
        t.post_with(rec(1, OpKind::Write, true, None), ok).unwrap();
        let e = t
            .post_with(rec(2, OpKind::Write, true, None), |_| Err(std::io::Error::from_raw_os_error(libc::ENOMEM)))
            .unwrap_err();
        assert_eq!(e.errno(), Some(libc::ENOMEM));
        assert_eq!(t.pending(), 1, "a failed post leaves no entry");
        t.post_with(rec(3, OpKind::Write, true, None), ok).unwrap();
        t.post_with(rec(4, OpKind::Write, true, None), ok).unwrap();
        let e = t.post_with(rec(5, OpKind::Write, true, None), ok).unwrap_err();
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
        assert!(matches!(source(ids[0]), Source::SrqRecv));
        assert_eq!(t.pending(), 2);
        assert_eq!(t.complete(ids[1]), Some((2, OpKind::Recv)));
        assert_eq!(t.complete(ids[0]), Some((1, OpKind::Recv)));
        assert_eq!(t.complete(ids[0]), None);
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
        assert!(matches!(source(id), Source::Recv));
        assert!(matches!(source(5), Source::Send));
    }
}
