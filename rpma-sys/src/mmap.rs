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
