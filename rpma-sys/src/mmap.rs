//! Shared file mappings (`mmap(MAP_SHARED)`), for registering files such as
//! persistent memory on an FS-DAX file system.

use std::io;
use std::os::fd::AsRawFd;

/// A shared, read-write mapping of a file, unmapped on drop.
#[derive(Debug)]
pub struct FileMapping {
    ptr: *mut u8,
    len: usize,
}

// SAFETY: the mapping is plain memory owned by this value.
unsafe impl Send for FileMapping {}
// SAFETY: shared access only hands out the address.
unsafe impl Sync for FileMapping {}

impl FileMapping {
    /// Maps `len` bytes of `file` from its start, shared and read-write.
    ///
    /// # Errors
    /// `EINVAL` for `len == 0`; the errno of `mmap`.
    pub fn map(file: &std::fs::File, len: usize) -> io::Result<FileMapping> {
        if len == 0 {
            return Err(io::Error::from_raw_os_error(libc::EINVAL));
        }
        // SAFETY: a fresh mapping chosen by the kernel; no existing memory is affected.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                file.as_raw_fd(),
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        Ok(FileMapping { ptr: p.cast(), len })
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

    /// Writes the mapping back to its file (`msync(MS_SYNC)`).
    ///
    /// # Errors
    /// The errno of `msync`.
    pub fn sync(&self) -> io::Result<()> {
        // SAFETY: the whole live mapping.
        let rc = unsafe { libc::msync(self.ptr.cast(), self.len, libc::MS_SYNC) };
        crate::from_minus1_ret(rc, "msync")
    }
}

impl Drop for FileMapping {
    fn drop(&mut self) {
        // SAFETY: our mapping, unmapped once.
        if unsafe { libc::munmap(self.ptr.cast(), self.len) } != 0 {
            log::error!("munmap: {}", io::Error::last_os_error());
        }
    }
}

/// A new anonymous file of `len` bytes (`memfd_create`), sealed against
/// shrinking and growing (`F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL`): no
/// handle, in this process or another, can ever change its size, so a
/// mapping of it can never lose pages.
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
    // SAFETY: fcntl on our own fd with integer arguments.
    let rc = unsafe { libc::fcntl(fd, libc::F_ADD_SEALS, libc::F_SEAL_SHRINK | libc::F_SEAL_GROW | libc::F_SEAL_SEAL) };
    crate::from_minus1_ret(rc, "fcntl(F_ADD_SEALS)")?;
    Ok(file)
}

/// Whether `file` is sealed against shrinking (`F_SEAL_SHRINK`, which can
/// never be removed): `false` for files that take no seals (`EINVAL`).
///
/// # Errors
/// The errno of `fcntl(F_GET_SEALS)` other than `EINVAL`.
pub fn shrink_sealed(file: &std::fs::File) -> io::Result<bool> {
    // SAFETY: fcntl on a live fd with no pointer arguments.
    let seals = unsafe { libc::fcntl(file.as_raw_fd(), libc::F_GET_SEALS) };
    if seals < 0 {
        let e = io::Error::last_os_error();
        return if e.raw_os_error() == Some(libc::EINVAL) { Ok(false) } else { Err(e) };
    }
    Ok(seals & libc::F_SEAL_SHRINK != 0)
}
