//! Posting several send work requests with one call: a linked list of
//! `ibv_send_wr` through one `ibv_post_send` (one doorbell), or, when the
//! chain holds a native atomic write or flush, one `ibv_wr_start` ...
//! `ibv_wr_complete` sequence on the QP's extended interface.
//!
//! The two paths fail differently, as the verbs do: `ibv_post_send` stops
//! at the first request it cannot post and reports it in `bad_wr`, the
//! requests before it *are* posted (ibv_post_send(3)); `ibv_wr_complete`
//! posts nothing when it fails ("No work is executed to the queue until
//! ibv_wr_complete() returns success", ibv_wr_post(3)).

use crate::ffi;
use crate::qp::{Qp, QpEx};
use crate::wr::{classic_decode, encode, Classic, Extended, SendPosting, Token, Wr};
use std::io;
use std::mem::MaybeUninit;

/// Most work requests of a [`ChainList`] (kept in the list itself, and
/// linked in place when posted).
pub const MAX_CHAIN: usize = 16;

/// A chain to post with [`Qp::post_send`]: up to [`MAX_CHAIN`] work
/// requests, each with its caller's record `T` (what keeps its local memory
/// alive, what its completion reports), kept in place: a list allocates
/// nothing, and moving it copies it whole. Each request is encoded for the
/// classic backend (`ibv_post_send`) as it is added and, if plain, kept
/// only as that encoding; a native request (which the classic backend does
/// not carry) and an inline 8-byte write (whose SGE names its bytes) are
/// kept as their [`Wr`]. The extended backend encodes the requests' `Wr`s
/// when posting: a list made by [`keeping_all`](Self::keeping_all) (for a
/// QP that may post native requests) keeps every request's `Wr` from the
/// start; in another, the first native request added reads the plain ones
/// before it back from their encodings into their `Wr`s, and from then on
/// the list keeps every request's `Wr`.
pub struct ChainList<T> {
    /// `raw`, `sge` and `rec` of `slots[..len]` are initialised, and `wr`
    /// of every request when `all`, else of those in `inline8` (`raw` and
    /// `sge` are used when no request is native, but for the IDs
    /// [`set_wr_id`](Self::set_wr_id) puts into `raw`).
    len: usize,
    /// Whether one of the requests is native ([`Wr::is_native`]).
    native: bool,
    /// Whether every request's `wr` is written (never unset: a list that
    /// was made so or held a native request keeps doing it).
    all: bool,
    /// Bit `i`: request `i` is a [`Wr::Inline8`], whose SGE names its bytes
    /// in `slots[i].wr` (set when posting: the list may move before).
    inline8: u16,
    /// The requests, each with its parts side by side (one address to
    /// compute a push).
    slots: [Slot<T>; MAX_CHAIN],
    /// The address of `slots` and the number of requests when a post with
    /// the list's own IDs last linked them (each to the next and to its
    /// SGE, an inline write's SGE to its bytes): still linked while both
    /// are the same (a list posted again where it was, as it was). Reset
    /// when emptied; a push changes the number.
    linked: (usize, usize),
}

/// One request of a [`ChainList`].
struct Slot<T> {
    /// The classic backend's encoding of the request, made as it is added
    /// (where its kind is known), but for `wr_id`, `next` and `sg_list`.
    raw: MaybeUninit<ffi::ibv_send_wr>,
    /// Its SGE.
    sge: MaybeUninit<ffi::ibv_sge>,
    /// The request, when the list keeps it: an inline 8-byte write, or any
    /// request of a list that keeps them `all`.
    wr: MaybeUninit<Wr>,
    /// Its record, as `Some` (so `take_into` copies it into a slot of
    /// `Option<T>` as it is).
    rec: MaybeUninit<Option<T>>,
}

impl<T> Slot<T> {
    /// A slot with nothing initialised.
    const EMPTY: Slot<T> = Slot {
        raw: MaybeUninit::uninit(),
        sge: MaybeUninit::uninit(),
        wr: MaybeUninit::uninit(),
        rec: MaybeUninit::uninit(),
    };
}

impl<T> std::fmt::Debug for ChainList<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChainList").field("wrs", &self.iter().collect::<Vec<_>>()).finish_non_exhaustive()
    }
}

impl<T> Default for ChainList<T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T> ChainList<T> {
    /// An empty list.
    #[inline]
    pub const fn new() -> Self {
        Self::empty(false)
    }

    /// An empty list that keeps every request's [`Wr`] beside its encoding:
    /// for a QP that may post native requests, whose lists go to the
    /// extended interface without reading plain requests back.
    #[inline]
    pub const fn keeping_all() -> Self {
        Self::empty(true)
    }

