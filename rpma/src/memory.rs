//! Memory that can be registered, and a page-aligned buffer to register.

use crate::error::{Error, Result};
use std::alloc::{alloc_zeroed, dealloc, Layout};
use std::ptr::NonNull;

/// Memory a [`MrLocal`](crate::MrLocal) can register and own for as long as
/// the registration lives.
///
/// The region takes the memory by value, so safe code cannot free, move out
/// of, reallocate or touch it while the device may access it: the memory is
/// handed back only by [`MrLocal::dereg`](crate::MrLocal::dereg), after the
/// registration is gone. Borrowed memory (`&mut [u8]`) works the same way,
/// with the borrow checker keeping the owner from freeing it:
///
/// ```compile_fail,E0505
/// # #[allow(dead_code)]
/// # fn f(peer: &rpma::Peer) -> rpma::Result<()> {
/// let mut buf = vec![0u8; 4096];
/// let mr = rpma::MrLocal::reg(peer, &mut buf[..], rpma::Usage::READ_SRC)?;
/// drop(buf); // error: `buf` is still borrowed by the registration
/// drop(mr);
/// # Ok(()) }
/// ```
///
/// # Safety
/// An implementation must return the same pointer and length every time while
/// the value is not used otherwise; the range must be one allocation of
/// initialised bytes, valid for reads and writes, that stays at the same
/// address for as long as the value lives (moving the value itself, e.g. a
/// `Vec`, must not move the bytes), and nothing else may access it while the
/// value is owned by a registration.
pub unsafe trait RegMemory {
    /// Start and length in bytes of the memory to register.
    fn as_mut_ptr_len(&mut self) -> (*mut u8, usize);
}

// SAFETY: a Vec's heap buffer does not move when the Vec moves, and the
// registration never grows it.
unsafe impl RegMemory for Vec<u8> {
    fn as_mut_ptr_len(&mut self) -> (*mut u8, usize) {
        (self.as_mut_ptr(), self.len())
    }
}

// SAFETY: a boxed slice's heap buffer does not move when the box moves.
unsafe impl RegMemory for Box<[u8]> {
    fn as_mut_ptr_len(&mut self) -> (*mut u8, usize) {
        (self.as_mut_ptr(), self.len())
    }
}

// SAFETY: the exclusive borrow keeps the owner from touching or freeing the
// bytes for the borrow's lifetime, which bounds the registration's.
unsafe impl RegMemory for &mut [u8] {
    fn as_mut_ptr_len(&mut self) -> (*mut u8, usize) {
        (self.as_mut_ptr(), self.len())
    }
}

/// A zeroed, page-aligned heap buffer, the usual thing to register (librpma's
/// examples use `malloc_aligned`).
///
/// ```
/// let buf = rpma::AlignedBuf::new(8192)?;
/// assert_eq!(buf.len(), 8192);
/// assert_eq!(buf.as_slice().as_ptr() as usize % rpma::AlignedBuf::page_size(), 0);
/// # Ok::<(), rpma::Error>(())
/// ```
pub struct AlignedBuf {
    ptr: NonNull<u8>,
    layout: Layout,
}

// SAFETY: AlignedBuf uniquely owns its allocation, like Box<[u8]>.
unsafe impl Send for AlignedBuf {}
// SAFETY: shared access only reads.
unsafe impl Sync for AlignedBuf {}

impl AlignedBuf {
    /// The alignment used: the system page size (4096 when it cannot be read).
    pub fn page_size() -> usize {
        rpma_sys::page_size()
    }

    /// Allocates `len` zeroed bytes aligned to [`AlignedBuf::page_size`].
    ///
    /// # Errors
    /// [`Error::Inval`] for `len == 0` or a length too large for a layout;
    /// [`Error::NoMem`] when the allocation fails.
    pub fn new(len: usize) -> Result<AlignedBuf> {
        if len == 0 {
            return Err(Error::inval("buffer length is 0; it must be at least 1 byte"));
        }
        let layout = Layout::from_size_align(len, Self::page_size())
            .map_err(|_| Error::inval(format!("buffer length {len} is too large to allocate")))?;
        // SAFETY: the layout has a non-zero size.
        let p = unsafe { alloc_zeroed(layout) };
        let ptr = NonNull::new(p).ok_or_else(|| Error::NoMem(format!("allocating {len} bytes failed").into()))?;
        Ok(AlignedBuf { ptr, layout })
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.layout.size()
    }

