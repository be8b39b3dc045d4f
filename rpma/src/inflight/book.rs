//! A region's range book: which parts of its memory the device and the CPU
//! use right now, so that one registration can be staged into while other
//! ranges of it are in flight.
//!
//! The region is cut into at most [`STRIPES`] stripes of a power of two
//! bytes (at least 8), each one `AtomicU64` of counts: the operations the
//! device reads the stripe for, those it writes it for, the CPU's readers by
//! reference, its readers by copy, and its writer. An operation covering
//! every stripe counts once in the region's `whole` word instead (a
//! buffer used whole costs one atomic, not one per stripe); the CPU's
//! users count in `whole` too (all but copies, which only CPU writers must
//! see), so the device's whole-region uses see them there.
//!
//! Taking a range adds to each word it covers and checks, in the value it
//! replaced, the counts that conflict with it; releasing subtracts. Two
//! conflicting uses always meet on one word (a stripe both cover, or
//! `whole`), where both do read-modify-writes: they are totally ordered
//! there, and whichever comes second sees the first and backs out. Ranges
//! that share a stripe conflict (conservative: a refusal too many, never an
//! access too many).

use crate::error::RangeUse;
#[cfg(loom)]
use loom::sync::atomic::{AtomicU64, Ordering};
#[cfg(not(loom))]
use std::sync::atomic::{AtomicU64, Ordering};

/// Stripes of a region's book.
pub(crate) const STRIPES: usize = 64;
const MIN_SHIFT: u32 = 3;

// The fields of a word: 18-bit device counts, 9-bit CPU counts.
const DEVICE_READ: u64 = 1;
const DEVICE_WRITE: u64 = 1 << 18;
const CPU_READ: u64 = 1 << 36;
const CPU_COPY: u64 = 1 << 45;
const CPU_WRITE: u64 = 1 << 54;

/// The width of `unit`'s field.
const fn bits(unit: u64) -> u32 {
    if unit < CPU_READ {
        18
    } else {
        9
    }
}

/// Every bit of `unit`'s field.
const fn field(unit: u64) -> u64 {
    ((1 << bits(unit)) - 1) * unit
}

/// The top bit of `unit`'s field: a count that reached it is refused
/// before later increments could carry into the next field (every thread
/// between its add and its back-out adds one at most).
const fn full(unit: u64) -> u64 {
    unit << (bits(unit) - 1)
}

/// How a range is used: [`RangeUse`]'s four, with the CPU's reads split
/// into references ([`view_at`](crate::MrLocal::view_at)) and copies
/// ([`read_at`](crate::MrLocal::read_at), which may race the device's
/// writes: raw copies of unspecified bytes, never a reference).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Use {
    DeviceReads,
    DeviceWrites,
    CpuReads,
    CpuCopies,
    CpuWrites,
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
    #[inline(always)]
    fn unit(self) -> u64 {
        match self {
            Use::DeviceReads => DEVICE_READ,
            Use::DeviceWrites => DEVICE_WRITE,
            Use::CpuReads => CPU_READ,
            Use::CpuCopies => CPU_COPY,
            Use::CpuWrites => CPU_WRITE,
        }
    }

    /// The bits of a stripe's word that refuse this use: the uses it
    /// conflicts with, and its own count's top bit.
    #[inline(always)]
    fn stripe_conflicts(self) -> u64 {
        let cpu_write = field(CPU_WRITE);
        match self {
            Use::DeviceReads => cpu_write | full(DEVICE_READ),
            Use::DeviceWrites => cpu_write | field(CPU_READ) | full(DEVICE_WRITE),
            Use::CpuReads => cpu_write | field(DEVICE_WRITE) | full(CPU_READ),
            Use::CpuCopies => cpu_write | full(CPU_COPY),
            Use::CpuWrites => cpu_write | field(CPU_READ) | field(CPU_COPY) | field(DEVICE_WRITE) | field(DEVICE_READ),
        }
    }

    /// The bits of the `whole` word that refuse this use (where the
    /// device's whole-region uses and every CPU user but copies count).
    #[inline(always)]
    fn whole_conflicts(self) -> u64 {
        match self {
            Use::DeviceReads | Use::DeviceWrites => self.stripe_conflicts(),
            Use::CpuReads => field(DEVICE_WRITE) | full(CPU_READ),
            Use::CpuCopies => 0,
            Use::CpuWrites => field(DEVICE_READ) | field(DEVICE_WRITE) | full(CPU_WRITE),
        }
    }
}

/// The words one use of a range took, for its release.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Span {
    /// The first stripe, or [`WHOLE`] for the `whole` word alone.
    first: u8,
    last: u8,
    by: Use,
}