    /// An empty list, keeping every request's [`Wr`] when `all`.
    #[inline]
    const fn empty(all: bool) -> Self {
        ChainList { len: 0, native: false, all, inline8: 0, slots: [const { Slot::EMPTY }; MAX_CHAIN], linked: (0, 0) }
    }

    /// Requests in the list.
    #[inline]
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the list is empty.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Whether the list holds [`MAX_CHAIN`] requests.
    #[inline]
    pub fn is_full(&self) -> bool {
        self.len >= MAX_CHAIN
    }

    /// Whether one of the requests is native ([`Wr::is_native`]), so
    /// the list is posted through the extended interface.
    #[inline]
    pub fn has_native(&self) -> bool {
        self.native
    }

    /// Appends `wr` with its record; both are handed back when the list is
    /// full.
    #[inline(always)]
    pub fn push(&mut self, wr: Wr, rec: T) -> Result<(), (Wr, T)> {
        let i = self.len;
        // Full when `i` reaches MAX_CHAIN, the length of `slots`.
        let Some(slot) = self.slots.get_mut(i) else {
            return Err((wr, rec));
        };
        // SAFETY: plain data, all-zero is valid.
        let mut c = Classic::new(slot.raw.write(unsafe { std::mem::zeroed() }));
        // false for a native request: the list then goes to the extended
        // interface, which reads `wr`.
        let native = !encode(&wr, &mut c);
        slot.sge.write(c.sge);
        slot.rec.write(Some(rec));
        let inline8 = matches!(wr, Wr::Inline8 { .. });
        if native | inline8 | self.all {
            slot.wr.write(wr);
            if native && !self.all {
                self.keep_plain(i);
                self.all = true;
            }
            self.native |= native;
            self.inline8 |= u16::from(inline8) << i;
        }
        self.len = i + 1;
        Ok(())
    }

    /// Whether the list keeps request `i`'s [`Wr`] (its `wr` written, for
    /// a request of the list): every request's when `all`, else an inline
    /// 8-byte write's.
    #[inline(always)]
    fn keeps(&self, i: usize) -> bool {
        self.all || self.inline8 & (1 << i) != 0
    }

    /// Request `i` as it was added (`None` past the end). A plain request
    /// the list keeps only as its encoding (see [`ChainList`]) is read back
    /// from it: its ID is the one [`set_wr_id`](Self::set_wr_id) gave it (0
    /// when none did), and a 0-byte element at address 0 with key 0 comes
    /// back as none (both are posted as none).
    #[inline]
    pub fn get(&self, i: usize) -> Option<Wr> {
        if i >= self.len {
            return None;
        }
        let s = self.slots.get(i)?;
        if self.keeps(i) {
            // SAFETY: i < len, and the list keeps the request: its `wr` is
            // initialised (a `Copy` value).
            return Some(unsafe { s.wr.assume_init() });
        }
        Some(Wr::Plain(read_back(s)))
    }

    /// Reads the plain requests of the list but request `except` back
    /// from their encodings into their `wr`s (the first native request's
    /// push, at `except`: the list will go to the extended
    /// interface, which reads `Wr`s).
    #[cold]
    #[inline(never)]
    fn keep_plain(&mut self, except: usize) {
        for i in 0..self.len {
            if i != except && self.inline8 & (1 << i) == 0 {
                if let Some(s) = self.slots.get_mut(i) {
                    let p = read_back(s);
                    s.wr.write(Wr::Plain(p));
                }
            }
        }
    }

    /// The index of the first request the extended interface `ex` does not
    /// carry ([`QpEx::carries`]), if any.
    #[inline]
    pub fn first_not_carried(&self, ex: &QpEx<'_>) -> Option<usize> {
        self.position(|_, w| !ex.carries(w))
    }

    /// The index of the first request, in order, for which `f` (given its
    /// index) is true: a kept request read in place, another read back (as
    /// [`get`](Self::get)).
    #[inline(always)]
    fn position(&self, mut f: impl FnMut(usize, &Wr) -> bool) -> Option<usize> {
        if self.all {
            let kept = self.slots.get(..self.len).unwrap_or_default();
            // SAFETY: a slot of the first `len` of a list that keeps every
            // request's `wr` (`all`): initialised.
            return kept.iter().enumerate().position(|(i, s)| f(i, unsafe { s.wr.assume_init_ref() }));
        }
        (0..self.len).position(|i| self.get(i).is_some_and(|w| f(i, &w)))
    }

