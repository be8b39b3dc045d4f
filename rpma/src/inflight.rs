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

pub(crate) struct Entry {
    pub(crate) ctx: u64,
    pub(crate) kind: OpKind,
    _hold: Option<Hold>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// The send queue of one QP: a ring of `depth` slots in posting order. The
/// work request ID of an entry is its sequence number, so a completion finds
/// its entry by offset from the oldest one, without a search.
pub(crate) struct SendTracker {
    q: Mutex<Ring>,
    depth: usize,
}

struct Ring {
    /// Sequence number of the oldest entry (the next one to retire).
    head: u64,
    /// Entries posted and not yet retired.
    len: usize,
    /// `slots[seq & mask]`; the length is a power of two at least `depth`.
    slots: Box<[Option<Entry>]>,
}

const SEQ_MASK: u64 = UNTRACKED_BIT - 1;

impl SendTracker {
    pub(crate) fn new(depth: u32) -> SendTracker {
        let depth = depth.max(1) as usize;
        let slots = (0..depth.next_power_of_two()).map(|_| None).collect();
        SendTracker { q: Mutex::new(Ring { head: 0, len: 0, slots }), depth }
    }

    /// Posts an operation through `post` (given the wr_id) while holding the
    /// queue's lock, so entries are in the order the device sees them, and
    /// records it on success.
    #[inline]
    pub(crate) fn post_with(
        &self,
        ctx: u64,
        kind: OpKind,
        hold: Option<Hold>,
        post: impl FnOnce(u64) -> std::io::Result<()>,
    ) -> Result<()> {
        let mut g = lock(&self.q);
        if g.len >= self.depth {
            return Err(queue_full(g.len, self.depth));
        }
        let seq = (g.head + g.len as u64) & SEQ_MASK;
        post(seq).map_err(|e| Error::provider_raw("ibv_post_send", e))?;
        let mask = g.slots.len() - 1;
        g.slots[seq as usize & mask] = Some(Entry { ctx, kind, _hold: hold });
        g.len += 1;
        Ok(())
    }

    /// A completion for `wr_id` arrived: retire it and everything before it
    /// (unsignaled operations complete with the next signaled one).
    #[inline]
    pub(crate) fn complete(&self, wr_id: u64) -> Option<(u64, OpKind)> {
        let mut g = lock(&self.q);
        let ahead = (wr_id.wrapping_sub(g.head) & SEQ_MASK) as usize;
        if ahead >= g.len {
            return None; // not posted here, or already retired
        }
        let mask = g.slots.len() - 1;
        let head = g.head as usize;
        for k in 0..ahead {
            g.slots[(head + k) & mask] = None;
        }
        let e = g.slots[(head + ahead) & mask].take()?;
        g.head = (wr_id + 1) & SEQ_MASK;
        g.len -= ahead + 1;
        Some((e.ctx, e.kind))
    }

    /// Operations posted and not yet retired.
    pub(crate) fn pending(&self) -> usize {
        lock(&self.q).len
    }
}

#[cold]
#[inline(never)]
fn queue_full(len: usize, depth: usize) -> Error {
    Error::Again(
        format!(
            "the send queue is full: {len} operations posted since the last completed signaled one (sq_size {depth}); \
             post operations with Flags::COMPLETION_ALWAYS and reap their completions"
        )
        .into(),
    )
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
    pub(crate) fn new(srq: bool, depth: u32) -> RecvTracker {
        let n = depth as usize;
        let slots = Slots { entries: Vec::with_capacity(n), free: Vec::with_capacity(n) };
        RecvTracker { m: Mutex::new(slots), tag: RECV_BIT | if srq { SRQ_BIT } else { 0 } }
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
        let entry = Some(Entry { ctx, kind: OpKind::Recv, _hold: hold });
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

    #[test]
    fn send_ring_wraps_and_ignores_unknown_ids() {
        let t = SendTracker::new(3); // 4 slots
        let mut ids = Vec::new();
        for round in 0..10u64 {
            // two unsignaled, one signaled: the signaled completion retires all three
            for k in 0..3 {
                t.post_with(round * 10 + k, OpKind::Write, None, |id| {
                    ids.push(id);
                    Ok(())
                })
                .unwrap();
            }
            assert!(t.post_with(99, OpKind::Write, None, ok).is_err(), "full at depth 3");
            let last = *ids.last().unwrap();
            assert_eq!(t.complete(last + 1), None, "not posted yet");
            assert_eq!(t.complete(last), Some((round * 10 + 2, OpKind::Write)));
            assert_eq!(t.pending(), 0);
            assert_eq!(t.complete(last), None, "already retired");
        }
        assert_eq!(ids, (0..30).collect::<Vec<u64>>());
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

    fn ok(_: u64) -> std::io::Result<()> {
        Ok(())
    }

    #[test]
    fn send_queue_retires_in_order_and_releases_holds() {
        let t = SendTracker::new(4);
        let hold: Arc<u8> = Arc::new(7);
        let mut ids = Vec::new();
        for (ctx, kind, h) in [
            (10, OpKind::Write, Some(hold.clone() as Hold)),
            (11, OpKind::Write, Some(hold.clone() as Hold)),
            (12, OpKind::Flush, None),
        ] {
            t.post_with(ctx, kind, h, |id| {
                ids.push(id);
                Ok(())
            })
            .unwrap();
        }
        assert_eq!(Arc::strong_count(&hold), 3);
        assert_eq!(t.complete(ids[2]), Some((12, OpKind::Flush)));
        assert_eq!(Arc::strong_count(&hold), 1, "unsignaled predecessors are retired too");
        assert_eq!(t.complete(ids[0]), None);
        assert_eq!(t.pending(), 0);
    }

    #[test]
    fn send_queue_refuses_when_full_and_forgets_failed_posts() {
        let t = SendTracker::new(2);
        t.post_with(1, OpKind::Write, None, ok).unwrap();
        let e =
            t.post_with(2, OpKind::Write, None, |_| Err(std::io::Error::from_raw_os_error(libc::ENOMEM))).unwrap_err();
        assert_eq!(e.errno(), Some(libc::ENOMEM));
        assert_eq!(t.pending(), 1, "a failed post leaves no entry");
        t.post_with(3, OpKind::Write, None, ok).unwrap();
        let e = t.post_with(4, OpKind::Write, None, ok).unwrap_err();
        assert_eq!(e.code(), crate::error::RPMA_E_AGAIN);
        assert!(e.to_string().contains("sq_size 2"), "{e}");
    }

    #[test]
    fn receives_complete_in_any_order() {
        let t = RecvTracker::new(true, 4);
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
        let q = RecvTracker::new(false, 4);
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
