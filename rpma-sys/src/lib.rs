//! The verbs boundary of `rpma`: owned libibverbs and librdmacm handles over
//! the crate's own checked-in bindings (no bindgen or libclang at build time).
//!
//! Every FFI call of the project lives in this crate. Each `unsafe` block
//! carries a `// SAFETY:` line saying why the call is sound. Handles own the
//! verbs object they wrap and release it in `Drop`; a handle keeps its parents
//! alive (a memory region keeps its protection domain, which keeps its device
//! context) so objects are always destroyed children-first.
//!
//! Errors are [`std::io::Error`] carrying the errno the verbs call reported.
//!
//! This crate is an implementation detail of `rpma`; its API follows the verbs
//! closely and may change with it.
#![deny(missing_docs, missing_debug_implementations)]
#![deny(unsafe_op_in_unsafe_fn)]

pub mod chain;
pub mod cm;
pub mod cq;
pub mod device;
pub mod fault;
mod ffi;
pub mod gate;
pub mod log_hook;
pub mod mmap;
pub mod mr;
pub mod mw;
pub mod pd;
pub mod post;
pub mod qp;
pub mod srq;
pub mod wr;

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};
use std::os::raw::c_int;

/// `errno` as an [`io::Error`]; an error without errno when the call set none
/// (librpma reports that case as "unknown").
pub(crate) fn last_error(op: &str) -> io::Error {
    let e = io::Error::last_os_error();
    match e.raw_os_error() {
        Some(0) | None => io::Error::other(format!("{op} failed without setting errno")),
        Some(_) => e,
    }
}

/// After a successful destroy of `this`'s verbs object: drops only the
/// parent handle `parent` picks out (a PD, say), without running `this`'s
/// `Drop` (which would destroy the object again).
pub(crate) fn drop_parent_only<T, P>(this: T, parent: fn(&T) -> &P) {
    let this = std::mem::ManuallyDrop::new(this);
    // SAFETY: the parent is read out exactly once and `this` is never
    // dropped, so it is dropped exactly once.
    drop(unsafe { std::ptr::read(parent(&this)) });
}

/// For verbs that return 0 or an errno value (`ibv_dealloc_pd`, `ibv_dereg_mr`, ...).
#[inline]
pub(crate) fn from_errno_ret(rc: c_int, op: &str) -> io::Result<()> {
    match rc {
        0 => Ok(()),
        e if e > 0 => Err(io::Error::from_raw_os_error(e)),
        e if e < 0 && e != -1 => Err(io::Error::from_raw_os_error(-e)),
        _ => Err(last_error(op)),
    }
}

/// For calls that return -1 and set errno (`rdma_*`, `ibv_get_cq_event`).
#[inline]
pub(crate) fn from_minus1_ret(rc: c_int, op: &str) -> io::Result<()> {
    if rc == 0 {
        Ok(())
    } else {
        Err(last_error(op))
    }
}

/// The calling thread's kernel thread ID (`gettid(2)`), as librpma's log
/// lines print it. (Not `std::thread::current()`: that allocates the
/// thread's handle on first use, which valgrind reports as a "possibly
/// lost" block in C programs that never free it.)
pub fn thread_id() -> i64 {
    // SAFETY: gettid takes no arguments and cannot fail.
    unsafe { libc::syscall(libc::SYS_gettid) }
}

/// The system page size (`sysconf(_SC_PAGESIZE)`), 4096 when unavailable.
pub fn page_size() -> usize {
    // SAFETY: sysconf has no preconditions.
    let n = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if n > 0 && (n as usize).is_power_of_two() {
        n as usize
    } else {
        4096
    }
}

/// Waits until `fd` is readable or `timeout` passes (`poll(2)`); `None`
/// waits without limit. Returns whether it is readable.
///
/// # Errors
/// The errno of `poll` (`EINTR` is retried).
pub fn poll_readable(fd: BorrowedFd<'_>, timeout: Option<std::time::Duration>) -> io::Result<bool> {
    Ok(poll_many(&[fd], timeout)?[0])
}

/// Waits until at least one of `fds` is readable (or hung up) or `timeout`
/// passes (`poll(2)`); returns which are.
///
/// # Errors
/// The errno of `poll` (`EINTR` is retried).
pub fn poll_many(fds: &[BorrowedFd<'_>], timeout: Option<std::time::Duration>) -> io::Result<Vec<bool>> {
    // Nothing to wait for: without a timeout poll(2) would sleep for ever.
    if fds.is_empty() && timeout.is_none() {
        return Err(io::Error::from_raw_os_error(libc::EINVAL));
    }
    // A timeout too long to represent as an instant is no limit.
    let deadline = timeout.and_then(|t| std::time::Instant::now().checked_add(t));
    let mut p: Vec<libc::pollfd> =
        fds.iter().map(|fd| libc::pollfd { fd: fd.as_raw_fd(), events: libc::POLLIN, revents: 0 }).collect();
    loop {
        let ms = match deadline {
            None => -1,
            Some(d) => {
                d.saturating_duration_since(std::time::Instant::now()).as_millis().min(i32::MAX as u128) as c_int
            }
        };
        // SAFETY: `p` is a valid array of `p.len()` pollfds, each an fd
        // borrowed (open) for the call.
        let rc = unsafe { libc::poll(p.as_mut_ptr(), p.len() as libc::nfds_t, ms) };
        if rc >= 0 {
            return Ok(p.iter().map(|x| x.revents != 0).collect());
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

/// Sets or clears `O_NONBLOCK` on `fd`.
///
/// # Errors
/// The errno of `fcntl`.
pub fn set_nonblocking(fd: BorrowedFd<'_>, nonblocking: bool) -> io::Result<()> {
    let fd = fd.as_raw_fd();
    // SAFETY: fcntl on an fd borrowed (open) for the call; failure is
    // reported by errno.
    let fl = unsafe { libc::fcntl(fd, libc::F_GETFL) };
    if fl < 0 {
        return Err(io::Error::last_os_error());
    }
    let nfl = if nonblocking { fl | libc::O_NONBLOCK } else { fl & !libc::O_NONBLOCK };
    // SAFETY: as above.
    if unsafe { libc::fcntl(fd, libc::F_SETFL, nfl) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}
