//! A region's range book: which parts of its memory the device and the CPU
//! use right now, so that one registration can be staged into while other
//! ranges of it are in flight; and how many operations are in flight, which
//! keeps the region alive.
//!
//! The region is cut into at most [`STRIPES`] stripes of a power of two
//! bytes (at least 64, a cache line), each one `AtomicU64` of counts: the operations the
//! device reads the stripe for, those it writes it for, the CPU's readers by
//! reference, its readers by copy, and its writer. The region's `whole` word
//! counts every operation in flight (`OPS`), the device's uses that cover
//! every stripe (counted there alone: a buffer used whole costs one atomic),
//! and the CPU's users (all but copies, which only CPU writers must see), so
//! that the device's whole-region uses meet them there.
//!
//! Taking a range adds to each word it covers and checks, in the value it
//! replaced, the counts that conflict with it; releasing subtracts. Two
//! conflicting uses always meet on one word (a stripe both cover, or
//! `whole`), where both do read-modify-writes: they are totally ordered
//! there, and whichever comes second sees the first and backs out. Ranges
//! that share a stripe conflict (conservative: a refusal too many, never an
//! access too many).
//!
//! Operations hold no reference count of the region: while `OPS` is not
//! zero, the region's owner ([`MrLocal`](crate::MrLocal)) cannot be
//! deregistered, and when it is dropped it sets `ORPHAN` in `whole` and
//! leaves its reference to the release that brings `OPS` to zero, which
//! frees it. Both happen on the one word, so exactly one of them frees.

use crate::error::RangeUse;
#[cfg(loom)]
use loom::sync::atomic::{AtomicU64, Ordering};
use std::ptr::NonNull;
#[cfg(not(loom))]
use std::sync::atomic::{AtomicU64, Ordering};

/// Stripes of a region's book.
pub(crate) const STRIPES: usize = 64;
const MIN_SHIFT: u32 = 6;

/// A count in a word: its unit and width.
#[derive(Clone, Copy)]
struct Field {
    unit: u64,
    bits: u32,
}

impl Field {
    /// Every bit of the field.
    const fn all(self) -> u64 {
        ((1 << self.bits) - 1) * self.unit
    }

    /// Its top bit: a count that reached it is refused before later
    /// increments could carry into the next field (every thread between
    /// its add and its back-out adds one at most).
    const fn full(self) -> u64 {
        self.unit << (self.bits - 1)
    }
}

// A stripe's fields: 18-bit device counts, 9-bit CPU counts.
const DEVICE_READ: Field = Field { unit: 1, bits: 18 };
const DEVICE_WRITE: Field = Field { unit: 1 << 18, bits: 18 };
const CPU_READ: Field = Field { unit: 1 << 36, bits: 9 };
const CPU_COPY: Field = Field { unit: 1 << 45, bits: 9 };
const CPU_WRITE: Field = Field { unit: 1 << 54, bits: 9 };

// `whole`'s fields: operations in flight, the device's whole-region uses,
// the CPU's users; and the orphan bit.
const OPS: Field = Field { unit: 1, bits: 18 };
const WHOLE_READ: Field = Field { unit: 1 << 18, bits: 15 };
const WHOLE_WRITE: Field = Field { unit: 1 << 33, bits: 15 };
const WHOLE_CPU_READ: Field = Field { unit: 1 << 48, bits: 7 };
const WHOLE_CPU_WRITE: Field = Field { unit: 1 << 55, bits: 7 };
const ORPHAN: u64 = 1 << 63;

/// What each field of a stripe's word means in a refusal, the CPU's first
/// (a stage ends soon).
const STRIPE_USES: [(Field, RangeUse); 5] = [
    (CPU_WRITE, RangeUse::CpuWrites),
    (CPU_READ, RangeUse::CpuReads),
    (CPU_COPY, RangeUse::CpuReads),
    (DEVICE_WRITE, RangeUse::DeviceWrites),
    (DEVICE_READ, RangeUse::DeviceReads),
];

