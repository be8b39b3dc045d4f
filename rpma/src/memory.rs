//! Memory that can be registered, and a page-aligned buffer to register
//! (with the `memmap2` feature, memmap2's `MmapMut` registers too).
//!
//! long because: every `RegMemory` implementation and its safety argument
//! stay beside the trait's contract, reviewed together (SOUNDNESS.md's
//! `memory.rs` entries).

mod either;
mod huge;
pub use either::{Memory, Persist};
pub use huge::{HugeBuf, HugePage};

use crate::error::{Arg, Error, Result};
use std::alloc::{alloc_zeroed, dealloc, Layout};
use std::ptr::NonNull;

/// Memory a [`MrLocal`](crate::MrLocal) can register and own for as long as
/// the registration lives.
///
/// The region takes the memory by value, so safe code cannot free, move out
/// of, reallocate or touch it while the device may access it: the memory is
/// handed back only by [`MrLocal::dereg`](crate::MrLocal::dereg), after the
/// registration is gone, and is leaked (never freed) when deregistration
/// fails.
///
/// Borrowed memory cannot be registered from safe code: safe code may leak
/// the region (`std::mem::forget`), which would end the borrow while the
/// registration, and the remote side's access, live on.
///
/// ```compile_fail,E0277
/// # #[allow(dead_code)]
/// # fn f(peer: &rpma::Peer) -> rpma::Result<()> {
/// let mut buf = vec![0u8; 4096];
/// let mr = rpma::MrLocal::reg(peer, &mut buf[..], rpma::Usage::WRITE_DST)?; // error: `&mut [u8]` is not RegMemory
/// std::mem::forget(mr);
/// drop(buf); // would free memory the peer can still write
/// # Ok(()) }
/// ```
///
/// To register memory the region does not own, use the `unsafe`
/// [`RawMemory::new`] and keep its contract.
///
/// The value is dropped where the region's last hold ends: when the
/// [`MrLocal`](crate::MrLocal) was dropped with operations in flight, in
/// the poll that retires the last one, after rpma has let its locks go (so
/// its `Drop` may call into rpma). It owns its memory, so it borrows
/// nothing (`'static`).
///
/// # Safety
/// An implementation must return the same pointer and length every time while
/// the value is not used otherwise; the range must be one allocation of
/// initialised bytes, valid for reads and writes, that stays at the same
/// address for as long as the value lives (moving the value itself, e.g. a
/// `Vec`, must not move the bytes), and nothing else may access it while the
/// value is owned by a registration. Dropping the value may free the memory
/// (rpma drops it only after a successful deregistration); if the value is
/// leaked instead, the memory must stay valid for ever.
pub unsafe trait RegMemory: 'static {
    /// Start and length in bytes of the memory to register.
    fn as_mut_ptr_len(&mut self) -> (*mut u8, usize);

    /// Whether the memory is persistent memory itself, so that a remote
    /// write reaching it is durable once flushed (a [`MappedFile`] mapped
    /// with `MAP_SYNC`); `false` unless an implementation knows better. It
    /// decides what an [`Export`](crate::export::Export)'s descriptor
    /// offers ([`Usage::FLUSH_TYPE_PERSISTENT`](crate::Usage::FLUSH_TYPE_PERSISTENT)),
    /// nothing about memory safety.
    fn is_pmem(&self) -> bool {
        false
    }

    /// Whether the bytes change only through this value while a region
    /// owns it: no other mapping of them (in this process or another) may
    /// write them. Then [`MrLocal::update_at`](crate::MrLocal::update_at)
    /// and [`view_at`](crate::MrLocal::view_at) may hand out references
    /// into a region no remote peer can write. `false` unless an
    /// implementation knows (it is part of the trait's `unsafe` contract).
    fn is_exclusive(&self) -> bool {
        false
    }
}

// SAFETY: a Vec's heap buffer does not move when the Vec moves, and the
// registration never grows it.
unsafe impl RegMemory for Vec<u8> {
    fn as_mut_ptr_len(&mut self) -> (*mut u8, usize) {
        (self.as_mut_ptr(), self.len())
    }

    fn is_exclusive(&self) -> bool {
        true
    }
}

// SAFETY: a boxed slice's heap buffer does not move when the box moves.
unsafe impl RegMemory for Box<[u8]> {
    fn as_mut_ptr_len(&mut self) -> (*mut u8, usize) {
        (self.as_mut_ptr(), self.len())
    }

    fn is_exclusive(&self) -> bool {
        true
    }
}

