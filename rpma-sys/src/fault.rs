//! Teardown failures on demand, for tests (cargo feature `fault-injection`).
//!
//! A verbs destroy, deregister or deallocate call can fail, and then the
//! device may still reach the memory the object covers. Tests prove that the
//! layers above leak such memory instead of freeing it by arming a failure
//! here: the next call of that kind on this thread fails with `EBUSY`
//! without calling the verb, so the object really stays alive, as after a
//! real failure. Without the feature nothing can be armed and the check
//! compiles to `false`.

use std::io;

/// A teardown verb whose failure can be injected.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Teardown {
    /// `ibv_dereg_mr`.
    DeregMr,
    /// `ibv_dealloc_mw`.
    DeallocMw,
    /// `ibv_destroy_qp` (also for a QP made on a CM ID).
    DestroyQp,
    /// `ibv_destroy_srq`.
    DestroySrq,
}

#[cfg(feature = "fault-injection")]
thread_local! {
    /// Armed failures per kind, indexed by `Teardown as usize`.
    static ARMED: std::cell::Cell<[u8; 4]> = const { std::cell::Cell::new([0; 4]) };
}

/// Makes the next `t` on this thread fail with `EBUSY`; called twice, the
/// next two (feature `fault-injection` only).
#[cfg(feature = "fault-injection")]
pub fn fail_next(t: Teardown) {
    ARMED.with(|a| {
        let mut v = a.get();
        v[t as usize] = v[t as usize].saturating_add(1);
        a.set(v);
    });
}

/// Whether a failure of `t` is armed on this thread; uses it up.
#[inline]
pub(crate) fn take(t: Teardown) -> bool {
    #[cfg(feature = "fault-injection")]
    {
        ARMED.with(|a| {
            let mut v = a.get();
            let armed = v[t as usize] > 0;
            if armed {
                v[t as usize] -= 1;
                a.set(v);
            }
            armed
        })
    }
    #[cfg(not(feature = "fault-injection"))]
    {
        let _ = t;
        false
    }
}

/// The error an injected failure reports (`EBUSY`), logged as injected.
pub(crate) fn injected(op: &str) -> io::Error {
    log::warn!("{op}: injected failure (fault-injection)");
    io::Error::from_raw_os_error(libc::EBUSY)
}
