//! Shared file mappings (`mmap(MAP_SHARED)`), for registering files such as
//! persistent memory on an FS-DAX file system or a device DAX character
//! device, and the CPU's cache flush that makes stores to such a mapping
//! durable; private anonymous mappings on huge pages.

use std::io;
use std::os::fd::AsRawFd;

/// `MAP_SYNC` (`asm-generic/mman-common.h`; not in the libc crate for
/// glibc targets): the mapping's metadata is durable whenever a CPU store
/// to it is, so a cache flush alone persists a store (DAX only).
const MAP_SYNC: libc::c_int = 0x80000;

/// A shared, read-write mapping of a file, unmapped on drop.
#[derive(Debug)]
pub struct FileMapping {
    ptr: *mut u8,
    len: usize,
    sync: bool,
}

// SAFETY: the mapping is plain memory owned by this value.
unsafe impl Send for FileMapping {}
// SAFETY: shared access only hands out the address.
unsafe impl Sync for FileMapping {}

impl FileMapping {
    /// Maps `len` bytes of `file` from its start, shared and read-write:
    /// with `MAP_SHARED_VALIDATE | MAP_SYNC` where the file allows it (a
    /// DAX file: FS-DAX or device DAX; [`is_sync`](Self::is_sync) then
    /// says so), else with plain `MAP_SHARED`.
    ///
    /// # Errors
    /// `EINVAL` for `len == 0`; the errno of `mmap` (`EINVAL` also for a
    /// device DAX length that is not a multiple of its alignment).
    pub fn map(file: &std::fs::File, len: usize) -> io::Result<FileMapping> {
        if len == 0 {
            return Err(io::Error::from_raw_os_error(libc::EINVAL));
        }
        match Self::mmap(file, len, libc::MAP_SHARED_VALIDATE | MAP_SYNC) {
            Ok(ptr) => Ok(FileMapping { ptr, len, sync: true }),
            // Not a DAX file (EOPNOTSUPP), or a kernel without
            // MAP_SHARED_VALIDATE (EINVAL): an ordinary shared mapping.
            Err(e) if matches!(e.raw_os_error(), Some(libc::EOPNOTSUPP | libc::EINVAL)) => {
                Ok(FileMapping { ptr: Self::mmap(file, len, libc::MAP_SHARED)?, len, sync: false })
            }
            Err(e) => Err(e),
        }
    }

    fn mmap(file: &std::fs::File, len: usize, flags: libc::c_int) -> io::Result<*mut u8> {
        // SAFETY: a fresh mapping chosen by the kernel; no existing memory is affected.
        let p = unsafe {
            libc::mmap(std::ptr::null_mut(), len, libc::PROT_READ | libc::PROT_WRITE, flags, file.as_raw_fd(), 0)
        };
        if p == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        Ok(p.cast())
    }

    /// Faults every page of the mapping in, writable
    /// (`madvise(MADV_POPULATE_WRITE)`), without changing a byte: a page
    /// that cannot be allocated (an empty huge-page pool) is this error,
    /// where a touch would raise `SIGBUS`.
    ///
    /// # Errors
    /// The errno of `madvise`: `ENOMEM` or `EFAULT` when a page cannot be
    /// allocated, `EINVAL` before Linux 5.14.
    pub fn populate(&self) -> io::Result<()> {
        // SAFETY: our own mapping, whole; populating changes no byte.
        let rc = unsafe { libc::madvise(self.ptr.cast(), self.len, libc::MADV_POPULATE_WRITE) };
        crate::from_minus1_ret(rc, "madvise(MADV_POPULATE_WRITE)")
    }

    /// Whether the kernel accepted `MAP_SYNC`: the file is on DAX (its
    /// pages are the persistent memory itself), and a CPU cache flush
    /// ([`flush_cpu`]) makes a store durable, metadata included.
    pub fn is_sync(&self) -> bool {
        self.sync
    }