/// The same for `whole` (a full `OPS` names the refused use itself).
const WHOLE_USES: [(Field, RangeUse); 4] = [
    (WHOLE_CPU_WRITE, RangeUse::CpuWrites),
    (WHOLE_CPU_READ, RangeUse::CpuReads),
    (WHOLE_WRITE, RangeUse::DeviceWrites),
    (WHOLE_READ, RangeUse::DeviceReads),
];

/// How a range is used: [`RangeUse`]'s four, with the CPU's reads split
/// into references ([`view_at`](crate::MrLocal::view_at)) and copies
/// ([`read_at`](crate::MrLocal::read_at), which may race the device's
/// writes: raw copies of unspecified bytes, never a reference).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub(crate) enum Use {
    // Each one's value is its field's shift in a stripe's word.
    DeviceReads = 0,
    DeviceWrites = 18,
    CpuReads = 36,
    CpuCopies = 45,
    CpuWrites = 54,
}

impl From<RangeUse> for Use {
    #[inline(always)]
    fn from(u: RangeUse) -> Use {
        match u {
            RangeUse::DeviceReads => Use::DeviceReads,
            RangeUse::DeviceWrites => Use::DeviceWrites,
            RangeUse::CpuReads => Use::CpuReads,
            RangeUse::CpuWrites => Use::CpuWrites,
        }
    }
}

impl Use {
    /// Its unit in a stripe's word.
    #[inline(always)]
    fn unit(self) -> u64 {
        1 << self as u8
    }

    fn is_device(self) -> bool {
        matches!(self, Use::DeviceReads | Use::DeviceWrites)
    }

    /// Its unit in `whole`: a device use covering every stripe (with its
    /// operation), a CPU use anywhere (copies: none).
    #[inline(always)]
    fn whole_unit(self) -> u64 {
        match self {
            Use::DeviceReads => OPS.unit + WHOLE_READ.unit,
            Use::DeviceWrites => OPS.unit + WHOLE_WRITE.unit,
            Use::CpuReads => WHOLE_CPU_READ.unit,
            Use::CpuCopies => 0,
            Use::CpuWrites => WHOLE_CPU_WRITE.unit,
        }
    }

    /// The bits of a stripe's word that refuse this use: the uses it
    /// conflicts with, and its own count's top bit.
    #[inline(always)]
    fn stripe_conflicts(self) -> u64 {
        let cpu_write = CPU_WRITE.all();
        match self {
            Use::DeviceReads => cpu_write | DEVICE_READ.full(),
            Use::DeviceWrites => cpu_write | CPU_READ.all() | DEVICE_WRITE.full(),
            Use::CpuReads => cpu_write | DEVICE_WRITE.all() | CPU_READ.full(),
            Use::CpuCopies => cpu_write | CPU_COPY.full(),
            Use::CpuWrites => cpu_write | CPU_READ.all() | CPU_COPY.all() | DEVICE_WRITE.all() | DEVICE_READ.all(),
        }
    }

    /// The bits of `whole` that refuse this use taking `whole_unit`.
    #[inline(always)]
    fn whole_conflicts(self) -> u64 {
        match self {
            Use::DeviceReads => WHOLE_CPU_WRITE.all() | OPS.full() | WHOLE_READ.full(),
            Use::DeviceWrites => WHOLE_CPU_WRITE.all() | WHOLE_CPU_READ.all() | OPS.full() | WHOLE_WRITE.full(),
            Use::CpuReads => WHOLE_WRITE.all() | WHOLE_CPU_READ.full(),
            Use::CpuCopies => 0,
            Use::CpuWrites => WHOLE_READ.all() | WHOLE_WRITE.all() | WHOLE_CPU_WRITE.full(),
        }
    }
}

/// The words one use of a range took, for its release, packed in one
/// word: the first stripe (bits 0-7; [`WHOLE`] for a device use counted
/// in `whole` alone, [`EMPTY`] for 0 bytes, where a device use counts its
/// operation), the last (8-15), the use (16-23: its field's shift), and
/// for a device use what its release subtracts from `whole` (24-63: its
/// operation, and its use when counted there), so that a release decodes
/// nothing but shifts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Span(u64);

