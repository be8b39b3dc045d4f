//! Shared receive queue.

use crate::ffi;
use crate::pd::Pd;
use crate::{from_errno_ret, last_error};
use std::io;
use std::sync::Arc;

struct SrqInner {
    srq: *mut ffi::ibv_srq,
    /// The provider's `post_srq_recv`, resolved once.
    post_recv: ffi::PostSrqRecvFn,
    /// The receives the provider granted (at least those asked for).
    max_wr: u32,
    _pd: Pd,
}

// SAFETY: ibv_srq is usable from any thread; only Drop destroys it.
unsafe impl Send for SrqInner {}
// SAFETY: posting to an SRQ is thread-safe in libibverbs.
unsafe impl Sync for SrqInner {}

impl Drop for SrqInner {
    fn drop(&mut self) {
        // SAFETY: live SRQ destroyed once; QPs using it hold an Arc, so none is left.
        let rc = unsafe { ffi::ibv_destroy_srq(self.srq) };
        if let Err(e) = from_errno_ret(rc, "ibv_destroy_srq") {
            crate::log_hook::sys_log!(Error, "ibv_destroy_srq: {e}");
        }
    }
}

/// A shared receive queue (`ibv_create_srq`), shared by reference counting.
#[derive(Clone)]
pub struct Srq {
    inner: Arc<SrqInner>,
}

impl Srq {
    /// Creates an SRQ of `max_wr` receives with `max_sge` SGEs each (limit 0).
    ///
    /// # Errors
    /// The errno of `ibv_create_srq` (`EINVAL` over the device limits).
    pub fn new(pd: &Pd, max_wr: u32, max_sge: u32) -> io::Result<Srq> {
        // SAFETY: plain data, all-zero is valid.
        let mut attr: ffi::ibv_srq_init_attr = unsafe { std::mem::zeroed() };
        attr.attr.max_wr = max_wr;
        attr.attr.max_sge = max_sge;
        // SAFETY: live PD, valid attributes.
        let srq = unsafe { ffi::ibv_create_srq(pd.as_ptr(), &mut attr) };
        if srq.is_null() {
            return Err(last_error("ibv_create_srq"));
        }
        // What the queue holds: rxe writes back the size asked for, and
        // reports the size it made (rounded up) only when queried.
        // SAFETY: plain data, all-zero is valid.
        let mut now: ffi::ibv_srq_attr = unsafe { std::mem::zeroed() };
        // SAFETY: live SRQ (just created), valid out-pointer.
        let queried = unsafe { ffi::ibv_query_srq(srq, &mut now) } == 0;
        let held = attr.attr.max_wr.max(if queried { now.max_wr } else { 0 });
        Ok(Srq {
            inner: Arc::new(SrqInner {
                srq,
                // SAFETY: `srq` is live (just created).
                post_recv: unsafe { ffi::post_srq_recv_fn(srq) },
                max_wr: held.max(max_wr),
                _pd: pd.clone(),
            }),
        })
    }

    /// How many receives the SRQ holds: what the provider granted, at
    /// least what was asked for (rxe rounds a queue up).
    pub fn max_wr(&self) -> u32 {
        self.inner.max_wr
    }

    /// Destroys the SRQ now (`ibv_destroy_srq`), reporting failure. It must
    /// be the last handle: queue pairs using the SRQ hold one each.
    ///
    /// # Errors
    /// `EBUSY` while other handles (queue pairs) use it; the errno of
    /// `ibv_destroy_srq`. Either way the SRQ is handed back, still alive:
    /// the device may still write into receives posted to it.
    pub fn destroy(self) -> Result<(), (Srq, io::Error)> {
        let inner = match Arc::try_unwrap(self.inner) {
            Ok(inner) => inner,
            Err(inner) => return Err((Srq { inner }, io::Error::from_raw_os_error(libc::EBUSY))),
        };
        if crate::fault::take(crate::fault::Teardown::DestroySrq) {
            return Err((Srq { inner: Arc::new(inner) }, crate::fault::injected("ibv_destroy_srq")));
        }
        // SAFETY: live SRQ, no other handle, destroyed at most once (Drop is
        // skipped on success).
        let rc = unsafe { ffi::ibv_destroy_srq(inner.srq) };
        match from_errno_ret(rc, "ibv_destroy_srq") {
            Ok(()) => {
                crate::drop_parent_only(inner, |i| &i._pd);
                Ok(())
            }
            Err(e) => Err((Srq { inner: Arc::new(inner) }, e)),
        }
    }

    pub(crate) fn as_ptr(&self) -> *mut ffi::ibv_srq {
        self.inner.srq
    }

    /// `ibv_post_srq_recv` through the provider's entry point resolved when
    /// the SRQ was created.
    ///
    /// # Safety
    /// `wr` is a valid chain of requests whose memory stays as
    /// `ibv_post_srq_recv` requires; `bad` is valid for writes.
    #[inline(always)]
    pub(crate) unsafe fn post_recv_raw(
        &self,
        wr: *mut ffi::ibv_recv_wr,
        bad: *mut *mut ffi::ibv_recv_wr,
    ) -> std::os::raw::c_int {
        // SAFETY: live SRQ; the rest per the function contract.
        unsafe { (self.inner.post_recv)(self.inner.srq, wr, bad) }
    }
}

impl std::fmt::Debug for Srq {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Srq").finish_non_exhaustive()
    }
}
