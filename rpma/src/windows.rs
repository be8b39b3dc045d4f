//! The memory windows of one protection domain, told of the invalidations
//! the device reports. A successful receive completion that the device
//! marks `IBV_WC_WITH_INV` is the device's word that the window with that
//! rkey no longer reaches its region; the completion queues of a peer's
//! connections tell the peer's [`Windows`] as they poll such a completion,
//! and the window's binding ends there. Nothing the user hands in can end a
//! binding: a [`Completion`](crate::Completion) is plain data anyone can
//! build or copy, so it is never taken as evidence.

use crate::error::{Error, Result};
use std::sync::{Arc, Weak};
// loom's mutex under `--cfg loom`, for the window model in `mw`.
#[cfg(loom)]
use loom::sync::Mutex;
#[cfg(not(loom))]
use std::sync::Mutex;

/// A window that may hold the binding an invalidation names.
pub(crate) trait Invalidate: Send + Sync {
    /// The device invalidated `rkey`: ends the binding if it is this
    /// window's; whether it was.
    fn invalidated(&self, rkey: u32) -> bool;
}

/// The windows of one protection domain (a [`Peer`](crate::Peer)).
#[derive(Default)]
pub(crate) struct Windows(Mutex<Vec<Weak<dyn Invalidate>>>);

impl Windows {
    /// Tracks `w` (dropped windows' entries are cleared on the way).
    ///
    /// # Errors
    /// [`Error::NoMem`] when the list cannot grow.
    pub(crate) fn add(&self, w: Arc<dyn Invalidate>) -> Result<()> {
        let mut v = self.0.lock().unwrap_or_else(|p| p.into_inner());
        v.retain(|x| x.strong_count() > 0);
        v.try_reserve(1).map_err(|_| Error::NoMem("cannot track another memory window".into()))?;
        v.push(Arc::downgrade(&w));
        Ok(())
    }

    /// The device reported rkey `rkey` invalidated by a received
    /// send-with-invalidate on a QP of this protection domain: the window
    /// bound with that rkey no longer reaches its region.
    #[cold]
    #[inline(never)]
    pub(crate) fn invalidated(&self, rkey: u32) {
        let v = self.0.lock().unwrap_or_else(|p| p.into_inner());
        for w in v.iter().filter_map(Weak::upgrade) {
            if w.invalidated(rkey) {
                return;
            }
        }
    }
}