impl Span {
    #[inline(always)]
    fn new(first: u8, last: u8, by: Use) -> Span {
        let whole = match (by.is_device(), first) {
            (false, _) => 0,
            (true, WHOLE) => by.whole_unit(),
            (true, _) => OPS.unit,
        };
        Span(u64::from(first) | u64::from(last) << 8 | u64::from(by as u8) << 16 | whole << 24)
    }

    #[inline(always)]
    fn first(self) -> u8 {
        self.0 as u8
    }

    #[inline(always)]
    fn last(self) -> u8 {
        (self.0 >> 8) as u8
    }

    /// Its unit in a stripe's word.
    #[inline(always)]
    fn unit(self) -> u64 {
        1 << ((self.0 >> 16) & 63)
    }

    #[inline(always)]
    fn by(self) -> Use {
        match (self.0 >> 16) as u8 {
            0 => Use::DeviceReads,
            18 => Use::DeviceWrites,
            36 => Use::CpuReads,
            45 => Use::CpuCopies,
            _ => Use::CpuWrites,
        }
    }

    /// What a device use's release subtracts from `whole`.
    #[inline(always)]
    fn whole_unit(self) -> u64 {
        self.0 >> 24
    }
}

const WHOLE: u8 = u8::MAX;
const EMPTY: u8 = u8::MAX - 1;

/// A region's stripes and its `whole` word. `#[repr(C)]` and first in its
/// region (`MrInner`), so that `free`, given the book's address, finds the
/// region.
#[repr(C)]
pub(crate) struct Book {
    whole: AtomicU64,
    stripes: [AtomicU64; STRIPES],
    shift: u32,
    /// The index of the last stripe the region has.
    last: u8,
    /// Drops the reference the region's owner left to the book: called by
    /// the release that ends the last operation of an orphaned region.
    free: unsafe fn(NonNull<Book>),
}

/// A device use of a range (or a 0-byte operation), counted in its
/// region's book until dropped. It holds no reference count: the book's
/// `OPS` keeps the region alive (see the module's text).
pub(crate) struct RangeHold {
    book: NonNull<Book>,
    span: Span,
}

// SAFETY: a `RangeHold` only reaches its book's atomics (and the book's
// `free`, which drops an `Arc` of a `Send + Sync` region), from any thread.
unsafe impl Send for RangeHold {}
// SAFETY: shared access to a `RangeHold` reaches nothing.
unsafe impl Sync for RangeHold {}

impl Drop for RangeHold {
    #[inline(always)]
    fn drop(&mut self) {
        // SAFETY: the span was taken from this book (`Book::hold`), whose
        // region lives until the count it added is released, here.
        unsafe { Book::release(self.book, self.span) }
    }
}

impl Book {
    /// The book of a region of `len` bytes; `free` drops the region's
    /// owner's reference, given the book's address.
    pub(crate) fn new(len: usize, free: unsafe fn(NonNull<Book>)) -> Book {
        let bits = usize::BITS - len.saturating_sub(1).leading_zeros();
        let shift = bits.saturating_sub(STRIPES.trailing_zeros()).max(MIN_SHIFT);
        let last = (len.saturating_sub(1) >> shift) as u8;
        Book { whole: AtomicU64::new(0), stripes: std::array::from_fn(|_| AtomicU64::new(0)), shift, last, free }
    }

    /// The stripe size in bytes: ranges closer than this may conflict.
    pub(crate) fn granule(&self) -> usize {
        1 << self.shift
    }

    /// Operations in flight (0 when idle).
    pub(crate) fn ops(&self) -> usize {
        (self.whole.load(Ordering::Acquire) & OPS.all()) as usize
    }

    /// The owner of the region went away: marks the book orphaned, and
    /// returns whether operations are still in flight (then the release
    /// of the last one calls `free`, and the owner leaves its reference).
    pub(crate) fn orphan(&self) -> bool {
        self.whole.fetch_or(ORPHAN, Ordering::AcqRel) & OPS.all() != 0
    }