    /// The requests, in order, as they were added.
    pub fn iter(&self) -> impl Iterator<Item = Wr> + Clone + '_ {
        (0..self.len).filter_map(|i| self.get(i))
    }

    /// Empties the list, handing the records of the first `posted` requests
    /// to `f` with their index, in order, and dropping the rest.
    #[inline(always)]
    pub fn take(&mut self, posted: usize, mut f: impl FnMut(usize, T)) {
        let n = self.len;
        // Emptied first: should `f` unwind, the records not yet moved leak
        // (never dropped twice).
        self.len = 0;
        self.native = false;
        self.inline8 = 0;
        self.linked = (0, 0);
        let posted = posted.min(n);
        let (out, rest) = self.slots.split_at_mut(posted.min(MAX_CHAIN));
        for (i, s) in out.iter().enumerate() {
            // SAFETY: the records of slots[..n] were initialised (each
            // `Some`); each is read out once (the list no longer counts
            // them).
            if let Some(rec) = unsafe { s.rec.assume_init_read() } {
                f(i, rec);
            }
        }
        if posted < n {
            drop_rest(rest, n - posted);
        }
    }

    /// Empties the list, moving the records of the first `posted` requests
    /// into `slots`, request `i`'s into `slots[at(i)]` (dropping what was
    /// there first: nothing, for a caller whose free slots are empty), and
    /// dropping the rest. Each record goes straight from the list into its
    /// slot.
    ///
    /// # Panics
    /// When `at(i)` is out of `slots`' bounds (the records not yet moved
    /// then leak, never dropped twice).
    #[inline(always)]
    pub fn take_into(&mut self, posted: usize, slots: &mut [Option<T>], at: impl Fn(usize) -> usize) {
        let n = self.len;
        // Emptied first, as in `take`.
        self.len = 0;
        self.native = false;
        self.inline8 = 0;
        self.linked = (0, 0);
        let posted = posted.min(n).min(MAX_CHAIN);
        for (i, s) in self.slots.iter().enumerate().take(posted) {
            let slot = &mut slots[at(i)];
            if slot.is_some() {
                clear_slot(slot);
            }
            // SAFETY: the record of slots[i] (i < n) is initialised, a
            // `Option<T>` like the slot, and read out once (the list no
            // longer counts it); the slot is empty (nothing to drop is
            // overwritten), and apart from the list (`slots` is borrowed
            // mutably while the list is).
            unsafe { std::ptr::copy_nonoverlapping(s.rec.as_ptr(), slot, 1) };
        }
        if posted < n {
            drop_rest(&mut self.slots[posted..], n - posted);
        }
    }

    /// Empties the list without dropping its records: for records with
    /// nothing to drop (those that own something leak).
    #[inline(always)]
    pub fn forget_all(&mut self) {
        self.len = 0;
        self.native = false;
        self.inline8 = 0;
        self.linked = (0, 0);
    }

    /// Empties the list, dropping the records.
    #[inline]
    pub fn clear(&mut self) {
        self.take(0, |_, _| {});
    }
}

/// The request of the slot `s`.
///
/// # Safety
/// `s` points to one of a list's slots (never one past the last: the place
/// `*s` must be in the list); `addr_of_mut!` makes no reference and reads
/// nothing.
#[inline(always)]
unsafe fn raw<T>(s: *mut Slot<T>) -> *mut ffi::ibv_send_wr {
    // SAFETY: the caller's.
    unsafe { std::ptr::addr_of_mut!((*s).raw).cast() }
}

/// Links the first `n` requests of the slots at `base`: each to the next
/// and to its SGE, the last to none, an inline 8-byte write's SGE (bit `i`
/// of `inline8`) to its bytes in the slot; unless `OWN`, request `i` gets
/// the ID `wr_id(i)` on the way.
///
/// # Safety
/// `base` points to a list's slots, `0 < n <= MAX_CHAIN` of them with
/// every part initialised (and `wr` for those of `inline8`).
#[inline(always)]
unsafe fn link<T, const OWN: bool>(base: *mut Slot<T>, n: usize, inline8: u16, wr_id: &impl Fn(usize) -> u64) {
    // SAFETY: i < n: every part of slots[i] is initialised, reached
    // through pointers to the list's elements; the next slot's request is
    // this one's address one slot further (no dereference: past the last
    // slot it is only an address, stored until the last request's `next`
    // is set to null).
    unsafe {
        for i in 0..n {
            let s = base.add(i);
            let rw = raw(s);
            if !OWN {
                (*rw).wr_id = wr_id(i);
            }
            (*rw).next = rw.wrapping_byte_add(std::mem::size_of::<Slot<T>>());
            (*rw).sg_list = std::ptr::addr_of_mut!((*s).sge).cast();
        }
        (*raw(base.add(n - 1))).next = std::ptr::null_mut();
        let mut m = u32::from(inline8) & ((1u32 << n) - 1);
        while m != 0 {
            let s = base.add(m.trailing_zeros() as usize);
            if let Wr::Inline8 { value, .. } = &*(*s).wr.as_ptr() {
                (*(*s).sge.as_mut_ptr()).addr = value.as_ptr() as u64;
            }
            m &= m - 1;
        }
    }
}

