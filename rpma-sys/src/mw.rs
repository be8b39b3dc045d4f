//! Memory window.

use crate::ffi;
use crate::pd::Pd;
use crate::{from_errno_ret, last_error};
use std::io;

/// Type of a memory window.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MwType {
    /// Type 1: bound with `ibv_bind_mw` on a QP, shared by all QPs of the PD.
    Type1,
    /// Type 2: bound by a posted bind work request, tied to one QP.
    Type2,
}

/// A memory window (`ibv_alloc_mw`), deallocated on drop.
pub struct Mw {
    mw: *mut ffi::ibv_mw,
    _pd: Pd,
}

// SAFETY: ibv_mw is usable from any thread; only Drop destroys it.
unsafe impl Send for Mw {}
// SAFETY: accessors only read immutable fields.
unsafe impl Sync for Mw {}

impl Mw {
    /// Allocates a window of type `ty` on `pd`.
    ///
    /// # Errors
    /// `EOPNOTSUPP` when the provider has no memory windows; the errno of
    /// `ibv_alloc_mw` otherwise.
    pub fn alloc(pd: &Pd, ty: MwType) -> io::Result<Mw> {
        let t = match ty {
            MwType::Type1 => ffi::ibv_mw_type::IBV_MW_TYPE_1,
            MwType::Type2 => ffi::ibv_mw_type::IBV_MW_TYPE_2,
        };
        // SAFETY: live PD; the shim checks the provider op exists.
        let mw = unsafe { ffi::ibv_alloc_mw(pd.as_ptr(), t) };
        if mw.is_null() {
            return Err(last_error("ibv_alloc_mw"));
        }
        Ok(Mw { mw, _pd: pd.clone() })
    }

    /// The window's current remote key.
    pub fn rkey(&self) -> u32 {
        // SAFETY: live MW.
        unsafe { (*self.mw).rkey }
    }

    /// The window's type.
    pub fn mw_type(&self) -> MwType {
        // SAFETY: live MW.
        if unsafe { (*self.mw).type_ } == ffi::ibv_mw_type::IBV_MW_TYPE_1 {
            MwType::Type1
        } else {
            MwType::Type2
        }
    }

    pub(crate) fn as_ptr(&self) -> *mut ffi::ibv_mw {
        self.mw
    }
}

impl Mw {
    /// Deallocates the window now (`ibv_dealloc_mw`), reporting failure; on
    /// failure the window is handed back, still allocated (and possibly
    /// bound: the region under it stays reachable).
    ///
    /// # Errors
    /// The errno of `ibv_dealloc_mw`, with the untouched window.
    pub fn dealloc(self) -> Result<(), (Mw, io::Error)> {
        if crate::fault::take(crate::fault::Teardown::DeallocMw) {
            return Err((self, crate::fault::injected("ibv_dealloc_mw")));
        }
        // SAFETY: live MW, deallocated at most once (Drop is skipped on success).
        let rc = unsafe { ffi::ibv_dealloc_mw(self.mw) };
        match from_errno_ret(rc, "ibv_dealloc_mw") {
            Ok(()) => {
                crate::drop_parent_only(self, |m| &m._pd);
                Ok(())
            }
            Err(e) => Err((self, e)),
        }
    }
}

/// Dropping deallocates and can only log a failure: owners of a region under
/// a bound window call [`Mw::dealloc`] and keep the region when it fails.
impl Drop for Mw {
    fn drop(&mut self) {
        // SAFETY: live MW, deallocated once; rdma-sys's helper calls the
        // provider's dealloc op, which every provider with alloc_mw has.
        let rc = unsafe { ffi::ibv_dealloc_mw(self.mw) };
        if let Err(e) = from_errno_ret(rc, "ibv_dealloc_mw") {
            crate::log_hook::sys_log!(Error, "ibv_dealloc_mw: {e}");
        }
    }
}

impl std::fmt::Debug for Mw {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Mw").field("type", &self.mw_type()).field("rkey", &self.rkey()).finish()
    }
}