/// [`Span::first`] of a device use counted in `whole`.
const WHOLE: u8 = u8::MAX;

/// A region's stripes and its `whole` word.
pub(crate) struct Book {
    shift: u32,
    /// The index of the last stripe the region has.
    last: u8,
    whole: AtomicU64,
    stripes: [AtomicU64; STRIPES],
}

impl Book {
    /// The book of a region of `len` bytes.
    pub(crate) fn new(len: usize) -> Book {
        let bits = usize::BITS - len.saturating_sub(1).leading_zeros();
        let shift = bits.saturating_sub(STRIPES.trailing_zeros()).max(MIN_SHIFT);
        let last = (len.saturating_sub(1) >> shift) as u8;
        Book { shift, last, whole: AtomicU64::new(0), stripes: std::array::from_fn(|_| AtomicU64::new(0)) }
    }

    /// The stripe size in bytes: ranges closer than this may conflict.
    pub(crate) fn granule(&self) -> usize {
        1 << self.shift
    }

    /// Takes `len` bytes at `offset` (inside the region, checked by the
    /// caller) for `by`: `None` for 0 bytes (nothing to take).
    ///
    /// # Errors
    /// The use that conflicts (the CPU's first), or `by` itself when its
    /// count is full.
    #[inline]
    pub(crate) fn take(&self, offset: usize, len: usize, by: Use) -> Result<Option<Span>, RangeUse> {
        let Some(end) = len.checked_sub(1).and_then(|l| offset.checked_add(l)) else {
            return Ok(None);
        };
        let (first, last) = ((offset >> self.shift) as u8, (end >> self.shift) as u8);
        let unit = by.unit();
        match by {
            Use::DeviceReads | Use::DeviceWrites => {
                let bad = by.stripe_conflicts();
                if first == 0 && last == self.last {
                    add_or_back_out(&self.whole, unit, bad).map_err(|old| found(old, bad, by))?;
                    return Ok(Some(Span { first: WHOLE, last: WHOLE, by }));
                }
                self.take_stripes(first, last, by, |s| add_or_back_out(s, unit, bad))?;
            }
            Use::CpuReads | Use::CpuCopies | Use::CpuWrites => {
                let bad = by.whole_conflicts();
                if bad != 0 {
                    add_unless(&self.whole, unit, bad).map_err(|old| found(old, bad, by))?;
                }
                let bad_stripe = by.stripe_conflicts();
                if let Err(e) = self.take_stripes(first, last, by, |s| add_unless(s, unit, bad_stripe)) {
                    if bad != 0 {
                        self.whole.fetch_sub(unit, Ordering::Release);
                    }
                    return Err(e);
                }
            }
        }
        Ok(Some(Span { first, last, by }))
    }

    /// Adds to the stripes `first..=last` with `add` (which returns the
    /// replaced value, or the refusing one having added nothing), backing
    /// out of the earlier ones when one refuses.
    #[inline(always)]
    fn take_stripes(
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
                return Err(found(old, by.stripe_conflicts(), by));
            }
        }
        Ok(())
    }

    /// Releases what [`take`](Self::take) took.
    #[inline]
    pub(crate) fn release(&self, span: Span) {
        let unit = span.by.unit();
        if span.first == WHOLE {
            self.whole.fetch_sub(unit, Ordering::Release);
            return;
        }
        if matches!(span.by, Use::CpuReads | Use::CpuWrites) {
            self.whole.fetch_sub(unit, Ordering::Release);
        }
        let stripes = self.stripes.get(span.first as usize..=span.last as usize).unwrap_or(&[]);
        for s in stripes {
            s.fetch_sub(unit, Ordering::Release);
        }
    }
}