/// The plain request of a slot of the list's first `len` (its `raw` and
/// `sge` initialised), read back from its encoding: out of line, so that
/// reading a kept request stays small.
#[inline(never)]
fn read_back<T>(s: &Slot<T>) -> crate::wr::SendWr {
    // SAFETY: the caller's slot is one of the list's first `len`, whose
    // `raw` and `sge` every push initialises.
    unsafe { classic_decode(s.raw.assume_init_ref(), s.sge.assume_init_ref()) }
}

/// Empties a slot `ChainList::take_into` fills.
#[cold]
#[inline(never)]
fn clear_slot<T>(slot: &mut Option<T>) {
    *slot = None;
}

/// Drops the records of the first `k` slots of `rest`.
#[cold]
#[inline(never)]
fn drop_rest<T>(rest: &mut [Slot<T>], k: usize) {
    for s in rest.iter_mut().take(k) {
        // SAFETY: the caller's records not handed out (initialised, no
        // longer counted by the list), dropped once.
        unsafe { s.rec.assume_init_drop() };
    }
}

impl<T> Drop for ChainList<T> {
    #[inline]
    fn drop(&mut self) {
        if self.len != 0 {
            self.clear();
        }
    }
}

/// The requests of the list in order with one call, request `i` with the
/// work request ID `wr_id(i)` (the IDs in the requests are not used): as
/// one linked list through `ibv_post_send` (one doorbell), or, when one of
/// them is native ([`ChainList::has_native`]), as one `ibv_wr_start` ...
/// `ibv_wr_complete` sequence on the extended interface.
///
/// Errors: `(k, errno)`: requests `0..k` were posted, or may have been
/// (their memory must stay held), `k..` were not.
/// * through `ibv_post_send`, `k` is the index of the request the provider
///   refused (`bad_wr`; `ENOMEM` when the send queue is full, `EINVAL` for
///   a bad request): the ones before it are posted and will complete; when
///   the provider names none (rxe's failed doorbell, after the queue was
///   written: see [`PostError`](crate::post::PostError)), `k` is the whole
///   list;
/// * through the extended interface `k` is 0 for `EOPNOTSUPP` (before
///   anything is built) when the QP's extended interface does not carry
///   one of the requests (see [`QpEx::carries`]), and the whole list when
///   `ibv_wr_complete` fails (mlx5 then posts nothing, rxe may have queued
///   all of them).
impl<T, F: Fn(usize) -> u64> SendPosting<F> for &mut ChainList<T> {
    type Error = (usize, io::Error);

    #[inline]
    unsafe fn post(self, qp: &Qp, wr_id: F, _: Token) -> Result<(), (usize, io::Error)> {
        // SAFETY: the caller's guarantee, passed on.
        unsafe { post_chain::<T, false>(self, qp, wr_id) }
    }
}

/// The work request IDs given to a [`ChainList`]'s requests one by one
/// ([`ChainList::set_wr_id`]; 0 for a request given none): posted with
/// `qp.post_send(&mut list, OwnIds)`, as by an ID function otherwise.
#[derive(Debug, Clone, Copy)]
pub struct OwnIds;

impl<T> SendPosting<OwnIds> for &mut ChainList<T> {
    type Error = (usize, io::Error);

    #[inline]
    unsafe fn post(self, qp: &Qp, _: OwnIds, _: Token) -> Result<(), (usize, io::Error)> {
        // SAFETY: the caller's guarantee, passed on.
        unsafe { post_chain::<T, true>(self, qp, |_| 0) }
    }
}

impl<T> ChainList<T> {
    /// Gives request `i` the work request ID `wr_id`, which
    /// [`OwnIds`] posts it with (nothing past the end).
    #[inline(always)]
    pub fn set_wr_id(&mut self, i: usize, wr_id: u64) {
        if i < self.len {
            if let Some(rw) = self.slots.get_mut(i).map(|s| &mut s.raw) {
                // SAFETY: i < len: slots[i].raw is initialised (`push` writes it
                // for every request).
                unsafe { rw.assume_init_mut() }.wr_id = wr_id;
            }
        }
    }

    /// Request `i`'s ID given by [`set_wr_id`](Self::set_wr_id) (0 when
    /// none was, or past the end).
    #[inline(always)]
    pub fn wr_id(&self, i: usize) -> u64 {
        match self.slots.get(i).map(|s| &s.raw) {
            // SAFETY: i < len: slots[i].raw is initialised (`push` zeroes it).
            Some(rw) if i < self.len => unsafe { rw.assume_init_ref() }.wr_id,
            _ => 0,
        }
    }
}

