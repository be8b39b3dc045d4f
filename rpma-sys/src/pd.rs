//! Protection domain.

use crate::device::Context;
use crate::ffi;
use crate::{from_errno_ret, last_error};
use std::io;
use std::sync::Arc;

struct PdInner {
    pd: *mut ffi::ibv_pd,
    ctx: Context,
}

// SAFETY: ibv_pd may be used from any thread; it is only freed in Drop.
unsafe impl Send for PdInner {}
// SAFETY: verbs calls taking a PD are thread-safe.
unsafe impl Sync for PdInner {}

impl Drop for PdInner {
    fn drop(&mut self) {
        // SAFETY: allocated by ibv_alloc_pd, freed once; children hold Arcs.
        let rc = unsafe { ffi::ibv_dealloc_pd(self.pd) };
        if let Err(e) = from_errno_ret(rc, "ibv_dealloc_pd") {
            crate::log_hook::sys_log!(Error, "ibv_dealloc_pd: {e}");
        }
    }
}

/// A protection domain (`ibv_alloc_pd`), shared by reference counting.
#[derive(Clone)]
pub struct Pd {
    inner: Arc<PdInner>,
}

impl Pd {
    /// Allocates a protection domain on `ctx`.
    ///
    /// # Errors
    /// The errno of `ibv_alloc_pd` (`ENOMEM` when out of resources).
    pub fn alloc(ctx: &Context) -> io::Result<Pd> {
        // SAFETY: live context.
        let pd = unsafe { ffi::ibv_alloc_pd(ctx.as_ptr()) };
        if pd.is_null() {
            return Err(last_error("ibv_alloc_pd"));
        }
        Ok(Pd { inner: Arc::new(PdInner { pd, ctx: ctx.clone() }) })
    }

    /// The device context of this PD.
    pub fn context(&self) -> &Context {
        &self.inner.ctx
    }

    /// Whether two handles refer to the same PD.
    pub fn same_as(&self, other: &Pd) -> bool {
        self.inner.pd == other.inner.pd
    }

    pub(crate) fn as_ptr(&self) -> *mut ffi::ibv_pd {
        self.inner.pd
    }
}

impl std::fmt::Debug for Pd {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pd").field("context", self.context()).finish()
    }
}
