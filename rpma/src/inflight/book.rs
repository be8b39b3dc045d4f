//! A region's range book: which parts of its memory the device and the CPU
//! use right now, so that one registration can be staged into while other
//! ranges of it are in flight.
//!
//! The region is cut into at most [`MAX_STRIPES`] stripes of a power of two
//! bytes (at least 64). Each stripe is one `AtomicU64` holding four fields:
//! the operations the device reads the stripe for, the operations it writes
//! it for, the CPU readers, and one CPU-writer bit. Taking a range adds to
//! the word of every stripe it covers and checks, in the value it replaced,
//! the uses that conflict with its own; releasing subtracts. A post and a
//! stage on one stripe are both read-modify-writes of the same word, so
//! they are totally ordered there: whichever comes second sees the first
//! and backs out. Ranges that share a stripe conflict (conservative: a
//! refusal too many, never an access too many).

use crate::error::RangeUse;
#[cfg(loom)]
use loom::sync::atomic::{AtomicU64, Ordering};
#[cfg(not(loom))]
use std::sync::atomic::{AtomicU64, Ordering};

/// Most stripes a region's book has: its stripes are `size / 4096` bytes
/// or more (rounded up to a power of two), at least 64 bytes.
pub(crate) const MAX_STRIPES: usize = 4096;
const MIN_SHIFT: u32 = 6;

/// Bits of each count field.
const FIELD: u32 = 21;
const DEVICE_READ: u64 = 1;
const DEVICE_WRITE: u64 = 1 << FIELD;
const CPU_READ: u64 = 1 << (2 * FIELD);
const CPU_WRITE: u64 = 1 << 63;
const COUNT: u64 = (1 << FIELD) - 1;
/// A field's top bit: a count that reached it is refused before the next
/// increments could carry into the field above (every thread between its
/// add and its back-out adds one at most).
const FULL: u64 = 1 << (FIELD - 1);

/// The stripes one use of a range took, for its release.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Span {
    first: u16,
    last: u16,
    by: RangeUse,
}

/// A region's stripes.
pub(crate) struct Book {
    shift: u32,
    stripes: Box<[AtomicU64]>,
}