/// The body of both postings of a list: request `i` with the ID `wr_id(i)`,
/// or with its own ([`OwnIds`]) when `OWN`.
///
/// # Safety
/// As [`Qp::post_send`].
#[inline(always)]
unsafe fn post_chain<T, const OWN: bool>(
    list: &mut ChainList<T>,
    qp: &Qp,
    wr_id: impl Fn(usize) -> u64,
) -> Result<(), (usize, io::Error)> {
    let n = list.len();
    if n == 0 {
        return Ok(());
    }
    if list.has_native() {
        let Some(mut ex) = qp.ex() else {
            return Err((0, io::Error::from_raw_os_error(libc::EOPNOTSUPP)));
        };
        let l: &ChainList<T> = list;
        // SAFETY: the caller's guarantee, passed on.
        let r = match OWN {
            true => unsafe { ex.post_list(l, |i| l.wr_id(i)) },
            false => unsafe { ex.post_list(l, wr_id) },
        };
        return r.map_err(|e| (if e.maybe_queued { n } else { 0 }, e.error));
    }
    // The classic backend: the requests were encoded as they were added;
    // linked here, each to its SGE, an inline write's SGE to its bytes in
    // the list (borrowed, neither moved nor changed, across the call).
    let n = n.min(MAX_CHAIN);
    let base: *mut Slot<T> = list.slots.as_mut_ptr();
    // SAFETY: `base` points to the list's first slot.
    let first = unsafe { raw(base) };
    // A list with its own IDs posted again where it was, as it was, is
    // linked already; one given IDs here is linked with them (one pass).
    let here = (base as usize, n);
    if !OWN {
        // SAFETY: n <= len slots at `base`, every part initialised.
        unsafe { link::<T, OWN>(base, n, list.inline8, &wr_id) };
    } else if list.linked != here {
        // SAFETY: as above.
        unsafe { link::<T, OWN>(base, n, list.inline8, &wr_id) };
        list.linked = here;
    }
    let mut bad: *mut ffi::ibv_send_wr = std::ptr::null_mut();
    // SAFETY: live QP; the n requests are initialised and linked in
    // order, their SGEs beside them and inline bytes in the list, all
    // alive and unchanged across the call; the caller guarantees the
    // memory the SGEs name.
    let rc = unsafe { qp.post_send_raw(first, &mut bad) };
    if rc == 0 {
        return Ok(());
    }
    let k = if bad.is_null() {
        n // none named: all may be queued (rxe's failed doorbell)
    } else {
        ((bad as usize).wrapping_sub(first as usize) / std::mem::size_of::<Slot<T>>()).min(n)
    };
    Err((k, crate::from_errno_ret(rc, "ibv_post_send").err().unwrap_or_else(|| io::Error::other("ibv_post_send"))))
}