    /// Start of the mapping.
    pub fn as_ptr(&self) -> *mut u8 {
        self.ptr
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Always false (a mapping has at least one byte).
    pub fn is_empty(&self) -> bool {
        false
    }

    /// Makes stores to `len` bytes at `offset` durable: a CPU cache flush
    /// ([`flush_cpu`]) on a `MAP_SYNC` mapping, else `msync(MS_SYNC)` of the
    /// pages holding them.
    ///
    /// # Errors
    /// `EINVAL` when the range exceeds the mapping; the errno of `msync`.
    pub fn persist(&self, offset: usize, len: usize) -> io::Result<()> {
        let end = match offset.checked_add(len) {
            Some(end) if end <= self.len => end,
            _ => return Err(io::Error::from_raw_os_error(libc::EINVAL)),
        };
        if len == 0 {
            return Ok(());
        }
        if self.sync && cfg!(target_arch = "x86_64") {
            // SAFETY: inside the live mapping (checked above).
            unsafe { flush_cpu(self.ptr.add(offset), len) };
            return Ok(());
        }
        // msync takes a page-aligned start.
        let start = offset - offset % crate::page_size();
        // SAFETY: a range of the live mapping, from a page boundary.
        let rc = unsafe { libc::msync(self.ptr.add(start).cast(), end - start, libc::MS_SYNC) };
        crate::from_minus1_ret(rc, "msync")
    }
}

/// The cache-line write-back the CPU has, probed once: `clwb` (keeps the
/// line cached), else `clflushopt`, else `clflush`.
#[cfg(target_arch = "x86_64")]
fn flush_insn() -> u8 {
    use std::sync::OnceLock;
    static INSN: OnceLock<u8> = OnceLock::new();
    *INSN.get_or_init(|| {
        // Leaf 7 is read only when the CPU reports it (maximum leaf >= 7).
        let max = std::arch::x86_64::__cpuid(0).eax;
        let ebx = if max >= 7 { std::arch::x86_64::__cpuid_count(7, 0).ebx } else { 0 };
        if ebx & (1 << 24) != 0 {
            2 // clwb
        } else if ebx & (1 << 23) != 0 {
            1 // clflushopt
        } else {
            0 // clflush (SSE2: every x86_64 CPU)
        }
    })
}

/// Writes back the cache lines holding `len` bytes at `ptr` and fences
/// (`clwb`/`clflushopt`/`clflush`, then `sfence`): on memory whose pages
/// are persistent (a DAX mapping), the stores are durable on return. On
/// other architectures a full fence only (use `msync` there).
///
/// # Safety
/// `ptr .. ptr + len` lies in memory mapped in this process.
pub unsafe fn flush_cpu(ptr: *const u8, len: usize) {
    #[cfg(target_arch = "x86_64")]
    {
        const LINE: usize = 64;
        let start = ptr as usize & !(LINE - 1);
        let end = (ptr as usize).saturating_add(len);
        let insn = flush_insn();
        let mut a = start;
        while a < end {
            let p = a as *const u8;
            // SAFETY: `p` is in a cache line of the caller's mapped range;
            // the instructions only write the line back (no store).
            unsafe {
                match insn {
                    2 => std::arch::asm!("clwb [{0}]", in(reg) p, options(nostack, preserves_flags)),
                    1 => std::arch::asm!("clflushopt [{0}]", in(reg) p, options(nostack, preserves_flags)),
                    _ => std::arch::x86_64::_mm_clflush(p),
                }
            }
            a += LINE;
        }
        // SAFETY: a store fence, no memory operand.
        unsafe { std::arch::x86_64::_mm_sfence() };
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = (ptr, len);
        std::sync::atomic::fence(std::sync::atomic::Ordering::SeqCst);
    }
}

/// A private, anonymous mapping on huge pages (`MAP_HUGETLB`), zeroed,
/// unmapped on drop. Its pages are reserved from the pool when it is made
/// (a private mapping without `MAP_NORESERVE`), so an empty pool is
/// [`new`](Self::new)'s `ENOMEM`, never a `SIGBUS` at a later touch.
#[derive(Debug)]
pub struct HugeMapping {
    ptr: *mut u8,
    len: usize,
}

// SAFETY: the mapping is plain memory owned by this value.
unsafe impl Send for HugeMapping {}
// SAFETY: shared access only hands out the address.
unsafe impl Sync for HugeMapping {}

impl HugeMapping {
    /// Maps `len` bytes on huge pages of `1 << page_shift` bytes.
    ///
    /// # Errors
    /// `EINVAL` for `len == 0`, a `len` that is not a multiple of the page
    /// size or a shift over 63 (and from `mmap` for a page size the system
    /// has no pool of); `ENOMEM` when the pool has too few free pages.
    pub fn new(len: usize, page_shift: u32) -> io::Result<HugeMapping> {
        let page = 1usize.checked_shl(page_shift).filter(|_| page_shift < 64);
        if len == 0 || page.is_none_or(|p| !len.is_multiple_of(p)) {
            return Err(io::Error::from_raw_os_error(libc::EINVAL));
        }
        let flags = libc::MAP_PRIVATE
            | libc::MAP_ANONYMOUS
            | libc::MAP_HUGETLB
            | ((page_shift as libc::c_int) << libc::MAP_HUGE_SHIFT);
        // SAFETY: a fresh anonymous mapping chosen by the kernel; no
        // existing memory is affected.
        let p = unsafe { libc::mmap(std::ptr::null_mut(), len, libc::PROT_READ | libc::PROT_WRITE, flags, -1, 0) };
        if p == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        Ok(HugeMapping { ptr: p.cast(), len })
    }