    /// An operation's device use of `len` bytes at `offset` (inside the
    /// region, checked by the caller).
    ///
    /// # Errors
    /// The use that conflicts (the CPU's first), or `by` itself when its
    /// count is full.
    ///
    /// # Safety
    /// `this` points to a live book (with the provenance `free` needs to
    /// drop its region: e.g. from `Arc::as_ptr`), which must stay at its
    /// address, and its region alive, until the hold is dropped: the
    /// region's owner keeps it, and when dropped leaves it to the book
    /// ([`orphan`](Self::orphan)).
    #[inline(always)]
    pub(crate) unsafe fn hold(this: NonNull<Book>, offset: usize, len: usize, by: Use) -> Result<RangeHold, RangeUse> {
        debug_assert!(by.is_device());
        // SAFETY: live (this function's contract).
        let span = unsafe { this.as_ref() }.take_device(offset, len, by)?;
        Ok(RangeHold { book: this, span })
    }

    /// A CPU use of `len` bytes at `offset` (inside the region, checked by
    /// the caller), released by [`release_cpu`](Self::release_cpu).
    ///
    /// # Errors
    /// As [`hold`](Self::hold).
    #[inline(never)]
    pub(crate) fn take_cpu(&self, offset: usize, len: usize, by: Use) -> Result<Span, RangeUse> {
        debug_assert!(!by.is_device());
        self.take(offset, len, by)
    }

    /// The posting path: one word for a use of the whole region or of
    /// 0 bytes, two for a use of one stripe, the rest out of line.
    #[inline(always)]
    fn take_device(&self, offset: usize, len: usize, by: Use) -> Result<Span, RangeUse> {
        if len == 0 {
            // The operation alone (a flush's read into the connection's
            // own region, a 0-byte operation).
            add_or_back_out(&self.whole, OPS.unit, OPS.full())
                .map_err(|old| found(&WHOLE_USES, old, OPS.full(), by))?;
            return Ok(Span::new(EMPTY, EMPTY, by));
        }
        // `offset + len` is at most the region's size (checked by the caller).
        let end = offset.wrapping_add(len - 1);
        let (first, last) = (offset >> self.shift, end >> self.shift);
        if first == 0 && last == self.last as usize {
            let old = self.whole.fetch_add(by.whole_unit(), Ordering::AcqRel);
            if old & by.whole_conflicts() != 0 {
                return Err(self.refused(None, by, old));
            }
            return Ok(Span::new(WHOLE, WHOLE, by));
        }
        match self.stripes.get(first) {
            Some(stripe) if first == last => {
                let ops = self.whole.fetch_add(OPS.unit, Ordering::AcqRel);
                let old = stripe.fetch_add(by.unit(), Ordering::AcqRel);
                if (ops & OPS.full()) | (old & by.stripe_conflicts()) != 0 {
                    return Err(self.refused(Some(stripe), by, old));
                }
                Ok(Span::new(first as u8, first as u8, by))
            }
            _ => self.take(offset, len, by),
        }
    }

    /// A device use the word(s) refused: backs out of them (`stripe`, and
    /// the operation in `whole`; or the whole-region use), and names why.
    #[cold]
    #[inline(never)]
    fn refused(&self, stripe: Option<&AtomicU64>, by: Use, old: u64) -> RangeUse {
        match stripe {
            None => {
                self.whole.fetch_sub(by.whole_unit(), Ordering::Release);
                found(&WHOLE_USES, old, by.whole_conflicts(), by)
            }
            Some(stripe) => {
                stripe.fetch_sub(by.unit(), Ordering::Release);
                self.whole.fetch_sub(OPS.unit, Ordering::Release);
                found(&STRIPE_USES, old, by.stripe_conflicts(), by)
            }
        }
    }