impl QpEx<'_> {
    /// Posts the requests of `list` as one `ibv_wr_start` ...
    /// `ibv_wr_complete` sequence, request `i` with the work request ID
    /// `wr_id(i)`: all of them or,
    /// when `ibv_wr_complete` fails, none on mlx5 and efa (which roll back),
    /// possibly all on rxe (a failed doorbell after the queue was written):
    /// [`PostError::maybe_queued`](crate::post::PostError::maybe_queued).
    ///
    /// # Safety
    /// As [`Qp::post_send`], for every request in `list`.
    ///
    /// # Errors
    /// `EOPNOTSUPP` (before anything is built) when a request is not
    /// [`carried`](Self::carries); the errno of `ibv_wr_complete`.
    #[inline(always)]
    pub(crate) unsafe fn post_list<T>(
        &mut self,
        list: &ChainList<T>,
        wr_id: impl Fn(usize) -> u64,
    ) -> Result<(), crate::post::PostError> {
        if list.first_not_carried(self).is_some() {
            return Err(io::Error::from_raw_os_error(libc::EOPNOTSUPP).into());
        }
        let q = self.qpx;
        // SAFETY: live qp_ex; the backend builds inside `ibv_wr_start`,
        // each request's ID set first, every request checked carried above;
        // the caller guarantees the local memory.
        unsafe {
            ffi::ibv_wr_start(q);
            let mut b = Extended::started(q);
            list.position(|i, wr| {
                b.id(wr_id(i));
                encode(wr, &mut b);
                false
            });
            crate::post::queued_outcome(ffi::ibv_wr_complete(q), "ibv_wr_complete")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wr::{SendOp, SendWr, Sge, WrFlags};
    use std::rc::Rc;

    fn write(signaled: bool) -> Wr {
        Wr::Plain(SendWr {
            wr_id: 0,
            op: SendOp::Write,
            sge: Some(Sge { addr: 0x1000, length: 8, lkey: 7 }),
            remote_addr: 0x2000,
            rkey: 9,
            signaled,
            fence: false,
            inline: false,
        })
    }

    fn inline8(value: [u8; 8]) -> Wr {
        let flags = WrFlags { wr_id: 0, signaled: false, fence: true };
        Wr::Inline8 { flags, rkey: 3, remote_addr: 0x3000, value }
    }

    #[test]
    fn a_list_holds_max_chain_and_hands_back_the_rest() {
        let mut l = ChainList::new();
        for i in 0..MAX_CHAIN {
            assert!(l.push(write(false), i).is_ok());
        }
        assert!(l.is_full());
        let (_, rec) = l.push(write(true), 99).unwrap_err();
        assert_eq!(rec, 99);
        assert_eq!(l.len(), MAX_CHAIN);
    }

    #[test]
    fn take_hands_out_the_posted_records_in_order_and_drops_the_rest() {
        let held = Rc::new(());
        let mut l = ChainList::new();
        for i in 0..5 {
            l.push(write(i == 4), (i, held.clone())).unwrap();
        }
        assert_eq!(Rc::strong_count(&held), 6);
        let mut out = Vec::new();
        l.take(3, |i, (k, h)| out.push((i, k, h)));
        assert!(l.is_empty());
        assert_eq!(out.iter().map(|(i, k, _)| (*i, *k)).collect::<Vec<_>>(), [(0, 0), (1, 1), (2, 2)]);
        assert_eq!(Rc::strong_count(&held), 4, "the two not posted are dropped");
        drop(out);
        // Posting more than the list holds hands out what it holds.
        l.push(write(true), (0, held.clone())).unwrap();
        let mut n = 0;
        l.take(usize::MAX, |_, _| n += 1);
        assert_eq!(n, 1);
        // A list dropped with records drops them.
        l.push(write(true), (0, held.clone())).unwrap();
        l.push(write(true), (1, held.clone())).unwrap();
        drop(l);
        assert_eq!(Rc::strong_count(&held), 1);
    }

    #[test]
    fn the_classic_encoder_builds_each_request() {
        let wrs = [write(false), inline8(*b"pointer!"), write(true)];
        let mut seen = Vec::new();
        for wr in &wrs {
            // SAFETY: plain data, all-zero is valid.
            let mut w: ffi::ibv_send_wr = unsafe { std::mem::zeroed() };
            let mut c = Classic::new(&mut w);
            assert!(encode(wr, &mut c));
            let s = c.sge;
            // SAFETY: the rdma member is the one `encode` wrote for a write.
            let (rkey, remote) = unsafe { (w.wr.rdma.rkey, w.wr.rdma.remote_addr) };
            seen.push((w.opcode, w.send_flags, w.num_sge, s.length, rkey));
            if w.send_flags & ffi::ibv_send_flags::IBV_SEND_INLINE.0 != 0 {
                // SAFETY: the SGE names the 8 bytes inside `wr`, alive here.
                let bytes = unsafe { std::slice::from_raw_parts(s.addr as *const u8, s.length as usize) };
                assert_eq!(bytes, b"pointer!");
            } else {
                assert_eq!((s.addr, s.lkey, remote), (0x1000, 7, 0x2000));
            }
        }
        use ffi::ibv_send_flags as f;
        let write_op = ffi::ibv_wr_opcode::IBV_WR_RDMA_WRITE;
        assert_eq!(
            seen,
            [
                (write_op, 0, 1, 8, 9),
                (write_op, f::IBV_SEND_FENCE.0 | f::IBV_SEND_INLINE.0, 1, 8, 3),
                (write_op, f::IBV_SEND_SIGNALED.0, 1, 8, 9),
            ]
        );
        // A native request is the extended interface's alone.
        let flags = WrFlags { wr_id: 0, signaled: true, fence: false };
        // SAFETY: plain data, all-zero is valid.
        let mut w: ffi::ibv_send_wr = unsafe { std::mem::zeroed() };
        let native = Wr::AtomicWrite { flags, rkey: 1, remote_addr: 8, value: [0; 8] };
        assert!(!encode(&native, &mut Classic::new(&mut w)));
    }

    #[test]
    fn get_gives_back_every_request_as_added() {
        let flags = WrFlags { wr_id: 0, signaled: true, fence: true };
        let sge = Some(Sge { addr: 0x1000, length: 8, lkey: 7 });
        let plain = |op, sge, remote_addr, rkey, inline| {
            Wr::Plain(SendWr { wr_id: 0, op, sge, remote_addr, rkey, signaled: false, fence: true, inline })
        };
        let wrs = [
            plain(SendOp::Write, sge, 0x2000, 9, false),
            plain(SendOp::Write, sge, 0x2000, 9, true),
            plain(SendOp::WriteImm(0x01020304), None, 0x2000, 9, false),
            plain(SendOp::Read, sge, 0x2008, 10, false),
            plain(SendOp::Send, sge, 0, 0, false),
            plain(SendOp::SendImm(5), sge, 0, 0, false),
            plain(SendOp::SendInv(77), None, 0, 0, false),
            plain(SendOp::CompareSwap { compare: 1, swap: 2 }, sge, 0x3000, 11, false),
            plain(SendOp::FetchAdd(3), sge, 0x3008, 12, false),
            inline8(*b"pointer!"),
            Wr::AtomicWrite { flags, rkey: 1, remote_addr: 8, value: *b"12345678" },
            Wr::Flush { flags, rkey: 2, remote_addr: 16, len: 1 << 40, ptype: 1 },
        ];
        let mut l = ChainList::new();
        for w in wrs {
            l.push(w, ()).unwrap();
        }
        let back: Vec<String> = l.iter().map(|w| format!("{w:?}")).collect();
        let want: Vec<String> = wrs.iter().map(|w| format!("{w:?}")).collect();
        assert_eq!(back, want);
        assert!(l.get(wrs.len()).is_none());
    }

    /// One request of each kind the classic backend carries, and two native ones.
    fn every_kind() -> Vec<Wr> {
        // A new `SendOp` fails to compile here: add a request of it below
        // (and its read-back in `classic_decode`).
        let _listed = |op: SendOp| match op {
            SendOp::Write
            | SendOp::WriteImm(_)
            | SendOp::Read
            | SendOp::Send
            | SendOp::SendImm(_)
            | SendOp::SendInv(_)
            | SendOp::CompareSwap { .. }
            | SendOp::FetchAdd(_) => {}
        };
        let sge = Some(Sge { addr: 0x1000, length: 8, lkey: 7 });
        let plain = |op, sge, remote_addr, rkey, signaled, inline| {
            Wr::Plain(SendWr { wr_id: 0, op, sge, remote_addr, rkey, signaled, fence: !signaled, inline })
        };
        let flags = WrFlags { wr_id: 0, signaled: true, fence: false };
        vec![
            plain(SendOp::Write, sge, 0x2000, 9, true, false),
            plain(SendOp::Write, sge, 0x2100, 19, false, true),
            plain(SendOp::WriteImm(0x01020304), None, 0x2200, 29, true, false),
            plain(SendOp::Read, sge, 0x2008, 10, false, false),
            plain(SendOp::Send, Some(Sge { addr: 0x5000, length: 0, lkey: 3 }), 0, 0, true, false),
            plain(SendOp::SendImm(5), sge, 0, 0, false, false),
            plain(SendOp::SendInv(77), None, 0, 0, true, false),
            plain(SendOp::CompareSwap { compare: 1, swap: 2 }, sge, 0x3000, 11, false, false),
            plain(SendOp::FetchAdd(3), sge, 0x3008, 12, true, false),
            inline8(*b"pointer!"),
            Wr::AtomicWrite { flags, rkey: 1, remote_addr: 8, value: *b"12345678" },
            Wr::Flush { flags, rkey: 2, remote_addr: 16, len: 1 << 40, ptype: 1 },
        ]
    }

    #[test]
    fn a_request_added_over_an_earlier_one_reads_back_as_itself() {
        // A plain request is kept only as encoded: read back, a request
        // added where another was must show nothing of the other.
        let kinds = every_kind();
        for mut l in [ChainList::new(), ChainList::keeping_all()] {
            for a in &kinds {
                for b in &kinds {
                    l.push(*a, ()).unwrap();
                    l.push(*a, ()).unwrap();
                    l.set_wr_id(0, 42);
                    l.clear();
                    l.push(*b, ()).unwrap();
                    l.push(*a, ()).unwrap();
                    assert_eq!(format!("{:?}", l.get(0).unwrap()), format!("{b:?}"), "{b:?} over {a:?}");
                    assert_eq!(format!("{:?}", l.get(1).unwrap()), format!("{a:?}"), "{a:?} over {a:?}");
                    assert_eq!(l.has_native(), a.is_native() || b.is_native());
                    assert_eq!(l.wr_id(0), 0, "an ID given to an earlier request is gone");
                    if let Some(p) = b.send_wr() {
                        // The header fields as a fresh encoding's.
                        // SAFETY: plain data, all-zero is valid.
                        let mut fresh: ffi::ibv_send_wr = unsafe { std::mem::zeroed() };
                        let mut c = Classic::new(&mut fresh);
                        assert!(encode(b, &mut c));
                        // SAFETY: slot 0 holds a request (`raw` initialised).
                        let raw = unsafe { l.slots[0].raw.assume_init_ref() };
                        assert_eq!(
                            (raw.num_sge, raw.opcode, raw.send_flags),
                            (fresh.num_sge, fresh.opcode, fresh.send_flags)
                        );
                        assert_eq!(p.inline, raw.send_flags & ffi::ibv_send_flags::IBV_SEND_INLINE.0 != 0);
                    }
                    l.clear();
                }
            }
        }
    }

    #[test]
    fn a_list_of_40_byte_records_is_about_4_kib() {
        // rpma's `Conn::chain` documents the size (its ring entries have a niche, as this record).
        let size = std::mem::size_of::<ChainList<(std::num::NonZeroU64, [u64; 4])>>();
        assert!((4 * 1024..5 * 1024).contains(&size), "{size}");
    }

    #[test]
    fn a_native_request_marks_the_list() {
        let mut l = ChainList::new();
        l.push(write(false), ()).unwrap();
        let flags = WrFlags { wr_id: 0, signaled: true, fence: false };
        l.push(Wr::AtomicWrite { flags, rkey: 1, remote_addr: 8, value: [0; 8] }, ()).unwrap();
        assert!(l.has_native());
        // The plain request before it is read back into its `Wr` once, for
        // the extended interface; one after it is kept as it comes.
        l.push(write(true), ()).unwrap();
        assert_eq!(
            format!("{:?}", l.iter().collect::<Vec<_>>()),
            format!("{:?}", [write(false), l.get(1).unwrap(), write(true)])
        );
        l.clear();
        assert!(!l.has_native() && l.is_empty());
        // Filled again: nothing of the earlier list's kept requests shows.
        let read = |signaled| match write(signaled) {
            Wr::Plain(p) => Wr::Plain(SendWr { op: SendOp::Read, ..p }),
            w => w,
        };
        l.push(read(false), ()).unwrap();
        l.push(read(true), ()).unwrap();
        assert_eq!(format!("{:?}", l.get(1).unwrap()), format!("{:?}", read(true)));
        let native = Wr::Flush { flags, rkey: 2, remote_addr: 16, len: 8, ptype: 1 };
        l.push(native, ()).unwrap();
        l.push(read(false), ()).unwrap();
        let want = [read(false), read(true), native, read(false)];
        assert_eq!(format!("{:?}", l.iter().collect::<Vec<_>>()), format!("{want:?}"));
    }

    /// The link cache is dropped whenever the requests may have changed
    /// their links: emptied (pushes change the count).
    #[test]
    fn the_link_cache_goes_with_the_requests() {
        let mut l = ChainList::new();
        l.push(write(true), ()).unwrap();
        for reset in 0..3 {
            l.linked = (1, 1);
            match reset {
                0 | 1 => l.forget_all(),
                _ => l.take(1, |_, _| {}),
            }
            assert_eq!(l.linked, (0, 0), "reset {reset}");
            if l.is_empty() {
                l.push(write(true), ()).unwrap();
            }
        }
        l.linked = (1, 1);
        l.clear();
        assert_eq!(l.linked, (0, 0), "clear");
    }

    /// `position` (the carried check's and the extended post's walk) sees
    /// every request in order with its index, in both kinds of list, kept
    /// in place or read back.
    #[test]
    fn position_walks_the_requests_in_order() {
        let flags = WrFlags { wr_id: 0, signaled: true, fence: false };
        let flush = Wr::Flush { flags, rkey: 2, remote_addr: 16, len: 8, ptype: 1 };
        for mut l in [ChainList::new(), ChainList::keeping_all()] {
            for w in [write(false), write(true), flush, write(false)] {
                l.push(w, ()).unwrap();
            }
            let mut seen = Vec::new();
            let first = |i, w: &Wr| {
                seen.push((i, format!("{w:?}")));
                true
            };
            assert_eq!(l.position(first), Some(0));
            assert_eq!(l.position(|_, w| w.is_native()), Some(2));
            assert_eq!(l.position(|_, w| matches!(w, Wr::Inline8 { .. })), None);
            let mut all = Vec::new();
            let none = |i, w: &Wr| {
                all.push((i, format!("{w:?}")));
                false
            };
            assert_eq!(l.position(none), None);
            let want: Vec<_> = l.iter().map(|w| format!("{w:?}")).enumerate().collect();
            assert_eq!((seen.len(), all), (1, want));
        }
    }
}
