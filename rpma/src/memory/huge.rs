//! [`HugeBuf`]: zeroed memory on huge pages.

use super::RegMemory;
use crate::error::{Arg, Detail, Error, Msg, Result};

/// The page size of a [`HugeBuf`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum HugePage {
    /// 2 MiB pages (x86-64's `PMD` size; every hugetlb kernel has a pool).
    Size2M,
    /// 1 GiB pages, where the CPU and the kernel's pools have them.
    Size1G,
}

impl HugePage {
    /// The page size in bytes.
    pub fn bytes(self) -> usize {
        1 << self.shift()
    }

    fn shift(self) -> u32 {
        match self {
            HugePage::Size2M => 21,
            HugePage::Size1G => 30,
        }
    }

    /// The pool's directory in sysfs.
    fn pool(self) -> String {
        format!("/sys/kernel/mm/hugepages/hugepages-{}kB", self.bytes() >> 10)
    }

    /// The pool's free pages; `None` when the system has no pool of this
    /// size.
    fn free(self) -> Option<u64> {
        std::fs::read_to_string(format!("{}/free_hugepages", self.pool())).ok()?.trim().parse().ok()
    }
}

/// Zeroed memory on huge pages (a private `MAP_HUGETLB` mapping), to
/// register as any buffer: fewer pages for the device to translate and for
/// the kernel to pin than with 4 KiB pages. The pages come from the
/// kernel's pool of their size, reserved when the buffer is made.
///
/// ```no_run
/// use rpma::{HugeBuf, HugePage, MrLocal, Usage};
/// # #[allow(dead_code)]
/// # fn f(peer: &rpma::Peer) -> rpma::Result<()> {
/// let buf = HugeBuf::new(4 << 20, HugePage::Size2M)?; // two 2 MiB pages
/// let mr = MrLocal::reg(peer, buf, Usage::WRITE_DST | Usage::READ_SRC)?;
/// # let _ = mr; Ok(()) }
/// ```
#[derive(Debug)]
pub struct HugeBuf {
    map: rpma_sys::mmap::HugeMapping,
    page: HugePage,
}

impl HugeBuf {
    /// Maps `len` bytes, rounded up to whole pages of `page`.
    ///
    /// # Errors
    /// * [`Error::Inval`]: `len` is 0 ([`Detail::Empty`]), or too large
    ///   to round up ([`Detail::TooLong`]).
    /// * [`Error::NoMem`] with [`Detail::NoHugePages`]: the pool has too
    ///   few free pages; the message says how to reserve more.
    /// * [`Error::NoSupp`] with [`Detail::NoHugePages`] (`free: None`):
    ///   the system has no pool of pages of that size.
    /// * [`Error::Provider`]: another failure of `mmap`.
    pub fn new(len: usize, page: HugePage) -> Result<HugeBuf> {
        if len == 0 {
            return Err(Error::empty(Arg::Memory, "huge-page buffer length is 0; it must be at least 1 byte"));
        }
        let size = page.bytes();
        let Some(rounded) = len.checked_next_multiple_of(size) else {
            let text = format!("huge-page buffer length {len} cannot be rounded up to whole pages of {size} bytes");
            return Err(Error::too_long(Arg::Memory, len as u64, (usize::MAX - size + 1) as u64, text));
        };
        match rpma_sys::mmap::HugeMapping::new(rounded, page.shift()) {
            Ok(map) => Ok(HugeBuf { map, page }),
            Err(e) => Err(no_pages(e, rounded, page)),
        }
    }

    /// Length in bytes: whole pages.
    #[allow(clippy::len_without_is_empty, reason = "a buffer is never empty: `new` refuses 0 bytes")]
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// The size of its pages.
    pub fn page(&self) -> HugePage {
        self.page
    }

    /// The bytes.
    pub fn as_slice(&self) -> &[u8] {
        // SAFETY: an owned, initialised (zeroed) mapping of `len` bytes.
        #[allow(unsafe_code)]
        unsafe {
            std::slice::from_raw_parts(self.map.as_ptr(), self.len())
        }
    }

    /// The bytes, mutably.
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: as above, and `&mut self` makes the access exclusive.
        #[allow(unsafe_code)]
        unsafe {
            std::slice::from_raw_parts_mut(self.map.as_ptr(), self.len())
        }
    }
}

/// A failed huge-page mapping: an empty pool or no pool of that size typed,
/// with how to reserve pages.
#[cold]
fn no_pages(e: std::io::Error, len: usize, page: HugePage) -> Error {
    let size = page.bytes() as u64;
    let pages = len as u64 / size;
    let free = page.free();
    let reserve = format!(
        "reserve them as root: `echo N > {}/nr_hugepages` (or the kernel's `hugepages=` boot parameter)",
        page.pool()
    );
    let detail = Detail::NoHugePages { page_size: size, free };
    match (e.raw_os_error(), free) {
        (Some(libc::ENOMEM), Some(n)) => {
            let text = format!("{pages} huge page(s) of {size} bytes for {len} bytes, with {n} free: {reserve}");
            Error::NoMem { what: Msg::detailed(detail, text), source: Some(e) }
        }
        (_, None) => Error::NoSupp(Msg::detailed(
            detail,
            format!("the system has no pool of huge pages of {size} bytes ({} is missing)", page.pool()),
        )),
        _ => Error::provider_raw(format!("mmap({len} bytes, MAP_HUGETLB, {size}-byte pages)"), e),
    }
}

// SAFETY: the mapping never moves or changes size while the buffer lives,
// and only this value reaches it (private and anonymous: no other handle or
// process can shrink or remap it).
#[allow(unsafe_code)]
unsafe impl RegMemory for HugeBuf {
    fn as_mut_ptr_len(&mut self) -> (*mut u8, usize) {
        (self.map.as_ptr(), self.len())
    }

    fn is_exclusive(&self) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_and_refusals() {
        assert_eq!(HugePage::Size2M.bytes(), 2 << 20);
        assert_eq!(HugePage::Size1G.bytes(), 1 << 30);
        let e = HugeBuf::new(0, HugePage::Size2M).unwrap_err();
        assert_eq!(e.detail(), Some(&Detail::Empty { what: Arg::Memory }));
        let e = HugeBuf::new(usize::MAX, HugePage::Size2M).unwrap_err();
        assert!(matches!(e.detail(), Some(Detail::TooLong { what: Arg::Memory, .. })), "{e}");
        // On this host: pages, or the typed refusal.
        match HugeBuf::new(1, HugePage::Size2M) {
            Ok(mut b) => {
                assert_eq!(b.len(), 2 << 20);
                assert!(b.as_slice().iter().all(|&x| x == 0));
                b.as_mut_slice()[4095] = 7;
            }
            Err(e) => assert!(matches!(e.detail(), Some(Detail::NoHugePages { .. })), "{e}"),
        }
    }
}
