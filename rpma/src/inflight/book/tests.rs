//! Unit tests of the range book.

use super::*;
use Use::*;

fn idle(b: &Book) -> bool {
    b.whole.load(Ordering::Relaxed) == 0 && b.stripes.iter().all(|s| s.load(Ordering::Relaxed) == 0)
}

/// A device use of the test's book (which outlives every hold).
fn device(b: &Book, offset: usize, len: usize, by: Use) -> Result<RangeHold, RangeUse> {
    // SAFETY: each test's book lives until its end, after its holds.
    unsafe { Book::hold(NonNull::from(b), offset, len, by) }
}

fn cpu(b: &Book, offset: usize, len: usize, by: Use) -> Result<(), RangeUse> {
    b.take_cpu(offset, len, by).map(|span| b.release_cpu(span))
}

#[test]
fn stripes_are_at_least_64_bytes_and_at_most_64() {
    for (len, granule, last) in [(1, 64, 0), (64, 64, 0), (65, 64, 1), (4096, 64, 63), (4097, 128, 32), (8192, 128, 63)]
    {
        let b = Book::new(len, count_frees);
        assert_eq!((b.granule(), b.last), (granule, last), "len {len}");
    }
    assert_eq!(Book::new(1 << 30, count_frees).granule(), 1 << 24);
    assert!(Book::new(usize::MAX, count_frees).last < STRIPES as u8);
}

#[test]
fn uses_conflict_as_the_device_and_the_cpu_touch_memory() {
    let b = Book::new(4096, count_frees);
    // The device reads 0..128: the CPU may read it, not write it.
    let read = device(&b, 0, 128, DeviceReads).unwrap();
    assert_eq!(b.ops(), 1);
    assert_eq!(b.take_cpu(64, 8, CpuWrites), Err(RangeUse::DeviceReads));
    cpu(&b, 64, 8, CpuReads).unwrap();
    cpu(&b, 64, 8, CpuCopies).unwrap();
    // Another range is free for anything...
    let stage = b.take_cpu(128, 64, CpuWrites).unwrap();
    // ... and the device cannot use it while the CPU writes it, whole
    // region or stripe.
    assert_eq!(device(&b, 100, 64, DeviceReads).err(), Some(RangeUse::CpuWrites));
    assert_eq!(device(&b, 130, 1, DeviceWrites).err(), Some(RangeUse::CpuWrites));
    assert_eq!(device(&b, 0, 4096, DeviceReads).err(), Some(RangeUse::CpuWrites));
    assert_eq!(cpu(&b, 128, 1, CpuReads), Err(RangeUse::CpuWrites));
    assert_eq!(cpu(&b, 128, 1, CpuCopies), Err(RangeUse::CpuWrites));
    b.release_cpu(stage);
    assert_eq!(b.ops(), 1, "refused operations count nothing");
    // The device writes 1024..2048: the CPU may do neither, but copy.
    let write = device(&b, 1024, 1024, DeviceWrites).unwrap();
    assert_eq!(cpu(&b, 2000, 8, CpuReads), Err(RangeUse::DeviceWrites));
    assert_eq!(cpu(&b, 1024, 1, CpuWrites), Err(RangeUse::DeviceWrites));
    cpu(&b, 2000, 8, CpuCopies).unwrap();
    // Device uses do not conflict with each other.
    drop(device(&b, 0, 4096, DeviceWrites).unwrap());
    assert_eq!(b.ops(), 2);
    drop((write, read));
    assert!(idle(&b));
    // The whole region in flight: every CPU use but a copy is refused.
    let all = device(&b, 0, 4096, DeviceWrites).unwrap();
    assert_eq!(cpu(&b, 4000, 8, CpuWrites), Err(RangeUse::DeviceWrites));
    assert_eq!(cpu(&b, 0, 1, CpuReads), Err(RangeUse::DeviceWrites));
    cpu(&b, 0, 1, CpuCopies).unwrap();
    drop(all);
    // A copy in progress refuses a CPU writer only.
    let copy = b.take_cpu(0, 64, CpuCopies).unwrap();
    assert_eq!(cpu(&b, 0, 8, CpuWrites), Err(RangeUse::CpuReads));
    drop(device(&b, 0, 4096, DeviceWrites).unwrap());
    b.release_cpu(copy);
    // A refused take leaves nothing behind.
    let stage = b.take_cpu(4032, 64, CpuWrites).unwrap();
    assert_eq!(device(&b, 0, 4096, DeviceReads).err(), Some(RangeUse::CpuWrites));
    assert_eq!(device(&b, 64, 4032, DeviceReads).err(), Some(RangeUse::CpuWrites));
    assert_eq!(cpu(&b, 0, 4096, CpuWrites), Err(RangeUse::CpuWrites));
    b.release_cpu(stage);
    assert!(idle(&b));
    // 0 bytes: the device's operation counts, the CPU's use is nothing.
    let none = device(&b, 7, 0, DeviceReads).unwrap();
    assert_eq!(b.ops(), 1);
    cpu(&b, 0, 4096, CpuWrites).unwrap();
    drop(none);
    cpu(&b, 7, 0, CpuWrites).unwrap();
    assert!(idle(&b));
}

#[test]
fn an_orphaned_book_is_freed_by_its_last_release_once() {
    let frees = || FREES.with(|f| f.get());
    let b = Book::new(4096, count_frees);
    assert!(!b.orphan(), "idle: the owner drops its reference itself");
    assert_eq!(frees(), 0);
    let b = Book::new(4096, count_frees);
    let (x, y) = (device(&b, 0, 8, DeviceReads).unwrap(), device(&b, 0, 4096, DeviceWrites).unwrap());
    assert!(b.orphan(), "two in flight: the last release frees");
    drop(x);
    assert_eq!(frees(), 0);
    drop(y);
    assert_eq!(frees(), 1);
}

#[test]
fn a_full_count_is_refused_before_it_carries() {
    let b = Book::new(64, count_frees);
    b.whole.store(OPS.full(), Ordering::Relaxed);
    assert_eq!(device(&b, 0, 64, DeviceReads).err(), Some(RangeUse::DeviceReads));
    assert_eq!(b.whole.load(Ordering::Relaxed), OPS.full());
    b.stripes[0].store(CPU_COPY.full(), Ordering::Relaxed);
    assert_eq!(b.take_cpu(0, 1, CpuCopies), Err(RangeUse::CpuReads));
    assert_eq!(b.stripes[0].load(Ordering::Relaxed), CPU_COPY.full());
}

#[test]
fn fields_do_not_overlap() {
    for fields in [
        &[DEVICE_READ, DEVICE_WRITE, CPU_READ, CPU_COPY, CPU_WRITE][..],
        &[OPS, WHOLE_READ, WHOLE_WRITE, WHOLE_CPU_READ, WHOLE_CPU_WRITE, Field { unit: ORPHAN, bits: 1 }],
    ] {
        for (i, a) in fields.iter().enumerate() {
            for b in &fields[i + 1..] {
                assert_eq!(a.all() & b.all(), 0);
            }
            assert_eq!(a.full() & a.all(), a.full());
        }
    }
}