    /// Always false (a buffer has at least one byte).
    pub fn is_empty(&self) -> bool {
        false
    }

    /// The bytes.
    pub fn as_slice(&self) -> &[u8] {
        // SAFETY: owned, initialised (zeroed) allocation of `len` bytes.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len()) }
    }

    /// The bytes, mutably.
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: as above, and `&mut self` makes the access exclusive.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len()) }
    }
}

impl Drop for AlignedBuf {
    fn drop(&mut self) {
        // SAFETY: allocated in `new` with this layout, freed once.
        unsafe { dealloc(self.ptr.as_ptr(), self.layout) }
    }
}

impl std::fmt::Debug for AlignedBuf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AlignedBuf").field("len", &self.len()).finish()
    }
}

// SAFETY: the allocation never moves or changes size while the buffer lives.
unsafe impl RegMemory for AlignedBuf {
    fn as_mut_ptr_len(&mut self) -> (*mut u8, usize) {
        (self.ptr.as_ptr(), self.len())
    }
}

/// A file mapped shared and read-write, to register, e.g. persistent memory
/// on an FS-DAX file system (librpma's examples take such a `pmem-path`).
///
/// Registering FS-DAX memory needs On-Demand Paging: on a device without it
/// registration fails with [`Error::Provider`] (`EOPNOTSUPP`), as librpma's
/// does.
///
/// ```no_run
/// let mut f = rpma::MappedFile::open("/mnt/pmem/log", 1 << 20)?;
/// f.as_mut_slice()[..5].copy_from_slice(b"hello");
/// f.persist()?;
/// # Ok::<(), rpma::Error>(())
/// ```
#[derive(Debug)]
pub struct MappedFile {
    map: rpma_sys::mmap::FileMapping,
    path: std::path::PathBuf,
}

impl MappedFile {
    /// Opens (creating if needed) the file at `path`, grows it to at least
    /// `len` bytes, and maps its first `len` bytes.
    ///
    /// # Errors
    /// [`Error::Inval`] for `len == 0`; [`Error::Provider`] with the errno of
    /// the failing `open`, `ftruncate` or `mmap`.
    pub fn open(path: impl AsRef<std::path::Path>, len: usize) -> Result<MappedFile> {
        let path = path.as_ref();
        if len == 0 {
            return Err(Error::inval(format!(
                "mapping length for {} is 0; it must be at least 1 byte",
                path.display()
            )));
        }
        let io = |op: &str, e| Error::provider_raw(format!("{op}({})", path.display()), e);
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)
            .map_err(|e| io("open", e))?;
        let cur = file.metadata().map_err(|e| io("fstat", e))?.len();
        if cur < len as u64 {
            file.set_len(len as u64).map_err(|e| io("ftruncate", e))?;
        }
        let map = rpma_sys::mmap::FileMapping::map(&file, len).map_err(|e| io("mmap", e))?;
        Ok(MappedFile { map, path: path.to_path_buf() })
    }

    /// Length of the mapping in bytes.
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// Always false.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// The mapped file's path.
    pub fn path(&self) -> &std::path::Path {
        &self.path
    }

    /// The bytes.
    pub fn as_slice(&self) -> &[u8] {
        // SAFETY: the live mapping of `len` initialised (file-backed) bytes.
        unsafe { std::slice::from_raw_parts(self.map.as_ptr(), self.map.len()) }
    }

    /// The bytes, mutably.
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: as above; `&mut self` makes the access exclusive.
        unsafe { std::slice::from_raw_parts_mut(self.map.as_ptr(), self.map.len()) }
    }

    /// Makes the mapping's contents durable in the file (`msync`).
    ///
    /// # Errors
    /// [`Error::Provider`] with the errno of `msync`.
    pub fn persist(&self) -> Result<()> {
        self.map.sync().map_err(|e| Error::provider_raw(format!("msync({})", self.path.display()), e))
    }
}

// SAFETY: the mapping stays at its address until the value is dropped; only
// the owner reaches it.
unsafe impl RegMemory for MappedFile {
    fn as_mut_ptr_len(&mut self) -> (*mut u8, usize) {
        (self.map.as_ptr(), self.map.len())
    }
}