/// Adds `unit` to `s` (the device's way: at once, a post never waits);
/// when the replaced value has a bit of `bad`, subtracts it again and
/// returns that value.
#[inline(always)]
fn add_or_back_out(s: &AtomicU64, unit: u64, bad: u64) -> Result<u64, u64> {
    let old = s.fetch_add(unit, Ordering::AcqRel);
    if old & bad != 0 {
        s.fetch_sub(unit, Ordering::Release);
        return Err(old);
    }
    Ok(old)
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

/// The use in `old` that refused `by` (`bad` its conflicts): the CPU's
/// first (a stage ends soon), else the device's; `by`'s own for a full
/// count.
#[cold]
fn found(old: u64, bad: u64, by: Use) -> RangeUse {
    [
        (CPU_WRITE, RangeUse::CpuWrites),
        (CPU_READ, RangeUse::CpuReads),
        (CPU_COPY, RangeUse::CpuReads),
        (DEVICE_WRITE, RangeUse::DeviceWrites),
        (DEVICE_READ, RangeUse::DeviceReads),
    ]
    .into_iter()
    .find(|&(unit, _)| old & bad & field(unit) != 0)
    .map_or(public(by), |(_, u)| u)
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use Use::*;

    fn idle(b: &Book) -> bool {
        b.whole.load(Ordering::Relaxed) == 0 && b.stripes.iter().all(|s| s.load(Ordering::Relaxed) == 0)
    }

    #[test]
    fn stripes_are_at_least_8_bytes_and_at_most_64() {
        for (len, granule, last) in [(1, 8, 0), (8, 8, 0), (9, 8, 1), (512, 8, 63), (513, 16, 32), (4096, 64, 63)] {
            let b = Book::new(len);
            assert_eq!((b.granule(), b.last), (granule, last), "len {len}");
        }
        assert_eq!(Book::new(1 << 30).granule(), 1 << 24);
        assert!(Book::new(usize::MAX).last < STRIPES as u8);
    }

    #[test]
    fn uses_conflict_as_the_device_and_the_cpu_touch_memory() {
        let b = Book::new(4096);
        // The device reads 0..128: the CPU may read it, not write it.
        let read = b.take(0, 128, DeviceReads).unwrap().unwrap();
        assert_eq!(b.take(64, 8, CpuWrites), Err(RangeUse::DeviceReads));
        b.release(b.take(64, 8, CpuReads).unwrap().unwrap());
        b.release(b.take(64, 8, CpuCopies).unwrap().unwrap());
        // Another range is free for anything...
        let stage = b.take(128, 64, CpuWrites).unwrap().unwrap();
        // ... and the device cannot use it while the CPU writes it, whole
        // region or stripe.
        assert_eq!(b.take(100, 64, DeviceReads), Err(RangeUse::CpuWrites));
        assert_eq!(b.take(130, 1, DeviceWrites), Err(RangeUse::CpuWrites));
        assert_eq!(b.take(0, 4096, DeviceReads), Err(RangeUse::CpuWrites));
        assert_eq!(b.take(128, 1, CpuReads), Err(RangeUse::CpuWrites));
        assert_eq!(b.take(128, 1, CpuCopies), Err(RangeUse::CpuWrites));
        b.release(stage);
        // The device writes 1024..2048: the CPU may do neither, but copy.
        let write = b.take(1024, 1024, DeviceWrites).unwrap().unwrap();
        assert_eq!(b.take(2000, 8, CpuReads), Err(RangeUse::DeviceWrites));
        assert_eq!(b.take(1024, 1, CpuWrites), Err(RangeUse::DeviceWrites));
        b.release(b.take(2000, 8, CpuCopies).unwrap().unwrap());
        // Device uses do not conflict with each other.
        b.release(b.take(0, 4096, DeviceWrites).unwrap().unwrap());
        b.release(write);
        b.release(read);
        assert!(idle(&b));
        // The whole region in flight: every CPU use but a copy is refused.
        let all = b.take(0, 4096, DeviceWrites).unwrap().unwrap();
        assert_eq!(b.take(4000, 8, CpuWrites), Err(RangeUse::DeviceWrites));
        assert_eq!(b.take(0, 1, CpuReads), Err(RangeUse::DeviceWrites));
        b.release(b.take(0, 1, CpuCopies).unwrap().unwrap());
        b.release(all);
        // A copy in progress refuses a CPU writer only.
        let copy = b.take(0, 64, CpuCopies).unwrap().unwrap();
        assert_eq!(b.take(0, 8, CpuWrites), Err(RangeUse::CpuReads));
        b.release(b.take(0, 4096, DeviceWrites).unwrap().unwrap());
        b.release(copy);
        // A refused take leaves nothing behind.
        let stage = b.take(4032, 64, CpuWrites).unwrap().unwrap();
        assert_eq!(b.take(0, 4096, DeviceReads), Err(RangeUse::CpuWrites));
        assert_eq!(b.take(64, 4032, DeviceReads), Err(RangeUse::CpuWrites));
        assert_eq!(b.take(0, 4096, CpuWrites), Err(RangeUse::CpuWrites));
        b.release(stage);
        assert!(idle(&b));
        assert_eq!(b.take(7, 0, CpuWrites), Ok(None));
    }

    #[test]
    fn a_full_count_is_refused_before_it_carries() {
        let b = Book::new(64);
        b.whole.store(full(DEVICE_READ), Ordering::Relaxed);
        assert_eq!(b.take(0, 64, DeviceReads), Err(RangeUse::DeviceReads));
        assert_eq!(b.whole.load(Ordering::Relaxed), full(DEVICE_READ));
        b.stripes[0].store(full(CPU_COPY), Ordering::Relaxed);
        assert_eq!(b.take(0, 1, CpuCopies), Err(RangeUse::CpuReads));
        assert_eq!(b.stripes[0].load(Ordering::Relaxed), full(CPU_COPY));
    }

    #[test]
    fn fields_do_not_overlap() {
        let units = [DEVICE_READ, DEVICE_WRITE, CPU_READ, CPU_COPY, CPU_WRITE];
        for (i, a) in units.iter().enumerate() {
            for b in &units[i + 1..] {
                assert_eq!(field(*a) & field(*b), 0);
            }
            assert_eq!(full(*a) & field(*a), full(*a));
        }
        assert!(field(CPU_WRITE).leading_zeros() >= 1);
    }
}

/// loom models of the book (`harness/loom`): posters and stagers over
/// overlapping and disjoint stripes, and the whole region, never use one
/// byte in conflicting ways.
#[cfg(all(test, loom))]
mod loom_models {
    use super::*;
    use loom::cell::UnsafeCell;
    use loom::sync::Arc;

    /// Two 8-byte stripes of memory, each a loom cell, so that loom
    /// reports any write that races another access to it.
    struct Region {
        book: Book,
        bytes: [UnsafeCell<u8>; 2],
    }

    fn region() -> Arc<Region> {
        Arc::new(Region { book: Book::new(16), bytes: [UnsafeCell::new(0), UnsafeCell::new(0)] })
    }

    fn touch(r: &Region, offset: usize, len: usize, by: Use) -> bool {
        let Ok(span) = r.book.take(offset, len, by) else { return false };
        for stripe in (offset / 8)..=((offset + len - 1) / 8) {
            match by {
                Use::DeviceReads | Use::CpuReads => {
                    r.bytes[stripe].with(|p| unsafe { p.read() });
                }
                // A copy may race the device's writes (raw bytes, never a
                // reference), not the CPU's: modelled as a CPU read only
                // where no device write is modelled.
                Use::CpuCopies => {
                    r.bytes[stripe].with(|p| unsafe { p.read() });
                }
                Use::DeviceWrites | Use::CpuWrites => r.bytes[stripe].with_mut(|p| unsafe { p.write(1) }),
            }
        }
        r.book.release(span.unwrap());
        true
    }

    fn run(uses: [(usize, usize, Use); 3]) -> Vec<bool> {
        let r = region();
        let threads: Vec<_> = uses[1..]
            .iter()
            .map(|&(o, l, by)| {
                let r = r.clone();
                loom::thread::spawn(move || touch(&r, o, l, by))
            })
            .collect();
        let (o, l, by) = uses[0];
        let mut done = vec![touch(&r, o, l, by)];
        done.extend(threads.into_iter().map(|t| t.join().unwrap()));
        assert_eq!(r.book.whole.load(Ordering::Relaxed), 0);
        assert!(r.book.stripes.iter().all(|s| s.load(Ordering::Relaxed) == 0));
        done
    }

    #[test]
    fn loom_posts_and_stages_never_overlap_in_conflict() {
        loom::model(|| {
            // A device write of both stripes (the whole region) against two
            // stages, one per stripe.
            let done = run([(0, 16, Use::DeviceWrites), (8, 8, Use::CpuWrites), (0, 8, Use::CpuWrites)]);
            // A refusal comes from a use that went ahead: never all three.
            assert!(done.iter().any(|d| *d));
        });
    }

    #[test]
    fn loom_stripe_posts_against_stages_across_stripes() {
        loom::model(|| {
            let done = run([(0, 8, Use::DeviceWrites), (4, 8, Use::CpuWrites), (8, 8, Use::DeviceReads)]);
            assert!(done.iter().any(|d| *d));
        });
    }

    #[test]
    fn loom_readers_share_and_copies_meet_writers() {
        loom::model(|| {
            let done = run([(0, 8, Use::DeviceReads), (0, 16, Use::CpuWrites), (2, 4, Use::CpuCopies)]);
            // Readers never refuse each other; a writer may be refused.
            assert!(done[0] && done[2] || done[1]);
            let done = run([(0, 16, Use::DeviceReads), (0, 8, Use::CpuReads), (8, 8, Use::CpuReads)]);
            assert!(done.iter().all(|d| *d), "readers only");
        });
    }
}