impl Book {
    /// The book of a region of `len` bytes.
    pub(crate) fn new(len: usize) -> Book {
        let bits = usize::BITS - len.saturating_sub(1).leading_zeros();
        let shift = bits.saturating_sub(MAX_STRIPES.trailing_zeros()).max(MIN_SHIFT);
        let n = (len.saturating_sub(1) >> shift) + 1;
        Book { shift, stripes: (0..n).map(|_| AtomicU64::new(0)).collect() }
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
    pub(crate) fn take(&self, offset: usize, len: usize, by: RangeUse) -> Result<Option<Span>, RangeUse> {
        let Some(end) = len.checked_sub(1).and_then(|l| offset.checked_add(l)) else {
            return Ok(None);
        };
        let (first, last) = (offset >> self.shift, end >> self.shift);
        let span = Span { first: first as u16, last: last as u16, by };
        let Some(stripes) = self.stripes.get(first..=last) else {
            return Err(by);
        };
        let (unit, bad) = (unit(by), conflicts(by));
        for (k, s) in stripes.iter().enumerate() {
            let old = match by {
                // The device's uses add at once (the post's path), the
                // CPU's only when nothing conflicts (so a stage that is
                // refused never makes a post fail).
                RangeUse::DeviceReads | RangeUse::DeviceWrites => {
                    let old = s.fetch_add(unit, Ordering::AcqRel);
                    if old & bad != 0 {
                        s.fetch_sub(unit, Ordering::Release);
                    }
                    old
                }
                RangeUse::CpuReads | RangeUse::CpuWrites => add_unless(s, unit, bad),
            };
            if old & bad != 0 {
                stripes.iter().take(k).for_each(|s| {
                    s.fetch_sub(unit, Ordering::Release);
                });
                return Err(found(old, by));
            }
        }
        Ok(Some(span))
    }

    /// Releases what [`take`](Self::take) took.
    #[inline]
    pub(crate) fn release(&self, span: Span) {
        let unit = unit(span.by);
        let stripes = self.stripes.get(span.first as usize..=span.last as usize).unwrap_or(&[]);
        for s in stripes {
            s.fetch_sub(unit, Ordering::Release);
        }
    }
}

/// Adds `unit` to `s` unless its value has a bit of `bad`; returns the
/// value seen.
fn add_unless(s: &AtomicU64, unit: u64, bad: u64) -> u64 {
    let mut cur = s.load(Ordering::Acquire);
    while cur & bad == 0 {
        match s.compare_exchange_weak(cur, cur.wrapping_add(unit), Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => break,
            Err(now) => cur = now,
        }
    }
    cur
}

#[inline(always)]
fn unit(by: RangeUse) -> u64 {
    match by {
        RangeUse::DeviceReads => DEVICE_READ,
        RangeUse::DeviceWrites => DEVICE_WRITE,
        RangeUse::CpuReads => CPU_READ,
        RangeUse::CpuWrites => CPU_WRITE,
    }
}

/// The bits that refuse `by`: the uses it conflicts with, and its own
/// count's top bit.
#[inline(always)]
fn conflicts(by: RangeUse) -> u64 {
    let full = |unit: u64| FULL * unit;
    let count = |unit: u64| COUNT * unit;
    match by {
        RangeUse::DeviceReads => CPU_WRITE | full(DEVICE_READ),
        RangeUse::DeviceWrites => CPU_WRITE | count(CPU_READ) | full(DEVICE_WRITE),
        RangeUse::CpuReads => CPU_WRITE | count(DEVICE_WRITE) | full(CPU_READ),
        RangeUse::CpuWrites => CPU_WRITE | count(CPU_READ) | count(DEVICE_WRITE) | count(DEVICE_READ),
    }
}

/// The use in `old` that refused `by`: the CPU's first (a stage ends
/// soon), else the device's.
#[cold]
fn found(old: u64, by: RangeUse) -> RangeUse {
    let bad = conflicts(by);
    [
        (CPU_WRITE, RangeUse::CpuWrites),
        (COUNT * CPU_READ, RangeUse::CpuReads),
        (COUNT * DEVICE_WRITE, RangeUse::DeviceWrites),
        (COUNT * DEVICE_READ, RangeUse::DeviceReads),
    ]
    .into_iter()
    .find(|&(bits, u)| old & bad & bits != 0 && u != by)
    .map_or(by, |(_, u)| u)
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use RangeUse::*;

    #[test]
    fn stripes_are_at_least_64_bytes_and_at_most_4096() {
        for (len, granule, n) in
            [(1, 64, 1), (64, 64, 1), (65, 64, 2), (4096, 64, 64), (1 << 18, 64, 4096), ((1 << 18) + 1, 128, 2049)]
        {
            let b = Book::new(len);
            assert_eq!((b.granule(), b.stripes.len()), (granule, n), "len {len}");
        }
        assert_eq!(Book::new(1 << 30).granule(), 1 << 18);
        assert!(Book::new(usize::MAX).stripes.len() <= MAX_STRIPES);
    }

    #[test]
    fn uses_conflict_as_the_device_and_the_cpu_touch_memory() {
        let b = Book::new(4096);
        // The device reads 0..128: the CPU may read it, not write it.
        let read = b.take(0, 128, DeviceReads).unwrap().unwrap();
        assert_eq!(b.take(64, 8, CpuWrites), Err(DeviceReads));
        let look = b.take(64, 8, CpuReads).unwrap().unwrap();
        b.release(look);
        // Another range is free for anything.
        let stage = b.take(128, 64, CpuWrites).unwrap().unwrap();
        // ... and the device cannot use it while the CPU writes it.
        assert_eq!(b.take(100, 64, DeviceReads), Err(CpuWrites));
        assert_eq!(b.take(130, 1, DeviceWrites), Err(CpuWrites));
        assert_eq!(b.take(128, 1, CpuReads), Err(CpuWrites));
        b.release(stage);
        // The device writes 1024..2048: the CPU may do neither.
        let write = b.take(1024, 1024, DeviceWrites).unwrap().unwrap();
        assert_eq!(b.take(2000, 8, CpuReads), Err(DeviceWrites));
        assert_eq!(b.take(1024, 1, CpuWrites), Err(DeviceWrites));
        // Device uses do not conflict with each other.
        let again = b.take(0, 4096, DeviceWrites).unwrap().unwrap();
        b.release(again);
        b.release(write);
        b.release(read);
        assert!(b.stripes.iter().all(|s| s.load(Ordering::Relaxed) == 0));
        // A refused take leaves nothing behind.
        let stage = b.take(4032, 64, CpuWrites).unwrap().unwrap();
        assert_eq!(b.take(0, 4096, DeviceReads), Err(CpuWrites));
        assert_eq!(b.take(0, 4096, CpuWrites), Err(CpuWrites));
        b.release(stage);
        assert!(b.stripes.iter().all(|s| s.load(Ordering::Relaxed) == 0));
        assert_eq!(b.take(7, 0, CpuWrites), Ok(None));
    }

    #[test]
    fn a_full_count_is_refused_before_it_carries() {
        let b = Book::new(64);
        b.stripes[0].store(FULL * DEVICE_READ, Ordering::Relaxed);
        assert_eq!(b.take(0, 1, DeviceReads), Err(DeviceReads));
        assert_eq!(b.stripes[0].load(Ordering::Relaxed), FULL * DEVICE_READ);
    }
}

/// loom model of the book (`harness/loom`): posters and stagers over
/// overlapping and disjoint stripes never use one byte in conflicting ways.
#[cfg(all(test, loom))]
mod loom_models {
    use super::*;
    use loom::cell::UnsafeCell;
    use loom::sync::Arc;

