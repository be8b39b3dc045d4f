//! [`Memory`]: DRAM or a file mapping, chosen at run time, and [`Persist`],
//! what can be made durable.

use super::{AlignedBuf, MappedFile, RegMemory};
use crate::error::Result;

/// Page-aligned DRAM or a file mapping, one type for a region whose kind is
/// chosen at run time (a server given `--pmem PATH` or not, as librpma's
/// examples take a `pmem-path`). Registered like either; its
/// [`persist_range`](Persist::persist_range) persists a mapping and, for
/// DRAM, only checks the range (nothing is more durable than the write
/// having landed).
///
/// ```no_run
/// use rpma::{AlignedBuf, MappedFile, Memory, MrLocal, Usage};
/// # #[allow(dead_code)]
/// # fn f(peer: &rpma::Peer, path: Option<&str>) -> rpma::Result<()> {
/// let mem = match path {
///     // SAFETY: nothing else truncates this file while it is mapped.
///     Some(p) => Memory::Mapped(unsafe { MappedFile::open(p, 1 << 20)? }),
///     None => Memory::Dram(AlignedBuf::new(1 << 20)?),
/// };
/// let mr = MrLocal::reg(peer, mem, Usage::WRITE_DST | Usage::FLUSH_TYPE_VISIBILITY)?;
/// mr.persist_range(0, 4096)?; // after a remote write landed there
/// # Ok(()) }
/// ```
#[derive(Debug)]
#[non_exhaustive]
pub enum Memory {
    /// Page-aligned DRAM.
    Dram(AlignedBuf),
    /// A file mapping (persistent memory when it is mapped `MAP_SYNC`).
    Mapped(MappedFile),
}

// SAFETY: each variant is a `RegMemory` whose contract holds; the enum only
// delegates to the one it holds, which never changes while it lives.
unsafe impl RegMemory for Memory {
    fn as_mut_ptr_len(&mut self) -> (*mut u8, usize) {
        match self {
            Memory::Dram(m) => m.as_mut_ptr_len(),
            Memory::Mapped(m) => m.as_mut_ptr_len(),
        }
    }

    fn is_pmem(&self) -> bool {
        match self {
            Memory::Dram(m) => m.is_pmem(),
            Memory::Mapped(m) => m.is_pmem(),
        }
    }

    fn is_exclusive(&self) -> bool {
        match self {
            Memory::Dram(m) => m.is_exclusive(),
            Memory::Mapped(m) => m.is_exclusive(),
        }
    }
}

mod sealed {
    pub trait Sealed {}
    impl Sealed for super::MappedFile {}
    impl Sealed for super::Memory {}
}

/// Memory whose contents can be made durable, e.g. after the remote side
/// wrote into it (GPSPM): [`MappedFile`] and [`Memory`] (sealed). A region
/// of it has [`MrLocal::persist`](crate::MrLocal::persist).
pub trait Persist: RegMemory + sealed::Sealed {
    /// Makes `len` bytes at `offset` durable.
    ///
    /// # Errors
    /// [`Error::Inval`](crate::Error::Inval) when the range exceeds the memory; as
    /// [`MappedFile::persist_range`] for a mapping.
    fn persist_range(&self, offset: usize, len: usize) -> Result<()>;
}

impl Persist for MappedFile {
    fn persist_range(&self, offset: usize, len: usize) -> Result<()> {
        MappedFile::persist_range(self, offset, len)
    }
}

impl Persist for Memory {
    fn persist_range(&self, offset: usize, len: usize) -> Result<()> {
        match self {
            Memory::Dram(m) => super::check_range("Memory::persist_range", offset, len, m.len(), "the buffer's length"),
            Memory::Mapped(m) => m.persist_range(offset, len),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn either_kind_registers_and_persists_its_range() {
        let mut d = Memory::Dram(AlignedBuf::new(4096).unwrap());
        assert_eq!(d.as_mut_ptr_len().1, 4096);
        assert!(!d.is_pmem());
        d.persist_range(0, 4096).unwrap();
        assert_eq!(d.persist_range(4000, 100).unwrap_err().code(), crate::error::RPMA_E_INVAL);
        let mut m = Memory::Mapped(MappedFile::sealed("rpma-either", 8192).unwrap());
        assert_eq!(m.as_mut_ptr_len().1, 8192);
        m.persist_range(0, 8192).unwrap();
        assert!(m.persist_range(8000, 500).is_err());
    }
}