    /// The mapping's start.
    pub fn as_ptr(&self) -> *mut u8 {
        self.ptr
    }

    /// The mapping's length in bytes (never 0).
    #[allow(clippy::len_without_is_empty, reason = "a mapping is never empty: `new` refuses 0 bytes")]
    pub fn len(&self) -> usize {
        self.len
    }
}

impl Drop for HugeMapping {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `new`, unmapped once.
        unsafe { libc::munmap(self.ptr.cast(), self.len) };
    }
}

impl Drop for FileMapping {
    fn drop(&mut self) {
        // SAFETY: our mapping, unmapped once.
        if unsafe { libc::munmap(self.ptr.cast(), self.len) } != 0 {
            crate::log_hook::sys_log!(Error, "munmap: {}", io::Error::last_os_error());
        }
    }
}

/// A new anonymous file of `len` bytes (`memfd_create`), sealed against
/// shrinking and growing (`F_SEAL_SHRINK | F_SEAL_GROW`): no handle, in
/// this process or another, can ever change its size. Its creator maps it,
/// then seals it against hole punching ([`seal_pages`]) before anyone else
/// can have it.
///
/// # Errors
/// `EINVAL` for `len == 0` or a `name` with a NUL byte; the errno of
/// `memfd_create`, `ftruncate` or `fcntl`.
pub fn sealed_memfd(name: &str, len: usize) -> io::Result<std::fs::File> {
    use std::os::fd::FromRawFd;
    let cname = std::ffi::CString::new(name).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
    if len == 0 || i64::try_from(len).is_err() {
        return Err(io::Error::from_raw_os_error(libc::EINVAL));
    }
    // SAFETY: a NUL-terminated name; the flags ask for a new fd.
    let fd = unsafe { libc::memfd_create(cname.as_ptr(), libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a fresh fd that nothing else owns.
    let file = unsafe { std::fs::File::from_raw_fd(fd) };
    file.set_len(len as u64)?;
    add_seals(&file, libc::F_SEAL_SHRINK | libc::F_SEAL_GROW)?;
    Ok(file)
}

/// The seals of `file` (`F_GET_SEALS`), `None` for a file that takes none
/// (`EINVAL`: not a memfd, tmpfs or hugetlbfs file).
///
/// # Errors
/// The errno of `fcntl(F_GET_SEALS)` other than `EINVAL`.
pub fn seals(file: &std::fs::File) -> io::Result<Option<u32>> {
    // SAFETY: fcntl on a live fd with no pointer arguments.
    let seals = unsafe { libc::fcntl(file.as_raw_fd(), libc::F_GET_SEALS) };
    if seals < 0 {
        let e = io::Error::last_os_error();
        return if e.raw_os_error() == Some(libc::EINVAL) { Ok(None) } else { Err(e) };
    }
    Ok(Some(seals as u32))
}

/// Adds `seals` to `file` (`F_ADD_SEALS`).
///
/// # Errors
/// The errno of `fcntl(F_ADD_SEALS)`: `EPERM` when the file is sealed
/// with `F_SEAL_SEAL`, `EBUSY` for `F_SEAL_WRITE` while it is mapped
/// writable.
pub fn add_seals(file: &std::fs::File, seals: libc::c_int) -> io::Result<()> {
    // SAFETY: fcntl on a live fd with integer arguments.
    let rc = unsafe { libc::fcntl(file.as_raw_fd(), libc::F_ADD_SEALS, seals) };
    crate::from_minus1_ret(rc, "fcntl(F_ADD_SEALS)")
}

/// Seals `file`, already mapped writable by its caller, so that no handle
/// can remove or replace its pages: `F_SEAL_FUTURE_WRITE`, which refuses
/// `fallocate(FALLOC_FL_PUNCH_HOLE)` (and `madvise(MADV_REMOVE)`, which
/// punches through it) on shmem and hugetlbfs files, as well as `write(2)`
/// and new writable mappings; mappings made before keep writing. Add
/// `F_SEAL_SEAL` with `final_` (the caller's own new file).
///
/// # Errors
/// As [`add_seals`].
pub fn seal_pages(file: &std::fs::File, final_: bool) -> io::Result<()> {
    add_seals(file, libc::F_SEAL_FUTURE_WRITE | if final_ { libc::F_SEAL_SEAL } else { 0 })
}

/// Whether `file` lives on hugetlbfs (`fstatfs`): its pages are allocated
/// from the huge-page pool when first touched, and a touch the pool
/// cannot serve raises `SIGBUS`.
///
/// # Errors
/// The errno of `fstatfs`.
pub fn on_hugetlbfs(file: &std::fs::File) -> io::Result<bool> {
    const HUGETLBFS_MAGIC: libc::c_long = 0x9584_58f6;
    // SAFETY: plain data, all-zero is valid.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: a live fd and a valid out-pointer.
    let rc = unsafe { libc::fstatfs(file.as_raw_fd(), &mut st) };
    crate::from_minus1_ret(rc, "fstatfs")?;
    Ok(st.f_type as libc::c_long == HUGETLBFS_MAGIC)
}

/// A device DAX character device's size and mapping alignment, from sysfs
/// (`/sys/dev/char/MAJOR:MINOR/size`, and `align` there or under
/// `device/`; 2 MiB when neither exists, the kernels' default).
///
/// # Errors
/// `ENODEV` when `file` is not a character device; the errno of reading
/// sysfs; `EINVAL` for a size or alignment that does not parse.
pub fn device_dax_geometry(file: &std::fs::File) -> io::Result<DaxGeometry> {
    use std::os::unix::fs::{FileTypeExt, MetadataExt};
    let m = file.metadata()?;
    if !m.file_type().is_char_device() {
        return Err(io::Error::from_raw_os_error(libc::ENODEV));
    }
    let dev = m.rdev();
    let dir = std::path::PathBuf::from(format!("/sys/dev/char/{}:{}", libc::major(dev), libc::minor(dev)));
    dax_geometry_in(&dir)
}

/// The size and alignment of a device DAX mapping ([`device_dax_geometry`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DaxGeometry {
    /// Bytes the device maps.
    pub size: u64,
    /// A mapping's length and offset must be multiples of this.
    pub align: u64,
}

/// [`device_dax_geometry`] from the sysfs directory `dir`.
fn dax_geometry_in(dir: &std::path::Path) -> io::Result<DaxGeometry> {
    let num = |name: &str| -> io::Result<Option<u64>> {
        match std::fs::read_to_string(dir.join(name)) {
            Ok(t) => {
                let t = t.trim();
                let v = match t.strip_prefix("0x") {
                    Some(h) => u64::from_str_radix(h, 16),
                    None => t.parse(),
                };
                v.map(Some).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e),
        }
    };
    let size = num("size")?.ok_or_else(|| io::Error::from_raw_os_error(libc::ENODEV))?;
    let align = match num("align")? {
        Some(a) => a,
        None => num("device/align")?.unwrap_or(2 << 20),
    };
    if align == 0 || !align.is_power_of_two() {
        return Err(io::Error::from_raw_os_error(libc::EINVAL));
    }
    Ok(DaxGeometry { size, align })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn tmpdir(name: &str) -> std::path::PathBuf {
        let d = std::env::temp_dir().join(format!("rpma-sys-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(d.join("device")).unwrap();
        d
    }

    #[test]
    fn dax_geometry_reads_size_and_alignment() {
        let d = tmpdir("dax");
        std::fs::write(d.join("size"), "526385152\n").unwrap();
        assert_eq!(dax_geometry_in(&d).unwrap(), DaxGeometry { size: 526385152, align: 2 << 20 });
        std::fs::write(d.join("device/align"), "4096\n").unwrap();
        assert_eq!(dax_geometry_in(&d).unwrap().align, 4096);
        std::fs::write(d.join("align"), "1073741824\n").unwrap();
        assert_eq!(dax_geometry_in(&d).unwrap().align, 1 << 30);
        std::fs::write(d.join("align"), "3\n").unwrap();
        assert_eq!(dax_geometry_in(&d).unwrap_err().raw_os_error(), Some(libc::EINVAL));
        std::fs::write(d.join("size"), "many\n").unwrap();
        assert_eq!(dax_geometry_in(&d).unwrap_err().raw_os_error(), Some(libc::EINVAL));
        std::fs::remove_file(d.join("size")).unwrap();
        assert_eq!(dax_geometry_in(&d).unwrap_err().raw_os_error(), Some(libc::ENODEV));
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn a_regular_file_is_not_device_dax() {
        let f = std::fs::File::open("/proc/self/exe").unwrap();
        assert_eq!(device_dax_geometry(&f).unwrap_err().raw_os_error(), Some(libc::ENODEV));
    }

    #[test]
    fn a_non_dax_file_maps_without_map_sync_and_persists_with_msync() {
        let path = std::env::temp_dir().join(format!("rpma-sys-map-{}", std::process::id()));
        let mut f = std::fs::OpenOptions::new().read(true).write(true).create(true).truncate(true).open(&path).unwrap();
        f.write_all(&[0u8; 8192]).unwrap();
        let m = FileMapping::map(&f, 8192).unwrap();
        // /tmp is tmpfs or a disk file system here, never DAX.
        assert!(!m.is_sync());
        // SAFETY: inside the live mapping.
        unsafe { m.as_ptr().add(5000).write(7) };
        m.persist(4999, 2).unwrap();
        assert_eq!(m.persist(8000, 193).unwrap_err().raw_os_error(), Some(libc::EINVAL));
        assert_eq!(m.persist(usize::MAX, 2).unwrap_err().raw_os_error(), Some(libc::EINVAL));
        m.persist(8192, 0).unwrap();
        drop(m);
        assert_eq!(std::fs::read(&path).unwrap()[5000], 7);
        let _ = std::fs::remove_file(&path);
    }

    #[test]
    fn the_cpu_flush_runs_on_any_mapped_memory() {
        let b = vec![1u8; 1000];
        // SAFETY: a live allocation; the flush only writes lines back.
        unsafe { flush_cpu(b.as_ptr().wrapping_add(3), 997) };
        unsafe { flush_cpu(b.as_ptr(), 0) };
        assert_eq!(b[999], 1);
    }
}