/// A writable memmap2 mapping (feature `memmap2`) registers as it is: an
/// anonymous one ([`MmapMut::map_anon`](memmap2::MmapMut::map_anon)), or a
/// file mapped with memmap2's `unsafe` constructors, whose contract (no one
/// else modifies or truncates the file) the caller already keeps; here it
/// holds as long as the region, and for ever if the region is leaked or
/// its deregistration fails. Like every registered memory, the region
/// hands out no reference to it; [`MrLocal::dereg`](crate::MrLocal::dereg)
/// gives the mapping back.
///
/// ```no_run
/// # #[allow(dead_code)]
/// # fn f(peer: &rpma::Peer) -> rpma::Result<()> {
/// let map = memmap2::MmapMut::map_anon(1 << 20).map_err(|e| rpma::Error::provider("mmap", e))?;
/// let mr = rpma::MrLocal::reg(peer, map, rpma::Usage::WRITE_DST | rpma::Usage::READ_SRC)?;
/// // ... the remote side writes and reads it ...
/// let map: memmap2::MmapMut = mr.dereg()?;
/// println!("{:?}", &map[..8]);
/// # Ok(()) }
/// ```
// SAFETY: the mapping stays at the same address with the same length while
// the value lives (moving an `MmapMut` does not move it; `remap` needs the
// value, which the region owns); it is writable and initialised (zeroed
// anonymous pages or the file's); it is unmapped only by the value's
// `Drop`. Its pages stay because its file is not truncated: memmap2's
// `unsafe` file constructors make that the caller's promise, for as long as
// the mapping lives (for ever if leaked); anonymous mappings have no file.
#[cfg(feature = "memmap2")]
#[cfg_attr(docsrs, doc(cfg(feature = "memmap2")))]
unsafe impl RegMemory for memmap2::MmapMut {
    fn as_mut_ptr_len(&mut self) -> (*mut u8, usize) {
        (self.as_mut_ptr(), self.len())
    }

    /// memmap2's file constructors make "no one else modifies the file"
    /// the caller's promise; anonymous mappings are private.
    fn is_exclusive(&self) -> bool {
        true
    }
}