    #[inline(never)]
    fn take(&self, offset: usize, len: usize, by: Use) -> Result<Span, RangeUse> {
        if len == 0 {
            // The CPU's use of nothing (the device's: `take_device`).
            debug_assert!(!by.is_device());
            return Ok(Span::new(EMPTY, EMPTY, by));
        }
        // `offset + len` is at most the region's size (checked by the caller).
        let end = offset.wrapping_add(len - 1);
        let (first, last) = ((offset >> self.shift) as u8, (end >> self.shift) as u8);
        if !by.is_device() {
            self.take_cpu_words(first, last, by)?;
            return Ok(Span::new(first, last, by));
        }
        // A device use of several stripes (`take_device` takes the whole
        // region and one stripe itself): the operation in `whole`, its use
        // in its stripes.
        add_or_back_out(&self.whole, OPS.unit, OPS.full()).map_err(|old| found(&WHOLE_USES, old, OPS.full(), by))?;
        let (unit, bad) = (by.unit(), by.stripe_conflicts());
        if let Err(e) = self.add_stripes(first, last, by, |s| add_or_back_out(s, unit, bad)) {
            // Nothing was orphaned meanwhile: the caller borrows the owner.
            self.whole.fetch_sub(OPS.unit, Ordering::Release);
            return Err(e);
        }
        Ok(Span::new(first, last, by))
    }

    /// A CPU use: counted in `whole` (but a copy), then in its stripes.
    #[inline(never)]
    fn take_cpu_words(&self, first: u8, last: u8, by: Use) -> Result<(), RangeUse> {
        let (unit, bad) = (by.whole_unit(), by.whole_conflicts());
        if unit != 0 {
            add_unless(&self.whole, unit, bad).map_err(|old| found(&WHOLE_USES, old, bad, by))?;
        }
        let bad_stripe = by.stripe_conflicts();
        let taken = match self.stripes.get(first as usize) {
            Some(stripe) if first == last => add_unless(stripe, by.unit(), bad_stripe)
                .map(drop)
                .map_err(|old| found(&STRIPE_USES, old, bad_stripe, by)),
            _ => self.add_stripes(first, last, by, |s| add_unless(s, by.unit(), bad_stripe)),
        };
        if taken.is_err() && unit != 0 {
            self.whole.fetch_sub(unit, Ordering::Release);
        }
        taken
    }

    /// Adds to the stripes `first..=last` with `add` (which returns the
    /// replaced value, or the refusing one having added nothing), backing
    /// out of the earlier ones when one refuses.
    #[inline(never)]
    fn add_stripes(
        &self,
        first: u8,
        last: u8,
        by: Use,
        add: impl Fn(&AtomicU64) -> Result<u64, u64>,
    ) -> Result<(), RangeUse> {
        let Some(stripes) = self.stripes.get(first as usize..=last as usize) else {
            return Err(public(by));
        };
        for (k, s) in stripes.iter().enumerate() {
            if let Err(old) = add(s) {
                stripes.iter().take(k).for_each(|s| {
                    s.fetch_sub(by.unit(), Ordering::Release);
                });
                return Err(found(&STRIPE_USES, old, by.stripe_conflicts(), by));
            }
        }
        Ok(())
    }

    /// Releases a device use; when it ends the last operation of an
    /// orphaned region, drops the region (its book included).
    ///
    /// # Safety
    /// `this` is the book `span` was taken from, alive (its region counts
    /// the span's operation); it may be freed by the time this returns.
    #[inline(always)]
    unsafe fn release(this: NonNull<Book>, span: Span) {
        let whole = {
            // SAFETY: alive until the `whole` subtraction below ends the
            // operation (this function's contract); no reference to it
            // outlives this block.
            let book = unsafe { this.as_ref() };
            let first = span.first();
            if first < EMPTY {
                if first == span.last() {
                    // Masked: a span names stripes of its book only.
                    book.stripes[first as usize % STRIPES].fetch_sub(span.unit(), Ordering::Release);
                } else {
                    book.release_stripes(span);
                }
            }
            book.whole.fetch_sub(span.whole_unit(), Ordering::AcqRel).wrapping_sub(span.whole_unit())
        };
        // Left with the orphan bit alone: no operation, and nothing else
        // (the CPU's uses borrow the owner, so none outlives it; one whose
        // guard was leaked would keep the region for ever, never free it).
        if whole == ORPHAN {
            // SAFETY: the last operation of an orphaned region ended: its
            // owner's reference is the book's to drop, once (`free`'s
            // contract: `OPS` reached zero once); nothing refers to the
            // book any more.
            unsafe { free(this) }
        }
    }

