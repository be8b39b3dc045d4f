//! The verbs boundary of `rpma`: owned libibverbs and librdmacm handles over
//! the [`rdma_sys`] bindings, and the few shims `rdma-sys` 0.3 lacks.
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

pub mod cm;
pub mod cq;
pub mod device;
pub mod mmap;
pub mod mr;
pub mod mw;
pub mod pd;
pub mod qp;
mod shim;
pub mod srq;

pub use rdma_sys as ffi;

use std::io;
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

/// For verbs that return 0 or an errno value (`ibv_dealloc_pd`, `ibv_dereg_mr`, ...).
pub(crate) fn from_errno_ret(rc: c_int, op: &str) -> io::Result<()> {
    match rc {
        0 => Ok(()),
        e if e > 0 => Err(io::Error::from_raw_os_error(e)),
        e if e < 0 && e != -1 => Err(io::Error::from_raw_os_error(-e)),
        _ => Err(last_error(op)),
    }
}

/// For calls that return -1 and set errno (`rdma_*`, `ibv_get_cq_event`).
pub(crate) fn from_minus1_ret(rc: c_int, op: &str) -> io::Result<()> {
    if rc == 0 {
        Ok(())
    } else {
        Err(last_error(op))
    }
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