/// Memory the region does not own (a borrowed buffer, a static, memory from
/// another allocator), registered under a contract the caller keeps.
///
/// ```no_run
/// # #[allow(dead_code)]
/// # fn f(peer: &rpma::Peer) -> rpma::Result<()> {
/// let mut buf = vec![0u8; 4096];
/// // SAFETY: `buf` outlives the region, which is deregistered (successfully,
/// // checked) before `buf` is touched or dropped, and is never leaked.
/// let raw = unsafe { rpma::RawMemory::new(buf.as_mut_ptr(), buf.len()) };
/// let mr = rpma::MrLocal::reg(peer, raw, rpma::Usage::WRITE_DST)?;
/// // ... use the region ...
/// mr.dereg()?; // on failure the memory must be leaked
/// drop(buf);
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct RawMemory {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: RawMemory is an address range; its user promised exclusive use.
unsafe impl Send for RawMemory {}
// SAFETY: as above; shared access only hands out the address.
unsafe impl Sync for RawMemory {}

impl RawMemory {
    /// The `len` bytes at `ptr`.
    ///
    /// # Safety
    /// Until a region registered over this value has been deregistered
    /// successfully ([`MrLocal::dereg`](crate::MrLocal::dereg) returned the
    /// value back, or the region was dropped while nothing else held it and
    /// deregistration did not fail): `ptr..ptr + len` must stay allocated,
    /// initialised and valid for reads and writes, and nothing but the region
    /// may access it (the device and the remote side may write it at any
    /// time). If the region is leaked, or its deregistration fails (rpma then
    /// logs it and leaks the value instead of dropping it), that holds for
    /// ever. `ptr` must be non-null.
    pub unsafe fn new(ptr: *mut u8, len: usize) -> RawMemory {
        RawMemory { ptr: NonNull::new(ptr).unwrap_or(NonNull::dangling()), len: if ptr.is_null() { 0 } else { len } }
    }
}

// SAFETY: RawMemory::new's contract.
unsafe impl RegMemory for RawMemory {
    fn as_mut_ptr_len(&mut self) -> (*mut u8, usize) {
        (self.ptr.as_ptr(), self.len)
    }

    fn is_exclusive(&self) -> bool {
        true
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
        let ptr = NonNull::new(p).ok_or_else(|| Error::nomem(format!("allocating {len} bytes failed")))?;
        Ok(AlignedBuf { ptr, layout })
    }

    /// Length in bytes.
    #[allow(clippy::len_without_is_empty, reason = "a buffer is never empty: `new` refuses 0 bytes")]
    pub fn len(&self) -> usize {
        self.layout.size()
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

    fn is_exclusive(&self) -> bool {
        true
    }
}

/// A file mapped shared and read-write, to register: persistent memory on
/// an FS-DAX file system (librpma's examples take such a `pmem-path`), or
/// a sealed anonymous file.
///
/// Registering FS-DAX memory needs On-Demand Paging: on a device without it
/// registration fails with [`Error::Provider`] (`EOPNOTSUPP`), as librpma's
/// does.
///
/// A file mapping is only as safe as the file's size is stable: when any
/// handle (in this process or another) truncates the file, the pages past
/// the new end are gone, and touching them raises `SIGBUS` (a copy from
/// them is undefined behaviour, and the device may still be asked to reach
/// them). So the constructors that map a file anyone can shrink are
/// `unsafe` ([`open`](Self::open), as memmap2's `Mmap::map`); the safe ones
/// map files whose size is sealed: [`sealed`](Self::sealed) (a new
/// anonymous file, sealed at once) and [`from_sealed_file`](Self::from_sealed_file)
/// (a file that carries `F_SEAL_SHRINK`, which cannot be removed).
///
/// Safe code cannot call `open`:
///
/// ```compile_fail,E0133
/// # fn f() -> rpma::Result<()> {
/// let f = rpma::MappedFile::open("/tmp/x", 4096)?; // error: call to unsafe function
/// // ... because this could make the mapping's pages vanish:
/// std::fs::OpenOptions::new().write(true).open("/tmp/x").unwrap().set_len(0).unwrap();
/// # let _ = f; Ok(()) }
/// ```
///
/// The bytes of a shared mapping can change under the program (another
/// mapping of the file, another process, the device), so the safe accessors
/// copy ([`read_at`](Self::read_at), [`write_at`](Self::write_at)) and never
/// hand out a reference; [`as_slice`](Self::as_slice) and
/// [`as_mut_slice`](Self::as_mut_slice) do, under an `unsafe` contract.
///
/// ```
/// let mut f = rpma::MappedFile::sealed("log", 1 << 20)?;
/// f.write_at(0, b"hello")?;
/// let mut got = [0u8; 5];
/// f.read_at(0, &mut got)?;
/// assert_eq!(&got, b"hello");
/// # Ok::<(), rpma::Error>(())
/// ```
///
/// A reference into a mapping would alias writes through any other
/// mapping of the same file: safe code cannot get one.
///
/// ```compile_fail,E0133
/// # fn f() -> rpma::Result<()> {
/// let a = rpma::MappedFile::sealed("x", 4096)?;
/// let r: &[u8] = a.as_slice(); // error: as_slice is unsafe
/// # let _ = r; Ok(()) }
/// ```
#[derive(Debug)]
pub struct MappedFile {
    map: rpma_sys::mmap::FileMapping,
    path: std::path::PathBuf,
    /// The mapped file, kept open for [`AsFd`](std::os::fd::AsFd).
    file: std::fs::File,
}

/// The mapped file's descriptor: e.g. to hand a [`sealed`](MappedFile::sealed)
/// file to another process, which maps it with
/// [`from_sealed_file`](MappedFile::from_sealed_file). (For a file mapped
/// with the `unsafe` [`open`](MappedFile::open), its contract covers this
/// descriptor too: nothing may shrink the file through it.)
impl std::os::fd::AsFd for MappedFile {
    fn as_fd(&self) -> std::os::fd::BorrowedFd<'_> {
        self.file.as_fd()
    }
}

impl MappedFile {
    /// Opens (creating if needed) the file at `path`, grows it to at least
    /// `len` bytes, and maps its first `len` bytes; or, when `path` is a
    /// device DAX character device (`/dev/daxX.Y`), maps its first `len`
    /// bytes, which must fit the device and be a multiple of its alignment
    /// (both read from sysfs; 2 MiB by default). On a DAX file system or
    /// device the mapping is made with `MAP_SYNC` ([`is_pmem`](Self::is_pmem)),
    /// so [`persist`](Self::persist) is a CPU cache flush.
    ///
    /// # Safety
    /// While the value lives (for ever, if it is leaked or owned by a
    /// region whose deregistration failed), nothing may shrink the file
    /// below `len` bytes: no truncation through any handle, in this process
    /// or another, no hole punched into the mapped range that makes it
    /// unreadable, and the file is not replaced underneath a DAX mapping
    /// (nor a device DAX namespace reconfigured).
    /// (Writes through other mappings are allowed: the safe accessors copy.)
    ///
    /// ```no_run
    /// // SAFETY: /mnt/pmem/log belongs to this program, and nothing else
    /// // truncates it while the mapping lives.
    /// let mut f = unsafe { rpma::MappedFile::open("/mnt/pmem/log", 1 << 20)? };
    /// f.write_at(0, b"hello")?;
    /// f.persist()?;
    /// println!("persistent memory: {}", f.is_pmem());
    /// # Ok::<(), rpma::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::Inval`] for `len == 0`, or for a device DAX `len` over the
    /// device's size or not a multiple of its alignment (the message says
    /// both); [`Error::Provider`] with the errno of the failing `open`,
    /// `ftruncate`, `fsync` (a new or grown file is made durable first),
    /// `mmap` or sysfs read.
    pub unsafe fn open(path: impl AsRef<std::path::Path>, len: usize) -> Result<MappedFile> {
        crate::logging::route_sys();
        let path = path.as_ref();
        if len == 0 {
            return Err(Error::inval(format!(
                "mapping length for {} is 0; it must be at least 1 byte",
                path.display()
            )));
        }
        let io = |op: &str, e| Error::provider_raw(format!("{op}({})", path.display()), e);
        let existed = path.exists();
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)
            .map_err(|e| io("open", e))?;
        let meta = file.metadata().map_err(|e| io("fstat", e))?;
        if std::os::unix::fs::FileTypeExt::is_char_device(&meta.file_type()) {
            let g =
                rpma_sys::mmap::device_dax_geometry(&file).map_err(|e| io("device DAX size and align (sysfs)", e))?;
            if len as u64 > g.size || !(len as u64).is_multiple_of(g.align) {
                return Err(Error::inval(format!(
                    "{}: a device DAX mapping of {len} bytes must be at most the device's {} bytes and a multiple \
                     of its alignment {}",
                    path.display(),
                    g.size,
                    g.align
                )));
            }
        } else if meta.len() < len as u64 {
            // A new or grown file is made durable (size and directory
            // entry) before anything is stored in it: a crash then never
            // loses the file under data that was persisted.
            file.set_len(len as u64).map_err(|e| io("ftruncate", e))?;
            file.sync_all().map_err(|e| io("fsync", e))?;
            if !existed {
                let dir = path.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(std::path::Path::new("."));
                std::fs::File::open(dir).and_then(|d| d.sync_all()).map_err(|e| io("fsync of the directory of", e))?;
            }
        }
        let map = rpma_sys::mmap::FileMapping::map(&file, len).map_err(|e| io("mmap", e))?;
        Ok(MappedFile { map, path: path.to_path_buf(), file })
    }

    /// A new anonymous file of `len` zeroed bytes (`memfd_create`), mapped
    /// whole, then sealed so that no handle can ever shrink or grow it or
    /// remove its pages (`F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_FUTURE_WRITE
    /// | F_SEAL_SEAL`). Its fd ([`AsFd`](std::os::fd::AsFd)) can be handed
    /// to another process, which can read it and map it read-only, never
    /// write, truncate or punch it. Its [`path`](Self::path) is
    /// `memfd:NAME` (`name` is only a label, as in `/proc/self/fd`).
    ///
    /// # Errors
    /// [`Error::Inval`] for `len == 0`, a length over `i64::MAX`, or a name
    /// with a NUL byte; [`Error::Provider`] with the errno of the failing
    /// `memfd_create`, `ftruncate`, `fcntl` or `mmap`.
    pub fn sealed(name: &str, len: usize) -> Result<MappedFile> {
        crate::logging::route_sys();
        if len == 0 || i64::try_from(len).is_err() || name.contains('\0') {
            return Err(Error::inval(format!(
                "MappedFile::sealed({name:?}, {len}): the length must be 1 ..= i64::MAX and the name without NUL"
            )));
        }
        let path = std::path::PathBuf::from(format!("memfd:{name}"));
        let io = |op: &str, e| Error::provider_raw(format!("{op}({})", path.display()), e);
        let file = rpma_sys::mmap::sealed_memfd(name, len).map_err(|e| io("memfd_create", e))?;
        let map = rpma_sys::mmap::FileMapping::map(&file, len).map_err(|e| io("mmap", e))?;
        // Mapped writable first: the seal refuses new writable mappings.
        rpma_sys::mmap::seal_pages(&file, true).map_err(|e| io("fcntl(F_ADD_SEALS)", e))?;
        Ok(MappedFile { map, path, file })
    }

    /// Maps the first `len` bytes of `file` (a `memfd`, tmpfs or hugetlbfs
    /// file, e.g. one received from another process), which must be sealed
    /// against shrinking (`F_SEAL_SHRINK`, which cannot be removed) and at
    /// least `len` bytes long, then **seals it against hole punching and
    /// writes through other handles** (`F_SEAL_FUTURE_WRITE`: from then on
    /// no handle anywhere can write it with `write(2)`, map it writable, or
    /// punch holes in it with `fallocate` or `madvise(MADV_REMOVE)`;
    /// mappings made before keep writing, and the accessors copy). A hole
    /// punched under a registered mapping would detach the device's pinned
    /// pages from the CPU's view, and on hugetlbfs make the next access
    /// raise `SIGBUS`. A hugetlbfs file's pages are all allocated here, so
    /// an empty huge-page pool is an error now, never a `SIGBUS` later.
    ///
    /// # Errors
    /// [`Error::Inval`] for `len == 0` or a file shorter than `len`;
    /// [`Error::Inval`] with [`Detail::Unsealable`](crate::error::Detail::Unsealable)
    /// for a file without `F_SEAL_SHRINK` (ordinary files take no seals:
    /// use the `unsafe` [`open`](Self::open)), one sealed with `F_SEAL_SEAL`
    /// (it cannot take the seal above), or one already sealed against
    /// writes (it cannot be mapped writable: a [`sealed`](Self::sealed)
    /// file is); [`Error::Provider`] with the errno of `fcntl`, `fstat`,
    /// `fstatfs`, `mmap` or `madvise` (`ENOMEM`/`EFAULT`: the huge-page
    /// pool has too few free pages; reserve more with
    /// `sysctl vm.nr_hugepages`).
    pub fn from_sealed_file(file: std::fs::File, len: usize) -> Result<MappedFile> {
        crate::logging::route_sys();
        use std::os::fd::AsRawFd;
        let path = std::fs::read_link(format!("/proc/self/fd/{}", file.as_raw_fd()))
            .unwrap_or_else(|_| format!("fd:{}", file.as_raw_fd()).into());
        let io = |op: &str, e| Error::provider_raw(format!("{op}({})", path.display()), e);
        if len == 0 {
            return Err(Error::inval(format!("mapping length for {} is 0", path.display())));
        }
        let seals = rpma_sys::mmap::seals(&file).map_err(|e| io("fcntl(F_GET_SEALS)", e))?.unwrap_or(0);
        let unsealable = |seals: u32, why: &str| {
            Error::Inval(crate::error::Msg::detailed(
                crate::error::Detail::Unsealable { seals },
                format!(
                    "{} {why}, so another handle could remove pages under the mapping; use MappedFile::sealed, a \
                     memfd sealed only with F_SEAL_SHRINK (and F_SEAL_GROW), or the unsafe MappedFile::open",
                    path.display()
                ),
            ))
        };
        let (shrink, sealed, writes) = (
            libc::F_SEAL_SHRINK as u32,
            libc::F_SEAL_SEAL as u32,
            (libc::F_SEAL_WRITE | libc::F_SEAL_FUTURE_WRITE) as u32,
        );
        if seals & shrink == 0 {
            return Err(unsealable(seals, "is not sealed against shrinking (F_SEAL_SHRINK)"));
        }
        if seals & writes != 0 {
            return Err(unsealable(seals, "is sealed against writes, so it cannot be mapped writable"));
        }
        if seals & sealed != 0 {
            return Err(unsealable(seals, "is sealed with F_SEAL_SEAL, so it cannot be sealed against hole punching"));
        }
        let size = file.metadata().map_err(|e| io("fstat", e))?.len();
        if size < len as u64 {
            return Err(Error::inval(format!(
                "{} has {size} bytes, fewer than the {len} to map (a sealed file cannot grow)",
                path.display()
            )));
        }
        let map = rpma_sys::mmap::FileMapping::map(&file, len).map_err(|e| io("mmap", e))?;
        match rpma_sys::mmap::seal_pages(&file, false) {
            Ok(()) => {}
            // Sealed meanwhile by another handle.
            Err(e) if e.raw_os_error() == Some(libc::EPERM) => {
                let now = rpma_sys::mmap::seals(&file).ok().flatten().unwrap_or(seals);
                return Err(unsealable(now, "was sealed with F_SEAL_SEAL meanwhile"));
            }
            Err(e) => return Err(io("fcntl(F_ADD_SEALS)", e)),
        }
        // A hole punched before the seal left no page there; on hugetlbfs a
        // later touch would need a page from the pool. Every page now, or
        // an error now.
        if rpma_sys::mmap::on_hugetlbfs(&file).map_err(|e| io("fstatfs", e))? {
            map.populate().map_err(|e| io("madvise(MADV_POPULATE_WRITE) (too few free huge pages?)", e))?;
        }
        Ok(MappedFile { map, path, file })
    }

    /// Length of the mapping in bytes.
    #[allow(clippy::len_without_is_empty, reason = "a mapping is never empty: its constructors refuse 0 bytes")]
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// The mapped file's path (`memfd:NAME` for [`sealed`](Self::sealed)
    /// files).
    pub fn path(&self) -> &std::path::Path {
        &self.path
    }

    fn check(&self, what: &str, offset: usize, len: usize) -> Result<()> {
        check_range(what, offset, len, self.len(), "the mapping's length")
    }

    /// Copies `dst.len()` bytes from `offset` of the mapping into `dst`.
    ///
    /// # Errors
    /// [`Error::Inval`] when `offset + dst.len()` exceeds [`len`](Self::len).
    pub fn read_at(&self, offset: usize, dst: &mut [u8]) -> Result<()> {
        self.check("MappedFile::read_at", offset, dst.len())?;
        // SAFETY: inside the live mapping (checked); a raw copy creates no
        // reference to bytes others may change.
        unsafe { std::ptr::copy_nonoverlapping(self.map.as_ptr().add(offset), dst.as_mut_ptr(), dst.len()) };
        Ok(())
    }

    /// Copies `src` into the mapping at `offset`.
    ///
    /// # Errors
    /// [`Error::Inval`] when `offset + src.len()` exceeds [`len`](Self::len).
    pub fn write_at(&mut self, offset: usize, src: &[u8]) -> Result<()> {
        self.check("MappedFile::write_at", offset, src.len())?;
        // SAFETY: as in read_at.
        unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), self.map.as_ptr().add(offset), src.len()) };
        Ok(())
    }

    /// The bytes, as a reference: reading a mapping in place (records
    /// parsed where they lie, with no copy) when the caller controls every
    /// writer of the file; [`read_at`](Self::read_at) copies safely
    /// otherwise.
    ///
    /// # Safety
    /// For the reference's lifetime nothing may change the mapped bytes or
    /// shrink the file: no other mapping of the file (in this process or
    /// another) is written, no other process truncates the file, and the
    /// value is not registered with remote or local write access (a region
    /// owns it then anyway).
    pub unsafe fn as_slice(&self) -> &[u8] {
        // SAFETY: the live mapping of `len` initialised (file-backed) bytes;
        // the caller guarantees nothing changes them.
        unsafe { std::slice::from_raw_parts(self.map.as_ptr(), self.map.len()) }
    }

    /// The bytes, as a mutable reference: building records in place in a
    /// mapping the caller alone writes; [`write_at`](Self::write_at) copies
    /// safely otherwise.
    ///
    /// # Safety
    /// As for [`as_slice`](Self::as_slice); in addition nothing else may read
    /// the bytes through another mapping while the reference lives.
    pub unsafe fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: as above; `&mut self` excludes access through this value.
        unsafe { std::slice::from_raw_parts_mut(self.map.as_ptr(), self.map.len()) }
    }

    /// Whether the mapping is persistent memory itself: the file is on a
    /// DAX file system or is a device DAX, and the kernel accepted
    /// `MAP_SYNC`, so a CPU cache flush makes a store durable (metadata
    /// included). Only then is it true that a remote write reaching this
    /// memory is persistent once flushed: set
    /// [`PeerCfg::set_direct_write_to_pmem`](crate::PeerCfg::set_direct_write_to_pmem)
    /// from it. `false` for page-cache files and [`sealed`](Self::sealed)
    /// memory.
    pub fn is_pmem(&self) -> bool {
        self.map.is_sync()
    }

    /// Makes the whole mapping durable: a CPU cache flush and fence
    /// (`clwb`, `clflushopt` or `clflush`, then `sfence`) when
    /// [`is_pmem`](Self::is_pmem), else `msync`.
    ///
    /// # Errors
    /// [`Error::Provider`] with the errno of `msync`.
    pub fn persist(&self) -> Result<()> {
        self.persist_range(0, self.len())
    }

    /// [`persist`](Self::persist) of `len` bytes at `offset` only.
    ///
    /// # Errors
    /// [`Error::Inval`] when the range exceeds the mapping;
    /// [`Error::Provider`] with the errno of `msync`.
    pub fn persist_range(&self, offset: usize, len: usize) -> Result<()> {
        self.check("MappedFile::persist_range", offset, len)?;
        self.map.persist(offset, len).map_err(|e| Error::provider_raw(format!("msync({})", self.path.display()), e))
    }
}