    /// [`release`](Self::release) of several stripes.
    #[cold]
    #[inline(never)]
    fn release_stripes(&self, span: Span) {
        let unit = span.unit();
        let stripes = self.stripes.get(span.first() as usize..=span.last() as usize).unwrap_or(&[]);
        for s in stripes {
            s.fetch_sub(unit, Ordering::Release);
        }
    }

    /// Releases what [`take_cpu`](Self::take_cpu) took.
    pub(crate) fn release_cpu(&self, span: Span) {
        let first = span.first();
        if first == EMPTY {
            return;
        }
        let unit = span.by().whole_unit();
        if unit != 0 {
            self.whole.fetch_sub(unit, Ordering::Release);
        }
        match self.stripes.get(first as usize) {
            Some(stripe) if first == span.last() => {
                stripe.fetch_sub(span.unit(), Ordering::Release);
            }
            _ => self.release_stripes(span),
        }
    }
}

/// Calls the book's `free` (read before: the call frees the book).
#[cold]
#[inline(never)]
unsafe fn free(this: NonNull<Book>) {
    // SAFETY: as in `release`: alive until `free` drops it.
    let f = unsafe { this.as_ref().free };
    // SAFETY: `f` is the book's own `free`, called once (the caller's
    // contract).
    unsafe { f(this) }
}

/// Adds `unit` to `s` (the device's way: at once, a post never waits);
/// when the replaced value has a bit of `bad`, subtracts it again and
/// returns that value.
#[inline(always)]
fn add_or_back_out(s: &AtomicU64, unit: u64, bad: u64) -> Result<u64, u64> {
    let old = s.fetch_add(unit, Ordering::AcqRel);
    if old & bad != 0 {
        return Err(back_out(s, unit, old));
    }
    Ok(old)
}

#[cold]
#[inline(never)]
fn back_out(s: &AtomicU64, unit: u64, old: u64) -> u64 {
    s.fetch_sub(unit, Ordering::Release);
    old
}

/// Adds `unit` to `s` unless its value has a bit of `bad` (the CPU's way:
/// a refused stage never made a post fail); returns the value replaced, or
/// the refusing one.
fn add_unless(s: &AtomicU64, unit: u64, bad: u64) -> Result<u64, u64> {
    let mut cur = s.load(Ordering::Acquire);
    while cur & bad == 0 {
        match s.compare_exchange_weak(cur, cur.wrapping_add(unit), Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => return Ok(cur),
            Err(now) => cur = now,
        }
    }
    Err(cur)
}

fn public(by: Use) -> RangeUse {
    match by {
        Use::DeviceReads => RangeUse::DeviceReads,
        Use::DeviceWrites => RangeUse::DeviceWrites,
        Use::CpuReads | Use::CpuCopies => RangeUse::CpuReads,
        Use::CpuWrites => RangeUse::CpuWrites,
    }
}

/// The use in `old` (a word whose fields `uses` names) that refused `by`
/// (`bad` its conflicts there); `by`'s own for a full count.
#[cold]
fn found(uses: &[(Field, RangeUse)], old: u64, bad: u64, by: Use) -> RangeUse {
    uses.iter().find(|(f, _)| old & bad & f.all() != 0).map_or(public(by), |&(_, u)| u)
}

/// A `free` for books outside a region (the tests'), counting its calls.
#[cfg(test)]
unsafe fn count_frees(_: NonNull<Book>) {
    FREES.with(|f| f.set(f.get() + 1));
}

/// A book outside a region, for the tests of other modules: its `free`
/// counts its calls.
#[cfg(all(test, not(loom)))]
pub(crate) fn test_book(len: usize) -> Book {
    Book::new(len, count_frees)
}

#[cfg(test)]
std::thread_local!(static FREES: std::cell::Cell<usize> = const { std::cell::Cell::new(0) });

#[cfg(all(test, not(loom)))]
mod tests;

#[cfg(all(test, loom))]
mod loom_models;