    /// Two 64-byte stripes of memory, each a loom cell, so that loom
    /// reports any write that races another access to it.
    struct Region {
        book: Book,
        bytes: [UnsafeCell<u8>; 2],
    }

    fn touch(r: &Region, offset: usize, len: usize, by: RangeUse) -> bool {
        let Ok(span) = r.book.take(offset, len, by) else { return false };
        for stripe in (offset / 64)..=((offset + len - 1) / 64) {
            match by {
                RangeUse::DeviceReads | RangeUse::CpuReads => {
                    r.bytes[stripe].with(|p| unsafe { p.read() });
                }
                RangeUse::DeviceWrites | RangeUse::CpuWrites => r.bytes[stripe].with_mut(|p| unsafe { p.write(1) }),
            }
        }
        r.book.release(span.unwrap());
        true
    }

    #[test]
    fn loom_posts_and_stages_never_overlap_in_conflict() {
        loom::model(|| {
            let r = Arc::new(Region { book: Book::new(128), bytes: [UnsafeCell::new(0), UnsafeCell::new(0)] });
            let uses = [(0, 128, RangeUse::DeviceWrites), (64, 64, RangeUse::CpuWrites), (0, 64, RangeUse::CpuWrites)];
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
            // A refusal comes from a use that went ahead: never all three.
            assert!(done.iter().any(|d| *d));
            assert!(r.book.stripes.iter().all(|s| s.load(Ordering::Relaxed) == 0));
        });
    }

    #[test]
    fn loom_a_device_read_and_a_cpu_read_share_a_stripe() {
        loom::model(|| {
            let r = Arc::new(Region { book: Book::new(128), bytes: [UnsafeCell::new(0), UnsafeCell::new(0)] });
            let a = {
                let r = r.clone();
                loom::thread::spawn(move || touch(&r, 0, 64, RangeUse::DeviceReads))
            };
            let b = {
                let r = r.clone();
                loom::thread::spawn(move || touch(&r, 0, 128, RangeUse::CpuWrites))
            };
            let c = touch(&r, 32, 8, RangeUse::CpuReads);
            let (a, b) = (a.join().unwrap(), b.join().unwrap());
            // Readers never refuse each other; a writer may be refused.
            assert!(a && c || b);
            assert!(r.book.stripes.iter().all(|s| s.load(Ordering::Relaxed) == 0));
        });
    }
}