// SAFETY: the mapping stays at its address until the value is dropped; only
// the owner reaches it through this value.
unsafe impl RegMemory for MappedFile {
    fn as_mut_ptr_len(&mut self) -> (*mut u8, usize) {
        (self.map.as_ptr(), self.map.len())
    }

    fn is_pmem(&self) -> bool {
        MappedFile::is_pmem(self)
    }
}

/// `offset + len` within memory of `size` bytes (`of`: its name in the
/// message): the one range check of the memory types' own accessors.
///
/// # Errors
/// [`Error::Inval`] with [`Detail::OutOfRange`](crate::error::Detail::OutOfRange) ([`Arg::Range`]).
pub(crate) fn check_range(what: &str, offset: usize, len: usize, size: usize, of: &str) -> Result<()> {
    match offset.checked_add(len) {
        Some(end) if end <= size => Ok(()),
        _ => {
            let text = format!("{what}: offset {offset} + length {len} exceeds {of} {size}");
            Err(Error::out_of_range(Arg::Range, offset as u64, len as u64, size as u64, text))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What registration takes from a memmap2 mapping (registering needs a
    /// device): its own address and length, unchanged when the value moves
    /// (into a region); a file mapping's too; and a region over one is
    /// `Send + Sync` as the others.
    #[cfg(feature = "memmap2")]
    #[test]
    fn memmap2_mappings_are_registrable_memory() {
        fn region_is_send_sync<T: Send + Sync>() {}
        region_is_send_sync::<crate::MrLocal<memmap2::MmapMut>>();
        let mut map = memmap2::MmapMut::map_anon(3 * 4096).unwrap();
        map[..5].copy_from_slice(b"hello");
        let (ptr, len) = map.as_mut_ptr_len();
        assert_eq!((ptr, len), (map.as_mut_ptr(), 3 * 4096));
        let mut moved = Box::new(map);
        assert_eq!(moved.as_mut_ptr_len(), (ptr, len));
        assert_eq!(&moved[..5], b"hello");

        let path = std::env::temp_dir().join(format!("rpma-memmap2-{}", std::process::id()));
        let file = std::fs::OpenOptions::new().read(true).write(true).create(true).truncate(true).open(&path).unwrap();
        file.set_len(8192).unwrap();
        // SAFETY: a file of this test's own, never truncated while mapped.
        let mut fmap = unsafe { memmap2::MmapMut::map_mut(&file) }.unwrap();
        let (fptr, flen) = fmap.as_mut_ptr_len();
        assert_eq!((fptr, flen), (fmap.as_mut_ptr(), 8192));
        drop(fmap);
        std::fs::remove_file(&path).unwrap();
    }

    /// Two mappings of one file see each other's writes
    /// through copies; safe code never holds a reference into either.
    #[test]
    fn two_mappings_of_one_file_share_bytes_through_copies() {
        let path = std::env::temp_dir().join(format!("rpma-mapped-{}", std::process::id()));
        // SAFETY: a file of this test's own, never truncated.
        let (a, mut b) = unsafe { (MappedFile::open(&path, 4096).unwrap(), MappedFile::open(&path, 4096).unwrap()) };
        b.write_at(100, b"through b").unwrap();
        let mut got = [0u8; 9];
        a.read_at(100, &mut got).unwrap();
        assert_eq!(&got, b"through b");
        assert_eq!(a.read_at(4090, &mut got).unwrap_err().code(), crate::error::RPMA_E_INVAL);
        assert_eq!(b.write_at(usize::MAX, b"x").unwrap_err().code(), crate::error::RPMA_E_INVAL);
        drop((a, b));
        std::fs::remove_file(&path).unwrap();
    }

    /// Nothing can shrink a sealed mapping's file: the truncation that
    /// would make its pages vanish (SIGBUS) fails, through any handle.
    #[test]
    fn sealed_files_cannot_shrink() {
        use std::os::fd::AsFd;
        let mut m = MappedFile::sealed("rpma-test", 8192).unwrap();
        m.write_at(8000, b"end").unwrap();
        assert!(m.path().to_string_lossy().starts_with("memfd:"));
        // Another handle on the same file, as another process could get.
        let other = std::fs::File::from(m.as_fd().try_clone_to_owned().unwrap());
        let e = other.set_len(0).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EPERM), "{e}");
        let mut got = [0u8; 3];
        m.read_at(8000, &mut got).unwrap();
        assert_eq!(&got, b"end", "the pages are still there");
        // Nor can it punch a hole (which would drop the pages from under a
        // registered mapping) or write.
        assert_eq!(punch(&other, 0, 4096), Some(libc::EPERM), "punching a hole");
        use std::io::Write;
        assert_eq!((&other).write(b"x").unwrap_err().raw_os_error(), Some(libc::EPERM), "writing");
        m.read_at(8000, &mut got).unwrap();
        assert_eq!(&got, b"end");
        // Mapping it again takes a writable mapping, which it refuses.
        let e = MappedFile::from_sealed_file(other, 8192).unwrap_err();
        assert!(matches!(e.detail(), Some(crate::error::Detail::Unsealable { .. })), "{e}");
    }

    #[test]
    fn a_mapping_read_and_written_in_place() {
        let mut m = MappedFile::sealed("rpma-test-in-place", 4096).unwrap();
        // SAFETY: the sealed file has this one mapping and no other writer.
        unsafe { m.as_mut_slice()[100..104].copy_from_slice(b"rpma") };
        // SAFETY: as above.
        assert_eq!(unsafe { &m.as_slice()[100..104] }, b"rpma");
        let mut got = [0u8; 4];
        m.read_at(100, &mut got).unwrap();
        assert_eq!(&got, b"rpma");
    }

    /// `fallocate(FALLOC_FL_PUNCH_HOLE)` of `len` bytes at `at` through
    /// `f`: the errno, `None` when it punched.
    fn punch(f: &std::fs::File, at: i64, len: i64) -> Option<i32> {
        use std::os::fd::AsRawFd;
        // SAFETY: fallocate on a live fd, integer arguments.
        let rc =
            unsafe { libc::fallocate(f.as_raw_fd(), libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE, at, len) };
        (rc != 0).then(|| std::io::Error::last_os_error().raw_os_error().unwrap_or(0))
    }

    /// A memfd made by someone else, with `seals`.
    fn memfd_with(seals: i32, len: u64) -> std::fs::File {
        use std::os::fd::FromRawFd;
        // SAFETY: a NUL-terminated name; a new fd.
        let fd = unsafe { libc::memfd_create(c"rpma-test".as_ptr(), libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING) };
        assert!(fd >= 0, "{}", std::io::Error::last_os_error());
        // SAFETY: the fresh fd, owned from here.
        let f = unsafe { std::fs::File::from_raw_fd(fd) };
        f.set_len(len).unwrap();
        rpma_sys::mmap::add_seals(&f, seals).unwrap();
        f
    }

    /// A file sealed only against shrinking is sealed against hole
    /// punching when mapped: another handle's punch fails, the mapping
    /// keeps its bytes. Files that cannot take that seal are refused, typed.
    #[test]
    fn a_mapped_file_loses_no_page_to_another_handle() {
        use std::os::fd::AsFd;
        let f = memfd_with(libc::F_SEAL_SHRINK | libc::F_SEAL_GROW, 8192);
        let other = std::fs::File::from(f.as_fd().try_clone_to_owned().unwrap());
        // Before the mapping, a punch works (nothing is mapped yet).
        assert_eq!(punch(&other, 0, 4096), None);
        let mut m = MappedFile::from_sealed_file(f, 8192).unwrap();
        m.write_at(100, b"kept").unwrap();
        assert_eq!(punch(&other, 0, 8192), Some(libc::EPERM), "the mapping's pages cannot be punched");
        let mut got = [0u8; 4];
        m.read_at(100, &mut got).unwrap();
        assert_eq!(&got, b"kept");
        let seals = rpma_sys::mmap::seals(&other).unwrap().unwrap();
        assert_ne!(seals & libc::F_SEAL_FUTURE_WRITE as u32, 0);
        // Refused: no F_SEAL_SHRINK; F_SEAL_SEAL (cannot take the seal);
        // sealed against writes (cannot be mapped writable).
        for seals in [0, libc::F_SEAL_SHRINK | libc::F_SEAL_SEAL, libc::F_SEAL_SHRINK | libc::F_SEAL_FUTURE_WRITE] {
            let e = MappedFile::from_sealed_file(memfd_with(seals, 4096), 4096).unwrap_err();
            assert_eq!(e.code(), crate::error::RPMA_E_INVAL);
            assert!(
                matches!(e.detail(), Some(&crate::error::Detail::Unsealable { seals: s }) if s == seals as u32),
                "{seals:#x}: {e}"
            );
        }
    }

    #[test]
    fn unsealed_files_are_refused_by_the_safe_constructor() {
        let path = std::env::temp_dir().join(format!("rpma-unsealed-{}", std::process::id()));
        let f = std::fs::OpenOptions::new().read(true).write(true).create(true).truncate(true).open(&path).unwrap();
        f.set_len(4096).unwrap();
        let e = MappedFile::from_sealed_file(f, 4096).unwrap_err();
        assert_eq!(e.code(), crate::error::RPMA_E_INVAL);
        // (A tmpfs file reports F_SEAL_SEAL; a disk file no seals at all.)
        assert!(matches!(e.detail(), Some(crate::error::Detail::Unsealable { .. })), "{e}");
        std::fs::remove_file(&path).unwrap();
        assert_eq!(MappedFile::sealed("x", 0).unwrap_err().code(), crate::error::RPMA_E_INVAL);
        assert_eq!(MappedFile::sealed("x", usize::MAX).unwrap_err().code(), crate::error::RPMA_E_INVAL);
        assert_eq!(MappedFile::sealed("a\0b", 1).unwrap_err().code(), crate::error::RPMA_E_INVAL);
    }

    #[test]
    fn raw_memory_from_null_is_empty() {
        // SAFETY: a null pointer registers nothing (registration of 0 bytes fails).
        let mut r = unsafe { RawMemory::new(std::ptr::null_mut(), 10) };
        assert_eq!(r.as_mut_ptr_len().1, 0);
    }

    /// A page-cache file (not DAX) maps without `MAP_SYNC`: it is not
    /// persistent memory, and persisting falls back to `msync`.
    #[test]
    fn a_page_cache_file_is_not_pmem_and_persists_by_msync() {
        let path = std::env::temp_dir().join(format!("rpma-pmem-{}", std::process::id()));
        // SAFETY: this test's own file, never truncated while mapped.
        let mut m = unsafe { MappedFile::open(&path, 8192).unwrap() };
        assert!(!m.is_pmem());
        m.write_at(4097, b"x").unwrap();
        m.persist_range(4090, 10).unwrap();
        m.persist().unwrap();
        assert_eq!(m.persist_range(8000, 500).unwrap_err().code(), crate::error::RPMA_E_INVAL);
        assert!(!MappedFile::sealed("x", 4096).unwrap().is_pmem());
        drop(m);
        assert_eq!(std::fs::read(&path).unwrap()[4097], b'x');
        let _ = std::fs::remove_file(&path);
    }
}
